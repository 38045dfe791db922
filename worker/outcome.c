/*
 * The outcome of one attempt, filled by the adapters (outcome.h): a
 * failure with its kind and message, or a result re-written as compact
 * JSON, read from whatever text the tool answered with.
 */
#include "outcome.h"

#include <float.h>
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

/* The top-level keys of an object answer that the outcome reads. */
static const char *const answer_keys[] = {"error", "message", "retry_after_ms", "cost"};

/* Which of answer_keys the key written k (n bytes between its quotes) is, as jansson reads it; -1 for none. */
static int answer_key(const char *k, size_t n)
{
    json_t *dec = NULL;
    if (memchr(k, '\\', n) != NULL) {
        dec = tp_json_loadb(k - 1, n + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!json_is_string(dec)) {
            json_decref(dec);
            return -1;
        }
        k = json_string_value(dec);
        n = json_string_length(dec);
    }
    int which = -1;
    for (int i = 0; i < (int)(sizeof answer_keys / sizeof answer_keys[0]); i++)
        if (strlen(answer_keys[i]) == n && memcmp(answer_keys[i], k, n) == 0)
            which = i;
    json_decref(dec);
    return which;
}

/*
 * A member's value (n bytes of checked JSON) as jansson reads it alone,
 * an integer of any size as a real; where it still refuses, what the
 * keys' reading needs of it: a string with an escape it refuses (a lone
 * surrogate) is its text as written, a number past a double's range the
 * largest double of its sign (a retry_after_ms of 1e400 is past any
 * ceiling), an array or object nested past its limit an empty one.
 */
static json_t *member_value(const char *v, size_t n)
{
    json_t *j = tp_json_loadb(v, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
    if (j != NULL)
        return j;
    switch (v[0]) {
    case '"':
        return json_stringn(v + 1, n - 2);
    case '[':
        return json_array();
    case '{':
        return json_object();
    default:
        return json_real(v[0] == '-' ? -DBL_MAX : DBL_MAX);
    }
}

/*
 * The answer text as a value to read it by: 1 with *v set, 0 when it is
 * not JSON, TP_ENOMEM. Mostly jansson's tree of the text (kept is left
 * empty then). Valid JSON that jansson refuses (an integer past int64, a number past a
 * double's range, an escaped lone surrogate, \u0000 in a key, nesting past
 * 2048 levels) is the tool's JSON all the same, and must neither become a
 * string nor lose its error: kept then holds it compact, every token as
 * written, and *v is an object of only the top-level members of
 * answer_keys, as jansson would read them (the last of a repeated key).
 */
static int load_answer(const char *text, size_t len, tp_buf_t *kept, json_t **v)
{
    *v = tp_json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (*v != NULL)
        return 1;
    if (tp_json_check(text, len, NULL) < 0)
        return 0;
    if (tp_json_compact(text, len, kept) < 0 || (*v = json_object()) == NULL)
        return TP_ENOMEM;
    size_t at = 0, kn, vn;
    const char *k, *val;
    while (tp_json_next_member(kept->data, kept->len, &at, &k, &kn, &val, &vn) == 0) {
        int i = answer_key(k, kn);
        if (i >= 0 && json_object_set_new(*v, answer_keys[i], member_value(val, vn)) < 0) {
            json_decref(*v);
            *v = NULL;
            return TP_ENOMEM;
        }
    }
    return 1;
}

/*
 * Reads an object answer's keys into o: its numeric "cost", and with
 * read_error, a string "error" as the failure it names. Whether it did.
 */
static bool read_keys(tp_outcome_t *o, const json_t *v, bool read_error)
{
    json_t *cost = json_object_get(v, "cost");
    if (json_is_number(cost))
        o->cost = json_number_value(cost);
    json_t *err = read_error ? json_object_get(v, "error") : NULL;
    if (!json_is_string(err))
        return false;
    const char *msg = json_string_value(json_object_get(v, "message"));
    tp_outcome_fail(o, json_string_value(err), "%s", msg ? msg : "");
    tp_buf_reset(&o->result);
    json_t *ra = json_object_get(v, "retry_after_ms");
    double ms = json_is_number(ra) ? json_number_value(ra) : -1;
    if (ms >= 0 && ms <= TP_RETRY_AFTER_MAX_MS)
        o->retry_after_ms = (int64_t)ms;
    else if (ms > TP_RETRY_AFTER_MAX_MS && isfinite(ms))
        o->retry_after_ms = (int64_t)TP_RETRY_AFTER_MAX_MS; /* past any ceiling: the call ends at once */
    else if (ra != NULL && !json_is_null(ra))
        tp_buf_puts(&o->message, " (its retry_after_ms is not a wait in milliseconds: ignored)");
    return true;
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
    json_t *v;
    int rc = load_answer(text, len, &o->result, &v);
    if (rc < 0) {
        tp_outcome_fail(o, "ToolError", "out of memory reading the tool's answer");
        tp_buf_reset(&o->result);
        return;
    }
    if (rc == 0) {
        while (len > 0 && text[len - 1] && strchr(" \t\r\n", text[len - 1]) != NULL)
            len--;
        json_t *s = json_stringn_nocheck(text, len);
        set_result_json(o, s);
        json_decref(s);
        return;
    }
    if (json_is_object(v) && read_keys(o, v, read_error)) {
        json_decref(v);
        return;
    }
    if (o->result.len > 0)
        o->ok = true; /* kept as the tool wrote it */
    else
        set_result_json(o, v);
    json_decref(v);
}

bool tp_outcome_error_from_text(tp_outcome_t *o, const char *text, size_t len)
{
    size_t i = 0;
    while (i < len && memchr(" \t\r\n", text[i], 5) != NULL) /* and NUL, which jansson skips */
        i++;
    if (i == len || text[i] != '{')
        return false; /* not an object: no tree made of a long text */
    tp_buf_t kept = {0};
    json_t *v;
    bool is = load_answer(text, len, &kept, &v) > 0 && json_is_string(json_object_get(v, "error"));
    if (is)
        read_keys(o, v, true);
    if (v != NULL)
        json_decref(v);
    tp_buf_free(&kept);
    return is;
}
