#!/usr/bin/env python3
"""The attempt's clock starts when an exec tool starts, not when its Call is
sent: real `toolpool serve` processes, their worker stopped (SIGSTOP) to stand
for a machine too loaded to give it the CPU.

- A worker held 1 s before it can start a tool whose timeout is 0.5 s: the
  call ends ok, its trace says the 1 s went to the spawn (spawn_ms), and its
  duration past the spawn is the tool's own.
- The wait for the start has a limit of its own: within the call's deadline
  (here 1.5 s), a tool that cannot start ends Timeout, saying it did not start.
- A tool that starts late and then hangs is still killed at its start plus
  its timeout, and its trace shows the spawn.
- Under 4 busy loops, every exec attempt's trace says when its process
  started, within its duration.

Standard library only; the build folder as in serveutil.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOL = ["sh", "-c", "cat >/dev/null; echo '{\"ran\": true}'"]


class AttemptClock(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-clock-")
        self.addCleanup(self.tmp.cleanup)
        self.sock = os.path.join(self.tmp.name, "tp.sock")

    def serve(self, tools, workers=1):
        reg = serveutil.write_registry(os.path.join(self.tmp.name, "tools.json"), tools)
        s = serveutil.Serve(reg, os.path.join(self.tmp.name, "st"), "unix:" + self.sock,
                            os.path.join(self.tmp.name, "serve.log"), workers=workers)
        s.start()
        self.addCleanup(s.stop)
        self.client = serveutil.toolpool_client.Client("unix:" + self.sock, retries=0, timeout=30)
        self.addCleanup(self.client.close)
        return s

    def held_call(self, s, hold, call):
        """Stops serve's one worker, sends call, lets the worker go after hold s, and waits for the result."""
        workers = serveutil.workers(s.proc.pid)
        self.assertEqual(len(workers), 1, workers)
        w = workers.pop()
        os.kill(w, signal.SIGSTOP)
        try:
            self.client.submit(call["tool"], call.get("args", {}), id=call["id"])
            time.sleep(hold)
        finally:
            try:
                os.kill(w, signal.SIGCONT)
            except ProcessLookupError:
                pass  # killed at its limit, as it should be
        return self.client.result(call["id"], timeout=30)

    def test_spawn_time_is_not_the_tools(self):
        s = self.serve([{"name": "quick", "exec": TOOL, "timeout": "500ms", "attempts": 1}])
        r = self.held_call(s, 1.0, {"id": "c1", "tool": "quick"})
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["result"], {"ran": True})
        t = r["trace"][0]
        self.assertGreaterEqual(t["spawn_ms"], 900, t)
        self.assertLess(t["duration_ms"] - t["spawn_ms"], 500, t)
        # A plugin starts no process: no spawn_ms.
        r = self.client.call("noop", {}, id="p1")
        self.assertTrue(r["ok"], r)
        self.assertNotIn("spawn_ms", r["trace"][0])

    def test_spawn_limit_within_the_deadline(self):
        s = self.serve([{"name": "quick", "exec": TOOL, "timeout": "500ms", "deadline": "1500ms", "attempts": 1}])
        t0 = time.monotonic()
        r = self.held_call(s, 2.5, {"id": "c2", "tool": "quick"})
        self.assertEqual((r["ok"], r["error"]), (False, "Timeout"), r)
        self.assertIn("did not start within", r["message"])
        self.assertNotIn("spawn_ms", r["trace"][0])
        self.assertLess(r["trace"][0]["duration_ms"], 2000, r)
        self.assertLess(time.monotonic() - t0, 10)

    def test_late_start_then_hang(self):
        hang = ["sh", "-c", "exec sleep 30"]
        s = self.serve([{"name": "hang", "exec": hang, "timeout": "500ms", "attempts": 1}])
        r = self.held_call(s, 1.0, {"id": "c3", "tool": "hang"})
        self.assertEqual((r["ok"], r["error"]), (False, "Timeout"), r)
        self.assertIn("exceeded", r["message"])
        t = r["trace"][0]
        self.assertGreaterEqual(t["spawn_ms"], 900, t)
        # killed at its start plus 0.5 s: not at the send plus 0.5 s, and not much later
        self.assertTrue(450 <= t["duration_ms"] - t["spawn_ms"] <= 700, t)

    def test_busy_loops(self):
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
        try:
            self.serve([{"name": "quick", "exec": TOOL, "timeout": "2s", "attempts": 1}], workers=2)
            ids = ["b%d" % i for i in range(40)]
            for i in ids:
                self.client.submit("quick", {}, id=i)
            for i in ids:
                r = self.client.result(i, timeout=60)
                self.assertTrue(r["ok"], r)
                t = r["trace"][0]
                self.assertGreater(t.get("spawn_ms", 0), 0, t)
                self.assertLessEqual(t["spawn_ms"], t["duration_ms"], t)
        finally:
            for h in hogs:
                h.kill()
                h.wait()


if __name__ == "__main__":
    unittest.main(verbosity=2)
