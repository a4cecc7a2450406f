"""Screenshots of TensorBoard's dashboards for the docs (docs/images/tensorboard_*.png).

    python tools/tensorboard_screenshots.py scalars runs/cnn docs/images/tensorboard_scalars.png
    python tools/tensorboard_screenshots.py graphs runs/mlp2 docs/images/tensorboard_graph.png

Starts TensorBoard on a free port of 127.0.0.1 for LOGDIR, opens the dashboard in headless
Chromium (Debian's ``chromium``) and saves a PNG. Chromium is driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending in NUL on fds 3 and
4), so no browser-automation package is needed; for the Graphs dashboard it clicks
"Color by: Device", so the nodes show the devices the placement chose. Both processes are
stopped by their PIDs; every wait is bounded.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
PAGES = {"scalars": "#scalars&tagFilter=epoch_(loss%7Caccuracy)&_smoothingWeight=0",
         "graphs": "#graphs"}
# clicks the "Device" radio button of the Graphs dashboard (inside Polymer shadow roots)
CLICK_DEVICE = """(() => { const found = [];
  function walk(root) { for (const el of root.querySelectorAll("*")) {
    if (el.tagName === "PAPER-RADIO-BUTTON" && /^\\s*Device\\s*$/.test(el.textContent))
      found.push(el);
    if (el.shadowRoot) walk(el.shadowRoot); } }
  walk(document); found.forEach(e => e.click()); return found.length; })()"""


class Chromium:
    """Headless Chromium and its DevTools pipe."""

    def __init__(self, width: int, height: int) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="tfc-chromium-")
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()
        for fd in (to_chrome, from_chrome):  # (dup2 onto itself keeps close-on-exec)
            os.set_inheritable(fd, True)

        def child_fds() -> None:  # chromium reads commands on fd 3, answers on fd 4
            os.dup2(to_chrome, 3)
            os.dup2(from_chrome, 4)

        self.proc = subprocess.Popen(
            ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}",
             f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 60.0) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" not in self._buffer:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
        raise TimeoutError(f"no answer to {method} in {timeout:g} s")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._out)
        os.close(self._in)
        self._profile.cleanup()


def screenshot(url: str, out: str, script: str | None, settle_s: float, width: int,
               height: int) -> None:
    browser = Chromium(width, height)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1,
                      "mobile": False}, session)
        browser.send("Page.navigate", {"url": url}, session)
        time.sleep(settle_s)  # the dashboards load their data after the page
        if script is not None:
            browser.send("Runtime.evaluate", {"expression": script}, session)
            time.sleep(settle_s / 2)
        png = browser.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
        with open(out, "wb") as f:
            f.write(base64.b64decode(png))
    finally:
        browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", choices=sorted(PAGES))
    parser.add_argument("logdir")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--settle", type=float, default=12.0,
                        help="seconds to let the dashboard render (default 12)")
    parser.add_argument("--size", default="1400x900", help="window size (default 1400x900)")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir",
                               args.logdir, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("error: TensorBoard did not start", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        screenshot(f"http://127.0.0.1:{port}/{PAGES[args.page]}", args.out,
                   CLICK_DEVICE if args.page == "graphs" else None, args.settle, width, height)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
