"""The built book as a reader sees it, in headless Chromium (issue 9).

Run by `make browser` after `make book`: every chapter page is served from _build/html on 127.0.0.1
and opened through the Chrome DevTools protocol. Checked on each page: math typeset by the local MathJax,
figures loaded and non-empty, code cells and their outputs rendered and none wider than the page
(issue 28), the Colab button pointing at the chapter's notebook, no console error, no request leaving the
machine, and no serious or critical accessibility violation found by axe-core (installed from npm by
`make browser`). Screenshots are kept in _build/screenshots as build artefacts.
"""

import base64
import functools
import http.server
import json
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import websocket
import yaml

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PAGES = ["intro"] + sorted(f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.ipynb")) + ["references"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture(scope="module")
def site():
    """_build/html on an ephemeral localhost port."""
    if not (HTML / "index.html").exists():
        pytest.fail("build the book first: make book")
    handler = functools.partial(QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Page:
    """One Chromium tab driven over the DevTools protocol: commands, and the events they cause."""

    def __init__(self, ws_url: str):
        self.ws = websocket.create_connection(ws_url, timeout=30)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(e.get("method") == method for e in self.events):
                return
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(f"no {method} within {timeout} s")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def drain(self, seconds: float):
        """Collect events for a while (late console errors and requests)."""
        self.ws.settimeout(0.2)
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        self.ws.settimeout(30)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("Chromium is not installed: `make browser` installs it from the OS's packages")
    process, profile, port = start_chromium()
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(10)
    shutil.rmtree(profile, ignore_errors=True)


CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                  "--remote-debugging-port=0", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--window-size=1280,2000"]
START_SECONDS = 90  # a cold first start on a fresh machine builds font caches; 10 s was not always enough


def start_chromium(attempts: int = 2):
    """Start headless Chromium; return (process, profile folder, DevTools port), or fail with its log."""
    for attempt in range(1, attempts + 1):
        profile = tempfile.mkdtemp()
        log = Path(profile + ".log")
        with log.open("wb") as err:
            process = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                       stdout=subprocess.DEVNULL, stderr=err)
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and process.poll() is None:
            if port_file.exists() and port_file.read_text().strip():
                return process, profile, port_file.read_text().split()[0]
            time.sleep(0.2)
        process.kill()
        process.wait(10)
        tail = log.read_text(errors="replace")[-3000:]
        log.unlink()
        shutil.rmtree(profile, ignore_errors=True)
        print(f"Chromium start {attempt}/{attempts} failed (exit code {process.returncode}); its log ends:\n{tail}")
    pytest.fail(f"{CHROMIUM} wrote no {port_file.name} within {START_SECONDS} s in {attempts} attempts "
                f"(its log is printed above)")


def open_page(browser: str, url: str) -> Page:
    request = urllib.request.Request(f"{browser}/json/new?about:blank", method="PUT")
    target = json.loads(urllib.request.urlopen(request).read())
    page = Page(target["webSocketDebuggerUrl"])
    page.send("Page.navigate", url=url)
    page.wait_for("Page.loadEventFired")
    return page


def full_page_screenshot(page: Page, width: int = 1280, max_height: int = 30000) -> bytes:
    """The whole page as PNG, taken in a viewport as tall as the page (captureBeyondViewport drew it shifted)."""
    size = page.send("Page.getLayoutMetrics")["cssContentSize"]
    height = min(int(size["height"]) + 1, max_height)
    page.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
    time.sleep(0.5)  # let the page lay itself out again at the new height
    shot = page.send("Page.captureScreenshot", format="png")
    page.send("Emulation.clearDeviceMetricsOverride")
    return base64.b64decode(shot["data"])


def console_errors(page: Page) -> list[str]:
    errors = []
    for event in page.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            errors.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(f"{params['entry']['text']} {params['entry'].get('url', '')}".strip())
    return errors


def accessibility_violations(page: Page) -> list:
    """axe-core's serious and critical findings on the page: (rule, impact, the first elements' selectors)."""
    if not AXE.exists():
        pytest.fail("axe-core is not installed: `make browser` installs it from npm (package.json)")
    page.evaluate(AXE.read_text() + "; true")
    return page.evaluate("""axe.run(document, {resultTypes: ['violations']}).then(result => result.violations
        .filter(v => v.impact === 'serious' || v.impact === 'critical')
        .map(v => [v.id, v.impact, v.nodes.slice(0, 3).map(n => n.target.join(' '))]))""")


@pytest.mark.parametrize("name", PAGES)
def test_page_as_a_reader_sees_it(site, browser, name):
    path = HTML / f"{name}.html"
    page = open_page(browser, f"{site}/{name}.html")
    try:
        html = path.read_text()
        expects_math = 'class="math' in html
        if expects_math:  # MathJax typesets asynchronously: wait for its promise
            page.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise.then(() => true) : false")
        page.drain(1.0)
        state = page.evaluate("""({
            math: document.querySelectorAll('mjx-container').length,
            mathErrors: document.querySelectorAll('mjx-merror').length,
            rawMath: Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length,
            images: Array.from(document.querySelectorAll('main img')).map(i => [i.src, i.complete, i.naturalWidth, i.naturalHeight]),
            codeCells: document.querySelectorAll('div.cell div.cell_input').length,
            outputs: document.querySelectorAll('div.cell div.cell_output').length,
            colab: Array.from(document.querySelectorAll('a[href*="colab.research.google.com"]')).map(a => a.href),
            searchFields: Array.from(document.querySelectorAll('.search-button-field')).filter(e => e.offsetParent).length,
            overflowing: Array.from(document.querySelectorAll('main pre, main div.highlight, main div.cell_output'))
                .filter(e => e.scrollWidth > e.clientWidth + 1)
                .map(e => (e.innerText || '').split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '')),
        })""")
        violations = accessibility_violations(page)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / f"{name.replace('/', '_')}.png").write_bytes(full_page_screenshot(page))

        errors = console_errors(page)
        assert errors == [], f"{name}: console errors {errors}"
        assert violations == [], f"{name}: accessibility violations {violations}"
        outgoing = [e["params"]["request"]["url"] for e in page.events if e.get("method") == "Network.requestWillBeSent"
                    and not e["params"]["request"]["url"].startswith((site, "data:", "blob:", "about:"))]
        assert outgoing == [], f"{name}: requests leaving the machine"
        assert state["overflowing"] == [], \
            f"{name}: {len(state['overflowing'])} code or output blocks scroll sideways at 1280 px, " \
            f"widest lines {state['overflowing'][:3]}"
        assert state["searchFields"] == 1, f"{name}: {state['searchFields']} search fields shown (one, in the sidebar)"
        if expects_math:
            assert state["math"] > 0 and state["mathErrors"] == 0 and state["rawMath"] == 0, f"{name}: math {state}"
        for src, complete, width, height in state["images"]:
            assert complete and width > 0 and height > 0, f"{name}: image {src} did not load"
        if name.startswith("chapters/"):
            assert state["codeCells"] > 0 and state["outputs"] > 0, f"{name}: code cells or outputs missing"
            figures = html.count('src="../_images/')
            assert len(state["images"]) >= figures > 0, f"{name}: figures missing"
            repository = CONFIG["repository"]["url"].removeprefix("https://github.com/")
            expected = f"https://colab.research.google.com/github/{repository}/blob/main/{name}.ipynb"
            assert state["colab"] == [expected], f"{name}: Colab button {state['colab']}"
            assert (ROOT / f"{name}.ipynb").exists()
    finally:
        page.ws.close()
