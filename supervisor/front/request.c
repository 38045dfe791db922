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
 * jansson's way, for a line the scanner would not take: escapes, reals, a
 * missing or mistyped field, text that is not JSON. The checks and their
 * order (id, job, step, tool, args) are run's, and so are the words.
 */
static tp_request_kind_t parse_slow(tp_request_parser_t *p, const char *text, size_t len, const char *where,
                                    unsigned flags, tp_request_t *req, tp_request_bad_t *bad)
{
    json_error_t jerr;
    char what[JSON_ERROR_TEXT_LENGTH + 160];
    p->doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
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
        p->doc = json_loadb(text, len, 0, &jerr);
    }
    if (p->doc == NULL) {
        if (strncmp(jerr.text, "too big", 7) == 0 || strncmp(jerr.text, "real number overflow", 20) == 0)
            snprintf(what, sizeof what, "a number toolpool cannot represent exactly (%s, column %d)", jerr.text,
                     jerr.column);
        else
            snprintf(what, sizeof what, "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        return bad_call(bad, where, what);
    }
    if (!json_is_object(p->doc))
        return bad_call(bad, where, "a call must be a JSON object");
    json_t *jid = json_object_get(p->doc, "id"), *jjob = json_object_get(p->doc, "job");
    json_t *jstep = json_object_get(p->doc, "step"), *jtool = json_object_get(p->doc, "tool");
    json_t *jargs = json_object_get(p->doc, "args");
    json_t *jdeadline = (flags & TP_REQUEST_DEADLINE) ? json_object_get(p->doc, "deadline") : NULL;
    const char *id = json_is_string(jid) && json_string_length(jid) > 0 ? json_string_value(jid) : NULL;
    const char *tool = json_string_value(jtool);
    const char *problem = NULL;
    uint64_t deadline = 0;
    if (id == NULL && (jid != NULL || !(flags & TP_REQUEST_ID_OPTIONAL)))
        problem = "\"id\" must be a non-empty string";
    else if (jjob && (!json_is_string(jjob) || json_string_length(jjob) == 0))
        problem = "\"job\" must be a non-empty string";
    else if (jstep && (!json_is_integer(jstep) || json_integer_value(jstep) < 0))
        problem = "\"step\" must be a non-negative integer";
    else if (tool == NULL || !*tool)
        problem = "\"tool\" must be a non-empty string";
    else if (jargs && !json_is_object(jargs))
        problem = "\"args\" must be a JSON object";
    else if (jdeadline &&
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
    /*
     * The scanner skips keys it does not know, "deadline" among them: a
     * call that may carry one, and has the word anywhere, goes jansson's
     * way (a plain key is spelt out in the text; an escaped one is not
     * plain anyway).
     */
    if ((flags & TP_REQUEST_DEADLINE) && memmem(text, len, "deadline", 8) != NULL)
        return parse_slow(p, text, len, where, flags, req, bad);
    tp_call_line_t fast;
    int plain = tp_call_line_scan(text, len, &fast, &p->strs, &p->canon);
    if (plain < 0)
        return bad_call(bad, where, "out of memory reading the call");
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
