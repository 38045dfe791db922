/*
 * The outcome of one attempt, filled by the adapters (outcome.h): a
 * failure with its kind and message, or a result re-written as compact
 * JSON, read from whatever text the tool answered with.
 */
#include "outcome.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "jsonscan.h"

void tp_outcome_reset(tp_outcome_t *o)
{
    o->ok = false;
    tp_buf_reset(&o->result);
    tp_buf_reset(&o->message);
    o->kind[0] = 0;
    o->retry_after_ms = -1;
    o->cost = 0;
    o->started_us = 0;
}

void tp_outcome_free(tp_outcome_t *o)
{
    tp_buf_free(&o->result);
    tp_buf_free(&o->message);
}

void tp_outcome_fail(tp_outcome_t *o, const char *kind, const char *fmt, ...)
{
    o->ok = false;
    snprintf(o->kind, sizeof o->kind, "%s", kind);
    tp_buf_reset(&o->message);
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tp_buf_puts(&o->message, line);
}

/*
 * The result is v, written compact. When it cannot be written (out of
 * memory), the attempt is a ToolError instead of an empty result.
 */
static void set_result_json(tp_outcome_t *o, const json_t *v)
{
    tp_buf_reset(&o->result);
    if (tp_json_write(&o->result, v, 0) < 0) {
        tp_outcome_fail(o, "ToolError", "cannot encode the tool's result");
        return;
    }
    o->ok = true;
}

/*
 * Whether the compact text may hold a top-level key the slow way reads
 * ("cost", or "error" when read_error): a mention anywhere says maybe.
 */
static bool may_hold_keys(const tp_buf_t *b, bool read_error)
{
    return b->len > 0 && b->data[0] == '{' &&
           (memmem(b->data, b->len, "\"cost\":", 7) != NULL ||
            (read_error && memmem(b->data, b->len, "\"error\":", 8) != NULL));
}

void tp_outcome_from_text(tp_outcome_t *o, const char *text, size_t len, bool read_error)
{
    /*
     * Plain JSON, as most results are, is checked and passed through in
     * one pass without a tree: the same bytes as the jansson way below
     * would write (tests/outcome_test and the outcome fuzz target hold the
     * two to that), at a fraction of its cost for a large result.
     */
    tp_buf_reset(&o->result);
    int plain = tp_json_compact_plain(text, len, &o->result);
    if (plain > 0 && !may_hold_keys(&o->result, read_error)) {
        o->ok = true;
        return;
    }
    tp_buf_reset(&o->result);
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (v == NULL) {
        while (len > 0 && text[len - 1] && strchr(" \t\r\n", text[len - 1]) != NULL)
            len--;
        json_t *s = json_stringn_nocheck(text, len);
        set_result_json(o, s);
        json_decref(s);
        return;
    }
    if (json_is_object(v)) {
        json_t *cost = json_object_get(v, "cost");
        if (json_is_number(cost))
            o->cost = json_number_value(cost);
        json_t *err = read_error ? json_object_get(v, "error") : NULL;
        if (json_is_string(err)) {
            const char *msg = json_string_value(json_object_get(v, "message"));
            tp_outcome_fail(o, json_string_value(err), "%s", msg ? msg : "");
            json_t *ra = json_object_get(v, "retry_after_ms");
            double ms = json_is_number(ra) ? json_number_value(ra) : -1;
            if (ms >= 0 && ms <= TP_RETRY_AFTER_MAX_MS)
                o->retry_after_ms = (int64_t)ms;
            else if (ms > TP_RETRY_AFTER_MAX_MS && isfinite(ms))
                o->retry_after_ms = (int64_t)TP_RETRY_AFTER_MAX_MS; /* past any ceiling: the call ends at once */
            else if (ra != NULL && !json_is_null(ra))
                tp_buf_puts(&o->message, " (its retry_after_ms is not a wait in milliseconds: ignored)");
            json_decref(v);
            return;
        }
    }
    set_result_json(o, v);
    json_decref(v);
}
