#!/usr/bin/env python3
"""Shared MCP sessions end to end: `toolpool run` calling the tools of
tests/mcp_tiny_server.py imported with "mcp_servers", where one server process
(an instance) serves many calls at once on one session, each a tools/call of
its own JSON-RPC id.

- State is kept: the calls of one job meet one server, which counts them.
- Many calls at once on one session: 32 sleeps of 0.5 s end together, on one
  server (or at most two with "instances": 2).
- A timeout ends its own request alone (notifications/cancelled); the server
  and its state live on.
- A server that stops answering (its ping unanswered) is replaced.
- A line that is not JSON-RPC ends the session at once, not at the timeout.
- A response under an id no request has is dropped; the server lives on.
- An error with a null id among many calls in flight ends the call it
  answers once every other call then in flight has its answer; never one
  the server is still working on.
- The server's own requests (roots, sampling, elicitation) get a JSON-RPC error.
- A server blocked writing its stdout while a turn's requests are written to
  its stdin is read meanwhile: neither side waits for the other.
- A server that stops reading its stdin holds up no other server's calls in
  the same worker, and is replaced once its calls pass their deadline.
- A crash with calls in flight: idempotent calls are retried on a fresh
  server; a call that is not idempotent ends Interrupted, escalated.

TINY_LOG has a "started PID" line for each server process, the first of them
the one toolpool starts at load to list the tools (see import_pid); the
sessions are the ones after it.

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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
import toolpool_client  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
TINY_PATH = os.path.join(HERE, "mcp_tiny_server.py")


def alive(pid):
    """Whether pid is a live process (a zombie is not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def wait_for(cond, timeout, step=0.05):
    """Polls cond() until it is true or timeout s have passed; its last value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


def text(r):
    """A successful call's first text block."""
    return r["result"]["content"][0]["text"]


def structured(r):
    return r["result"]["structuredContent"]


def step(cid, job, n, tool, **args):
    """A call of job's step n."""
    return {"id": cid, "job": job, "step": n, "tool": tool, "args": args}


class McpSessionsTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-mcp-sessions-")
        self.tmp = self.tmpdir.name
        self.log = os.path.join(self.tmp, "tiny.log")
        self.runs = 0

    def tearDown(self):
        self.tmpdir.cleanup()

    def registry(self, tools=None, **server):
        """The tiny server imported as "tiny": one instance, 64 calls at once,
        sleep's timeout 300 ms; tools merges into its "tools" block (a policy
        a tool), server's keys into the entry."""
        policies = {"sleep": {"timeout": "300ms"}}
        for name, policy in (tools or {}).items():
            policies[name] = dict(policies.get(name, {}), **policy)
        entry = {"command": [sys.executable, TINY_PATH], "env": {"TINY_LOG": self.log},
                 "instances": 1, "max_in_flight": 64, "tools": policies}
        entry.update(server)
        return {"defaults": {"timeout": "20s", "backoff": {"base": "10ms", "jitter": "none"}}, "tools": [],
                "mcp_servers": {"tiny": entry}}

    def run_calls(self, registry, calls, j=2, expect_rc=None):
        """Runs calls with `toolpool run -j j` on a fresh store: the results by
        id, the process, and the run's wall time in seconds."""
        self.runs += 1
        reg = os.path.join(self.tmp, "tools%d.json" % self.runs)
        with open(reg, "w") as f:
            json.dump(registry, f)
        src = os.path.join(self.tmp, "calls%d.jsonl" % self.runs)
        with open(src, "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")
        t0 = time.monotonic()
        p = subprocess.run([TOOLPOOL, "run", "--registry", reg, "--store",
                            os.path.join(self.tmp, "store%d" % self.runs), "-j", str(j), src],
                           capture_output=True, text=True, timeout=120)
        wall = time.monotonic() - t0
        self.assertNotRegex(p.stderr, "Sanitizer|runtime error:")
        if expect_rc is not None:
            self.assertEqual(p.returncode, expect_rc, p.stderr[-4000:])
        out = {}
        for line in p.stdout.splitlines():
            r = json.loads(line)
            out[r["id"]] = r
        self.assertEqual(sorted(out), sorted(c["id"] for c in calls), p.stderr[-4000:])
        return out, p, wall

    def read_log(self):
        try:
            with open(self.log) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def started(self):
        """The pids of every "started PID" line, in order."""
        return [int(line.split()[1]) for line in self.read_log().splitlines() if line.startswith("started ")]

    def sessions(self):
        """The pids of the servers started for calls: every started one but
        the first, which toolpool started at load to list the tools."""
        return self.started()[1:]

    def reset_log(self):
        if os.path.exists(self.log):
            os.remove(self.log)

    def assert_ok(self, r):
        self.assertTrue(r["ok"], r)

    def test_state_is_kept_across_calls(self):
        """20 calls of tiny.counter in one job, one at a time in step order,
        all meet the one server: it counts 1 to 20, its pid the same each time,
        and only one server is started for them."""
        # Fails if each call (or each attempt) gets a server of its own, or if
        # the session is not kept from call to call: the counts restart at 1.
        calls = [step("c%d" % i, "a", i, "tiny.counter") for i in range(1, 21)]
        r, _, _ = self.run_calls(self.registry(), calls, expect_rc=0)
        for i in range(1, 21):
            self.assert_ok(r["c%d" % i])
        self.assertEqual([structured(r["c%d" % i])["count"] for i in range(1, 21)], list(range(1, 21)))
        pids = {structured(r["c%d" % i])["pid"] for i in range(1, 21)}
        self.assertEqual(len(pids), 1, pids)
        self.assertEqual(self.sessions(), list(pids), self.read_log())

    def test_many_calls_share_one_session(self):
        """32 calls of tiny.sleep 0.5 s, each a job of its own, run at once on
        one server: all ok, the run well under the 32 x 0.5 s they would take
        one after the other (and under the 8 s of one call a worker at -j 2),
        one server started; with "instances": 2, at most two."""
        # Fails if an mcp tool still takes one call a worker (the run takes 8 s
        # or more), or if instances is not kept to (more servers are started).
        calls = [step("s%d" % i, "j%d" % i, 1, "tiny.sleep", seconds=0.5) for i in range(32)]
        for instances, most in ((1, 1), (2, 2)):
            self.reset_log()
            reg = self.registry(tools={"sleep": {"timeout": "5s"}}, instances=instances)
            r, _, wall = self.run_calls(reg, calls, expect_rc=0)
            for c in calls:
                self.assert_ok(r[c["id"]])
                self.assertEqual(text(r[c["id"]]), "slept")
                self.assertEqual(r[c["id"]]["attempts"], 1)
            self.assertLess(wall, 6, "instances %d" % instances)
            n = len(self.sessions())
            self.assertGreaterEqual(n, 1, self.read_log())
            self.assertLessEqual(n, most, "instances %d: %s" % (instances, self.read_log()))

    def test_a_server_blocked_on_its_stdout_is_read_while_it_is_written(self):
        """64 echoes of 8 KiB at once on one session: their requests (512 KiB)
        are far more than the server's stdin pipe holds, and the server, which
        answers each line as it reads it, blocks writing its answers once its
        stdout pipe is full, reading no more of its stdin until some are read.
        All end ok at their first attempt, on one server, in well under the
        second a stopped stdin is given."""
        # Fails if the worker writes a turn's requests without reading the
        # server's stdout meanwhile: both pipes fill, the server is taken for
        # one that stopped reading its stdin, and is killed with the calls on it.
        payload = "x" * 8192
        calls = [step("e%d" % i, "j%d" % i, 1, "tiny.echo", text=payload + str(i)) for i in range(64)]
        r, p, wall = self.run_calls(self.registry(), calls, expect_rc=0)
        for i in range(64):
            self.assert_ok(r["e%d" % i])
            self.assertEqual(text(r["e%d" % i]), payload + str(i))
            self.assertEqual(r["e%d" % i]["attempts"], 1)
        self.assertNotIn("stopped reading its stdin", p.stderr)
        self.assertEqual(len(self.sessions()), 1, self.read_log())
        self.assertLess(wall, 5)

    def test_a_server_that_stops_reading_holds_up_no_other(self):
        """Two servers in one worker (-j 1; both sessions started there one
        after the other, each kept): server a freezes for 3 s (tiny.freeze)
        and gets 40 echoes of 8 KiB meanwhile, far more than its stdin pipe
        holds; server b's counter calls, sent then, end ok at once, counting
        on from its warm-up call on the same pid; a's calls all end ok once it
        thaws, nothing retried, no server or worker replaced."""
        # Fails if the worker waits for a's full stdin with b's answers
        # unread: b's calls take until a thaws (3 s), or until the deadline of
        # a's calls, where the supervisor kills the worker with b's session.
        reg = {"defaults": {"timeout": "20s", "backoff": {"base": "10ms", "jitter": "none"}}, "tools": [],
               "mcp_servers": {n: {"command": [sys.executable, TINY_PATH], "env": {"TINY_LOG": self.log, "TINY_NAME": n},
                                   "instances": 1, "max_in_flight": 64} for n in ("a", "b")}}
        path = os.path.join(self.tmp, "two.json")
        with open(path, "w") as f:
            json.dump(reg, f)
        with toolpool_client.Coprocess(TOOLPOOL, registry=path, store=os.path.join(self.tmp, "two-store"),
                                       workers=1, stderr=subprocess.DEVNULL) as run:
            # the sessions, one after the other while the worker is idle: both in the one worker
            first_a = run.call("a.counter", {}, job="wa", id="wa")
            first_b = run.call("b.counter", {}, job="wb", step=1, id="wb1")
            self.assert_ok(first_a)
            self.assert_ok(first_b)
            pid_b = structured(first_b)["pid"]
            run.submit("a.freeze", {"seconds": 3}, job="fa", id="fa")
            time.sleep(0.3)  # a is asleep, reading nothing
            payload = "y" * 8192
            for i in range(40):
                run.submit("a.echo", {"text": payload + str(i)}, job="ea%d" % i, id="ea%d" % i)
            time.sleep(0.3)  # a's stdin is full; the worker has more for it
            t0 = time.monotonic()
            bs = [run.call("b.counter", {}, job="wb", step=k, id="wb%d" % k) for k in range(2, 5)]
            b_wall = time.monotonic() - t0
            frozen = run.result("fa")
            echoes = [run.result("ea%d" % i) for i in range(40)]
        for r in bs:
            self.assert_ok(r)
            self.assertEqual(r["attempts"], 1)
        self.assertEqual([structured(r)["count"] for r in bs], [2, 3, 4])
        self.assertEqual({structured(r)["pid"] for r in bs}, {pid_b})
        self.assertLess(b_wall, 1.5, "b's three calls waited for a")
        self.assert_ok(frozen)
        self.assertEqual(text(frozen), "thawed")
        for i, r in enumerate(echoes):
            self.assert_ok(r)
            self.assertEqual(r["attempts"], 1)
            self.assertEqual(text(r), payload + str(i))
        # the two imports' servers at load, then one session each
        self.assertEqual(len(self.started()), 4, self.read_log())

    def test_a_server_whose_stdin_stays_full_is_replaced_at_its_calls_timeout(self):
        """A server frozen for 30 s with 40 echoes of 8 KiB queued for it (its
        stdin full), its calls' timeout 1 s: the first to pass it ends
        Timeout, the server is replaced then (not a ping's 5 s grace later),
        the calls still on it ending WorkerCrashed, all within 1.5 s, and the
        next call meets a fresh copy at once."""
        # Fails if a full stdin is waited on past the calls' deadline: the
        # next call waits behind the frozen server until the ping gives up.
        reg = self.registry(tools={"freeze": {"timeout": "1s", "attempts": 1},
                                   "echo": {"timeout": "1s", "attempts": 1}})
        path = os.path.join(self.tmp, "stuck.json")
        with open(path, "w") as f:
            json.dump(reg, f)
        err = os.path.join(self.tmp, "stuck.err")
        with open(err, "w") as errf, toolpool_client.Coprocess(
                TOOLPOOL, registry=path, store=os.path.join(self.tmp, "stuck-store"), workers=1, stderr=errf) as run:
            first = run.call("tiny.counter", {}, job="c", step=1, id="c1")
            self.assert_ok(first)
            run.submit("tiny.freeze", {"seconds": 30}, job="f", id="f")
            time.sleep(0.3)
            for i in range(40):
                run.submit("tiny.echo", {"text": "z" * 8192 + str(i)}, job="e%d" % i, id="e%d" % i)
            stuck = [run.result("f")] + [run.result("e%d" % i) for i in range(40)]
            t0 = time.monotonic()
            after = run.call("tiny.counter", {}, job="c", step=2, id="c2")
            waited = time.monotonic() - t0
        # the first to pass its deadline ends Timeout, and the server is killed with the rest on it
        self.assertEqual({r["id"] for r in stuck if r["ok"]}, set())
        kinds = {r["error"] for r in stuck}
        self.assertIn("Timeout", kinds)
        self.assertLessEqual(kinds, {"Timeout", "WorkerCrashed"})
        self.assertLess(max(r["duration_ms"] for r in stuck), 1500)
        self.assert_ok(after)
        self.assertEqual(structured(after)["count"], 1, "a fresh copy counts from 1")
        self.assertNotEqual(structured(after)["pid"], structured(first)["pid"])
        self.assertLess(waited, 2.5, "the next call waited for the frozen server")
        # Why it was replaced: the worker's log says so, and so do the calls still on it then, if any
        # (when all 41 went to the worker at once, they reached their deadlines before its stdin's grace ran out).
        with open(err) as f:
            log = f.read()
        self.assertIn("stopped reading its stdin: it is restarted", log)
        self.assertNotIn("did not answer a ping", log)

    def test_a_timeout_cancels_only_its_request(self):
        """A call's timeout on a shared session sends notifications/cancelled
        for its request and ends it Timeout, without waiting for the server;
        the server lives on: the counters before and after it give 1 and 2,
        from the same pid."""
        # Fails if a timeout still kills or replaces the server (the second
        # counter is 1 again, from another pid), if no cancellation is sent,
        # or if the call waits for its 5 s sleep.
        reg = self.registry(tools={"sleep": {"timeout": "300ms", "attempts": 1}})
        calls = [step("c1", "a", 1, "tiny.counter"), step("s", "a", 2, "tiny.sleep", seconds=5),
                 step("c2", "a", 3, "tiny.counter")]
        r, _, _ = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual((r["s"]["ok"], r["s"]["error"], r["s"]["attempts"]), (False, "Timeout", 1), r["s"])
        self.assertLess(r["s"]["duration_ms"], 3000)
        log = self.read_log()
        self.assertIn("cancelled", log)
        self.assertEqual((structured(r["c1"])["count"], structured(r["c2"])["count"]), (1, 2), log)
        self.assertEqual(structured(r["c1"])["pid"], structured(r["c2"])["pid"])
        self.assertEqual(len(self.sessions()), 1, log)

    def test_a_server_that_stops_answering_is_replaced(self):
        """A server that stops reading (tiny.freeze 30 s) times out its call,
        then leaves the health check after the timeout unanswered: it is taken
        for hung, killed, and the next call meets a fresh server (its counter
        1 again, another pid), all well before the freeze would end."""
        # Fails if a hung server is kept (the next call hangs or times out
        # too), if it is not replaced (same pid, count 2), or if it is left
        # running.
        reg = self.registry(tools={"freeze": {"timeout": "500ms", "attempts": 1}})
        calls = [step("c1", "a", 1, "tiny.counter"), step("f", "a", 2, "tiny.freeze", seconds=30),
                 step("c2", "a", 3, "tiny.counter")]
        r, _, wall = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual((r["f"]["error"], r["f"]["attempts"]), ("Timeout", 1), r["f"])
        self.assert_ok(r["c2"])
        self.assertEqual(structured(r["c2"])["count"], 1)
        frozen = structured(r["c1"])["pid"]
        self.assertNotEqual(structured(r["c2"])["pid"], frozen)
        self.assertLess(wall, 20)
        self.assertEqual(len(self.sessions()), 2, self.read_log())
        self.assertTrue(wait_for(lambda: not alive(frozen), 5), "the hung server %d lives on" % frozen)

    def test_output_that_is_not_json_rpc_ends_the_session(self):
        """A line on the server's stdout that is not JSON-RPC breaks the
        session: the call in flight fails at once (not at its 5 s timeout), and
        the next call meets a fresh server (counter 1, another pid)."""
        # Fails if a garbage line is skipped and the call waits for its
        # timeout, or if the broken session is used again.
        reg = self.registry(tools={"garbage": {"timeout": "5s", "attempts": 1}})
        calls = [step("c1", "a", 1, "tiny.counter"), step("g", "a", 2, "tiny.garbage"),
                 step("c2", "a", 3, "tiny.counter")]
        r, _, _ = self.run_calls(reg, calls, expect_rc=1)
        g = r["g"]
        self.assertFalse(g["ok"], g)
        self.assertNotEqual(g["error"], "Timeout", g)
        self.assertEqual(g["attempts"], 1)
        self.assertLess(g["duration_ms"], 4000, g)
        self.assertTrue(g.get("message"), g)
        self.assert_ok(r["c2"])
        self.assertEqual(structured(r["c2"])["count"], 1)
        self.assertNotEqual(structured(r["c2"])["pid"], structured(r["c1"])["pid"])

    def test_a_response_with_another_id_is_dropped(self):
        """An answer under an id no request has (tiny.wrongid) answers
        nothing: the call ends Timeout, and the server lives on, so the counter
        after it is the same server's (same pid, count 2)."""
        # Fails if a stray response is taken for another call's answer, or if
        # it (or the timeout after it) costs the server its session.
        reg = self.registry(tools={"wrongid": {"timeout": "500ms", "attempts": 1}})
        calls = [step("c1", "a", 1, "tiny.counter"), step("w", "a", 2, "tiny.wrongid"),
                 step("c2", "a", 3, "tiny.counter")]
        r, _, _ = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual((r["w"]["error"], r["w"]["attempts"]), ("Timeout", 1), r["w"])
        self.assert_ok(r["c2"])
        self.assertEqual(structured(r["c2"])["pid"], structured(r["c1"])["pid"])
        self.assertEqual(structured(r["c2"])["count"], 2)
        self.assertEqual(len(self.sessions()), 1, self.read_log())

    def test_an_error_with_a_null_id_among_calls_in_flight(self):
        """tiny.unreadable sends an error with a null id (a request it could
        not parse) after 0.3 s, while a 1.5 s sleep is in flight on the same
        session: which call it answers cannot be told then, so neither ends;
        once the sleep is answered (ok), the other is the one, and ends
        ToolError at once, not at its 20 s timeout. The server lives on. When
        the other call ends without an answer instead (its timeout), it may
        have been the one: the unreadable call is not failed on a guess, and
        ends at its own timeout, the message saying what came."""
        # Fails if such an error is dropped (the call waits out its 20 s), if
        # it is put down to a call still running (the sleep fails), or if it
        # costs the server its session.
        reg = self.registry(tools={"unreadable": {"timeout": "20s", "attempts": 1},
                                   "sleep": {"timeout": "20s", "attempts": 1}})
        calls = [step("s", "s", 1, "tiny.sleep", seconds=1.5),
                 step("u", "u", 1, "tiny.unreadable", form="null_id", seconds=0.3)]
        r, _, wall = self.run_calls(reg, calls, expect_rc=1)
        self.assert_ok(r["s"])
        self.assertEqual(text(r["s"]), "slept")
        u = r["u"]
        self.assertEqual((u["ok"], u["error"], u["class"], u["attempts"]), (False, "ToolError", "permanent", 1), u)
        self.assertIn("answered an error with a null id (MCP error -32700: Parse error), and every other request "
                      "in flight then has been answered since", u["message"])
        self.assertGreater(u["duration_ms"], 1000, u)
        self.assertLess(u["duration_ms"], 3000, u)
        self.assertLess(wall, 10)
        self.assertEqual(len(self.sessions()), 1, self.read_log())
        self.reset_log()
        reg = self.registry(tools={"unreadable": {"timeout": "2s", "attempts": 1},
                                   "sleep": {"timeout": "800ms", "attempts": 1}})
        calls = [step("s", "s", 1, "tiny.sleep", seconds=5),
                 step("u", "u", 1, "tiny.unreadable", form="null_id", seconds=0.3)]
        r, _, _ = self.run_calls(reg, calls, expect_rc=1)
        self.assertEqual(r["s"]["error"], "Timeout", r["s"])
        u = r["u"]
        self.assertEqual((u["error"], u["attempts"]), ("Timeout", 1), u)
        self.assertIn("meanwhile it answered an error with a null id (MCP error -32700: Parse error)", u["message"])

    def test_requests_of_the_server_get_a_json_rpc_error(self):
        """The server's own requests (roots/list, sampling/createMessage,
        elicitation/create), sent while a call runs, are answered with a
        JSON-RPC error (-32601 and a message), so the call they came from goes
        on and ends ok with it."""
        # Fails if the server's requests go unanswered (the call times out),
        # are answered with something else than an error object, or are taken
        # for the call's own answer.
        methods = ("roots/list", "sampling/createMessage", "elicitation/create")
        reg = self.registry(tools={"ask": {"timeout": "5s", "attempts": 1}})
        calls = [step("a%d" % i, "a", i + 1, "tiny.ask", method=m) for i, m in enumerate(methods)]
        r, _, _ = self.run_calls(reg, calls, expect_rc=0)
        for i, m in enumerate(methods):
            a = r["a%d" % i]
            self.assert_ok(a)
            err = structured(a)["error"]
            self.assertIsInstance(err, dict, (m, a))
            self.assertIsInstance(err.get("code"), int, (m, err))
            self.assertNotIsInstance(err.get("code"), bool, (m, err))
            self.assertEqual(err["code"], -32601, (m, err))
            self.assertIsInstance(err.get("message"), str, (m, err))
            self.assertTrue(err["message"], (m, err))
            self.assertIsNone(structured(a)["result"], m)

    def test_a_crash_with_calls_in_flight(self):
        """The server exits while five calls are in flight on its session:
        three idempotent sleeps are tried again on a fresh server and end ok on
        their second attempt; a write (destructiveHint: not idempotent) ends
        Interrupted, escalated, and was not written twice."""
        # Fails if a crash ends only the call that caused it (the others hang
        # to their timeout), if the calls in flight are not retried, or if a
        # call that is not idempotent is run again after the crash.
        reg = self.registry(tools={"sleep": {"timeout": "5s", "attempts": 2},
                                   "write": {"timeout": "5s", "attempts": 2},
                                   "crash": {"attempts": 1}})
        calls = [step("s%d" % i, "s%d" % i, 1, "tiny.sleep", seconds=2) for i in range(3)]
        calls += [step("w", "w", 1, "tiny.write", text="x", seconds=2),
                  step("wait", "c", 1, "tiny.sleep", seconds=0.3), step("crash", "c", 2, "tiny.crash")]
        r, _, _ = self.run_calls(reg, calls, expect_rc=1)
        for i in range(3):
            s = r["s%d" % i]
            self.assert_ok(s)
            self.assertEqual(s["attempts"], 2, s)
            self.assertEqual(s["trace"][0]["outcome"], "WorkerCrashed", s)
        self.assertFalse(r["crash"]["ok"])
        w = r["w"]
        self.assertEqual((w["ok"], w["error"], w["escalated"]), (False, "Interrupted", True), w)
        log = self.read_log()
        self.assertLessEqual(log.splitlines().count("write x"), 1, log)
        self.assertEqual(len(self.sessions()), 2, log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
