#!/usr/bin/env bash
# Set up, build, and run GPU Goblin's main job (examples/main_job.c): a 4096 x 4096
# f32 matmul, the formula a * exp(-b * x) + c, and a row sum, evaluated on the
# BLIS backend and checked against an independent double-precision computation.
# Arguments are passed to the job (try --help); exit status 0 means PASS.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
GOBLIN_SETUP_ASAN=0 bash scripts/setup.sh
exec ./build/examples/main_job "$@"
