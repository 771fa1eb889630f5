#!/usr/bin/env bash
# Strata Desk in front of an upstream llama-server against llama-server alone (docs/BENCHMARKS.md,
# "Over an upstream llama-server"), each comparison interleaved round by round:
#   1. solo-long-short: a short priority request sent 1 s into a 6000-token read, llama-server
#      with SLOTS slots alone, then ours over a fresh one (`--parallel SLOTS`), for each SLOTS;
#   2. the hop: one stream (a 16-token prompt, 256 tokens decoded, end-of-generation ignored)
#      straight from llama-server, then through ours;
#   3. what polling costs: the same stream straight from llama-server while a poller reads its
#      /slots and /metrics once a second (what ours does), and with no poller.
# Each figure's per-round ratio, median [lowest-highest], is printed at the end; one stream's
# decode both by the server's token count and as streamed (non-empty content deltas).
#   scripts/bench-upstream.sh
# Environment: LLAMA_SERVER [scripts/build-llama-server.sh], SERVER [target/debug/strata-desk],
# MODEL [the default model], ROUNDS (3), SLOTS ("1 4"), THREADS (llama-server's, 2),
# OUT [target/bench-upstream].
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${SERVER:-target/debug/strata-desk}
llama=${LLAMA_SERVER:-$(scripts/build-llama-server.sh)}
model=${MODEL:-$("$exe" fetch-model)}
rounds=${ROUNDS:-3}
slot_counts=${SLOTS:-1 4}
threads=${THREADS:-2}
out=${OUT:-target/bench-upstream}
upstream="http://127.0.0.1:18790"
ours="http://127.0.0.1:18791"
mkdir -p "$out"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

wait_for() { # URL PATTERN
  for _ in $(seq 600); do
    curl -sf "$1" 2>/dev/null | grep -q "$2" && return 0
    sleep 0.5
  done
  echo "bench-upstream: $1 never answered $2" >&2
  exit 1
}
start_llama() { # SLOTS: a fresh llama-server (nothing in its cache), 8192 tokens a slot
  "$llama" -m "$model" --host 127.0.0.1 --port 18790 -np "$1" -c $((8192 * $1)) -t "$threads" \
    --metrics >"$out/llama-server.log" 2>&1 &
  llama_pid=$!
  pids+=("$llama_pid")
  wait_for "$upstream/health" '"ok"'
}
start_ours() { # SLOTS
  "$exe" --headless --port 18791 --upstream "$upstream" --model "$model" --parallel "$1" \
    2>"$out/ours.log" &
  ours_pid=$!
  pids+=("$ours_pid")
  wait_for "$ours/v1/scheduler" '"state":"ready"'
}
stop() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
long_short() { # URL FILE SEED
  "$exe" bench solo-long-short --base-url "$1" --long-prompt-tokens 6000 --long-max-tokens 32 \
    --delay-secs 1 --short-priority 10 --rounds 1 --seed "$3" --ignore-eos --json "$2" >/dev/null
}
one_stream() { # URL FILE SEED
  "$exe" bench single-stream --base-url "$1" --prompt-tokens 16 --max-tokens 256 --rounds 1 \
    --seed "$3" --ignore-eos --json "$2" >/dev/null
}

for slots in $slot_counts; do
  for round in $(seq 1 "$rounds"); do
    start_llama "$slots"
    long_short "$upstream" "$out/alone-np$slots.$round.json" $((round * 10))
    stop "$llama_pid"
    start_llama "$slots"
    start_ours "$slots"
    long_short "$ours" "$out/ours-np$slots.$round.json" $((round * 10 + 1))
    stop "$ours_pid"
    stop "$llama_pid"
    echo "solo-long-short, $slots slot(s), round $round done"
  done
done

start_llama 1
for round in $(seq 1 "$rounds"); do
  one_stream "$upstream" "$out/direct.$round.json" $((round * 10 + 2))
  start_ours 1
  one_stream "$ours" "$out/hop.$round.json" $((round * 10 + 3))
  stop "$ours_pid"
  (while :; do
    curl -sf "$upstream/slots" >/dev/null
    curl -sf "$upstream/metrics" >/dev/null
    sleep 1
  done) &
  poller=$!
  one_stream "$upstream" "$out/polled.$round.json" $((round * 10 + 4))
  kill "$poller"
  wait "$poller" 2>/dev/null || true
  echo "one stream, round $round done"
done
stop "$llama_pid"

python3 - "$out" "$rounds" "$slot_counts" <<'PY'
import json, statistics, sys
out, rounds, slot_counts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def records(name, r):
    return json.load(open(f"{out}/{name}.{r}.json"))["records"]

def ttft(name, r, label):
    return next(x["ttft_secs"] for x in records(name, r) if x["label"].startswith(label))

def decode(name, r):
    """Tokens/s by the server's count after the first token (as bench-single-stream.sh)."""
    x = records(name, r)[0]
    return (x["completion_tokens"] - 1) / (x["end_secs"] - x["sent_secs"] - x["ttft_secs"])

def streamed(name, r):
    """Tokens/s as the user sees them: non-empty content deltas between the first and last."""
    return records(name, r)[0]["tokens_per_sec"]

def spread(v, unit=""):
    return f"{statistics.median(v):.2f}{unit} [{min(v):.2f}-{max(v):.2f}]"

rs = range(1, rounds + 1)
for slots in slot_counts:
    a, o = f"alone-np{slots}", f"ours-np{slots}"
    short = [(ttft(a, r, "short"), ttft(o, r, "short")) for r in rs]
    long_ = [(ttft(a, r, "long"), ttft(o, r, "long")) for r in rs]
    print(f"llama-server -np {slots}: short TTFT alone / ours per round: "
          + ", ".join(f"{x:.2f} / {y:.2f} s" for x, y in short))
    print(f"  short TTFT, alone over ours: {spread([x / y for x, y in short], 'x')}")
    print(f"  long TTFT per round: " + ", ".join(f"{x:.1f} / {y:.1f} s" for x, y in long_))
    print(f"  long TTFT, ours over alone: {spread([y / x for x, y in long_], 'x')}")
direct = [decode("direct", r) for r in rs]
hop = [decode("hop", r) for r in rs]
polled = [decode("polled", r) for r in rs]
print(f"one stream, tokens/s direct {spread(direct)}, through ours {spread(hop)}, "
      f"direct polled {spread(polled)}")
print(f"  through ours over direct: {spread([h / d for h, d in zip(hop, direct)], 'x')}; "
      f"per token {spread([1000 / h - 1000 / d for h, d in zip(hop, direct)], ' ms')}")
print(f"  polled over direct: {spread([p / d for p, d in zip(polled, direct)], 'x')}")
direct, hop, polled = ([streamed(n, r) for r in rs] for n in ("direct", "hop", "polled"))
print(f"as streamed (non-empty deltas), direct {spread(direct)}, through ours {spread(hop)}, "
      f"direct polled {spread(polled)}")
print(f"  through ours over direct: {spread([h / d for h, d in zip(hop, direct)], 'x')}; "
      f"polled over direct: {spread([p / d for p, d in zip(polled, direct)], 'x')}")
PY
