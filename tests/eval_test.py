#!/usr/bin/env python3
"""Evaluation runs, end to end: real `toolpool run` processes on real stores,
with the test plugin's tools (tests/testplugin.c) and exec tools.

- The same input gives the same result records at -j 1 and at -j 8 (the
  same-call breaker's default scope is the job, so one sample's failures
  never change another's), apart from durations and escalation numbers.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import random
import re
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
PLUGIN = os.path.join(BUILD, "tests", "testplugin.so")
TEST_TOOLS = os.environ.get("TOOLPOOL_TEST_TOOLS", os.path.join(HERE, "tools"))


def plugin_tool(name, **policy):
    t = {"name": name, "plugin": {"path": PLUGIN}}
    t.update(policy)
    return t


# Retries wait exactly their backoff (no jitter), and the tool breaker never
# trips: what is compared is the same-call breaker's and the retries' doing.
EVAL_REGISTRY = {
    "defaults": {"attempts": 3, "backoff": {"base": "5ms", "jitter": "none"},
                 "breaker": {"tool": {"min_calls": 1000000}}},
    "tools": [
        plugin_tool("echo"),
        plugin_tool("flaky"),
        plugin_tool("deny"),
        plugin_tool("custom"),
        plugin_tool("sleep", timeout="150ms", attempts=2),
        {"name": "gone", "exec": [os.path.join(TEST_TOOLS, "exit.sh"), "75"], "attempts": 2},
    ],
}


def eval_calls(jobs=24, steps=12, seed=7):
    """Jobs of agent-like steps: repeated failing calls (the same args again
    and again, as an agent stuck in a loop does), retried ones, timeouts and
    plain answers. Jobs share args, so a breaker counted across jobs would
    give results that depend on which job got there first."""
    rng = random.Random(seed)
    calls = []
    for j in range(jobs):
        for s in range(1, steps + 1):
            r = rng.random()
            if r < 0.35:
                tool, args = "deny", {"id": rng.randrange(2)}
            elif r < 0.55:
                tool, args = "flaky", {"ok_at": rng.choice([2, 3, 9])}
            elif r < 0.65:
                tool, args = "custom", {"n": rng.randrange(2)}
            elif r < 0.70:
                tool, args = "sleep", {"ms": rng.choice([1, 3000])}
            elif r < 0.75:
                tool, args = "gone", {"q": rng.randrange(2)}
            else:
                tool, args = "echo", {"i": rng.randrange(5)}
            calls.append({"id": "j%d-s%d" % (j, s), "job": "j%d" % j, "step": s, "tool": tool, "args": args})
    return calls


ESCALATION = re.compile(r"E\d{6}")


def normalized(lines):
    """Result records with what scheduling may change taken out: durations,
    and the escalations' numbers (given in the order escalations are made)."""
    out = {}
    for line in lines:
        r = json.loads(line)
        r.pop("duration_ms", None)
        for t in r.get("trace", []):
            t.pop("duration_ms", None)
            t.pop("start_ms", None)
        for k in ("message", "escalation"):
            if isinstance(r.get(k), str):
                r[k] = ESCALATION.sub("E#", r[k])
        out[r["id"]] = r
    return out


class EvalTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="tp-eval-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def write_registry(self, reg, name="tools.json"):
        return self.write(name, json.dumps(reg, indent=1))

    def write_calls(self, calls, name="calls.jsonl"):
        return self.write(name, "".join(json.dumps(c) + "\n" for c in calls))

    def toolpool(self, *args, stdin=None, timeout=300):
        p = subprocess.run([TOOLPOOL] + list(args), input=stdin, capture_output=True, text=True,
                           timeout=timeout, cwd=self.tmp)
        for text in (p.stdout, p.stderr):
            self.assertNotIn("Sanitizer", text)
            self.assertNotIn("runtime error:", text)
        return p

    def run_calls(self, store, *extra, registry="tools.json", calls="calls.jsonl", workers="2"):
        return self.toolpool("run", "-q", "-r", registry, "-s", self.path(store), "-j", workers, *extra, calls)

    # ---- reproducible results ----

    def test_same_records_at_j1_and_j8(self):
        self.write_registry(EVAL_REGISTRY)
        calls = eval_calls()
        self.write_calls(calls)
        one = self.run_calls("s1", workers="1")
        eight = self.run_calls("s8", workers="8")
        self.assertEqual(one.returncode, 1, one.stderr)
        self.assertEqual(eight.returncode, 1, eight.stderr)
        a, b = normalized(one.stdout.splitlines()), normalized(eight.stdout.splitlines())
        self.assertEqual(len(a), len(calls))
        self.assertEqual(sorted(a), sorted(b))
        for cid in sorted(a):
            self.assertEqual(a[cid], b[cid], cid)
        # The input is not a trivial one: circuits opened, retries retried, timeouts timed out.
        kinds = [r.get("error") for r in a.values()]
        for k in ("CircuitOpen", "PermissionDenied", "ServerError", "Timeout", "QuotaGone"):
            self.assertIn(k, kinds)
        self.assertTrue(any(r["ok"] and r["attempts"] > 1 for r in a.values()))
        # Each job counts its own repeats: the third failure of the same call opens
        # that job's circuit, and only the job's fourth such call is refused.
        for j in range(24):
            seen = {}
            for c in calls:
                if c["job"] != "j%d" % j or c["tool"] != "deny":
                    continue
                key = json.dumps(c["args"], sort_keys=True)
                seen[key] = seen.get(key, 0) + 1
                want = "CircuitOpen" if seen[key] > 3 else "PermissionDenied"
                self.assertEqual(a[c["id"]]["error"], want, c["id"])

    def test_same_call_scope_global_and_off(self):
        calls = [{"id": "%s%d" % (j, i), "job": j, "step": i, "tool": "deny", "args": {"id": 1}}
                 for j in ("a", "b") for i in (1, 2)]
        self.write_calls(calls)
        reg = json.loads(json.dumps(EVAL_REGISTRY))
        reg["defaults"]["breaker"]["same_call"] = {"scope": "global"}
        self.write_registry(reg)
        p = self.run_calls("g", workers="1")
        rows = normalized(p.stdout.splitlines())
        # Four failures of one call across two jobs: the third opens the circuit for everyone.
        self.assertEqual([rows[c["id"]]["error"] for c in calls],
                         ["PermissionDenied", "PermissionDenied", "PermissionDenied", "CircuitOpen"])
        p = self.toolpool("breakers", "--store", self.path("g"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        b = [x for x in json.loads(p.stdout)["breakers"] if x["type"] == "call"]
        self.assertEqual([(x["scope"], x.get("job")) for x in b], [("global", None)])
        # Off: never opened, whatever the repeats.
        reg["defaults"]["breaker"]["same_call"] = False
        self.write_registry(reg)
        calls = [{"id": "x%d" % i, "job": "x", "step": i, "tool": "deny", "args": {"id": 1}} for i in range(1, 7)]
        self.write_calls(calls)
        p = self.run_calls("off", workers="1")
        self.assertEqual({json.loads(l)["error"] for l in p.stdout.splitlines()}, {"PermissionDenied"})
        # A tool turns it back on over the defaults with an object; scope "job" shows its job.
        reg["tools"][2]["breaker"] = {"same_call": {"failures": 2}}
        self.write_registry(reg)
        p = self.run_calls("on", workers="1")
        self.assertEqual([json.loads(l)["error"] for l in p.stdout.splitlines()][:3],
                         ["PermissionDenied", "PermissionDenied", "CircuitOpen"])
        p = self.toolpool("breakers", "--store", self.path("on"), "--json")
        b = [x for x in json.loads(p.stdout)["breakers"] if x["type"] == "call"]
        self.assertEqual([(x["scope"], x["job"]) for x in b], [("job", "x")])
        p = self.toolpool("breakers", "--store", self.path("on"))
        self.assertIn("in job x", p.stdout)
        # Bad values are refused, naming the key.
        for bad, want in (({"scope": "jobs"}, 'expected "job"'), (True, "or false to turn it off")):
            reg["tools"][2]["breaker"] = {"same_call": bad}
            self.write_registry(reg)
            p = self.run_calls("bad", workers="1")
            self.assertEqual(p.returncode, 2)
            self.assertIn("tools[2] (deny).breaker.same_call", p.stderr)
            self.assertIn(want, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
