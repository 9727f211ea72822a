"""Volunteers on a real goblin-hub process: sign in, link a worker with the line the
real `goblin-worker link` prints, see the work a lab reported of it (added to the
hub's database while it serves, through libgoblin's goblin_hub_store_work_add), and
unlink it. Then the attacks through the pages: a tampered signature, another
account's statement, a statement for a code since redrawn, garbage, oversized, SQL
and HTML in the field, forms without their token, an identity linked elsewhere. The
identity is recomputed here with hashlib from the key the statement carries, and the
database files are searched for the key and the signature, which must not be there."""
import base64
import ctypes
import hashlib
import json
import os
import re
import subprocess

import pytest

from goblin_tools import WORKER
from test_hub_web import HUB_EXE, Browser, hub, mailbox, sign_in  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not (os.path.exists(HUB_EXE) and os.path.exists(WORKER)),
                                reason="goblin-hub and goblin-worker not built")

JSON = {"Accept": "application/json"}


def link_line(tmp_path, code, name="w"):
    """The statement and identity `goblin-worker link CODE` prints for a config dir."""
    out = subprocess.run([WORKER, "link", code, "--config-dir", str(tmp_path / name)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line
    ident = re.search(r"worker identity ([0-9a-f]{64})", out.stderr).group(1)
    return line, ident


def identity_of(line):
    tag, code, key, sig = line.split(" ")
    der = base64.b64decode(key, validate=True)
    assert tag == "goblin-link-v1" and len(der) == 91
    return hashlib.sha256(der).hexdigest()


def account(b):
    st, acc = b.json("/account")
    assert st == 200
    return acc


def work_add(hub, fp, tasks, accepted, rejected):
    """goblin_hub_store_work_add on the serving hub's database (SQLite WAL: two writers
    take turns), as the hub does when a lab node reports."""
    lib = ctypes.CDLL(os.environ.get("GOBLIN_LIB") or os.path.join(os.path.dirname(HUB_EXE), "..", "libgoblin",
                                                                   "libgoblin.so"))
    store = ctypes.c_void_p()
    err = ctypes.create_string_buffer(516)
    rc = lib.goblin_hub_store_open(os.path.join(hub.dir, "hub.db").encode(), ctypes.byref(store), err)
    assert rc == 0, err.raw[4:].split(b"\0")[0]
    lib.goblin_hub_store_work_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p] + [ctypes.c_int64] * 3
    rc = lib.goblin_hub_store_work_add(store, fp.encode(), tasks, accepted, rejected)
    lib.goblin_hub_store_close(store)
    assert rc == 0


def test_volunteer_links_a_worker_sees_its_work_and_unlinks(hub, mailbox, tmp_path):
    b = Browser(hub)
    sign_in(b, mailbox, "vol@example.org")
    st, _, page = b.get("/account")
    m = re.search(r"Your link code: <code>([0-9a-f]{32})</code>", page)
    assert st == 200 and m, page
    code = m.group(1)
    # Plain forms a keyboard can fill: a labelled field, a submit button, the form token.
    assert '<form method="post" action="/workers/link"><input type="hidden" name="csrf" value="' in page
    assert '<label for="statement">' in page and '<input id="statement" name="statement" maxlength="512"' in page
    assert "No worker is linked yet." in page and "<script" not in page
    acc = account(b)
    assert acc["link_code"] == code and acc["workers"] == [] and acc["max_workers"] == 256
    line, ident = link_line(tmp_path, code)
    assert identity_of(line) == ident
    st, hdr, body = b.post("/workers/link", {"statement": line, "csrf": acc["csrf"]})
    assert st == 303 and hdr["location"] == "/account#workers", body
    acc = account(b)
    assert [w["fingerprint"] for w in acc["workers"]] == [ident]
    assert acc["workers"][0]["tasks"] == 0
    # A lab reports work of this identity: the page shows it.
    work_add(hub, ident, 7, 6, 1)
    acc = account(b)
    w = acc["workers"][0]
    assert (w["tasks"], w["accepted"], w["rejected"]) == (7, 6, 1)
    st, _, page = b.get("/account")
    assert f"<code>{ident}</code>" in page
    assert re.search(r"<td>7</td><td>6</td><td>1</td>", page), page
    assert f'name="fingerprint" value="{ident}"><button type="submit" aria-label="Unlink worker {ident}">' in page
    # Past work of an identity counts before it is linked, and shows once linked.
    line2, ident2 = link_line(tmp_path, code, "w2")
    work_add(hub, ident2, 3, 3, 0)
    st, _, body = b.post("/workers/link", {"statement": line2, "csrf": acc["csrf"]}, headers=JSON)
    assert st == 200 and json.loads(body) == {"linked": ident2}
    acc = account(b)
    assert {w["fingerprint"]: w["tasks"] for w in acc["workers"]} == {ident: 7, ident2: 3}
    # Stored: fingerprints and counters; not the key, the signature or the line.
    key, sig = line.split(" ")[2:]
    for name in os.listdir(hub.dir):
        if name.startswith("hub.db"):
            data = open(os.path.join(hub.dir, name), "rb").read()
            for s in (key.encode(), sig.encode(), base64.b64decode(key)[27:]):
                assert s not in data, f"{name} holds a part of the statement"
    with hub.db() as db:
        assert sorted(r[0] for r in db.execute("SELECT fingerprint FROM worker_link")) == sorted([ident, ident2])
    # Unlink: gone from the page, once.
    st, hdr, _ = b.post("/workers/unlink", {"fingerprint": ident, "csrf": acc["csrf"]})
    assert st == 303
    acc = account(b)
    assert [w["fingerprint"] for w in acc["workers"]] == [ident2]
    st, _, body = b.post("/workers/unlink", {"fingerprint": ident, "csrf": acc["csrf"]}, headers=JSON)
    assert st == 404, body
    st, _, m = b.get("/metrics")
    assert re.search(r"goblin_hub_workers_linked_total 2\b", m) and re.search(r"goblin_hub_workers_unlinked_total 1\b", m)


def test_forged_misdirected_and_hostile_statements_are_refused(hub, mailbox, tmp_path):
    alice, mallory = Browser(hub), Browser(hub)
    sign_in(alice, mailbox, "alice@example.org")
    sign_in(mallory, mailbox, "mallory@example.org")
    a, m = account(alice), account(mallory)
    line, ident = link_line(tmp_path, a["link_code"], "alice-w")

    def post(b, acc, statement, **kw):
        return b.post("/workers/link", {"statement": statement, "csrf": acc["csrf"]}, **kw)

    # A tampered signature.
    parts = line.split(" ")
    sig = base64.b64decode(parts[3])
    forged = " ".join(parts[:3] + [base64.b64encode(sig[:-1] + bytes([sig[-1] ^ 1])).decode()])
    st, _, page = post(alice, a, forged)
    assert st == 403 and "signature" in page, page
    # Alice's statement in Mallory's account: made for another account's code.
    st, _, page = post(mallory, m, line)
    assert st == 403 and "another link code" in page
    # The forms need their token: none, a wrong one, Alice's in Mallory's browser.
    for form in ({"statement": line}, {"statement": line, "csrf": "0" * 64}, {"statement": line, "csrf": a["csrf"]}):
        st, _, _ = mallory.post("/workers/link", form)
        assert st == 403
    st, _, _ = mallory.post("/workers/unlink", {"fingerprint": ident})
    assert st == 403
    st, _, _ = mallory.post("/workers/code", {})
    assert st == 403
    # Not signed in: sent to sign in, nothing linked.
    anon = Browser(hub)
    st, hdr, _ = anon.post("/workers/link", {"statement": line, "csrf": anon.csrf()})
    assert st == 303 and hdr["location"] == "/signin"
    # Garbage, oversized, SQL and HTML: refused, never shown back unescaped.
    hostile = ["", "not a statement", "Robert'); DROP TABLE worker_link;--",
               "<script>alert(document.cookie)</script>", "goblin-link-v1 ' OR '1'='1 x y",
               line.replace(" ", "  ", 1), line + " extra", "x" * 513, "x" * 20000]
    for h in hostile:
        st, _, page = post(alice, a, h)
        assert st in (400, 413), (h[:40], st, page)
        assert "<script>alert" not in page
    # A code since redrawn: the old statement no longer links.
    st, _, body = alice.post("/workers/code", {"csrf": a["csrf"]}, headers=JSON)
    assert st == 200
    new_code = json.loads(body)["link_code"]
    assert new_code != a["link_code"] and account(alice)["link_code"] == new_code
    st, _, page = post(alice, a, line)
    assert st == 403 and "another link code" in page
    with hub.db() as db:
        assert db.execute("SELECT count(*) FROM worker_link").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM account").fetchone()[0] == 2
    # With the new code it links; Mallory cannot take it with a statement of her own
    # made with the same key (a shared machine) until Alice unlinks it.
    line, ident = link_line(tmp_path, new_code, "alice-w")
    st, _, _ = post(alice, a, line)
    assert st == 303
    mline, mident = link_line(tmp_path, m["link_code"], "alice-w")
    assert mident == ident
    st, _, page = post(mallory, m, mline)
    assert st == 409 and "another account" in page
    st, _, _ = mallory.post("/workers/unlink", {"fingerprint": ident, "csrf": m["csrf"]})
    assert st == 404
    for bad in ("'; DELETE FROM worker_link; --", "A" * 64, "<b>x</b>"):
        st, _, page = alice.post("/workers/unlink", {"fingerprint": bad, "csrf": a["csrf"]})
        assert st == 400 and "<b>x" not in page
    assert [w["fingerprint"] for w in account(alice)["workers"]] == [ident]
    st, _, _ = alice.post("/workers/unlink", {"fingerprint": ident, "csrf": a["csrf"]})
    assert st == 303
    st, _, _ = post(mallory, m, mline)
    assert st == 303
    assert [w["fingerprint"] for w in account(mallory)["workers"]] == [ident] and account(alice)["workers"] == []
