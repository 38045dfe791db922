#include "callline.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"

/* Deeper args than this go the jansson way (which allows 2048 levels). */
#define TP_SCAN_DEPTH 64

typedef struct {
    const unsigned char *p, *end;
    tp_buf_t *copy; /* the args compact, while inside them */
    bool sorted;    /* every object so far had its keys in byte order */
} scan_t;

static void skip_ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool emit(scan_t *s, const unsigned char *from, size_t n)
{
    return s->copy == NULL || tp_buf_append(s->copy, from, n) == 0;
}

/* A string without escapes or control characters, valid UTF-8: its bytes. */
static bool plain_string(scan_t *s, const unsigned char **start, size_t *n)
{
    if (s->p == s->end || *s->p != '"')
        return false;
    const unsigned char *q = s->p + 1;
    while (q < s->end) {
        unsigned char c = *q;
        if (c == '"') {
            *start = s->p + 1;
            *n = (size_t)(q - *start);
            s->p = q + 1;
            return true;
        }
        if (c < 0x20 || c == '\\')
            return false;
        if (c < 0x80) {
            q++;
            continue;
        }
        size_t len = tp_utf8_len(q, (size_t)(s->end - q));
        if (len == 0)
            return false;
        q += len;
    }
    return false;
}

/*
 * An integer as jansson writes it back: -?(0|[1-9][0-9]*) within int64,
 * not "-0", not the start of a real.
 */
static bool plain_integer(scan_t *s, int64_t *value)
{
    const unsigned char *q = s->p;
    bool neg = q < s->end && *q == '-';
    q += neg;
    if (q == s->end || *q < '0' || *q > '9' || (*q == '0' && neg))
        return false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (*q == '0') {
        q++;
    } else {
        for (; q < s->end && *q >= '0' && *q <= '9'; q++) {
            unsigned d = (unsigned)(*q - '0');
            if (v > (limit - d) / 10)
                return false;
            v = v * 10 + d;
        }
    }
    if (q < s->end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9')))
        return false;
    *value = neg ? (int64_t)(0 - v) : (int64_t)v;
    s->p = q;
    return true;
}

static int key_cmp(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static bool value(scan_t *s, int depth);

/* The opening byte of an object or array: 1 when it closes at once, 0 when members follow, -1 ENOMEM. */
static int open_container(scan_t *s, const char *close)
{
    if (!emit(s, s->p++, 1))
        return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == (unsigned char)*close) {
        s->p++;
        return emit(s, (const unsigned char *)close, 1) ? 1 : -1;
    }
    return 0;
}

/* After a member or an element: 0 when a comma says another follows, 1 at the closing byte, else -1. */
static int next_or_close(scan_t *s, unsigned char close)
{
    skip_ws(s);
    if (s->p == s->end)
        return -1;
    unsigned char c = *s->p++;
    if (!emit(s, &c, 1) || (c != ',' && c != close))
        return -1;
    if (c == close)
        return 1;
    skip_ws(s);
    return 0;
}

static bool object(scan_t *s, int depth)
{
    const unsigned char *prev = NULL;
    size_t prev_n = 0;
    int rc = open_container(s, "}");
    if (rc != 0)
        return rc > 0;
    for (;;) {
        const unsigned char *key;
        size_t n;
        if (!plain_string(s, &key, &n) || !emit(s, key - 1, n + 2))
            return false;
        if (prev && key_cmp(prev, prev_n, key, n) >= 0)
            s->sorted = false; /* a repeated key shows when they are sorted */
        prev = key;
        prev_n = n;
        skip_ws(s);
        if (s->p == s->end || *s->p != ':')
            return false;
        s->p++;
        if (!emit(s, (const unsigned char *)":", 1) || !value(s, depth) || (rc = next_or_close(s, '}')) < 0)
            return false;
        if (rc > 0)
            return true;
    }
}

static bool array(scan_t *s, int depth)
{
    int rc = open_container(s, "]");
    if (rc != 0)
        return rc > 0;
    for (;;) {
        if (!value(s, depth) || (rc = next_or_close(s, ']')) < 0)
            return false;
        if (rc > 0)
            return true;
    }
}

static bool literal(scan_t *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return emit(s, (const unsigned char *)word, n);
}

static bool value(scan_t *s, int depth)
{
    skip_ws(s);
    if (s->p == s->end)
        return false;
    const unsigned char *start = s->p, *str;
    size_t n;
    int64_t v;
    switch (*s->p) {
    case '{':
        return depth < TP_SCAN_DEPTH && object(s, depth + 1);
    case '[':
        return depth < TP_SCAN_DEPTH && array(s, depth + 1);
    case '"':
        return plain_string(s, &str, &n) && emit(s, start, n + 2);
    case 't':
        return literal(s, "true", 4);
    case 'f':
        return literal(s, "false", 5);
    case 'n':
        return literal(s, "null", 4);
    default:
        return plain_integer(s, &v) && emit(s, start, (size_t)(s->p - start));
    }
}

/* ---- the canonical form of compact, plain args ---- */

/* The end of the compact value at p. */
static const char *skip_value(const char *p)
{
    int depth = 0;
    do {
        switch (*p) {
        case '"':
            p = strchr(p + 1, '"') + 1;
            continue;
        case '{':
        case '[':
            depth++;
            break;
        case '}':
        case ']':
            depth--;
            break;
        case ',':
            if (depth == 0)
                return p;
            break;
        }
        p++;
    } while (depth > 0 || (*p && *p != ',' && *p != '}' && *p != ']'));
    return p;
}

typedef struct {
    const char *key, *val; /* key: after its opening quote */
    size_t key_n, val_n;
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    return key_cmp((const unsigned char *)x->key, x->key_n, (const unsigned char *)y->key, y->key_n);
}

/* Appends the value at p with every object's keys sorted; -1 on a repeated key or ENOMEM. */
static int canon_value(const char *p, size_t n, tp_buf_t *out)
{
    if (*p != '{' && *p != '[')
        return tp_buf_append(out, p, n);
    if (tp_buf_append(out, p, 1) < 0)
        return -1;
    bool obj = *p == '{';
    member_t stack[16], *m = stack;
    size_t count = 0, cap = 16;
    const char *q = p + 1;
    int rc = 0;
    while (*q != '}' && *q != ']') {
        if (count == cap) {
            member_t *bigger = malloc(2 * cap * sizeof *bigger);
            if (bigger == NULL) {
                rc = -1;
                goto out;
            }
            memcpy(bigger, m, count * sizeof *m);
            if (m != stack)
                free(m);
            m = bigger;
            cap *= 2;
        }
        member_t *e = &m[count++];
        e->key = NULL;
        e->key_n = 0;
        if (obj) {
            e->key = q + 1;
            e->key_n = (size_t)(strchr(q + 1, '"') - e->key);
            q = e->key + e->key_n + 2; /* past '":' */
        }
        e->val = q;
        q = skip_value(q);
        e->val_n = (size_t)(q - e->val);
        if (*q == ',')
            q++;
    }
    if (obj)
        qsort(m, count, sizeof *m, member_cmp);
    for (size_t i = 0; i < count && rc == 0; i++) {
        if (obj && i && member_cmp(&m[i - 1], &m[i]) == 0)
            rc = -1; /* a repeated key: jansson keeps the last, so let it */
        else if ((i && tp_buf_append(out, ",", 1) < 0) ||
                 (obj && tp_buf_append(out, m[i].key - 1, m[i].key_n + 3) < 0) ||
                 canon_value(m[i].val, m[i].val_n, out) < 0)
            rc = -1;
    }
    if (rc == 0 && tp_buf_append(out, obj ? "}" : "]", 1) < 0)
        rc = -1;
out:
    if (m != stack)
        free(m);
    return rc;
}

/* ---- the line ---- */

enum { F_ID = 1, F_TOOL = 2, F_JOB = 4, F_STEP = 8, F_ARGS = 16 };

static int field_of(const unsigned char *k, size_t n)
{
    switch (n) {
    case 2:
        return memcmp(k, "id", 2) == 0 ? F_ID : 0;
    case 3:
        return memcmp(k, "job", 3) == 0 ? F_JOB : 0;
    case 4:
        return memcmp(k, "tool", 4) == 0 ? F_TOOL : memcmp(k, "step", 4) == 0 ? F_STEP : memcmp(k, "args", 4) == 0 ? F_ARGS : 0;
    default:
        return 0;
    }
}

int tp_call_line_scan(const char *line, size_t len, tp_call_line_t *out, tp_buf_t *strs, tp_buf_t *canon)
{
    scan_t s = {.p = (const unsigned char *)line, .end = (const unsigned char *)line + len, .sorted = true};
    tp_buf_t args = {0};
    const unsigned char *str[3] = {0}; /* id, tool, job */
    size_t str_n[3] = {0};
    int seen = 0, rc = 0;
    int64_t step = 0;

    memset(out, 0, sizeof *out);
    skip_ws(&s);
    if (s.p == s.end || *s.p != '{')
        return 0;
    s.p++;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '}')
        return 0; /* no id: jansson's way says so */
    for (;;) {
        const unsigned char *key;
        size_t n;
        if (!plain_string(&s, &key, &n))
            goto not_plain;
        int f = field_of(key, n);
        if (f & seen)
            goto not_plain; /* repeated: jansson keeps the last */
        seen |= f;
        skip_ws(&s);
        if (s.p == s.end || *s.p != ':')
            goto not_plain;
        s.p++;
        skip_ws(&s);
        if (f == F_ID || f == F_TOOL || f == F_JOB) {
            int k = f == F_ID ? 0 : f == F_TOOL ? 1 : 2;
            if (!plain_string(&s, &str[k], &str_n[k]) || str_n[k] == 0)
                goto not_plain;
        } else if (f == F_STEP) {
            if (!plain_integer(&s, &step) || step < 0)
                goto not_plain;
        } else if (f == F_ARGS) {
            if (s.p == s.end || *s.p != '{')
                goto not_plain;
            s.copy = &args;
            bool ok = object(&s, 1);
            s.copy = NULL;
            if (!ok)
                goto not_plain;
        } else if (!value(&s, 0)) {
            goto not_plain;
        }
        int next = next_or_close(&s, '}');
        if (next < 0)
            goto not_plain;
        if (next > 0)
            break;
    }
    skip_ws(&s);
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
        if (canon_value(out->args, out->args_len, canon) < 0) {
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
    return 1;

nomem:
    rc = -1;
not_plain:
    tp_buf_free(&args);
    return rc;
}
