#!/usr/bin/env python3
"""llama.cpp's CPU variants side by side on this CPU (docs/BENCHMARKS.md, "CPU code chosen at
run time"): one program, each variant forced by a folder holding only its module
(`STRATA_BACKENDS_DIR`), `best` the folder of all (what the program picks by itself); each run
one `strata-desk generate` (a fresh engine worker), greedy, end-of-generation not ignored;
the variants interleaved round by round so that drift hits them alike. Prints, per prompt, the
median prompt and decode tokens/s of each variant with the [lowest-highest] round, and the
median of the per-round ratios to the first variant.

  scripts/bench-cpu-variants.py [--exe target/release/strata-desk] [--rounds 8]
      [--variants haswell,best] [--modules DIR] [--threads 2]
"""

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

SUMMARY = re.compile(
    r"\[(\d+) prompt tokens, (\d+) generated, first token after ([\d.]+) s, ([\d.]+) tokens/s"
)
TOWNS = ["Arden", "Brill", "Corve", "Dunmere", "Esk", "Falla", "Garth", "Hollin"]


def long_prompt(sentences):
    text = " ".join(
        f"The town of {TOWNS[i % 8]} traded {i % 5 + 2} loads of copper with {TOWNS[(i * 3 + 1) % 8]} "
        f"in the year {1200 + i}, and the river carried the boats past {TOWNS[(i + 5) % 8]}."
        for i in range(sentences)
    )
    return f"{text}\nSummarise the trade between these towns in detail."


def run(exe, folder, prompt, args):
    env = dict(os.environ, STRATA_BACKENDS_DIR=folder)
    done = subprocess.run(
        [exe, "generate", prompt, "--max-tokens", str(args.max_tokens), "--ctx", "4096",
         "--threads", str(args.threads)],
        env=env, capture_output=True, text=True, check=True,
    )
    match = SUMMARY.search(done.stderr)
    if not match:
        sys.exit(f"no summary line in: {done.stderr[-500:]}")
    prompt_tokens, generated, ttft, decode = match.groups()
    return int(prompt_tokens) / float(ttft), float(decode), int(generated)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", default="target/release/strata-desk")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--variants", default="haswell,best")
    parser.add_argument("--modules", help="the folder of every module [the build's]")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    exe = os.path.abspath(args.exe)
    modules = args.modules or os.path.dirname(sorted(glob.glob(
        os.path.join(os.path.dirname(exe), "build/llama-cpp-sys-2-*/out/backends/libggml-cpu-x64.so")
    ))[0])
    variants = args.variants.split(",")
    work = tempfile.mkdtemp(prefix="bench-cpu-variants-")
    folders = {}
    for variant in variants:
        folder = os.path.join(work, variant)
        os.makedirs(folder)
        for name in os.listdir(modules):
            if variant == "best" or name == f"libggml-cpu-{variant}.so":
                shutil.copy(os.path.join(modules, name), folder)
        folders[variant] = folder
    prompts = {"short": "Write a long story about a lighthouse keeper and a storm.",
               "long": long_prompt(60)}
    results = {(p, v): [] for p in prompts for v in variants}
    for round_no in range(1, args.rounds + 1):
        for p, prompt in prompts.items():
            for v in variants:
                results[(p, v)].append(run(exe, folders[v], prompt, args))
        print(f"round {round_no} of {args.rounds} done", file=sys.stderr)
    shutil.rmtree(work)
    base = variants[0]
    print(f"| prompt | variant | prompt tokens/s | decode tokens/s | prompt / {base} | decode / {base} |")
    print("| --- | --- | --- | --- | --- | --- |")
    for p in prompts:
        for v in variants:
            rows = results[(p, v)]
            cells = []
            for k in (0, 1):
                xs = [r[k] for r in rows]
                cells.append(f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]")
            for k in (0, 1):
                ratios = [r[k] / b[k] for r, b in zip(rows, results[(p, base)])]
                cells.append(f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
            generated = sorted({r[2] for r in rows})
            print(f"| {p} | {v} (generated {generated}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
