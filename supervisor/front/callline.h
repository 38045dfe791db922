/*
 * The fast way in for a call line.
 *
 * Most lines are plain JSON: strings without escapes, integers in their one
 * form, no reals. One pass over such a line picks out id, tool, job, step
 * and args without building a tree, writes the args compact (as the worker
 * gets them), and, when some object in them has its keys out of byte order,
 * writes them again in canonical form for the digest.
 *
 * Keys it does not know are skipped, whatever their values; it says
 * whether "deadline" and "traceparent" were among them.
 *
 * Anything else (an escape, a real, a repeated key, a field of the wrong
 * type, text that is not JSON, a "type" or "function" key, which may make
 * it a model's call) is "not plain": the caller parses the line
 * with jansson instead, which gives the same call, or the message for a
 * bad one. Both ways give byte-identical args and canonical forms.
 */
#ifndef TP_CALLLINE_H
#define TP_CALLLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

typedef struct {
    const char *id, *tool, *job; /* NUL-terminated, in strs; job NULL when absent */
    size_t job_len;
    bool has_step;
    uint64_t step;
    /* Whether the line has these keys, which the scanner skips (the caller reads them its own way). */
    bool has_deadline, has_traceparent;
    /* The args compact, NUL-terminated, malloc'd: the caller owns them. */
    char *args;
    size_t args_len;
    /* Their canonical form: args itself, or canon's bytes when the keys needed sorting. */
    const char *canon;
    size_t canon_len;
} tp_call_line_t;

/*
 * 1 and out filled when the line is a plain call; 0 when it is not (out
 * holds nothing to free); -1 out of memory. strs and canon are the
 * caller's scratch buffers, reset here, which out points into.
 */
int tp_call_line_scan(const char *line, size_t len, tp_call_line_t *out, tp_buf_t *strs, tp_buf_t *canon);

#endif
