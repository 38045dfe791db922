#!/usr/bin/env python3
"""A small, flaky API for examples/http, on 127.0.0.1 (port 0: it prints the
port it got on its first line), until its stdin closes.

  GET  /v1/rates/BASE?symbols=A,B  429 with Retry-After: 1 on the first try, then the rates
  GET  /v1/search?q=...            503 every time: the search backend is down
  GET  /v1/cache/search?q=...      a cached answer (the fallback)
  DELETE /v1/records/ID            403: this agent may not delete
  POST /v1/notes                   201 with the note it was sent, and its id
"""
import http.server
import json
import sys
import threading
import urllib.parse

tries = {}
lock = threading.Lock()


class Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path.startswith("/v1/rates/"):
            base = urllib.parse.unquote(u.path[len("/v1/rates/"):])
            with lock:
                n = tries[base] = tries.get(base, 0) + 1
            if n == 1:
                return self.reply(429, {"detail": "rate limited: one call a second"}, [("Retry-After", "1")])
            symbols = q.get("symbols", ["EUR,JPY"])[0].split(",")
            table = {"EUR": 0.92, "JPY": 151.3, "GBP": 0.79}
            return self.reply(200, {"base": base, "rates": {s: table.get(s) for s in symbols}})
        if u.path == "/v1/search":
            return self.reply(503, {"detail": "search is down for maintenance"})
        if u.path == "/v1/cache/search":
            return self.reply(200, {"hits": ["cached: " + q.get("q", [""])[0]], "as_of": "yesterday"})
        self.reply(404, {"detail": "no such path"})

    def do_DELETE(self):
        self.reply(403, {"detail": "role agent may not delete records"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        note = json.loads(self.rfile.read(n) or b"{}")
        if self.headers.get("Authorization") != "Bearer example-token":
            return self.reply(401, {"detail": "no token"})
        self.reply(201, {"id": "n1", "note": note})


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
server.daemon_threads = True
print(server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
