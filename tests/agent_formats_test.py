#!/usr/bin/env python3
"""Models' own call formats in and out, end to end: an OpenAI Chat
Completions tool_calls item, an OpenAI Responses function_call item and an
Anthropic tool_use block run through real `toolpool run` and `toolpool
serve` processes on real stores, and come back as the message each
provider's conversation takes (`--output-format`, `?format=`): ok and
failed calls, bad stringified arguments, job and step beside the model's
fields, a fake conversation fed its own calls' answers, and a rerun on the
same store answering from it in the same format.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import serveutil
import toolpool_client

TOOLPOOL = serveutil.TOOLPOOL

# A failure the seed names: permanent, one attempt.
DENY = ["sh", "-c", "cat >/dev/null; echo '{\"error\": \"PermissionDenied\", "
        "\"message\": \"403: role agent may not delete records\"}'"]

# An assistant message of each provider, as its API returns it.
CHAT_ASSISTANT = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_a1", "type": "function", "function": {"name": "echo", "arguments": "{\"q\": \"refund window\"}"}},
        {"id": "call_a2", "type": "function", "function": {"name": "delete_record", "arguments": "{\"id\": \"r_991\"}"}},
        {"id": "call_a3", "type": "function", "function": {"name": "echo", "arguments": "{\"q\": "}},
    ],
}
RESPONSES_OUTPUT = [
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "echo",
     "arguments": "{\"q\":\"refund window\"}", "status": "completed"},
    {"type": "function_call", "id": "fc_2", "call_id": "call_r2", "name": "delete_record",
     "arguments": "{\"id\":\"r_991\"}", "status": "completed"},
]
ANTHROPIC_ASSISTANT = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Let me look that up."},
        {"type": "tool_use", "id": "toolu_01A", "name": "echo", "input": {"q": "refund window"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "delete_record", "input": {"id": "r_991"}},
    ],
}


class AgentFormatsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-agentfmt-")
        self.log = os.path.join(self.dir, "ran.log")
        # echo and noop (the example plugin), a denied delete, and a counter that logs each run.
        counted = ["sh", "-c", "cat >/dev/null; echo \"$TOOLPOOL_CALL_ID\" >> " + self.log + "; echo '{\"n\": 1}'"]
        self.registry = serveutil.write_registry(os.path.join(self.dir, "tools.json"), [
            {"name": "delete_record", "exec": DENY, "timeout": "5s"},
            {"name": "counted", "exec": counted, "timeout": "5s"},
            {"name": "slow", "exec": ["sleep", "30"], "timeout": "60s"},
        ])
        self.store = os.path.join(self.dir, "store")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------

    def run_calls(self, lines, *args, expect=None):
        """`toolpool run` on lines (dicts or raw strings): (exit status, output lines parsed)."""
        path = os.path.join(self.dir, "calls.jsonl")
        with open(path, "w") as f:
            for ln in lines:
                f.write((ln if isinstance(ln, str) else json.dumps(ln)) + "\n")
        p = subprocess.run([TOOLPOOL, "run", "-q", "-r", self.registry, "-s", self.store, "-j", "2", *args, path],
                           capture_output=True, text=True, timeout=60)
        if expect is not None:
            self.assertEqual(p.returncode, expect, p.stderr)
        return p.returncode, [json.loads(x) for x in p.stdout.splitlines()]

    def by(self, out, key):
        return {o[key]: o for o in out}

    def ran(self):
        return serveutil.executions(self.log)

    # -- in ----------------------------------------------------------------

    def test_every_input_shape_runs(self):
        """Each provider's call runs as the toolpool call it stands for: its
        id the call id, its name the tool, its arguments (parsed when they
        are a string) the args; job and step beside its fields count."""
        rc, out = self.run_calls([
            {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"q\":\"x\",\"n\":[1,2]}"},
             "job": "conv-1", "step": 3},
            {"id": "call_1b", "function": {"name": "echo", "arguments": {"as": "object"}}},
            {"type": "function_call", "id": "fc_9", "call_id": "call_2", "name": "echo", "arguments": "{\"r\":true}",
             "status": "completed", "job": "conv-2", "step": 1},
            {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {"deep": {"a": None}}, "step": 2},
            {"type": "tool_use", "id": "toolu_02", "name": "noop"},
            {"id": "own-1", "tool": "echo", "args": {"t": 1}, "type": "mine"},
        ], expect=0)
        r = self.by(out, "id")
        self.assertEqual(set(r), {"call_1", "call_1b", "call_2", "toolu_01", "toolu_02", "own-1"})
        self.assertEqual((r["call_1"]["tool"], r["call_1"]["args"], r["call_1"]["job"], r["call_1"]["step"]),
                         ("echo", {"q": "x", "n": [1, 2]}, "conv-1", 3))
        self.assertEqual(r["call_1"]["result"], {"q": "x", "n": [1, 2]})
        self.assertEqual(r["call_1b"]["args"], {"as": "object"})
        self.assertEqual((r["call_2"]["args"], r["call_2"]["job"], r["call_2"]["step"]), ({"r": True}, "conv-2", 1))
        self.assertEqual((r["toolu_01"]["args"], r["toolu_01"]["job"], r["toolu_01"]["step"]),
                         ({"deep": {"a": None}}, "toolu_01", 2))
        self.assertEqual((r["toolu_02"]["tool"], r["toolu_02"]["args"]), ("noop", {}))
        # A "type" toolpool does not read as a model's leaves the line toolpool's own.
        self.assertEqual(r["own-1"]["result"], {"t": 1})

    def test_bad_arguments_are_the_lines_invalid_request(self):
        """Arguments that are not JSON, or not an object, and a call in two
        shapes, are InvalidRequest results naming the line and the field;
        the run goes on and exits 1."""
        rc, out = self.run_calls([
            {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"q\": "}},
            {"type": "function_call", "call_id": "call_2", "name": "echo", "arguments": "[1, 2]"},
            {"id": "call_3", "type": "function", "function": {"name": "echo", "arguments": 7}},
            {"type": "tool_use", "id": "toolu_4", "name": "echo", "input": "{}"},
            {"type": "tool_use", "id": "toolu_5", "input": {}},
            {"type": "tool_use", "id": "toolu_6", "name": "echo", "tool": "echo"},
            {"type": "function_call", "name": "echo", "arguments": "{}"},
            {"id": "call_8", "type": "function", "function": "echo"},
            {"id": "fine", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
        ], expect=1)
        self.assertEqual(len(out), 9)
        ok = [o for o in out if o["ok"]]
        self.assertEqual([o["id"] for o in ok], ["fine"])
        bad = {o["message"].split(":")[0]: o for o in out if not o["ok"]}
        want = {
            "line 1": ("call_1", "\"function.arguments\" is not valid JSON"),
            "line 2": ("call_2", "\"arguments\" must hold a JSON object, not an array"),
            "line 3": ("call_3", "\"function.arguments\" must be a string holding a JSON object"),
            "line 4": ("toolu_4", "\"input\" must be a JSON object"),
            "line 5": ("toolu_5", "\"name\" must be a non-empty string"),
            "line 6": (None, "a call in two shapes: \"type\" \"tool_use\" makes it an Anthropic tool_use block, "
                             "but \"tool\" is a toolpool call's key"),
            "line 7": (None, "\"call_id\" must be a non-empty string"),
            "line 8": ("call_8", "\"function\" must be a JSON object"),
        }
        self.assertEqual(set(bad), set(want))
        for where, (id, text) in want.items():
            o = bad[where]
            self.assertEqual((o["id"], o["error"], o["class"], o["attempts"]), (id, "InvalidRequest", "malformed", 0))
            self.assertTrue(o["message"].startswith(f"{where}: {text}"), o["message"])
        self.assertEqual(bad["line 1"]["tool"], "echo")

    def test_ordered_reads_the_models_job_and_step(self):
        """--ordered puts a conversation's calls in step order, read from
        the keys beside the model's fields, whatever the shape."""
        open(self.log, "w").close()
        rc, out = self.run_calls([
            {"type": "tool_use", "id": "toolu_3", "name": "counted", "input": {}, "job": "conv", "step": 3},
            {"id": "call_2", "type": "function", "function": {"name": "counted", "arguments": "{}"}, "job": "conv",
             "step": 2},
            {"type": "function_call", "call_id": "call_1", "name": "counted", "arguments": "{}", "job": "conv",
             "step": 1},
        ], "--ordered", "-j", "1", expect=0)
        self.assertEqual(self.ran(), ["call_1", "call_2", "toolu_3"])

    # -- out ---------------------------------------------------------------

    def check_message(self, fmt, m, id, ok, text):
        """m is fmt's message for call id: its keys exactly, its id, its TEXT (parsed) equal to text."""
        keys = {"openai": {"role", "tool_call_id", "content"},
                "openai-responses": {"type", "call_id", "output"},
                "anthropic": {"type", "tool_use_id", "content", "is_error"}}[fmt]
        self.assertEqual(set(m), keys, m)
        if fmt == "openai":
            self.assertEqual((m["role"], m["tool_call_id"]), ("tool", id))
            body = m["content"]
        elif fmt == "openai-responses":
            self.assertEqual((m["type"], m["call_id"]), ("function_call_output", id))
            body = m["output"]
        else:
            self.assertEqual((m["type"], m["tool_use_id"], m["is_error"]), ("tool_result", id, not ok))
            body = m["content"]
        self.assertIsInstance(body, str)
        self.assertEqual(json.loads(body), text)

    def test_each_output_format_for_ok_and_failed_calls(self):
        """Each format gives the provider's tool message: the result's JSON
        when ok, the seed's tool message when not (the one the MCP front
        sends); calls written in toolpool's form are answered so too."""
        calls = [
            {"id": "call_ok", "type": "function", "function": {"name": "echo", "arguments": "{\"q\":\"x\"}"}},
            {"type": "tool_use", "id": "toolu_no", "name": "delete_record", "input": {"id": "r_991"}},
            {"id": "own", "tool": "echo", "args": {"k": [1]}},
            {"id": "lost", "tool": "serch"},
            "not json",
        ]
        denied = {"error": "PermissionDenied", "message": "403: role agent may not delete records",
                  "retryable": False, "attempts": 1, "class": "permanent", "escalated": False}
        for fmt in ("openai", "openai-responses", "anthropic"):
            with self.subTest(fmt=fmt):
                shutil.rmtree(self.store, ignore_errors=True)
                rc, out = self.run_calls(calls, "--output-format", fmt, expect=1)
                self.assertEqual(len(out), 5)
                idk = {"openai": "tool_call_id", "openai-responses": "call_id", "anthropic": "tool_use_id"}[fmt]
                m = {o[idk]: o for o in out}
                self.check_message(fmt, m["call_ok"], "call_ok", True, {"q": "x"})
                self.check_message(fmt, m["toolu_no"], "toolu_no", False, denied)
                self.check_message(fmt, m["own"], "own", True, {"k": [1]})
                lost = json.loads(m["lost"]["content" if fmt != "openai-responses" else "output"])
                self.assertEqual((lost["error"], lost["class"]), ("UnknownTool", "malformed"))
                self.assertIn("closest: ", lost["message"])
                junk = json.loads(m[None]["content" if fmt != "openai-responses" else "output"])
                self.assertEqual(junk["error"], "InvalidRequest")
                self.assertTrue(junk["message"].startswith("line 5: not valid JSON"), junk)
        # toolpool, the default, is today's result line.
        shutil.rmtree(self.store, ignore_errors=True)
        rc, out = self.run_calls(calls[:1], "--output-format", "toolpool", expect=0)
        self.assertEqual((out[0]["id"], out[0]["ok"], out[0]["result"]), ("call_ok", True, {"q": "x"}))
        p = subprocess.run([TOOLPOOL, "run", "--output-format", "xml", "-"], capture_output=True, text=True,
                           input="", timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--output-format: expected toolpool, openai, openai-responses or anthropic", p.stderr)

    def test_mcp_front_sends_the_same_tool_message(self):
        """The text a failed call's model reads over MCP is the one the agent formats send."""
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "delete_record", "arguments": {"id": "r_991"}, "_meta": {"id": "m1"}}}
        msgs = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]
        p = subprocess.Popen([TOOLPOOL, "mcp", "-r", self.registry, "-s", self.store, "-j", "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs))
            p.stdin.flush()
            answer = None
            for line in p.stdout:  # until the call's answer: closing stdin first would stop the server
                if json.loads(line).get("id") == 2:
                    answer = json.loads(line)
                    break
        finally:
            p.stdin.close()
            p.wait(30)
        mcp_text = answer["result"]["content"][0]["text"]
        shutil.rmtree(self.store, ignore_errors=True)
        rc, out = self.run_calls([{"type": "tool_use", "id": "m1", "name": "delete_record", "input": {"id": "r_991"}}],
                                 "--output-format", "anthropic", expect=1)
        self.assertEqual(out[0]["content"], mcp_text)

    # -- round trips ---------------------------------------------------------

    def test_round_trip_openai_chat(self):
        """A recorded assistant message's tool_calls run as they are; their
        answers, appended, give every call its one tool message, in order."""
        messages = [{"role": "user", "content": "What is the refund window? Then delete r_991."}, CHAT_ASSISTANT]
        calls = [dict(tc, job="conv", step=i + 1) for i, tc in enumerate(CHAT_ASSISTANT["tool_calls"])]
        rc, out = self.run_calls(calls, "--output-format", "openai", expect=1)
        answers = self.by(out, "tool_call_id")
        messages += [answers[tc["id"]] for tc in CHAT_ASSISTANT["tool_calls"]]
        tool_msgs = messages[2:]
        self.assertEqual([m["tool_call_id"] for m in tool_msgs], ["call_a1", "call_a2", "call_a3"])
        self.assertTrue(all(m["role"] == "tool" and isinstance(m["content"], str) for m in tool_msgs))
        self.assertEqual(json.loads(tool_msgs[0]["content"]), {"q": "refund window"})
        self.assertEqual(json.loads(tool_msgs[1]["content"])["error"], "PermissionDenied")
        bad = json.loads(tool_msgs[2]["content"])
        self.assertEqual((bad["error"], bad["retryable"]), ("InvalidRequest", False))
        self.assertIn("\"function.arguments\" is not valid JSON", bad["message"])
        json.dumps(messages)  # the conversation, whole, is JSON again

    def test_round_trip_openai_responses(self):
        """The function_call items of a Responses output (other items beside
        them left out) come back as function_call_output items for the next input."""
        calls = [dict(it, job="resp", step=i) for i, it in enumerate(RESPONSES_OUTPUT) if it["type"] == "function_call"]
        rc, out = self.run_calls(calls, "--output-format", "openai-responses", expect=1)
        answers = self.by(out, "call_id")
        next_input = RESPONSES_OUTPUT + [answers[c["call_id"]] for c in calls]
        outputs = next_input[3:]
        self.assertEqual([(o["type"], o["call_id"]) for o in outputs],
                         [("function_call_output", "call_r1"), ("function_call_output", "call_r2")])
        self.assertEqual(json.loads(outputs[0]["output"]), {"q": "refund window"})
        self.assertEqual(json.loads(outputs[1]["output"])["attempts"], 1)

    def test_round_trip_anthropic(self):
        """An assistant message's tool_use blocks run; the user turn that
        answers them is a list of tool_result blocks, one per tool_use id."""
        uses = [b for b in ANTHROPIC_ASSISTANT["content"] if b["type"] == "tool_use"]
        rc, out = self.run_calls([dict(b, job="claude", step=i + 1) for i, b in enumerate(uses)],
                                 "--output-format", "anthropic", expect=1)
        answers = self.by(out, "tool_use_id")
        user = {"role": "user", "content": [answers[b["id"]] for b in uses]}
        self.assertEqual([(c["type"], c["tool_use_id"], c["is_error"]) for c in user["content"]],
                         [("tool_result", "toolu_01A", False), ("tool_result", "toolu_01B", True)])
        self.assertEqual(json.loads(user["content"][0]["content"]), {"q": "refund window"})
        self.assertEqual(json.loads(user["content"][1]["content"])["error"], "PermissionDenied")

    # -- resume ------------------------------------------------------------

    def test_rerun_serves_recorded_results_in_the_same_format(self):
        """A rerun of the same input on the same store runs nothing again and
        writes the same messages, in the same format."""
        calls = [
            {"id": "call_c1", "type": "function", "function": {"name": "counted", "arguments": "{}"}},
            {"type": "tool_use", "id": "toolu_c2", "name": "counted", "input": {"x": 1}},
            {"type": "function_call", "call_id": "call_c3", "name": "delete_record", "arguments": "{}"},
        ]
        for fmt in ("openai", "anthropic"):
            with self.subTest(fmt=fmt):
                shutil.rmtree(self.store, ignore_errors=True)
                open(self.log, "w").close()
                rc1, first = self.run_calls(calls, "--output-format", fmt, expect=1)
                self.assertEqual(sorted(self.ran()), ["call_c1", "toolu_c2"])
                rc2, again = self.run_calls(calls, "--output-format", fmt, expect=1)
                self.assertEqual(sorted(self.ran()), ["call_c1", "toolu_c2"])  # nothing ran again
                key = lambda m: json.dumps(m, sort_keys=True)
                self.assertEqual(sorted(map(key, first)), sorted(map(key, again)))

    # -- serve -------------------------------------------------------------

    @contextlib.contextmanager
    def serving(self):
        """A `toolpool serve` on the test's registry and store, and a client of it; stopped after."""
        sock = os.path.join(self.dir, "tp.sock")
        srv = serveutil.Serve(self.registry, self.store, "unix:" + sock, os.path.join(self.dir, "serve.log")).start()
        c = toolpool_client.Client("unix:" + sock, retries=0, timeout=30)
        try:
            yield c
        finally:
            c.close()
            srv.stop()

    def post_s1(self, c):
        """The first serve call: an Anthropic block, answered as one."""
        st, m = c._request("POST", "/v1/calls?format=anthropic",
                           {"type": "tool_use", "id": "toolu_s1", "name": "counted", "input": {}, "job": "sj",
                            "step": 1})
        self.check_message("anthropic", m, "toolu_s1", True, {"n": 1})

    def test_serve_formats(self):
        """?format= on POST and GET /v1/calls, DELETE, and /v1/batch; bad
        arguments and an unknown format are 400; a restarted service
        answers a recorded call from the store in the format asked."""
        with self.serving() as c:
            self.post_s1(c)
            st, m = c._request("POST", "/v1/calls?format=openai",
                               {"id": "call_s2", "type": "function",
                                "function": {"name": "delete_record", "arguments": "{\"id\":\"r\"}"}})
            self.assertEqual(json.loads(m["content"])["error"], "PermissionDenied")
            self.check_message("openai", m, "call_s2", False, json.loads(m["content"]))
            # The same calls' records, in other formats, and in toolpool's.
            st, m = c._request("GET", "/v1/calls/toolu_s1?format=openai-responses")
            self.check_message("openai-responses", m, "toolu_s1", True, {"n": 1})
            st, m = c._request("GET", "/v1/calls/toolu_s1")
            self.assertEqual((m["id"], m["job"], m["step"], m["result"]), ("toolu_s1", "sj", 1, {"n": 1}))
            # A wait=0 call's kept answer, fetched in a format.
            st, m = c._request("POST", "/v1/calls?wait=0", {"id": "own-s3", "tool": "echo", "args": {"a": 1}},
                               ok=(202,))
            serveutil.wait_for(lambda: c._request("GET", "/v1/calls/own-s3", ok=(200, 202))[0] == 200, 10,
                               "own-s3's answer")
            st, m = c._request("GET", "/v1/calls/own-s3?format=anthropic")
            self.check_message("anthropic", m, "own-s3", True, {"a": 1})
            # Bad stringified arguments: the request's fault, 400, naming the field.
            with self.assertRaises(toolpool_client.ToolpoolError) as e:
                c._request("POST", "/v1/calls?format=openai",
                           {"id": "call_s4", "type": "function", "function": {"name": "echo", "arguments": "nope"}})
            self.assertEqual((e.exception.status, e.exception.error), (400, "InvalidRequest"))
            self.assertIn("\"function.arguments\" is not valid JSON", e.exception.message)
            with self.assertRaises(toolpool_client.ToolpoolError) as e:
                c._request("POST", "/v1/calls?format=xml", {"id": "x", "tool": "echo"})
            self.assertEqual(e.exception.status, 400)
            self.assertIn("expected toolpool, openai, openai-responses or anthropic", e.exception.message)
            # DELETE answers the cancelled call in the format asked.
            c._request("POST", "/v1/calls?wait=0", {"id": "call_s5", "type": "function",
                                                    "function": {"name": "slow", "arguments": "{}"}}, ok=(202,))
            st, m = c._request("DELETE", "/v1/calls/call_s5?format=openai")
            self.assertEqual(json.loads(m["content"])["error"], "Cancelled")
            self.check_message("openai", m, "call_s5", False, json.loads(m["content"]))
            # A batch: each line's message, bad lines included.
            body = "\n".join([
                json.dumps({"type": "function_call", "call_id": "call_b1", "name": "echo", "arguments": "{\"b\":1}"}),
                json.dumps({"type": "tool_use", "id": "toolu_b2", "name": "echo", "input": {"b": 2}}),
                json.dumps({"type": "function_call", "call_id": "call_b3", "name": "echo", "arguments": "{"}),
                json.dumps({"type": "tool_use", "id": "toolu_s1", "name": "counted", "input": {}, "job": "sj",
                            "step": 1}),
            ]).encode() + b"\n"
            st, text = c._request("POST", "/v1/batch?format=openai-responses", body, raw=True)
            lines = {m["call_id"]: m for m in map(json.loads, text.splitlines())}
            self.assertEqual(set(lines), {"call_b1", "toolu_b2", "call_b3", "toolu_s1"})
            self.check_message("openai-responses", lines["call_b1"], "call_b1", True, {"b": 1})
            self.check_message("openai-responses", lines["toolu_b2"], "toolu_b2", True, {"b": 2})
            bad = json.loads(lines["call_b3"]["output"])
            self.assertEqual(bad["error"], "InvalidRequest")
            self.assertTrue(bad["message"].startswith("line 3: \"arguments\" is not valid JSON"), bad)
            self.check_message("openai-responses", lines["toolu_s1"], "toolu_s1", True, {"n": 1})
            with self.assertRaises(toolpool_client.ToolpoolError) as e:
                c._request("POST", "/v1/batch?format=mcp", body, raw=True)
            self.assertEqual(e.exception.status, 400)
        # Started again on the store: the recorded call is answered from it, in the format asked, not run.
        with self.serving() as c:
            self.post_s1(c)
            self.assertEqual(self.ran(), ["toolu_s1"])


if __name__ == "__main__":
    unittest.main()
