#!/usr/bin/env bash
# The seeds' scenarios against the real engine, each setting side by side in one session
# (docs/BENCHMARKS.md). Starts `strata-desk --headless` with each setting in turn, runs
# `strata-desk bench`, and keeps every report as JSON under $OUT.
#   scripts/bench-matrix.sh [solo|followup|burst|agents|soak|all]
# Environment: EXE (default target/debug/strata-desk), OUT (default target/bench),
# SOAK_MINUTES (default 10), MODEL (default: the default model).
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${EXE:-target/debug/strata-desk}
out=${OUT:-target/bench}
port=8095
base="http://127.0.0.1:$port"
mkdir -p "$out"
what=${1:-all}

serve() { # serve NAME CONFIG_JSON [flags...]: start a server with this config, wait until ready
    local name=$1 config=$2
    shift 2
    echo "$config" > "$out/$name.config.json"
    local model_flag=()
    if [ -n "${MODEL:-}" ]; then model_flag=(--model "$MODEL"); fi
    "$exe" --headless --port "$port" --config "$out/$name.config.json" "${model_flag[@]}" "$@" \
        2> "$out/$name.server.log" &
    server=$!
    for _ in $(seq 600); do
        if curl -sf "$base/v1/scheduler" | grep -q '"state":"ready"'; then return 0; fi
        sleep 0.5
    done
    echo "the server for $name never became ready" >&2
    exit 1
}

stop() {
    kill -TERM "$server" && wait "$server" || true
}

bench() { # bench NAME SCENARIO [flags...]
    local name=$1
    shift
    echo "== $name"
    "$exe" bench "$@" --base-url "$base" --ignore-eos --label "$name" --json "$out/$name.json" \
        | tee "$out/$name.txt"
}

LONG=1024
if [ "$what" = solo ] || [ "$what" = solo-decode ] || [ "$what" = all ]; then
    # solo-small: small_request_tokens 256, so the 1024-token long prompt is not "small" too
    # (with the default 2048 both get the +1 boost and R7 has no reason to pause the long).
    for setting in "solo-on|{\"solo_priority\": true}|" \
                   "solo-small|{\"solo_priority\": true, \"small_request_tokens\": 256}|" \
                   "features-off|{\"solo_priority\": false, \"give_way\": \"off\"}|" \
                   "batch-4|{\"give_way\": \"off\"}|--parallel 4"; do
        IFS='|' read -r name config flags <<< "$setting"
        # shellcheck disable=SC2086
        serve "$name" "$config" $flags
        if [ "$what" != solo-decode ]; then
            bench "solo-long-short.read.$name" solo-long-short --long-prompt-tokens $LONG \
                --long-max-tokens 256 --phase read --delay-secs 2 --rounds 3
        fi
        # 6 s into the decode: past the 5 s min_run_quantum_secs a stream runs before R7
        # may pause it.
        bench "solo-long-short.decode.$name" solo-long-short --long-prompt-tokens $LONG \
            --long-max-tokens 256 --phase decode --delay-secs 6 --rounds 3
        stop
    done
fi

if [ "$what" = followup ] || [ "$what" = all ]; then
    for give_way in left whole; do
        serve "followup.$give_way" "{\"give_way\": \"$give_way\"}" --parallel 2
        bench "followup-vs-fresh.$give_way" followup-vs-fresh --rounds 2
        stop
    done
fi

if [ "$what" = burst ] || [ "$what" = all ]; then
    serve burst '{}'
    bench "burst-priority.priority" burst-priority --priority 10
    bench "burst-priority.none" burst-priority --priority 0
    stop
fi

if [ "$what" = agents ] || [ "$what" = all ]; then
    serve agents.solo '{"solo_priority": true}'
    bench "agent-replay.solo-on" agent-replay
    stop
    serve agents.batch '{}' --parallel 4
    bench "agent-replay.batch-4" agent-replay
    stop
fi

if [ "$what" = soak ] || [ "$what" = all ]; then
    serve soak '{"solo_priority": true}'
    bench "soak" soak --minutes "${SOAK_MINUTES:-10}" --restart
    stop
fi
