#!/usr/bin/env python3
"""agent_loop_test: examples/agent_loop/agent_loop.py through a real
`toolpool serve`, with both killed by SIGKILL midway.

    python3 tests/agent_loop_test.py [BUILD_DIR]

The loop runs 4 jobs of 5 to 7 steps. Its tools, echo and noop, are backed
here by tests/tools/agent_step.sh, an exec tool that appends one line per
run to a file, so the test counts how often each step really ran.

1. serve and the loop start. Each job is brought to a chosen point: job-0
   has had step 2 answered but not yet checkpointed (the loop's --stall);
   jobs 1 to 3 are in the middle of a call (the tool hangs on a gate). Then
   serve and the loop are both killed with SIGKILL.
2. Both start again. Every job must resume at the step after its
   checkpoint: job-0 at step 2 again, which toolpool answers from its store
   without running it. Once jobs 1 to 3 are again in the middle of a call,
   at later steps, serve alone is killed and started again: the loop's
   client sends its calls again with the same ids, and they run.
3. The loop ends by itself. Every step ran exactly once, every job's final
   transcript (its checkpoint) is complete and equal to that of a run that
   was never interrupted.

Choosing the moment of the kills makes the test deterministic; the kills
themselves are real. A kill at any moment gives the same outcome except in
one window: after an idempotent tool's effect and before its result is
committed (a few ms of group commit), where the call runs again on restart
(docs/guide.md, "The store").
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import serveutil as su
from toolpool_client import Client

LOOP = os.path.join(su.ROOT, "examples", "agent_loop", "agent_loop.py")
STEP_TOOL = os.path.join(su.TOOLS, "agent_step.sh")
JOBS, STEPS = 4, 5
# Job i takes STEPS + i % 3 tool steps (ScriptedModel.steps_of).
N_STEPS = {f"job-{i}": STEPS + i % 3 for i in range(JOBS)}


class Loop:
    """One run of agent_loop.py; its output lines go to a file."""

    def __init__(self, addr, out, *extra):
        self.out = out
        with open(out, "ab") as f:
            self.proc = subprocess.Popen([sys.executable, LOOP, "--addr", addr, "--jobs", str(JOBS),
                                          "--steps", str(STEPS), *extra],
                                         stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.start_at = os.path.getsize(out)

    def lines(self):
        with open(self.out) as f:
            f.seek(self.start_at)
            return [ln.split() for ln in f.read().splitlines() if ln.strip()]

    def has(self, *words):
        return any(ln[:len(words)] == list(words) for ln in self.lines())

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@unittest.skipUnless(su.has_serve(), f"{su.TOOLPOOL} has no serve command yet")
class AgentLoopTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-agent-")
        self.serve = None
        self.loops = []

    def tearDown(self):
        for lp in self.loops:
            lp.kill9()
        for s in (self.serve, getattr(self, "ref_serve", None)):
            if s:
                s.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_serve(self, name, log, gate):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        reg = su.write_registry(os.path.join(d, "tools.json"), [])
        with open(reg) as f:
            doc = json.load(f)
        # echo and noop as exec tools that count their runs.
        doc["tools"] = [{"name": "echo", "exec": [STEP_TOOL, log, gate], "timeout": "60s"},
                        {"name": "noop", "exec": [STEP_TOOL, log, gate, "empty"], "timeout": "60s"}]
        with open(reg, "w") as f:
            json.dump(doc, f)
        return su.Serve(reg, os.path.join(d, "store"), f"unix:{d}/tp.sock", os.path.join(d, "serve.log"),
                        workers=4).start()

    def loop(self, addr, *extra):
        lp = Loop(addr, os.path.join(self.dir, "loop.out"), *extra)
        self.loops.append(lp)
        return lp

    def set_gate(self, gate, points):
        with open(gate, "w") as f:
            f.write("".join(f"{job} {step}\n" for job, step in points))

    def reached(self, gate):
        return [tuple(ln[:2]) for ln in su.read_lines(gate + ".reached")]

    def runs(self, log):
        return collections.Counter((ln[0], int(ln[1])) for ln in su.read_lines(log))

    def transcripts(self, addr):
        with Client(addr) as c:
            return {job: c.checkpoint_get(job) for job in N_STEPS}

    def test_killed_twice_resumes_each_job_at_its_next_step(self):
        log, gate = os.path.join(self.dir, "exec.log"), os.path.join(self.dir, "gate")
        self.serve = self.start_serve("main", log, gate)
        addr = self.serve.listen

        # 1. job-0 stalls after step 2's answer; jobs 1-3 hang inside a call.
        first_gates = [("job-1", 3), ("job-2", 4), ("job-3", 2)]
        self.set_gate(gate, first_gates)
        lp = self.loop(addr, "--stall", "job-0:2")
        su.wait_for(lambda: lp.has("stalled", "job-0", "2") and len(self.reached(gate)) == 3, 60,
                    lambda: f"the loop to reach its first kill point; output: {lp.lines()}, "
                    f"gates reached: {self.reached(gate)}")
        self.serve.kill9()
        lp.kill9()
        self.assertEqual(sorted(self.reached(gate)), [(j, str(s)) for j, s in first_gates])
        runs = self.runs(log)
        # Ran: job-0's steps 1 and 2, and each gated job's steps before its gate.
        self.assertEqual(sorted(runs), [("job-0", 1), ("job-0", 2)] + sorted(
            (j, k) for j, s in first_gates for k in range(1, s)))
        self.assertEqual(set(runs.values()), {1})

        # 2. Both again: each job resumes after its checkpoint. Then serve
        # alone is killed while jobs 1-3 are inside a call again.
        os.unlink(gate + ".reached")
        second_gates = [("job-1", 5), ("job-2", 6), ("job-3", 4)]
        self.set_gate(gate, second_gates)
        self.serve.start()
        lp = self.loop(addr)
        su.wait_for(lambda: lp.has("done", "job-0") and len(self.reached(gate)) == 3, 60,
                    lambda: f"the loop to reach its second kill point; output: {lp.lines()}, "
                    f"gates reached: {self.reached(gate)}")
        resumed = {ln[1]: int(ln[2]) for ln in lp.lines() if ln[0] == "resume"}
        self.assertEqual(resumed, {"job-0": 2, "job-1": 3, "job-2": 4, "job-3": 2}, lp.lines())
        self.assertFalse(any(ln[0] == "start" for ln in lp.lines()), lp.lines())
        self.assertEqual(self.runs(log)[("job-0", 2)], 1, "job-0 step 2 ran again")
        self.serve.kill9()
        os.unlink(gate)
        time.sleep(0.3)         # the loop's calls meet a refused connection meanwhile
        self.serve.start()

        # 3. The loop ends by itself.
        try:
            rc = lp.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.fail(f"the loop did not end; output: {lp.lines()}")
        self.assertEqual(rc, 0, lp.lines())
        done = {ln[1]: int(ln[2]) for ln in lp.lines() if ln[0] == "done"}
        self.assertEqual(done, N_STEPS)
        runs = self.runs(log)
        want = {(job, k) for job, n in N_STEPS.items() for k in range(1, n + 1)}
        self.assertEqual(set(runs), want)
        self.assertEqual({k: v for k, v in runs.items() if v != 1}, {}, "steps that ran more than once")

        got = self.transcripts(addr)
        with Client(addr) as c:
            for job, n in N_STEPS.items():
                for k in range(1, n + 1):
                    r = c.result(f"{job}.{k}", wait=False)
                    self.assertTrue(r and r["ok"], (job, k, r))

        # The same loop, never interrupted, on a store of its own.
        ref_log = os.path.join(self.dir, "ref-exec.log")
        self.ref_serve = self.start_serve("ref", ref_log, os.path.join(self.dir, "ref-gate"))
        ref = Loop(self.ref_serve.listen, os.path.join(self.dir, "ref.out"))
        self.loops.append(ref)
        self.assertEqual(ref.proc.wait(90), 0, ref.lines())
        want_cp = self.transcripts(self.ref_serve.listen)
        for job, n in N_STEPS.items():
            cp, ref_cp = got[job], want_cp[job]
            self.assertEqual(cp["step"], n)
            self.assertTrue(cp["state"]["done"])
            msgs = cp["state"]["messages"]
            self.assertEqual(len(msgs), 2 + 2 * n)
            calls = [m["tool_calls"][0]["id"] for m in msgs if "tool_calls" in m]
            self.assertEqual(calls, [f"{job}.{k}" for k in range(1, n + 1)])
            for m in msgs:
                if m["role"] == "tool":
                    self.assertNotIn('"error"', m["content"], m)
            self.assertEqual(msgs, ref_cp["state"]["messages"], job)


if __name__ == "__main__":
    unittest.main(verbosity=2)
