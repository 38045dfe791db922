#!/usr/bin/env python3
"""The MCP Inspector's command line (@modelcontextprotocol/inspector --cli)
lists and calls the tools of `toolpool mcp` over stdio and of `toolpool
serve`'s /mcp over HTTP.

The Inspector is installed, pinned, into a folder of the build (never
globally). 0.15.0 is the newest release that runs on Node 20 (later ones
ask for Node 22). Without node and npm, or when the npm registry cannot be
reached from here, the test is skipped (exit 77), saying why.

Environment: TOOLPOOL_BUILD_DIR (the build), TOOLPOOL_NPM_INSPECTOR_DIR
(where the Inspector is installed; default BUILD/npm-inspector).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

INSPECTOR_VERSION = "0.15.0"
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
PLUGIN = os.path.join(BUILD, "tests", "testplugin.so")
NPM_DIR = os.environ.get("TOOLPOOL_NPM_INSPECTOR_DIR", os.path.join(BUILD, "npm-inspector"))
PKG = os.path.join(NPM_DIR, "node_modules", "@modelcontextprotocol", "inspector", "package.json")
CLI = os.path.join(NPM_DIR, "node_modules", ".bin", "mcp-inspector")


def install():
    """Installs the pinned Inspector; exits 77 (skipped) when it cannot."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("mcp_inspector_test: SKIPPED: node and npm are not installed (scripts/install-deps installs them)")
        sys.exit(77)
    try:
        with open(PKG) as f:
            if json.load(f).get("version") == INSPECTOR_VERSION:
                return
    except (OSError, ValueError):
        pass
    print(f"mcp_inspector_test: installing @modelcontextprotocol/inspector@{INSPECTOR_VERSION} into {NPM_DIR}",
          flush=True)
    os.makedirs(NPM_DIR, exist_ok=True)
    rc = subprocess.call(["npm", "install", "--prefix", NPM_DIR, "--no-save", "--no-package-lock", "--no-audit",
                          "--no-fund", f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"])
    if rc != 0:
        print(f"mcp_inspector_test: SKIPPED: @modelcontextprotocol/inspector@{INSPECTOR_VERSION} could not be "
              "installed from the npm registry (npm's error above)")
        sys.exit(77)


class InspectorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="mcp_inspector_test.")
        cls.tmp = cls._tmp.name
        cls.registry = os.path.join(cls.tmp, "tools.json")
        cls.store = os.path.join(cls.tmp, "store")
        with open(cls.registry, "w") as f:
            json.dump({"defaults": {"timeout": "30s"},
                       "tools": [{"name": "echo", "description": "Returns its args.", "plugin": {"path": PLUGIN}},
                                 {"name": "deny", "description": "Always forbidden (403).",
                                  "plugin": {"path": PLUGIN}},
                                 {"name": "strict", "description": "Takes an integer n.",
                                  "exec": [os.path.join(HERE, "tools", "cat.sh")],
                                  "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                 "required": ["n"]}}]}, f)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def inspect(self, target, *args):
        """The Inspector's CLI on target (a command line, or a URL), its stdout as JSON."""
        p = subprocess.run([CLI, "--cli", *target, *args], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("Sanitizer", p.stderr)
        return json.loads(p.stdout)

    def check(self, target):
        tools = self.inspect(target, "--method", "tools/list")["tools"]
        self.assertEqual([t["name"] for t in tools], ["echo", "deny", "strict"])
        self.assertEqual(tools[2]["inputSchema"]["required"], ["n"])
        r = self.inspect(target, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "q=hello")
        self.assertFalse(r["isError"])
        self.assertEqual(r["structuredContent"], {"q": "hello"})
        self.assertRegex(r["_meta"]["toolpool"]["id"], r"^mcp-[0-9a-f]{16}-1$")
        r = self.inspect(target, "--method", "tools/call", "--tool-name", "deny")
        self.assertTrue(r["isError"])
        tm = json.loads(r["content"][0]["text"])
        self.assertEqual([tm["error"], tm["retryable"], tm["attempts"]], ["PermissionDenied", False, 1])
        # The Inspector sends n as the schema says (an integer): it passes.
        r = self.inspect(target, "--method", "tools/call", "--tool-name", "strict", "--tool-arg", "n=7")
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"], {"n": 7})

    def test_stdio(self):
        self.check([TOOLPOOL, "mcp", "--registry", self.registry, "--store", self.store, "-j", "1"])

    def test_http(self):
        log_path = os.path.join(self.tmp, "serve.log")
        with open(log_path, "wb") as log:
            serve = subprocess.Popen([TOOLPOOL, "serve", "--registry", self.registry, "--store", self.store + "-http",
                                      "-j", "1", "--listen", "127.0.0.1:0"], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=log)
        try:
            addr = None
            deadline = time.monotonic() + 20
            while addr is None and time.monotonic() < deadline:
                self.assertIsNone(serve.poll(), "serve exited")
                with open(log_path) as f:
                    m = re.search(r"listening on (127\.0\.0\.1:\d+)", f.read())
                addr = m and m.group(1)
                time.sleep(0.02)
            self.assertIsNotNone(addr, "serve did not start")
            self.check([f"http://{addr}/mcp"])
        finally:
            serve.send_signal(signal.SIGTERM)
            self.assertEqual(serve.wait(30), 0)


if __name__ == "__main__":
    install()
    unittest.main(verbosity=2)
