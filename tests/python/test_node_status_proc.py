"""The lab node's status page in a real goblin-node process (--status): a file job of a
client through two goblin-worker processes, then /, /status.json and /metrics read with
urllib and compared with the node's own counters (goblin-client stats); the job's file
names never appear. A plain http address that is not loopback is refused at start.

The executables come from the build directory ($GOBLIN_BUILD, default build/).
"""
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from goblin_tools import CLIENT, NODE, WORKER, free_port, needs  # noqa: E402  (tests/python is on sys.path)

pytestmark = needs(NODE, WORKER, CLIENT)


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, dict(r.headers), r.read().decode()


def wait_for(cond, what, proc, timeout=60):
    """A wait for a loaded machine, not a timing assertion."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, f"the node exited while waiting for {what}"
        try:
            v = cond()
            if v:
                return v
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? -?[0-9.eE+-]+$')


def test_status_page_of_a_real_node(tmp_path):
    tmp = str(tmp_path)
    port, cport, sport = free_port(), free_port(), free_port()
    status = f"http://127.0.0.1:{sport}"
    node_log = open(os.path.join(tmp, "node.log"), "w")
    node = subprocess.Popen([NODE, "--listen", f"tcp://127.0.0.1:{port}", "--client-listen",
                             f"tcp://127.0.0.1:{cport}", "--open", "--data-dir", tmp,
                             "--status", status], stderr=node_log)
    workers = []
    try:
        for i in range(2):
            workers.append(subprocess.Popen(
                [WORKER, "--connect", f"tcp://127.0.0.1:{port}", "--threads", "1", "--memory", "256M",
                 "--config-dir", os.path.join(tmp, f"w{i}")], stderr=subprocess.DEVNULL))
        wait_for(lambda: json.loads(get(status + "/status.json")[2])["workers_connected"] == 2,
                 "two workers", node)
        rng = np.random.default_rng(3)
        a = rng.standard_normal((96, 80)).astype(np.float32)
        b = rng.standard_normal((80, 72)).astype(np.float32)
        pa, pb, pc = (os.path.join(tmp, f"secret-study-{x}.npy") for x in "abc")
        np.save(pa, a)
        np.save(pb, b)
        r = subprocess.run([CLIENT, "--connect", f"tcp://127.0.0.1:{cport}", "matmul", pa, pb, pc],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        c = np.load(pc)
        assert np.allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
        r = subprocess.run([CLIENT, "--connect", f"tcp://127.0.0.1:{cport}", "stats"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        stats = json.loads(r.stdout)

        code, headers, text = get(status + "/status.json")
        assert code == 200 and headers["Content-Type"] == "application/json"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "Set-Cookie" not in headers
        js = json.loads(text)
        assert js["workers_connected"] == 2 and len(js["workers"]) == 2
        done = js["counters"]["tasks_completed"]
        assert done > 0
        if "tasks_completed" in stats:
            assert done == stats["tasks_completed"]
        assert js["counters"]["results_rejected"] == 0
        assert sum(w["tasks_done"] for w in js["workers"]) == js["counters"]["results_accepted"]
        for w in js["workers"]:
            assert re.fullmatch(r"[0-9a-f]{16}", w["identity"])
            # what the worker advertises for a task: a share of its --memory
            assert w["threads"] == 1 and 0 < w["memory_bytes"] <= 256 << 20
            assert not w["quarantined"]

        _, _, metrics = get(status + "/metrics")
        names = set()
        for line in metrics.splitlines():
            if line.startswith("# TYPE "):
                names.add(line.split()[2])
            elif not line.startswith("# HELP "):
                assert SAMPLE.match(line), line
                assert line.split("{")[0].split(" ")[0] in names, line
        assert f"\ngoblin_node_tasks_completed_total {done}\n" in metrics
        assert "\ngoblin_node_workers_connected 2\n" in metrics

        _, headers, html = get(status + "/")
        assert headers["Content-Type"].startswith("text/html")
        assert "<h2>Workers (2)</h2>" in html and "<script" not in html.lower()
        # Nothing of the research: not the files' names nor the directory.
        for page in (text, metrics, html):
            assert "secret-study" not in page and tmp not in page

        req = urllib.request.Request(status + "/", data=b"x=1", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(status + "/../metrics", timeout=30)
        assert e.value.code == 404
    finally:
        for w in workers:
            w.terminate()
        node.terminate()
        node.wait(timeout=60)
        for w in workers:
            w.wait(timeout=60)
        node_log.close()


def test_plain_http_off_loopback_is_refused(tmp_path):
    r = subprocess.run([NODE, "--listen", f"tcp://127.0.0.1:{free_port()}",
                        "--status", f"http://0.0.0.0:{free_port()}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "plain http is served only on a numeric loopback address" in r.stderr
