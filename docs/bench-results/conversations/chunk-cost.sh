#!/usr/bin/env bash
# Prompt-read throughput by chunk size, interleaved rounds, THREADS engine threads (2), a
# prompt of WORDS words (1500: about 1.5K tokens).
set -euo pipefail
exe=${EXE:-/work/main/target/debug/strata-desk}
prompt=$(python3 -c "
import random
random.seed(7)
words='the a of town river trade wool copper barley salt timber glass cheese market year north south road bridge mill harbor'.split()
print(' '.join(random.choice(words) for _ in range(${WORDS:-1500})))")
rounds=${ROUNDS:-5}
for r in $(seq $rounds); do
  for c in ${SIZES:-64 128 256}; do
    line=$("$exe" generate --threads ${THREADS:-2} --max-tokens 2 --chunk-tokens $c "$prompt" 2>&1 >/dev/null | tail -1)
    echo "round $r chunk $c: $line"
  done
done
