#!/usr/bin/env python3
"""Logging reverse proxy for scripts/agents-check.sh (Python 3 stdlib only).

Listens on a loopback port, forwards every request to an upstream Strata Desk
server and writes one JSON file per request into an output directory:

    NNNN-METHOD-route.json = {
        "seq", "method", "path" (with query), "headers" (selected, see below),
        "header_names" (all names the client sent, no values),
        "body" (parsed JSON, or "body_text" / "body_b64" when it is not JSON),
        "status", "response_headers" (content-type), "duration_ms", "ttfb_ms",
        "response_bytes", "response_body" (errors: the whole body, capped),
        "response_head" / "response_tail" (2xx: the first/last bytes),
        "stream_error" (an SSE error event seen inside a 200 stream), "error"
    }

Only these request headers are recorded, values included: content-type,
user-agent, anthropic-version, anthropic-beta, openai-beta, x-stainless-*,
accept, content-encoding, originator. Authorization, x-api-key and every
other header are NEVER written (only their names, in header_names).

Responses are relayed as they arrive, chunk by chunk (SSE is not buffered):
a response without Content-Length is re-framed as chunked towards the client
and flushed after every upstream read.

Usage:
    agents-proxy.py --upstream http://127.0.0.1:8080 --out DIR \
                    [--listen 127.0.0.1] [--port 0] [--port-file FILE]
    agents-proxy.py --summarize DIR [--json]
"""

import argparse
import base64
import gzip
import http.client
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import zlib

LOGGED_HEADERS = {
    "content-type",
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "accept",
    "content-encoding",
    "originator",
}
LOGGED_PREFIXES = ("x-stainless-",)
NEVER_LOGGED = {"authorization", "x-api-key", "proxy-authorization", "cookie"}
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    # Asked of upstream as identity so that error bodies can be logged as text.
    "accept-encoding",
}
ERROR_BODY_CAP = 256 * 1024
# An error reported inside a 200 event stream: Anthropic `event: error`, Responses
# `response.failed` / `error` events, Chat Completions `data: {"error": ...}` chunks.
STREAM_ERROR_RE = re.compile(
    rb'event: *(error|response\.failed)\b|"type": *"(error|response\.failed)"|data: *\{"error"')
HEAD_TAIL = 2048


def route_slug(path):
    p = urllib.parse.urlsplit(path).path.strip("/")
    return re.sub(r"[^A-Za-z0-9]+", "-", p).strip("-") or "root"


def decode_body(raw, encoding):
    enc = (encoding or "").strip().lower()
    if enc in ("gzip", "x-gzip"):
        return gzip.decompress(raw)
    if enc == "deflate":
        try:
            return zlib.decompress(raw)
        except zlib.error:
            return zlib.decompress(raw, -zlib.MAX_WBITS)
    if enc in ("", "identity"):
        return raw
    raise ValueError("content-encoding %r is not decodable here" % enc)


class State:
    def __init__(self, upstream, out_dir):
        u = urllib.parse.urlsplit(upstream)
        self.scheme = u.scheme or "http"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")
        self.out_dir = out_dir
        self.lock = threading.Lock()
        self.seq = 0

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "strata-agents-proxy"
    state = None  # set in main

    def log_message(self, fmt, *args):  # keep stderr quiet
        pass

    # -- request side -------------------------------------------------------
    def _read_request_body(self):
        te = (self.headers.get("transfer-encoding") or "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _record_request(self, raw):
        rec = {"seq": None, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "method": self.command, "path": self.path}
        hdrs = {}
        names = []
        for k, v in self.headers.items():
            lk = k.lower()
            names.append(lk)
            if lk in NEVER_LOGGED:
                continue
            if lk in LOGGED_HEADERS or lk.startswith(LOGGED_PREFIXES):
                hdrs[lk] = v
        rec["headers"] = dict(sorted(hdrs.items()))
        rec["header_names"] = sorted(set(names))
        if raw:
            rec["body_bytes"] = len(raw)
            try:
                text = decode_body(raw, self.headers.get("content-encoding"))
                try:
                    rec["body"] = json.loads(text)
                except ValueError:
                    rec["body_text"] = text.decode("utf-8", "replace")
            except Exception as e:  # undecodable encoding (e.g. zstd)
                rec["body_b64"] = base64.b64encode(raw).decode()
                rec["body_decode_error"] = str(e)
        return rec

    def _save(self, rec):
        st = self.state
        name = "%04d-%s-%s.json" % (rec["seq"], rec["method"], route_slug(rec["path"]))
        tmp = os.path.join(st.out_dir, "." + name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, os.path.join(st.out_dir, name))

    # -- forwarding ---------------------------------------------------------
    def _proxy(self):
        st = self.state
        t0 = time.monotonic()
        raw = self._read_request_body()
        rec = self._record_request(raw)
        rec["seq"] = st.next_seq()
        rec["status"] = None  # written now, rewritten when the response has ended
        rec["in_flight"] = True
        self._save(rec)
        del rec["in_flight"]
        fwd = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        fwd["Host"] = "%s:%d" % (st.host, st.port)
        if raw or self.command in ("POST", "PUT", "PATCH"):
            fwd["Content-Length"] = str(len(raw))
        conn_cls = (http.client.HTTPSConnection if st.scheme == "https"
                    else http.client.HTTPConnection)
        conn = conn_cls(st.host, st.port, timeout=900)
        resp = None
        try:
            try:
                conn.request(self.command, st.base_path + self.path,
                             body=raw if raw else None, headers=fwd)
                resp = conn.getresponse()
            except Exception as e:
                rec["status"] = 502
                rec["error"] = "upstream: %s: %s" % (type(e).__name__, e)
                msg = json.dumps({"error": {"type": "proxy_error", "message": rec["error"]}}).encode()
                self.send_response(502)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                return
            rec["status"] = resp.status
            rec["ttfb_ms"] = round((time.monotonic() - t0) * 1000, 1)
            ctype = resp.getheader("content-type") or ""
            rec["response_headers"] = {"content-type": ctype}
            self.send_response_only(resp.status, resp.reason)
            length = resp.getheader("content-length")
            for k, v in resp.getheaders():
                if k.lower() in HOP_BY_HOP:
                    continue
                self.send_header(k, v)
            chunked = length is None and self.command != "HEAD" and resp.status not in (204, 304)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.flush()

            scan = b""
            head = bytearray()
            tail = bytearray()
            errbody = bytearray()
            total = 0
            client_gone = False
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    break
                total += len(chunk)
                if len(head) < HEAD_TAIL:
                    head += chunk[: HEAD_TAIL - len(head)]
                tail = (tail + chunk)[-HEAD_TAIL:]
                if resp.status >= 400 and len(errbody) < ERROR_BODY_CAP:
                    errbody += chunk[: ERROR_BODY_CAP - len(errbody)]
                if "event-stream" in ctype and "stream_error" not in rec:
                    window = bytes(scan[-8192:]) + chunk
                    scan = window
                    if STREAM_ERROR_RE.search(window):
                        m = re.search(rb'"error":\s*(\{[^{}]*\})', window)
                        text = m.group(1) if m else STREAM_ERROR_RE.search(window).group(0)
                        rec["stream_error"] = text.decode("utf-8", "replace")[:4000]
                if client_gone:
                    continue
                try:
                    if chunked:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    else:
                        self.wfile.write(chunk)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    client_gone = True
                    rec["error"] = ("client closed the connection mid-response (after %d bytes, "
                                    "%.0f s)" % (total, time.monotonic() - t0))
                    break
            if chunked and not client_gone:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    rec["error"] = "client closed the connection at the end"
            rec["response_bytes"] = total
            if resp.status >= 400:
                txt = bytes(errbody).decode("utf-8", "replace")
                try:
                    rec["response_body"] = json.loads(txt)
                except ValueError:
                    rec["response_body"] = txt
            else:
                rec["response_head"] = bytes(head).decode("utf-8", "replace")
                if total > HEAD_TAIL:
                    rec["response_tail"] = bytes(tail).decode("utf-8", "replace")
        except Exception as e:
            rec.setdefault("error", "proxy: %s: %s" % (type(e).__name__, e))
            self.close_connection = True
        finally:
            rec["duration_ms"] = round((time.monotonic() - t0) * 1000, 1)
            try:
                self._save(rec)
            except Exception as e:  # never let logging break the relay
                print("agents-proxy: cannot save: %s" % e, file=sys.stderr)
            if resp is not None:
                resp.close()
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _proxy


# -- summary ----------------------------------------------------------------
def error_message(rec):
    b = rec.get("response_body")
    if isinstance(b, dict):
        e = b.get("error", b)
        if isinstance(e, dict):
            return str(e.get("message") or e)
        return str(e)
    if b:
        return str(b)
    return rec.get("stream_error") or rec.get("error") or ""


def summarize(d):
    recs = []
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if n.endswith(".json") and n[:4].isdigit():
            try:
                with open(os.path.join(d, n)) as f:
                    recs.append(json.load(f))
            except ValueError:
                pass
    routes = {}
    for r in recs:
        key = "%s %s" % (r["method"], urllib.parse.urlsplit(r["path"]).path)
        routes.setdefault(key, {}).setdefault(str(r.get("status")), 0)
        routes[key][str(r.get("status"))] += 1
    last_err = None
    for r in recs:
        st = r.get("status")
        if r.get("in_flight"):
            r = dict(r, error="no response yet when the run ended (waiting or streaming)")
            last_err = r
        elif (isinstance(st, int) and st >= 400) or r.get("stream_error") or r.get("error"):
            last_err = r
    out = {
        "requests": len(recs),
        # Any request reached the server: it answered (not the proxy's own 502), or it was still
        # being answered when the run ended.
        "connected": any(r.get("in_flight") or (isinstance(r.get("status"), int) and r["status"] != 502)
                         for r in recs),
        "unanswered": sum(1 for r in recs if r.get("in_flight")),
        "routes": routes,
        "non_2xx": [
            {"seq": r["seq"], "method": r["method"], "path": r["path"],
             "status": r.get("status"), "message": error_message(r)}
            for r in recs
            if not r.get("in_flight") and not (isinstance(r.get("status"), int) and 200 <= r["status"] < 300)
        ],
        "last_error": None if last_err is None else
        "%s %s: %s" % (last_err.get("status") or "pending", last_err["path"], error_message(last_err)),
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", default="http://127.0.0.1:8080")
    ap.add_argument("--out")
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--summarize", metavar="DIR")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.summarize:
        s = summarize(a.summarize)
        if a.json:
            print(json.dumps(s))
        else:
            print(json.dumps(s, indent=2))
        return
    if not a.out:
        ap.error("--out is required")
    os.makedirs(a.out, exist_ok=True)
    Handler.state = State(a.upstream, a.out)
    srv = http.server.ThreadingHTTPServer((a.listen, a.port), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(a.port_file + ".tmp", a.port_file)
    print("agents-proxy: http://%s:%d -> %s, logging to %s" % (a.listen, port, a.upstream, a.out),
          file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
