#!/usr/bin/env python3
"""toolpool as a client of a real MCP 2026-07-28 server: tests/mcp_sdk2_server.mjs,
made with the TypeScript SDK's v2 server (@modelcontextprotocol/server,
pinned in tests/mcp_sdk2_test.sh, which installs it into build/npm-sdk2),
imported with "mcp_servers" and called through `toolpool run` and
`toolpool mcp`. The server refuses legacy clients, and its tool "era" says
which era the SDK chose: "modern" is toolpool speaking 2026-07-28 to it.

Skipped (exit 77) without node and npm, or when npm cannot install. The
build directory comes from $TOOLPOOL_BUILD_DIR (ctest sets it), else ../build.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build")))
TOOLPOOL = os.path.join(BUILD, "toolpool")
NPM = os.environ.get("TOOLPOOL_SDK2_NPM_DIR", os.path.join(BUILD, "npm-sdk2"))
SERVER = os.path.join(HERE, "mcp_sdk2_server.mjs")
sys.path.insert(0, HERE)
from mcp_test import Session  # noqa: E402  (a toolpool mcp process over stdio)


class McpSdk2ServerTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-mcp-sdk2-server-")
        self.tmp = self.tmpdir.name
        self.log = os.path.join(self.tmp, "sdk2.log")
        reg = {"defaults": {"timeout": "20s", "attempts": 3, "backoff": {"base": "10ms", "jitter": "none"}},
               "mcp_servers": {"sdk2": {"command": ["node", SERVER],
                                        "env": {"SDK2_LOG": self.log, "TOOLPOOL_SDK2_NPM_DIR": NPM},
                                        "tools": {"sleep": {"timeout": "1s", "attempts": 1}}}}}
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(reg, f)

    def tearDown(self):
        self.tmpdir.cleanup()

    def eras(self):
        with open(self.log) as f:
            return [line.split()[1] for line in f if line.startswith("era ")]

    def test_run_speaks_2026_to_the_sdk_server(self):
        calls = [
            {"id": "era", "job": "j", "step": 1, "tool": "sdk2.era", "args": {}},
            {"id": "echo", "job": "j", "step": 2, "tool": "sdk2.echo", "args": {"text": "hello v2"}},
            {"id": "pid1", "job": "j", "step": 3, "tool": "sdk2.pid", "args": {}},
            {"id": "sleep", "job": "j", "step": 4, "tool": "sdk2.sleep", "args": {"seconds": 30}},
            {"id": "pid2", "job": "j", "step": 5, "tool": "sdk2.pid", "args": {}},
            {"id": "again", "job": "j", "step": 6, "tool": "sdk2.again", "args": {}},
            {"id": "confirm", "job": "j", "step": 7, "tool": "sdk2.confirm", "args": {}},
        ]
        src = os.path.join(self.tmp, "calls.jsonl")
        with open(src, "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in calls))
        p = subprocess.run([TOOLPOOL, "run", "--registry", os.path.join(self.tmp, "tools.json"), "--store",
                            os.path.join(self.tmp, "store"), src], capture_output=True, text=True, timeout=240)
        r = {x["id"]: x for x in map(json.loads, p.stdout.splitlines())}
        self.assertEqual(r["era"]["result"]["content"][0]["text"], "modern", p.stderr)
        self.assertEqual(r["echo"]["result"]["content"], [{"type": "text", "text": "hello v2"}])
        # a timeout: cancelled, the liveness check answered, the same server goes on
        self.assertEqual(r["sleep"]["error"], "Timeout")
        self.assertEqual(r["pid1"]["result"], r["pid2"]["result"])
        # the SDK's multi round-trip answer: a permanent failure naming it, not retried
        self.assertEqual((r["again"]["error"], r["again"]["class"], r["again"]["attempts"]),
                         ("ToolError", "permanent", 1), r["again"])
        self.assertIn('resultType "input_required"', r["again"]["message"])
        # an elicitation toolpool did not declare it could answer: the SDK's -32021, permanent too
        self.assertEqual((r["confirm"]["error"], r["confirm"]["attempts"]), ("ToolError", 1), r["confirm"])
        self.assertIn("-32021", r["confirm"]["message"])
        # the import's process and the worker's: each one modern (the server refuses legacy clients)
        self.assertEqual(self.eras(), ["modern", "modern"])

    def test_toolpool_mcp_speaks_2026_to_the_sdk_server(self):
        s = Session(self)
        try:
            self.assertIn("result", s.initialize())
            names = [t["name"] for t in s.request("tools/list")["result"]["tools"]]
            self.assertEqual(sorted(names), ["sdk2.again", "sdk2.confirm", "sdk2.echo", "sdk2.era", "sdk2.pid",
                                             "sdk2.sleep"])
            res = s.call("sdk2.era", {})["result"]
            self.assertEqual(res["content"], [{"type": "text", "text": "modern"}])
        finally:
            s.close()
        self.assertEqual(self.eras(), ["modern", "modern"])


if __name__ == "__main__":
    env = dict(os.environ, TOOLPOOL_BUILD_DIR=BUILD, TOOLPOOL_SDK2_NPM_DIR=NPM)
    rc = subprocess.run(["sh", os.path.join(HERE, "mcp_sdk2_test.sh"), "--install"], env=env).returncode
    if rc != 0:
        print("mcp_sdk2_server_test: SKIPPED: the v2 SDK could not be installed (exit %d above)" % rc)
        sys.exit(77)
    unittest.main(verbosity=2)
