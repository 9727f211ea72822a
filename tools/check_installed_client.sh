#!/bin/sh
# Install the library into a temporary destdir, build examples/matmul_client.c against
# it with pkg-config only (as a user would), and, where numpy is available, run it
# against the installed goblin-node and goblin-worker on loopback.
# Usage: check_installed_client.sh SOURCE_ROOT BUILD_ROOT
set -eu
src=$1
build=$2
tmp=$(mktemp -d)
node_pid=
worker_pid=
cleanup() {
    [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null || true
    [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >/dev/null
pcdir=$(dirname "$(find "$tmp/root" -name goblin.pc | head -n 1)")
[ -f "$pcdir/goblin.pc" ] || { echo "goblin.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root"
flags=$(pkg-config --cflags --libs goblin)
echo "pkg-config: $flags"
${CC:-cc} -std=c11 -Wall -Wextra -Werror "$src/examples/matmul_client.c" $flags -o "$tmp/matmul_client"
libdir=$(dirname "$(find "$tmp/root" -name 'libgoblin.so*' | head -n 1)")
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bindir=$(dirname "$(find "$tmp/root" -name goblin-node -type f | head -n 1)")
python3 -c 'import numpy' 2>/dev/null || { echo "numpy missing: built only"; exit 0; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cred=$("$bindir/goblin-node" researcher add ci@example.org --credentials "$tmp/researchers" |
      grep -o 'gbr1_[0-9a-f_]*')
"$bindir/goblin-node" --listen "tcp://127.0.0.1:$port" --client-listen "ipc://$tmp/client.sock" \
    --credentials "$tmp/researchers" --log-level warn &
node_pid=$!
"$bindir/goblin-worker" --connect "tcp://127.0.0.1:$port" --threads 1 --log-level warn &
worker_pid=$!
python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
np.save(d + "/a.npy", rng.standard_normal((130, 70)))
np.save(d + "/b.npy", rng.standard_normal((70, 90)))
PY
"$tmp/matmul_client" "ipc://$tmp/client.sock" "$tmp/a.npy" "$tmp/b.npy" "$tmp/c.npy" --credential "$cred"
python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
a, b, c = (np.load(d + f"/{x}.npy") for x in "abc")
ref = a @ b
err = np.abs(c - ref).max()
bound = 70 * 2.3e-16 * (np.abs(a) @ np.abs(b)).max() * 4
assert c.shape == (130, 90) and c.dtype == np.float64, (c.shape, c.dtype)
assert err <= bound, (err, bound)
print(f"installed matmul_client: max error {err:.3g} (bound {bound:.3g})")
PY
