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
/* Appends s (n bytes) as a JSON string, quotes included. */
int tp_json_put_string(tp_buf_t *b, const char *s, size_t n);
/* Appends v compact. 0, or -1 (ENOMEM). */
int tp_json_write(tp_buf_t *b, const json_t *v, int flags);
/* Appends a double in its shortest round-trip form ("1e+300", "0.1", "3"). */
int tp_json_put_real(tp_buf_t *b, double d);

/* The deepest nesting of objects and arrays tp_json_check takes. */
#define TP_JSON_DEPTH_MAX 4096

/*
 * Whether text (n bytes) is exactly one JSON value (RFC 8259), with
 * whitespace around it: strings of valid UTF-8 with no raw control
 * characters and well-formed escapes, numbers in JSON's grammar, objects
 * and arrays nested at most TP_JSON_DEPTH_MAX deep. Grammar only: a number
 * past int64 or \u0000, which jansson refuses by default, are JSON here.
 * Allocates nothing: the store checks every record it reads with it.
 * 0, or -1 with *at (when at is not NULL) the offset where it goes wrong.
 */
int tp_json_check(const void *text, size_t n, size_t *at);

/*
 * In an object text that tp_json_check has passed: the value of its
 * top-level member whose key is exactly name (as written, escapes and
 * all), as *val and *len pointing into text. 0, or -1 when it has none.
 */
int tp_json_member(const void *text, size_t n, const char *name, const char **val, size_t *len);

#endif
