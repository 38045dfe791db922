/*
 * JSON text in (json.h, tp_json_loadb): jansson's values, built by a
 * parser of our own in one pass over the bytes, for the texts jansson
 * would read the same; jansson itself for the rest.
 *
 * jansson reads a text a byte at a time through a stream with a look-back
 * buffer, copying every token before it turns it into a value: for the
 * small messages a front or a worker reads on every call (a JSON-RPC
 * request, a tool's result) that is most of their cost. Here plain runs
 * of string bytes are skipped sixteen at a time (tp_json_plain_end) and
 * copied once, into the value.
 *
 * The parser takes only what it is sure of; at anything else it gives up
 * and jansson reads the whole text again, with its own verdict and error:
 * a number past int64 or a double's range, \u0000, a lone surrogate, a
 * repeated key under JSON_REJECT_DUPLICATES, bytes that are not UTF-8,
 * nesting past FAST_DEPTH, any error at all. What it takes, it builds with
 * jansson's own calls in jansson's order (a repeated key replaces the
 * value in place, as json_object_setn does), so the value is the one
 * json_loadb returns; tests/fuzz/jsonload_fuzz.c holds the two to that.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* Deeper than this, jansson reads it (it allows 2048 levels). */
#define FAST_DEPTH 256
/* The flags this parser knows; with any other, jansson reads the text. */
#define FAST_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL)

typedef struct {
    const unsigned char *p, *end;
    size_t flags;
    tp_buf_t esc; /* a string with escapes, decoded */
} loader_t;

static json_t *load_value(loader_t *l, int depth);

static void skip_ws(loader_t *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\n' || *l->p == '\r' || *l->p == '\t'))
        l->p++;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Appends code point cp (U+0001 to U+10FFFF, no surrogate) as UTF-8. */
static bool put_utf8(tp_buf_t *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return tp_buf_append(b, u, n) == 0;
}

/*
 * The escape at l->p (its backslash), decoded onto l->esc. false for one
 * this parser leaves to jansson: malformed, \u0000, a lone surrogate.
 */
static bool load_escape(loader_t *l)
{
    if (l->end - l->p < 2)
        return false;
    unsigned char c = l->p[1], out;
    switch (c) {
    case '"':
    case '\\':
    case '/':
        out = c;
        break;
    case 'b':
        out = '\b';
        break;
    case 'f':
        out = '\f';
        break;
    case 'n':
        out = '\n';
        break;
    case 'r':
        out = '\r';
        break;
    case 't':
        out = '\t';
        break;
    case 'u': {
        int hi = l->end - l->p >= 6 ? hex4(l->p + 2) : -1;
        if (hi <= 0 || (hi >= 0xdc00 && hi <= 0xdfff))
            return false;
        l->p += 6;
        if (hi < 0xd800 || hi > 0xdbff)
            return put_utf8(&l->esc, (uint32_t)hi);
        /* a high surrogate: its low one must follow */
        int lo = l->end - l->p >= 6 && l->p[0] == '\\' && l->p[1] == 'u' ? hex4(l->p + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return false;
        l->p += 6;
        return put_utf8(&l->esc, 0x10000u + ((uint32_t)(hi - 0xd800) << 10) + (uint32_t)(lo - 0xdc00));
    }
    default:
        return false;
    }
    l->p += 2;
    return tp_buf_append(&l->esc, &out, 1) == 0;
}

/*
 * The string at l->p (its opening quote): *s and *n its bytes, pointing
 * into the text when it has no escape, else into l->esc. false when
 * jansson is to read it.
 */
static bool load_string(loader_t *l, const char **s, size_t *n)
{
    const unsigned char *start = ++l->p;
    bool escaped = false;
    for (;;) {
        l->p = tp_json_plain_end(l->p, l->end);
        if (l->p == l->end)
            return false;
        unsigned char c = *l->p;
        if (c == '"')
            break;
        if (c == '\\') {
            if (!escaped)
                tp_buf_reset(&l->esc);
            escaped = true;
            if (tp_buf_append(&l->esc, start, (size_t)(l->p - start)) != 0 || !load_escape(l))
                return false;
            start = l->p;
            continue;
        }
        if (c < 0x20)
            return false;
        size_t k = tp_utf8_len(l->p, (size_t)(l->end - l->p));
        if (k == 0)
            return false;
        l->p += k;
    }
    if (escaped) {
        if (tp_buf_append(&l->esc, start, (size_t)(l->p - start)) != 0)
            return false;
        *s = (const char *)l->esc.data;
        *n = l->esc.len;
    } else {
        *s = (const char *)start;
        *n = (size_t)(l->p - start);
    }
    l->p++; /* the closing quote */
    return true;
}

/* A number in JSON's grammar at l->p: an integer within int64 or a finite double, as jansson reads it. */
static json_t *load_number(loader_t *l)
{
    const unsigned char *start = l->p, *p = tp_json_number_end(l->p, l->end);
    if (p == NULL)
        return NULL;
    bool neg = *start == '-';
    const unsigned char *int_end = start + neg;
    while (int_end < p && *int_end >= '0' && *int_end <= '9')
        int_end++;
    bool real = int_end < p; /* a fraction or an exponent follows the digits */
    l->p = p;
    if (!real && !(l->flags & JSON_DECODE_INT_AS_REAL)) {
        /* Accumulated negative, so that INT64_MIN fits. */
        int64_t v = 0;
        for (const unsigned char *d = start + neg; d < int_end; d++) {
            int digit = *d - '0';
            if (v < (INT64_MIN + digit) / 10)
                return NULL; /* past int64: jansson's error */
            v = v * 10 - digit;
        }
        if (!neg) {
            if (v == INT64_MIN)
                return NULL;
            v = -v;
        }
        return json_integer((json_int_t)v);
    }
    char buf[64];
    size_t n = (size_t)(p - start);
    if (n >= sizeof buf)
        return NULL;
    memcpy(buf, start, n);
    buf[n] = '\0';
    errno = 0;
    char *stop;
    double d = strtod(buf, &stop);
    if (stop != buf + n || ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE))
        return NULL; /* past a double's range: jansson's error */
    return json_real(d);
}

static json_t *load_literal(loader_t *l, const char *word, size_t n, json_t *v)
{
    if ((size_t)(l->end - l->p) < n || memcmp(l->p, word, n) != 0)
        return NULL;
    l->p += n;
    return v;
}

/* Past an opening bracket and the whitespace after it: whether close follows at once (then past it too). */
static bool opens_empty(loader_t *l, unsigned char close)
{
    l->p++;
    skip_ws(l);
    if (l->p == l->end || *l->p != close)
        return false;
    l->p++;
    return true;
}

/*
 * After a member or an element: 0 past a comma (and the whitespace after
 * it), another to follow; 1 past close; -1 at anything else.
 */
static int next_or_close(loader_t *l, unsigned char close)
{
    skip_ws(l);
    if (l->p == l->end || (*l->p != ',' && *l->p != close))
        return -1;
    if (*l->p++ == close)
        return 1;
    skip_ws(l);
    return 0;
}

/* The container v, whole when next_or_close said 1; else let go of. */
static json_t *closed(json_t *v, int next)
{
    if (next == 1)
        return v;
    json_decref(v);
    return NULL;
}

static json_t *load_object(loader_t *l, int depth)
{
    json_t *o = json_object();
    if (o == NULL || opens_empty(l, '}'))
        return o;
    int next = -1; /* a break below leaves it other than 1 */
    do {
        const char *key;
        size_t klen;
        if (l->p == l->end || *l->p != '"' || !load_string(l, &key, &klen))
            break;
        /* The key may live in l->esc, which the value may use: a copy when so. */
        char small[128], *kcopy = NULL;
        if (key == (const char *)l->esc.data) {
            kcopy = klen < sizeof small ? small : malloc(klen);
            if (kcopy == NULL)
                break;
            memcpy(kcopy, key, klen);
            key = kcopy;
        }
        json_t *v = NULL;
        skip_ws(l);
        if (l->p < l->end && *l->p == ':') {
            l->p++;
            skip_ws(l);
            v = load_value(l, depth + 1);
        }
        bool taken = false;
        if (v != NULL && (l->flags & JSON_REJECT_DUPLICATES) && json_object_getn(o, key, klen) != NULL)
            json_decref(v); /* a repeated key: jansson's error */
        else if (v != NULL)
            taken = json_object_setn_new_nocheck(o, key, klen, v) == 0; /* which lets go of v when it fails */
        if (kcopy != small)
            free(kcopy);
        next = taken ? next_or_close(l, '}') : -1;
    } while (next == 0);
    return closed(o, next);
}

static json_t *load_array(loader_t *l, int depth)
{
    json_t *a = json_array();
    if (a == NULL || opens_empty(l, ']'))
        return a;
    int next;
    do {
        json_t *v = load_value(l, depth + 1);
        next = v != NULL && json_array_append_new(a, v) == 0 ? next_or_close(l, ']') : -1;
    } while (next == 0);
    return closed(a, next);
}

/* The value at l->p (no whitespace before it), or NULL: jansson is to read the text. */
static json_t *load_value(loader_t *l, int depth)
{
    if (l->p == l->end || depth > FAST_DEPTH)
        return NULL;
    switch (*l->p) {
    case '{':
        return load_object(l, depth);
    case '[':
        return load_array(l, depth);
    case '"': {
        const char *s;
        size_t n;
        return load_string(l, &s, &n) ? json_stringn_nocheck(s, n) : NULL;
    }
    case 't':
        return load_literal(l, "true", 4, json_true());
    case 'f':
        return load_literal(l, "false", 5, json_false());
    case 'n':
        return load_literal(l, "null", 4, json_null());
    default:
        return load_number(l);
    }
}

json_t *tp_json_load_fast(const char *text, size_t len, size_t flags)
{
    if (text == NULL || (flags & ~(size_t)FAST_FLAGS) != 0)
        return NULL;
    loader_t l = {.p = (const unsigned char *)text, .end = (const unsigned char *)text + len, .flags = flags};
    skip_ws(&l);
    if (!(flags & JSON_DECODE_ANY) && (l.p == l.end || (*l.p != '{' && *l.p != '[')))
        return NULL; /* jansson's "'[' or '{' expected" */
    json_t *v = load_value(&l, 0);
    skip_ws(&l);
    if (v != NULL && l.p != l.end) {
        json_decref(v); /* something after the value: jansson's "end of file expected" */
        v = NULL;
    }
    tp_buf_free(&l.esc);
    return v;
}

json_t *tp_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err)
{
    json_t *v = tp_json_load_fast(text, len, flags);
    if (v == NULL)
        return json_loadb(text, len, flags, err);
    if (err != NULL) {
        /* as json_loadb leaves it after a success: position is what it read, the whole text */
        err->line = err->column = -1;
        err->position = (int)len;
        err->text[0] = '\0';
        snprintf(err->source, sizeof err->source, "%s", "<buffer>");
    }
    return v;
}
