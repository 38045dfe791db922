#!/usr/bin/env python3
"""A third supervisor arriving on a shared store never makes another run a
call that a live one runs (real `toolpool run` processes on one store).

A runs X, of a tool that is not idempotent (4 s). B holds X too, queued behind
W (2 s) on its one worker. C arrives while both run. When W ends, B must not
start X: A still runs it, so B waits for A's record and answers with it. X
runs once. (Before the fix, C's arrival made B claim X over A's marker, and B
ran X a second time.) With A killed (kill -9) while X runs, before C comes: B
ends X Interrupted, escalated, and does not run it again.

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


class ThirdOwner(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-third-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.log = os.path.join(self.dir, "ran.log")
        sleeper = 'cat >/dev/null; echo "$TOOLPOOL_CALL_ID" >> "$1"; sleep "$2"; echo \'{"done": true}\''
        tools = [{"name": "x", "exec": ["sh", "-c", sleeper, "sh", self.log, "4"], "idempotent": False,
                  "timeout": "30s", "attempts": 1},
                 {"name": "w", "exec": ["sh", "-c", sleeper, "sh", self.log, "2"], "timeout": "30s"},
                 {"name": "v", "exec": ["sh", "-c", sleeper, "sh", self.log, "0"], "timeout": "30s"}]
        with open(os.path.join(self.dir, "tools.json"), "w") as f:
            json.dump({"tools": tools}, f)
        self.procs = []
        self.addCleanup(serveutil.kill_all, self.procs)

    def run_tp(self, name, calls):
        path = os.path.join(self.dir, name + ".jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in calls))
        err = open(os.path.join(self.dir, name + ".err"), "w")
        p = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "1", "-s", "store", "-r", "tools.json",
                              "-o", name + ".out", path], cwd=self.dir, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        self.procs.append(p)
        return p

    def ran(self):
        return serveutil.executions(self.log)

    def wait_for(self, cond, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.02)
        self.fail("timed out waiting for " + what)

    def results(self, name):
        with open(os.path.join(self.dir, name + ".out")) as f:
            return {r["id"]: r for r in map(json.loads, f)}

    def test_a_third_arrival_never_runs_a_live_call_twice(self):
        x = {"id": "X", "tool": "x", "args": {}}
        a = self.run_tp("a", [x])
        self.wait_for(lambda: "X" in self.ran(), 20, "A to start X")
        b = self.run_tp("b", [{"id": "W", "tool": "w", "args": {}}, x])
        self.wait_for(lambda: "W" in self.ran(), 20, "B to start W")
        c = self.run_tp("c", [{"id": "V", "tool": "v", "args": {}}])
        for p in (a, b, c):
            self.assertIn(p.wait(60), (0, 1))
        self.assertEqual(self.ran().count("X"), 1, "X ran %d times: %s" % (self.ran().count("X"), self.ran()))
        ra, rb = self.results("a"), self.results("b")
        self.assertTrue(ra["X"]["ok"], ra["X"])
        self.assertEqual((rb["X"]["ok"], rb["X"]["result"]), (True, {"done": True}), rb["X"])
        self.assertTrue(self.results("c")["V"]["ok"])

    def test_a_dead_owners_started_call_is_interrupted_not_run_again(self):
        x = {"id": "X", "tool": "x", "args": {}}
        a = self.run_tp("a", [x])
        self.wait_for(lambda: "X" in self.ran(), 20, "A to start X")
        b = self.run_tp("b", [{"id": "W", "tool": "w", "args": {}}, x])
        self.wait_for(lambda: "W" in self.ran(), 20, "B to start W")
        a.kill()
        a.wait()
        c = self.run_tp("c", [{"id": "V", "tool": "v", "args": {}}])
        for p in (b, c):
            self.assertIn(p.wait(60), (0, 1))
        self.assertEqual(self.ran().count("X"), 1, "X ran %d times: %s" % (self.ran().count("X"), self.ran()))
        rb = self.results("b")
        self.assertEqual((rb["X"]["ok"], rb["X"]["error"], rb["X"]["escalated"]), (False, "Interrupted", True), rb["X"])
        self.assertTrue(rb["W"]["ok"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
