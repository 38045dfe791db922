#!/usr/bin/env python3
"""A call of a tool that is not idempotent, in flight when its supervisor is
killed -9, is settled by the next supervisor on the store, whatever front
made it and whether or not its id is ever submitted again: recorded
Interrupted, escalated, seen by `escalations list`, `trace` and
GET /v1/calls/ID, and never run again.

- `toolpool mcp` killed under a tools/call (its id, mcp-SESSION-N, is never
  sent again): a `run` of other calls on the store settles it.
- `serve` killed under a POST without an id: the next `serve` answers
  GET /v1/calls/ID with the Interrupted record.
- a `run` killed beside a live `serve`: GET /v1/calls/ID answers 202 (and
  the run's pid) while it runs, then the record once the run is gone.

Real processes on a real store; standard library only.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL


class Orphans(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tp-orphan-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.store = os.path.join(self.dir, "store")
        self.ran_log = os.path.join(self.dir, "ran.log")
        # Logs each execution, then runs long: killed under it, its supervisor leaves it orphaned.
        slow = 'cat >/dev/null; echo "$TOOLPOOL_CALL_ID" >> "$1"; sleep 30; echo \'{"done": true}\''
        self.registry = serveutil.write_registry(
            os.path.join(self.dir, "tools.json"),
            [{"name": "charge", "exec": ["sh", "-c", slow, "sh", self.ran_log], "idempotent": False,
              "timeout": "60s", "description": "Charges a card (slowly)."}])
        self.procs = []
        self.addCleanup(serveutil.kill_all, self.procs)

    def ran(self):
        return serveutil.executions(self.ran_log)

    def tp(self, *args, check=True):
        p = subprocess.run([TOOLPOOL, *args], capture_output=True, text=True, cwd=self.dir, timeout=60)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def escalations(self):
        out = self.tp("escalations", "list", "--store", self.store, "--json").stdout
        return [json.loads(ln) for ln in out.splitlines() if ln.strip()]

    def inflight(self):
        out = self.tp("store", "check", "--store", self.store).stdout
        return int(re.search(r"inflight (\d+)", out).group(1))

    def run_other_calls(self):
        """A run of unrelated calls on the store: the next supervisor there."""
        path = os.path.join(self.dir, "other.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"id": "other-1", "tool": "noop", "args": {}}) + "\n")
        p = self.tp("run", "-q", "-s", self.store, "-r", self.registry, "-o", os.path.join(self.dir, "other.out"),
                    path, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stderr

    def assert_settled(self, cid):
        """cid is recorded Interrupted and escalated, once, and ran once."""
        [x] = [x for x in self.escalations() if x["call_id"] == cid]
        self.assertEqual((x["error"], x["tool"]), ("Interrupted", "charge"), x)
        x = json.loads(self.tp("escalations", "show", x["id"], "--store", self.store, "--json").stdout)
        p = self.tp("trace", "--store", self.store, cid, check=False)
        self.assertIn("Interrupted", p.stdout, p.stdout + p.stderr)
        self.assertEqual(self.inflight(), 0)
        self.assertEqual(self.ran().count(cid), 1, self.ran())
        return x

    def test_a_killed_mcp_sessions_call_is_settled_by_the_next_supervisor(self):
        err = open(os.path.join(self.dir, "mcp.err"), "w")
        mcp = subprocess.Popen([TOOLPOOL, "mcp", "-r", self.registry, "-s", self.store, "-j", "1"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=self.dir)
        err.close()
        self.procs.append(mcp)

        def send(msg):
            mcp.stdin.write((json.dumps(msg) + "\n").encode())
            mcp.stdin.flush()
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "orphan_test", "version": "1"}}})
        self.assertIn("result", json.loads(mcp.stdout.readline()))
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "charge", "arguments": {"n": 1}}})
        serveutil.wait_for(lambda: self.ran(), 20, "the call to start")
        cid = self.ran()[0]
        self.assertTrue(cid.startswith("mcp-"), cid)
        mcp.send_signal(signal.SIGKILL)
        mcp.wait()
        mcp.stdin.close()
        mcp.stdout.close()
        self.assertEqual(self.inflight(), 1)
        self.assertEqual(self.escalations(), [])

        log = self.run_other_calls()
        self.assertIn("recorded Interrupted", log)
        x = self.assert_settled(cid)
        self.assertEqual(x["args"], {"n": 1})
        # Its record is the call's: the same id and args are answered from it, not run.
        path = os.path.join(self.dir, "again.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"id": cid, "tool": "charge", "args": {"n": 1}}) + "\n")
        p = self.tp("run", "-q", "-s", self.store, "-r", self.registry, "-o", os.path.join(self.dir, "again.out"),
                    path, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        with open(os.path.join(self.dir, "again.out")) as f:
            r = json.loads(f.readline())
        self.assertEqual((r["id"], r["error"], r["escalated"]), (cid, "Interrupted", True), r)
        self.assertEqual(self.ran().count(cid), 1)
        self.assertEqual(len(self.escalations()), 1)

    def start_serve(self, name):
        port = serveutil.free_port()
        s = serveutil.Serve(self.registry, self.store, "127.0.0.1:%d" % port, os.path.join(self.dir, name + ".log"),
                            workers=1)
        s.start()
        self.addCleanup(s.kill9)
        return s, port

    def get(self, port, path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def test_a_killed_services_call_without_an_id_is_settled_by_the_next_service(self):
        s, port = self.start_serve("serve1")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/calls?wait=0", json.dumps({"tool": "charge", "args": {"n": 2}}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        self.assertEqual(r.status, 202, body)
        cid = body["id"]
        serveutil.wait_for(lambda: cid in self.ran(), 20, "the call to start")
        s.kill9()
        s2, port2 = self.start_serve("serve2")
        st, r = self.get(port2, "/v1/calls/" + cid)
        self.assertEqual((st, r["ok"], r["error"], r["escalated"]), (200, False, "Interrupted", True), r)
        self.assert_settled(cid)

    def test_a_run_killed_beside_a_live_service_is_settled_there(self):
        s, port = self.start_serve("serve")
        path = os.path.join(self.dir, "in.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"id": "Y", "tool": "charge", "args": {}}) + "\n")
        run = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "1", "-s", self.store, "-r", self.registry,
                                "-o", os.path.join(self.dir, "run.out"), path],
                               cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        self.procs.append(run)
        serveutil.wait_for(lambda: "Y" in self.ran(), 20, "the run to start Y")
        st, r = self.get(port, "/v1/calls/Y")
        self.assertEqual((st, r["status"], r["supervisor_pid"]), (202, "running", run.pid), r)
        run.send_signal(signal.SIGKILL)
        run.wait()
        st, r = self.get(port, "/v1/calls/Y")
        self.assertEqual((st, r["ok"], r["error"], r["escalated"]), (200, False, "Interrupted", True), r)
        self.assert_settled("Y")


if __name__ == "__main__":
    unittest.main(verbosity=2)
