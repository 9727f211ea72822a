#!/usr/bin/env bash
# Set up, build and run every test of GPU Goblin:
#   1. the Criterion unit tests in build/ (release-like build),
#   2. the same tests under AddressSanitizer + UBSan (build-asan/, leaks on),
#   3. the Python tests (pytest, ctypes over build/libgoblin/libgoblin.so),
#   and, when asked (GOBLIN_TEST_TSAN=1), the runtime's tests under ThreadSanitizer
#   in build-tsan/ (their run alone takes about 3 minutes on 2 cores, plus a build
#   of its own, so not by default).
# Every stage runs even if an earlier one failed; the exit status is non-zero
# if any failed, and the last line sums the tests of all stages.
#
#   bash scripts/test.sh                  # everything
#   GOBLIN_TEST_ASAN=0 bash scripts/test.sh   # skip the sanitizer stage
#   GOBLIN_TEST_TSAN=1 bash scripts/test.sh   # add the ThreadSanitizer stage
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

log() { printf '\n[test] %s\n' "$*"; }
start=$(date +%s)
asan=${GOBLIN_TEST_ASAN:-1}
tsan=${GOBLIN_TEST_TSAN:-0}
jobs=${GOBLIN_JOBS:-$(nproc 2>/dev/null || echo 2)}
# Test binaries at once: one per core. Two per core saved ~30 s of the unit stage but
# made a rare hang in test_hub_relay (nng_close of a node's hub control socket,
# goblin__node_hub_stop) likely enough to hit a fresh-clone run; GOBLIN_TEST_PROCS
# sets it.
test_procs=${GOBLIN_TEST_PROCS:-$jobs}

log "setup"
if ! GOBLIN_SETUP_ASAN="$asan" GOBLIN_SETUP_TSAN="$tsan" bash scripts/setup.sh; then
  echo "[test] setup failed" >&2
  echo "Summary: 0 passed, 1 failed (setup)"
  exit 1
fi
py=${PYTHON:-python3}
export PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

# numpy (OpenBLAS) and libgoblin (BLIS/OpenMP) in one process would
# oversubscribe the cores; BLIS does the work here.
export OPENBLAS_NUM_THREADS=1
export OMP_WAIT_POLICY=passive

stages=()
rc_all=0
run_stage() { # name, command...
  local name=$1; shift
  local t0=$(date +%s) rc
  "$@"; rc=$?
  stages+=("$name|$rc|$(( $(date +%s) - t0 ))")
  [ "$rc" = 0 ] || rc_all=1
}

# Stale logs from an earlier run must not be counted if a build fails now.
rm -f build/meson-logs/testlog.json build-asan/meson-logs/testlog.json build-tsan/meson-logs/testlog.json

log "unit tests (build/)"
run_stage unit meson test -C build --print-errorlogs --num-processes "$test_procs"

if [ "$asan" = 1 ]; then
  log "unit tests under ASan + UBSan (build-asan/)"
  run_stage asan env ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}" \
    meson test -C build-asan --print-errorlogs --num-processes "$test_procs" --timeout-multiplier 3
fi

if [ "$tsan" = 1 ]; then
  # The runtime's threads: node, workers, gateway, client, trainer. halt_on_error: a
  # report ends the test (Criterion's children _exit, so TSan's exit code is lost).
  # OMP_THREAD_LIMIT=1: libgomp is not instrumented, so TSan cannot see the
  # synchronisation of OpenMP regions (it reported the BLIS kernels' parallel_for
  # writes against the caller's later reads); regions run on the calling thread.
  log "runtime tests under ThreadSanitizer (build-tsan/)"
  run_stage tsan env TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}" \
    OMP_THREAD_LIMIT=1 \
    meson test -C build-tsan --print-errorlogs --num-processes "$jobs" --timeout-multiplier 4 \
    test_node test_worker test_client_wire test_graph_job test_train test_tls test_wire
fi

log "python tests (pytest tests/python)"
junit=$(mktemp /tmp/goblin-pytest-XXXXXX.xml)
# pytest-xdist: one process per core, a file's tests together in one process (their
# module-scoped grids and servers are made once). 425 s -> 235 s on 2 cores.
xdist=()
"$py" -c 'import xdist' 2>/dev/null && xdist=(-n "$jobs" --dist loadfile)
pytest_stage() {
  if ! ls tests/python/test_*.py >/dev/null 2>&1; then
    echo "[test] no python tests yet"
    return 0
  fi
  GOBLIN_LIB="$top/build/libgoblin/libgoblin.so" PYTHONPATH="$top/tests/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m pytest tests/python -q -p no:cacheprovider --junitxml="$junit" "${xdist[@]}"
  local rc=$?
  # 5 = nothing collected: not a failure of ours, and the counts say so.
  [ "$rc" = 5 ] && return 0
  return "$rc"
}
run_stage pytest pytest_stage

# --- summary ----------------------------------------------------------------
log "summary"
"$py" - "$junit" "$(( $(date +%s) - start ))" "${stages[@]}" <<'PY'
import json, os, re, sys
import xml.etree.ElementTree as ET

junit, elapsed, stages = sys.argv[1], sys.argv[2], sys.argv[3:]
tot = {"passed": 0, "failed": 0, "skipped": 0}

def criterion_counts(logdir):
    """Per-test counts from Criterion's synthesis lines in meson's test log;
    a binary that died before printing one counts as one failure."""
    p = os.path.join(logdir, "meson-logs", "testlog.json")
    c = {"passed": 0, "failed": 0, "skipped": 0}
    if not os.path.exists(p):
        return c
    for line in open(p):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        out = (r.get("stdout") or "") + (r.get("stderr") or "")
        m = re.findall(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)",
                       re.sub(r"\x1b\[[0-9;]*m", "", out))
        ok = r.get("result") in ("OK", "EXPECTEDFAIL")
        skip = r.get("result") == "SKIP"
        if m:
            tested, passing, failing, crashing = map(int, m[-1])
            c["passed"] += passing
            c["failed"] += failing + crashing
            c["skipped"] += max(0, tested - passing - failing - crashing)
            if not ok and not skip and failing + crashing == 0:
                c["failed"] += 1  # e.g. sanitizer report or leak after the run
        elif skip:
            c["skipped"] += 1
        else:
            c["passed" if ok else "failed"] += 1
    return c

def pytest_counts(path):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    try:
        root = ET.parse(path).getroot()
    except Exception:
        return c
    for ts in root.iter("testsuite"):
        n = int(ts.get("tests", 0)); f = int(ts.get("failures", 0)) + int(ts.get("errors", 0))
        s = int(ts.get("skipped", 0))
        c["failed"] += f; c["skipped"] += s; c["passed"] += n - f - s
    return c

for st in stages:
    name, rc, secs = st.split("|")
    if name == "unit":
        c = criterion_counts("build")
    elif name == "asan":
        c = criterion_counts("build-asan")
    elif name == "tsan":
        c = criterion_counts("build-tsan")
    else:
        c = pytest_counts(junit)
    if rc != "0" and c["failed"] == 0:
        c["failed"] = 1  # the stage failed without a test to blame (build error, crash)
    for k in tot:
        tot[k] += c[k]
    status = "ok" if rc == "0" else "FAILED"
    print(f"  {name:7s} {status:6s} {c['passed']:5d} passed {c['failed']:4d} failed "
          f"{c['skipped']:4d} skipped  ({secs} s)")
print(f"  total {elapsed} s")
print(f"Summary: {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped")
PY
rm -f "$junit"
exit "$rc_all"
