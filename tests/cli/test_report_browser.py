"""The report page in a real headless Chromium (Debian's package), driven over the DevTools protocol.

For each public store (and for all of them on one page): the page loads with no console error and no
network request but its own file, every chart's SVG has marks and a size, and a 1280x800 screenshot
is kept in ``test-artifacts/`` (ignored by git). Skipped, with the reason, when Chromium cannot start.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ALL_REAL_CASES, REAL_STORES, REPO, case_dir
from typer.testing import CliRunner

from rmqstore.cli import app

websocket = pytest.importorskip("websocket", reason="websocket-client (the dev extra) is not installed")
ARTIFACTS = REPO / "test-artifacts"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--window-size=1280,800",
)  # fmt: skip
CHARTS_JS = """JSON.stringify([...document.querySelectorAll('figure.chart')].map(f => {
  const s = f.querySelector('svg'); const r = s ? s.getBoundingClientRect() : {width: 0, height: 0};
  return {name: f.dataset.chart, marks: s ? s.querySelectorAll('.mark').length : 0, width: r.width, height: r.height,
          rows: f.querySelectorAll('table tbody tr').length};
}))"""


class Browser:
    """One Chromium process and a DevTools session on one page."""

    def __init__(self, tmp: Path) -> None:
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            pytest.skip("chromium is not installed (apt-get install -y chromium)")
        profile = tmp / "profile"
        profile.mkdir()
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        url = self._devtools_url()
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=1280, height=800, deviceScaleFactor=1, mobile=False)  # fmt: skip

    def _devtools_url(self) -> str:
        deadline = time.monotonic() + 30
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                pytest.skip(f"chromium exited with {self.proc.returncode} before its DevTools port opened")
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
        self.close()
        pytest.skip("chromium did not open its DevTools port within 30 s")

    def call(self, method: str, *, session: bool = False, **params: object) -> dict:
        msg_id = next(self.ids)
        msg: dict = {"id": msg_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            got = json.loads(self.ws.recv())
            if got.get("id") == msg_id:
                assert "error" not in got, got
                return got.get("result", {})
            self.events.append(got)

    def load(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, "the page did not load within 30 s"
            self.events.append(json.loads(self.ws.recv()))

    def errors(self) -> list[dict]:
        out = [e for e in self.events if e.get("method") == "Runtime.exceptionThrown"]
        out += [
            e for e in self.events if e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error"
        ]
        out += [
            e for e in self.events if e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
        ]
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def evaluate(self, js: str) -> object:
        return self.call("Runtime.evaluate", session=True, expression=js, returnByValue=True)["result"]["value"]

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - the socket may not exist yet
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    b = Browser(tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


def _check_page(browser: Browser, page: Path, shot: str) -> list[dict]:
    url = page.resolve().as_uri()
    browser.load(url)
    assert browser.errors() == []
    assert browser.requests() == [url]  # the page itself, nothing else
    charts = json.loads(browser.evaluate(CHARTS_JS))
    assert charts
    for c in charts:
        assert c["marks"] > 0 and c["width"] > 0 and c["height"] > 0 and c["rows"] > 0, c
    ARTIFACTS.mkdir(exist_ok=True)
    browser.screenshot(ARTIFACTS / shot)
    assert (ARTIFACTS / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return charts


@pytest.mark.parametrize("case", ALL_REAL_CASES)
def test_report_page_in_chromium(case, browser, tmp_path):
    store = case_dir(case) / "store"
    if not store.is_dir():
        pytest.skip(f"real store not found at {store}")
    page = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", str(store), "-o", str(page), "-q"])
    assert r.exit_code == 0, r.output
    charts = _check_page(browser, page, f"report-{case.replace('/', '-')}.png")
    names = {c["name"] for c in charts}
    assert {"disk-kinds", "disk-topics", "commitlog-files", "traffic-messages", "traffic-bytes", "top-queues"} <= names


def test_report_of_several_stores_in_chromium(browser, tmp_path):
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    page = tmp_path / "stores.html"
    r = CliRunner().invoke(app, ["report", f"{REAL_STORES}/*/store", "-o", str(page), "-q"])
    assert r.exit_code == 0, r.output
    charts = _check_page(browser, page, "report-several-stores.png")
    assert "stores-bytes" in {c["name"] for c in charts}
