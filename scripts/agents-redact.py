#!/usr/bin/env python3
"""Turns requests captured by scripts/agents-proxy.py into redacted fixtures.

    agents-redact.py --agent NAME --version VERSION --requests DIR --task TASK \
        --out tests/fixtures/agents [--replace OLD=NEW ...] [--no-alternates]
    agents-redact.py --describe FILE_OR_DIR ...     # print the request shapes (for reports)

For every route an agent POSTed to, it writes <agent>-<route>.json (route: messages, responses,
chat-completions; the query string, if any, stays in "path"), chosen as the first request that
carries the task and tools (else the first one). Unless --no-alternates, a later request of the
same route whose shape differs (other top-level keys, tool names or message roles) is written as
<agent>-<route>-<suffix>.json too (suffix: "notools" or "<N>tools"). Each fixture is
    {"agent", "version", "method", "path", "headers", "body",
     "capture": {"seq", "requests_in_run", "status", "error"}}
with the headers the proxy kept (never authorization / x-api-key).

Redaction (the vendors' prompt and tool texts are theirs; the JSON shape is what we need):
  * prose -> placeholder text of the SAME length: every whitespace character kept where it
    is, every other character replaced in turn by the letters of "lorem ipsum dolor ...", for
      - top-level "system" (Anthropic; string or text blocks), "instructions" (Responses) and
        the contents of messages whose role is "system" or "developer": every text, whatever
        its length, except Claude Code's "x-anthropic-billing-header: ..." marker line;
      - the other message contents (messages[] / input[]): every text longer than 80
        characters, in string contents and in text / input_text / output_text blocks and
        tool results; a text that contains the task keeps the task verbatim, and the text
        around it is replaced unless it is 80 characters or less in all (quotes, a label);
      - tools: every tool's own "description" (any length, also inside namespace tools) and
        every nested "description" (parameter schemas) longer than 80 characters;
  * machine-specific values, everywhere (body and headers), before the above:
      - each --replace OLD=NEW pair (longest OLD first; agents-check.sh maps the scratch repo
        to /home/user/project, the private HOME to /home/user, the output dir to
        /home/user/work) and the real $HOME (-> /home/user), and the host name (whole word,
        when 4 characters or more) -> "host";
      - UUIDs -> 00000000-0000-4000-8000-<12 digits>, numbered in order of appearance (one
        number per distinct UUID, so equal ids stay equal);
      - hex strings of 32 or more digits (device ids, hashes) -> the same length of 0s ending
        in that number;
      - anything looking like an API key (sk-..., sk-ant-...) -> "sk-redacted".
  Everything else (roles, field names, tool names, JSON schemas: types, required, enums,
  defaults; cache_control, thinking, stream options, max tokens, grammar definitions of custom
  tools) is kept as captured.
"""

import argparse
import glob
import json
import os
import re
import socket
import sys
import urllib.parse

PROSE_MIN = 80
LOREM = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
         "incididunt ut labore et dolore magna aliqua ")
ROUTES = {
    "/v1/messages": "messages",
    "/v1/responses": "responses",
    "/v1/chat/completions": "chat-completions",
    "/v1/completions": "completions",
    "/v1/messages/count_tokens": "count-tokens",
}
# Not \b: ids often follow an underscore ("msg_<uuid>").
UUID_RE = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                     r"[0-9a-fA-F]{12}(?![0-9A-Za-z])")
HEX_RE = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")
KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")


LOREM_LETTERS = LOREM.replace(" ", "")


def lorem(s):
    """Placeholder for the text s: the same length, the same whitespace at the same places
    (so lines and paragraphs keep their shape), every other character taken in turn from
    "loremipsumdolor..."."""
    out = []
    i = 0
    for ch in s:
        if ch.isspace():
            out.append(ch)
        else:
            out.append(LOREM_LETTERS[i % len(LOREM_LETTERS)])
            i += 1
    return "".join(out)


class Redactor:
    def __init__(self, task, replaces):
        self.task = task
        self.replaces = sorted(replaces, key=lambda p: -len(p[0]))
        self.ids = {}
        host = socket.gethostname()
        self.host_re = re.compile(r"\b%s\b" % re.escape(host)) if len(host) >= 4 else None

    # -- machine-specific values --------------------------------------------
    def _id(self, m, kind):
        v = m.group(0)
        key = (kind, v.lower())
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
        n = self.ids[key]
        if kind == "uuid":
            return "00000000-0000-4000-8000-%012d" % n
        return ("%d" % n).rjust(len(v), "0")

    def neutral(self, s):
        for old, new in self.replaces:
            s = s.replace(old, new)
        if self.host_re:
            s = self.host_re.sub("host", s)
        s = UUID_RE.sub(lambda m: self._id(m, "uuid"), s)
        s = HEX_RE.sub(lambda m: self._id(m, "hex"), s)
        s = KEY_RE.sub("sk-redacted", s)
        return s

    def neutral_all(self, o):
        if isinstance(o, str):
            return self.neutral(o)
        if isinstance(o, list):
            return [self.neutral_all(x) for x in o]
        if isinstance(o, dict):
            return {self.neutral(k): self.neutral_all(v) for k, v in o.items()}
        return o

    # -- prose ----------------------------------------------------------------
    def prose(self, s, always=False):
        if not isinstance(s, str):
            return s
        if self.task and self.task in s:
            i = s.index(self.task)
            before, after = s[:i], s[i + len(self.task):]
            if len(before) + len(after) <= PROSE_MIN:  # e.g. the task in quotes
                return s
            return lorem(before) + self.task + lorem(after)
        if always or len(s) > PROSE_MIN:
            return lorem(s)
        return s

    def text(self, s, always):
        # Claude Code's billing marker is a control line, not prose: kept.
        if isinstance(s, str) and s.startswith("x-anthropic-billing-header:"):
            return s
        return self.prose(s, always=always)

    def content(self, c, always=False):
        """A message content: a string or a list of blocks. always: the whole text is the
        vendor's (system prompts, system/developer messages), whatever its length."""
        if isinstance(c, str):
            return self.text(c, always)
        if isinstance(c, list):
            out = []
            for b in c:
                if isinstance(b, dict):
                    b = dict(b)
                    if isinstance(b.get("text"), str):
                        b["text"] = self.text(b["text"], always)
                    if "content" in b:  # tool_result blocks
                        b["content"] = self.content(b["content"], always)
                out.append(b)
            return out
        return c

    def schema(self, o):
        """Nested descriptions longer than PROSE_MIN in a JSON schema."""
        if isinstance(o, list):
            return [self.schema(x) for x in o]
        if isinstance(o, dict):
            out = {}
            for k, v in o.items():
                if k == "description" and isinstance(v, str):
                    out[k] = self.prose(v)
                elif k == "properties" and isinstance(v, dict):
                    # property names are keys, not prose: recurse into the values only
                    out[k] = {pk: self.schema(pv) for pk, pv in v.items()}
                else:
                    out[k] = self.schema(v)
            return out
        return o

    def tool(self, t):
        if not isinstance(t, dict):
            return t
        t = dict(t)
        if isinstance(t.get("description"), str):
            t["description"] = self.prose(t["description"], always=True)
        if isinstance(t.get("function"), dict):  # chat completions
            t["function"] = self.tool(t["function"])
        for k in ("input_schema", "parameters"):
            if k in t:
                t[k] = self.schema(t[k])
        if isinstance(t.get("tools"), list):  # Responses namespace tools
            t["tools"] = [self.tool(x) for x in t["tools"]]
        return t

    def body(self, b):
        b = self.neutral_all(b)
        if not isinstance(b, dict):
            return b
        b = dict(b)
        if "system" in b:
            b["system"] = self.content(b["system"], always=True)
        if isinstance(b.get("instructions"), str):
            b["instructions"] = self.prose(b["instructions"], always=True)
        for key in ("messages", "input"):
            if isinstance(b.get(key), list):
                msgs = []
                for m in b[key]:
                    if isinstance(m, dict):
                        m = dict(m)
                        if "content" in m:
                            m["content"] = self.content(
                                m["content"], always=m.get("role") in ("system", "developer"))
                        if isinstance(m.get("output"), str):  # function_call_output items
                            m["output"] = self.prose(m["output"])
                    msgs.append(m)
                b[key] = msgs
            elif isinstance(b.get(key), str):
                b[key] = self.prose(b[key])
        if isinstance(b.get("tools"), list):
            b["tools"] = [self.tool(t) for t in b["tools"]]
        return b


# -- selection ------------------------------------------------------------------
def load(d):
    recs = []
    for f in sorted(glob.glob(os.path.join(d, "[0-9]*.json"))):
        with open(f) as fh:
            recs.append(json.load(fh))
    return recs


def route_of(rec):
    p = urllib.parse.urlsplit(rec["path"]).path.rstrip("/")
    return ROUTES.get(p) or re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-")


def roles(b):
    ms = b.get("messages") or b.get("input") or []
    if not isinstance(ms, list):
        return ()
    return tuple(m.get("role") or m.get("type") for m in ms if isinstance(m, dict))


def tool_names(b):
    out = []
    for t in b.get("tools") or []:
        if isinstance(t, dict):
            out.append(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
    return tuple(out)


def signature(b):
    return (tuple(sorted(b)), tool_names(b), roles(b))


def has_task(b, task):
    return task in json.dumps(b, ensure_ascii=False)


def write_fixtures(a):
    recs = [r for r in load(a.requests) if r["method"] == "POST" and isinstance(r.get("body"), dict)]
    if not recs:
        print("agents-redact: %s: no captured POST request with a JSON body" % a.agent,
              file=sys.stderr)
        return []
    total = len(load(a.requests))
    replaces = [tuple(p.split("=", 1)) for p in a.replace]
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        replaces.append((home, "/home/user"))
    by_route = {}
    for r in recs:
        by_route.setdefault(route_of(r), []).append(r)
    os.makedirs(a.out, exist_ok=True)
    written = []
    for route, rs in by_route.items():
        primary = next((r for r in rs if has_task(r["body"], a.task) and r["body"].get("tools")),
                       None) or next((r for r in rs if has_task(r["body"], a.task)), rs[0])
        chosen = [(primary, "")]
        if not a.no_alternates:
            seen = {signature(primary["body"])}
            for r in rs:
                sig = signature(r["body"])
                if sig in seen:
                    continue
                seen.add(sig)
                n = len(r["body"].get("tools") or [])
                chosen.append((r, "-notools" if n == 0 else "-%dtools" % n))
        for r, suffix in chosen:
            red = Redactor(a.task, replaces)
            fx = {
                "agent": a.agent,
                "version": a.version,
                "method": r["method"],
                "path": red.neutral(r["path"]),
                "headers": red.neutral_all(r.get("headers", {})),
                "body": red.body(r["body"]),
                "capture": {
                    "seq": r["seq"],
                    "requests_in_run": total,
                    "status": r.get("status"),
                },
            }
            err = r.get("response_body")
            if isinstance(err, dict):
                e = err.get("error", err)
                err = e.get("message") if isinstance(e, dict) else e
            if err or r.get("stream_error"):
                fx["capture"]["error"] = red.neutral(str(err or r.get("stream_error")))
            name = "%s-%s%s.json" % (a.agent, route, suffix)
            path = os.path.join(a.out, name)
            with open(path, "w") as f:
                json.dump(fx, f, indent=2, ensure_ascii=False)
                f.write("\n")
            written.append(path)
            print(path)
    return written


# -- describe ---------------------------------------------------------------------
def describe_body(b):
    lines = []
    lines.append("top-level keys: %s" % ", ".join(b.keys()))
    for k in ("model", "max_tokens", "max_completion_tokens", "max_output_tokens", "stream",
              "stream_options", "temperature", "top_p", "tool_choice", "parallel_tool_calls",
              "thinking", "reasoning", "context_management", "output_config", "store",
              "include", "text", "truncation", "service_tier", "prompt_cache_key"):
        if k in b:
            v = b[k]
            if isinstance(v, str) and len(v) > 60:
                v = v[:60] + "..."
            lines.append("  %s: %s" % (k, json.dumps(v)))
    if "metadata" in b:
        lines.append("  metadata keys: %s" % list(b["metadata"]))
    if "system" in b:
        s = b["system"]
        if isinstance(s, list):
            lines.append("  system: %d blocks: %s" % (len(s), [
                "%s(%d chars%s)" % (x.get("type"), len(x.get("text", "")),
                                    ", cache_control" if "cache_control" in x else "")
                for x in s]))
        else:
            lines.append("  system: string (%d chars)" % len(s))
    if isinstance(b.get("instructions"), str):
        lines.append("  instructions: %d chars" % len(b["instructions"]))
    for key in ("messages", "input"):
        ms = b.get(key)
        if not isinstance(ms, list):
            continue
        lines.append("  %s: %d" % (key, len(ms)))
        for i, m in enumerate(ms):
            c = m.get("content")
            if isinstance(c, str):
                cs = "string(%d)" % len(c)
            elif isinstance(c, list):
                cs = "[" + ", ".join("%s(%d%s)" % (x.get("type"), len(x.get("text", "") or ""),
                                                   ",cc" if "cache_control" in x else "")
                                     for x in c if isinstance(x, dict)) + "]"
            else:
                cs = repr(c)[:40]
            extra = ""
            if m.get("type") and m.get("type") != "message":
                extra = " type=%s" % m["type"]
            elif m.get("type"):
                extra = " type=message"
            lines.append("    [%d] role=%s%s content=%s%s" % (
                i, m.get("role"), extra, cs, " keys=%s" % sorted(m) if key == "input" else ""))
    tools = b.get("tools")
    if isinstance(tools, list):
        lines.append("  tools: %d" % len(tools))
        for t in tools:
            if "function" in t:
                f = t["function"]
                lines.append("    %s %s desc=%d params=%s keys=%s fn_keys=%s" % (
                    t.get("type"), f.get("name"), len(f.get("description") or ""),
                    list((f.get("parameters") or {}).get("properties", {})), sorted(t), sorted(f)))
            else:
                sch = t.get("input_schema") or t.get("parameters") or {}
                lines.append("    %s %s desc=%d keys=%s params=%s%s" % (
                    t.get("type", "-"), t.get("name"), len(t.get("description") or ""), sorted(t),
                    list(sch.get("properties", {})) if isinstance(sch, dict) else sch,
                    " subtools=%s" % [x.get("name") for x in t["tools"]] if "tools" in t else ""))
    return lines


def describe(paths):
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
    for f in files:
        with open(f) as fh:
            r = json.load(fh)
        b = r.get("body")
        print("== %s: %s %s -> %s" % (os.path.basename(f), r.get("method"), r.get("path"),
                                       r.get("status", (r.get("capture") or {}).get("status"))))
        print("  headers: %s" % json.dumps(r.get("headers", {})))
        if "header_names" in r:
            print("  header names: %s" % ", ".join(r["header_names"]))
        if isinstance(b, dict):
            for line in describe_body(b):
                print("  " + line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agent")
    ap.add_argument("--version", default="")
    ap.add_argument("--requests")
    ap.add_argument("--task", default="")
    ap.add_argument("--out")
    ap.add_argument("--replace", action="append", default=[], metavar="OLD=NEW")
    ap.add_argument("--no-alternates", action="store_true")
    ap.add_argument("--describe", nargs="+", metavar="PATH")
    a = ap.parse_args()
    if a.describe:
        describe(a.describe)
        return
    if not (a.agent and a.requests and a.out):
        ap.error("--agent, --requests and --out are required")
    write_fixtures(a)


if __name__ == "__main__":
    main()
