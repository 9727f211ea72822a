"""The remote matmul path as a user sees it (issue 21): goblin.connect to a real goblin-node
process with goblin-worker processes, requests streamed in parts, the result written
straight into the caller's NumPy array. References are NumPy products in f64; the
tolerance is the matmul contract, gamma_k * (|A| |B|) elementwise."""
import os
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import goblin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(os.environ.get("GOBLIN_BUILD", os.path.join(ROOT, "build")), "tools")
NODE = os.path.join(TOOLS, "goblin-node")
WORKER = os.path.join(TOOLS, "goblin-worker")

pytestmark = pytest.mark.skipif(not (os.path.exists(NODE) and os.path.exists(WORKER)),
                                reason=f"goblin-node/goblin-worker not built in {TOOLS}")


def contract_ok(c, a, b):
    k = a.shape[1]
    u = np.finfo(a.dtype).eps / 2
    gamma = k * u / (1 - k * u)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = gamma * (np.abs(a64) @ np.abs(b64)) + np.finfo(a.dtype).tiny
    return bool(np.all(np.abs(c.astype(np.float64) - a64 @ b64) <= bound))


@pytest.fixture(scope="module")
def grid():
    tmp = tempfile.mkdtemp(prefix="goblin-client-path-")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, BLIS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([NODE, "--listen", url, "--open", "--data-dir", tmp], stderr=subprocess.DEVNULL)]
    g = None
    try:
        for i in range(2):
            procs.append(subprocess.Popen([WORKER, "--connect", url, "--threads", "1", "--memory", "512M",
                                           "--config-dir", os.path.join(tmp, f"w{i}")], env=env,
                                          stderr=subprocess.DEVNULL))
        t0 = time.time()
        while g is None:
            try:
                g = goblin.connect(url, connect_timeout=2.0)
            except goblin.GoblinError:
                assert time.time() - t0 < 60, "the node never answered"
                time.sleep(0.2)
        while g.stats()["workers_connected"] < 2:
            assert time.time() - t0 < 60, "the workers did not connect"
            time.sleep(0.1)
        yield g
    finally:
        if g is not None:
            g.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_square_streamed_into_numpy(grid, dtype):
    # 701 x 1203 by 1203 x 389: several parts each way, odd element counts (the tensors
    # end in padding), no dimension a multiple of a tile; min_tasks cuts many tiles.
    rng = np.random.default_rng(7)
    a = (rng.random((701, 1203)) - 0.5).astype(dtype)
    b = (rng.random((1203, 389)) - 0.5).astype(dtype)
    c = grid.matmul(a, b, progress=False, min_tasks=9)
    assert c.shape == (701, 389) and c.dtype == dtype
    assert contract_ok(c, a, b)
    # into the caller's array, also a strided view of a larger one (the gaps untouched)
    out = np.full((701, 389), np.nan, dtype)
    assert grid.matmul(a, b, out=out, progress=False) is out
    assert contract_ok(out, a, b)
    big = np.full((701, 2 * 389), -7, dtype)
    view = big[:, ::2]
    assert grid.matmul(a, b, out=view, progress=False) is view
    assert contract_ok(view, a, b)
    assert np.all(big[:, 1::2] == -7)


def test_strided_operands_and_grid_usable_after_error(grid):
    rng = np.random.default_rng(8)
    a = (rng.random((900, 1500)) - 0.5).astype(np.float32)[:, ::2]  # strided: packed while sending
    b = (rng.random((750, 333)) - 0.5).astype(np.float32)
    assert contract_ok(grid.matmul(a, b, progress=False), a, b)
    with pytest.raises(goblin.GoblinError):
        grid.matmul(a, b[:700], progress=False)
    c = grid.matmul(b.T.copy(), b, progress=False)
    assert contract_ok(c, b.T.copy(), b)


def test_request_of_many_windows(grid):
    # 2304 x 2304 f64 operands: an 81 MiB request in 1 MiB parts, so several parts ask
    # for their OK (every 16th) while the NOACK parts between check for a refusal; an OK
    # read early there must count as that window's, not as a protocol error.
    rng = np.random.default_rng(9)
    a = rng.random((2304, 2304)) - 0.5
    b = rng.random((2304, 2304)) - 0.5
    for _ in range(2):
        c = grid.matmul(a, b, progress=False)
        assert contract_ok(c, a, b)
