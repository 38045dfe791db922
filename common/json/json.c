#include "json.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t tp_utf8_len(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t cp;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2;
        cp = p[0] & 0x1fu;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        cp = p[0] & 0x0fu;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        cp = p[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/*
 * Appends s as a JSON string. Bytes that are not valid UTF-8 (a tool's
 * stderr can hold anything) become U+FFFD, so every line stays valid JSON.
 */
int tp_json_put_string(tp_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (tp_buf_reserve(b, n * 6 + 2) < 0)
        return TP_ENOMEM;
    char *o = (char *)b->data + b->len;
    char *start = o;
    *o++ = '"';
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        size_t run = (size_t)(tp_json_plain_end(u + i, u + n) - (u + i));
        memcpy(o, s + i, run);
        o += run;
        if ((i += run) == n)
            break;
        unsigned char c = u[i];
        if (c >= 0x80) {
            size_t len = tp_utf8_len((const unsigned char *)s + i, n - i);
            if (len == 0) {
                memcpy(o, "\\ufffd", 6);
                o += 6;
            } else {
                memcpy(o, s + i, len);
                o += len;
                i += len - 1;
            }
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    b->len += (size_t)(o - start);
    return 0;
}

int tp_json_put_real(tp_buf_t *b, double d)
{
    char buf[32];
    if (!isfinite(d))
        return tp_buf_puts(b, "null");
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    /* "3" would read back as an integer: keep a real a real. */
    if (strpbrk(buf, ".eEn") == NULL)
        strcat(buf, ".0");
    return tp_buf_puts(b, buf);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int tp_json_write(tp_buf_t *b, const json_t *v, int flags)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char *key;
        json_t *val;
        if (tp_buf_puts(b, "{") < 0)
            return TP_ENOMEM;
        if (flags & TP_JSON_SORT_KEYS) {
            const char **keys = malloc((n ? n : 1) * sizeof *keys);
            if (keys == NULL)
                return TP_ENOMEM;
            json_object_foreach((json_t *)v, key, val)
                keys[i++] = key;
            qsort(keys, n, sizeof *keys, cmp_keys);
            for (i = 0; i < n; i++) {
                if ((i && tp_buf_puts(b, ",") < 0) || tp_json_put_string(b, keys[i], strlen(keys[i])) < 0 ||
                    tp_buf_puts(b, ":") < 0 || tp_json_write(b, json_object_get(v, keys[i]), flags) < 0) {
                    free(keys);
                    return TP_ENOMEM;
                }
            }
            free(keys);
        } else {
            json_object_foreach((json_t *)v, key, val) {
                if ((i++ && tp_buf_puts(b, ",") < 0) || tp_json_put_string(b, key, strlen(key)) < 0 ||
                    tp_buf_puts(b, ":") < 0 || tp_json_write(b, val, flags) < 0)
                    return TP_ENOMEM;
            }
        }
        return tp_buf_puts(b, "}");
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *val;
        if (tp_buf_puts(b, "[") < 0)
            return TP_ENOMEM;
        json_array_foreach(v, i, val) {
            if ((i && tp_buf_puts(b, ",") < 0) || tp_json_write(b, val, flags) < 0)
                return TP_ENOMEM;
        }
        return tp_buf_puts(b, "]");
    }
    case JSON_STRING:
        return tp_json_put_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return tp_buf_put_i64(b, (int64_t)json_integer_value(v));
    case JSON_REAL: {
        double d = json_real_value(v);
        if ((flags & TP_JSON_CANONICAL) == TP_JSON_CANONICAL && d > -9007199254740992.0 && d < 9007199254740992.0 &&
            d == (double)(long long)d)
            return tp_buf_put_i64(b, (int64_t)d);
        return tp_json_put_real(b, d);
    }
    case JSON_TRUE:
        return tp_buf_puts(b, "true");
    case JSON_FALSE:
        return tp_buf_puts(b, "false");
    case JSON_NULL:
    default:
        return tp_buf_puts(b, "null");
    }
}

/* ---- checking a JSON text without parsing it into anything ---- */

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(uint8_t c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The string whose opening quote is at p: the byte after its closing quote, or NULL. */
static const uint8_t *scan_string(const uint8_t *p, const uint8_t *end)
{
    for (p++; (p = tp_json_plain_end(p, end)) < end;) {
        uint8_t c = *p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c >= 0x80) {
            size_t len = tp_utf8_len(p, (size_t)(end - p));
            if (len == 0)
                return NULL;
            p += len;
            continue;
        }
        if (c != '\\') {
            p++;
            continue;
        }
        if (end - p < 2)
            return NULL;
        switch (p[1]) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            p += 2;
            break;
        case 'u':
            if (end - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5]))
                return NULL;
            p += 6;
            break;
        default:
            return NULL;
        }
    }
    return NULL;
}

const uint8_t *tp_json_number_end(const uint8_t *p, const uint8_t *end)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return NULL;
    if (*p++ != '0')
        while (p < end && is_digit(*p))
            p++;
    if (p < end && *p == '.') {
        if (++p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
    }
    return p;
}

/* A scalar (string, number, literal) at p: the byte after it, or NULL. */
static const uint8_t *scan_scalar(const uint8_t *p, const uint8_t *end)
{
    static const char *const literals[] = {"true", "false", "null"};
    if (*p == '"')
        return scan_string(p, end);
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(literals[i]);
        if (*p == (uint8_t)literals[i][0])
            return (size_t)(end - p) >= n && memcmp(p, literals[i], n) == 0 ? p + n : NULL;
    }
    return tp_json_number_end(p, end);
}

/*
 * One pass, no recursion: a stack of one bit per open object (1) or array
 * (0). At each step p is where a value, a member's key, or what follows a
 * value must be.
 */
int tp_json_check(const void *text, size_t n, size_t *at)
{
    if (n == 0) { /* nothing is no JSON (and text may be NULL then: an empty bytes field) */
        if (at)
            *at = 0;
        return TP_EINVAL;
    }
    const uint8_t *start = text, *end = start + n, *p = skip_ws(start, end);
    uint8_t stack[TP_JSON_DEPTH_MAX / 8];
    size_t depth = 0;
    enum { VALUE, KEY, AFTER } want = VALUE;
    for (;;) {
        if (want == KEY) {
            const uint8_t *q = p < end && *p == '"' ? scan_string(p, end) : NULL;
            if (q == NULL)
                goto bad;
            p = skip_ws(q, end);
            if (p >= end || *p != ':')
                goto bad;
            p = skip_ws(p + 1, end);
            want = VALUE;
        }
        if (want == VALUE) {
            if (p >= end)
                goto bad;
            if (*p == '{' || *p == '[') {
                if (depth == TP_JSON_DEPTH_MAX)
                    goto bad;
                bool object = *p == '{';
                if (object)
                    stack[depth / 8] |= (uint8_t)(1u << depth % 8);
                else
                    stack[depth / 8] &= (uint8_t) ~(1u << depth % 8);
                depth++;
                p = skip_ws(p + 1, end);
                if (p < end && *p == (object ? '}' : ']')) {
                    depth--;
                    p++;
                } else {
                    want = object ? KEY : VALUE;
                    continue;
                }
            } else {
                const uint8_t *q = scan_scalar(p, end);
                if (q == NULL)
                    goto bad;
                p = q;
            }
            want = AFTER;
        }
        /* after a value */
        p = skip_ws(p, end);
        if (depth == 0)
            break;
        bool object = stack[(depth - 1) / 8] >> (depth - 1) % 8 & 1;
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            want = object ? KEY : VALUE;
        } else if (p < end && *p == (object ? '}' : ']')) {
            depth--;
            p++;
        } else {
            goto bad;
        }
    }
    if (p == end)
        return 0;
bad:
    if (at)
        *at = (size_t)(p - start);
    return TP_EINVAL;
}

/* In a text known to be valid: the byte after the value that starts at p. */
static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end)
{
    if (*p != '{' && *p != '[')
        return scan_scalar(p, end);
    size_t depth = 0;
    do {
        if (*p == '"') {
            p = scan_string(p, end);
            continue;
        }
        if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']')
            depth--;
        p++;
    } while (p != NULL && p < end && depth > 0);
    return p;
}

int tp_json_next_member(const void *text, size_t n, size_t *at, const char **key, size_t *key_len, const char **val,
                        size_t *val_len)
{
    if (n == 0)
        return TP_ENOENT;
    const uint8_t *start = text, *end = start + n, *p;
    if (*at == 0) {
        p = skip_ws(start, end);
        if (p >= end || *p != '{')
            return TP_ENOENT;
        p = skip_ws(p + 1, end);
    } else {
        p = skip_ws(start + *at, end);
        if (p < end && *p == ',')
            p = skip_ws(p + 1, end);
    }
    if (p >= end || *p != '"')
        return TP_ENOENT;
    const uint8_t *k = p + 1, *q = scan_string(p, end);
    if (q == NULL)
        return TP_ENOENT;
    p = skip_ws(q, end);
    if (p >= end || *p != ':')
        return TP_ENOENT;
    p = skip_ws(p + 1, end);
    const uint8_t *v = p;
    if (p >= end || (p = skip_value(p, end)) == NULL)
        return TP_ENOENT;
    *key = (const char *)k;
    *key_len = (size_t)(q - 1 - k);
    *val = (const char *)v;
    *val_len = (size_t)(p - v);
    *at = (size_t)(p - start);
    return 0;
}

int tp_json_member(const void *text, size_t n, const char *name, const char **val, size_t *len)
{
    size_t at = 0, nlen = strlen(name), kn, vn;
    const char *k, *v;
    while (tp_json_next_member(text, n, &at, &k, &kn, &v, &vn) == 0) {
        if (kn == nlen && memcmp(k, name, nlen) == 0) {
            *val = v;
            *len = vn;
            return 0;
        }
    }
    return TP_ENOENT;
}

int tp_json_compact(const void *text, size_t n, tp_buf_t *out)
{
    if (n == 0)
        return 0;
    if (tp_buf_reserve(out, n) < 0)
        return TP_ENOMEM;
    const uint8_t *p = skip_ws(text, (const uint8_t *)text + n), *end = (const uint8_t *)text + n;
    uint8_t *o = out->data + out->len;
    while (p < end) {
        const uint8_t *q = p;
        if (*p == '"')
            q = scan_string(p, end);
        else
            while (q < end && *q != '"' && *q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')
                q++;
        if (q == NULL)
            q = end; /* not a checked text: the rest as it is */
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        p = skip_ws(q, end);
    }
    out->len = (size_t)(o - out->data);
    return 0;
}
