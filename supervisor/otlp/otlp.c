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
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "json.h"
#include "log.h"
#include "otlp_internal.h"

#ifndef TP_VERSION
#define TP_VERSION "0"
#endif

/*
 * A call waiting in the queue: a copy of what its spans say of its record
 * and trace context, in one block (the strings and trace entries after the
 * struct, the copy's pointers into them; args and result only with
 * --otlp-payloads), and when it ended. The exporter thread renders it: the
 * loop's share is one malloc and the copies. (Packing the record as the
 * store does, and unpacking it on the thread, cost twice the CPU.)
 */
typedef struct tp_chunk {
    struct tp_chunk *next;
    size_t spans;
    uint64_t end_ns;
    Toolpool__Result rec;
    tp_trace_ctx_t tc;
    max_align_t data[];
} tp_chunk_t;

struct tp_otlp {
    char *url;
    bool payloads;
    uint64_t timeout_ms, delay_ms;
    size_t max_queue, max_batch;
    struct curl_slist *headers;
    char *prefix; /* the request body up to the spans' '[' (resource and scope) */
    /* the loop's: the ids of calls' spans */
    uint64_t rng;
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tp_chunk_t *head, *tail;
    size_t queued; /* spans */
    bool stopping;
    uint64_t exported, dropped;
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
    tp_buf_t *b;
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
    struct curl_slist *nh = curl_slist_append(*h, line);
    if (nh)
        *h = nh;
    free(line);
}

/* The body's start: the resource (service.name, then OTEL_RESOURCE_ATTRIBUTES) and the scope. */
static char *make_prefix(void)
{
    tp_buf_t b = {0};
    resource_ctx_t rc = {.b = &b, .service = getenv("OTEL_SERVICE_NAME")};
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
    if (attrs)
        each_pair(attrs, put_resource_attr, &rc);
    free((char *)rc.found_service);
    tp_buf_puts(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"toolpool\",\"version\":\"" TP_VERSION "\"},\"spans\":[");
    if (tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
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

static size_t discard_cb(char *p, size_t size, size_t n, void *ctx)
{
    return size * n;
}

/* POSTs one body: true when the collector took it (2xx). */
static bool post(tp_otlp_t *o, CURL *h, const tp_buf_t *body, bool *was_failing)
{
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)body->data);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    bool ok = rc == CURLE_OK && status >= 200 && status < 300;
    if (!ok && !*was_failing) {
        if (rc != CURLE_OK)
            tp_log_warn("otlp.export_failed", "otlp: export to %s failed: %s; spans are dropped until it answers",
                        o->url, curl_easy_strerror(rc));
        else
            tp_log_warn("otlp.export_refused",
                        "otlp: export to %s answered HTTP %ld; spans are dropped until it takes them", o->url, status);
    } else if (ok && *was_failing) {
        tp_log_warn("otlp.export_recovered", "otlp: export to %s works again", o->url);
    }
    *was_failing = !ok;
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

/* Renders c's spans onto body (after a comma when spans are there already). */
static void render_chunk(tp_otlp_t *o, const tp_chunk_t *c, tp_buf_t *body)
{
    tp_otlp_render(body, &c->rec, &c->tc, o->payloads, c->end_ns);
}

/*
 * The exporter: waits for a batch's worth of spans or the schedule delay,
 * takes up to a batch off the queue, and POSTs it. After a failed POST the
 * collector is left alone for a second (doubling to 30 s while it keeps
 * failing): the batches taken meanwhile are dropped unrendered, so a
 * collector that is down costs next to nothing. Once stopping, it sends
 * what is left until the export timeout has passed, then drops the rest.
 */
static void *export_main(void *arg)
{
    tp_otlp_t *o = arg;
    CURL *h = curl_easy_init();
    if (h) {
        curl_easy_setopt(h, CURLOPT_URL, o->url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, o->headers);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_cb);
    }
    tp_buf_t body = {0};
    bool failing = false, stop_set = false;
    uint64_t retry_ms = 0;
    struct timespec retry_at = {0};
    struct timespec stop_by = {0};
    pthread_mutex_lock(&o->mu);
    for (;;) {
        struct timespec wake;
        deadline_in(&wake, o->delay_ms);
        while (!o->stopping && o->queued < o->max_batch)
            if (pthread_cond_timedwait(&o->cv, &o->mu, &wake) == ETIMEDOUT)
                break;
        if (o->stopping && !stop_set) {
            deadline_in(&stop_by, o->timeout_ms);
            stop_set = true;
        }
        if (o->queued == 0) {
            if (o->stopping)
                break;
            continue;
        }
        tp_chunk_t *take = o->head, *last = NULL;
        size_t spans = 0;
        for (tp_chunk_t *c = o->head; c && (spans == 0 || spans + c->spans <= o->max_batch); c = c->next) {
            spans += c->spans;
            last = c;
        }
        o->head = last->next;
        if (o->head == NULL)
            o->tail = NULL;
        last->next = NULL;
        o->queued -= spans;
        /* Past the exit's time, or while a failed collector is left alone: dropped, not even rendered. */
        bool skip = (stop_set && past(&stop_by)) || (failing && !past(&retry_at));
        pthread_mutex_unlock(&o->mu);

        tp_buf_reset(&body);
        tp_buf_puts(&body, o->prefix);
        for (tp_chunk_t *c = take, *next; c; c = next) {
            next = c->next;
            if (!skip)
                render_chunk(o, c, &body);
            free(c);
        }
        int rc = tp_buf_puts(&body, "]}]}]}");
        bool ok = !skip && h && rc == 0 && post(o, h, &body, &failing);
        if (!skip && failing) {
            /* tried again once a second, doubling to 30 s, as long as it fails */
            retry_ms = retry_ms ? (retry_ms * 2 > 30000 ? 30000 : retry_ms * 2) : 1000;
            deadline_in(&retry_at, retry_ms);
        } else if (ok) {
            retry_ms = 0;
        }

        pthread_mutex_lock(&o->mu);
        if (ok)
            o->exported += spans;
        else
            o->dropped += spans;
    }
    pthread_mutex_unlock(&o->mu);
    tp_buf_free(&body);
    if (h)
        curl_easy_cleanup(h);
    return NULL;
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
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        tp_log_error("otlp.curl_failed", "otlp: libcurl would not start");
        free(url);
        return -1;
    }
    tp_otlp_t *o = calloc(1, sizeof *o);
    if (o == NULL || (o->prefix = make_prefix()) == NULL) {
        tp_log_error("otlp.out_of_memory", "out of memory");
        free(o);
        free(url);
        return -1;
    }
    o->url = url;
    o->payloads = opts->payloads;
    o->timeout_ms = env_ms("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", 10000);
    o->delay_ms = env_ms("OTEL_BSP_SCHEDULE_DELAY", NULL, 5000);
    o->max_queue = (size_t)env_ms("OTEL_BSP_MAX_QUEUE_SIZE", NULL, 2048);
    o->max_batch = (size_t)env_ms("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", NULL, 512);
    if (o->max_queue == 0)
        o->max_queue = 1;
    if (o->max_batch == 0 || o->max_batch > o->max_queue)
        o->max_batch = o->max_queue;
    o->headers = curl_slist_append(NULL, "Content-Type: application/json");
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
        curl_slist_free_all(o->headers);
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

/*
 * The chunk of r: the fields its spans read, in one block. NULL when out
 * of memory.
 */
static tp_chunk_t *chunk_of(const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads)
{
    const char *strs[] = {r->id,      r->job,       r->tool,         r->kind,        r->klass,
                          r->message, r->served_by, tc->traceparent, tc->tracestate, tc->rpc_id};
    size_t n = r->n_trace, room = n * (sizeof(Toolpool__Attempt) + sizeof(Toolpool__Attempt *));
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        room += str_room(strs[i]);
    for (size_t i = 0; i < n; i++)
        room += str_room(r->trace[i]->tool) + str_room(r->trace[i]->outcome);
    if (payloads)
        room += r->args.len + r->result.len;
    tp_chunk_t *c = malloc(sizeof *c + room);
    if (c == NULL)
        return NULL;
    c->next = NULL;
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
    c->rec.id = copy_str(&p, r->id);
    c->rec.job = copy_str(&p, r->job);
    c->rec.tool = copy_str(&p, r->tool);
    c->rec.kind = copy_str(&p, r->kind);
    c->rec.klass = copy_str(&p, r->klass);
    c->rec.message = copy_str(&p, r->message);
    c->rec.served_by = copy_str(&p, r->served_by);
    c->tc = *tc;
    c->tc.traceparent = copy_str(&p, strs[7]);
    c->tc.tracestate = copy_str(&p, strs[8]);
    c->tc.rpc_id = copy_str(&p, strs[9]);
    if (payloads) {
        c->rec.args = (ProtobufCBinaryData){.data = (uint8_t *)p, .len = r->args.len};
        if (r->args.len)
            memcpy(p, r->args.data, r->args.len);
        p += r->args.len;
        c->rec.result = (ProtobufCBinaryData){.data = (uint8_t *)p, .len = r->result.len};
        if (r->result.len)
            memcpy(p, r->result.data, r->result.len);
    }
    return c;
}

void tp_otlp_call_begin(void *ctx, tp_trace_ctx_t *tc)
{
    tp_otlp_begin_ids(tc, &((tp_otlp_t *)ctx)->rng);
}

void tp_otlp_call_end(void *ctx, const Toolpool__Result *r, const tp_trace_ctx_t *tc)
{
    tp_otlp_t *o = ctx;
    if (tc == NULL) { /* out of memory when the call came: no ids, no spans */
        pthread_mutex_lock(&o->mu);
        o->dropped++;
        pthread_mutex_unlock(&o->mu);
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    size_t spans = 1;
    for (size_t i = 0; i < r->n_trace; i++)
        spans += 1 + (r->trace[i]->backoff_us > 0);
    pthread_mutex_lock(&o->mu);
    bool full = o->queued + spans > o->max_queue;
    pthread_mutex_unlock(&o->mu);
    tp_chunk_t *c = full ? NULL : chunk_of(r, tc, o->payloads);
    if (c)
        c->end_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    pthread_mutex_lock(&o->mu);
    if (c == NULL || o->queued + spans > o->max_queue) {
        o->dropped += spans;
        pthread_mutex_unlock(&o->mu);
        free(c);
        return;
    }
    if (o->tail)
        o->tail->next = c;
    else
        o->head = c;
    o->tail = c;
    o->queued += spans;
    if (o->queued >= o->max_batch)
        pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
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
    *exported = o->exported;
    *dropped = o->dropped;
    for (tp_chunk_t *c = o->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    curl_slist_free_all(o->headers);
    free(o->prefix);
    free(o->url);
    free(o);
    curl_global_cleanup();
}

void tp_otlp_counts(const tp_otlp_t *o, uint64_t *exported, uint64_t *dropped)
{
    pthread_mutex_lock((pthread_mutex_t *)&o->mu);
    *exported = o->exported;
    *dropped = o->dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&o->mu);
}
