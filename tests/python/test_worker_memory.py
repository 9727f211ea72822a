"""A worker stays within the memory it is given (issue 20): `goblin-worker --memory M`
offers the node tasks of (M - M/4) / 3 bytes (a quarter of M for the inputs kept for
reuse; two tasks in flight and a result being sent), as the node measures a task (every
node's output held at once). A graph job cut to that size from a real node process
grows the worker's peak RSS by at most M plus the constant of docs/runtime.md ("A
worker's memory": kernels' packing buffers, threads, the network library), and the
result is NumPy's."""
import os
import socket
import subprocess
import time

import numpy as np
import pytest

import goblin

from goblin_tools import NODE, WORKER, free_port, needs  # noqa: E402  (tests/python is on sys.path)

pytestmark = needs(NODE, WORKER)

MIB = 1 << 20
CONSTANT = 16 * MIB  # docs/runtime.md, "A worker's memory"


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def wait_for(cond, what, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start(memory):
    """A goblin-node (open, loopback) and one goblin-worker --memory @p memory."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    node = subprocess.Popen([NODE, "--listen", url, "--open"], stderr=subprocess.DEVNULL)

    def listening():
        assert node.poll() is None, "the node exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    try:
        wait_for(listening, "the node to listen")
    except BaseException:
        node.terminate()
        node.wait(timeout=60)
        raise
    worker = subprocess.Popen([WORKER, "--connect", url, "--memory", memory, "--threads", "1"],
                              stderr=subprocess.DEVNULL)
    return url, node, worker


def product_graph():
    """x @ w1 -> tanh -> @ w2: a 4 MiB weight, per row 4 KiB in, 4 KiB twice, 1 KiB out."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4096, 1024), dtype=np.float32)
    w1 = (rng.standard_normal((1024, 1024), dtype=np.float32) / 32).astype(np.float32)
    w2 = (rng.standard_normal((1024, 256), dtype=np.float32) / 32).astype(np.float32)
    gr = goblin.Graph()
    xi = gr.input((4096, 1024), "f32")
    a = gr.input((1024, 1024), "f32")
    b = gr.input((1024, 256), "f32")
    gr.output(goblin.ops.matmul(goblin.ops.tanh(goblin.ops.matmul(xi, a)), b))
    return gr, x, w1, w2


@pytest.mark.parametrize("memory_mib", [32, 64])
def test_worker_peak_within_its_memory(memory_mib):
    url, node, worker = start(f"{memory_mib}M")
    try:
        g = goblin.connect(url)
        try:
            wait_for(lambda: g.stats()["workers_connected"] == 1, "the worker to join")
            before = status(worker.pid)["VmRSS"]
            offered = g.stats()["workers"][0]["memory_bytes"]
            assert offered == (memory_mib * MIB - memory_mib * MIB // 4) // 3
            gr, x, w1, w2 = product_graph()
            y = g.run(gr, x, w1, w2, split=["batch", "broadcast", "broadcast"], progress=False)
            want = np.tanh(x.astype(np.float64) @ w1) @ w2
            np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=0, atol=1e-3)
            tasks = g.stats()["tasks_accepted"]
            assert tasks >= 4, f"{tasks} tasks: the job was not cut to the worker's memory"
            peak = status(worker.pid)["VmHWM"]
        finally:
            g.close()
        growth = peak - before
        print(f"--memory {memory_mib}M: {tasks} tasks, peak RSS growth {growth / MIB:.1f} MiB")
        assert growth <= memory_mib * MIB + CONSTANT, \
            f"--memory {memory_mib}M: peak RSS grew by {growth / MIB:.1f} MiB"
    finally:
        for p in (worker, node):
            if p is not None:
                p.terminate()
                p.wait(timeout=60)


def test_a_job_no_task_of_fits_says_why_through_the_client():
    """Workers of 8M offer 2 MiB tasks; a graph whose 4 MiB weight goes to every task is
    refused, and the remote client is told the node's reason, not to read its log."""
    url, node, worker = start("8M")
    try:
        g = goblin.connect(url)
        try:
            wait_for(lambda: g.stats()["workers_connected"] == 1, "the worker to join")
            gr, x, w1, w2 = product_graph()
            with pytest.raises(goblin.RangeError, match=r"more than the task memory budget of 2097152") as ei:
                g.run(gr, x, w1, w2, split=["batch", "broadcast", "broadcast"], progress=False)
            assert "log" not in str(ei.value)
            assert "goblin-worker --memory" in str(ei.value), str(ei.value)  # what to do
        finally:
            g.close()
    finally:
        for p in (worker, node):
            p.terminate()
            p.wait(timeout=60)
