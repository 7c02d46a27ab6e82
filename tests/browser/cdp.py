"""Headless Debian ``chromium`` driven over the DevTools protocol (a small sync client).

The browser is cut off from every network but this machine's loopback: all traffic goes
to a proxy port where nothing listens (loopback is bypassed, as Chromium always does), and
no host name resolves. Pages can therefore only load what the test server serves.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.live_server import free_port

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--window-size=1280,1000",
    "--remote-debugging-port=0",
]


def chromium_binary() -> str:
    """Debian's chromium; the test FAILS (never skips) without it."""
    path = os.environ.get("DPGATE_CHROMIUM") or shutil.which("chromium")
    if path is None:
        pytest.fail(
            "Debian's `chromium` is not installed, so the browser tests cannot run: "
            "`apt-get install -y chromium` (.ci/run installs it).",
            pytrace=False,
        )
    return path


def offline_flags() -> list[str]:
    dead_port = free_port()  # nothing listens there: every proxied connection is refused
    return [
        f"--proxy-server=http://127.0.0.1:{dead_port}",
        "--proxy-bypass-list=127.0.0.1",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ]


class CDPError(RuntimeError):
    pass


class Page:
    """One page target: commands, the events seen so far, and a few conveniences."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        self._next_id += 1
        msg_id = self._next_id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg["result"]
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": await_promise},
        )
        if "exceptionDetails" in result:
            raise CDPError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 30, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what or expression}; "
            f"page errors: {self.errors()}"
        )

    def navigate(self, url: str, *, timeout: float = 30) -> None:
        """Open ``url`` and return once its load event has fired."""
        seen = len(self.events)
        result = self.send("Page.navigate", {"url": url})
        if "errorText" in result:
            raise CDPError(f"navigating to {url}: {result['errorText']}")
        deadline = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events[seen:]):
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not load within {timeout} s")
            msg = json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if "method" in msg:
                self.events.append(msg)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params |= {
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": size["height"],
                    "scale": 1,
                },
            }
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params)["data"]))
        return path

    def requested_urls(self) -> list[str]:
        self.evaluate("1")  # read the events queued so far
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    def errors(self) -> list[str]:
        """Exceptions, console errors and browser log errors (CSP violations land there)."""
        out = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.exceptionThrown":
                out.append(str(p["exceptionDetails"].get("exception", p["exceptionDetails"])))
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] == "error":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"{p['entry'].get('url', '')}: {p['entry']['text']}")
        return out


def _devtools_port(profile: Path, proc: subprocess.Popen, log: Path) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited early:\n{log.read_text()[-3000:]}")
        if marker.exists() and (lines := marker.read_text().splitlines()):
            return int(lines[0])
        time.sleep(0.05)
    raise RuntimeError(f"chromium did not open its DevTools port:\n{log.read_text()[-3000:]}")


class OfflineBrowser:
    """One headless chromium (empty profile, no network) whose pages each open in a
    browser context of their own (``Target.createBrowserContext``: like a new incognito
    profile, with its own cookies, storage and cache), so one browser serves many tests."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self._launches = 0

    def _launch(self) -> None:
        self._launches += 1
        self.profile = self.workdir / f"chromium-profile-{self._launches}"
        self.profile.mkdir()
        self.log = self.workdir / f"chromium-{self._launches}.log"
        self.proc = subprocess.Popen(
            [chromium_binary(), *FLAGS, *offline_flags(), f"--user-data-dir={self.profile}"],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.port = _devtools_port(self.profile, self.proc, self.log)
        with httpx.Client(trust_env=False) as http:
            info = http.get(f"http://127.0.0.1:{self.port}/json/version", timeout=10).json()
        self.stack = ExitStack()
        ws = connect(info["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.control = Page(self.stack.enter_context(ws))

    @contextmanager
    def page(self) -> Iterator[Page]:
        """A new page in a new, empty browser context (closed with it afterwards)."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._launch()
        context = self.control.send("Target.createBrowserContext")["browserContextId"]
        try:
            target = self.control.send(
                "Target.createTarget", {"url": "about:blank", "browserContextId": context}
            )["targetId"]
            url = f"ws://127.0.0.1:{self.port}/devtools/page/{target}"
            with connect(url, max_size=None, open_timeout=10) as ws:
                page = Page(ws)
                for domain in ("Page", "Network", "Runtime", "Log"):
                    page.send(f"{domain}.enable")
                yield page
        finally:
            self.control.events.clear()
            try:
                self.control.send("Target.disposeBrowserContext", {"browserContextId": context})
            except (CDPError, OSError, TimeoutError):
                self.close()  # the next page starts a new browser

    def close(self) -> None:
        if self.proc is None:
            return
        with suppress(Exception):
            self.stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        with suppress(OSError):
            shutil.rmtree(self.profile)


@contextmanager
def offline_browser(workdir: Path) -> Iterator[OfflineBrowser]:
    """A headless chromium with no network, started at its first page and stopped after."""
    browser = OfflineBrowser(workdir)
    try:
        yield browser
    finally:
        browser.close()
