#!/usr/bin/env bash
# Build and run every benchmark, and write docs/BENCHMARKS.md.
#
# Benchmarks are the bench_<name>.c programs listed in bench/meson.build (built
# into build/bench/) and any bench/bench_*.py script. Each prints Markdown on
# stdout (its tables of figures and ratios measured in the same run) and
# progress or diagnostics on stderr. This script puts each one's stdout under a
# heading, with the machine, date and thread counts on top. Benchmarks are not
# tests: a benchmark that fails is reported in the document and the others
# still run; the exit status is non-zero only if the build fails.
#
#   bash bench/run_all.sh                  # all, with every core
#   GOBLIN_BENCH_THREADS=1 bash bench/run_all.sh
#   bash bench/run_all.sh gemm formula     # only bench_gemm and bench_formula
#
# Environment a benchmark can read: GOBLIN_BENCH_THREADS (threads to use),
# GOBLIN_LIB (path of libgoblin.so, for Python benchmarks).
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

out_md=${GOBLIN_BENCH_OUT:-docs/BENCHMARKS.md}
threads=${GOBLIN_BENCH_THREADS:-$(nproc 2>/dev/null || echo 1)}
export GOBLIN_BENCH_THREADS=$threads
export GOBLIN_LIB="$top/build/libgoblin/libgoblin.so"
# BLIS reads these when a benchmark calls it directly; numpy's OpenBLAS gets
# the same count so that side-by-side ratios compare like with like.
export BLIS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# Passive OpenMP waits keep BLIS's idle threads from spinning on the cores the C
# benchmarks measure; the Python benchmarks that time PyTorch run with the default
# policy instead (set below), since torch's many small parallel regions slow down up
# to 2x when its threads sleep after each one, and the comparison must not flatter us.
wait_policy_set=${OMP_WAIT_POLICY+x}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

GOBLIN_SETUP_ASAN=0 bash scripts/setup.sh || { echo "[bench] setup failed" >&2; exit 1; }
py=${PYTHON:-python3}
export PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

# The bench option may be off in an existing build dir: turn it on.
if [ "$(meson introspect build --buildoptions 2>/dev/null | "$py" -c \
      'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="bench"][0])' 2>/dev/null)" != "True" ]; then
  meson configure build -Dbench=true >/dev/null || { echo "[bench] cannot enable -Dbench" >&2; exit 1; }
fi
ninja -C build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null || { ninja -C build -j1; echo "[bench] build failed" >&2; exit 1; }

# The list: bench/meson.build names them; only those built (their source exists).
mapfile -t names < <(sed -n "s/^ *'\(bench_[a-z0-9_]*\)',\{0,1\}$/\1/p" bench/meson.build)
progs=()
for n in "${names[@]}"; do
  [ -x "build/bench/$n" ] && progs+=("build/bench/$n")
done
for f in bench/bench_*.py; do
  [ -e "$f" ] && progs+=("$f")
done
if [ $# -gt 0 ]; then # keep only the named ones
  keep=()
  for p in "${progs[@]}"; do
    b=$(basename "$p"); b=${b#bench_}; b=${b%.py}
    for want in "$@"; do [ "$b" = "$want" ] && keep+=("$p"); done
  done
  progs=("${keep[@]}")
fi

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "uncommitted")
ver=$(sed -n 's/^#define GOBLIN_VERSION_STRING "\(.*\)"/\1/p' include/goblin/version.h)

tmp=$(mktemp)
{
  echo "# Benchmarks"
  echo
  echo "<!-- Written by bench/run_all.sh; rerun it to refresh. Figures are from one run on the machine below. -->"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| machine | ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') cores, ${mem:-? GiB} |"
  echo "| OS | $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), kernel $(uname -r) |"
  echo "| libgoblin | $ver (commit $commit), buildtype $(meson introspect build --buildoptions 2>/dev/null | "$py" -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"][0])' 2>/dev/null || echo '?') |"
  echo "| threads | GOBLIN_BENCH_THREADS=$threads, BLIS_NUM_THREADS=$BLIS_NUM_THREADS, OMP_NUM_THREADS=$OMP_NUM_THREADS, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS; OMP_WAIT_POLICY=$OMP_WAIT_POLICY for the C programs$([ -z "$wait_policy_set" ] && echo ", the default for the Python ones (PyTorch's own setting)") |"
  echo
  echo "Ratios are measured side by side in the same run; they are the numbers to compare across machines."
} >"$tmp"

failed=0
if [ "${#progs[@]}" -eq 0 ]; then
  if [ $# -gt 0 ]; then
    printf '\nNo benchmark matched: %s.\n' "$*" >>"$tmp"
  else
    printf '\nNo benchmark is built yet (bench/meson.build lists them).\n' >>"$tmp"
  fi
fi
for p in "${progs[@]}"; do
  name=$(basename "$p"); name=${name%.py}
  echo "[bench] running $name ..." >&2
  t0=$(date +%s)
  body=$(mktemp)
  if [[ "$p" == *.py && -z "$wait_policy_set" ]]; then
    env -u OMP_WAIT_POLICY "$py" "$p" >"$body" 2> >(sed "s/^/[$name] /" >&2)
  elif [[ "$p" == *.py ]]; then
    "$py" "$p" >"$body" 2> >(sed "s/^/[$name] /" >&2)
  else
    "$p" >"$body" 2> >(sed "s/^/[$name] /" >&2)
  fi
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  {
    echo
    echo "## $name"
    echo
    cat "$body"
    echo
    if [ "$rc" = 0 ]; then echo "_(${secs} s)_"; else echo "**$name failed (exit status $rc) after ${secs} s; the output above is partial.**"; fi
  } >>"$tmp"
  rm -f "$body"
  [ "$rc" = 0 ] || failed=$((failed + 1))
done

mkdir -p "$(dirname "$out_md")"
mv "$tmp" "$out_md"
echo "[bench] wrote $out_md (${#progs[@]} benchmarks, $failed failed)" >&2
exit 0
