"""Connecting to the wrong place says what to do (issue 17 and 20): a plain tcp:// client
at a TLS listener, tls+tcp:// at a plain one, a name that does not resolve, a worker-only
node, and one address for workers and clients, each through goblin.connect and a real
goblin-node process."""
import os
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import goblin

from goblin_tools import NODE, WORKER, free_port, needs  # noqa: E402  (tests/python is on sys.path)

pytestmark = needs(NODE, WORKER)


def wait_listening(port, proc, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, "the node exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the node never listened")


@pytest.fixture
def nodes():
    procs = []

    def start(*args, port):
        p = subprocess.Popen([NODE, *args], stderr=subprocess.DEVNULL)
        procs.append(p)
        wait_listening(port, p)
        return p
    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=60)


def test_plain_and_tls_mixed_up(nodes, tmp_path):
    d = str(tmp_path / "ident")
    r = subprocess.run([NODE, "init", d], capture_output=True, text=True, timeout=60)
    fp = [ln.split()[-1] for ln in r.stdout.splitlines() if "fingerprint" in ln][0]
    tls_port, plain_port = free_port(), free_port()
    nodes("--listen", f"tls+tcp://127.0.0.1:{tls_port}", "--cert", f"{d}/cert.pem",
          "--key", f"{d}/key.pem", "--open", port=tls_port)
    nodes("--listen", f"tcp://127.0.0.1:{plain_port}", "--open", port=plain_port)
    with pytest.raises(goblin.GoblinError) as e:
        goblin.connect(f"tcp://127.0.0.1:{tls_port}", connect_timeout=3600)
    assert f"connect to tls+tcp://127.0.0.1:{tls_port}" in str(e.value), str(e.value)
    with pytest.raises(goblin.GoblinError) as e:
        goblin.connect(f"tls+tcp://127.0.0.1:{plain_port}", fingerprint=fp, connect_timeout=3600)
    assert "does not speak TLS" in str(e.value) and f"tcp://127.0.0.1:{plain_port}" in str(e.value)
    # and the right scheme works
    with goblin.connect(f"tls+tcp://127.0.0.1:{tls_port}", fingerprint=fp) as g:
        assert g.stats()["workers_connected"] == 0


def test_a_name_that_does_not_resolve():
    with pytest.raises(goblin.GoblinError) as e:
        goblin.connect("tcp://no-such-host.invalid:7700", connect_timeout=3600)
    assert "does not resolve" in str(e.value) and "no-such-host.invalid" in str(e.value)


def test_a_worker_only_node_says_so(nodes):
    port = free_port()
    nodes("--listen", f"tcp://127.0.0.1:{port}", port=port)
    with pytest.raises(goblin.GoblinError) as e:
        goblin.connect(f"tcp://127.0.0.1:{port}", connect_timeout=3600)
    assert "serves workers only" in str(e.value), str(e.value)


def test_one_address_for_workers_and_clients(nodes, tmp_path):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    nodes("--listen", url, "--open", port=port)
    w = subprocess.Popen([WORKER, "--connect", url, "--threads", "1", "--config-dir",
                          str(tmp_path / "w")], stderr=subprocess.DEVNULL)
    try:
        with goblin.connect(url) as g:
            t0 = time.time()
            while g.stats()["workers_connected"] < 1:
                assert time.time() - t0 < 60, "the worker never joined"
                time.sleep(0.05)
            rng = np.random.default_rng(3)
            a, b = rng.standard_normal((70, 40)), rng.standard_normal((40, 50))
            c = g.matmul(a, b)
            ref = a @ b
            bound = 40 * np.finfo(np.float64).eps * (np.abs(a) @ np.abs(b))
            assert np.all(np.abs(c - ref) <= bound)
    finally:
        w.terminate()
        w.wait(timeout=60)
