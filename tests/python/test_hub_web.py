"""goblin-hub as a process: its pages over HTTPS (http.client, the certificate pinned),
its mail through a real SMTP server run here (aiosmtpd), its operator command on the
same database. Attacks first: forms without their token, forged, expired and reused
codes and links, brute force into the limits, other people's requests and keys,
SQL and HTML in every field, oversized forms. The digests in the database are
recomputed here with Python's hmac from the secret file."""
import email
import hashlib
import hmac
import http.client
import json
import os
import re
import socket
import sqlite3
import ssl
import subprocess
import threading
import time
import urllib.parse

import pytest

aiosmtpd_controller = pytest.importorskip("aiosmtpd.controller")

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUB_EXE = os.path.join(os.path.dirname(os.environ.get("GOBLIN_LIB", os.path.join(TOP, "build", "libgoblin", "x"))),
                       "..", "tools", "goblin-hub")
if not os.path.exists(HUB_EXE):
    HUB_EXE = os.path.join(TOP, "build", "tools", "goblin-hub")
pytestmark = pytest.mark.skipif(not os.path.exists(HUB_EXE), reason="goblin-hub not built (-Dhub)")


class Mailbox:
    """An SMTP server's handler that keeps every message it is given."""

    def __init__(self):
        self.messages = []
        self.cv = threading.Condition()

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content)
        with self.cv:
            self.messages.append((list(envelope.rcpt_tos), msg))
            self.cv.notify_all()
        return "250 OK"

    def wait(self, n, timeout=30):
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.messages) >= n, timeout), "no mail arrived"
            return self.messages[n - 1]

    def count(self):
        with self.cv:
            return len(self.messages)


class Hub:
    def __init__(self, tmp, mailbox_port, extra=""):
        self.dir = str(tmp / "hub")
        out = subprocess.run([HUB_EXE, "init", self.dir, "--admin", "op@example.org"], capture_output=True,
                             text=True, check=True)
        assert re.search(r"certificate sha256 [0-9a-f]{64}", out.stdout), out.stdout
        with open(os.path.join(self.dir, "hub.conf"), "w") as f:
            f.write("listen = https://127.0.0.1:0\npublic_url = https://localhost:1\n"
                    f"smtp_url = smtp://127.0.0.1:{mailbox_port}\nmail_from = hub@example.org\n"
                    f"admin = op@example.org\n{extra}")
        self.proc = subprocess.Popen([HUB_EXE, "serve", self.dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"serving on port (\d+)", line)
        assert m, line + self.proc.stderr.read()
        self.port = int(m.group(1))
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "cert.pem"))
        self.ctx.check_hostname = False  # the certificate names localhost; we dial 127.0.0.1, pinned by cafile

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def cli(self, *args):
        return subprocess.run([HUB_EXE, *args, "--dir", self.dir], capture_output=True, text=True)

    def db(self):
        return sqlite3.connect(os.path.join(self.dir, "hub.db"))

    def secret(self):
        return bytes.fromhex(open(os.path.join(self.dir, "secret")).read().strip())


class Browser:
    """A client that keeps cookies as a browser would (no JavaScript)."""

    def __init__(self, hub):
        self.hub = hub
        self.cookies = {}
        self.set_cookie_lines = []

    def request(self, method, path, form=None, headers=None, raw=None):
        c = http.client.HTTPSConnection("127.0.0.1", self.hub.port, context=self.hub.ctx, timeout=60)
        h = dict(headers or {})
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = raw
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
        if body is not None:
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read().decode("utf-8", "replace")
        for k, v in r.getheaders():
            if k.lower() == "set-cookie":
                self.set_cookie_lines.append(v)
                name, _, rest = v.partition("=")
                value = rest.split(";", 1)[0]
                if value:
                    self.cookies[name] = value
                else:
                    self.cookies.pop(name, None)
        c.close()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, form, **kw):
        return self.request("POST", path, form=form, **kw)

    def csrf(self, path="/signin"):
        st, _, page = self.get(path)
        assert st == 200, page
        m = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
        assert m, page
        return m.group(1)

    def json(self, path):
        st, _, body = self.get(path, headers={"Accept": "application/json"})
        return st, json.loads(body)


@pytest.fixture
def mailbox():
    box = Mailbox()
    # A free port for the SMTP server (its controller dials the port to see it is up).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        box.port = s.getsockname()[1]
    ctl = aiosmtpd_controller.Controller(box, hostname="127.0.0.1", port=box.port)
    ctl.start()
    yield box
    ctl.stop()


def start_hub(tmp_path, mailbox, extra=""):
    return Hub(tmp_path, mailbox.port, extra)


@pytest.fixture
def hub(tmp_path, mailbox):
    h = start_hub(tmp_path, mailbox)
    yield h
    h.stop()


def mail_parts(msg):
    body = msg.get_payload(decode=True).decode()
    code = re.search(r"sign-in code: (\d{8})", body).group(1)
    link = re.search(r"(https://\S+/signin/link\?\S+)", body).group(1)
    q = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)
    return code, q["email"][0], q["token"][0]


def sign_in(b, mailbox, addr):
    n = mailbox.count()
    st, _, page = b.post("/signin", {"email": addr, "csrf": b.csrf()})
    assert st == 200 and "Enter your code" in page, page
    rcpt, msg = mailbox.wait(n + 1)
    assert rcpt == [addr.lower()]
    code, _, _ = mail_parts(msg)
    st, hdr, page = b.post("/signin/code", {"email": addr, "code": code, "csrf": b.csrf()})
    assert st == 303 and hdr["location"] == "/account", page
    return code


def file_request(b, **fields):
    st, acc = b.json("/account")
    assert st == 200
    form = {"name": "Ada", "institution": "Uni", "purpose": "p", "expected_use": "e", "csrf": acc["csrf"]}
    form.update(fields)
    return b.post("/request", form, headers={"Accept": "application/json"})


def test_sign_in_request_approve_key_revoke(hub, mailbox):
    b = Browser(hub)
    st, hdr, page = b.get("/signin")
    assert st == 200 and '<form method="post" action="/signin">' in page
    pre = b.set_cookie_lines[-1]
    for flag in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/"):
        assert flag in pre, pre
    assert "default-src 'none'" in hdr["content-security-policy"]
    assert hdr["cache-control"] == "no-store"
    sign_in(b, mailbox, "Ada@Example.org")
    session = b.set_cookie_lines[-1]
    assert session.startswith("goblin_session=")
    for flag in ("HttpOnly", "Secure", "SameSite=Strict"):
        assert flag in session, session
    st, acc = b.json("/account")
    assert st == 200 and acc["email"] == "ada@example.org" and acc["requests"] == [] and not acc["approved"]
    st, _, body = file_request(b, name="Ada Lovelace", purpose="engines\nand more")
    assert st == 200, body
    rid = json.loads(body)["id"]
    # The operator's command reads the same database.
    out = hub.cli("requests", "list")
    assert out.returncode == 0, out.stderr
    assert f"request {rid}  pending" in out.stdout and "ada@example.org" in out.stdout
    assert "purpose: engines\\x0aand more" in out.stdout  # a newline of theirs is shown, not obeyed
    # Not approved yet: no keys.
    st, _, body = b.post("/keys", {"label": "lab", "csrf": acc["csrf"]}, headers={"Accept": "application/json"})
    assert st == 403, body
    n = mailbox.count()
    out = hub.cli("requests", "approve", str(rid), "--note", "welcome aboard")
    assert out.returncode == 0, out.stderr
    rcpt, msg = mailbox.wait(n + 1)
    assert rcpt == ["ada@example.org"] and "approved" in msg["Subject"]
    assert "welcome aboard" in msg.get_payload(decode=True).decode()
    assert hub.cli("requests", "deny", str(rid)).returncode != 0  # decided once
    st, acc = b.json("/account")
    assert acc["approved"] and acc["requests"][0]["status"] == "approved"
    st, _, body = b.post("/keys", {"label": "lab node 1", "csrf": acc["csrf"]}, headers={"Accept": "application/json"})
    assert st == 200, body
    key = json.loads(body)
    assert re.fullmatch(r"gbk1_[0-9a-f]{16}_[0-9a-f]{64}", key["key"])
    # Shown once: the account page lists the key by id and label, never its text.
    st, _, page = b.get("/account")
    assert "lab node 1" in page and key["key"] not in page and key["key"][22:] not in page
    d = hmac.new(hub.secret(), b"node-key\0" + key["key"][22:].encode(), hashlib.sha256).digest()
    with hub.db() as db:
        assert db.execute("SELECT digest FROM node_key WHERE id = ?", (key["id"],)).fetchone()[0] == d
    st, _, body = b.post("/keys/revoke", {"id": str(key["id"]), "csrf": acc["csrf"]},
                         headers={"Accept": "application/json"})
    assert st == 200, body
    st, acc = b.json("/account")
    assert acc["keys"][0]["revoked"] > 0
    st, _, body = b.post("/keys/revoke", {"id": str(key["id"]), "csrf": acc["csrf"]})
    assert st == 409
    # Sign out ends the session on the hub, not only in the browser.
    old = b.cookies["goblin_session"]
    st, _, _ = b.post("/signout", {"csrf": acc["csrf"]})
    assert st == 303
    b.cookies["goblin_session"] = old
    st, _ = b.json("/account")
    assert st == 401


def test_forms_without_their_token_are_refused(hub, mailbox):
    b = Browser(hub)
    b.get("/signin")
    for form in ({"email": "v@example.org"}, {"email": "v@example.org", "csrf": "0" * 64},
                 {"email": "v@example.org", "csrf": "zz"}):
        st, _, page = b.post("/signin", form)
        assert st == 403 and "token" in page, page
    # A token made for another browser's cookie does not fit this one.
    other = Browser(hub)
    st, _, _ = b.post("/signin", {"email": "v@example.org", "csrf": other.csrf()})
    assert st == 403
    # No cookie at all (a cross-site form under SameSite=Strict sends none).
    bare = Browser(hub)
    st, _, _ = bare.post("/signin", {"email": "v@example.org", "csrf": b.csrf()})
    assert st == 403
    # The right token, but the browser says the form came from another site.
    st, _, _ = b.post("/signin", {"email": "v@example.org", "csrf": b.csrf()}, headers={"Sec-Fetch-Site": "cross-site"})
    assert st == 403
    assert mailbox.count() == 0
    with hub.db() as db:
        assert db.execute("SELECT count(*) FROM signin").fetchone()[0] == 0
    st, _, metrics = b.get("/metrics")
    assert re.search(r'goblin_hub_http_refused_total\{reason="csrf"\} 6\b', metrics), metrics


def test_links_forged_reused_and_prefetched(hub, mailbox):
    b = Browser(hub)
    b.post("/signin", {"email": "lin@example.org", "csrf": b.csrf()})
    code, addr, token = mail_parts(mailbox.wait(1)[1])
    assert addr == "lin@example.org"
    # A mail scanner fetching the link does not use it up: the GET only shows a button.
    scanner = Browser(hub)
    st, _, page = scanner.get(f"/signin/link?email={addr}&token={token}")
    assert st == 200 and "goblin_session" not in scanner.cookies
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    st, _, _ = scanner.post("/signin/link", {"email": addr, "token": forged, "csrf": m.group(1)})
    assert st == 403 and "goblin_session" not in scanner.cookies
    st, _, _ = scanner.post("/signin/link", {"email": addr, "token": token, "csrf": m.group(1)})
    assert st == 303 and "goblin_session" in scanner.cookies
    again = Browser(hub)
    st, _, page = again.get(f"/signin/link?email={addr}&token={token}")
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    st, _, page = again.post("/signin/link", {"email": addr, "token": token, "csrf": m.group(1)})
    assert st == 403 and "wrong, expired or used" in page
    st, _, _ = again.post("/signin/code", {"email": addr, "code": code, "csrf": again.csrf()})
    assert st == 403, "the code of a used sign-in is used too"
    st, _, _ = again.get("/signin/link?email=" + addr)
    assert st == 400


def test_expired_code_refused(tmp_path, mailbox):
    hub = start_hub(tmp_path, mailbox, "code_ttl_s = 1\n")
    try:
        b = Browser(hub)
        b.post("/signin", {"email": "old@example.org", "csrf": b.csrf()})
        code, _, _ = mail_parts(mailbox.wait(1)[1])
        time.sleep(2.2)  # only ever longer than the code's life: never flaky in the other direction
        st, _, page = b.post("/signin/code", {"email": "old@example.org", "code": code, "csrf": b.csrf()})
        assert st == 403 and "wrong, expired or used" in page
        assert "goblin_session" not in b.cookies
    finally:
        hub.stop()


def test_brute_force_hits_the_limits(hub, mailbox):
    b = Browser(hub)
    b.post("/signin", {"email": "bf@example.org", "csrf": b.csrf()})
    code, _, _ = mail_parts(mailbox.wait(1)[1])
    wrong = code[:-1] + str((int(code[-1]) + 1) % 10)
    t = b.csrf()
    for _ in range(5):
        st, _, _ = b.post("/signin/code", {"email": "bf@example.org", "code": wrong, "csrf": t})
        assert st == 403
    st, _, _ = b.post("/signin/code", {"email": "bf@example.org", "code": code, "csrf": t})
    assert st == 403, "five wrong codes kill the right one"
    for _ in range(4):
        b.post("/signin/code", {"email": "bf@example.org", "code": wrong, "csrf": t})
    st, _, page = b.post("/signin/code", {"email": "bf@example.org", "code": code, "csrf": t})
    assert st == 429 and "too many" in page
    # Starting sign-ins is limited too: 3 per address in the window.
    for i in range(2):
        st, _, _ = b.post("/signin", {"email": "bf@example.org", "csrf": t})
        assert st == 200
    st, _, page = b.post("/signin", {"email": "bf@example.org", "csrf": t})
    assert st == 429 and mailbox.count() == 3


def test_other_peoples_requests_and_keys_out_of_reach(hub, mailbox):
    alice, mallory = Browser(hub), Browser(hub)
    sign_in(alice, mailbox, "alice@example.org")
    sign_in(mallory, mailbox, "mallory@example.org")
    st, body = file_request(alice, name="Alice")[0], None
    assert st == 200
    with hub.db() as db:
        rid = db.execute("SELECT id FROM access_request").fetchone()[0]
    assert hub.cli("requests", "approve", str(rid)).returncode == 0
    st, acc = alice.json("/account")
    st, _, body = alice.post("/keys", {"label": "alice-lab", "csrf": acc["csrf"]}, headers={"Accept": "application/json"})
    kid = json.loads(body)["id"]
    st, macc = mallory.json("/account")
    assert macc["requests"] == [] and macc["keys"] == [] and not macc["approved"]
    st, _, page = mallory.get("/account")
    assert "Alice" not in page and "alice-lab" not in page
    st, _, _ = mallory.post("/keys/revoke", {"id": str(kid), "csrf": macc["csrf"]})
    assert st == 404
    st, acc = alice.json("/account")
    assert acc["keys"][0]["revoked"] == 0
    # Alice's form token is not Mallory's.
    st, _, _ = mallory.post("/keys/revoke", {"id": str(kid), "csrf": acc["csrf"]})
    assert st == 403
    # Neither is an admin; the admin page and its decisions are refused.
    st, _ = mallory.json("/admin")
    assert st == 403
    st, _, _ = mallory.post("/admin/decide", {"id": str(rid), "decision": "deny", "csrf": macc["csrf"]})
    assert st == 403
    op = Browser(hub)
    sign_in(op, mailbox, "op@example.org")
    st, adm = op.json("/admin")
    assert st == 200 and adm["pending"] == []


def test_injection_strings_stored_verbatim_and_escaped(hub, mailbox):
    hostile = {
        "name": "Robert'); DROP TABLE account;--",
        "institution": "<script>alert(document.cookie)</script>",
        "purpose": "\" onmouseover=\"alert(1)\" x=\"",
        "expected_use": "' OR '1'='1 \u00e9\u6f22 %00 \\",
    }
    b = Browser(hub)
    sign_in(b, mailbox, "inj@example.org")
    st, _, body = file_request(b, **hostile)
    assert st == 200, body
    with hub.db() as db:
        row = db.execute("SELECT name, institution, purpose, expected_use FROM access_request").fetchone()
        assert db.execute("SELECT count(*) FROM account").fetchone()[0] == 1
    assert row == tuple(hostile[k] for k in ("name", "institution", "purpose", "expected_use"))
    st, _, page = b.get("/account")
    assert "<script>alert" not in page and "&lt;script&gt;alert(document.cookie)&lt;/script&gt;" in page
    assert 'onmouseover="alert' not in page
    st, acc = b.json("/account")
    assert acc["requests"][0]["institution"] == hostile["institution"]
    op = Browser(hub)
    sign_in(op, mailbox, "op@example.org")
    st, _, page = op.get("/admin")
    assert st == 200 and "<script>alert" not in page and "Robert&#39;); DROP TABLE account;--" in page


def test_oversized_input_refused_nothing_stored(hub, mailbox):
    b = Browser(hub)
    sign_in(b, mailbox, "big@example.org")
    st, _, body = file_request(b, purpose="x" * 2001)
    assert st == 400 and "purpose" in body
    st, _, body = file_request(b, name="")
    assert st == 400
    st, acc = b.json("/account")
    big = urllib.parse.urlencode({"name": "n", "institution": "i", "purpose": "p" * 20000, "expected_use": "e",
                                  "csrf": acc["csrf"]}).encode()
    st, _, body = b.request("POST", "/request", raw=big)
    assert st == 413 and "too large" in body
    # Far past the limit, nng refuses before reading the body (its own 400) and closes the
    # connection, which may reset it while we are still sending: a refusal either way, and
    # nothing stored.
    huge = urllib.parse.urlencode({"purpose": "p" * (1 << 20), "csrf": acc["csrf"]}).encode()
    try:
        st, _, _ = b.request("POST", "/request", raw=huge)
        assert st in (400, 413)
    except (http.client.HTTPException, ConnectionError, ssl.SSLError):
        pass
    many = "&".join(f"f{i}=v" for i in range(40)) + "&csrf=" + acc["csrf"]
    st, _, body = b.request("POST", "/request", raw=many.encode())
    assert st == 400 and "too many" in body
    st, _, _ = b.request("POST", "/request", raw=b"name=%zz&csrf=" + acc["csrf"].encode())
    assert st == 400
    st, _, _ = b.get("/" + "a" * 400)
    assert st == 414
    with hub.db() as db:
        assert db.execute("SELECT count(*) FROM access_request").fetchone()[0] == 0
    st, _, _ = b.request("PUT", "/request", raw=b"x")
    assert st == 405
    st, _, _ = b.request("POST", "/request", raw=b"{}", headers={"Content-Type": "application/json"})
    assert st == 415


def test_database_holds_keyed_digests_only(hub, mailbox):
    b = Browser(hub)
    b.post("/signin", {"email": "dig@example.org", "csrf": b.csrf()})
    code, addr, token = mail_parts(mailbox.wait(1)[1])
    key = hub.secret()
    with hub.db() as db:
        cd, ld = db.execute("SELECT code_digest, link_digest FROM signin").fetchone()
    assert cd == hmac.new(key, b"signin-code\0" + addr.encode() + b"\0" + code.encode(), hashlib.sha256).digest()
    assert ld == hmac.new(key, b"signin-link\0" + addr.encode() + b"\0" + token.encode(), hashlib.sha256).digest()
    st, _, _ = b.post("/signin/code", {"email": addr, "code": code, "csrf": b.csrf()})
    assert st == 303
    cookie = b.cookies["goblin_session"]
    with hub.db() as db:
        sd = db.execute("SELECT digest FROM session").fetchone()[0]
    assert sd == hmac.new(key, b"session\0" + cookie.encode(), hashlib.sha256).digest()
    for name in os.listdir(hub.dir):
        if name == "secret":
            continue
        data = open(os.path.join(hub.dir, name), "rb").read()
        for s in (code, token, cookie, key.hex()):
            assert s.encode() not in data, f"{name} holds a secret"
        mode = os.stat(os.path.join(hub.dir, name)).st_mode & 0o777
        if name.startswith("hub.db") or name in ("key.pem", "secret", "hub.conf"):
            assert mode == 0o600, (name, oct(mode))


def test_status_json_and_metrics(hub, mailbox):
    b = Browser(hub)
    st, s = b.json("/status")
    # No machines address served here: nothing online, nothing computed.
    assert st == 200 and s == {"approved_requests": 0, "pending_requests": 0, "quarantines": 0,
                               "workers_online": 0, "workers_lent": 0, "labs_active": 0, "tasks_per_second": 0,
                               "tasks": 0, "results_accepted": 0, "results_rejected": 0,
                               "workers_refused_quarantined": 0}, s
    st, _, page = b.get("/status?format=json")
    assert json.loads(page)["pending_requests"] == 0
    st, hdr, page = b.get("/status")
    assert st == 200 and hdr["content-type"].startswith("text/html") and "<table>" in page
    st, hdr, m = b.get("/metrics")
    assert st == 200 and hdr["content-type"].startswith("text/plain")
    samples = {}
    for line in m.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples["goblin_hub_http_requests_total"] >= 4
    assert samples['goblin_hub_access_requests{status="pending"}'] == 0
    st, _, _ = b.get("/nowhere")
    assert st == 404
    st, hdr, _ = b.get("/")
    assert st == 303 and hdr["location"] == "/status"


def raw_exchange(hub, data):
    """Send @data on a TLS connection of its own; the first bytes of the answer (b"" if
    the hub closed the connection)."""
    s = hub.ctx.wrap_socket(socket.create_connection(("127.0.0.1", hub.port), timeout=60), server_hostname="localhost")
    try:
        s.sendall(data)
        return s.recv(64)
    except (ConnectionError, ssl.SSLError):
        return b""
    finally:
        s.close()


def test_hostile_framing_leaves_the_hub_serving(hub, mailbox):
    # A megabyte header, twenty thousand headers, a body announced at 100 MB, a chunked
    # body: each refused or dropped, and the hub answers the next request as before.
    big_header = b"GET /status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    many = b"GET /status HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(20000)) + b"\r\n"
    huge = (b"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100000000\r\n\r\n" + b"a" * 1000)
    chunked = (b"POST /signin HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\n\r\n5\r\nemail\r\n0\r\n\r\n")
    for data in (big_header, many, huge, chunked):
        answer = raw_exchange(hub, data)
        assert answer == b"" or re.match(rb"HTTP/1\.1 4\d\d ", answer), answer
        assert raw_exchange(hub, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    assert mailbox.count() == 0
    with hub.db() as db:
        assert db.execute("SELECT count(*) FROM signin").fetchone()[0] == 0


def test_operator_lifts_a_quarantine_only_with_its_form_token(hub, mailbox):
    """A lab's report (a row as the relay stores it) on the admin page with a Lift form;
    the lift is refused without the form token, with another account's token, and to a
    non-operator; the operator's lift takes it out of force (page, JSON, CLI)."""
    subject = "ab" * 32
    with hub.db() as db:
        db.execute("INSERT INTO quarantine (subject, reason, reported_by, created) VALUES (?, ?, ?, ?)",
                   (subject, "a wrong tile <b>", "node key 7", 1700000000))
        db.commit()
        qid = db.execute("SELECT id FROM quarantine").fetchone()[0]
    out = hub.cli("quarantines", "list")
    assert out.returncode == 0 and subject in out.stdout, out.stdout + out.stderr
    op = Browser(hub)
    sign_in(op, mailbox, "op@example.org")
    st, _, page = op.get("/admin")
    assert st == 200 and subject in page and 'action="/admin/lift"' in page
    assert "a wrong tile &lt;b&gt;" in page and "<b>" not in page.split("a wrong tile")[1][:8]
    st, adm = op.json("/admin")
    row = next(q for q in adm["quarantines"] if q["subject"] == subject)
    assert row["lifted"] == 0 and row["reported_by"] == "node key 7"
    mallory = Browser(hub)
    sign_in(mallory, mailbox, "mallory@example.org")
    st, macc = mallory.json("/account")
    for who, form in ((op, {"id": str(qid)}), (op, {"id": str(qid), "csrf": "0" * 64}),
                      (op, {"id": str(qid), "csrf": macc["csrf"]}), (mallory, {"id": str(qid), "csrf": macc["csrf"]})):
        st, _, _ = who.post("/admin/lift", form)
        assert st == 403, (form, st)
    assert subject in hub.cli("quarantines", "list").stdout, "nothing lifted by the refused posts"
    st, oacc = op.json("/account")
    token = oacc["csrf"]
    st, _, body = op.post("/admin/lift", {"id": "99999", "csrf": token}, headers={"Accept": "application/json"})
    assert st == 404, body
    st, _, body = op.post("/admin/lift", {"id": str(qid), "csrf": token}, headers={"Accept": "application/json"})
    assert st == 200 and json.loads(body)["lifted"] > 0, body
    assert subject not in hub.cli("quarantines", "list").stdout
    assert subject in hub.cli("quarantines", "list", "--all").stdout
    st, _, body = op.post("/admin/lift", {"id": str(qid), "csrf": token}, headers={"Accept": "application/json"})
    assert st == 409, (st, body)
