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

/*
 * The same spans in the protobuf encoding (spans_pb.c): appended to b as
 * ScopeSpans fields (2, Span), ready to follow a scope.
 */
size_t tp_otlp_render_pb(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads,
                         uint64_t end_ns);

/* A KeyValue with a string value, as field `field` of its message (9 of a Span, 1 of a Resource). */
void tp_otlp_pb_attr_str(tp_buf_t *b, unsigned field, const char *key, const char *s, size_t n);

/* b's bytes as length-delimited field `field`, into out (reset first). */
void tp_otlp_pb_submessage(tp_buf_t *out, unsigned field, const tp_buf_t *body);

/*
 * The head of an ExportTraceServiceRequest whose spans (tp_otlp_render_pb's,
 * spans_len bytes) follow at end: one ResourceSpans of resource (its field
 * 1, framed) and one ScopeSpans of scope (its field 1, framed) and those
 * spans. Written to end before them, in room of tp_otlp_pb_head_room bytes
 * at most: returns where the request starts.
 */
size_t tp_otlp_pb_head_room(const tp_buf_t *resource, const tp_buf_t *scope);
uint8_t *tp_otlp_pb_head(uint8_t *end, const tp_buf_t *resource, const tp_buf_t *scope, size_t spans_len);

/* "attempt N" into s (of n bytes, at least 20). */
void tp_otlp_attempt_name(char *s, size_t n, uint32_t attempt);

#endif
