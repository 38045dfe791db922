#!/usr/bin/env python3
"""toolpool as a client of MCP servers that speak revision 2026-07-28
(stateless: no initialize, the _meta envelope on every request, resultType
on every result), end to end with no npm: tests/mcp_tiny_server.py run with
--modern, imported with "mcp_servers" and called through `toolpool run` and
`toolpool mcp`; and the fallback to initialize for legacy servers that
refuse the server/discover probe, or never answer it.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
TINY = [sys.executable, os.path.join(HERE, "mcp_tiny_server.py")]
sys.path.insert(0, HERE)
import mcp_tiny_server  # noqa: E402  (its tools, as it lists them)
from mcp_test import Session  # noqa: E402  (a toolpool mcp process over stdio)

MODERN = mcp_tiny_server.MODERN_VERSION
ENVELOPE = ("io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities")


class McpModernTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-mcp-modern-")
        self.tmp = self.tmpdir.name
        self.log = os.path.join(self.tmp, "tiny.log")

    def tearDown(self):
        self.tmpdir.cleanup()

    def received(self):
        """What the modern tiny servers read: {"method", "id", "meta"}, in order."""
        with open(self.log) as f:
            return [json.loads(line[5:]) for line in f if line.startswith("recv ")]

    def registry(self, modern=True, env=None, protocol=None, **policy):
        server = {"command": TINY + (["--modern"] if modern else []),
                  "env": dict({"TINY_LOG": self.log}, **(env or {})),
                  "tools": {"sleep": {"timeout": "1s"}, "freeze": {"timeout": "1s"}}}
        if protocol is not None:
            server["protocol"] = protocol
        reg = {"defaults": dict({"timeout": "20s", "backoff": {"base": "10ms", "jitter": "none"}}, **policy),
               "mcp_servers": {"tiny": server}}
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(reg, f)
        return reg

    def run_calls(self, calls, j=1):
        src = os.path.join(self.tmp, "calls.jsonl")
        with open(src, "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")
        p = subprocess.run([TOOLPOOL, "run", "--registry", os.path.join(self.tmp, "tools.json"), "--store",
                            os.path.join(self.tmp, "store"), "-j", str(j), src],
                           capture_output=True, text=True, timeout=240)
        self.assertNotRegex(p.stderr, "Sanitizer|runtime error:")
        return {r["id"]: r for r in map(json.loads, p.stdout.splitlines())}, p

    def assert_modern_exchange(self, got):
        """Every request carried the envelope; the revision's own methods only; each process opened with the probe."""
        self.assertTrue(got)
        for m in got:
            if m["id"] is None:
                continue  # a notification (notifications/cancelled)
            meta = m["meta"] or {}
            self.assertEqual(meta.get(ENVELOPE[0]), MODERN, m)
            self.assertIsInstance(meta.get(ENVELOPE[1]), dict, m)
            self.assertEqual(meta.get("io.modelcontextprotocol/clientInfo", {}).get("name"), "toolpool", m)
        methods = [m["method"] for m in got]
        self.assertNotIn("initialize", methods)
        self.assertNotIn("ping", methods)
        self.assertEqual(methods[0], "server/discover")

    def test_run_imports_and_calls_a_2026_server(self):
        self.registry()
        r, p = self.run_calls([
            {"id": "echo", "tool": "tiny.echo", "args": {"text": "hi"}},
            {"id": "add", "tool": "tiny.add", "args": {"a": 2, "b": 40}},
            {"id": "oops", "tool": "tiny.oops", "args": {}},
            {"id": "bad", "tool": "tiny.badparams", "args": {}},
        ])
        self.assertEqual(p.returncode, 1, p.stderr)
        # imported from its tools/list (the revision's: needs_input is its own), and called
        self.assertEqual(r["echo"]["result"], {"content": [{"type": "text", "text": "hi"}],
                                               "structuredContent": {"text": "hi"}})
        self.assertEqual(r["add"]["result"]["content"][0]["text"], "42")
        self.assertEqual((r["oops"]["error"], r["oops"]["class"]), ("ToolError", "permanent"))
        self.assertEqual(r["bad"]["error"], "BadArguments")
        got = self.received()
        self.assert_modern_exchange(got)
        methods = [m["method"] for m in got]
        # two processes: the import's (server/discover, tools/list) and the worker's
        self.assertEqual(methods.count("server/discover"), 2, methods)
        self.assertEqual(methods.count("tools/list"), 1, methods)
        self.assertEqual(methods.count("tools/call"), 4, methods)

    def test_a_result_that_is_not_complete_fails_at_once(self):
        self.registry(attempts=3)
        t0 = time.monotonic()
        r, _ = self.run_calls([
            {"id": "input", "tool": "tiny.needs_input", "args": {}},
            {"id": "other", "tool": "tiny.needs_input", "args": {"type": "something_else"}},
            {"id": "after", "tool": "tiny.echo", "args": {"text": "still here"}},
        ])
        self.assertLess(time.monotonic() - t0, 15)  # never a hang
        for cid, kind in (("input", "input_required"), ("other", "something_else")):
            self.assertEqual((r[cid]["error"], r[cid]["class"], r[cid]["attempts"]), ("ToolError", "permanent", 1),
                             r[cid])
            self.assertIn('resultType "%s", not "complete"' % kind, r[cid]["message"])
        self.assertIn("it asks for elicitation/create", r["input"]["message"])
        self.assertEqual(r["after"]["result"]["content"][0]["text"], "still here")

    def timed_out_between(self, tool, args):
        """One job: whoami, tool (past its 1 s timeout), whoami. Its results, the run, and the two pids."""
        self.registry(attempts=1)
        r, p = self.run_calls([
            {"id": "pid1", "job": "j", "step": 1, "tool": "tiny.whoami", "args": {}},
            {"id": tool, "job": "j", "step": 2, "tool": "tiny." + tool, "args": args},
            {"id": "pid2", "job": "j", "step": 3, "tool": "tiny.whoami", "args": {}},
        ])
        self.assertEqual(r[tool]["error"], "Timeout", r[tool])
        return r, p, [r[c]["result"]["structuredContent"]["pid"] for c in ("pid1", "pid2")]

    def test_timeout_cancels_and_liveness_is_checked_with_server_discover(self):
        r, _, pids = self.timed_out_between("sleep", {"seconds": 60})
        self.assertLess(r["sleep"]["duration_ms"], 5000)
        got = self.received()
        self.assert_modern_exchange(got)
        calls = [m for m in got if m["method"] == "tools/call"]
        cancelled = [m for m in got if m["method"] == "notifications/cancelled"]
        self.assertEqual(len(cancelled), 1)
        # after the cancel, the liveness check: server/discover, answered, so the same server goes on
        after = [m["method"] for m in got[got.index(cancelled[0]) + 1:]]
        self.assertEqual(after[0], "server/discover", after)
        self.assertEqual(pids[0], pids[1])
        self.assertEqual(len(calls), 3)

    def test_a_server_that_does_not_answer_the_liveness_check_is_replaced(self):
        _, p, pids = self.timed_out_between("freeze", {"seconds": 9})
        self.assertIn("did not answer server/discover (its liveness check after a timeout) within 5s", p.stderr)
        self.assertNotEqual(pids[0], pids[1])
        self.assert_modern_exchange(self.received())

    def test_toolpool_mcp_lists_and_calls_a_2026_server(self):
        self.registry()
        s = Session(self)
        try:
            self.assertIn("result", s.initialize())
            names = [t["name"] for t in s.request("tools/list")["result"]["tools"]]
            self.assertIn("tiny.echo", names)
            self.assertIn("tiny.needs_input", names)
            res = s.call("tiny.echo", {"text": "through the gateway"})["result"]
            self.assertEqual(res["content"], [{"type": "text", "text": "through the gateway"}])
            res = s.call("tiny.needs_input", {})["result"]
            self.assertTrue(res["isError"])
            self.assertIn('resultType \\"input_required\\"', res["content"][0]["text"])
            # a caller that listens hears the server's log messages: the worker asked for them (logLevel)
            s.call("tiny.report", {"steps": 1}, meta={"progressToken": "p1"})
        finally:
            s.close()
        got = self.received()
        self.assert_modern_exchange(got)
        report = [m for m in got if m["method"] == "tools/call" and m["meta"].get("progressToken") is not None]
        self.assertEqual(len(report), 1)
        self.assertEqual(report[0]["meta"].get("io.modelcontextprotocol/logLevel"), "debug")

    def test_legacy_servers_fall_back_to_initialize(self):
        """A legacy server refuses the probe (-32601) or never answers it:
        initialize follows in the same process, after at most the probe's
        wait (2 s)."""
        for env in ({}, {"TINY_DISCOVER": "silent"}):
            with self.subTest(env=env):
                self.registry(modern=False, env=env)
                t0 = time.monotonic()
                cid = "echo-%d" % len(env)  # each run's own call: the store answers a repeat
                r, p = self.run_calls([{"id": cid, "tool": "tiny.echo", "args": {"text": "legacy"}}])
                self.assertEqual(r[cid]["result"]["content"][0]["text"], "legacy", p.stderr)
                self.assertLess(time.monotonic() - t0, 12)
                with open(self.log) as f:
                    started = [line for line in f if line.startswith("started ")]
                self.assertEqual(len(started), 2)  # the import's and the worker's: no second process
                os.unlink(self.log)

    def test_unsupported_protocol_version_to_the_probe(self):
        """-32022 is a modern server's error: it falls back to initialize only
        when the versions it lists include one toolpool speaks that way."""
        self.registry(modern=False, env={"TINY_DISCOVER": "unsupported:2099-01-01"})
        err = self.load_error()
        self.assertIn('the server speaks MCP ["2099-01-01"] (its UnsupportedProtocolVersion answer to server/discover)',
                      err)
        self.registry(modern=False, env={"TINY_DISCOVER": "unsupported:2099-01-01,2025-06-18"})
        r, p = self.run_calls([{"id": "dual", "tool": "tiny.echo", "args": {"text": "fell back"}}])
        self.assertEqual(r["dual"]["result"]["content"][0]["text"], "fell back", p.stderr)

    def test_a_slow_modern_server_is_still_found_modern(self):
        """A 2026-07-28 server that answers the probe after its wait has
        passed: initialize went out meanwhile and is refused, and the late
        DiscoverResult decides."""
        self.registry(env={"TINY_SLOW_START": "3"})
        r, p = self.run_calls([{"id": "echo", "tool": "tiny.echo", "args": {"text": "slow"}}])
        self.assertEqual(r["echo"]["result"]["content"][0]["text"], "slow", p.stderr)
        got = self.received()
        self.assertEqual([m["method"] for m in got[:2]], ["server/discover", "initialize"])
        for m in got:
            if m["method"] in ("tools/list", "tools/call"):
                self.assertEqual(m["meta"][ENVELOPE[0]], MODERN)

    def load_error(self):
        p = subprocess.run([TOOLPOOL, "tools", "list", "--registry", os.path.join(self.tmp, "tools.json")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        return p.stderr

    def test_protocol_key(self):
        # "2025-11-25": initialize alone, no probe (for a legacy server that cannot take one)
        self.registry(modern=False, env={"TINY_DISCOVER": "silent", "TINY_RECV": "1"}, protocol="2025-11-25")
        t0 = time.monotonic()
        r, p = self.run_calls([{"id": "legacy", "tool": "tiny.echo", "args": {"text": "no probe"}}])
        self.assertEqual(r["legacy"]["result"]["content"][0]["text"], "no probe", p.stderr)
        self.assertLess(time.monotonic() - t0, 4)  # neither process waited out a probe
        methods = [m["method"] for m in self.received()]
        self.assertNotIn("server/discover", methods)
        self.assertEqual(methods.count("initialize"), 2)
        os.unlink(self.log)
        # "2026-07-28": the probe must find it, with no fallback...
        self.registry(protocol="2026-07-28")
        r, p = self.run_calls([{"id": "modern", "tool": "tiny.echo", "args": {"text": "pinned"}}])
        self.assertEqual(r["modern"]["result"]["content"][0]["text"], "pinned", p.stderr)
        self.assert_modern_exchange(self.received())
        # ...so a legacy server is refused, saying why
        self.registry(modern=False, protocol="2026-07-28")
        self.assertIn('its protocol is "2026-07-28", but its answer to server/discover is not a 2026-07-28 server\'s',
                      self.load_error())
        # and a 2026-07-28 server refuses initialize
        self.registry(protocol="2025-11-25")
        self.assertIn("initialize failed: Unsupported protocol version", self.load_error())
        # a bad value, on a server or on a declared tool, is a registry error that says what it takes
        for reg in ({"mcp_servers": {"tiny": {"command": TINY, "protocol": "2026"}}},
                    {"tools": [{"name": "t", "mcp": {"command": TINY, "tool": "echo", "protocol": 2026}}]}):
            with open(os.path.join(self.tmp, "tools.json"), "w") as f:
                json.dump(reg, f)
            err = self.load_error()
            self.assertIn("protocol", err)
            self.assertIn('expected "auto" (found by a server/discover probe), "2026-07-28" or "2025-11-25"', err)

    def test_a_declared_tool_takes_the_protocol_key(self):
        reg = {"tools": [{"name": "echo", "timeout": "20s",
                          "mcp": {"command": TINY + ["--modern"], "tool": "echo", "protocol": "2026-07-28",
                                  "env": {"TINY_LOG": self.log}}}]}
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(reg, f)
        r, p = self.run_calls([{"id": "e", "tool": "echo", "args": {"text": "declared"}}])
        self.assertEqual(r["e"]["result"]["content"][0]["text"], "declared", p.stderr)
        self.assert_modern_exchange(self.received())


if __name__ == "__main__":
    unittest.main(verbosity=2)
