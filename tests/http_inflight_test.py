#!/usr/bin/env python3
"""Many http calls in flight in one worker, end to end: real `toolpool run`
processes against tests/http_server.py (a fresh server for each test). Each
call's id goes in its request's ?key=, so the server's log says which calls
reached it, when, and how many times.

- 500 calls of a 100 ms endpoint at -j 2 overlap (the server sees at least 64
  at once), end well within the 25 s one call a worker would take, and each
  answer is its own call's although they come back out of order.
- "max_in_flight" caps what one worker holds: 4 at -j 2 is never more than 8
  requests at once; 1 and 1024 are taken, 0, 1025 and the key on an exec tool
  are refused.
- A call's timeout in a busy worker ends that call alone: the hung calls end
  Timeout after their 1 s, the quick calls beside them end ok on their first
  attempt, and the worker is never replaced.
- kill -9 of a worker holding 150 calls: the idempotent tool's calls are
  retried and end ok; the others end Interrupted (escalated) after their one
  WorkerCrashed attempt, and reached the server once.
- A call cancelled while it runs (serve's DELETE /v1/calls/ID) is ended by its
  worker alone: Cancelled at once, while the calls beside it run on to ok in
  the same worker.
- kill -9 of the supervisor with 100 calls in flight, then the same command
  again on the same store: one result line per call, nothing recorded before
  the kill sent again, no call of a tool that is not idempotent sent twice, and
  those that were in flight end Interrupted, escalated.
- A rate limit spaces the attempts' starts 50 ms apart with many in flight.
- http and MCP calls in one worker: an http call runs on the one worker
  that holds an MCP session, and MCP calls beside http calls are answered
  while the http calls run.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import collections
import http.client
import json
import os
import socket
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serveutil  # noqa: E402

BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
SERVER = os.path.join(HERE, "http_server.py")


class HttpServer:
    """tests/http_server.py as a child: its port, its control commands."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError("http_server.py did not start (first line %r)" % line)
        self.url = "http://127.0.0.1:%d" % int(line)
        self.lock = threading.Lock()

    def cmd(self, c):
        with self.lock:
            self.proc.stdin.write(c + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("http_server.py is gone")
        return line

    def stats(self):
        return json.loads(self.cmd("stats"))

    def log(self):
        return json.loads(self.cmd("log"))

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def sent(log):
    """How many requests the server got for each key."""
    return collections.Counter(e["key"] for e in log)


children = serveutil.workers


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rindex(")") + 2] != "Z"


def wait_for(cond, timeout, step=0.02):
    """Polls cond() until it is true or timeout s have passed; its last value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


def call(cid, tool, ms):
    return {"id": cid, "tool": tool, "args": {"ms": ms, "key": cid}}


class Rig:
    """A temporary folder, a test server, and `toolpool run`s in that folder."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="tp-inflight-")
        self.tmp = self._tmp.name
        self.server = HttpServer()
        self.procs = []

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.server.close()
        self._tmp.cleanup()

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def tool(self, name, path="/slow", **policy):
        t = {"name": name, "http": {"url": self.server.url + path, "method": "GET", "query": ["ms", "key"]},
             "parameters": {"type": "object", "properties": {"ms": {"type": "integer"}, "key": {"type": "string"}}},
             "timeout": "20s"}
        t.update(policy)
        return t

    def write_registry(self, tools):
        # Short backoffs; the tool breaker never trips (whole batches fail on purpose here).
        reg = {"defaults": {"backoff": {"base": "20ms", "max": "100ms"},
                            "breaker": {"tool": {"min_calls": 1000000}}},
               "tools": tools}
        with open(self.path("tools.json"), "w") as f:
            json.dump(reg, f, indent=1)

    def write_calls(self, calls):
        with open(self.path("calls.jsonl"), "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in calls))

    def start(self, j, out="out.jsonl", store="st", extra=()):
        """`toolpool run` on tools.json and calls.jsonl, its results to out, its stderr to out.err."""
        err = open(self.path(out + ".err"), "w")
        p = subprocess.Popen([TOOLPOOL, "run", "-q", "-r", "tools.json", "-s", store, "-j", str(j), "-o", out,
                              *extra, "calls.jsonl"], cwd=self.tmp, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        p.out = out
        p.t0 = time.monotonic()
        self.procs.append(p)
        return p

    def finish(self, p, timeout=60):
        """Waits for p: (exit status, stderr, wall seconds)."""
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = "killed after %d s" % timeout
        wall = time.monotonic() - p.t0
        with open(self.path(p.out + ".err")) as f:
            err = f.read()
        return rc, err, wall

    def lines(self, out="out.jsonl"):
        try:
            with open(self.path(out)) as f:
                return [json.loads(ln) for ln in f if ln.strip()]
        except FileNotFoundError:
            return []

    def recorded(self, ids, store="st"):
        """The records the store holds for ids (toolpool trace --json --store), by id."""
        p = subprocess.run([TOOLPOOL, "trace", "--json", "--store", store, *ids], cwd=self.tmp,
                           capture_output=True, text=True, timeout=60)
        return {r["id"]: r for r in map(json.loads, p.stdout.splitlines())}


class Case(unittest.TestCase):
    def setUp(self):
        self.rig = Rig()
        self.addCleanup(self.rig.close)

    def check_rc(self, rc, want, err):
        if rc == 2 and "max_in_flight: unknown key" in err:
            self.fail('this build does not know "max_in_flight" (the registry is refused):\n' + err[-2000:])
        for bad in ("Sanitizer", "runtime error:"):
            self.assertNotIn(bad, err)
        self.assertEqual(rc, want, "toolpool run's exit status; its stderr:\n" + err[-3000:])

    def by_id(self, lines, n):
        """The result lines by id, checking there are n, one per id."""
        counts = collections.Counter(r["id"] for r in lines)
        self.assertEqual([i for i, c in counts.items() if c > 1], [], "ids with more than one result line")
        self.assertEqual(len(lines), n)
        return {r["id"]: r for r in lines}

    def failures(self, res, ids):
        return {i: (res[i].get("error"), res[i].get("message")) for i in ids if not res[i].get("ok")}

    def check_spacing(self, starts, n, gap):
        """n request starts about gap s apart: never two at once, none bunched, the whole span kept."""
        self.assertEqual(len(starts), n)
        starts = sorted(starts)
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        shown = ", ".join("%.0f" % (g * 1000) for g in gaps)
        self.assertGreaterEqual(starts[-1] - starts[0], (n - 1) * gap * 0.9, "the starts' span (gaps ms: %s)" % shown)
        self.assertGreaterEqual(min(gaps), gap * 0.5, "two starts too close (gaps ms: %s)" % shown)
        self.assertGreaterEqual(statistics.median(gaps), gap * 0.8, "the gaps ms: %s" % shown)
        self.assertLessEqual(statistics.median(gaps), gap * 1.5, "the gaps ms: %s" % shown)


class ManyInFlight(Case):
    def test_1_500_calls_overlap(self):
        """500 calls of /slow?ms=50..150 at -j 2, max_in_flight 64: all ok, each its own
        answer, at least 64 at once at the server, in far less than 500 * 0.1 / 2 s."""
        rig = self.rig
        rng = random.Random(500)
        calls = [call("c%d" % i, "slow", rng.randint(50, 150)) for i in range(500)]
        rig.write_registry([rig.tool("slow", max_in_flight=64)])
        rig.write_calls(calls)
        rc, err, wall = rig.finish(rig.start(j=2))
        self.check_rc(rc, 0, err)
        res = self.by_id(rig.lines(), 500)
        self.assertEqual(self.failures(res, res), {})
        # Out of order, matched by sequence: each result is the one its own request got.
        wrong = [c["id"] for c in calls if res[c["id"]]["result"] != {"slept_ms": c["args"]["ms"]}]
        self.assertEqual(wrong, [])
        self.assertEqual([i for i, r in res.items() if r["attempts"] != 1], [])
        st = rig.server.stats()
        self.assertEqual(st["paths"].get("/slow"), 500)
        self.assertGreaterEqual(st["max_active"].get("/slow", 0), 64, "requests in progress at once")
        self.assertLess(wall, 10.0)

    def test_2_max_in_flight_is_a_cap(self):
        """max_in_flight 4 at -j 2: never more than 8 requests at once, and more than
        one a worker."""
        rig = self.rig
        rig.write_registry([rig.tool("slow", max_in_flight=4)])
        rig.write_calls([call("c%d" % i, "slow", 150) for i in range(60)])
        rc, err, wall = rig.finish(rig.start(j=2))
        self.check_rc(rc, 0, err)
        res = self.by_id(rig.lines(), 60)
        self.assertEqual(self.failures(res, res), {})
        most = rig.server.stats()["max_active"].get("/slow", 0)
        self.assertLessEqual(most, 8, "requests in progress at once with 4 a worker at -j 2")
        self.assertGreater(most, 2, "requests in progress at once: one a worker, as without max_in_flight")

    def test_7_max_in_flight_bounds(self):
        """1 and 1024 are taken; 0, 1025, a string, and the key on an exec tool are
        refused at load, naming it."""
        rig = self.rig
        for n in (1, 1024):
            rig.write_registry([rig.tool("slow", max_in_flight=n)])
            rig.write_calls([call("c1", "slow", 1)])
            rc, err, _ = rig.finish(rig.start(j=1, store="st-%d" % n))
            self.check_rc(rc, 0, err)
        bad = [rig.tool("slow", max_in_flight=0), rig.tool("slow", max_in_flight=1025),
               rig.tool("slow", max_in_flight="8"),
               {"name": "slow", "exec": ["/bin/cat"], "max_in_flight": 8}]
        for i, t in enumerate(bad):
            rig.write_registry([t])
            rc, err, _ = rig.finish(rig.start(j=1, store="bad-%d" % i))
            self.assertEqual(rc, 2, "registry %s: %s" % (json.dumps(t), err))
            self.assertIn("max_in_flight", err)
            self.assertNotIn("unknown key", err, "refused, but as a key this build does not know")
            self.assertEqual(rig.server.stats()["requests"], 2, "a refused registry ran nothing")


class WithMcp(Case):
    """http and MCP calls in one worker (-j 1): tests/mcp_tiny_server.py
    imported beside an http tool of the test server."""

    def registry(self):
        rig = self.rig
        reg = {"defaults": {"backoff": {"base": "20ms", "max": "100ms"}},
               "tools": [rig.tool("slow", max_in_flight=64)],
               "mcp_servers": {"tiny": {"command": [sys.executable, os.path.join(HERE, "mcp_tiny_server.py")],
                                        "instances": 1, "max_in_flight": 64}}}
        with open(rig.path("tools.json"), "w") as f:
            json.dump(reg, f)

    def test_9a_an_http_call_after_an_mcp_call_runs(self):
        """An MCP call, then an http call, one job, -j 1: the one worker holds
        the MCP session when the http call comes, and runs it."""
        # Fails if http calls go only to workers holding no MCP session: with
        # every worker holding one, the http call never runs and run never ends.
        rig = self.rig
        self.registry()
        rig.write_calls([{"id": "m1", "tool": "tiny.echo", "args": {"text": "x"}, "job": "j", "step": 1},
                         dict(call("h1", "slow", 10), job="j", step=2)])
        rc, err, wall = rig.finish(rig.start(j=1), timeout=30)
        self.check_rc(rc, 0, err)
        res = self.by_id(rig.lines(), 2)
        self.assertEqual(self.failures(res, res), {})
        self.assertLess(wall, 10)

    def test_9b_mcp_calls_beside_http_calls_in_one_worker(self):
        """-j 1: an MCP call starts the session, then eight http calls of 3 s
        and 20 echoes of the MCP server run in the one worker side by side:
        the echoes end ok while the http calls still run, the http calls ok
        after their 3 s."""
        # Fails if the worker's wait for its http transfers leaves the MCP
        # servers' pipes unread: the echoes' answers sit in the pipe until the
        # last http call ends, 3 s on.
        rig = self.rig
        self.registry()
        calls = [{"id": "w", "tool": "tiny.echo", "args": {"text": "warm"}}]
        calls += [call("h%d" % i, "slow", 3000) for i in range(8)]
        calls += [{"id": "m%d" % i, "tool": "tiny.echo", "args": {"text": "e%d" % i}} for i in range(20)]
        rig.write_calls(calls)
        rc, err, wall = rig.finish(rig.start(j=1), timeout=60)
        self.check_rc(rc, 0, err)
        res = self.by_id(rig.lines(), 29)
        self.assertEqual(self.failures(res, res), {})
        for i in range(8):
            self.assertGreaterEqual(res["h%d" % i]["duration_ms"], 2900)
        for i in range(20):
            r = res["m%d" % i]
            self.assertEqual(r["result"]["structuredContent"], {"text": "e%d" % i})
            t = r["trace"][-1]
            self.assertLess(t["start_ms"] + t["duration_ms"], 2500, "echo m%d ended after the http calls" % i)
        self.assertLess(wall, 15)


class BusyWorkerTimeout(Case):
    """3 calls of /hang (timeout 1 s, 1 attempt) ahead of 100 quick calls, all on
    one worker (-j 1), max_in_flight left at its default. One run for both tests."""

    shared = None

    def setUp(self):
        pass  # the class's rig, not one a test

    @classmethod
    def setUpClass(cls):
        rig = Rig()
        cls.rig_shared = rig
        hangs = [call("h%d" % i, "hang", 0) for i in range(3)]
        quick = [call("q%d" % i, "quick", 20) for i in range(100)]
        rig.write_registry([rig.tool("hang", path="/hang", timeout="1s", attempts=1), rig.tool("quick")])
        rig.write_calls(hangs + quick)
        p = rig.start(j=1)
        workers = set()

        def watch():
            while p.poll() is None:
                workers.update(children(p.pid))
                time.sleep(0.01)
        w = threading.Thread(target=watch)
        w.start()
        rc, err, wall = rig.finish(p)
        w.join()
        cls.shared = {"rc": rc, "err": err, "wall": wall, "lines": rig.lines(), "log": rig.server.log(),
                   "workers": workers, "hangs": [c["id"] for c in hangs], "quick": [c["id"] for c in quick]}

    @classmethod
    def tearDownClass(cls):
        cls.rig_shared.close()

    def test_3a_timeout_ends_that_call_alone(self):
        """The hung calls end Timeout after about 1 s; the quick ones all ok on their
        first attempt; no WorkerCrashed anywhere; the one worker was never replaced."""
        r = self.shared
        self.check_rc(r["rc"], 1, r["err"])
        res = self.by_id(r["lines"], 103)
        for h in r["hangs"]:
            self.assertEqual((res[h]["error"], res[h]["class"], res[h]["attempts"]), ("Timeout", "transient", 1), h)
            took = res[h]["trace"][0]["duration_ms"] / 1000
            self.assertTrue(0.9 <= took <= 1.6, "%s timed out after %.3f s, not about 1 s" % (h, took))
        self.assertEqual(self.failures(res, r["quick"]), {})
        self.assertEqual([q for q in r["quick"] if res[q]["attempts"] != 1], [])
        crashed = [i for i, x in res.items()
                   if x.get("error") == "WorkerCrashed" or any(t["outcome"] == "WorkerCrashed" for t in x["trace"])]
        self.assertEqual(crashed, [])
        self.assertEqual(len(r["workers"]), 1, "worker pids seen during the run: %s" % sorted(r["workers"]))
        self.assertEqual(sent(r["log"]), collections.Counter(r["hangs"] + r["quick"]), "each call sent once")

    def test_3b_quick_calls_run_beside_the_hung_ones(self):
        """The worker holds the hung calls and the quick ones at once: the hangs start
        together, and the quick calls start while the first hang waits for its timeout."""
        r = self.shared
        self.check_rc(r["rc"], 1, r["err"])
        start = {e["key"]: e["start"] for e in r["log"]}
        self.assertEqual(sorted(start), sorted(r["hangs"] + r["quick"]))
        first = min(start[h] for h in r["hangs"])
        self.assertLess(max(start[h] for h in r["hangs"]) - first, 0.5, "the hung calls started one after another")
        beside = [q for q in r["quick"] if first <= start[q] < first + 0.9]
        self.assertGreaterEqual(len(beside), 90, "quick calls started while the first hang was in progress")


class Crashes(Case):
    def test_4_worker_killed_holding_150_calls(self):
        """-j 1, max_in_flight 128: 100 calls of an idempotent tool and 50 of one that is
        not, all in flight (/slow?ms=3000), then kill -9 of the worker."""
        rig = self.rig
        slow = ["s%d" % i for i in range(100)]
        once = ["o%d" % i for i in range(50)]
        rig.write_registry([rig.tool("slow", max_in_flight=128),
                            rig.tool("once", max_in_flight=128, idempotent=False)])
        rig.write_calls([call(i, "slow", 3000) for i in slow] + [call(i, "once", 3000) for i in once])
        p = rig.start(j=1)

        def in_progress():
            return sum(1 for e in rig.server.log() if e["end"] is None)
        n = wait_for(lambda: p.poll() is not None or in_progress() >= 150, 15)
        if p.poll() is not None:
            rc, err, _ = rig.finish(p)
            self.check_rc(rc, 1, err)
            self.fail("toolpool run ended before its calls were in flight:\n" + err[-2000:])
        self.assertTrue(n, "the server saw %d requests in progress at once, not 150" % in_progress())
        kids = children(p.pid)
        self.assertEqual(len(kids), 1, "the workers of a -j 1 run: %s" % sorted(kids))
        os.kill(kids.pop(), signal.SIGKILL)
        rc, err, _ = rig.finish(p)
        self.check_rc(rc, 1, err)
        res = self.by_id(rig.lines(), 150)
        got = sent(rig.server.log())
        # The idempotent tool's calls: retried after the crash, ok on a second attempt.
        self.assertEqual(self.failures(res, slow), {})
        first = {i: (res[i]["attempts"], res[i]["trace"][0]["outcome"]) for i in slow}
        self.assertEqual({i: v for i, v in first.items() if v != (2, "WorkerCrashed")}, {},
                         "calls not retried once after a WorkerCrashed attempt (attempts, first outcome)")
        self.assertEqual({i: got[i] for i in slow if got[i] != 2}, {}, "idempotent calls not sent twice")
        # The other tool's: Interrupted after one WorkerCrashed attempt, escalated, never sent again.
        ended = {i: (res[i]["ok"], res[i].get("error"), res[i]["attempts"], res[i]["trace"][0]["outcome"],
                     res[i]["escalated"]) for i in once}
        self.assertEqual({i: v for i, v in ended.items() if v != (False, "Interrupted", 1, "WorkerCrashed", True)},
                         {}, "non-idempotent calls (ok, error, attempts, first outcome, escalated)")
        self.assertEqual({i: got[i] for i in once if got[i] != 1}, {}, "non-idempotent calls sent other than once")

    def test_5_supervisor_killed_then_rerun(self):
        """-j 2, max_in_flight at its default: 40 quick calls end, 100 slow ones are in
        flight (half of them of a tool that is not idempotent), kill -9 of the
        supervisor, then the same command again."""
        rig = self.rig
        quick = ["qs%d" % i for i in range(20)] + ["qo%d" % i for i in range(20)]
        fs = ["fs%d" % i for i in range(50)]
        fo = ["fo%d" % i for i in range(50)]
        tool = {"qs": "slow", "qo": "once", "fs": "slow", "fo": "once"}
        calls = [call(i, tool[i[:2]], 5) for i in quick]
        calls += [call(i, tool[i[:2]], 3000) for pair in zip(fs, fo) for i in pair]
        ids = [c["id"] for c in calls]
        once = [i for i in ids if tool[i[:2]] == "once"]
        rig.write_registry([rig.tool("slow"), rig.tool("once", idempotent=False)])
        rig.write_calls(calls)
        p = rig.start(j=2)

        def ready():
            log = rig.server.log()
            done = {e["key"] for e in log if e["end"] is not None}
            busy = {e["key"] for e in log if e["end"] is None}
            return set(quick) <= done and set(fs + fo) <= busy
        ok = wait_for(lambda: p.poll() is not None or ready(), 15)
        if p.poll() is not None:
            rc, err, _ = rig.finish(p)
            self.check_rc(rc, 1, err)
            self.fail("toolpool run ended before the kill:\n" + err[-2000:])
        self.assertTrue(ok, "the quick calls did not end with the 100 slow ones in progress: %d in progress"
                        % sum(1 for e in rig.server.log() if e["end"] is None))
        time.sleep(0.3)  # the quick calls' commits (a group commit window is 20 ms at most)
        workers = children(p.pid)
        p.kill()
        p.wait()
        self.assertTrue(wait_for(lambda: not any(alive(w) for w in workers), 5), "workers outlived their supervisor")
        at_kill = sent(rig.server.log())
        before = rig.recorded(ids)
        self.assertTrue(before, "nothing was recorded before the kill")
        self.assertEqual(sorted(set(before) & set(fs + fo)), [], "calls still in progress at the server were recorded")

        p = rig.start(j=2, out="final.jsonl", extra=["--summary-json", "summary.json"])
        rc, err, _ = rig.finish(p)
        self.check_rc(rc, 1, err)
        res = self.by_id(rig.lines("final.jsonl"), len(ids))
        self.assertEqual(sorted(res), sorted(ids))
        got = sent(rig.server.log())
        # Nothing recorded before the kill ran again; the rerun wrote its record.
        self.assertEqual({i: (at_kill[i], got[i]) for i in before if got[i] != at_kill[i]}, {},
                         "recorded calls sent again (before, after)")
        for i, r in before.items():
            self.assertEqual((res[i]["ok"], res[i].get("result"), res[i].get("error")),
                             (r["ok"], r.get("result"), r.get("error")), i)
        # No call of the tool that is not idempotent reached the server twice.
        self.assertEqual({i: got[i] for i in once if got[i] > 1}, {})
        # Those in flight at the kill (sent, not recorded) end Interrupted, escalated.
        in_flight = {i for i in once if at_kill[i] == 1 and i not in before}
        self.assertEqual(sorted(set(fo) - in_flight), [], "non-idempotent slow calls not in flight at the kill")
        ended = {i: (res[i].get("error"), res[i].get("class"), res[i].get("escalated")) for i in in_flight}
        self.assertEqual({i: v for i, v in ended.items() if v != ("Interrupted", "guard", True)}, {},
                         "in flight at the kill (error, class, escalated)")
        # The idempotent ones in flight simply ran again.
        self.assertEqual(self.failures(res, fs), {})
        self.assertEqual({i: got[i] for i in fs if got[i] != 2}, {})
        with open(rig.path("summary.json")) as f:
            self.assertEqual(json.load(f)["resumed"], len(before))


class RateLimit(Case):
    def rate_run(self, ms, **policy):
        rig = self.rig
        rig.write_registry([rig.tool("paced", rate={"calls": 20, "per": "1s", "burst": 1}, **policy)])
        rig.write_calls([call("r%d" % i, "paced", ms) for i in range(20)])
        rc, err, wall = rig.finish(rig.start(j=2))
        self.check_rc(rc, 0, err)
        res = self.by_id(rig.lines(), 20)
        self.assertEqual(self.failures(res, res), {})
        self.assertGreaterEqual(wall, 0.9)
        self.check_spacing([e["start"] for e in rig.server.log()], 20, 0.05)
        return rig.server.stats()["max_active"].get("/slow", 0)

    def test_6_rate_spacing_with_many_in_flight(self):
        """rate 20/s, burst 1, max_in_flight 64, calls of 400 ms: the starts stay 50 ms
        apart while about 8 are in progress at once."""
        most = self.rate_run(400, max_in_flight=64)
        self.assertGreaterEqual(most, 4, "requests in progress at once")

    def test_6b_rate_spacing_of_quick_calls(self):
        """The same rate on calls of 1 ms, max_in_flight at its default: 50 ms apart."""
        self.rate_run(1)


class Cancel(Case):
    def test_8_cancel_ends_that_call_alone(self):
        """serve -j 1: a hung call among 20 slow ones in one worker; DELETE of the hung
        one answers Cancelled at once, the slow ones end ok on their first attempt,
        and the worker is the same process throughout."""
        rig = self.rig
        rig.write_registry([rig.tool("slow"), rig.tool("hang", path="/hang")])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        err = open(rig.path("serve.err"), "w")
        p = subprocess.Popen([TOOLPOOL, "serve", "-r", "tools.json", "-s", "st", "-j", "1", "--listen",
                              "127.0.0.1:%d" % port], cwd=rig.tmp, stdin=subprocess.DEVNULL,
                             stdout=err, stderr=err)
        err.close()
        rig.procs.append(p)

        def req(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                c.request(method, path, json.dumps(body) if body is not None else None,
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                try:
                    return r.status, json.loads(data or b"null")
                except ValueError:
                    return r.status, data
            except OSError:
                return None, None
            finally:
                c.close()
        self.assertTrue(wait_for(lambda: req("GET", "/readyz")[0] == 200, 20), "serve did not get ready")
        workers = children(p.pid)
        self.assertEqual(len(workers), 1, workers)
        slow = ["s%d" % i for i in range(20)]
        for i in slow:
            self.assertEqual(req("POST", "/v1/calls?wait=0", call(i, "slow", 1500))[0], 202)
        self.assertEqual(req("POST", "/v1/calls?wait=0", call("h", "hang", 0))[0], 202)
        in_progress = lambda: {e["key"] for e in rig.server.log() if e["end"] is None}
        self.assertTrue(wait_for(lambda: in_progress() >= set(slow) | {"h"}, 10),
                        "in progress at once: %s" % sorted(in_progress()))
        t0 = time.monotonic()
        st, r = req("DELETE", "/v1/calls/h")
        took = time.monotonic() - t0
        self.assertEqual((st, r["ok"], r["error"]), (200, False, "Cancelled"), r)
        self.assertLess(took, 1.0, "the cancel took %.3f s" % took)
        for i in slow:
            st, r = wait_for(lambda: (lambda g: g if g[0] != 202 else None)(req("GET", "/v1/calls/" + i)), 20)
            self.assertEqual((st, r["ok"], r["attempts"]), (200, True, 1), (i, r))
        self.assertEqual(children(p.pid), workers, "the worker was replaced")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(30), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
