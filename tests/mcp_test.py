#!/usr/bin/env python3
"""toolpool mcp, end to end: a real `toolpool mcp` process per session, driven
over its stdin and stdout with raw JSON-RPC lines, on a temporary registry
(the test plugin's tools and a few exec ones) and a temporary store.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
PLUGIN = os.path.join(BUILD, "tests", "testplugin.so")
TEST_TOOLS = os.environ.get("TOOLPOOL_TEST_TOOLS", os.path.join(HERE, "tools"))
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class Session:
    """One `toolpool mcp` process: lines in on its stdin, lines out of its stdout."""

    def __init__(self, test, args=(), store=None):
        self.test = test
        self.store = store or os.path.join(test.tmp, "store")
        self.err_path = os.path.join(test.tmp, "mcp-%d.err" % time.monotonic_ns())
        self.err = open(self.err_path, "w")
        cmd = [TOOLPOOL, "mcp", "-r", os.path.join(test.tmp, "tools.json"), "-s", self.store, "-j", "2"]
        self.proc = subprocess.Popen(cmd + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, cwd=test.tmp)
        self.lines = queue.Queue()
        self.stash = []         # messages read while waiting for another
        self.next_id = 1000
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, msg):
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout=30):
        """The next message on stdout; every line must be one JSON object, newline-terminated."""
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise EOFError("toolpool mcp closed its stdout: " + self.stderr())
        self.test.assertTrue(line.endswith(b"\n"), line)
        msg = json.loads(line)
        self.test.assertIsInstance(msg, dict)
        self.test.assertEqual(msg["jsonrpc"], "2.0")
        return msg

    def next_message(self, timeout=30):
        if self.stash:
            return self.stash.pop(0)
        return self.recv(timeout)

    def response(self, rid, timeout=30):
        """The response to request rid; other messages read meanwhile are kept for later."""
        for i, m in enumerate(self.stash):
            if "method" not in m and m.get("id") == rid:
                return self.stash.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            m = self.recv(max(0.01, deadline - time.monotonic()))
            if "method" not in m and m.get("id") == rid and type(m.get("id")) is type(rid):
                return m
            self.stash.append(m)

    def request(self, method, params=None, rid=None, timeout=30):
        if rid is None:
            self.next_id += 1
            rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.response(rid, timeout)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def initialize(self, version="2025-11-25"):
        r = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                        "clientInfo": {"name": "mcp_test", "version": "1"}})
        self.notify("notifications/initialized")
        return r

    def call(self, name, arguments=None, meta=None, rid=None, timeout=30):
        params = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        if meta is not None:
            params["_meta"] = meta
        return self.request("tools/call", params, rid, timeout)

    def quiet_for(self, seconds):
        """Every message that came within seconds (none expected, usually)."""
        got = list(self.stash)
        self.stash = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                got.append(self.recv(max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break
        return got

    def close(self, timeout=30):
        """Closes stdin (the stdio transport's shutdown); the exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("toolpool mcp did not exit within %ss of its stdin's end" % timeout)
        return self.proc.returncode

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        with open(self.err_path) as f:
            return f.read()


class McpTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="mcp_test.")
        self.tmp = self._tmp.name
        plugin = {"path": PLUGIN}
        exit_sh = os.path.join(TEST_TOOLS, "exit.sh")
        self.registry = {
            "defaults": {"timeout": "30s", "backoff": {"base": "20ms", "jitter": "none"}},
            "tools": [
                {"name": "echo", "description": "Returns its args.", "plugin": plugin},
                {"name": "noop", "plugin": plugin},
                {"name": "sleep", "description": "Sleeps args.ms milliseconds.", "plugin": plugin,
                 "parameters": {"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}}},
                {"name": "deny", "description": "Always forbidden.", "plugin": plugin},
                {"name": "flaky", "plugin": plugin, "attempts": 3},
                {"name": "segv", "plugin": plugin, "attempts": 2},
                {"name": "custom", "plugin": plugin},
                {"name": "big", "plugin": plugin},
                {"name": "hang", "exec": [os.path.join(TEST_TOOLS, "hang.sh")], "timeout": "200ms", "attempts": 1},
                {"name": "down", "exec": [exit_sh, "75"], "attempts": 1, "fallback": ["echo"]},
                {"name": "strict", "description": "Takes a string q.", "exec": [os.path.join(TEST_TOOLS, "cat.sh")],
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
                {"name": "loose", "plugin": plugin, "parameters": {"properties": {"n": {"type": "integer"}}}},
            ],
        }
        self.write_registry()
        self.sessions = []

    def tearDown(self):
        # Every session still open ends with its stdin (exit 0: under the sanitizers, no leak either),
        # and none said a sanitizer's word.
        problems = []
        for s in self.sessions:
            if s.proc.poll() is None:
                try:
                    rc = s.close()
                    if rc != 0:
                        problems.append("mcp exited %d at the end of the test" % rc)
                except AssertionError as e:
                    problems.append(str(e))
            s.err.close()
            s.reader.join(10)
            for f in (s.proc.stdin, s.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            text = s.stderr()
            if "Sanitizer" in text or "runtime error:" in text:
                problems.append("sanitizer report:\n" + text)
        self._tmp.cleanup()
        if problems:
            self.fail("\n".join(problems))

    def write_registry(self):
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(self.registry, f)

    def session(self, **kw):
        s = Session(self, **kw)
        self.sessions.append(s)
        return s

    def ready(self, **kw):
        s = self.session(**kw)
        r = s.initialize()
        self.assertIn("result", r, r)
        return s

    def toolpool(self, *args):
        p = subprocess.run([TOOLPOOL] + list(args), capture_output=True, text=True, timeout=60, cwd=self.tmp)
        return p.returncode, p.stdout, p.stderr

    def assert_error(self, msg, code, rid="any"):
        self.assertIn("error", msg, msg)
        self.assertNotIn("result", msg)
        self.assertEqual(msg["error"]["code"], code, msg)
        self.assertIsInstance(msg["error"]["message"], str)
        if rid != "any":
            self.assertIn("id", msg)
            self.assertEqual(msg["id"], rid)

    def assert_tool_error(self, r, kind, klass, attempts, retryable):
        """A failure as MCP gives it: a result with isError, the tool message as text and as structuredContent."""
        self.assertNotIn("error", r, r)
        res = r["result"]
        self.assertIs(res["isError"], True, res)
        self.assertEqual(len(res["content"]), 1)
        self.assertEqual(res["content"][0]["type"], "text")
        tm = json.loads(res["content"][0]["text"])
        self.assertEqual(tm, res["structuredContent"])
        self.assertEqual(list(tm)[:4], ["error", "message", "retryable", "attempts"])
        self.assertLessEqual(set(tm), {"error", "message", "retryable", "attempts", "class", "served_by",
                                       "escalated", "escalation"})
        self.assertEqual((tm["error"], tm["class"], tm["attempts"], tm["retryable"]),
                         (kind, klass, attempts, retryable), tm)
        return tm

    # ---- the lifecycle ----

    def test_initialize_negotiates_the_version(self):
        for asked, given in [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"),
                             ("2025-03-26", "2025-11-25"), ("2024-11-05", "2025-11-25"),
                             ("2099-01-01", "2025-11-25"), ("not a version", "2025-11-25")]:
            s = self.session(args=["-j", "1"])
            r = s.request("initialize", {"protocolVersion": asked, "capabilities": {"roots": {}},
                                         "clientInfo": {"name": "t", "version": "0"}}, rid=1)
            self.assertEqual(r["id"], 1)
            res = r["result"]
            self.assertEqual(res["protocolVersion"], given, asked)
            caps = {"tools": {"listChanged": False}, "logging": {}}
            if given == "2025-11-25":  # the revision with tasks (mcp_tasks_test)
                caps["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
            self.assertEqual(res["capabilities"], caps)
            self.assertEqual(res["serverInfo"]["name"], "toolpool")
            self.assertRegex(res["serverInfo"]["version"], r"^\d+\.\d+\.\d+$")
            self.assertIn("retryable", res["instructions"])
            # One session a process: a second initialize is refused; the session goes on.
            self.assert_error(s.request("initialize", {"protocolVersion": asked, "capabilities": {},
                                                       "clientInfo": {"name": "t", "version": "0"}}, rid=2),
                              -32600, 2)
            self.assertEqual(s.request("ping", rid=3), {"jsonrpc": "2.0", "id": 3, "result": {}})
            self.assertEqual(s.close(), 0)

    def test_before_initialize_only_ping(self):
        s = self.session(args=["-j", "1"])
        self.assertEqual(s.request("ping", rid="p")["result"], {})
        self.assert_error(s.request("tools/list", rid=1), -32600, 1)
        self.assert_error(s.request("tools/call", {"name": "echo"}, rid=2), -32600, 2)
        self.assert_error(s.request("logging/setLevel", {"level": "info"}, rid=3), -32600, 3)
        self.assert_error(s.request("resources/list", rid=4), -32601, 4)
        # server/discover without 2026-07-28's _meta: a malformed modern request.
        self.assert_error(s.request("server/discover", rid=5), -32602, 5)
        self.assert_error(s.request("initialize", {"capabilities": {}}, rid=6), -32602, 6)
        self.assert_error(s.request("initialize", {"protocolVersion": "2025-11-25", "clientInfo": 7}, rid=7),
                          -32602, 7)
        self.assertEqual(s.quiet_for(0.2), [])
        self.assertIn("result", s.initialize())
        self.assertIn("tools", s.request("tools/list")["result"])

    def test_2026_07_28_requests_are_served_each_on_its_own(self):
        # No initialize: each request names its revision and the client's capabilities in _meta.
        s = self.session(args=["-j", "1"])
        m = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
             "io.modelcontextprotocol/clientCapabilities": {},
             "io.modelcontextprotocol/clientInfo": {"name": "mcp_test", "version": "1"}}
        d = s.request("server/discover", {"_meta": m}, rid="d")["result"]
        info = d["_meta"]
        self.assertEqual(info["io.modelcontextprotocol/serverInfo"]["name"], "toolpool")
        self.assertRegex(info["io.modelcontextprotocol/serverInfo"]["version"], r"^\d+\.\d+\.\d+$")
        self.assertEqual((d["resultType"], d["supportedVersions"], d["cacheScope"]),
                         ("complete", ["2026-07-28", "2025-11-25", "2025-06-18"], "public"), d)
        self.assertIn("tools", d["capabilities"])
        self.assertGreater(d["ttlMs"], 0)
        self.assertIn("retryable", d["instructions"])
        tl = s.request("tools/list", {"_meta": m})["result"]
        self.assertEqual((tl["resultType"], tl["cacheScope"], tl["_meta"]), ("complete", "public", info))
        self.assertIn("echo", [t["name"] for t in tl["tools"]])
        r = s.request("tools/call", {"name": "echo", "arguments": {"n": 1}, "_meta": m})["result"]
        self.assertEqual((r["resultType"], r["isError"], r["structuredContent"]), ("complete", False, {"n": 1}), r)
        self.assertEqual(r["_meta"]["io.modelcontextprotocol/serverInfo"], info["io.modelcontextprotocol/serverInfo"])
        tp = r["_meta"]["toolpool"]
        self.assertEqual(tp["job"], tp["id"])  # no session: the call is a job of its own
        r = s.request("tools/call", {"name": "deny", "arguments": {}, "_meta": m})["result"]
        self.assertEqual((r["resultType"], r["isError"]), ("complete", True), r)
        # A revision we do not speak: UnsupportedProtocolVersion, with ours.
        e = s.request("tools/list", {"_meta": dict(m, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})},
                      rid=9)
        self.assert_error(e, -32022, 9)
        self.assertEqual(e["error"]["data"], {"supported": ["2026-07-28", "2025-11-25", "2025-06-18"],
                                              "requested": "2099-01-01"})
        # Required _meta missing, a bad log level: Invalid params. ping and logging/setLevel are gone.
        self.assert_error(s.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
                                    rid=10), -32602, 10)
        self.assert_error(s.request("tools/list", {"_meta": dict(m, **{"io.modelcontextprotocol/logLevel": "loud"})},
                                    rid=11), -32602, 11)
        self.assert_error(s.request("ping", {"_meta": m}, rid=12), -32601, 12)
        self.assert_error(s.request("logging/setLevel", {"level": "info", "_meta": m}, rid=13), -32601, 13)
        # Log messages go only to a request that asked, at its own level. (Each call is a job of its
        # own unless it names one; the same-call circuit counts within a job, so these name theirs.)
        quiet = dict(m, job="j-quiet")
        loud = dict(m, **{"io.modelcontextprotocol/logLevel": "warning", "job": "j-loud"})
        for meta in (quiet, quiet, quiet):
            s.request("tools/call", {"name": "deny", "arguments": {"k": 1}, "_meta": meta})
        self.assertEqual([x for x in s.quiet_for(0.2) + s.stash if x.get("method") == "notifications/message"], [])
        s.stash.clear()
        for _ in range(3):
            s.request("tools/call", {"name": "deny", "arguments": {"k": 2}, "_meta": loud})
        logs = [x for x in s.quiet_for(0.2) + s.stash if x.get("method") == "notifications/message"]
        self.assertEqual([x["params"]["level"] for x in logs], ["warning"], logs)
        # Cancelled on stdio by notifications/cancelled, as before; recorded Cancelled.
        s.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 30000}, "_meta": dict(m, id="m-long")}})
        time.sleep(0.3)
        s.notify("notifications/cancelled", {"requestId": "long"})
        self.assertEqual([x for x in s.quiet_for(0.4) if x.get("id") == "long"], [])
        rc, out, err = self.toolpool("trace", "m-long", "--store", s.store)
        self.assertIn("Cancelled", out, err)
        # The same process still opens a 2025-11-25 session beside.
        self.assertIn("result", s.initialize())
        self.assertIn("tools", s.request("tools/list")["result"])
        self.assertIn("result", s.request("server/discover", {"_meta": m}))

    def test_eof_and_signals_end_the_session_with_0(self):
        s = self.ready()
        self.assertEqual(s.close(timeout=20), 0)
        self.assertIn("stopped", s.stderr())
        # A call running when stdin ends still finishes (within --drain) and is answered.
        s = self.ready()
        s.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 400}}})
        time.sleep(0.2)
        self.assertEqual(s.close(timeout=20), 0)
        r = s.response(9)
        self.assertEqual(r["result"]["structuredContent"], {"slept": 400})
        # SIGTERM and SIGINT drain too, and exit 0.
        for sig in (signal.SIGTERM, signal.SIGINT):
            s = self.ready()
            s.proc.send_signal(sig)
            s.proc.wait(20)
            self.assertEqual(s.proc.returncode, 0, s.stderr())

    # ---- tools/list ----

    def test_tools_list(self):
        s = self.ready()
        r = s.request("tools/list", {})
        tools = {t["name"]: t for t in r["result"]["tools"]}
        self.assertNotIn("nextCursor", r["result"])
        self.assertEqual(list(tools), [t["name"] for t in self.registry["tools"]])
        self.assertEqual(tools["echo"], {"name": "echo", "description": "Returns its args.",
                                         "inputSchema": {"$schema": DRAFT7, "type": "object"},
                                         "execution": {"taskSupport": "optional"}})
        # No description: none listed. The parameters are the inputSchema, their dialect named.
        self.assertNotIn("description", tools["noop"])
        self.assertEqual(tools["strict"]["inputSchema"],
                         dict(self.registry["tools"][10]["parameters"], **{"$schema": DRAFT7}))
        # A root without "type": "object" gets it (MCP requires it; arguments are objects anyway).
        self.assertEqual(tools["loose"]["inputSchema"],
                         {"$schema": DRAFT7, "type": "object", "properties": {"n": {"type": "integer"}}})
        # No params at all, or a null cursor: the first page.
        self.assertEqual(s.request("tools/list")["result"], r["result"])
        self.assert_error(s.request("tools/list", {"cursor": "bogus"}), -32602)
        self.assert_error(s.request("tools/list", {"cursor": 5}), -32602)

    def test_tools_list_pages(self):
        self.registry["tools"] = [{"name": "t%03d" % i, "description": "tool %d" % i, "exec": ["cat"]}
                                  for i in range(250)]
        self.write_registry()
        s = self.ready()
        names, cursor, pages = [], None, 0
        while True:
            r = s.request("tools/list", {"cursor": cursor} if cursor else {})["result"]
            pages += 1
            names += [t["name"] for t in r["tools"]]
            self.assertLessEqual(len(r["tools"]), 100)
            cursor = r.get("nextCursor")
            if cursor is None:
                break
            self.assertIsInstance(cursor, str)
        self.assertEqual(pages, 3)
        self.assertEqual(names, ["t%03d" % i for i in range(250)])
        # A cursor edited by hand, or past the end, is Invalid params.
        first = s.request("tools/list")["result"]["nextCursor"]
        self.assert_error(s.request("tools/list", {"cursor": first + "0"}), -32602)
        self.assert_error(s.request("tools/list", {"cursor": first[:-3] + "999"}), -32602)

    # ---- tools/call ----

    def test_call_success(self):
        s = self.ready()
        args = {"q": "refund window", "n": [1, 2.5, None, True], "o": {"é": "ü"}}
        r = s.call("echo", args, rid="c1")
        self.assertEqual(r["id"], "c1")
        res = r["result"]
        self.assertIs(res["isError"], False)
        self.assertEqual(res["content"], [{"type": "text", "text": compact(args)}])
        self.assertEqual(res["structuredContent"], args)
        meta = res["_meta"]["toolpool"]
        session = meta["job"]
        self.assertRegex(session, r"^mcp-[0-9a-f]{16}$")
        self.assertEqual(meta["id"], session + "-1")
        self.assertEqual((meta["step"], meta["served_by"], meta["degraded"], meta["stale"]), (1, "echo", False, False))
        # Not an object: the text block only.
        r = s.call("big", {"n": 5})["result"]
        self.assertEqual(r["content"], [{"type": "text", "text": '"xxxxx"'}])
        self.assertNotIn("structuredContent", r)
        # No arguments, and null arguments: {}.
        self.assertEqual(s.call("echo")["result"]["structuredContent"], {})
        self.assertEqual(s.call("echo", None)["result"]["structuredContent"], {})
        r = s.request("tools/call", {"name": "echo", "arguments": None})
        self.assertEqual(r["result"]["structuredContent"], {})
        # Every call is recorded under its own id: `toolpool trace` finds it in the store.
        rc, out, err = self.toolpool("trace", "--store", s.store, meta["id"])
        self.assertEqual(rc, 0, err)
        self.assertIn("echo(args=", out)

    def test_mcp_tools_pass_their_content_through(self):
        # A tool that is itself an MCP server's (the mcp adapter): its content
        # blocks and structuredContent reach the host as the server gave them;
        # a fallback to a tool of another kind is rendered as any result.
        tiny = [sys.executable, os.path.join(HERE, "mcp_tiny_server.py")]
        self.registry["mcp_servers"] = {"tiny": {"command": tiny}}
        self.registry["tools"].append({"name": "tiny_down", "mcp": {"command": tiny, "tool": "oops"},
                                       "attempts": 1, "fallback_on": ["permanent"], "fallback": ["echo"]})
        self.write_registry()
        s = self.ready()
        r = s.call("tiny.echo", {"text": "hi"})["result"]
        self.assertEqual(r["content"], [{"type": "text", "text": "hi"}])
        self.assertEqual(r["structuredContent"], {"text": "hi"})
        self.assertIs(r["isError"], False)
        self.assertEqual(r["_meta"]["toolpool"]["served_by"], "tiny.echo")
        r = s.call("tiny.add", {"a": 1, "b": 2})["result"]
        self.assertEqual(r["content"], [{"type": "text", "text": "3"}])
        self.assertNotIn("structuredContent", r)
        r = s.call("tiny_down", {"k": 1})["result"]
        self.assertEqual(r["_meta"]["toolpool"]["served_by"], "echo")
        self.assertEqual(r["content"], [{"type": "text", "text": compact({"k": 1})}])
        self.assertEqual(r["structuredContent"], {"k": 1})
        tm = self.assert_tool_error(s.call("tiny.oops"), "ToolError", "permanent", 1, False)
        self.assertIn("it broke", tm["message"])

    def test_mcp_tools_notifications_are_forwarded(self):
        # A tool that is itself an MCP server's: while it runs, its progress
        # reaches a host that asked for progress (under the host's token, values
        # always growing, a retry's too), and its log messages a host that set a
        # level (at that level and above); another request's progress and other
        # notifications stay behind.
        tiny = [sys.executable, os.path.join(HERE, "mcp_tiny_server.py")]
        self.registry["mcp_servers"] = {"tiny": {"command": tiny}}
        self.write_registry()
        s = self.ready()
        r = s.call("tiny.report", {"steps": 3}, meta={"progressToken": "p1"}, rid=1)
        self.assertIs(r["result"]["isError"], False, r)
        got = s.quiet_for(0.2)
        prog = [m["params"] for m in got if m.get("method") == "notifications/progress"]
        self.assertEqual(prog, [{"progressToken": "p1", "progress": i, "total": 3, "message": "step %d" % i}
                                for i in (1, 2, 3)])
        self.assertEqual([m for m in got if m.get("method") != "notifications/progress"], [])  # no level set: no logs
        # a server that counts from 0 is passed on from 0, its total kept
        s.call("tiny.report", {"steps": 2, "from_zero": True}, meta={"progressToken": "z"}, rid=11)
        prog = [m["params"] for m in s.quiet_for(0.2) if m.get("method") == "notifications/progress"]
        self.assertEqual([(p["progress"], p.get("total")) for p in prog], [(0, 2), (1, 2), (2, 2)])
        self.assertIn("result", s.request("logging/setLevel", {"level": "info"}))
        r = s.call("tiny.report", {"steps": 1}, rid=2)
        self.assertIs(r["result"]["isError"], False, r)
        got = s.quiet_for(0.2)
        self.assertEqual([m["method"] for m in got], ["notifications/message"], got)
        self.assertEqual(got[0]["params"], {"level": "info", "logger": "tiny", "data": "report: 1 steps"})
        self.assertIn("result", s.request("logging/setLevel", {"level": "debug"}))
        mark = os.path.join(self.tmp, "failed-once")
        r = s.call("tiny.report", {"steps": 2, "fail_once": mark}, meta={"progressToken": 7}, rid=3)
        self.assertIs(r["result"]["isError"], False, r)
        self.assertEqual(r["result"]["content"], [{"type": "text", "text": "reported 2"}])
        self.assertTrue(os.path.exists(mark))  # the first attempt failed
        got = s.quiet_for(0.2)
        logs = [m["params"] for m in got if m.get("method") == "notifications/message"]
        self.assertEqual(logs, [{"level": "info", "logger": "tiny", "data": "report: 2 steps"},
                                {"level": "debug", "logger": "tiny.report", "data": "detail"}] * 2)
        prog = [m["params"] for m in got if m.get("method") == "notifications/progress"]
        self.assertEqual({p["progressToken"] for p in prog}, {7})
        values = [p["progress"] for p in prog]
        # attempt 1's 1 and 2, the retry's own notice, then attempt 2's 1 and 2 sent above them
        self.assertEqual(values, [1, 2, 3, 4, 5], prog)
        self.assertEqual([p.get("total") for p in prog], [2, 2, None, None, None])

    def test_call_failures(self):
        s = self.ready()
        tm = self.assert_tool_error(s.call("deny", {"x": 1}), "PermissionDenied", "permanent", 1, False)
        self.assertEqual((tm["message"], tm["escalated"]), ("403", False))
        self.assertNotIn("served_by", tm)
        self.assert_tool_error(s.call("flaky", {"ok_at": 9}), "ServerError", "transient", 3, True)
        self.assert_tool_error(s.call("segv"), "WorkerCrashed", "transient", 2, True)
        tm = self.assert_tool_error(s.call("hang"), "Timeout", "transient", 1, True)
        self.assertIn("0.2s", tm["message"])
        tm = self.assert_tool_error(s.call("custom"), "QuotaGone", "permanent", 1, False)
        # A fallback answered: a success, and _meta says who gave it.
        r = s.call("down", {"k": 1})["result"]
        self.assertEqual((r["isError"], r["structuredContent"]), (False, {"k": 1}))
        self.assertEqual(r["_meta"]["toolpool"]["served_by"], "echo")
        self.assertIs(r["_meta"]["toolpool"]["degraded"], True)
        # Never a JSON-RPC error, and the server goes on.
        self.assertEqual(s.request("ping")["result"], {})

    def test_schema_violation(self):
        s = self.ready()
        tm = self.assert_tool_error(s.call("strict", {"q": 5}), "InvalidArguments", "malformed", 0, False)
        self.assertIn("/q", tm["message"])
        self.assertIn("expected string", tm["message"])
        tm = self.assert_tool_error(s.call("strict", {}), "InvalidArguments", "malformed", 0, False)
        self.assertIn("q", tm["message"])
        tm = self.assert_tool_error(s.call("sleep", {"ms": -1}), "InvalidArguments", "malformed", 0, False)
        self.assertIn("/ms", tm["message"])
        self.assertEqual(s.call("strict", {"q": "ok"})["result"]["structuredContent"], {"q": "ok"})

    def test_unknown_tool_is_invalid_params(self):
        # The spec (2025-11-25, and 2026-07-28 the same) makes an unknown tool a protocol error, -32602.
        s = self.ready()
        r = s.call("ech", {}, rid=5)
        self.assert_error(r, -32602, 5)
        self.assertTrue(r["error"]["message"].startswith("Unknown tool: ech"), r)
        self.assertIn("closest: echo", r["error"]["message"])
        data = r["error"]["data"]
        self.assertEqual((data["error"], data["class"], data["attempts"], data["retryable"]),
                         ("UnknownTool", "malformed", 0, False))
        self.assertIn("closest: echo", data["message"])

    def test_bad_params(self):
        s = self.ready()
        for params in [{"arguments": {}}, {"name": 5}, {"name": "echo", "arguments": [1]},
                       {"name": "echo", "arguments": "x"}, {"name": "echo", "_meta": 3},
                       {"name": "echo", "_meta": {"progressToken": 1.5}},
                       {"name": "echo", "_meta": {"progressToken": {"a": 1}}},
                       {"name": "echo", "_meta": {"job": 7}}, {"name": "echo", "_meta": {"job": ""}}]:
            self.assert_error(s.request("tools/call", params), -32602)
        self.assert_error(s.request("tools/call"), -32602)
        self.assert_error(s.request("tools/call", [1, 2]), -32602)
        self.assert_error(s.request("logging/setLevel", {"level": "loud"}), -32602)
        self.assert_error(s.request("logging/setLevel", {}), -32602)
        self.assertEqual(s.request("logging/setLevel", {"level": "debug"})["result"], {})

    def test_progress_on_retries(self):
        s = self.ready()
        s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "flaky", "arguments": {"ok_at": 3}, "_meta": {"progressToken": "tok"}}})
        seen = []
        while True:
            m = s.next_message()
            if m.get("method") == "notifications/progress":
                seen.append(m["params"])
                continue
            self.assertEqual(m["id"], 1)
            break
        self.assertEqual(m["result"]["structuredContent"], {"attempt": 3})
        self.assertEqual([p["progress"] for p in seen], [1, 2])
        self.assertEqual({p["progressToken"] for p in seen}, {"tok"})
        self.assertIn("flaky attempt 1: ServerError", seen[0]["message"])
        # An integer token is sent back as one; a call that does not retry tells nothing.
        r = s.call("flaky", {"ok_at": 2}, meta={"progressToken": 77}, rid=2)
        self.assertEqual(r["result"]["structuredContent"], {"attempt": 2})
        prog = [m for m in s.quiet_for(0.1) if m.get("method") == "notifications/progress"]
        self.assertEqual([(p["params"]["progressToken"], p["params"]["progress"]) for p in prog], [(77, 1)])
        s.call("echo", {}, meta={"progressToken": "none"}, rid=3)
        s.call("flaky", {"ok_at": 2}, rid=4)
        self.assertEqual(s.quiet_for(0.2), [])
        # The last failure is told by the answer alone: no retry follows it.
        self.assert_tool_error(s.call("flaky", {"ok_at": 9}, meta={"progressToken": "f"}, rid=5), "ServerError",
                               "transient", 3, True)
        self.assert_tool_error(s.call("deny", {}, meta={"progressToken": "d"}, rid=6), "PermissionDenied",
                               "permanent", 1, False)
        prog = [m for m in s.quiet_for(0.1) if m.get("method") == "notifications/progress"]
        self.assertEqual([(p["params"]["progressToken"], p["params"]["progress"]) for p in prog], [("f", 1), ("f", 2)])

    def test_cancel_a_running_call(self):
        s = self.ready(args=["-j", "1"])
        t0 = time.monotonic()
        s.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 30000}}})
        time.sleep(0.5)
        s.notify("notifications/cancelled", {"requestId": 10, "reason": "the user pressed stop"})
        # The one worker was killed with the call, and replaced: the next call runs at once.
        r = s.call("echo", {"after": "cancel"}, rid=11, timeout=10)
        self.assertEqual(r["result"]["structuredContent"], {"after": "cancel"})
        self.assertLess(time.monotonic() - t0, 10)
        # No response ever comes for the cancelled request.
        self.assertEqual([m for m in s.quiet_for(1.0) if m.get("id") == 10], [])
        # A call waiting for its turn in its job is cancelled too; so is the running one before it.
        s.send({"jsonrpc": "2.0", "id": "a", "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 30000}, "_meta": {"job": "j"}}})
        s.send({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                "params": {"name": "echo", "arguments": {}, "_meta": {"job": "j"}}})
        time.sleep(0.3)
        s.notify("notifications/cancelled", {"requestId": "b"})
        s.notify("notifications/cancelled", {"requestId": "a"})
        # Unknown ids, and malformed notices, are let be.
        s.notify("notifications/cancelled", {"requestId": "nobody"})
        s.notify("notifications/cancelled", {})
        s.notify("notifications/cancelled")
        self.assertEqual(s.call("echo", {"x": 2}, rid=12, timeout=10)["result"]["structuredContent"], {"x": 2})
        self.assertEqual([m for m in s.quiet_for(1.0) if m.get("id") in ("a", "b")], [])
        # The id of a cancelled request may be used again.
        self.assertEqual(s.call("echo", {"again": 1}, rid=10)["result"]["structuredContent"], {"again": 1})

    def test_deadline_keeps_the_host_waiting_for_its_answer(self):
        # Each call's deadline (--deadline) ends it before the host's own request timeout: the host
        # hears Timeout as a result, not -32001. 0 turns it off.
        s = self.ready(args=["--deadline", "1500ms"])
        t0 = time.monotonic()
        r = s.call("sleep", {"ms": 30000}, rid=1, timeout=20)
        self.assert_tool_error(r, "Timeout", "transient", 1, True)
        self.assertLess(time.monotonic() - t0, 10)
        rc, out, err = self.toolpool("mcp", "--deadline", "soon")
        self.assertEqual(rc, 2)
        self.assertIn("--deadline", err)
        # With no deadline, a long call with a progress token hears a keepalive every 10 s of quiet.
        s2 = self.ready(args=["--deadline", "0"], store=os.path.join(self.tmp, "store2"))
        s2.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "sleep", "arguments": {"ms": 11500}, "_meta": {"progressToken": "k"}}})
        seen = []
        while True:
            m = s2.next_message(timeout=30)
            if m.get("method") == "notifications/progress":
                seen.append(m["params"])
                continue
            break
        self.assertEqual(m["id"], 2)
        self.assertEqual(m["result"]["structuredContent"], {"slept": 11500})
        self.assertEqual(len(seen), 1, seen)
        self.assertEqual((seen[0]["progressToken"], seen[0]["progress"]), ("k", 1))
        self.assertIn("sleep: no answer yet", seen[0]["message"])

    def test_request_identity_and_a_recorded_cancel(self):
        s = self.ready(args=["-j", "1"])
        # _meta.id names the call: the same one sent again is answered from the store.
        r1 = s.call("echo", {"n": 1}, meta={"id": "req-1"}, rid=1)
        self.assertEqual(r1["result"]["structuredContent"], {"n": 1})
        r2 = s.call("echo", {"n": 1}, meta={"id": "req-1"}, rid=2)
        self.assertEqual(r2["result"]["structuredContent"], {"n": 1})
        # the record's own id and step: the second was not a call of its own
        self.assertEqual(r2["result"]["_meta"]["toolpool"], r1["result"]["_meta"]["toolpool"])
        self.assertEqual(r1["result"]["_meta"]["toolpool"]["id"], "req-1")
        # A cancelled call is recorded Cancelled: sent again, it is answered so at once, and not run.
        s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 30000}, "_meta": {"id": "long-1"}}})
        time.sleep(0.5)
        s.notify("notifications/cancelled", {"requestId": 3, "reason": "stop"})
        self.assertEqual([m for m in s.quiet_for(0.5) if m.get("id") == 3], [])
        t0 = time.monotonic()
        tm = self.assert_tool_error(s.call("sleep", {"ms": 30000}, meta={"id": "long-1"}, rid=4, timeout=10),
                                    "Cancelled", "guard", 1, False)
        self.assertIn("stop", tm["message"])
        self.assertLess(time.monotonic() - t0, 5)
        rc, out, err = self.toolpool("trace", "long-1", "--store", s.store)
        self.assertEqual(rc, 0, err)
        self.assertIn("Cancelled", out)
        for bad in ("", 7, "x" * 300):
            self.assert_error(s.call("echo", {}, meta={"id": bad}, rid=5), -32602, 5)

    def test_concurrent_calls_answered_as_they_end(self):
        s = self.ready()
        # Two jobs run side by side: the quick call's answer comes first. Ids come back exactly as sent.
        big = 9007199254740993  # not a double
        s.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 1500}, "_meta": {"job": "a"}}})
        s.send({"jsonrpc": "2.0", "id": big, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"k": 1}, "_meta": {"job": "b"}}})
        s.send({"jsonrpc": "2.0", "id": 0, "method": "ping"})
        order = [s.next_message(timeout=20)["id"] for _ in range(3)]
        self.assertEqual(order, [0, big, "slow"])
        # Calls of one job run one at a time, in the order they came (their steps).
        s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 300}}})
        s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}}})
        first, second = s.next_message(), s.next_message()
        self.assertEqual((first["id"], second["id"]), (1, 2))
        self.assertEqual(first["result"]["_meta"]["toolpool"]["step"] + 1, second["result"]["_meta"]["toolpool"]["step"])
        # An id still in flight is not taken twice.
        s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 500}}})
        s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {}}})
        self.assert_error(s.next_message(), -32600, 3)
        self.assertIn("result", s.next_message())

    def test_jobs_and_steps(self):
        s = self.ready()
        a = s.call("echo", {"i": 1}, meta={"job": "agent-7"})["result"]["_meta"]["toolpool"]
        b = s.call("echo", {"i": 2}, meta={"job": "agent-7"})["result"]["_meta"]["toolpool"]
        c = s.call("echo", {"i": 3})["result"]["_meta"]["toolpool"]
        self.assertEqual((a["job"], a["step"], b["job"], b["step"]), ("agent-7", 1, "agent-7", 2))
        self.assertEqual((c["step"], c["job"]), (1, a["id"].rsplit("-", 1)[0]))
        self.assertEqual(s.close(), 0)
        # The next session on the store goes on counting the job's steps; its call ids are its own.
        s2 = self.ready(store=s.store)
        d = s2.call("echo", {"i": 4}, meta={"job": "agent-7"})["result"]["_meta"]["toolpool"]
        self.assertEqual((d["job"], d["step"]), ("agent-7", 3))
        self.assertNotEqual(d["id"].rsplit("-", 1)[0], a["id"].rsplit("-", 1)[0])
        rc, out, err = self.toolpool("checkpoints", "show", "agent-7", "--store", s.store)
        self.assertEqual(rc, 0, err)
        for x in (a, b, d):
            self.assertIn(x["id"], out)

    def test_same_call_circuit_and_escalation(self):
        s = self.ready()
        self.assertEqual(s.request("logging/setLevel", {"level": "warning"})["result"], {})
        for _ in range(2):
            self.assert_tool_error(s.call("deny", {"id": "r_991"}), "PermissionDenied", "permanent", 1, False)
        tm = self.assert_tool_error(s.call("deny", {"id": "r_991"}, rid="third"), "PermissionDenied", "permanent",
                                    1, False)
        self.assertIs(tm["escalated"], True)
        esc = tm["escalation"]
        tm = self.assert_tool_error(s.call("deny", {"id": "r_991"}), "CircuitOpen", "guard", 0, False)
        self.assertEqual((tm["escalated"], tm["escalation"]), (True, esc))
        logs = [m for m in s.quiet_for(0.2) + s.stash if m.get("method") == "notifications/message"]
        self.assertTrue(any(m["params"]["level"] == "warning" and m["params"]["data"].get("escalation") == esc
                            for m in logs), logs)
        rc, out, err = self.toolpool("escalations", "list", "--store", s.store)
        self.assertEqual(rc, 0, err)
        self.assertIn(esc, out)

    def test_same_call_circuit_counts_calls_that_are_their_own_jobs(self):
        # A 2026-07-28 request names no job: each call is a job of its own, yet the same failing call
        # sent again and again in one `toolpool mcp` trips the circuit (the breaker's scope "job"
        # counts them under the session), and the call that opens it escalates.
        s = self.session()
        m = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
             "io.modelcontextprotocol/clientCapabilities": {}}

        def deny(args, kind="PermissionDenied", klass="permanent", attempts=1):
            r = s.request("tools/call", {"name": "deny", "arguments": args, "_meta": m})
            tp = r["result"]["_meta"]["toolpool"]
            self.assertEqual(tp["job"], tp["id"])
            return self.assert_tool_error(r, kind, klass, attempts, False)

        self.assertEqual([deny({"id": "r_992"})["escalated"] for _ in range(2)], [False, False])
        third = deny({"id": "r_992"})
        self.assertIs(third["escalated"], True)
        fourth = deny({"id": "r_992"}, "CircuitOpen", "guard", 0)
        self.assertEqual((fourth["escalated"], fourth["escalation"]), (True, third["escalation"]))
        # Other args are another call: their circuit is closed.
        self.assertIs(deny({"id": "r_993"})["escalated"], False)
        rc, out, err = self.toolpool("escalations", "list", "--store", s.store)
        self.assertEqual(rc, 0, err)
        self.assertIn(third["escalation"], out)
        # Another session's calls count apart: its first one runs (and fails as itself).
        self.assertEqual(s.close(), 0)
        s2 = self.session(store=s.store)
        r = s2.request("tools/call", {"name": "deny", "arguments": {"id": "r_992"}, "_meta": m})
        self.assert_tool_error(r, "PermissionDenied", "permanent", 1, False)

    def test_a_slow_reader_never_stalls_the_loop(self):
        s = self.ready()
        # 3 MB of answers the client does not read (a pipe holds 64 KiB)...
        for i in range(6):
            s.send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "big", "arguments": {"n": 500000}}})
        # ...and still the next request is read and its call run and recorded: the loop never blocked on stdout.
        s.send({"jsonrpc": "2.0", "id": "after", "method": "tools/call",
                "params": {"name": "echo", "arguments": {"k": "after"}, "_meta": {"job": "after"}}})
        deadline = time.monotonic() + 20
        while True:
            rc, out, _ = self.toolpool("checkpoints", "show", "after", "--store", s.store)
            if rc == 0 and "after" in out and "mcp-" in out:
                break
            self.assertLess(time.monotonic(), deadline, "the call after the backlog was never run")
            time.sleep(0.1)
        got = {}
        for _ in range(7):
            m = s.next_message()
            got[m["id"]] = m
        for i in range(6):
            self.assertEqual(len(json.loads(got[i]["result"]["content"][0]["text"])), 500000)
        self.assertEqual(got["after"]["result"]["structuredContent"], {"k": "after"})
        # Past 8 MiB unread, input waits for the client; once it reads, everything is answered.
        for i in range(20):
            s.send({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
                    "params": {"name": "big", "arguments": {"n": 500000}}})
        time.sleep(1.5)
        ids = sorted(s.next_message()["id"] for _ in range(20))
        self.assertEqual(ids, list(range(100, 120)))
        self.assertEqual(s.request("ping")["result"], {})
        self.assertEqual(s.close(), 0)

    # ---- bad input ----

    def test_bad_input(self):
        s = self.ready(args=["--max-frame", "4096"])
        cases = [
            (b"{not json", -32700, None),
            (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700, None),
            (b"[]", -32600, None),
            (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600, None),
            (b'"hello"', -32600, None),
            (b"42", -32600, None),
            (b'{"id": 2, "method": "ping"}', -32600, 2),
            (b'{"jsonrpc": "1.0", "id": 3, "method": "ping"}', -32600, 3),
            (b'{"jsonrpc": "2.0", "id": 4}', -32600, 4),
            (b'{"jsonrpc": "2.0", "id": 5, "method": 7}', -32600, 5),
            (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
            (b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}', -32600, None),
            (b'{"jsonrpc": "2.0", "id": 6, "method": "ping", "params": "x"}', -32600, 6),
            (b'{"jsonrpc": "2.0", "id": 7, "method": "no/such"}', -32601, 7),
            (b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": []}}', -32602, 8),
            (b'{"jsonrpc": "2.0", "method": 9}', -32600, None),
            (b"{" + b'"jsonrpc": "2.0", "id": 10, "method": "ping", "pad": "' + b"x" * 5000 + b'"}', -32600, None),
            (b'\xff\xfe{"jsonrpc": "2.0", "id": 11, "method": "ping"}', -32700, None),
        ]
        for line, code, rid in cases:
            s.send(line)
            m = s.next_message()
            self.assert_error(m, code)
            self.assertIn("id", m)  # present, null when it could not be read
            self.assertEqual(m["id"], rid, line)
        # Notifications are never answered, known or not, well-formed params or not; nor are responses.
        s.send(b'{"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"x": 1}}')
        s.send(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}')
        s.send(b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}}')
        s.send(b'{"jsonrpc": "2.0", "id": 99, "result": {}}')
        s.send(b'{"jsonrpc": "2.0", "id": 98, "error": {"code": 1, "message": "x"}}')
        s.send(b"")
        s.send(b"   \r")
        self.assertEqual(s.quiet_for(0.3), [])
        # A line split over writes is one message; the server is still serving.
        s.proc.stdin.write(b'{"jsonrpc": "2.0", "id": "split", ')
        s.proc.stdin.flush()
        time.sleep(0.1)
        s.send(b'"method": "ping"}')
        self.assertEqual(s.response("split")["result"], {})
        self.assertEqual(s.call("echo", {"still": "here"})["result"]["structuredContent"], {"still": "here"})
        # A result the frame cannot carry (--max-frame, less 1 KiB for the rest) is the tool's failure.
        tm = self.assert_tool_error(s.call("big", {"n": 3500}), "OutputTooLarge", "permanent", 1, False)
        self.assertIn("more than a frame carries (4096)", tm["message"])
        self.assertEqual(s.close(), 0)

    def test_ids_and_numbers_past_64_bits(self):
        """An id past 64 bits (JSON, and a JSON-RPC id, though jansson holds
        integers in 64) is answered under the id as the host wrote it, for
        ping, tools/call and its cancellation alike. A number past 64 bits
        elsewhere in a request (its arguments) is -32602 or -32600 saying so,
        with the request's id; in a notification, nothing."""
        # Fails if such a message is taken for one that is not JSON (-32700,
        # id null), or if the id is not echoed exactly.
        s = self.ready(args=["-j", "1"])
        raw = lambda: s.lines.get(timeout=30)  # noqa: E731  (the line as it came, before json reads it)
        for rid in (b"18446744073709551616", b"-9223372036854775809", b"1e400"):
            s.send(b'{"jsonrpc": "2.0", "id": ' + rid + b', "method": "ping"}')
            self.assertEqual(raw(), b'{"jsonrpc":"2.0","id":' + rid + b',"result":{}}\n')
        big = 2 ** 70
        r = s.call("echo", {"x": 1}, rid=big)
        self.assertEqual(r["result"]["structuredContent"], {"x": 1})
        self.assertIs(type(r["id"]), int)
        # cancelled by that id: no answer ever comes, and the one worker is free again at once
        s.send({"jsonrpc": "2.0", "id": big + 1, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 30000}}})
        time.sleep(0.5)
        s.notify("notifications/cancelled", {"requestId": big + 1})
        t0 = time.monotonic()
        self.assertEqual(s.call("echo", {"after": 1}, rid=5, timeout=10)["result"]["structuredContent"], {"after": 1})
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual([m for m in s.quiet_for(1.0) if m.get("id") == big + 1], [])
        # past 64 bits in the arguments (or nested past 2048 levels): the request's -32602, saying why
        why = {}
        for rid, args in ((6, b'{"n": 18446744073709551616}'), (big, b'{"d": ' + b"[" * 3000 + b"]" * 3000 + b"}")):
            s.send(b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "echo", "arguments": %s}}'
                   % (rid, args))
            m = s.response(rid)
            self.assert_error(m, -32602, rid)
            why[rid] = m["error"]["message"]
            self.assertIn("toolpool cannot hold them", why[rid])
        self.assertIn("too big integer", why[6])
        self.assertIn("maximum parsing depth", why[big])
        # elsewhere in a request: -32600, with its id
        s.send(b'{"jsonrpc": "2.0", "id": 8, "method": "ping", "x": 18446744073709551616}')
        self.assert_error(s.response(8), -32600, 8)
        # in a notification: no answer, as for any notification
        s.send(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 18446744073709551616}}')
        self.assertEqual(s.quiet_for(0.3), [])
        self.assertEqual(s.request("ping", rid=9)["result"], {})
        self.assertEqual(s.close(), 0)

    def test_last_message_without_newline(self):
        s = self.ready()
        s.proc.stdin.write(b'{"jsonrpc": "2.0", "id": "last", "method": "ping"}')
        s.proc.stdin.flush()
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.response("last")["result"], {})


if __name__ == "__main__":
    unittest.main(verbosity=2)
