#!/usr/bin/env python3
"""A small MCP server over stdio (newline-delimited JSON-RPC 2.0), for the
mcp adapter's deterministic cases: no npm needed.

Tools: echo, add, fail (isError with a JSON error object), oops (isError
with plain text), badparams (JSON-RPC -32602), malformed (a result that is
not a CallToolResult, as its "form" says), write (a destructive tool: a line
in TINY_LOG), counter (state kept in the process, no annotations), odd (a
hint that is not a boolean), sleep (until its time or a
notifications/cancelled), pid, crash (exits mid-call), crash_once, env (a variable),
report (progress notifications when asked for, and a log message, before its answer;
with fail_once, the first call fails with a transient error after them).

Environment:
  TINY_LOG         a file each notable event is appended to ("cancelled 3")
  TINY_CRASH       "start": exits 1 before answering initialize, after a word on stderr
  TINY_PAGE        tools per page of tools/list (nextCursor pagination); 0: one page
  TINY_CURSOR      "repeat": every page's nextCursor is the same one, so the pages never end
  TINY_VERSION     the protocolVersion answered (default: the one asked for)
  TINY_MARK        crash_once's marker file
"""
import json
import os
import select
import sys
import time

RO = {"readOnlyHint": True}  # annotations of a tool that changes nothing
TOOLS = [
    {"name": "echo", "title": "Echo", "description": "Echoes text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
     "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
     "annotations": dict(RO, openWorldHint=False), "_meta": {"tiny/kind": "plain"}},
    {"name": "add", "description": "Adds two numbers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                     "required": ["a", "b"]}, "annotations": RO},
    {"name": "fail", "description": "Fails with a JSON error object.", "inputSchema": {"type": "object"},
     "annotations": RO},
    {"name": "oops", "description": "Fails with plain text.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "badparams", "description": "Answers -32602.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "sleep", "description": "Sleeps.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}, "annotations": RO},
    {"name": "pid", "description": "Its process id.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "crash_once", "description": "Exits mid-call the first time ($TINY_MARK not there).",
     "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": True}},
    {"name": "report", "description": "Reports progress and logs, then answers.",
     "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer"}}}, "annotations": RO},
    {"name": "malformed", "description": "Answers a result that is not a CallToolResult.",
     "inputSchema": {"type": "object", "properties": {"form": {"type": "string"}}}, "annotations": RO},
    {"name": "env", "description": "A variable of its environment, and its directory.",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}, "annotations": RO},
    {"name": "write", "description": "Appends a line to $TINY_LOG (\"write TEXT\").",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}}},
     "annotations": {"destructiveHint": True, "idempotentHint": False}},
    {"name": "counter", "description": "Counts its calls in this process; no annotations.",
     "inputSchema": {"type": "object"}},
    {"name": "odd", "description": "Annotated with a hint that is not a boolean.",
     "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "yes", "title": "Odd"}},
]

buf = b""
cancelled = set()
count = 0


def note(text):
    path = os.environ.get("TINY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def read_message(timeout=None):
    """The next message, or None at EOF; "timeout" when none came in time."""
    global buf
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buf:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        r, _, _ = select.select([0], [], [], wait)
        if not r:
            return "timeout"
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    if not line.strip():
        return read_message(timeout)
    return json.loads(line)


def text(t, **extra):
    r = {"content": [{"type": "text", "text": t}]}
    r.update(extra)
    return r


def call(req):
    p = req.get("params", {})
    name, args = p.get("name"), p.get("arguments", {})
    if name == "echo":
        return text(args.get("text", ""), structuredContent={"text": args.get("text", "")})
    if name == "add":
        return text(str(args["a"] + args["b"]))
    if name == "fail":
        return text(json.dumps({"error": "RateLimited", "message": "slow down", "retry_after_ms": 20}), isError=True)
    if name == "oops":
        return text("it broke", isError=True)
    if name == "badparams":
        return {"__error": {"code": -32602, "message": "no such argument: x"}}
    if name == "malformed":
        return {"content_object": {"content": {"type": "text", "text": "not in an array"}},
                "no_content": {"structuredContent": {"x": 1}},
                "is_error_string": {"content": [{"type": "text", "text": "it broke"}], "isError": "true"},
                "is_error_one": {"content": [{"type": "text", "text": "it broke"}], "isError": 1},
                "block_string": {"content": ["just text"]},
                "structured_array": {"content": [], "structuredContent": [1, 2]}}[args.get("form")]
    if name == "pid":
        return text(str(os.getpid()))
    if name == "write":
        time.sleep(float(args.get("seconds", 0)))
        note("write %s" % args.get("text", ""))
        return text("written")
    if name == "counter":
        global count
        count += 1
        return text(str(count), structuredContent={"count": count, "pid": os.getpid()})
    if name == "odd":
        return text("odd")
    if name == "env":
        return text(json.dumps({"value": os.environ.get(args.get("name", ""), None), "cwd": os.getcwd()}))
    if name == "crash_once":
        mark = os.environ["TINY_MARK"]
        if os.path.exists(mark):
            return text("survived")
        open(mark, "w").close()
        os._exit(3)
    if name == "crash":
        sys.stderr.write("tiny: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "report":
        steps = int(args.get("steps", 3))
        token = p.get("_meta", {}).get("progressToken")
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "logger": "tiny", "data": "report: %d steps" % steps}})
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "detail"}})
        # another request's progress, and a list change: neither is the call's
        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "elsewhere", "progress": 9}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        if token is not None:
            for i in range(1, steps + 1):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i, "total": steps, "message": "step %d" % i}})
        mark = args.get("fail_once")
        if mark and not os.path.exists(mark):
            open(mark, "w").close()
            return text(json.dumps({"error": "ServerError", "message": "try again", "retry_after_ms": 10}),
                        isError=True)
        return text("reported %d" % steps)
    if name == "sleep":
        end = time.monotonic() + float(args.get("seconds", 1))
        while time.monotonic() < end:
            m = read_message(end - time.monotonic())
            if m is None:
                sys.exit(0)
            if m == "timeout":
                break
            if m.get("method") == "notifications/cancelled":
                note("cancelled %s" % m["params"]["requestId"])
                return None  # no answer to a cancelled request
        return text("slept")
    return {"__error": {"code": -32601, "message": "unknown tool %s" % name}}


def main():
    sys.stderr.write("tiny: started\n")
    sys.stderr.flush()
    note("started %d" % os.getpid())
    if os.environ.get("TINY_CRASH") == "start":
        sys.stderr.write("tiny: cannot start: no config\n")
        sys.exit(1)
    page = int(os.environ.get("TINY_PAGE", "0"))
    while True:
        m = read_message()
        if m is None:
            note("eof")
            return
        method, mid = m.get("method"), m.get("id")
        if mid is None:
            continue
        if method == "initialize":
            v = os.environ.get("TINY_VERSION") or m["params"]["protocolVersion"]
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": v, "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1"}}})
        elif method == "tools/list":
            cursor = m.get("params", {}).get("cursor", "0") or "0"
            start = int(cursor) if cursor.isdigit() else 0
            tools = TOOLS[start:start + page] if page else TOOLS
            result = {"tools": tools}
            if page and start + page < len(TOOLS):
                result["nextCursor"] = str(start + page)
            if os.environ.get("TINY_CURSOR") == "repeat":
                result = {"tools": TOOLS[:page or 1], "nextCursor": "again"}
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/call":
            r = call(m)
            if r is None:
                continue
            if "__error" in r:
                send({"jsonrpc": "2.0", "id": mid, "error": r["__error"]})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": r})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + method}})


if __name__ == "__main__":
    main()
