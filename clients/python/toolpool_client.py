"""A client for toolpool, in one file of the Python 3 standard library.

Two ways to reach toolpool, with one call API:

* ``Client(addr)`` talks HTTP/1.1 to ``toolpool serve`` over its Unix socket
  (``unix:PATH``) or TCP (``HOST:PORT`` or ``http://HOST:PORT``).
* ``Coprocess(...)`` (or ``Client.spawn(...)``) starts ``toolpool run -`` as
  a child process and drives it through its standard input and output, for
  when no service is running.

A call::

    from toolpool_client import Client

    tp = Client("unix:./toolpool.sock")
    r = tp.call("search_kb", {"q": "refund window"}, job="agent-7", step=3)
    if r["ok"]:
        print(r["result"])
    else:
        print(r["error"], r["class"], r["message"])   # e.g. Timeout transient ...

``call`` returns the result record, exactly a ``toolpool run`` result line
(``ok``, ``result`` or ``error``/``class``/``message``/``retryable``,
``attempts``, ``served_by``, ``degraded``, ``stale``, ``escalated``,
``duration_ms``, ``args``, ``trace``). A tool that failed is data in that
record, never an exception. What raises is a request the service refused or
could not be reached for: ``ToolpoolError`` with ``status`` (the HTTP status,
or None when there was no HTTP answer), ``error`` and ``message``::

    400 InvalidRequest    a malformed request (bad JSON, args not an object)
    401 Unauthorized      a missing or wrong token
    404 NotFound          an unknown tool, path or call id
    409 Conflict          cancelling a call that already ended
    409 InvalidRequest    an id recorded (or running) for other input
    413                   a request body over the service's --max-body
    503 Unavailable       the service is draining, has too many connections,
                          or its store cannot be used now
    None Unavailable      no connection could be made (after the retries)
    None ClientTimeout    no answer within the client's timeout

Every call has an id. ``call`` makes one (``uuid4().hex``) when you give
none, before the first byte is sent, and keeps it for the request's retries:
when a connection is refused or dropped (the service is restarting, say),
the same request, with the same id, is sent again, a bounded number of times
with exponential backoff. The service answers an id it has recorded from
its store, and attaches a request for an id running right now to that call,
so a retry does not run a call again. (One exception is the service's own
crash: a call of an idempotent tool that ended but was not yet committed,
within the last group-commit window of 2 to 20 ms, runs again after the
restart, from attempt 1, unless its tool is marked ``"once": true``; a call
of a tool that is not idempotent never does; docs/guide.md, "The store".) Give your own ids
(``"agent-7/step-3"``) when a crash of your own program must not run a step
again: the rerun asks for the same id and gets the recorded answer.

Asynchronous calls::

    cid = tp.submit("slow_tool", {"n": 1})      # answered 202 at once
    ...
    r = tp.result(cid)                          # polls until it ended
    r = tp.result(cid, wait=False)              # None while it runs
    tp.cancel(cid)                              # the final (Cancelled) record

The rest of the service::

    tp.tools(format="openai")                   # or "mcp", or None: toolpool's own
    tp.checkpoint_put("agent-7", 3, {"messages": [...]})
    tp.checkpoint_get("agent-7")                # {"job", "step", "state", "updated_ms"} or None
    tp.breakers(); tp.breaker_reset(key)
    tp.escalations(); tp.escalation_resolve(eid, note="granted")
    tp.metrics()                                # Prometheus text
    tp.health(); tp.ready()
    for r in tp.batch(calls): ...               # result records as calls finish

A ``Client`` is safe to share between threads: each request takes a
keep-alive connection from a small pool (or opens one) and gives it back
when the answer has been read in full.

Without a service, the same calls go through a ``toolpool run -`` child::

    with Client.spawn("build/toolpool", registry="tools.json", store="/tmp/st", workers=4) as tp:
        r = tp.call("echo", {"x": 1})

The co-process writes one call line per call and a reader thread hands each
result line to the caller waiting for its id; it is thread-safe too.
"""

import json
import os
import random
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid

__all__ = ["Client", "Coprocess", "ToolpoolError", "new_id", "parse_addr"]

DEFAULT_ADDR = "unix:./toolpool.sock"


class ToolpoolError(Exception):
    """A request toolpool refused, or could not be reached for.

    status: the HTTP status (400, 401, 404, 409, 413, 503, ...), or None when
    there was no HTTP answer (Unavailable, ClientTimeout, CoprocessExited).
    error: the service's error name. message: its explanation. id: the call
    id the request was for, when there was one (so a caller can ask for its
    result later).
    """

    def __init__(self, status, error, message, id=None):
        super().__init__(f"{status if status is not None else '-'} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.id = id


def new_id():
    """A fresh call id: 32 hex digits (uuid4)."""
    return uuid.uuid4().hex


def parse_addr(addr):
    """Splits an address into ("unix", path) or ("tcp", host, port).

    Accepted: "unix:PATH", "http://HOST:PORT", "HOST:PORT", "[::1]:PORT", and
    a bare path ("/run/toolpool.sock", "./toolpool.sock").
    """
    if addr.startswith("unix:"):
        return ("unix", addr[len("unix:"):])
    if addr.startswith("/") or addr.startswith("."):
        return ("unix", addr)
    if addr.startswith("http://"):
        addr = addr[len("http://"):].rstrip("/")
    elif "://" in addr:
        raise ValueError(f"toolpool address {addr!r}: only unix:PATH, HOST:PORT and http://HOST:PORT")
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
    else:
        host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"toolpool address {addr!r}: expected unix:PATH or HOST:PORT")
    return ("tcp", host, int(port))


def _duration(d):
    """A deadline as the service reads it: a string as given ("30s",
    "250ms"), a number as seconds."""
    if d is None or isinstance(d, str):
        return d
    us = int(round(float(d) * 1e6))
    if us <= 0:
        raise ValueError(f"deadline {d!r}: must be positive")
    return f"{us}us"


def _call_body(tool, args, job, step, id, deadline):
    body = {"id": id, "tool": tool}
    if job is not None:
        body["job"] = job
    if step is not None:
        body["step"] = step
    if args is not None:
        body["args"] = args
    if deadline is not None:
        body["deadline"] = _duration(deadline)
    return body


# ---------------------------------------------------------------------------
# HTTP
#
# A small HTTP/1.1 client of its own rather than http.client: a request is
# one write (head and body together), and an answer is parsed from one
# buffer without the email package. Against the same server, a no-op
# call's CPU in the client (its system calls included) went from about 250 us
# with http.client to under 100 us; the client's CPU is what bounds a Python
# program's calls per second, and it adds to every call's latency.


class _Closed(ConnectionError):
    """The service closed the connection before the whole answer came."""


class _Conn:
    """One keep-alive connection: a socket and what was read past the last
    answer."""

    __slots__ = ("sock", "buf", "host")

    def __init__(self, where, timeout):
        if where[0] == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(timeout)
                s.connect(where[1])
            except BaseException:
                s.close()
                raise
            self.host = "localhost"
        else:
            s = socket.create_connection((where[1], where[2]), timeout)
            # A request is one small write and its answer is awaited at
            # once: Nagle's algorithm would only hold it back.
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.host = f"{where[1]}:{where[2]}"
        self.sock = s
        self.buf = b""

    def close(self):
        self.sock.close()

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            raise _Closed("the service closed the connection")
        self.buf += data

    def read_head(self):
        """Reads a status line and headers: (status, reason, {name: value},
        keep-alive)."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            if len(self.buf) > 1 << 20:
                raise _Closed("an answer's head longer than 1 MiB")
            self._more()
        lines = self.buf[:i].decode("latin-1").split("\r\n")
        self.buf = self.buf[i + 4:]
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or not code.isdigit():
            raise _Closed(f"not an HTTP answer: {lines[0][:80]!r}")
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return int(code), reason, headers, keep

    def read_body(self, status, headers):
        """The body of the answer whose head was read, in full."""
        if status in (204, 304) or 100 <= status < 200:
            return b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join(self.chunks())
        n = headers.get("content-length")
        if n is None:
            while True:     # the body ends with the connection
                try:
                    self._more()
                except _Closed:
                    body, self.buf = self.buf, b""
                    return body
        n = int(n)
        while len(self.buf) < n:
            self._more()
        body, self.buf = self.buf[:n], self.buf[n:]
        return body

    def chunks(self):
        """Yields a chunked body's chunks as they come."""
        while True:
            while True:
                i = self.buf.find(b"\r\n")
                if i >= 0:
                    break
                self._more()
            n = int(self.buf[:i].split(b";")[0], 16)
            self.buf = self.buf[i + 2:]
            if n == 0:
                while self.buf.find(b"\r\n") != 0:      # trailers, then the empty line
                    i = self.buf.find(b"\r\n")
                    if i > 0:
                        self.buf = self.buf[i + 2:]
                    else:
                        self._more()
                self.buf = self.buf[2:]
                return
            while len(self.buf) < n + 2:
                self._more()
            chunk, self.buf = self.buf[:n], self.buf[n + 2:]
            yield chunk


def _retryable(e):
    """Failures after which the request is sent again: the request may not
    have reached the service, or its answer was lost with the connection.
    A timeout is not one of them (the service is there, only slow)."""
    if isinstance(e, (TimeoutError, socket.timeout)):
        return False
    return isinstance(e, OSError)


class Client:
    """A client of ``toolpool serve``. See the module's docstring.

    addr: "unix:PATH" (the default, "unix:./toolpool.sock"), "HOST:PORT" or
        "http://HOST:PORT".
    token: sent as "Authorization: Bearer TOKEN" (serve --token-file).
    timeout: seconds a socket operation may take, connecting and waiting for
        an answer included; a call that runs longer raises ClientTimeout
        (use submit and result for such calls, or a larger timeout).
    retries: how many times a request is sent again after a refused or
        dropped connection (not after an HTTP answer); the waits between
        start at backoff seconds and double up to max_backoff, each cut at
        random to between half and all of its length (jitter). With the
        defaults that is 9.5 s at the least and 19.2 s at the most
        (14.4 s on average) before raising Unavailable: a service that is
        back within 9.5 s is always reached.
    pool_size: idle keep-alive connections kept for reuse; a request when
        none is idle opens another, so concurrency is not capped by it.
    """

    def __init__(self, addr=DEFAULT_ADDR, token=None, timeout=300.0, retries=14, backoff=0.05,
                 max_backoff=2.0, pool_size=64):
        self.addr = addr
        self._where = parse_addr(addr)
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.pool_size = pool_size
        self._idle = []
        self._lock = threading.Lock()
        host = "localhost" if self._where[0] == "unix" else f"{self._where[1]}:{self._where[2]}"
        auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
        self._head = f" HTTP/1.1\r\nHost: {host}\r\n{auth}Accept: application/json\r\n"

    # -- connections -------------------------------------------------------

    def _take(self):
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return _Conn(self._where, self.timeout), False

    def _give(self, conn):
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self):
        """Closes the idle connections. The client stays usable."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- requests ----------------------------------------------------------

    def _encode(self, method, path, body, ctype="application/json"):
        if body is None:
            return f"{method} {path}{self._head}\r\n".encode()
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
        return (f"{method} {path}{self._head}Content-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    def _backoff(self, delay):
        time.sleep(delay * (0.5 + random.random() / 2))
        return min(delay * 2, self.max_backoff)

    def _request(self, method, path, body=None, call_id=None, ok=(200,), raw=False):
        """Sends one request and reads its answer in full; returns (status,
        parsed JSON or text). Sends it again after a refused or dropped
        connection. Raises ToolpoolError for a status not in ok."""
        req = self._encode(method, path, body)
        delay, tries = self.backoff, 0
        while True:
            conn = None
            try:
                conn, reused = self._take()
                conn.sock.sendall(req)
                status, reason, headers, keep = conn.read_head()
                data = conn.read_body(status, headers)
            except Exception as e:
                if conn is not None:
                    conn.close()
                if isinstance(e, (TimeoutError, socket.timeout)):
                    raise ToolpoolError(None, "ClientTimeout",
                                        f"{method} {path}: no answer from {self.addr} within "
                                        f"{self.timeout} s", call_id) from e
                if not _retryable(e):
                    raise
                # A kept-alive connection the service closed while it was
                # idle fails on first use: that costs no retry.
                if conn is not None and reused:
                    continue
                if tries >= self.retries:
                    raise ToolpoolError(None, "Unavailable",
                                        f"{method} {path}: {self.addr}: {e.__class__.__name__}: {e} "
                                        f"(after {tries + 1} tries)", call_id) from e
                tries += 1
                delay = self._backoff(delay)
                continue
            if keep:
                self._give(conn)
            else:
                conn.close()
            return self._answer(status, reason, headers, data, method, path, call_id, ok, raw)

    def _answer(self, status, reason, headers, data, method, path, call_id, ok, raw):
        if status in ok:
            if raw or not data or "json" not in headers.get("content-type", "json"):
                return status, data.decode("utf-8", "replace")
            return status, json.loads(data)
        error, message = reason or "HTTPError", data.decode("utf-8", "replace").strip()
        if data[:1] == b"{" or "json" in headers.get("content-type", ""):
            try:
                doc = json.loads(data)
                error = doc.get("error", error)
                message = doc.get("message", message)
            except ValueError:
                pass
        raise ToolpoolError(status, error, message or f"{method} {path}: HTTP {status}", call_id)

    # -- calls -------------------------------------------------------------

    def call(self, tool, args=None, job=None, step=None, id=None, deadline=None, format=None):
        """Runs one call and returns its result record (a dict).

        tool: the tool's name; args: a dict (default {}); job, step: the
        agent run and its step (calls of one job run one at a time, in step
        order); id: the call's id (default: a new one); deadline: for the
        whole call, all attempts and backoffs ("30s", "250ms", or seconds as
        a number). A failed tool is data in the record ("ok": false);
        ToolpoolError is raised only when the service refused the request
        or could not be reached. format: the record as an agent's
        conversation takes it ("openai": a Chat Completions tool message,
        "openai-responses": a function_call_output item, "anthropic": a
        tool_result block; None: toolpool's record).
        """
        id = id or new_id()
        _, r = self._request("POST", _formatted("/v1/calls", format),
                             _call_body(tool, args, job, step, id, deadline), call_id=id)
        return r

    def submit(self, tool, args=None, job=None, step=None, id=None, deadline=None):
        """Starts a call without waiting for it; returns its id (see
        result and cancel). The arguments are call's."""
        id = id or new_id()
        self._request("POST", "/v1/calls?wait=0", _call_body(tool, args, job, step, id, deadline),
                      call_id=id, ok=(200, 202))
        return id

    def result(self, id, wait=True, poll=0.05, timeout=None, format=None):
        """The result record of call id. While it runs: with wait, asks
        again every poll seconds (up to timeout seconds, then ClientTimeout);
        without, returns None. An id the service does not know raises
        ToolpoolError 404. format: as for call."""
        path = _formatted("/v1/calls/" + _q(id), format)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            status, r = self._request("GET", path, call_id=id, ok=(200, 202))
            if status == 200:
                return r
            if not wait:
                return None
            if end is not None and time.monotonic() >= end:
                raise ToolpoolError(None, "ClientTimeout", f"call {id} still running after {timeout} s", id)
            time.sleep(poll)

    def cancel(self, id, format=None):
        """Cancels call id: returns its final record (error Cancelled).
        ToolpoolError 409 when it had already ended (its record is then
        result(id)), 404 when the service does not know it. format: as for
        call."""
        return self._request("DELETE", _formatted("/v1/calls/" + _q(id), format), call_id=id)[1]

    def batch(self, calls, format=None):
        """Sends many calls in one request (POST /v1/batch) and yields their
        result records as they finish, in the order they finish.

        calls: dicts as for call ({"tool", "args", "job", "step", "id",
        "deadline"}); a call without an id gets a new one. The request is
        not sent again once its answer has begun: a connection lost midway,
        or a service that drained before all its calls ran, raises
        ToolpoolError Unavailable; the calls' records remain available by
        id, and the same batch sent again runs only what is not recorded.
        format: as for call (each record yielded in that form).
        """
        lines = []
        for c in calls:
            c = dict(c)
            c.setdefault("id", new_id())
            if "deadline" in c:
                c["deadline"] = _duration(c["deadline"])
            lines.append(json.dumps(c, separators=(",", ":")))
        req = self._encode("POST", _formatted("/v1/batch", format), ("\n".join(lines) + "\n").encode(), "application/x-ndjson")
        delay, tries = self.backoff, 0
        while True:
            conn = None
            try:
                conn = _Conn(self._where, self.timeout)
                conn.sock.sendall(req)
                status, reason, headers, _ = conn.read_head()
                break
            except Exception as e:
                if conn is not None:
                    conn.close()
                if not _retryable(e) or tries >= self.retries:
                    raise ToolpoolError(None, "Unavailable", f"POST /v1/batch: {self.addr}: {e}") from e
                tries += 1
                delay = self._backoff(delay)
        try:
            if status != 200:
                self._answer(status, reason, headers, conn.read_body(status, headers), "POST", "/v1/batch",
                             None, (200,), False)
            if headers.get("transfer-encoding", "").lower() == "chunked":
                parts = conn.chunks()
            else:
                parts = iter([conn.read_body(status, headers)])
            pending = b""
            try:
                for part in parts:
                    pending += part
                    *done, pending = pending.split(b"\n")
                    for line in done:
                        if line.strip():
                            yield json.loads(line)
            except OSError as e:
                raise ToolpoolError(None, "Unavailable", f"POST /v1/batch: the answer broke off: {e}") from e
            if pending.strip():
                yield json.loads(pending)
        finally:
            conn.close()

    # -- the rest of the service -------------------------------------------

    def tools(self, format=None):
        """The registry's tools: toolpool's own form, or format="openai"
        (function tools) or "mcp" (MCP tools/list)."""
        path = "/v1/tools" + (f"?format={_q(format)}" if format else "")
        return self._request("GET", path)[1]

    def checkpoint_put(self, job, step, state):
        """Stores job's checkpoint: its step and state (any JSON: the
        message list, the loop's variables). Returns {"job", "step"} once it
        is durable."""
        return self._request("PUT", f"/v1/jobs/{_q(job)}/checkpoint", {"step": step, "state": state})[1]

    def checkpoint_get(self, job):
        """job's checkpoint {"job", "step", "state", "updated_ms"}, or None
        when it has none."""
        try:
            return self._request("GET", f"/v1/jobs/{_q(job)}/checkpoint")[1]
        except ToolpoolError as e:
            if e.status == 404:
                return None
            raise

    def breakers(self):
        """The circuit breakers the store holds."""
        return self._request("GET", "/v1/breakers")[1]

    def breaker_reset(self, key):
        """Closes breaker key ("tool/NAME" or "call/NAME/DIGEST")."""
        return self._request("POST", f"/v1/breakers/{_q(key)}/reset", b"")[1]

    def escalations(self):
        """The calls handed to a person."""
        return self._request("GET", "/v1/escalations")[1]

    def escalation_resolve(self, eid, note=None, rerun=False):
        """Marks escalation eid resolved, with an optional note. rerun: the
        next run does its call again (its recorded failure is forgotten, the
        circuit it opened closed); else the failure is kept."""
        body = {}
        if note is not None:
            body["note"] = note
        if rerun:
            body["rerun"] = True
        return self._request("POST", f"/v1/escalations/{_q(eid)}/resolve", body or b"")[1]

    def metrics(self):
        """The service's counters, as Prometheus text."""
        return self._request("GET", "/metrics", raw=True)[1]

    def health(self):
        """GET /healthz: the answer ("ok", or a document when the service
        sends JSON); ToolpoolError when the service is not healthy or not
        there."""
        return self._request("GET", "/healthz")[1]

    def ready(self):
        """Whether the service takes calls now (GET /readyz answers 200)."""
        try:
            self._request("GET", "/readyz")
            return True
        except ToolpoolError as e:
            if e.status is None or e.status >= 500:
                return False
            raise

    # -- without a service -------------------------------------------------

    @staticmethod
    def spawn(toolpool, registry=None, store=None, workers=None, args=(), **kw):
        """Starts ``toolpool run -`` as a co-process: see Coprocess."""
        return Coprocess(toolpool, registry=registry, store=store, workers=workers, args=args, **kw)


def _q(s):
    return urllib.parse.quote(str(s), safe="")


def _formatted(path, format):
    """path with ?format= when a format other than toolpool's is asked."""
    return path if format is None else f"{path}?format={_q(format)}"


# ---------------------------------------------------------------------------
# The co-process


class _Pending:
    __slots__ = ("event", "record", "holders")

    def __init__(self):
        self.event = threading.Event()
        self.record = None
        self.holders = 0


class Coprocess:
    """``toolpool run -`` as a child process, with Client's call API.

    toolpool: the path of the toolpool program. registry, store, workers:
    run's --registry, --store and -j (None: run's defaults). args: more
    options for run (["--relaxed"], ["--pipeline", "1"]). stderr: where run's
    messages go (None: this process's stderr). env: its environment.

    Each call is written as one line on run's standard input; run writes
    each result as its call ends (after its commit), in the order calls
    end, and a reader thread hands it to the caller waiting for that id.
    Calls of different jobs run in parallel, up to the workers; calls of one
    job one at a time, in step order. A call given an id that is still
    running here attaches to it instead of being sent twice; an id that has
    ended is answered from the store by run.

    run's call lines have no per-call deadline: deadline is sent along, and
    only the registry's deadlines apply until run reads it. close() (or
    leaving a with block) closes run's input: the calls sent still end, and
    run exits.
    """

    def __init__(self, toolpool, registry=None, store=None, workers=None, args=(), stderr=None, env=None):
        cmd = [toolpool, "run", "-q", "--no-progress"]
        if registry is not None:
            cmd += ["--registry", registry]
        if store is not None:
            cmd += ["--store", store]
        if workers is not None:
            cmd += ["-j", str(workers)]
        cmd += list(args) + ["-"]
        self.cmd = cmd
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                      env=env, close_fds=True)
        self._wlock = threading.Lock()
        self._lock = threading.Lock()
        self._pending = {}
        self._gone = None
        self._reader = threading.Thread(target=self._read, name="toolpool-run-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self):
        return self._proc.pid

    def _read(self):
        """The reader thread: one result line at a time, to its waiters."""
        out = self._proc.stdout
        for line in out:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                p = self._pending.get(rec.get("id"))
                if p is None or p.event.is_set():
                    continue
                p.record = rec
                p.event.set()
        out.close()
        rc = self._proc.wait()
        with self._lock:
            self._gone = f"toolpool run exited with status {rc}"
            for p in self._pending.values():
                p.event.set()

    def submit(self, tool, args=None, job=None, step=None, id=None, deadline=None):
        """Sends a call; returns its id, for result()."""
        id = id or new_id()
        line = (json.dumps(_call_body(tool, args, job, step, id, deadline), separators=(",", ":"))
                + "\n").encode()
        with self._lock:
            if self._gone:
                raise ToolpoolError(None, "CoprocessExited", self._gone, id)
            p = self._pending.get(id)
            if p is not None:
                p.holders += 1
                return id
            p = self._pending[id] = _Pending()
            p.holders = 1
        try:
            with self._wlock:
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
        except (OSError, ValueError) as e:
            with self._lock:
                self._pending.pop(id, None)
            raise ToolpoolError(None, "CoprocessExited", f"toolpool run: cannot write: {e}", id) from e
        return id

    def result(self, id, wait=True, poll=None, timeout=None):
        """The result record of a call submitted here: waits for it (up to
        timeout seconds, then ClientTimeout), or without wait returns None
        while it runs. Each submit of an id is answered by one result()."""
        with self._lock:
            p = self._pending.get(id)
        if p is None:
            raise ToolpoolError(404, "NotFound", f"call {id} was not submitted here", id)
        if not wait and not p.event.is_set():
            return None
        if not p.event.wait(timeout):
            raise ToolpoolError(None, "ClientTimeout", f"call {id} still running after {timeout} s", id)
        with self._lock:
            p.holders -= 1
            if p.holders <= 0 and self._pending.get(id) is p:
                del self._pending[id]
            if p.record is None:
                raise ToolpoolError(None, "CoprocessExited", self._gone or "toolpool run exited", id)
            return p.record

    def call(self, tool, args=None, job=None, step=None, id=None, deadline=None):
        """Runs one call and returns its result record: see Client.call."""
        return self.result(self.submit(tool, args, job, step, id, deadline))

    def close(self, timeout=60):
        """Ends run's input, lets the calls sent end, and waits for run to
        exit; returns its exit status (0: every call succeeded, 1: some
        failed). Killed after timeout seconds."""
        with self._wlock:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            rc = self._proc.wait()
        self._reader.join(timeout)
        return rc

    def kill(self):
        """Kills run at once (SIGKILL); waiting callers get CoprocessExited."""
        self._proc.kill()
        self._proc.wait()
        self._reader.join()
        with self._wlock:
            try:
                self._proc.stdin.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
