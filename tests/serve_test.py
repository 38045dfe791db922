#!/usr/bin/env python3
"""toolpool serve, end to end: a real service process per test, on a temporary
Unix socket (or a loopback port) and a temporary store, driven over HTTP.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
EXAMPLE_SO = os.path.join(BUILD, "examples", "example.so")
TEST_TOOLS = os.environ.get("TOOLPOOL_TEST_TOOLS", os.path.join(HERE, "tools"))

# A tool that notes each run of a call (its id, one line in the log file
# named by argv[1]), sleeps args.s seconds, and answers.
WORK_TOOL = r"""
import json, os, sys, time
a = json.load(sys.stdin)
with open(sys.argv[1], "a") as f:
    f.write(os.environ.get("TOOLPOOL_CALL_ID", "?") + "\n")
time.sleep(float(a.get("s", 0)))
print(json.dumps({"id": os.environ.get("TOOLPOOL_CALL_ID"), "slept": a.get("s", 0)}))
"""


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket."""

    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Server:
    """One `toolpool serve` process on its own socket, store and registry."""

    def __init__(self, test, tmp, store=None, tcp=False, listen=None, args=(), token=None):
        self.test = test
        self.token = token
        self.tmp = tmp
        self.store = store or os.path.join(tmp, "store")
        self.sock_path = os.path.join(tmp, "tp.sock")
        self.listen = listen or ("127.0.0.1:0" if tcp else "unix:" + self.sock_path)
        self.tcp = self.listen.split(":")[0] != "unix"
        self.args = list(args)
        self.proc = None
        self.port = None
        self.err_path = os.path.join(tmp, "serve-%d.err" % time.monotonic_ns())

    def command(self):
        return [TOOLPOOL, "serve", "--listen", self.listen, "-r", os.path.join(self.tmp, "tools.json"),
                "-s", self.store, "-j", "2"] + self.args

    def start(self):
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err, cwd=self.tmp)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            text = self.stderr()
            m = re.search(r"listening on (\S+)", text)
            if m:
                if self.tcp:
                    self.port = int(m.group(1).rsplit(":", 1)[1])
                self.wait_ready()
                return self
            if self.proc.poll() is not None:
                raise AssertionError("serve exited %d: %s" % (self.proc.returncode, text))
            time.sleep(0.02)
        raise AssertionError("serve did not start: " + self.stderr())

    def wait_ready(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            auth = {"Authorization": "Bearer " + self.token} if self.token else {}
            if self.request("GET", "/readyz", headers=auth)[0] == 200:
                return
            time.sleep(0.05)
        raise AssertionError("serve never became ready")

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def connection(self, timeout=30):
        if self.tcp:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return UnixHTTPConnection(self.sock_path, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers, body bytes) of one request on a fresh connection."""
        c = self.connection(timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=30):
        status, _, data = self.request(method, path, body, headers, timeout)
        return status, json.loads(data) if data else None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("serve did not stop within %ss" % timeout)
        self.err.close()
        return self.proc.returncode


class ServeTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="serve_test.")
        self.tmp = self._tmp.name
        self.log = os.path.join(self.tmp, "runs.log")
        open(self.log, "w").close()
        tool = os.path.join(self.tmp, "work.py")
        with open(tool, "w") as f:
            f.write(WORK_TOOL)
        self.registry = {
            "defaults": {"timeout": "30s"},
            "tools": [
                {"name": "echo", "description": "Returns its args.", "plugin": {"path": EXAMPLE_SO}},
                {"name": "noop", "description": "Does nothing.", "plugin": {"path": EXAMPLE_SO}},
                {"name": "work", "description": "Notes its run, sleeps args.s seconds.",
                 "exec": ["python3", tool, self.log], "idempotent": True,
                 "parameters": {"type": "object", "properties": {"s": {"type": "number"}}}},
                {"name": "strict", "description": "Takes a string q.", "plugin": {"path": EXAMPLE_SO},
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
                {"name": "deny", "description": "Always forbidden.",
                 "exec": [os.path.join(TEST_TOOLS, "exit.sh"), "77"],
                 # every call its own job: only scope "global" counts them together
                 "breaker": {"same_call": {"failures": 2, "window": "10m", "scope": "global"}}},
            ],
        }
        self.write_registry()
        self.servers = []

    def tearDown(self):
        # Every service still up stops cleanly (exit 0: under the sanitizers, no leak either),
        # and none said a sanitizer's word.
        problems = []
        for s in self.servers:
            if s.proc and s.proc.poll() is None:
                try:
                    rc = s.stop()
                    if rc != 0:
                        problems.append("serve exited %d at the end of the test" % rc)
                except AssertionError as e:
                    problems.append(str(e))
            text = s.stderr()
            if "Sanitizer" in text or "runtime error:" in text:
                problems.append("sanitizer report:\n" + text)
        self._tmp.cleanup()
        if problems:
            self.fail("\n".join(problems))

    def write_registry(self):
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(self.registry, f)

    def serve(self, **kw):
        s = Server(self, self.tmp, **kw)
        self.servers.append(s)
        return s.start()

    def runs(self):
        with open(self.log) as f:
            return [line.strip() for line in f if line.strip()]

    def toolpool(self, *args, stdin=None):
        p = subprocess.run([TOOLPOOL] + list(args), input=stdin, capture_output=True, text=True, timeout=60,
                           cwd=self.tmp)
        return p.returncode, p.stdout, p.stderr

    # ---- calls ----

    def test_call_answers_run_result_line(self):
        s = self.serve()
        status, headers, body = s.request("POST", "/v1/calls", {"id": "c1", "tool": "echo", "args": {"b": [1, 2.5]}})
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertTrue(body.endswith(b"\n") and body.count(b"\n") == 1)
        r = json.loads(body)
        self.assertEqual((r["id"], r["job"], r["tool"], r["ok"], r["result"]), ("c1", "c1", "echo", True, {"b": [1, 2.5]}))
        # run, on the same store, answers the recorded line: byte for byte the same.
        rc, out, err = self.toolpool("run", "-q", "-r", "tools.json", "-s", s.store, "-",
                                     stdin='{"id": "c1", "tool": "echo", "args": {"b": [1, 2.5]}}\n')
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.encode(), body)
        self.assertEqual(s.stop(), 0)

    def test_call_without_id_gets_one_and_deadline(self):
        s = self.serve()
        st, r = s.json("POST", "/v1/calls", {"tool": "work", "args": {"s": 0}, "deadline": "20s"})
        self.assertEqual(st, 200)
        self.assertTrue(r["id"].startswith("call-"), r["id"])
        self.assertTrue(r["ok"])
        st2, r2 = s.json("POST", "/v1/calls", {"tool": "noop"})
        self.assertNotEqual(r["id"], r2["id"])
        st, r = s.json("POST", "/v1/calls", {"tool": "noop", "deadline": "soon"})
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        self.assertIn('"deadline" must be a duration', r["message"])

    def test_errors(self):
        s = self.serve(args=["--max-body", "4096", "--max-args", "100"])
        # Malformed JSON and missing fields: run's words, without "line N: ".
        st, r = s.json("POST", "/v1/calls", "{not json")
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        self.assertTrue(r["message"].startswith("not valid JSON: "), r["message"])
        rc, out, _ = self.toolpool("run", "-q", "-r", "tools.json", "-s", os.path.join(self.tmp, "other"), "-",
                                   stdin="{not json\n")
        self.assertEqual(json.loads(out)["message"], "line 1: " + r["message"])
        st, r = s.json("POST", "/v1/calls", {"id": "x"})
        self.assertEqual((st, r["message"]), (400, '"tool" must be a non-empty string'))
        st, r = s.json("POST", "/v1/calls", {"id": "x", "tool": "echo", "args": [1]})
        self.assertEqual((st, r["message"]), (400, '"args" must be a JSON object'))
        st, r = s.json("POST", "/v1/calls", {"id": "", "tool": "echo"})
        self.assertEqual((st, r["message"]), (400, '"id" must be a non-empty string'))
        st, r = s.json("POST", "/v1/calls", "[1]")
        self.assertEqual((st, r["message"]), (400, "a call must be a JSON object"))
        st, r = s.json("POST", "/v1/calls", "")
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        # Refused by the engine before it runs: args past --max-args, an id past the store's keys.
        st, r = s.json("POST", "/v1/calls", {"id": "big", "tool": "echo", "args": {"x": "y" * 200}})
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        self.assertIn("over the 100-byte limit (--max-args)", r["message"])
        st, r = s.json("POST", "/v1/calls", {"id": "i" * 600, "tool": "echo"})
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        self.assertIn("the store takes ids and job names of at most", r["message"])
        # Unknown tool: 404 with the did-you-mean.
        st, r = s.json("POST", "/v1/calls", {"id": "u1", "tool": "ecko"})
        self.assertEqual((st, r["error"]), (404, "UnknownTool"))
        self.assertEqual(r["message"], 'unknown tool "ecko" (closest: echo, noop, work)')
        # InvalidArguments is a result: the model's to read.
        st, r = s.json("POST", "/v1/calls", {"id": "ia", "tool": "strict", "args": {"q": 5}})
        self.assertEqual((st, r["ok"], r["error"], r["attempts"]), (200, False, "InvalidArguments", 0))
        self.assertIn("/q: expected string", r["message"])
        # Unknown path, wrong method.
        st, r = s.json("GET", "/v2/nothing")
        self.assertEqual((st, r["error"]), (404, "NotFound"))
        status, headers, body = s.request("GET", "/v1/calls")
        self.assertEqual((status, headers.get("Allow")), (405, "POST"))
        self.assertEqual(json.loads(body)["error"], "MethodNotAllowed")
        st, r = s.json("PUT", "/v1/calls/x")
        self.assertEqual(st, 405)
        st, r = s.json("GET", "/v1/calls/")
        self.assertEqual(st, 404)
        # Too large a body.
        status, _, _ = s.request("POST", "/v1/calls", json.dumps({"tool": "echo", "args": {"x": "y" * 8000}}))
        self.assertEqual(status, 413)
        # An id recorded for other input.
        self.assertEqual(s.json("POST", "/v1/calls", {"id": "k", "tool": "echo", "args": {"a": 1}})[0], 200)
        st, r = s.json("POST", "/v1/calls", {"id": "k", "tool": "echo", "args": {"a": 2}})
        self.assertEqual((st, r["error"]), (409, "InvalidRequest"))
        self.assertIn("recorded in the store for other input", r["message"])
        self.assertEqual(s.stop(), 0)

    def test_recorded_id_is_not_run_again(self):
        s = self.serve()
        call = {"id": "once", "tool": "work", "args": {"s": 0}}
        a = s.request("POST", "/v1/calls", call)
        b = s.request("POST", "/v1/calls", call)
        self.assertEqual((a[0], b[0]), (200, 200))
        self.assertEqual(a[2], b[2])
        self.assertEqual(self.runs(), ["once"])

    def test_live_id_is_attached_not_run_twice(self):
        s = self.serve()
        call = {"id": "live", "tool": "work", "args": {"s": 1.5}}
        got = [None, None]

        def post(i):
            got[i] = s.request("POST", "/v1/calls", call)

        t = threading.Thread(target=post, args=(0,))
        t.start()
        self.wait_for(lambda: self.runs() == ["live"])
        # Running now: a second POST attaches to it, and so does a wait=0 one.
        t2 = threading.Thread(target=post, args=(1,))
        t2.start()
        st, headers, body = s.request("POST", "/v1/calls?wait=0", call)
        self.assertEqual(st, 202)
        # Other input under the live id: refused, not attached.
        st, r = s.json("POST", "/v1/calls", {"id": "live", "tool": "work", "args": {"s": 2}})
        self.assertEqual((st, r["error"]), (409, "InvalidRequest"))
        t.join(30)
        t2.join(30)
        self.assertEqual(got[0][0], 200)
        self.assertEqual(got[0][2], got[1][2])
        self.assertEqual(self.runs(), ["live"])

    def test_wait0_then_get(self):
        s = self.serve()
        status, headers, body = s.request("POST", "/v1/calls?wait=0", {"id": "w/1 x", "tool": "work", "args": {"s": 1}})
        self.assertEqual(status, 202)
        self.assertEqual(json.loads(body), {"id": "w/1 x", "status": "running"})
        self.assertEqual(headers["Location"], "/v1/calls/w%2F1%20x")
        st, r = s.json("GET", headers["Location"])
        self.assertEqual((st, r), (202, {"id": "w/1 x", "status": "running"}))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st, r = s.json("GET", headers["Location"])
            if st == 200:
                break
            time.sleep(0.05)
        self.assertEqual((st, r["id"], r["ok"], r["result"]["slept"]), (200, "w/1 x", True, 1))
        st, r = s.json("GET", "/v1/calls/nobody")
        self.assertEqual((st, r["error"]), (404, "NotFound"))

    def test_bounds_and_refusals_keep_serving(self):
        s = self.serve(args=("--max-queued", "3"))
        # A job name past the store's keys: 400, and the service goes on.
        st, r = s.json("PUT", "/v1/jobs/" + "j" * 600 + "/checkpoint", {"step": 1, "state": {}})
        self.assertEqual((st, r["error"]), (400, "InvalidRequest"))
        self.assertIn("at most 511", r["message"])
        self.assertEqual(s.json("POST", "/v1/calls", {"id": "after", "tool": "noop"})[0], 200)
        # A refused answer is not kept: GET finds what the store holds.
        self.assertEqual(s.json("POST", "/v1/calls", {"id": "k", "tool": "noop", "args": {"a": 1}})[0], 200)
        s.json("POST", "/v1/calls?wait=0", {"id": "k", "tool": "noop", "args": {"a": 2}})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st, r = s.json("GET", "/v1/calls/k")
            if st == 200:
                break
            time.sleep(0.05)
        self.assertEqual((st, r["args"]), (200, {"a": 1}))
        # wait=0 calls past --max-queued: 503 with Retry-After, nothing lost before it.
        codes = []
        for i in range(6):
            status, headers, body = s.request("POST", "/v1/calls?wait=0",
                                              {"id": "q%d" % i, "tool": "work", "args": {"s": 30}})
            codes.append(status)
            if status == 503:
                self.assertEqual(headers["Retry-After"], "1")
        self.assertEqual(codes[:3], [202, 202, 202])
        self.assertIn(503, codes[3:])
        for i in range(3):
            self.assertEqual(s.json("DELETE", "/v1/calls/q%d" % i)[0], 200)

    def test_cancel(self):
        s = self.serve()
        waiter = {}
        t = threading.Thread(target=lambda: waiter.update(r=s.json("POST", "/v1/calls",
                                                                     {"id": "long", "tool": "work", "args": {"s": 30}})))
        t.start()
        self.wait_for(lambda: self.runs() == ["long"])  # its POST made the call: it waits for it
        self.assertEqual(s.request("POST", "/v1/calls?wait=0", {"id": "long", "tool": "work", "args": {"s": 30}})[0], 202)
        t0 = time.monotonic()
        st, r = s.json("DELETE", "/v1/calls/long")
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual((st, r["ok"], r["error"], r["class"]), (200, False, "Cancelled", "guard"))
        t.join(10)
        self.assertEqual(waiter["r"], (200, r))  # the attached POST got the same final answer
        self.assertEqual(s.json("GET", "/v1/calls/long"), (200, r))
        st, r2 = s.json("DELETE", "/v1/calls/long")
        self.assertEqual((st, r2["error"]), (409, "Conflict"))
        self.assertEqual(s.json("DELETE", "/v1/calls/nobody")[0], 404)
        # Ended and recorded: 409 too.
        self.assertEqual(s.json("POST", "/v1/calls", {"id": "done", "tool": "noop"})[0], 200)
        self.assertEqual(s.json("DELETE", "/v1/calls/done")[0], 409)
        # A queued call (both workers busy) is cancelled as well.
        for i in range(2):
            s.request("POST", "/v1/calls?wait=0", {"id": "busy%d" % i, "tool": "work", "args": {"s": 30}})
        s.request("POST", "/v1/calls?wait=0", {"id": "queued", "tool": "work", "args": {"s": 30}})
        st, r = s.json("DELETE", "/v1/calls/queued")
        self.assertEqual((st, r["error"], r["attempts"]), (200, "Cancelled", 0))
        for i in range(2):
            self.assertEqual(s.json("DELETE", "/v1/calls/busy%d" % i)[0], 200)
        self.assertNotIn("queued", self.runs())
        # Cancelled is recorded: the id sent again is answered from the store, here and by another supervisor
        # at once (its marker went with the record, so nobody waits on it), and nothing runs again.
        runs = self.runs()
        st, r2 = s.json("POST", "/v1/calls", {"id": "long", "tool": "work", "args": {"s": 30}})
        self.assertEqual((st, r2["error"], r2["class"]), (200, "Cancelled", "guard"))
        t0 = time.monotonic()
        rc, out, err = self.toolpool("run", "-q", "-r", "tools.json", "-s", s.store, "-",
                                     stdin='{"id": "long", "tool": "work", "args": {"s": 30}}\n')
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual((rc, json.loads(out)["error"]), (1, "Cancelled"), err)
        self.assertEqual(self.runs(), runs)
        self.assertEqual(s.stop(), 0)

    def test_client_gone_call_runs_on(self):
        s = self.serve()
        c = s.connection()
        c.request("POST", "/v1/calls", json.dumps({"id": "gone", "tool": "work", "args": {"s": 0.8}}))
        self.wait_for(lambda: self.runs() == ["gone"])
        c.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st, r = s.json("GET", "/v1/calls/gone")
            if st == 200:
                break
            time.sleep(0.05)
        self.assertEqual((st, r["ok"]), (200, True))
        self.assertEqual(self.runs(), ["gone"])
        self.assertEqual(s.stop(), 0)

    # ---- batches ----

    def test_batch_streams_run_results(self):
        lines = [
            '{"id": "b1", "tool": "echo", "args": {"n": 1}}',
            "",
            "not json",
            '{"id": "b2", "job": "j", "step": 1, "tool": "noop"}',
            '{"tool": "echo"}',
            '{"id": "b3", "tool": "ecko"}',
            '{"id": "b4", "tool": "strict", "args": {}}',
            '{"id": "b5", "tool": "work", "args": {"s": 0}}',
            '{"id": "b1", "tool": "echo", "args": {"n": 1}}',
        ]
        text = "\n".join(lines) + "\n"
        s = self.serve()
        status, headers, body = s.request("POST", "/v1/batch", text)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/x-ndjson")
        got = [json.loads(l) for l in body.decode().splitlines()]
        rc, out, err = self.toolpool("run", "-q", "-r", "tools.json", "-s", os.path.join(self.tmp, "runstore"), "-",
                                     stdin=text)
        want = [json.loads(l) for l in out.splitlines()]

        def key(r):
            return (str(r["id"]), r["ok"], r.get("error"), r.get("message"), json.dumps(r.get("result")))

        self.assertEqual(sorted(map(key, got)), sorted(map(key, want)))
        self.assertEqual(len(got), 8)
        self.assertIn("line 3: not valid JSON", body.decode())
        # A large batch streams in full.
        big = "".join('{"id": "n%d", "tool": "echo", "args": {"i": %d}}\n' % (i, i) for i in range(3000))
        status, _, body = s.request("POST", "/v1/batch", big, timeout=120)
        ids = [json.loads(l)["id"] for l in body.decode().splitlines()]
        self.assertEqual((status, sorted(ids)), (200, sorted("n%d" % i for i in range(3000))))
        self.assertEqual(s.stop(), 0)

    # ---- tools ----

    def test_tools(self):
        s = self.serve()
        st, r = s.json("GET", "/v1/tools")
        self.assertEqual(st, 200)
        work = next(t for t in r["tools"] if t["name"] == "work")
        self.assertEqual(work["policy"], {"timeout": "30s", "attempts": 3, "idempotent": True,
                                          "idempotent_from": "the tool", "fallback": []})
        self.assertEqual(work["parameters"]["properties"]["s"], {"type": "number"})
        st, r = s.json("GET", "/v1/tools?format=openai")
        self.assertEqual(r[0]["type"], "function")
        self.assertEqual(set(r[0]["function"]), {"name", "description", "parameters"})
        self.assertEqual([t["function"]["name"] for t in r], ["echo", "noop", "work", "strict", "deny"])
        st, r = s.json("GET", "/v1/tools?format=mcp")
        self.assertEqual(set(r["tools"][3]), {"name", "description", "inputSchema"})
        self.assertEqual(r["tools"][3]["inputSchema"]["required"], ["q"])
        self.assertEqual(s.json("GET", "/v1/tools?format=yaml")[0], 400)

    def test_tools_hide_literal_secrets(self):
        # An http tool's headers and an mcp tool's env, written as they are, may be secrets: GET /v1/tools
        # hides them (a ${env:} or ${file:} reference shows as written); tools export, the registry's reader's, not.
        self.registry["tools"].append({"name": "api", "http": {"url": "http://127.0.0.1:9/x", "headers": {
            "Authorization": "Bearer s3cret", "X-Key": "${env:HOME}"}}})
        self.write_registry()
        s = self.serve()
        st, body = s.request("GET", "/v1/tools")[::2]
        self.assertEqual(st, 200)
        self.assertNotIn(b"s3cret", body)
        api = next(t for t in json.loads(body)["tools"] if t["name"] == "api")
        self.assertEqual(api["http"]["headers"], {"Authorization": "(hidden: written in the registry)",
                                                  "X-Key": "${env:HOME}"})
        rc, out, err = self.toolpool("tools", "export", "--format", "toolpool", "-r", "tools.json")
        self.assertEqual(rc, 0, err)
        self.assertIn("Bearer s3cret", out)

    # ---- checkpoints, breakers, escalations ----

    def test_checkpoint_round_trip(self):
        s = self.serve()
        state = {"messages": [{"role": "user", "content": "héllo"}], "loop": {"turn": 3}}
        st, r = s.json("PUT", "/v1/jobs/agent%201/checkpoint", {"step": 3, "state": state})
        self.assertEqual((st, r), (200, {"job": "agent 1", "step": 3}))
        st, r = s.json("GET", "/v1/jobs/agent%201/checkpoint")
        self.assertEqual((st, r["job"], r["step"], r["state"]), (200, "agent 1", 3, state))
        self.assertLess(abs(r["updated_ms"] - time.time() * 1000), 60000)
        # The latest replaces the last.
        s.json("PUT", "/v1/jobs/agent%201/checkpoint", {"step": 4, "state": [1]})
        self.assertEqual(s.json("GET", "/v1/jobs/agent%201/checkpoint")[1]["state"], [1])
        self.assertEqual(s.json("GET", "/v1/jobs/nobody/checkpoint")[0], 404)
        self.assertEqual(s.json("PUT", "/v1/jobs/j/checkpoint", {"state": 1})[0], 400)
        self.assertEqual(s.json("PUT", "/v1/jobs/j/checkpoint", {"step": -1, "state": 1})[0], 400)
        self.assertEqual(s.json("PUT", "/v1/jobs/j/checkpoint", "{")[0], 400)
        # The CLI sees it, while the service runs.
        rc, out, err = self.toolpool("checkpoints", "show", "agent 1", "--store", s.store)
        self.assertEqual(rc, 0, err)
        self.assertIn("agent state: step 4", out)
        self.assertIn("[1]", out)
        rc, out, err = self.toolpool("checkpoints", "show", "agent 1", "--store", s.store, "--json")
        self.assertEqual(json.loads(out)["agent"]["state"], [1])
        # A job's calls and its agent state live side by side.
        s.json("POST", "/v1/calls", {"id": "s1", "job": "agent 1", "step": 5, "tool": "noop"})
        rc, out, err = self.toolpool("checkpoints", "show", "agent 1", "--store", s.store, "--json")
        cp = json.loads(out)
        self.assertEqual((cp["calls"], cp["agent"]["step"]), (["s1"], 4))
        self.assertEqual(s.stop(), 0)

    def test_escalation_resolved_to_rerun(self):
        s = self.serve()
        for i in range(3):
            st, r = s.json("POST", "/v1/calls", {"id": "r%d" % i, "tool": "deny", "args": {"who": "us"}})
        self.assertEqual((r["error"], r["escalated"]), ("CircuitOpen", True))
        eid = r["escalation"]
        self.assertEqual(s.json("POST", "/v1/escalations/%s/resolve" % eid, {"rerun": True, "accept": True})[0], 400)
        self.assertEqual(s.json("POST", "/v1/escalations/%s/resolve" % eid, {"rerun": "yes"})[0], 400)
        st, r = s.json("POST", "/v1/escalations/%s/resolve" % eid, {"rerun": True, "note": "role granted"})
        self.assertEqual((st, r["status"], r["decision"], r["forgot"]), (200, "resolved", "rerun", True))
        # The escalated call (r1, whose failure opened the circuit) is forgotten and its circuit
        # closed (kept, for its history, with nothing counted): that id runs again, not answered
        # from the store.
        b = s.json("GET", "/v1/breakers")[1]["breakers"]
        self.assertEqual([(x["state"], x["failures"]) for x in b], [("closed", 0)])
        hist = s.json("GET", "/v1/breakers/" + b[0]["id"])[1]["history"]
        self.assertEqual([(h["state"], h["cause"]) for h in hist][1:],
                         [("closed", "escalation %s resolved: the call runs again" % eid)])
        st, r = s.json("POST", "/v1/calls", {"id": "r1", "tool": "deny", "args": {"who": "us"}})
        self.assertEqual((st, r["error"], r["attempts"]), (200, "PermissionDenied", 1))
        # --accept (the default): resolved, the record kept.
        st, r = s.json("POST", "/v1/calls", {"id": "r3", "tool": "deny", "args": {"who": "us"}})
        self.assertEqual((r["error"], r["escalated"]), ("PermissionDenied", True))  # the second failure again
        st, a = s.json("POST", "/v1/escalations/%s/resolve" % r["escalation"], {"accept": True})
        self.assertEqual((st, a["decision"], a["forgot"]), (200, "accept", False))
        self.assertEqual(s.stop(), 0)

    def test_breakers_and_escalations(self):
        s = self.serve()
        for i in range(2):
            st, r = s.json("POST", "/v1/calls", {"id": "d%d" % i, "tool": "deny", "args": {"who": "me"}})
            self.assertEqual((st, r["error"]), (200, "PermissionDenied"))
        st, r = s.json("POST", "/v1/calls", {"id": "d2", "tool": "deny", "args": {"who": "me"}})
        self.assertEqual((r["error"], r["escalated"]), ("CircuitOpen", True))
        st, r = s.json("GET", "/v1/breakers")
        open_ = [b for b in r["breakers"] if b["state"] == "open"]
        self.assertEqual(len(open_), 1)
        bid = open_[0]["id"]
        self.assertTrue(bid.startswith("call/deny/"))
        st, one = s.json("GET", "/v1/breakers/" + bid)
        self.assertEqual((st, one["args"], one["last_error"]), (200, {"who": "me"}, "PermissionDenied"))
        st, r = s.json("GET", "/v1/escalations")
        self.assertEqual(len(r["escalations"]), 1)
        eid = r["escalations"][0]["id"]
        st, e = s.json("GET", "/v1/escalations/" + eid)
        self.assertEqual((st, e["status"], e["tool"]), (200, "open", "deny"))
        # The CLI and the service see one store.
        rc, out, err = self.toolpool("breakers", "list", "--store", s.store, "--json")
        self.assertEqual([b["id"] for b in [json.loads(l) for l in out.splitlines()] if b["state"] == "open"], [bid])
        # Reset by a prefix of the digest; resolve with a note.
        st, r = s.json("POST", "/v1/breakers/" + bid[:-20] + "/reset")
        self.assertEqual((st, r), (200, {"id": bid, "reset": True}))
        self.assertEqual(s.json("POST", "/v1/breakers/" + bid + "/reset")[0], 404)
        self.assertEqual(s.json("POST", "/v1/breakers/tool/nothing/reset")[0], 404)
        st, r = s.json("POST", "/v1/escalations/%s/resolve" % eid, {"note": "granted"})
        self.assertEqual((st, r["status"], r["note"]), (200, "resolved", "granted"))
        self.assertEqual(s.json("POST", "/v1/escalations/E999999/resolve")[0], 404)
        self.assertEqual(s.json("GET", "/v1/escalations")[1], {"escalations": []})
        self.assertEqual(len(s.json("GET", "/v1/escalations?all=1")[1]["escalations"]), 1)
        rc, out, err = self.toolpool("escalations", "show", eid, "--store", s.store)
        self.assertIn("resolved", out)
        self.assertIn("granted", out)
        # Closed again: the call runs (and fails) again.
        st, r = s.json("POST", "/v1/calls", {"id": "d3", "tool": "deny", "args": {"who": "me"}})
        self.assertEqual(r["error"], "PermissionDenied")
        self.assertEqual(s.stop(), 0)

    # ---- metrics, health ----

    def test_metrics_and_health(self):
        s = self.serve()
        self.assertEqual(s.request("GET", "/healthz")[:3:2], (200, b"ok\n"))
        self.assertEqual(s.request("GET", "/readyz")[0], 200)
        for i in range(5):
            s.json("POST", "/v1/calls", {"id": "m%d" % i, "tool": "echo", "args": {"i": i}})
        s.json("POST", "/v1/calls", {"id": "m0", "tool": "echo", "args": {"i": 0}})  # from the store
        status, headers, body = s.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        samples = parse_prometheus(self, body.decode())
        calls = {l["outcome"]: v for n, l, v in samples if n == "toolpool_calls_total" and l["tool"] == "echo"}
        self.assertEqual(calls, {"ok": 5})
        self.assertEqual(one(samples, "toolpool_answered_recorded_total"), 1)
        self.assertEqual(one(samples, "toolpool_call_duration_seconds_count", tool="echo"), 5)
        self.assertEqual(one(samples, "toolpool_call_duration_seconds_bucket", tool="echo", le="+Inf"), 5)
        # /readyz answers once one worker is up: the other may still be starting (slowly under a sanitizer)
        end = time.monotonic() + 20
        while (one(samples, "toolpool_workers", state="busy") + one(samples, "toolpool_workers", state="idle") < 2
               and time.monotonic() < end):
            time.sleep(0.05)
            samples = parse_prometheus(self, s.request("GET", "/metrics")[2].decode())
        self.assertEqual(one(samples, "toolpool_workers", state="busy") + one(samples, "toolpool_workers", state="idle"), 2)
        self.assertEqual(one(samples, "toolpool_escalations_open"), 0)
        self.assertGreaterEqual(one(samples, "toolpool_commits_total"), 1)
        self.assertEqual(one(samples, "toolpool_breakers", type="tool", state="open"), 0)
        self.assertEqual(s.stop(), 0)

    def test_mcp_ids_past_64_bits(self):
        """/mcp answers a request whose id is past 64 bits (initialize, which
        opens the session, and tools/call) under the id as the host wrote it."""
        # Fails if such a body is taken for one that is not JSON: initialize
        # gets 400 "no Mcp-Session-Id header", a call -32700.
        s = self.serve()
        json_ct = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        init = (b'{"jsonrpc": "2.0", "id": 18446744073709551616, "method": "initialize", "params": '
                b'{"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}')
        st, headers, body = s.request("POST", "/mcp", init, headers=json_ct)
        self.assertEqual(st, 200, body)
        self.assertIn(b'"id":18446744073709551616,"result":', body)
        sid = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "Accept": "application/json"}
        call = b'{"jsonrpc": "2.0", "id": -9223372036854775809, "method": "tools/call", "params": {"name": "noop"}}'
        st, _, body = s.request("POST", "/mcp", call, headers=dict(json_ct, **sid))
        self.assertEqual(st, 200, body)
        self.assertIn(b'"id":-9223372036854775809,"result":', body)
        self.assertIs(json.loads(body)["result"]["isError"], False)
        self.assertEqual(s.stop(), 0)

    # ---- security ----

    def test_pages_from_other_sites_are_refused(self):
        # A loopback TCP port needs no token, so a web page could reach it: its Origin, a rebound Host and a
        # body a page may send cross-site without asking are refused on every route, /v1/* and /mcp alike.
        s = self.serve(tcp=True)
        port = s.port
        call = {"id": "x1", "tool": "noop"}
        evil = {"Host": "evil.example:%d" % port, "Origin": "http://evil.example:%d" % port}
        for path in ("/v1/calls", "/mcp"):
            st, _, body = s.request("POST", path, call, headers=dict(evil, **{"Content-Type": "application/json"}))
            self.assertEqual(st, 403, (path, body))  # DNS rebinding: Origin and Host agree, but name no loopback
            self.assertIn(b"Host", body)
        self.assertEqual(s.request("GET", "/healthz", headers={"Host": "evil.example"})[0], 403)
        st, _, body = s.request("POST", "/v1/calls", call, headers={"Origin": "http://evil.example",
                                                                    "Content-Type": "application/json"})
        self.assertEqual(st, 403, body)
        self.assertIn(b"Origin", body)
        # a text/plain or form body (what a page may POST from anywhere) is not taken
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            st, _, body = s.request("POST", "/v1/calls", json.dumps(call), headers={"Content-Type": ctype})
            self.assertEqual(st, 415, (ctype, body))
            self.assertIn(b"application/json", body)
        # the service's own names and origins are fine, and nothing above ran
        self.assertEqual(s.request("GET", "/v1/calls/x1")[0], 404)
        for host in ("127.0.0.1:%d" % port, "localhost:%d" % port, "LOCALHOST"):
            st, _, body = s.request("POST", "/v1/calls", {"id": "ok-" + host, "tool": "noop"},
                                    headers={"Host": host, "Origin": "http://localhost:%d" % port,
                                             "Content-Type": "application/json"})
            self.assertEqual(st, 200, (host, body))
        # no browser sends a request without a Host: an HTTP/1.0 health probe passes
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
            self.assertIn(b" 200 ", c.recv(100))
        self.assertEqual(s.stop(), 0)

    def test_token_rule(self):
        rc, out, err = self.toolpool("serve", "--listen", "0.0.0.0:0", "-r", "tools.json", "-s", "st")
        self.assertEqual(rc, 2)
        self.assertIn("not a loopback address", err)
        self.assertIn("--token-file", err)
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("s3cret-token\n")
        os.chmod(token, 0o644)
        rc, out, err = self.toolpool("serve", "--listen", "127.0.0.1:0", "--token-file", token, "-r", "tools.json")
        self.assertEqual(rc, 2)
        self.assertIn("chmod 600", err)
        os.chmod(token, 0o600)
        s = self.serve(tcp=True, args=["--token-file", token], token="s3cret-token")
        self.assertEqual(s.request("GET", "/healthz")[0], 401)
        st, r = s.json("GET", "/v1/tools")
        self.assertEqual((st, r["error"]), (401, "Unauthorized"))
        st, _, _ = s.request("GET", "/v1/tools", headers={"Authorization": "Bearer wrong"})
        self.assertEqual(st, 401)
        st, _, _ = s.request("GET", "/v1/tools", headers={"Authorization": "Bearer s3cret-token-and-more"})
        self.assertEqual(st, 401)
        st, _, _ = s.request("GET", "/v1/tools", headers={"Authorization": "Bearer s3cret-token"})
        self.assertEqual(st, 200)
        st, r = s.json("POST", "/v1/calls", {"tool": "echo", "args": {"t": 1}},
                       headers={"Authorization": "Bearer s3cret-token"})
        self.assertEqual((st, r["result"]), (200, {"t": 1}))
        self.assertEqual(s.stop(), 0)

    def test_idle_client_is_dropped(self):
        s = self.serve(args=["--idle-timeout", "1s"])
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(s.sock_path)
        t0 = time.monotonic()
        self.assertEqual(c.recv(100), b"")  # closed by the service, with nothing said
        took = time.monotonic() - t0
        self.assertGreater(took, 0.8)
        self.assertLess(took, 5)
        c.close()
        # A slow client that stops halfway through its headers too.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(s.sock_path)
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\n")
        self.assertEqual(c.recv(100), b"")
        c.close()
        # A client waiting for a long call is not idle: it gets its answer.
        st, r = s.json("POST", "/v1/calls", {"id": "patient", "tool": "work", "args": {"s": 2}})
        self.assertEqual((st, r["ok"]), (200, True))
        # The idle time starts again at each reply: a kept-alive client that asks again within it is served.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(s.sock_path)
        body = json.dumps({"id": "patient2", "tool": "work", "args": {"s": 0.7}}).encode()
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b'"slept"' not in got:
            d = c.recv(65536)
            self.assertTrue(d, got)
            got += d
        time.sleep(0.6)  # 1.3 s after the request was read, 0.6 s after its answer
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(c.recv(100).startswith(b"HTTP/1.1 200 OK"))
        c.close()
        # Nor is one reading a long batch's stream.
        status, _, body = s.request("POST", "/v1/batch", '{"id": "p1", "tool": "work", "args": {"s": 1.5}}\n'
                                    '{"id": "p2", "tool": "work", "args": {"s": 1.5}}\n'
                                    '{"id": "p3", "tool": "work", "args": {"s": 1.5}}\n')
        self.assertEqual((status, len(body.splitlines())), (200, 3))
        self.assertEqual(s.request("GET", "/healthz")[0], 200)

    def test_reply_header_bytes(self):
        # The header block of each kind of reply, byte for byte: serve adds
        # an HTTP/1.1 reply's Date and Content-Length itself, where evhttp
        # would (after the headers set before them, in that order), and
        # leaves HTTP/1.0 and HEAD to evhttp's rules.
        s = self.serve()

        def raw(req):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            c.connect(s.sock_path)
            c.sendall(req)
            data = b""
            while b"\r\n\r\n" not in data:
                d = c.recv(65536)
                self.assertTrue(d, data)
                data += d
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            m = re.match(rb"Content-Length: (\d+)$", lines[-1])
            while m and len(body) < int(m.group(1)):
                body += c.recv(65536)
            c.close()
            return lines, body

        date = rb"Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) " \
               rb"\d{4} \d\d:\d\d:\d\d GMT$"
        call = b'{"id":"hb1","tool":"echo","args":{"a":"\xc3\xa9"}}'
        lines, body = raw(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(call), call))
        self.assertEqual(lines[:2], [b"HTTP/1.1 200 OK", b"Content-Type: application/json"])
        self.assertRegex(lines[2], date)
        self.assertEqual(lines[3:], [b"Content-Length: %d" % len(body)])
        self.assertEqual(json.loads(body)["result"], {"a": "\u00e9"})
        # An error reply, a header set before it (Allow), and a client that closes.
        lines, body = raw(b"GET /v1/calls HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(lines[:3], [b"HTTP/1.1 405 Method Not Allowed", b"Allow: POST",
                                     b"Content-Type: application/json"])
        self.assertRegex(lines[3], date)
        self.assertEqual(lines[4:], [b"Content-Length: %d" % len(body), b"Connection: close"])
        # HTTP/1.0: no Date; Content-Length only when kept alive.
        lines, body = raw(b"GET /healthz HTTP/1.0\r\n\r\n")
        self.assertEqual(lines, [b"HTTP/1.0 200 OK", b"Content-Type: text/plain"])
        lines, body = raw(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertEqual(lines, [b"HTTP/1.0 200 OK", b"Content-Type: text/plain", b"Connection: keep-alive",
                                 b"Content-Length: 3"])
        self.assertEqual(body, b"ok\n")
        # HEAD: a Date, no Content-Length.
        lines, _ = raw(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(lines[:2], [b"HTTP/1.1 200 OK", b"Content-Type: text/plain"])
        self.assertRegex(lines[2], date)
        self.assertEqual(len(lines), 3)
        # Two Content-Lengths that differ: 400, the connection closed, the call not run (a proxy may
        # have framed the body by the other one); the same one twice is one.
        smuggle = b'{"id":"hb2","tool":"echo","args":{}}'
        lines, body = raw(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(smuggle), len(smuggle) - 2, smuggle))
        self.assertEqual(lines[0], b"HTTP/1.1 400 Bad Request", body)
        self.assertIn(b"Connection: close", lines)
        self.assertIn(b"two Content-Length headers that differ", body)
        self.assertEqual(s.request("GET", "/v1/calls/hb2")[0], 404)
        lines, body = raw(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(smuggle), len(smuggle), smuggle))
        self.assertEqual(lines[0], b"HTTP/1.1 200 OK", body)
        self.assertEqual(s.stop(), 0)

    def test_http_framing(self):
        # HTTP/1.1 as clients frame it, each case on a fresh connection
        # unless it says otherwise: what the server must take, and what it
        # must refuse (with the connection closed where what follows cannot
        # be framed).
        s = self.serve(args=["--max-body", "4096"])

        def conn():
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            c.connect(s.sock_path)
            return c

        def read_reply(c, buf=b""):
            """One reply off c: (status line, headers dict, body, bytes left over)."""
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                self.assertTrue(d, buf)
                buf += d
            head, _, rest = buf.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            hd = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(b": ")
                hd[k.decode().lower()] = v.decode()
            if "content-length" in hd:
                n = int(hd["content-length"])
                while len(rest) < n:
                    d = c.recv(65536)
                    self.assertTrue(d)
                    rest += d
                return lines[0], hd, rest[:n], rest[n:]
            if hd.get("transfer-encoding") == "chunked":
                body = b""
                while True:
                    while b"\r\n" not in rest:
                        rest += c.recv(65536)
                    size, _, rest = rest.partition(b"\r\n")
                    n = int(size, 16)
                    while len(rest) < n + 2:
                        rest += c.recv(65536)
                    body, rest = body + rest[:n], rest[n + 2:]
                    if n == 0:
                        return lines[0], hd, body, rest
            while lines[0].endswith(b"200 OK"):  # a body ended by the close
                d = c.recv(65536)
                if not d:
                    break
                rest += d
            return lines[0], hd, rest, b""

        def closed(c):
            try:
                while True:
                    d = c.recv(65536)
                    if not d:
                        return True
            except (ConnectionResetError, socket.timeout):
                return False

        def call(i):
            return json.dumps({"id": "fr%s" % i, "tool": "echo", "args": {"i": i}}).encode()

        # Three requests in one write (pipelined): three replies, in order, on one connection.
        c = conn()
        c.sendall(b"".join(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(call(i)), call(i))
                           for i in range(3)) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        for i in range(3):
            st, _, body, buf = read_reply(c, buf)
            self.assertEqual(st, b"HTTP/1.1 200 OK")
            self.assertEqual(json.loads(body)["result"], {"i": i})
        st, _, body, buf = read_reply(c, buf)
        self.assertEqual((st, body), (b"HTTP/1.1 200 OK", b"ok\n"))
        c.close()
        # A request sent a byte at a time, after the empty lines a client may send before it.
        c = conn()
        for ch in b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nX-A: b\r\n\r\n":
            c.sendall(bytes([ch]))
        st, _, body, _ = read_reply(c)
        self.assertEqual((st, body), (b"HTTP/1.1 200 OK", b"ok\n"))
        c.close()
        # Bare LF line ends.
        c = conn()
        c.sendall(b"GET /healthz HTTP/1.1\nHost: x\n\n")
        self.assertEqual(read_reply(c)[0], b"HTTP/1.1 200 OK")
        c.close()
        # A chunked body, with a chunk extension and a trailer.
        c = conn()
        body = call("c")
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:]))
        st, _, out, _ = read_reply(c)
        self.assertEqual(st, b"HTTP/1.1 200 OK", out)
        self.assertEqual(json.loads(out)["result"], {"i": "c"})
        c.close()
        # Expect: 100-continue: told to go on, then answered.
        c = conn()
        body = call("e")
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        got = b""
        while b"\r\n\r\n" not in got:
            got += c.recv(100)
        self.assertEqual(got, b"HTTP/1.1 100 Continue\r\n\r\n")
        c.sendall(body)
        st, _, out, _ = read_reply(c)
        self.assertEqual((st, json.loads(out)["result"]), (b"HTTP/1.1 200 OK", {"i": "e"}))
        c.close()
        # The absolute form of a target.
        c = conn()
        c.sendall(b"GET http://localhost/healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        self.assertEqual(read_reply(c)[0], b"HTTP/1.1 200 OK")
        c.close()
        # A method no route takes: 405 with what the path takes.
        c = conn()
        c.sendall(b"BREW /v1/calls HTTP/1.1\r\nHost: x\r\n\r\n")
        st, hd, _, _ = read_reply(c)
        self.assertEqual((st, hd.get("allow")), (b"HTTP/1.1 405 Method Not Allowed", "POST"))
        c.close()
        # A body past --max-body: 413 while the client still sends it, heard without a reset.
        c = conn()
        big = b"x" * 200000
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(big))
        c.sendall(big)
        st, hd, out, _ = read_reply(c)
        self.assertEqual(st, b"HTTP/1.1 413 Payload Too Large")
        self.assertEqual(hd.get("connection"), "close")
        self.assertIn(b"--max-body", out)
        c.close()
        c = conn()
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % 5000 + b"y" * 5000)
        self.assertEqual(read_reply(c)[0], b"HTTP/1.1 413 Payload Too Large")
        c.close()
        # Refused before any route, each with its connection closed.
        chunked = b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        for req, status, why in [
            (b"GET /healthz\r\n\r\n", b"400 Bad Request", b"METHOD TARGET"),
            (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", b"505 HTTP Version Not Supported", b"HTTP/1.1"),
            (b"GET /healthz HTTP/1.1\r\n\r\n", b"400 Bad Request", b"without a Host"),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", b"400 Bad Request", b"two Host"),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n", b"400 Bad Request", b"not a token"),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: b\r\n folded\r\n\r\n", b"400 Bad Request", b"folded"),
            (b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
             b"400 Bad Request", b"both Content-Length and Transfer-Encoding"),
            (b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", b"501 Not Implemented",
             b"other than chunked"),
            (b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", b"400 Bad Request", b"not a number"),
            (chunked + b"zz\r\n", b"400 Bad Request", b"HEX[;extension]"),
            # what a proxy may read otherwise: junk after the size, a 0x prefix, CRs after the data
            (chunked + b"2junk\r\n{}\r\n0\r\n\r\n", b"400 Bad Request", b"HEX[;extension]"),
            (chunked + b"0x10\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n", b"400 Bad Request", b"HEX[;extension]"),
            (chunked + b"2\r\n{}\r\r\r\n0\r\n\r\n", b"400 Bad Request", b"does not end with CRLF"),
            (chunked + b"2\r\n{}\r\n0\r\nnot a trailer\r\n\r\n", b"400 Bad Request", b"not a header line"),
            (chunked + b"2\r\n{}\r\n0\r\n" + b"X-T: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" * 2000,
             b"400 Bad Request", b"trailers are too long"),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 70000 + b"\r\n\r\n",
             b"431 Request Header Fields Too Large", b"65536 bytes"),
        ]:
            c = conn()
            try:
                c.sendall(req)
            except BrokenPipeError:
                pass
            st, hd, out, _ = read_reply(c)
            self.assertEqual(st, b"HTTP/1.1 " + status, req[:60])
            self.assertEqual(hd.get("connection"), "close", req[:60])
            self.assertIn(why, out)
            self.assertTrue(closed(c), req[:60])
            c.close()
        # One id twice in one write: the second is answered from the first's record, after it.
        c = conn()
        same = json.dumps({"id": "fr-same", "tool": "echo", "args": {"n": 1}}).encode()
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(same), same) * 2)
        st1, _, b1, buf = read_reply(c)
        st2, _, b2, _ = read_reply(c, buf)
        self.assertEqual((st1, st2), (b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"))
        self.assertEqual(json.loads(b1)["result"], json.loads(b2)["result"])
        c.close()
        # Nothing behind a request that closes its connection is served.
        c = conn()
        after = json.dumps({"id": "fr-after-close", "tool": "echo", "args": {}}).encode()
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                  b"POST /v1/calls?wait=0 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(after), after))
        st, hd, _, rest = read_reply(c)
        self.assertEqual((st, hd.get("connection")), (b"HTTP/1.1 200 OK", "close"))
        self.assertTrue(closed(c))
        self.assertEqual(rest, b"")
        c.close()
        self.assertEqual(s.request("GET", "/v1/calls/fr-after-close")[0], 404)
        # A client that sends two requests and closes its side: both answered, then the connection closed.
        c = conn()
        c.sendall(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(call("eof")), call("eof"))
                  + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        c.shutdown(socket.SHUT_WR)
        st1, _, b1, buf = read_reply(c)
        st2, _, b2, _ = read_reply(c, buf)
        self.assertEqual((st1, json.loads(b1)["result"], st2, b2), (b"HTTP/1.1 200 OK", {"i": "eof"}, b"HTTP/1.1 200 OK", b"ok\n"))
        self.assertTrue(closed(c))
        c.close()
        # HTTP/1.0 with a chunked body: answered, and its connection closed whatever it asked.
        c = conn()
        body = call("c10")
        c.sendall(b"POST /v1/calls HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"%x\r\n%s\r\n0\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n" % (len(body), body))
        st, hd, out, _ = read_reply(c)
        self.assertEqual(st, b"HTTP/1.0 200 OK")
        self.assertNotEqual(hd.get("connection"), "keep-alive")
        self.assertEqual(json.loads(out)["result"], {"i": "c10"})
        self.assertTrue(closed(c))
        c.close()
        # HTTP/1.0 without keep-alive: closed after its reply; with it, kept for the next.
        c = conn()
        c.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertEqual(read_reply(c)[2], b"ok\n")
        c.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        st, _, body, _ = read_reply(c)
        self.assertEqual((st, body), (b"HTTP/1.0 200 OK", b"ok\n"))
        self.assertTrue(closed(c))
        c.close()
        # A batch's stream to an HTTP/1.0 client: not chunked, ended by the close.
        c = conn()
        lines = b"".join(call("b%d" % i) + b"\n" for i in range(3))
        c.sendall(b"POST /v1/batch HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(lines), lines))
        st, hd, body, _ = read_reply(c)
        self.assertEqual(st, b"HTTP/1.0 200 OK")
        self.assertNotIn("transfer-encoding", hd)
        self.assertEqual(sorted(json.loads(x)["id"] for x in body.splitlines()), ["frb0", "frb1", "frb2"])
        c.close()
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_http_clients_that_do_not_play_along(self):
        # A client that pipelines requests and never reads: the service stops framing them once
        # its replies back up (memory stays bounded), spends no CPU waiting, and a refused
        # connection that keeps trickling bytes is closed within its linger, not kept.
        s = self.serve()

        def proc_stat():
            with open("/proc/%d/stat" % s.proc.pid) as f:
                v = f.read().rsplit(")", 1)[1].split()
            with open("/proc/%d/status" % s.proc.pid) as f:
                rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
            return int(v[11]) + int(v[12]), rss  # utime + stime (ticks), RSS (kB)

        _, rss0 = proc_stat()
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(s.sock_path)
        c.settimeout(3)
        req = b"GET /v1/tools HTTP/1.1\r\nHost: x\r\n\r\n"
        sent = 0
        try:
            while sent < 40 << 20:
                c.sendall(req * 1000)
                sent += len(req) * 1000
        except socket.timeout:
            pass  # the service stopped reading: the socket is full
        self.assertLess(sent, 40 << 20, "the service read 40 MB of requests whose replies nobody read")
        # two Host headers behind them: a refusal that cannot go out either
        try:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\nxyz")
        except socket.timeout:
            pass
        t0, rss1 = proc_stat()
        time.sleep(1)
        t1, _ = proc_stat()
        self.assertLess(t1 - t0, 30, "the service spun while the client did not read (%d ticks in 1 s)" % (t1 - t0))
        self.assertLess(rss1 - rss0, 64 << 10, "RSS grew by %d kB" % (rss1 - rss0))
        c.close()
        # A refusal's linger ends in its time, however the client trickles.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(5)
        c.connect(s.sock_path)
        c.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        got = b""
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
        self.assertTrue(got.startswith(b"HTTP/1.1 400 Bad Request"), got)
        t0 = time.monotonic()
        gone = False
        while time.monotonic() - t0 < 6:
            try:
                c.send(b"x")
            except (BrokenPipeError, ConnectionResetError):
                gone = True
                break
            time.sleep(0.5)
        self.assertTrue(gone, "a lingering connection was kept past its 2 s")
        self.assertLess(time.monotonic() - t0, 4)
        c.close()
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_batch_to_a_slow_reader(self):
        # A batch whose results the client reads late: the stream waits for it (the sent callback of
        # each chunk outlives none of them), every line arrives, and the connection serves on.
        s = self.serve()
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(20)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(s.sock_path)
        lines = b"".join(json.dumps({"id": "slow%d" % i, "tool": "echo", "args": {"x": "y" * 20000}}).encode() + b"\n"
                         for i in range(100))
        c.sendall(b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(lines), lines))
        time.sleep(1.5)
        got = b""
        while not got.endswith(b"\r\n0\r\n\r\n"):
            d = c.recv(65536)
            self.assertTrue(d, got[-200:])
            got += d
        self.assertEqual(got.count(b'"id":"slow'), 100)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(c.recv(100).startswith(b"HTTP/1.1 200 OK"))
        c.close()
        self.assertEqual(s.stop(), 0)

    def test_connection_cap(self):
        s = self.serve(args=["--max-connections", "3"])
        time.sleep(0.3)  # the readiness checks' connections are gone
        held = []
        for _ in range(3):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(s.sock_path)
            held.append(c)
        time.sleep(0.3)
        st, headers, body = s.request("GET", "/healthz")  # a fourth: past the cap
        self.assertEqual(st, 503)
        self.assertEqual(headers.get("Connection"), "close")
        self.assertIn(b"too many connections", body)
        for c in held:
            c.close()
        self.wait_for(lambda: s.request("GET", "/healthz")[0] == 200)
        self.assertEqual(s.request("GET", "/metrics")[0], 200)

    def test_unix_socket_stale_and_live(self):
        s = self.serve()
        mode = os.stat(s.sock_path).st_mode & 0o777
        self.assertEqual(mode, 0o600)
        # A service on it: a second one refuses (it holds PATH.lock).
        rc, out, err = self.toolpool("serve", "--listen", "unix:" + s.sock_path, "-r", "tools.json", "-s", "st2")
        self.assertEqual(rc, 2)
        self.assertIn("held by another toolpool serve", err)
        s.stop(signal.SIGKILL)
        self.assertTrue(os.path.exists(s.sock_path))  # left behind: stale
        s2 = self.serve()  # replaces it
        self.assertEqual(s2.request("GET", "/healthz")[0], 200)
        self.assertEqual(s2.stop(), 0)
        self.assertFalse(os.path.exists(s2.sock_path))
        with open(s2.sock_path, "w") as f:
            f.write("not a socket")
        rc, out, err = self.toolpool("serve", "--listen", "unix:" + s2.sock_path, "-r", "tools.json", "-s", "st")
        self.assertEqual(rc, 2)
        self.assertIn("not a socket", err)
        os.unlink(s2.sock_path)
        # Something else listens on it: refused, and left alone.
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.bind(s2.sock_path)
        other.listen(1)
        try:
            rc, out, err = self.toolpool("serve", "--listen", "unix:" + s2.sock_path, "-r", "tools.json", "-s", "st")
            self.assertEqual(rc, 2)
            self.assertIn("something is listening on it", err)
        finally:
            other.close()
            os.unlink(s2.sock_path)
        # A symbolic link planted at PATH.lock: refused, and what it points at left alone.
        target = os.path.join(self.tmp, "victim")
        os.unlink(s2.sock_path + ".lock")
        os.symlink(target, s2.sock_path + ".lock")
        rc, out, err = self.toolpool("serve", "--listen", "unix:" + s2.sock_path, "-r", "tools.json", "-s", "st")
        self.assertEqual(rc, 2)
        self.assertIn("is a symbolic link", err)
        self.assertFalse(os.path.exists(target))

    def test_unix_socket_two_at_once(self):
        # Two services started together on one path over a stale socket:
        # one serves, the other refuses; the one serving is reachable.
        path = os.path.join(self.tmp, "race.sock")

        def healthz():
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                    c.settimeout(5)
                    c.connect(path)
                    c.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                    return c.recv(64).split(b" ")[1:2] == [b"200"]
            except OSError:
                return False

        for round_ in range(5):
            stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stale.bind(path)
            stale.close()
            procs = [subprocess.Popen([TOOLPOOL, "serve", "--listen", "unix:" + path, "-r", "tools.json",
                                       "-s", "race%d" % i, "-j", "1"], cwd=self.tmp, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(2)]
            try:
                self.wait_for(lambda: any(p.poll() is not None for p in procs))
                refused = [p for p in procs if p.poll() is not None]
                self.assertEqual(len(refused), 1)
                self.assertEqual(refused[0].returncode, 2)
                self.assertIn(b"held by another toolpool serve", refused[0].stderr.read())
                self.wait_for(healthz)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                        self.assertEqual(p.wait(30), 0)
                    p.stderr.close()
            self.assertFalse(os.path.exists(path))

    # ---- lifecycle ----

    def test_a_full_store_stops_the_service(self):
        # A store that cannot take a record (here its size limit; a full disk is the same) ends the
        # service, exit 2, with the reason; the call is told 503; what was recorded stays, and the
        # service started again with room answers it.
        os.environ["TOOLPOOL_STORE_LIMIT"] = "2000000"
        try:
            s = self.serve()
        finally:
            del os.environ["TOOLPOOL_STORE_LIMIT"]
        st, r = s.json("POST", "/v1/calls", {"id": "small", "tool": "echo", "args": {"a": 1}})
        self.assertEqual((st, r["ok"]), (200, True), r)
        st, r = s.json("POST", "/v1/calls", {"id": "big", "tool": "echo", "args": {"x": "y" * 1500000}})
        self.assertEqual((st, r["error"]), (503, "Unavailable"), r)
        self.assertEqual(s.proc.wait(30), 2)
        self.assertIn("does not fit in the store's size limit", s.stderr())
        s2 = self.serve()
        st, r = s2.json("GET", "/v1/calls/small")
        self.assertEqual((st, r["ok"], r["result"]), (200, True, {"a": 1}), r)
        self.assertEqual(s2.json("GET", "/v1/calls/big")[0], 404)
        self.assertEqual(s2.stop(), 0)

    def test_drain_on_sigterm(self):
        s = self.serve()
        got = {}
        t = threading.Thread(target=lambda: got.update(r=s.json("POST", "/v1/calls",
                                                                {"id": "slow", "tool": "work", "args": {"s": 1.5}})))
        t.start()
        self.wait_for(lambda: self.runs() == ["slow"])
        keep = s.connection()
        keep.request("GET", "/healthz")
        self.assertEqual(keep.getresponse().read(), b"ok\n")
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # A new connection is refused; one already open is answered 503.
        with self.assertRaises(OSError):
            s.request("GET", "/healthz", timeout=5)
        keep.request("POST", "/v1/calls", json.dumps({"id": "late", "tool": "noop"}))
        r = keep.getresponse()
        self.assertEqual(r.status, 503)
        self.assertEqual(json.loads(r.read())["error"], "Unavailable")
        keep.request("GET", "/readyz")
        r = keep.getresponse()
        self.assertEqual(r.status, 503)
        r.read()
        keep.close()
        t.join(30)
        self.assertEqual((got["r"][0], got["r"][1]["ok"]), (200, True))
        s.proc.wait(30)
        self.assertEqual(s.proc.returncode, 0)
        self.assertEqual(self.runs(), ["slow"])
        # It was recorded: the next service answers it from the store.
        s2 = self.serve()
        self.assertEqual(s2.json("GET", "/v1/calls/slow"), got["r"])

    def test_drain_cuts_a_batch_short(self):
        # Two workers: a long call holds one, the batch's slow call the other, and the three calls
        # after it wait their turn.
        s = self.serve()
        t = threading.Thread(target=lambda: self.swallow(s.request, "POST", "/v1/calls",
                                                         {"id": "long", "tool": "work", "args": {"s": 4}}))
        t.start()
        self.wait_for(lambda: self.runs() == ["long"])
        lines = ['{"id": "slow", "tool": "work", "args": {"s": 1}}'] + [
            '{"id": "q%d", "tool": "work", "args": {"s": 0}}' % i for i in range(3)]
        text = "\n".join(lines) + "\n"
        c = s.connection(timeout=60)
        c.request("POST", "/v1/batch", body=text)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.wait_for(lambda: self.runs() == ["long", "slow"])
        s.proc.send_signal(signal.SIGTERM)
        # The calls not started get no line, so the stream must not end as if whole: it breaks off
        # after the line of the call that ran, as soon as that is out, while the long call still runs.
        with self.assertRaises(http.client.IncompleteRead) as cm:
            r.read()
        self.assertTrue(t.is_alive())  # the long call has not been answered yet
        c.close()
        got = [json.loads(l) for l in cm.exception.partial.decode().splitlines()]
        self.assertEqual([(g["id"], g["ok"]) for g in got], [("slow", True)])
        s.proc.wait(30)
        t.join(30)
        self.assertEqual(s.proc.returncode, 0)
        self.assertEqual(self.runs(), ["long", "slow"])
        # Sent again, the batch ends whole: the recorded call is answered from the store, the rest run.
        s2 = self.serve()
        status, _, body = s2.request("POST", "/v1/batch", text)
        again = {json.loads(l)["id"]: json.loads(l) for l in body.decode().splitlines()}
        self.assertEqual((status, sorted(again)), (200, ["q0", "q1", "q2", "slow"]))
        self.assertEqual(again["slow"], got[0])
        self.assertEqual(sorted(self.runs()), ["long", "q0", "q1", "q2", "slow"])
        self.assertEqual(s2.stop(), 0)

    def test_kill9_and_restart(self):
        s = self.serve()
        answers = {}
        for i in range(5):
            answers["k%d" % i] = s.request("POST", "/v1/calls", {"id": "k%d" % i, "tool": "work", "args": {"s": 0}})[2]
        # One running when the service dies: never answered, so it may run again.
        threading.Thread(target=lambda: self.swallow(s.request, "POST", "/v1/calls",
                                                     {"id": "mid", "tool": "work", "args": {"s": 5}}),
                         daemon=True).start()
        self.wait_for(lambda: "mid" in self.runs())
        s.stop(signal.SIGKILL)
        s2 = self.serve()
        for i in range(5):
            status, _, body = s2.request("GET", "/v1/calls/k%d" % i)
            self.assertEqual((status, body), (200, answers["k%d" % i]))
            status, _, body = s2.request("POST", "/v1/calls", {"id": "k%d" % i, "tool": "work", "args": {"s": 0}})
            self.assertEqual((status, body), (200, answers["k%d" % i]))
        self.assertEqual(sorted(r for r in self.runs() if r != "mid"), ["k%d" % i for i in range(5)])
        self.assertEqual(s2.stop(), 0)

    def test_200_concurrent_connections(self):
        s = self.serve()
        n = 200
        barrier = threading.Barrier(n)
        results = [None] * n

        def one(i):
            c = s.connection(timeout=120)
            try:
                c.connect()
                barrier.wait(30)
                c.request("POST", "/v1/calls", json.dumps({"id": "cc%d" % i, "tool": "work", "args": {"s": 0}}))
                r = c.getresponse()
                results[i] = (r.status, json.loads(r.read()))
            finally:
                c.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 180
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.assertTrue(all(r is not None for r in results), "some requests got no answer")
        self.assertEqual([r[0] for r in results], [200] * n)
        self.assertEqual([r[1]["id"] for r in results], ["cc%d" % i for i in range(n)])
        self.assertTrue(all(r[1]["ok"] and r[1]["result"]["id"] == r[1]["id"] for r in results))
        self.assertEqual(sorted(self.runs()), sorted("cc%d" % i for i in range(n)))
        self.assertEqual(s.stop(), 0)

    # ---- helpers ----

    def wait_for(self, cond, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.02)
        self.fail("condition not met in %ss" % timeout)

    @staticmethod
    def swallow(fn, *args):
        try:
            fn(*args)
        except Exception:
            pass


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse_prometheus(test, text):
    """The samples of a text exposition (0.0.4), checking its grammar on the way."""
    samples, typed = [], {}
    test.assertTrue(text.endswith("\n"))
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            test.assertIn(kind, ("counter", "gauge", "histogram", "summary", "untyped"))
            test.assertNotIn(name, typed, "TYPE twice for " + name)
            typed[name] = kind
            continue
        m = SAMPLE.match(line)
        test.assertIsNotNone(m, "not a sample: " + line)
        name, labels, value = m.group(1), {}, m.group(4)
        body = m.group(3) or ""
        pos = 0
        while pos < len(body):
            lm = LABEL.match(body, pos)
            test.assertIsNotNone(lm, "bad labels: " + line)
            labels[lm.group(1)] = lm.group(2)
            pos = lm.end()
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        test.assertTrue(name in typed or base in typed, "no TYPE before " + name)
        samples.append((name, labels, float(value)))
    # Histogram buckets are cumulative.
    by_series = {}
    for name, labels, v in samples:
        if name.endswith("_bucket"):
            key = (name, tuple(sorted((k, x) for k, x in labels.items() if k != "le")))
            by_series.setdefault(key, []).append((float(labels["le"]), v))
    for key, buckets in by_series.items():
        values = [v for _, v in sorted(buckets)]
        test.assertEqual(values, sorted(values), "buckets not cumulative: %s" % (key,))
    return samples


def one(samples, name, **labels):
    got = [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]


if __name__ == "__main__":
    unittest.main(verbosity=2)
