#!/usr/bin/env python3
"""The mcp adapter end to end, with no npm: `toolpool run` calling the tools
of tests/mcp_tiny_server.py (a small MCP server over stdio), declared one by
one with "mcp" and imported whole with "mcp_servers".

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
import mcp_tiny_server  # noqa: E402  (its TOOLS, as it declares them)


def alive(pid):
    """Whether pid is a live process (a zombie is not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class McpAdapterTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-mcp-adapter-")
        self.tmp = self.tmpdir.name
        self.log = os.path.join(self.tmp, "tiny.log")

    def tearDown(self):
        self.tmpdir.cleanup()

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def tool(self, name, tool, env=None, **policy):
        mcp = {"command": TINY, "tool": tool, "env": dict({"TINY_LOG": self.log}, **(env or {}))}
        t = {"name": name, "mcp": mcp}
        t.update(policy)
        return t

    def run_calls(self, registry, calls, j=1, expect_rc=None):
        reg = os.path.join(self.tmp, "tools.json")
        with open(reg, "w") as f:
            json.dump(registry, f)
        src = os.path.join(self.tmp, "calls.jsonl")
        with open(src, "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")
        p = subprocess.run([TOOLPOOL, "run", "--registry", reg, "--store", os.path.join(self.tmp, "store"),
                            "-j", str(j), src], capture_output=True, text=True, timeout=240)
        if expect_rc is not None:
            self.assertEqual(p.returncode, expect_rc, p.stderr)
        self.assertNotRegex(p.stderr, "Sanitizer|runtime error:")
        out = {}
        for line in p.stdout.splitlines():
            r = json.loads(line)
            out[r["id"]] = r
        return out, p

    def defaults(self):
        return {"timeout": "20s", "backoff": {"base": "10ms", "jitter": "none"}}

    def test_more_servers_than_a_worker_keeps(self):
        # A worker keeps 8 servers; a 9th closes the one used longest ago, whose next call starts it afresh
        # (its state gone: the counter from 1 again, another process).
        tools = [self.tool(f"count{i}", "counter", env={"SRV": str(i)}) for i in range(10)]
        calls = [{"id": f"a{i}", "job": "j", "step": i, "tool": f"count{i}", "args": {}} for i in range(10)]
        calls.append({"id": "again", "job": "j", "step": 10, "tool": "count0", "args": {}})
        out, p = self.run_calls({"defaults": self.defaults(), "tools": tools}, calls, expect_rc=0)
        self.assertTrue(all(r["ok"] for r in out.values()), p.stdout)
        first, again = out["a0"]["result"]["structuredContent"], out["again"]["result"]["structuredContent"]
        self.assertEqual(again["count"], 1, again)
        self.assertNotEqual(again["pid"], first["pid"])

    def test_results_and_classification(self):
        reg = {"defaults": self.defaults(), "tools": [
            self.tool("echo", "echo"), {"name": "add", "mcp": {"command": TINY, "tool": "add"}},  # no env, no cwd
            self.tool("fail", "fail", attempts=2),
            self.tool("oops", "oops"), self.tool("bad", "badparams"), self.tool("nope", "nope"),
            self.tool("pid", "pid"), self.tool("env", "env", env={"FOO": "bar"}, ),
        ]}
        reg["tools"][7]["mcp"]["cwd"] = self.tmp
        calls = [
            {"id": "echo", "tool": "echo", "args": {"text": "hi there"}},
            {"id": "add", "tool": "add", "args": {"a": 2, "b": 40}},
            {"id": "fail", "tool": "fail", "args": {}},
            {"id": "failbig", "tool": "fail", "args": {"big": True}},
            {"id": "oops", "tool": "oops", "args": {}},
            {"id": "bad", "tool": "bad", "args": {}},
            {"id": "nope", "tool": "nope", "args": {}},
            {"id": "pid1", "job": "p", "step": 1, "tool": "pid", "args": {}},
            {"id": "pid2", "job": "p", "step": 2, "tool": "pid", "args": {}},
            {"id": "env", "tool": "env", "args": {"name": "FOO"}},
        ]
        r, p = self.run_calls(reg, calls, expect_rc=1)
        # a success is the MCP result: content, and structuredContent when the server gave one
        self.assertEqual(r["echo"]["result"], {"content": [{"type": "text", "text": "hi there"}],
                                               "structuredContent": {"text": "hi there"}})
        self.assertEqual(r["add"]["result"], {"content": [{"type": "text", "text": "42"}]})
        # isError with a JSON error object: its kind, retried as that kind is
        self.assertEqual(r["fail"]["error"], "RateLimited")
        self.assertEqual(r["fail"]["message"], "slow down")
        self.assertEqual([t["outcome"] for t in r["fail"]["trace"]], ["RateLimited", "RateLimited"])
        # ...one holding a number past int64 too, which jansson cannot read
        self.assertEqual((r["failbig"]["error"], r["failbig"]["message"]), ("RateLimited", "slow down"))
        self.assertEqual(r["failbig"]["attempts"], 2)
        # isError with plain text: ToolError, permanent, the text its message
        self.assertEqual((r["oops"]["error"], r["oops"]["class"], r["oops"]["attempts"]), ("ToolError", "permanent", 1))
        self.assertIn("it broke", r["oops"]["message"])
        # JSON-RPC errors
        self.assertEqual(r["bad"]["error"], "BadArguments")
        self.assertIn("-32602", r["bad"]["message"])
        self.assertEqual((r["nope"]["error"], r["nope"]["class"]), ("UnknownTool", "malformed"))
        # one session per worker: both calls on the one worker met the same server
        self.assertEqual(r["pid1"]["result"], r["pid2"]["result"])
        # env and cwd reach the server
        env = json.loads(r["env"]["result"]["content"][0]["text"])
        self.assertEqual(env, {"value": "bar", "cwd": os.path.realpath(self.tmp)})
        # the server's stderr is in the log, under the tool's name, and in no result
        self.assertRegex(p.stderr, r"toolpool-worker: \w+: tiny: started")
        self.assertNotIn("tiny: started", p.stdout)

    def test_a_result_that_is_not_a_call_tool_result_fails(self):
        forms = {"content_object": "its content is not an array", "no_content": "it has no content",
                 "is_error_string": "its isError is not a boolean", "is_error_one": "its isError is not a boolean",
                 "block_string": "its content[0] is not a content block",
                 "structured_array": "its structuredContent is not an object"}
        reg = {"defaults": self.defaults(), "tools": [self.tool("bad", "malformed")]}
        r, _ = self.run_calls(reg, [{"id": f, "tool": "bad", "args": {"form": f}} for f in forms], expect_rc=1)
        for form, why in forms.items():
            self.assertEqual((r[form]["ok"], r[form]["error"], r[form]["class"], r[form]["attempts"]),
                             (False, "ToolError", "permanent", 1), r[form])
            self.assertIn("is not a CallToolResult: " + why, r[form]["message"])

    def test_an_answer_that_does_not_read_ends_its_call_at_once(self):
        """Answers jansson cannot read (2**64 in the result, 3000 nested
        arrays, the id after either; a batch holding 2**64) and errors with a
        null id (a request the server could not parse), one call in flight at
        a time: each call ends ToolError (permanent, not retried) well before
        its 20 s timeout, the message saying why, and the server lives on: the
        counters around them are one server's 1 and 2. A readable batch is
        taken, its elements as messages: the call it answers is ok."""
        # Fails if such a line is skipped as "not JSON-RPC" (the call waits
        # out its timeout), if it costs the server its session (the calls
        # end WorkerCrashed and are retried), or if a batch is refused.
        reg = {"defaults": self.defaults(), "tools": [self.tool("u", "unreadable", attempts=3),
                                                      self.tool("counter", "counter")]}
        forms = {"bigint": "the MCP server's answer to tools/call could not be read: too big integer",
                 "deep": "the MCP server's answer to tools/call could not be read: maximum parsing depth reached",
                 "batch_bigint": "the MCP server's answer to tools/call could not be read: too big integer",
                 "null_id": "the MCP server could not read its request: it answered an error with a null id "
                            "(MCP error -32700: Parse error), and this was the one request in flight",
                 "null_id_bigint": "it answered an error with a null id (an answer toolpool could not read: too big "
                                   "integer"}
        calls = [{"id": "c1", "job": "j", "step": 1, "tool": "counter", "args": {}}]
        calls += [{"id": f, "job": "j", "step": i + 2, "tool": "u", "args": {"form": f}} for i, f in enumerate(forms)]
        calls += [{"id": "batch", "job": "j", "step": 20, "tool": "u", "args": {"form": "batch"}},
                  {"id": "c2", "job": "j", "step": 21, "tool": "counter", "args": {}}]
        r, p = self.run_calls(reg, calls, expect_rc=1)
        for form, why in forms.items():
            self.assertEqual((r[form]["ok"], r[form]["error"], r[form]["class"], r[form]["attempts"]),
                             (False, "ToolError", "permanent", 1), r[form])
            self.assertIn(why, r[form]["message"])
            self.assertLess(r[form]["duration_ms"], 3000, r[form])
        self.assertIn("(column ", r["bigint"]["message"])
        self.assertEqual(r["batch"]["result"], {"content": [{"type": "text", "text": "batched"}]})
        self.assertEqual(r["c1"]["result"]["content"][0]["text"], "1")
        self.assertEqual(r["c2"]["result"]["content"][0]["text"], "2")  # the same server all along
        self.assertEqual(self.read_log().count("started"), 1)

    def test_crash_mid_call_is_retried_on_a_fresh_server(self):
        mark = os.path.join(self.tmp, "mark")
        reg = {"defaults": self.defaults(), "tools": [self.tool("c", "crash_once", env={"TINY_MARK": mark})]}
        r, p = self.run_calls(reg, [{"id": "c", "tool": "c", "args": {}}], expect_rc=0)
        self.assertEqual([t["outcome"] for t in r["c"]["trace"]], ["WorkerCrashed", "ok"])
        self.assertEqual(r["c"]["result"]["content"][0]["text"], "survived")
        self.assertEqual(self.read_log().count("started"), 2)  # the second attempt, on a fresh server

    def test_timeout_cancels_the_request_and_the_server_lives_on(self):
        reg = {"defaults": self.defaults(), "tools": [
            self.tool("sleep", "sleep", timeout="1s", attempts=1),
            self.tool("pid", "pid"),
        ]}
        calls = [
            {"id": "pid1", "job": "j", "step": 1, "tool": "pid", "args": {}},
            {"id": "sleep", "job": "j", "step": 2, "tool": "sleep", "args": {"seconds": 60}},
            {"id": "pid2", "job": "j", "step": 3, "tool": "pid", "args": {}},
        ]
        r, p = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual(r["sleep"]["error"], "Timeout")
        self.assertLess(r["sleep"]["duration_ms"], 5000)
        log = self.read_log()
        self.assertIn("cancelled", log)  # notifications/cancelled told the server
        first = int(r["pid1"]["result"]["content"][0]["text"])
        second = int(r["pid2"]["result"]["content"][0]["text"])
        self.assertEqual(first, second)  # the same session: a timeout does not replace the server

    def test_timeout_without_grace_kills_at_once(self):
        reg = {"defaults": self.defaults(), "tools": [self.tool("sleep", "sleep", timeout="500ms", attempts=2)]}
        t0 = time.monotonic()
        r, p = self.run_calls(reg, [{"id": "s", "tool": "sleep", "args": {"seconds": 60}}], expect_rc=1)
        self.assertEqual([t["outcome"] for t in r["s"]["trace"]], ["Timeout", "Timeout"])
        self.assertLess(time.monotonic() - t0, 50)
        for line in self.read_log().splitlines():
            if line.startswith("started "):
                self.assertFalse(alive(int(line.split()[1])))

    def test_crash_on_start_hits_the_cap(self):
        reg = {"defaults": dict(self.defaults(), attempts=2),
               "tools": [self.tool("s", "echo", env={"TINY_CRASH": "start"})]}
        calls = [{"id": "c%d" % i, "job": "j", "step": i, "tool": "s", "args": {"text": "x"}} for i in range(1, 4)]
        r, p = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual(r["c1"]["error"], "WorkerCrashed")
        # it dies before its first answer: to the server/discover probe that finds its era
        self.assertIn("before answering server/discover", r["c1"]["message"])
        self.assertIn("cannot start: no config", r["c1"]["message"])  # its last words
        # the third failed start in a row reaches the cap; then it is not started again for a while
        outcomes = [t["outcome"] for c in ("c1", "c2", "c3") for t in r[c]["trace"]]
        self.assertEqual(outcomes[:3], ["WorkerCrashed"] * 3)
        self.assertEqual(r["c3"]["error"], "ToolError")
        self.assertIn("crash-loop cap", r["c3"]["message"])
        self.assertEqual(self.read_log().count("started"), 3)

    def test_import_a_server(self):
        reg = {"defaults": self.defaults(), "tools": [],
               "mcp_servers": {"tiny": {"command": TINY, "env": {"TINY_PAGE": "2", "TINY_LOG": self.log},
                                        "defaults": {"attempts": 2},
                                        "tools": {"sleep": {"timeout": "300ms", "attempts": 1}}}}}
        calls = [
            {"id": "add", "tool": "tiny.add", "args": {"a": 1, "b": 2}},
            {"id": "echo", "tool": "tiny.echo", "args": {"text": "x"}},
            {"id": "badargs", "tool": "tiny.add", "args": {"a": 1, "b": "x"}},
            {"id": "sleep", "tool": "tiny.sleep", "args": {"seconds": 5}},
            {"id": "fail", "tool": "tiny.fail", "args": {}},
        ]
        r, p = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual(r["add"]["result"]["content"][0]["text"], "3")
        self.assertTrue(r["echo"]["ok"])
        # the parameters are the server's inputSchema: checked before any call
        self.assertEqual((r["badargs"]["error"], r["badargs"]["attempts"]), ("InvalidArguments", 0))
        self.assertIn("/b", r["badargs"]["message"])
        # the tool's own block over the server's defaults over the registry's
        self.assertEqual((r["sleep"]["error"], r["sleep"]["attempts"]), ("Timeout", 1))
        self.assertEqual(r["fail"]["attempts"], 2)
        # every page of tools/list was read: the last tool of the last page is there
        r2, _ = self.run_calls(reg, [{"id": "env", "tool": "tiny.env", "args": {"name": "TINY_PAGE"}}], expect_rc=0)
        self.assertEqual(json.loads(r2["env"]["result"]["content"][0]["text"])["value"], "2")

    def test_annotations_decide_and_pass_through(self):
        reg = {"defaults": dict(self.defaults(), attempts=3, timeout="400ms"), "tools": [],
               "mcp_servers": {"tiny": {"command": TINY, "env": {"TINY_LOG": self.log},
                                        "tools": {"counter": {"idempotent": True}}}},
               "run": {"tiny.pid": {"idempotent": False}}}
        calls = [
            {"id": "write", "tool": "tiny.write", "args": {"text": "once", "seconds": 3}},
            {"id": "sleep", "tool": "tiny.sleep", "args": {"seconds": 3}},
        ]
        r, p = self.run_calls(reg, calls, j=2, expect_rc=1)
        # destructiveHint: not idempotent, so a Timeout is not tried again; readOnlyHint: it is
        self.assertEqual((r["write"]["error"], r["write"]["attempts"]), ("Timeout", 1))
        self.assertEqual((r["sleep"]["error"], r["sleep"]["attempts"]), ("Timeout", 3))
        path = os.path.join(self.tmp, "tools.json")
        # tools list says what each tool is and where that came from
        p = subprocess.run([TOOLPOOL, "tools", "list", "-r", path], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = {line.split("\t")[0]: line.split("\t")[1:] for line in p.stdout.splitlines()}
        self.assertEqual(rows["tiny.echo"], ["mcp", "idempotent", "MCP annotations (readOnlyHint)"])
        self.assertEqual(rows["tiny.crash_once"], ["mcp", "idempotent", "MCP annotations (idempotentHint)"])
        self.assertEqual(rows["tiny.write"], ["mcp", "not idempotent", "MCP annotations (destructiveHint)"])
        self.assertEqual(rows["tiny.odd"], ["mcp", "not idempotent", "MCP's defaults (no readOnlyHint or idempotentHint)"])
        self.assertEqual(rows["tiny.counter"], ["mcp", "idempotent", "mcp_servers.tiny.tools.counter"])
        self.assertEqual(rows["tiny.pid"], ["mcp", "not idempotent", "run.tiny.pid"])
        # the server's own keys reach hosts: the export, and toolpool mcp's tools/list
        p = subprocess.run([TOOLPOOL, "tools", "export", "--format", "mcp", "-r", path], capture_output=True,
                           text=True, timeout=60)
        exported = {t["name"]: t for t in json.loads(p.stdout)["tools"]}
        listed = {t["name"]: t for t in mcp_tiny_server.TOOLS}
        mcp = subprocess.Popen([TOOLPOOL, "mcp", "-r", path, "-s", os.path.join(self.tmp, "store2"), "-j", "1"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
        out, _ = mcp.communicate("".join(json.dumps(m) + "\n" for m in msgs), timeout=60)
        answers = {m["id"]: m for m in map(json.loads, out.splitlines()) if "id" in m}
        served = {t["name"]: t for t in answers[2]["result"]["tools"]}
        for doc in (exported, served):
            echo = doc["tiny.echo"]
            for k in ("title", "outputSchema", "annotations", "_meta"):
                self.assertEqual(echo[k], listed["echo"][k], k)
            self.assertEqual(doc["tiny.write"]["annotations"], listed["write"]["annotations"])
            self.assertEqual(doc["tiny.odd"]["annotations"], {"title": "Odd"})  # the hint that is no boolean left out
            self.assertNotIn("annotations", doc["tiny.counter"])
        self.assertEqual(list(served["tiny.echo"])[:3], ["name", "title", "description"])

    def load_error(self, reg):
        path = os.path.join(self.tmp, "tools.json")
        with open(path, "w") as f:
            json.dump(reg, f, indent=1)
        src = os.path.join(self.tmp, "none.jsonl")
        open(src, "w").close()
        p = subprocess.run([TOOLPOOL, "run", "--registry", path, "--store", os.path.join(self.tmp, "store"), src],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotRegex(p.stderr, "Sanitizer|runtime error:")
        return p.stderr

    def test_import_errors(self):
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "env": {"TINY_CRASH": "start"}}}})
        self.assertIn('mcp_servers.tiny: cannot import the tools of MCP server "tiny"', err)
        self.assertIn("exited with status 1", err)
        self.assertIn("cannot start: no config", err)  # its stderr, quoted
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": ["/nonexistent/server"]}}})
        self.assertIn('MCP server "tiny"', err)
        self.assertIn("No such file", err)
        err = self.load_error({"tools": [], "mcp_servers": {
            "tiny": {"command": [sys.executable, "-c", "import time; time.sleep(30)"], "start_timeout": "500ms"}}})
        self.assertIn("within 0.5s", err)
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "tools": {"reed": {}}}}})
        self.assertIn('mcp_servers.tiny.tools.reed: MCP server "tiny" has no tool "reed"', err)
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "tools": {"add": {"exec": ["x"]}}}}})
        self.assertIn("mcp_servers.tiny.tools.add.exec: unknown key", err)
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "env": {"TINY_VERSION": "2024-11-05"}}}})
        self.assertIn("speaks MCP 2024-11-05", err)
        err = self.load_error({"tools": [self.tool("tiny.add", "add")], "mcp_servers": {"tiny": {"command": TINY}}})
        self.assertIn('duplicate tool name "tiny.add"', err)
        # A cursor that comes back: caught at once, named, and no flood of duplicate names.
        t0 = time.monotonic()
        err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "env": {"TINY_CURSOR": "repeat"}}}})
        self.assertIn('tools/list gave the cursor "again" a second time (page 3): its pages never end', err)
        self.assertNotIn("duplicate tool name", err)
        self.assertLess(time.monotonic() - t0, 10)
        # A tools/list answer that does not read, or an error with a null id for it: said at once, named.
        for form, why in (("bigint", "its answer to tools/list could not be read: too big integer"),
                          ("null_id", "tools/list failed: Parse error")):
            t0 = time.monotonic()
            err = self.load_error({"tools": [], "mcp_servers": {"tiny": {"command": TINY, "start_timeout": "20s",
                                                                          "env": {"TINY_LIST": form}}}})
            self.assertIn('cannot import the tools of MCP server "tiny"', err)
            self.assertIn(why, err)
            self.assertLess(time.monotonic() - t0, 5, form)

    def test_import_takes_a_batch(self):
        """A tools/list answer sent as a JSON-RPC batch (MCP 2025-03-26 allows
        them) is read as the message it holds: every tool is imported."""
        # Fails if a batch is skipped as "not JSON-RPC": the import waits out
        # its start_timeout and fails.
        reg = {"defaults": self.defaults(), "tools": [],
               "mcp_servers": {"tiny": {"command": TINY, "start_timeout": "20s", "env": {"TINY_LIST": "batch"}}}}
        path = os.path.join(self.tmp, "tools.json")
        with open(path, "w") as f:
            json.dump(reg, f)
        t0 = time.monotonic()
        p = subprocess.run([TOOLPOOL, "tools", "list", "-r", path], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), len(mcp_tiny_server.TOOLS))
        self.assertLess(time.monotonic() - t0, 10)


if __name__ == "__main__":
    unittest.main(verbosity=2)
