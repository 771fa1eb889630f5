#!/usr/bin/env python3
"""Publishing's cost, two builds side by side (docs/BENCHMARKS.md, "The snapshot published on
every change").

  python3 scripts/publish-bench.py --instrument CHECKOUT/src/service/publish.rs
      (a temporary counter, never committed: build that checkout, copy its binary, undo it)
  python3 scripts/publish-bench.py BEFORE_EXE AFTER_EXE ROUNDS

Each round starts each build headless over the SIMULATED engine with `parallel` 2 (two
streams at its 50 decode steps/s each: 100 tokens/s), the builds in alternating order; over
8 s it reads the build's PUBLISH counter (calls, and nanoseconds spent in `publish`), the
app process's CPU (not the engine worker's) and the content deltas the clients saw. Then the
same "crowded": 50 ended requests first, two streams and nine requests waiting.
Needs the standard library only."""
import json, os, re, subprocess, sys, tempfile, threading, time, urllib.request, statistics
PORT = 18477
BASE = f"http://127.0.0.1:{PORT}"

COUNTER = """        {
            use std::sync::atomic::{AtomicU64, Ordering};
            static CALLS: AtomicU64 = AtomicU64::new(0);
            static NANOS: AtomicU64 = AtomicU64::new(0);
            let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
            let t = NANOS.fetch_add(timing_t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            if n % 50 == 0 {
                eprintln!("PUBLISH {n} {t}");
            }
        }
"""


def instrument(path):
    """Adds the temporary PUBLISH counter to a checkout's src/service/publish.rs."""
    s = open(path).read()
    m = re.search(r"pub\(super\) fn publish\(&mut self[^)]*\) \{\n", s)
    s = s[: m.end()] + "        let timing_t0 = std::time::Instant::now();\n" + s[m.end() :]
    end = "            changed\n        });\n"
    i = s.index(end) + len(end)
    open(path, "w").write(s[:i] + COUNTER + s[i:])


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def stream(max_tokens, counter, priority=0):
    body = {"model": "x", "messages": [{"role": "user", "content": "count slowly"}],
            "max_tokens": max_tokens, "stream": True, "priority": priority}
    req = urllib.request.Request(BASE + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: {"):
                    v = json.loads(line[6:])
                    c = (v.get("choices") or [{}])[0].get("delta", {}).get("content")
                    if c:
                        counter[0] += 1
    except Exception as e:
        pass

def last_publish(path):
    calls, ns = 0, 0
    with open(path) as f:
        for line in f:
            if line.startswith("PUBLISH "):
                _, calls, ns = line.split()
    return int(calls), int(ns)

def run(exe, crowded):
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"parallel": 2}, cfg); cfg.close()
    err = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False); err.close()
    proc = subprocess.Popen([exe, "--config", cfg.name, "--port", str(PORT), "--engine", "sim",
                             "--headless"], stderr=open(err.name, "w"), stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(BASE + "/health", timeout=1); break
            except Exception:
                time.sleep(0.1)
        if crowded:
            # 50 ended requests kept, then two streams and nine waiting
            done = [0]
            for _ in range(50):
                stream(2, done)
        counter = [0]
        threads = [threading.Thread(target=stream, args=(1500, counter), daemon=True) for _ in range(2)]
        if crowded:
            threads += [threading.Thread(target=stream, args=(20, [0], -1), daemon=True) for _ in range(9)]
        for t in threads:
            t.start()
        while counter[0] < 40:
            time.sleep(0.05)
        c0, n0 = last_publish(err.name); cpu0 = cpu_secs(proc.pid); t0 = counter[0]
        time.sleep(8.0)
        c1, n1 = last_publish(err.name); cpu1 = cpu_secs(proc.pid); t1 = counter[0]
        return ((n1 - n0) / max(c1 - c0, 1) / 1000.0, 1000.0 * (cpu1 - cpu0) / (t1 - t0), (t1 - t0) / 8.0)
    finally:
        proc.terminate(); proc.wait()

def main():
    if sys.argv[1] == "--instrument":
        return instrument(sys.argv[2])
    old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for crowded in (False, True):
        res = {old: [], new: []}
        for r in range(rounds):
            for exe in ((old, new) if r % 2 == 0 else (new, old)):
                res[exe].append(run(exe, crowded))
                print(exe, "crowded" if crowded else "two streams", "publish %.1f us, CPU %.2f ms/token, %.1f tokens/s" % res[exe][-1], flush=True)
        for exe in (old, new):
            pub = sorted(x[0] for x in res[exe]); cpu = sorted(x[1] for x in res[exe]); rate = sorted(x[2] for x in res[exe])
            print(f"SUMMARY {'crowded' if crowded else 'two streams'} {exe}: publish median {statistics.median(pub):.1f} us [{pub[0]:.1f}-{pub[-1]:.1f}], "
                  f"CPU per token median {statistics.median(cpu):.3f} ms [{cpu[0]:.3f}-{cpu[-1]:.3f}], {statistics.median(rate):.1f} tokens/s")
        po = statistics.median(x[0] for x in res[old]); pn = statistics.median(x[0] for x in res[new])
        co = statistics.median(x[1] for x in res[old]); cn = statistics.median(x[1] for x in res[new])
        print(f"RATIO {'crowded' if crowded else 'two streams'}: publish new/old {pn/po:.3f}, CPU per token new/old {cn/co:.3f}")
main()
