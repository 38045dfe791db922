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
 * Room for the whole span is reserved once, from the lengths of the
 * strings it holds, and the fields are written with no check of their own.
 */
#include <stdint.h>
#include <string.h>

#include "json.h"
#include "otlp_internal.h"
#include "pbwire.h"

enum { WT_VARINT = TP_PB_VARINT, WT_FIXED64 = TP_PB_FIXED64, WT_LEN = TP_PB_LEN };

/*
 * The attribute writers are inlined at each use, so that copying a key, a
 * literal of known length, is a few moves rather than a call of memcpy:
 * the keys were most of a span's bytes and of its rendering's time.
 */
#define W_INLINE static inline __attribute__((always_inline))

/*
 * The writer: bytes go straight to p, in room reserved beforehand for the
 * longest the span may take (span_room), with no check per field.
 */
typedef struct {
    uint8_t *p;
} w_t;

W_INLINE void w_varint(w_t *w, uint64_t v)
{
    w->p = tp_pb_put_varint(w->p, v);
}

/* A field's key: its number and wire type (all ours are below 16: one byte). */
W_INLINE void w_key(w_t *w, unsigned field, unsigned wt)
{
    *w->p++ = (uint8_t)(field << 3 | wt);
}

W_INLINE void w_raw(w_t *w, const void *s, size_t n)
{
    memcpy(w->p, s, n);
    w->p += n;
}

/* A length-delimited field of n bytes at s. */
W_INLINE void w_len(w_t *w, unsigned field, const void *s, size_t n)
{
    w_key(w, field, WT_LEN);
    w_varint(w, n);
    w_raw(w, s, n);
}

W_INLINE void w_fixed64(w_t *w, unsigned field, uint64_t v)
{
    w_key(w, field, WT_FIXED64);
    for (int i = 0; i < 8; i++)
        *w->p++ = (uint8_t)(v >> (8 * i));
}

/* The size of a length-delimited field holding n bytes. */
W_INLINE size_t lenfield_size(size_t n)
{
    return 1 + tp_pb_varint_len(n) + n;
}

/* KeyValue `key` (kn bytes; field `field` of its message) opened, with room for a value of vsize bytes. */
W_INLINE void kv_open(w_t *w, unsigned field, const char *key, size_t kn, size_t vsize)
{
    w_key(w, field, WT_LEN);
    w_varint(w, lenfield_size(kn) + lenfield_size(vsize));
    w_len(w, 1, key, kn);
    w_key(w, 2, WT_LEN);
    w_varint(w, vsize);
}

W_INLINE void kv_str(w_t *w, unsigned field, const char *key, size_t kn, const char *s, size_t n)
{
    kv_open(w, field, key, kn, lenfield_size(n));
    w_len(w, 1, s, n);
}

/* The longest a KeyValue of ours takes besides its key's and value's bytes. */
#define KV_ROOM 24

void tp_otlp_pb_attr_str(tp_buf_t *b, unsigned field, const char *key, const char *s, size_t n)
{
    size_t kn = strlen(key);
    if (tp_buf_reserve(b, KV_ROOM + kn + n) < 0)
        return;
    w_t w = {b->data + b->len};
    kv_str(&w, field, key, kn, s, n);
    b->len = (size_t)(w.p - b->data);
}

/* Attributes of a span; KEY a literal. */
#define ATTR_STRN(w, KEY, s, n) kv_str((w), 9, KEY, sizeof KEY - 1, (s), (n))
#define ATTR_STR(w, KEY, s) ATTR_STRN(w, KEY, (s), strlen(s))

W_INLINE void attr_int_(w_t *w, const char *key, size_t kn, uint64_t v)
{
    kv_open(w, 9, key, kn, 1 + tp_pb_varint_len(v));
    w_key(w, 3, WT_VARINT);
    w_varint(w, v);
}
#define ATTR_INT(w, KEY, v) attr_int_((w), KEY, sizeof KEY - 1, (v))

W_INLINE void attr_bool_(w_t *w, const char *key, size_t kn, bool v)
{
    kv_open(w, 9, key, kn, 2);
    w_key(w, 2, WT_VARINT);
    *w->p++ = v;
}
#define ATTR_BOOL(w, KEY, v) attr_bool_((w), KEY, sizeof KEY - 1, (v))

/*
 * Room for a span's length: 2 bytes say up to 16 KiB, which is every span
 * but one with long strings (payloads); 5 bytes, up to 32 GiB, then.
 */
#define LEN_ROOM_SHORT 2
#define LEN_ROOM_LONG 5

/* The most a span of ours takes besides the strings it holds (ids, times, keys, lengths). */
#define SPAN_ROOM 1536

/*
 * Opens a span (field 2 of ScopeSpans) up to its attributes, in room for
 * SPAN_ROOM bytes and `strings` more reserved in b: the writer, its body's
 * start in *at; p NULL when out of memory.
 */
static w_t span_open(tp_buf_t *b, size_t strings, size_t *at, const uint8_t trace_id[16], const uint8_t span_id[8],
                     const uint8_t *parent, const char *tracestate, size_t tsn, const char *name, size_t nn,
                     const char *name_tool, size_t tn, int kind, uint64_t start_ns, uint64_t end_ns)
{
    if (tp_buf_reserve(b, SPAN_ROOM + strings) < 0)
        return (w_t){NULL};
    w_t w = {b->data + b->len};
    w_key(&w, 2, WT_LEN);
    w.p += SPAN_ROOM + strings < 1u << 14 ? LEN_ROOM_SHORT : LEN_ROOM_LONG;
    *at = (size_t)(w.p - b->data);
    w_len(&w, 1, trace_id, 16);
    w_len(&w, 2, span_id, 8);
    if (tsn)
        w_len(&w, 3, tracestate, tsn);
    if (parent)
        w_len(&w, 4, parent, 8);
    w_key(&w, 5, WT_LEN);
    w_varint(&w, nn + 1 + tn);
    w_raw(&w, name, nn);
    *w.p++ = ' ';
    w_raw(&w, name_tool, tn);
    w_key(&w, 6, WT_VARINT);
    w_varint(&w, (uint64_t)kind);
    w_fixed64(&w, 7, start_ns);
    w_fixed64(&w, 8, end_ns);
    return w;
}

/* Closes the span opened at `at`, with status ERROR and message when error (else none: UNSET). */
static void span_close(tp_buf_t *b, w_t *w, size_t at, bool error, const char *message, size_t mn)
{
    size_t room = at - b->len - 1; /* what span_open left for the length (after the span's key) */
    if (error) {
        w_key(w, 15, WT_LEN);
        w_varint(w, (mn ? lenfield_size(mn) : 0) + 2);
        if (mn)
            w_len(w, 2, message, mn);
        w_key(w, 3, WT_VARINT);
        *w->p++ = 2;
    }
    uint8_t *body = b->data + at;
    size_t n = (size_t)(w->p - body);
    uint8_t *len = body - room;
    size_t ln = tp_pb_varint_len(n);
    w_t lw = {len};
    w_varint(&lw, n);
    if (ln < room) /* a short span (a backoff's): moved back over the byte its length did not use */
        memmove(len + ln, body, n);
    b->len = at - room + ln + n;
}

static size_t slen(const char *s)
{
    return s ? strlen(s) : 0;
}

static size_t render_pb(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads,
                        uint64_t end_ns)
{
    uint8_t trace_id[16], parent[8], flags;
    bool has_parent = tc->traceparent && tp_traceparent_parse(tc->traceparent, trace_id, parent, &flags) == 0;
    const uint8_t *call_id = tc->span_id;
    size_t tsn = has_parent ? slen(tc->tracestate) : 0;
    bool mcp = tc->rpc_id != NULL;
    uint64_t start_ns = end_ns - r->duration_us * 1000;
    size_t spans = 1, at;

    size_t tool_n = strlen(r->tool), id_n = slen(r->id), job_n = slen(r->job), rpc_n = slen(tc->rpc_id);
    const char *klass = r->ok ? "ok" : r->klass ? r->klass : "", *kind = r->ok ? "ok" : r->kind ? r->kind : "";
    size_t klass_n = strlen(klass), kind_n = strlen(kind), sb_n = slen(r->served_by);
    size_t msg_n = r->ok ? 0 : slen(r->message);
    const char *etype = mcp ? "tool_error" : kind;
    size_t strings = 2 * tool_n + id_n + job_n + rpc_n + klass_n + 2 * kind_n + sb_n + msg_n + tsn +
                     (payloads ? r->args.len + r->result.len : 0);
    w_t w = span_open(b, strings, &at, tc->trace_id, call_id, has_parent ? parent : NULL, tc->tracestate, tsn,
                      mcp ? "tools/call" : "execute_tool", mcp ? 10 : 12, r->tool, tool_n, mcp ? 2 : 1, start_ns,
                      end_ns);
    if (w.p == NULL)
        return 0;
    ATTR_STRN(&w, "gen_ai.operation.name", "execute_tool", 12);
    ATTR_STRN(&w, "gen_ai.tool.name", r->tool, tool_n);
    if (r->has_id)
        ATTR_STRN(&w, "gen_ai.tool.call.id", r->id ? r->id : "", id_n);
    if (mcp) {
        ATTR_STRN(&w, "mcp.method.name", "tools/call", 10);
        ATTR_STRN(&w, "jsonrpc.request.id", tc->rpc_id, rpc_n);
    }
    ATTR_STRN(&w, "toolpool.job", r->job ? r->job : "", job_n);
    ATTR_INT(&w, "toolpool.step", r->step);
    ATTR_STRN(&w, "toolpool.outcome.class", klass, klass_n);
    ATTR_STRN(&w, "toolpool.outcome.kind", kind, kind_n);
    ATTR_INT(&w, "toolpool.attempts", r->attempts);
    if (sb_n)
        ATTR_STRN(&w, "toolpool.served_by", r->served_by, sb_n);
    ATTR_BOOL(&w, "toolpool.degraded", r->degraded);
    ATTR_BOOL(&w, "toolpool.stale", r->stale);
    ATTR_BOOL(&w, "toolpool.escalated", r->escalated);
    if (!r->ok)
        ATTR_STR(&w, "error.type", etype);
    if (payloads) {
        ATTR_STRN(&w, "gen_ai.tool.call.arguments", (const char *)r->args.data, r->args.len);
        if (r->ok)
            ATTR_STRN(&w, "gen_ai.tool.call.result", (const char *)r->result.data, r->result.len);
    }
    span_close(b, &w, at, !r->ok, r->message, msg_n);

    uint64_t first = r->n_trace ? r->trace[0]->start_us : 0;
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        uint64_t st = start_ns + (t->start_us > first ? t->start_us - first : 0) * 1000;
        uint64_t done = st + t->duration_us * 1000;
        const char *outcome = t->outcome ? t->outcome : "";
        size_t on = strlen(outcome), ttn = strlen(t->tool);
        bool failed = strcmp(outcome, "ok") != 0;
        uint8_t id[8];
        char name[32];
        tp_trace_span_id(tc, i, false, id);
        tp_otlp_attempt_name(name, sizeof name, t->attempt);
        w = span_open(b, 2 * ttn + 2 * on + tsn, &at, tc->trace_id, id, call_id, tc->tracestate, tsn, name,
                      strlen(name), t->tool, ttn, 1, st, done);
        if (w.p == NULL)
            return spans;
        ATTR_INT(&w, "toolpool.attempt", t->attempt);
        ATTR_STRN(&w, "gen_ai.tool.name", t->tool, ttn);
        ATTR_STRN(&w, "toolpool.outcome", outcome, on);
        if (failed)
            ATTR_STRN(&w, "error.type", outcome, on);
        span_close(b, &w, at, failed, NULL, 0);
        spans++;
        if (t->backoff_us) {
            tp_trace_span_id(tc, i, true, id);
            w = span_open(b, ttn + tsn, &at, tc->trace_id, id, call_id, tc->tracestate, tsn, "backoff", 7, t->tool, ttn,
                          1, done, done + t->backoff_us * 1000);
            if (w.p == NULL)
                return spans;
            ATTR_INT(&w, "toolpool.attempt", t->attempt);
            span_close(b, &w, at, false, NULL, 0);
            spans++;
        }
    }
    return spans;
}

static void put_varint(tp_buf_t *b, uint64_t v)
{
    uint8_t s[10];
    w_t w = {s};
    w_varint(&w, v);
    tp_buf_append(b, s, (size_t)(w.p - s));
}

static void put_key(tp_buf_t *b, unsigned field, unsigned wt)
{
    uint8_t k = (uint8_t)(field << 3 | wt);
    tp_buf_append(b, &k, 1);
}

static void put_lenfield(tp_buf_t *b, unsigned field, const void *p, size_t n)
{
    put_key(b, field, WT_LEN);
    put_varint(b, n);
    tp_buf_append(b, p, n);
}

size_t tp_otlp_pb_head_room(const tp_buf_t *resource, const tp_buf_t *scope)
{
    return 1 + 10 + resource->len + 1 + 10 + scope->len;
}

uint8_t *tp_otlp_pb_head(uint8_t *end, const tp_buf_t *resource, const tp_buf_t *scope, size_t spans_len)
{
    size_t ss = scope->len + spans_len;
    size_t rs = resource->len + lenfield_size(ss);
    size_t h = 1 + tp_pb_varint_len(rs) + resource->len + 1 + tp_pb_varint_len(ss) + scope->len;
    w_t w = {end - h};
    w_key(&w, 1, WT_LEN);
    w_varint(&w, rs);
    w_raw(&w, resource->data, resource->len);
    w_key(&w, 2, WT_LEN);
    w_varint(&w, ss);
    w_raw(&w, scope->data, scope->len);
    return end - h;
}

void tp_otlp_pb_submessage(tp_buf_t *out, unsigned field, const tp_buf_t *body)
{
    tp_buf_reset(out);
    put_lenfield(out, field, body->data, body->len);
}

/* Whether the n bytes at s are UTF-8, as protobuf's strings must be (a strict collector refuses the whole batch). */
static bool utf8_ok(const void *s, size_t n)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < n;) {
        size_t l = p[i] < 0x80 ? 1 : tp_utf8_len(p + i, n - i);
        if (l == 0)
            return false;
        i += l;
    }
    return true;
}

static bool str_ok(const char *s)
{
    return s == NULL || utf8_ok(s, strlen(s));
}

/* The n bytes at s into b, each byte that is not UTF-8 made U+FFFD, NUL-ended: its offset in b. */
static size_t utf8_fixed(tp_buf_t *b, const void *s, size_t n)
{
    const unsigned char *p = s;
    size_t at = b->len;
    for (size_t i = 0; i < n;) {
        size_t l = p[i] < 0x80 ? 1 : tp_utf8_len(p + i, n - i);
        if (l)
            tp_buf_append(b, p + i, l);
        else
            tp_buf_append(b, "\xef\xbf\xbd", 3);
        i += l ? l : 1;
    }
    tp_buf_append(b, "", 1);
    return at;
}

/*
 * The spans of r, as render_pb writes them; a record holding bytes that
 * are not UTF-8 where protobuf wants a string (a tool's message is its
 * stderr, a tracestate the header as it came) is written from a copy
 * with U+FFFD for each, as the JSON encoding writes them.
 */
size_t tp_otlp_render_pb(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads,
                         uint64_t end_ns)
{
    bool args_ok = !payloads || utf8_ok(r->args.data, r->args.len);
    bool result_ok = !payloads || utf8_ok(r->result.data, r->result.len);
    if (str_ok(r->message) && str_ok(r->id) && str_ok(r->job) && str_ok(r->served_by) && str_ok(r->kind) &&
        str_ok(r->klass) && str_ok(tc->tracestate) && str_ok(tc->rpc_id) && args_ok && result_ok)
        return render_pb(b, r, tc, payloads, end_ns);
    Toolpool__Result fr = *r;
    tp_trace_ctx_t ftc = *tc;
    tp_buf_t s = {0};
    size_t off[8];
    const char *src[6] = {r->message, r->id, r->job, r->served_by, r->kind, r->klass};
    for (int i = 0; i < 6; i++)
        off[i] = src[i] ? utf8_fixed(&s, src[i], strlen(src[i])) : SIZE_MAX;
    off[6] = tc->tracestate ? utf8_fixed(&s, tc->tracestate, strlen(tc->tracestate)) : SIZE_MAX;
    size_t args_at = 0, args_n = 0, result_at = 0, result_n = 0;
    if (!args_ok) {
        args_at = utf8_fixed(&s, r->args.data, r->args.len);
        args_n = s.len - args_at - 1;
    }
    if (!result_ok) {
        result_at = utf8_fixed(&s, r->result.data, r->result.len);
        result_n = s.len - result_at - 1;
    }
    off[7] = tc->rpc_id ? utf8_fixed(&s, tc->rpc_id, strlen(tc->rpc_id)) : SIZE_MAX;
    if (s.data == NULL)
        return 0;
    char *base = (char *)s.data;
    char **dst[6] = {&fr.message, &fr.id, &fr.job, &fr.served_by, &fr.kind, &fr.klass};
    for (int i = 0; i < 6; i++)
        if (off[i] != SIZE_MAX)
            *dst[i] = base + off[i];
    if (off[6] != SIZE_MAX)
        ftc.tracestate = base + off[6];
    if (off[7] != SIZE_MAX)
        ftc.rpc_id = base + off[7];
    if (!args_ok)
        fr.args = (ProtobufCBinaryData){args_n, s.data + args_at};
    if (!result_ok)
        fr.result = (ProtobufCBinaryData){result_n, s.data + result_at};
    size_t spans = render_pb(b, &fr, &ftc, payloads, end_ns);
    tp_buf_free(&s);
    return spans;
}
