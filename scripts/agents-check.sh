#!/usr/bin/env bash
# Runs real coding-agent CLIs (Claude Code, Codex CLI, aider, OpenCode) once each against a
# Strata Desk server, through a logging proxy (scripts/agents-proxy.py) that saves every request
# as JSON, and prints per agent: connected, completed, requests, last error.
#
# Pinned versions (installed into a private prefix, only when missing):
CLAUDE_CODE_VERSION=2.1.332   # npm @anthropic-ai/claude-code  (native binary, /v1/messages)
CODEX_VERSION=0.171.0         # npm @openai/codex               (native binary, /v1/responses)
OPENCODE_VERSION=1.18.33      # npm opencode-ai                 (native binary, /v1/chat/completions)
QWEN_CODE_VERSION=0.24.4      # npm @qwen-code/qwen-code        (node, /v1/chat/completions)
AIDER_VERSION=0.86.2          # PyPI aider-chat, in a venv      (litellm, /v1/chat/completions)
#
# Usage:
#   # 1. start a server first (any engine), e.g.
#   strata-desk --headless --engine sim --port 8080 --ctx 65536
#   # 2. then
#   scripts/agents-check.sh [AGENT...]    # AGENT: claude codex aider opencode qwen
#                                         # (default: the first four)
#
# Environment (all optional):
#   SERVER_URL      the server to test                       [http://127.0.0.1:8080]
#   SERVER_BIN      if set, the script starts this binary itself on SERVER_URL's port and stops it
#                   at the end: $SERVER_BIN --headless --engine $SERVER_ENGINE --port PORT
#                   --ctx $SERVER_CTX $SERVER_ARGS
#   SERVER_ENGINE   [sim]        SERVER_CTX [65536]
#   SERVER_ARGS     extra server flags, word-split, e.g.
#                   "--max-output-tokens-default 1024 --max-output-tokens-cap 4096"
#   MODEL           the model name the agents send       [the first id of GET /v1/models]
#   TASK            the prompt                           [Create a file hello.txt containing the word hi]
#   TASK_<agent>    the prompt for one agent (TASK_codex=...)                          [TASK]
#   EXPECT_FILE     the file the task creates, in the agent's repo                [hello.txt]
#   EXPECT_WORDS    what it must contain (grep -w)                                       [hi]
#   AGENT_TIMEOUT   seconds per agent run (timeout(1))   [300]
#   OUT_DIR         where logs and captured requests go  [${TMPDIR:-/tmp}/strata-agents-check/<time>]
#   AGENTS_PREFIX   private install prefix               [~/.cache/strata-agents]
#   SKIP_INSTALL=1  use what is installed, never install; INSTALL_ONLY=1: install and exit
#   UPDATE_FIXTURES=1  also write redacted fixtures (scripts/agents-redact.py) into
#                   tests/fixtures/agents/ (FIXTURES_DIR)
#   PYTHON          [python3]
#   The agents' context settings, as docs/DEPLOYMENT.md ("Context windows") documents them:
#   CLAUDE_CODE_AUTO_COMPACT_WINDOW  passed to Claude Code when set          [unset]
#   CODEX_CONTEXT_WINDOW     Codex's model_context_window          [the server's context]
#   CODEX_AUTO_COMPACT_LIMIT Codex's model_auto_compact_token_limit when set   [unset]
#   OPENCODE_LIMIT           OpenCode's model `limit` object (JSON) when set    [unset]
#
# Each agent runs in a fresh git repo under OUT_DIR with its own HOME/XDG dirs (nothing in the
# real home is read or written), with telemetry, update checks and other nonessential traffic off.
# Per agent OUT_DIR holds: <agent>/requests/NNNN-*.json (one file per request: method, path,
# selected headers, parsed body, status, error bodies), <agent>/stdout.log, <agent>/stderr.log,
# <agent>/cmd.txt (the exact command line), <agent>/summary.json; OUT_DIR/summary.md: the table.
# The agents' own exit codes never fail the script; it exits non-zero only when it cannot run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
SERVER_URL=${SERVER_URL:-http://127.0.0.1:8080}
SERVER_URL=${SERVER_URL%/}
SERVER_ENGINE=${SERVER_ENGINE:-sim}
SERVER_CTX=${SERVER_CTX:-65536}
SERVER_ARGS=${SERVER_ARGS:-}
TASK=${TASK:-Create a file hello.txt containing the word hi}
EXPECT_FILE=${EXPECT_FILE:-hello.txt}
EXPECT_WORDS=${EXPECT_WORDS:-hi}
AGENT_TIMEOUT=${AGENT_TIMEOUT:-300}
AGENTS_PREFIX=${AGENTS_PREFIX:-$HOME/.cache/strata-agents}
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}/strata-agents-check/$(date +%Y%m%d-%H%M%S)}
FIXTURES_DIR=${FIXTURES_DIR:-$root/tests/fixtures/agents}
npm_prefix=$AGENTS_PREFIX/npm
aider_venv=$AGENTS_PREFIX/aider-venv

if [ $# -gt 0 ]; then agents=("$@"); else agents=(claude codex aider opencode); fi
for a in "${agents[@]}"; do
  case $a in claude|codex|aider|opencode|qwen) ;; *) echo "unknown agent: $a" >&2; exit 2 ;; esac
done

log() { printf '== %s\n' "$*" >&2; }

# ---------------------------------------------------------------- install (idempotent)
npm_has() { # package version
  local pj=$npm_prefix/node_modules/$1/package.json
  [ -f "$pj" ] && [ "$(node -p "require('$pj').version" 2>/dev/null)" = "$2" ]
}

install_npm() { # package version
  npm_has "$1" "$2" && return 0
  command -v npm >/dev/null || { echo "npm is needed to install $1" >&2; return 1; }
  log "installing $1@$2 into $npm_prefix"
  mkdir -p "$npm_prefix"
  # One package at a time, quietly; the platform binary comes as an optional dependency.
  nice npm install --prefix "$npm_prefix" --save-exact --no-audit --no-fund --loglevel=error \
    "$1@$2" >&2
}

install_aider() {
  [ -x "$aider_venv/bin/aider" ] &&
    [ "$("$aider_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" = "$AIDER_VERSION" ] &&
    return 0
  log "installing aider-chat==$AIDER_VERSION into $aider_venv"
  "$PYTHON" -m venv "$aider_venv"
  nice "$aider_venv/bin/pip" install --quiet --no-input "aider-chat==$AIDER_VERSION" >&2
}

# The npm wrappers' bin/ entries are replaced by their postinstall scripts; npm may skip those
# scripts (allowScripts), so call the platform packages' binaries directly when they are there.
npm_native() { # wrapper-package platform-package-glob binary-relpath fallback-bin
  local d
  for d in $npm_prefix/node_modules/$2; do
    [ -x "$d/$3" ] && { echo "$d/$3"; return 0; }
  done
  echo "$npm_prefix/node_modules/.bin/$4"
}
claude_bin() { npm_native @anthropic-ai/claude-code '@anthropic-ai/claude-code-linux-x64' claude claude; }
codex_bin() { echo "$npm_prefix/node_modules/.bin/codex"; }    # a small node launcher
opencode_bin() {
  # The baseline build runs on CPUs without AVX2 too; prefer the regular one.
  local b
  b=$(npm_native opencode-ai 'opencode-linux-x64' bin/opencode opencode)
  if ! "$b" --version >/dev/null 2>&1; then
    b=$(npm_native opencode-ai 'opencode-linux-x64-baseline' bin/opencode opencode)
  fi
  echo "$b"
}
aider_bin() { echo "$aider_venv/bin/aider"; }
qwen_bin() { echo "$npm_prefix/node_modules/.bin/qwen"; }    # node

install_agent() {
  case $1 in
    claude) install_npm @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" ;;
    codex) install_npm @openai/codex "$CODEX_VERSION" ;;
    opencode) install_npm opencode-ai "$OPENCODE_VERSION" ;;
    qwen) install_npm @qwen-code/qwen-code "$QWEN_CODE_VERSION" ;;
    aider) install_aider ;;
  esac
}

agent_version() {
  case $1 in
    claude) echo "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" ;;
    codex) echo "@openai/codex@$CODEX_VERSION" ;;
    opencode) echo "opencode-ai@$OPENCODE_VERSION" ;;
    qwen) echo "@qwen-code/qwen-code@$QWEN_CODE_VERSION" ;;
    aider) echo "aider-chat==$AIDER_VERSION" ;;
  esac
}

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  for a in "${agents[@]}"; do
    install_agent "$a" || log "install of $a failed (its row will say so)"
  done
fi
[ "${INSTALL_ONLY:-0}" = 1 ] && exit 0

# ---------------------------------------------------------------- server
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ -n "${SERVER_BIN:-}" ]; then
  port=$(SERVER_URL=$SERVER_URL "$PYTHON" -c 'import os,urllib.parse as u; print(u.urlsplit(os.environ["SERVER_URL"]).port or 80)')
  # shellcheck disable=SC2086  # SERVER_ARGS is word-split on purpose
  set -- "$SERVER_BIN" --headless --engine "$SERVER_ENGINE" --port "$port" --ctx "$SERVER_CTX" $SERVER_ARGS
  log "starting server: $*"
  echo "$*" > "$OUT_DIR/server-cmd.txt"
  "$@" > "$OUT_DIR/server.log" 2>&1 &
  pids+=($!)
fi

log "waiting for $SERVER_URL/health"
ready=0
for _ in $(seq 120); do
  if h=$(curl -sf --max-time 2 "$SERVER_URL/health" 2>/dev/null) && grep -q '"ready"' <<<"$h"; then
    ready=1; break
  fi
  if [ -n "${SERVER_BIN:-}" ] && ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "the server exited:" >&2; tail -n 20 "$OUT_DIR/server.log" >&2; exit 1
  fi
  sleep 1
done
if [ $ready != 1 ]; then
  echo "no ready server at $SERVER_URL (start one first, or set SERVER_BIN)" >&2
  exit 1
fi
echo "$h" > "$OUT_DIR/health.json"
if [ -z "${MODEL:-}" ]; then
  MODEL=$(curl -sf "$SERVER_URL/v1/models" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])' 2>/dev/null || echo simulated)
fi
ctx=$("$PYTHON" -c 'import json,sys; e=json.load(open(sys.argv[1]))["engine"]; print(e.get("context_tokens") or 32768)' "$OUT_DIR/health.json" 2>/dev/null || echo 32768)
log "server ready: model=$MODEL context=$ctx; output in $OUT_DIR"

# ---------------------------------------------------------------- per agent
start_proxy() { # dir -> sets proxy_pid, proxy_url
  rm -f "$1/proxy.port"
  "$PYTHON" "$here/agents-proxy.py" --upstream "$SERVER_URL" --out "$1/requests" \
    --port-file "$1/proxy.port" 2> "$1/proxy.log" &
  proxy_pid=$!
  pids+=("$proxy_pid")
  for _ in $(seq 50); do [ -s "$1/proxy.port" ] && break; sleep 0.1; done
  [ -s "$1/proxy.port" ] || { echo "proxy did not start: $(cat "$1/proxy.log")" >&2; exit 1; }
  proxy_url=http://127.0.0.1:$(cat "$1/proxy.port")
}

make_repo() { # dir
  mkdir -p "$1"
  git -C "$1" init -q -b main
  git -C "$1" config user.email agent@example.invalid
  git -C "$1" config user.name "Agents Check"
  echo "# scratch project for scripts/agents-check.sh" > "$1/README.md"
  git -C "$1" add README.md
  git -C "$1" commit -qm init
}

# Common environment: private HOME and XDG dirs, no telemetry or update checks.
agent_env() { # dir -> prints env assignments for env(1)
  local h=$1/home
  mkdir -p "$h/.config" "$h/.local/share" "$h/.local/state" "$h/.cache"
  printf '%s\n' "HOME=$h" "XDG_CONFIG_HOME=$h/.config" "XDG_DATA_HOME=$h/.local/share" \
    "XDG_STATE_HOME=$h/.local/state" "XDG_CACHE_HOME=$h/.cache" \
    "PATH=$PATH" "LANG=${LANG:-C.UTF-8}" "TERM=dumb" "NO_COLOR=1" "CI=1" \
    "DO_NOT_TRACK=1"
}

run_claude() { # dir repo
  local bin; bin=$(claude_bin)
  cmd=(env -i "${envs[@]}"
    ANTHROPIC_BASE_URL="$proxy_url" ANTHROPIC_AUTH_TOKEN=dummy
    ANTHROPIC_MODEL="$MODEL" ANTHROPIC_SMALL_FAST_MODEL="$MODEL"
    ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL" ANTHROPIC_DEFAULT_SONNET_MODEL="$MODEL"
    ANTHROPIC_DEFAULT_OPUS_MODEL="$MODEL"
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1
    DISABLE_ERROR_REPORTING=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1
    ${CLAUDE_CODE_AUTO_COMPACT_WINDOW:+CLAUDE_CODE_AUTO_COMPACT_WINDOW=$CLAUDE_CODE_AUTO_COMPACT_WINDOW}
    IS_SANDBOX=1
    "$bin" -p "$task" --model "$MODEL" --dangerously-skip-permissions
    --output-format text --no-session-persistence)
}

run_codex() { # dir repo
  local bin; bin=$(codex_bin)
  local ch=$1/home/.codex
  mkdir -p "$ch"
  cat > "$ch/config.toml" <<EOF
model = "$MODEL"
model_provider = "strata"
model_context_window = ${CODEX_CONTEXT_WINDOW:-$ctx}
${CODEX_AUTO_COMPACT_LIMIT:+model_auto_compact_token_limit = $CODEX_AUTO_COMPACT_LIMIT}
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.strata]
name = "Strata Desk"
base_url = "$proxy_url/v1"
wire_api = "responses"
env_key = "STRATA_API_KEY"
request_max_retries = 1
stream_max_retries = 1

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[projects."$2"]
trust_level = "trusted"
EOF
  cmd=(env -i "${envs[@]}" CODEX_HOME="$ch" STRATA_API_KEY=dummy RUST_LOG=warn
    "$bin" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
    --ephemeral --color never -C "$2" "$task")
}

run_aider() { # dir repo
  local bin; bin=$(aider_bin)
  cmd=(env -i "${envs[@]}" LITELLM_LOCAL_MODEL_COST_MAP=True AIDER_ANALYTICS=false
    "$bin" --model "openai/$MODEL" --openai-api-base "$proxy_url/v1" --openai-api-key dummy
    --yes-always --no-git --no-auto-commits --analytics-disable --no-check-update
    --no-show-model-warnings --no-show-release-notes --no-pretty --no-fancy-input
    --no-detect-urls --no-gitignore --map-tokens 0 --message "$task")
}

run_opencode() { # dir repo
  local bin; bin=$(opencode_bin)
  local cfg=$1/opencode.json
  # (built here: inside ${...:+...} in the here-document the quotes of "limit" would be lost)
  local limit=""
  [ -z "${OPENCODE_LIMIT:-}" ] || limit=", \"limit\": $OPENCODE_LIMIT"
  cat > "$cfg" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "model": "strata/$MODEL",
  "autoupdate": false,
  "share": "disabled",
  "provider": {
    "strata": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Strata Desk",
      "options": { "baseURL": "$proxy_url/v1", "apiKey": "dummy" },
      "models": { "$MODEL": { "name": "$MODEL"$limit } }
    }
  }
}
EOF
  cmd=(env -i "${envs[@]}" OPENCODE_CONFIG="$cfg" OPENCODE_DISABLE_AUTOUPDATE=1
    OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
    OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_SHARE=1
    OPENCODE_DISABLE_CLAUDE_CODE=1 OPENCODE_DISABLE_EXTERNAL_SKILLS=1
    OPENCODE_PERMISSION='{"*":"allow"}'
    "$bin" run --print-logs --log-level WARN --model "strata/$MODEL" "$task")
}

run_qwen() { # dir repo
  local bin; bin=$(qwen_bin)
  mkdir -p "$1/home/.qwen"
  cat > "$1/home/.qwen/settings.json" <<EOF
{
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "general": { "disableAutoUpdate": true, "disableUpdateNag": true },
  "security": { "auth": { "selectedType": "openai" } }
}
EOF
  cmd=(env -i "${envs[@]}" OPENAI_API_KEY=dummy OPENAI_BASE_URL="$proxy_url/v1"
    OPENAI_MODEL="$MODEL"
    "$bin" --yolo --model "$MODEL" --openai-base-url "$proxy_url/v1" --openai-api-key dummy
    --chat-recording false "$task")
}

# The task of one agent: TASK_<agent>, else TASK.
task_for() { local v="TASK_$1"; echo "${!v:-$TASK}"; }

# Waits (up to 60 s) until the server has no request running or waiting, so that one agent's
# cancelled request does not delay the next one. Servers without /v1/scheduler: no wait.
wait_idle() {
  local i j
  for i in $(seq 60); do
    j=$(curl -sf --max-time 2 "$SERVER_URL/v1/scheduler" 2>/dev/null) || return 0
    "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)
busy = s.get("waiting") or s.get("parked") or any(x.get("request_id") is not None for x in s.get("slots", []))
sys.exit(1 if busy else 0)' <<<"$j" && return 0
    [ "$i" = 1 ] && log "waiting for the server to go idle"
    sleep 1
  done
  log "the server is still busy; going on"
}

rows=()
for a in "${agents[@]}"; do
  wait_idle
  d=$OUT_DIR/$a
  repo=$d/repo
  rm -rf "$d"
  mkdir -p "$d/requests"
  make_repo "$repo"
  mapfile -t envs < <(agent_env "$d")
  task=$(task_for "$a")
  start_proxy "$d"
  cmd=()
  "run_$a" "$d" "$repo"
  printf '%q ' "${cmd[@]}" > "$d/cmd.txt"; echo >> "$d/cmd.txt"
  log "$a: $(agent_version "$a") via $proxy_url (timeout ${AGENT_TIMEOUT}s)"
  rc=0
  ( cd "$repo" && exec timeout -k 10 "$AGENT_TIMEOUT" "${cmd[@]}" ) \
    < /dev/null > "$d/stdout.log" 2> "$d/stderr.log" || rc=$?
  echo "$rc" > "$d/exit-code"
  sleep 0.5   # let the proxy write the last request's file
  kill "$proxy_pid" 2>/dev/null || true
  wait "$proxy_pid" 2>/dev/null || true
  curl -sf --max-time 2 "$SERVER_URL/v1/scheduler" > "$d/scheduler-after.json" 2>/dev/null || true
  created=no
  if [ -f "$repo/$EXPECT_FILE" ]; then
    if grep -qw -- "$EXPECT_WORDS" "$repo/$EXPECT_FILE"; then created=yes; else created=wrong-content; fi
  fi
  echo "$created" > "$d/created"
  "$PYTHON" "$here/agents-proxy.py" --summarize "$d/requests" --json > "$d/summary.json"
  row=$(A=$a V="$(agent_version "$a")" RC=$rc CREATED=$created "$PYTHON" -c '
import json, os, sys
s = json.load(open(sys.argv[1]))
rc = int(os.environ["RC"])
completed = "yes" if rc == 0 else ("timeout" if rc in (124, 137) else "no (exit %d)" % rc)
err = (s["last_error"] or "-").replace("|", "/").replace("\n", " ")
if len(err) > 160: err = err[:157] + "..."
print("| %s | %s | %s | %s | %d | %s | %s |" % (os.environ["A"], os.environ["V"],
      "yes" if s["connected"] else "no", completed, s["requests"], os.environ["CREATED"], err))
' "$d/summary.json")
  rows+=("$row")
  log "$a: exit $rc, $(grep -c . <(ls "$d/requests")) request(s)"
done

{
  echo "Server: $SERVER_URL (model $MODEL, context $ctx)${SERVER_ARGS:+, server args: $SERVER_ARGS}"
  echo
  echo "| agent | version | connected | completed | requests | $EXPECT_FILE | last error |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} > "$OUT_DIR/summary.md"
cat "$OUT_DIR/summary.md"
echo
echo "requests and logs: $OUT_DIR"

if [ "${UPDATE_FIXTURES:-0}" = 1 ]; then
  for a in "${agents[@]}"; do
    "$PYTHON" "$here/agents-redact.py" --agent "$a" --version "$(agent_version "$a")" \
      --requests "$OUT_DIR/$a/requests" --task "$(task_for "$a")" --out "$FIXTURES_DIR" \
      --replace "$OUT_DIR/$a/repo=/home/user/project" --replace "$OUT_DIR/$a/home=/home/user" \
      --replace "$OUT_DIR=/home/user/work"
  done
fi
