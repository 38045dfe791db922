#!/usr/bin/env python3
"""The MCP server behind tests/conformance/tools.json: over stdio
(newline-delimited JSON-RPC 2.0, Python 3, standard library only), the
tools the MCP conformance suite's server scenarios call, each answering
what its scenario checks (@modelcontextprotocol/conformance 0.1.16,
src/scenarios/server/*.ts). toolpool serve's /mcp passes their results on
unchanged, so the suite checks toolpool's side of each: its handshake, its
tools/list, its event streams, the notifications it relays.

  test_simple_text             one text block
  test_image_content           a 1x1 red PNG
  test_audio_content           a short silent WAV, audio/wav
  test_embedded_resource       a text resource, text/plain
  test_multiple_content_types  text, image and resource blocks
  test_tool_with_logging       three notifications/message (info), 50 ms
                               apart, then its answer
  test_error_handling          isError true with a text block
  test_tool_with_progress      notifications/progress 0, 50 and 100 of 100
                               under the call's _meta.progressToken, 50 ms
                               apart, then its answer
  test_sampling                sends the client sampling/createMessage with
  test_elicitation             its prompt, elicitation/create (the three
  test_elicitation_sep1034_defaults  elicitation ones with the schema their
  test_elicitation_sep1330_enums     scenario checks), and answers with the
                               client's response (toolpool's client answers
                               such requests -32601: an isError result
                               naming that error)
  json_schema_2020_12_tool     lists a JSON Schema 2020-12 inputSchema;
                               called, echoes its arguments

and those of the 2026-07-28 requirement set (0.2.0-alpha.12):

  greet                        "Hello, {name}!"; never a task
  slow_compute                 sleeps `seconds` (a cancellation of its
                               request ends it unanswered), then says so
  failing_job                  isError after about a second; only a task
  protocol_error_job           a JSON-RPC error (-32603)
  test_logging_tool            one notifications/message, then its answer
  echo_region                  echoes `region`, a parameter the client
                               mirrors into an Mcp-Param-Region header

One call at a time: a tool that asks the client waits for its response,
answering ping meanwhile. Other methods: -32601.
"""
import base64
import json
import os
import struct
import sys
import time
import zlib

RO = {"readOnlyHint": True}
NONE = {"type": "object", "properties": {}}


def png_1x1_red():
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    idat = zlib.compress(b"\x00\xff\x00\x00")            # filter 0, one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def wav_silence(samples=800, rate=8000):
    data = b"\x80" * samples  # 8-bit mono PCM, silence
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt +
            b"data" + struct.pack("<I", len(data)) + data)


PNG = base64.b64encode(png_1x1_red()).decode()
WAV = base64.b64encode(wav_silence()).decode()

SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

ELICIT_SCHEMAS = {
    "test_elicitation": {
        "type": "object",
        "properties": {"username": {"type": "string", "description": "User's response"},
                       "email": {"type": "string", "description": "User's email address"}},
        "required": ["username", "email"]},
    "test_elicitation_sep1034_defaults": {
        "type": "object",
        "properties": {"name": {"type": "string", "default": "John Doe"},
                       "age": {"type": "integer", "default": 30},
                       "score": {"type": "number", "default": 95.5},
                       "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                       "verified": {"type": "boolean", "default": True}}},
    "test_elicitation_sep1330_enums": {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [{"const": "value1", "title": "First Option"},
                                                         {"const": "value2", "title": "Second Option"},
                                                         {"const": "value3", "title": "Third Option"}]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                                  {"const": "value2", "title": "Second Choice"},
                                                                  {"const": "value3", "title": "Third Choice"}]}}}},
}


def tool(name, description, schema=NONE):
    return {"name": name, "description": description, "inputSchema": schema, "annotations": RO}


TOOLS = [
    tool("test_simple_text", "Returns simple text."),
    tool("test_image_content", "Returns a 1x1 red PNG."),
    tool("test_audio_content", "Returns a short WAV."),
    tool("test_embedded_resource", "Returns an embedded text resource."),
    tool("test_multiple_content_types", "Returns text, an image and a resource."),
    tool("test_tool_with_logging", "Logs three messages while it runs."),
    tool("test_error_handling", "Always fails (isError)."),
    tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100."),
    tool("test_sampling", "Asks the client for an LLM sampling.",
         {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
    tool("test_elicitation", "Asks the client for user input.",
         {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
    tool("test_elicitation_sep1034_defaults", "Asks the client for input with default values."),
    tool("test_elicitation_sep1330_enums", "Asks the client for input with enum schemas."),
    tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12),
    tool("greet", "Greets by name.", {"type": "object", "properties": {"name": {"type": "string"}}}),
    tool("slow_compute", "Sleeps, then answers.",
         {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}),
    tool("failing_job", "Fails after about a second."),
    tool("protocol_error_job", "Answers a JSON-RPC error."),
    tool("test_logging_tool", "Logs a message while it runs."),
    tool("echo_region", "Echoes its region.",
         {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
          "required": ["region"]}),
]

CANCELLED = object()  # a call whose request was cancelled: no answer


def sleep_or_cancel(seconds, mid):
    """Waits seconds, answering ping meanwhile; CANCELLED when the request is cancelled first."""
    import select
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0 and b"\n" not in buf:
            return None
        if b"\n" not in buf and not select.select([0], [], [], max(left, 0))[0]:
            continue
        m = read_message()
        if m is None:
            sys.exit(0)
        if not isinstance(m, dict):
            continue
        if m.get("method") == "notifications/cancelled" and (m.get("params") or {}).get("requestId") == mid:
            return CANCELLED
        if m.get("method") == "ping" and m.get("id") is not None:
            send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
        elif m.get("method") is not None and m.get("id") is not None:
            send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32603, "message": "busy with a call"}})

buf = b""
next_id = 0


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def text(t, **extra):
    r = {"content": [{"type": "text", "text": t}]}
    r.update(extra)
    return r


def read_message():
    """The next message on stdin (None at its end); lines that are not JSON are skipped."""
    global buf
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                try:
                    return json.loads(line)
                except ValueError:
                    send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        buf += chunk


def ask(method, params):
    """Sends the client a request and waits for its response (ping is answered meanwhile)."""
    global next_id
    next_id += 1
    mine = "fixture-%d" % next_id
    send({"jsonrpc": "2.0", "id": mine, "method": method, "params": params})
    while True:
        m = read_message()
        if m is None:
            sys.exit(0)
        if not isinstance(m, dict):
            continue
        if m.get("method") is None and m.get("id") == mine:
            return m
        if m.get("method") == "ping" and m.get("id") is not None:
            send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
        elif m.get("method") is not None and m.get("id") is not None:
            send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32603, "message": "busy with a call"}})


def asked(method, what, resp):
    """A tool's answer from the client's response to its request: an error is the tool's failure."""
    if "error" in resp:
        return text("%s: the client answered %s" % (method, json.dumps(resp["error"])), isError=True)
    return text("%s: %s" % (what, json.dumps(resp.get("result"))))


def call(p, mid=None):
    name, args = p.get("name"), p.get("arguments") or {}
    token = (p.get("_meta") or {}).get("progressToken")
    if name == "test_simple_text":
        return text("This is a simple text response for testing.")
    if name == "test_image_content":
        return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}
    if name == "test_audio_content":
        return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}
    if name == "test_embedded_resource":
        return {"content": [{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}}]}
    if name == "test_multiple_content_types":
        return {"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                                              "text": json.dumps({"test": "data", "value": 123})}}]}
    if name == "test_tool_with_logging":
        for i, msg in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
            if i:
                time.sleep(0.05)
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "logger": "fixture", "data": msg}})
        return text("Tool with logging executed successfully")
    if name == "test_error_handling":
        return text("This tool intentionally returns an error for testing", isError=True)
    if name == "test_tool_with_progress":
        for i, v in enumerate([0, 50, 100]):
            if i:
                time.sleep(0.05)
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": v, "total": 100}})
        return text("Tool with progress executed successfully")
    if name == "test_sampling":
        resp = ask("sampling/createMessage", {
            "messages": [{"role": "user", "content": {"type": "text", "text": str(args.get("prompt", ""))}}],
            "maxTokens": 100})
        return asked("sampling/createMessage", "LLM response", resp)
    if name in ELICIT_SCHEMAS:
        message = args.get("message") or "Please provide your information"
        resp = ask("elicitation/create", {"message": message, "requestedSchema": ELICIT_SCHEMAS[name]})
        return asked("elicitation/create", "Elicitation completed", resp)
    if name == "json_schema_2020_12_tool":
        return text(json.dumps(args), structuredContent=args)
    if name == "greet":
        return text("Hello, %s!" % args.get("name", "world"))
    if name == "slow_compute":
        seconds = args.get("seconds", 1)
        seconds = min(float(seconds), 120.0) if isinstance(seconds, (int, float)) else 1.0
        if sleep_or_cancel(seconds, mid) is CANCELLED:
            return CANCELLED
        return text("slow_compute %s: done after %g s" % (args.get("label", ""), seconds))
    if name == "failing_job":
        if sleep_or_cancel(1.0, mid) is CANCELLED:
            return CANCELLED
        return text("failing_job failed, as it always does", isError=True)
    if name == "protocol_error_job":
        return {"__error__": {"code": -32603, "message": "protocol_error_job: an internal error, on purpose"}}
    if name == "test_logging_tool":
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "logger": "fixture", "data": "test_logging_tool ran"}})
        return text("test_logging_tool: logged one message")
    if name == "echo_region":
        return text("region: %s" % args.get("region"))
    return None


def main():
    while True:
        m = read_message()
        if m is None:
            return
        if not isinstance(m, dict):
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "not a request"}})
            continue
        method, mid = m.get("method"), m.get("id")
        if method is None or mid is None:
            continue  # notifications, and responses nothing waits for
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": m.get("params", {}).get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "conformance-fixture", "version": "1"}}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            r = call(m.get("params") or {}, mid)
            if r is CANCELLED:
                continue
            if isinstance(r, dict) and "__error__" in r:
                send({"jsonrpc": "2.0", "id": mid, "error": r["__error__"]})
            elif r is None:
                send({"jsonrpc": "2.0", "id": mid,
                      "error": {"code": -32602, "message": "unknown tool %s" % m.get("params", {}).get("name")}})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": r})
        elif method == "logging/setLevel":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + method}})


if __name__ == "__main__":
    main()
