"""Headless Chromium through selenium (Debian's chromium and chromedriver; nothing downloaded).

``Chrome.visit`` loads a page and checks what every page must hold: no alert opened, no
console error (a script error, a CSP violation, a failed resource), and no serious or
critical axe-core violation (axe-core from the npm registry, pinned and fetched by
scripts/install.sh, given to Chromium by the test: the page itself never loads it). axe-core
runs in an isolated world of each document (``AXE_WORLD``, as a browser extension's content
script does: the same DOM and styles, its own globals), where Chromium evaluates it as the
document is made (``Page.addScriptToEvaluateOnNewDocument``, sent once per browser): it was
sent through chromedriver with every check (~500 KB each time, as long as axe's own run on
these pages), and the page's scripts no longer see an ``axe`` global the test put there.
A blank document (``about:``, the page ``Chrome.reset`` leaves between tests) gets none:
nothing checks one (``Chrome.blank`` says what a reset cost).
The network is closed to Chromium (no name but loopback resolves), as on a machine without
internet: a page that loads anything from outside fails its visit.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
AXE = ROOT / ".venv" / "node" / "node_modules" / "axe-core" / "axe.min.js"
WAIT = 60  # seconds: an upper bound for page state on a loaded machine, never a sleep
POLL = 0.05  # seconds between looks at page state (selenium's default, 0.5 s, is a sleep of its own)
SHOTS = os.environ.get("DATAHUB_SCREENSHOTS")  # a directory to keep screenshots in
AXE_WORLD = "datahub-axe"  # the isolated world axe-core runs in, in every document but a blank one
# axe-core as evaluated in each new document: a blank one is skipped (the module docstring says why)
AXE_UNLESS_BLANK = "if (location.protocol !== 'about:') {{\n{source}\n}}"
AXE_RUN = (
    "axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations),"
    " e => JSON.stringify([{id: 'axe-error', impact: 'critical', help: String(e)}]))"
)


class Chrome:
    def __init__(self, shots: Path) -> None:
        if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
            pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/install.sh)")
        if not AXE.exists():
            pytest.skip(f"axe-core is not installed at {AXE} (scripts/install.sh fetches it)")
        os.environ["SE_OFFLINE"] = "true"  # selenium manager never goes to the network
        options = Options()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--window-size=1360,900",
                    # the network is closed: every name but loopback fails to resolve, so a page
                    # that loads anything from outside (a CDN) shows it as a console error
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
                    "--no-proxy-server"):  # fmt: skip
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.options = options
        self.axe_source = AXE_UNLESS_BLANK.format(source=AXE.read_text())
        self.driver = self._start()
        self.shots = Path(SHOTS) if SHOTS else shots

    def _start(self):
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=self.options)
        driver.set_page_load_timeout(WAIT)
        driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument", {"source": self.axe_source, "worldName": AXE_WORLD}
        )
        return driver

    def close(self) -> None:
        self.driver.quit()

    def reset(self, shots: Path) -> None:
        """Make a shared browser look new to the next test: a blank page, no cookies (the
        servers all live on 127.0.0.1, and a cookie's scope is the host, not the port), no
        cache, no alert, no console entries left over, the default window size."""
        try:
            with contextlib.suppress(NoAlertPresentException):
                self.driver.switch_to.alert.dismiss()
            self.blank()
            self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
            self.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
            self.driver.get_log("browser")  # drained: each test sees only its own pages' entries
            self.driver.set_window_size(1360, 900)
        except WebDriverException:  # an earlier test left it unusable: a new one
            with contextlib.suppress(WebDriverException):
                self.driver.quit()
            self.driver = self._start()
        self.shots = Path(SHOTS) if SHOTS else shots

    def blank(self) -> None:
        """Replace the page with a blank one, opened by the page itself (``location.replace``).

        Why not ``driver.get("about:blank")``: a navigation the browser starts leaves the site,
        so Chromium started a new renderer process for the blank page and another for the next
        test's first page on 127.0.0.1, and compiled axe-core again in each: 0.88 against
        0.32 CPU-s of Chromium a reset, 2.1 against 1.3 CPU-s for a reset and two checked pages
        (3.0 against 2.0 s of wall, load 14-18). A page still there after 10 s is left the
        browser's way; a prompt before it unloads raises, and ``reset`` starts a new Chromium."""
        try:
            self.driver.execute_script("location.replace('about:blank')")
            WebDriverWait(self.driver, 10, poll_frequency=POLL).until(
                lambda d: d.execute_script("return document.URL") == "about:blank"
            )
        except TimeoutException:
            self.driver.get("about:blank")

    def visit(self, url: str, shot: str | None = None, *, axe: bool = True, error_page: bool = False) -> None:
        """``error_page``: the page itself answers 4xx (Chromium logs that one load, and only it)."""
        self.driver.get(url)
        self.settle()
        self.check(shot, axe=axe, page_error=url if error_page else None)

    def wait_for_url(self, check) -> None:
        """Wait until the page's URL satisfies ``check`` (after a click that navigates), then settle."""
        self.until(lambda d: check(d.current_url))
        self.settle()

    def until(self, condition):
        """``condition(driver)``'s first true value, looked at every ``POLL`` s for up to ``WAIT``."""
        return WebDriverWait(self.driver, WAIT, poll_frequency=POLL).until(condition)

    def settle(self) -> None:
        """Wait until the page and its images finished loading."""
        self.until(
            lambda d: d.execute_script(
                "return document.readyState === 'complete' && "
                "Array.from(document.images).every(i => i.complete)"
            )
        )

    def check(self, shot: str | None = None, *, axe: bool = True, page_error: str | None = None) -> None:
        self.no_alert()
        if shot:
            self.screenshot(shot)
        errors = [
            e
            for e in self.driver.get_log("browser")
            if e["level"] == "SEVERE" and not (page_error and e["message"].startswith(page_error + " "))
        ]
        assert errors == [], f"console errors on {self.driver.current_url}: {errors}"
        if axe:
            bad = self.axe()
            assert bad == [], f"axe-core on {self.driver.current_url}: {json.dumps(bad, indent=1)[:4000]}"

    def no_alert(self) -> None:
        try:
            alert = self.driver.switch_to.alert
        except NoAlertPresentException:
            return
        text = alert.text
        alert.dismiss()
        raise AssertionError(f"an alert opened on {self.driver.current_url}: {text!r}")

    def axe(self) -> list[dict]:
        """Serious and critical violations axe-core finds on the current page (the top frame's
        document), run in its isolated world ``AXE_WORLD``: the page's CSP does not apply."""
        frame = self.driver.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["id"]
        world = self.driver.execute_cdp_cmd(
            "Page.createIsolatedWorld", {"frameId": frame, "worldName": AXE_WORLD}
        )
        answer = self.driver.execute_cdp_cmd(
            "Runtime.evaluate",
            {
                "expression": AXE_RUN,
                "contextId": world["executionContextId"],
                "awaitPromise": True,
                "returnByValue": True,
            },
        )
        if "exceptionDetails" in answer:  # axe-core missing from the world: a check not made is a failure
            raise AssertionError(
                f"axe-core did not run on {self.driver.current_url}: {answer['exceptionDetails']}"
            )
        violations = json.loads(answer["result"]["value"])
        return [
            {
                "id": v["id"],
                "impact": v["impact"],
                "help": v.get("help"),
                "nodes": [n.get("html", "")[:200] for n in v.get("nodes", [])][:5],
            }  # fmt: skip
            for v in violations
            if v.get("impact") in ("serious", "critical")
        ]

    def screenshot(self, name: str) -> Path | None:
        """The whole page as ``<shots>/<name>.png`` when ``DATAHUB_SCREENSHOTS`` names a
        directory; otherwise none is taken, and the window goes through the same sizes (as
        tall as the page, then back to 1360 x 900), so what the test does next sees the same
        window either way.

        Why: nothing reads a screenshot; they are for a person looking at the pages. Each was a
        full-page capture and PNG in Chromium, sent through chromedriver and written to the
        test's temp tree: 0.12-0.52 s of wall a shot at load 7-9 (the two resizes alone:
        0.02-0.12 s), 64 shots in test_in_chromium, test_newuser_labelx, test_narrow,
        test_newuser17 and test_newuser19 alone. LabelX's Playwright tests already took them
        only when asked (tests/labelx/test_browser.py ``shot``)."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1360, min(max(900, height), 4000))
        path = self.save_view(name)
        self.driver.set_window_size(1360, 900)
        return path

    def save_view(self, name: str) -> Path | None:
        """The window as it is as ``<shots>/<name>.png``, only when ``DATAHUB_SCREENSHOTS`` is
        set (``screenshot`` says why)."""
        if not SHOTS:
            return None
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def attrs(self, css: str, name: str) -> list[str | None]:
        """Attribute ``name`` of every element ``css`` selects, in document order, read in ONE
        round trip (``getAttribute``, what ``get_attribute`` answers for a ``data-*`` one).

        Why: ``[e.get_attribute(name) for e in find_all(css)]`` is a chromedriver round trip
        per element: a page of 100 records' keys cost ~1 s of wall, 5.9 of test_million's
        30 s (suite38)."""
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.getAttribute(arguments[1]))",
            css,
            name,
        )


@pytest.fixture
def chrome(chromium: Chrome, tmp_path: Path) -> Chrome:
    """The package's one Chromium (``chromium`` in tests/browser/conftest.py), reset for this test."""
    chromium.reset(tmp_path / "shots")
    return chromium
