#!/usr/bin/env python3
"""The dashboard's screenshots and a scripted run's cost figures, under Xvfb, over the
SIMULATED engine (fixed timings: 2,000 prompt tokens/s, 50 decode steps/s; docs/BENCHMARKS.md,
"What preemption cost and saved").

  python3 scripts/dashboard-shots.py --exe target/debug/strata-desk [--out docs]

1. The crowded table: an agent's long stream (sent as Claude Code sends it, by its
   User-Agent) and ten requests of priorities 0-3, at the window's default size 1100x720:
   <out>/dashboard-crowded.png.
2. The same scripted run twice, with `solo_priority` on and then off (`give_way` left at its
   default both times): the agent's 600-token stream, and from 2 s on four priority-5 shorts
   (40 tokens each, by `curl`'s User-Agent) 3 s apart. The cost panel after each run:
   <out>/dashboard-cost-on.png, <out>/dashboard-cost-off.png. For each run it prints what the
   clients measured (the agent's end to end, its silences over 0.3 s between content deltas,
   which are its pauses; the shorts' time to first token) beside what the service reports for
   the same requests (`/v1/scheduler`'s `finished[]`).
3. With --cpu-rounds N: the app process's CPU per streamed token (the window, the HTTP server,
   the scheduler and its publishing; not the engine worker) while one stream decodes at the
   simulated 50 tokens/s, with its window and `--headless` taking turns, N rounds each.

Needs: Xvfb, ImageMagick's `import`, the standard library only.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PORT = 18463
BASE = f"http://127.0.0.1:{PORT}"
WINDOW = (1100, 720)
DISPLAY = ":78"
CLAUDE = "claude-cli/2.0.1 (external, cli)"
CURL = "curl/8.5.0"
# A silence this long between two content deltas is a pause (a decode step takes 20 ms).
PAUSE_SECS = 0.3


def chat(text, max_tokens, priority=None, stream=True):
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if priority is not None:
        body["priority"] = priority
    return body


def post(body, user_agent, seen):
    """Sends a chat completion; records in `seen` when it was sent, each content delta's time
    and the id the client saw."""
    req = urllib.request.Request(
        BASE + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "user-agent": user_agent},
    )
    seen["sent"] = time.monotonic()
    seen["deltas"] = []
    with urllib.request.urlopen(req, timeout=600) as resp:
        if not body.get("stream"):
            seen["id"] = json.load(resp)["id"]
            seen["deltas"].append(time.monotonic())
        else:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                seen["id"] = chunk.get("id", seen.get("id"))
                for choice in chunk.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        seen["deltas"].append(time.monotonic())
    seen["ended"] = time.monotonic()


def send(body, user_agent):
    seen = {}
    thread = threading.Thread(target=post, args=(body, user_agent, seen), daemon=True)
    thread.start()
    return thread, seen


def scheduler():
    with urllib.request.urlopen(BASE + "/v1/scheduler", timeout=5) as resp:
        return json.load(resp)


def cpu_secs(pid):
    """User + system CPU seconds of one process so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_token(exe, env, window):
    """CPU milliseconds of the app process per content delta its client saw, over 8 s of one
    stream decoding."""
    proc = start(exe, False, env, headless=not window)
    try:
        thread, seen = send(chat("count slowly", 2000), CURL)
        while len(seen.get("deltas", [])) < 20:
            time.sleep(0.05)
        before, tokens_before = cpu_secs(proc.pid), len(seen["deltas"])
        time.sleep(8.0)
        cpu, tokens = cpu_secs(proc.pid) - before, len(seen["deltas"]) - tokens_before
    finally:
        stop(proc)
    return 1000.0 * cpu / tokens, tokens / 8.0


def start(exe, solo_priority, env, headless=False):
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    config.write("{}")
    config.close()
    args = [exe, "--config", config.name, "--port", str(PORT), "--engine", "sim"]
    if solo_priority:
        args.append("--solo-priority")
    if headless:
        args.append("--headless")
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    started = time.time()
    while time.time() - started < 120:
        if proc.poll() is not None:
            sys.exit(f"the app exited with {proc.returncode}")
        try:
            if scheduler()["engine"]["state"] == "ready":
                time.sleep(1.0)  # the window's first frames
                return proc
        except OSError:
            pass
        time.sleep(0.3)
    sys.exit("the engine never became ready")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def shoot(path):
    crop = f"{WINDOW[0]}x{WINDOW[1]}+0+0"
    subprocess.run(
        ["import", "-display", DISPLAY, "-window", "root", "-crop", crop, "+repage", path],
        check=True,
    )
    print(f"saved {path}")


def crowded(exe, env, out):
    proc = start(exe, True, env)
    try:
        send(chat("the agent's long conversation so far " * 120, 2000), CLAUDE)
        time.sleep(1.5)
        for i in range(10):
            send(chat("a question with some context " * (20 * (i + 1)), 300, i % 4), CURL)
        time.sleep(2.0)
        shoot(os.path.join(out, "dashboard-crowded.png"))
    finally:
        stop(proc)


def silences(deltas):
    gaps = [b - a for a, b in zip(deltas, deltas[1:])]
    return [g for g in gaps if g > PAUSE_SECS]


def cost_run(exe, env, out, solo_priority):
    name = "on" if solo_priority else "off"
    proc = start(exe, solo_priority, env)
    try:
        agent_thread, agent = send(chat("the agent's conversation " * 40, 600), CLAUDE)
        time.sleep(2.0)
        shorts = []
        for i in range(4):
            shorts.append(send(chat(f"quick question {i}", 40, 5), CURL))
            time.sleep(3.0)
        for thread, _ in shorts:
            thread.join()
        agent_thread.join()
        time.sleep(1.5)
        shoot(os.path.join(out, f"dashboard-cost-{name}.png"))
        finished = {f["client_id"]: f for f in scheduler()["finished"]}
    finally:
        stop(proc)
    print(f"\nsolo_priority {name}:")
    a = finished[agent["id"]]
    gaps = silences(agent["deltas"])
    print(
        f"  agent {agent['id']}: end to end {agent['ended'] - agent['sent']:.2f} s measured by "
        f"the client, {a['end_to_end_secs']:.2f} s reported; silences over {PAUSE_SECS} s: "
        f"{len(gaps)}, {sum(gaps):.2f} s in all, reported parked {a['parks']} times, "
        f"{a['parked_secs']:.2f} s in all"
    )
    for _, s in shorts:
        f = finished[s["id"]]
        print(
            f"  short {s['id']}: first token after {s['deltas'][0] - s['sent']:.2f} s measured, "
            f"{f['ttft_secs']:.2f} s reported; end to end {s['ended'] - s['sent']:.2f} s "
            f"measured, {f['end_to_end_secs']:.2f} s reported; gained (estimate) "
            f"{f['gained_secs_estimate']}"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--out", default="docs")
    parser.add_argument("--cpu-rounds", type=int, default=0)
    parser.add_argument("--no-shots", action="store_true")
    args = parser.parse_args()
    # A screen larger than the window, so Xvfb's pointer (at its centre) is off the window and
    # opens no tooltip; the shots are cropped to the window's default size.
    screen = f"{2 * WINDOW[0] + 40}x{2 * WINDOW[1] + 40}x24"
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", screen])
    time.sleep(1.0)
    env = dict(os.environ, DISPLAY=DISPLAY, LIBGL_ALWAYS_SOFTWARE="1")
    try:
        if not args.no_shots:
            crowded(args.exe, env, args.out)
            cost_run(args.exe, env, args.out, True)
            cost_run(args.exe, env, args.out, False)
        figures = {True: [], False: []}
        for _ in range(args.cpu_rounds):
            for window in (True, False):
                figures[window].append(cpu_per_token(args.exe, env, window))
        for window, runs in figures.items():
            if runs:
                ms = sorted(r[0] for r in runs)
                rate = sorted(r[1] for r in runs)
                print(
                    f"{'window' if window else 'headless'}: CPU per streamed token median "
                    f"{ms[len(ms) // 2]:.2f} ms [{ms[0]:.2f}-{ms[-1]:.2f}] at "
                    f"{rate[len(rate) // 2]:.1f} tokens/s, {len(runs)} rounds"
                )
    finally:
        xvfb.terminate()


if __name__ == "__main__":
    main()
