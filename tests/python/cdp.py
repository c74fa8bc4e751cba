"""A headless Chromium driven over the DevTools protocol, for tests and benchmarks of hbmalloc view's page
(tests/python/browser.py, bench/view_scale.py). Needs Debian's chromium and python3-websocket."""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket  # Debian: python3-websocket


def chromium():
    for c in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(c)
        if p:
            return p
    sys.exit("FAIL browser: no Chromium on PATH (Debian: apt install chromium; scripts/deps.sh installs it)")


class Browser:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="hbm-chromium-")
        self.proc = subprocess.Popen(
            [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=" + self.dir, "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.dir, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().count("\n") >= 1:
                break
            time.sleep(0.1)
        port = open(port_file).read().split("\n")[0]
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%s/json/list" % port, timeout=30))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0
        self.events = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")

    def call(self, method, **params):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == my:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            for k, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(k)
            self.ws.settimeout(max(end - time.time(), 0.1))
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
        raise RuntimeError("no " + method)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def open(self, path):
        self.events = []
        self.call("Page.navigate", url="file://" + os.path.abspath(path))
        self.wait_event("Page.loadEventFired")

    def problems(self):
        """Console errors, exceptions, and requests for anything but the file itself."""
        self.call("Runtime.evaluate", expression="0")  # collect what has arrived
        out = []
        for m in self.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p["exceptionDetails"])[:300])
            elif meth == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
                out.append("console %s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description")))
                                                                   for a in p["args"])[:300]))
            elif meth == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append("log: " + p["entry"]["text"][:300])
            elif meth == "Network.requestWillBeSent" and not p["request"]["url"].startswith(("file:", "data:")):
                out.append("request: " + p["request"]["url"])
        return out

    def key(self, key, code, vk, shift=False):
        mods = 8 if shift else 0
        for t in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=t, key=key, code=code, windowsVirtualKeyCode=vk, modifiers=mods)

    def width(self, w, h=1000):
        """The window's size in CSS pixels (None: back to the browser's own 1280 x 1000)."""
        if w is None:
            self.call("Emulation.clearDeviceMetricsOverride")
        else:
            self.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=False)

    def mouse(self, kind, x, y, **more):
        """A mouse event at client point (x, y): moved, pressed, released (left button), or wheel."""
        t = {"moved": "mouseMoved", "pressed": "mousePressed", "released": "mouseReleased", "wheel": "mouseWheel"}[kind]
        if kind in ("pressed", "released"):
            more.setdefault("button", "left")
            more.setdefault("clickCount", 1)
        self.call("Input.dispatchMouseEvent", type=t, x=x, y=y, **more)

    def screenshot(self, path):
        """The whole page, as wide as the window."""
        w, h = self.js("[window.innerWidth, document.documentElement.scrollHeight]")
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                                         clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})["data"])
        with open(path, "wb") as f:
            f.write(png)
        return png

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.dir, ignore_errors=True)
