#include "callline.h"

#include <stdlib.h>
#include <string.h>

#include "jsonscan.h"

/* ---- the line ---- */

/*
 * F_SHAPE: "type" or "function", the keys that may make a line a model's
 * call rather than toolpool's (request.c tells the shapes apart): such a
 * line is not plain.
 */
enum { F_ID = 1, F_TOOL = 2, F_JOB = 4, F_STEP = 8, F_ARGS = 16, F_SHAPE = 32, F_DEADLINE = 64, F_TRACEPARENT = 128 };

static int field_of(const unsigned char *k, size_t n)
{
    switch (n) {
    case 2:
        return memcmp(k, "id", 2) == 0 ? F_ID : 0;
    case 3:
        return memcmp(k, "job", 3) == 0 ? F_JOB : 0;
    case 4:
        return memcmp(k, "tool", 4) == 0   ? F_TOOL
               : memcmp(k, "step", 4) == 0 ? F_STEP
               : memcmp(k, "args", 4) == 0 ? F_ARGS
               : memcmp(k, "type", 4) == 0 ? F_SHAPE
                                           : 0;
    case 8:
        return memcmp(k, "function", 8) == 0 ? F_SHAPE : memcmp(k, "deadline", 8) == 0 ? F_DEADLINE : 0;
    case 11:
        return memcmp(k, "traceparent", 11) == 0 ? F_TRACEPARENT : 0;
    default:
        return 0;
    }
}

int tp_call_line_scan(const char *line, size_t len, tp_call_line_t *out, tp_buf_t *strs, tp_buf_t *canon)
{
    tp_scan_t s = {.p = (const unsigned char *)line, .end = (const unsigned char *)line + len, .sorted = true};
    tp_buf_t args = {0};
    const unsigned char *str[3] = {0}; /* id, tool, job */
    size_t str_n[3] = {0};
    int seen = 0, rc = 0;
    int64_t step = 0;

    memset(out, 0, sizeof *out);
    tp_scan_ws(&s);
    if (s.p == s.end || *s.p != '{')
        return 0;
    s.p++;
    tp_scan_ws(&s);
    if (s.p < s.end && *s.p == '}')
        return 0; /* no id: jansson's way says so */
    for (;;) {
        const unsigned char *key;
        size_t n;
        if (!tp_scan_string(&s, &key, &n))
            goto not_plain;
        int f = field_of(key, n);
        if (f == F_SHAPE || (f & seen))
            goto not_plain; /* repeated: jansson keeps the last */
        seen |= f;
        tp_scan_ws(&s);
        if (s.p == s.end || *s.p != ':')
            goto not_plain;
        s.p++;
        tp_scan_ws(&s);
        if (f == F_ID || f == F_TOOL || f == F_JOB) {
            int k = f == F_ID ? 0 : f == F_TOOL ? 1 : 2;
            if (!tp_scan_string(&s, &str[k], &str_n[k]) || str_n[k] == 0)
                goto not_plain;
        } else if (f == F_STEP) {
            if (!tp_scan_integer(&s, &step) || step < 0)
                goto not_plain;
        } else if (f == F_ARGS) {
            if (s.p == s.end || *s.p != '{')
                goto not_plain;
            s.copy = &args;
            bool ok = tp_scan_object(&s, 1);
            s.copy = NULL;
            if (!ok)
                goto not_plain;
        } else if (!tp_scan_value(&s, 0)) { /* another key's value, "deadline" and "traceparent" among them */
            goto not_plain;
        }
        int next = tp_scan_next_or_close(&s, '}');
        if (next < 0)
            goto not_plain;
        if (next > 0)
            break;
    }
    tp_scan_ws(&s);
    if (s.p != s.end || !(seen & F_ID) || !(seen & F_TOOL))
        goto not_plain;

    if (!(seen & F_ARGS) && tp_buf_append(&args, "{}", 2) < 0)
        goto nomem;
    if (tp_buf_append(&args, "", 1) < 0)
        goto nomem;
    out->args = (char *)args.data;
    out->args_len = args.len - 1;
    out->canon = out->args;
    out->canon_len = out->args_len;
    if (!s.sorted) {
        tp_buf_reset(canon);
        if (tp_scan_canon(out->args, out->args_len, canon) < 0) {
            /* a repeated key, or ENOMEM: jansson's way tells them apart */
            free(out->args);
            memset(out, 0, sizeof *out);
            return 0;
        }
        out->canon = (const char *)canon->data;
        out->canon_len = canon->len;
    }

    tp_buf_reset(strs);
    size_t at[3];
    for (int k = 0; k < 3; k++) {
        at[k] = strs->len;
        if (str[k] && (tp_buf_append(strs, str[k], str_n[k]) < 0 || tp_buf_append(strs, "", 1) < 0)) {
            free(out->args);
            memset(out, 0, sizeof *out);
            return -1;
        }
    }
    out->id = (const char *)strs->data + at[0];
    out->tool = (const char *)strs->data + at[1];
    out->job = str[2] ? (const char *)strs->data + at[2] : NULL;
    out->job_len = str_n[2];
    out->has_step = seen & F_STEP;
    out->step = (uint64_t)step;
    out->has_deadline = seen & F_DEADLINE;
    out->has_traceparent = seen & F_TRACEPARENT;
    return 1;

nomem:
    rc = -1;
not_plain:
    tp_buf_free(&args);
    return rc;
}
