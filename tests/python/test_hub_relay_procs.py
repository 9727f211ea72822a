"""goblin-hub's machine side as processes: `goblin-hub serve` with a machines address, a
researcher's node key made through the hub's pages (sign-in mailed to aiosmtpd, the
operator's approval), `goblin-node --hub URL --hub-key FILE --hub-fingerprint FP`, and
two `goblin-worker` processes that dial only the hub. A matmul submitted to the node
with goblin-client is checked against NumPy within the matmul contract; a node with a
wrong or revoked key is refused and exits."""
import hashlib
import json
import os
import re
import signal
import ssl
import subprocess
import time

import numpy as np
import pytest

from test_hub_web import HUB_EXE, Browser, Hub, file_request, mailbox, sign_in  # noqa: F401 (fixture)
from test_runtime_processes import NODE, WORKER, CLIENT, Grid, contract_ok, operands

pytestmark = pytest.mark.skipif(not all(os.path.exists(p) for p in (HUB_EXE, NODE, WORKER, CLIENT)),
                                reason="goblin-hub, goblin-node, goblin-worker or goblin-client not built")


def fingerprint(cert_pem):
    with open(cert_pem) as f:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()


def make_key(hub, mailbox, who):
    b = Browser(hub)
    sign_in(b, mailbox, who)
    st, _, body = file_request(b)
    assert st == 200, body
    rid = json.loads(body)["id"]
    out = hub.cli("requests", "approve", str(rid))
    assert out.returncode == 0, out.stderr
    st, acc = b.json("/account")
    st, _, body = b.post("/keys", {"label": "node", "csrf": acc["csrf"]}, headers={"Accept": "application/json"})
    assert st == 200, body
    return b, acc, json.loads(body)


def write_key(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (text + "\n").encode())
    os.close(fd)


def test_matmul_through_the_hub_processes(tmp_path, mailbox):
    hub = Hub(tmp_path, mailbox.port, "machines = tls+tcp://127.0.0.1:0\n")
    workers = []
    g = None
    try:
        line = hub.proc.stdout.readline()
        m = re.search(r"machines on port (\d+)", line)
        assert m, line
        murl = f"tls+tcp://127.0.0.1:{m.group(1)}"
        fp = fingerprint(os.path.join(hub.dir, "cert.pem"))
        b, acc, key = make_key(hub, mailbox, "lab@example.org")
        keyfile = str(tmp_path / "lab.key")
        write_key(keyfile, key["key"])
        # A wrong key: the node is refused and exits with an error.
        bad = str(tmp_path / "bad.key")
        write_key(bad, key["key"][:-1] + ("0" if key["key"][-1] != "0" else "1"))
        r = subprocess.run([NODE, "--listen", "tcp://127.0.0.1:0", "--hub", murl, "--hub-key", bad,
                            "--hub-fingerprint", fp], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "refused this node" in r.stderr, r.stderr
        # The lab node, linked with its key; two workers that know only the hub.
        g = Grid(str(tmp_path), node_args=("--hub", murl, "--hub-key", keyfile, "--hub-fingerprint", fp))
        for i in range(2):
            log = open(str(tmp_path / f"w{i}.log"), "w")
            workers.append(subprocess.Popen([WORKER, "--connect", murl, "--fingerprint", fp, "--threads", "1",
                                             "--config-dir", str(tmp_path / f"w{i}.id")], stderr=log))
        g.wait_workers(2, timeout=60)
        a, bm = operands(300, 200, 250, np.float64, 5)
        c, st = g.matmul(a, bm)
        ok, err, ratio = contract_ok(c, a, bm)
        assert ok, f"max error {err} ({ratio:.2f} of the bound)"
        s = g.stats()
        assert s["results_accepted"] > 0 and s["results_rejected"] == 0
        assert sum(1 for w in s["workers"] if w["accepted"] > 0) >= 1
        # The key revoked on the hub's page: a new node with it is refused.
        st, _, body = b.post("/keys/revoke", {"id": str(key["id"]), "csrf": acc["csrf"]},
                             headers={"Accept": "application/json"})
        assert st == 200, body
        r = subprocess.run([NODE, "--listen", "tcp://127.0.0.1:0", "--hub", murl, "--hub-key", keyfile,
                            "--hub-fingerprint", fp], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "refused this node" in r.stderr, r.stderr
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=15)
            except subprocess.TimeoutExpired:
                w.kill()
        if g:
            g.close()
        hub.stop()
    assert g.node.returncode == 0, g.node_log_text()[-2000:]
