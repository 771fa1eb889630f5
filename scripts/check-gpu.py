#!/usr/bin/env python3
"""The GPU path on a real device: the app built with `--features vulkan`, serving the test
model on Mesa's software Vulkan device (lavapipe), which runs llama.cpp's real device code
(buffers, offload, a KV cache in device memory, sequence state copied across the device
boundary), slowly: about 9 prompt tokens/s and 2-3 decoded tokens/s on two cores.

  python3 scripts/check-gpu.py --exe target/debug/strata-desk-vulkan [--only NAME]
  (NAME: device, host-ram, cpu, limit, pick, version, context)

Each check prints PASS or FAIL with what it saw; the exit status is 1 if any failed.
  1. `gpu_layers: auto` on the device: /health names the Vulkan device (llvmpipe), every layer
     on it, chosen by llama.cpp's fitting from the device's reported memory (`auto`), with
     the device's memory figures; the log says so.
  2. A chat completion answered on the device; the conversation continued, with only its new
     tokens read (the earlier turns held in the KV pool on the device).
  3. A greedy stream paused for a priority-5 request and resumed (its state kept in the KV
     pool on the device) sends the same text as the same request uninterrupted.
  4. The same with the paused stream's state saved to host RAM (a pool too small for both),
     and restored: the same text again.
  5. The engine worker killed mid-step: the stream fails with an error, the next request is
     answered by a restarted engine on the device.
  6. Without GGML_VK_VISIBLE_DEVICES ggml skips a CPU-type device: the engine, asked for 99
     layers on the GPU, then says CPU with no layer on a GPU.
  7. `gpu_memory_limit` (lavapipe reports its 2 GiB as all free, so the limit is what makes
     the memory short): `auto` fits fewer layers into a small limit, /health shows the memory
     within the limit and the low-memory warning, the log warns; a generous limit fits every
     layer with no warning; a `gpu_layers` count that does not fit the small limit is
     loaded with a warning naming the figures, and answers.
  8. `--version` names the Vulkan backend.
  9. `device`: the device list and why it was picked in /health (check 1: `auto`, the only
     GPU); `--device Vulkan0` picks it by name, `--device cpu` keeps every layer on the CPU
     though the device is there, and a device that is not there stops the engine's start
     with the list of those that are.
 10. `ctx` 0, the context from llama.cpp's fitting (the test model's trained context is
     8192 tokens, a 180 MiB KV pool at f16): within a limit that holds every layer with a
     shorter context, the largest that fits above `ctx_min` (`fit`), every layer on the
     device, and it answers; with `ctx_min` at the trained context, that context
     (`trained`) and layers moved to the CPU instead; within a limit too small for every
     layer even at the floor, the floor (`floor`) and fewer layers.
 11. The models hub's estimate (`strata-desk models`, what the model list shows before a
     download) against llama.cpp's fitting of check 10, for the same memory: within the
     300 MiB limit, every layer on the GPU and a context within 15 % of the fitted one; within
     180 MiB at the 1024-token floor, the layers on the GPU within 3 of llama.cpp's.
Needs the standard library only.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PORT = 18491
BASE = f"http://127.0.0.1:{PORT}"
FAILED = []


def check(name, ok, seen):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {seen}", flush=True)
    if not ok:
        FAILED.append(name)


def get(path):
    with urllib.request.urlopen(BASE + path, timeout=30) as r:
        return json.loads(r.read())


def post(body, timeout=600):
    request = urllib.request.Request(
        BASE + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chat(text, max_tokens, priority=None, stream=False):
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }
    if priority is not None:
        body["priority"] = priority
    return body


def streamed(sse):
    """The content of a streamed answer, whether it ended with an error event, and its id."""
    text, error, id_ = "", False, None
    for line in sse.splitlines():
        if not line.startswith("data: {"):
            continue
        v = json.loads(line[6:])
        if "error" in v:
            error = True
        id_ = v.get("id", id_)
        for choice in v.get("choices") or []:
            text += (choice.get("delta") or {}).get("content") or ""
    return text, error, id_


def streamed_text(sse):
    text, error, _ = streamed(sse)
    return text, error


class App:
    def __init__(self, exe, config, env_extra, args):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(config, cfg)
        cfg.close()
        env = dict(os.environ, **env_extra)
        self.proc = subprocess.Popen(
            [exe, "--headless", "--config", cfg.name, "--port", str(PORT)] + args,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def ready(self, timeout=300):
        started = time.time()
        while time.time() - started < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"the app exited: {self.tail()}")
            try:
                health = get("/health")
                if health.get("status") == "ok" or get("/v1/scheduler")["engine"]["state"] == "ready":
                    return time.time() - started
            except (urllib.error.URLError, ConnectionError, OSError, KeyError):
                pass
            time.sleep(0.5)
        raise SystemExit(f"not ready after {timeout} s: {self.tail()}")

    def failed(self, timeout=300):
        """Waits for the engine to fail to start: the reason /health gives (or the log's end
        if the app exits)."""
        started = time.time()
        while time.time() - started < timeout:
            if self.proc.poll() is not None:
                return self.tail()
            try:
                engine = get("/v1/scheduler")["engine"]
                if engine["state"] == "failed":
                    return engine.get("reason", "")
            except (urllib.error.URLError, ConnectionError, OSError, KeyError):
                pass
            time.sleep(0.5)
        return f"still not failed after {timeout} s: {self.tail()}"

    def worker_pids(self):
        """The app's child processes (the engine worker), whichever of its threads started
        them."""
        pids = []
        tasks = f"/proc/{self.proc.pid}/task"
        for task in os.listdir(tasks):
            with open(f"{tasks}/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        return pids

    def tail(self, n=4000):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-n:]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def until(what, check_fn, timeout=120):
    started = time.time()
    while time.time() - started < timeout:
        if check_fn():
            return True
        time.sleep(0.1)
    print(f"timed out waiting until {what}", flush=True)
    return False


def paused_run(long_body, short_body):
    """The long stream, paused by the short one once it decodes: (its text, whether it
    failed, its finished[] record)."""
    result = {}

    def long_one():
        result["long"] = post(long_body)

    thread = threading.Thread(target=long_one)
    thread.start()
    until(
        "the long stream decodes",
        lambda: any(
            s["state"] == "decoding" and s["generated_tokens"] >= 2
            for s in get("/v1/scheduler")["slots"]
        ),
    )
    short_status, _ = post(short_body)
    thread.join()
    status, sse = result["long"]
    text, error, id_ = streamed(sse)
    finished = get("/v1/scheduler")["finished"]
    record = next((f for f in finished if f["client_id"] == id_), {"pauses": 0, "parks": 0})
    return text, error or status != 200 or short_status != 200, record


VK = {"GGML_VK_VISIBLE_DEVICES": "0"}
MIB = 1 << 20
# a limit that holds some of the test model's 30 layers with a 2048-token KV pool, not all
SMALL_LIMIT_MIB = 180


def on_the_device(exe):
    """Checks 1, 2, 3 and 5."""
    config = {"solo_priority": True, "min_run_quantum_secs": 0.3, "ctx": 2048}
    app = App(exe, config, VK, ["--gpu-layers", "auto"])
    try:
        secs = app.ready()
        device = get("/v1/scheduler")["engine"]["device"]
        check(
            "gpu_layers auto on the Vulkan device",
            device["backend"] == "Vulkan"
            and "llvmpipe" in device["name"]
            and device["gpu_layers"] == device["model_layers"] > 0
            and device["chosen_by"] == "auto"
            and device["vram_total_bytes"] > 0
            and device["vram_limit_bytes"] == 0
            and not device["vram_low"]
            and device["fit_warning"] == ""
            and device["id"] == "Vulkan0"
            and device["picked_by"] == "device auto: the only GPU"
            and len(device["devices"]) == 1
            and device["devices"][0].startswith("Vulkan0: llvmpipe"),
            f"{device} (ready in {secs:.0f} s)",
        )
        # the default build loads llama.cpp's backends at run time: Vulkan as a module, with
        # the best of ggml's CPU variants beside it (a build without `cpu-variants`: built-in)
        check(
            "the Vulkan backend and a CPU variant loaded as modules",
            device["backends_not_loaded"] == []
            and (device["cpu_variant"] in device["cpu_variants"] or device["cpu_variant"] == "built-in"),
            f"cpu_variant {device['cpu_variant']!r} of {device['cpu_variants']}",
        )
        # the ready line: "..., llvmpipe (...) (Vulkan), 30 of 30 layers on the GPU (gpu_layers
        # auto: fitted into free GPU memory by llama.cpp), ..."
        layers = f"{device['model_layers']} of {device['model_layers']} layers on the GPU"
        line = next((l for l in app.tail(100000).splitlines() if ": ready on " in l), "")
        check(
            "the log names the device, its layers and who chose them",
            f"{device['name']} (Vulkan), {layers} (gpu_layers auto: fitted" in line,
            line,
        )
        status, body = post(chat("Name three colours.", 8))
        content = json.loads(body)["choices"][0]["message"]["content"] if status == 200 else body
        check("a chat completion on the device", status == 200 and content.strip() != "", repr(content))

        # the conversation goes on: its earlier turns are held in the KV pool on the device
        follow = chat("Name three colours.", 8)
        follow["messages"] += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": "And three fruits?"},
        ]
        status, body = post(follow)
        id_ = json.loads(body).get("id") if status == 200 else None
        record = next((f for f in get("/v1/scheduler")["finished"] if f["client_id"] == id_), None)
        check(
            "a conversation kept on the device goes on with only its new tokens read",
            record is not None
            and record["prompt_tokens_held"] > 0
            and record["prompt_tokens_read"] == record["prompt_tokens"] - record["prompt_tokens_held"]
            and record["prompt_tokens_read"] < record["prompt_tokens"] // 2,
            str({k: record[k] for k in ("prompt_tokens", "prompt_tokens_held", "prompt_tokens_read")})
            if record
            else body,
        )

        long_body = chat("Count from one to twenty in words.", 24, stream=True)
        status, sse = post(long_body)
        alone, error = streamed_text(sse)
        check("the stream alone", status == 200 and not error and alone != "", repr(alone))
        text, failed, record = paused_run(long_body, chat("Say hi.", 2, priority=5))
        check(
            "paused in the pool on the device and resumed: the same text",
            not failed and text == alone and record["pauses"] >= 1,
            f"{text!r} against {alone!r}, pauses {record['pauses']}",
        )

        # the worker killed while it decodes
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=post(chat("Tell a story.", 200, stream=True))))
        thread.start()
        until("the story decodes", lambda: any(s["state"] == "decoding" for s in get("/v1/scheduler")["slots"]))
        workers = app.worker_pids()
        check("the engine worker is a process of its own", len(workers) == 1, str(workers))
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        thread.join()
        status, sse = result["r"]
        _, error = streamed_text(sse)
        check("the stream of a killed engine ends with an error", error or status >= 500, f"{status}")
        status, body = post(chat("Name a fruit.", 4))
        device = get("/v1/scheduler")["engine"]
        check(
            "a restarted engine on the device answers",
            status == 200 and device["restarts"] >= 1 and device["device"]["backend"] == "Vulkan",
            f"{status}, restarts {device['restarts']}",
        )
    finally:
        app.stop()



def host_ram(exe):
    """Check 4: a pool too small for both, so the paused stream's state leaves the device."""
    small = {"solo_priority": True, "min_run_quantum_secs": 0.3, "ctx": 256}
    app = App(exe, small, VK, ["--gpu-layers", "auto"])
    try:
        app.ready()
        long_body = chat("Count from one to twenty in words.", 60, stream=True)
        status, sse = post(long_body)
        alone, _ = streamed_text(sse)
        short = chat("Say hi in a long way, " * 26, 24, priority=5)
        text, failed, record = paused_run(long_body, short)
        counters = get("/v1/scheduler")["counters"]
        check(
            "saved to host RAM from the device and restored: the same text",
            not failed and text == alone and counters["parks_to_host"] >= 1,
            f"{text!r} against {alone!r}, parks to host {counters['parks_to_host']}",
        )
    finally:
        app.stop()


def memory_limit(exe):
    """Check 7."""
    small = {"ctx": 2048, "gpu_memory_limit": SMALL_LIMIT_MIB}
    app = App(exe, small, VK, ["--gpu-layers", "auto"])
    try:
        app.ready()
        device = get("/health")["engine"]["device"]
        check(
            "auto within a small gpu_memory_limit: fewer layers, the memory within it, low",
            0 <= device["gpu_layers"] < device["model_layers"]
            and device["chosen_by"] == "auto"
            and device["vram_limit_bytes"] == SMALL_LIMIT_MIB * MIB
            and device["vram_total_bytes"] == SMALL_LIMIT_MIB * MIB
            and device["vram_free_bytes"] <= SMALL_LIMIT_MIB * MIB
            and device["vram_low"],
            str(device),
        )
        log = app.tail(100000)
        check(
            "the log warns that GPU memory is low within the limit",
            f"within gpu_memory_limit {SMALL_LIMIT_MIB} MiB, under the margin" in log,
            next((l for l in log.splitlines() if "under the margin" in l), "no warning"),
        )
    finally:
        app.stop()

    app = App(exe, {"ctx": 2048, "gpu_memory_limit": "1800 MiB"}, VK, ["--gpu-layers", "auto"])
    try:
        app.ready()
        device = get("/health")["engine"]["device"]
        check(
            "auto within a generous gpu_memory_limit: every layer, not low",
            device["gpu_layers"] == device["model_layers"]
            and device["vram_total_bytes"] == 1800 * MIB
            and not device["vram_low"],
            str(device),
        )
    finally:
        app.stop()

    app = App(exe, small, VK, ["--gpu-layers", "30"])
    try:
        app.ready()
        device = get("/health")["engine"]["device"]
        warning = device["fit_warning"]
        check(
            "a gpu_layers count that does not fit: loaded, with the figures in a warning",
            device["gpu_layers"] == 30
            and "gpu_layers 30 does not fit" in warning
            and f"within gpu_memory_limit {SMALL_LIMIT_MIB} MiB" in warning
            and "of 30 layers" in warning,
            warning or str(device),
        )
        check("the log gives the same warning", warning != "" and warning in app.tail(100000), "")
        status, body = post(chat("Name a colour.", 4))
        check("it answers", status == 200, f"{status}")
    finally:
        app.stop()


# holds every layer of the test model with a KV pool of a few thousand tokens, not 8192
CONTEXT_LIMIT_MIB = 300


def context(exe):
    """Check 10."""
    cases = [
        ("fit", {"ctx_min": 1024, "gpu_memory_limit": CONTEXT_LIMIT_MIB}),
        ("trained", {"ctx_min": 8192, "gpu_memory_limit": CONTEXT_LIMIT_MIB}),
        ("floor", {"ctx_min": 1024, "gpu_memory_limit": SMALL_LIMIT_MIB}),
    ]
    for chosen_by, config in cases:
        app = App(exe, config, VK, [])
        try:
            app.ready()
            engine = get("/health")["engine"]
            device, ctx = engine["device"], engine["context_tokens"]
            all_layers = device["gpu_layers"] == device["model_layers"] == 30
            expected = {
                "fit": 1024 < ctx < 8192 and ctx % 256 == 0 and all_layers,
                "trained": ctx == 8192 and 0 < device["gpu_layers"] < 30,
                "floor": ctx == 1024 and device["gpu_layers"] < 30,
            }[chosen_by]
            check(
                f"ctx 0 with {config}: {chosen_by}",
                engine["context_chosen_by"] == chosen_by and expected,
                f"context {ctx} ({engine['context_chosen_by']}), {device['gpu_layers']} of "
                f"{device['model_layers']} layers, {device['vram_free_bytes'] >> 20} MiB free "
                f"within the limit",
            )
            if chosen_by == "fit":
                status, body = post(chat("Name a colour.", 4))
                check("the fitted context answers", status == 200, f"{status}")
        finally:
            app.stop()
        if chosen_by != "trained":
            estimate_against_fitting(exe, config, ctx, device["gpu_layers"])


def estimate_against_fitting(exe, config, fitted_ctx, fitted_layers):
    """Check 11: `strata-desk models` for the same floor and limit as a check 10 case."""
    out = subprocess.run(
        [exe, "models", "--min-ctx", str(config["ctx_min"]),
         "--gpu-memory-limit", str(config["gpu_memory_limit"])],
        env=dict(os.environ, **VK), capture_output=True, text=True, timeout=120,
    ).stdout
    lines = out.splitlines()
    # the model's name, then its facts and fit on the next line
    line = next(
        (lines[i + 1] for i, l in enumerate(lines[:-1]) if "SmolLM2-135M-Instruct" in l), out
    )
    on_gpu = re.search(r"fits on the GPU up to (\d+) tokens", line)
    partly = re.search(r"fits with (\d+) of (\d+) layers on the CPU", line)
    if fitted_layers == 30:
        ok = on_gpu is not None and abs(int(on_gpu[1]) - fitted_ctx) <= 0.15 * fitted_ctx
    else:
        ok = partly is not None and abs(30 - int(partly[1]) - fitted_layers) <= 3
    check(
        f"the estimate within {config['gpu_memory_limit']} MiB agrees with llama.cpp's fitting "
        f"({fitted_layers} of 30 layers, context {fitted_ctx})",
        ok,
        line.strip(),
    )


def pick(exe):
    """Check 9."""
    app = App(exe, {"ctx": 2048}, VK, ["--device", "vulkan0"])
    try:
        app.ready()
        device = get("/health")["engine"]["device"]
        check(
            "--device names the GPU",
            device["id"] == "Vulkan0"
            and device["gpu_layers"] == device["model_layers"]
            and device["picked_by"] == 'device "vulkan0" in the config',
            str(device),
        )
    finally:
        app.stop()
    app = App(exe, {"ctx": 2048, "device": "cpu"}, VK, [])
    try:
        app.ready()
        device = get("/health")["engine"]["device"]
        check(
            "device cpu: every layer on the CPU beside a GPU",
            device["backend"] == "CPU"
            and device["gpu_layers"] == 0
            and device["chosen_by"] == "device-cpu"
            and device["picked_by"] == "device cpu in the config",
            str(device),
        )
    finally:
        app.stop()
    app = App(exe, {"ctx": 2048}, VK, ["--device", "Vulkan7"])
    try:
        reason = app.failed()
        check(
            "a device that is not there: the start fails naming those that are",
            '"Vulkan7" is not one llama.cpp sees here' in reason and "Vulkan0: llvmpipe" in reason,
            reason,
        )
    finally:
        app.stop()


def version(exe):
    """Check 8."""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    check(
        "--version names the Vulkan backend and the CPU code for this CPU",
        "backends: CPU, Vulkan" in out and "CPU code" in out,
        out,
    )


def skipped_device(exe):
    """Check 6."""
    # every layer asked for the GPU: there is none to take them
    app = App(exe, {"ctx": 2048}, {}, ["--gpu-layers", "99"])
    try:
        app.ready()
        device = get("/v1/scheduler")["engine"]["device"]
        check(
            "without GGML_VK_VISIBLE_DEVICES the CPU, no layer on a GPU",
            device["backend"] == "CPU" and device["gpu_layers"] == 0,
            str(device),
        )
    finally:
        app.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    checks = {
        "device": on_the_device,
        "host-ram": host_ram,
        "cpu": skipped_device,
        "limit": memory_limit,
        "pick": pick,
        "version": version,
        "context": context,
    }
    parser.add_argument("--only", choices=list(checks))
    args = parser.parse_args()
    for name, run in checks.items():
        if args.only in (None, name):
            run(args.exe)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed: {', '.join(FAILED)}")
        sys.exit(1)
    print("every GPU check run passed")


if __name__ == "__main__":
    main()
