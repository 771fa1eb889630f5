#!/usr/bin/env bash
# One stream's prompt and decode speed, settings side by side (docs/BENCHMARKS.md, "Engine
# defaults" and "Against llama-server"): each setting a fresh server, measured with
# `strata-desk bench single-stream` at each context depth (a prompt of DEPTHS tokens, then
# MAX_TOKENS decoded, end-of-generation ignored), the settings interleaved round by round so
# that drift hits them alike; then a table of medians with the lowest and highest round.
#   scripts/bench-single-stream.sh
# Environment:
#   SETTINGS    "NAME|FLAGS;NAME|FLAGS;...": FLAGS for `strata-desk --headless`, or
#               `llama:FLAGS` for LLAMA_SERVER [default: threads 1 and 2, each with flash
#               attention on and off: how the engine defaults were chosen]
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
        case "$flags" in
            llama:*)
                # shellcheck disable=SC2086
                "$LLAMA_SERVER" -m "$model" --port $port -c "$ctx" -np 1 ${flags#llama:} \
                    >"$out/$name.$round.server.log" 2>&1 &
                server=$!
                wait_ready "$base/health" '"ok"'
                ;;
            *)
                # shellcheck disable=SC2086
                "$server_exe" --headless --port $port --ctx "$ctx" --model "$model" $flags \
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
print(f"medians of {rounds} rounds [lowest-highest]; prompt tokens/s / decode tokens/s")
print("| setting | " + " | ".join(f"{d}-token prompt" for d in depths) + " |")
print("| --- |" + " --- |" * len(depths))
for name in names:
    cells = []
    for d in depths:
        prompt, decode = [], []
        for r in range(1, rounds + 1):
            rec = json.load(open(f"{out}/{name}.{d}.{r}.json"))["records"][0]
            if rec.get("ttft_secs") and rec.get("prompt_tokens"):
                prompt.append(rec["prompt_tokens"] / rec["ttft_secs"])
            if rec.get("tokens_per_sec"):
                decode.append(rec["tokens_per_sec"])
        f = lambda v: f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]" if v else "-"
        cells.append(f"{f(prompt)} / {f(decode)}")
    print(f"| {name} | " + " | ".join(cells) + " |")

def per_round(name, d):
    recs = [json.load(open(f"{out}/{name}.{d}.{r}.json"))["records"][0] for r in range(1, rounds + 1)]
    return [(x["prompt_tokens"] / x["ttft_secs"], x["tokens_per_sec"]) for x in recs]

print(f"\nmedian of the per-round ratios to {names[0]} [lowest-highest]; prompt / decode")
for name in names[1:]:
    cells = []
    for d in depths:
        pairs = list(zip(per_round(name, d), per_round(names[0], d)))
        ratios = [[a[k] / b[k] for a, b in pairs] for k in (0, 1)]
        f = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
        cells.append(f"{f(ratios[0])} / {f(ratios[1])}")
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
