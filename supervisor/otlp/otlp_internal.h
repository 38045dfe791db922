/* Internal to supervisor/otlp/: the span rendering the exporter queues. */
#ifndef TP_OTLP_INTERNAL_H
#define TP_OTLP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "otlp.h"

/* Sets tc's trace id (its traceparent's, or new) and its call's span id (new), from rng. */
void tp_otlp_begin_ids(tp_trace_ctx_t *tc, uint64_t *rng);

/*
 * Appends r's spans to b as OTLP/JSON span objects, comma-separated (a
 * comma first unless b is empty or ends a list's '['): the call's, then
 * one per attempt and per backoff, with tc's ids (tp_otlp_begin_ids).
 * end_ns: the call's end, Unix time in nanoseconds. Returns how many
 * spans it wrote.
 */
size_t tp_otlp_render(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads, uint64_t end_ns);

#endif
