#!/usr/bin/env python3
"""What an exec tool writes on stdout, read end to end: real `toolpool run`
processes run tests/tools/print.sh, which writes a given answer and exits
with a given status, on real stores.

- JSON that jansson cannot hold (an integer past 64 bits, a number past a
  double's range) is still the tool's JSON: an error object is the failure
  it names, and a result is recorded and written as the tool wrote it
  (compact), in the result line, in the answer from the store on a rerun,
  and in `checkpoints show --json`.
- An error object on stdout names the failure whatever the exit status;
  the exit status decides only when stdout holds no error object.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import re
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
TEST_TOOLS = os.environ.get("TOOLPOOL_TEST_TOOLS", os.path.join(HERE, "tools"))
PRINT = os.path.join(TEST_TOOLS, "print.sh")


def printing(name, answer, status=0, **policy):
    tool = {"name": name, "exec": [PRINT, answer, str(status)], "timeout": "10s"}
    tool.update(policy)
    return tool


def result_text(line):
    """The result's JSON text as the line holds it, byte for byte."""
    start = line.index('"result":') + len('"result":')
    return line[start:line.index(',"attempts":', start)]


class ExecAnswerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-exec-answer-")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.dir])

    def path(self, name):
        return os.path.join(self.dir, name)

    def toolpool(self, *args):
        return subprocess.run([TOOLPOOL] + list(args), capture_output=True, text=True, timeout=120, cwd=self.dir)

    def run_calls(self, tools, calls, store="store"):
        with open(self.path("tools.json"), "w") as f:
            json.dump({"defaults": {"backoff": {"base": "1ms", "jitter": "none"}}, "tools": tools}, f)
        with open(self.path("calls.jsonl"), "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in calls))
        p = self.toolpool("run", "-q", "-j", "2", "-r", self.path("tools.json"), "-s", self.path(store),
                          self.path("calls.jsonl"))
        self.assertIn(p.returncode, (0, 1), p.stderr)
        lines = {}
        for line in p.stdout.splitlines():
            lines[json.loads(line)["id"]] = line
        self.assertEqual(len(lines), len(calls), p.stdout)
        return lines

    def test_numbers_past_int64(self):
        tools = [
            printing("notfound", '{"error":"NotFound","order":18446744073709551615}'),
            printing("limited", '{"error": "RateLimited", "message": "later", "retry_after_ms": 1200,'
                                ' "ids": [18446744073709551616, 1e400]}'),
            printing("big", '{"order": 18446744073709551615,\n "x": [1e400, -0, 1.0, 1e2, -9223372036854775809],'
                            ' "s": "caf\\u00e9 \\/"}\n'),
            printing("costly", '{"cost": 2.5, "n": 18446744073709551616}'),
            printing("top", '18446744073709551616\n'),
            # What jansson holds is written as before: -0 is the integer 0, reals in their shortest form.
            printing("readable", '{"x": [-0, 1.0, 1e2, 1.50]}'),
        ]
        calls = [{"id": "nf", "tool": "notfound"}, {"id": "rl", "tool": "limited"},
                 {"id": "s1", "job": "j", "step": 1, "tool": "big"},
                 {"id": "s2", "job": "j", "step": 2, "tool": "costly"},
                 {"id": "tp", "tool": "top"}, {"id": "rd", "tool": "readable"}]
        lines = self.run_calls(tools, calls)
        nf = json.loads(lines["nf"])
        self.assertFalse(nf["ok"], lines["nf"])
        self.assertEqual(nf["error"], "NotFound")
        self.assertEqual(nf["class"], "permanent")
        rl = json.loads(lines["rl"])
        self.assertFalse(rl["ok"], lines["rl"])
        self.assertEqual((rl["error"], rl["message"], rl["retry_after_ms"]), ("RateLimited", "later", 1200))

        want = {
            "s1": '{"order":18446744073709551615,"x":[1e400,-0,1.0,1e2,-9223372036854775809],'
                  '"s":"caf\\u00e9 \\/"}',
            "s2": '{"cost":2.5,"n":18446744073709551616}',
            "tp": '18446744073709551616',
            "rd": '{"x":[0,1.0,100.0,1.5]}',
        }
        for cid, text in want.items():
            self.assertTrue(json.loads(lines[cid])["ok"], lines[cid])
            self.assertEqual(result_text(lines[cid]), text)
        self.assertEqual(json.loads(lines["s1"])["result"]["order"], 18446744073709551615)
        self.assertEqual(json.loads(lines["s2"])["cost"], 2.5)

        # Run again on the same store: every answer comes from it, byte for byte the same.
        again = self.run_calls(tools, calls)
        self.assertEqual(again, lines)

        # The job's message list shows each result as recorded, none missing.
        p = self.toolpool("checkpoints", "show", "j", "--store", self.path("store"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("\n"), 1)
        cp = json.loads(p.stdout)
        self.assertEqual((cp["job"], cp["calls"]), ("j", ["s1", "s2"]))
        self.assertEqual([r["id"] for r in cp["results"]], ["s1", "s2"])
        self.assertNotIn("missing", cp["results"][0])
        self.assertIn('"result":' + want["s1"] + ',', p.stdout)
        self.assertIn('"result":' + want["s2"] + ',', p.stdout)

        # trace tells such a call's story too, from the store and from a results file: a number
        # jansson cannot hold as a string of its digits (--json keeps every byte as it was)
        p = self.toolpool("trace", "--store", self.path("store"), "s1", "s2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("call s2, job j, step 2\n", p.stdout)
        self.assertIn("attempt 1 → ok", p.stdout)
        self.assertIn('"n": "18446744073709551616"', p.stdout)
        self.assertIn('"x": ["1e400", 0, 1.0, 100.0, "-9223372036854775809"]', p.stdout)
        with open(self.path("results.jsonl"), "w") as f:
            f.write(lines["s1"] + "\n" + lines["tp"] + "\n")
        p = self.toolpool("trace", self.path("results.jsonl"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("→ result: "), 2, p.stdout)

    def test_reals_shown_as_written(self):
        # What a tool answered and a call's args hold read the same in every
        # view of the store as in run's line: 64.22, not 64.219999999999999.
        tools = [printing("price", '{"price": 64.22, "rates": [0.1, 1e300, 3.0]}'),
                 printing("denied", 'no', 77, attempts=1)]
        args = {"price": 64.22, "rates": [0.1, 1e300]}
        calls = [{"id": "p1", "job": "j", "step": 1, "tool": "price", "args": args}]
        calls += [{"id": f"d{k}", "job": "j", "step": 1 + k, "tool": "denied", "args": args} for k in (1, 2, 3)]
        lines = self.run_calls(tools, calls)
        self.assertIn('"result":{"price":64.22,"rates":[0.1,1e+300,3.0]},', lines["p1"])
        self.assertIn('"args":{"price":64.22,"rates":[0.1,1e+300]},', lines["p1"])

        # trace --json: the line run wrote, byte for byte, from the store and from a results file.
        p = self.toolpool("trace", "--json", "--store", self.path("store"), "p1", "d3")
        self.assertEqual((p.returncode, p.stdout), (0, lines["p1"] + "\n" + lines["d3"] + "\n"), p.stderr)
        written = "".join(lines[c["id"]] + "\n" for c in calls)
        with open(self.path("results.jsonl"), "w") as f:
            f.write(written)
        p = self.toolpool("trace", "--json", self.path("results.jsonl"))
        self.assertEqual((p.returncode, p.stdout), (0, written), p.stderr)

        # checkpoints show --json: the checkpoint's own numbers in their shortest form too.
        p = self.toolpool("checkpoints", "show", "j", "--store", self.path("store"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        head = p.stdout[:p.stdout.index(',"results":')]
        wall = re.search(r'"wall_ms":([0-9.e+-]+)', head).group(1)
        self.assertEqual(wall, repr(float(wall)), head)
        self.assertIn(lines["p1"], p.stdout)

        # The breaker and the escalation the third refusal opened show the call's args as given.
        p = self.toolpool("breakers", "list", "--store", self.path("store"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        breaker = json.loads(p.stdout)["id"]
        for view in (["breakers", "show", breaker], ["escalations", "show", "E000001"]):
            p = self.toolpool(*view, "--store", self.path("store"), "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn('"args":{"price":64.22,"rates":[0.1,1e+300]}', p.stdout, view)

    def test_error_object_beats_exit_status(self):
        tools = [
            printing("limited", '{"error": "RateLimited", "retry_after_ms": 1200}\n', 1, attempts=1),
            printing("gone", '{"error": "NotFound", "message": "no such order"}', 75, attempts=3),
            printing("big", '{"error": "BadArguments", "order": 18446744073709551615}', 3),
            # No error object: the exit status decides, as before.
            printing("json", '{"ok": true, "cost": 3}', 1),
            printing("silent", '', 75, attempts=2),
            printing("text", 'no entry', 77),
            printing("notstring", '{"error": 5}', 64),
            printing("zero", '{"error": "Timeout", "message": "upstream"}', 0, attempts=1),
        ]
        calls = [{"id": t["name"], "tool": t["name"]} for t in tools]
        lines = self.run_calls(tools, calls)
        r = {cid: json.loads(line) for cid, line in lines.items()}
        self.assertEqual((r["limited"]["error"], r["limited"]["class"], r["limited"]["retry_after_ms"]),
                         ("RateLimited", "transient", 1200), lines["limited"])
        self.assertEqual((r["gone"]["error"], r["gone"]["message"], r["gone"]["attempts"]),
                         ("NotFound", "no such order", 1), lines["gone"])
        self.assertEqual(r["big"]["error"], "BadArguments", lines["big"])
        self.assertNotIn("exited", r["big"]["message"])

        self.assertEqual(r["json"]["error"], "ToolError", lines["json"])
        self.assertEqual(r["json"]["message"], "json exited with status 1")
        self.assertNotIn("cost", r["json"])
        self.assertEqual((r["silent"]["error"], r["silent"]["attempts"]), ("ServerError", 2), lines["silent"])
        self.assertEqual(r["silent"]["message"], "silent exited with status 75")
        self.assertEqual(r["text"]["error"], "PermissionDenied", lines["text"])
        self.assertEqual(r["notstring"]["error"], "BadArguments", lines["notstring"])
        self.assertEqual(r["notstring"]["message"], "notstring exited with status 64")
        self.assertEqual((r["zero"]["error"], r["zero"]["message"]), ("Timeout", "upstream"), lines["zero"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
