/*
 * JSON text out: strings escaped (invalid UTF-8 replaced), and jansson
 * values written compact on one line with numbers in their shortest form
 * that reads back the same (1.08, not 1.0800000000000001).
 *
 * One writer serves the result lines, the args of a call and the results of
 * tools, so a value reads the same wherever it is printed.
 */
#ifndef TP_JSON_H
#define TP_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "buf.h"

enum {
    TP_JSON_SORT_KEYS = 1, /* object keys in byte order */
    /*
     * The canonical form the breakers digest: keys sorted, and a number in
     * one form whatever its spelling (1, 1.0 and 1e0 all write as 1).
     */
    TP_JSON_CANONICAL = 2 | TP_JSON_SORT_KEYS,
};

/*
 * Length of the valid UTF-8 sequence of a code point >= U+0080 at p (at
 * most n bytes), or 0: overlong forms, surrogates and code points past
 * U+10FFFF are not valid.
 */
size_t tp_utf8_len(const unsigned char *p, size_t n);
/* Whether a JSON string holds byte c as it is, with nothing to check or escape. */
static inline int tp_json_plain_byte(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/*
 * tp_json_plain_end eight bytes a step, for any target: each test is
 * nonzero when some byte of the word is a quote or a backslash (zero after
 * the XOR), is below 0x20, or has its top bit set.
 */
static inline const unsigned char *tp_json_plain_end_word(const unsigned char *p, const unsigned char *end)
{
    const uint64_t ones = 0x0101010101010101u, tops = 0x8080808080808080u;
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, sizeof x);
        uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
        if ((((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x) & tops)
            break;
        p += 8;
    }
    while (p < end && tp_json_plain_byte(*p))
        p++;
    return p;
}

/*
 * The first byte from p on (before end) that a JSON string cannot hold as
 * it is: a quote, a backslash, a control character, or a byte of a
 * multi-byte UTF-8 sequence (which needs checking); end when there is
 * none. The scanners and the string writer skip long plain runs with it.
 * Sixteen bytes a step with SSE2: as signed bytes, those from 0x80 up are
 * negative, so "below 0x20" takes them too.
 */
static inline const unsigned char *tp_json_plain_end(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i bad = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                   _mm_cmpgt_epi8(space, x));
        int m = _mm_movemask_epi8(bad);
        if (m != 0)
            return p + __builtin_ctz((unsigned)m);
        p += 16;
    }
#endif
    return tp_json_plain_end_word(p, end);
}

/* Appends s (n bytes) as a JSON string, quotes included. 0, or TP_ENOMEM. */
int tp_json_put_string(tp_buf_t *b, const char *s, size_t n);
/* Appends v compact. 0, or TP_ENOMEM. */
int tp_json_write(tp_buf_t *b, const json_t *v, int flags);
/* Appends a double in its shortest round-trip form ("1e+300", "0.1", "3.0"; null when not finite). 0, or TP_ENOMEM. */
int tp_json_put_real(tp_buf_t *b, double d);

/*
 * json_loadb, quicker: the same value, or NULL with the same error, for
 * any text and flags. A parser of our own reads what it is sure jansson
 * reads the same (jsonload.c); jansson reads the rest. Every text the
 * program reads on a call's path goes through it.
 */
json_t *tp_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err);
/* Its own parser alone: the value, or NULL where tp_json_loadb leaves the text to jansson. For the tests. */
json_t *tp_json_load_fast(const char *text, size_t len, size_t flags);

/*
 * The number in JSON's grammar that starts at p (before end): the byte
 * after it, or NULL. A leading zero ends the number ("01" is 0, then 1).
 */
const uint8_t *tp_json_number_end(const uint8_t *p, const uint8_t *end);

/* The deepest nesting of objects and arrays tp_json_check takes. */
#define TP_JSON_DEPTH_MAX 4096

/*
 * Whether text (n bytes) is exactly one JSON value (RFC 8259), with
 * whitespace around it: strings of valid UTF-8 with no raw control
 * characters and well-formed escapes, numbers in JSON's grammar, objects
 * and arrays nested at most TP_JSON_DEPTH_MAX deep. Grammar only: a number
 * past int64 or \u0000, which jansson refuses by default, are JSON here.
 * Allocates nothing: the store checks every record it reads with it.
 * 0, or TP_EINVAL with *at (when at is not NULL) the offset where it goes wrong.
 */
int tp_json_check(const void *text, size_t n, size_t *at);

/*
 * In an object text that tp_json_check has passed: the value of its
 * top-level member whose key is exactly name (as written, escapes and
 * all), as *val and *len pointing into text. 0, or TP_ENOENT when it has none.
 */
int tp_json_member(const void *text, size_t n, const char *name, const char **val, size_t *len);
/*
 * In an object text that tp_json_check has passed: its top-level members
 * one by one, in the order written (a repeated key comes each time). *at
 * is 0 for the first and moves past each member found; *key points into
 * text at the key between its quotes, as written (escapes and all), *val
 * at the value. 0, or TP_ENOENT after the last (or in a text that is not
 * an object).
 */
int tp_json_next_member(const void *text, size_t n, size_t *at, const char **key, size_t *key_len, const char **val,
                        size_t *val_len);

/*
 * Appends a text that tp_json_check has passed without the whitespace
 * between its tokens, every token as written: a number keeps its
 * spelling (18446744073709551616, 1e400, -0), a string its escapes. What
 * jansson refuses to read (see tp_json_check) can be passed on compact
 * this way. 0, or TP_ENOMEM.
 */
int tp_json_compact(const void *text, size_t n, tp_buf_t *out);

#endif
