#!/usr/bin/env python3
"""A scripted HTTP/1.1 server for the http adapter's tests (tests/http_test.c,
tests/http_inflight_test.py).

Keep-alive HTTP/1.1, every answer with a Content-Length, bound to 127.0.0.1
on a port of the kernel's choosing, with room for hundreds of connections at
once. The port is the first line on stdout. A client that goes away before
its answer is written (a worker killed mid-request) ends that connection.
The server exits when its stdin closes, so a test that dies does not leave
it behind. Standard library only.

    python3 http_server.py [--tls CERT KEY] [--redact VALUE]...

--tls serves https with that certificate and key. --redact VALUE: /echo
writes "[redacted:I]" (I the option's index, from 0) in place of VALUE
wherever it appears in what it echoes, so a test can see a secret arrive
without the secret being in the tool's result.

Paths (the query string is read the same on every path):

    /json                 200, {"rates": {"EUR": 0.9, "JPY": 151.2}, "n": 2}
    /text                 200 text/plain "plain text body"
    /empty                204, no body (?status=200: a 200 with Content-Length 0)
    /status/N             status N, text body "status N body" (none for 204 and 304);
                          ?retry_after=S adds "Retry-After: S" (delta-seconds),
                          ?retry_after_date=S the HTTP-date form, at least S seconds ahead
    /hang                 reads the request, never answers
    /trickle              200 JSON body of ?n=10 pieces, one each ?ms=100
    /reset                announces 1000 bytes, sends 100, closes the connection
    /huge                 200, a 5 MiB text body (?bytes=N another size)
    /redirect-loop        302 to itself
    /redirect/N           302 to /redirect/N-1; /redirect/1 to /json (N redirects in all)
    /redirect-to          ?url=U: 302 to U (?status=307 another code)
    /error-body           400, {"error": "RateLimited", "message": "slow down"}
    /flaky/KEY            ?fail=N&status=S: status S (default 503) the first N times for
                          KEY, then 200 {"key": KEY, "tries": T}; retry_after and
                          retry_after_date as for /status on the failures
    /echo (and /echo/...) 200, {"method", "path", "segments", "query", "headers", "body", "json"}:
                          segments are the path's parts, each percent-decoded; query is
                          {name: [values]}; headers lower-cased names; body the raw body
                          (text), json the body parsed (or null)
    /slow                 200 {"slept_ms": ms} after ?ms=100 milliseconds
    /stats                200, {"requests", "connections", "paths": {path: count},
                          "active": {path: n}, "max_active": {path: n}}: active is how
                          many requests of the path are in progress now (read, not yet
                          answered; a /hang stays in progress), max_active the most
                          that were at once
    anything else         404 "no such path"

Every request is logged, in the order they arrive: {"path", "key", "start",
"end"}, key the query's ?key= (null without one; a test puts a call's id in
it to see which calls reached the server, and how many times), start and end
the times the request was read and answered, in seconds of CLOCK_MONOTONIC
(the clock of time.monotonic() in any process on the machine); end is null
while it is in progress.

Control commands on stdin, one a line, answered with one line on stdout:
"stats" (the /stats object), "log" (the log, a JSON array), "reset" (zeroes
the counts and empties the log; a request still in progress stays active, and
max_active starts again from active; answers "ok"), "blackhole" (the port of a
listening socket whose accept queue is full, so a connect to it hangs; answers
the port).
"""
import email.utils
import json
import math
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {"requests": 0, "connections": 0, "paths": {}, "active": {}, "max_active": {}}
LOG = []
FLAKY = {}
REDACT = []
HUGE = 5 * 1024 * 1024


def stats_snapshot():
    with LOCK:
        return json.dumps(STATS, sort_keys=True)


def log_snapshot():
    with LOCK:
        return json.dumps(LOG)


def reset():
    with LOCK:
        STATS["requests"] = 0
        STATS["connections"] = 0
        STATS["paths"] = {}
        STATS["active"] = {p: n for p, n in STATS["active"].items() if n}
        STATS["max_active"] = dict(STATS["active"])
        del LOG[:]


def redact(s):
    for i, v in enumerate(REDACT):
        s = s.replace(v, "[redacted:%d]" % i)
    return s


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Hundreds of connections may come at once (many calls in flight per worker):
    # a short accept queue would drop their SYNs and delay them by a second.
    request_queue_size = 1024

    def get_request(self):
        conn, addr = super().get_request()
        with LOCK:
            STATS["connections"] += 1
        return conn, addr


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tp-test-server/1"

    def log_message(self, fmt, *args):
        pass

    # One method for all: the path decides.
    def do_any(self):
        u = urllib.parse.urlsplit(self.path)
        self.q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        n = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(n) if n > 0 else b""
        entry = {"path": u.path, "key": self.arg("key"), "start": time.monotonic(), "end": None}
        with LOCK:
            STATS["requests"] += 1
            STATS["paths"][u.path] = STATS["paths"].get(u.path, 0) + 1
            active = STATS["active"].get(u.path, 0) + 1
            STATS["active"][u.path] = active
            STATS["max_active"][u.path] = max(active, STATS["max_active"].get(u.path, 0))
            LOG.append(entry)
        try:
            self.route(u)
        except OSError:
            # The client went away (a worker killed mid-request): nothing to answer.
            self.close_connection = True
        finally:
            with LOCK:
                STATS["active"][u.path] -= 1
                entry["end"] = time.monotonic()

    def route(self, u):
        parts = u.path.split("/")
        head = parts[1] if len(parts) > 1 else ""
        route = {
            "json": self.r_json,
            "text": self.r_text,
            "empty": self.r_empty,
            "status": self.r_status,
            "hang": self.r_hang,
            "trickle": self.r_trickle,
            "reset": self.r_reset,
            "huge": self.r_huge,
            "redirect-loop": self.r_redirect_loop,
            "redirect": self.r_redirect,
            "redirect-to": self.r_redirect_to,
            "error-body": self.r_error_body,
            "flaky": self.r_flaky,
            "echo": self.r_echo,
            "slow": self.r_slow,
            "stats": self.r_stats,
        }.get(head)
        if route is None:
            self.send(404, b"no such path", "text/plain")
        else:
            route(u, parts)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_any

    def arg(self, name, default=None):
        v = self.q.get(name)
        return v[0] if v else default

    def send(self, status, body=b"", ctype=None, extra=()):
        self.send_response(status)
        if ctype and body:
            self.send_header("Content-Type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and status not in (204, 304) and self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status, obj, extra=()):
        self.send(status, json.dumps(obj).encode(), "application/json", extra)

    def retry_after(self):
        h = []
        if self.arg("retry_after") is not None:
            h.append(("Retry-After", self.arg("retry_after")))
        if self.arg("retry_after_date") is not None:
            # Whole seconds only: round up, so the wait is never less than asked.
            at = math.floor(time.time()) + 1 + int(self.arg("retry_after_date"))
            h.append(("Retry-After", email.utils.formatdate(at, usegmt=True)))
        return h

    def r_json(self, u, parts):
        self.send_json(200, {"rates": {"EUR": 0.9, "JPY": 151.2}, "n": 2})

    def r_text(self, u, parts):
        self.send(200, b"plain text body", "text/plain; charset=utf-8")

    def r_empty(self, u, parts):
        self.send(int(self.arg("status", "204")))

    def r_status(self, u, parts):
        try:
            code = int(parts[2])
        except (IndexError, ValueError):
            self.send(400, b"status: /status/N", "text/plain")
            return
        self.send(code, ("status %d body" % code).encode(), "text/plain", self.retry_after())

    def r_hang(self, u, parts):
        while True:
            time.sleep(3600)

    def r_trickle(self, u, parts):
        n = int(self.arg("n", "10"))
        ms = int(self.arg("ms", "100"))
        pieces = [b'{"pieces": ['] + [b"%d," % i for i in range(n - 1)] + [b"%d]}" % (n - 1)]
        body_len = sum(len(p) for p in pieces)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(body_len))
        self.end_headers()
        self.wfile.flush()
        for p in pieces:
            time.sleep(ms / 1000.0)
            self.wfile.write(p)
            self.wfile.flush()

    def r_reset(self, u, parts):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"x" * 100)
        self.wfile.flush()
        self.close_connection = True
        try:
            # An RST rather than a FIN: linger 0, then close.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
        except OSError:
            pass

    def r_huge(self, u, parts):
        n = int(self.arg("bytes", str(HUGE)))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"h" * 65536
        try:
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
        except OSError:
            self.close_connection = True

    def r_redirect_loop(self, u, parts):
        self.send(302, b"again", "text/plain", [("Location", "/redirect-loop")])

    def r_redirect(self, u, parts):
        try:
            n = int(parts[2])
        except (IndexError, ValueError):
            n = 1
        to = "/json" if n <= 1 else "/redirect/%d" % (n - 1)
        self.send(302, b"moved", "text/plain", [("Location", to)])

    def r_redirect_to(self, u, parts):
        code = int(self.arg("status", "302"))
        self.send(code, b"moved", "text/plain", [("Location", self.arg("url", "/json"))])

    def r_error_body(self, u, parts):
        body = {"error": "RateLimited", "message": "slow down"}
        if self.arg("order") is not None:
            body["order"] = int(self.arg("order"))  # written as given, past int64 too
        self.send_json(400, body)

    def r_flaky(self, u, parts):
        key = "/".join(parts[2:])
        fail = int(self.arg("fail", "1"))
        code = int(self.arg("status", "503"))
        with LOCK:
            tries = FLAKY.get(key, 0) + 1
            FLAKY[key] = tries
        if tries <= fail:
            self.send(code, ("flaky %s try %d: status %d" % (key, tries, code)).encode(), "text/plain",
                      self.retry_after())
        else:
            self.send_json(200, {"key": key, "tries": tries})

    def r_echo(self, u, parts):
        text = self.body.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        out = {
            "method": self.command,
            "path": u.path,
            "segments": [urllib.parse.unquote(p) for p in u.path.split("/")[1:]],
            "query": self.q,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": text,
            "json": parsed,
        }
        self.send(200, redact(json.dumps(out)).encode(), "application/json")

    def r_slow(self, u, parts):
        ms = float(self.arg("ms", "100"))
        time.sleep(ms / 1000.0)
        self.send_json(200, {"slept_ms": ms})

    def r_stats(self, u, parts):
        self.send(200, stats_snapshot().encode(), "application/json")


BLACKHOLE = []


def blackhole_port():
    """A listener that never accepts, its queue filled: a connect to it hangs."""
    if not BLACKHOLE:
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(0)
        fillers = []
        for _ in range(8):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(ls.getsockname())
            except BlockingIOError:
                pass
            fillers.append(c)
        time.sleep(0.2)
        BLACKHOLE.extend([ls] + fillers)
    return BLACKHOLE[0].getsockname()[1]


def control():
    """Commands on stdin; its end is the server's end."""
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "stats":
            out = stats_snapshot()
        elif cmd == "log":
            out = log_snapshot()
        elif cmd == "reset":
            reset()
            out = "ok"
        elif cmd == "blackhole":
            out = str(blackhole_port())
        else:
            out = "error: unknown command %r" % cmd
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    os._exit(0)


def main():
    args = sys.argv[1:]
    tls = None
    while args:
        a = args.pop(0)
        if a == "--tls":
            tls = (args.pop(0), args.pop(0))
        elif a == "--redact":
            REDACT.append(args.pop(0))
        else:
            sys.stderr.write("http_server.py: unknown option %s\n" % a)
            sys.exit(2)
    srv = Server(("127.0.0.1", 0), Handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls[0], tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    sys.stdout.write("%d\n" % srv.server_address[1])
    sys.stdout.flush()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    control()


if __name__ == "__main__":
    main()
