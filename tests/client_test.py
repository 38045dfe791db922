#!/usr/bin/env python3
"""client_test: the Python client (clients/python/toolpool_client.py)
against a real `toolpool serve`, and against `toolpool run -` as its
co-process.

    python3 tests/client_test.py [BUILD_DIR] [unittest options]

Each server test class starts its own serve on a temp store (a temp Unix
socket, or 127.0.0.1 for the TCP class); the restart tests kill it with
SIGKILL and start it again on the same store. Executions are counted by
tests/tools/agent_step.sh, which appends one line per run to a file.
Without `toolpool serve` in the build, the server classes are skipped and
the co-process class still runs.
"""
import collections
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest
from unittest import mock

import serveutil as su
import toolpool_client
from toolpool_client import Client, Coprocess, ToolpoolError, parse_addr

STEP_TOOL = os.path.join(su.TOOLS, "agent_step.sh")
HAS_SERVE = su.has_serve()
NO_SERVE = f"{su.TOOLPOOL} has no serve command yet"


def exec_tools(d):
    """The exec tools of the tests, writing into folder d."""
    log, gate = os.path.join(d, "exec.log"), os.path.join(d, "gate")
    return log, gate, [
        {"name": "step", "exec": [STEP_TOOL, log, gate], "timeout": "60s"},
        {"name": "denied", "exec": [os.path.join(su.TOOLS, "exit.sh"), "77"], "timeout": "5s"},
        {"name": "hang", "exec": [os.path.join(su.TOOLS, "hang.sh")], "timeout": "60s", "attempts": 1},
    ]


def runs_of(log, call_id):
    return sum(1 for ln in su.read_lines(log) if ln[2] == call_id)


class AddrTest(unittest.TestCase):
    def test_forms(self):
        self.assertEqual(parse_addr("unix:/tmp/x.sock"), ("unix", "/tmp/x.sock"))
        self.assertEqual(parse_addr("unix:./toolpool.sock"), ("unix", "./toolpool.sock"))
        self.assertEqual(parse_addr("/run/tp.sock"), ("unix", "/run/tp.sock"))
        self.assertEqual(parse_addr("127.0.0.1:8080"), ("tcp", "127.0.0.1", 8080))
        self.assertEqual(parse_addr("http://localhost:80/"), ("tcp", "localhost", 80))
        self.assertEqual(parse_addr("[::1]:9000"), ("tcp", "::1", 9000))
        for bad in ("localhost", "https://x:1", "x:y"):
            with self.assertRaises(ValueError):
                parse_addr(bad)

    def test_unreachable_raises_after_retries(self):
        d = tempfile.mkdtemp(prefix="tp-client-")
        try:
            c = Client(f"unix:{d}/none.sock", retries=3, backoff=0.01)
            self.addCleanup(c.close)
            t0 = time.monotonic()
            with self.assertRaises(ToolpoolError) as cm:
                c.call("noop", id="x1")
            self.assertIsNone(cm.exception.status)
            self.assertEqual(cm.exception.error, "Unavailable")
            self.assertEqual(cm.exception.id, "x1")
            self.assertIn("4 tries", cm.exception.message)
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            shutil.rmtree(d)

    def test_default_retries_ride_out_a_restart(self):
        # What the defaults wait in all before giving up on a service that is
        # not there, the client's own sleeps counted, not slept: the least
        # (every jitter at its shortest), the mean and the most, as the
        # docstring of Client says them.
        d = tempfile.mkdtemp(prefix="tp-client-")
        self.addCleanup(shutil.rmtree, d)
        waits = []
        for jitter in (0.0, 0.5, 1.0):
            c = Client(f"unix:{d}/none.sock")
            self.addCleanup(c.close)
            slept = []
            with mock.patch.object(toolpool_client.time, "sleep", slept.append), \
                 mock.patch.object(toolpool_client.random, "random", lambda: jitter):
                with self.assertRaises(ToolpoolError) as cm:
                    c.call("noop", id="x2")
            self.assertEqual(cm.exception.error, "Unavailable")
            self.assertEqual(len(slept), c.retries)
            waits.append(sum(slept))
        doc = " ".join(Client.__doc__.split())
        said = re.search(r"With the defaults that is ([\d.]+) s at the least and ([\d.]+) s at the most "
                         r"\(([\d.]+) s on average\)", doc)
        self.assertIsNotNone(said, doc)
        least, most, mean = (float(x) for x in said.groups())
        # to a tenth of a second: the least rounded down and the most up, so each stays true
        self.assertEqual((least, mean, most),
                         (math.floor(waits[0] * 10) / 10, round(waits[1], 1), math.ceil(waits[2] * 10) / 10), waits)
        self.assertIn(f"back within {least} s is always reached", doc)


class CoprocessTest(unittest.TestCase):
    """The client driving `toolpool run -`: one call line each, results by id."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-coproc-")
        self.log, self.gate, tools = exec_tools(self.dir)
        self.reg = su.write_registry(os.path.join(self.dir, "tools.json"), tools)
        self.store = os.path.join(self.dir, "store")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def spawn(self, workers=2):
        return Client.spawn(su.TOOLPOOL, registry=self.reg, store=self.store, workers=workers)

    def test_call_ok_and_failures_are_data(self):
        with self.spawn() as tp:
            r = tp.call("echo", {"x": [1, "two"]}, job="j", step=1, id="e1")
            self.assertTrue(r["ok"], r)
            self.assertEqual((r["id"], r["job"], r["step"], r["result"]), ("e1", "j", 1, {"x": [1, "two"]}))
            r = tp.call("denied", {})
            self.assertFalse(r["ok"])
            self.assertEqual((r["error"], r["class"], r["attempts"]), ("PermissionDenied", "permanent", 1))
            r = tp.call("nosuchtool", {})
            self.assertEqual((r["ok"], r["error"]), (False, "UnknownTool"))
            self.assertEqual(len(r["id"]), 32)

    def test_threads_get_their_own_results(self):
        n_threads, per = 40, 50
        got = collections.defaultdict(list)
        errors = []
        with self.spawn() as tp:
            def worker(t):
                try:
                    for i in range(per):
                        r = tp.call("echo", {"t": t, "i": i}, id=f"c{t}-{i}")
                        got[r["id"]].append(r["result"])
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
            threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(tp.close(), 0)
        self.assertEqual(errors, [])
        self.assertEqual(len(got), n_threads * per)
        for t in range(n_threads):
            for i in range(per):
                self.assertEqual(got[f"c{t}-{i}"], [{"t": t, "i": i}])

    def test_submit_result_and_attach(self):
        with self.spawn() as tp:
            cid = tp.submit("step", {"n": 1}, job="j1", step=1)
            again = tp.submit("step", {"n": 1}, job="j1", step=1, id=cid)
            self.assertEqual(again, cid)
            r1, r2 = tp.result(cid), tp.result(cid)
            self.assertTrue(r1["ok"], r1)
            self.assertEqual(r1, r2)
            with self.assertRaises(ToolpoolError) as cm:
                tp.result("never-sent")
            self.assertEqual(cm.exception.status, 404)
        self.assertEqual(runs_of(self.log, cid), 1)

    def test_recorded_id_not_run_again_by_a_new_run(self):
        with self.spawn() as tp:
            first = tp.call("step", {"n": 2}, id="rec-1")
        with self.spawn() as tp:
            second = tp.call("step", {"n": 2}, id="rec-1")
            other = tp.call("step", {"n": 3}, id="rec-1")
        self.assertTrue(first["ok"])
        self.assertEqual(first, second)
        self.assertEqual(runs_of(self.log, "rec-1"), 1)
        self.assertEqual(other["error"], "InvalidRequest")

    def test_exit_fails_waiters(self):
        tp = self.spawn()
        cid = tp.submit("hang", {})
        time.sleep(0.2)
        tp.kill()
        with self.assertRaises(ToolpoolError) as cm:
            tp.result(cid, timeout=10)
        self.assertEqual(cm.exception.error, "CoprocessExited")
        with self.assertRaises(ToolpoolError):
            tp.call("noop")


class ServeCase(unittest.TestCase):
    """A serve of the class's own on a Unix socket in a temp folder."""

    listen = None
    extra = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tp-serve-")
        cls.log, cls.gate, tools = exec_tools(cls.dir)
        cls.reg = su.write_registry(os.path.join(cls.dir, "tools.json"), tools)
        cls.store = os.path.join(cls.dir, "store")
        cls.addr = cls.listen or f"unix:{cls.dir}/tp.sock"
        cls.serve = su.Serve(cls.reg, cls.store, cls.addr, os.path.join(cls.dir, "serve.log"),
                             extra=cls.extra).start()

    @classmethod
    def tearDownClass(cls):
        cls.serve.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def client(self, addr=None, **kw):
        c = Client(addr or self.addr, **kw)
        self.addCleanup(c.close)
        return c


@unittest.skipUnless(HAS_SERVE, NO_SERVE)
class ServeTest(ServeCase):

    def test_call(self):
        tp = self.client()
        r = tp.call("echo", {"q": "refund window"}, job="j", step=2, id="call-1")
        self.assertTrue(r["ok"], r)
        self.assertEqual((r["id"], r["job"], r["step"], r["tool"]), ("call-1", "j", 2, "echo"))
        self.assertEqual(r["result"], {"q": "refund window"})
        for k in ("attempts", "served_by", "degraded", "stale", "escalated", "duration_ms", "args", "trace"):
            self.assertIn(k, r)
        r = tp.call("noop")
        self.assertTrue(r["ok"])
        self.assertEqual(len(r["id"]), 32)

    def test_keepalive_reuses_one_connection(self):
        tp = self.client()
        for _ in range(20):
            self.assertTrue(tp.call("noop")["ok"])
        self.assertEqual(len(tp._idle), 1)

    def test_tool_failure_is_data(self):
        r = self.client().call("denied", {})
        self.assertFalse(r["ok"])
        self.assertEqual((r["error"], r["class"], r["retryable"]), ("PermissionDenied", "permanent", False))

    def test_http_errors_raise(self):
        tp = self.client()
        with self.assertRaises(ToolpoolError) as cm:
            tp.call("nosuchtool", {})
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(ToolpoolError) as cm:
            tp.call("echo", [1, 2])
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(ToolpoolError) as cm:
            tp._request("POST", "/v1/calls", b"{not json")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(ToolpoolError) as cm:
            tp.result("no-such-call")
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(ToolpoolError) as cm:
            tp._request("GET", "/v1/nothing-here")
        self.assertEqual(cm.exception.status, 404)
        self.assertTrue(cm.exception.error)

    def test_same_id_answered_from_store(self):
        tp = self.client()
        first = tp.call("step", {"n": 1}, id="same-1")
        second = tp.call("step", {"n": 1}, id="same-1")
        self.assertTrue(first["ok"], first)
        self.assertEqual(first["result"], second["result"])
        self.assertEqual(runs_of(self.log, "same-1"), 1)
        with self.assertRaises(ToolpoolError) as cm:
            tp.call("step", {"n": 2}, id="same-1")      # the same id for other input
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(cm.exception.id, "same-1")
        self.assertEqual(runs_of(self.log, "same-1"), 1)

    def test_submit_result_cancel(self):
        tp = self.client()
        cid = tp.submit("hang", {})
        self.assertIsNone(tp.result(cid, wait=False))
        r = tp.cancel(cid)
        self.assertEqual((r["id"], r["ok"], r["error"]), (cid, False, "Cancelled"))
        with self.assertRaises(ToolpoolError) as cm:
            tp.cancel(cid)
        self.assertIn(cm.exception.status, (404, 409))
        cid = tp.submit("echo", {"a": 1})
        self.assertEqual(tp.result(cid, timeout=10)["result"], {"a": 1})
        with self.assertRaises(ToolpoolError) as cm:
            tp.cancel(cid)
        self.assertEqual(cm.exception.status, 409)

    def test_deadline(self):
        r = self.client().call("hang", {}, deadline=0.3)
        self.assertFalse(r["ok"])
        self.assertIn(r["error"], ("Timeout", "DeadlineExceeded"))
        self.assertLess(r["duration_ms"], 5000)

    def test_tools(self):
        tp = self.client()
        for fmt in (None, "openai", "mcp"):
            text = json.dumps(tp.tools(fmt))
            for name in ("noop", "echo", "step"):
                self.assertIn(f'"{name}"', text, fmt)

    def test_checkpoint(self):
        tp = self.client()
        self.assertIsNone(tp.checkpoint_get("cp-job"))
        state = {"messages": [{"role": "user", "content": "hi"}], "n": 1.5, "nested": {"a": [None, True]}}
        self.assertEqual(tp.checkpoint_put("cp-job", 3, state), {"job": "cp-job", "step": 3})
        got = tp.checkpoint_get("cp-job")
        self.assertEqual((got["job"], got["step"], got["state"]), ("cp-job", 3, state))
        self.assertIsInstance(got["updated_ms"], (int, float))
        tp.checkpoint_put("cp-job", 4, {"messages": []})
        self.assertEqual(tp.checkpoint_get("cp-job")["step"], 4)

    def test_inspection(self):
        tp = self.client()
        self.assertIsInstance(tp.breakers(), (list, dict))
        self.assertIsInstance(tp.escalations(), (list, dict))
        tp.call("noop")
        self.assertIn("# TYPE", tp.metrics())
        tp.health()
        self.assertTrue(tp.ready())

    def test_breaker_and_escalation(self):
        tp = self.client()
        # One agent repeating its call: the same-call breaker counts a job's own repeats.
        rs = [tp.call("denied", {"esc": 1}, job="agent-esc", step=i + 1) for i in range(4)]
        self.assertEqual([r["error"] for r in rs], ["PermissionDenied"] * 3 + ["CircuitOpen"])
        eid = rs[2]["escalation"]
        self.assertTrue(rs[2]["escalated"] and eid)
        key = [b["id"] for b in tp.breakers()["breakers"]
               if b["tool"] == "denied" and b.get("escalation") == eid]
        self.assertEqual(len(key), 1)
        self.assertTrue(key[0].startswith("call/denied/"))      # slashes in the path, escaped
        tp.breaker_reset(key[0])
        again = tp.call("denied", {"esc": 1}, job="agent-esc", step=5)
        self.assertEqual((again["error"], again["attempts"]), ("PermissionDenied", 1))
        self.assertIn(eid, [e["id"] for e in tp.escalations()["escalations"] if e["status"] == "open"])
        tp.escalation_resolve(eid, note="granted the role")
        self.assertNotIn(eid, [e["id"] for e in tp.escalations()["escalations"] if e["status"] == "open"])
        with self.assertRaises(ToolpoolError) as cm:
            tp.escalation_resolve("E999999")
        self.assertEqual(cm.exception.status, 404)

    def test_formats(self):
        tp = self.client()
        r = tp.call("echo", {"q": 1}, id="fmt-1", format="openai")
        self.assertEqual((r["role"], r["tool_call_id"]), ("tool", "fmt-1"))
        self.assertEqual(json.loads(r["content"]), {"q": 1})
        r = tp.result("fmt-1", format="anthropic")
        self.assertEqual((r["type"], r["tool_use_id"]), ("tool_result", "fmt-1"))
        self.assertEqual(tp.result("fmt-1")["result"], {"q": 1})
        cid = tp.submit("hang", {})
        r = tp.cancel(cid, format="openai-responses")
        self.assertEqual((r["type"], r["call_id"]), ("function_call_output", cid))
        got = {r["call_id"]: r for r in tp.batch([{"id": "fmt-b", "tool": "denied", "args": {}}],
                                                  format="openai-responses")}
        self.assertIn("PermissionDenied", got["fmt-b"]["output"])
        with self.assertRaises(ToolpoolError) as cm:
            tp.call("echo", {}, format="no-such-format")
        self.assertEqual(cm.exception.status, 400)

    def test_batch(self):
        calls = [{"id": f"b{i}", "tool": "echo", "args": {"i": i}} for i in range(200)]
        got = {r["id"]: r for r in self.client().batch(calls)}
        self.assertEqual(sorted(got), sorted(c["id"] for c in calls))
        for i in range(200):
            self.assertEqual(got[f"b{i}"]["result"], {"i": i})

    def test_200_threads(self):
        """200 threads on one client: every result comes back once, to its
        caller, and every call ran once."""
        tp = self.client()
        n_threads, per = 200, 10
        got = collections.defaultdict(list)
        errors = []
        start = threading.Barrier(n_threads)

        def worker(t):
            try:
                start.wait()
                for i in range(per):
                    tool = "step" if i == 0 else "echo"
                    r = tp.call(tool, {"t": t, "i": i}, id=f"t200-{t}-{i}")
                    got[f"t200-{t}-{i}"].append(r)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(got), n_threads * per)
        for t in range(n_threads):
            for i in range(per):
                rs = got[f"t200-{t}-{i}"]
                self.assertEqual(len(rs), 1)
                self.assertEqual(rs[0]["id"], f"t200-{t}-{i}")
                self.assertTrue(rs[0]["ok"], rs[0])
                self.assertEqual(rs[0]["result"], {"t": t, "i": i})
        runs = collections.Counter(ln[2] for ln in su.read_lines(self.log) if ln[2].startswith("t200-"))
        self.assertEqual(len(runs), n_threads)
        self.assertEqual(set(runs.values()), {1})


@unittest.skipUnless(HAS_SERVE, NO_SERVE)
class DrainTest(ServeCase):
    """A batch that serve's drain leaves with calls not run."""

    extra = ("--drain", "1s")

    def test_batch_cut_by_a_drain_raises_then_runs_the_rest_when_sent_again(self):
        tp = self.client()
        with open(self.gate, "w") as f:
            f.write("dr-g0\ndr-g1\n")
        # The two gated calls hold both workers; the three after them wait their turn.
        calls = [{"id": f"dr-g{i}", "tool": "step", "args": {"g": i}} for i in range(2)] + \
            [{"id": f"dr-q{i}", "tool": "step", "args": {"q": i}} for i in range(3)]
        got, out = [], {}

        def reader():
            try:
                for r in tp.batch(calls):
                    got.append(r)
            except ToolpoolError as e:
                out["e"] = e

        t = threading.Thread(target=reader)
        t.start()
        su.wait_for(lambda: len(su.read_lines(self.gate + ".reached")) == 2, 20, "both gated calls to start")
        self.serve.stop()
        t.join(30)
        self.assertFalse(t.is_alive())
        # The gated calls were killed at the drain's end (their lines came); the rest never started,
        # so the stream broke off instead of ending as if whole.
        self.assertEqual(sorted((r["id"], r["error"]) for r in got), [("dr-g0", "Cancelled"), ("dr-g1", "Cancelled")])
        self.assertEqual((out["e"].error, out["e"].status), ("Unavailable", None))
        self.assertIn("broke off", str(out["e"]))
        os.unlink(self.gate)
        self.serve.start()
        again = {r["id"]: r for r in tp.batch(calls)}
        self.assertEqual(sorted(again), sorted(c["id"] for c in calls))
        # A call the drain cancelled is not recorded (it runs again), as with run's drain.
        for k, i in [("g", 0), ("g", 1), ("q", 0), ("q", 1), ("q", 2)]:
            self.assertEqual(again[f"dr-{k}{i}"]["result"], {k: i})
            self.assertEqual(runs_of(self.log, f"dr-{k}{i}"), 1)


@unittest.skipUnless(HAS_SERVE, NO_SERVE)
class RestartTest(ServeCase):
    """serve killed with SIGKILL and started again on the same store, while
    the client is calling."""

    def test_retry_with_same_id_across_a_restart(self):
        tp = self.client(retries=12, backoff=0.05)
        with open(self.gate, "w") as f:
            f.write("restart-1\n")
        out = {}

        def caller():
            try:
                out["r"] = tp.call("step", {"n": 1}, id="restart-1")
            except Exception as e:  # noqa: BLE001 - checked below
                out["e"] = e

        t = threading.Thread(target=caller)
        t.start()
        su.wait_for(lambda: os.path.exists(self.gate + ".reached"), 20, "the call to start")
        self.serve.kill9()
        os.unlink(self.gate)
        time.sleep(0.5)             # the client meets a refused connection meanwhile
        self.serve.start()
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertNotIn("e", out)
        self.assertTrue(out["r"]["ok"], out["r"])
        self.assertEqual(out["r"]["id"], "restart-1")
        self.assertEqual(runs_of(self.log, "restart-1"), 1)
        # Recorded: across another crash, the same id is answered, not run.
        self.serve.kill9()
        self.serve.start()
        again = tp.call("step", {"n": 1}, id="restart-1")
        self.assertEqual(again["result"], out["r"]["result"])
        self.assertEqual(runs_of(self.log, "restart-1"), 1)

    def test_calls_from_threads_ride_through_a_restart(self):
        tp = self.client(retries=12, backoff=0.05)
        n_threads, per = 20, 30
        got = collections.defaultdict(list)
        errors = []

        def worker(t):
            try:
                for i in range(per):
                    got[f"rt-{t}-{i}"].append(tp.call("step", {"t": t, "i": i}, id=f"rt-{t}-{i}"))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        su.wait_for(lambda: len(got) >= n_threads * per // 4, 60, "a quarter of the calls")
        self.serve.kill9()
        self.serve.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(len(got), n_threads * per)
        for k, rs in got.items():
            self.assertEqual(len(rs), 1, k)
            self.assertTrue(rs[0]["ok"], rs[0])
        # A call killed before its commit may have run before the crash and
        # again after: that is toolpool's at-least-once for idempotent tools
        # (docs/guide.md, the store). None may be lost.
        runs = collections.Counter(ln[2] for ln in su.read_lines(self.log) if ln[2].startswith("rt-"))
        self.assertEqual(len(runs), n_threads * per)


@unittest.skipUnless(HAS_SERVE, NO_SERVE)
class TCPTest(ServeCase):
    """serve on 127.0.0.1 with a token and a short idle timeout."""

    listen = f"127.0.0.1:{su.free_port()}"

    @classmethod
    def setUpClass(cls):
        d = tempfile.mkdtemp(prefix="tp-token-")
        cls.token_dir = d
        fd = os.open(os.path.join(d, "token"), os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("s3cret-token\n")
        cls.extra = ("--token-file", os.path.join(d, "token"), "--idle-timeout", "1s")
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.token_dir, ignore_errors=True)

    def test_tcp_with_token(self):
        for addr in (self.addr, "http://" + self.addr):
            tp = self.client(addr, token="s3cret-token")
            r = tp.call("echo", {"over": "tcp"})
            self.assertEqual(r["result"], {"over": "tcp"})
            tp.checkpoint_put("tcp-job", 1, {"x": 1})
            self.assertEqual(tp.checkpoint_get("tcp-job")["state"], {"x": 1})

    def test_wrong_or_no_token(self):
        for token in (None, "wrong"):
            with self.assertRaises(ToolpoolError) as cm:
                self.client(token=token).call("noop")
            self.assertEqual(cm.exception.status, 401)

    def test_connection_closed_while_idle(self):
        tp = self.client(token="s3cret-token")
        self.assertTrue(tp.call("noop")["ok"])
        time.sleep(1.5)             # serve closes it after --idle-timeout 1s
        self.assertEqual(len(tp._idle), 1)
        sock = tp._idle[0].sock
        self.assertEqual(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT), b"", "still open")
        self.assertTrue(tp.call("noop")["ok"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
