#!/usr/bin/env python3
"""Three fronts on one store, killed at random: no call of a tool that is
not idempotent ever runs twice, and none is lost.

Each round, a `toolpool run`, a `toolpool serve` and a `toolpool mcp` work
on one fresh store and are all given the same calls (the same ids and args)
of `pay`, a tool that is not idempotent and logs every execution. A killer
sends SIGKILL to one of them, chosen at random, every 0.2 to 1.2 s; each is
started again at once and given again the calls it has no answer for (the
run resumes its input, serve gets its POSTs again, mcp its tools/calls).
When every front has an answer for every call, a last run on the store
(nothing killed) reads every call's record. Then:

- no id is in the execution log twice;
- every id is recorded: ok (its tool ran once) or Interrupted (it ran at
  most once, under a supervisor that was killed);
- every answer any front gave for an id is the record's.

TOOLPOOL_CHAOS_ROUNDS sets the rounds (20), TOOLPOOL_CHAOS_CALLS the calls
a round (24), TOOLPOOL_CHAOS_SEED the random seed (printed at the start).
Real processes on a real store; standard library only.
"""
import http.client
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
ROUNDS = int(os.environ.get("TOOLPOOL_CHAOS_ROUNDS", "20"))
CALLS = int(os.environ.get("TOOLPOOL_CHAOS_CALLS", "24"))
ROUND_LIMIT = 90  # seconds: a round that has not settled by then has lost a call


def answer_of_line(r):
    """(ok, kind) of a result line (run's, serve's)."""
    return (True, None) if r["ok"] else (False, r["error"])


class Front:
    """One front process, started again by its driver after each kill."""

    def __init__(self, test, name, cmd, stdin=None):
        self.test, self.name, self.cmd, self.stdin_mode = test, name, cmd, stdin
        self.proc = None
        self.lock = threading.Lock()
        self.answers = {}   # id -> (ok, kind)
        self.kills = 0
        self.starts = 0

    def spawn(self):
        err = open(os.path.join(self.test.round_dir, "%s-%d.err" % (self.name, self.starts)), "w")
        self.proc = subprocess.Popen(self.cmd(), cwd=self.test.round_dir, stdin=self.stdin_mode,
                                     stdout=subprocess.PIPE if self.stdin_mode else subprocess.DEVNULL,
                                     stderr=err)
        err.close()
        self.starts += 1
        return self.proc

    def done(self):
        return len(self.answers) == CALLS

    def kill(self):
        with self.lock:
            p = self.proc
        if p and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            self.kills += 1


class FrontsChaos(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-fchaos-")
        self.addCleanup(self.tmp.cleanup)
        seed = int(os.environ.get("TOOLPOOL_CHAOS_SEED", str(int(time.time()))))
        print("seed", seed, file=sys.stderr)
        self.rng = random.Random(seed)
        self.seed = seed

    def setup_round(self, k):
        self.round_dir = os.path.join(self.tmp.name, "r%02d" % k)
        os.mkdir(self.round_dir)
        self.store = os.path.join(self.round_dir, "store")
        self.log = os.path.join(self.round_dir, "ran.log")
        pay = ('cat >/dev/null; echo "$TOOLPOOL_CALL_ID" >> "$1"; sleep 0.3; '
               'printf \'{"paid": "%s"}\\n\' "$TOOLPOOL_CALL_ID"')
        self.registry = serveutil.write_registry(
            os.path.join(self.round_dir, "tools.json"),
            [{"name": "pay", "exec": ["sh", "-c", pay, "sh", self.log], "idempotent": False,
              "timeout": "30s", "description": "Pays once."}])
        self.ids = ["p%02d-%03d" % (k, i) for i in range(CALLS)]
        self.calls = [{"id": cid, "tool": "pay", "args": {"i": i}} for i, cid in enumerate(self.ids)]
        self.input = os.path.join(self.round_dir, "in.jsonl")
        with open(self.input, "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in self.calls))
        self.stop = threading.Event()

    # ---- the three drivers: each keeps its front going until it has every answer ----

    def drive_run(self, fr):
        n = 0
        while not self.stop.is_set() and not fr.done():
            out = os.path.join(self.round_dir, "run-%d.out" % n)
            n += 1
            fr.cmd = lambda out=out: [TOOLPOOL, "run", "-q", "-j", "2", "-s", self.store, "-r", self.registry,
                                      "-o", out, self.input]
            with fr.lock:
                p = fr.spawn()
            p.wait()
            try:
                with open(out) as f:
                    lines = [ln for ln in f if ln.endswith("\n")]  # a kill may cut the last one short
            except FileNotFoundError:
                lines = []
            for ln in lines:
                r = json.loads(ln)
                fr.answers[r["id"]] = answer_of_line(r)

    def drive_serve(self, fr):
        port = serveutil.free_port()
        fr.cmd = lambda: [TOOLPOOL, "serve", "-j", "2", "-s", self.store, "-r", self.registry,
                          "--listen", "127.0.0.1:%d" % port]
        todo = queue.Queue()

        def post_all(p):
            while not self.stop.is_set():
                try:
                    c = todo.get(timeout=0.05)
                except queue.Empty:
                    return
                try:
                    h = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    h.request("POST", "/v1/calls", json.dumps(c), {"Content-Type": "application/json"})
                    resp = h.getresponse()
                    body = resp.read()
                    h.close()
                    if resp.status == 200:
                        fr.answers[c["id"]] = answer_of_line(json.loads(body))
                        continue
                except (OSError, http.client.HTTPException):
                    pass
                todo.put(c)
                if p.poll() is not None:
                    return  # killed: the driver starts it again
                time.sleep(0.05)
        while not self.stop.is_set() and not fr.done():
            with fr.lock:
                p = fr.spawn()
            for c in self.calls:
                if c["id"] not in fr.answers:
                    todo.put(c)
            posters = [threading.Thread(target=post_all, args=(p,), daemon=True) for _ in range(6)]
            for t in posters:
                t.start()
            while p.poll() is None and not fr.done() and not self.stop.is_set():
                time.sleep(0.02)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            p.wait()
            for t in posters:
                t.join()
            while not todo.empty():
                todo.get()

    def drive_mcp(self, fr):
        fr.cmd = lambda: [TOOLPOOL, "mcp", "-j", "2", "-s", self.store, "-r", self.registry]
        while not self.stop.is_set() and not fr.done():
            with fr.lock:
                p = fr.spawn()
            try:
                def send(m):
                    p.stdin.write((json.dumps(m) + "\n").encode())
                    p.stdin.flush()
                send({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "fronts_chaos_test", "version": "1"}}})
                send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                for c in self.calls:
                    if c["id"] not in fr.answers:
                        send({"jsonrpc": "2.0", "id": c["id"], "method": "tools/call",
                              "params": {"name": "pay", "arguments": c["args"], "_meta": {"id": c["id"]}}})
                for line in p.stdout:
                    m = json.loads(line)
                    if m.get("id") in self.ids and "result" in m:
                        res = m["result"]
                        if res.get("isError"):
                            fr.answers[m["id"]] = (False, res["structuredContent"]["error"])
                        else:
                            fr.answers[m["id"]] = (True, None)
                    if fr.done() or self.stop.is_set():
                        break
            except (OSError, ValueError):
                pass
            if p.poll() is None:
                p.stdin.close()
                p.wait()
            p.stdout.close()
            if p.stdin and not p.stdin.closed:
                try:
                    p.stdin.close()
                except OSError:
                    pass

    def killer(self, fronts):
        while not self.stop.wait(self.rng.uniform(0.2, 1.2)):
            live = [f for f in fronts if not f.done()]
            if not live:
                return
            self.rng.choice(live).kill()

    def play_round(self, k):
        self.setup_round(k)
        fronts = [Front(self, "run", None), Front(self, "serve", None), Front(self, "mcp", None, subprocess.PIPE)]
        drivers = [threading.Thread(target=d, args=(f,), daemon=True)
                   for d, f in zip((self.drive_run, self.drive_serve, self.drive_mcp), fronts)]
        for t in drivers:
            t.start()
        kt = threading.Thread(target=self.killer, args=(fronts,), daemon=True)
        kt.start()
        end = time.monotonic() + ROUND_LIMIT
        for t in drivers:
            t.join(max(0.1, end - time.monotonic()))
        stuck = [f.name for f, t in zip(fronts, drivers) if t.is_alive()]
        self.stop.set()
        kt.join()
        for f in fronts:
            f.kill()
        for t in drivers:
            t.join(30)
        where = "round %d (seed %d, %s)" % (k, self.seed, self.round_dir)
        self.assertEqual(stuck, [], "%s: fronts without every answer after %d s: %s; answers %s" % (
            where, ROUND_LIMIT, stuck, {f.name: len(f.answers) for f in fronts}))

        # The records, read by a run nothing kills.
        final = os.path.join(self.round_dir, "final.out")
        p = subprocess.run([TOOLPOOL, "run", "-q", "-s", self.store, "-r", self.registry, "-o", final, self.input],
                           cwd=self.round_dir, capture_output=True, text=True, timeout=120)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        records = {}
        with open(final) as f:
            for ln in f:
                r = json.loads(ln)
                records[r["id"]] = answer_of_line(r)
        ran = serveutil.executions(self.log)
        twice = sorted({i for i in ran if ran.count(i) > 1})
        self.assertEqual(twice, [], "%s: ran more than once: %s" % (where, twice))
        self.assertEqual(sorted(records), sorted(self.ids), where)
        for cid, rec in records.items():
            self.assertIn(rec, ((True, None), (False, "Interrupted")), "%s: %s" % (where, cid))
            if rec[0]:
                self.assertEqual(ran.count(cid), 1, "%s: %s ok but ran %d times" % (where, cid, ran.count(cid)))
            for f in fronts:
                self.assertEqual(f.answers[cid], rec, "%s: %s answered %s by %s, recorded %s" % (
                    where, cid, f.answers[cid], f.name, rec))
        return sum(f.kills for f in fronts), sum(r == (False, "Interrupted") for r in records.values())

    def test_random_kills_of_three_fronts_never_run_a_call_twice(self):
        kills = interrupted = 0
        t0 = time.monotonic()
        for k in range(ROUNDS):
            a, b = self.play_round(k)
            kills += a
            interrupted += b
        print("%d rounds, %d calls each: %d kills, %d calls Interrupted, none run twice, in %.1f s" % (
            ROUNDS, CALLS, kills, interrupted, time.monotonic() - t0), file=sys.stderr)
        self.assertGreater(kills, ROUNDS, "the killer hardly killed: the test proves little")


if __name__ == "__main__":
    unittest.main(verbosity=2)
