/*
 * The OTLP/HTTP exporter (otlp.h): its configuration from the options and
 * the environment, the bounded queue of rendered spans, and the thread
 * that POSTs them.
 *
 * A thread, not the loop's idle time: a POST blocks for as long as the
 * collector takes (up to the export timeout), and a slow collector must
 * never hold up an attempt's deadline or a commit. The loop's share is the
 * rendering of a call's spans into one chunk and a push under a mutex;
 * the thread joins chunks into a request body and sends it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include "curllib.h"
#include "json.h"
#include "log.h"
#include "otlp_internal.h"
#include "pbwire.h"

#ifndef TP_VERSION
#define TP_VERSION "0"
#endif

/*
 * A call waiting in the queue: a copy of what its spans say of its record
 * and trace context, in one piece (the strings and trace entries after the
 * struct, the copy's pointers into them; args and result only with
 * --otlp-payloads), and when it ended. The exporter thread renders it: the
 * loop's share is the copies. (Packing the record as the store does, and
 * unpacking it on the thread, cost twice the CPU.)
 */
typedef struct {
    size_t size; /* the whole chunk's bytes, rounded up to keep the next one aligned */
    size_t spans;
    uint64_t end_ns;
    Toolpool__Result rec;
    tp_trace_ctx_t tc;
    max_align_t data[];
} tp_chunk_t;

/*
 * The queue: chunks carved one after the other from big blocks, which the
 * loop fills and the thread reads, without a lock. The loop writes a chunk
 * past its block's committed bytes, then moves committed over it (a
 * release); when a chunk does not fit it chains a new block after the
 * full one. The thread reads up to committed, and is done with a block
 * once it has read all of it and a next one is chained (the loop is done
 * with it too): it hands the block back as the spare, which the loop takes
 * for its next one instead of a new one (the one spare it replaces is
 * freed). So a call costs the loop its copies and two atomic adds, no malloc, no
 * lock, no wake-up: the thread is woken (under mu) only when a batch's
 * worth of spans is queued while it sleeps (any span, with a schedule
 * delay of 0).
 */
typedef struct tp_block {
    _Atomic(struct tp_block *) next;
    atomic_size_t committed;
    size_t cap;
    max_align_t data[];
} tp_block_t;

#define BLOCK_BYTES (64 * 1024 - 64)

/* The exporter thread's nice value, over the process's. */
#define EXPORT_NICE 10

struct tp_otlp {
    char *url;
    bool payloads;
    tp_otlp_proto_t proto;
    uint64_t timeout_ms, delay_ms;
    size_t max_queue, max_batch;
    struct curl_slist *headers;
    char *prefix;                   /* JSON: the request body up to the spans' '[' (resource and scope) */
    tp_buf_t pb_resource, pb_scope; /* protobuf: ResourceSpans' field 1 and ScopeSpans' field 1, framed */
    /* the loop's: the ids of calls' spans, the block it writes */
    uint64_t rng;
    tp_block_t *wr;
    /* the thread's: the block it reads, and where */
    tp_block_t *rd;
    size_t rd_off;
    /* a block of BLOCK_BYTES the thread has read, handed back for the loop's next one */
    _Atomic(tp_block_t *) spare;
    /* shared */
    atomic_size_t queued; /* spans */
    atomic_bool sleeping; /* the thread waits on cv for a batch */
    time_t rejected_said; /* when a partial success was last logged (the thread's own) */
    _Atomic uint64_t exported, dropped;
    pthread_mutex_t mu; /* with cv: the thread's sleep, and stopping */
    pthread_cond_t cv;
    bool stopping;
    pthread_t thread;
};

static uint64_t env_ms(const char *specific, const char *general, uint64_t dflt)
{
    const char *v = getenv(specific);
    if (v == NULL || !*v)
        v = general ? getenv(general) : NULL;
    if (v == NULL || !*v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-') {
        tp_log_warn("otlp.bad_setting", "%s: expected a whole number, got \"%s\"; using %llu",
                    getenv(specific) ? specific : general, v, (unsigned long long)dflt);
        return dflt;
    }
    return n;
}

static int hexdigit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* s[0..n) percent-decoded and trimmed of blanks, into out (NUL-terminated). -1: a bad escape. */
static int decode(const char *s, size_t n, tp_buf_t *out)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    tp_buf_reset(out);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexdigit(s[i + 1]), lo = hexdigit(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        tp_buf_append(out, &c, 1);
    }
    return tp_buf_append(out, "", 1);
}

/*
 * Walks a "k=v,k2=v2" list (OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS:
 * keys and values percent-decoded), calling each(ctx, key, value). -1 when
 * an item is not k=v or an escape is bad: the caller ignores the whole list,
 * as the specification says.
 */
static int each_pair(const char *list, void (*each)(void *ctx, const char *k, const char *v), void *ctx)
{
    tp_buf_t k = {0}, v = {0};
    int rc = 0;
    for (const char *p = list; rc == 0 && p && *p;) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (eq == NULL || eq == p || decode(p, (size_t)(eq - p), &k) < 0 ||
            decode(eq + 1, (size_t)(end - eq - 1), &v) < 0 || k.len <= 1)
            rc = -1;
        else if (each)
            each(ctx, (const char *)k.data, (const char *)v.data);
        p = comma ? comma + 1 : NULL;
    }
    tp_buf_free(&k);
    tp_buf_free(&v);
    return rc;
}

typedef struct {
    tp_buf_t *b, *pb;    /* JSON, and protobuf (the Resource's body) */
    const char *service; /* OTEL_SERVICE_NAME, which wins over a service.name here */
    const char *found_service;
} resource_ctx_t;

static void put_resource_attr(void *ctx, const char *k, const char *v)
{
    resource_ctx_t *rc = ctx;
    if (strcmp(k, "service.name") == 0)
        return; /* written once, first */
    tp_buf_puts(rc->b, ",{\"key\":");
    tp_json_put_string(rc->b, k, strlen(k));
    tp_buf_puts(rc->b, ",\"value\":{\"stringValue\":");
    tp_json_put_string(rc->b, v, strlen(v));
    tp_buf_puts(rc->b, "}}");
    tp_otlp_pb_attr_str(rc->pb, 1, k, v, strlen(v));
}

static void find_service(void *ctx, const char *k, const char *v)
{
    resource_ctx_t *rc = ctx;
    if (strcmp(k, "service.name") == 0 && *v) {
        free((char *)rc->found_service);
        rc->found_service = strdup(v);
    }
}

static void add_header(void *ctx, const char *k, const char *v)
{
    struct curl_slist **h = ctx;
    size_t n = strlen(k) + strlen(v) + 3;
    char *line = malloc(n);
    if (line == NULL)
        return;
    snprintf(line, n, "%s: %s", k, v);
    struct curl_slist *nh = tp_curl.slist_append(*h, line);
    if (nh)
        *h = nh;
    free(line);
}

/*
 * The body's start: the resource (service.name, then OTEL_RESOURCE_ATTRIBUTES) and the scope,
 * into o->prefix (JSON) and o->pb_resource and o->pb_scope (protobuf). -1: out of memory.
 */
static int make_prefix(tp_otlp_t *o)
{
    tp_buf_t b = {0}, pb = {0}, scope = {0};
    resource_ctx_t rc = {.b = &b, .pb = &pb, .service = getenv("OTEL_SERVICE_NAME")};
    const char *attrs = getenv("OTEL_RESOURCE_ATTRIBUTES");
    if (attrs && each_pair(attrs, NULL, NULL) < 0) {
        tp_log_warn("otlp.bad_resource_attributes",
                    "OTEL_RESOURCE_ATTRIBUTES: not a list of key=value pairs (percent-encoded); ignored");
        attrs = NULL;
    }
    if (attrs)
        each_pair(attrs, find_service, &rc);
    const char *service = rc.service && *rc.service ? rc.service : rc.found_service ? rc.found_service : "toolpool";
    tp_buf_puts(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{"
                    "\"stringValue\":");
    tp_json_put_string(&b, service, strlen(service));
    tp_buf_puts(&b, "}},{\"key\":\"telemetry.sdk.name\",\"value\":{\"stringValue\":\"toolpool\"}},"
                    "{\"key\":\"telemetry.sdk.language\",\"value\":{\"stringValue\":\"cpp\"}}");
    tp_otlp_pb_attr_str(&pb, 1, "service.name", service, strlen(service));
    tp_otlp_pb_attr_str(&pb, 1, "telemetry.sdk.name", "toolpool", 8);
    tp_otlp_pb_attr_str(&pb, 1, "telemetry.sdk.language", "cpp", 3);
    if (attrs)
        each_pair(attrs, put_resource_attr, &rc);
    free((char *)rc.found_service);
    tp_buf_puts(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"toolpool\",\"version\":\"" TP_VERSION "\"},\"spans\":[");
    /* InstrumentationScope: 1 name, 2 version */
    tp_buf_append(&scope, "\x0a\x08toolpool\x12", 11);
    uint8_t vn = (uint8_t)(sizeof TP_VERSION - 1);
    tp_buf_append(&scope, &vn, 1);
    tp_buf_append(&scope, TP_VERSION, sizeof TP_VERSION - 1);
    tp_otlp_pb_submessage(&o->pb_resource, 1, &pb);
    tp_otlp_pb_submessage(&o->pb_scope, 1, &scope);
    int rc_ = tp_buf_append(&b, "", 1);
    bool ok = rc_ == 0 && pb.data && scope.data && o->pb_resource.data && o->pb_scope.data;
    tp_buf_free(&pb);
    tp_buf_free(&scope);
    if (!ok) {
        tp_buf_free(&b);
        return -1;
    }
    o->prefix = (char *)b.data;
    return 0;
}

/*
 * The traces endpoint: --otlp as given when it names /v1/traces, else the
 * base with /v1/traces appended; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is;
 * OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended. NULL: export off.
 */
static char *endpoint_of(const char *opt, const char **from)
{
    const char *base = NULL;
    *from = "--otlp";
    if (opt) {
        size_t n = strlen(opt);
        if (n >= 10 && strcmp(opt + n - 10, "/v1/traces") == 0)
            return strdup(opt);
        base = opt;
    } else {
        const char *v = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        *from = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
        if (v && *v)
            return strdup(v);
        base = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
        *from = "OTEL_EXPORTER_OTLP_ENDPOINT";
        if (base == NULL || !*base)
            return NULL;
    }
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    char *url = malloc(n + 11);
    if (url) {
        memcpy(url, base, n);
        memcpy(url + n, "/v1/traces", 11);
    }
    return url;
}

/* The collector's answer is kept up to this much: a partial success is a few bytes. */
#define ANSWER_MAX 65536

static size_t answer_cb(char *p, size_t size, size_t n, void *ctx)
{
    tp_buf_t *b = ctx;
    if (b->len < ANSWER_MAX)
        tp_buf_append(b, p, size * n < ANSWER_MAX - b->len ? size * n : ANSWER_MAX - b->len);
    return size * n;
}

/*
 * The next field at *p (before end): its number, and its varint value or
 * its bytes (LEN); false at the end, or at a field of another wire type
 * (an answer this does not read).
 */
static bool pb_field(const uint8_t **p, const uint8_t *end, uint64_t *field, uint64_t *v, const uint8_t **bytes)
{
    uint64_t key;
    if (*p >= end || !tp_pb_get_varint(p, end, 10, &key) || !tp_pb_get_varint(p, end, 10, v))
        return false;
    *field = key >> 3;
    *bytes = NULL;
    if ((key & 7) == TP_PB_VARINT)
        return true;
    if ((key & 7) != TP_PB_LEN || *v > (uint64_t)(end - *p))
        return false;
    *bytes = *p;
    *p += *v;
    return true;
}

/*
 * The spans an ExportTraceServiceResponse says the collector rejected
 * (partial_success.rejected_spans), its error_message in msg; 0 for an
 * answer that says none, or that cannot be read (a full success may come
 * with no body, or one that is not OTLP's).
 */
static uint64_t rejected_spans(const uint8_t *a, size_t n, bool pb, char *msg, size_t cap)
{
    uint64_t rejected = 0;
    msg[0] = '\0';
    if (!pb) {
        json_t *doc = json_loadb((const char *)a, n, 0, NULL);
        json_t *ps = json_object_get(doc, "partialSuccess"), *r = json_object_get(ps, "rejectedSpans");
        const char *m = json_string_value(json_object_get(ps, "errorMessage"));
        if (json_is_integer(r) && json_integer_value(r) > 0)
            rejected = (uint64_t)json_integer_value(r);
        else if (json_is_string(r)) /* proto3's JSON: an int64 as a string */
            rejected = strtoull(json_string_value(r), NULL, 10);
        snprintf(msg, cap, "%s", m ? m : "");
        json_decref(doc);
        return rejected;
    }
    /* ExportTraceServiceResponse: partial_success (1) {rejected_spans (1), error_message (2)} */
    const uint8_t *p = a, *end = a + n, *ps, *b;
    uint64_t f, v;
    while (pb_field(&p, end, &f, &v, &ps)) {
        if (f != 1 || ps == NULL)
            continue;
        const uint8_t *q = ps, *ps_end = ps + v;
        while (pb_field(&q, ps_end, &f, &v, &b)) {
            if (f == 1 && b == NULL)
                rejected = (int64_t)v > 0 ? v : 0;
            else if (f == 2 && b)
                snprintf(msg, cap, "%.*s", (int)v, (const char *)b);
        }
    }
    return rejected;
}

/*
 * POSTs one body of spans spans: true when the collector took it (2xx);
 * *rejected then the spans of it a partial success refused.
 */
static bool post(tp_otlp_t *o, CURL *h, const uint8_t *body, size_t len, size_t spans, bool *was_failing,
                 tp_buf_t *answer, uint64_t *rejected)
{
    tp_curl.easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)body);
    tp_curl.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    tp_buf_reset(answer);
    *rejected = 0;
    CURLcode rc = tp_curl.easy_perform(h);
    long status = 0;
    if (rc == CURLE_OK)
        tp_curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    bool ok = rc == CURLE_OK && status >= 200 && status < 300;
    if (!ok && !*was_failing) {
        if (rc != CURLE_OK)
            tp_log_warn("otlp.export_failed", "otlp: export to %s failed: %s; spans are dropped until it answers",
                        o->url, tp_curl.easy_strerror(rc));
        else
            tp_log_warn("otlp.export_refused",
                        "otlp: export to %s answered HTTP %ld; spans are dropped until it takes them", o->url, status);
    } else if (ok && *was_failing) {
        tp_log_warn("otlp.export_recovered", "otlp: export to %s works again", o->url);
    }
    *was_failing = !ok;
    if (ok && answer->len > 0) {
        char msg[256];
        uint64_t r = rejected_spans(answer->data, answer->len, o->proto == TP_OTLP_PROTOBUF, msg, sizeof msg);
        *rejected = r < spans ? r : spans;
        /* Said the first time, then at most once a minute: a collector that refuses some refuses many. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (*rejected > 0 && (o->rejected_said == 0 || now.tv_sec - o->rejected_said >= 60)) {
            o->rejected_said = now.tv_sec ? now.tv_sec : 1;
            tp_log_warn("otlp.spans_rejected", "otlp: %s took a request but rejected %llu of its %zu spans: %s", o->url,
                        (unsigned long long)*rejected, spans, msg[0] ? msg : "(no message)");
        }
    }
    return ok;
}

static void deadline_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static bool past(const struct timespec *ts)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > ts->tv_sec || (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

/* The next chunk the thread reads, freeing the blocks it is done with; NULL: none yet. */
static tp_chunk_t *peek(tp_otlp_t *o)
{
    for (;;) {
        size_t committed = atomic_load_explicit(&o->rd->committed, memory_order_acquire);
        if (o->rd_off < committed)
            return (tp_chunk_t *)((char *)o->rd->data + o->rd_off);
        tp_block_t *next = atomic_load_explicit(&o->rd->next, memory_order_acquire);
        if (next == NULL)
            return NULL;
        /* the loop committed its last chunk here before it chained next */
        if (o->rd_off < atomic_load_explicit(&o->rd->committed, memory_order_acquire))
            continue;
        /* read: handed back to the loop (a long one, or the spare it replaces, freed) */
        tp_block_t *done = o->rd;
        if (done->cap == BLOCK_BYTES)
            done = atomic_exchange(&o->spare, done);
        free(done);
        o->rd = next;
        o->rd_off = 0;
    }
}

/*
 * Waits (holding mu) for a batch's worth of spans, stopping, or the
 * schedule delay. A delay of 0 sends each span as soon as it can: the
 * thread then waits for the first span queued (the loop wakes it), not for
 * a clock, so an idle exporter does not spin.
 */
static void wait_batch(tp_otlp_t *o)
{
    struct timespec wake;
    deadline_in(&wake, o->delay_ms);
    for (;;) {
        atomic_store(&o->sleeping, true);
        size_t queued = atomic_load(&o->queued);
        if (o->stopping || queued >= o->max_batch || (o->delay_ms == 0 && queued > 0))
            break;
        if (o->delay_ms == 0)
            pthread_cond_wait(&o->cv, &o->mu);
        else if (pthread_cond_timedwait(&o->cv, &o->mu, &wake) == ETIMEDOUT)
            break;
    }
    atomic_store(&o->sleeping, false);
}

/*
 * The exporter: waits for a batch's worth of spans or the schedule delay,
 * takes up to a batch off the queue, renders and POSTs it. After a failed
 * POST the collector is left alone for a second (doubling to 30 s while
 * it keeps failing): the batches taken meanwhile are dropped unrendered,
 * so a collector that is down costs next to nothing. Once stopping, it
 * sends what is left until the export timeout has passed, then drops the
 * rest.
 */
static void *export_main(void *arg)
{
    tp_otlp_t *o = arg;
    pthread_setname_np(pthread_self(), "toolpool-otlp"); /* top and perf tell it from the loop */
    /*
     * Below the loop and the workers when the cores are short: the export
     * takes what they leave (a thread's nice value is its own on Linux).
     */
    errno = 0;
    int nice_now = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (errno == 0)
        setpriority(PRIO_PROCESS, (id_t)gettid(), nice_now + EXPORT_NICE > 19 ? 19 : nice_now + EXPORT_NICE);
    tp_buf_t answer = {0};
    CURL *h = tp_curl.easy_init();
    if (h) {
        tp_curl.easy_setopt(h, CURLOPT_URL, o->url);
        tp_curl.easy_setopt(h, CURLOPT_HTTPHEADER, o->headers);
        tp_curl.easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
        tp_curl.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        tp_curl.easy_setopt(h, CURLOPT_WRITEFUNCTION, answer_cb);
        tp_curl.easy_setopt(h, CURLOPT_WRITEDATA, &answer);
    }
    bool pb = o->proto == TP_OTLP_PROTOBUF;
    size_t head_room = tp_otlp_pb_head_room(&o->pb_resource, &o->pb_scope);
    tp_buf_t body = {0};
    bool failing = false, stop_set = false;
    uint64_t retry_ms = 0;
    struct timespec retry_at = {0};
    struct timespec stop_by = {0};
    for (;;) {
        pthread_mutex_lock(&o->mu);
        wait_batch(o);
        bool stopping = o->stopping;
        pthread_mutex_unlock(&o->mu);
        if (stopping && !stop_set) {
            deadline_in(&stop_by, o->timeout_ms);
            stop_set = true;
        }
        tp_chunk_t *c = peek(o);
        if (c == NULL) {
            if (stopping)
                break;
            continue;
        }
        /* Past the exit's time, or while a failed collector is left alone: dropped, not even rendered. */
        bool skip = (stop_set && past(&stop_by)) || (failing && !past(&retry_at));
        /* protobuf: the spans after room for the request's head, written once their length is known */
        tp_buf_reset(&body);
        int rc = pb ? tp_buf_reserve(&body, head_room) : tp_buf_puts(&body, o->prefix);
        if (pb && rc == 0)
            body.len = head_room;
        size_t spans = 0;
        for (; c && (spans == 0 || spans + c->spans <= o->max_batch); c = peek(o)) {
            if (!skip && rc == 0 && pb)
                tp_otlp_render_pb(&body, &c->rec, &c->tc, o->payloads, c->end_ns);
            else if (!skip && rc == 0)
                tp_otlp_render(&body, &c->rec, &c->tc, o->payloads, c->end_ns);
            spans += c->spans;
            o->rd_off += c->size;
        }
        atomic_fetch_sub(&o->queued, spans);
        const uint8_t *start = body.data;
        if (rc == 0 && pb)
            start = tp_otlp_pb_head(body.data + head_room, &o->pb_resource, &o->pb_scope, body.len - head_room);
        else if (rc == 0)
            rc = tp_buf_puts(&body, "]}]}]}");
        uint64_t rejected = 0;
        bool ok = !skip && h && rc == 0 && body.data &&
                  post(o, h, start, body.len - (size_t)(start - body.data), spans, &failing, &answer, &rejected);
        if (!skip && failing) {
            /* tried again once a second, doubling to 30 s, as long as it fails */
            retry_ms = retry_ms ? (retry_ms * 2 > 30000 ? 30000 : retry_ms * 2) : 1000;
            deadline_in(&retry_at, retry_ms);
        } else if (ok) {
            retry_ms = 0;
        }
        atomic_fetch_add(ok ? &o->exported : &o->dropped, spans - rejected);
        atomic_fetch_add(&o->dropped, rejected);
    }
    tp_buf_free(&body);
    tp_buf_free(&answer);
    if (h)
        tp_curl.easy_cleanup(h);
    return NULL;
}

static tp_block_t *block_new(size_t need)
{
    size_t cap = need > BLOCK_BYTES ? need : BLOCK_BYTES;
    tp_block_t *b = malloc(sizeof *b + cap);
    if (b) {
        atomic_init(&b->next, NULL);
        atomic_init(&b->committed, 0);
        b->cap = cap;
    }
    return b;
}

static void free_blocks(tp_block_t *b)
{
    while (b) {
        tp_block_t *next = atomic_load(&b->next);
        free(b);
        b = next;
    }
}

int tp_otlp_protocol(const char *s, const char *from, tp_otlp_proto_t *out)
{
    if (strcmp(s, "http/protobuf") == 0) {
        *out = TP_OTLP_PROTOBUF;
    } else if (strcmp(s, "http/json") == 0) {
        *out = TP_OTLP_JSON;
    } else if (strcmp(s, "grpc") == 0) {
        tp_log_warn("otlp.grpc_not_offered",
                    "%s: grpc is not offered; exporting over OTLP/HTTP with protobuf (http/protobuf) instead: "
                    "point it at the collector's HTTP port (4318), not its gRPC one (4317)",
                    from);
        *out = TP_OTLP_PROTOBUF;
    } else {
        return -1;
    }
    return 0;
}

/* The protocol: --otlp-protocol, else OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL. */
static tp_otlp_proto_t protocol_of(const tp_otlp_opts_t *opts)
{
    if (opts->protocol_set)
        return opts->protocol;
    const char *names[] = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"};
    for (size_t i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        tp_otlp_proto_t p;
        if (v == NULL || !*v)
            continue;
        if (tp_otlp_protocol(v, names[i], &p) == 0)
            return p;
        tp_log_warn("otlp.bad_setting",
                    "%s: expected http/protobuf, http/json or grpc, got \"%s\"; using http/protobuf", names[i], v);
        return TP_OTLP_PROTOBUF;
    }
    return TP_OTLP_PROTOBUF;
}

int tp_otlp_start(const tp_otlp_opts_t *opts, tp_otlp_t **out)
{
    *out = NULL;
    const char *from;
    const char *disabled = getenv("OTEL_SDK_DISABLED"), *exporter = getenv("OTEL_TRACES_EXPORTER");
    if (opts->url == NULL &&
        ((disabled && strcasecmp(disabled, "true") == 0) || (exporter && strcmp(exporter, "none") == 0)))
        return 0;
    char *url = endpoint_of(opts->url, &from);
    if (url == NULL)
        return opts->url ? (tp_log_error("otlp.out_of_memory", "out of memory"), -1) : 0;
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        tp_log_error("otlp.bad_url", "%s: expected an http:// or https:// URL, got \"%s\"", from, url);
        free(url);
        return -1;
    }
    char why[512];
    if (tp_curl_load(why, sizeof why) < 0) {
        tp_log_error("otlp.curl_failed", "otlp: %s: no trace export", why);
        free(url);
        return -1;
    }
    if (tp_curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        tp_log_error("otlp.curl_failed", "otlp: libcurl would not start");
        free(url);
        return -1;
    }
    tp_otlp_t *o = calloc(1, sizeof *o);
    if (o == NULL || make_prefix(o) < 0 || (o->wr = o->rd = block_new(0)) == NULL) {
        tp_log_error("otlp.out_of_memory", "out of memory");
        if (o) {
            tp_buf_free(&o->pb_resource);
            tp_buf_free(&o->pb_scope);
            free(o->prefix);
        }
        free(o);
        free(url);
        return -1;
    }
    o->url = url;
    o->payloads = opts->payloads;
    o->proto = protocol_of(opts);
    o->timeout_ms = env_ms("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", 10000);
    o->delay_ms = env_ms("OTEL_BSP_SCHEDULE_DELAY", NULL, 5000);
    o->max_queue = (size_t)env_ms("OTEL_BSP_MAX_QUEUE_SIZE", NULL, 2048);
    o->max_batch = (size_t)env_ms("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", NULL, 512);
    if (o->max_queue == 0)
        o->max_queue = 1;
    if (o->max_batch == 0 || o->max_batch > o->max_queue)
        o->max_batch = o->max_queue;
    o->headers = tp_curl.slist_append(NULL, o->proto == TP_OTLP_PROTOBUF ? "Content-Type: application/x-protobuf"
                                                                         : "Content-Type: application/json");
    /* no "Expect: 100-continue" (libcurl's for a long body): a round trip per request, or a wait for it */
    if (o->headers)
        o->headers = tp_curl.slist_append(o->headers, "Expect:");
    const char *hv = getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
    const char *hname = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
    if (hv == NULL || !*hv) {
        hv = getenv("OTEL_EXPORTER_OTLP_HEADERS");
        hname = "OTEL_EXPORTER_OTLP_HEADERS";
    }
    if (hv && *hv && each_pair(hv, NULL, NULL) < 0)
        tp_log_warn("otlp.bad_headers", "%s: not a list of key=value pairs (percent-encoded); ignored", hname);
    else if (hv && *hv)
        each_pair(hv, add_header, &o->headers);
    if (getrandom(&o->rng, sizeof o->rng, GRND_NONBLOCK) != (ssize_t)sizeof o->rng)
        o->rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)o;
    o->rng |= 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&o->thread, NULL, export_main, o);
    if (rc != 0) {
        tp_log_error("otlp.thread_failed", "otlp: no exporter thread: %s", strerror(rc));
        tp_curl.slist_free_all(o->headers);
        free_blocks(o->rd);
        tp_buf_free(&o->pb_resource);
        tp_buf_free(&o->pb_scope);
        free(o->prefix);
        free(o->url);
        free(o);
        return -1;
    }
    *out = o;
    return 0;
}

/* Copies s (NULL: none) to *at, moving it on: the copy, or NULL. */
static char *copy_str(char **at, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *to = memcpy(*at, s, n);
    *at += n;
    return to;
}

static size_t str_room(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

/* Copies s (NULL: none), of n bytes with its NUL, to *at, moving it on: the copy, or NULL. */
static char *copy_strn(char **at, const char *s, size_t n)
{
    if (s == NULL)
        return NULL;
    char *to = memcpy(*at, s, n);
    *at += n;
    return to;
}

/* The strings of a record and trace context that a chunk copies, in the order of chunk_size's room. */
enum { S_ID, S_JOB, S_TOOL, S_KIND, S_KLASS, S_MESSAGE, S_SERVED_BY, S_TRACEPARENT, S_TRACESTATE, S_RPC_ID, S__COUNT };

/* The bytes r's chunk takes, rounded up to keep the next aligned; each string's room in sroom[]. */
static size_t chunk_size(const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads, size_t sroom[S__COUNT])
{
    /* an ok call's kind, class and message are not on its spans: not copied */
    const char *strs[S__COUNT] = {r->id,
                                  r->job,
                                  r->tool,
                                  r->ok ? NULL : r->kind,
                                  r->ok ? NULL : r->klass,
                                  r->ok ? NULL : r->message,
                                  r->served_by,
                                  tc->traceparent,
                                  tc->tracestate,
                                  tc->rpc_id};
    size_t n = r->n_trace, room = sizeof(tp_chunk_t) + n * (sizeof(Toolpool__Attempt) + sizeof(Toolpool__Attempt *));
    for (size_t i = 0; i < S__COUNT; i++)
        room += sroom[i] = str_room(strs[i]);
    for (size_t i = 0; i < n; i++)
        room += str_room(r->trace[i]->tool) + str_room(r->trace[i]->outcome);
    if (payloads)
        room += r->args.len + r->result.len;
    return (room + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
}

/* r's chunk, written at c (of size bytes): the fields its spans read (sroom: chunk_size's). */
static void chunk_fill(tp_chunk_t *c, size_t size, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads,
                       const size_t sroom[S__COUNT])
{
    size_t n = r->n_trace;
    c->size = size;
    c->spans = 1;
    c->rec = (Toolpool__Result){
        .has_id = r->has_id,
        .step = r->step,
        .ok = r->ok,
        .attempts = r->attempts,
        .degraded = r->degraded,
        .stale = r->stale,
        .escalated = r->escalated,
        .duration_us = r->duration_us,
        .n_trace = n,
    };
    Toolpool__Attempt *at = (Toolpool__Attempt *)c->data;
    c->rec.trace = (Toolpool__Attempt **)(at + n);
    char *p = (char *)(c->rec.trace + n);
    for (size_t i = 0; i < n; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        at[i] = (Toolpool__Attempt){
            .attempt = t->attempt, .duration_us = t->duration_us, .backoff_us = t->backoff_us, .start_us = t->start_us};
        at[i].tool = copy_str(&p, t->tool);
        at[i].outcome = copy_str(&p, t->outcome);
        c->rec.trace[i] = &at[i];
        c->spans += 1 + (t->backoff_us > 0);
    }
    c->rec.id = copy_strn(&p, r->id, sroom[S_ID]);
    c->rec.job = copy_strn(&p, r->job, sroom[S_JOB]);
    c->rec.tool = copy_strn(&p, r->tool, sroom[S_TOOL]);
    c->rec.kind = sroom[S_KIND] ? copy_strn(&p, r->kind, sroom[S_KIND]) : NULL;
    c->rec.klass = sroom[S_KLASS] ? copy_strn(&p, r->klass, sroom[S_KLASS]) : NULL;
    c->rec.message = sroom[S_MESSAGE] ? copy_strn(&p, r->message, sroom[S_MESSAGE]) : NULL;
    c->rec.served_by = copy_strn(&p, r->served_by, sroom[S_SERVED_BY]);
    const char *tp = tc->traceparent, *ts = tc->tracestate, *rpc = tc->rpc_id;
    c->tc = *tc;
    c->tc.traceparent = copy_strn(&p, tp, sroom[S_TRACEPARENT]);
    c->tc.tracestate = copy_strn(&p, ts, sroom[S_TRACESTATE]);
    c->tc.rpc_id = copy_strn(&p, rpc, sroom[S_RPC_ID]);
    if (payloads) {
        c->rec.args = (ProtobufCBinaryData){.data = (uint8_t *)p, .len = r->args.len};
        if (r->args.len)
            memcpy(p, r->args.data, r->args.len);
        p += r->args.len;
        c->rec.result = (ProtobufCBinaryData){.data = (uint8_t *)p, .len = r->result.len};
        if (r->result.len)
            memcpy(p, r->result.data, r->result.len);
    }
}

void tp_otlp_call_begin(void *ctx, tp_trace_ctx_t *tc)
{
    tp_otlp_begin_ids(tc, &((tp_otlp_t *)ctx)->rng);
}

void tp_otlp_call_end(void *ctx, const Toolpool__Result *r, const tp_trace_ctx_t *tc)
{
    tp_otlp_t *o = ctx;
    if (tc == NULL) { /* out of memory when the call came: no ids, no spans */
        atomic_fetch_add_explicit(&o->dropped, 1, memory_order_relaxed);
        return;
    }
    size_t spans = 1;
    for (size_t i = 0; i < r->n_trace; i++)
        spans += 1 + (r->trace[i]->backoff_us > 0);
    /* the spans' room in the queue, taken before they are there: the thread never counts more than it took */
    if (atomic_fetch_add(&o->queued, spans) + spans > o->max_queue) {
        atomic_fetch_sub(&o->queued, spans);
        atomic_fetch_add_explicit(&o->dropped, spans, memory_order_relaxed);
        return;
    }
    size_t sroom[S__COUNT];
    size_t need = chunk_size(r, tc, o->payloads, sroom);
    tp_block_t *w = o->wr;
    size_t used = atomic_load_explicit(&w->committed, memory_order_relaxed);
    if (used + need > w->cap) {
        tp_block_t *nb = need <= BLOCK_BYTES ? atomic_exchange(&o->spare, NULL) : NULL;
        if (nb) {
            atomic_store_explicit(&nb->next, NULL, memory_order_relaxed);
            atomic_store_explicit(&nb->committed, 0, memory_order_relaxed);
        } else {
            nb = block_new(need);
        }
        if (nb == NULL) {
            atomic_fetch_sub(&o->queued, spans);
            atomic_fetch_add_explicit(&o->dropped, spans, memory_order_relaxed);
            return;
        }
        atomic_store_explicit(&w->next, nb, memory_order_release);
        o->wr = w = nb;
        used = 0;
    }
    tp_chunk_t *c = (tp_chunk_t *)((char *)w->data + used);
    chunk_fill(c, need, r, tc, o->payloads, sroom);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    c->end_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    atomic_store_explicit(&w->committed, used + need, memory_order_release);
    /* a batch's worth queued while the thread sleeps (any span, with a delay of 0): it is woken, once */
    if ((o->delay_ms == 0 || atomic_load(&o->queued) >= o->max_batch) && atomic_load(&o->sleeping) &&
        atomic_exchange(&o->sleeping, false)) {
        pthread_mutex_lock(&o->mu);
        pthread_cond_signal(&o->cv);
        pthread_mutex_unlock(&o->mu);
    }
}

void tp_otlp_stop(tp_otlp_t *o, uint64_t *exported, uint64_t *dropped)
{
    *exported = *dropped = 0;
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stopping = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    *exported = atomic_load(&o->exported);
    *dropped = atomic_load(&o->dropped);
    free_blocks(o->rd);
    free(atomic_load(&o->spare));
    tp_buf_free(&o->pb_resource);
    tp_buf_free(&o->pb_scope);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    tp_curl.slist_free_all(o->headers);
    free(o->prefix);
    free(o->url);
    free(o);
    tp_curl.global_cleanup();
}

void tp_otlp_counts(const tp_otlp_t *o, uint64_t *exported, uint64_t *dropped)
{
    *exported = atomic_load(&((tp_otlp_t *)o)->exported);
    *dropped = atomic_load(&((tp_otlp_t *)o)->dropped);
}
