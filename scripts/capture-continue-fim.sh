#!/usr/bin/env bash
# Captures the fill-in-the-middle request Continue's OpenAI-compatible provider sends (its
# `@continuedev/openai-adapters` package, `fimStream`, pinned below) into
# tests/fixtures/agents/continue-fim-completions.json: a recording server on 127.0.0.1 takes
# the request and answers one token; nothing reaches a model. Needs Node.js 20+, npm, python3.
#
# Usage: scripts/capture-continue-fim.sh        (installs the package under $PREFIX when missing)
set -euo pipefail
ADAPTERS_VERSION=1.37.0   # npm @continuedev/openai-adapters
PREFIX="${PREFIX:-$HOME/.cache/strata-continue-adapters-$ADAPTERS_VERSION}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/tests/fixtures/agents/continue-fim-completions.json"
PORT="${PORT:-18765}"
if [ ! -d "$PREFIX/node_modules/@continuedev/openai-adapters" ]; then
  mkdir -p "$PREFIX"
  npm install --silent --prefix "$PREFIX" "@continuedev/openai-adapters@$ADAPTERS_VERSION"
fi
WORK="$(mktemp -d)"
SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"' EXIT

cat > "$WORK/record.py" <<'PY'
import http.server, json, sys
port, out = int(sys.argv[1]), sys.argv[2]
class Recorder(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        skip = ("host", "connection")
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in skip}
        with open(out, "w") as f:
            json.dump({"path": self.path, "headers": headers, "body": body}, f)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices":[{"text":"x","index":0,"finish_reason":"stop"}]}\n\n'
                         b'data: [DONE]\n\n')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Recorder).serve_forever()
PY
python3 "$WORK/record.py" "$PORT" "$WORK/request.json" &
SERVER=$!
sleep 1

# the module is resolved from the install prefix, so the runner lives there
RUN="$PREFIX/capture-run.mjs"
cat > "$RUN" <<JS
import { constructLlmApi } from "@continuedev/openai-adapters";
const api = constructLlmApi({ provider: "openai", apiBase: "http://127.0.0.1:$PORT/v1/", apiKey: "sk-local" });
const body = { model: "qwen2.5-coder-1.5b", prompt: "def add(a, b):\n    ",
  suffix: "\n\nprint(add(1, 2))\n", max_tokens: 64, temperature: 0.01, stop: ["\n\n"] };
for await (const chunk of api.fimStream(body, new AbortController().signal)) {}
JS
node "$RUN"

python3 - "$WORK/request.json" "$OUT" "$ADAPTERS_VERSION" <<'PY'
import json, sys
captured, out, version = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
fixture = {
    "agent": "continue",
    "version": f"@continuedev/openai-adapters {version} (provider openai, fimStream)",
    "method": "POST",
    "path": captured["path"],
    "headers": captured["headers"],
    "body": captured["body"],
    "capture": {
        "seq": 1,
        "requests_in_run": 1,
        "status": None,
        "note": "captured by scripts/capture-continue-fim.sh against a recording server "
                "(no model answered)",
    },
}
open(out, "w").write(json.dumps(fixture, indent=2) + "\n")
print(f"wrote {out}: {captured['path']}")
PY
