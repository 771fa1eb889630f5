#!/usr/bin/env bash
# The park measurement of docs/BENCHMARKS.md ("A park with room in the pool"):
#   SHORT=300 LONG_MAX=300 run.sh NAME CTX ROUNDS   (CTX 8192: parks in the pool; 1536: to host RAM)
# OUT (default /tmp/park) holds the reports. Prints the park counters and the host copies logged.
set -e
mkdir -p "${OUT:-/tmp/park}"
cd "$(dirname "$0")/../../.."
name=$1 ctx=$2 rounds=${3:-3}
model=$(./target/debug/strata-desk fetch-model)
echo '{"solo_priority": true}' > ${OUT:-/tmp/park}/$name.config.json
STRATA_LOG=info ./target/debug/strata-desk --headless --port 8097 --config ${OUT:-/tmp/park}/$name.config.json --model "$model" --threads 2 --ctx $ctx > ${OUT:-/tmp/park}/$name.server.log 2>&1 &
server=$!
for i in $(seq 600); do curl -sf http://127.0.0.1:8097/v1/scheduler 2>/dev/null | grep -q '"state":"ready"' && break; sleep 0.5; done
./target/debug/strata-desk bench solo-long-short --base-url http://127.0.0.1:8097 --phase decode --long-prompt-tokens 1024 --long-max-tokens ${LONG_MAX:-256} --short-prompt-tokens ${SHORT:-24} --delay-secs 1 --rounds $rounds --short-priority 5 --ignore-eos --label $name --json ${OUT:-/tmp/park}/$name.json > ${OUT:-/tmp/park}/$name.txt
curl -s http://127.0.0.1:8097/v1/scheduler | python3 -c "import json,sys; d=json.load(sys.stdin); c=d['counters']; print({k:c[k] for k in c if 'park' in k or 'preempt' in k or 'pause' in k})"
kill -TERM $server; wait $server || true
grep -c "host RAM" ${OUT:-/tmp/park}/$name.server.log || true
grep "host RAM" ${OUT:-/tmp/park}/$name.server.log | head -4
