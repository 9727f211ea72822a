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
import shutil
import signal
import ssl
import subprocess
import threading
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


def stop_all(workers, g, hub):
    """SIGTERM the worker processes (killed after 15 s), then the node and the hub."""
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
        stop_all(workers, g, hub)
    assert g.node.returncode == 0, g.node_log_text()[-2000:]


def worker_identity(log):
    """The identity a worker process logs at start (its key's fingerprint)."""
    t0 = time.time()
    while time.time() - t0 < 60:
        m = re.search(r"worker identity ([0-9a-f]{64})", open(log).read())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no identity in {log}")


def test_two_labs_share_volunteers_survive_a_kill_and_refuse_a_cheat_together(tmp_path, mailbox):
    """Hub + 2 lab nodes + 4 volunteers' workers, all processes: both labs' verified
    products run at the same time on the shared workers; a worker killed (SIGKILL) in the
    middle changes nothing in the answers; a cheating worker caught by one lab is then
    refused for every lab: restarted with the same key it is refused by the hub, and the
    other lab never admits it."""
    hub = Hub(tmp_path, mailbox.port, "machines = tls+tcp://127.0.0.1:0\n")
    procs, grids = [], []

    def worker(name, *extra):
        d = str(tmp_path / f"{name}.id")
        log = str(tmp_path / f"{name}.log")
        p = subprocess.Popen([WORKER, "--connect", murl, "--fingerprint", fp, "--threads", "1",
                              "--memory", "256M", "--config-dir", d, *extra], stderr=open(log, "w"))
        procs.append(p)
        return p, d, log

    try:
        line = hub.proc.stdout.readline()
        m = re.search(r"machines on port (\d+)", line)
        assert m, line
        murl = f"tls+tcp://127.0.0.1:{m.group(1)}"
        fp = fingerprint(os.path.join(hub.dir, "cert.pem"))
        labs = []
        for who in ("a", "b"):
            _, _, key = make_key(hub, mailbox, f"{who}@example.org")
            keyfile = str(tmp_path / f"{who}.key")
            write_key(keyfile, key["key"])
            d = tmp_path / f"lab-{who}"
            d.mkdir()
            g = Grid(str(d), node_args=("--hub", murl, "--hub-key", keyfile, "--hub-fingerprint", fp,
                                        "--lease-ms", "3000"))
            grids.append(g)
            labs.append((g, key["id"]))
        (ga, _), (gb, _) = labs
        honest = [worker(f"w{i}", "--misbehave", "slow:1", "--slow-ms", "150") for i in range(4)]
        ga.wait_workers(2, timeout=90)
        gb.wait_workers(2, timeout=90)

        # Both labs' products at once; one worker killed once both have results in.
        ops = {0: operands(700, 400, 600, np.float64, 41), 1: operands(600, 500, 700, np.float64, 43)}
        out = {}

        def run(i):
            out[i] = labs[i][0].matmul(*ops[i], name=f"lab{i}", timeout=300)

        ts = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for t in ts:
            t.start()
        t0 = time.time()
        while time.time() - t0 < 120:
            if all(g.stats()["results_accepted"] > 0 for g in (ga, gb)):
                break
            time.sleep(0.05)
        both_running = all(t.is_alive() for t in ts)
        honest[0][0].kill()
        honest[0][0].wait(timeout=30)
        for t in ts:
            t.join(timeout=320)
        assert both_running, "the kill came while both labs' jobs ran"
        for i in (0, 1):
            assert i in out, f"lab {i}'s product did not finish"
            c, st = out[i]
            ok, err, ratio = contract_ok(c, *ops[i])
            assert ok, f"lab {i}: max error {err} ({ratio:.2f} of the bound)"
        sa, sb = ga.stats(), gb.stats()
        assert sa["results_rejected"] == 0 and sb["results_rejected"] == 0, (sa, sb)
        ids_a = {w["identity"] for w in sa["workers"] if w["accepted"] > 0}
        ids_b = {w["identity"] for w in sb["workers"] if w["accepted"] > 0}
        assert ids_a and ids_b, "both labs computed on volunteers"

        # A cheater joins (the hub lends it to the lab below its share: one of the two);
        # each lab runs a product until one of them catches it.
        cheat, cdir, clog = worker("cheat", "--misbehave", "wrong:1")
        cid = worker_identity(clog)
        t0 = time.time()
        while time.time() - t0 < 90:
            if any(w["identity"] == cid for g in (ga, gb) for w in g.stats()["workers"]):
                break
            time.sleep(0.1)
        catcher = next(i for i, g in enumerate((ga, gb)) if any(w["identity"] == cid for w in g.stats()["workers"]))
        g = labs[catcher][0]
        a, bm = operands(500, 300, 400, np.float64, 47)
        c, st = g.matmul(a, bm, name="caught", timeout=300)
        ok, err, ratio = contract_ok(c, a, bm)
        assert ok, f"lab {catcher} with the cheater: max error {err}"
        caught = g.stats()
        assert caught["workers_quarantined"] == 1 and caught["results_rejected"] >= 1, caught
        # The hub ends its splice; redialing, the cheater is refused and stops.
        cheat.wait(timeout=60)
        assert cheat.returncode != 0
        text = open(clog).read()
        assert "quarantined on the network" in text, text[-2000:]
        # The catching lab's node reported it: the hub lists it, reported by that lab's key.
        t0 = time.time()
        listed = ""
        while time.time() - t0 < 60 and cid not in listed:
            listed = hub.cli("quarantines", "list").stdout
            time.sleep(0.2)
        assert cid in listed, listed
        assert f"node key {labs[catcher][1]}" in listed, listed
        # Restarted with the same key (a copy of its directory), three times: refused by
        # the hub each time, whichever lab it would be lent to; the other lab never
        # admits it.
        for k in range(3):
            d = str(tmp_path / f"again{k}.id")
            shutil.copytree(cdir, d)
            log = str(tmp_path / f"again{k}.log")
            r = subprocess.run([WORKER, "--connect", murl, "--fingerprint", fp, "--threads", "1",
                                "--memory", "256M", "--config-dir", d], stderr=open(log, "w"), timeout=120)
            text = open(log).read()
            assert r.returncode != 0 and "quarantined on the network" in text, text[-2000:]
        other = labs[1 - catcher][0].stats()
        assert not any(w["identity"] == cid for w in other["workers"]), other["workers"]
        # The honest workers still serve: the other lab's next product is right.
        a, bm = operands(300, 200, 250, np.float64, 53)
        c, _ = labs[1 - catcher][0].matmul(a, bm, name="after", timeout=300)
        assert contract_ok(c, a, bm)[0]
        # The public status page counts what the labs reported (WORK), against the labs'
        # own counters: at least what the connected workers' rows say they had accepted
        # (the killed worker and the cheater have no row any more), at most the labs'
        # totals (which also count results accepted after their worker left); the
        # cheater's rejected result.
        pub = Browser(hub)
        lo = sum(w["accepted"] for g in (ga, gb) for w in g.stats()["workers"])
        hi = sum(g.stats()["results_accepted"] for g in (ga, gb))
        t0 = time.time()
        while time.time() - t0 < 60:
            st, status = pub.json("/status")
            if status["results_accepted"] >= lo and status["results_rejected"] >= 1:
                break
            time.sleep(0.2)
        assert st == 200 and status["labs_active"] == 2 and status["workers_online"] == 3, status
        assert lo <= status["results_accepted"] <= hi and status["results_rejected"] >= 1, (
            status, lo, hi, pub.get("/metrics")[2], [g.stats() for g in (ga, gb)])
        want = status["results_accepted"]
        assert status["tasks"] >= status["results_accepted"] + status["results_rejected"], status
        assert status["workers_refused_quarantined"] >= 3 and status["tasks_per_second"] > 0, status
        st, _, metrics = pub.get("/metrics")
        assert re.search(r"^goblin_hub_labs_active 2$", metrics, re.M), metrics
        m = re.search(r"^goblin_hub_results_accepted_total (\d+)$", metrics, re.M)
        assert m and int(m.group(1)) >= want, metrics
        # The operator sees both labs' nodes and the workers, with their identities.
        op = Browser(hub)
        sign_in(op, mailbox, "op@example.org")
        st, adm = op.json("/admin")
        assert st == 200 and sorted(x["lab"] for x in adm["labs"]) == ["a@example.org", "b@example.org"], adm
        assert len(adm["workers"]) == 3 and all(len(w["identity"]) == 64 for w in adm["workers"]), adm
        assert cid not in [w["identity"] for w in adm["workers"]]
        st, _, page = op.get("/admin")
        assert "Lab nodes connected" in page and "a@example.org" in page and "Workers connected" in page
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        for g in grids:
            g.close()
        hub.stop()


def test_introduced_workers_dial_the_node_processes(tmp_path, mailbox):
    """`goblin-node --hub-direct URL`: the two worker processes, which know only the hub,
    are introduced and dial the node themselves; the product is NumPy's within the
    contract, and the workers' logs say where they went."""
    hub = Hub(tmp_path, mailbox.port, "machines = tcp://127.0.0.1:0\n")
    workers = []
    g = None
    try:
        line = hub.proc.stdout.readline()
        m = re.search(r"machines on port (\d+)", line)
        assert m, line
        murl = f"tcp://127.0.0.1:{m.group(1)}"
        b, acc, key = make_key(hub, mailbox, "lab@example.org")
        keyfile = str(tmp_path / "lab.key")
        write_key(keyfile, key["key"])
        r = subprocess.run([NODE, "--listen", "tcp://127.0.0.1:0", "--hub-direct", "tcp://127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "--hub-direct needs --hub" in r.stderr, r.stderr
        g = Grid(str(tmp_path), node_args=("--hub", murl, "--hub-key", keyfile, "--hub-direct", "{url}"))
        logs = []
        for i in range(2):
            logs.append(str(tmp_path / f"w{i}.log"))
            workers.append(subprocess.Popen([WORKER, "--connect", murl, "--threads", "1",
                                             "--config-dir", str(tmp_path / f"w{i}.id")], stderr=open(logs[i], "w")))
        g.wait_workers(2, timeout=60)
        a, bm = operands(300, 200, 250, np.float64, 7)
        c, st = g.matmul(a, bm)
        ok, err, ratio = contract_ok(c, a, bm)
        assert ok, f"max error {err} ({ratio:.2f} of the bound)"
        s = g.stats()
        assert s["results_accepted"] > 0 and s["results_rejected"] == 0
        for path in logs:
            with open(path) as f:
                text = f.read()
            assert f"the hub introduced this worker to {g.url}" in text, text[-2000:]
    finally:
        stop_all(workers, g, hub)
    assert g.node.returncode == 0, g.node_log_text()[-2000:]
