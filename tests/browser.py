"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages,
NUL-terminated, on the child's file descriptors 3 and 4; no websocket, no dependency). The report's browser
test uses it to load a page and collect every console error, uncaught exception and network request; run
as a script it also writes the PNG screenshot docs/results.md shows:

    python tests/browser.py REPORT.html --screenshot docs/report.png [--width 1200 --height 1400]
    python tests/browser.py REPORT.html --open pytorch_nchw_fp32_ws1_ga2 --screenshot docs/report-steps.png
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-default-apps", "--mute-audio", "--remote-debugging-pipe")
"""No sandbox (we run as root in CI), no GPU, nothing that would reach the network on its own."""


def chromium_path() -> str | None:
    """The Chromium (or Chrome) binary on PATH, or None."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@dataclass
class PageLoad:
    """What a page did while it loaded: console errors, uncaught exceptions, log errors, every request."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium process and one page; `with Browser() as b: b.load(path)`."""

    def __init__(self, binary: str | None = None, *, timeout_s: float = 30.0):
        self.binary = binary or chromium_path()
        if self.binary is None:
            raise FileNotFoundError("no chromium on PATH")
        self.timeout_s = timeout_s
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> "Browser":
        self._profile = tempfile.mkdtemp(prefix="nvbench-chromium-")
        to_child, self._write = os.pipe()  # we write commands, Chromium reads its fd 3
        self._read, from_child = os.pipe()  # Chromium writes its fd 4, we read

        def child_fds() -> None:  # runs in the child before exec: put the pipe ends where Chromium looks
            high = [os.dup(fd) for fd in (to_child, from_child)]  # neither may be 3 or 4 while we move them
            os.dup2(high[0], 3)  # dup2 leaves the copy inheritable: it survives exec
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen([self.binary, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=child_fds)
        os.close(to_child)
        os.close(from_child)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=self.session)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close")
        except (OSError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._write)
        os.close(self._read)
        shutil.rmtree(self._profile, ignore_errors=True)

    # the protocol --------------------------------------------------------------------------

    def call(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer; events that arrive meanwhile are kept."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._events.append(reply)

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer within {self.timeout_s:g} s")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe (did it start?)")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _wait_for(self, method: str) -> None:
        while not any(e.get("method") == method for e in self._events):
            self._events.append(self._receive())

    # pages ---------------------------------------------------------------------------------

    def load(self, path: Path, *, settle_s: float = 0.5) -> PageLoad:
        """Open a local file, wait for its load event and `settle_s` more (late timers), and say what happened."""
        self._events.clear()
        self.call("Page.navigate", session=self.session, url=Path(path).resolve().as_uri())
        self._wait_for("Page.loadEventFired")
        self.evaluate(f"new Promise(r => setTimeout(r, {int(1000 * settle_s)}))")
        return self._page_load()

    def _page_load(self) -> PageLoad:
        out = PageLoad()
        for e in self._events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.errors.append("exception: " + (details.get("exception", {}).get("description")
                                                   or details.get("text", "?")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.errors.append("console." + params["type"] + ": " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Network.requestWillBeSent":
                out.requests.append(params["request"]["url"])
        return out

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited); a thrown error raises."""
        result = self.call("Runtime.evaluate", session=self.session, expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait(self, expression: str, *, timeout_s: float = 10.0) -> bool:
        """Whether `expression` (JavaScript) became true within `timeout_s`, polled in the page every 50 ms (a chart
        is drawn after the event that asks for it)."""
        return bool(self.evaluate(f"(async () => {{ const end = Date.now() + {1000 * timeout_s:.0f}; "
                                  f"while (Date.now() < end) {{ if ({expression}) return true; "
                                  "await new Promise(r => setTimeout(r, 50)); } return false; })()"))

    def mouse_move(self, x: float, y: float) -> None:
        """Move the mouse to (x, y) CSS pixels of the window, as a person would (hover)."""
        self.call("Input.dispatchMouseEvent", session=self.session, type="mouseMoved", x=x, y=y)

    def viewport(self, width: int, height: int) -> None:
        """Lay pages out in a window of `width` x `height` CSS pixels (as a desktop browser at 100 %)."""
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def screenshot_png(self, width: int = 1200, height: int = 1400) -> bytes:
        """A PNG of what the window shows, `width` x `height` CSS pixels."""
        self.viewport(width, height)
        return base64.b64decode(self.call("Page.captureScreenshot", session=self.session, format="png")["data"])

    def screenshot(self, out: Path, *, width: int = 1200, height: int = 1400) -> Path:
        """A PNG of the page's top `width` x `height` CSS pixels, written to `out`."""
        Path(out).write_bytes(self.screenshot_png(width, height))
        return Path(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("page", type=Path)
    p.add_argument("--screenshot", type=Path, help="write a PNG of the page's top here")
    p.add_argument("--width", type=int, default=1200)
    p.add_argument("--height", type=int, default=1400)
    p.add_argument("--open", metavar="CELL", help="open this cell's step times (its label) and scroll to it")
    args = p.parse_args(argv)
    with Browser() as browser:
        load = browser.load(args.page)
        for problem in load.errors:
            print(problem)
        if args.open:
            browser.evaluate(f"(d => {{ d.open = true; d.scrollIntoView(); }})(Array.from(document.querySelectorAll("
                             f"'#steps details')).find(d => d.querySelector('code').textContent === {json.dumps(args.open)}))")
        if args.screenshot:
            browser.viewport(args.width, args.height)
            browser.wait("Array.from(document.querySelectorAll('.plot')).filter(b => { const r = "
                         "b.getBoundingClientRect(); return r.width > 0 && r.top < innerHeight && r.bottom > 0; })"
                         ".every(b => b.hasAttribute('data-ready'))")  # the charts in view drawn first
            print(browser.screenshot(args.screenshot, width=args.width, height=args.height))
    return 1 if load.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
