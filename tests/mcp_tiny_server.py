#!/usr/bin/env python3
"""A small MCP server over stdio (newline-delimited JSON-RPC 2.0), for the
mcp adapter's deterministic cases: no npm needed.

One process serves many requests at once: its loop selects on stdin with
timers, so a slow tool (sleep, write with seconds, ask) holds no other
request back, answers are sent in the order they end, and a
notifications/cancelled for a request still pending drops it ("cancelled ID"
in TINY_LOG; it is never answered). A cancellation for a request that is not
pending (already answered, or unknown) is ignored. `ping` is answered {} at
once ("ping ID" in TINY_LOG). Responses of the client (an id, a result or an
error, no method) answer the server's own requests (see ask); one that
answers nothing pending is ignored. Other methods: -32601.

Tools: echo, add, fail (isError with a JSON error object; with "big", one
that holds an integer past 64 bits too), oops (isError
with plain text), badparams (JSON-RPC -32602), malformed (a result that is
not a CallToolResult, as its "form" says), write (a destructive tool: a line
"write TEXT" in TINY_LOG; with "seconds", written and answered when they are
up, and never when cancelled before), counter (state kept in the process, no
annotations; its count and pid), odd (a hint that is not a boolean), sleep
(answers "slept" after "seconds", default 1, unless cancelled first), pid,
crash (exits mid-call), crash_once, env (a variable), report (progress
notifications when asked for, and a log message, before its answer; with
fail_once, the first call fails with a transient error after them).
Then, for shared sessions:
  freeze {seconds}  stops reading stdin for that long (pings go unanswered
                    meanwhile, timers wait), then answers "thawed"
  wrongid           answers under an id no request has ("nope-ID" for a string
                    id, ID+100000 for a number): the call itself is never answered
  garbage           writes a line that is not JSON ("this is not json-rpc") on
                    stdout and answers nothing
  ask {method}      sends the client a request of that method (default
                    "roots/list"; "sampling/createMessage", "elicitation/create"...)
                    under a fresh id, and when the client's response comes,
                    answers with its error (or result) as JSON text, and
                    structuredContent {"error": ERROR or null, "result": RESULT or null}
  whoami            its pid as text; structuredContent {"pid", "count"} (the
                    counter's count, unchanged)
  unreadable {form, seconds}
                    after seconds (default 0), answers with what a JSON parser
                    holding integers in 64 bits cannot read, or in a form JSON-RPC
                    allows but a client may not expect, as form says:
                    "bigint" (2**64 in its structuredContent, the id after the
                    result), "deep" (3000 nested arrays in it, the id after it),
                    "batch" (a log message and the answer, readable, as one
                    batch), "batch_bigint" (the same, the answer holding 2**64),
                    "null_id" (an error with a null id, as for a request that
                    could not be parsed; the call itself is never answered),
                    "null_id_bigint" (that error, with 2**64 in its data)

With --modern it speaks MCP 2026-07-28 alone, statelessly: no initialize
(refused, -32022 naming 2026-07-28, as a modern-only server does), no ping
(-32601); server/discover answers a DiscoverResult; every request must carry
the _meta envelope (io.modelcontextprotocol/protocolVersion 2026-07-28 and
clientCapabilities; else -32602, or -32022 for another version); every
result carries resultType "complete"; log messages go only to a request whose
_meta asks for a logLevel. Each message it reads is appended to TINY_LOG as
"recv " and a JSON object {"method", "id", "meta"}. One more tool:
  needs_input {type}  answers a result of that resultType (default
                    "input_required", asking for an elicitation)

Environment:
  TINY_LOG         a file each notable event is appended to ("started PID",
                   "ping 3", "cancelled 3", "write TEXT", "ask METHOD ID", "eof")
  TINY_CRASH       "start": exits 1 before answering initialize, after a word on stderr
  TINY_PAGE        tools per page of tools/list (nextCursor pagination); 0: one page
  TINY_CURSOR      "repeat": every page's nextCursor is the same one, so the pages never end
  TINY_LIST        how tools/list is answered: "bigint" (2**64 in a tool's _meta),
                   "null_id" (an error with a null id), "batch" (the answer in a batch)
  TINY_VERSION     the protocolVersion answered (default: the one asked for)
  TINY_SERVER_VERSION  the serverInfo version its handshake gives (default "1")
  TINY_MARK        crash_once's marker file
  TINY_DISCOVER    "silent": server/discover is never answered (a legacy server
                   that ignores what comes before initialize); "unsupported:V1,V2":
                   it is answered UnsupportedProtocolVersion (-32022) listing V1, V2
  TINY_SLOW_START  seconds it sleeps before it reads anything (a slow start)
  TINY_RECV        "1": each message read goes to TINY_LOG as with --modern
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
    # new tools go at the end: other tests page through this list and count it
    {"name": "freeze", "description": "Stops reading its input for a while, then answers.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}, "annotations": RO},
    {"name": "wrongid", "description": "Answers under an id no request has.",
     "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "garbage", "description": "Writes a line that is not JSON-RPC and answers nothing.",
     "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "ask", "description": "Sends the client a request and answers with its response.",
     "inputSchema": {"type": "object", "properties": {"method": {"type": "string"}}}, "annotations": RO},
    {"name": "whoami", "description": "Its process id and the counter's count.",
     "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "unreadable", "description": "Answers what a JSON parser of 64-bit integers cannot read.",
     "inputSchema": {"type": "object", "properties": {"form": {"type": "string"}, "seconds": {"type": "number"}}},
     "annotations": RO},
]
BIG = 2 ** 64  # past what a parser of 64-bit integers holds
MODERN_VERSION = "2026-07-28"
MODERN_TOOLS = [
    {"name": "needs_input", "description": "Answers a result that is not complete (input_required).",
     "inputSchema": {"type": "object", "properties": {"type": {"type": "string"}}}, "annotations": RO},
]
modern = False  # --modern: 2026-07-28 only

buf = b""
count = 0
# Requests being worked on, by key(id): {"id", "due" (a monotonic time, or None
# while waiting for the client), "done" (a function giving the answer at "due")}
pending = {}
# The server's own requests, by the id they went with: the key of the call waiting for it
asked = {}
next_ask = 0


def key(mid):
    """A dict key for a JSON-RPC id that keeps 1 and "1" apart."""
    return json.dumps(mid)


def note(text):
    path = os.environ.get("TINY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def answer(mid, r):
    if "__raw" in r:  # a line as it is
        sys.stdout.write(r["__raw"] + "\n")
        sys.stdout.flush()
    elif "__error" in r:
        send({"jsonrpc": "2.0", "id": mid, "error": r["__error"]})
    else:
        if modern:
            r = dict(r, resultType=r.get("resultType", "complete"))
        send({"jsonrpc": "2.0", "id": mid, "result": r})


def text(t, **extra):
    r = {"content": [{"type": "text", "text": t}]}
    r.update(extra)
    return r


def later(mid, seconds, done):
    """Answer mid with done() once seconds are up, unless it is cancelled first."""
    pending[key(mid)] = {"id": mid, "due": time.monotonic() + max(0.0, seconds), "done": done}


ASK_PARAMS = {
    "sampling/createMessage": {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
                               "maxTokens": 16},
    "elicitation/create": {"message": "Your name?",
                           "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
}


def ask(mid, method):
    """Send the client a request of method; mid is answered when its response comes."""
    global next_ask
    next_ask += 1
    req = {"jsonrpc": "2.0", "id": next_ask, "method": method}
    if method in ASK_PARAMS:
        req["params"] = ASK_PARAMS[method]
    asked[key(next_ask)] = key(mid)
    pending[key(mid)] = {"id": mid, "due": None, "done": None, "ask": next_ask}
    note("ask %s %d" % (method, next_ask))
    send(req)


def responded(m):
    """A response of the client to one of the server's requests."""
    k = asked.pop(key(m.get("id")), None)
    p = pending.pop(k, None) if k is not None else None
    if p is None:
        return  # it answers nothing pending (its call was cancelled)
    err, res = m.get("error"), m.get("result")
    answer(p["id"], text(json.dumps(err if err is not None else res),
                         structuredContent={"error": err, "result": res}))


def unreadable(mid, form):
    """The line unreadable's form answers request mid with."""
    big = text("big", structuredContent={"n": BIG})
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "batched"}}
    if form == "bigint":
        return json.dumps({"jsonrpc": "2.0", "result": big, "id": mid})
    if form == "deep":
        head = json.dumps({"jsonrpc": "2.0", "result": text("deep")})[:-1]
        return '%s, "structuredContent": {"d": %s%s}}, "id": %s}' % (
            head[:-1], "[" * 3000, "]" * 3000, json.dumps(mid))
    if form == "batch":
        return json.dumps([log, {"jsonrpc": "2.0", "id": mid, "result": text("batched")}])
    if form == "batch_bigint":
        return json.dumps([log, {"jsonrpc": "2.0", "id": mid, "result": big}])
    if form == "null_id":
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    if form == "null_id_bigint":
        return json.dumps({"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32700, "message": "Parse error", "data": {"n": BIG}}})
    raise ValueError(form)


def call(req):
    """The answer to a tools/call; None when it is answered later, or never."""
    mid = req.get("id")
    p = req.get("params", {})
    name, args = p.get("name"), p.get("arguments", {})
    if name == "echo":
        return text(args.get("text", ""), structuredContent={"text": args.get("text", "")})
    if name == "add":
        return text(str(args["a"] + args["b"]))
    if name == "fail":
        err = {"error": "RateLimited", "message": "slow down", "retry_after_ms": 20}
        if args.get("big"):
            err["order"] = 18446744073709551615  # past int64: JSON all the same
        return text(json.dumps(err), isError=True)
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
        line = "write %s" % args.get("text", "")
        seconds = float(args.get("seconds", 0))
        if seconds <= 0:
            note(line)
            return text("written")

        def written():
            note(line)
            return text("written")
        later(mid, seconds, written)
        return None
    if name == "counter":
        global count
        count += 1
        return text(str(count), structuredContent={"count": count, "pid": os.getpid()})
    if name == "whoami":
        return text(str(os.getpid()), structuredContent={"pid": os.getpid(), "count": count})
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
        if not modern or p.get("_meta", {}).get("io.modelcontextprotocol/logLevel"):
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "logger": "tiny", "data": "report: %d steps" % steps}})
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "detail"}})
        # another request's progress, and a list change: neither is the call's
        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "elsewhere", "progress": 9}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        if token is not None:
            for i in range(0 if args.get("from_zero") else 1, steps + 1):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i, "total": steps, "message": "step %d" % i}})
        mark = args.get("fail_once")
        if mark and not os.path.exists(mark):
            open(mark, "w").close()
            return text(json.dumps({"error": "ServerError", "message": "try again", "retry_after_ms": 10}),
                        isError=True)
        return text("reported %d" % steps)
    if name == "sleep":
        later(mid, float(args.get("seconds", 1)), lambda: text("slept"))
        return None
    if name == "freeze":
        time.sleep(max(0.0, float(args.get("seconds", 1))))  # nothing is read meanwhile
        return text("thawed")
    if name == "wrongid":
        other = "nope-%s" % mid if isinstance(mid, str) else mid + 100000
        send({"jsonrpc": "2.0", "id": other, "result": text("wrong id")})
        return None
    if name == "garbage":
        sys.stdout.write("this is not json-rpc\n")
        sys.stdout.flush()
        return None
    if name == "ask":
        ask(mid, args.get("method") or "roots/list")
        return None
    if name == "needs_input" and modern:
        return {"resultType": args.get("type", "input_required"), "inputRequests": {"name": {
            "method": "elicitation/create", "params": ASK_PARAMS["elicitation/create"]}}}
    if name == "unreadable":
        line = unreadable(mid, args.get("form"))
        later(mid, float(args.get("seconds", 0)), lambda: {"__raw": line})
        return None
    return {"__error": {"code": -32601, "message": "unknown tool %s" % name}}


def handle(m, page):
    """One message of the client."""
    if not isinstance(m, dict):
        send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "not a request"}})
        return
    method, mid = m.get("method"), m.get("id")
    if method is None:
        if mid is not None and ("result" in m or "error" in m):
            responded(m)
        return
    if method == "notifications/cancelled":
        rid = m.get("params", {}).get("requestId")
        p = pending.pop(key(rid), None)
        if p is not None:
            if p.get("ask") is not None:
                asked.pop(key(p["ask"]), None)
            note("cancelled %s" % rid)  # and no answer to it
        return
    if mid is None:
        return  # other notifications
    if modern and not modern_request(m):
        return
    if method == "initialize":
        v = os.environ.get("TINY_VERSION") or m["params"]["protocolVersion"]
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": v, "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": os.environ.get("TINY_SERVER_VERSION", "1")}}})
    elif method == "ping":
        note("ping %s" % mid)
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "server/discover" and modern:
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "resultType": "complete", "supportedVersions": [MODERN_VERSION], "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {
                "name": "tiny", "version": os.environ.get("TINY_SERVER_VERSION", "1")}}}})
    elif method == "server/discover" and os.environ.get("TINY_DISCOVER") == "silent":
        pass
    elif method == "server/discover" and os.environ.get("TINY_DISCOVER", "").startswith("unsupported:"):
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32022, "message": "Unsupported protocol version",
                                                     "data": {"supported": os.environ["TINY_DISCOVER"][12:].split(","),
                                                              "requested": MODERN_VERSION}}})
    elif method == "tools/list":
        cursor = m.get("params", {}).get("cursor", "0") or "0"
        start = int(cursor) if cursor.isdigit() else 0
        every = TOOLS + MODERN_TOOLS if modern else TOOLS
        tools = every[start:start + page] if page else every
        result = {"tools": tools}
        if page and start + page < len(every):
            result["nextCursor"] = str(start + page)
        if os.environ.get("TINY_CURSOR") == "repeat":
            result = {"tools": TOOLS[:page or 1], "nextCursor": "again"}
        form = os.environ.get("TINY_LIST")
        if form == "bigint":
            result["tools"] = [dict(result["tools"][0], _meta={"n": BIG})] + result["tools"][1:]
        if form == "null_id":
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
        elif form == "batch":
            sys.stdout.write(json.dumps([{"jsonrpc": "2.0", "id": mid, "result": result}]) + "\n")
            sys.stdout.flush()
        else:
            answer(mid, result)
    elif method == "tools/call":
        r = call(m)
        if r is not None:
            answer(mid, r)
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + method}})


def modern_request(m):
    """Whether request m is one of 2026-07-28 (the _meta envelope); else it is answered its error."""
    mid, meta = m.get("id"), (m.get("params") or {}).get("_meta") or {}
    version = meta.get("io.modelcontextprotocol/protocolVersion")
    refused = {"code": -32022, "message": "Unsupported protocol version: this server speaks 2026-07-28 only",
               "data": {"supported": [MODERN_VERSION], "requested": version}}
    if m.get("method") == "initialize" or (version is not None and version != MODERN_VERSION):
        send({"jsonrpc": "2.0", "id": mid, "error": refused})
    elif version is None or not isinstance(meta.get("io.modelcontextprotocol/clientCapabilities"), dict):
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "Invalid params: the _meta "
                                                     "envelope of 2026-07-28 is missing"}})
    elif m.get("method") == "ping":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method ping in 2026-07-28"}})
    else:
        return True
    return False


def fire():
    """Answer every pending request whose time is up, the earliest first."""
    now = time.monotonic()
    due = sorted((p["due"], k) for k, p in pending.items() if p["due"] is not None and p["due"] <= now)
    for _, k in due:
        p = pending.pop(k)
        answer(p["id"], p["done"]())


def main():
    global buf, modern
    modern = "--modern" in sys.argv[1:]
    sys.stderr.write("tiny: started\n")
    sys.stderr.flush()
    note("started %d" % os.getpid())
    if os.environ.get("TINY_CRASH") == "start":
        sys.stderr.write("tiny: cannot start: no config\n")
        sys.exit(1)
    page = int(os.environ.get("TINY_PAGE", "0"))
    time.sleep(float(os.environ.get("TINY_SLOW_START", "0")))
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except ValueError:
                send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
                continue
            if (modern or os.environ.get("TINY_RECV") == "1") and isinstance(m, dict):
                note("recv " + json.dumps({"method": m.get("method"), "id": m.get("id"),
                                           "meta": (m.get("params") or {}).get("_meta")}))
            handle(m, page)
            fire()
        fire()
        dues = [p["due"] for p in pending.values() if p["due"] is not None]
        wait = max(0.0, min(dues) - time.monotonic()) if dues else None
        r, _, _ = select.select([0], [], [], wait)
        if r:
            chunk = os.read(0, 65536)
            if not chunk:
                note("eof")
                return
            buf += chunk


if __name__ == "__main__":
    main()
