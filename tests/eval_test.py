#!/usr/bin/env python3
"""Evaluation runs, end to end: real `toolpool run` processes on real stores,
with the test plugin's tools (tests/testplugin.c) and exec tools.

- The same input gives the same result records at -j 1 and at -j 8 (the
  same-call breaker's default scope is the job, so one sample's failures
  never change another's, and the tool breaker is off unless asked for),
  apart from durations and escalation numbers, which no message carries.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import random
import re
import subprocess
import tempfile
import time
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
            t.pop("spawn_ms", None)
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

    def test_same_records_by_default(self):
        """A registry that declares no breaker: the same records at -j 1 and -j 8,
        model-facing text and all (no escalation number in any message), though
        a tool fails for every job alike, as a backend that is down does (a
        tool breaker on by default would open at one -j and not at another)."""
        reg = {"defaults": {"attempts": 3, "backoff": {"base": "5ms"}},
               "tools": [t for t in EVAL_REGISTRY["tools"]]}
        self.write_registry(reg)
        calls = eval_calls()
        for j in range(24):  # every job also calls the backend that is down, twice
            for s in (13, 14):
                calls.append({"id": "j%d-s%d" % (j, s), "job": "j%d" % j, "step": s, "tool": "gone",
                              "args": {"q": s}})
        self.write_calls(calls)
        one = self.run_calls("d1", workers="1")
        eight = self.run_calls("d8", workers="8")
        self.assertEqual(one.returncode, 1, one.stderr)
        self.assertEqual(eight.returncode, 1, eight.stderr)

        def records(lines):
            out = {}
            for r in map(json.loads, lines):
                r.pop("duration_ms", None)
                r.pop("trace", None)
                r.pop("escalation", None)  # numbered in the order escalations are made
                out[r["id"]] = r
            return out

        a, b = records(one.stdout.splitlines()), records(eight.stdout.splitlines())
        self.assertEqual(len(a), len(calls))
        for cid in sorted(a):
            self.assertEqual(a[cid], b[cid], cid)
        self.assertFalse([r for r in a.values() if ESCALATION.search(r.get("message", ""))])
        opened = [r for r in a.values() if r.get("error") == "CircuitOpen"]
        self.assertTrue(opened)
        for r in opened:  # the message says how to close it, and that a person has it
            self.assertIn("escalated to a person", r["message"])
            self.assertRegex(r["message"], r"`toolpool breakers reset call/deny/[0-9a-f]{12}` closes it")
        m = re.search(r"reset (call/deny/[0-9a-f]{12})", opened[0]["message"])
        p = self.toolpool("breakers", "show", m.group(1), "--store", self.path("d1"))
        self.assertEqual(p.returncode, 0, p.stderr)
        # the backend that is down failed 48 calls of 24 jobs, and none was refused for it
        self.assertEqual({a["j%d-s%d" % (j, s)]["error"] for j in range(24) for s in (13, 14)}, {"ServerError"})
        # one registry line away: the tool breaker, asked for, protects it (and names its reset)
        reg["defaults"]["breaker"] = {"tool": {"min_calls": 4}}
        self.write_registry(reg)
        p = self.run_calls("tb", workers="1")
        refused = [r for r in map(json.loads, p.stdout.splitlines())
                   if r["tool"] == "gone" and r.get("error") == "CircuitOpen"]
        self.assertTrue(refused)
        self.assertIn("`toolpool breakers reset tool/gone` closes it", refused[0]["message"])
        # and the summary says calls were refused, and how to close a breaker
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("tb2"), "-j", "1", "--no-progress",
                          "calls.jsonl")
        self.assertRegex(p.stderr, r"circuit open: \d+ calls refused without running; `toolpool breakers list "
                                   r"--store [^`]*tb2` shows the breakers, `toolpool breakers reset ID` closes one")

    def test_repairs_do_not_trip_the_same_call_breaker(self):
        """Reruns of recorded failures (--retry-failed, or forget and run again)
        count each call once toward the same-call breaker: the operator's
        repairs are not the agent repeating itself."""
        self.write_registry(EVAL_REGISTRY)
        # two steps of one job make the same failing call: two failures, under the three that open it
        calls = [{"id": "r%d" % s, "job": "r", "step": s, "tool": "deny", "args": {"id": 1}} for s in (1, 2)]
        self.write_calls(calls)
        for i in range(3):
            p = self.run_calls("rp", *(["--retry-failed"] if i else []), workers="1")
            self.assertEqual({json.loads(l)["error"] for l in p.stdout.splitlines()}, {"PermissionDenied"},
                             p.stdout)
        p = self.toolpool("forget", "--store", self.path("rp"), "r1", "r2")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.run_calls("rp", workers="1")
        self.assertEqual({json.loads(l)["error"] for l in p.stdout.splitlines()}, {"PermissionDenied"}, p.stdout)
        p = self.toolpool("escalations", "list", "--store", self.path("rp"), "--json")
        self.assertEqual(p.stdout.strip(), "", p.stdout)
        b = [json.loads(l) for l in self.toolpool("breakers", "--store", self.path("rp"), "--json").stdout.splitlines()]
        self.assertEqual([x.get("failures") for x in b if x["type"] == "call"], [2], b)
        # the agent's own third repeat, a new step, still opens it
        calls.append({"id": "r3", "job": "r", "step": 3, "tool": "deny", "args": {"id": 1}})
        self.write_calls(calls)
        p = self.run_calls("rp", workers="1")
        self.assertEqual(json.loads(p.stdout.splitlines()[-1])["id"], "r3")
        self.assertIn("escalated", p.stdout.splitlines()[-1])

    def test_failures_grouped(self):
        """`toolpool failures` groups a run's failed calls by tool, kind and message
        (numbers aside), the largest first, from the store and from the results file alike."""
        self.write_registry(EVAL_REGISTRY)
        calls = eval_calls(jobs=12)
        self.write_calls(calls)
        p = self.run_calls("fg", workers="2")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.write("results.jsonl", p.stdout)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        want = {}
        for r in lines:
            if not r["ok"]:
                key = (r["tool"], r["error"], re.sub(r"[0-9]+", "#", r["message"]))
                want.setdefault(key, []).append(r["id"])
        self.assertGreater(len(want), 3)
        for source in (["--store", self.path("fg")], ["results.jsonl"]):
            p = self.toolpool("failures", "--json", "--examples", "2", *source)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = [json.loads(l) for l in p.stdout.splitlines()]
            self.assertEqual({(g["tool"], g["error"], re.sub(r"[0-9]+", "#", g["message"])): g["count"] for g in got},
                             {k: len(v) for k, v in want.items()}, source)
            self.assertEqual([g["count"] for g in got], sorted((g["count"] for g in got), reverse=True))
            for g in got:
                ids = want[(g["tool"], g["error"], re.sub(r"[0-9]+", "#", g["message"]))]
                self.assertEqual(len(g["ids"]), min(2, len(ids)))
                self.assertTrue(set(g["ids"]) <= set(ids), g)
            if source[0] == "results.jsonl":  # a file's groups say where, by line
                order = [r["id"] for r in lines]
                for g in got:
                    self.assertEqual(g["ids"][0], order[g["first_line"] - 1])
        p = self.toolpool("failures", "--store", self.path("fg"), "--tool", "deny")
        self.assertEqual(p.returncode, 0, p.stderr)
        n = sum(len(v) for k, v in want.items() if k[0] == "deny")
        self.assertRegex(p.stdout, r"^%d failed calls in \d+ groups?\n" % n)
        self.assertIn("PermissionDenied (permanent), first ", p.stdout)
        # a line that is not a result is named; --since needs the store's times
        self.write("bad.jsonl", lines and json.dumps(lines[0]) + "\n[1]\n")
        p = self.toolpool("failures", "bad.jsonl")
        self.assertEqual(p.returncode, 2)
        self.assertIn("bad.jsonl:2: not a result line", p.stderr)
        p = self.toolpool("failures", "--since", "1h", "results.jsonl")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--since reads the store's record times", p.stderr)

    def test_a_resumed_runs_summary(self):
        """The summary of a rerun counts the retries and latency of what ran
        now, not of the calls served from their records."""
        self.write_registry(EVAL_REGISTRY)
        self.write_calls([{"id": "f%d" % i, "tool": "flaky", "args": {"ok_at": 3, "i": i}} for i in range(10)])
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("rs"), "--no-progress", "calls.jsonl")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("10 calls, 10 ok, 0 failed, 20 retries", p.stderr)
        self.assertIn("latency: p50", p.stderr)
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("rs"), "--no-progress", "calls.jsonl")
        self.assertIn("10 calls, 10 ok, 0 failed, 0 retries", p.stderr)
        self.assertIn("resumed: 10 recorded results served from", p.stderr)
        self.assertIn("(the retries and latency above are the 0 run now)", p.stderr)
        self.assertNotIn("latency:", p.stderr)

    def test_progress_lines_when_stderr_is_a_file(self):
        """Progress on stderr that is not a terminal: a line every 10 s, none with --progress none."""
        self.write_registry({"tools": [plugin_tool("sleep", timeout="30s"), plugin_tool("echo")]})
        self.write_calls([{"id": "s1", "tool": "sleep", "args": {"ms": 10600}}, {"id": "e1", "tool": "echo"}])
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("pg"), "calls.jsonl")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"(?m)^toolpool: progress: 1/2  0 failed, 1 running, 0 calls/s, ETA \S+ \(10s\)$")
        self.assertNotIn("\r", p.stderr)
        self.assertNotIn("[=", p.stderr)
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("pg"), "--progress", "nope", "calls.jsonl")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--progress: expected auto, bar, lines or none", p.stderr)

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
        b = [x for x in [json.loads(l) for l in p.stdout.splitlines()] if x["type"] == "call"]
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
        b = [x for x in [json.loads(l) for l in p.stdout.splitlines()] if x["type"] == "call"]
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


    # ---- repairable runs ----

    def repair_registry(self, with_nope=False):
        until = os.path.join(TEST_TOOLS, "until.sh")
        log = self.path("runs.log")
        reg = {
            "defaults": {"attempts": 1},
            "tools": [
                plugin_tool("echo"),
                {"name": "svc", "exec": [until, self.path("fixed"), log, "75"]},
                {"name": "perm", "exec": [until, self.path("fixed"), log, "77"]},
                {"name": "strict", "exec": [until, self.path("fixed"), log, "0"],
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
                {"name": "once", "exec": [until, self.path("fixed"), log, "hang"], "idempotent": False},
            ],
        }
        if with_nope:
            reg["tools"].append({"name": "nope", "exec": [until, self.path("fixed"), log, "0"]})
        self.write_registry(reg)

    def ran(self):
        """The call ids the exec tools ran, in order, since the last look."""
        log = self.path("runs.log")
        if not os.path.exists(log):
            return []
        with open(log) as f:
            ids = [l.strip() for l in f if l.strip()]
        os.unlink(log)
        return ids

    def results(self, p):
        return {json.loads(l)["id"]: json.loads(l) for l in p.stdout.splitlines()}

    def test_retry_failed_forget_and_refusals(self):
        self.repair_registry()
        calls = [
            {"id": "e1", "job": "j", "step": 1, "tool": "echo", "args": {"i": 1}},
            {"id": "s1", "job": "j", "step": 2, "tool": "svc", "args": {}},
            {"id": "p1", "job": "j", "step": 3, "tool": "perm", "args": {}},
            {"id": "u1", "job": "j", "step": 4, "tool": "nope", "args": {"x": 1}},
            {"id": "a1", "job": "j", "step": 5, "tool": "strict", "args": {"q": 5}},
            {"id": "k1", "job": "k", "step": 1, "tool": "svc", "args": {"k": 1}},
        ]
        self.write_calls(calls)
        p = self.run_calls("st")
        self.assertEqual(p.returncode, 1, p.stderr)
        r = self.results(p)
        self.assertEqual({i: (x["ok"] or x["error"]) for i, x in r.items()},
                         {"e1": True, "s1": "ServerError", "p1": "PermissionDenied", "u1": "UnknownTool",
                          "a1": "InvalidArguments", "k1": "ServerError"})
        self.assertEqual(sorted(self.ran()), ["k1", "p1", "s1"])
        # Refused calls are recorded: trace and the job's checkpoint see them.
        t = self.toolpool("trace", "--store", self.path("st"), "u1", "a1")
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertIn("UnknownTool", t.stdout)
        self.assertIn("InvalidArguments", t.stdout)
        cp = json.loads(self.toolpool("checkpoints", "show", "j", "--store", self.path("st"), "--json").stdout)
        # In the order they ended: a refusal ends as it comes, before the steps ahead of it have run.
        self.assertEqual(cp["calls"], ["u1", "a1", "e1", "s1", "p1"])

        # A plain rerun serves every recorded failure; the refusals are checked again (and refused again).
        p = self.run_calls("st")
        self.assertEqual(self.results(p), r)
        self.assertEqual(self.ran(), [])

        # The backend is fixed: only the transient failures run again; the rest are served.
        open(self.path("fixed"), "w").close()
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("st"), "-j", "2", "--no-progress",
                          "--retry-failed=transient", "calls.jsonl")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("done again: 2 recorded failures and refusals", p.stderr)
        r2 = self.results(p)
        self.assertEqual(sorted(self.ran()), ["k1", "s1"])
        self.assertEqual((r2["s1"]["ok"], r2["k1"]["ok"]), (True, True))
        self.assertEqual(r2["p1"], r["p1"])
        self.assertEqual(r2["e1"], r["e1"])
        # Kinds by name, and a tool's own kind is accepted with a word on stderr.
        p = self.run_calls("st", "--retry-failed=PermissionDenied,QuotaGone")
        self.assertIn("QuotaGone", p.stderr)
        self.assertEqual(self.ran(), ["p1"])
        self.assertTrue(self.results(p)["p1"]["ok"])
        # The job's message list names each call once, however often it ran.
        cp = json.loads(self.toolpool("checkpoints", "show", "j", "--store", self.path("st"), "--json").stdout)
        self.assertEqual(cp["calls"], ["u1", "a1", "e1", "s1", "p1"])

        # The registry is fixed: a recorded refusal is checked again and runs, with no flag.
        self.repair_registry(with_nope=True)
        p = self.run_calls("st")
        self.assertEqual(self.ran(), ["u1"])
        self.assertTrue(self.results(p)["u1"]["ok"])
        self.assertEqual(self.results(p)["a1"]["error"], "InvalidArguments")

        # forget: the next run does those calls again.
        f = self.toolpool("forget", "--store", self.path("st"), "s1", "p1")
        self.assertEqual(f.returncode, 0, f.stderr)
        self.assertIn("forgot 2 recorded results", f.stdout)
        self.run_calls("st")
        self.assertEqual(sorted(self.ran()), ["p1", "s1"])
        f = self.toolpool("forget", "--store", self.path("st"), "--job", "k")
        self.assertEqual(f.returncode, 0, f.stderr)
        self.assertEqual(self.toolpool("checkpoints", "show", "k", "--store", self.path("st")).returncode, 2)
        self.run_calls("st")
        self.assertEqual(self.ran(), ["k1"])
        # An id the store does not know: nothing is forgotten, exit 2.
        f = self.toolpool("forget", "--store", self.path("st"), "s1", "zz")
        self.assertEqual(f.returncode, 2)
        self.assertIn("no call zz is recorded", f.stderr)
        self.run_calls("st")
        self.assertEqual(self.ran(), [])
        self.assertEqual(self.toolpool("forget", "--store", self.path("st")).returncode, 2)
        # Bad --retry-failed lists are refused.
        p = self.run_calls("st", "--retry-failed=transient,,Timeout")
        self.assertEqual(p.returncode, 2)
        self.assertIn("an empty name", p.stderr)
        # A line the front refuses (a call with an id but no usable tool) is recorded too.
        self.write("bad.jsonl", '{"id": "b1", "job": "j", "step": 9, "tool": 5}\n{"id": "b2", "tool": 5}\n')
        p = self.run_calls("st", calls="bad.jsonl")
        self.assertEqual(p.returncode, 1, p.stderr)
        t = self.toolpool("trace", "--json", "--store", self.path("st"), "b1", "b2")
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertEqual([json.loads(l)["error"] for l in t.stdout.splitlines()], ["InvalidRequest"] * 2)

    def test_resolve_rerun_and_accept(self):
        """A call of a tool that is not idempotent, interrupted by a kill -9: resumed, it is
        Interrupted and escalated; resolve --accept keeps that, --rerun runs it again."""
        self.repair_registry()
        for name, decision in (("acc", "--accept"), ("rer", "--rerun")):
            self.write_calls([{"id": "o1", "job": "j", "step": 1, "tool": "once", "args": {"n": name}}])
            store = self.path(name)
            proc = subprocess.Popen([TOOLPOOL, "run", "-q", "-r", "tools.json", "-s", store, "-j", "1",
                                     "calls.jsonl"], cwd=self.tmp, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            for _ in range(3000):  # until the tool has started (its marker is committed before that)
                if os.path.exists(self.path("runs.log")):
                    break
                time.sleep(0.01)
            proc.kill()
            proc.wait()
            self.assertEqual(self.ran(), ["o1"])
            p = self.run_calls(name)
            r = self.results(p)["o1"]
            self.assertEqual((r["error"], r["escalated"]), ("Interrupted", True))
            esc = r["escalation"]
            open(self.path("fixed"), "w").close()
            res = self.toolpool("escalations", "resolve", esc, decision, "--store", store)
            self.assertEqual(res.returncode, 0, res.stderr)
            p = self.run_calls(name)
            r = self.results(p)["o1"]
            if decision == "--accept":
                self.assertIn("keeps its recorded result", res.stdout)
                self.assertEqual(r["error"], "Interrupted")
                self.assertEqual(self.ran(), [])
            else:
                self.assertIn("runs it again", res.stdout)
                self.assertTrue(r["ok"])
                self.assertEqual(self.ran(), ["o1"])
            os.unlink(self.path("fixed"))
        p = self.toolpool("escalations", "resolve", esc, "--rerun", "--accept", "--store", store)
        self.assertEqual(p.returncode, 2)


    # ---- inspection ----

    def test_stats_summary_json_and_trace(self):
        self.write_registry({
            "defaults": {"backoff": {"base": "5ms", "jitter": "none"}},
            "tools": [
                plugin_tool("echo"),
                plugin_tool("flaky", attempts=3),
                plugin_tool("custom", attempts=1),
                plugin_tool("sleep", timeout="100ms", attempts=2, fallback=["echo"]),
            ]})
        calls = ([{"id": "e%d" % i, "job": "a", "step": i, "tool": "echo", "args": {"i": i}} for i in range(1, 5)]
                 + [{"id": "f1", "job": "b", "step": 1, "tool": "flaky", "args": {"ok_at": 3}},
                    {"id": "f2", "job": "b", "step": 2, "tool": "flaky", "args": {"ok_at": 9}},
                    {"id": "q1", "job": "b", "step": 3, "tool": "custom", "args": {}},
                    {"id": "s1", "job": "c", "step": 1, "tool": "sleep", "args": {"ms": 3000}}])
        self.write_calls(calls)
        p = self.run_calls("st", "--summary-json", "summary.json")
        self.assertEqual(p.returncode, 1, p.stderr)
        with open(self.path("summary.json")) as f:
            summ = json.load(f)
        self.assertEqual((summ["calls"], summ["ok"], summ["failed"], summ["exit_status"]), (8, 6, 2, 1))
        self.assertEqual(summ["by_kind"], {"ServerError": 1, "other": 1})
        # retries: every attempt after a call's first, fallback hops included: f1 2, f2 2, s1 1 + the hop.
        self.assertEqual(summ["retries"], 6)
        self.assertEqual(summ["attempts"], 14)
        self.assertEqual(summ["resumed"], 0)

        st = self.toolpool("stats", "--store", self.path("st"), "--json")
        self.assertEqual(st.returncode, 0, st.stderr)
        rows = {r["tool"]: r for r in map(json.loads, st.stdout.splitlines())}
        self.assertEqual(sorted(rows), ["custom", "echo", "flaky", "sleep"])
        fl = rows["flaky"]
        self.assertEqual((fl["calls"], fl["ok"], fl["failed"], fl["attempts"], fl["retries"]), (2, 1, 1, 6, 4))
        self.assertEqual((fl["by_kind"], fl["by_class"]), ({"ServerError": 1}, {"transient": 1}))
        # A tool's own kind is counted under its own name.
        self.assertEqual(rows["custom"]["by_kind"], {"QuotaGone": 1})
        sl = rows["sleep"]
        self.assertEqual((sl["ok"], sl["timeouts"], sl["fallback_hops"], sl["attempts"], sl["retries"]),
                         (1, 2, 1, 3, 1))
        self.assertGreaterEqual(sl["latency_ms"]["max"], 200)
        for r in rows.values():
            lat = r["latency_ms"]
            self.assertTrue(lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"], r)
            self.assertEqual(r["queue_wait_ms"]["calls"], r["calls"])
            self.assertGreaterEqual(r["queue_wait_ms"]["p50"], 0)
        one = self.toolpool("stats", "--store", self.path("st"), "--tool", "echo", "--json")
        self.assertEqual([json.loads(l)["calls"] for l in one.stdout.splitlines()], [4])
        text = self.toolpool("stats", "--store", self.path("st"), "--tool", "flaky").stdout
        self.assertIn("flaky: 2 calls, 1 ok, 1 failed; 6 attempts, 4 retries", text)
        self.assertIn("latency: p50 ", text)
        self.assertIn("queue wait: p50 ", text)
        # --since: everything was recorded within the last hour, nothing in the last microsecond ago + a bit.
        self.assertEqual(len(self.toolpool("stats", "--store", self.path("st"), "--since", "1h",
                                           "--json").stdout.splitlines()), 4)
        time.sleep(0.05)
        self.assertEqual(self.toolpool("stats", "--store", self.path("st"), "--since", "10ms",
                                       "--json").stdout, "")
        bad = self.toolpool("stats", "--store", self.path("st"), "--since", "soon")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--since", bad.stderr)

        # trace: id and job, each attempt's start, where the time went; --json; results only.
        self.write("results.jsonl", p.stdout)
        tr = self.toolpool("trace", "results.jsonl")
        self.assertEqual(tr.returncode, 0, tr.stderr)
        self.assertIn("call f1, job b, step 1\nflaky(args=", tr.stdout)
        self.assertRegex(tr.stdout, r"attempt 2 → ServerError after [0-9.]+s   \(backoff 0\.01s\)   \[at \+[0-9.]+s\]")
        self.assertIn("from its turn: attempts ", tr.stdout)
        rec = {json.loads(l)["id"]: json.loads(l) for l in p.stdout.splitlines()}
        t = rec["f1"]["trace"]
        # Attempts start in order, each after the one before and its backoff.
        for a, b in zip(t, t[1:]):
            self.assertGreaterEqual(b["start_ms"] + 0.001, a["start_ms"] + a["duration_ms"] + a["backoff_ms"])
        js = self.toolpool("trace", "--json", "--store", self.path("st"), "f1", "q1")
        self.assertEqual([json.loads(l) for l in js.stdout.splitlines()], [rec["f1"], rec["q1"]])
        bad = self.toolpool("trace", "calls.jsonl")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("calls.jsonl:1: not a result record: found a call", bad.stderr)
        self.assertEqual(bad.stdout, "")
        bad = self.toolpool("trace", "summary.json")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("a run summary", bad.stderr)
        self.write("junk.txt", "hello\n")
        bad = self.toolpool("trace", "junk.txt")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("junk.txt:1: not a result record: found text that is not JSON", bad.stderr)

    def test_progress_bar_on_a_terminal(self):
        import pty
        self.write_registry({"tools": [plugin_tool("sleep")]})
        self.write_calls([{"id": "c%d" % i, "tool": "sleep", "args": {"ms": 150}} for i in range(8)])
        try:
            master, slave = pty.openpty()
        except OSError as e:  # a container or chroot without /dev/pts
            self.skipTest("no pseudo-terminal here: %s" % e)
        proc = subprocess.Popen([TOOLPOOL, "run", "-r", "tools.json", "-s", self.path("st"), "-j", "2",
                                 "calls.jsonl"], cwd=self.tmp, stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        self.assertEqual(proc.wait(timeout=60), 0)
        text = out.decode(errors="replace")
        # done/total, failures, calls/s and an ETA, drawn over itself.
        self.assertRegex(text, r"\r\[[=> ]{30}\] \d+/8  0 failed, \d+ running, \d+ calls/s, ETA \S+")
        self.assertIn("toolpool: 8 calls, 8 ok", text)
        # Not a terminal: no bar.
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("st2"), "-j", "2", "calls.jsonl")
        self.assertNotIn("ETA", p.stderr)


    # ---- smaller things ----

    def test_fallback_hop_args_and_validation(self):
        strict_q = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                    "additionalProperties": False}
        cat = os.path.join(TEST_TOOLS, "cat.sh")  # answers with the args it was given
        reg = {"tools": [
            # The call's args ({"q": ...}) do not fit the first hop; the second maps them.
            plugin_tool("flaky", attempts=1, fallback=["cache_strict", {"tool": "cache", "args": {"query": "/q"}}],
                        parameters={"type": "object"}),
            {"name": "cache_strict", "exec": [cat], "parameters": strict_q},
            {"name": "cache", "exec": [cat], "parameters": strict_q},
            plugin_tool("deny", attempts=1, fallback_on=["permanent"],
                        fallback=[{"tool": "cache", "args": {"query": "/missing"}}]),
        ]}
        self.write_registry(reg)
        self.write_calls([{"id": "f1", "tool": "flaky", "args": {"ok_at": 9, "q": "refunds"}},
                          {"id": "d1", "tool": "deny", "args": {"q": "x"}}])
        p = self.run_calls("st", workers="1")
        r = self.results(p)
        f1 = r["f1"]
        self.assertTrue(f1["ok"], f1)
        self.assertEqual((f1["served_by"], f1["degraded"]), ("cache", True))
        self.assertEqual(f1["result"], {"query": "refunds"})
        self.assertEqual([(t["tool"], t["outcome"]) for t in f1["trace"]],
                         [("flaky", "ServerError"), ("cache_strict", "InvalidArguments"), ("cache", "ok")])
        # A pointer that finds nothing: InvalidArguments on that hop, and the chain (here, its end) says so.
        d1 = r["d1"]
        self.assertEqual(d1["error"], "InvalidArguments")
        self.assertIn("nothing at /missing", d1["message"])
        self.assertEqual([t["outcome"] for t in d1["trace"]], ["PermissionDenied", "InvalidArguments"])
        # Bad hop objects are refused, naming the place.
        for hop, want in (({"tool": "cache", "args": {"query": "q"}}, "expected a JSON Pointer"),
                          ({"tool": "cache", "argz": {}}, "unknown key"),
                          ({"args": {}}, 'missing required key "tool"')):
            reg["tools"][0]["fallback"] = [hop]
            self.write_registry(reg)
            p = self.run_calls("bad", workers="1")
            self.assertEqual(p.returncode, 2)
            self.assertIn("tools[0] (flaky).fallback[0]", p.stderr)
            self.assertIn(want, p.stderr)

    def test_late_step_is_reported(self):
        self.write_registry({"tools": [plugin_tool("echo")]})
        proc = subprocess.Popen([TOOLPOOL, "run", "-r", "tools.json", "-s", self.path("st"), "-j", "1",
                                 "--no-progress", "--summary-json", "summary.json", "-"], cwd=self.tmp,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps({"id": "s2", "job": "j", "step": 2, "tool": "echo", "args": {}}) + "\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())   # step 2 has run
        self.assertEqual(first["id"], "s2")
        proc.stdin.write(json.dumps({"id": "s1", "job": "j", "step": 1, "tool": "echo", "args": {}}) + "\n")
        proc.stdin.write(json.dumps({"id": "s3", "job": "j", "step": 3, "tool": "echo", "args": {}}) + "\n")
        proc.stdin.close()
        rest = proc.stdout.read()
        err = proc.stderr.read()
        self.assertEqual(proc.wait(), 0, err)
        self.assertEqual(sorted(json.loads(l)["id"] for l in rest.splitlines()), ["s1", "s3"])
        self.assertIn("line 2: call s1 (job j, step 1) came after step 2 of its job had started", err)
        self.assertIn("late steps: 1 call came after a later step", err)
        with open(self.path("summary.json")) as f:
            self.assertEqual(json.load(f)["late_steps"], 1)
        # In order, or forgotten and done again: nothing to say.
        f = self.toolpool("forget", "--store", self.path("st"), "s1", "s2")
        self.assertEqual(f.returncode, 0, f.stderr)
        self.write_calls([{"id": "s%d" % i, "job": "j", "step": i, "tool": "echo", "args": {}} for i in (1, 2, 3)])
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("st"), "--no-progress", "calls.jsonl")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("came after", p.stderr)
        self.assertNotIn("late steps", p.stderr)


    def test_ordered(self):
        """--ordered: a file whose jobs' steps are out of order runs each job in step order,
        with no late step, and messages name the user's lines."""
        self.write_registry({"tools": [plugin_tool("echo")]})
        calls = [{"id": "a3", "job": "a", "step": 3, "tool": "echo", "args": {}},
                 {"id": "b1", "job": "b", "step": 1, "tool": "echo", "args": {}},
                 {"id": "a1", "job": "a", "step": 1, "tool": "echo", "args": {}}]
        # Past the window of calls held at once, so that without --ordered a1 comes after a3 ran.
        filler = [{"id": "f%d" % i, "tool": "echo", "args": {}} for i in range(1500)]
        lines = [json.dumps(c) for c in calls[:2] + filler + calls[2:]] + ['{"id": "bad", "tool": "nope"}']
        self.write("calls.jsonl", "\n".join(lines) + "\n")
        plain = self.run_calls("plain", "--no-progress", workers="1")
        self.assertIn("came after step 3 of its job had started", plain.stderr)
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("ord"), "-j", "1", "--no-progress",
                          "--ordered", "calls.jsonl")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("came after", p.stderr)
        ids = [json.loads(l)["id"] for l in p.stdout.splitlines()]
        self.assertEqual(len(ids), len(lines))
        self.assertLess(ids.index("a1"), ids.index("a3"))
        bad = self.results(p)["bad"]
        self.assertTrue(bad["message"].startswith("line %d: unknown tool" % len(lines)), bad["message"])
        # A pipe cannot be read twice.
        p = self.toolpool("run", "-r", "tools.json", "-s", self.path("ord"), "--ordered", "-",
                          stdin="\n".join(lines[:3]) + "\n")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--ordered", p.stderr)

    def test_demo_fallback_maps_its_args(self):
        """The bundled demo's kb_cache takes "query"; search_kb's fallback entry maps "q" to it."""
        p = self.toolpool("demo")
        self.assertIn("fallback kb_cache attempt 1 → ok", p.stdout, p.stdout + p.stderr)
        self.assertIn("answered by fallback kb_cache: (stale)", p.stdout)

    def test_exec_working_directory(self):
        os.makedirs(self.path("reg", "data"))
        pwd = ["sh", "-c", "cat >/dev/null; printf '{\"pwd\": \"%s\"}' \"$(pwd)\""]
        reg = {"tools": [{"name": "here", "exec": pwd},
                         {"name": "data", "exec": pwd, "cwd": "data"},
                         {"name": "limited", "exec": pwd, "cwd": "data", "limits": {"files": 64}},
                         {"name": "abs", "exec": pwd, "cwd": self.tmp}]}
        self.write_registry(reg, os.path.join("reg", "tools.json"))
        self.write_calls([{"id": t["name"], "tool": t["name"]} for t in reg["tools"]])
        # run from another directory: the default is the registry's folder, not run's own
        p = self.run_calls("st", registry=self.path("reg", "tools.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        got = {i: r["result"]["pwd"] for i, r in self.results(p).items()}
        real = os.path.realpath
        self.assertEqual({i: real(v) for i, v in got.items()},
                         {"here": real(self.path("reg")), "data": real(self.path("reg", "data")),
                          "limited": real(self.path("reg", "data")), "abs": real(self.tmp)})
        for tool, want in (({"name": "x", "exec": pwd, "cwd": "nowhere"}, "nowhere is not a directory"),
                           ({"name": "x", "plugin": {"path": PLUGIN}, "cwd": "data"}, "only an exec tool")):
            self.write_registry({"tools": [tool]}, os.path.join("reg", "tools.json"))
            p = self.run_calls("bad", registry=self.path("reg", "tools.json"))
            self.assertEqual(p.returncode, 2)
            self.assertIn("tools[0] (x).cwd", p.stderr)
            self.assertIn(want, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
