/*
 * A call's spans in the protobuf encoding of OTLP (application/x-protobuf),
 * the same spans as spans.c's JSON: written straight onto the wire, field
 * by field, from the message definitions of opentelemetry-proto
 * (trace/v1/trace.proto, common/v1/common.proto, resource/v1/resource.proto,
 * collector/trace/v1/trace_service.proto). The numbers used here:
 *
 *   ExportTraceServiceRequest  1 resource_spans (ResourceSpans)
 *   ResourceSpans              1 resource (Resource), 2 scope_spans (ScopeSpans)
 *   Resource                   1 attributes (KeyValue)
 *   ScopeSpans                 1 scope (InstrumentationScope), 2 spans (Span)
 *   InstrumentationScope       1 name, 2 version
 *   Span                       1 trace_id, 2 span_id (bytes), 3 trace_state, 4 parent_span_id,
 *                              5 name, 6 kind (enum), 7 start_time_unix_nano, 8 end_time_unix_nano
 *                              (fixed64), 9 attributes (KeyValue), 15 status (Status)
 *   Status                     2 message, 3 code (enum; 2 is ERROR)
 *   KeyValue                   1 key, 2 value (AnyValue)
 *   AnyValue                   1 string_value, 2 bool_value, 3 int_value (int64)
 *
 * Every length is known before its bytes but a span's own (its attributes
 * are written as they come): a span is written after room for the longest
 * length it may need, and moved back over what its length did not use.
 */
#include <string.h>

#include "otlp_internal.h"

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2 };

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t put_varint_at(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static void put_varint(tp_buf_t *b, uint64_t v)
{
    uint8_t s[10];
    tp_buf_append(b, s, put_varint_at(s, v));
}

/* A field's key: its number and wire type (all ours are below 16: one byte). */
static void put_key(tp_buf_t *b, unsigned field, unsigned wt)
{
    uint8_t k = (uint8_t)(field << 3 | wt);
    tp_buf_append(b, &k, 1);
}

/* A length-delimited field of n bytes at p. */
static void put_lenfield(tp_buf_t *b, unsigned field, const void *p, size_t n)
{
    put_key(b, field, WT_LEN);
    put_varint(b, n);
    tp_buf_append(b, p, n);
}

static void put_fixed64(tp_buf_t *b, unsigned field, uint64_t v)
{
    uint8_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (uint8_t)(v >> (8 * i));
    put_key(b, field, WT_FIXED64);
    tp_buf_append(b, s, 8);
}

/* The size of a length-delimited field holding n bytes. */
static size_t lenfield_size(size_t n)
{
    return 1 + varint_len(n) + n;
}

/* KeyValue `key` (field `field` of its message) opened, with room for a value of vsize bytes. */
static void kv_open(tp_buf_t *b, unsigned field, const char *key, size_t vsize)
{
    size_t kn = strlen(key);
    put_key(b, field, WT_LEN);
    put_varint(b, lenfield_size(kn) + lenfield_size(vsize));
    put_lenfield(b, 1, key, kn);
    put_key(b, 2, WT_LEN);
    put_varint(b, vsize);
}

void tp_otlp_pb_attr_str(tp_buf_t *b, unsigned field, const char *key, const char *s, size_t n)
{
    kv_open(b, field, key, lenfield_size(n));
    put_lenfield(b, 1, s, n);
}

static void attr_str(tp_buf_t *b, const char *key, const char *s)
{
    tp_otlp_pb_attr_str(b, 9, key, s ? s : "", s ? strlen(s) : 0);
}

static void attr_int(tp_buf_t *b, const char *key, uint64_t v)
{
    kv_open(b, 9, key, 1 + varint_len(v));
    put_key(b, 3, WT_VARINT);
    put_varint(b, v);
}

static void attr_bool(tp_buf_t *b, const char *key, bool v)
{
    kv_open(b, 9, key, 2);
    put_key(b, 2, WT_VARINT);
    uint8_t x = v;
    tp_buf_append(b, &x, 1);
}

/* Room for a span's length: 5 bytes say up to 32 GiB. */
#define LEN_ROOM 5

/*
 * Opens a span (field 2 of ScopeSpans), up to its attributes: returns where
 * its body starts, for span_close.
 */
static size_t span_open(tp_buf_t *b, const uint8_t trace_id[16], const uint8_t span_id[8], const uint8_t *parent,
                        const char *tracestate, const char *name, const char *name_tool, int kind, uint64_t start_ns,
                        uint64_t end_ns)
{
    put_key(b, 2, WT_LEN);
    uint8_t room[LEN_ROOM] = {0};
    tp_buf_append(b, room, LEN_ROOM);
    size_t at = b->len;
    put_lenfield(b, 1, trace_id, 16);
    put_lenfield(b, 2, span_id, 8);
    if (tracestate && *tracestate)
        put_lenfield(b, 3, tracestate, strlen(tracestate));
    if (parent)
        put_lenfield(b, 4, parent, 8);
    size_t nn = strlen(name), tn = strlen(name_tool);
    put_key(b, 5, WT_LEN);
    put_varint(b, nn + 1 + tn);
    tp_buf_append(b, name, nn);
    tp_buf_append(b, " ", 1);
    tp_buf_append(b, name_tool, tn);
    put_key(b, 6, WT_VARINT);
    put_varint(b, (uint64_t)kind);
    put_fixed64(b, 7, start_ns);
    put_fixed64(b, 8, end_ns);
    return at;
}

/* Closes the span opened at `at`, with status ERROR and message when error (else none: UNSET). */
static void span_close(tp_buf_t *b, size_t at, bool error, const char *message)
{
    if (error) {
        size_t mn = message ? strlen(message) : 0;
        put_key(b, 15, WT_LEN);
        put_varint(b, (mn ? lenfield_size(mn) : 0) + 2);
        if (mn)
            put_lenfield(b, 2, message, mn);
        put_key(b, 3, WT_VARINT);
        uint8_t code = 2;
        tp_buf_append(b, &code, 1);
    }
    if (b->data == NULL)
        return; /* out of memory: the batch is refused as it is sent */
    size_t n = b->len - at;
    uint8_t len[10];
    size_t ln = put_varint_at(len, n);
    if (ln > LEN_ROOM) { /* beyond what a buffer holds */
        b->len = at - LEN_ROOM - 1;
        return;
    }
    uint8_t *start = b->data + at - LEN_ROOM;
    memcpy(start, len, ln);
    if (ln < LEN_ROOM) {
        memmove(start + ln, b->data + at, n);
        b->len -= LEN_ROOM - ln;
    }
}

size_t tp_otlp_render_pb(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads,
                         uint64_t end_ns)
{
    uint8_t trace_id[16], parent[8], flags;
    bool has_parent = tc->traceparent && tp_traceparent_parse(tc->traceparent, trace_id, parent, &flags) == 0;
    const uint8_t *call_id = tc->span_id;
    const char *tracestate = has_parent ? tc->tracestate : NULL;
    bool mcp = tc->rpc_id != NULL;
    uint64_t start_ns = end_ns - r->duration_us * 1000;
    size_t spans = 1;

    size_t at = span_open(b, tc->trace_id, call_id, has_parent ? parent : NULL, tracestate,
                          mcp ? "tools/call" : "execute_tool", r->tool, mcp ? 2 : 1, start_ns, end_ns);
    attr_str(b, "gen_ai.operation.name", "execute_tool");
    attr_str(b, "gen_ai.tool.name", r->tool);
    if (r->has_id)
        attr_str(b, "gen_ai.tool.call.id", r->id);
    if (mcp) {
        attr_str(b, "mcp.method.name", "tools/call");
        attr_str(b, "jsonrpc.request.id", tc->rpc_id);
    }
    attr_str(b, "toolpool.job", r->job);
    attr_int(b, "toolpool.step", r->step);
    attr_str(b, "toolpool.outcome.class", r->ok ? "ok" : r->klass);
    attr_str(b, "toolpool.outcome.kind", r->ok ? "ok" : r->kind);
    attr_int(b, "toolpool.attempts", r->attempts);
    if (r->served_by && *r->served_by)
        attr_str(b, "toolpool.served_by", r->served_by);
    attr_bool(b, "toolpool.degraded", r->degraded);
    attr_bool(b, "toolpool.stale", r->stale);
    attr_bool(b, "toolpool.escalated", r->escalated);
    if (!r->ok)
        attr_str(b, "error.type", mcp ? "tool_error" : r->kind);
    if (payloads) {
        tp_otlp_pb_attr_str(b, 9, "gen_ai.tool.call.arguments", (const char *)r->args.data, r->args.len);
        if (r->ok)
            tp_otlp_pb_attr_str(b, 9, "gen_ai.tool.call.result", (const char *)r->result.data, r->result.len);
    }
    span_close(b, at, !r->ok, r->message);

    uint64_t first = r->n_trace ? r->trace[0]->start_us : 0;
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        uint64_t st = start_ns + (t->start_us > first ? t->start_us - first : 0) * 1000;
        uint64_t done = st + t->duration_us * 1000;
        bool failed = strcmp(t->outcome, "ok") != 0;
        uint8_t id[8];
        char name[32];
        tp_trace_span_id(tc, i, false, id);
        tp_otlp_attempt_name(name, sizeof name, t->attempt);
        at = span_open(b, tc->trace_id, id, call_id, tracestate, name, t->tool, 1, st, done);
        attr_int(b, "toolpool.attempt", t->attempt);
        attr_str(b, "gen_ai.tool.name", t->tool);
        attr_str(b, "toolpool.outcome", t->outcome);
        if (failed)
            attr_str(b, "error.type", t->outcome);
        span_close(b, at, failed, NULL);
        spans++;
        if (t->backoff_us) {
            tp_trace_span_id(tc, i, true, id);
            at = span_open(b, tc->trace_id, id, call_id, tracestate, "backoff", t->tool, 1, done,
                           done + t->backoff_us * 1000);
            attr_int(b, "toolpool.attempt", t->attempt);
            span_close(b, at, false, NULL);
            spans++;
        }
    }
    return spans;
}

void tp_otlp_pb_frame(tp_buf_t *out, const tp_buf_t *resource, const tp_buf_t *scope, const tp_buf_t *spans)
{
    size_t ss = scope->len + spans->len;
    size_t rs = resource->len + lenfield_size(ss);
    tp_buf_reset(out);
    put_key(out, 1, WT_LEN);
    put_varint(out, rs);
    tp_buf_append(out, resource->data, resource->len);
    put_key(out, 2, WT_LEN);
    put_varint(out, ss);
    tp_buf_append(out, scope->data, scope->len);
    tp_buf_append(out, spans->data, spans->len);
}

void tp_otlp_pb_submessage(tp_buf_t *out, unsigned field, const tp_buf_t *body)
{
    tp_buf_reset(out);
    put_lenfield(out, field, body->data, body->len);
}
