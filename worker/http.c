/*
 * http adapter: one HTTP request a call, made with libcurl (loaded as the
 * worker starts when the registry has http tools, tp_http_preload, else at
 * the first call: curllib.h). The worker
 * holds many calls at once: each is a transfer on one multi handle, which
 * the worker's loop drives (tp_http_wait) while it reads more Calls, and
 * each answers when it ends, in whatever order they end. The multi
 * handle keeps the connections open and reuses them from call to call
 * (HTTP/2, multiplexed, where a TLS server offers it); an ended
 * transfer's easy handle is kept for the next.
 *
 * The request: the URL's {NAME} placeholders take the args' values,
 * percent-encoded; the args "query" names go as the query string; the
 * rest of the args go as a JSON object body for POST, PUT and PATCH (for
 * GET and DELETE too when the tool says "body": "args").
 *
 * The answer, by status (docs/guide.md has the table): 2xx ok, its body
 * the result (JSON as it is, other text a string, nothing null); 429
 * RateLimited, 408 Timeout, 500/502/503/504 ServerError (transient); 400
 * and 422 BadArguments, 401 and 403 PermissionDenied, 404 and 410
 * NotFound, anything else ToolError. A body in the tool error convention
 * ({"error": KIND, "message": ...}) names the kind itself. A body past
 * the tool's output limit is OutputTooLarge, as for every adapter. Retry-After,
 * in either form, becomes retry_after_ms. A failure's message is the
 * status line and the body's start, so the model reads what the API said;
 * never the URL or a header, which may hold a secret.
 */
#include "adapter.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "curllib.h"
#include "json.h"

/* Bytes of a failure's body a message quotes. */
#define TP_HTTP_QUOTE 2048
/* Redirects followed at most. */
#define TP_HTTP_REDIRECTS 5

typedef struct {
    tp_buf_t body;
    uint64_t max; /* 0: no limit */
    bool too_big;
    long retry_after_ms; /* -1: none */
    char reason[128];    /* the status line's reason phrase, of the last response */
} reply_t;

static size_t body_cb(char *data, size_t size, size_t n, void *ctx)
{
    reply_t *r = ctx;
    size_t len = size * n;
    if (r->max && r->body.len + len > r->max) {
        r->too_big = true;
        return 0; /* curl ends the transfer: CURLE_WRITE_ERROR */
    }
    return tp_buf_append(&r->body, data, len) < 0 ? 0 : len;
}

/* Retry-After in either form: delta-seconds, or an HTTP-date. */
static long retry_after(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    char *end;
    long s = strtol(v, &end, 10);
    if (end != v && (*end == 0 || *end == '\r' || *end == '\n' || *end == ' '))
        return s < 0 ? -1 : s > (long)(TP_RETRY_AFTER_MAX_MS / 1000) ? (long)TP_RETRY_AFTER_MAX_MS : s * 1000;
    time_t at = tp_curl.getdate(v, NULL);
    if (at < 0)
        return -1;
    time_t now = time(NULL);
    return at <= now                                           ? 0
           : at - now > (time_t)(TP_RETRY_AFTER_MAX_MS / 1000) ? (long)TP_RETRY_AFTER_MAX_MS
                                                               : (long)(at - now) * 1000;
}

/* Each header line of a response (of every response, redirects too: the last one's count). */
static size_t header_cb(char *data, size_t size, size_t n, void *ctx)
{
    reply_t *r = ctx;
    size_t len = size * n;
    if (len > 5 && strncmp(data, "HTTP/", 5) == 0) {
        /* A new response: "HTTP/1.1 503 Service Unavailable\r\n" */
        r->retry_after_ms = -1;
        r->reason[0] = 0;
        const char *sp = memchr(data, ' ', len);
        const char *sp2 = sp ? memchr(sp + 1, ' ', len - (size_t)(sp + 1 - data)) : NULL;
        if (sp2) {
            size_t rl = len - (size_t)(sp2 + 1 - data);
            while (rl > 0 && (sp2[rl] == '\r' || sp2[rl] == '\n' || sp2[rl] == 0))
                rl--;
            snprintf(r->reason, sizeof r->reason, "%.*s", (int)rl, sp2 + 1);
        }
    } else if (len > 12 && strncasecmp(data, "retry-after:", 12) == 0) {
        char v[128];
        snprintf(v, sizeof v, "%.*s", (int)(len - 12), data + 12);
        r->retry_after_ms = retry_after(v);
    }
    return len;
}

/* An arg as URL text: a string as it is, any other value as its JSON. */
static char *arg_text(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Appends the arg's value, percent-encoded. */
static int put_escaped(CURL *easy, tp_buf_t *b, const json_t *v)
{
    char *text = arg_text(v);
    char *esc = text ? tp_curl.easy_escape(easy, text, 0) : NULL;
    int rc = esc ? tp_buf_puts(b, esc) : -1;
    tp_curl.free(esc);
    free(text);
    return rc;
}

/*
 * The URL with its placeholders filled and the query appended; the names
 * used are taken out of body (what is left goes as the body). false with
 * the outcome set when an arg is missing or memory runs out (no request
 * goes out with a part left out).
 */
static bool build_url(CURL *easy, const Toolpool__HttpCall *h, json_t *args, json_t *body, tp_buf_t *url,
                      tp_outcome_t *o)
{
    bool failed = false;
    const char *p = h->url;
    for (const char *s; (s = strchr(p, '{')) != NULL;) {
        const char *end = strchr(s, '}');
        if (end == NULL)
            break;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(end - s - 1), s + 1);
        json_t *v = json_object_get(args, name);
        if (v == NULL || json_is_null(v)) {
            tp_outcome_fail(o, "BadArguments", "the URL takes the arg \"%s\", which the call does not give", name);
            return false;
        }
        const char *sv = json_string_value(v);
        if (sv && (strcmp(sv, ".") == 0 || strcmp(sv, "..") == 0)) {
            /* A path's dot segment would take the request to another of the API's paths. */
            tp_outcome_fail(o, "BadArguments", "the arg \"%s\" cannot be \"%s\" in the URL", name, sv);
            return false;
        }
        failed |= tp_buf_append(url, p, (size_t)(s - p)) < 0 || put_escaped(easy, url, v) < 0;
        json_object_del(body, name);
        p = end + 1;
    }
    failed |= tp_buf_puts(url, p) < 0;
    char sep = strchr(h->url, '?') ? '&' : '?';
    for (size_t i = 0; i < h->n_query; i++) {
        json_t *v = json_object_get(args, h->query[i]);
        if (v == NULL || json_is_null(v))
            continue;
        char *name = tp_curl.easy_escape(easy, h->query[i], 0);
        failed |= name == NULL || tp_buf_append(url, &sep, 1) < 0 || tp_buf_puts(url, name) < 0 ||
                  tp_buf_puts(url, "=") < 0 || put_escaped(easy, url, v) < 0;
        tp_curl.free(name);
        json_object_del(body, h->query[i]);
        sep = '&';
    }
    if (failed || tp_buf_append(url, "", 1) < 0) {
        tp_outcome_fail(o, "OutOfMemory", "out of memory building the request");
        return false;
    }
    return true;
}

/* Adds a header line; false (the list as it was) when memory runs out. */
static bool add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = tp_curl.slist_append(*list, line);
    if (l == NULL)
        return false;
    *list = l;
    return true;
}

static const char *status_kind(long status)
{
    switch (status) {
    case 429:
        return "RateLimited";
    case 408:
        return "Timeout";
    case 500:
    case 502:
    case 503:
    case 504:
        return "ServerError";
    case 400:
    case 422:
        return "BadArguments";
    case 401:
    case 403:
        return "PermissionDenied";
    case 404:
    case 410:
        return "NotFound";
    default:
        return "ToolError";
    }
}

/* A failure's message: the status line, then the body's start (as text, cut at TP_HTTP_QUOTE bytes). */
static void status_failure(tp_outcome_t *o, long status, const reply_t *r)
{
    tp_outcome_fail(o, status_kind(status), "HTTP %ld%s%s", status, r->reason[0] ? " " : "", r->reason);
    size_t n = r->body.len > TP_HTTP_QUOTE ? TP_HTTP_QUOTE : r->body.len;
    while (n > 0 && strchr(" \t\r\n", r->body.data[n - 1]) != NULL)
        n--;
    if (n > 0) {
        tp_buf_puts(&o->message, ": ");
        tp_buf_append(&o->message, r->body.data, n);
        if (n < r->body.len && r->body.len > TP_HTTP_QUOTE)
            tp_buf_puts(&o->message, "...");
    }
}

/* A transfer that failed before a whole response came. */
static void transport_failure(CURL *easy, tp_outcome_t *o, CURLcode rc, const char *errbuf, const reply_t *r,
                              uint64_t max)
{
    const char *why = errbuf[0] ? errbuf : tp_curl.easy_strerror(rc);
    /* Whether the request went out: over a new connection or a kept one (whose connect time is 0). */
    long sent = 0;
    tp_curl.easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &sent);
    switch (rc) {
    case CURLE_WRITE_ERROR:
        if (r->too_big) {
            tp_outcome_fail(o, "OutputTooLarge", "the response's body is past the tool's output limit of %llu bytes",
                            (unsigned long long)max);
            return;
        }
        break;
    case CURLE_OPERATION_TIMEDOUT:
        /* Before the request went out, a server that is not there (transient); after, one that did not answer in time. */
        tp_outcome_fail(o, sent > 0 ? "Timeout" : "ServerError", "%s", why);
        return;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        tp_outcome_fail(o, "ServerError", "%s", why);
        return;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
        tp_outcome_fail(o, "ToolError", "TLS: the server's certificate is not trusted: %s", why);
        return;
    default:
        break;
    }
    tp_outcome_fail(o, "ToolError", "%s", why);
}

/* Every occurrence of s in b replaced by "[secret]". */
static void redact_in(tp_buf_t *b, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || b->len < n)
        return;
    tp_buf_t out = {0};
    size_t i = 0;
    for (uint8_t *hit; (hit = memmem(b->data + i, b->len - i, s, n)) != NULL; i = (size_t)(hit - b->data) + n) {
        tp_buf_append(&out, b->data + i, (size_t)(hit - b->data) - i);
        tp_buf_puts(&out, "[secret]");
    }
    if (out.data == NULL)
        return;
    tp_buf_append(&out, b->data + i, b->len - i);
    explicit_bzero(b->data, b->len);
    tp_buf_free(b);
    *b = out;
}

/* Every secret of the call out of b. */
static void redact_all(const Toolpool__HttpCall *h, tp_buf_t *b)
{
    for (size_t i = 0; i < h->n_redact; i++)
        redact_in(b, h->redact[i]);
}

/* A secret out of a fixed text (cap bytes), cut to fit. */
static void redact_text(const Toolpool__HttpCall *h, char *s, size_t cap)
{
    tp_buf_t b = {0};
    if (h->n_redact == 0 || tp_buf_puts(&b, s) < 0) {
        tp_buf_free(&b);
        return;
    }
    redact_all(h, &b);
    snprintf(s, cap, "%.*s", (int)b.len, b.data ? (const char *)b.data : "");
    tp_buf_free(&b);
}

/* "scheme://host:port" of url, into out; false when it does not parse. */
static bool origin(const char *url, char *out, size_t cap)
{
    CURLU *u = tp_curl.url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    bool ok = u && tp_curl.url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              tp_curl.url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              tp_curl.url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              tp_curl.url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok)
        snprintf(out, cap, "%s://%s:%s", scheme, host, port);
    tp_curl.free(scheme);
    tp_curl.free(host);
    tp_curl.free(port);
    tp_curl.url_cleanup(u);
    return ok;
}

/*
 * Whether the transfer may go on to next, a redirect from at: never from
 * https to http, and, for a tool that sends headers of its own (its
 * secrets, maybe), only to the same scheme, host and port: curl would
 * send them to any host. false with the outcome set.
 */
static bool may_follow(const Toolpool__HttpCall *h, const char *at, const char *next, tp_outcome_t *o)
{
    if (strncmp(at, "https:", 6) == 0 && strncmp(next, "https:", 6) != 0) {
        tp_outcome_fail(o, "ToolError", "a redirect from https to http is not followed");
        return false;
    }
    if (strncmp(next, "http:", 5) != 0 && strncmp(next, "https:", 6) != 0) {
        tp_outcome_fail(o, "ToolError", "a redirect to another protocol is not followed");
        return false;
    }
    char a[600], b[600];
    if (h->n_headers > 0 && (!origin(at, a, sizeof a) || !origin(next, b, sizeof b) || strcmp(a, b) != 0)) {
        tp_outcome_fail(o, "ToolError",
                        "a redirect to another host is not followed: the tool's headers go to its own host only");
        return false;
    }
    return true;
}

/* One call's transfer, from its Call to its answer. */
typedef struct xfer {
    struct xfer *next; /* in flight, or spare */
    CURL *easy;
    Toolpool__SupervisorFrame *frame; /* the Call: freed when the call ends */
    const Toolpool__Call *call;
    const char *method;
    reply_t r;
    tp_buf_t url;
    struct curl_slist *headers;
    char *payload;
    char *at; /* where the request goes now (after redirects) */
    int redirects;
    uint64_t deadline_ms; /* the call's end, of the monotonic clock in ms; 0: none */
    char errbuf[CURL_ERROR_SIZE];
    tp_outcome_t o;
} xfer_t;

static CURLM *multi;
static xfer_t *flight, *spare;
static int n_flight;
static tp_http_done_fn done_fn;

/* The machine's monotonic clock in ms: tp_now_us()'s, which the supervisor reads too. */
static uint64_t now_ms(void)
{
    return tp_now_us() / 1000u;
}

/* The multi handle, made at the first call: true, or false with why in err. */
static bool client_ready(char *err, size_t n)
{
    if (multi != NULL)
        return true;
    if (tp_curl_load(err, n) < 0)
        return false;
    if (tp_curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, n, "libcurl would not start (curl_global_init failed)");
        return false;
    }
    if ((multi = tp_curl.multi_init()) == NULL) {
        tp_curl.global_cleanup();
        snprintf(err, n, "out of memory for the HTTP client");
        return false;
    }
    return true;
}

void tp_http_preload(void)
{
    char why[600];
    client_ready(why, sizeof why);
}

/* A transfer for call: a spare one's easy handle, its options reset (its caches stay), or a new one. */
static xfer_t *xfer_take(void)
{
    xfer_t *x = spare;
    if (x != NULL) {
        spare = x->next;
        tp_curl.easy_reset(x->easy);
    } else if ((x = calloc(1, sizeof *x)) != NULL && (x->easy = tp_curl.easy_init()) == NULL) {
        free(x);
        x = NULL;
    }
    if (x == NULL)
        return NULL;
    x->r = (reply_t){.body = x->r.body, .retry_after_ms = -1};
    tp_buf_reset(&x->r.body);
    tp_buf_reset(&x->url);
    tp_outcome_reset(&x->o);
    x->redirects = 0;
    x->errbuf[0] = 0;
    return x;
}

/*
 * The call has its answer: its secrets out of everything it says, the
 * Reply sent (done_fn), and the transfer kept for the next call.
 */
static void xfer_end(xfer_t *x)
{
    const Toolpool__HttpCall *h = x->call->http;
    tp_outcome_t *o = &x->o;
    /* A secret never goes back: not in a result (an API that echoes its token), a message or a kind. */
    if (h != NULL) {
        redact_all(h, &o->result);
        redact_all(h, &o->message);
        for (size_t i = 0; i < h->n_redact; i++)
            if (h->redact[i][0] && strstr(o->kind, h->redact[i]) != NULL)
                snprintf(o->kind, sizeof o->kind, "ToolError");
    }
    done_fn(x->call, o);
    toolpool__supervisor_frame__free_unpacked(x->frame, NULL);
    x->frame = NULL;
    x->call = NULL;
    free(x->at);
    x->at = NULL;
    tp_curl.slist_free_all(x->headers);
    x->headers = NULL;
    free(x->payload);
    x->payload = NULL;
    if (x->r.body.cap > 1u << 20)
        tp_buf_free(&x->r.body); /* a big body's memory goes back; a small one's is kept */
    if (x->url.cap > 1u << 16)
        tp_buf_free(&x->url);
    x->next = spare;
    spare = x;
}

/* Takes x out of the flight list (and off the multi handle). */
static void xfer_unlink(xfer_t *x)
{
    tp_curl.multi_remove_handle(multi, x->easy);
    for (xfer_t **pp = &flight; *pp != NULL; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            n_flight--;
            return;
        }
}

/* Starts (or, after a redirect, goes on with) x's transfer to x->at. false with the outcome set. */
static bool xfer_go(xfer_t *x)
{
    if (x->deadline_ms) {
        uint64_t now = now_ms();
        if (now >= x->deadline_ms) {
            tp_outcome_fail(&x->o, "Timeout", "the call's time ran out after %d redirect%s", x->redirects,
                            x->redirects == 1 ? "" : "s");
            return false;
        }
        /* What is left of the call's time: a redirect does not start it again. */
        tp_curl.easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)(x->deadline_ms - now));
    }
    tp_curl.easy_setopt(x->easy, CURLOPT_URL, x->at);
    tp_buf_reset(&x->r.body);
    x->r.too_big = false;
    x->errbuf[0] = 0;
    if (tp_curl.multi_add_handle(multi, x->easy) != CURLM_OK) {
        tp_outcome_fail(&x->o, "OutOfMemory", "cannot start the transfer");
        return false;
    }
    x->next = flight;
    flight = x;
    n_flight++;
    return true;
}

/* Whether the tool's own headers set name (case-insensitive). */
static bool has_header(const Toolpool__HttpCall *h, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < h->n_headers; i++)
        if (strncasecmp(h->headers[i], name, n) == 0 && h->headers[i][n] == ':')
            return true;
    return false;
}

/* The request of x's call, made ready on its easy handle. false with the outcome set. */
static bool xfer_prepare(xfer_t *x)
{
    const Toolpool__Call *call = x->call;
    const Toolpool__HttpCall *h = call->http;
    CURL *easy = x->easy;
    tp_outcome_t *o = &x->o;
    if (h == NULL || h->url == NULL || h->url[0] == 0) {
        tp_outcome_fail(o, "ToolError", "the call names no request (a worker older than its supervisor?)");
        return false;
    }
    json_t *args = call->args.len ? tp_json_loadb((const char *)call->args.data, call->args.len, 0, NULL)
                                  : json_object();
    json_t *body = json_is_object(args) ? json_deep_copy(args) : NULL;
    bool ok = false;
    if (body == NULL) {
        tp_outcome_fail(o, "BadArguments", "the args are not a JSON object");
        goto done;
    }
    if (!build_url(easy, h, args, body, &x->url, o))
        goto done;
    const char *m = x->method = h->method && h->method[0] ? h->method : "GET";
    bool sends = strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0 || h->body_args;
    bool built = true;
    for (size_t i = 0; i < h->n_headers; i++)
        built = built && add_header(&x->headers, h->headers[i]);
    if (sends) {
        built = built && (x->payload = json_dumps(body, JSON_COMPACT)) != NULL &&
                add_header(&x->headers, "Content-Type: application/json");
        tp_curl.easy_setopt(easy, CURLOPT_POSTFIELDS, x->payload);
    }
    built = built && add_header(&x->headers, "Expect:"); /* no 100-continue round trip */
    /* A traced attempt: its span, the parent of the server's (W3C Trace Context); the tool's own header wins. */
    char tp[96];
    if (built && *call->traceparent && !has_header(h, "traceparent") &&
        snprintf(tp, sizeof tp, "traceparent: %s", call->traceparent) < (int)sizeof tp)
        built = add_header(&x->headers, tp);
    built = built && (x->at = strdup((const char *)x->url.data)) != NULL;
    if (!built) {
        tp_outcome_fail(o, "OutOfMemory", "out of memory building the request");
        goto done;
    }
    if (strcmp(m, "GET") == 0 && !sends)
        tp_curl.easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    else if (strcmp(m, "POST") != 0) /* POST is what a body makes; a 303 can then turn it into a GET */
        tp_curl.easy_setopt(easy, CURLOPT_CUSTOMREQUEST, m);
    tp_curl.easy_setopt(easy, CURLOPT_PRIVATE, x);
    tp_curl.easy_setopt(easy, CURLOPT_HTTPHEADER, x->headers);
    tp_curl.easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    tp_curl.easy_setopt(easy, CURLOPT_ERRORBUFFER, x->errbuf);
    tp_curl.easy_setopt(easy, CURLOPT_WRITEFUNCTION, body_cb);
    tp_curl.easy_setopt(easy, CURLOPT_WRITEDATA, &x->r);
    tp_curl.easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
    tp_curl.easy_setopt(easy, CURLOPT_HEADERDATA, &x->r);
    tp_curl.easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    tp_curl.easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L); /* the path as the template made it */
    tp_curl.easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /*
     * The transfer ends at the attempt's time (its own, which a deadline
     * may make shorter than the tool's timeout), and the worker answers
     * Timeout itself, keeping its connections and its other calls: the
     * supervisor's kill comes a little later (supervisor/pool/reap.c), as
     * the backstop.
     */
    /*
     * The call's end is the supervisor's deadline for it (the same clock),
     * so what the worker spent before it got here (reading the call, the
     * first call's TLS setup) is not added on; the tool's timeout from now
     * when the call names none.
     */
    x->deadline_ms = call->deadline_us ? call->deadline_us / 1000u : h->timeout_ms ? now_ms() + h->timeout_ms : 0;
    if (h->connect_timeout_ms)
        tp_curl.easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_timeout_ms);
    if (h->ca_file && h->ca_file[0])
        tp_curl.easy_setopt(easy, CURLOPT_CAINFO, h->ca_file);
    ok = true;
done:
    json_decref(body);
    json_decref(args);
    return ok;
}

/*
 * A transfer of x ended with rc: a redirect is checked and followed (here,
 * not by curl, so that each is checked: may_follow), anything else is the
 * call's answer.
 */
static void xfer_done(xfer_t *x, CURLcode rc)
{
    const Toolpool__HttpCall *h = x->call->http;
    tp_outcome_t *o = &x->o;
    reply_t *r = &x->r;
    long status = 0;
    tp_curl.easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    char *next = NULL;
    xfer_unlink(x);
    if (rc == CURLE_OK && status >= 300 && status <= 399 &&
        tp_curl.easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &next) == CURLE_OK && next != NULL) {
        if (++x->redirects > TP_HTTP_REDIRECTS) {
            tp_outcome_fail(o, "ToolError", "more than %d redirects", TP_HTTP_REDIRECTS);
        } else if (may_follow(h, x->at, next, o)) {
            /* As browsers and curl do: a 303, or a 301 or 302 after a POST, goes on as a GET. */
            if (status == 303 || ((status == 301 || status == 302) && strcmp(x->method, "POST") == 0)) {
                tp_curl.easy_setopt(x->easy, CURLOPT_CUSTOMREQUEST, NULL);
                tp_curl.easy_setopt(x->easy, CURLOPT_HTTPGET, 1L);
            }
            char *copy = strdup(next);
            free(x->at);
            if ((x->at = copy) == NULL)
                tp_outcome_fail(o, "OutOfMemory", "out of memory following a redirect");
            else if (xfer_go(x))
                return;
        }
        xfer_end(x);
        return;
    }
    /* What the server said, its secrets out before any of it is quoted or cut. */
    redact_all(h, &r->body);
    redact_text(h, r->reason, sizeof r->reason);
    redact_text(h, x->errbuf, sizeof x->errbuf);
    if (rc != CURLE_OK) {
        transport_failure(x->easy, o, rc, x->errbuf, r, x->call->max_output);
    } else if (status >= 200 && status < 300) {
        if (r->body.len == 0) {
            tp_buf_reset(&o->result);
            tp_buf_puts(&o->result, "null");
            o->ok = true;
        } else {
            tp_outcome_from_text(o, (const char *)r->body.data, r->body.len, false);
        }
    } else if (tp_outcome_error_from_text(o, (const char *)r->body.data, r->body.len)) {
        /* a body in the tool error convention names the failure, whatever the status */
    } else {
        status_failure(o, status, r);
    }
    if (!o->ok && o->retry_after_ms < 0 && r->retry_after_ms >= 0)
        o->retry_after_ms = r->retry_after_ms;
    xfer_end(x);
}

void tp_http_set_done(tp_http_done_fn fn)
{
    done_fn = fn;
}

void tp_http_start(Toolpool__SupervisorFrame *frame)
{
    const Toolpool__Call *call = frame->call;
    char why[600] = "out of memory for the call";
    xfer_t *x = client_ready(why, sizeof why) ? xfer_take() : NULL;
    if (x == NULL) {
        tp_outcome_t o = {0};
        tp_outcome_reset(&o);
        tp_outcome_fail(&o, "ToolError", "cannot start the HTTP client: %s", why);
        done_fn(call, &o);
        tp_outcome_free(&o);
        toolpool__supervisor_frame__free_unpacked(frame, NULL);
        return;
    }
    x->frame = frame;
    x->call = call;
    x->r.max = call->max_output;
    if (!xfer_prepare(x) || !xfer_go(x))
        xfer_end(x);
}

bool tp_http_cancel(uint64_t seq)
{
    for (xfer_t *x = flight; x != NULL; x = x->next)
        if (x->call->seq == seq) {
            xfer_unlink(x);
            tp_outcome_fail(&x->o, "Cancelled", "%s cancelled while it ran", x->call->tool);
            xfer_end(x);
            return true;
        }
    return false;
}

int tp_http_in_flight(void)
{
    return n_flight;
}

int tp_http_wait(int fd, int timeout_ms, bool *fd_ready, struct pollfd *extra, int n)
{
    struct curl_waitfd w[1 + TP_MCP_POLL_MAX];
    int k = 0;
    if (fd >= 0)
        w[k++] = (struct curl_waitfd){.fd = fd, .events = CURL_WAIT_POLLIN};
    for (int i = 0; i < n && i < TP_MCP_POLL_MAX; i++)
        w[k++] = (struct curl_waitfd){.fd = extra[i].fd,
                                      .events = (short)((extra[i].events & POLLIN ? CURL_WAIT_POLLIN : 0) |
                                                        (extra[i].events & POLLOUT ? CURL_WAIT_POLLOUT : 0))};
    *fd_ready = false;
    CURLMcode mc = tp_curl.multi_poll(multi, w, (unsigned)k, timeout_ms, NULL);
    if (mc != CURLM_OK)
        return TP_EIO;
    *fd_ready = fd >= 0 && w[0].revents != 0;
    for (int i = 0; i < n && i < TP_MCP_POLL_MAX; i++)
        extra[i].revents = w[(fd >= 0) + i].revents;
    int running;
    if (tp_curl.multi_perform(multi, &running) != CURLM_OK)
        return TP_EIO;
    CURLMsg *msg;
    int left;
    while ((msg = tp_curl.multi_info_read(multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        xfer_t *x = NULL;
        tp_curl.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x != NULL)
            xfer_done(x, msg->data.result);
    }
    return 0;
}

void tp_http_shutdown(void)
{
    while (flight != NULL) {
        xfer_t *x = flight;
        xfer_unlink(x);
        toolpool__supervisor_frame__free_unpacked(x->frame, NULL);
        x->next = spare;
        spare = x;
    }
    while (spare != NULL) {
        xfer_t *x = spare;
        spare = x->next;
        tp_curl.easy_cleanup(x->easy);
        tp_curl.slist_free_all(x->headers);
        free(x->payload);
        free(x->at);
        tp_buf_free(&x->r.body);
        tp_buf_free(&x->url);
        tp_outcome_free(&x->o);
        free(x);
    }
    if (multi != NULL) {
        tp_curl.multi_cleanup(multi);
        multi = NULL;
        tp_curl.global_cleanup();
    }
}
