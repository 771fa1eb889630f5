#!/usr/bin/env bash
# The full tool loop of four coding-agent CLIs against Strata Desk on the simulated engine:
# for each of Claude Code, Codex CLI, Qwen Code and OpenCode (pinned in agents-check.sh,
# installed under ~/.cache/strata-agents when missing), the engine's script answers the
# agent's task with a call to the agent's own shell tool, the agent runs it (it writes
# loop-result.txt), sends the result back, and the script answers that with a final message.
# An agent passes when the file holds "strata loop ok", it exited 0, and every request it
# sent got a 2xx (none was left unanswered).
#
# Usage: scripts/agents-loop.sh [AGENT...]      # claude codex qwen opencode (default: all four)
# Environment: SERVER_BIN [target/debug/strata-desk], PORT [a free one], AGENT_TIMEOUT [240],
#   OUT_DIR [${TMPDIR:-/tmp}/strata-agents-loop/<time>]; SKIP_INSTALL=1 as in agents-check.sh.
# Needs Node.js 20 or later and npm, and the agents installed (skipped, with the reason
# printed, when one is missing or cannot be installed, unless STRATA_AGENTS_LOOP_REQUIRED=1,
# which CI sets: then that fails) and python3. Exits non-zero when an agent fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
SERVER_BIN=${SERVER_BIN:-$root/target/debug/strata-desk}
PORT=${PORT:-$("${PYTHON:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}/strata-agents-loop/$(date +%Y%m%d-%H%M%S)}
export AGENT_TIMEOUT=${AGENT_TIMEOUT:-240}
if [ $# -gt 0 ]; then agents=("$@"); else agents=(claude codex qwen opencode); fi

# Cannot run here: said, and skipped (or failed, where the loop is required).
skip() {
  echo "SKIPPED agents loop: $*"
  [ "${STRATA_AGENTS_LOOP_REQUIRED:-0}" != 1 ] || { echo "  (required here: failing)" >&2; exit 1; }
  exit 0
}
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ! command -v npm >/dev/null || [ "$node_major" -lt 20 ]; then
  skip "it needs Node.js 20 or later and npm (found node major '$node_major'," \
    "npm $(command -v npm || echo missing))"
fi
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  INSTALL_ONLY=1 "$here/agents-check.sh" "${agents[@]}" || true
fi
prefix=${AGENTS_PREFIX:-$HOME/.cache/strata-agents}/npm/node_modules
missing=()
for a in "${agents[@]}"; do
  case $a in
    claude) p=@anthropic-ai/claude-code ;; codex) p=@openai/codex ;;
    qwen) p=@qwen-code/qwen-code ;; opencode) p=opencode-ai ;;
    *) echo "unknown agent: $a" >&2; exit 2 ;;
  esac
  [ -f "$prefix/$p/package.json" ] || missing+=("$p")
done
[ ${#missing[@]} = 0 ] || skip "not installed and could not be installed: ${missing[*]}" \
  "(npm needs the network; see the lines above)"
[ -x "$SERVER_BIN" ] || { echo "no server binary at $SERVER_BIN (cargo build first)" >&2; exit 1; }

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# The simulated engine's script: the first rule whose text the prompt holds answers. A prompt
# that holds the call (its arguments name the file) is a follow-up: the final answer. Before
# that, each agent's task gets a call to its own shell tool, in the Hermes form the simulated
# model's template reads.
command="printf 'strata loop ok' > loop-result.txt"
"${PYTHON:-python3}" - "$OUT_DIR/script.json" "$command" <<'PY'
import json, sys
out, command = sys.argv[1], sys.argv[2]
def call(name, arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
rules = [
    {"prompt_contains": "loop-result.txt", "output": "Done: loop-result.txt holds the text."},
    {"prompt_contains": "strata loop for claude",
     "output": call("Bash", {"command": command, "description": "Write loop-result.txt"})},
    {"prompt_contains": "strata loop for codex", "output": call("exec_command", {"cmd": command})},
    {"prompt_contains": "strata loop for qwen",
     "output": call("run_shell_command", {"command": command, "is_background": False,
                                          "description": "Write loop-result.txt"})},
    {"prompt_contains": "strata loop for opencode",
     "output": call("bash", {"command": command, "description": "Write loop-result.txt"})},
]
json.dump({"rules": rules}, open(out, "w"), indent=1)
PY

for a in "${agents[@]}"; do
  export "TASK_$a=Run the strata loop for $a: use your shell tool as scripted."
done
rc=0
SERVER_URL=http://127.0.0.1:$PORT SERVER_BIN=$SERVER_BIN SERVER_ENGINE=sim SERVER_CTX=131072 \
  SERVER_ARGS="--sim-script $OUT_DIR/script.json" OUT_DIR=$OUT_DIR/run \
  EXPECT_FILE=loop-result.txt EXPECT_WORDS="strata loop ok" \
  "$here/agents-check.sh" "${agents[@]}" || rc=$?
[ "$rc" = 0 ] || { echo "agents-check.sh could not run (exit $rc)" >&2; exit "$rc"; }

echo
echo "| agent | exit | loop-result.txt | requests | not 2xx or unanswered | verdict |"
echo "| --- | --- | --- | --- | --- | --- |"
failed=0
for a in "${agents[@]}"; do
  d=$OUT_DIR/run/$a
  verdict=$("${PYTHON:-python3}" - "$d" <<'PY' || echo "? | ? | 0 | the summary could not be read | FAIL"
import json, os, sys
d = sys.argv[1]
read = lambda n, default: open(os.path.join(d, n)).read().strip() if os.path.exists(os.path.join(d, n)) else default
exit_code, created = read("exit-code", "?"), read("created", "no")
s = json.load(open(os.path.join(d, "summary.json"))) if os.path.exists(os.path.join(d, "summary.json")) else {}
bad = [f'{r["status"]} {r["path"]}' for r in s.get("non_2xx", [])]
bad += ["unanswered"] * s.get("unanswered", 0)
ok = exit_code == "0" and created == "yes" and not bad and s.get("requests", 0) >= 2
print("%s | %s | %d | %s | %s" % (exit_code, created, s.get("requests", 0), ", ".join(bad) or "none",
                                   "pass" if ok else "FAIL"))
PY
)
  echo "| $a | $verdict |"
  case $verdict in *pass) ;; *) failed=1 ;; esac
done
echo
echo "requests, logs and the script: $OUT_DIR"
exit $failed
