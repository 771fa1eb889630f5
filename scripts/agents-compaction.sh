#!/usr/bin/env bash
# When does each agent compact its history? Runs an agent CLI (pinned in agents-check.sh)
# against the simulated engine through a scripted task of STEPS shell-tool calls, each of which
# prints about STEP_BYTES bytes, so the usage the server reports grows turn by turn (the
# simulated vocabulary is bytes: a prompt's tokens are its bytes), with the agent's context
# setting given in the environment. Prints one row per request: the prompt tokens the server
# reported, the messages sent, and whether it was a compaction (a summary request, or a
# history that shrank).
#
# Usage: scripts/agents-compaction.sh AGENT      # claude codex opencode qwen
# Environment:
#   STEPS [8]   STEP_BYTES [8000]   AGENT_TIMEOUT [420]   PORT [18182]
#   SERVER_BIN [target/debug/strata-desk]   SERVER_CTX [262144]
#   the agent's context setting, as agents-check.sh reads it: CLAUDE_CODE_AUTO_COMPACT_WINDOW,
#   CODEX_CONTEXT_WINDOW and CODEX_AUTO_COMPACT_LIMIT, OPENCODE_LIMIT (JSON)
#   OUT_DIR [${TMPDIR:-/tmp}/strata-agents-compaction/<agent>-<time>]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
agent=${1:?usage: scripts/agents-compaction.sh AGENT}
STEPS=${STEPS:-8}
STEP_BYTES=${STEP_BYTES:-8000}
PORT=${PORT:-18182}
SERVER_BIN=${SERVER_BIN:-$root/target/debug/strata-desk}
SERVER_CTX=${SERVER_CTX:-262144}
export AGENT_TIMEOUT=${AGENT_TIMEOUT:-420}
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}/strata-agents-compaction/$agent-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# Rules, latest step first (a later prompt holds every earlier marker): a summary request is
# answered with a summary that names the last step, so the agent goes on from there; step k's
# output makes the next call; the last makes the final answer.
"${PYTHON:-python3}" - "$OUT_DIR/script.json" "$agent" "$STEPS" "$STEP_BYTES" <<'PY'
import json, sys
# what each agent's compaction request says (Claude Code, Codex, OpenCode), as seen
PHRASES = ("create a detailed summary", "CONTEXT CHECKPOINT COMPACTION",
           "context summarization agent", "summary of the conversation")
out, agent, steps, step_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = max(1, step_bytes // 5)  # `seq` prints about 5 bytes a line
def command(k):
    return f"seq 100000 {100000 + lines - 1}; echo PROBE-STEP-{k}-DONE"
def call(k):
    name, args = {
        "claude": ("Bash", {"command": command(k), "description": f"Step {k}"}),
        "codex": ("exec_command", {"cmd": command(k)}),
        "qwen": ("run_shell_command", {"command": command(k), "is_background": False,
                                       "description": f"Step {k}"}),
        "opencode": ("bash", {"command": command(k), "description": f"Step {k}"}),
    }[agent]
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
summary = ("<analysis>The probe's steps ran.</analysis>\n<summary>The user asked for the "
           f"strata compaction probe; the last step done was PROBE-STEP-{steps}-DONE.</summary>")
rules = [{"prompt_contains": p, "output": summary} for p in
         PHRASES]
rules.append({"prompt_contains": f"PROBE-STEP-{steps}-DONE", "output": "All probe steps are done."})
for k in range(steps - 1, 0, -1):
    rules.append({"prompt_contains": f"PROBE-STEP-{k}-DONE", "output": call(k + 1)})
rules.append({"prompt_contains": "strata compaction probe", "output": call(1)})
json.dump({"rules": rules}, open(out, "w"), indent=1)
PY

export "TASK_$agent=Run the strata compaction probe: call your shell tool as scripted, step by step."
rc=0
SERVER_URL=http://127.0.0.1:$PORT SERVER_BIN=$SERVER_BIN SERVER_ENGINE=sim SERVER_CTX=$SERVER_CTX \
  SERVER_ARGS="--sim-script $OUT_DIR/script.json" OUT_DIR=$OUT_DIR/run \
  EXPECT_FILE=none EXPECT_WORDS=none SKIP_INSTALL=${SKIP_INSTALL:-0} \
  "$here/agents-check.sh" "$agent" > "$OUT_DIR/check.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$OUT_DIR/check.log" >&2; exit "$rc"; }

"${PYTHON:-python3}" - "$OUT_DIR/run/$agent/requests" <<'PY'
import json, os, re, sys
PHRASES = ("create a detailed summary", "CONTEXT CHECKPOINT COMPACTION",
           "context summarization agent", "summary of the conversation")
d = sys.argv[1]
rows, last_msgs = [], None
for name in sorted(os.listdir(d)):
    if not name.endswith(".json") or not name[:4].isdigit():
        continue
    r = json.load(open(os.path.join(d, name)))
    body = r.get("body") or {}
    msgs = body.get("messages") or body.get("input") or []
    n = len(msgs) if isinstance(msgs, list) else 1
    text = json.dumps(body)
    resp = (r.get("response_head") or "") + (r.get("response_tail") or "")
    m = (re.search(r'"input_tokens":\s*(\d+)', resp) or re.search(r'"prompt_tokens":\s*(\d+)', resp))
    tokens = m.group(1) if m else "?"
    steps = re.findall(r"PROBE-STEP-(\d+)-DONE", text)
    last_step = max(map(int, steps)) if steps else 0
    summary = any(p in text for p in PHRASES)
    tools = len(body.get("tools") or [])
    shrank = last_msgs is not None and tools and n < last_msgs
    if tools:
        last_msgs = n
    kind = "summary request" if summary else ("history shrank" if shrank else "")
    rows.append(f"| {r['seq']} | {r['path'].split('?')[0]} | {r.get('status')} | {tools} | {n} | "
                f"{len(text)} | {tokens} | {last_step} | {kind} |")
print("| seq | route | status | tools | messages | body bytes | prompt tokens | last step seen | compaction |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
print("\n".join(rows))
PY
echo "exit: $(cat "$OUT_DIR/run/$agent/exit-code" 2>/dev/null || echo '?'); logs: $OUT_DIR"
