#include "json.h"

#include <math.h>
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
        return -1;
    char *o = (char *)b->data + b->len;
    char *start = o;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
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
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
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
            return -1;
        if (flags & TP_JSON_SORT_KEYS) {
            const char **keys = malloc((n ? n : 1) * sizeof *keys);
            if (keys == NULL)
                return -1;
            json_object_foreach((json_t *)v, key, val)
                keys[i++] = key;
            qsort(keys, n, sizeof *keys, cmp_keys);
            for (i = 0; i < n; i++) {
                if ((i && tp_buf_puts(b, ",") < 0) || tp_json_put_string(b, keys[i], strlen(keys[i])) < 0 ||
                    tp_buf_puts(b, ":") < 0 || tp_json_write(b, json_object_get(v, keys[i]), flags) < 0) {
                    free(keys);
                    return -1;
                }
            }
            free(keys);
        } else {
            json_object_foreach((json_t *)v, key, val) {
                if ((i++ && tp_buf_puts(b, ",") < 0) || tp_json_put_string(b, key, strlen(key)) < 0 ||
                    tp_buf_puts(b, ":") < 0 || tp_json_write(b, val, flags) < 0)
                    return -1;
            }
        }
        return tp_buf_puts(b, "}");
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *val;
        if (tp_buf_puts(b, "[") < 0)
            return -1;
        json_array_foreach(v, i, val) {
            if ((i && tp_buf_puts(b, ",") < 0) || tp_json_write(b, val, flags) < 0)
                return -1;
        }
        return tp_buf_puts(b, "]");
    }
    case JSON_STRING:
        return tp_json_put_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return tp_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL: {
        double d = json_real_value(v);
        if ((flags & TP_JSON_CANONICAL) == TP_JSON_CANONICAL && d > -9007199254740992.0 &&
            d < 9007199254740992.0 && d == (double)(long long)d)
            return tp_buf_printf(b, "%lld", (long long)d);
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
