#include "request.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callline.h"
#include "clock.h"
#include "json.h"
#include "registry.h"

/* Drops what the last parse left in the scratch. */
static void parser_reset(tp_request_parser_t *p)
{
    json_decref(p->doc);
    json_decref(p->owned_args);
    free(p->args);
    p->doc = NULL;
    p->owned_args = NULL;
    p->args = NULL;
}

void tp_request_parser_free(tp_request_parser_t *p)
{
    parser_reset(p);
    tp_buf_free(&p->strs);
    tp_buf_free(&p->canon);
}

static void say(char *msg, size_t cap, const char *where, const char *what)
{
    if (where)
        snprintf(msg, cap, "%s: %s", where, what);
    else
        snprintf(msg, cap, "%s", what);
}

void tp_request_give_args(tp_request_parser_t *p, tp_request_t *req)
{
    if (req->args != NULL && req->args == p->args) {
        req->give_args = true;
        p->args = NULL;
    }
}

void tp_request_too_long(char *msg, size_t cap, const char *where, uint64_t limit)
{
    char what[96];
    snprintf(what, sizeof what, "longer than the %llu-byte limit", (unsigned long long)limit);
    say(msg, cap, where, what);
}

static tp_request_kind_t bad_call(tp_request_bad_t *bad, const char *where, const char *what)
{
    bad->id = bad->job = bad->tool = NULL;
    bad->step = 0;
    say(bad->message, sizeof bad->message, where, what);
    return TP_REQUEST_BAD;
}

/*
 * Whether byte offset at of a JSON text lies directly in its outermost
 * object (depth 1), not in a value nested in it: brackets are counted
 * outside strings.
 */
static bool top_level_at(const char *text, size_t at)
{
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < at && text[i]; i++) {
        char ch = text[i];
        if (in_string) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    return depth == 1;
}

/*
 * The shapes a call comes in, told apart by their keys (docs/guide.md,
 * "Agents' formats"): "type" "tool_use" is an Anthropic tool_use block,
 * "type" "function_call" an OpenAI Responses function_call item, a
 * "function" key (or "type" "function") an OpenAI Chat Completions
 * tool_calls item; anything else toolpool's own line. Each names its
 * fields its own way; job, step and deadline are toolpool's keys in all.
 */
typedef struct {
    const char *what;                         /* in messages: "an Anthropic tool_use block" */
    const char *id_key, *name_key, *args_key; /* as messages name them: "call_id", "function.name" */
    bool args_text;                           /* args come as a string of JSON (an object is taken too) */
} shape_t;

static const shape_t shape_toolpool = {"a toolpool call", "id", "tool", "args", false};
static const shape_t shape_chat = {"an OpenAI tool_calls item", "id", "function.name", "function.arguments", true};
static const shape_t shape_responses = {"an OpenAI function_call item", "call_id", "name", "arguments", true};
static const shape_t shape_anthropic = {"an Anthropic tool_use block", "id", "name", "input", false};

/* Whether doc's "type" is the string want. */
static bool type_is(const json_t *doc, const char *want)
{
    const char *type = json_string_value(json_object_get(doc, "type"));
    return type && strcmp(type, want) == 0;
}

/*
 * Which shape doc is, and its id, name and args members (NULL when
 * absent; a Chat item whose "function" is not an object has neither name
 * nor args). NULL and the reason in why for a call in two shapes at once.
 */
static const shape_t *shape_of(json_t *doc, json_t **jid, json_t **jname, json_t **jargs, char *why, size_t cap)
{
    const char *type = json_string_value(json_object_get(doc, "type"));
    json_t *fn = json_object_get(doc, "function");
    const char *tool_key = json_object_get(doc, "tool") ? "tool" : json_object_get(doc, "args") ? "args" : NULL;
    const shape_t *sh = &shape_toolpool;
    if (type_is(doc, "tool_use"))
        sh = &shape_anthropic;
    else if (type_is(doc, "function_call"))
        sh = &shape_responses;
    else if (fn || type_is(doc, "function"))
        sh = &shape_chat;
    if (sh != &shape_toolpool && (tool_key || (sh != &shape_chat && fn))) {
        const char *by = sh == &shape_chat && !type ? "\"function\"" : NULL;
        char made[64];
        if (by == NULL) {
            snprintf(made, sizeof made, "\"type\" \"%s\"", type);
            by = made;
        }
        snprintf(why, cap, "a call in two shapes: %s makes it %s, but \"%s\" is %s's key (give each call in one shape)",
                 by, sh->what, tool_key ? tool_key : "function", tool_key ? shape_toolpool.what : shape_chat.what);
        return NULL;
    }
    *jid = json_object_get(doc, sh->id_key);
    if (sh == &shape_chat) {
        *jname = json_object_get(fn, "name");
        *jargs = json_object_get(fn, "arguments");
    } else {
        *jname = json_object_get(doc, sh->name_key);
        *jargs = json_object_get(doc, sh->args_key);
    }
    return sh;
}

/* What is wrong with a value that should have been a JSON object: "an array", "a string", ... */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    default:
        return "an object";
    }
}

/* jansson's words for text it could not read, as run gives them. */
static void say_unreadable(char *what, size_t cap, const char *prefix, const json_error_t *jerr)
{
    if (strncmp(jerr->text, "too big", 7) == 0 || strncmp(jerr->text, "real number overflow", 20) == 0)
        snprintf(what, cap, "%sa number toolpool cannot represent exactly (%s, column %d)", prefix, jerr->text,
                 jerr->column);
    else
        snprintf(what, cap, "%snot valid JSON: %s (column %d)", prefix, jerr->text, jerr->column);
}

/*
 * jansson's way, for a line the scanner would not take: escapes, reals, a
 * missing or mistyped field, text that is not JSON, a model's call. The
 * checks and their order (id, job, step, tool, args) are run's, and so are
 * the words; a model's call names its own fields.
 */
static tp_request_kind_t parse_slow(tp_request_parser_t *p, const char *text, size_t len, const char *where,
                                    unsigned flags, tp_request_t *req, tp_request_bad_t *bad)
{
    json_error_t jerr;
    char what[JSON_ERROR_TEXT_LENGTH + 240];
    p->doc = tp_json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (p->doc == NULL && strncmp(jerr.text, "duplicate object key", 20) == 0) {
        /*
         * A key given twice at the top level makes the call ambiguous (which
         * "tool" runs?): refused. Inside the args, the last one counts, as
         * JSON parsers commonly have it.
         */
        if (top_level_at(text, (size_t)jerr.position)) {
            snprintf(what, sizeof what, "a key is given twice (%s): each of a call's keys may be given once",
                     jerr.text);
            return bad_call(bad, where, what);
        }
        p->doc = tp_json_loadb(text, len, 0, &jerr);
    }
    if (p->doc == NULL) {
        say_unreadable(what, sizeof what, "", &jerr);
        return bad_call(bad, where, what);
    }
    if (!json_is_object(p->doc))
        return bad_call(bad, where, "a call must be a JSON object");
    json_t *jid = NULL, *jtool = NULL, *jargs = NULL;
    const shape_t *sh = shape_of(p->doc, &jid, &jtool, &jargs, what, sizeof what);
    if (sh == NULL)
        return bad_call(bad, where, what);
    json_t *jjob = json_object_get(p->doc, "job"), *jstep = json_object_get(p->doc, "step");
    json_t *jdeadline = (flags & TP_REQUEST_DEADLINE) ? json_object_get(p->doc, "deadline") : NULL;
    const char *id = json_is_string(jid) && json_string_length(jid) > 0 ? json_string_value(jid) : NULL;
    const char *tool = json_string_value(jtool);
    const char *problem = NULL;
    uint64_t deadline = 0;
    if (id == NULL && (jid != NULL || !(flags & TP_REQUEST_ID_OPTIONAL))) {
        snprintf(what, sizeof what, "\"%s\" must be a non-empty string", sh->id_key);
        problem = what;
    } else if (jjob && (!json_is_string(jjob) || json_string_length(jjob) == 0)) {
        problem = "\"job\" must be a non-empty string";
    } else if (jstep && (!json_is_integer(jstep) || json_integer_value(jstep) < 0)) {
        problem = "\"step\" must be a non-negative integer";
    } else if (sh == &shape_chat && !json_is_object(json_object_get(p->doc, "function"))) {
        problem = "\"function\" must be a JSON object (with \"name\" and \"arguments\")";
    } else if (sh == &shape_chat && json_object_get(p->doc, "type") && !type_is(p->doc, "function")) {
        problem = "\"type\" must be \"function\" in an OpenAI tool_calls item";
    } else if (tool == NULL || !*tool) {
        snprintf(what, sizeof what, "\"%s\" must be a non-empty string", sh->name_key);
        problem = what;
    } else if (sh->args_text && json_is_string(jargs)) {
        /* A model writes its arguments as a string of JSON: read here, the line's own error if they are not JSON. */
        json_error_t aerr;
        json_t *parsed = tp_json_loadb(json_string_value(jargs), json_string_length(jargs), JSON_DECODE_ANY, &aerr);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "\"%s\" is ", sh->args_key);
        if (parsed == NULL) {
            say_unreadable(what, sizeof what, prefix, &aerr);
            problem = what;
        } else if (!json_is_object(parsed)) {
            snprintf(what, sizeof what, "\"%s\" must hold a JSON object, not %s", sh->args_key, json_kind(parsed));
            problem = what;
            json_decref(parsed);
        } else {
            jargs = p->owned_args = parsed;
        }
    } else if (jargs && !json_is_object(jargs)) {
        snprintf(what, sizeof what,
                 sh->args_text ? "\"%s\" must be a string holding a JSON object" : "\"%s\" must be a JSON object",
                 sh->args_key);
        problem = what;
    }
    if (problem == NULL && jdeadline &&
        (!json_is_string(jdeadline) || tp_duration_parse(json_string_value(jdeadline), &deadline) < 0))
        problem = "\"deadline\" must be a duration string like \"30s\"";
    /* A step that is not a non-negative integer is reported as 0, never as its bits. */
    uint64_t step = json_is_integer(jstep) && json_integer_value(jstep) >= 0 ? (uint64_t)json_integer_value(jstep) : 0;
    if (problem) {
        say(bad->message, sizeof bad->message, where, problem);
        bad->id = id;
        bad->job = id ? (jjob ? json_string_value(jjob) : id) : NULL;
        bad->step = step;
        bad->tool = tool;
        return TP_REQUEST_BAD;
    }
    tp_buf_t ab = {0};
    if (jargs == NULL) {
        p->args = strdup("{}");
    } else if (tp_json_write(&ab, jargs, 0) == 0 && tp_buf_append(&ab, "", 1) == 0) {
        p->args = (char *)ab.data;
    } else {
        tp_buf_free(&ab);
    }
    if (jargs == NULL)
        jargs = p->owned_args = json_object();
    if (p->args == NULL || jargs == NULL)
        return bad_call(bad, where, "out of memory reading the call");
    *req = (tp_request_t){
        .id = id,
        .job = jjob ? json_string_value(jjob) : NULL,
        .step = step,
        .tool = tool,
        .args = p->args,
        .args_len = strlen(p->args),
        .jargs = jargs,
        .where = where,
        .deadline_us = jdeadline ? tp_now_us() + deadline : 0,
    };
    /* A traceparent that is not a string is no error: the call's span starts a trace of its own, as W3C has it. */
    const char *tparent = (flags & TP_REQUEST_TRACE) ? json_string_value(json_object_get(p->doc, "traceparent")) : NULL;
    if (tparent) {
        p->trace = (tp_trace_ctx_t){.traceparent = tparent,
                                    .tracestate = json_string_value(json_object_get(p->doc, "tracestate"))};
        req->trace = &p->trace;
    }
    return TP_REQUEST_CALL;
}

tp_request_kind_t tp_request_parse_line(tp_request_parser_t *p, const char *text, size_t len, const char *where,
                                        unsigned flags, tp_request_t *req, tp_request_bad_t *bad)
{
    parser_reset(p);
    size_t i = 0;
    while (i < len && text[i] && strchr(" \t\r\n", text[i]))
        i++;
    if (i == len)
        return TP_REQUEST_BLANK;
    tp_call_line_t fast;
    int plain = tp_call_line_scan(text, len, &fast, &p->strs, &p->canon);
    if (plain < 0)
        return bad_call(bad, where, "out of memory reading the call");
    /* The scanner skips "deadline" and "traceparent": a call that may carry one, and does, goes jansson's way. */
    if (plain > 0 && (((flags & TP_REQUEST_DEADLINE) && fast.has_deadline) ||
                      ((flags & TP_REQUEST_TRACE) && fast.has_traceparent))) {
        free(fast.args);
        plain = 0;
    }
    if (plain == 0)
        return parse_slow(p, text, len, where, flags, req, bad);
    p->args = fast.args;
    *req = (tp_request_t){
        .id = fast.id,
        .job = fast.job,
        .step = fast.step,
        .tool = fast.tool,
        .args = fast.args,
        .args_len = fast.args_len,
        .canon = fast.canon,
        .canon_len = fast.canon_len,
        .where = where,
    };
    return TP_REQUEST_CALL;
}
