#!/usr/bin/env python3
"""Keeping a store: `toolpool store info`, `prune`, `compact` and retention,
on real stores made by `toolpool run` and `toolpool serve`.

- info's figures against what the run recorded and the file on disk;
- prune by each selector, --dry-run, and open escalations kept;
- prune beside a live `serve` with non-idempotent calls in flight: its
  markers and its running jobs untouched, every call run once;
- kill -9 during prune: `store check` passes and the next prune finishes;
- compact refused while a supervisor holds the store, naming its pid; done
  when none does: the file shrinks to about a fresh store's size, every kept
  record reads back the same, `store check` passes; kill -9 during compact
  leaves a usable store;
- retention: `run --retain` and the registry's "retain".

Real processes on a real store; standard library only.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402
import toolpool_client  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
N = 20000  # calls in the big store: a second or so to make


class StoreUpkeep(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-upkeep-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.ran_log = os.path.join(self.dir, "ran.log")
        slow = 'cat >/dev/null; echo "$TOOLPOOL_CALL_ID" >> "$1"; sleep "${2:-0}"; echo \'{"done": true}\''
        self.registry = serveutil.write_registry(
            os.path.join(self.dir, "tools.json"),
            [{"name": "fail", "exec": ["sh", "-c", "cat >/dev/null; exit 1"], "timeout": "5s",
              "breaker": {"same_call": {"failures": 2, "window": "10m"}}},
             {"name": "quick", "exec": ["sh", "-c", slow, "sh", self.ran_log], "idempotent": False,
              "timeout": "10s"},
             {"name": "charge", "exec": ["sh", "-c", slow, "sh", self.ran_log, "2"], "idempotent": False,
              "timeout": "20s"}])
        self.procs = []
        self.addCleanup(serveutil.kill_all, self.procs)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def tp(self, *args, code=0, stdin=None):
        p = subprocess.run([TOOLPOOL, *args], capture_output=True, text=True, cwd=self.dir, timeout=120,
                           input=stdin)
        if code is not None:
            self.assertEqual(p.returncode, code, f"toolpool {' '.join(args)}: {p.stdout[-2000:]}{p.stderr[-2000:]}")
        return p

    def write_calls(self, name, calls):
        with open(self.path(name), "w") as f:
            for c in calls:
                f.write(json.dumps(c) + "\n")
        return self.path(name)

    def big_calls(self, n=N, prefix="c"):
        """n calls of the plugin's noop in jobs of 10 steps, every 10th of a tool the registry lacks."""
        return [{"id": f"{prefix}{i}", "job": f"{prefix}j{i // 10}", "step": i % 10 + 1,
                 "tool": "noop" if i % 10 else "gone", "args": {"i": i}} for i in range(n)]

    def run_store(self, store, calls, code=1, extra=()):
        f = self.write_calls(os.path.basename(store) + ".jsonl", calls)
        return self.tp("run", "-q", "-j", "2", "--relaxed", "-r", self.registry, "--store", store, "-o",
                       self.path(os.path.basename(store) + ".out"), *extra, f, code=code)

    def info(self, store):
        return json.loads(self.tp("store", "info", "--store", store, "--json").stdout)

    def check(self, store):
        p = self.tp("store", "check", "--store", store)
        self.assertIn("all sound", p.stdout)
        return p.stdout

    # ---- info ----

    def test_info_figures(self):
        store = self.path("st")
        calls = self.big_calls()
        t0 = time.time()
        self.run_store(store, calls)
        t1 = time.time()
        i = self.info(store)
        self.assertEqual(i["format"], 4)
        self.assertEqual(i["file_bytes"], os.stat(os.path.join(store, "data.mdb")).st_size)
        self.assertLessEqual(i["map_used_bytes"], i["map_bytes"])
        self.assertLessEqual(i["free_bytes"], i["map_used_bytes"])
        self.assertEqual(i["results"]["count"], N)
        self.assertEqual(i["results"]["by_outcome"]["ok"]["count"], N - N // 10)
        self.assertEqual(i["results"]["by_outcome"]["UnknownTool"]["count"], N // 10)
        self.assertEqual(sum(o["bytes"] for o in i["results"]["by_outcome"].values()), i["results"]["bytes"])
        self.assertEqual(i["checkpoints"]["count"], N // 10)
        self.assertEqual(i["steps"]["count"], 2 * N)
        self.assertEqual(i["inflight"]["count"], 0)
        self.assertEqual(i["owners"]["live"], 0)
        self.assertTrue(t0 * 1000 - 1000 <= i["results"]["oldest_ms"] <= i["results"]["newest_ms"] <= t1 * 1000 + 1000)
        self.assertEqual(i["databases"]["results"]["records"], N)
        text = self.tp("store", "info", "--store", store).stdout
        self.assertIn("format 4", text)
        self.assertRegex(text, r"results\s+%d\s" % N)
        self.assertIn(f"UnknownTool {N // 10}", text)
        # stats ends with the store's two lines
        self.assertIn(f"{N} results", self.tp("stats", "--store", store).stdout)
        # errors name the store
        p = self.tp("store", "info", "--store", self.path("nowhere"), code=2)
        self.assertIn("nowhere", p.stderr)

    # ---- prune ----

    def test_prune_selectors(self):
        store = self.path("st")
        calls = [{"id": f"a{i}", "job": f"ja{i // 5}", "step": i % 5 + 1, "tool": "noop" if i % 5 else "gone",
                  "args": {"i": i}} for i in range(100)]
        self.run_store(store, calls)
        time.sleep(1.2)
        later = [{"id": f"b{i}", "job": f"jb{i // 5}", "step": i % 5 + 1, "tool": "echo", "args": {"i": i}}
                 for i in range(50)]
        self.run_store(self.path("st"), later, code=0)

        def count():
            return self.info(store)["results"]["count"]

        # nothing named: a usage error, nothing pruned
        self.assertIn("name what to prune", self.tp("store", "prune", "--store", store, code=2).stderr)
        self.assertIn("--older-than", self.tp("store", "prune", "--store", store, "--older-than", "soon",
                                              code=2).stderr)
        # --dry-run lists, drops nothing
        p = self.tp("store", "prune", "--store", store, "--failed", "--dry-run")
        self.assertEqual(sum(1 for l in p.stdout.splitlines() if l.startswith("would prune results")), 20)
        self.assertIn('would prune results "a0": job ja0, tool gone, UnknownTool', p.stdout)
        self.assertEqual(count(), 150)
        # --kind and --failed
        self.assertIn("pruned 0 results", self.tp("store", "prune", "--store", store, "--kind", "Timeout",
                                                  code=1).stdout)
        self.assertIn("pruned 20 results (0 ok, 20 failed", self.tp("store", "prune", "--store", store,
                                                                     "--kind", "UnknownTool").stdout)
        self.assertEqual(count(), 130)
        # --job, several, and their checkpoints go once empty
        self.tp("store", "prune", "--store", store, "--job", "ja0", "--job", "ja1")
        self.assertEqual(count(), 122)
        cps = {json.loads(l)["job"] for l in self.tp("checkpoints", "list", "--store", store, "--json").stdout.splitlines()}
        self.assertNotIn("ja0", cps)
        self.assertIn("ja2", cps)
        # --jobs-from
        with open(self.path("jobs.txt"), "w") as f:
            f.write("ja2\nja3\n\n")
        self.tp("store", "prune", "--store", store, "--jobs-from", self.path("jobs.txt"))
        self.assertEqual(count(), 114)
        # --older-than: the first run's results, not the second's
        self.tp("store", "prune", "--store", store, "--older-than", "1s", "--ok", "--tool", "noop")
        self.assertEqual(count(), 50)
        # --tool
        self.tp("store", "prune", "--store", store, "--tool", "echo", "--job", "jb0")
        self.assertEqual(count(), 45)
        self.check(store)
        # a pruned call runs again on the next run; a kept one does not
        out = self.tp("run", "-q", "-r", self.registry, "--store", store, "-", stdin=json.dumps(later[0]) + "\n"
                      + json.dumps(later[9]) + "\n").stdout
        self.assertEqual(len(out.splitlines()), 2)
        self.assertIn("resumed", self.tp("run", "-r", self.registry, "--store", store, "-",
                                         stdin=json.dumps(later[9]) + "\n").stderr)

    def test_prune_keeps_open_escalations(self):
        store = self.path("st")
        # the same failing call three times in one job: the third is refused CircuitOpen and escalated
        calls = [{"id": f"f{i}", "job": "jf", "step": i + 1, "tool": "fail", "args": {"x": 1}} for i in range(3)]
        self.run_store(store, calls)
        esc = [json.loads(l) for l in self.tp("escalations", "list", "--store", store, "--json").stdout.splitlines()]
        self.assertEqual(len(esc), 1)
        # f1 opened the escalation, f2 was refused under it: both are kept, f0 goes
        p = self.tp("store", "prune", "--store", store, "--failed", "--keep-escalated")
        self.assertIn("pruned 1 result ", p.stdout)
        self.assertIn("kept 2 of them: their calls' escalations are open", p.stdout)
        self.assertEqual(self.info(store)["results"]["count"], 2)
        self.tp("escalations", "resolve", esc[0]["id"], "--store", store)
        self.tp("store", "prune", "--store", store, "--failed")
        self.assertEqual(self.info(store)["results"]["count"], 0)
        self.assertEqual(self.info(store)["escalations"]["count"], 1)  # escalations stay
        self.check(store)

    def test_prune_beside_live_serve(self):
        if not serveutil.has_serve():
            self.skipTest("no serve in this build")
        store = self.path("st")
        done = [{"id": f"q{i}", "job": f"jq{i}", "step": 1, "tool": "quick", "args": {"i": i}} for i in range(20)]
        self.run_store(store, done, code=0)
        sock = "unix:" + self.path("s.sock")
        srv = serveutil.Serve(self.registry, store, sock, self.path("serve.log"), workers=4)
        srv.start()
        self.procs.append(srv.proc)
        c = toolpool_client.Client(sock, retries=0, timeout=60)
        self.addCleanup(c.close)
        # job jq0 has a recorded step 1; its step 2, and three more charges, are in flight in serve
        answers = {}

        def call(cid, job, step):
            cl = toolpool_client.Client(sock, retries=0, timeout=60)
            try:
                answers[cid] = cl.call("charge", {"n": cid}, job=job, step=step, id=cid)
            finally:
                cl.close()

        threads = [threading.Thread(target=call, args=("live0", "jq0", 2))]
        threads += [threading.Thread(target=call, args=(f"live{i}", f"jl{i}", 1)) for i in range(1, 4)]
        for t in threads:
            t.start()
        serveutil.wait_for(lambda: self.info(store)["inflight"]["live"] == 4, 20, "four charges in flight")
        p = self.tp("store", "prune", "--store", store, "--tool", "quick")
        self.assertIn("pruned 19 results", p.stdout)
        self.assertIn("kept 1 of them: their jobs have calls in flight", p.stdout)
        i = self.info(store)
        self.assertEqual(i["inflight"]["live"], 4)  # markers untouched
        self.assertEqual(i["results"]["count"], 1)
        for t in threads:
            t.join(60)
        self.assertEqual(sorted(answers), ["live0", "live1", "live2", "live3"])
        self.assertTrue(all(a["ok"] for a in answers.values()), answers)
        self.assertEqual(srv.stop(), 0, srv.tail())
        ran = serveutil.executions(self.ran_log)
        self.assertEqual(sorted(r for r in ran if r.startswith("live")), ["live0", "live1", "live2", "live3"])
        self.assertEqual(len(ran), len(set(ran)), ran)  # nothing ran twice
        i = self.info(store)
        self.assertEqual((i["results"]["count"], i["inflight"]["count"]), (5, 0))
        self.check(store)

    def test_prune_killed(self):
        store = self.path("st")
        self.run_store(store, self.big_calls())
        # SIGINT (on a copy): it stops after the batch it is in, says so, and exits 1
        copy = self.path("copy")
        shutil.copytree(store, copy)
        p = subprocess.Popen([TOOLPOOL, "store", "prune", "--store", copy, "--ok"], stdout=subprocess.PIPE,
                             text=True)
        self.procs.append(p)
        time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=60)[0]
        self.assertIn(p.returncode, (0, 1), out)
        if p.returncode == 1:
            self.assertIn("interrupted: `toolpool store prune` with the same selectors finishes it", out)
        self.check(copy)
        killed = False
        for delay in (0.05, 0.1, 0.2):
            p = subprocess.Popen([TOOLPOOL, "store", "prune", "--store", store, "--ok"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            killed |= p.wait() == -signal.SIGKILL
            self.check(store)
        self.assertTrue(killed, "every prune ended before its kill: make the store bigger")
        left = self.info(store)["results"]["by_outcome"].get("ok", {"count": 0})["count"]
        self.assertLess(left, N - N // 10)
        p = self.tp("store", "prune", "--store", store, "--ok", code=None)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        i = self.info(store)
        self.assertEqual(i["results"]["count"], N // 10)
        self.assertEqual(i["checkpoints"]["count"], N // 10)  # each job keeps its failed step
        self.check(store)
        self.assertEqual(self.tp("store", "prune", "--store", store, "--ok", code=1).returncode, 1)

    # ---- compact ----

    def test_compact(self):
        if not serveutil.has_serve():
            self.skipTest("no serve in this build")
        store = self.path("st")
        calls = self.big_calls()
        self.run_store(store, calls)
        # refused while a supervisor holds the store, naming it
        sock = "unix:" + self.path("s.sock")
        srv = serveutil.Serve(self.registry, store, sock, self.path("serve.log"), workers=1)
        srv.start()
        self.procs.append(srv.proc)
        p = self.tp("store", "compact", "--store", store, code=2)
        self.assertIn("not compacted", p.stderr)
        self.assertIn(f"pid {srv.proc.pid}", p.stderr)
        self.assertEqual(srv.stop(), 0, srv.tail())

        # pruned to 10% (the jobs whose number ends in 0), then compacted
        keep = [c for c in calls if int(c["job"][2:]) % 10 == 0]
        with open(self.path("gone.txt"), "w") as f:
            f.write("".join(f"cj{j}\n" for j in range(N // 10) if j % 10))
        self.tp("store", "prune", "--store", store, "--jobs-from", self.path("gone.txt"))
        before = os.stat(os.path.join(store, "data.mdb")).st_size
        kept_input = self.write_calls("keep.jsonl", keep)
        served = self.tp("run", "-q", "-r", self.registry, "--store", store, kept_input, code=1).stdout
        cps = self.tp("checkpoints", "list", "--store", store, "--json").stdout
        info = self.info(store)
        p = self.tp("store", "compact", "--store", store)
        self.assertIn("compacted", p.stdout)
        after = os.stat(os.path.join(store, "data.mdb")).st_size
        self.assertLess(after, before / 2)
        self.assertFalse(os.path.exists(os.path.join(store, "compact.new")))
        # within 20% of a fresh store holding the same records
        fresh = self.path("fresh")
        self.run_store(fresh, keep)
        fresh_size = os.stat(os.path.join(fresh, "data.mdb")).st_size
        self.assertLess(after, fresh_size * 1.2, (after, fresh_size))
        # every kept record reads back the same
        self.check(store)
        self.assertEqual(self.tp("checkpoints", "list", "--store", store, "--json").stdout, cps)
        now = self.info(store)
        for kind in ("results", "checkpoints", "steps", "escalations", "breakers"):
            self.assertEqual(now[kind], info[kind], kind)
        again = self.tp("run", "-r", self.registry, "--store", store, kept_input, code=1)
        self.assertEqual(again.stdout, served)
        # (a refusal, UnknownTool, is always checked again: the rest is served from the store)
        self.assertIn(f"resumed: {sum(c['tool'] == 'noop' for c in keep)} recorded results", again.stderr)
        self.assertEqual(self.info(store)["results"]["count"], len(keep))
        # no store: said, and none made
        p = self.tp("store", "compact", "--store", self.path("nowhere"), code=2)
        self.assertIn("nowhere: no store here", p.stderr)
        self.assertFalse(os.path.exists(self.path("nowhere")))

    def test_compact_killed(self):
        store = self.path("st")
        calls = self.big_calls(40000)
        self.run_store(store, calls)
        self.tp("store", "prune", "--store", store, "--ok")
        killed = False
        for delay in (0.005, 0.02, 0.05):
            p = subprocess.Popen([TOOLPOOL, "store", "compact", "--store", store],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            killed |= p.wait() == -signal.SIGKILL
            self.check(store)
            self.assertEqual(self.info(store)["results"]["count"], 4000)
        self.assertTrue(killed, "every compact ended before its kill")
        self.tp("store", "compact", "--store", store)
        self.assertFalse(os.path.exists(os.path.join(store, "compact.new")))
        self.check(store)
        # and the store takes writes again
        self.run_store(store, [{"id": "after", "tool": "echo", "args": {}}], code=0)
        self.assertEqual(self.info(store)["results"]["count"], 4001)

    # ---- retention ----

    def test_retention(self):
        store = self.path("st")
        self.run_store(store, self.big_calls(50, "old"))
        time.sleep(1.2)
        p = self.tp("run", "-r", self.registry, "--store", store, "--retain", "1s", "-",
                    stdin=json.dumps({"id": "n1", "tool": "echo", "args": {}}) + "\n")
        self.assertIn("retention pruned 50 results and 5 checkpoints", p.stderr)
        i = self.info(store)
        self.assertEqual((i["results"]["count"], i["checkpoints"]["count"]), (1, 0))
        self.assertIn("--retain", self.tp("run", "-r", self.registry, "--store", store, "--retain", "bad",
                                          code=2).stderr)
        # the registry's "retain"
        with open(self.registry) as f:
            reg = json.load(f)
        reg["retain"] = "1s"
        with open(self.path("retain.json"), "w") as f:
            json.dump(reg, f)
        time.sleep(1.2)
        self.tp("run", "-q", "-r", self.path("retain.json"), "--store", store, "-",
                stdin=json.dumps({"id": "n2", "tool": "echo", "args": {}}) + "\n")
        self.assertEqual(self.info(store)["results"]["count"], 1)
        self.check(store)
        # serve prunes at its start (and then daily), beside its own calls
        if not serveutil.has_serve():
            return
        self.run_store(store, self.big_calls(30, "s"))
        time.sleep(1.2)
        sock = "unix:" + self.path("s.sock")
        srv = serveutil.Serve(self.registry, store, sock, self.path("serve.log"), workers=1,
                              extra=("--retain", "1s"))
        srv.start()
        self.procs.append(srv.proc)
        serveutil.wait_for(lambda: self.info(store)["results"]["count"] == 0, 20, "serve's retention")
        c = toolpool_client.Client(sock, retries=0, timeout=20)
        self.assertTrue(c.call("echo", {"x": 1}, id="after")["ok"])
        c.close()
        self.assertEqual(srv.stop(), 0, srv.tail())
        self.assertIn("retention pruned 31 results", srv.tail())
        self.check(store)


if __name__ == "__main__":
    unittest.main()
