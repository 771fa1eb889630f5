#!/usr/bin/env bash
# The conversation benchmarks of docs/BENCHMARKS.md, side by side in one session: every round
# starts a fresh server for each setting in turn (interleaved, so drift on a noisy machine
# falls on every setting alike) and keeps each report as JSON under $OUT.
#   scripts/bench-conversations.sh [followup|solo|agents|pool|all]
# Environment:
#   EXE           strata-desk (default target/debug/strata-desk)
#   LLAMA_SERVER  a llama-server binary to run beside it (optional; docs/BENCHMARKS.md says how
#                 it was built), with LD_LIBRARY_PATH set by the caller if it needs its libraries
#   OUT           (default target/bench-conversations), ROUNDS (default 10), THREADS (default 2)
#   FIRST_ROUND   the first round's number (default 1: a run continued later keeps its seeds)
#   SETTINGS      only the settings whose names match this regular expression (default: all)
#   MODEL         a GGUF (default: the default model)
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${EXE:-target/debug/strata-desk}
out=${OUT:-target/bench-conversations}
rounds=${ROUNDS:-10}
first=${FIRST_ROUND:-1}
only=${SETTINGS:-.}
threads=${THREADS:-2}
model=${MODEL:-$("$exe" fetch-model)}
port=8096
base="http://127.0.0.1:$port"
mkdir -p "$out"
what=${1:-all}

wait_ready() { # wait_ready URL PATTERN
    for _ in $(seq 600); do
        if curl -sf "$1" 2>/dev/null | grep -q "$2"; then return 0; fi
        sleep 0.5
    done
    echo "the server never became ready ($1)" >&2
    exit 1
}

serve() { # serve NAME SETTING: ours with a config JSON, or llama-server with its flags
    local name=$1 setting=$2
    case "$setting" in
        llama:*)
            [ -n "${LLAMA_SERVER:-}" ] || return 1
            # shellcheck disable=SC2086
            "$LLAMA_SERVER" -m "$model" --port "$port" -t "$threads" ${setting#llama:} \
                > "$out/$name.server.log" 2>&1 &
            server=$!
            wait_ready "$base/health" '"ok"'
            ;;
        *)
            echo "$setting" > "$out/$name.config.json"
            "$exe" --headless --port "$port" --config "$out/$name.config.json" --model "$model" \
                --threads "$threads" > "$out/$name.server.log" 2>&1 &
            server=$!
            wait_ready "$base/v1/scheduler" '"state":"ready"'
            ;;
    esac
}

stop() {
    kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
}

bench() { # bench NAME ROUND SCENARIO [flags...]
    local name=$1 round=$2
    shift 2
    "$exe" bench "$@" --base-url "$base" --ignore-eos --seed "$round" --label "$name" \
        --json "$out/$name.r$round.json" > "$out/$name.r$round.txt"
    grep -E "TTFT|cached|total|continued|later turns" "$out/$name.r$round.txt" | sed "s/^/$name r$round: /"
}

# A setting: NAME|CONFIG-or-llama:FLAGS
FOLLOWUP=(
    "defaults|{}"
    "solo-on|{\"solo_priority\": true}"
    "features-off|{\"solo_priority\": false, \"give_way\": \"off\"}"
    "llama-1-slot|llama:-c 8192 -np 1"
    "llama-4-slots|llama:-c 8192 -np 4 --kv-unified-per-slot 8192"
)
SOLO=(
    "defaults|{}"
    "chunk-256|{\"chunk_tokens\": 256}"
    "features-off|{\"solo_priority\": false, \"give_way\": \"off\"}"
)

if [ "$what" = followup ] || [ "$what" = all ]; then
    for round in $(seq "$first" "$rounds"); do
        for s in "${FOLLOWUP[@]}"; do
            IFS='|' read -r name setting <<< "$s"
            [[ $name =~ $only ]] || continue
            serve "followup.$name" "$setting" || continue
            # B's history about 1,200 tokens, the fresh A about 1,800, B's new turn about 24,
            # sent 1 s into A's read
            bench "followup.$name" "$round" followup-vs-fresh --history-tokens 1200 \
                --fresh-prompt-tokens 1800 --followup-tokens 24 --max-tokens 32 --gap-secs 1 \
                --rounds 1
            stop
        done
    done
fi

if [ "$what" = solo ] || [ "$what" = all ]; then
    for round in $(seq "$first" "$rounds"); do
        for s in "${SOLO[@]}"; do
            IFS='|' read -r name setting <<< "$s"
            [[ $name =~ $only ]] || continue
            serve "solo.$name" "$setting"
            bench "solo.$name" "$round" solo-long-short --long-prompt-tokens 1024 \
                --long-max-tokens 64 --phase read --delay-secs 2 --rounds 1
            stop
        done
    done
fi

if [ "$what" = agents ] || [ "$what" = all ]; then
    # As the previous measurement (docs/bench-results/agent-replay.solo-on.json): solo mode,
    # solo_priority on, the default engine threads.
    for round in $(seq "${AGENT_ROUNDS:-2}"); do
        echo '{"solo_priority": true}' > "$out/agents.config.json"
        "$exe" --headless --port "$port" --config "$out/agents.config.json" --model "$model" \
            > "$out/agents.server.log" 2>&1 &
        server=$!
        wait_ready "$base/v1/scheduler" '"state":"ready"'
        bench agents "$round" agent-replay
        stop
    done
fi
