#!/usr/bin/env bash
# One stream's prompt and decode speed, settings side by side (docs/BENCHMARKS.md, "Engine
# defaults" and "Against llama-server"): each setting a fresh server, measured with
# `strata-desk bench single-stream` at each context depth (a prompt of DEPTHS words, about
# 1.15 tokens each with SmolLM2's tokenizer: the server's count is in each JSON, then
# MAX_TOKENS decoded, end-of-generation ignored), the settings interleaved round by round so
# that drift hits them alike; then a table of medians with the lowest and highest round, and
# of the per-round ratios. Decode is given twice: as streamed (non-empty content deltas, what
# the user sees) and by the server's token count (two servers whose greedy texts differ can
# stream a different number of deltas for the same tokens: ours hides control tokens).
#   scripts/bench-single-stream.sh
# Environment:
#   SETTINGS    "NAME|FLAGS;NAME|FLAGS;...": FLAGS for `strata-desk --headless`, or
#               `llama:FLAGS` for LLAMA_SERVER [default: threads 1 and 2, each with flash
#               attention on and off: how the engine defaults were chosen]; FLAGS may begin
#               with KEY=VALUE words, set for that server alone (e.g.
#               `STRATA_BACKENDS_DIR=/tmp/only-haswell --threads 2`: one CPU variant forced;
#               `LLAMA_SERVER=build-avx2/bin/llama-server llama:-t 2`: another llama-server)
#   ROUNDS (3), DEPTHS ("16 1500 6000"), MAX_TOKENS (128), CTX (8192)
#   SERVER      our binary served [target/release/strata-desk]; CLIENT: the bench [SERVER]
#   LLAMA_SERVER  a llama-server binary, for `llama:` settings
#   MODEL       the GGUF [the default model]; OUT [target/bench-single-stream]
#   HOGS        CPU-bound processes kept running beside the servers the whole time (as the
#               agent's builds and tests on the same machine) [0]
set -euo pipefail
cd "$(dirname "$0")/.."
server_exe=${SERVER:-target/release/strata-desk}
client_exe=${CLIENT:-$server_exe}
out=${OUT:-target/bench-single-stream}
rounds=${ROUNDS:-3}
depths=${DEPTHS:-16 1500 6000}
max_tokens=${MAX_TOKENS:-128}
ctx=${CTX:-8192}
settings=${SETTINGS:-"t1-fa-on|--threads 1 --flash-attn on;t1-fa-off|--threads 1 --flash-attn off;t2-fa-on|--threads 2 --flash-attn on;t2-fa-off|--threads 2 --flash-attn off"}
model=${MODEL:-$("$server_exe" fetch-model)}
port=8097
base="http://127.0.0.1:$port"
mkdir -p "$out"

wait_ready() { # URL PATTERN
    for _ in $(seq 600); do
        curl -sf "$1" 2>/dev/null | grep -q "$2" && return 0
        sleep 0.5
    done
    echo "the server never became ready ($1)" >&2
    exit 1
}

hogs=()
for _ in $(seq 1 "${HOGS:-0}"); do
    (while :; do :; done) &
    hogs+=($!)
done
trap 'for h in "${hogs[@]}"; do kill "$h" 2>/dev/null || true; done' EXIT

IFS=';' read -r -a list <<<"$settings"
for round in $(seq 1 "$rounds"); do
    for setting in "${list[@]}"; do
        IFS='|' read -r name flags <<<"$setting"
        # leading KEY=VALUE words: this server's environment
        server_env=()
        while [[ "$flags" =~ ^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*)[[:space:]]*(.*)$ ]]; do
            server_env+=("${BASH_REMATCH[1]}")
            flags=${BASH_REMATCH[2]}
        done
        llama_exe=${LLAMA_SERVER:-}
        for kv in "${server_env[@]}"; do
            [[ "$kv" == LLAMA_SERVER=* ]] && llama_exe=${kv#LLAMA_SERVER=}
        done
        case "$flags" in
            llama:*)
                # shellcheck disable=SC2086
                env "${server_env[@]}" "$llama_exe" -m "$model" --port $port -c "$ctx" -np 1 ${flags#llama:} \
                    >"$out/$name.$round.server.log" 2>&1 &
                server=$!
                wait_ready "$base/health" '"ok"'
                ;;
            *)
                # shellcheck disable=SC2086
                env "${server_env[@]}" "$server_exe" --headless --port $port --ctx "$ctx" --model "$model" $flags \
                    2>"$out/$name.$round.server.log" &
                server=$!
                wait_ready "$base/v1/scheduler" '"state":"ready"'
                ;;
        esac
        for depth in $depths; do
            "$client_exe" bench single-stream --base-url "$base" --ignore-eos --rounds 1 \
                --seed $((round * 100 + depth)) --prompt-tokens "$depth" \
                --max-tokens "$max_tokens" --label "$name" \
                --json "$out/$name.$depth.$round.json" >/dev/null
        done
        kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
        echo "round $round: $name done"
    done
done

python3 - "$out" "$rounds" "$depths" "$settings" <<'PY'
import json, statistics, sys
out, rounds, depths, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
names = [s.split("|")[0] for s in settings.split(";")]

def figures(name, d, r):
    """prompt tokens/s, decode as streamed (non-empty content deltas after the first, per
    second between the first and the last), decode by the server's count (completion tokens
    after the first, per second from the first delta to the response's end: a server that
    streams a token as no delta, e.g. a control token it hides, is not counted slower)"""
    x = json.load(open(f"{out}/{name}.{d}.{r}.json"))["records"][0]
    if not x.get("ttft_secs") or not x.get("prompt_tokens"):
        return None
    after_first = x["end_secs"] - x["sent_secs"] - x["ttft_secs"]
    return (
        x["prompt_tokens"] / x["ttft_secs"],
        x.get("tokens_per_sec"),
        (x["completion_tokens"] - 1) / after_first if after_first > 0 else None,
    )

def spread(v, digits=1):
    v = [x for x in v if x is not None]
    if not v:
        return "-"
    return f"{statistics.median(v):.{digits}f} [{min(v):.{digits}f}-{max(v):.{digits}f}]"

print(f"medians of {rounds} rounds [lowest-highest]; prompt tokens/s / decode tokens/s as "
      "streamed (non-empty deltas) / decode tokens/s by the server's count")
print("| setting | " + " | ".join(f"{d}-word prompt" for d in depths) + " |")
print("| --- |" + " --- |" * len(depths))
rows = {(n, d): [figures(n, d, r) for r in range(1, rounds + 1)] for n in names for d in depths}
for name in names:
    cells = []
    for d in depths:
        got = [f for f in rows[(name, d)] if f]
        cells.append(" / ".join(spread([f[k] for f in got]) for k in range(3)))
    print(f"| {name} | " + " | ".join(cells) + " |")

print(f"\nmedian of the per-round ratios to {names[0]} [lowest-highest]; the same three")
for name in names[1:]:
    cells = []
    for d in depths:
        pairs = [(a, b) for a, b in zip(rows[(name, d)], rows[(names[0], d)]) if a and b]
        cells.append(" / ".join(
            spread([a[k] / b[k] for a, b in pairs if a[k] and b[k]], 3) for k in range(3)))
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
