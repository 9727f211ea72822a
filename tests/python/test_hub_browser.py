"""goblin-hub in a real browser: Debian's chromium (headless) driven by selenium through
chromium-driver, aiosmtpd as the mail server. A researcher signs in by the mailed link,
files the access request with the keyboard and the mouse; the operator signs in by
code and approves it on the admin page; the researcher makes a node key and revokes it.
A screenshot of each page goes to $GOBLIN_HUB_SCREENSHOTS (default: the test's tmp
dir), never into git. Skipped where chromium, chromedriver or selenium is missing."""
import os
import re
import shutil
import urllib.parse

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from test_hub_web import HUB_EXE, Hub, mail_parts, mailbox  # noqa: E402,F401  (mailbox is a fixture)

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER and os.path.exists(HUB_EXE)),
                                reason="needs chromium, chromium-driver and goblin-hub")


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1200"):
        opts.add_argument(a)
    opts.accept_insecure_certs = True  # the hub's self-signed certificate; http.client tests pin it
    d = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def loads(d, act):
    """Do @p act (a click or an Enter that submits or follows a link) and wait until the
    browser has left the page it was on: neither a click nor a key waits for the next
    page, and on a loaded machine the old page is still there when the next line reads."""
    for attempt in range(5):
        old = d.find_element(By.TAG_NAME, "html")
        try:
            act()
            break
        except (StaleElementReferenceException, WebDriverException) as e:
            # The document was swapped between finding the element and clicking it
            # ("Node with given id does not belong to the document", seen on a loaded
            # machine): the click did not happen, so find it again in the new document.
            if attempt == 4 or not (isinstance(e, StaleElementReferenceException)
                                    or "does not belong to the document" in str(e)):
                raise
            WebDriverWait(d, 60).until(lambda drv: drv.execute_script("return document.readyState") == "complete")
    # While the document is being swapped chromedriver may answer the staleness probe with
    # an error of its own ("unhandled inspector error", seen on a loaded machine): ask again.
    WebDriverWait(d, 60, ignored_exceptions=(WebDriverException,)).until(EC.staleness_of(old))
    WebDriverWait(d, 60, ignored_exceptions=(WebDriverException,)).until(
        lambda drv: drv.execute_script("return document.readyState") == "complete")


def shot(d, tmp_path, name):
    where = os.environ.get("GOBLIN_HUB_SCREENSHOTS") or str(tmp_path / "screens")
    os.makedirs(where, exist_ok=True)
    assert d.save_screenshot(os.path.join(where, name + ".png"))


def sign_in_by_code(d, hub, box, base, addr, tmp_path, tag):
    n = box.count()
    d.get(base + "/signin")
    field = d.find_element(By.ID, "email")
    loads(d, lambda: field.send_keys(addr + Keys.ENTER))  # the keyboard alone submits the form
    assert "Enter your code" in d.find_element(By.TAG_NAME, "h1").text
    code, _, _ = mail_parts(box.wait(n + 1)[1])
    shot(d, tmp_path, tag + "-code")
    loads(d, lambda: d.find_element(By.ID, "code").send_keys(code + Keys.ENTER))
    assert d.current_url.endswith("/account"), d.current_url


def test_sign_in_request_approve_key_in_chromium(tmp_path, mailbox, browser):
    hub = Hub(tmp_path, mailbox.port)
    try:
        d = browser
        base = f"https://localhost:{hub.port}"
        d.get(base + "/status")
        shot(d, tmp_path, "1-status")
        loads(d, lambda: d.find_element(By.LINK_TEXT, "sign in").click())
        d.find_element(By.ID, "email").send_keys("ada@example.org")
        shot(d, tmp_path, "2-signin")
        loads(d, lambda: d.find_element(By.CSS_SELECTOR, "button[type=submit]").click())
        _, _, token = mail_parts(mailbox.wait(1)[1])
        body = mailbox.wait(1)[1].get_payload(decode=True).decode()
        link = urllib.parse.urlparse(re.search(r"(https://\S+/signin/link\?\S+)", body).group(1))
        d.get(base + link.path + "?" + link.query)  # the mailed link, on this hub's port
        shot(d, tmp_path, "3-link")
        loads(d, lambda: d.find_element(By.CSS_SELECTOR, "button[type=submit]").click())
        assert d.current_url.endswith("/account"), d.current_url
        assert "ada@example.org" in d.page_source
        # The session cookie is not readable by script (HttpOnly).
        assert "goblin_session" not in d.execute_script("return document.cookie")
        names = {c["name"]: c for c in d.get_cookies()}
        assert names["goblin_session"]["httpOnly"] and names["goblin_session"]["secure"]
        assert names["goblin_session"]["sameSite"] == "Strict"
        d.find_element(By.ID, "name").send_keys("Ada Lovelace")
        d.find_element(By.ID, "institution").send_keys("<b>Analytical</b> Engines")
        d.find_element(By.ID, "purpose").send_keys("Bernoulli numbers")
        d.find_element(By.ID, "expected_use").send_keys("one table a week")
        shot(d, tmp_path, "4-request")
        loads(d, lambda: d.find_element(By.XPATH, "//button[text()='Send the request']").click())
        assert "pending" in d.page_source and "&lt;b&gt;Analytical&lt;/b&gt;" in d.page_source
        shot(d, tmp_path, "5-pending")
        loads(d, lambda: d.find_element(By.XPATH, "//button[text()='Sign out']").click())
        # The operator approves it on the admin page.
        sign_in_by_code(d, hub, mailbox, base, "op@example.org", tmp_path, "6-op")
        loads(d, lambda: d.find_element(By.LINK_TEXT, "Admin").click())
        assert "Ada Lovelace" in d.page_source
        shot(d, tmp_path, "7-admin")
        n = mailbox.count()
        loads(d, lambda: d.find_element(By.XPATH, "//button[text()='Approve']").click())
        rcpt, msg = mailbox.wait(n + 1)
        assert rcpt == ["ada@example.org"] and "approved" in msg["Subject"]
        assert "None." in d.page_source
        loads(d, lambda: d.find_element(By.LINK_TEXT, "Account").click())
        loads(d, lambda: d.find_element(By.XPATH, "//button[text()='Sign out']").click())
        # The researcher makes a node key, sees it once, and revokes it.
        sign_in_by_code(d, hub, mailbox, base, "ada@example.org", tmp_path, "8-ada")
        loads(d, lambda: d.find_element(By.ID, "label").send_keys("lab node 1" + Keys.ENTER))
        key = d.find_element(By.TAG_NAME, "code").text
        assert re.fullmatch(r"gbk1_[0-9a-f]{16}_[0-9a-f]{64}", key), key
        shot(d, tmp_path, "9-key")
        loads(d, lambda: d.find_element(By.LINK_TEXT, "Back to your account").click())
        assert "lab node 1" in d.page_source and key[22:] not in d.page_source
        loads(d, lambda: d.find_element(By.XPATH, "//button[text()='Revoke']").click())
        assert "revoked" in d.page_source
        shot(d, tmp_path, "10-revoked")
    finally:
        hub.stop()
