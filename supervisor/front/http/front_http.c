/*
 * The HTTP front's core (front_http.h, and http_internal.h for how its files
 * fit): the front made, drained, finished and freed; the listening socket
 * (its connections served by hserver.c);
 * each connection tracked, counted against --max-connections, its requests'
 * token checked; the replies every route sends, at once or once the store
 * is durable; and the route table, which hands each request to the file of
 * its feature.
 */
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

/* Every method: a route that takes them all. */
#define TP_HTTP_METHODS                                                                                                \
    (TP_HM_GET | TP_HM_POST | TP_HM_HEAD | TP_HM_PUT | TP_HM_DELETE | TP_HM_OPTIONS | TP_HM_PATCH | TP_HM_OTHER)

/* ---- replies ---- */

void http_count_reply(tp_http_t *h, int status)
{
    if (status >= 100 && status < 600)
        h->by_status[status]++;
}

/*
 * Sends the whole reply. After this, req is done with: the caller drops
 * its pointer.
 */
void http_reply(tp_http_t *h, tp_hreq_t *req, int status, const char *ctype, const void *body, size_t len)
{
    if (ctype && tp_hreq_add_header(req, "Content-Type", ctype) != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Content-Type");
    http_count_reply(h, status);
    tp_hreq_reply(req, status, body, len);
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

void http_reply_error(tp_http_t *h, tp_hreq_t *req, int status, const char *error, const char *fmt, ...)
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
const char *http_query_get(tp_hreq_t *req, const char *name, char *buf, size_t cap)
{
    const char *q = tp_hreq_query(req);
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
int http_query_format(tp_http_t *h, tp_hreq_t *req, tp_format_t *out)
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
int http_body_of(tp_http_t *h, tp_hreq_t *req, const char **p, size_t *len)
{
    (void)h;
    *p = tp_hreq_body(req, len);
    return 0;
}

/* ---- connections ---- */

static void listener_update(tp_http_t *h);

/*
 * A connection is going (its client closed it, it timed out, or the server
 * is freeing it): the server frees it, and its request, right after this.
 * The front drops the pointers of the requests on it that were still
 * waiting for their replies; the call behind each runs on and its answer
 * is kept or recorded.
 */
static void conn_closed_cb(void *ctx, void *user)
{
    tp_http_t *h = ctx;
    tp_http_conn_t *c = user;
    while (c->waits) {
        tp_http_wait_t *w = c->waits;
        c->waits = w->cnext;
        w->req = NULL;
        w->conn = NULL;
        w->cprev = w->cnext = NULL;
        if (w->kind == TP_WAIT_BATCH)
            http_batch_client_gone(w->batch);
        else if (w->kind == TP_WAIT_MCP)
            http_mcp_client_gone(w);
    }
    h->n_conns--;
    listener_update(h);
    free(c);
}

/*
 * A connection accepted: counted (one past --max-connections is served,
 * to be told 503), handed to the server. TCP's Nagle is off: a reply is
 * one write, and an event stream's events must not wait for an ACK.
 */
static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int socklen, void *arg)
{
    tp_http_t *h = arg;
    (void)lev;
    (void)socklen;
    tp_http_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL) {
        tp_log_error("http.out_of_memory", "http: out of memory accepting a connection");
        close(fd);
        return;
    }
    if (sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    c->h = h;
    c->refused = h->n_conns >= h->o.max_connections;
    if (tp_hs_adopt(h->hs, fd, c) != 0) {
        tp_log_error("http.out_of_memory", "http: out of memory accepting a connection");
        free(c);
        return;
    }
    h->n_conns++;
    h->accepted++;
    listener_update(h);
}

/* ---- requests whose reply comes later ---- */

tp_http_wait_t *http_wait_new(tp_http_t *h, tp_hreq_t *req, tp_wait_kind_t kind)
{
    tp_http_wait_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->kind = kind;
    w->h = h;
    w->req = req;
    w->conn = tp_hreq_user(req);
    if (w->conn) {
        w->cnext = w->conn->waits;
        if (w->cnext)
            w->cnext->cprev = w;
        w->conn->waits = w;
    }
    return w;
}

/* Takes w's request off its connection's list: the reply is about to go. */
tp_hreq_t *http_wait_take(tp_http_wait_t *w)
{
    tp_hreq_t *req = w->req;
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
    tp_hreq_t *req = http_wait_take(w);
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

/* Frees w. A request still unanswered (only at teardown, after tp_http_finish) is its connection's. */
void http_wait_free(tp_http_wait_t *w)
{
    if (w == NULL)
        return;
    http_wait_take(w);
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
void http_reply_when_durable(tp_http_t *h, tp_hreq_t *req, int status, const char *ctype, tp_buf_t *body)
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

void http_reply_json_when_durable(tp_http_t *h, tp_hreq_t *req, int status, json_t *v)
{
    tp_buf_t b = {0};
    if (http_json_body(&b, v) < 0) {
        tp_buf_free(&b);
        http_error_body(&b, "InternalError", "out of memory rendering the reply");
        status = 500;
    }
    http_reply_when_durable(h, req, status, "application/json", &b);
}

void http_reply_error_when_durable(tp_http_t *h, tp_hreq_t *req, int status, const char *error, const char *message)
{
    tp_buf_t b = {0};
    http_error_body(&b, error, message);
    http_reply_when_durable(h, req, status, "application/json", &b);
}

/* A request's read or write of the store, in the engine's turn (tp_engine_store_op); TP_EAGAIN has been answered 503. */
int http_store_op(tp_http_t *h, tp_hreq_t *req, size_t room, tp_store_op_fn op, void *ctx)
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
void http_store_error(tp_http_t *h, tp_hreq_t *req, int rc, const char *what)
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

static bool authorized(tp_http_t *h, tp_hreq_t *req)
{
    const char *v = tp_hreq_header(req, "Authorization");
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

static void reply_method(tp_http_t *h, tp_hreq_t *req, const char *allow)
{
    if (tp_hreq_add_header(req, "Allow", allow) != 0)
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

/* What a route of GET takes: a HEAD is answered as the GET, without the body. */
#define TP_ROUTE_GET (TP_HM_GET | TP_HM_HEAD)

typedef struct {
    unsigned methods; /* the TP_HM_* it takes */
    tp_route_match_t match;
    const char *path;
    const char *suffix;      /* TP_ROUTE_PREFIX: what follows the name; NULL: nothing need */
    http_handler_t *handler; /* NULL: its methods are answered 405, with allow as the Allow header */
    /* Once the path is the route's, before its method is looked at: false when it has answered. */
    bool (*admit)(tp_http_t *h, tp_hreq_t *req);
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
    {TP_HM_POST,       TP_ROUTE_EXACT,  "/v1/calls",        NULL,          http_calls_post,          NULL,           NULL,                      false},
    {TP_HM_POST,       TP_ROUTE_EXACT,  "/mcp",             NULL,          http_mcp_post,            NULL,           NULL,                      false},
    {TP_HM_DELETE,      TP_ROUTE_EXACT,  "/mcp",             NULL,          http_mcp_delete,          NULL,           NULL,                      false},
    {TP_HM_POST,       TP_ROUTE_EXACT,  "/v1/batch",        NULL,          http_batch_post,          NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/tools",        NULL,          http_tools_get,           NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/breakers",     NULL,          http_breakers_get,        NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_EXACT,  "/v1/escalations",  NULL,          http_escalations_get,     NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/calls/",       NULL,          http_calls_get,           NULL,           NULL,                      false},
    {TP_HM_DELETE,      TP_ROUTE_PREFIX, "/v1/calls/",       NULL,          http_calls_delete,        NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/jobs/",        "/checkpoint", http_checkpoint_get,      NULL,           NULL,                      false},
    {TP_HM_PUT,        TP_ROUTE_PREFIX, "/v1/jobs/",        "/checkpoint", http_checkpoint_put,      NULL,           NULL,                      false},
    {TP_ROUTE_GET,      TP_ROUTE_PREFIX, "/v1/breakers/",    NULL,          http_breakers_get,        NULL,           NULL,                      false},
    {TP_HM_POST,       TP_ROUTE_PREFIX, "/v1/breakers/",    "/reset",      http_breakers_reset,      NULL,           NULL,                      false},
    {TP_HM_POST,       TP_ROUTE_PREFIX, "/v1/breakers/",    NULL,          NULL,                     NULL,           "GET (POST on .../reset)", false},
    {TP_HM_POST,       TP_ROUTE_PREFIX, "/v1/escalations/", "/resolve",    http_escalations_resolve, NULL,           NULL,                      false},
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
    } names[] = {{TP_HM_GET, "GET"}, {TP_HM_POST, "POST"}, {TP_HM_PUT, "PUT"}, {TP_HM_DELETE, "DELETE"}};
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
static bool cross_site_ok(tp_http_t *h, tp_hreq_t *req, const char *path)
{
    /*
     * Host, Origin and Content-Type in one pass over the headers, each the
     * first of its name as tp_hreq_header would find it; a name is
     * compared only with a key of its length.
     */
    const char *host = NULL, *origin = NULL, *type = NULL;
    for (size_t i = 0, nh = tp_hreq_headers(req); i < nh; i++) {
        size_t n;
        const char *v;
        const char *key = tp_hreq_header_at(req, i, &n, &v);
        if (n == 4 && host == NULL && strcasecmp(key, "Host") == 0)
            host = v;
        else if (n == 6 && origin == NULL && strcasecmp(key, "Origin") == 0)
            origin = v;
        else if (n == 12 && type == NULL && strcasecmp(key, "Content-Type") == 0)
            type = v;
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
    unsigned cmd = tp_hreq_method(req);
    if (h->tcp && type != NULL && (cmd == TP_HM_POST || cmd == TP_HM_PUT) &&
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
 * Every request comes here (the server's on_request), framed: refused,
 * unauthorized, or routed. (A request the server could not frame, two
 * Content-Lengths that differ, a body past --max-body, it answered
 * itself.)
 */
static void request_cb(void *arg, tp_hreq_t *req)
{
    tp_http_t *h = arg;
    tp_http_conn_t *c = tp_hreq_user(req);
    if (c->refused) {
        tp_hreq_close_after(req);
        http_reply_error(h, req, 503, "Unavailable", "too many connections (the most is %d); try again later",
                         h->o.max_connections);
        return;
    }
    const char *path = tp_hreq_path(req);
    if (!cross_site_ok(h, req, path))
        return;
    if (h->o.token && !authorized(h, req)) {
        if (tp_hreq_add_header(req, "WWW-Authenticate", "Bearer") != 0)
            tp_log_warn("http.header_failed", "http: cannot set a reply's WWW-Authenticate");
        http_reply_error(h, req, 401, "Unauthorized", "this service needs \"Authorization: Bearer TOKEN\"");
        return;
    }
    if (path[0] != '/') {
        http_reply_error(h, req, 400, "InvalidRequest", "the request has no path");
        return;
    }
    size_t n = strlen(path);
    const tp_route_t *first;
    const tp_route_t *hit = route_find(path, n, tp_hreq_method(req), &first);
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
    h->listener = evconnlistener_new(h->o.base, accept_cb, h, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (h->listener == NULL) {
        snprintf(err, cap, "%s: cannot listen: out of memory", a->text);
        goto fail;
    }
    fd = -1; /* the listener's now */
    evconnlistener_set_error_cb(h->listener, accept_error_cb);
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
    tp_hs_opts_t so = {.base = o->base,
                       .max_body = o->max_body,
                       .max_head = TP_HTTP_MAX_HEADERS,
                       .idle = h->idle_tv,
                       .on_request = request_cb,
                       .on_close = conn_closed_cb,
                       .ctx = h};
    h->hs = tp_hs_new(&so);
    h->ev_resume = evtimer_new(o->base, accept_resume_cb, h);
    if (h->hs == NULL || h->ev_resume == NULL)
        goto nomem;
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
    if (h->listener) {
        evconnlistener_free(h->listener); /* closes its socket */
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
    return tp_hs_unsent(h->hs) == 0;
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
        tp_hreq_t *req = http_wait_take(w);
        if (req && w->streaming)
            tp_hreq_end(req);
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
        tp_hreq_t *req = http_wait_take(b->w);
        if (req && !b->ended)
            tp_hreq_end(req); /* its connection closes with the service */
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
    if (h->listener)
        evconnlistener_free(h->listener);
    h->listener = NULL;
    tp_hs_free(h->hs); /* each connection's close callback frees its record */
    free(h->table);
    if (h->ev_resume)
        event_free(h->ev_resume);
    tp_request_parser_free(&h->parser);
    tp_buf_free(&h->tools_own);
    tp_buf_free(&h->tools_openai);
    tp_buf_free(&h->tools_mcp);
    tp_buf_free(&h->line);
    tp_buf_free(&h->answer);
    /* The socket file, if it is still the one made (a successor may have replaced it). */
    struct stat st;
    if (h->unix_path[0] && stat(h->unix_path, &st) == 0 && st.st_dev == h->unix_dev && st.st_ino == h->unix_ino)
        unlink(h->unix_path);
    if (h->unix_lock >= 0)
        close(h->unix_lock); /* the lock file stays: removing it would race a successor's flock */
    free(h);
}
