/*
 * The outcome of one attempt: what a tool adapter hands back to the worker
 * loop, before it becomes a Reply frame, and the helpers every adapter
 * fills it with. Apart from the worker's main(), so an adapter can be
 * linked into a test.
 */
#ifndef TP_OUTCOME_H
#define TP_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/*
 * The longest wait a tool may ask for (retry_after_ms, Retry-After): a
 * year. Longer is taken as a year, past every policy's max_retry_after:
 * the call ends with its failure instead of waiting.
 */
#define TP_RETRY_AFTER_MAX_MS 31536000000.0

typedef struct {
    bool ok;
    tp_buf_t result; /* compact JSON text, when ok */
    char kind[64];   /* the failure's kind, when not ok */
    tp_buf_t message;
    int64_t retry_after_ms; /* -1: none */
    double cost;
    uint64_t started_us; /* exec: when the tool's process started (tp_now_us()); 0: none */
} tp_outcome_t;

/*
 * Readies o for the next attempt: not ok, no kind, both buffers emptied
 * (their memory kept for the next one), no retry_after_ms, no cost.
 */
void tp_outcome_reset(tp_outcome_t *o);
/* Frees what o's buffers hold; o may be reset and used again. */
void tp_outcome_free(tp_outcome_t *o);
/*
 * Makes o a failure of kind (cut to 63 bytes) with the message fmt
 * formats (cut to 1023), in place of any earlier one.
 */
void tp_outcome_fail(tp_outcome_t *o, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Reads a tool's answer text: with read_error, a JSON object whose top-level
 * "error" is a string is that failure ("message", "retry_after_ms" read too:
 * past TP_RETRY_AFTER_MAX_MS it is that, and one that is not a wait in ms
 * is ignored, the message saying so); any other
 * JSON is the result, re-written compact (one line); text that is not JSON
 * becomes a JSON string (trailing whitespace dropped). A numeric top-level
 * "cost" in an object is reported either way.
 *
 * JSON is what RFC 8259 allows, not only what jansson reads: an answer
 * holding a number jansson cannot hold (an integer past int64, a real past
 * a double's range) or another of its refusals (json.h: tp_json_check) is
 * read all the same, and its result is its text compact, every token as
 * the tool wrote it, where jansson's rewriting would have changed it.
 */
void tp_outcome_from_text(tp_outcome_t *o, const char *text, size_t len, bool read_error);

/*
 * Whether text is an answer in the tool error convention (a JSON object
 * whose top-level "error" is a string, read as tp_outcome_from_text reads
 * it): if so o is that failure (its cost read too); if not, o is left as
 * it was. For an answer that came with a failure status of its own (an
 * exec tool's non-zero exit, an HTTP error status), which the object
 * overrides.
 */
bool tp_outcome_error_from_text(tp_outcome_t *o, const char *text, size_t len);

#endif
