/*
 * The plain-JSON scanner (jsonscan.h).
 */
#include "jsonscan.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"


void tp_scan_ws(tp_scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool emit(tp_scan_t *s, const unsigned char *from, size_t n)
{
    return s->copy == NULL || tp_buf_append(s->copy, from, n) == 0;
}

static bool lower_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/*
 * The length of the escape at q (a backslash) when it is one that
 * tp_json_put_string writes itself, so that reading it and writing it back
 * gives it again: \" \\ \n \r \t \b \f, and \u00xx (lowercase) for the
 * other control characters (not \u0000 in a key: jansson refuses a NUL
 * there). 0 for any other.
 */
static size_t plain_escape(const unsigned char *q, const unsigned char *end, bool key)
{
    if (end - q < 2)
        return 0;
    switch (q[1]) {
    case '"':
    case '\\':
    case 'n':
    case 'r':
    case 't':
    case 'b':
    case 'f':
        return 2;
    case 'u':
        break;
    default:
        return 0;
    }
    if (end - q < 6 || q[2] != '0' || q[3] != '0' || (q[4] != '0' && q[4] != '1') || !lower_hex(q[5]))
        return 0;
    unsigned v = (unsigned)(q[4] - '0') * 16 + (unsigned)(q[5] <= '9' ? q[5] - '0' : q[5] - 'a' + 10);
    if (v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r' || (v == 0 && key))
        return 0; /* written short, or refused */
    return 6;
}

/* A string of valid UTF-8 without control characters (escapes as s->escapes says): its bytes. */
static bool scan_string(tp_scan_t *s, const unsigned char **start, size_t *n, bool key)
{
    if (s->p == s->end || *s->p != '"')
        return false;
    const unsigned char *q = s->p + 1;
    while ((q = tp_json_plain_end(q, s->end)) < s->end) {
        unsigned char c = *q;
        if (c == '"') {
            *start = s->p + 1;
            *n = (size_t)(q - *start);
            s->p = q + 1;
            return true;
        }
        if (c == '\\') {
            size_t len = s->escapes ? plain_escape(q, s->end, key) : 0;
            if (len == 0)
                return false;
            q += len;
            continue;
        }
        if (c < 0x20)
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

bool tp_scan_string(tp_scan_t *s, const unsigned char **start, size_t *n)
{
    return scan_string(s, start, n, false);
}

/*
 * An integer as jansson writes it back: -?(0|[1-9][0-9]*) within int64,
 * not "-0", not the start of a real.
 */
bool tp_scan_integer(tp_scan_t *s, int64_t *value)
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


/* The opening byte of an object or array: 1 when it closes at once, 0 when members follow, TP_ENOMEM. */
static int open_container(tp_scan_t *s, const char *close)
{
    if (!emit(s, s->p++, 1))
        return TP_ENOMEM;
    tp_scan_ws(s);
    if (s->p < s->end && *s->p == (unsigned char)*close) {
        s->p++;
        return emit(s, (const unsigned char *)close, 1) ? 1 : TP_ENOMEM;
    }
    return 0;
}

/* After a member or an element: 0 at a comma, 1 at the closing byte, else a code (jsonscan.h). */
int tp_scan_next_or_close(tp_scan_t *s, unsigned char close)
{
    tp_scan_ws(s);
    if (s->p == s->end || (*s->p != ',' && *s->p != close))
        return TP_EINVAL;
    unsigned char c = *s->p++;
    if (!emit(s, &c, 1))
        return TP_ENOMEM;
    if (c == close)
        return 1;
    tp_scan_ws(s);
    return 0;
}

bool tp_scan_object(tp_scan_t *s, int depth)
{
    const unsigned char *prev = NULL;
    size_t prev_n = 0;
    int rc = open_container(s, "}");
    if (rc != 0)
        return rc > 0;
    for (;;) {
        const unsigned char *key;
        size_t n;
        if (!scan_string(s, &key, &n, true) || !emit(s, key - 1, n + 2))
            return false;
        if (prev && key_cmp(prev, prev_n, key, n) >= 0)
            s->sorted = false; /* a repeated key shows when they are sorted */
        prev = key;
        prev_n = n;
        tp_scan_ws(s);
        if (s->p == s->end || *s->p != ':')
            return false;
        s->p++;
        if (!emit(s, (const unsigned char *)":", 1) || !tp_scan_value(s, depth) ||
            (rc = tp_scan_next_or_close(s, '}')) < 0)
            return false;
        if (rc > 0)
            return true;
    }
}

static bool array(tp_scan_t *s, int depth)
{
    int rc = open_container(s, "]");
    if (rc != 0)
        return rc > 0;
    for (;;) {
        if (!tp_scan_value(s, depth) || (rc = tp_scan_next_or_close(s, ']')) < 0)
            return false;
        if (rc > 0)
            return true;
    }
}

static bool literal(tp_scan_t *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return emit(s, (const unsigned char *)word, n);
}

bool tp_scan_value(tp_scan_t *s, int depth)
{
    tp_scan_ws(s);
    if (s->p == s->end)
        return false;
    const unsigned char *start = s->p, *str;
    size_t n;
    int64_t v;
    switch (*s->p) {
    case '{':
        return depth < TP_SCAN_DEPTH && tp_scan_object(s, depth + 1);
    case '[':
        return depth < TP_SCAN_DEPTH && array(s, depth + 1);
    case '"':
        return scan_string(s, &str, &n, false) && emit(s, start, n + 2);
    case 't':
        return literal(s, "true", 4);
    case 'f':
        return literal(s, "false", 5);
    case 'n':
        return literal(s, "null", 4);
    default:
        return tp_scan_integer(s, &v) && emit(s, start, (size_t)(s->p - start));
    }
}

/* ---- the canonical form of a compact, plain value ---- */

/* The closing quote of the string whose first byte is at p (escapes skipped). */
static const char *string_end(const char *p)
{
    while (*p != '"')
        p += *p == '\\' ? 2 : 1;
    return p;
}

/* The end of the compact value at p. */
static const char *skip_value(const char *p)
{
    int depth = 0;
    do {
        switch (*p) {
        case '"':
            p = string_end(p + 1) + 1;
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

int tp_scan_canon(const char *p, size_t n, tp_buf_t *out)
{
    if (*p != '{' && *p != '[')
        return tp_buf_append(out, p, n);
    if (tp_buf_append(out, p, 1) < 0)
        return TP_ENOMEM;
    bool obj = *p == '{';
    member_t stack[16], *m = stack;
    size_t count = 0, cap = 16;
    const char *q = p + 1;
    int rc = 0;
    while (*q != '}' && *q != ']') {
        if (count == cap) {
            member_t *bigger = malloc(2 * cap * sizeof *bigger);
            if (bigger == NULL) {
                rc = TP_ENOMEM;
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
            e->key_n = (size_t)(string_end(q + 1) - e->key);
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
            rc = TP_EINVAL; /* a repeated key: jansson keeps the last, so let it */
        else if ((i && tp_buf_append(out, ",", 1) < 0) || (obj && tp_buf_append(out, m[i].key - 1, m[i].key_n + 3) < 0))
            rc = TP_ENOMEM;
        else
            rc = tp_scan_canon(m[i].val, m[i].val_n, out);
    }
    if (rc == 0 && tp_buf_append(out, obj ? "}" : "]", 1) < 0)
        rc = TP_ENOMEM;
out:
    if (m != stack)
        free(m);
    return rc;
}

/* ---- lenient reading ---- */

static const char *lenient_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* The byte after the string whose opening quote is at p, or NULL. */
static const char *lenient_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++; /* the escaped byte, whatever it is */
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

const char *tp_scan_skip(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return lenient_string(p, end);
    if (*p == '{' || *p == '[') {
        size_t depth = 0; /* no limit: nothing recurses */
        while (p < end) {
            char c = *p;
            if (c == '"') {
                if ((p = lenient_string(p, end)) == NULL)
                    return NULL;
                continue;
            }
            p++;
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return p;
        }
        return NULL;
    }
    const char *q = p;
    while (q < end && !strchr(" \t\r\n,:[]{}\"", *q))
        q++;
    return q > p ? q : NULL;
}

int tp_scan_member(const char *text, size_t n, const char *name, const char **val, size_t *len)
{
    const char *end = text + n, *p = lenient_ws(text, end);
    size_t nlen = strlen(name);
    if (p >= end || *p != '{')
        return TP_ENOENT;
    p = lenient_ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *key = p + 1, *q = lenient_string(p, end);
        if (q == NULL)
            return TP_ENOENT;
        bool match = (size_t)(q - 1 - key) == nlen && memcmp(key, name, nlen) == 0;
        p = lenient_ws(q, end);
        if (p >= end || *p != ':')
            return TP_ENOENT;
        const char *v = lenient_ws(p + 1, end);
        if ((p = tp_scan_skip(v, end)) == NULL)
            return TP_ENOENT;
        if (match) {
            *val = v;
            *len = (size_t)(p - v);
            return 0;
        }
        p = lenient_ws(p, end);
        if (p >= end || *p != ',')
            return TP_ENOENT;
        p = lenient_ws(p + 1, end);
    }
    return TP_ENOENT;
}

/* ---- a whole text ---- */

int tp_json_compact_plain(const char *text, size_t len, tp_buf_t *out)
{
    size_t mark = out->len;
    tp_scan_t s = {.p = (const unsigned char *)text,
                   .end = (const unsigned char *)text + len,
                   .copy = out,
                   .sorted = true,
                   .escapes = true};
    if (!tp_scan_value(&s, 0))
        goto not_plain;
    tp_scan_ws(&s);
    if (s.p != s.end)
        goto not_plain;
    if (!s.sorted) {
        /* Some object's keys are out of order: one may repeat (jansson keeps the last), which canon tells. */
        tp_buf_t canon = {0};
        int rc = tp_buf_append(out, "", 1);
        if (rc == 0) {
            out->len--;
            rc = tp_scan_canon((const char *)out->data + mark, out->len - mark, &canon);
        }
        tp_buf_free(&canon);
        if (rc < 0)
            goto not_plain;
    }
    return 1;
not_plain:
    out->len = mark;
    return 0;
}
