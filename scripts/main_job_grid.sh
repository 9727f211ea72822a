#!/bin/sh
# The main job on a real local grid: a goblin-node and two goblin-worker processes on
# loopback, one of them lying on purpose (--misbehave wrong:0.2, fault injection for
# demos), a verified N x N f32 product (default 8192) with a progress display, the
# check against a direct NumPy product, and the node's verification counters.
#
# Usage: main_job_grid.sh [N]      (GOBLIN_BUILD: build directory, default build/)
set -eu
n=${1:-8192}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GOBLIN_BUILD:-$root/build}
tools=$build/tools
for t in goblin-node goblin-worker goblin-client; do
    [ -x "$tools/$t" ] || { echo "missing $tools/$t: build first (meson setup build && ninja -C build)"; exit 1; }
done
tmp=$(mktemp -d /tmp/goblin-main-job-XXXXXX)
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

echo "== operands: two $n x $n f32 matrices (.npy, memory-mapped by the node)"
python3 - "$tmp" "$n" <<'PY'
import sys, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(2026)
for name in "ab":
    m = np.lib.format.open_memmap(f"{d}/{name}.npy", mode="w+", dtype=np.float32, shape=(n, n))
    for r in range(0, n, 1024):
        m[r:r + 1024] = rng.standard_normal((min(1024, n - r), n), dtype=np.float32)
    m.flush()
PY

echo "== grid: a node and two workers on loopback (worker 2 lies: --misbehave wrong:0.2)"
# One address for workers and clients: each says what it is when it connects.
"$tools/goblin-node" --listen "tcp://127.0.0.1:$port" \
    --open --data-dir "$tmp" --min-tasks 64 2>"$tmp/node.log" &
pids="$pids $!"
sleep 0.5
# Each worker is its own installation (its own identity key): two workers sharing a
# config directory would be one identity, and the liar's quarantine would take both.
"$tools/goblin-worker" --connect "tcp://127.0.0.1:$port" --threads 1 --config-dir "$tmp/worker1" \
    2>"$tmp/worker1.log" &
pids="$pids $!"
"$tools/goblin-worker" --connect "tcp://127.0.0.1:$port" --threads 1 --config-dir "$tmp/worker2" \
    --misbehave wrong:0.2 \
    --misbehave-seed 7 2>"$tmp/worker2.log" &
pids="$pids $!"
sleep 1

echo "== verified product C = A . B through the node (every tile checked with Freivalds)"
"$tools/goblin-client" --connect "tcp://127.0.0.1:$port" matmul "$tmp/a.npy" "$tmp/b.npy" \
    "$tmp/c.npy" --on-node --progress >"$tmp/stats.json"

echo "== check against a direct product (NumPy) and the verification counters"
python3 - "$tmp" <<'PY'
import json, sys, time
import numpy as np
d = sys.argv[1]
a, b = np.load(f"{d}/a.npy", mmap_mode="r"), np.load(f"{d}/b.npy", mmap_mode="r")
c = np.load(f"{d}/c.npy", mmap_mode="r")
st = json.load(open(f"{d}/stats.json"))
t0 = time.time()
ref = np.asarray(a) @ np.asarray(b)
direct = time.time() - t0
k = a.shape[1]
u = np.finfo(np.float32).eps / 2
gamma = k * u / (1 - k * u)
# Both products are within gamma_k |A||B| of the exact one; Cauchy-Schwarz bounds
# (|A||B|)_ij by the norms of row i of A and column j of B.
bound = 2 * gamma * np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=0))
err = np.abs(np.asarray(c, dtype=np.float64) - ref)
ok = bool(np.all(err <= bound))
print(f"grid: {st['seconds']:.1f} s; direct NumPy product: {direct:.1f} s")
print(f"max |C - direct| = {err.max():.3g}, worst ratio to the contract bound {(err / bound).max():.3g}"
      f" -> {'OK' if ok else 'MISMATCH'}")
print(f"tasks completed {st['tasks_completed']}, results accepted {st['results_accepted']}, "
      f"rejected {st['results_rejected']}, reissued {st['tasks_reissued']}, "
      f"workers quarantined {st['workers_quarantined']}")
for i, w in enumerate(st["workers"]):
    print(f"  worker session {w['session_id']}: accepted {w['accepted']}, rejected {w['rejected']}"
          f"{' (QUARANTINED: cheater caught)' if w['quarantined'] else ''}")
sys.exit(0 if ok else 1)
PY
grep -h "quarantined" "$tmp/node.log" | head -n 1 || true
