"""serve's /mcp for MCP 2026-07-28: stateless requests, each POST on its own.

A POST with MCP-Protocol-Version: 2026-07-28 goes to no session: no
initialize, no Mcp-Session-Id (one sent is ignored), the revision and the
client's capabilities in each request's _meta. Its headers mirror its body
(Mcp-Method, Mcp-Name, the revision, a tool's x-mcp-header parameters as
Mcp-Param-*) and one that says otherwise is refused 400 HeaderMismatch
(-32020); an unknown method is 404 -32601, an unknown revision 400 -32022
listing ours; and a client that closes its request's stream cancels the
call (recorded Cancelled), which an earlier revision's does not.
"""
import base64
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import EXAMPLE_SO, TOOLPOOL, WORK_TOOL, Server  # noqa: E402

import subprocess  # noqa: E402

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"}}


def request(rid, method, params=None, meta=META):
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = dict(meta, **p.get("_meta", {}))
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": p}


def headers_for(msg, version=MODERN, accept="application/json, text/event-stream"):
    h = {"Content-Type": "application/json", "Accept": accept, "MCP-Protocol-Version": version,
         "Mcp-Method": msg["method"]}
    name = msg.get("params", {}).get("name")
    if name is not None:
        h["Mcp-Name"] = name
    return h


class ModernHttpTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="mcp_http_modern_test.")
        self.tmp = self._tmp.name
        self.log = os.path.join(self.tmp, "runs.log")
        open(self.log, "w").close()
        tool = os.path.join(self.tmp, "work.py")
        with open(tool, "w") as f:
            f.write(WORK_TOOL)
        registry = {"defaults": {"timeout": "60s"}, "tools": [
            {"name": "echo", "description": "Returns its args.", "plugin": {"path": EXAMPLE_SO}},
            {"name": "work", "description": "Notes its run, sleeps args.s seconds.",
             "exec": ["python3", tool, self.log], "idempotent": True,
             "parameters": {"type": "object", "properties": {"s": {"type": "number"}}}},
            {"name": "query", "description": "Returns its args; region and shard travel as headers too.",
             "exec": ["cat"],
             "parameters": {"type": "object", "properties": {
                 "region": {"type": "string", "x-mcp-header": "Region"},
                 "opts": {"type": "object", "properties": {"shard": {"type": "integer", "x-mcp-header": "Shard"}}},
                 "q": {"type": "string"}}}},
            {"name": "deny", "description": "Fails NotFound: the example plugin has no such tool.",
             "plugin": {"path": EXAMPLE_SO}},
        ]}
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(registry, f)
        self.s = Server(self, self.tmp, tcp=True).start()

    def tearDown(self):
        code = self.s.stop()
        err = self.s.stderr()
        self._tmp.cleanup()
        self.assertEqual(code, 0, err)
        self.assertNotIn("Sanitizer", err)
        self.assertNotIn("runtime error:", err)

    def runs(self):
        with open(self.log) as f:
            return f.read().split()

    def post(self, msg, headers=None, **kw):
        st, hd, body = self.s.request("POST", "/mcp", json.dumps(msg).encode(),
                                      headers=headers if headers is not None else headers_for(msg, **kw))
        return st, hd, body

    def rpc(self, msg, headers=None, **kw):
        st, hd, body = self.post(msg, headers, **kw)
        if hd.get("Content-Type") == "text/event-stream":  # the response is the stream's last event
            body = [ln[6:] for ln in body.decode().splitlines() if ln.startswith("data: ")][-1]
        return st, hd, json.loads(body) if body else None

    def assert_rpc_error(self, got, status, code, rid=None, text=None):
        st, _, r = got
        self.assertEqual(st, status, r)
        self.assertEqual(r["error"]["code"], code, r)
        self.assertEqual(r["id"], rid, r)
        if text:
            self.assertIn(text, r["error"]["message"])
        return r

    def test_discover_list_and_call_without_a_session(self):
        st, hd, r = self.rpc(request(1, "server/discover"))
        self.assertEqual(st, 200, r)
        self.assertNotIn("Mcp-Session-Id", hd)
        self.assertEqual(r["result"]["supportedVersions"], [MODERN, "2025-11-25", "2025-06-18"])
        self.assertEqual(r["result"]["resultType"], "complete")
        st, _, r = self.rpc(request(2, "tools/list"))
        self.assertEqual(st, 200, r)
        self.assertEqual([t["name"] for t in r["result"]["tools"]], ["echo", "work", "query", "deny"])
        self.assertIn("ttlMs", r["result"])
        # a call, answered as JSON; an Mcp-Session-Id sent along is ignored (none is given back)
        call = request(3, "tools/call", {"name": "echo", "arguments": {"x": [1, 2.5]}})
        st, hd, r = self.rpc(call, dict(headers_for(call), **{"Mcp-Session-Id": "no-such-session"}))
        self.assertEqual(st, 200, r)
        self.assertNotIn("Mcp-Session-Id", hd)
        self.assertEqual(r["result"]["structuredContent"], {"x": [1, 2.5]})
        self.assertEqual(r["result"]["resultType"], "complete")
        # as an event stream, for a client that takes only that, not held back by a proxy
        st, hd, body = self.post(call, accept="text/event-stream")
        self.assertEqual(st, 200, body)
        self.assertEqual(hd["Content-Type"], "text/event-stream")
        self.assertEqual(hd.get("X-Accel-Buffering"), "no")
        data = [ln[6:] for ln in body.decode().splitlines() if ln.startswith("data: ")]
        self.assertEqual(json.loads(data[-1])["result"]["structuredContent"], {"x": [1, 2.5]})

    def test_the_same_failing_call_opens_its_circuit_without_a_session(self):
        # Each POST's call is a job of its own, yet the same failing call sent again and again
        # meets its circuit: the breaker counts them under the service's stateless session.
        def deny(rid):
            st, _, r = self.rpc(request(rid, "tools/call", {"name": "deny", "arguments": {"id": "r_7"}}))
            self.assertEqual(st, 200, r)
            tp = r["result"]["_meta"]["toolpool"]
            self.assertEqual(tp["job"], tp["id"])
            return r["result"]["structuredContent"]

        got = [deny(i) for i in range(1, 5)]
        kind = got[0]["error"]
        self.assertEqual(kind, "NotFound")
        self.assertEqual([(t["error"], t.get("escalated")) for t in got],
                         [(kind, False), (kind, False), (kind, True), ("CircuitOpen", True)], got)
        self.assertEqual(got[3]["escalation"], got[2]["escalation"])

    def test_two_clients_may_use_the_same_request_id_at_once(self):
        # Stateless: ids are each client's own, so two POSTs of id 7 at once are two calls.
        got = {}

        def one(k):
            call = request(7, "tools/call", {"name": "work", "arguments": {"s": 0.5}})
            got[k] = self.rpc(call)

        ts = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for k in range(2):
            st, _, r = got[k]
            self.assertEqual(st, 200, r)
            self.assertIs(r["result"]["isError"], False, r)
        ids = {got[k][2]["result"]["_meta"]["toolpool"]["id"] for k in range(2)}
        self.assertEqual(len(ids), 2)

    def test_headers_that_say_otherwise_than_the_body(self):
        call = request("c1", "tools/call", {"name": "echo", "arguments": {}})
        h = headers_for(call)
        for drop in ("Mcp-Method", "Mcp-Name"):
            bad = {k: v for k, v in h.items() if k != drop}
            self.assert_rpc_error(self.rpc(call, bad), 400, -32020, "c1", drop + " header is missing")
        self.assert_rpc_error(self.rpc(call, dict(h, **{"Mcp-Method": "tools/list"})), 400, -32020, "c1",
                              "Mcp-Method header value 'tools/list' does not match body value 'tools/call'")
        self.assert_rpc_error(self.rpc(call, dict(h, **{"Mcp-Name": "work"})), 400, -32020, "c1",
                              "Mcp-Name header value 'work'")
        # the revision in _meta must be the header's
        old = request("c2", "tools/list", meta=dict(META, **{"io.modelcontextprotocol/protocolVersion": "2025-11-25"}))
        self.assert_rpc_error(self.rpc(old), 400, -32020, "c2", "MCP-Protocol-Version header value '2026-07-28'")
        # a name outside plain ASCII comes Base64-encoded, and is decoded before it is compared
        enc = "=?base64?" + base64.b64encode(b"echo").decode() + "?="
        st, _, r = self.rpc(call, dict(h, **{"Mcp-Name": enc}))
        self.assertEqual(st, 200, r)
        self.assert_rpc_error(self.rpc(call, dict(h, **{"Mcp-Name": "=?base64?" + base64.b64encode(b"echx").decode()
                                                          + "?="})), 400, -32020, "c1")
        # a body that names 2026-07-28 without the header is refused, not taken for a session's
        self.assert_rpc_error(self.rpc(request("c3", "tools/list"), {"Content-Type": "application/json"}),
                              400, -32020, "c3", "MCP-Protocol-Version header is missing")
        # nothing above ran
        self.assertEqual(self.runs(), [])

    def test_a_tools_x_mcp_header_parameters(self):
        args = {"region": "us-west1", "opts": {"shard": 42}, "q": "x"}
        call = request("p1", "tools/call", {"name": "query", "arguments": args})
        h = headers_for(call)
        self.assert_rpc_error(self.rpc(call, h), 400, -32020, "p1", "Mcp-Param-Region header is missing")
        h["Mcp-Param-Region"] = "us-west1"
        self.assert_rpc_error(self.rpc(call, h), 400, -32020, "p1", "Mcp-Param-Shard header is missing")
        h["Mcp-Param-Shard"] = "41"
        self.assert_rpc_error(self.rpc(call, h), 400, -32020, "p1", "Mcp-Param-Shard header value '41'")
        h["Mcp-Param-Shard"] = "42.0"  # compared by value
        st, _, r = self.rpc(call, h)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["result"]["structuredContent"], args)
        h["Mcp-Param-Region"] = "=?base64?" + base64.b64encode("東京".encode()).decode() + "?="
        self.assert_rpc_error(self.rpc(call, h), 400, -32020, "p1", "Mcp-Param-Region header value")
        # Base64 as RFC 4648 has it: padded to four, from its alphabet; else it names nothing
        for bad in ("dXMtd2VzdDE", "dXMtd2VzdDE===", "dXMt!2VzdDE="):
            h["Mcp-Param-Region"] = "=?base64?" + bad + "?="
            self.assert_rpc_error(self.rpc(call, h), 400, -32020, "p1", "Mcp-Param-Region header value")
        h["Mcp-Param-Region"] = "=?base64?" + base64.b64encode(b"us-west1").decode() + "?="
        self.assertEqual(self.rpc(call, h)[0], 200)
        # an argument not given needs no header
        bare = request("p2", "tools/call", {"name": "query", "arguments": {"q": "x"}})
        self.assertEqual(self.rpc(bare)[0], 200)

    def test_errors_have_http_statuses(self):
        # an unknown revision: the error still carries the request's id
        r = self.assert_rpc_error(self.rpc(request(1, "tools/list"), version="2099-01-01"), 400, -32022, 1)
        self.assertEqual(r["error"]["data"], {"supported": [MODERN, "2025-11-25", "2025-06-18"],
                                              "requested": "2099-01-01"})
        self.assert_rpc_error(self.rpc(request(2, "resources/list")), 404, -32601, 2)
        self.assert_rpc_error(self.rpc(request(3, "ping")), 404, -32601, 3)
        self.assert_rpc_error(self.rpc(request(4, "tools/list", meta=None)), 400, -32602, 4)
        # a method 2026-07-28 removed is 404 -32601, before its headers or its _meta are judged
        self.assert_rpc_error(self.rpc(request(5, "initialize", {"protocolVersion": MODERN})), 404, -32601, 5)
        gone = request(51, "tasks/result", {"taskId": "t"}, meta=None)
        self.assert_rpc_error(self.rpc(gone, dict(headers_for(gone), **{"Mcp-Method": "tasks/get"})), 404, -32601, 51)
        self.assert_rpc_error(self.rpc(request(52, "logging/setLevel", {"level": "info"})), 404, -32601, 52)
        self.assert_rpc_error(self.rpc(request(6, "tools/call", {"name": "nope"})), 400, -32602, 6, "nope")
        # a notification: 202, no body
        note = {"jsonrpc": "2.0", "method": "notifications/initialized", "params": {"_meta": META}}
        st, _, body = self.post(note)
        self.assertEqual((st, body), (202, b""))

    def test_a_closed_stream_cancels_the_call(self):
        call = request(9, "tools/call", {"name": "work", "arguments": {"s": 30}, "_meta": {"id": "m-cancel"}})
        body = json.dumps(call).encode()
        head = "".join("%s: %s\r\n" % kv for kv in headers_for(call).items())
        c = socket.create_connection(("127.0.0.1", self.s.port))
        c.sendall(("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %d\r\n\r\n" % (head, len(body)))
                  .encode() + body)
        deadline = time.monotonic() + 20
        while "m-cancel" not in self.runs() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("m-cancel", self.runs(), "the call never started")
        c.close()
        t0 = time.monotonic()
        st, rec = None, None
        while time.monotonic() < t0 + 20:
            st, rec = self.s.json("GET", "/v1/calls/m-cancel")
            if st == 200:
                break
            time.sleep(0.05)
        self.assertEqual(st, 200, rec)
        self.assertEqual(rec["error"], "Cancelled", rec)
        self.assertLess(time.monotonic() - t0, 15)
        # the same request again is answered from the store
        st, _, r = self.rpc(call)
        self.assertEqual(st, 200, r)
        self.assertEqual(json.loads(r["result"]["content"][0]["text"])["error"], "Cancelled")
        self.assertEqual(self.runs(), ["m-cancel"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
