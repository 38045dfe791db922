#!/usr/bin/env python3
"""`toolpool stats` on a live store lists the supervisors working on it:
a `run` with its calls answered, running and waiting, its expected total and
the time left; a `serve` with what it has answered. Real processes on a real
store: the run's exec tool sleeps, so the run is still going when stats
looks; once it has ended, stats lists no supervisor.

Standard library only; the build folder as in serveutil.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
N = 120


class StatsLive(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-stats-live-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.store = os.path.join(self.dir, "store")

    def stats(self, *args, check=True):
        p = subprocess.run([TOOLPOOL, "stats", "--store", self.store, *args], capture_output=True, text=True,
                           timeout=30)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout if p.returncode == 0 else ""

    def supervisors(self, check=True):
        return [json.loads(line)["supervisor"] for line in self.stats("--json", check=check).splitlines()
                if line.startswith('{"supervisor"')]

    def test_run(self):
        reg = os.path.join(self.dir, "tools.json")
        with open(reg, "w") as f:
            json.dump({"tools": [{"name": "slow", "exec": ["sh", "-c", "cat >/dev/null; sleep 0.05; echo '{}'"],
                                  "timeout": "10s"}]}, f)
        calls = os.path.join(self.dir, "calls.jsonl")
        with open(calls, "w") as f:
            for i in range(N):
                f.write(json.dumps({"id": f"s{i}", "tool": "slow", "args": {}}) + "\n")
        p = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "2", "--store", self.store, "--registry", reg,
                              "-o", os.path.join(self.dir, "out"), calls], stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        got = []

        def seen():
            # (until the run has made its store, stats finds none)
            got[:] = [s for s in self.supervisors(check=False) if s["done"] > 0]
            return got
        serveutil.wait_for(seen, 20, "stats to list the run with calls answered")
        s = got[0]
        self.assertEqual(s["pid"], p.pid)
        self.assertEqual(s["command"], "run")
        self.assertEqual(s["total"], N)  # the whole file was read: the total is exact
        self.assertLess(s["done"], N)
        self.assertLessEqual(s["running"], 2)
        self.assertEqual(s["done"] + s["running"] + s["waiting"], N)
        self.assertGreater(s["calls_per_s"], 0)
        self.assertGreater(s["eta_s"], 0)
        text = self.stats()
        self.assertRegex(text.splitlines()[0], rf"^live: run \(pid {p.pid}\): \d+ calls answered of about {N} "
                                               r"\([\d.]+%\), \d+ running, \d+ waiting; \d+ calls/s, about \d+s left")
        self.assertEqual(p.wait(timeout=60), 0, p.stderr.read())
        self.assertEqual(self.supervisors(), [])  # gone: it left the store
        self.assertNotIn("live:", self.stats())

    def test_serve(self):
        reg = serveutil.write_registry(os.path.join(self.dir, "tools.json"), [])
        sock = os.path.join(self.dir, "sock")
        s = serveutil.Serve(reg, self.store, "unix:" + sock, os.path.join(self.dir, "log")).start()
        self.addCleanup(s.kill9)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
        import toolpool_client
        c = toolpool_client.Client("unix:" + sock)
        self.addCleanup(c.close)
        for i in range(3):
            self.assertTrue(c.call("noop", {}, id=f"n{i}")["ok"])
        got = []

        def seen():
            c.call("noop", {}, id=f"n{time.monotonic_ns()}")  # a write transaction, where the entry is written
            got[:] = [x for x in self.supervisors() if x["done"] >= 3]
            return got
        serveutil.wait_for(seen, 10, "stats to list the serve", step=0.2)
        self.assertEqual(got[0]["command"], "serve")
        self.assertEqual(got[0]["pid"], s.proc.pid)
        self.assertIsNone(got[0]["total"])
        self.assertIsNone(got[0]["eta_s"])
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    unittest.main()
