/*
 * http adapter: one HTTP request a call, made with libcurl on an easy
 * handle kept for the worker's life, so its connections stay open and are
 * reused from call to call (and HTTP/2 is spoken where a TLS server offers
 * it).
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

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"

/* Bytes of a failure's body a message quotes. */
#define TP_HTTP_QUOTE 2048
/* Redirects followed at most. */
#define TP_HTTP_REDIRECTS 5

static CURL *easy;

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
        return s < 0 ? -1 : s > 86400L * 365 ? 86400L * 365 * 1000 : s * 1000;
    time_t at = curl_getdate(v, NULL);
    if (at < 0)
        return -1;
    time_t now = time(NULL);
    return at <= now ? 0 : at - now > 86400L * 365 ? 86400L * 365 * 1000 : (long)(at - now) * 1000;
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
static int put_escaped(tp_buf_t *b, const json_t *v)
{
    char *text = arg_text(v);
    char *esc = text ? curl_easy_escape(easy, text, 0) : NULL;
    int rc = esc ? tp_buf_puts(b, esc) : -1;
    curl_free(esc);
    free(text);
    return rc;
}

/*
 * The URL with its placeholders filled and the query appended; the names
 * used are taken out of body (what is left goes as the body). false with
 * the outcome set when an arg is missing or memory runs out (no request
 * goes out with a part left out).
 */
static bool build_url(const Toolpool__HttpCall *h, json_t *args, json_t *body, tp_buf_t *url, tp_outcome_t *o)
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
        failed |= tp_buf_append(url, p, (size_t)(s - p)) < 0 || put_escaped(url, v) < 0;
        json_object_del(body, name);
        p = end + 1;
    }
    failed |= tp_buf_puts(url, p) < 0;
    char sep = strchr(h->url, '?') ? '&' : '?';
    for (size_t i = 0; i < h->n_query; i++) {
        json_t *v = json_object_get(args, h->query[i]);
        if (v == NULL || json_is_null(v))
            continue;
        char *name = curl_easy_escape(easy, h->query[i], 0);
        failed |= name == NULL || tp_buf_append(url, &sep, 1) < 0 || tp_buf_puts(url, name) < 0 ||
                  tp_buf_puts(url, "=") < 0 || put_escaped(url, v) < 0;
        curl_free(name);
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
    struct curl_slist *l = curl_slist_append(*list, line);
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

/* A body in the tool error convention: a JSON object whose "error" is a string. */
static bool error_body(const tp_buf_t *b)
{
    if (b->len == 0 || b->data[0] != '{')
        return false;
    json_t *v = json_loadb((const char *)b->data, b->len, 0, NULL);
    bool is = json_is_string(json_object_get(v, "error"));
    json_decref(v);
    return is;
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
static void transport_failure(tp_outcome_t *o, CURLcode rc, const char *errbuf, const reply_t *r, uint64_t max)
{
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    curl_off_t connect = 0;
    curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect);
    switch (rc) {
    case CURLE_WRITE_ERROR:
        if (r->too_big) {
            tp_outcome_fail(o, "OutputTooLarge", "the response's body is past the tool's output limit of %llu bytes",
                            (unsigned long long)max);
            return;
        }
        break;
    case CURLE_OPERATION_TIMEDOUT:
        /* While connecting, a server that is not there (transient); after, one that did not answer in time. */
        tp_outcome_fail(o, connect > 0 ? "Timeout" : "ServerError", "%s", why);
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
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok)
        snprintf(out, cap, "%s://%s:%s", scheme, host, port);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
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

void tp_http_run(const Toolpool__Call *call, tp_outcome_t *o)
{
    const Toolpool__HttpCall *h = call->http;
    if (h == NULL || h->url == NULL || h->url[0] == 0) {
        tp_outcome_fail(o, "ToolError", "the call names no request (a worker older than its supervisor?)");
        return;
    }
    if (easy == NULL) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (easy = curl_easy_init()) == NULL) {
            tp_outcome_fail(o, "ToolError", "cannot start the HTTP client");
            return;
        }
    } else {
        curl_easy_reset(easy); /* the options go; the connections and caches stay */
    }
    json_t *args = call->args.len ? json_loadb((const char *)call->args.data, call->args.len, 0, NULL) : json_object();
    json_t *body = json_is_object(args) ? json_deep_copy(args) : NULL;
    tp_buf_t url = {0};
    reply_t r = {.max = call->max_output, .retry_after_ms = -1};
    struct curl_slist *headers = NULL;
    char *payload = NULL, *at = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    if (body == NULL) {
        tp_outcome_fail(o, "BadArguments", "the args are not a JSON object");
        goto done;
    }
    if (!build_url(h, args, body, &url, o))
        goto done;
    const char *m = h->method && h->method[0] ? h->method : "GET";
    bool sends = strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0 || h->body_args;
    bool built = true;
    for (size_t i = 0; i < h->n_headers; i++)
        built = built && add_header(&headers, h->headers[i]);
    if (sends) {
        built = built && (payload = json_dumps(body, JSON_COMPACT)) != NULL &&
                add_header(&headers, "Content-Type: application/json");
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, payload);
    }
    built = built && add_header(&headers, "Expect:"); /* no 100-continue round trip */
    if (!built) {
        tp_outcome_fail(o, "OutOfMemory", "out of memory building the request");
        goto done;
    }
    if (strcmp(m, "GET") == 0 && !sends)
        curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    else if (strcmp(m, "POST") != 0) /* POST is what a body makes; a 303 can then turn it into a GET */
        curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, m);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L); /* the path as the template made it */
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /*
     * The transfer ends at the tool's timeout, and the worker answers
     * Timeout itself, keeping its connections: the supervisor's kill comes
     * a little later (supervisor/pool/reap.c), as the backstop.
     */
    if (h->timeout_ms)
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)h->timeout_ms);
    if (h->connect_timeout_ms)
        curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_timeout_ms);
    if (h->ca_file && h->ca_file[0])
        curl_easy_setopt(easy, CURLOPT_CAINFO, h->ca_file);
    /* Redirects are followed here, not by curl, so that each is checked (may_follow). */
    CURLcode rc;
    long status = 0;
    int redirects = 0;
    if ((at = strdup((const char *)url.data)) == NULL) {
        tp_outcome_fail(o, "OutOfMemory", "out of memory building the request");
        goto done;
    }
    for (;;) {
        curl_easy_setopt(easy, CURLOPT_URL, at);
        tp_buf_reset(&r.body);
        r.too_big = false;
        errbuf[0] = 0;
        rc = curl_easy_perform(easy);
        status = 0;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        char *next = NULL;
        if (rc != CURLE_OK || status < 300 || status > 399 ||
            curl_easy_getinfo(easy, CURLINFO_REDIRECT_URL, &next) != CURLE_OK || next == NULL)
            break;
        if (++redirects > TP_HTTP_REDIRECTS) {
            tp_outcome_fail(o, "ToolError", "more than %d redirects", TP_HTTP_REDIRECTS);
            goto done;
        }
        if (!may_follow(h, at, next, o))
            goto done;
        /* As browsers and curl do: a 303, or a 301 or 302 after a POST, goes on as a GET. */
        if (status == 303 || ((status == 301 || status == 302) && strcmp(m, "POST") == 0)) {
            curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, NULL);
            curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
        }
        char *copy = strdup(next);
        free(at);
        if ((at = copy) == NULL) {
            tp_outcome_fail(o, "OutOfMemory", "out of memory following a redirect");
            goto done;
        }
    }
    /* What the server said, its secrets out before any of it is quoted or cut. */
    redact_all(h, &r.body);
    redact_text(h, r.reason, sizeof r.reason);
    redact_text(h, errbuf, sizeof errbuf);
    if (rc != CURLE_OK) {
        transport_failure(o, rc, errbuf, &r, call->max_output);
    } else if (status >= 200 && status < 300) {
        if (r.body.len == 0) {
            tp_buf_reset(&o->result);
            tp_buf_puts(&o->result, "null");
            o->ok = true;
        } else {
            tp_outcome_from_text(o, (const char *)r.body.data, r.body.len, false);
        }
    } else if (error_body(&r.body)) {
        tp_outcome_from_text(o, (const char *)r.body.data, r.body.len, true);
    } else {
        status_failure(o, status, &r);
    }
    if (!o->ok && o->retry_after_ms < 0 && r.retry_after_ms >= 0)
        o->retry_after_ms = r.retry_after_ms;
done:
    /* A secret never goes back: not in a result (an API that echoes its token), a message or a kind. */
    redact_all(h, &o->result);
    redact_all(h, &o->message);
    for (size_t i = 0; i < h->n_redact; i++)
        if (h->redact[i][0] && strstr(o->kind, h->redact[i]) != NULL)
            snprintf(o->kind, sizeof o->kind, "ToolError");
    free(at);
    curl_slist_free_all(headers);
    free(payload);
    tp_buf_free(&url);
    tp_buf_free(&r.body);
    json_decref(body);
    json_decref(args);
}
