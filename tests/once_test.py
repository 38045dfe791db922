#!/usr/bin/env python3
"""A tool marked "once": a call that has ended never runs again after a
kill -9 (real `toolpool run` processes, the test plugin's `logged` tool
writing each call's id to a log).

By default an idempotent call's result waits for its group commit (2 to
20 ms, up to 4,096 results), so a kill -9 loses the results of the last
window and a rerun runs those calls again. With "once": true each result
commits at the end of the loop turn in which its call ended. With one
call a worker at a time (--pipeline 1) and two workers, what can run again
is then at most four calls: the two whose turn's commit the kill cut short,
and the two the workers had been given next. (Without "once", the same
kill makes dozens run again, or a few when it falls just after a commit.)

Standard library only; the build folder as in serveutil.
"""
import collections
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

TOOLPOOL = serveutil.TOOLPOOL
TESTPLUGIN = os.path.join(serveutil.BUILD, "tests", "testplugin.so")
N = 30000
WORKERS = 2


class Once(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-once-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name

    def run_killed(self, once):
        """Runs N logged calls, kills the supervisor with SIGKILL a third of
        the way in, reruns to the end. How many ids ran more than once, and
        how many the log holds."""
        d = os.path.join(self.dir, "once" if once else "default")
        os.mkdir(d)
        log = os.path.join(d, "ran.log")
        reg = os.path.join(d, "tools.json")
        with open(reg, "w") as f:
            json.dump({"tools": [{"name": "logged", "plugin": {"path": TESTPLUGIN}, "timeout": "5s",
                                  "once": once}]}, f)
        calls = os.path.join(d, "calls.jsonl")
        with open(calls, "w") as f:
            for i in range(N):
                f.write(json.dumps({"id": f"c{i}", "tool": "logged", "args": {"log": log}}, separators=(",", ":")) + "\n")
        cmd = [TOOLPOOL, "run", "-q", "-j", str(WORKERS), "--pipeline", "1", "--store", os.path.join(d, "store"),
               "--registry", reg, calls]
        with open(os.path.join(d, "err1"), "w") as err:
            p = subprocess.Popen(cmd + ["-o", os.path.join(d, "out1")], stderr=err)
            serveutil.wait_for(lambda: os.path.exists(log) and os.path.getsize(log) > N // 3 * 4, 60,
                               "a third of the calls to run")
            p.send_signal(signal.SIGKILL)
            p.wait()
        serveutil.wait_for(lambda: not serveutil.workers(p.pid), 10, "the workers to be gone")
        with open(os.path.join(d, "err2"), "w") as err:
            rc = subprocess.run(cmd + ["-o", os.path.join(d, "out2")], stderr=err, timeout=120).returncode
        self.assertEqual(rc, 0)
        with open(log) as f:
            ran = collections.Counter(line.strip() for line in f if line.strip())
        self.assertEqual(len(ran), N)  # every call ran
        with open(os.path.join(d, "out2")) as f:
            self.assertEqual(sum(1 for _ in f), N)  # and has its one record
        return sum(1 for n in ran.values() if n > 1)

    def test_once_runs_no_ended_call_again(self):
        twice = self.run_killed(once=True)
        self.assertLessEqual(twice, 2 * WORKERS, f"{twice} calls ran twice")


if __name__ == "__main__":
    unittest.main()
