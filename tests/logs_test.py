#!/usr/bin/env python3
"""The logs: --log-format json and --log-file, end to end, and the list of
events in docs/logs.md against the sources.

- Every tp_log_* call in the sources names its event with a string literal,
  every event the sources name is in the table of docs/logs.md with its
  level, and the table names no other (`logs_test.py --table` prints the
  table the sources make, the meanings kept from the doc).
- Real `toolpool run` processes with a registry that does not load, with a
  tool that times out, one that kills its worker, with an MCP server that writes on its stderr (its
  worker's line), under --log-format json --log-file F, or the same from
  TOOLPOOL_LOG_FORMAT and TOOLPOOL_LOG_FILE: every line of F is one JSON
  object with the fields, the expected events are there, stderr holds none
  of them, and no exec tool inherits the two variables.
- The text format is today's lines, in the file when one is given.
- `toolpool serve` and `toolpool mcp` take the options: a timeout and a
  drain in serve's file, a timeout in mcp's.

Standard library only. The build folder comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serveutil  # noqa: E402

TOOLPOOL = serveutil.TOOLPOOL
TINY = [sys.executable, os.path.join(HERE, "mcp_tiny_server.py")]
DOC = os.path.join(ROOT, "docs", "logs.md")
SOURCE_DIRS = ("common", "supervisor", "worker", "tools")

LEVELS = {"error": "error", "warn": "warning", "info": "info"}
JSON_LEVELS = {"ERROR": "error", "WARN": "warning", "INFO": "info"}
CALL = re.compile(r'\btp_log_(?:call_)?(error|warn|info)\(\s*("?)([^,"]*)"?', re.S)
JSON_ONLY = re.compile(r'\btp_log_json_event\(\s*TP_LOG_(\w+),\s*("?)([^,"]*)"?', re.S)
EVENT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
FIELDS = ("time", "level", "event", "message", "prog", "pid")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def source_events():
    """{event: (set of levels, json_only, set of files)} from the sources; bad: calls with no literal name."""
    events = collections.defaultdict(lambda: [set(), True, set()])
    bad = []
    for top in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if not name.endswith(".c"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if rel == os.path.join("common", "base", "log.c"):
                    text = re.sub(r"(?m)^(void|#define) .*$", "", text)   # the definitions themselves
                for rx, levels, json_only in ((CALL, LEVELS, False), (JSON_ONLY, JSON_LEVELS, True)):
                    for m in rx.finditer(text):
                        level, quoted, event = levels[m.group(1)], m.group(2), m.group(3)
                        if level is None or quoted != '"' or not EVENT.match(event):
                            if not (rel.endswith("log.c") and not quoted):
                                bad.append("%s: %s" % (rel, m.group(0)))
                            continue
                        e = events[event]
                        e[0].add(level)
                        e[1] = e[1] and json_only
                        e[2].add(rel)
    return events, bad


def doc_rows():
    """The table of docs/logs.md: {event: (level, module, meaning)}."""
    rows = {}
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith("`"):
                rows[cells[0].strip("`")] = tuple(cells[1:])
    return rows


def level_cell(levels, json_only):
    order = ["error", "warning", "info"]
    cell = ", ".join(lv for lv in order if lv in levels)
    return cell + " (json only)" if json_only else cell


def table():
    events, _ = source_events()
    rows = doc_rows()
    out = ["| event | level | module | meaning |", "| --- | --- | --- | --- |"]
    for ev in sorted(events):
        levels, json_only, files = events[ev]
        module = ", ".join(sorted({os.path.dirname(f) for f in files}))
        meaning = rows.get(ev, ("", "", "TODO"))[2]
        out.append("| `%s` | %s | %s | %s |" % (ev, level_cell(levels, json_only), module, meaning))
    return "\n".join(out) + "\n"


def parse_log(test, path):
    """Every line of the log file at path, each checked to be a JSON object with the fields."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    test.assertTrue(text.endswith("\n") or text == "", text[-200:])
    lines = []
    for line in text.splitlines():
        obj = json.loads(line)
        test.assertIsInstance(obj, dict, line)
        for k in FIELDS:
            test.assertIn(k, obj, line)
        test.assertRegex(obj["time"], TIME)
        test.assertIn(obj["level"], ("error", "warning", "info"), line)
        test.assertRegex(obj["event"], EVENT)
        test.assertIsInstance(obj["pid"], int)
        for k in ("call_id", "job", "tool"):
            if k in obj:
                test.assertIsInstance(obj[k], str, line)
        if "attempt" in obj:
            test.assertIsInstance(obj["attempt"], int)
        lines.append(obj)
    return lines


# An exec tool that answers with what it sees of the two variables.
PEEK = ["sh", "-c", "cat >/dev/null; printf '{\"fmt\":\"%s\",\"file\":\"%s\"}' "
        "\"${TOOLPOOL_LOG_FORMAT-unset}\" \"${TOOLPOOL_LOG_FILE-unset}\""]


class LogsDocTest(unittest.TestCase):
    def test_every_event_is_named_and_documented(self):
        events, bad = source_events()
        self.assertEqual(bad, [], "a log call without a literal event name")
        self.assertGreater(len(events), 100)
        rows = doc_rows()
        self.assertEqual(sorted(set(events) - set(rows)), [], "events missing from docs/logs.md "
                         "(`tests/logs_test.py --table` prints the table)")
        self.assertEqual(sorted(set(rows) - set(events)), [], "docs/logs.md names events no source logs")
        for ev, (levels, json_only, _) in events.items():
            self.assertEqual(rows[ev][0], level_cell(levels, json_only), ev)
            self.assertNotIn(rows[ev][2], ("", "TODO"), ev)


class LogsRunTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-logs-")
        self.dir = self.tmpdir.name

    def tearDown(self):
        self.tmpdir.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def registry(self, name="tools.json"):
        # The MCP server writes its environment down first: once when the registry imports it
        # (in the supervisor), once when a worker starts it for its call.
        tiny = ["sh", "-c", 'env >>"$0"; echo >>"$0"; exec "$@"', self.path("mcp.env")] + TINY
        tools = [
            {"name": "slow", "exec": ["sleep", "30"], "timeout": "300ms", "attempts": 1, "kill_grace": "0s"},
            {"name": "peek", "exec": PEEK, "timeout": "10s"},
            # Kills its worker: a crash.
            {"name": "crash", "exec": ["sh", "-c", "cat >/dev/null; kill -9 $PPID; sleep 5"], "timeout": "10s",
             "attempts": 1},
            {"name": "tiny", "mcp": {"command": tiny, "tool": "echo"}, "timeout": "10s"},
        ]
        with open(self.path(name), "w") as f:
            json.dump({"tools": tools, "mcp_servers": {"imp": {"command": tiny}}}, f)
        return self.path(name)

    def calls(self):
        calls = [{"id": "s1", "job": "j1", "tool": "slow", "args": {}},
                 {"id": "p1", "job": "j2", "tool": "peek", "args": {}},
                 {"id": "t1", "job": "j3", "tool": "tiny", "args": {"text": "hi"}},
                 {"id": "c1", "job": "j4", "tool": "crash", "args": {}}]
        with open(self.path("calls.jsonl"), "w") as f:
            f.write("".join(json.dumps(c) + "\n" for c in calls))
        return self.path("calls.jsonl")

    def run_toolpool(self, *args, env=None):
        e = dict(os.environ)
        e.pop("TOOLPOOL_LOG_FORMAT", None)
        e.pop("TOOLPOOL_LOG_FILE", None)
        e.update(env or {})
        return subprocess.run([TOOLPOOL, *args], capture_output=True, text=True, timeout=120, cwd=self.dir, env=e)

    def check_run(self, p, log):
        self.assertEqual(p.returncode, 1, p.stderr)
        results = {json.loads(line)["id"]: json.loads(line) for line in p.stdout.splitlines()}
        self.assertEqual(results["s1"]["error"], "Timeout", results["s1"])
        self.assertEqual(results["p1"]["result"], {"fmt": "unset", "file": "unset"})   # not inherited
        with open(self.path("mcp.env")) as f:
            envs = f.read()
        self.assertGreaterEqual(envs.count("\n\n"), 2, envs)
        self.assertEqual([v for v in envs.splitlines() if v.startswith("TOOLPOOL_LOG_")], [])
        os.unlink(self.path("mcp.env"))
        self.assertTrue(results["t1"]["ok"], results["t1"])
        lines = parse_log(self, log)
        by = collections.defaultdict(list)
        for obj in lines:
            by[obj["event"]].append(obj)
        killed = by["pool.worker_killed"]
        self.assertEqual(len(killed), 1, lines)
        self.assertEqual((killed[0]["call_id"], killed[0]["job"], killed[0]["tool"], killed[0]["attempt"]),
                         ("s1", "j1", "slow", 1))
        self.assertEqual(killed[0]["level"], "warning")
        self.assertEqual(results["c1"]["error"], "WorkerCrashed", results["c1"])
        crashed = by["pool.worker_crashed"]
        self.assertEqual(len(crashed), 1, lines)
        self.assertEqual((crashed[0]["call_id"], crashed[0]["job"], crashed[0]["tool"], crashed[0]["attempt"]),
                         ("c1", "j4", "crash", 1))
        self.assertIn("killed by signal 9", crashed[0]["message"])
        said = by["worker.mcp_server_stderr"]
        self.assertTrue(any(o["message"] == "tiny: tiny: started" and o["prog"] == "toolpool-worker"
                            and o["tool"] == "tiny" for o in said), lines)
        self.assertNotIn("tiny: started", p.stderr)
        self.assertNotIn("{", p.stderr)
        return lines

    def test_run_json_options(self):
        log = self.path("log.jsonl")
        p = self.run_toolpool("run", "-q", "-j", "2", "-r", self.registry(), "-s", self.path("store"),
                              "--log-format", "json", "--log-file", log, self.calls())
        self.check_run(p, log)
        # A registry that does not load: its event, and nothing on stderr.
        with open(self.path("bad.json"), "w") as f:
            f.write('{"tools": [{"name": "x", "exec": ["true"], "timeout": "fast"}]}\n')
        p = self.run_toolpool("run", "-q", "-r", self.path("bad.json"), "-s", self.path("store2"),
                              "--log-format", "json", "--log-file", log, self.calls())
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, "")
        last = parse_log(self, log)[-1]
        self.assertEqual((last["event"], last["level"], last["prog"]), ("registry.invalid", "error", "toolpool"))
        self.assertIn("bad.json", last["message"])
        self.assertIn('"fast"', last["message"])
        # An unknown format is refused, naming the option.
        p = self.run_toolpool("run", "--log-format", "xml", self.calls())
        self.assertEqual(p.returncode, 2)
        self.assertIn('--log-format: expected text or json, got "xml"', p.stderr)

    def test_run_json_environment(self):
        log = self.path("env.jsonl")
        p = self.run_toolpool("run", "-q", "-j", "2", "-r", self.registry(), "-s", self.path("store"), self.calls(),
                              env={"TOOLPOOL_LOG_FORMAT": "json", "TOOLPOOL_LOG_FILE": log})
        self.check_run(p, log)

    def test_json_on_stderr_escapes(self):
        # No file: the lines go to stderr, one object each, a message's quotes and bytes escaped.
        p = self.run_toolpool("run", "-q", "-r", self.registry(), "-s", self.path("store"), "no\"such\x01file",
                              env={"TOOLPOOL_LOG_FORMAT": "json"})
        self.assertEqual(p.returncode, 2)
        obj = json.loads(p.stderr)
        self.assertEqual(obj["level"], "error")
        self.assertIn('no"such\x01file', obj["message"])

    def test_text_format_in_a_file(self):
        log = self.path("log.txt")
        p = self.run_toolpool("run", "-q", "-j", "2", "-r", self.registry(), "-s", self.path("store"),
                              "--log-file", log, self.calls())
        self.assertEqual(p.returncode, 1, p.stderr)
        with open(log) as f:
            text = f.read()
        self.assertIn("toolpool-worker: tiny: tiny: started\n", text)
        self.assertNotIn("{", text)                      # pool.worker_killed is JSON's only
        self.assertNotIn("tiny: started", p.stderr)
        # With neither, today's line on stderr.
        with open(self.path("bad.json"), "w") as f:
            f.write('{"tools": []\n')
        p = self.run_toolpool("run", "-q", "-r", self.path("bad.json"), self.calls())
        self.assertEqual(p.returncode, 2)
        self.assertRegex(p.stderr, r"^toolpool: error: .*bad\.json:2: ")


@unittest.skipUnless(serveutil.has_serve(), "no toolpool serve in this build")
class LogsServeMcpTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tp-logs-serve-")
        self.dir = self.tmpdir.name
        self.reg = os.path.join(self.dir, "tools.json")
        with open(self.reg, "w") as f:
            json.dump({"tools": [
                {"name": "slow", "exec": ["sleep", "30"], "timeout": "300ms", "attempts": 1, "kill_grace": "0s"},
                {"name": "hang", "exec": ["sleep", "30"], "timeout": "20s", "attempts": 1, "kill_grace": "0s"},
            ]}, f)
        self.log = os.path.join(self.dir, "serve.jsonl")

    def tearDown(self):
        self.tmpdir.cleanup()

    def test_serve(self):
        sock = "unix:" + os.path.join(self.dir, "s.sock")
        s = serveutil.Serve(self.reg, os.path.join(self.dir, "store"), sock, os.path.join(self.dir, "out"),
                            extra=("--log-format", "json", "--log-file", self.log, "--drain", "100ms"))
        s.start()
        try:
            c = serveutil.toolpool_client.Client(sock, retries=0, timeout=30)
            r = c.call("slow", {}, id="c1", job="j")
            c.close()
            self.assertEqual(r["error"], "Timeout", r)
            # A call left running at the SIGTERM: the drain is logged.
            def hang():
                c2 = serveutil.toolpool_client.Client(sock, retries=0, timeout=30)
                try:
                    c2.call("hang", {}, id="c2")
                except Exception:
                    pass    # cut by the stop
                finally:
                    c2.close()
            t = threading.Thread(target=hang)
            t.daemon = True
            t.start()
            serveutil.wait_for(lambda: len(serveutil.workers(s.proc.pid)) > 0, 10, "a worker")
            time.sleep(0.3)
            s.proc.send_signal(signal.SIGTERM)
            s.proc.wait(30)
        finally:
            s.kill9()
        events = [o["event"] for o in parse_log(self, self.log)]
        self.assertIn("pool.worker_killed", events)
        self.assertIn("serve.draining", events)
        with open(os.path.join(self.dir, "out")) as f:
            self.assertNotIn("draining", f.read())

    def test_mcp(self):
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {}}}]
        p = subprocess.Popen([TOOLPOOL, "mcp", "-q", "-r", self.reg, "-s", os.path.join(self.dir, "store"),
                              "--log-format", "json", "--log-file", self.log],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.dir)
        try:
            for m in msgs:
                p.stdin.write((json.dumps(m) + "\n").encode())
            p.stdin.flush()
            answered = 0
            while answered < 2:
                line = p.stdout.readline()
                self.assertTrue(line, "mcp ended early")
                if b'"id"' in line:
                    answered += 1
            p.stdin.close()
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        events = [o["event"] for o in parse_log(self, self.log)]
        self.assertIn("pool.worker_killed", events)
        self.assertEqual(err, b"")


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        sys.stdout.write(table())
        sys.exit(0)
    unittest.main()
