#!/usr/bin/env python3
"""Tool versions and owners, through real `toolpool` processes and a real
store: a rerun after a tool changed version runs its calls again and keeps
the old records as history (--on-version-change=rerun, the default), serves
them (serve), or exits 2 before running anything, naming the tool with its
old and new versions (refuse). The version is an exec tool's file digest
("version": "file"), a registry string, or an MCP server's serverInfo
version. A tool's "owner" is in its escalations; trace, stats --by version
and failures show versions; a record without one (any record of a store
written before versions) reads as it is.

Standard library only; the build folder as in serveutil.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_tiny_server.py")
# The result line's keys before versions: a tool without a version still writes exactly these.
LINE_KEYS = {"id", "job", "step", "tool", "ok", "result", "attempts", "served_by", "degraded", "stale", "escalated",
             "duration_ms", "args", "trace"}

TOOL = """#!/bin/sh
cat >/dev/null
echo ran >> "%s"
echo '{"made_by": %d}'
"""


class Versions(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-versions-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.store = os.path.join(self.dir, "store")
        self.log = os.path.join(self.dir, "ran.log")
        self.reg = os.path.join(self.dir, "tools.json")
        self.calls = os.path.join(self.dir, "calls.jsonl")

    def write_tool(self, made_by):
        path = os.path.join(self.dir, "tool.sh")
        with open(path, "w") as f:
            f.write(TOOL % (self.log, made_by))
        os.chmod(path, 0o755)

    def registry(self, tools, **top):
        with open(self.reg, "w") as f:
            json.dump(dict({"tools": tools}, **top), f)

    def write_calls(self, calls):
        with open(self.calls, "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")

    def ran(self):
        if not os.path.exists(self.log):
            return 0
        with open(self.log) as f:
            return sum(1 for _ in f)

    def toolpool(self, *args, check=True):
        p = subprocess.run([TOOLPOOL, *args], capture_output=True, text=True, timeout=60)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def run_calls(self, *extra, check=True):
        p = self.toolpool("run", "-q", "-j", "2", "-r", self.reg, "-s", self.store, *extra, self.calls, check=check)
        return p, [json.loads(line) for line in p.stdout.splitlines() if line.strip()]

    def test_exec_file_version(self):
        self.write_tool(1)
        self.registry([{"name": "t", "exec": ["./tool.sh"], "version": "file"},
                       {"name": "plain", "exec": ["./tool.sh"]}])
        self.write_calls([{"id": "a", "tool": "t", "args": {}}, {"id": "b", "tool": "plain", "args": {}}])
        _, first = self.run_calls()
        by = {r["id"]: r for r in first}
        v1 = by["a"]["version"]
        self.assertRegex(v1, "^[0-9a-f]{32}$")
        self.assertEqual(set(by["b"]), LINE_KEYS)  # a tool without a version: the line as it always was
        self.assertEqual(self.ran(), 2)
        _, again = self.run_calls()  # nothing changed: served
        self.assertEqual(self.ran(), 2)
        self.assertEqual({r["id"]: r["version"] if "version" in r else None for r in again}, {"a": v1, "b": None})

        self.write_tool(2)  # the file changes: a new version
        p, out = self.run_calls("--on-version-change=refuse", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(out, [])
        self.assertEqual(self.ran(), 2)  # nothing ran
        self.assertIn('t: 1 result recorded under version "%s", the registry\'s is "' % v1, p.stderr)
        self.assertIn("1 tool changed version", p.stderr)
        self.assertNotIn("plain", p.stderr)

        _, served = self.run_calls("--on-version-change", "serve")
        self.assertEqual(self.ran(), 2)
        self.assertEqual({r["id"]: r["result"]["made_by"] for r in served}, {"a": 1, "b": 1})

        p = self.toolpool("run", "-j", "2", "-r", self.reg, "-s", self.store, self.calls)  # the default: rerun
        rerun = {r["id"]: r for r in map(json.loads, p.stdout.splitlines())}
        self.assertEqual(self.ran(), 3)  # only t ran again
        self.assertEqual(rerun["a"]["result"], {"made_by": 2})
        v2 = rerun["a"]["version"]
        self.assertNotEqual(v2, v1)
        self.assertEqual(rerun["b"]["result"], {"made_by": 1})
        self.assertIn("new version: 1 recorded result made under another version of its tool, run again", p.stderr)
        # the old record is kept: trace --store tells it after the new one
        t = self.toolpool("trace", "--store", self.store, "a").stdout
        self.assertIn("under version %s of t" % v2, t)
        self.assertIn("earlier record 1 of 1, made under version %s" % v1, t)
        self.assertLess(t.index('{"made_by": 2}'), t.index('{"made_by": 1}'))
        self.assertEqual(json.loads(self.toolpool("trace", "--json", "--store", self.store, "a").stdout)["result"],
                         {"made_by": 2})
        # and the store checks clean, the new record with its history
        self.toolpool("store", "check", "--store", self.store)
        _, last = self.run_calls("--on-version-change=refuse")  # now the same version: nothing to refuse
        self.assertEqual(self.ran(), 3)
        self.assertEqual({r["id"]: r["result"]["made_by"] for r in last}, {"a": 2, "b": 1})

    def test_unreadable_file_fails_the_load(self):
        self.registry([{"name": "t", "exec": ["./missing.sh"], "version": "file"}])
        self.write_calls([{"id": "a", "tool": "t", "args": {}}])
        p, _ = self.run_calls(check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn('"file": cannot read', p.stderr)
        self.assertIn("missing.sh: No such file or directory", p.stderr)
        self.registry([{"name": "t", "http": {"url": "http://127.0.0.1:1/x"}, "version": "file"}])
        p, _ = self.run_calls(check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn('"file" is the digest of the file an exec tool runs (this one is http)', p.stderr)

    def test_version_string_bump_and_a_store_from_before_versions(self):
        self.write_tool(1)
        # a record made with no version anywhere: what every store written before versions holds
        self.registry([{"name": "t", "exec": ["./tool.sh"]}])
        self.write_calls([{"id": "a", "tool": "t", "args": {"n": 1}}, {"id": "b", "tool": "t", "args": {"n": 2}}])
        _, old = self.run_calls()
        self.assertTrue(all(set(r) == LINE_KEYS for r in old))
        self.registry([{"name": "t", "exec": ["./tool.sh"], "version": "1.0"}])
        p, _ = self.run_calls("--on-version-change=refuse", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn('t: 2 results recorded under version (none), the registry\'s is "1.0"', p.stderr)
        _, served = self.run_calls("--on-version-change=serve")  # read as it is: no version
        self.assertEqual([set(r) for r in served], [LINE_KEYS, LINE_KEYS])
        self.write_tool(2)
        _, now = self.run_calls()
        self.assertEqual(self.ran(), 4)
        self.assertEqual({r["version"] for r in now}, {"1.0"})
        self.assertIn("earlier record 1 of 1, made under no version", self.toolpool("trace", "-s", self.store,
                                                                                     "b").stdout)
        self.registry([{"name": "t", "exec": ["./tool.sh"], "version": "1.1"}])
        _, bumped = self.run_calls()
        self.assertEqual(self.ran(), 6)
        self.assertEqual({r["version"] for r in bumped}, {"1.1"})
        t = self.toolpool("trace", "-s", self.store, "a").stdout
        self.assertIn("earlier record 2 of 2, made under version 1.0", t)
        self.assertIn("earlier record 1 of 2, made under no version", t)
        # stats per version: the current records only (history is not counted)
        rows = [json.loads(line) for line in
                self.toolpool("stats", "-s", self.store, "--by", "version", "--json").stdout.splitlines()]
        self.assertEqual([(r["tool"], r["version"], r["calls"]) for r in rows], [("t", "1.1", 2)])
        self.assertIn("t, version 1.1: 2 calls", self.toolpool("stats", "-s", self.store, "--by", "version").stdout)
        self.assertNotIn("version", json.loads(self.toolpool("stats", "-s", self.store, "--json").stdout
                                               .splitlines()[0]))

    def test_mcp_server_version(self):
        def reg(version):
            self.registry([], mcp_servers={"tiny": {"command": [sys.executable, TINY],
                                                    "env": {"TINY_SERVER_VERSION": version, "TINY_LOG": self.log}}})
        reg("3.1.0")
        self.write_calls([{"id": "e", "tool": "tiny.echo", "args": {"text": "hi"}}])
        _, out = self.run_calls()
        self.assertEqual(out[0]["version"], "3.1.0")
        _, out = self.run_calls()  # the same server version: served
        self.assertEqual(out[0]["version"], "3.1.0")
        reg("3.2.0")
        p, _ = self.run_calls("--on-version-change=refuse", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn('tiny.echo: 1 result recorded under version "3.1.0", the registry\'s is "3.2.0"', p.stderr)
        _, out = self.run_calls()
        self.assertEqual(out[0]["version"], "3.2.0")
        self.assertIn("made under version 3.1.0", self.toolpool("trace", "-s", self.store, "e").stdout)
        # the registry's own word wins over the server's
        with open(self.reg) as f:
            r = json.load(f)
        r["run"] = {"tiny.echo": {"version": "pinned"}}
        with open(self.reg, "w") as f:
            json.dump(r, f)
        _, out = self.run_calls()
        self.assertEqual(out[0]["version"], "pinned")

    def test_mcp_modern_server_version(self):
        # a 2026-07-28 server says its version in its DiscoverResult's _meta
        self.registry([], mcp_servers={"mod": {"command": [sys.executable, TINY, "--modern"],
                                               "env": {"TINY_SERVER_VERSION": "9.9"}}})
        self.write_calls([{"id": "e", "tool": "mod.echo", "args": {"text": "hi"}}])
        _, out = self.run_calls()
        self.assertEqual((out[0]["ok"], out[0]["version"]), (True, "9.9"))

    def test_owner_in_escalations_and_versions_in_failures(self):
        fail = os.path.join(self.dir, "fail.sh")
        with open(fail, "w") as f:
            f.write("#!/bin/sh\ncat >/dev/null\necho 'broken' >&2\nexit 3\n")
        os.chmod(fail, 0o755)
        self.registry([{"name": "f", "exec": ["./fail.sh"], "version": "7", "attempts": 1,
                        "breaker": {"same_call": {"failures": 1}}},
                       {"name": "g", "exec": ["./fail.sh"], "attempts": 1, "owner": "sam@example.com",
                        "breaker": {"same_call": {"failures": 1}}}],
                      defaults={"owner": "oncall@example.com"})
        self.write_calls([{"id": "x", "tool": "f", "args": {}}, {"id": "y", "tool": "g", "args": {}}])
        p, out = self.run_calls(check=False)
        self.assertEqual({r["id"]: r["ok"] for r in out}, {"x": False, "y": False})
        esc = [json.loads(line) for line in
               self.toolpool("escalations", "list", "--json", "--store", self.store).stdout.splitlines()]
        self.assertEqual({e["tool"]: e["owner"] for e in esc}, {"f": "oncall@example.com", "g": "sam@example.com"})
        listed = self.toolpool("escalations", "list", "--store", self.store).stdout
        self.assertIn("owner sam@example.com", listed)
        ident = [e["id"] for e in esc if e["tool"] == "g"][0]
        self.assertIn("owner: sam@example.com", self.toolpool("escalations", "show", ident, "--store",
                                                              self.store).stdout)
        groups = [json.loads(line) for line in
                  self.toolpool("failures", "--json", "--store", self.store).stdout.splitlines()]
        self.assertEqual({g["tool"]: g.get("version") for g in groups}, {"f": "7", "g": None})
        self.assertIn("f (version 7) ", self.toolpool("failures", "--store", self.store).stdout)
        results = os.path.join(self.dir, "out.jsonl")
        with open(results, "w") as f:
            f.write(p.stdout)
        self.assertIn("f (version 7) ", self.toolpool("failures", results).stdout)
        self.assertIn("under version 7 of f", self.toolpool("trace", results).stdout)
        # serve's /v1/escalations says the same, from the same store
        if not serveutil.has_serve():
            return
        port = serveutil.free_port()
        s = serveutil.Serve(self.reg, self.store, "127.0.0.1:%d" % port, os.path.join(self.dir, "serve.log")).start()
        self.addCleanup(s.stop)
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/escalations" % port, timeout=10) as r:
            listed = json.load(r)["escalations"]
        self.assertEqual({e["tool"]: e["owner"] for e in listed}, {"f": "oncall@example.com", "g": "sam@example.com"})


if __name__ == "__main__":
    unittest.main()
