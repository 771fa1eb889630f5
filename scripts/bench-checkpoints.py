#!/usr/bin/env python3
"""The next turn of a kept conversation on a model whose cache cannot be cut at any token
(Gemma 3 with `swa_full` off, a recurrent model), ours against llama-server, side by side:
docs/BENCHMARKS.md, "Context checkpoints". Each round starts a fresh server for each setting in
turn (interleaved, so drift falls on every setting alike), and for each case:

  turn 1: a long prompt P (raw text through /v1/completions: no chat template), greedy, 16
          tokens out: its answer A;
  turn 2, timed (max_tokens 1, so its time is the prompt read):
    whole       P + A + U: the history sent back whole;
    rerendered  P + A' + U: the last answer re-rendered (A' is not A), so the prompt departs
                right where P ended;
    far_edit    P with one sentence ~1K tokens before its end rewritten, + A + U.

Prints each round's times and the medians with [lowest-highest], and the ratios ours/llama per
round. Usage:
  bench-checkpoints.py --model GGUF --ours EXE [--llama-server EXE] [--rounds N]
                       [--threads 2] [--ctx 8192] [--cases whole,rerendered,far_edit]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request

PORT = 8097
BASE = f"http://127.0.0.1:{PORT}"


def history(sentences: int) -> list[str]:
    """Facts an agent's history might hold: distinct sentences, ~20 tokens each."""
    towns = ["Arden", "Belmoor", "Caskin", "Dunmere", "Elsworth", "Farrow", "Glenholt"]
    goods = ["wool", "copper", "barley", "salt", "timber", "glass", "cheese"]
    return [
        f"Fact {i}: the town of {towns[i % 7]} traded {(i * 37) % 500 + 3} bales of "
        f"{goods[(i * 3) % 7]} in year {1700 + (i * 11) % 300}.\n"
        for i in range(sentences)
    ]


def post(path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(
        BASE + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as answer:
        return json.load(answer)


def wait_ready(proc: subprocess.Popen, path: str) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(BASE + path, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    sys.exit("the server never became ready")


def start(setting: str, args) -> subprocess.Popen:
    if setting == "ours":
        cmd = [args.ours, "--headless", "--model", args.model, "--port", str(PORT),
               "--threads", str(args.threads), "--ctx", str(args.ctx)]
    else:
        cmd = [args.llama_server, "-m", args.model, "--port", str(PORT), "-t",
               str(args.threads), "-c", str(args.ctx), "-np", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(proc, "/health")
    return proc


def complete(prompt: str, max_tokens: int) -> tuple[str, float]:
    started = time.monotonic()
    answer = post("/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                                      "temperature": 0})
    return answer["choices"][0]["text"], time.monotonic() - started


def one_case(case: str, sentences: list[str]) -> float:
    p = "".join(sentences) + "\n"
    a, _ = complete(p, 16)
    u = "\nQuestion: which town traded the most salt?\n"
    if case == "whole":
        nxt = p + a + u
    elif case == "rerendered":
        nxt = p + "Answer, as the agent renders it: " + a.strip() + "\n" + u
    else:
        edited = list(sentences)
        k = len(edited) - 50  # ~1K tokens before the end
        edited[k] = edited[k].replace("traded", "sold")
        nxt = "".join(edited) + "\n" + a + u
    _, secs = complete(nxt, 1)
    return secs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--sentences", type=int, default=260)
    ap.add_argument("--cases", default="whole,rerendered,far_edit")
    args = ap.parse_args()
    settings = ["ours"] + (["llama"] if args.llama_server else [])
    cases = args.cases.split(",")
    sentences = history(args.sentences)
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(1, args.rounds + 1):
        for case in cases:
            for setting in settings:
                proc = start(setting, args)
                try:
                    secs = one_case(case, sentences)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                times.setdefault((case, setting), []).append(secs)
                print(f"round {r} {case:10} {setting:5} {secs:7.3f} s", flush=True)
    print("\nmedian [lowest-highest] seconds of the timed turn")
    for case in cases:
        row = []
        for setting in settings:
            t = times[(case, setting)]
            row.append(f"{setting} {statistics.median(t):.2f} [{min(t):.2f}-{max(t):.2f}]")
        if len(settings) == 2:
            ratios = [o / l for o, l in zip(times[(case, "ours")], times[(case, "llama")])]
            row.append(f"ours/llama {statistics.median(ratios):.2f}x "
                       f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        print(f"{case:10} " + "; ".join(row))


if __name__ == "__main__":
    main()
