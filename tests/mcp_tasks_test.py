#!/usr/bin/env python3
"""MCP tasks, end to end: 2025-11-25's tasks (params.task, tasks/get,
tasks/result, tasks/list, tasks/cancel) and 2026-07-28's tasks extension
(resultType "task", tasks/get with the result inline, tasks/cancel and
tasks/update as acks), over stdio (`toolpool mcp`) and over serve's /mcp,
on a real store: a task is recorded before its id is sent, and survives a
kill -9 of the process that ran it (the next one on the store answers
tasks/get and tasks/result of its id, running the call again when it had
not ended, or ending it Interrupted for a tool that is not idempotent).

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mcp_test import PLUGIN, TOOLPOOL, Session  # noqa: E402
from serve_test import WORK_TOOL, Server  # noqa: E402

MODERN = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"


def modern_meta(tasks=True):
    caps = {"extensions": {EXT: {}}} if tasks else {}
    return {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": caps}


class TasksTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="mcp_tasks_test.")
        self.tmp = self._tmp.name
        self.log = os.path.join(self.tmp, "runs.log")
        open(self.log, "w").close()
        work = os.path.join(self.tmp, "work.py")
        with open(work, "w") as f:
            f.write(WORK_TOOL)
        sleep_args = {"type": "object", "properties": {"s": {"type": "number"}}}
        self.registry = {"defaults": {"timeout": "60s", "attempts": 1}, "tools": [
            {"name": "echo", "description": "Returns its args.", "plugin": {"path": PLUGIN}},
            {"name": "work", "description": "Notes its run, sleeps args.s seconds.",
             "exec": ["python3", work, self.log], "parameters": sleep_args},
            {"name": "once", "description": "As work, but never run twice.", "idempotent": False,
             "exec": ["python3", work, self.log], "parameters": sleep_args},
            {"name": "deny", "description": "Always forbidden.", "plugin": {"path": PLUGIN}},
            {"name": "down", "description": "Its service is down: a ServerError, never an answer of its own.",
             "exec": ["sh", "-c", "echo '{\"error\": \"ServerError\", \"message\": \"down\"}'; exit 1"]},
            # MCP's form, with a declaration of how each runs as a task
            {"name": "only_task", "description": "As work, only as a task.", "inputSchema": sleep_args,
             "execution": {"taskSupport": "required"}},
            {"name": "never_task", "description": "As work, never as a task.", "inputSchema": sleep_args,
             "execution": {"taskSupport": "forbidden"}},
        ], "run": {"only_task": {"exec": ["python3", work, self.log]},
                   "never_task": {"exec": ["python3", work, self.log]}}}
        with open(os.path.join(self.tmp, "tools.json"), "w") as f:
            json.dump(self.registry, f)
        self.sessions = []
        self.servers = []

    def tearDown(self):
        for s in self.sessions:
            if s.proc.poll() is None:
                self.assertEqual(s.close(), 0, s.stderr())  # under the sanitizers: no leak either
            s.err.close()
            s.reader.join(10)
            for f in (s.proc.stdin, s.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            text = s.stderr()
            self.assertNotIn("Sanitizer", text)
            self.assertNotIn("runtime error:", text)
        for srv in self.servers:
            if srv.proc.poll() is None:
                self.assertEqual(srv.stop(), 0, srv.stderr())
            self.assertNotIn("Sanitizer", srv.stderr())
        self._tmp.cleanup()

    def runs(self):
        with open(self.log) as f:
            return f.read().split()

    def session(self, version="2025-11-25"):
        s = Session(self)
        self.sessions.append(s)
        if version:
            r = s.initialize(version)
            self.assertEqual(r["result"]["protocolVersion"], version, r)
        return s

    def kill9(self, s):
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(10)

    def poll(self, get, done=("completed", "failed", "cancelled"), timeout=30):
        """get() until its task's status is one of done; the last answer."""
        end = time.monotonic() + timeout
        while True:
            r = get()
            if r["result"]["status"] in done or time.monotonic() > end:
                return r
            time.sleep(0.05)

    def store_check(self):
        p = subprocess.run([TOOLPOOL, "store", "check", "--store", os.path.join(self.tmp, "store")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p.stdout

    # ---- 2025-11-25 over stdio ----

    def test_legacy_lifecycle(self):
        s = self.session()
        r = s.request("tools/list")
        self.assertTrue(all(t["execution"] == {"taskSupport": "optional"} for t in r["result"]["tools"]
                            if t["name"] not in ("only_task", "never_task")), r)
        s2 = self.session()
        t0 = time.time()
        r = s.request("tools/call", {"name": "work", "arguments": {"s": 1}, "task": {"ttl": 60000}})
        task = r["result"]["task"]
        self.assertEqual(task["status"], "working", r)
        self.assertEqual(task["ttl"], 60000)
        self.assertEqual(task["pollInterval"], 1000)
        self.assertRegex(task["taskId"], r"^task-[0-9a-f]{32}$")
        self.assertRegex(task["createdAt"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertNotIn("content", r["result"])
        tid = task["taskId"]
        # recorded before it was answered: the store holds it, and another session sees it working
        self.assertIn("tasks 1", self.store_check())
        g = s2.request("tasks/get", {"taskId": tid})
        self.assertEqual(g["result"]["status"], "working", g)
        self.assertEqual(g["result"]["taskId"], tid)
        # tasks/result waits for the end
        res = s.request("tasks/result", {"taskId": tid})
        self.assertGreater(time.time() - t0, 0.9)
        self.assertFalse(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["id"], tid)
        self.assertEqual(res["result"]["_meta"][RELATED], {"taskId": tid})
        g = s.request("tasks/get", {"taskId": tid})
        self.assertEqual(g["result"]["status"], "completed", g)
        self.assertGreaterEqual(g["result"]["lastUpdatedAt"], g["result"]["createdAt"])
        # a tool's failure is the task's failure, its isError result what tasks/result gives
        r = s.request("tools/call", {"name": "deny", "arguments": {}, "task": {}})
        fid = r["result"]["task"]["taskId"]
        self.assertEqual(r["result"]["task"]["ttl"], 3600000)  # the default
        res = s.request("tasks/result", {"taskId": fid})
        self.assertTrue(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["error"], "PermissionDenied")
        g = s.request("tasks/get", {"taskId": fid})
        self.assertEqual(g["result"]["status"], "failed", g)
        self.assertIn("PermissionDenied", g["result"]["statusMessage"])
        # a terminal task cannot be cancelled; an unknown id is Invalid params
        c = s.request("tasks/cancel", {"taskId": tid})
        self.assertEqual(c["error"]["code"], -32602, c)
        self.assertIn("'completed'", c["error"]["message"])
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            e = s.request(method, {"taskId": "task-0123"})
            self.assertEqual(e["error"]["code"], -32602, e)
            self.assertIn("not found", e["error"]["message"])
        self.assertEqual(s.request("tasks/get", {})["error"]["code"], -32602)
        # the list: both tasks, in pages; a cursor we did not give is Invalid params
        listed = s.request("tasks/list")["result"]
        self.assertEqual(sorted(t["taskId"] for t in listed["tasks"]), sorted([tid, fid]))
        self.assertNotIn("nextCursor", listed)
        self.assertEqual({t["taskId"]: t["status"] for t in listed["tasks"]}, {tid: "completed", fid: "failed"})
        self.assertEqual(s.request("tasks/list", {"cursor": "nope"})["error"]["code"], -32602)
        # a bad task param
        e = s.request("tools/call", {"name": "echo", "arguments": {}, "task": {"ttl": "soon"}})
        self.assertEqual(e["error"]["code"], -32602, e)
        # a call without task is answered as ever
        r = s.call("echo", {"x": 1})
        self.assertEqual(r["result"]["structuredContent"], {"x": 1})
        self.assertEqual(self.runs(), [tid])

    def test_prune_takes_the_task_with_its_result(self):
        # A task whose call's result is pruned goes too: asked for again, it would run the call again.
        s = self.session()
        r = s.request("tools/call", {"name": "work", "arguments": {"s": 0}, "task": {"ttl": 60000}})
        tid = r["result"]["task"]["taskId"]
        self.assertEqual(self.poll(lambda: s.request("tasks/get", {"taskId": tid}))["result"]["status"], "completed")
        self.assertEqual(s.close(), 0, s.stderr())
        self.assertIn("tasks 1", self.store_check())
        p = subprocess.run([TOOLPOOL, "store", "prune", "--ok", "--store", os.path.join(self.tmp, "store")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("tasks 0", self.store_check())
        s = self.session()
        g = s.request("tasks/get", {"taskId": tid})
        self.assertIn("error", g)
        self.assertEqual(self.runs(), [tid])  # ran once, not again

    def test_list_pages(self):
        s = self.session()
        ids = [s.request("tools/call", {"name": "echo", "arguments": {"i": i}, "task": {}})["result"]["task"]["taskId"]
               for i in range(55)]
        page = s.request("tasks/list")["result"]
        self.assertEqual(len(page["tasks"]), 50)
        rest = s.request("tasks/list", {"cursor": page["nextCursor"]})["result"]
        self.assertNotIn("nextCursor", rest)
        self.assertEqual(sorted(t["taskId"] for t in page["tasks"] + rest["tasks"]), sorted(ids))

    def test_legacy_cancel(self):
        s = self.session()
        tid = s.request("tools/call", {"name": "work", "arguments": {"s": 30}, "task": {}})["result"]["task"]["taskId"]
        waiting = s.next_id + 1
        s.next_id += 1
        s.send({"jsonrpc": "2.0", "id": waiting, "method": "tasks/result", "params": {"taskId": tid}})
        t0 = time.monotonic()
        c = s.request("tasks/cancel", {"taskId": tid})
        self.assertEqual(c["result"]["status"], "cancelled", c)
        self.assertEqual(c["result"]["taskId"], tid)
        res = s.response(waiting)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertTrue(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["error"], "Cancelled")
        self.assertEqual(res["result"]["_meta"][RELATED], {"taskId": tid})
        g = s.request("tasks/get", {"taskId": tid})
        self.assertEqual(g["result"]["status"], "cancelled", g)
        self.assertEqual(s.request("tasks/cancel", {"taskId": tid})["error"]["code"], -32602)

    def test_a_waiting_result_cancelled(self):
        s = self.session()
        tid = s.request("tools/call", {"name": "work", "arguments": {"s": 1}, "task": {}})["result"]["task"]["taskId"]
        s.send({"jsonrpc": "2.0", "id": 77, "method": "tasks/result", "params": {"taskId": tid}})
        s.notify("notifications/cancelled", {"requestId": 77, "reason": "no longer wanted"})
        # the wait ends unanswered; the task runs on to its end
        res = s.request("tasks/result", {"taskId": tid})
        self.assertEqual(res["result"]["structuredContent"]["slept"], 1, res)
        late = s.quiet_for(0.3)
        self.assertFalse([m for m in late if m.get("id") == 77], late)
        self.assertEqual(s.request("tasks/get", {"taskId": tid})["result"]["status"], "completed")

    def test_ttl_expiry(self):
        s = self.session()
        tid = s.request("tools/call", {"name": "echo", "arguments": {}, "task": {"ttl": 1}})["result"]["task"]
        self.assertEqual(tid["ttl"], 1000)  # the least kept
        time.sleep(1.2)
        e = s.request("tasks/get", {"taskId": tid["taskId"]})
        self.assertEqual(e["error"]["code"], -32602, e)
        self.assertIn("expired", e["error"]["message"])
        e = s.request("tasks/get", {"taskId": tid["taskId"]})
        self.assertIn("not found", e["error"]["message"])  # dropped
        self.assertEqual(s.request("tasks/list")["result"]["tasks"], [])

    def test_older_revision_has_no_tasks(self):
        s = Session(self)
        self.sessions.append(s)
        r = s.initialize("2025-06-18")
        self.assertNotIn("tasks", r["result"]["capabilities"])
        self.assertEqual(s.request("tasks/get", {"taskId": "x"})["error"]["code"], -32601)
        self.assertEqual(s.request("tasks/list")["error"]["code"], -32601)
        # params.task is no field of 2025-06-18: the call is answered as ever
        r = s.request("tools/call", {"name": "echo", "arguments": {"a": 1}, "task": {"ttl": 5}})
        self.assertEqual(r["result"]["structuredContent"], {"a": 1}, r)

    def test_capabilities(self):
        s = Session(self)
        self.sessions.append(s)
        caps = s.initialize("2025-11-25")["result"]["capabilities"]
        self.assertEqual(caps["tasks"], {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
        d = s.request("server/discover", {"_meta": modern_meta()})
        self.assertEqual(d["result"]["capabilities"]["extensions"], {EXT: {}})
        self.assertNotIn("tasks", d["result"]["capabilities"])

    # ---- a kill -9, then a restart on the same store ----

    def test_kill9_mcp_then_restart(self):
        s = self.session()
        tid = s.request("tools/call", {"name": "work", "arguments": {"s": 1.5}, "task": {}})["result"]["task"]["taskId"]
        oid = s.request("tools/call", {"name": "once", "arguments": {"s": 30}, "task": {}})["result"]["task"]["taskId"]
        end = time.monotonic() + 20
        while sorted(self.runs()) != sorted([tid, oid]) and time.monotonic() < end:
            time.sleep(0.05)
        self.kill9(s)
        s2 = self.session()
        g = s2.request("tasks/get", {"taskId": tid})
        self.assertEqual(g["result"]["status"], "working", g)  # run again: it had not ended
        res = s2.request("tasks/result", {"taskId": tid})
        self.assertFalse(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["slept"], 1.5)
        self.assertEqual(s2.request("tasks/get", {"taskId": tid})["result"]["status"], "completed")
        # the tool that is not idempotent is never run twice: its task ends Interrupted
        res = s2.request("tasks/result", {"taskId": oid})
        self.assertTrue(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["error"], "Interrupted")
        g = s2.request("tasks/get", {"taskId": oid})
        self.assertEqual(g["result"]["status"], "failed", g)
        self.assertEqual(self.runs().count(tid), 2)
        self.assertEqual(self.runs().count(oid), 1)
        # and a third process answers from the store alone
        s2.close()
        s3 = self.session()
        res = s3.request("tasks/result", {"taskId": tid})
        self.assertEqual(res["result"]["structuredContent"]["slept"], 1.5)
        self.assertEqual(self.runs().count(tid), 2)

    # ---- 2026-07-28 over stdio ----

    def modern(self, s, method, params=None, tasks=True):
        p = dict(params or {})
        p["_meta"] = modern_meta(tasks)
        return s.request(method, p)

    def test_modern_lifecycle(self):
        s = self.session(None)
        r = self.modern(s, "tools/call", {"name": "work", "arguments": {"s": 0.5}})["result"]
        self.assertEqual(r["resultType"], "task", r)
        self.assertEqual(r["status"], "working")
        self.assertEqual(r["ttlMs"], 3600000)
        self.assertEqual(r["pollIntervalMs"], 1000)
        self.assertNotIn("task", r)
        tid = r["taskId"]
        g = self.poll(lambda: self.modern(s, "tasks/get", {"taskId": tid}))["result"]
        self.assertEqual(g["status"], "completed", g)
        self.assertEqual(g["resultType"], "complete")
        self.assertEqual(g["result"]["structuredContent"]["slept"], 0.5)
        self.assertFalse(g["result"]["isError"])
        # a tool's failure is a completed task whose result has isError (failed is for JSON-RPC errors)
        fid = self.modern(s, "tools/call", {"name": "deny"})["result"]["taskId"]
        g = self.poll(lambda: self.modern(s, "tasks/get", {"taskId": fid}))["result"]
        self.assertEqual(g["status"], "completed", g)
        self.assertTrue(g["result"]["isError"])
        # a client without the extension gets its result, and may not ask about tasks
        r = self.modern(s, "tools/call", {"name": "echo", "arguments": {"b": 2}}, tasks=False)["result"]
        self.assertEqual(r["resultType"], "complete")
        self.assertEqual(r["structuredContent"], {"b": 2})
        e = self.modern(s, "tasks/get", {"taskId": tid}, tasks=False)
        self.assertEqual(e["error"]["code"], -32021, e)
        self.assertEqual(e["error"]["data"], {"requiredCapabilities": {"extensions": {EXT: {}}}})
        # the extension has no tasks/result and no tasks/list
        self.assertEqual(self.modern(s, "tasks/result", {"taskId": tid})["error"]["code"], -32601)
        self.assertEqual(self.modern(s, "tasks/list")["error"]["code"], -32601)
        self.assertEqual(self.modern(s, "tasks/get", {"taskId": "task-x"})["error"]["code"], -32602)
        # cancel and update are acks; a cancelled task reads cancelled
        cid = self.modern(s, "tools/call", {"name": "work", "arguments": {"s": 30}})["result"]["taskId"]
        a = self.modern(s, "tasks/update", {"taskId": cid, "inputResponses": {"k": {}}})
        self.assertEqual(a["result"]["resultType"], "complete", a)
        a = self.modern(s, "tasks/cancel", {"taskId": cid})
        self.assertEqual(a["result"]["resultType"], "complete", a)
        self.assertNotIn("status", a["result"])
        self.assertEqual(self.modern(s, "tasks/get", {"taskId": cid})["result"]["status"], "cancelled")
        self.assertEqual(self.modern(s, "tasks/cancel", {"taskId": tid})["result"]["resultType"], "complete")
        self.assertEqual(self.modern(s, "tasks/cancel", {"taskId": "task-x"})["error"]["code"], -32602)
        # the legacy client sees the same tasks, in its own shape
        legacy = self.session()
        g = legacy.request("tasks/get", {"taskId": fid})["result"]
        self.assertEqual(g["status"], "failed", g)
        self.assertIn("ttl", g)

    def test_a_tools_declared_task_support(self):
        legacy = self.session()
        tools = {t["name"]: t for t in legacy.request("tools/list")["result"]["tools"]}
        self.assertEqual(tools["only_task"]["execution"], {"taskSupport": "required"})
        self.assertEqual(tools["never_task"]["execution"], {"taskSupport": "forbidden"})
        self.assertEqual(tools["work"]["execution"], {"taskSupport": "optional"})
        # 2025-11-25: a required one asked for as a plain call, a forbidden one as a task: -32601, nothing run
        e = legacy.request("tools/call", {"name": "only_task", "arguments": {"s": 0}})
        self.assertEqual(e["error"]["code"], -32601, e)
        self.assertIn("taskSupport is required", e["error"]["message"])
        e = legacy.request("tools/call", {"name": "never_task", "arguments": {"s": 0}, "task": {}})
        self.assertEqual(e["error"]["code"], -32601, e)
        self.assertEqual(self.runs(), [])
        tid = legacy.request("tools/call", {"name": "only_task", "arguments": {"s": 0}, "task": {}})
        tid = tid["result"]["task"]["taskId"]
        self.assertFalse(legacy.request("tasks/result", {"taskId": tid})["result"]["isError"])
        # 2026-07-28: a required one from a client without the extension is -32021; a forbidden one is answered
        # at once, not as a task
        s = self.session(None)
        e = self.modern(s, "tools/call", {"name": "only_task", "arguments": {"s": 0}}, tasks=False)
        self.assertEqual(e["error"]["code"], -32021, e)
        self.assertEqual(e["error"]["data"], {"requiredCapabilities": {"extensions": {EXT: {}}}})
        r = self.modern(s, "tools/call", {"name": "never_task", "arguments": {"s": 0}})["result"]
        self.assertEqual(r["resultType"], "complete", r)
        self.assertFalse(r["isError"], r)
        r = self.modern(s, "tools/call", {"name": "only_task", "arguments": {"s": 0}})["result"]
        self.assertEqual(r["resultType"], "task", r)

    def test_a_modern_task_that_got_no_answer_fails(self):
        # the tool's own failure is a completed task (test_modern_lifecycle); one whose service gave no answer
        # (here a ServerError) is failed, its error inlined and no result
        s = self.session(None)
        tid = self.modern(s, "tools/call", {"name": "down"})["result"]["taskId"]
        g = self.poll(lambda: self.modern(s, "tasks/get", {"taskId": tid}))["result"]
        self.assertEqual(g["status"], "failed", g)
        self.assertEqual(g["error"]["code"], -32603, g)
        self.assertIn("ServerError", g["error"]["message"])
        self.assertNotIn("result", g)

    def test_an_unknown_task_support_is_a_registry_error(self):
        bad = {"tools": [{"name": "t", "description": "x", "inputSchema": {"type": "object"},
                          "execution": {"taskSupport": "sometimes"}}], "run": {"t": {"exec": ["true"]}}}
        path = os.path.join(self.tmp, "bad.json")
        with open(path, "w") as f:
            json.dump(bad, f)
        p = subprocess.run([TOOLPOOL, "tools", "list", "--registry", path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("taskSupport", p.stderr)
        self.assertIn('expected "forbidden", "optional" or "required", got "sometimes"', p.stderr)

    # ---- serve's /mcp ----

    def serve(self):
        srv = Server(self, self.tmp, tcp=True).start()
        self.servers.append(srv)
        return srv

    def post(self, srv, msg, headers):
        st, hd, body = srv.request("POST", "/mcp", json.dumps(msg).encode(),
                                   headers=dict({"Content-Type": "application/json",
                                                 "Accept": "application/json, text/event-stream"}, **headers),
                                   timeout=60)
        if hd.get("Content-Type") == "text/event-stream":
            body = [ln[6:] for ln in body.decode().splitlines() if ln.startswith("data: ")][-1]
        return st, hd, json.loads(body) if body else None

    def legacy_http(self, srv, with_id=False):
        st, hd, r = self.post(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}, {})
        self.assertEqual(st, 200, r)
        self.assertIn("tasks", r["result"]["capabilities"])
        sid = hd["Mcp-Session-Id"]
        ids = iter(range(2, 10**6))

        def rpc(method, params=None):
            msg = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params or {}}
            return self.post(srv, msg, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})[2]
        return (rpc, sid) if with_id else rpc

    def modern_http(self, srv, method, params, name=None):
        msg = {"jsonrpc": "2.0", "id": 7, "method": method, "params": dict(params, _meta=modern_meta())}
        h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            h["Mcp-Name"] = name
        return self.post(srv, msg, h)

    def test_serve_session_ends_while_a_result_waits(self):
        srv = self.serve()
        rpc, sid = self.legacy_http(srv, with_id=True)
        tid = rpc("tools/call", {"name": "work", "arguments": {"s": 1.5}, "task": {}})["result"]["task"]["taskId"]
        waited = {}

        def wait():
            waited["got"] = srv.request("POST", "/mcp", json.dumps(
                {"jsonrpc": "2.0", "id": 99, "method": "tasks/result", "params": {"taskId": tid}}).encode(),
                headers={"Content-Type": "application/json", "Accept": "application/json",
                         "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=60)
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)
        st, _, _ = srv.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        self.assertEqual(st, 204)
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertNotEqual(waited["got"][0], 200, waited)  # the wait ended unanswered
        rpc = self.legacy_http(srv)  # the task is the service's: it ran on
        res = rpc("tasks/result", {"taskId": tid})
        self.assertEqual(res["result"]["structuredContent"]["slept"], 1.5, res)

    def test_serve_kill9_then_restart(self):
        srv = self.serve()
        rpc = self.legacy_http(srv)
        tid = rpc("tools/call", {"name": "work", "arguments": {"s": 1.5}, "task": {}})["result"]["task"]["taskId"]
        st, _, r = self.modern_http(srv, "tools/call", {"name": "work", "arguments": {"s": 1.5}}, "work")
        self.assertEqual(st, 200, r)
        mid = r["result"]["taskId"]
        end = time.monotonic() + 20
        while sorted(self.runs()) != sorted([tid, mid]) and time.monotonic() < end:
            time.sleep(0.05)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        srv.err.close()
        srv = self.serve()
        rpc = self.legacy_http(srv)  # a new session: tasks are the store's, not a session's
        g = rpc("tasks/get", {"taskId": tid})
        self.assertEqual(g["result"]["status"], "working", g)
        res = rpc("tasks/result", {"taskId": tid})
        self.assertEqual(res["result"]["structuredContent"]["slept"], 1.5, res)
        self.assertEqual(res["result"]["_meta"][RELATED], {"taskId": tid})
        self.assertEqual(rpc("tasks/get", {"taskId": tid})["result"]["status"], "completed")
        self.assertIn(mid, [t["taskId"] for t in rpc("tasks/list")["result"]["tasks"]])
        # the extension's task, polled over stateless POSTs; Mcp-Name carries its id
        st, _, r = self.modern_http(srv, "tasks/get", {"taskId": mid}, "task-other")
        self.assertEqual(st, 400, r)
        self.assertEqual(r["error"]["code"], -32020)
        g = self.poll(lambda: self.modern_http(srv, "tasks/get", {"taskId": mid}, mid)[2])["result"]
        self.assertEqual(g["status"], "completed", g)
        self.assertEqual(g["result"]["structuredContent"]["slept"], 1.5)
        self.assertEqual(self.runs().count(tid), 2)
        self.assertEqual(self.runs().count(mid), 2)


if __name__ == "__main__":
    unittest.main()
