#!/usr/bin/env python3
"""Tool lists as the other ecosystems write them, end to end: an OpenAI
function tool list (nested and flat) and an MCP tools/list answer, copied
unchanged into files, get their settings from a policy file or a "run"
block, and their calls run through real `toolpool run` processes on real
stores. `toolpool tools export` prints them back; an export loads again,
with the same policy, as the same tools. A registry with several errors
reports them all at once.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
PLUGIN = os.path.join(BUILD, "tests", "testplugin.so")
TEST_TOOLS = os.environ.get("TOOLPOOL_TEST_TOOLS", os.path.join(HERE, "tools"))

# As OpenAI's Chat Completions API takes them, plus one in the flat form of the Responses API.
OPENAI_TOOLS = """[
  {
    "type": "function",
    "function": {
      "name": "echo",
      "description": "Gives its arguments back.",
      "parameters": {
        "type": "object",
        "properties": {"x": {"type": "integer", "description": "a number"}},
        "required": ["x"],
        "additionalProperties": false
      },
      "strict": true
    }
  },
  {
    "type": "function",
    "name": "noop",
    "description": "Does nothing.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
    "strict": true
  }
]
"""

# The result of an MCP server's tools/list, as a server sends it.
MCP_TOOLS = """{
  "tools": [
    {
      "name": "cat",
      "title": "Cat",
      "description": "Gives its input back.",
      "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"]
      },
      "annotations": {"readOnlyHint": true, "openWorldHint": false}
    },
    {
      "name": "deny",
      "description": "Always refused.",
      "inputSchema": {"type": "object"},
      "annotations": {"destructiveHint": true},
      "_meta": {"example.com/owner": "tests"}
    }
  ]
}
"""


class FormatsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-formats-")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.dir])

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def toolpool(self, *args):
        return subprocess.run([TOOLPOOL] + list(args), capture_output=True, text=True, timeout=120,
                              cwd=self.dir)

    def run_calls(self, registry, policy, calls, store):
        args = ["run", "--registry", registry, "--store", self.path(store), "-j", "2", "--no-progress"]
        if policy:
            args += ["--policy", policy]
        calls_file = self.write(store + ".jsonl", "".join(json.dumps(c) + "\n" for c in calls))
        p = self.toolpool(*(args + [calls_file]))
        results = {}
        for line in p.stdout.splitlines():
            r = json.loads(line)
            results[r["id"]] = r
        return p, results

    def test_openai_list_with_a_policy_file(self):
        tools = self.write("openai.json", OPENAI_TOOLS)
        policy = self.write("policy.json", json.dumps({
            "defaults": {"timeout": "5s", "attempts": 2, "backoff": {"base": "5ms", "jitter": "none"}},
            "run": {"echo": {"plugin": {"path": PLUGIN}},
                    "noop": {"plugin": {"path": PLUGIN}, "timeout": "2s"}}}))
        p, res = self.run_calls(tools, policy, [
            {"id": "a", "tool": "echo", "args": {"x": 7}},
            {"id": "b", "tool": "echo", "args": {"x": "seven"}},
            {"id": "c", "tool": "noop", "args": {}},
            {"id": "d", "tool": "noop", "args": {"extra": 1}},
        ], "store-openai")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertTrue(res["a"]["ok"], res["a"])
        self.assertEqual(res["a"]["result"], {"x": 7})
        self.assertTrue(res["c"]["ok"], res["c"])
        # the declared parameters are what the calls are checked against
        self.assertFalse(res["b"]["ok"])
        self.assertEqual(res["b"]["error"], "InvalidArguments")
        self.assertFalse(res["d"]["ok"])
        self.assertEqual(res["d"]["error"], "InvalidArguments")

        # without the policy, each tool lacks an adapter: both named, exit 2, nothing run
        p = self.toolpool("run", "--registry", tools, "--store", self.path("s2"), self.path("store-openai.jsonl"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("openai.json:2: [0] (echo): no adapter", p.stderr)
        self.assertIn("openai.json:16: [1] (noop): no adapter", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_openai_builtin_tools_are_skipped(self):
        # A list as an agent sends it may hold tools its provider runs: each
        # is skipped, saying so with its type and place, and the rest run.
        doc = json.loads(OPENAI_TOOLS)
        listed = [{"type": "web_search_preview"}, doc[0], {"type": "file_search", "vector_store_ids": ["vs_1"]},
                  doc[1]]
        tools = self.write("openai.json", "[\n" + ",\n".join(json.dumps(t) for t in listed) + "\n]\n")
        policy = self.write("policy.json", json.dumps({
            "run": {"echo": {"plugin": {"path": PLUGIN}}, "noop": {"plugin": {"path": PLUGIN}}}}))
        p, res = self.run_calls(tools, policy, [{"id": "a", "tool": "echo", "args": {"x": 7}},
                                                {"id": "b", "tool": "noop", "args": {}}], "store-builtin")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual((res["a"]["result"], res["b"]["ok"]), ({"x": 7}, True))
        warnings = [ln for ln in p.stderr.splitlines() if "skipped" in ln]
        self.assertEqual(len(warnings), 2, p.stderr)
        self.assertIn('openai.json:2: [0]: skipped: an OpenAI built-in tool of type "web_search_preview"',
                      warnings[0])
        self.assertIn('openai.json:4: [2]: skipped: an OpenAI built-in tool of type "file_search"', warnings[1])
        self.assertTrue(all(ln.startswith("toolpool: warning: ") for ln in warnings), warnings)
        p = self.toolpool("tools", "list", "--registry", tools, "--policy", policy)
        self.assertEqual((p.returncode, [ln.split("\t")[0] for ln in p.stdout.splitlines()]), (0, ["echo", "noop"]))
        # an error after a skipped entry names the entry's place in the file
        listed.append({"type": "function", "name": "echo"})
        tools = self.write("dup.json", "[\n" + ",\n".join(json.dumps(t) for t in listed) + "\n]\n")
        p = self.toolpool("tools", "list", "--registry", tools, "--policy", policy)
        self.assertEqual(p.returncode, 2)
        self.assertIn('dup.json:6: [4].name: duplicate tool name "echo" (already declared as tools[1] on line 3)',
                      p.stderr)

    def test_openai_export_keeps_strict(self):
        doc = json.loads(OPENAI_TOOLS)
        doc.append({"type": "function", "function": {"name": "loose", "parameters": {"type": "object"}}})
        tools = self.write("openai.json", json.dumps(doc, indent=1))
        policy = self.write("policy.json", json.dumps({
            "run": {name: {"plugin": {"path": PLUGIN}} for name in ("echo", "noop", "loose")}}))
        p = self.toolpool("tools", "export", "--format", "openai", "--registry", tools, "--policy", policy)
        self.assertEqual(p.returncode, 0, p.stderr)
        fns = {t["function"]["name"]: t["function"] for t in json.loads(p.stdout)}
        self.assertIs(fns["echo"]["strict"], True)
        self.assertIs(fns["noop"]["strict"], True)
        self.assertNotIn("strict", fns["loose"])
        # the export is the same list again
        again = self.write("again.json", p.stdout)
        q = self.toolpool("tools", "export", "--format", "openai", "--registry", again, "--policy", policy)
        self.assertEqual((q.returncode, q.stdout), (0, p.stdout), q.stderr)

    def test_mcp_list_with_a_policy_file_and_a_run_block(self):
        tools = self.write("mcp.json", MCP_TOOLS)
        policy = self.write("policy.json", json.dumps({
            "defaults": {"attempts": 1},
            "run": {"cat": {"exec": [os.path.join(TEST_TOOLS, "cat.sh")], "timeout": "8s"},
                    "deny": {"plugin": {"path": PLUGIN}}}}))
        p, res = self.run_calls(tools, policy, [
            {"id": "a", "tool": "cat", "args": {"text": "hello"}},
            {"id": "b", "tool": "cat", "args": {"text": 3}},
            {"id": "c", "tool": "deny", "args": {}},
        ], "store-mcp")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertTrue(res["a"]["ok"], res["a"])
        self.assertEqual(res["a"]["result"], {"text": "hello"})
        self.assertEqual(res["b"]["error"], "InvalidArguments")
        self.assertFalse(res["c"]["ok"])

        # the annotations reached the policy: readOnlyHint -> idempotent, destructiveHint -> not
        p = self.toolpool("tools", "export", "--format", "toolpool", "--registry", tools, "--policy", policy)
        self.assertEqual(p.returncode, 0, p.stderr)
        own = {t["name"]: t for t in json.loads(p.stdout)["tools"]}
        self.assertTrue(own["cat"]["policy"]["idempotent"])
        self.assertFalse(own["deny"]["policy"]["idempotent"])
        self.assertEqual(own["cat"]["policy"]["timeout"], "8s")
        self.assertEqual(own["cat"]["adapter"], "exec")

        # the same answer in toolpool's file, its settings in a "run" block beside it
        doc = json.loads(MCP_TOOLS)
        doc["run"] = json.loads(open(policy).read())["run"]
        both = self.write("both.json", json.dumps(doc, indent=1))
        p, res = self.run_calls(both, None, [{"id": "a", "tool": "cat", "args": {"text": "hi"}}], "store-both")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(res["a"]["result"], {"text": "hi"})

    def test_export_round_trip(self):
        tools = self.write("mcp.json", MCP_TOOLS)
        policy = self.write("policy.json", json.dumps({
            "run": {"cat": {"exec": [os.path.join(TEST_TOOLS, "cat.sh")], "idempotent": True},
                    "deny": {"plugin": {"path": PLUGIN}, "idempotent": False, "attempts": 1}}}))
        exports = {}
        for fmt in ("openai", "mcp", "toolpool"):
            p = self.toolpool("tools", "export", "--format", fmt, "--registry", tools, "--policy", policy)
            self.assertEqual(p.returncode, 0, p.stderr)
            exports[fmt] = p.stdout
        openai = json.loads(exports["openai"])
        self.assertEqual([t["type"] for t in openai], ["function", "function"])
        self.assertEqual(openai[0]["function"]["name"], "cat")
        self.assertEqual(openai[0]["function"]["parameters"], json.loads(MCP_TOOLS)["tools"][0]["inputSchema"])
        self.assertEqual(json.loads(exports["mcp"])["tools"][1]["name"], "deny")
        # each export is a registry again: with the same policy, the same tools
        for fmt in ("openai", "mcp"):
            again = self.write("again-" + fmt + ".json", exports[fmt])
            for fmt2 in ("openai", "mcp", "toolpool"):
                p = self.toolpool("tools", "export", "--format", fmt2, "--registry", again, "--policy", policy)
                self.assertEqual(p.returncode, 0, p.stderr)
                want = exports[fmt2]
                if fmt == "openai" and fmt2 == "mcp":
                    # an OpenAI list has no place for MCP's own keys: all else comes back
                    doc = json.loads(want)
                    for t in doc["tools"]:
                        for k in ("title", "outputSchema", "annotations", "icons", "_meta"):
                            t.pop(k, None)
                    want = json.dumps(doc, separators=(",", ":")) + "\n"
                if fmt == "openai" and fmt2 == "toolpool":
                    # nor for the dialect an MCP list's schemas are read in (2020-12): draft-07 again
                    doc = json.loads(want)
                    for t in doc["tools"]:
                        self.assertEqual(t.pop("schema_dialect"), "2020-12")
                    want = json.dumps(doc, separators=(",", ":")) + "\n"
                self.assertEqual(p.stdout, want, (fmt, fmt2))
        # MCP's own keys pass through the MCP export as declared
        cat = json.loads(exports["mcp"])["tools"][0]
        declared = json.loads(MCP_TOOLS)["tools"][0]
        for k in ("title", "annotations"):
            self.assertEqual(cat.get(k), declared.get(k), k)
        p = self.toolpool("tools", "list", "--registry", tools, "--policy", policy)
        self.assertEqual(p.stdout, "cat\texec\tidempotent\tthe policy file's run.cat\n"
                         "deny\tplugin\tnot idempotent\tthe policy file's run.deny\n")
        p = self.toolpool("tools", "export", "--registry", tools, "--policy", policy)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--format", p.stderr)

    def test_toolpool_export_loads_again(self):
        # toolpool's rendering is a registry file: every setting of every tool,
        # paths resolved, so it loads from another folder as the same registry.
        os.mkdir(self.path("sub"))
        shutil.copy(os.path.join(TEST_TOOLS, "cat.sh"), self.path("sub"))
        tools = self.write("tools.json", json.dumps({
            "defaults": {"timeout": "5s", "backoff": {"base": "5ms", "factor": 1.5, "jitter": "none"},
                         "retry_on": ["Timeout", "ServerError"]},
            "schema_dialect": "2020-12", "formats": "assert", "guards": {"max_steps": 10, "max_cost": 2.5},
            "tools": [
                {"name": "cat", "description": "Gives its input back.", "exec": ["./sub/cat.sh"], "cwd": "sub",
                 "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
                 "attempts": 2, "deadline": "20s", "concurrency": 4,
                 "fallback": [{"tool": "cache", "args": {"q": "/text"}}], "fallback_on": ["transient", "permanent"],
                 "limits": {"memory": "64M", "cpu": "2s", "files": 64, "output": 4096},
                 "worker": {"max_calls": 100}, "rate": {"calls": 10, "per": "2s", "burst": 2},
                 "breaker": {"same_call": False, "tool": {"failure_rate": 0.25, "min_calls": 5}},
                 "kill_grace": "100ms", "max_retry_after": "30s", "schema_dialect": "draft-07"},
                {"name": "cache", "plugin": {"path": PLUGIN}, "stale": True, "degraded": {"n": 64.22},
                 "breaker": {"same_call": {"failures": 2, "scope": "global", "window": "1m"}}},
                {"name": "charge", "http": {"url": "http://127.0.0.1:9/charge/{id}", "method": "POST",
                                            "query": ["id"], "headers": {"Authorization": "Bearer ${env:TOKEN}"}},
                 "connect_timeout": "2s", "max_in_flight": 8},
                {"name": "m", "mcp": {"command": ["python3", "server.py"], "tool": "echo", "env": {"A": "1"},
                                      "instances": 2}, "idempotent": False},
            ]}))
        env = dict(os.environ, TOKEN="t0ken")

        def tp(*args, cwd=self.dir):
            return subprocess.run([TOOLPOOL] + list(args), capture_output=True, text=True, timeout=120, cwd=cwd,
                                  env=env)

        exports = {}
        for fmt in ("toolpool", "openai", "mcp"):
            p = tp("tools", "export", "--format", fmt, "--registry", tools)
            self.assertEqual(p.returncode, 0, p.stderr)
            exports[fmt] = p.stdout
        self.assertNotIn("t0ken", exports["toolpool"])
        os.mkdir(self.path("elsewhere"))
        again = self.write("elsewhere/exported.json", exports["toolpool"])
        # the same tools, adapters and idempotency (which now the file itself says)
        listed = [tp("tools", "list", "--registry", f).stdout.splitlines() for f in (tools, again)]
        self.assertEqual([ln.split("\t")[:3] for ln in listed[1]], [ln.split("\t")[:3] for ln in listed[0]])
        self.assertEqual(listed[1][0].split("\t")[3], "the tool")
        # and the same renderings, but for where idempotent came from
        for fmt in ("toolpool", "openai", "mcp"):
            p = tp("tools", "export", "--format", fmt, "--registry", again, cwd=self.path("elsewhere"))
            self.assertEqual(p.returncode, 0, p.stderr)
            got, want = json.loads(p.stdout), json.loads(exports[fmt])
            if fmt == "toolpool":
                for t in got["tools"] + want["tools"]:
                    t["policy"].pop("idempotent_from")
            self.assertEqual(got, want, fmt)
        own = {t["name"]: t for t in json.loads(exports["toolpool"])["tools"]}
        self.assertEqual(own["cat"]["exec"], [self.path("sub/cat.sh")])
        self.assertEqual(own["cat"]["cwd"], self.path("sub"))
        self.assertEqual(own["cat"]["policy"]["limits"], {"memory": 64 << 20, "cpu": "2s", "files": 64})
        self.assertEqual(own["cat"]["policy"]["max_output"], 4096)
        self.assertEqual(own["cache"]["policy"]["breaker"]["same_call"],
                         {"scope": "global", "failures": 2, "window": "60s"})
        self.assertEqual(own["charge"]["http"]["headers"], {"Authorization": "Bearer ${env:TOKEN}"})
        self.assertEqual(json.loads(exports["toolpool"])["guards"], {"max_steps": 10, "max_cost": 2.5})
        # its calls run as the original's do
        calls = self.write("calls.jsonl", '{"id": "a", "tool": "cat", "args": {"text": "hi"}}\n')
        p = tp("run", "-q", "--registry", again, "--store", self.path("s"), calls)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["result"], {"text": "hi"})

    def test_every_error_at_once(self):
        tools = self.write("tools.json", "\n".join([
            '{"tools": [',
            '  {"name": "a", "exec": ["x"], "timout": "5s"},',
            '  {"name": "b", "exec": ["x"], "inputSchema": {}},',
            '  {"name": "c", "exec": ["x"], "retries": 2}',
            ']}', ""]))
        calls = self.write("calls.jsonl", '{"id": "1", "tool": "a", "args": {}}\n')
        p = self.toolpool("run", "--registry", tools, "--store", self.path("s"), calls)
        self.assertEqual(p.returncode, 2)
        lines = p.stderr.splitlines()
        # the first line as a single error always was; the others on their own lines
        self.assertTrue(lines[0].startswith("toolpool: ") and lines[0].endswith(
            "tools.json:2: tools[0] (a).timout: unknown key (did you mean \"timeout\"?)"), lines)
        self.assertIn("tools.json:3: tools[1] (b).inputSchema: unknown key (toolpool calls it \"parameters\"",
                      lines[1])
        self.assertIn("tools.json:4: tools[2] (c).retries: unknown key (toolpool has \"attempts\", "
                      "and attempts counts the first try", lines[2])
        self.assertEqual(len(lines), 3, lines)


if __name__ == "__main__":
    unittest.main(verbosity=2)
