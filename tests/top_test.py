#!/usr/bin/env python3
"""`toolpool top` and `toolpool metrics` read every supervisor on a store
from its scoreboard in shared memory: a real `toolpool run` with slow exec
tools and a `serve` beside it on one store.

- `top --once --json` sees the run's running calls with their attempts,
  a call past its timeout as stuck (its tool ignores TERM during a long
  kill_grace), per-tool counters and failures by kind, the run's total and
  progress, and the serve; once the run is killed, it lists it no more.
- `metrics --store` prints Prometheus text that parses (HELP and TYPE once
  per family, before its samples; every sample name{labels} value), one
  series set per supervisor labelled with its pid and command.
- With the argument `tmux`: the live view in a real terminal (tmux:
  send-keys, capture-pane): it draws the running calls, `s` changes their
  order, `q` quits with status 0. Exits 77 when tmux is not installed.

Standard library only; the build folder as in serveutil.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
N_SLOW = 40
N_FAIL = 5

# Attempt 1 fails transient (75) at once; attempt 2 ignores TERM and sleeps past its 1 s timeout,
# held by the 30 s kill_grace: running, past its timeout, for 25 s or until the run is killed.
STUCK = "trap '' TERM; cat >/dev/null; [ \"$TOOLPOOL_ATTEMPT\" = 1 ] && exit 75; sleep 25"


def registry(path):
    with open(path, "w") as f:
        json.dump({"tools": [
            {"name": "slow", "exec": ["sh", "-c", "cat >/dev/null; sleep 0.3; echo '{}'"], "timeout": "10s"},
            {"name": "stuck", "exec": ["sh", "-c", STUCK], "timeout": "1s", "kill_grace": "30s", "attempts": 2,
             "backoff": {"base": "10ms", "jitter": "none"}},
            {"name": "denied", "exec": ["sh", "-c", "cat >/dev/null; exit 77"], "timeout": "5s"},
        ]}, f)


def calls(path):
    with open(path, "w") as f:
        f.write(json.dumps({"id": "st", "tool": "stuck", "args": {}}) + "\n")
        for i in range(N_FAIL):
            f.write(json.dumps({"id": f"d{i}", "tool": "denied", "args": {}}) + "\n")
        for i in range(N_SLOW):
            f.write(json.dumps({"id": f"s{i}", "job": f"job{i % 4}", "step": i, "tool": "slow", "args": {}}) + "\n")


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? '
                    r'(-?[0-9.e+]+|\+Inf|NaN)$')


def parse_prometheus(text):
    """The exposition as {family: [(name, {label: value}, value)]}; fails on anything the format does not allow."""
    families, types, helps = {}, {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helps, f"HELP twice for {name}"
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            assert name not in types, f"TYPE twice for {name}"
            assert typ in ("counter", "gauge", "histogram"), line
            types[name] = typ
            families[name] = []
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample: {line!r}"
            name = m.group(1)
            fam = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
            assert fam in types, f"a sample before its TYPE: {line!r}"
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            families[fam].append((name, labels, float(m.group(3))))
    return families


class Top(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-top-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.store = os.path.join(self.dir, "store")
        reg = os.path.join(self.dir, "tools.json")
        registry(reg)
        cf = os.path.join(self.dir, "calls.jsonl")
        calls(cf)
        self.run_proc = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "3", "--store", self.store, "--registry", reg,
                                          "-o", os.path.join(self.dir, "out"), cf],
                                         stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.addCleanup(self.kill_run)

    def kill_run(self):
        # (the stuck tool's sleep, which ignores TERM, outlives its worker by 25 s at most)
        if self.run_proc.poll() is None:
            self.run_proc.kill()
            self.run_proc.wait()

    def top(self, *args):
        p = subprocess.run([TOOLPOOL, "top", "--store", self.store, "--once", *args], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def snapshot(self):
        return json.loads(self.top("--json"))

    def wait_run(self, cond, what, timeout=30):
        got = []

        def seen():
            if not os.path.exists(self.store):
                return False
            for s in self.snapshot()["supervisors"]:
                if s["pid"] == self.run_proc.pid and cond(s):
                    got[:] = [s]
                    return True
            return False
        serveutil.wait_for(seen, timeout, what, step=0.1)
        return got[0]

    def test_once(self):
        sock = os.path.join(self.dir, "sock")
        sreg = serveutil.write_registry(os.path.join(self.dir, "serve-tools.json"), [])
        serve = serveutil.Serve(sreg, self.store, "unix:" + sock, os.path.join(self.dir, "serve.log")).start()
        self.addCleanup(serve.kill9)

        def stuck_and_done(s):
            st = [c for c in s["running"] if c["id"] == "st"]
            tools = {t["tool"]: t for t in s["tools"]}
            return st and st[0]["stuck"] and tools["denied"]["calls"] == N_FAIL and tools["slow"]["calls"] >= 3
        s = self.wait_run(stuck_and_done, "top to see the stuck call and the failures")
        self.assertEqual(s["command"], "run")
        self.assertTrue(s["scoreboard"])
        self.assertEqual(s["total"], 1 + N_FAIL + N_SLOW)
        self.assertGreater(s["done"], 0)
        self.assertLessEqual(s["done"], s["total"])
        self.assertAlmostEqual(s["progress"], s["done"] / s["total"], places=6)
        st = [c for c in s["running"] if c["id"] == "st"][0]
        self.assertEqual(st["tool"], "stuck")
        self.assertEqual(st["attempt"], 2)
        self.assertEqual(st["timeout_s"], 1.0)
        self.assertGreater(st["age_s"], 1.0)
        ages = [c["age_s"] for c in s["running"]]
        self.assertEqual(ages, sorted(ages, reverse=True))  # oldest first
        self.assertLessEqual(len(s["running"]), 3)  # -j 3
        self.assertEqual(s["workers"]["busy"] + s["workers"]["idle"], 3)
        tools = {t["tool"]: t for t in s["tools"]}
        d = tools["denied"]
        self.assertEqual((d["ok"], d["failed"], d["attempts"], d["retries"]), (0, N_FAIL, N_FAIL, 0))
        self.assertEqual(d["failures"], {"PermissionDenied": N_FAIL})
        self.assertEqual(d["classes"], {"permanent": N_FAIL})
        self.assertEqual(tools["stuck"]["in_flight"], 1)
        self.assertEqual(tools["stuck"]["calls"], 0)
        self.assertEqual(tools["slow"]["failures"], {})
        self.assertGreater(tools["slow"]["p50_ms"], 250)
        self.assertGreater(tools["slow"]["calls_per_s"], 0)
        # each counter is read whole, but not all at one instant: a call ending as they are read may count twice
        held = tools["slow"]["calls"] + tools["slow"]["in_flight"] + tools["slow"]["queued"]
        self.assertGreaterEqual(held, N_SLOW)
        self.assertLessEqual(held, N_SLOW + 3)
        # the serve beside it, with its own board
        others = [x for x in self.snapshot()["supervisors"] if x["pid"] == serve.proc.pid]
        self.assertEqual(len(others), 1)
        self.assertEqual(others[0]["command"], "serve")
        self.assertIsNone(others[0]["total"])

        text = self.top()
        self.assertRegex(text, rf"run \(pid {self.run_proc.pid}\), up [\d.ms]+: \d+ answered of about 46")
        self.assertRegex(text, r"\n  st +STUCK +stuck +st +2 ")
        self.assertRegex(text, r"\n  denied +5 +0 +5 .*PermissionDenied 5")
        self.assertIn(f"serve (pid {serve.proc.pid})", text)

        # metrics: Prometheus text, a series set per supervisor
        p = subprocess.run([TOOLPOOL, "metrics", "--store", self.store], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        fams = parse_prometheus(p.stdout)
        run = str(self.run_proc.pid)
        calls_total = {(lab["pid"], lab["tool"], lab["outcome"]): v for _, lab, v in fams["toolpool_calls_total"]}
        self.assertEqual(calls_total[(run, "denied", "PermissionDenied")], N_FAIL)
        inflight = {(lab["pid"], lab["tool"]): v for _, lab, v in fams["toolpool_calls_in_flight"]}
        self.assertEqual(inflight[(run, "stuck")], 1)
        pids = {lab["pid"]: lab["command"] for _, lab, _ in fams["toolpool_workers"]}
        self.assertEqual(pids, {run: "run", str(serve.proc.pid): "serve"})
        expected = {lab["pid"]: v for _, lab, v in fams["toolpool_run_calls_expected"]}
        self.assertEqual(expected, {run: 46})
        hist = [(n, lab, v) for n, lab, v in fams["toolpool_call_duration_seconds"]
                if lab.get("pid") == run and lab.get("tool") == "denied"]
        count = [v for n, lab, v in hist if n.endswith("_count")]
        inf = [v for n, lab, v in hist if lab.get("le") == "+Inf"]
        self.assertEqual(count, [N_FAIL])
        self.assertEqual(inf, [N_FAIL])
        self.assertIn("toolpool_breakers", fams)  # the store's part

        # the serve's own /metrics: the same renderer, unlabelled
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
        import toolpool_client
        c = toolpool_client.Client("unix:" + sock)
        self.addCleanup(c.close)
        self.assertTrue(c.call("noop", {}, id="n1")["ok"])
        sf = parse_prometheus(serve_metrics(sock))
        noop = [v for _, lab, v in sf["toolpool_calls_total"] if lab == {"tool": "noop", "outcome": "ok"}]
        self.assertEqual(noop, [1])

        # killed: its owner entry stays in the store, but top checks it alive
        self.run_proc.send_signal(signal.SIGKILL)
        self.run_proc.wait()
        self.assertEqual([x["pid"] for x in self.snapshot()["supervisors"]], [serve.proc.pid])
        self.assertEqual(serve.stop(), 0)
        self.assertEqual(self.snapshot()["supervisors"], [])
        self.assertIn("no supervisor is working on this store", self.top())

    def test_usage(self):
        p = subprocess.run([TOOLPOOL, "top", "--store", self.store], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 2)  # no terminal: the live view refuses, pointing at --once
        self.assertIn("--once", p.stderr)
        p = subprocess.run([TOOLPOOL, "top", "--sort", "size", "--once"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        for cmd in ("top", "metrics"):
            p = subprocess.run([TOOLPOOL, cmd, "--help"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0)
            self.assertIn(f"usage: toolpool {cmd}", p.stdout)


def serve_metrics(sock):
    """GET /metrics over the serve's Unix socket."""
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return data.split(b"\r\n\r\n", 1)[1].decode()


class TopPipelined(unittest.TestCase):
    """A call that waits on its worker behind another (pipelining) is queued, not running: its age and
    timeout count from when the worker reaches it, so it is never STUCK while it waits."""

    def test_queued_is_not_stuck(self):
        tmp = tempfile.TemporaryDirectory(prefix="tp-top-pipe-")
        self.addCleanup(tmp.cleanup)
        store, reg, cf = (os.path.join(tmp.name, n) for n in ("store", "tools.json", "calls.jsonl"))
        plugin = os.path.join(serveutil.BUILD, "tests", "testplugin.so")
        with open(reg, "w") as f:
            json.dump({"tools": [{"name": "sleep", "plugin": {"path": plugin}, "timeout": "1s"}]}, f)
        with open(cf, "w") as f:
            # quick calls first, so the tool's average fits a worker's pipeline; then three of 0.7 s in a row,
            # the third waiting 1.4 s on the one worker: past its 1 s timeout, had its clock started at dispatch
            for i in range(300):
                f.write(json.dumps({"id": f"q{i}", "tool": "sleep", "args": {"ms": 0}}) + "\n")
            for i in range(3):
                f.write(json.dumps({"id": f"w{i}", "tool": "sleep", "args": {"ms": 700}}) + "\n")
        run = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "1", "--pipeline", "64", "--store", store,
                                "--registry", reg, "-o", os.path.join(tmp.name, "out"), cf],
                               stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.addCleanup(lambda: run.poll() is None and (run.kill(), run.wait()))
        seen_queued, seen_stuck, deadline = False, [], time.monotonic() + 20
        while run.poll() is None and time.monotonic() < deadline:
            if os.path.exists(store):
                p = subprocess.run([TOOLPOOL, "top", "--store", store, "--once", "--json"], capture_output=True,
                                   text=True, timeout=30)
                for sup in json.loads(p.stdout or '{"supervisors": []}')["supervisors"] if p.returncode == 0 else []:
                    for c in sup.get("running", []):
                        seen_queued |= c["queued"]
                        if c["stuck"]:
                            seen_stuck.append(c)
                        if c["queued"]:
                            self.assertEqual(c["age_s"], 0, c)
            time.sleep(0.05)
        self.assertEqual(run.wait(30), 0)
        self.assertTrue(seen_queued, "no call was seen queued on its worker")
        self.assertEqual(seen_stuck, [])
        out = open(os.path.join(tmp.name, "out")).read().splitlines()
        self.assertTrue(all(json.loads(line)["ok"] for line in out), out[-3:])


class TopTmux(Top):
    """The live view, in a real terminal."""
    test_once = None
    test_usage = None

    def test_live(self):
        name = f"tptop{os.getpid()}"
        env_sock = os.path.join(self.dir, "tmux.sock")
        tmux = ["tmux", "-S", env_sock]
        self.capture = lambda n: subprocess.run(tmux + ["capture-pane", "-p", "-t", n], capture_output=True,
                                                text=True).stdout
        self.wait_run(lambda s: any(c["id"] == "st" and c["stuck"] for c in s["running"]), "the stuck call")
        subprocess.run(tmux + ["new-session", "-d", "-s", name, "-x", "160", "-y", "50",
                               f"{TOOLPOOL} top --store {self.store}; echo TOP-EXITED $?; sleep 60"], check=True)
        self.addCleanup(lambda: subprocess.run(tmux + ["kill-server"], stderr=subprocess.DEVNULL))
        screen = []

        def drawn(*needles):
            def cond():
                screen[:] = [self.capture(name)]
                return all(n in screen[0] for n in needles)
            return cond
        serveutil.wait_for(drawn("RUNNING CALL", f"run (pid {self.run_proc.pid})", "STUCK", "running calls by age"),
                           20, lambda: "top to draw the run:\n" + "".join(screen), step=0.2)
        self.assertRegex(screen[0], r"toolpool top - store .* - 1 supervisor - q quits, s sorts")
        self.assertRegex(screen[0], r"\n  st +STUCK +stuck ")
        subprocess.run(tmux + ["send-keys", "-t", name, "s"], check=True)
        serveutil.wait_for(drawn("running calls by tool"), 10, lambda: "s to sort by tool:\n" + "".join(screen),
                           step=0.1)
        subprocess.run(tmux + ["send-keys", "-t", name, "q"], check=True)
        serveutil.wait_for(drawn("TOP-EXITED 0"), 10, lambda: "q to quit:\n" + "".join(screen), step=0.1)
        self.assertNotIn("RUNNING CALL", screen[0])  # the alternate screen is left: the shell's own is back


if __name__ == "__main__":
    if sys.argv[1:] == ["tmux"]:
        if shutil.which("tmux") is None:
            print("tmux is not installed: skipped")
            sys.exit(77)
        try:  # a terminal of its own needs a pseudo-terminal (a bare chroot has no /dev/pts)
            for fd in os.openpty():
                os.close(fd)
        except OSError as e:
            print(f"no pseudo-terminal here ({e}): skipped")
            sys.exit(77)
        sys.argv[1:] = ["-v", "TopTmux"]
    else:
        sys.argv[1:] = ["-v", "Top", "TopPipelined"]
    unittest.main()
