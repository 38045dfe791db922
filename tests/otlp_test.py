#!/usr/bin/env python3
"""Traces over OTLP/HTTP: `run`, `serve` and `mcp` with --otlp (or the
OTEL_* variables) POST ExportTraceServiceRequest, in the protobuf encoding
(the default) or the JSON one (--otlp-protocol http/json), to a real
receiver this test starts on loopback (http.server in a thread), which
decodes both: the protobuf with a decoder of its own, below, written from
opentelemetry-proto's message definitions, into the shape of the JSON
encoding, so that every check reads both alike. The
spans are checked against the result lines: names, attributes, parent and
child links, trace ids joining an incoming traceparent, and times that say
what the record says. A collector that is down or slow leaves the calls
alone, and the spans it never took are dropped and counted.

Standard library only; the build folder as in serveutil.
"""
import http.client
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"


def pb_fields(buf):
    """A protobuf message's fields, in order: (number, wire type, value);
    a varint or fixed64 as an int, a length-delimited field as bytes."""
    i, out = 0, []

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            val = varint()
        elif wt == 1:
            val = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wt == 2:
            n = varint()
            val = bytes(buf[i:i + n])
            if len(val) != n:
                raise AssertionError("a length-delimited field runs past its message")
            i += n
        elif wt == 5:
            val = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        out.append((num, wt, val))
    if i != len(buf):
        raise AssertionError("a field runs past its message")
    return out


def pb_any(buf):
    """AnyValue: 1 string_value, 2 bool_value, 3 int_value, 4 double_value."""
    (num, _, v), = pb_fields(buf)
    if num == 1:
        return {"stringValue": v.decode()}
    if num == 2:
        return {"boolValue": bool(v)}
    if num == 3:
        return {"intValue": str(v - (1 << 64) if v >= 1 << 63 else v)}
    raise AssertionError(f"unexpected AnyValue field {num}")


def pb_kv(buf):
    """KeyValue: 1 key, 2 value."""
    f = {n: v for n, _, v in pb_fields(buf)}
    return {"key": f[1].decode(), "value": pb_any(f[2])}


SPAN_KEYS = {1: "traceId", 2: "spanId", 3: "traceState", 4: "parentSpanId", 5: "name", 6: "kind",
             7: "startTimeUnixNano", 8: "endTimeUnixNano"}


def pb_span(buf):
    """Span (trace/v1/trace.proto), as its JSON encoding has it: ids in hex, times as strings."""
    s = {"attributes": []}
    for num, wt, v in pb_fields(buf):
        if num in (1, 2, 4):
            s[SPAN_KEYS[num]] = v.hex()
        elif num in (3, 5):
            s[SPAN_KEYS[num]] = v.decode()
        elif num == 6:
            s["kind"] = v
        elif num in (7, 8):
            assert wt == 1, "times are fixed64"
            s[SPAN_KEYS[num]] = str(v)
        elif num == 9:
            s["attributes"].append(pb_kv(v))
        elif num == 15:  # Status: 2 message, 3 code
            st = {}
            for n, _, x in pb_fields(v):
                if n == 2:
                    st["message"] = x.decode()
                elif n == 3:
                    st["code"] = x
            s["status"] = st
        else:
            raise AssertionError(f"unexpected Span field {num}")
    for k in ("traceId", "spanId", "name", "startTimeUnixNano", "endTimeUnixNano"):
        assert k in s, f"a span without its {k}"
    return s


def pb_request(buf):
    """ExportTraceServiceRequest (1 resource_spans) as its JSON encoding has it."""
    out = []
    for num, _, rs in pb_fields(buf):
        assert num == 1, num
        r = {"resource": {"attributes": []}, "scopeSpans": []}
        for n, _, v in pb_fields(rs):
            if n == 1:  # Resource: 1 attributes
                r["resource"]["attributes"] = [pb_kv(x) for m, _, x in pb_fields(v) if m == 1]
            elif n == 2:  # ScopeSpans: 1 scope, 2 spans
                ss = {"scope": {}, "spans": []}
                for m, _, x in pb_fields(v):
                    if m == 1:
                        sc = {k: y.decode() for k, _, y in pb_fields(x)}
                        ss["scope"] = {"name": sc.get(1, ""), "version": sc.get(2, "")}
                    elif m == 2:
                        ss["spans"].append(pb_span(x))
                r["scopeSpans"].append(ss)
        out.append(r)
    return {"resourceSpans": out}


def decode_body(content_type, body):
    if content_type == "application/x-protobuf":
        return pb_request(body)
    assert content_type == "application/json", content_type
    return json.loads(body)


class Receiver:
    """An OTLP/HTTP receiver: keeps each POST's path and decoded body;
    delay: seconds it sleeps before answering each."""

    def __init__(self, delay=0.0, partial=0):
        self.posts = []
        self.raw = []  # the bodies as sent
        self.lock = threading.Lock()
        recv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if recv.delay:
                    time.sleep(recv.delay)
                with recv.lock:
                    recv.raw.append(body)
                    recv.posts.append((self.path, dict(self.headers),
                                       decode_body(self.headers.get("Content-Type"), body)))
                answer, ctype = b"{}", "application/json"
                if recv.partial and self.headers.get("Content-Type") == "application/x-protobuf":
                    # ExportTraceServiceResponse{partial_success{rejected_spans, error_message}}
                    msg = b"too old"
                    inner = bytes([0x08, recv.partial, 0x12, len(msg)]) + msg
                    answer, ctype = bytes([0x0a, len(inner)]) + inner, "application/x-protobuf"
                elif recv.partial:
                    answer = json.dumps({"partialSuccess": {"rejectedSpans": str(recv.partial),
                                                            "errorMessage": "too old"}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self):
                # an http tool's server: answers with the traceparent its request carried
                body = json.dumps({"traceparent": self.headers.get("traceparent")}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.delay = delay
        self.partial = partial
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def spans(self):
        """Every span received: (resource attributes, span)."""
        with self.lock:
            posts = list(self.posts)
        out = []
        for _, _, body in posts:
            for rs in body["resourceSpans"]:
                res = attrs(rs["resource"])
                for ss in rs["scopeSpans"]:
                    assert ss["scope"]["name"] == "toolpool", ss["scope"]
                    out += [(res, s) for s in ss["spans"]]
        return out


def value(v):
    """An AnyValue as Python."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "boolValue" in v:
        return v["boolValue"]
    if "doubleValue" in v:
        return v["doubleValue"]
    raise AssertionError(f"unexpected AnyValue {v}")


def attrs(obj):
    return {a["key"]: value(a["value"]) for a in obj.get("attributes", [])}


def dur_ms(span):
    return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6


# An MCP stdio server whose one tool answers the _meta.traceparent its tools/call carried.
MCP_SERVER = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "meta", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": [{"name": "meta", "inputSchema": {"type": "object"}}]}
    elif m["method"] == "tools/call":
        tp = (m["params"].get("_meta") or {}).get("traceparent")
        r = {"content": [{"type": "text", "text": json.dumps(tp)}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"""


class Otlp(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-otlp-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.reg = serveutil.write_registry(os.path.join(self.dir, "tools.json"), [
            {"name": "cat", "exec": ["sh", "-c", "cat"], "timeout": "5s"},
            {"name": "flaky", "exec": ["sh", "-c", "cat >/dev/null; exit 75"], "timeout": "5s", "attempts": 3,
             "backoff": {"base": "40ms", "factor": 2, "jitter": "none"}},
        ])
        self.n = 0

    def receiver(self, **kw):
        r = Receiver(**kw)
        self.addCleanup(r.close)
        return r

    def run_calls(self, calls, *args, env=None, timeout=60):
        """`toolpool run` on calls (dicts) in a fresh store: (results by id, stderr, seconds taken)."""
        self.n += 1
        path = os.path.join(self.dir, f"calls{self.n}.jsonl")
        with open(path, "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("OTEL_"):
                del e[k]
        e.update(env or {})
        t0 = time.monotonic()
        p = subprocess.run([TOOLPOOL, "run", "-j", "2", "--registry", self.reg, "--store",
                            os.path.join(self.dir, f"store{self.n}"), *args, path],
                           capture_output=True, text=True, timeout=timeout, env=e)
        took = time.monotonic() - t0
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return {json.loads(line)["id"]: json.loads(line) for line in p.stdout.splitlines()}, p.stderr, took

    def test_run_spans_protobuf(self):
        self.check_run_spans((), "application/x-protobuf")

    def test_run_spans_json(self):
        self.check_run_spans(("--otlp-protocol", "http/json"), "application/json")

    def check_run_spans(self, proto_args, content_type):
        """Two calls' spans, in one encoding: names, attributes, parentage and times."""
        r = self.receiver()
        res, err, _ = self.run_calls(
            [{"id": "c1", "job": "j", "step": 1, "tool": "cat", "args": {"q": "secret-arg"}},
             {"id": "c2", "job": "j", "step": 2, "tool": "flaky", "args": {}, "traceparent": TRACEPARENT,
              "tracestate": "vendor=1"}],
            "--otlp", r.url, *proto_args,
            env={"OTEL_SERVICE_NAME": "evals", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci,team=a%2Cb"})
        self.assertIn("otlp: 8 spans exported, 0 dropped", err)
        self.assertEqual({p for p, _, _ in r.posts}, {"/v1/traces"})
        self.assertTrue(all(h.get("Content-Type") == content_type for _, h, _ in r.posts))
        self.assertFalse(any(b"secret-arg" in raw for raw in r.raw))  # no payloads unless asked
        spans = r.spans()
        res0 = spans[0][0]
        self.assertEqual(res0["service.name"], "evals")
        self.assertEqual(res0["deployment.environment"], "ci")
        self.assertEqual(res0["team"], "a,b")
        by_name = {}
        for _, s in spans:
            by_name.setdefault(s["name"], []).append(s)
        self.assertEqual(sorted(s["name"] for _, s in spans),
                         ["attempt 1 cat", "attempt 1 flaky", "attempt 2 flaky", "attempt 3 flaky", "backoff flaky",
                          "backoff flaky", "execute_tool cat", "execute_tool flaky"])

        # the call that succeeded: its own trace, one attempt under it
        call = by_name["execute_tool cat"][0]
        a = attrs(call)
        self.assertEqual(call["kind"], 1)  # INTERNAL
        self.assertNotIn("parentSpanId", call)
        self.assertEqual(a["gen_ai.operation.name"], "execute_tool")
        self.assertEqual(a["gen_ai.tool.name"], "cat")
        self.assertEqual(a["gen_ai.tool.call.id"], "c1")
        self.assertEqual(a["toolpool.job"], "j")
        self.assertEqual(a["toolpool.step"], 1)
        self.assertEqual(a["toolpool.outcome.class"], "ok")
        self.assertEqual(a["toolpool.attempts"], 1)
        self.assertEqual(a["toolpool.served_by"], "cat")
        self.assertIs(a["toolpool.degraded"], False)
        self.assertNotIn("error.type", a)
        self.assertNotIn("status", call)
        self.assertNotIn("secret-arg", json.dumps(r.posts))  # no payloads unless asked
        att = by_name["attempt 1 cat"][0]
        self.assertEqual(att["traceId"], call["traceId"])
        self.assertEqual(att["parentSpanId"], call["spanId"])
        self.assertAlmostEqual(dur_ms(call), res["c1"]["duration_ms"], delta=0.002)
        self.assertAlmostEqual(dur_ms(att), res["c1"]["trace"][0]["duration_ms"], delta=0.002)

        # the call that failed: a child of the incoming traceparent, three attempts, two backoffs
        call = by_name["execute_tool flaky"][0]
        a = attrs(call)
        self.assertEqual(call["traceId"], PARENT_TRACE)
        self.assertEqual(call["parentSpanId"], PARENT_SPAN)
        self.assertEqual(call["traceState"], "vendor=1")
        self.assertEqual(a["error.type"], "ServerError")
        self.assertEqual(a["toolpool.outcome.kind"], "ServerError")
        self.assertEqual(a["toolpool.outcome.class"], "transient")
        self.assertEqual(a["toolpool.attempts"], 3)
        self.assertEqual(call["status"]["code"], 2)
        self.assertEqual(call["status"]["message"], res["c2"]["message"])
        rec = res["c2"]
        self.assertAlmostEqual(dur_ms(call), rec["duration_ms"], delta=0.002)
        start = int(call["startTimeUnixNano"])
        for t in rec["trace"]:
            s = by_name[f"attempt {t['attempt']} flaky"][0]
            self.assertEqual(s["traceId"], PARENT_TRACE)
            self.assertEqual(s["parentSpanId"], call["spanId"])
            self.assertEqual(attrs(s)["toolpool.outcome"], "ServerError")
            self.assertEqual(attrs(s)["error.type"], "ServerError")
            self.assertEqual(s["status"]["code"], 2)
            self.assertAlmostEqual(dur_ms(s), t["duration_ms"], delta=0.002)
            off = (int(s["startTimeUnixNano"]) - start) / 1e6
            self.assertAlmostEqual(off, t["start_ms"] - rec["trace"][0]["start_ms"], delta=0.002)
        backoffs = sorted(by_name["backoff flaky"], key=lambda s: int(s["startTimeUnixNano"]))
        self.assertEqual([round(dur_ms(s)) for s in backoffs], [40, 80])
        for s in backoffs:
            self.assertEqual(s["parentSpanId"], call["spanId"])
        # every span inside its call's
        for s in by_name["backoff flaky"] + [by_name[f"attempt {n} flaky"][0] for n in (1, 2, 3)]:
            self.assertGreaterEqual(int(s["startTimeUnixNano"]), start)
            self.assertLessEqual(int(s["endTimeUnixNano"]), int(call["endTimeUnixNano"]) + 1000)

    def test_context_out(self):
        """An attempt's span is its tool's parent: TRACEPARENT for an exec tool, a header for an http tool."""
        r = self.receiver()
        self.reg = serveutil.write_registry(os.path.join(self.dir, "tools2.json"), [
            {"name": "env", "exec": ["sh", "-c", 'cat >/dev/null; printf \'{"traceparent":"%s"}\' "$TRACEPARENT"'],
             "timeout": "5s"},
            {"name": "web", "http": {"url": r.url + "/echo"}, "timeout": "5s"},
        ])
        res, _, _ = self.run_calls([{"id": "x1", "tool": "env", "args": {}, "traceparent": TRACEPARENT},
                                    {"id": "x2", "tool": "web", "args": {}},
                                    {"id": "x3", "tool": "env", "args": {}}],
                                   "--otlp", r.url, env={"TRACEPARENT": "00-" + "9" * 32 + "-" + "9" * 16 + "-01"})
        spans = {s["name"] + " " + s["traceId"]: s for _, s in r.spans()}
        for cid, tool in (("x1", "env"), ("x2", "web"), ("x3", "env")):
            self.assertTrue(res[cid]["ok"], res[cid])
            got = res[cid]["result"]["traceparent"]
            _, trace, span, flags = got.split("-")
            att = spans[f"attempt 1 {tool} {trace}"]
            self.assertEqual(att["spanId"], span)
            self.assertEqual(flags, "01")
        self.assertTrue(res["x1"]["result"]["traceparent"].startswith("00-" + PARENT_TRACE + "-"))
        # the worker's own TRACEPARENT is replaced by the attempt's
        self.assertNotIn("9" * 32, res["x3"]["result"]["traceparent"])

    def test_context_out_mcp(self):
        """An MCP tool's server gets the attempt's span as params._meta.traceparent."""
        r = self.receiver()
        server = os.path.join(self.dir, "server.py")
        with open(server, "w") as f:
            f.write(MCP_SERVER)
        self.reg = serveutil.write_registry(os.path.join(self.dir, "tools3.json"), [
            {"name": "meta", "mcp": {"command": [sys.executable, server], "tool": "meta"}, "timeout": "10s"}])
        res, err, _ = self.run_calls([{"id": "m1", "tool": "meta", "args": {}, "traceparent": TRACEPARENT}],
                                     "--otlp", r.url)
        self.assertTrue(res["m1"]["ok"], (res, err))
        got = json.loads(res["m1"]["result"]["content"][0]["text"])
        _, trace, span, _ = got.split("-")
        self.assertEqual(trace, PARENT_TRACE)
        att = [s for _, s in r.spans() if s["name"] == "attempt 1 meta"][0]
        self.assertEqual(att["spanId"], span)

    def test_payloads(self):
        r = self.receiver()
        self.run_calls([{"id": "p1", "tool": "cat", "args": {"q": "shown"}}], "--otlp", r.url + "/v1/traces",
                       "--otlp-payloads")
        call = [s for _, s in r.spans() if s["name"] == "execute_tool cat"][0]
        a = attrs(call)
        self.assertEqual(json.loads(a["gen_ai.tool.call.arguments"]), {"q": "shown"})
        self.assertEqual(json.loads(a["gen_ai.tool.call.result"]), {"q": "shown"})

    def test_long_payloads(self):
        """A span past 16 KiB (its args and result on it), in both encodings: the protobuf one's
        length takes more bytes than a short span's, and the spans after it still decode."""
        big = "x" * 40000
        for proto in ("http/protobuf", "http/json"):
            with self.subTest(proto=proto):
                r = self.receiver()
                _, err, _ = self.run_calls([{"id": "b1", "tool": "cat", "args": {"q": big}},
                                            {"id": "b2", "tool": "cat", "args": {"q": "small"}}],
                                           "--otlp", r.url, "--otlp-payloads", "--otlp-protocol", proto)
                self.assertIn("otlp: 4 spans exported, 0 dropped", err)
                calls = {attrs(s)["gen_ai.tool.call.id"]: attrs(s) for _, s in r.spans()
                         if s["name"] == "execute_tool cat"}
                self.assertEqual(json.loads(calls["b1"]["gen_ai.tool.call.arguments"]), {"q": big})
                self.assertEqual(json.loads(calls["b1"]["gen_ai.tool.call.result"]), {"q": big})
                self.assertEqual(json.loads(calls["b2"]["gen_ai.tool.call.result"]), {"q": "small"})
                self.assertEqual(sorted(s["name"] for _, s in r.spans()), ["attempt 1 cat", "attempt 1 cat",
                                                                          "execute_tool cat", "execute_tool cat"])

    def test_text_that_is_not_utf8(self):
        """A tool's stderr is any bytes: on a span, in either encoding, its message is text (U+FFFD for
        each byte that is not UTF-8), so a strict collector takes the batch (this decoder is strict)."""
        self.reg = serveutil.write_registry(os.path.join(self.dir, "tools3.json"), [
            {"name": "bad", "exec": ["sh", "-c", 'cat >/dev/null; printf "bad \\377 byte" >&2; exit 1'],
             "attempts": 1}])
        for proto in ("http/protobuf", "http/json"):
            with self.subTest(proto=proto):
                r = self.receiver()
                res, err, _ = self.run_calls([{"id": "u1", "tool": "bad", "args": {}}], "--otlp", r.url,
                                             "--otlp-protocol", proto)
                self.assertIn("otlp: 2 spans exported, 0 dropped", err)
                call = [s for _, s in r.spans() if s["name"] == "execute_tool bad"][0]
                self.assertEqual(call["status"]["message"], res["u1"]["message"])
                self.assertIn("bad \ufffd byte", call["status"]["message"])

    def test_environment_endpoints(self):
        r = self.receiver()
        self.run_calls([{"id": "e1", "tool": "noop", "args": {}}],
                       env={"OTEL_EXPORTER_OTLP_ENDPOINT": r.url + "/"})
        self.run_calls([{"id": "e2", "tool": "noop", "args": {}}],
                       env={"OTEL_EXPORTER_OTLP_ENDPOINT": r.url + "/ignored",
                            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": r.url + "/custom/path",
                            "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k%3D1,x-team=t"})
        self.assertEqual([p for p, _, _ in r.posts], ["/v1/traces", "/custom/path"])
        self.assertEqual(r.posts[1][1].get("x-api-key"), "k=1")
        self.assertEqual(r.posts[1][1].get("x-team"), "t")
        self.assertNotIn("x-api-key", r.posts[0][1])
        # no endpoint, no export
        _, err, _ = self.run_calls([{"id": "e3", "tool": "noop", "args": {}}])
        self.assertNotIn("otlp", err)

    def test_collector_down(self):
        port = serveutil.free_port()  # nobody listens: connection refused
        calls = [{"id": f"d{i}", "tool": "noop", "args": {}} for i in range(50)]
        res, err, _ = self.run_calls(calls, "--otlp", f"http://127.0.0.1:{port}")
        self.assertEqual(len(res), 50)
        self.assertTrue(all(r["ok"] for r in res.values()))
        self.assertIn("otlp: 0 spans exported, 100 dropped", err)
        self.assertIn("spans are dropped until it answers", err)

    def test_protocols(self):
        """--otlp-protocol, else OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL;
        grpc is warned of and sent as http/protobuf; a bad option value exits 2."""
        r = self.receiver()
        cases = [
            ((), {}, "application/x-protobuf", None),
            ((), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "application/json", None),
            ((), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
             "application/x-protobuf", None),
            (("--otlp-protocol", "http/protobuf"), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
             "application/x-protobuf", None),
            ((), {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "application/x-protobuf",
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: grpc is not offered"),
            (("--otlp-protocol", "grpc"), {}, "application/x-protobuf", "--otlp-protocol: grpc is not offered"),
            ((), {"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, "application/x-protobuf",
             'OTEL_EXPORTER_OTLP_PROTOCOL: expected http/protobuf, http/json or grpc, got "thrift"'),
        ]
        for i, (args, env, ctype, warning) in enumerate(cases):
            with self.subTest(args=args, env=env):
                before = len(r.posts)
                res, err, _ = self.run_calls([{"id": f"p{i}", "tool": "cat", "args": {"n": i}}], "--otlp", r.url,
                                             *args, env=env)
                self.assertTrue(res[f"p{i}"]["ok"])
                self.assertIn("otlp: 2 spans exported, 0 dropped", err)
                self.assertEqual([h.get("Content-Type") for _, h, _ in r.posts[before:]], [ctype])
                names = sorted(s["name"] for _, s in r.spans()[-2:])
                self.assertEqual(names, ["attempt 1 cat", "execute_tool cat"])
                if warning:
                    self.assertIn(warning, err)
                else:
                    self.assertNotIn("not offered", err)
        p = subprocess.run([TOOLPOOL, "run", "--otlp", r.url, "--otlp-protocol", "http/xml", "/dev/null"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn('--otlp-protocol: expected http/protobuf, http/json or grpc, got "http/xml"', p.stderr)

    def test_collector_slow(self):
        r = self.receiver(delay=0.4)
        calls = [{"id": f"s{i}", "tool": "noop", "args": {}} for i in range(400)]
        res, err, took = self.run_calls(calls, "--otlp", r.url, env={
            "OTEL_BSP_MAX_QUEUE_SIZE": "40", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20",
            "OTEL_BSP_SCHEDULE_DELAY": "10", "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"})
        self.assertEqual(len(res), 400)
        self.assertTrue(all(x["ok"] for x in res.values()))
        line = [x for x in err.splitlines() if "otlp:" in x][0]
        exported, dropped = int(line.split()[2]), int(line.split()[5])
        self.assertEqual(exported + dropped, 800, line)
        self.assertGreater(dropped, 0, line)
        self.assertGreater(exported, 0, line)
        self.assertEqual(exported, len(r.spans()))
        # the calls never waited for the collector: at most the queue's worth went out per 0.4 s,
        # and the exit waits at most one export timeout past the last POST under way
        self.assertLess(took, 8, line)

    def test_partial_success(self):
        """A collector that takes a request but rejects some of its spans (OTLP's partial success):
        those count dropped, not exported, and the run says so once."""
        for proto in ("http/protobuf", "http/json"):
            with self.subTest(proto=proto):
                r = self.receiver(partial=1)
                calls = [{"id": f"p{i}", "tool": "cat", "args": {"i": i}} for i in range(5)]
                res, err, _ = self.run_calls(calls, "--otlp", r.url, "--otlp-protocol", proto,
                                             env={"OTEL_BSP_SCHEDULE_DELAY": "0"})
                self.assertEqual(len(res), 5)
                posts = len(r.posts)
                self.assertGreater(posts, 0)
                line = [x for x in err.splitlines() if "otlp:" in x and "exported" in x][0]
                exported, dropped = int(line.split()[2]), int(line.split()[5])
                self.assertEqual(exported + dropped, len(r.spans()), line)
                self.assertEqual(dropped, posts, line)  # one rejected a request
                said = [x for x in err.splitlines() if "otlp.spans_rejected" in x or "rejected 1 of its" in x]
                self.assertEqual(len(said), 1, err)
                self.assertIn("too old", said[0])

    def test_delay_zero(self):
        """OTEL_BSP_SCHEDULE_DELAY=0 sends each span at once, and an idle exporter does not spin."""
        r = self.receiver()
        e = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        e["OTEL_BSP_SCHEDULE_DELAY"] = "0"
        p = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "1", "--registry", self.reg, "--store",
                              os.path.join(self.dir, "zstore"), "--otlp", r.url, "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
        self.addCleanup(lambda: p.poll() is None and p.kill())

        def cpu_s():
            # the supervisor's user and system time, all its threads (fields 14 and 15 of stat)
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        for k in range(2):
            p.stdin.write((json.dumps({"id": f"z{k}", "tool": "cat", "args": {"k": k}}) + "\n").encode())
            p.stdin.flush()
            self.assertTrue(json.loads(p.stdout.readline())["ok"])
            serveutil.wait_for(lambda: len(r.spans()) >= 2 * (k + 1), 5, f"the spans of call {k + 1}")
            before = cpu_s()
            time.sleep(1.0)
            # a thread spinning on the delay would take most of a CPU here
            self.assertLess(cpu_s() - before, 0.25, "the idle run took CPU")
        p.stdin.close()
        self.assertEqual(p.wait(30), 0, p.stderr.read().decode())
        self.assertEqual(len(r.spans()), 4)

    def test_serve(self):
        r = self.receiver()
        port = serveutil.free_port()
        e = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        e["OTEL_BSP_SCHEDULE_DELAY"] = "20"
        log = os.path.join(self.dir, "serve.log")
        cmd = [TOOLPOOL, "serve", "--registry", self.reg, "--store", os.path.join(self.dir, "sstore"), "-j", "2",
               "--listen", f"127.0.0.1:{port}", "--otlp", r.url]
        with open(log, "wb") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=f, env=e)
        self.addCleanup(lambda: p.poll() is None and p.kill())

        def post(path, body, headers):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", path, body=body, headers=headers)
            resp = c.getresponse()
            data = resp.read()
            c.close()
            return resp.status, data

        def up():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/readyz")
                ok = c.getresponse().status == 200
                c.close()
                return ok
            except OSError:
                return False

        serveutil.wait_for(up, 20, "serve ready")
        st, _ = post("/v1/calls", json.dumps({"id": "h1", "tool": "noop", "args": {}}),
                     {"Content-Type": "application/json", "traceparent": TRACEPARENT, "tracestate": "a=b"})
        self.assertEqual(st, 200)
        other = "00-11111111111111111111111111111111-2222222222222222-01"
        st, _ = post("/v1/batch", "\n".join(json.dumps({"id": f"b{i}", "tool": "noop", "args": {}})
                                            for i in range(3)) + "\n",
                     {"Content-Type": "application/x-ndjson", "traceparent": other})
        self.assertEqual(st, 200)
        st, _ = post("/v1/calls", json.dumps({"id": "h2", "tool": "noop", "args": {}}),
                     {"Content-Type": "application/json", "traceparent": "garbage"})
        self.assertEqual(st, 200)

        def calls():
            return {attrs(s)["gen_ai.tool.call.id"]: s for _, s in r.spans() if s["name"] == "execute_tool noop"}

        serveutil.wait_for(lambda: len(calls()) == 5, 10, "5 call spans")
        got = calls()
        self.assertEqual(got["h1"]["traceId"], PARENT_TRACE)
        self.assertEqual(got["h1"]["parentSpanId"], PARENT_SPAN)
        self.assertEqual(got["h1"]["traceState"], "a=b")
        for i in range(3):
            self.assertEqual(got[f"b{i}"]["traceId"], "1" * 32)
            self.assertEqual(got[f"b{i}"]["parentSpanId"], "2" * 16)
        self.assertNotIn("parentSpanId", got["h2"])  # an invalid traceparent starts a trace of its own
        self.assertNotEqual(got["h2"]["traceId"], PARENT_TRACE)
        def metrics():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            return text
        # The exporter counts a batch once the collector has answered its POST: a moment after the
        # receiver has the spans.
        serveutil.wait_for(lambda: "toolpool_otlp_spans_exported_total 10\n" in metrics(), 10,
                           "the 10 spans counted exported")
        self.assertIn("toolpool_otlp_spans_dropped_total 0\n", metrics())
        p.terminate()
        p.wait(30)

    def test_mcp(self):
        r = self.receiver()
        e = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        p = subprocess.Popen([TOOLPOOL, "mcp", "--registry", self.reg, "--store", os.path.join(self.dir, "mstore"),
                              "-j", "1", "-q", "--otlp", r.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=e)
        self.addCleanup(lambda: p.poll() is None and p.kill())

        def send(msg):
            p.stdin.write(json.dumps(msg) + "\n")
            p.stdin.flush()

        def recv():
            return json.loads(p.stdout.readline())

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}})
        recv()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": "req-7", "method": "tools/call",
              "params": {"name": "flaky", "arguments": {}, "_meta": {"traceparent": TRACEPARENT}}})
        answer = recv()
        self.assertTrue(answer["result"]["isError"])
        p.stdin.close()
        p.wait(30)
        p.stdout.close()
        p.stderr.close()
        spans = {s["name"]: s for _, s in r.spans()}
        call = spans["tools/call flaky"]
        a = attrs(call)
        self.assertEqual(call["kind"], 2)  # SERVER
        self.assertEqual(call["traceId"], PARENT_TRACE)
        self.assertEqual(call["parentSpanId"], PARENT_SPAN)
        self.assertEqual(a["mcp.method.name"], "tools/call")
        self.assertEqual(a["jsonrpc.request.id"], "req-7")
        self.assertEqual(a["gen_ai.tool.name"], "flaky")
        self.assertEqual(a["gen_ai.operation.name"], "execute_tool")
        self.assertEqual(a["error.type"], "tool_error")
        self.assertEqual(a["toolpool.outcome.kind"], "ServerError")
        self.assertEqual(spans["attempt 3 flaky"]["parentSpanId"], call["spanId"])


if __name__ == "__main__":
    unittest.main()
