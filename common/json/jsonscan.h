/*
 * A validating JSON scanner that builds no tree: one pass over "plain"
 * JSON, copying it compact. Plain is what jansson reads and tp_json_write
 * (json.h) writes back byte for byte: strings of valid UTF-8 (with the
 * escapes tp_json_put_string itself writes, where the scan allows them),
 * integers in their one form within int64, no reals, keys not repeated.
 * Anything else is "not plain": the caller takes the jansson way, which
 * gives the same bytes, or the error.
 *
 * Two users: the call-line scanner (supervisor/front/callline.c, args without
 * escapes) and the worker's results (worker/outcome.c, any plain value),
 * so a large result is checked and passed through without a tree. The
 * lenient reading below serves the MCP client (common/mcp/mcpstdio.c).
 */
#ifndef TP_JSONSCAN_H
#define TP_JSONSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Deeper values than this are not plain (jansson allows 2048 levels). */
#define TP_SCAN_DEPTH 64

typedef struct {
    const unsigned char *p, *end;
    tp_buf_t *copy; /* where the value goes compact, while inside one; NULL: nowhere */
    bool sorted;    /* every object so far had its keys in byte order (so none repeats) */
    bool escapes;   /* strings may hold the escapes tp_json_put_string writes */
} tp_scan_t;

void tp_scan_ws(tp_scan_t *s);
/* A string: its bytes between the quotes, as they are (escapes and all). */
bool tp_scan_string(tp_scan_t *s, const unsigned char **start, size_t *n);
/* An integer as jansson writes it back: -?(0|[1-9][0-9]*) within int64, not "-0", not the start of a real. */
bool tp_scan_integer(tp_scan_t *s, int64_t *value);
/* Any value at depth (0 at the top), copied compact to s->copy. */
bool tp_scan_value(tp_scan_t *s, int depth);
/* An object (s->p at its '{'), copied compact. */
bool tp_scan_object(tp_scan_t *s, int depth);
/*
 * After a member or an element: 0 when a comma says another follows, 1 at
 * the closing byte; TP_EINVAL for anything else, TP_ENOMEM when the copy
 * cannot grow.
 */
int tp_scan_next_or_close(tp_scan_t *s, unsigned char close);
/*
 * Appends the compact, plain value at p (n bytes) with every object's keys
 * sorted: the canonical form. 0; TP_EINVAL on a repeated key, or TP_ENOMEM.
 */
int tp_scan_canon(const char *p, size_t n, tp_buf_t *out);

/*
 * Lenient reading, for a message jansson refused (a number past 64 bits,
 * nesting past its depth, bytes that are not UTF-8): values found by their
 * quotes and brackets alone, to any depth, nothing inside them checked. What
 * it finds is where the text says a value is, good enough to learn which
 * request a broken answer answers; never a value to act on. It allocates
 * nothing and reads no byte outside the text, whatever the text.
 */
/*
 * The byte after the value that starts at p (before end; no whitespace
 * before it): a string to its closing quote (escapes skipped), an object or
 * array to the bracket that closes it, anything else up to the next
 * whitespace or structural byte. NULL when the text ends inside it, or no
 * value starts at p.
 */
const char *tp_scan_skip(const char *p, const char *end);
/*
 * In the object text at text (n bytes, whitespace around it allowed): the
 * value of its top-level member whose key is exactly name as written,
 * leniently, as *val and *len pointing into text. 0, or TP_ENOENT when it
 * has none before the text stops reading as an object.
 */
int tp_scan_member(const char *text, size_t n, const char *name, const char **val, size_t *len);

/*
 * The whole text as one plain value (whitespace around it allowed),
 * appended compact to out: byte for byte what jansson's reading and
 * tp_json_write's writing would give. 1 done; 0 not plain, or out of
 * memory on the way (out as it was: the jansson way then tells which).
 */
int tp_json_compact_plain(const char *text, size_t len, tp_buf_t *out);

#endif
