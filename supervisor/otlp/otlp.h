/*
 * OpenTelemetry traces of every call, exported over OTLP/HTTP (protobuf,
 * or JSON).
 *
 * When a call ends the engine's hook (tp_otlp_call_end, on the loop) makes
 * its spans from its record: one `execute_tool {tool}` span for the call
 * (GenAI semantic conventions; `tools/call {tool}` with the MCP ones when
 * it came through an MCP front), and a child span per attempt and per
 * backoff. What they say of the record is copied into the queue; an
 * exporter thread of this module renders them (protobuf, or JSON) and
 * POSTs them in batches to the collector with libcurl. The queue is bounded: when the collector is
 * slow or down, spans that do not fit, and batches it refuses, are dropped
 * and counted, and no call ever waits for it.
 *
 * Configured as the OpenTelemetry specification has it: --otlp URL, else
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else
 * OTEL_EXPORTER_OTLP_ENDPOINT (/v1/traces appended); --otlp-protocol, else
 * OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf, the default, or
 * http/json; grpc falls back to http/protobuf); OTEL_SERVICE_NAME,
 * OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_[TRACES_]HEADERS and
 * _TIMEOUT, OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE and
 * OTEL_BSP_MAX_EXPORT_BATCH_SIZE.
 */
#ifndef TP_OTLP_H
#define TP_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "toolpool.pb-c.h"

typedef struct tp_otlp tp_otlp_t;

/* The encoding of the export requests' bodies (OTLP/HTTP's two). */
typedef enum {
    TP_OTLP_PROTOBUF, /* http/protobuf: application/x-protobuf, the specification's default */
    TP_OTLP_JSON,     /* http/json: application/json */
} tp_otlp_proto_t;

typedef struct {
    const char *url;          /* --otlp: a collector's base URL, or its full traces endpoint; NULL: the environment's */
    bool payloads;            /* --otlp-payloads: a call's args and result on its span */
    bool protocol_set;        /* --otlp-protocol was given: protocol, not the environment's */
    tp_otlp_proto_t protocol; /* --otlp-protocol */
} tp_otlp_opts_t;

/*
 * An OTEL_EXPORTER_OTLP_PROTOCOL value: "http/protobuf" or "http/json"
 * into *out, 0; "grpc" (not offered) is warned of, naming from, and taken
 * as http/protobuf; anything else is -1.
 */
int tp_otlp_protocol(const char *s, const char *from, tp_otlp_proto_t *out);

/*
 * Starts the exporter when export is asked for (o->url, or the environment):
 * 0 with *out set; 0 with *out NULL when it is not; -1 with the reason
 * logged (a bad URL or variable, no thread).
 */
int tp_otlp_start(const tp_otlp_opts_t *o, tp_otlp_t **out);

/* The engine's hooks (tp_call_begin_fn, tp_call_end_fn): ctx is the tp_otlp_t. */
void tp_otlp_call_begin(void *ctx, tp_trace_ctx_t *tc);
void tp_otlp_call_end(void *ctx, const Toolpool__Result *r, const tp_trace_ctx_t *tc);

/*
 * Sends what is queued (waiting at most the export timeout for it), stops
 * the thread and frees o, with its final counts (tp_otlp_counts) in
 * *exported and *dropped. NULL: nothing (both 0).
 */
void tp_otlp_stop(tp_otlp_t *o, uint64_t *exported, uint64_t *dropped);

/* Spans the collector took, and spans dropped (queue full, or a batch it refused or never answered). */
void tp_otlp_counts(const tp_otlp_t *o, uint64_t *exported, uint64_t *dropped);

/*
 * A W3C traceparent ("00-<32 hex>-<16 hex>-<2 hex>"): 0 with its ids and
 * flags, or -1 when it is not one (then the call starts a trace of its own).
 */
int tp_traceparent_parse(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags);

#endif
