/*
 * What an MCP server's answer to tools/call means for the call
 * (mcp_result.h): a JSON-RPC error, a CallToolResult that is the tool's
 * failure, one that is not a CallToolResult at all, or the result.
 */
#include "mcp_result.h"

#include <stdio.h>
#include <string.h>

#include "json.h"
#include "mcpstdio.h"

/* The kind a JSON-RPC error code means for the call. */
static const char *kind_of_code(json_int_t code)
{
    if (code == -32602)
        return "BadArguments";
    if (code == -32601)
        return "UnknownTool";
    if (code == -32021)
        return "ToolError"; /* 2026-07-28's MissingRequiredClientCapability: toolpool declares none, a retry meets it */
    return "ServerError";
}

/*
 * The text blocks of a result's content, joined by newlines, into b (NUL
 * ended).
 */
static void content_text(json_t *content, tp_buf_t *b)
{
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        json_t *text = json_object_get(block, "text");
        if (type == NULL || strcmp(type, "text") != 0 || !json_is_string(text))
            continue;
        if (b->len)
            tp_buf_append(b, "\n", 1);
        tp_buf_append(b, json_string_value(text), json_string_length(text));
    }
    tp_buf_append(b, "", 1);
}

/*
 * A result with isError: the tool failed. A JSON error object in its text
 * names the failure as an exec tool's stdout would; "MCP error CODE: ..."
 * (how the MCP SDKs report a tool's own protocol errors, arguments that
 * fail the server's schema and unknown tools among them) is read as that
 * JSON-RPC error; anything else is ToolError, the text its message.
 */
static void tool_failed(const char *tool, json_t *result, tp_outcome_t *o)
{
    tp_buf_t text = {0};
    content_text(json_object_get(result, "content"), &text);
    const char *t = (const char *)text.data;
    size_t len = text.len - 1;
    long code;
    int at = 0;
    if (tp_outcome_error_from_text(o, t, len)) {
        /* the error object names the failure */
    } else if (sscanf(t, "MCP error %ld:%n", &code, &at) == 1 && at > 0) {
        tp_outcome_fail(o, kind_of_code(code), "%s: %s", tool, t);
    } else {
        tp_outcome_fail(o, "ToolError", "%s: %s", tool, len ? t : "the tool reported an error, with no text");
    }
    tp_buf_free(&text);
}

/*
 * What is wrong with result as MCP's CallToolResult, or NULL: content an
 * array of content blocks (objects with a string "type"), isError a
 * boolean when present, structuredContent an object when present. A
 * result that is not one is the server's fault, never a success.
 */
static const char *result_problem(json_t *result, char *buf, size_t cap)
{
    json_t *is_error = json_object_get(result, "isError");
    if (is_error != NULL && !json_is_boolean(is_error))
        return "its isError is not a boolean";
    json_t *content = json_object_get(result, "content");
    if (content == NULL)
        return "it has no content";
    if (!json_is_array(content))
        return "its content is not an array";
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block) {
        if (!json_is_object(block) || !json_is_string(json_object_get(block, "type"))) {
            snprintf(buf, cap, "its content[%zu] is not a content block (an object with a string \"type\")", i);
            return buf;
        }
    }
    json_t *sc = json_object_get(result, "structuredContent");
    if (sc != NULL && !json_is_null(sc) && !json_is_object(sc))
        return "its structuredContent is not an object";
    return NULL;
}

/*
 * A result of another resultType than "complete": input_required (a multi
 * round-trip request: the server wants its inputRequests answered, or its
 * requestState sent back, in a second tools/call), or one unknown. Either
 * is the server's answer to this request, so ToolError, permanent.
 */
static void not_complete(const char *tool, const char *type, json_t *result, tp_outcome_t *o)
{
    char asks[200] = "";
    size_t n = 0;
    const char *k;
    json_t *req;
    json_object_foreach(json_object_get(result, "inputRequests"), k, req) {
        const char *m = json_string_value(json_object_get(req, "method"));
        int w = snprintf(asks + n, sizeof asks - n, "%s%s", n ? ", " : ": it asks for ", m ? m : "(no method)");
        if (w < 0 || (size_t)w >= sizeof asks - n)
            break;
        n += (size_t)w;
    }
    if (strcmp(type, "input_required") == 0)
        tp_outcome_fail(
            o, "ToolError",
            "%s: the MCP server answered tools/call with resultType \"input_required\", not \"complete\"%s; "
            "toolpool does not take part in multi round-trip requests (it answers no input requests and "
            "sends no request state back)",
            tool, asks);
    else
        tp_outcome_fail(o, "ToolError",
                        "%s: the MCP server answered tools/call with resultType \"%.60s\", not \"complete\", the only "
                        "one toolpool takes",
                        tool, type);
}

void tp_mcp_result(const char *tool, uint64_t max_output, const json_t *answer, tp_outcome_t *o)
{
    json_t *err = json_object_get(answer, "error");
    if (err != NULL) {
        json_int_t code = json_integer_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        tp_outcome_fail(o, kind_of_code(code), "%s: MCP error %lld: %s", tool, (long long)code,
                        msg ? msg : "(no message)");
        return;
    }
    json_t *result = json_object_get(answer, "result");
    if (!json_is_object(result)) {
        tp_outcome_fail(o, "ServerError", "%s: the MCP server's answer to tools/call has no result object", tool);
        return;
    }
    const char *type = tp_mcpio_result_type(result);
    if (type != NULL) {
        not_complete(tool, type, result, o);
        return;
    }
    char why[160];
    const char *problem = result_problem(result, why, sizeof why);
    if (problem != NULL) {
        tp_outcome_fail(o, "ToolError", "%s: the MCP server's answer to tools/call is not a CallToolResult: %s", tool,
                        problem);
        return;
    }
    if (json_is_true(json_object_get(result, "isError"))) {
        tool_failed(tool, result, o);
        return;
    }
    json_t *content = json_object_get(result, "content");
    json_t *out = json_pack("{s:O}", "content", content);
    json_t *sc = json_object_get(result, "structuredContent");
    if (out != NULL && sc != NULL && !json_is_null(sc))
        json_object_set(out, "structuredContent", sc);
    tp_buf_reset(&o->result);
    if (out == NULL || tp_json_write(&o->result, out, 0) < 0) {
        tp_outcome_fail(o, "ToolError", "cannot encode the tool's result");
    } else if (o->result.len > max_output) {
        tp_outcome_fail(o, "OutputTooLarge", "%s returned %zu bytes, more than max_output (%llu bytes)", tool,
                        o->result.len, (unsigned long long)max_output);
    } else {
        o->ok = true;
    }
    json_decref(out);
}
