#!/usr/bin/env python3
"""Decode speed with the KV pool full of kept conversations against an empty pool, side by
side (docs/BENCHMARKS.md). Each round starts a fresh server twice: once it decodes at once,
once after twelve other conversations (about 6,700 cells) were kept beside it.

    scripts/bench-pool-decode.py EXE [ROUNDS] [THREADS]
"""
import http.client, json, random, subprocess, sys, time

exe = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
threads = sys.argv[3] if len(sys.argv) > 3 else "2"
port = 8097
words = "the a of town river trade wool copper barley salt timber glass cheese market year".split()


def text(seed, n):
    r = random.Random(seed)
    return " ".join(r.choice(words) for _ in range(n))


def post(body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    return c.getresponse()


def decode_rate(seed):
    """Tokens per second between the first and the last streamed piece."""
    body = {"messages": [{"role": "user", "content": text(seed, 400)}], "max_tokens": 128,
            "ignore_eos": True, "stream": True}
    r = post(body)
    times = []
    for line in r:
        line = line.decode().strip()
        if line.startswith("data: {") and '"content":"' in line and '"role"' not in line:
            times.append(time.monotonic())
    return (len(times) - 1) / (times[-1] - times[0])


def serve():
    extra = sys.argv[4].split() if len(sys.argv) > 4 else []
    p = subprocess.Popen([exe, "--headless", "--port", str(port), "--threads", threads] + extra,
                         stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/scheduler")
            if '"state":"ready"' in c.getresponse().read().decode():
                return p
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server never became ready")


def snapshot():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/v1/scheduler")
    return json.loads(c.getresponse().read())


results = {"empty": [], "full": []}
for rnd in range(rounds):
    for setting in ("empty", "full"):
        p = serve()
        try:
            if setting == "full":
                for i in range(12):
                    post({"messages": [{"role": "user", "content": text(1000 + i, 480)}],
                          "max_tokens": 1}).read()
            s = snapshot()
            rate = decode_rate(rnd)
            results[setting].append(rate)
            print(f"round {rnd + 1} {setting}: {rate:.1f} tokens/s "
                  f"({s['engine']['kv_cells_used']} cells used, {len(s['conversations'])} kept)",
                  flush=True)
        finally:
            p.terminate()
            p.wait()
med = lambda v: sorted(v)[len(v) // 2]
print(f"median: empty {med(results['empty']):.1f}, full {med(results['full']):.1f} tokens/s, "
      f"ratio {med(results['full']) / med(results['empty']):.3f}")
