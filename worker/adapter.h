/*
 * What a tool adapter hands back to the worker loop: the outcome of one
 * attempt, before it becomes a Reply frame.
 */
#ifndef TP_ADAPTER_H
#define TP_ADAPTER_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "toolpool.pb-c.h"

typedef struct {
    bool ok;
    tp_buf_t result;        /* compact JSON text, when ok */
    char kind[64];          /* the failure's kind, when not ok */
    tp_buf_t message;
    int64_t retry_after_ms; /* -1: none */
    double cost;
} tp_outcome_t;

void tp_outcome_reset(tp_outcome_t *o);
void tp_outcome_free(tp_outcome_t *o);
void tp_outcome_fail(tp_outcome_t *o, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Reads a tool's answer text: with read_error, a JSON object whose top-level
 * "error" is a string is that failure ("message", "retry_after_ms" read too); any other
 * JSON is the result, re-written compact (one line); text that is not JSON
 * becomes a JSON string (trailing whitespace dropped). A numeric top-level
 * "cost" in an object is reported either way.
 */
void tp_outcome_from_text(tp_outcome_t *o, const char *text, size_t len, bool read_error);

/* exec adapter: fork+exec argv, args on stdin, answer on stdout. */
void tp_exec_run(const Toolpool__Call *call, tp_outcome_t *o);
/* plugin adapter: dlopen once per path, call tp_plugin_call_v1. */
void tp_plugin_run(const Toolpool__Call *call, tp_outcome_t *o);

#endif
