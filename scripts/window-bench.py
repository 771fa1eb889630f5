#!/usr/bin/env python3
"""The desktop app's cost, measured under Xvfb with the real engine (docs/BENCHMARKS.md).

  python3 scripts/window-bench.py --exe target/debug/strata-desk [--rounds 3] [--shot docs/dashboard.png]
      [--idle-shot docs/dashboard-idle.png] [--refused-shot docs/dashboard-refused.png]

Starts Xvfb, then, in turns, the app with its window (glow) and `--headless`, each serving the
default model with `solo_priority` on. For each it reports:
  - the app process's CPU (the window, the HTTP server and the scheduler; not the engine
    worker) idle for 20 s, and while a stream decodes with a second request waiting;
  - the engine's decode tokens/s of a 256-token stream (ignore_eos, greedy), the same
    request in both, alternating window and headless for --rounds rounds.
With --shot it also saves a screenshot of the window while a long stream is parked for a
short, higher-priority request and a third request waits; with --idle-shot, one of the window
idle after its start; with --refused-shot, one after a prompt longer than the model's context
(sent as Claude Code sends it) was refused, with the banner that says what to do.
Needs: Xvfb, ImageMagick's `import`, the standard library only.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PORT = 8093
# The window's default size (src/gui/mod.rs).
WINDOW = (1100, 720)
BASE = f"http://127.0.0.1:{PORT}"


def post_stream(body, marks):
    """Streams a chat completion; appends (time, delta) for every content delta to marks."""
    body = dict(body, stream=True)
    req = urllib.request.Request(
        BASE + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    marks.append(time.monotonic())


def chat(text, max_tokens, priority=None):
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if priority is not None:
        body["priority"] = priority
    return body


def wait_ready(proc, timeout=300):
    started = time.time()
    while time.time() - started < timeout:
        if proc.poll() is not None:
            sys.exit(f"the app exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(BASE + "/v1/scheduler", timeout=2) as resp:
                if json.load(resp)["engine"]["state"] == "ready":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("the engine never became ready")


def cpu_secs(pid):
    """User + system CPU seconds of one process so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_percent(pid, secs):
    before, t0 = cpu_secs(pid), time.monotonic()
    time.sleep(secs)
    return 100.0 * (cpu_secs(pid) - before) / (time.monotonic() - t0)


def decode_rate():
    marks = []
    post_stream(chat("Write a long story about a lighthouse keeper.", 256), marks)
    return (len(marks) - 1) / (marks[-1] - marks[0])


def start(exe, window, config_path, env):
    args = [exe, "--config", config_path, "--port", str(PORT), "--solo-priority"]
    if not window:
        args.append("--headless")
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    wait_ready(proc)
    return proc


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def busy_cpu(pid):
    """The app's CPU while a stream decodes and another request waits."""
    threads = [
        threading.Thread(target=post_stream, args=(chat("Count slowly.", 400), [])),
    ]
    threads[0].start()
    time.sleep(1.5)
    threads.append(threading.Thread(target=post_stream, args=(chat("And you?", 300), [])))
    threads[1].start()
    time.sleep(1.0)
    cpu = cpu_percent(pid, 4.0)
    for t in threads:
        t.join()
    return cpu


def screenshot(path):
    long_marks, short_marks = [], []
    long = threading.Thread(
        target=post_stream, args=(chat("Tell me everything about rivers.", 600), long_marks)
    )
    long.start()
    while len(long_marks) < 40:
        time.sleep(0.05)
    waiter = threading.Thread(target=post_stream, args=(chat("A low-priority chore.", 64, -5), []))
    waiter.start()
    short = threading.Thread(
        target=post_stream, args=(chat("Quick: what is 2+2?", 160, 10), short_marks)
    )
    short.start()
    while len(short_marks) < 60:
        time.sleep(0.02)
    time.sleep(0.5)
    shoot(path)
    for t in (long, waiter, short):
        t.join()


def shoot(path):
    crop = f"{WINDOW[0]}x{WINDOW[1]}+0+0"
    subprocess.run(["import", "-display", ":77", "-window", "root", "-crop", crop, "+repage", path],
                   check=True)


def refused(path):
    """A prompt longer than the context, refused with 400; then the window with its banner."""
    words = "the quick brown fox jumps over the lazy dog " * 1200
    req = urllib.request.Request(
        BASE + "/v1/chat/completions",
        data=json.dumps(chat(words, 64)).encode(),
        headers={"content-type": "application/json",
                 "user-agent": "claude-cli/2.0.1 (external, cli)"},
    )
    try:
        urllib.request.urlopen(req, timeout=120)
        sys.exit("a prompt longer than the context was not refused")
    except urllib.error.HTTPError as e:
        if e.code != 400:
            sys.exit(f"a prompt longer than the context got {e.code}, not 400")
    time.sleep(1.5)
    shoot(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shot")
    parser.add_argument("--idle-shot")
    parser.add_argument("--refused-shot")
    args = parser.parse_args()

    # A screen larger than the window, so Xvfb's pointer (at its centre) is off the window and
    # opens no tooltip; the shots are cropped to the window's default size.
    xvfb = subprocess.Popen(["Xvfb", ":77", "-screen", "0", f"{2 * WINDOW[0] + 40}x{2 * WINDOW[1] + 40}x24"])
    time.sleep(1.0)
    env = dict(os.environ, DISPLAY=":77", LIBGL_ALWAYS_SOFTWARE="1")
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    config.write("{}")
    config.close()
    results = {"window": {"rates": [], "idle": [], "busy": []},
               "headless": {"rates": [], "idle": [], "busy": []}}
    try:
        for round_no in range(args.rounds):
            for mode in ("window", "headless"):
                proc = start(args.exe, mode == "window", config.name, env)
                time.sleep(3.0)
                first_window = mode == "window" and round_no == 0
                if args.idle_shot and first_window:
                    shoot(args.idle_shot)
                r = results[mode]
                r["idle"].append(cpu_percent(proc.pid, 20.0))
                r["busy"].append(busy_cpu(proc.pid))
                r["rates"].append(decode_rate())
                if args.shot and first_window:
                    screenshot(args.shot)
                if args.refused_shot and first_window:
                    refused(args.refused_shot)
                stop(proc)
                print(f"round {round_no + 1} {mode}: idle {r['idle'][-1]:.1f} % CPU, "
                      f"busy {r['busy'][-1]:.1f} % CPU, decode {r['rates'][-1]:.1f} tokens/s",
                      flush=True)
    finally:
        xvfb.terminate()
        os.unlink(config.name)
    w, h = results["window"], results["headless"]
    med = statistics.median
    print(json.dumps(results))
    print(f"app CPU idle: window {med(w['idle']):.1f} %, headless {med(h['idle']):.1f} %")
    print(f"app CPU busy: window {med(w['busy']):.1f} %, headless {med(h['busy']):.1f} %")
    print(f"decode tokens/s: window {med(w['rates']):.1f}, headless {med(h['rates']):.1f}, "
          f"ratio {med(w['rates']) / med(h['rates']):.3f}")


if __name__ == "__main__":
    main()
