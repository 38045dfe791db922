/*
 * The HTTP front's core (front_http.h, and http_internal.h for how its files
 * fit): the front made, drained, finished and freed; the listening socket;
 * each connection tracked, counted against --max-connections, its requests'
 * token checked; the replies every route sends, at once or once the store
 * is durable; and the route table, which hands each request to the file of
 * its feature.
 */
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "json.h"
#include "log.h"

/*
 * Connections past --max-connections are still accepted, to be told 503;
 * past this many more, the listener stops accepting until some close, so a
 * flood costs the kernel's backlog, not our descriptors.
 */
#define TP_HTTP_CONN_SLACK 64

/* Request line and headers: enough for any client, bounded for a bad one. */
#define TP_HTTP_MAX_HEADERS (64 * 1024)

/* After an accept error (EMFILE...), the listener rests this long before it tries again. */
#define TP_HTTP_ACCEPT_PAUSE_MS 200

/* The methods evhttp lets through to request_cb; any other it answers itself. */
#define TP_HTTP_METHODS                                                                                                \
    (EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |    \
     EVHTTP_REQ_PATCH)

/* ---- replies ---- */

void http_count_reply(tp_http_t *h, int status)
{
    if (status >= 100 && status < 600)
        h->by_status[status]++;
}

/*
 * The Date and Content-Length headers evhttp_send_reply would add to an
 * HTTP/1.1 reply with a body, added here first, the same bytes in the same
 * place (after the headers set so far): evhttp formats the date anew for
 * every reply (gmtime and a printf) and the length with another printf,
 * where a second's replies can share one date and a length needs no
 * printf. Under wrk, serve's instructions per POST /v1/calls went from
 * 65,100 to 62,300 (callgrind). Any other reply (HTTP/1.0, HEAD, 204,
 * 304, 1xx) is left to evhttp's own rules.
 */
static void reply_add_date_length(tp_http_t *h, struct evhttp_request *req, struct evkeyvalq *hd, int status,
                                  size_t len)
{
    if (req->major != 1 || req->minor < 1 || status == 204 || status == 304 || status < 200 ||
        req->type == EVHTTP_REQ_HEAD || req->type == EVHTTP_REQ_CONNECT)
        return;
    time_t now = time(NULL);
    if (now != h->date_at || h->date[0] == '\0') {
        struct tm tm;
        if (gmtime_r(&now, &tm) == NULL || evutil_date_rfc1123(h->date, sizeof h->date, &tm) == 0)
            return;
        h->date_at = now;
    }
    char num[24];
    size_t i = sizeof num;
    num[--i] = '\0';
    do {
        num[--i] = (char)('0' + len % 10);
        len /= 10;
    } while (len > 0);
    if (evhttp_add_header(hd, "Date", h->date) != 0 || evhttp_add_header(hd, "Content-Length", num + i) != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Date and Content-Length");
}

/*
 * Sends the whole reply. After this, req is libevent's: the caller drops
 * its pointer.
 */
void http_reply(tp_http_t *h, struct evhttp_request *req, int status, const char *ctype, const void *body, size_t len)
{
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    if (ctype && evhttp_add_header(hd, "Content-Type", ctype) != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Content-Type");
    if (len > 0 && evbuffer_add(evhttp_request_get_output_buffer(req), body, len) != 0) {
        tp_log_error("http.out_of_memory", "http: out of memory for a %d reply of %zu bytes", status, len);
        status = 500;
    }
    reply_add_date_length(h, req, hd, status, evbuffer_get_length(evhttp_request_get_output_buffer(req)));
    http_count_reply(h, status);
    evhttp_send_reply(req, status, NULL, NULL);
}

/* {"error": error, "message": ...} and a newline, the body of every error. */
void http_error_body(tp_buf_t *b, const char *error, const char *message)
{
    tp_buf_puts(b, "{\"error\":");
    tp_json_put_string(b, error, strlen(error));
    tp_buf_puts(b, ",\"message\":");
    tp_json_put_string(b, message, strlen(message));
    tp_buf_puts(b, "}\n");
}

void http_reply_error(tp_http_t *h, struct evhttp_request *req, int status, const char *error, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tp_buf_t b = {0};
    http_error_body(&b, error, msg);
    http_reply(h, req, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/* Writes v (taking its reference) compact, and a newline, to b. 0, or -1 (TP_ENOMEM: v NULL included). */
int http_json_body(tp_buf_t *b, json_t *v)
{
    int rc = v && tp_json_write(b, v, 0) == 0 && tp_buf_append(b, "\n", 1) == 0 ? 0 : -1;
    json_decref(v);
    return rc;
}

/* The query parameter name, copied to buf (cap bytes); NULL when the query has none. */
const char *http_query_get(struct evhttp_request *req, const char *name, char *buf, size_t cap)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (q == NULL)
        return NULL;
    struct evkeyvalq params = {0};
    if (evhttp_parse_query_str(q, &params) != 0)
        return NULL;
    const char *v = evhttp_find_header(&params, name);
    if (v)
        snprintf(buf, cap, "%s", v);
    evhttp_clear_headers(&params);
    return v ? buf : NULL;
}

/*
 * ?format= of a request that answers calls (agent.h): *out, toolpool when
 * absent. -1 for a format it does not know, answered 400 here.
 */
int http_query_format(tp_http_t *h, struct evhttp_request *req, tp_format_t *out)
{
    char buf[64];
    const char *f = http_query_get(req, "format", buf, sizeof buf);
    *out = TP_FORMAT_TOOLPOOL;
    if (f == NULL || tp_format_from_name(f, out) == 0)
        return 0;
    http_reply_error(h, req, 400, "InvalidRequest", "format \"%.100s\": expected " TP_FORMAT_NAMES, f);
    return -1;
}

/*
 * The request's body, made contiguous: *p (NULL when empty) and *len. -1
 * when it cannot be (out of memory), answered 500 here.
 */
int http_body_of(tp_http_t *h, struct evhttp_request *req, const char **p, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    *p = *len ? (const char *)evbuffer_pullup(in, -1) : NULL;
    if (*len && *p == NULL) {
        http_reply_error(h, req, 500, "InternalError", "out of memory reading the body");
        return -1;
    }
    return 0;
}

/* ---- connections ---- */

static size_t ptr_slot(const void *p, size_t cap)
{
    return (size_t)(XXH3_64bits(&p, sizeof p) & (cap - 1));
}

static tp_http_conn_t *conn_find(tp_http_t *h, const struct evhttp_connection *evcon)
{
    if (evcon == NULL || h->conns == NULL)
        return NULL;
    for (tp_http_conn_t *c = h->conns[ptr_slot(evcon, h->conns_cap)]; c; c = c->hnext)
        if (c->evcon == evcon)
            return c;
    return NULL;
}

static int conn_insert(tp_http_t *h, tp_http_conn_t *c)
{
    if ((size_t)h->n_conns * 2 > h->conns_cap) {
        size_t cap = h->conns_cap ? h->conns_cap * 2 : 256;
        tp_http_conn_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return -1;
        for (size_t i = 0; i < h->conns_cap; i++)
            for (tp_http_conn_t *x = h->conns[i], *nx; x; x = nx) {
                nx = x->hnext;
                size_t k = ptr_slot(x->evcon, cap);
                x->hnext = t[k];
                t[k] = x;
            }
        free(h->conns);
        h->conns = t;
        h->conns_cap = cap;
    }
    size_t k = ptr_slot(c->evcon, h->conns_cap);
    c->hnext = h->conns[k];
    h->conns[k] = c;
    return 0;
}

static void conn_remove(tp_http_t *h, tp_http_conn_t *c)
{
    if (h->conns == NULL)
        return;
    for (tp_http_conn_t **pp = &h->conns[ptr_slot(c->evcon, h->conns_cap)]; *pp; pp = &(*pp)->hnext)
        if (*pp == c) {
            *pp = c->hnext;
            return;
        }
}

static void listener_update(tp_http_t *h);

/* One connection fewer: the listener takes connections again once they are under the hard cap. */
static void conn_gone(tp_http_t *h)
{
    h->n_conns--;
    listener_update(h);
}

/*
 * A connection is going (its client closed it, it timed out, or the server
 * is freeing it): libevent frees it right after this. A request on it that
 * is still waiting for its reply is either still on the connection
 * (libevent frees it next) or was detached from it by libevent's error
 * path (then nobody would free it but us). Either way the front drops the
 * pointer; the call behind it runs on and its answer is kept or recorded.
 */
static void conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
    tp_http_conn_t *c = arg;
    tp_http_t *h = c->h;
    while (c->waits) {
        tp_http_wait_t *w = c->waits;
        c->waits = w->cnext;
        if (evhttp_request_get_connection(w->req) == NULL)
            evhttp_request_free(w->req);
        w->req = NULL;
        w->conn = NULL;
        w->cprev = w->cnext = NULL;
        if (w->kind == TP_WAIT_BATCH)
            http_batch_client_gone(w->batch);
        else if (w->kind == TP_WAIT_MCP)
            http_mcp_client_gone(w);
    }
    conn_remove(h, c);
    conn_gone(h);
    free(c);
}

/*
 * evhttp calls this for every connection it accepts, before it makes the
 * evhttp_connection: the one moment a connection is seen from its start
 * (libevent 2.1 has no evhttp_set_max_connections and no per-connection
 * hook). The bufferevent made here is the connection's; the front holds a
 * reference to it until the adopt event, later in this loop turn, finds the
 * evhttp_connection (evhttp hands it to every bufferevent_setcb of the
 * connection as the callback argument) and sets the close callback that
 * counts it out.
 */
static struct bufferevent *conn_bev_cb(struct event_base *base, void *arg)
{
    tp_http_t *h = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        tp_log_error("http.out_of_memory", "http: out of memory accepting a connection");
        return NULL;
    }
    tp_http_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return bev; /* served, uncounted */
    c->h = h;
    c->bev = bev;
    bufferevent_incref(bev);
    c->refused = h->n_conns >= h->o.max_connections;
    h->n_conns++;
    h->accepted++;
    c->fnext = h->fresh;
    h->fresh = c;
    event_active(h->ev_adopt, EV_TIMEOUT, 0);
    listener_update(h);
    return bev;
}

static void conn_adopt_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_http_t *h = arg;
    while (h->fresh) {
        tp_http_conn_t *c = h->fresh;
        h->fresh = c->fnext;
        bufferevent_event_cb ecb = NULL;
        void *cbarg = NULL;
        bufferevent_getcb(c->bev, NULL, NULL, &ecb, &cbarg);
        struct evhttp_connection *evcon = cbarg;
        bool alive = ecb != NULL && evcon != NULL && evhttp_connection_get_bufferevent(evcon) == c->bev;
        if (alive) {
            c->evcon = evcon;
            if (conn_insert(h, c) < 0) {
                tp_log_error("http.out_of_memory", "http: out of memory tracking a connection");
                alive = false;
            } else {
                evhttp_connection_set_closecb(evcon, conn_closed_cb, c);
            }
        }
        bufferevent_decref(c->bev); /* frees it if evhttp already has */
        c->bev = NULL;
        if (!alive) {
            conn_gone(h);
            free(c);
        }
    }
}

static tp_http_conn_t *conn_of(tp_http_t *h, struct evhttp_request *req)
{
    return conn_find(h, evhttp_request_get_connection(req));
}

/* The bufferevent of req's connection; NULL when req or its connection is gone. */
struct bufferevent *http_req_bev(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
    return evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
}

/* ---- requests whose reply comes later ---- */

tp_http_wait_t *http_wait_new(tp_http_t *h, struct evhttp_request *req, tp_wait_kind_t kind)
{
    tp_http_wait_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->kind = kind;
    w->h = h;
    w->req = req;
    w->conn = conn_of(h, req);
    if (w->conn) {
        w->cnext = w->conn->waits;
        if (w->cnext)
            w->cnext->cprev = w;
        w->conn->waits = w;
    }
    return w;
}

/* Takes w's request off its connection's list: the reply is about to go. */
struct evhttp_request *http_wait_take(tp_http_wait_t *w)
{
    struct evhttp_request *req = w->req;
    if (w->conn) {
        if (w->cprev)
            w->cprev->cnext = w->cnext;
        else
            w->conn->waits = w->cnext;
        if (w->cnext)
            w->cnext->cprev = w->cprev;
        w->conn = NULL;
    }
    w->cprev = w->cnext = NULL;
    w->req = NULL;
    return req;
}

void http_wait_reply(tp_http_wait_t *w, int status, const char *ctype, const void *body, size_t len)
{
    struct evhttp_request *req = http_wait_take(w);
    if (req)
        http_reply(w->h, req, status, ctype, body, len);
}

void http_wait_error(tp_http_wait_t *w, int status, const char *error, const char *message)
{
    tp_buf_t b = {0};
    http_error_body(&b, error, message);
    http_wait_reply(w, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/*
 * Frees w. A request still unanswered (only at teardown, after
 * tp_http_finish) is on its connection, which libevent frees with it; one
 * whose connection libevent has already dropped (an untracked connection:
 * no close callback told us) is ours to free.
 */
void http_wait_free(tp_http_wait_t *w)
{
    if (w == NULL)
        return;
    struct evhttp_request *req = http_wait_take(w);
    if (req && evhttp_request_get_connection(req) == NULL)
        evhttp_request_free(req);
    if (w->gone_ev)
        event_free(w->gone_ev);
    tp_buf_free(&w->body);
    free(w);
}

static void store_durable_cb(void *ctx, bool ok)
{
    tp_http_wait_t *w = ctx;
    tp_http_t *h = w->h;
    if (w->sprev)
        w->sprev->snext = w->snext;
    else
        h->store_waits = w->snext;
    if (w->snext)
        w->snext->sprev = w->sprev;
    if (ok)
        http_wait_reply(w, w->status, w->ctype, w->body.data, w->body.len);
    else
        http_wait_error(w, 503, "Unavailable", "the store could not commit (see the service's log)");
    http_wait_free(w);
}

/*
 * Replies status and body (taken) once the engine's transaction, which the
 * caller has read or written, is durable.
 */
void http_reply_when_durable(tp_http_t *h, struct evhttp_request *req, int status, const char *ctype, tp_buf_t *body)
{
    tp_http_wait_t *w = http_wait_new(h, req, TP_WAIT_STORE);
    if (w == NULL) {
        tp_buf_free(body);
        http_reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    w->status = status;
    w->ctype = ctype;
    w->body = *body;
    *body = (tp_buf_t){0};
    w->snext = h->store_waits;
    if (w->snext)
        w->snext->sprev = w;
    h->store_waits = w;
    tp_engine_when_durable(h->e, store_durable_cb, w);
}

void http_reply_json_when_durable(tp_http_t *h, struct evhttp_request *req, int status, json_t *v)
{
    tp_buf_t b = {0};
    if (http_json_body(&b, v) < 0) {
        tp_buf_free(&b);
        http_error_body(&b, "InternalError", "out of memory rendering the reply");
        status = 500;
    }
    http_reply_when_durable(h, req, status, "application/json", &b);
}

void http_reply_error_when_durable(tp_http_t *h, struct evhttp_request *req, int status, const char *error,
                                   const char *message)
{
    tp_buf_t b = {0};
    http_error_body(&b, error, message);
    http_reply_when_durable(h, req, status, "application/json", &b);
}

/* A request's read or write of the store, in the engine's turn (tp_engine_store_op); TP_EAGAIN has been answered 503. */
int http_store_op(tp_http_t *h, struct evhttp_request *req, size_t room, tp_store_op_fn op, void *ctx)
{
    int rc = tp_engine_store_op(h->e, room, op, ctx);
    if (rc == TP_EAGAIN)
        http_reply_error(h, req, 503, "Unavailable", "the store cannot be used now (see the service's log)");
    return rc;
}

/*
 * A store operation that failed in the engine's transaction (the callers
 * answer MDB_NOTFOUND themselves): a record that does not unpack is this
 * request's 500; anything else is the store's, and stops the engine as
 * a failure of its own would.
 */
void http_store_error(tp_http_t *h, struct evhttp_request *req, int rc, const char *what)
{
    char why[256];
    if (rc == TP_EPROTO) {
        http_reply_error_when_durable(h, req, 500, "InternalError", "a record in the store does not unpack");
        return;
    }
    snprintf(why, sizeof why, "%s: %s", what, tp_strerror(rc));
    tp_engine_store_failed(h->e, rc, what);
    http_reply_error(h, req, 503, "Unavailable", "%s", why);
}

/* ---- routing ---- */

/* Compares in time independent of where the first difference is (the token's length aside). */
static bool token_equal(const char *given, const char *token)
{
    size_t n = strlen(token), m = strlen(given);
    unsigned char d = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(token[i] ^ (i < m ? given[i] : 0));
    return d == 0;
}

static bool authorized(tp_http_t *h, struct evhttp_request *req)
{
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    for (v += 7; *v == ' '; v++)
        ;
    return token_equal(v, h->o.token);
}

/* Whether s is valid UTF-8 (a JSON string can hold it). */
static bool utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = tp_utf8_len(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

/*
 * n bytes of a path, percent-decoded and NUL-terminated (free it); NULL
 * when empty, or holding a NUL or text that is not UTF-8 (ids, jobs and
 * breaker ids are JSON strings everywhere else).
 */
static char *path_decode(const char *s, size_t n)
{
    char *raw = strndup(s, n);
    if (raw == NULL)
        return NULL;
    size_t len = 0;
    char *out = evhttp_uridecode(raw, 0, &len);
    free(raw);
    if (out && (len == 0 || strlen(out) != len || !utf8_ok(out))) {
        free(out);
        return NULL;
    }
    return out;
}

static void reply_method(tp_http_t *h, struct evhttp_request *req, const char *allow)
{
    if (evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow) != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Allow");
    http_reply_error(h, req, 405, "MethodNotAllowed", "this path takes %s", allow);
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool has_suffix(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n > k && memcmp(s + n - k, suffix, k) == 0;
}

/* How a route's path matches the request's. */
typedef enum {
    TP_ROUTE_EXACT,  /* the path is path */
    TP_ROUTE_PREFIX, /* path, then a name (the handler's, decoded), then suffix when it has one */
} tp_route_match_t;

/* What a route of GET takes: evhttp answers a HEAD as the GET, without the body. */
#define TP_ROUTE_GET (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)

typedef struct {
    unsigned methods; /* the EVHTTP_REQ_* it takes */
    tp_route_match_t match;
    const char *path;
    const char *suffix;      /* TP_ROUTE_PREFIX: what follows the name; NULL: nothing need */
    http_handler_t *handler; /* NULL: its methods are answered 405, with allow as the Allow header */
    /* Once the path is the route's, before its method is looked at: false when it has answered. */
    bool (*admit)(tp_http_t *h, struct evhttp_request *req);
    const char *allow;
    bool while_draining; /* served while the service drains (every other path is 503 then) */
} tp_route_t;

/*
 * Every path the front serves, in the order they are tried. The first
 * route whose path a request's matches decides what comes before any
 * handler: while the service drains, a route not served while draining is
 * answered 503 (so is a path no route has); then the route's admit check.
 * The request then goes to the first route that matches both its path and
 * its method, the name in its path decoded first (an empty name, or one
 * that does not decode, is 404). A route without a handler answers its
 * methods 405 with its own allow; a method no route takes is 405 too, its
 * Allow naming the methods of the routes with the first's path and
 * suffix. A path no route has is 404.
 *
 * Where prefixes overlap, the order decides: .../reset is a breaker's
 * reset for POST alone (a GET of /v1/breakers/ID/reset reads the breaker
 * whose id is "ID/reset", and a POST to a breaker itself is told where
 * POST goes), while .../resolve is an escalation's resolve whatever the
 * method.
 */
static const tp_route_t routes[] = {
    /* clang-format off */
    /* methods          match            path                suffix         handler                   admit           allow                      while_draining */
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/healthz",         NULL,          http_healthz,             NULL,           NULL,                      true},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/readyz",          NULL,          http_readyz,              NULL,           NULL,                      true},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/metrics",         NULL,          http_metrics_get,         NULL,           NULL,                      true},
    {EVHTTP_REQ_POST,   TP_ROUTE_EXACT,  "/v1/calls",        NULL,          http_calls_post,          NULL,           NULL,                      false},
    {EVHTTP_REQ_POST,   TP_ROUTE_EXACT,  "/mcp",             NULL,          http_mcp_post,            NULL,           NULL,                      false},
    {EVHTTP_REQ_DELETE, TP_ROUTE_EXACT,  "/mcp",             NULL,          http_mcp_delete,          NULL,           NULL,                      false},
    {EVHTTP_REQ_POST,   TP_ROUTE_EXACT,  "/v1/batch",        NULL,          http_batch_post,          NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/tools",        NULL,          http_tools_get,           NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/breakers",     NULL,          http_breakers_get,        NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/escalations",  NULL,          http_escalations_get,     NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/calls/",       NULL,          http_calls_get,           NULL,           NULL,                      false},
    {EVHTTP_REQ_DELETE, TP_ROUTE_PREFIX, "/v1/calls/",       NULL,          http_calls_delete,        NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/jobs/",        "/checkpoint", http_checkpoint_get,      NULL,           NULL,                      false},
    {EVHTTP_REQ_PUT,    TP_ROUTE_PREFIX, "/v1/jobs/",        "/checkpoint", http_checkpoint_put,      NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/breakers/",    NULL,          http_breakers_get,        NULL,           NULL,                      false},
    {EVHTTP_REQ_POST,   TP_ROUTE_PREFIX, "/v1/breakers/",    "/reset",      http_breakers_reset,      NULL,           NULL,                      false},
    {EVHTTP_REQ_POST,   TP_ROUTE_PREFIX, "/v1/breakers/",    NULL,          NULL,                     NULL,           "GET (POST on .../reset)", false},
    {EVHTTP_REQ_POST,   TP_ROUTE_PREFIX, "/v1/escalations/", "/resolve",    http_escalations_resolve, NULL,           NULL,                      false},
    {TP_HTTP_METHODS,   TP_ROUTE_PREFIX, "/v1/escalations/", "/resolve",    NULL,                     NULL,           "POST",                    false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/escalations/", NULL,          http_escalations_get,     NULL,           NULL,                      false},
    /* clang-format on */
};
#define TP_ROUTES (sizeof routes / sizeof routes[0])

/* Whether path (n bytes) is r's; for TP_ROUTE_PREFIX, *name and *name_n are the name in it. */
static bool route_match(const tp_route_t *r, const char *path, size_t n, const char **name, size_t *name_n)
{
    if (r->match == TP_ROUTE_EXACT)
        return strcmp(path, r->path) == 0;
    if (!has_prefix(path, r->path))
        return false;
    size_t k = strlen(r->path);
    *name = path + k;
    *name_n = n - k;
    if (r->suffix == NULL)
        return true;
    if (!has_suffix(*name, *name_n, r->suffix))
        return false;
    *name_n -= strlen(r->suffix);
    return true;
}

static bool route_same_path(const tp_route_t *a, const tp_route_t *b)
{
    return a->match == b->match && strcmp(a->path, b->path) == 0 &&
           (a->suffix == NULL ? b->suffix == NULL : b->suffix != NULL && strcmp(a->suffix, b->suffix) == 0);
}

/* The Allow header of a 405 on r's path: the methods its routes take, GET standing for HEAD too. */
static void route_allow(const tp_route_t *r, char *buf, size_t cap)
{
    static const struct {
        unsigned method;
        const char *name;
    } names[] = {
        {EVHTTP_REQ_GET, "GET"}, {EVHTTP_REQ_POST, "POST"}, {EVHTTP_REQ_PUT, "PUT"}, {EVHTTP_REQ_DELETE, "DELETE"}};
    unsigned methods = 0;
    for (size_t i = 0; i < TP_ROUTES; i++)
        if (routes[i].handler && route_same_path(&routes[i], r))
            methods |= routes[i].methods;
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((methods & names[i].method) && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", names[i].name);
}

/*
 * The first route that takes path (n bytes) under method, NULL when none
 * does; *first is the first whose path it is, NULL when none is.
 */
static const tp_route_t *route_find(const char *path, size_t n, unsigned method, const tp_route_t **first)
{
    *first = NULL;
    for (size_t i = 0; i < TP_ROUTES; i++) {
        const char *name;
        size_t name_n;
        if (!route_match(&routes[i], path, n, &name, &name_n))
            continue;
        if (*first == NULL)
            *first = &routes[i];
        if (routes[i].methods & method)
            return &routes[i];
    }
    return NULL;
}

/*
 * The host of a Host header or an Origin's host (host, n bytes, without
 * its port or brackets): whether it names this service as a browser that
 * has not been tricked would: a loopback name, or the address it listens on.
 */
static bool host_is_ours(const tp_http_t *h, const char *host, size_t n)
{
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    char name[256];
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, host, n);
    name[n] = '\0';
    if (strcasecmp(name, "localhost") == 0 || strcmp(name, "::1") == 0 ||
        (h->listen_host[0] && strcmp(name, h->listen_host) == 0))
        return true;
    struct in_addr v4;
    return inet_pton(AF_INET, name, &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

/* The host part of a Host header ("127.0.0.1:8765", "[::1]:80"): its length. */
static size_t host_len(const char *hostport)
{
    if (hostport[0] == '[') {
        const char *end = strchr(hostport, ']');
        return end ? (size_t)(end - hostport) + 1 : strlen(hostport);
    }
    const char *colon = strchr(hostport, ':');
    return colon ? (size_t)(colon - hostport) : strlen(hostport);
}

/*
 * What keeps a web page from using a service it can reach (a loopback TCP
 * port needs no token): the Origin a browser sends must be this service's,
 * the Host (without a token) a loopback name or the listen address (a page
 * that rebinds its own name to 127.0.0.1 sends its name; a browser always
 * sends one, so a request without one, HTTP/1.0's health probes, passes), and a body must
 * not be of a type a page may send cross-site without asking first
 * (text/plain, a form). A Unix socket is out of a browser's reach. false
 * when it has answered (403, 415).
 */
static bool cross_site_ok(tp_http_t *h, struct evhttp_request *req, const char *path)
{
    /*
     * Host, Origin and Content-Type in one pass over the headers, each the
     * first of its name as evhttp_find_header would find it; a name is
     * compared only with a key of its length (three scans with a
     * case-folding compare of every key were ~880 instructions a request).
     */
    const char *host = NULL, *origin = NULL, *type = NULL;
    for (struct evkeyval *kv = evhttp_request_get_input_headers(req)->tqh_first; kv; kv = kv->next.tqe_next) {
        size_t n = strlen(kv->key);
        if (n == 4 && host == NULL && evutil_ascii_strcasecmp(kv->key, "Host") == 0)
            host = kv->value;
        else if (n == 6 && origin == NULL && evutil_ascii_strcasecmp(kv->key, "Origin") == 0)
            origin = kv->value;
        else if (n == 12 && type == NULL && evutil_ascii_strcasecmp(kv->key, "Content-Type") == 0)
            type = kv->value;
    }
    bool mcp = strncmp(path, "/mcp", 4) == 0;
    char msg[700];
    msg[0] = '\0';
    if (h->tcp && h->o.token == NULL && host != NULL && !host_is_ours(h, host, host_len(host)))
        snprintf(msg, sizeof msg,
                 "Forbidden: the request's Host (%.200s) is not this service's (a loopback name or %.64s): a page "
                 "that points a name of its own at this address is refused",
                 host, h->listen_host);
    if (msg[0] == '\0' && origin != NULL) {
        struct evhttp_uri *u = evhttp_uri_parse(origin);
        const char *oh = u ? evhttp_uri_get_host(u) : NULL;
        bool ok = oh && (host_is_ours(h, oh, strlen(oh)) ||
                         (host && host_len(host) == strlen(oh) && strncasecmp(host, oh, strlen(oh)) == 0));
        if (u)
            evhttp_uri_free(u);
        if (!ok)
            snprintf(msg, sizeof msg, "Forbidden: the request's Origin (%.200s) is not this service", origin);
    }
    if (msg[0]) {
        if (mcp)
            http_mcp_error(h, req, 403, TP_RPC_INVALID_REQUEST, msg);
        else
            http_reply_error(h, req, 403, "Forbidden", "%s", msg + strlen("Forbidden: "));
        return false;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (h->tcp && type != NULL && (cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT) &&
        (strncasecmp(type, "text/plain", 10) == 0 || strncasecmp(type, "application/x-www-form-urlencoded", 33) == 0 ||
         strncasecmp(type, "multipart/form-data", 19) == 0)) {
        snprintf(msg, sizeof msg,
                 "a body of Content-Type %.100s is what a web page may send from another site: send "
                 "Content-Type: application/json (or application/x-ndjson for a batch)",
                 type);
        if (mcp)
            http_mcp_error(h, req, 415, TP_RPC_INVALID_REQUEST, msg);
        else
            http_reply_error(h, req, 415, "UnsupportedMediaType", "%s", msg);
        return false;
    }
    return true;
}

/*
 * A request with two Content-Lengths that differ is refused, and its
 * connection closed: evhttp read the body by the first, and a proxy in
 * front may have read it by the other, so what follows on the connection
 * could be a request the proxy never saw. false when it has answered.
 */
static bool framing_ok(tp_http_t *h, struct evhttp_request *req)
{
    const char *len = NULL;
    struct evkeyval *kv;
    /* the headers are a TAILQ (keyvalq_struct.h), walked by its fields: sys/queue.h is not included */
    for (kv = evhttp_request_get_input_headers(req)->tqh_first; kv != NULL; kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Content-Length") != 0)
            continue;
        if (len == NULL) {
            len = kv->value;
        } else if (strcmp(len, kv->value) != 0) {
            if (evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close") != 0)
                tp_log_warn("http.header_failed", "http: cannot set a reply's Connection");
            http_reply_error(h, req, 400, "BadRequest", "two Content-Length headers that differ (%.40s and %.40s)", len,
                             kv->value);
            return false;
        }
    }
    return true;
}

/* Every request comes here (evhttp's generic callback): refused, unauthorized, or routed. */
static void request_cb(struct evhttp_request *req, void *arg)
{
    tp_http_t *h = arg;
    tp_http_conn_t *c = conn_of(h, req);
    if (c && c->refused) {
        if (evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close") != 0)
            tp_log_warn("http.header_failed", "http: cannot set a reply's Connection");
        http_reply_error(h, req, 503, "Unavailable", "too many connections (the most is %d); try again later",
                         h->o.max_connections);
        return;
    }
    const struct evhttp_uri *ruri = evhttp_request_get_evhttp_uri(req);
    const char *rpath = ruri ? evhttp_uri_get_path(ruri) : NULL;
    if (!framing_ok(h, req) || !cross_site_ok(h, req, rpath ? rpath : ""))
        return;
    if (h->o.token && !authorized(h, req)) {
        if (evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer") != 0)
            tp_log_warn("http.header_failed", "http: cannot set a reply's WWW-Authenticate");
        http_reply_error(h, req, 401, "Unauthorized", "this service needs \"Authorization: Bearer TOKEN\"");
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL || path[0] != '/') {
        http_reply_error(h, req, 400, "InvalidRequest", "the request has no path");
        return;
    }
    size_t n = strlen(path);
    const tp_route_t *first;
    const tp_route_t *hit = route_find(path, n, (unsigned)evhttp_request_get_command(req), &first);
    if (h->draining && (first == NULL || !first->while_draining)) {
        http_reply_error(h, req, 503, "Unavailable", "the service is draining: it takes no new requests");
        return;
    }
    if (first == NULL) {
        http_reply_error(h, req, 404, "NotFound", "no such path: %.600s", path);
        return;
    }
    if (first->admit && !first->admit(h, req))
        return;
    const tp_route_t *r = hit ? hit : first;
    char *name = NULL;
    if (r->match == TP_ROUTE_PREFIX) {
        const char *rest = NULL;
        size_t rest_n = 0;
        route_match(r, path, n, &rest, &rest_n);
        name = rest_n ? path_decode(rest, rest_n) : NULL;
        if (name == NULL) {
            http_reply_error(h, req, 404, "NotFound", "no such path: %.600s", path);
            return;
        }
    }
    if (hit && hit->handler) {
        hit->handler(h, req, name);
    } else if (hit) {
        reply_method(h, req, hit->allow);
    } else {
        char allow[64];
        route_allow(first, allow, sizeof allow);
        reply_method(h, req, allow);
    }
    free(name);
}

/* ---- listening ---- */

static bool sa_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

int tp_http_addr_parse(const char *spec, tp_http_addr_t *a, char *err, size_t cap)
{
    memset(a, 0, sizeof *a);
    if (strncmp(spec, "unix:", 5) == 0) {
        const char *p = spec + 5;
        if (*p == 0 || strlen(p) >= sizeof a->path) {
            snprintf(err, cap, "--listen %s: a Unix socket's path must be 1 to %zu bytes", spec, sizeof a->path - 1);
            return -1;
        }
        a->is_unix = true;
        a->loopback = true;
        snprintf(a->path, sizeof a->path, "%s", p);
        snprintf(a->text, sizeof a->text, "unix:%s", p);
        return 0;
    }
    char host[256];
    const char *port;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - spec - 1) >= sizeof host)
            goto usage;
        snprintf(host, sizeof host, "%.*s", (int)(close - spec - 1), spec + 1);
        port = close + 2;
    } else {
        const char *colon = strrchr(spec, ':');
        if (colon == NULL || (size_t)(colon - spec) >= sizeof host)
            goto usage;
        snprintf(host, sizeof host, "%.*s", (int)(colon - spec), spec);
        port = colon + 1;
    }
    char *end;
    unsigned long pn = strtoul(port, &end, 10);
    if (host[0] == 0 || port[0] == 0 || *end || pn > 65535)
        goto usage;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, cap, "--listen %s: cannot resolve %s: %s", spec, host, rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
    a->salen = res->ai_addrlen;
    a->loopback = sa_loopback(res->ai_addr);
    freeaddrinfo(res);
    snprintf(a->text, sizeof a->text, "%s", spec);
    return 0;
usage:
    snprintf(err, cap, "--listen %s: expected unix:PATH or HOST:PORT", spec);
    return -1;
}

/*
 * A Unix socket file left by a service that is gone is replaced; one that
 * something still accepts on is not (two services on one path would each
 * think it is the one). Anything that is not a socket is left alone.
 */
static int unix_prepare(const char *path, char *err, size_t cap)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : (snprintf(err, cap, "%s: %s", path, strerror(errno)), -1);
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, cap, "%s exists and is not a socket: remove it, or listen elsewhere", path);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, cap, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof sun);
    int e = errno;
    close(fd);
    if (rc == 0) {
        snprintf(err, cap, "%s: something is listening on it already (another toolpool serve?)", path);
        return -1;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, cap, "%s: cannot tell whether it is in use: %s", path, strerror(e));
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, cap, "%s: cannot remove the stale socket: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_http_t *h = arg;
    h->accept_error = false;
    listener_update(h);
}

/*
 * accept failed (EMFILE, ENFILE, TP_ENOMEM...): libevent would retry at once
 * and spin; the listener rests a moment instead, while connections close.
 */
static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
    tp_http_t *h = arg;
    int e = EVUTIL_SOCKET_ERROR();
    if (!h->accept_error)
        tp_log_warn("http.accept_failed", "http: accepting a connection: %s; pausing %dms", strerror(e),
                    TP_HTTP_ACCEPT_PAUSE_MS);
    h->accept_error = true;
    listener_update(h);
    struct timeval tv = {0, TP_HTTP_ACCEPT_PAUSE_MS * 1000};
    if (evtimer_add(h->ev_resume, &tv) != 0) {
        tp_log_error("http.event_failed", "http: cannot arm the accept timer");
        h->accept_error = false;
        listener_update(h);
    }
}

/* The listener accepts while under the hard cap and not resting after an error. */
static void listener_update(tp_http_t *h)
{
    if (h->listener == NULL || h->freeing)
        return;
    bool run = !h->accept_error && h->n_conns < h->o.max_connections + TP_HTTP_CONN_SLACK;
    if (run == !h->listener_paused)
        return;
    if ((run ? evconnlistener_enable(h->listener) : evconnlistener_disable(h->listener)) != 0) {
        tp_log_error("http.event_failed", "http: cannot %s accepting connections", run ? "resume" : "pause");
        return;
    }
    h->listener_paused = !run;
}

int tp_http_listen(tp_http_t *h, tp_http_addr_t *a, char *err, size_t cap)
{
    int fd = -1;
    if (a->is_unix) {
        /*
         * PATH.lock, held while the service lives: two services started on
         * one path at once would each find the old socket stale, and the
         * second would unlink the first's new one.
         */
        char lock[sizeof a->path + 8];
        snprintf(lock, sizeof lock, "%s.lock", a->path);
        /* Never through a symbolic link: one planted there would have the service create or lock another file. */
        h->unix_lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (h->unix_lock < 0) {
            snprintf(err, cap, "%s: %s", lock,
                     errno == ELOOP ? "is a symbolic link: refused (remove it, or listen at another path)"
                                    : strerror(errno));
            return -1;
        }
        if (flock(h->unix_lock, LOCK_EX | LOCK_NB) != 0) {
            snprintf(err, cap, "%s: %s", lock,
                     errno == EWOULDBLOCK ? "held by another toolpool serve on this socket" : strerror(errno));
            close(h->unix_lock);
            h->unix_lock = -1;
            return -1;
        }
        if (unix_prepare(a->path, err, cap) < 0)
            return -1;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s", a->path);
        /* Made 0600 from the start (umask), not after: nobody else may connect in between. */
        mode_t old = umask(0177);
        int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sun, sizeof sun);
        int e = errno;
        umask(old);
        struct stat st;
        if (rc != 0 || chmod(a->path, 0600) != 0 || stat(a->path, &st) != 0) {
            snprintf(err, cap, "%s: cannot listen: %s", a->text, strerror(rc != 0 ? e : errno));
            goto fail;
        }
        snprintf(h->unix_path, sizeof h->unix_path, "%s", a->path);
        h->unix_dev = st.st_dev;
        h->unix_ino = st.st_ino;
    } else {
        fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            bind(fd, (struct sockaddr *)&a->sa, a->salen) != 0) {
            snprintf(err, cap, "%s: cannot listen: %s", a->text, strerror(errno));
            goto fail;
        }
        struct sockaddr_storage got;
        socklen_t len = sizeof got;
        char host[NI_MAXHOST], port[NI_MAXSERV];
        if (getsockname(fd, (struct sockaddr *)&got, &len) == 0 &&
            getnameinfo((struct sockaddr *)&got, len, host, sizeof host, port, sizeof port,
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            snprintf(a->text, sizeof a->text, got.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
        h->tcp = true;
        if (getnameinfo((struct sockaddr *)&a->sa, a->salen, host, sizeof host, NULL, 0, NI_NUMERICHOST) == 0)
            snprintf(h->listen_host, sizeof h->listen_host, "%s", host);
    }
    if (listen(fd, 511) != 0) {
        snprintf(err, cap, "%s: cannot listen: %s", a->text, strerror(errno));
        goto fail;
    }
    h->listener = evconnlistener_new(h->o.base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (h->listener == NULL) {
        snprintf(err, cap, "%s: cannot listen: out of memory", a->text);
        goto fail;
    }
    fd = -1; /* the listener's now */
    evconnlistener_set_error_cb(h->listener, accept_error_cb);
    h->bound = evhttp_bind_listener(h->http, h->listener);
    if (h->bound == NULL) {
        snprintf(err, cap, "%s: cannot serve HTTP on it", a->text);
        evconnlistener_free(h->listener);
        h->listener = NULL;
        goto fail;
    }
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    if (h->unix_path[0]) {
        unlink(h->unix_path); /* bound, but not served */
        h->unix_path[0] = 0;
    }
    return -1;
}

/* ---- lifecycle ---- */

tp_http_t *tp_http_new(const tp_http_opts_t *o)
{
    tp_http_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        goto nomem;
    h->o = *o;
    h->e = o->engine;
    h->unix_lock = -1;
    h->idle_tv.tv_sec = (time_t)(o->idle_timeout_us / 1000000u);
    h->idle_tv.tv_usec = (suseconds_t)(o->idle_timeout_us % 1000000u);
    h->table_cap = 1024;
    h->table = calloc(h->table_cap, sizeof *h->table);
    if (h->table == NULL)
        goto nomem;
    if (getrandom(&h->id_prefix, sizeof h->id_prefix, GRND_NONBLOCK) != (ssize_t)sizeof h->id_prefix)
        h->id_prefix = tp_now_us() ^ ((uint64_t)getpid() << 32);
    h->http = evhttp_new(o->base);
    h->ev_adopt = event_new(o->base, -1, 0, conn_adopt_cb, h);
    h->ev_resume = evtimer_new(o->base, accept_resume_cb, h);
    if (h->http == NULL || h->ev_adopt == NULL || h->ev_resume == NULL)
        goto nomem;
    evhttp_set_timeout_tv(h->http, &h->idle_tv);
    evhttp_set_max_body_size(h->http, (ev_ssize_t)o->max_body);
    evhttp_set_max_headers_size(h->http, TP_HTTP_MAX_HEADERS);
    evhttp_set_allowed_methods(h->http, TP_HTTP_METHODS);
    /* A body past --max-body is read to its end and then refused, so the client hears the 413 (no reset). */
    if (evhttp_set_flags(h->http, EVHTTP_SERVER_LINGERING_CLOSE) != 0)
        tp_log_warn("http.old_libevent", "http: this libevent cannot read an oversized body out before its 413");
    evhttp_set_gencb(h->http, request_cb, h);
    evhttp_set_bevcb(h->http, conn_bev_cb, h);
    if (http_tools_render(h) < 0 || (h->mcp_tools = tp_mcp_catalog_new(tp_engine_registry(h->e))) == NULL)
        goto nomem;
    tp_front_t f = {.feed = http_feed_cb, .flush = http_flush_cb, .ctx = h};
    if (tp_engine_add_front(h->e, &f) != 0) {
        tp_log_error("http.start_failed", "http: the engine takes no more fronts");
        tp_http_free(h);
        return NULL;
    }
    return h;
nomem:
    tp_log_error("http.out_of_memory", "http: out of memory starting the HTTP front");
    tp_http_free(h);
    return NULL;
}

void tp_http_drain(tp_http_t *h)
{
    if (h->draining)
        return;
    h->draining = true;
    if (h->bound) {
        evhttp_del_accept_socket(h->http, h->bound); /* frees the listener, closes its socket */
        h->bound = NULL;
        h->listener = NULL;
    }
    for (tp_http_batch_t *b = h->batches, *nx; b; b = nx) {
        nx = b->next;
        http_batch_maybe_end(b);
    }
}

/* Whether every reply has left for the kernel. */
static bool replies_out(const tp_http_t *h)
{
    for (size_t i = 0; i < h->conns_cap; i++)
        for (tp_http_conn_t *c = h->conns[i]; c; c = c->hnext) {
            struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
            if (bev && evbuffer_get_length(bufferevent_get_output(bev)) > 0)
                return false;
        }
    return true;
}

typedef struct {
    tp_http_t *h;
    uint64_t until_us;
    struct event *ev;
} flush_wait_t;

static void flush_check_cb(evutil_socket_t fd, short what, void *arg)
{
    flush_wait_t *f = arg;
    if (replies_out(f->h) || tp_now_us() >= f->until_us) {
        event_base_loopexit(f->h->o.base, NULL);
        return;
    }
    struct timeval tv = {0, 5000};
    if (evtimer_add(f->ev, &tv) != 0)
        event_base_loopexit(f->h->o.base, NULL);
}

void tp_http_finish(tp_http_t *h, uint64_t timeout_us)
{
    h->finished = true;
    tp_http_drain(h);
    /* What still waits is told now: nothing more will come for it. */
    for (size_t i = 0; i < h->table_cap; i++)
        for (tp_http_entry_t *e = h->table[i]; e; e = e->hnext)
            for (tp_http_wait_t *w = e->waits; w; w = w->next)
                http_wait_error(w, 503, "Unavailable", "the service stopped before the call ended");
    for (tp_http_wait_t *w = h->store_waits; w; w = w->snext)
        http_wait_error(w, 503, "Unavailable", "the service stopped before the store committed");
    for (tp_http_wait_t *w = h->mcp_waits; w; w = w->snext) {
        struct evhttp_request *req = http_wait_take(w);
        if (req && w->streaming)
            evhttp_send_reply_end(req);
        else if (req)
            http_mcp_error(h, req, 503, TP_RPC_INTERNAL_ERROR,
                           "Service Unavailable: the service stopped before the call ended");
    }
    for (tp_http_batch_t *b = h->batches; b; b = b->next) {
        http_batch_send(b);
        if (b->w->req && !b->ended && (b->cut || b->pending > 0 || b->off < b->len)) {
            /* Not whole (the engine stopped short of it): left on its connection, unended. */
            b->cut = b->cut_made = true;
            http_batch_close_when_out(b);
            continue;
        }
        struct evhttp_request *req = http_wait_take(b->w);
        if (req && !b->ended)
            evhttp_send_reply_end(req); /* its connection closes with the service */
        b->ended = true;
    }
    if (replies_out(h))
        return;
    flush_wait_t f = {.h = h, .until_us = tp_now_us() + timeout_us};
    f.ev = evtimer_new(h->o.base, flush_check_cb, &f);
    struct timeval tv = {0, 0};
    if (f.ev == NULL || evtimer_add(f.ev, &tv) != 0) {
        tp_log_warn("http.event_failed", "http: cannot wait for the last replies to go out");
    } else if (event_base_dispatch(h->o.base) < 0) {
        tp_log_warn("http.loop_failed", "http: the loop failed while the last replies went out");
    }
    if (f.ev)
        event_free(f.ev);
}

void tp_http_free(tp_http_t *h)
{
    if (h == NULL)
        return;
    h->freeing = true;
    h->finished = true;
    /* The engine is gone: nothing more comes for entries, batches or store waits. */
    for (size_t i = 0; h->table && i < h->table_cap; i++)
        while (h->table[i]) {
            tp_http_entry_t *e = h->table[i];
            h->table[i] = e->hnext;
            http_entry_free(e);
        }
    while (h->batches) {
        tp_http_batch_t *b = h->batches;
        b->ended = true;
        http_batch_free(b);
    }
    while (h->store_waits) {
        tp_http_wait_t *w = h->store_waits;
        h->store_waits = w->snext;
        http_wait_free(w);
    }
    while (h->mcp_sessions) {
        tp_http_mcp_t *x = h->mcp_sessions;
        h->mcp_sessions = x->next;
        tp_mcp_session_free(x->s);
        free(x);
    }
    if (h->mcp_modern) {
        tp_mcp_session_free(h->mcp_modern->s);
        free(h->mcp_modern);
    }
    while (h->mcp_waits) {
        tp_http_wait_t *w = h->mcp_waits;
        h->mcp_waits = w->snext;
        http_wait_free(w);
    }
    tp_mcp_catalog_free(h->mcp_tools);
    h->listener = NULL; /* evhttp frees it with its bound socket */
    if (h->http)
        evhttp_free(h->http); /* each connection's close callback frees its record */
    while (h->fresh) {
        tp_http_conn_t *c = h->fresh;
        h->fresh = c->fnext;
        bufferevent_decref(c->bev);
        free(c);
    }
    free(h->conns);
    free(h->table);
    if (h->ev_adopt)
        event_free(h->ev_adopt);
    if (h->ev_resume)
        event_free(h->ev_resume);
    tp_request_parser_free(&h->parser);
    tp_buf_free(&h->tools_own);
    tp_buf_free(&h->tools_openai);
    tp_buf_free(&h->tools_mcp);
    tp_buf_free(&h->line);
    /* The socket file, if it is still the one made (a successor may have replaced it). */
    struct stat st;
    if (h->unix_path[0] && stat(h->unix_path, &st) == 0 && st.st_dev == h->unix_dev && st.st_ino == h->unix_ino)
        unlink(h->unix_path);
    if (h->unix_lock >= 0)
        close(h->unix_lock); /* the lock file stays: removing it would race a successor's flock */
    free(h);
}
