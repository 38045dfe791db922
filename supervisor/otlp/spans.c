/*
 * A call's spans, as OTLP/JSON span objects (the JSON encoding of the
 * OTLP protobuf: ids in hex, times in nanoseconds as strings, attributes
 * as key/AnyValue pairs), made from its record when it ends.
 *
 * Times: the record says how long the call took from its first attempt
 * (duration_us) and where each attempt started from the call's turn
 * (start_us): the call's span ends now and starts duration_us before;
 * an attempt starts as far after the call's start as its start_us is
 * after the first attempt's, lasts its duration_us, and its backoff
 * follows it for backoff_us. So the spans say what the result line says.
 */
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "otlp_internal.h"

static void put_hex(tp_buf_t *b, const uint8_t *p, size_t n)
{
    char s[2 * 16];
    tp_hex(s, p, n);
    tp_buf_append(b, s, 2 * n);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int get_hex(const char *s, uint8_t *out, size_t n)
{
    bool zero = true;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
        zero = zero && out[i] == 0;
    }
    return zero ? -1 : 0; /* all zeros is invalid (W3C Trace Context) */
}

int tp_traceparent_parse(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags)
{
    /* version 00 is exactly 55 characters; a later one may add fields after a '-'; ff is invalid */
    size_t n = strlen(s);
    uint8_t version, fl;
    if (n < 55 || hexval(s[0]) < 0 || hexval(s[1]) < 0 || s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    version = (uint8_t)(hexval(s[0]) << 4 | hexval(s[1]));
    if (version == 0xff || (version == 0 && n != 55) || (n > 55 && s[55] != '-'))
        return -1;
    if (get_hex(s + 3, trace_id, 16) < 0 || get_hex(s + 36, span_id, 8) < 0)
        return -1;
    if (hexval(s[53]) < 0 || hexval(s[54]) < 0)
        return -1;
    fl = (uint8_t)(hexval(s[53]) << 4 | hexval(s[54]));
    *flags = fl;
    return 0;
}

/* xorshift64*: ids need to be unique, not secret; seeded from getrandom at start. */
static uint64_t next_rand(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void new_id(uint64_t *st, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = next_rand(st);
        memcpy(out + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* A string literal, appended without a strlen. */
#define PUT(b, lit) tp_buf_append((b), (lit), sizeof(lit) - 1)

/* Appends v in decimal, two digits a step (printf was most of a span's cost). */
static void put_u64(tp_buf_t *b, uint64_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    char s[20];
    size_t n = sizeof s;
    while (v >= 100) {
        n -= 2;
        memcpy(s + n, pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        n -= 2;
        memcpy(s + n, pairs + 2 * v, 2);
    } else {
        s[--n] = (char)('0' + v);
    }
    tp_buf_append(b, s + n, sizeof s - n);
}

void tp_otlp_attempt_name(char *s, size_t n, uint32_t attempt)
{
    char d[10];
    size_t k = 0;
    do {
        d[k++] = (char)('0' + attempt % 10);
        attempt /= 10;
    } while (attempt && k < sizeof d);
    if (n < 9 + k)
        return;
    memcpy(s, "attempt ", 8);
    for (size_t i = 0; i < k; i++)
        s[8 + i] = d[k - 1 - i];
    s[8 + k] = 0;
}

/* A comma unless b is at the start of a list. */
static void put_sep(tp_buf_t *b)
{
    if (b->len && b->data[b->len - 1] != '[')
        tp_buf_append(b, ",", 1);
}

/* key: one of ours, with nothing to escape. */
static void attr_key(tp_buf_t *b, const char *key)
{
    put_sep(b);
    PUT(b, "{\"key\":\"");
    tp_buf_puts(b, key);
    PUT(b, "\",\"value\":");
}

static void attr_strn(tp_buf_t *b, const char *key, const char *s, size_t n)
{
    attr_key(b, key);
    PUT(b, "{\"stringValue\":");
    tp_json_put_string(b, s, n);
    PUT(b, "}}");
}

static void attr_str(tp_buf_t *b, const char *key, const char *s)
{
    attr_strn(b, key, s ? s : "", s ? strlen(s) : 0);
}

static void attr_int(tp_buf_t *b, const char *key, uint64_t v)
{
    attr_key(b, key);
    PUT(b, "{\"intValue\":\"");
    put_u64(b, v);
    PUT(b, "\"}}");
}

static void attr_bool(tp_buf_t *b, const char *key, bool v)
{
    attr_key(b, key);
    tp_buf_puts(b, v ? "{\"boolValue\":true}}" : "{\"boolValue\":false}}");
}

/* Opens a span object, up to its attributes' '[' (the caller writes them, then span_close). */
static void span_open(tp_buf_t *b, const uint8_t trace_id[16], const uint8_t span_id[8], const uint8_t *parent,
                      const char *tracestate, const char *name, const char *name_tool, int kind, uint64_t start_ns,
                      uint64_t end_ns)
{
    put_sep(b);
    PUT(b, "{\"traceId\":\"");
    put_hex(b, trace_id, 16);
    PUT(b, "\",\"spanId\":\"");
    put_hex(b, span_id, 8);
    PUT(b, "\"");
    if (parent) {
        PUT(b, ",\"parentSpanId\":\"");
        put_hex(b, parent, 8);
        PUT(b, "\"");
    }
    if (tracestate && *tracestate) {
        PUT(b, ",\"traceState\":");
        tp_json_put_string(b, tracestate, strlen(tracestate));
    }
    /* "NAME TOOL": NAME is ours, TOOL the registry's, escaped (its opening quote taken out) */
    PUT(b, ",\"name\":\"");
    tp_buf_puts(b, name);
    PUT(b, " ");
    size_t at = b->len;
    if (tp_json_put_string(b, name_tool, strlen(name_tool)) == 0) {
        memmove(b->data + at, b->data + at + 1, b->len - at - 1);
        b->len--;
    }
    PUT(b, ",\"kind\":");
    put_u64(b, (uint64_t)kind);
    PUT(b, ",\"startTimeUnixNano\":\"");
    put_u64(b, start_ns);
    PUT(b, "\",\"endTimeUnixNano\":\"");
    put_u64(b, end_ns);
    PUT(b, "\",\"attributes\":[");
}

/* Closes the attributes and the span, with status ERROR and message when error (else UNSET). */
static void span_close(tp_buf_t *b, bool error, const char *message)
{
    PUT(b, "]");
    if (error) {
        PUT(b, ",\"status\":{\"code\":2");
        if (message && *message) {
            PUT(b, ",\"message\":");
            tp_json_put_string(b, message, strlen(message));
        }
        PUT(b, "}");
    }
    PUT(b, "}");
}

void tp_otlp_begin_ids(tp_trace_ctx_t *tc, uint64_t *rng)
{
    uint8_t parent[8], flags;
    if (tc->traceparent && tp_traceparent_parse(tc->traceparent, tc->trace_id, parent, &flags) == 0) {
        tc->flags = flags & 1;
    } else {
        new_id(rng, tc->trace_id, 16);
        tc->flags = 1;
    }
    new_id(rng, tc->span_id, 8);
}

size_t tp_otlp_render(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads, uint64_t end_ns)
{
    uint8_t trace_id[16], parent[8], flags;
    bool has_parent = tc->traceparent && tp_traceparent_parse(tc->traceparent, trace_id, parent, &flags) == 0;
    const uint8_t *call_id = tc->span_id;
    const char *tracestate = has_parent ? tc->tracestate : NULL;
    bool mcp = tc->rpc_id != NULL;
    uint64_t start_ns = end_ns - r->duration_us * 1000;
    size_t spans = 1;

    span_open(b, tc->trace_id, call_id, has_parent ? parent : NULL, tracestate, mcp ? "tools/call" : "execute_tool",
              r->tool, mcp ? 2 : 1, start_ns, end_ns);
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
        attr_strn(b, "gen_ai.tool.call.arguments", (const char *)r->args.data, r->args.len);
        if (r->ok)
            attr_strn(b, "gen_ai.tool.call.result", (const char *)r->result.data, r->result.len);
    }
    span_close(b, !r->ok, r->message);

    uint64_t first = r->n_trace ? r->trace[0]->start_us : 0;
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        uint64_t at = start_ns + (t->start_us > first ? t->start_us - first : 0) * 1000;
        uint64_t done = at + t->duration_us * 1000;
        bool failed = strcmp(t->outcome, "ok") != 0;
        uint8_t id[8];
        char name[32];
        tp_trace_span_id(tc, i, false, id);
        tp_otlp_attempt_name(name, sizeof name, t->attempt);
        span_open(b, tc->trace_id, id, call_id, tracestate, name, t->tool, 1, at, done);
        attr_int(b, "toolpool.attempt", t->attempt);
        attr_str(b, "gen_ai.tool.name", t->tool);
        attr_str(b, "toolpool.outcome", t->outcome);
        if (failed)
            attr_str(b, "error.type", t->outcome);
        span_close(b, failed, NULL);
        spans++;
        if (t->backoff_us) {
            tp_trace_span_id(tc, i, true, id);
            span_open(b, tc->trace_id, id, call_id, tracestate, "backoff", t->tool, 1, done,
                      done + t->backoff_us * 1000);
            attr_int(b, "toolpool.attempt", t->attempt);
            span_close(b, false, NULL);
            spans++;
        }
    }
    return spans;
}
