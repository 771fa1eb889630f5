#!/usr/bin/env python3
"""A screenshot of the settings view's "Models from the hub" with a download in progress, and
`strata-desk pull`'s output, against a LOCAL FAKE HUB (no hub is reachable from the machines
this is made on): it serves the test model (SmolLM2-135M-Instruct Q4_1) under its repository
with the hub's shapes (tree listing, resolve, Range), throttled to 2 MB/s so the download is
seen in progress. The window runs the simulated engine under Xvfb; xdotool clicks.

  python3 scripts/models-shot.py --exe target/debug/strata-desk --model PATH [--out docs] \
      [--click X,Y | type:TEXT | scroll:N | wait:SECS ...]

The clicks are the window's coordinates at 1100x720, found from a first shot; the shot in
docs was made with:
  --click 71,81 165,393 scroll:10 320,323 type:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF \
      512,324 wait:3 scroll:10 227,480 wait:12
(Settings and model, the hub section, scroll, the repository box, List files, scroll,
Download, then 12 s of the download.)

Writes <out>/models-hub.png and <out>/models-pull.txt. Needs Xvfb, xdotool, ImageMagick's
`import`, the standard library only.
"""

import argparse
import hashlib
import http.server
import json
import os
import re
import subprocess
import tempfile
import threading
import time

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
FILE = "smollm2-135m-instruct-q4_1.gguf"
DISPLAY = ":79"
WINDOW = (1100, 720)
RATE_BYTES_PER_SEC = 2_000_000


def fake_hub(model_bytes):
    sha = hashlib.sha256(model_bytes).hexdigest()
    listing = json.dumps(
        [
            {"type": "file", "oid": "0" * 40, "size": 1519, "path": ".gitattributes"},
            {
                "type": "file",
                "oid": "1" * 40,
                "size": len(model_bytes),
                "path": FILE,
                "lfs": {"oid": sha, "size": len(model_bytes), "pointerSize": 135},
            },
        ]
    ).encode()

    class Hub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.startswith(f"/api/models/{REPO}/tree/"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(listing)))
                self.end_headers()
                self.wfile.write(listing)
            elif self.path.startswith(f"/{REPO}/resolve/main/{FILE}"):
                self.send_response(302)
                self.send_header("Location", f"/cdn/{FILE}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path.startswith(f"/cdn/{FILE}"):
                start, end = 0, len(model_bytes)
                m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
                if m:
                    start = int(m.group(1))
                    if m.group(2):
                        end = min(end, int(m.group(2)) + 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(model_bytes)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                chunk = 64 * 1024
                throttle = end - start > 16 << 20  # a download, not a header read
                try:
                    for at in range(start, end, chunk):
                        self.wfile.write(model_bytes[at : min(end, at + chunk)])
                        if throttle:
                            time.sleep(chunk / RATE_BYTES_PER_SEC)
                except (BrokenPipeError, ConnectionResetError):
                    pass
            else:
                body = b"not found"
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def xdo(*args):
    env = dict(os.environ, DISPLAY=DISPLAY)
    return subprocess.run(["xdotool", *args], check=True, capture_output=True, text=True, env=env).stdout


def click(x, y):
    xdo("mousemove", str(x), str(y), "click", "1")
    time.sleep(0.8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="docs")
    ap.add_argument("--click", nargs="*", default=[], help="x,y pairs to click (found from a first shot)")
    args = ap.parse_args()
    endpoint = fake_hub(open(args.model, "rb").read())
    home = tempfile.mkdtemp()
    env = dict(
        os.environ,
        DISPLAY=DISPLAY,
        HOME=home,
        XDG_CONFIG_HOME=f"{home}/cfg",
        XDG_DATA_HOME=f"{home}/data",
        HF_ENDPOINT=endpoint,
    )
    env.pop("HF_TOKEN", None)

    # the terminal's view first: strata-desk pull at the same 2 MB/s, its progress a line
    # every tenth (stderr is not a terminal here, as in a log)
    pull = None if os.environ.get("SKIP_PULL") else subprocess.run(
        [args.exe, "pull", REPO, "--dir", f"{home}/pulled"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pull is not None:
        with open(f"{args.out}/models-pull.txt", "w") as f:
            f.write(f"$ HF_ENDPOINT={endpoint} strata-desk pull {REPO}\n")
            f.write(pull.stderr)
            f.write(pull.stdout)
        print(pull.stderr + pull.stdout)

    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", f"{WINDOW[0]}x{WINDOW[1]}x24"])
    time.sleep(1)
    app = subprocess.Popen(
        [args.exe, "--engine", "sim", "--port", "18471"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(6)
        for pair in args.click:
            if pair.startswith("type:"):
                # no window manager: give the window the keyboard first
                window = xdo("getmouselocation", "--shell").split("WINDOW=")[1].split()[0]
                xdo("windowfocus", "--sync", window)
                xdo("type", "--delay", "30", pair[5:])
                time.sleep(0.5)
            elif pair.startswith("scroll:"):
                # the wheel, down, where the pointer is
                xdo("click", "--repeat", pair[7:], "--delay", "50", "5")
                time.sleep(0.8)
            elif pair.startswith("wait:"):
                time.sleep(float(pair[5:]))
            else:
                x, y = pair.split(",")
                click(int(x), int(y))
        time.sleep(1)
        subprocess.run(
            ["import", "-display", DISPLAY, "-window", "root", f"{args.out}/models-hub.png"],
            check=True,
        )
    finally:
        app.terminate()
        app.wait(timeout=10)
        xvfb.terminate()


if __name__ == "__main__":
    main()
