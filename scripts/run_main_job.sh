#!/usr/bin/env bash
# Set up, build, and run GPU Goblin's main job:
#  1. a real local grid: a goblin-node and two goblin-worker processes on
#     loopback, one of them lying on purpose (--misbehave wrong:0.2), computing a
#     verified 8192 x 8192 f32 product with progress, checked against a direct
#     product, with the verification counters (the cheater caught and quarantined);
#  2. a graph job in one process (examples/main_job.c): a 4096 x 4096 matmul, the
#     formula a * exp(-b * x) + c and a row sum on the CPU backend, checked against
#     an independent double-precision computation;
#  3. a short training run on an embedded grid (examples/train_lm.py): a small
#     character-level GPT trained with verified rounds (every task replicated on
#     two workers), the loss printed per round, then the held-out loss against the
#     unigram baseline.
#
#   bash scripts/run_main_job.sh            # both parts, N = 8192
#   GOBLIN_MAIN_N=4096 bash scripts/run_main_job.sh
# Exit status 0 means all three parts passed.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
GOBLIN_SETUP_ASAN=0 bash scripts/setup.sh
py=${PYTHON:-python3}
export PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
echo
echo "######## part 1: verified product on a local grid ########"
sh scripts/main_job_grid.sh "${GOBLIN_MAIN_N:-8192}"
echo
echo "######## part 2: a graph (matmul + formula + reduction) on the CPU backend ########"
./build/examples/main_job "$@"
echo
echo "######## part 3: training a small language model with verified rounds ########"
"$py" examples/train_lm.py --rounds "${GOBLIN_MAIN_ROUNDS:-150}"
