#!/usr/bin/env bash
# Installs the .deb that build-deb.sh made, checks it, and removes it again (as root):
#   ./scripts/check-deb.sh [path/to/strata-desk_X_amd64.deb]
# Checks: the desktop entry validates; `strata-desk --version` names the CPU variant for this
# CPU, of those installed in /usr/lib/strata-desk; `--headless` on the default model answers
# /health (naming the variant the engine loaded) and a chat completion and exits 0 on SIGTERM with no worker left; with no
# arguments and no display it names `--headless` (it does not print the help); under Xvfb, if
# xvfb-run is present, the window and its server start; `apt-get remove` leaves no file behind.
set -euo pipefail
if [ $# -gt 0 ]; then deb=$(realpath "$1"); fi
cd "$(dirname "$0")/.."
deb=${deb:-$(realpath "$(ls target/package/debian/strata-desk_*_amd64.deb | sort -V | tail -1)")}
port=${STRATA_CHECK_PORT:-18555}
window="^strata-desk --port $((port + 1))"
fail() { echo "check-deb: FAILED: $*" >&2; exit 1; }
command -v desktop-file-validate >/dev/null || fail "desktop-file-validate is missing (apt-get install desktop-file-utils)"

# On any exit: stop what this script started and leave the package uninstalled.
cleanup() {
    if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; fi
    pkill -f "$window" 2>/dev/null || true
    if [ -n "${log:-}" ]; then rm -f "$log"; fi
    if dpkg -s strata-desk >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq strata-desk >/dev/null 2>&1 || true
    fi
    return 0
}
trap cleanup EXIT

wait_ready() { # PORT: waits up to 120 s for /health to answer 200
    for _ in $(seq 1 120); do
        curl -sf "localhost:$1/health" >/dev/null && return 0
        sleep 1
    done
    return 1
}

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null
files=$(dpkg -L strata-desk | while read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done)
echo "installed: $(echo "$files" | wc -l) files"

desktop-file-validate /usr/share/applications/strata-desk.desktop || fail "desktop entry"
version=$(/usr/bin/strata-desk --version)
echo "version: $version"
[[ $version == "strata-desk "* ]] || fail "--version said: $version"
# llama.cpp's CPU variants beside its libraries; the program runs on this CPU's best one
variants=$(ls /usr/lib/strata-desk/libggml-cpu-*.so 2>/dev/null | wc -l)
[ "$variants" -ge 1 ] || fail "no CPU variant in /usr/lib/strata-desk"
[[ $version == *"CPU code for this CPU: "* ]] || fail "--version names no CPU variant: $version"
echo "CPU variants: $variants in /usr/lib/strata-desk"

out=$(env -u DISPLAY -u WAYLAND_DISPLAY strata-desk 2>&1) && fail "no display: exit 0"
[[ $out == *"--headless"* && $out != *"Usage:"* ]] || fail "no display said: $out"
echo "no display: names --headless"

log=$(mktemp)
strata-desk --headless --port "$port" >"$log" 2>&1 &
pid=$!
start=$SECONDS
wait_ready "$port" || { cat "$log"; fail "--headless never became ready"; }
health=$(curl -s "localhost:$port/health")
echo "headless: ready after $((SECONDS - start)) s: $health"
variant=$(echo "$health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["device"]["cpu_variant"])')
[[ -n $variant && $variant != built-in ]] || fail "/health names no CPU variant: $variant"
echo "headless: the engine runs the CPU variant $variant"
reply=$(curl -s --max-time 120 "localhost:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model": "any", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0}') ||
    fail "the chat completion request failed"
echo "chat: $reply"
[[ $reply == *'"finish_reason"'* ]] || fail "chat completion"
kill -TERM "$pid" || fail "the headless server was gone before SIGTERM"
wait "$pid" || fail "headless exited $? on SIGTERM"
pid=
pgrep -f "^/usr/bin/strata-desk engine-worker" >/dev/null && fail "a worker outlived the server"
echo "headless: SIGTERM, exit 0, no worker left"

if command -v xvfb-run >/dev/null 2>&1; then
    xvfb-run -a strata-desk --port "$((port + 1))" >"$log" 2>&1 &
    start=$SECONDS
    wait_ready "$((port + 1))" || { cat "$log"; fail "the window's server never became ready"; }
    echo "window (Xvfb): its server ready after $((SECONDS - start)) s"
    pkill -TERM -f "$window" || fail "the window was gone before SIGTERM"
    for _ in $(seq 1 20); do pgrep -f "$window" >/dev/null || break; sleep 1; done
    pgrep -f "$window" >/dev/null && fail "the window did not exit on SIGTERM"
    pgrep -f "^/usr/bin/strata-desk engine-worker" >/dev/null && fail "the window's worker outlived it"
    echo "window: exited on SIGTERM"
fi

DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq strata-desk >/dev/null
left=$(echo "$files" | while read -r f; do if [ -e "$f" ]; then echo "$f"; fi; done)
[ -z "$left" ] || fail "left after remove: $left"
echo "removed: none of its files remain"
