/*
 * The HTTP front (front_http.h): evhttp in, the engine behind.
 *
 * What it holds:
 *   conns    each open connection, found by its evhttp_connection, with the
 *            requests on it whose reply comes later: when the connection
 *            goes, their pointers are dropped (libevent frees them), never
 *            touched again; the call behind a request goes on
 *   table    each call it handed to the engine, by id, while it runs (a
 *            request for a live id attaches to it), then, for a call nobody
 *            waited for (wait=0) or one cancelled, its answer, kept in age
 *            order up to TP_HTTP_KEEP_MAX answers or TP_HTTP_KEEP_BYTES
 *   batches  POST /v1/batch streams: their bodies are fed to the engine a
 *            window at a time (the feed hook), their result lines sent as
 *            each commit's answers are delivered (the flush hook)
 *
 * Every reply that reads or writes the store is built at once, in the
 * engine's open transaction, and sent from tp_engine_when_durable, so
 * nothing unflushed is ever reported (and the engine commits the
 * transaction the front opened).
 */
#include "front_http.h"
#include "toolsdoc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "buf.h"
#include "checkpoint.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "mcp_session.h"
#include "records.h"
#include "request.h"
#include "taxonomy.h"

/*
 * Answers kept for GET after their call ended (wait=0, cancelled): enough
 * for a client polling thousands of calls, few enough that memory stays
 * flat whatever runs through the service. Recorded answers stay in the
 * store anyway; these are for the ones that are not (a cancelled call) and
 * to spare the store a read.
 */
#define TP_HTTP_KEEP_MAX 10000u
#define TP_HTTP_KEEP_BYTES (64u << 20)

/* Batch lines one engine turn takes at most, as run reads input: a turn stays short. */
#define TP_HTTP_LINES_PER_TURN 1024

/*
 * Result lines a batch's client has not read yet: past this, no more of its
 * lines are handed over until the socket drains, so a slow reader holds
 * memory to about this, not to its whole output.
 */
#define TP_HTTP_BATCH_BACKLOG (4u << 20)

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

typedef struct tp_http_conn tp_http_conn_t;
typedef struct tp_http_wait tp_http_wait_t;
typedef struct tp_http_entry tp_http_entry_t;
typedef struct tp_http_batch tp_http_batch_t;

typedef enum {
    TP_WAIT_CALL,   /* POST /v1/calls: the call's answer */
    TP_WAIT_CANCEL, /* DELETE /v1/calls/ID: the answer of the call it cancelled */
    TP_WAIT_STORE,  /* a reply built in the engine's transaction, sent once durable */
    TP_WAIT_BATCH,  /* POST /v1/batch: its stream */
    TP_WAIT_MCP,    /* POST /mcp: a request's response, as JSON or an event stream */
} tp_wait_kind_t;

typedef struct tp_http_mcp tp_http_mcp_t;

/* A request whose reply comes later. */
struct tp_http_wait {
    tp_wait_kind_t kind;
    tp_http_t *h;
    struct evhttp_request *req;    /* NULL once its connection is gone (or replied) */
    tp_http_conn_t *conn;          /* NULL when not tracked, or gone */
    tp_http_wait_t *cprev, *cnext; /* on conn->waits */
    tp_http_wait_t *next;          /* on its entry's waits */
    tp_http_wait_t *sprev, *snext; /* TP_WAIT_STORE: on h->store_waits */
    int status;                    /* TP_WAIT_STORE: the reply */
    const char *ctype;
    tp_buf_t body;
    tp_http_batch_t *batch; /* TP_WAIT_BATCH */
    /* TP_WAIT_MCP (on h->mcp_waits by sprev/snext) */
    tp_http_mcp_t *mcp;
    bool sse;       /* the client takes an event stream: notifications go before the response */
    bool json_ok;   /* the client takes application/json */
    bool streaming; /* the event stream has begun */
    bool in_take;   /* the session is taking its message: a response now is the reply */
    bool answered;  /* the response came while in_take, in body */
};

/* An MCP session over HTTP (POST /mcp), by its Mcp-Session-Id. */
struct tp_http_mcp {
    tp_http_mcp_t *prev, *next; /* on h->mcp_sessions, the most recently used first */
    tp_mcp_session_t *s;
    uint64_t used_us; /* its last request */
};

struct tp_http_conn {
    tp_http_t *h;
    struct bufferevent *bev; /* held from accept until adopted */
    struct evhttp_connection *evcon;
    tp_http_conn_t *fnext; /* on h->fresh, until adopted */
    tp_http_conn_t *hnext; /* the evcon map's chain */
    bool refused;          /* over --max-connections: answered 503, then closed */
    tp_http_wait_t *waits;
};

/* A batch that waits for a call's answer too (its line named a live id). */
typedef struct tp_http_link {
    struct tp_http_link *next;
    tp_http_batch_t *batch;
} tp_http_link_t;

/* A call handed to the engine, by id. */
struct tp_http_entry {
    tp_http_t *h;
    tp_http_entry_t *hnext; /* the table's chain */
    uint64_t hash;
    char *id;
    tp_digest_t identity; /* of tool and args: a live id is attached to only for the same input */
    char *tool;
    tp_call_t *call; /* the engine's handle, while it may be cancelled */
    bool live;       /* submitted, not yet answered */
    bool keep;       /* keep its answer once it ends (wait=0, cancelled) */
    bool cancelled;
    tp_http_wait_t *waits;
    tp_http_link_t *batches;
    /* its answer, once kept */
    bool kept;
    int status;
    char *body;
    size_t body_len;
    tp_http_entry_t *kprev, *knext; /* on the kept list, oldest first */
};

struct tp_http_batch {
    tp_http_t *h;
    tp_http_wait_t *w;            /* its stream; w->req NULL once the client has gone */
    tp_http_batch_t *prev, *next; /* on h->batches */
    const char *data;             /* the body, valid while w->req is */
    size_t len, off;
    long line_no;
    size_t pending;         /* lines handed over, not yet answered */
    struct evbuffer *out;   /* result lines not yet sent */
    bool stalled;           /* held back: its client reads slower than results come */
    bool ended;             /* its reply has ended */
    bool cut;               /* a drain left some of its lines without a result line */
    bool cut_made;          /* cut: its last lines are sent, its stream left unended */
    struct event *ev_close; /* cut: looks again for its lines to be out, to close */
};

struct tp_http {
    tp_http_opts_t o;
    tp_engine_t *e;
    struct evhttp *http;
    struct evconnlistener *listener;
    struct evhttp_bound_socket *bound;
    struct event *ev_adopt;  /* adopts the connections accepted this turn */
    struct event *ev_resume; /* re-enables the listener after an accept error */
    struct timeval idle_tv;
    bool listener_paused; /* at the hard cap, or resting after an accept error */
    bool accept_error;
    bool draining, finished, freeing;
    char unix_path[108]; /* the socket file made, removed at free */
    int unix_lock;       /* PATH.lock, flocked while we serve on PATH; -1: none */
    dev_t unix_dev;
    ino_t unix_ino;
    /* connections */
    int n_conns;
    tp_http_conn_t *fresh;
    tp_http_conn_t **conns;
    size_t conns_cap;
    /* calls */
    tp_http_entry_t **table;
    size_t table_cap, table_n;
    tp_http_entry_t *kept_head, *kept_tail;
    size_t kept_n, kept_bytes;
    tp_http_batch_t *batches;
    tp_http_wait_t *store_waits;
    tp_request_parser_t parser;
    uint64_t id_prefix, id_seq;
    /* /mcp: the sessions, and the tools as tools/list gives them, rendered once */
    tp_mcp_catalog_t *mcp_tools;
    tp_http_mcp_t *mcp_sessions;
    size_t mcp_n;
    size_t mcp_progress; /* their calls whose client asked for progress */
    tp_http_wait_t *mcp_waits;
    /* /v1/tools, rendered once */
    tp_buf_t tools_own, tools_openai, tools_mcp;
    /* counted for /metrics */
    uint64_t by_status[600]; /* replies, by status code */
    uint64_t accepted;
    /* the Date header of replies sent in second date_at */
    time_t date_at;
    char date[64];
};

/* ---- replies ---- */

static void count_reply(tp_http_t *h, int status)
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
        tp_log_warn("http: cannot set a reply's Date and Content-Length");
}

/*
 * Sends the whole reply. After this, req is libevent's: the caller drops
 * its pointer.
 */
static void reply(tp_http_t *h, struct evhttp_request *req, int status, const char *ctype, const void *body, size_t len)
{
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    if (ctype && evhttp_add_header(hd, "Content-Type", ctype) != 0)
        tp_log_warn("http: cannot set a reply's Content-Type");
    if (len > 0 && evbuffer_add(evhttp_request_get_output_buffer(req), body, len) != 0) {
        tp_log_error("http: out of memory for a %d reply of %zu bytes", status, len);
        status = 500;
    }
    reply_add_date_length(h, req, hd, status, evbuffer_get_length(evhttp_request_get_output_buffer(req)));
    count_reply(h, status);
    evhttp_send_reply(req, status, NULL, NULL);
}

/* {"error": error, "message": ...} and a newline, the body of every error. */
static void error_body(tp_buf_t *b, const char *error, const char *message)
{
    tp_buf_puts(b, "{\"error\":");
    tp_json_put_string(b, error, strlen(error));
    tp_buf_puts(b, ",\"message\":");
    tp_json_put_string(b, message, strlen(message));
    tp_buf_puts(b, "}\n");
}

static void reply_error(tp_http_t *h, struct evhttp_request *req, int status, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void reply_error(tp_http_t *h, struct evhttp_request *req, int status, const char *error, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tp_buf_t b = {0};
    error_body(&b, error, msg);
    reply(h, req, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/* Writes v (taking its reference) compact, and a newline, to b. 0, or -1 (ENOMEM: v NULL included). */
static int json_body(tp_buf_t *b, json_t *v)
{
    int rc = v && tp_json_write(b, v, 0) == 0 && tp_buf_append(b, "\n", 1) == 0 ? 0 : -1;
    json_decref(v);
    return rc;
}

/* {"id": ID, "status": "running"}: a call that has not ended yet. */
static void running_body(tp_buf_t *b, const char *id)
{
    tp_buf_puts(b, "{\"id\":");
    tp_json_put_string(b, id, strlen(id));
    tp_buf_puts(b, ",\"status\":\"running\"}\n");
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

static void batch_client_gone(tp_http_batch_t *b);

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
            batch_client_gone(w->batch);
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
        tp_log_error("http: out of memory accepting a connection");
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
                tp_log_error("http: out of memory tracking a connection");
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

/* ---- requests whose reply comes later ---- */

static tp_http_wait_t *wait_new(tp_http_t *h, struct evhttp_request *req, tp_wait_kind_t kind)
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
static struct evhttp_request *wait_take(tp_http_wait_t *w)
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

static void wait_reply(tp_http_wait_t *w, int status, const char *ctype, const void *body, size_t len)
{
    struct evhttp_request *req = wait_take(w);
    if (req)
        reply(w->h, req, status, ctype, body, len);
}

static void wait_error(tp_http_wait_t *w, int status, const char *error, const char *message)
{
    tp_buf_t b = {0};
    error_body(&b, error, message);
    wait_reply(w, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/*
 * Frees w. A request still unanswered (only at teardown, after
 * tp_http_finish) is on its connection, which libevent frees with it; one
 * whose connection libevent has already dropped (an untracked connection:
 * no close callback told us) is ours to free.
 */
static void wait_free(tp_http_wait_t *w)
{
    if (w == NULL)
        return;
    struct evhttp_request *req = wait_take(w);
    if (req && evhttp_request_get_connection(req) == NULL)
        evhttp_request_free(req);
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
        wait_reply(w, w->status, w->ctype, w->body.data, w->body.len);
    else
        wait_error(w, 503, "Unavailable", "the store could not commit (see the service's log)");
    wait_free(w);
}

/*
 * Replies status and body (taken) once the engine's transaction, which the
 * caller has read or written, is durable.
 */
static void reply_when_durable(tp_http_t *h, struct evhttp_request *req, int status, const char *ctype, tp_buf_t *body)
{
    tp_http_wait_t *w = wait_new(h, req, TP_WAIT_STORE);
    if (w == NULL) {
        tp_buf_free(body);
        reply_error(h, req, 500, "InternalError", "out of memory");
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

static void reply_json_when_durable(tp_http_t *h, struct evhttp_request *req, int status, json_t *v)
{
    tp_buf_t b = {0};
    if (json_body(&b, v) < 0) {
        tp_buf_free(&b);
        error_body(&b, "InternalError", "out of memory rendering the reply");
        status = 500;
    }
    reply_when_durable(h, req, status, "application/json", &b);
}

static void reply_error_when_durable(tp_http_t *h, struct evhttp_request *req, int status, const char *error,
                                     const char *message)
{
    tp_buf_t b = {0};
    error_body(&b, error, message);
    reply_when_durable(h, req, status, "application/json", &b);
}

/* The engine's transaction for a reply that reads or writes the store; NULL has been answered 503. */
static MDB_txn *store_txn(tp_http_t *h, struct evhttp_request *req)
{
    MDB_txn *txn = tp_engine_store(h->e) ? tp_engine_txn(h->e) : NULL;
    if (txn == NULL)
        reply_error(h, req, 503, "Unavailable", "the store cannot be used now (see the service's log)");
    return txn;
}

/*
 * A store operation that failed in the engine's transaction (the callers
 * answer MDB_NOTFOUND themselves): a record that does not unpack is this
 * request's 500; anything else is the store's, and stops the engine as
 * a failure of its own would.
 */
static void store_error(tp_http_t *h, struct evhttp_request *req, int rc, const char *what)
{
    char why[256];
    if (rc == EPROTO) {
        reply_error_when_durable(h, req, 500, "InternalError", "a record in the store does not unpack");
        return;
    }
    snprintf(why, sizeof why, "%s: %s", what, mdb_strerror(rc));
    tp_engine_store_failed(h->e, rc, what);
    reply_error(h, req, 503, "Unavailable", "%s", why);
}

/* ---- the call table ---- */

static uint64_t id_hash(const char *id)
{
    return XXH3_64bits(id, strlen(id));
}

static tp_http_entry_t *table_get(tp_http_t *h, const char *id)
{
    uint64_t hv = id_hash(id);
    for (tp_http_entry_t *e = h->table[hv & (h->table_cap - 1)]; e; e = e->hnext)
        if (e->hash == hv && strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static int table_put(tp_http_t *h, tp_http_entry_t *e)
{
    if (h->table_n + 1 > h->table_cap) {
        size_t cap = h->table_cap * 2;
        tp_http_entry_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return -1;
        for (size_t i = 0; i < h->table_cap; i++)
            for (tp_http_entry_t *x = h->table[i], *nx; x; x = nx) {
                nx = x->hnext;
                x->hnext = t[x->hash & (cap - 1)];
                t[x->hash & (cap - 1)] = x;
            }
        free(h->table);
        h->table = t;
        h->table_cap = cap;
    }
    size_t k = e->hash & (h->table_cap - 1);
    e->hnext = h->table[k];
    h->table[k] = e;
    h->table_n++;
    return 0;
}

static void table_del(tp_http_t *h, tp_http_entry_t *e)
{
    for (tp_http_entry_t **pp = &h->table[e->hash & (h->table_cap - 1)]; *pp; pp = &(*pp)->hnext)
        if (*pp == e) {
            *pp = e->hnext;
            h->table_n--;
            return;
        }
}

/* Frees an entry no call and no request needs any more. */
static void entry_free(tp_http_entry_t *e)
{
    while (e->waits) {
        tp_http_wait_t *w = e->waits;
        e->waits = w->next;
        wait_free(w);
    }
    while (e->batches) {
        tp_http_link_t *l = e->batches;
        e->batches = l->next;
        free(l);
    }
    free(e->id);
    free(e->tool);
    free(e->body);
    free(e);
}

/* Forgets an ended call (off the table, and the kept list if it was on it). */
static void entry_drop(tp_http_t *h, tp_http_entry_t *e)
{
    table_del(h, e);
    if (e->kept) {
        if (e->kprev)
            e->kprev->knext = e->knext;
        else
            h->kept_head = e->knext;
        if (e->knext)
            e->knext->kprev = e->kprev;
        else
            h->kept_tail = e->kprev;
        h->kept_n--;
        h->kept_bytes -= e->body_len;
    }
    entry_free(e);
}

static tp_http_entry_t *entry_new(tp_http_t *h, const char *id, const char *tool, const tp_digest_t *identity)
{
    tp_http_entry_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->h = h;
    e->id = strdup(id);
    e->tool = strdup(tool);
    e->hash = id_hash(id);
    e->identity = *identity;
    if (e->id == NULL || e->tool == NULL || table_put(h, e) < 0) {
        entry_free(e);
        return NULL;
    }
    return e;
}

/* The identity of a call's input, as the engine works it out for the store: its tool and canonical args. */
static void identity_of(const tp_request_t *rq, tp_digest_t *out)
{
    tp_digest_t args;
    if (rq->canon)
        tp_digest_bytes(rq->canon, rq->canon_len, &args);
    else
        tp_digest_args(rq->jargs, &args);
    tp_identity_digest(rq->tool, &args, out);
}

/* An id for a call that came without one: unique in this process, and (its random prefix) beyond. */
static void new_id(tp_http_t *h, char *buf, size_t cap)
{
    snprintf(buf, cap, "call-%016llx-%llu", (unsigned long long)h->id_prefix, (unsigned long long)++h->id_seq);
}

/*
 * How a call's answer is told over HTTP: its result line (200), except the
 * answers that are the request's fault rather than the model's to read: an
 * unknown tool (404, with the engine's did-you-mean), an id recorded for
 * other input (409), a request the engine refused otherwise (400: args
 * past --max-args, an id past the store's key size), and a call the
 * draining engine never started (503). InvalidArguments stays a 200
 * result.
 */
static int answer_render(const tp_answer_t *a, tp_buf_t *body)
{
    if (a->not_started) {
        error_body(body, "Unavailable", "the service is draining: the call was not started (send it again later)");
        return 503;
    }
    const Toolpool__Result *r = a->result;
    if (r && !r->ok && !a->recorded && r->kind) {
        tp_kind_t k = tp_kind_from_name(r->kind);
        if (k == TP_KIND_UNKNOWN_TOOL || k == TP_KIND_INVALID_REQUEST) {
            const char *msg = r->message ? r->message : "";
            error_body(body, r->kind, msg);
            return k == TP_KIND_UNKNOWN_TOOL ? 404 : a->conflict ? 409 : 400;
        }
    }
    if (a->line == NULL || tp_buf_append(body, a->line, a->len) < 0) {
        tp_buf_reset(body);
        error_body(body, "InternalError", a->line ? "out of memory" : "the call ended without a result");
        return 500;
    }
    return 200;
}

static void batch_answer_line(tp_http_batch_t *b, const tp_answer_t *a);

/*
 * The engine's answer for a call of the table: each request waiting for it
 * gets its reply, each batch that asked for it the line; then the entry is
 * kept for GET (wait=0, cancelled), oldest dropped past the bounds, or
 * forgotten (a recorded answer is in the store; the others were nobody's
 * to fetch).
 */
static void entry_answer_cb(void *ctx, const tp_answer_t *a)
{
    tp_http_entry_t *e = ctx;
    tp_http_t *h = e->h;
    e->call = NULL;
    e->live = false;
    tp_buf_t body = {0};
    int status = answer_render(a, &body);
    while (e->waits) {
        tp_http_wait_t *w = e->waits;
        e->waits = w->next;
        /* A DELETE that came as the call ended (its answer waiting for its commit) did not cancel it. */
        bool cancelled = e->cancelled && a->result && a->result->kind && strcmp(a->result->kind, "Cancelled") == 0;
        if (w->kind == TP_WAIT_CANCEL && !cancelled) {
            char msg[600];
            snprintf(msg, sizeof msg, "call \"%.500s\" ended before it could be cancelled", e->id);
            wait_error(w, 409, "Conflict", msg);
        } else {
            wait_reply(w, status, "application/json", body.data, body.len);
        }
        wait_free(w);
    }
    while (e->batches) {
        tp_http_link_t *l = e->batches;
        e->batches = l->next;
        batch_answer_line(l->batch, a);
        free(l);
    }
    /* Only a result is kept: an error answer (a conflict, a refusal) would hide what the store holds. */
    if (!e->keep || h->freeing || status != 200) {
        tp_buf_free(&body);
        entry_drop(h, e);
        return;
    }
    e->status = status;
    e->body = (char *)body.data;
    e->body_len = body.len;
    e->kept = true;
    e->kprev = h->kept_tail;
    if (h->kept_tail)
        h->kept_tail->knext = e;
    else
        h->kept_head = e;
    h->kept_tail = e;
    h->kept_n++;
    h->kept_bytes += e->body_len;
    while (h->kept_head && (h->kept_n > TP_HTTP_KEEP_MAX || h->kept_bytes > TP_HTTP_KEEP_BYTES))
        entry_drop(h, h->kept_head);
}

/* Hands the call to the engine (its args too, without a copy). */
static void entry_submit(tp_http_t *h, tp_http_entry_t *e, tp_request_t *rq)
{
    e->live = true;
    tp_request_give_args(&h->parser, rq);
    e->call = tp_engine_submit(h->e, rq, entry_answer_cb, e);
}

/* A query parameter is off when it says 0 or false. */
static bool query_off(struct evhttp_request *req, const char *name)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (q == NULL)
        return false;
    struct evkeyvalq params = {0};
    if (evhttp_parse_query_str(q, &params) != 0)
        return false;
    const char *v = evhttp_find_header(&params, name);
    bool off = v && (strcmp(v, "0") == 0 || strcmp(v, "false") == 0);
    evhttp_clear_headers(&params);
    return off;
}

static const char *query_get(struct evhttp_request *req, const char *name, char *buf, size_t cap)
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
 * The request's body, made contiguous: *p (NULL when empty) and *len. -1
 * when it cannot be (out of memory), answered 500 here.
 */
static int body_of(tp_http_t *h, struct evhttp_request *req, const char **p, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    *p = *len ? (const char *)evbuffer_pullup(in, -1) : NULL;
    if (*len && *p == NULL) {
        reply_error(h, req, 500, "InternalError", "out of memory reading the body");
        return -1;
    }
    return 0;
}

static void reply_accepted(tp_http_t *h, struct evhttp_request *req, const char *id)
{
    char *enc = evhttp_uriencode(id, -1, 0);
    char loc[2048];
    if (enc && snprintf(loc, sizeof loc, "/v1/calls/%s", enc) < (int)sizeof loc &&
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location", loc) != 0)
        tp_log_warn("http: cannot set a reply's Location");
    free(enc);
    tp_buf_t b = {0};
    running_body(&b, id);
    reply(h, req, 202, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/*
 * POST /v1/calls: one call. Its answer, once durable, is the reply; with
 * wait=0 the reply is 202 at once and the answer is kept for GET. An id
 * that is live here is attached to, never run a second time; an id the
 * store has recorded is answered from it by the engine.
 */
static void calls_post(tp_http_t *h, struct evhttp_request *req)
{
    bool wait = !query_off(req, "wait");
    size_t len;
    const char *body;
    if (body_of(h, req, &body, &len) < 0)
        return;
    tp_request_t rq;
    tp_request_bad_t bad;
    char id[64];
    switch (tp_request_parse_line(&h->parser, body ? body : "", len, NULL, TP_REQUEST_ID_OPTIONAL | TP_REQUEST_DEADLINE,
                                  &rq, &bad)) {
    case TP_REQUEST_BLANK:
        reply_error(h, req, 400, "InvalidRequest", "the body is empty: send one call, a JSON object");
        return;
    case TP_REQUEST_BAD:
        reply_error(h, req, 400, "InvalidRequest", "%s", bad.message);
        return;
    case TP_REQUEST_CALL:
        break;
    }
    if (rq.id == NULL) {
        new_id(h, id, sizeof id);
        rq.id = id;
    }
    tp_digest_t identity;
    identity_of(&rq, &identity);
    tp_http_entry_t *e = table_get(h, rq.id);
    if (tp_engine_failed(h->e)) {
        reply_error(h, req, 503, "Unavailable", "the engine stopped on an error (see the service's log)");
        return;
    }
    if (e && e->live) {
        if (memcmp(e->identity.b, identity.b, TP_DIGEST_LEN) != 0) {
            reply_error(h, req, 409, "InvalidRequest",
                        "id \"%.300s\" is running now for other input (tool %.100s); give this call a new id", rq.id,
                        e->tool);
            return;
        }
    } else {
        if (tp_engine_live(h->e) >= h->o.max_queued) {
            /* However many clients send wait=0 calls, what the service holds stays bounded. */
            evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
            reply_error(h, req, 503, "Unavailable", "%zu calls are held already (--max-queued); send it again shortly",
                        tp_engine_live(h->e));
            return;
        }
        if (e)
            entry_drop(h, e); /* an ended call's kept answer: the engine answers the id anew */
        /* A wait=0 call to an unknown tool is told 404 like any other: it waits for the engine's answer. */
        if (!wait && tp_registry_find(tp_engine_registry(h->e), rq.tool) == NULL)
            wait = true;
        e = entry_new(h, rq.id, rq.tool, &identity);
        if (e == NULL) {
            reply_error(h, req, 500, "InternalError", "out of memory");
            return;
        }
        entry_submit(h, e, &rq);
    }
    if (!wait) {
        e->keep = true;
        reply_accepted(h, req, e->id);
        return;
    }
    tp_http_wait_t *w = wait_new(h, req, TP_WAIT_CALL);
    if (w == NULL) {
        e->keep = true; /* the call goes on: its answer can be fetched */
        reply_error(h, req, 500, "InternalError", "out of memory; the call runs on: GET /v1/calls/%.300s", e->id);
        return;
    }
    w->next = e->waits;
    e->waits = w;
}

/* GET /v1/calls/ID: the answer (200 and the result line), 202 while it runs, 404 unknown. */
static void calls_get(tp_http_t *h, struct evhttp_request *req, const char *id)
{
    tp_http_entry_t *e = table_get(h, id);
    if (e && e->live) {
        tp_buf_t b = {0};
        running_body(&b, id);
        reply(h, req, 202, "application/json", b.data, b.len);
        tp_buf_free(&b);
        return;
    }
    if (e) {
        reply(h, req, e->status, "application/json", e->body, e->body_len);
        return;
    }
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    Toolpool__StoredResult *sr;
    int rc = tp_result_get(tp_engine_store(h->e), txn, id, &sr);
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "no call \"%.500s\" is running here or recorded in the store", id);
        reply_error_when_durable(h, req, 404, "NotFound", msg);
        return;
    }
    if (rc) {
        store_error(h, req, rc, "reading a result");
        return;
    }
    tp_buf_t b = {0};
    int ok = tp_buf_append(&b, sr->line.data, sr->line.len);
    toolpool__stored_result__free_unpacked(sr, NULL);
    if (ok < 0) {
        tp_buf_free(&b);
        reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    reply_when_durable(h, req, 200, "application/json", &b);
}

/*
 * DELETE /v1/calls/ID: cancels a call that waits or runs; the reply is its
 * final answer (Cancelled, class guard, unless it ended first). 409 for a
 * call that has ended, 404 for one nobody knows.
 */
static void calls_delete(tp_http_t *h, struct evhttp_request *req, const char *id)
{
    tp_http_entry_t *e = table_get(h, id);
    if (e && e->live) {
        tp_http_wait_t *w = wait_new(h, req, TP_WAIT_CANCEL);
        if (w == NULL) {
            reply_error(h, req, 500, "InternalError", "out of memory");
            return;
        }
        w->next = e->waits;
        e->waits = w;
        if (e->call) {
            char why[600];
            snprintf(why, sizeof why, "cancelled by DELETE /v1/calls/%.500s", id);
            tp_call_t *c = e->call;
            e->call = NULL; /* one cancel per call */
            e->cancelled = true;
            e->keep = true;
            tp_engine_cancel(h->e, c, why);
        }
        return;
    }
    if (e) {
        reply_error(h, req, 409, "Conflict", "call \"%.500s\" has already ended", id);
        return;
    }
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    Toolpool__StoredResult *sr;
    int rc = tp_result_get(tp_engine_store(h->e), txn, id, &sr);
    char msg[600];
    if (rc == 0) {
        toolpool__stored_result__free_unpacked(sr, NULL);
        snprintf(msg, sizeof msg, "call \"%.500s\" has already ended (its result is recorded)", id);
        reply_error_when_durable(h, req, 409, "Conflict", msg);
    } else if (rc == MDB_NOTFOUND || rc == EPROTO) {
        snprintf(msg, sizeof msg, "no call \"%.500s\" is running here or recorded in the store", id);
        reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else {
        store_error(h, req, rc, "reading a result");
    }
}

/* ---- POST /v1/batch ---- */

static bool batch_taking(const tp_http_batch_t *b)
{
    return b->w->req != NULL && !b->ended && b->off < b->len && !b->h->draining;
}

static void batch_free(tp_http_batch_t *b)
{
    tp_http_t *h = b->h;
    if (b->prev)
        b->prev->next = b->next;
    else
        h->batches = b->next;
    if (b->next)
        b->next->prev = b->prev;
    wait_free(b->w);
    if (b->ev_close)
        event_free(b->ev_close);
    if (b->out)
        evbuffer_free(b->out);
    free(b);
}

static struct bufferevent *req_bev(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
    return evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
}

/* Sends the result lines gathered so far as one chunk. */
static void batch_written_cb(struct evhttp_connection *evcon, void *arg);

static void batch_send(tp_http_batch_t *b)
{
    if (evbuffer_get_length(b->out) == 0)
        return;
    if (b->w->req == NULL || b->ended) {
        if (evbuffer_drain(b->out, evbuffer_get_length(b->out)) != 0)
            tp_log_error("http: cannot drop a batch's output");
        return;
    }
    evhttp_send_reply_chunk_with_cb(b->w->req, b->out, batch_written_cb, b);
}

static void batch_close_cb(evutil_socket_t fd, short what, void *arg);

/*
 * Closes the sending side of a cut batch's connection once all it was
 * sent has left; until then it looks again every 2 ms (evhttp's write
 * callback is not the batch's before its first chunk).
 */
static void batch_close_when_out(tp_http_batch_t *b)
{
    struct bufferevent *bev = req_bev(b->w->req);
    if (bev == NULL)
        return; /* the connection is going */
    if (evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        static const struct timeval again = {0, 2000};
        if (b->ev_close == NULL)
            b->ev_close = evtimer_new(b->h->o.base, batch_close_cb, b);
        if (b->ev_close == NULL || evtimer_add(b->ev_close, &again) != 0)
            tp_log_warn("http: cannot wait to close a cut batch's stream: it closes with the service");
        return;
    }
    if (shutdown(bufferevent_getfd(bev), SHUT_WR) != 0)
        tp_log_warn("http: cannot close a cut batch's stream: %s", strerror(errno));
}

static void batch_close_cb(evutil_socket_t fd, short what, void *arg)
{
    batch_close_when_out(arg);
}

/*
 * Ends a batch that has nothing more to take and no answer to wait for:
 * its stream is closed, and it is freed.
 *
 * A batch that a drain cut short (lines not read, or handed over and not
 * started) must not end as if it were whole: its stream stops without
 * chunked encoding's last chunk, and the connection closes, so the client
 * sees a broken-off answer (curl exits 18, toolpool_client raises
 * Unavailable) and sends the batch again later; its recorded calls are
 * answered from the store then, the rest run. The batch stays on its
 * connection until that goes.
 */
static void batch_maybe_end(tp_http_batch_t *b)
{
    if (batch_taking(b) || b->pending > 0)
        return;
    if (b->w->req != NULL && !b->ended && (b->cut || (b->h->draining && b->off < b->len))) {
        b->cut = true;
        if (!b->cut_made) {
            b->cut_made = true;
            batch_send(b);
            batch_close_when_out(b);
        }
        return;
    }
    batch_send(b);
    struct evhttp_request *req = wait_take(b->w);
    if (req && !b->ended) {
        /* The idle timeout applies again to the connection's next request. */
        struct bufferevent *bev = req_bev(req);
        if (bev && bufferevent_set_timeouts(bev, &b->h->idle_tv, &b->h->idle_tv) != 0)
            tp_log_warn("http: cannot restore a connection's timeouts");
        evhttp_send_reply_end(req);
    }
    b->ended = true;
    batch_free(b);
}

static void batch_written_cb(struct evhttp_connection *evcon, void *arg)
{
    tp_http_batch_t *b = arg;
    if (b->stalled) {
        b->stalled = false;
        tp_engine_kick(b->h->e);
    }
}

/*
 * The client went (its connection closed; libevent has freed its request):
 * no more of its lines are taken; those handed over run on, and are
 * recorded, and the batch is freed once they have been answered.
 */
static void batch_client_gone(tp_http_batch_t *b)
{
    b->data = NULL;
    b->len = b->off = 0;
    batch_maybe_end(b);
}

static void batch_answer_line(tp_http_batch_t *b, const tp_answer_t *a)
{
    b->pending--;
    if (a->not_started)
        b->cut = true;
    if (a->line && b->w->req && !b->ended && evbuffer_add(b->out, a->line, a->len) != 0)
        tp_log_error("http: out of memory for a batch's result line");
}

static void batch_reject_cb(void *ctx, const tp_answer_t *a)
{
    batch_answer_line(ctx, a);
}

static void batch_reject(tp_http_batch_t *b, const char *id, const char *job, uint64_t step, const char *tool,
                         const char *msg)
{
    b->pending++;
    tp_engine_reject(b->h->e, id, job, step, tool, msg, batch_reject_cb, b);
}

/* Takes the batch's next line: a call handed over (or attached to a live one), a rejection, or nothing (blank). */
static void batch_take_line(tp_http_batch_t *b)
{
    tp_http_t *h = b->h;
    const char *p = b->data + b->off;
    size_t avail = b->len - b->off;
    const char *nl = memchr(p, '\n', avail);
    size_t n = nl ? (size_t)(nl - p) : avail;
    b->off += nl ? n + 1 : n;
    b->line_no++;
    char where[32], msg[TP_REQUEST_MSG_MAX];
    snprintf(where, sizeof where, "line %ld", b->line_no);
    if (n > h->o.max_line) {
        tp_request_too_long(msg, sizeof msg, where, h->o.max_line);
        batch_reject(b, NULL, NULL, 0, NULL, msg);
        return;
    }
    tp_request_t rq;
    tp_request_bad_t bad;
    switch (tp_request_parse_line(&h->parser, p, n, where, 0, &rq, &bad)) {
    case TP_REQUEST_BLANK:
        return;
    case TP_REQUEST_BAD:
        batch_reject(b, bad.id, bad.job, bad.step, bad.tool, bad.message);
        return;
    case TP_REQUEST_CALL:
        break;
    }
    tp_digest_t identity;
    identity_of(&rq, &identity);
    tp_http_entry_t *e = table_get(h, rq.id);
    if (e && e->live && memcmp(e->identity.b, identity.b, TP_DIGEST_LEN) != 0) {
        snprintf(msg, sizeof msg,
                 "%s: id \"%.300s\" is running now for other input (tool %.100s); give this call a new id", where,
                 rq.id, e->tool);
        batch_reject(b, rq.id, rq.job ? rq.job : rq.id, rq.step, rq.tool, msg);
        return;
    }
    bool fresh = false;
    if (e == NULL || !e->live) {
        if (e)
            entry_drop(h, e);
        e = entry_new(h, rq.id, rq.tool, &identity);
        fresh = true;
    }
    tp_http_link_t *l = e ? calloc(1, sizeof *l) : NULL;
    if (l == NULL) {
        snprintf(msg, sizeof msg, "%s: out of memory", where);
        if (e && fresh)
            entry_drop(h, e);
        batch_reject(b, rq.id, rq.job ? rq.job : rq.id, rq.step, rq.tool, msg);
        return;
    }
    l->batch = b;
    l->next = e->batches;
    e->batches = l;
    b->pending++;
    if (fresh)
        entry_submit(h, e, &rq);
}

/* Bytes of the batch's results not yet read by its client. */
static size_t batch_backlog(const tp_http_batch_t *b)
{
    struct bufferevent *bev = req_bev(b->w->req);
    return evbuffer_get_length(b->out) + (bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0);
}

/*
 * The engine's turn is open: hand it more batch lines, while the calls it
 * holds stay under the window, a turn's budget lasts, and each client
 * keeps up with its results. Batches take turns (the first of one turn is
 * the last of the next), so one large batch does not starve the others.
 */
static void feed_cb(void *ctx)
{
    tp_http_t *h = ctx;
    if (h->mcp_progress > 0)
        for (tp_http_mcp_t *x = h->mcp_sessions; x; x = x->next)
            tp_mcp_session_progress(x->s);
    if (h->finished || h->batches == NULL)
        return;
    int budget = TP_HTTP_LINES_PER_TURN;
    bool more = false;
    for (tp_http_batch_t *b = h->batches, *nx; b; b = nx) {
        nx = b->next;
        while (batch_taking(b) && budget > 0 && tp_engine_takes(h->e, h->o.window)) {
            if (batch_backlog(b) > TP_HTTP_BATCH_BACKLOG) {
                b->stalled = true;
                break;
            }
            batch_take_line(b);
            budget--;
        }
        if (batch_taking(b) && budget == 0 && !b->stalled)
            more = true;
        batch_maybe_end(b);
    }
    if (h->batches && h->batches->next) {
        tp_http_batch_t *first = h->batches;
        h->batches = first->next;
        h->batches->prev = NULL;
        tp_http_batch_t *last = h->batches;
        while (last->next)
            last = last->next;
        last->next = first;
        first->prev = last;
        first->next = NULL;
    }
    if (more)
        tp_engine_kick(h->e);
}

/* A commit's answers have been delivered: each batch sends its new lines as one chunk. */
static void flush_cb(void *ctx)
{
    tp_http_t *h = ctx;
    for (tp_http_batch_t *b = h->batches, *nx; b; b = nx) {
        nx = b->next;
        batch_send(b);
        batch_maybe_end(b);
    }
}

/*
 * POST /v1/batch: the body is JSONL, run's input; the reply is a stream of
 * result lines (chunked), each as it is committed, in the order the calls
 * end. Lines are read exactly as run reads them, and a bad one gets its
 * own result line. The read timeout is off while the stream runs (the
 * client only listens); the write timeout still drops one that stops
 * reading.
 */
static void batch_post(tp_http_t *h, struct evhttp_request *req)
{
    const char *body;
    size_t len;
    if (body_of(h, req, &body, &len) < 0)
        return;
    tp_http_batch_t *b = calloc(1, sizeof *b);
    if (b == NULL || (b->out = evbuffer_new()) == NULL || (b->w = wait_new(h, req, TP_WAIT_BATCH)) == NULL) {
        if (b && b->out)
            evbuffer_free(b->out);
        free(b);
        reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    b->h = h;
    b->w->batch = b;
    b->data = body;
    b->len = len;
    b->next = h->batches;
    if (b->next)
        b->next->prev = b;
    h->batches = b;
    if (evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson") != 0)
        tp_log_warn("http: cannot set a reply's Content-Type");
    count_reply(h, 200);
    evhttp_send_reply_start(req, 200, NULL);
    struct bufferevent *bev = req_bev(req);
    if (bev && bufferevent_set_timeouts(bev, NULL, &h->idle_tv) != 0)
        tp_log_warn("http: cannot lift a streaming connection's read timeout");
    tp_engine_kick(h->e);
}

/* ---- /mcp: MCP's Streamable HTTP transport ---- */

static void reply_method(tp_http_t *h, struct evhttp_request *req, const char *allow);

/*
 * Each POST carries one JSON-RPC message of a session (mcp_session.h). A
 * notification or a response is answered 202 with no body; a request, 200
 * with its response: as application/json, or, for a request whose answer
 * comes later (a tools/call) from a client that takes an event stream, as
 * text/event-stream, where the call's progress and log notifications go
 * before its response, which ends the stream. initialize makes the
 * session, and its reply gives the Mcp-Session-Id every later request
 * must send; DELETE ends the session (its running calls run on, and are
 * recorded). No stream is offered on GET: every message we send is about
 * a request, on that request's stream.
 */

/* Sessions kept at once; past it, the least recently used one with no call running is ended. */
#define TP_HTTP_MCP_SESSIONS 1024
/* A session with no call running and no request for this long is ended when a new one needs room. */
#define TP_HTTP_MCP_IDLE_US (3600ull * 1000000u)

static void mcp_wait_free(tp_http_wait_t *w)
{
    tp_http_t *h = w->h;
    if (w->sprev)
        w->sprev->snext = w->snext;
    else if (h->mcp_waits == w)
        h->mcp_waits = w->snext;
    if (w->snext)
        w->snext->sprev = w->sprev;
    wait_free(w);
}

/* The idle timeout applies again to the connection's next request. */
static void restore_timeouts(tp_http_t *h, struct evhttp_request *req)
{
    struct bufferevent *bev = req_bev(req);
    if (bev && bufferevent_set_timeouts(bev, &h->idle_tv, &h->idle_tv) != 0)
        tp_log_warn("http: cannot restore a connection's timeouts");
}

/* One server-sent event carrying msg. */
static int sse_event(struct evbuffer *b, const char *msg, size_t len)
{
    return evbuffer_add(b, "event: message\ndata: ", 21) == 0 && evbuffer_add(b, msg, len) == 0 &&
                   evbuffer_add(b, "\n\n", 2) == 0
               ? 0
               : -1;
}

/*
 * The session's messages for a POST: kept as the reply while the session
 * takes the POST's message; later, the response as the reply (JSON), or
 * each message as an event of the POST's stream. A client gone: dropped.
 */
static int mcp_send_cb(void *ctx, void *tag, const char *msg, size_t len, bool final)
{
    tp_http_wait_t *w = tag;
    (void)ctx;
    if (w == NULL)
        return 0;
    tp_http_t *h = w->h;
    if (w->in_take) {
        if (!final || msg == NULL)
            return 0;
        w->answered = true;
        return tp_buf_append(&w->body, msg, len);
    }
    if (w->req == NULL || (!w->sse && !final)) {
        if (final)
            mcp_wait_free(w);
        return 0;
    }
    if (msg == NULL) {
        /* Cancelled, or its session ended: no response; a client still there hears the end. */
        struct evhttp_request *req = wait_take(w);
        restore_timeouts(h, req);
        if (w->streaming)
            evhttp_send_reply_end(req);
        else
            reply(h, req, 202, NULL, NULL, 0);
        mcp_wait_free(w);
        return 0;
    }
    if (!w->sse) {
        struct evhttp_request *req = wait_take(w);
        restore_timeouts(h, req);
        reply(h, req, 200, "application/json", msg, len);
        mcp_wait_free(w);
        return 0;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL || sse_event(b, msg, len) != 0) {
        if (b)
            evbuffer_free(b);
        return -1;
    }
    if (!w->streaming) {
        struct evkeyvalq *hd = evhttp_request_get_output_headers(w->req);
        if (evhttp_add_header(hd, "Content-Type", "text/event-stream") != 0 ||
            evhttp_add_header(hd, "Cache-Control", "no-cache") != 0)
            tp_log_warn("http: cannot set an event stream's headers");
        count_reply(h, 200);
        evhttp_send_reply_start(w->req, 200, NULL);
        w->streaming = true;
    }
    evhttp_send_reply_chunk(w->req, b);
    evbuffer_free(b);
    if (final) {
        struct evhttp_request *req = wait_take(w);
        restore_timeouts(h, req);
        evhttp_send_reply_end(req);
        mcp_wait_free(w);
    }
    return 0;
}

static tp_http_mcp_t *mcp_find(tp_http_t *h, const char *id)
{
    for (tp_http_mcp_t *x = h->mcp_sessions; x; x = x->next)
        if (strcmp(tp_mcp_session_id(x->s), id) == 0)
            return x;
    return NULL;
}

static void mcp_unlink(tp_http_t *h, tp_http_mcp_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        h->mcp_sessions = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void mcp_push(tp_http_t *h, tp_http_mcp_t *x)
{
    x->next = h->mcp_sessions;
    if (x->next)
        x->next->prev = x;
    h->mcp_sessions = x;
}

/* Ends a session: no more requests; its running calls run on and are recorded. */
static void mcp_end(tp_http_t *h, tp_http_mcp_t *x)
{
    mcp_unlink(h, x);
    h->mcp_n--;
    tp_mcp_session_close(x->s);
    free(x);
}

/*
 * Room for one more session: those idle past TP_HTTP_MCP_IDLE_US are
 * ended, and at the cap the least recently used with no call running.
 * false when every session has a call running.
 */
static bool mcp_room(tp_http_t *h)
{
    uint64_t now = tp_now_us();
    tp_http_mcp_t *last = h->mcp_sessions;
    while (last && last->next)
        last = last->next;
    for (tp_http_mcp_t *x = last, *pv; x; x = pv) {
        pv = x->prev;
        bool idle = tp_mcp_session_live(x->s) == 0;
        if (idle && (h->mcp_n >= TP_HTTP_MCP_SESSIONS || now - x->used_us > TP_HTTP_MCP_IDLE_US))
            mcp_end(h, x);
    }
    return h->mcp_n < TP_HTTP_MCP_SESSIONS;
}

static tp_http_mcp_t *mcp_new(tp_http_t *h)
{
    tp_http_mcp_t *x = calloc(1, sizeof *x);
    tp_mcp_sink_t sink = {.send = mcp_send_cb, .ctx = h, .progress_count = &h->mcp_progress};
    if (x == NULL || (x->s = tp_mcp_session_new(h->e, h->mcp_tools, h->o.version, &sink)) == NULL) {
        free(x);
        return NULL;
    }
    mcp_push(h, x);
    h->mcp_n++;
    return x;
}

/* Whether the Accept header names type (or a wildcard for it). No header: anything. */
static bool accepts(struct evhttp_request *req, const char *type)
{
    const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
    if (a == NULL || strstr(a, "*/*"))
        return true;
    return strstr(a, type) != NULL;
}

/*
 * The Origin a browser sends, checked as the transport asks (against DNS
 * rebinding): none, a loopback host, or the host the request was sent to.
 */
static bool origin_ok(struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *origin = evhttp_find_header(in, "Origin");
    if (origin == NULL)
        return true;
    struct evhttp_uri *u = evhttp_uri_parse(origin);
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    bool ok = false;
    if (host) {
        ok = strcmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0 || strcmp(host, "[::1]") == 0 ||
             strcmp(host, "::1") == 0;
        const char *to = evhttp_find_header(in, "Host");
        size_t n = strlen(host);
        if (!ok && to && strncmp(to, host, n) == 0 && (to[n] == '\0' || to[n] == ':'))
            ok = true;
    }
    if (u)
        evhttp_uri_free(u);
    return ok;
}

/* A JSON-RPC error with a null id, as the body of an HTTP error. */
static void mcp_http_error(tp_http_t *h, struct evhttp_request *req, int status, int code, const char *message)
{
    tp_buf_t b = {0};
    tp_buf_printf(&b, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":", code);
    tp_json_put_string(&b, message, strlen(message));
    tp_buf_puts(&b, "}}\n");
    reply(h, req, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/* Whether the body is an initialize request (read only for a POST without a session). */
static bool is_initialize(const char *body, size_t len)
{
    json_t *v = json_loadb(body, len, 0, NULL);
    const char *m = json_string_value(json_object_get(v, "method"));
    bool yes = m && strcmp(m, "initialize") == 0 && json_object_get(v, "id") != NULL;
    json_decref(v);
    return yes;
}

static void mcp_post(tp_http_t *h, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *body;
    size_t len;
    if (body_of(h, req, &body, &len) < 0)
        return;
    const char *version = evhttp_find_header(in, "MCP-Protocol-Version");
    if (version && !tp_mcp_version_known(version)) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "Bad Request: unsupported MCP-Protocol-Version %.40s (this server speaks "
                 "2025-11-25 and 2025-06-18)",
                 version);
        mcp_http_error(h, req, 400, TP_RPC_INVALID_REQUEST, msg);
        return;
    }
    if (len == 0) {
        mcp_http_error(h, req, 400, TP_RPC_PARSE_ERROR, "Parse error: the body is empty (one JSON-RPC message)");
        return;
    }
    const char *sid = evhttp_find_header(in, "Mcp-Session-Id");
    tp_http_mcp_t *x = NULL;
    bool fresh = false;
    if (sid) {
        if ((x = mcp_find(h, sid)) == NULL) {
            mcp_http_error(h, req, 404, TP_RPC_INVALID_REQUEST,
                           "Not Found: no such session (it ended, or the server restarted): send initialize again");
            return;
        }
    } else if (!is_initialize(body, len)) {
        mcp_http_error(h, req, 400, TP_RPC_INVALID_REQUEST,
                       "Bad Request: no Mcp-Session-Id header (a session begins with initialize)");
        return;
    } else if (!mcp_room(h)) {
        mcp_http_error(h, req, 503, TP_RPC_INTERNAL_ERROR,
                       "Service Unavailable: too many MCP sessions with calls running");
        return;
    } else if ((x = mcp_new(h)) == NULL) {
        mcp_http_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
        return;
    } else {
        fresh = true;
    }
    mcp_unlink(h, x);
    mcp_push(h, x);
    x->used_us = tp_now_us();
    tp_http_wait_t *w = wait_new(h, req, TP_WAIT_MCP);
    if (w == NULL) {
        if (fresh)
            mcp_end(h, x);
        mcp_http_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
        return;
    }
    w->mcp = x;
    w->sse = accepts(req, "text/event-stream");
    w->json_ok = accepts(req, "application/json");
    w->snext = h->mcp_waits;
    if (w->snext)
        w->snext->sprev = w;
    h->mcp_waits = w;
    w->in_take = true;
    tp_mcp_took_t took = tp_mcp_session_take(x->s, body, len, w);
    w->in_take = false;
    if (fresh) {
        if (tp_mcp_session_initialized(x->s)) {
            if (evhttp_add_header(evhttp_request_get_output_headers(req), "Mcp-Session-Id", tp_mcp_session_id(x->s)) !=
                0)
                tp_log_warn("http: cannot set a reply's Mcp-Session-Id");
        } else {
            mcp_end(h, x); /* initialize was refused: no session */
        }
    }
    if (took == TP_MCP_TOOK_REQUEST && !w->answered) {
        /* Its answer comes when the call ends: the client only listens meanwhile. */
        struct bufferevent *bev = req_bev(req);
        if (bev && bufferevent_set_timeouts(bev, NULL, &h->idle_tv) != 0)
            tp_log_warn("http: cannot lift a waiting connection's read timeout");
        return;
    }
    struct evhttp_request *r = wait_take(w);
    if (took == TP_MCP_TOOK_NOTIFICATION) {
        reply(h, r, 202, NULL, NULL, 0);
    } else if (took == TP_MCP_TOOK_BAD) {
        reply(h, r, 400, "application/json", w->body.data, w->body.len);
    } else if (!w->json_ok && w->sse) {
        struct evbuffer *b = evhttp_request_get_output_buffer(r);
        if (sse_event(b, (const char *)w->body.data, w->body.len) != 0)
            tp_log_error("http: out of memory for an event");
        reply(h, r, 200, "text/event-stream", NULL, 0);
    } else {
        reply(h, r, 200, "application/json", w->body.data, w->body.len);
    }
    mcp_wait_free(w);
}

/* DELETE /mcp: the client ends its session. */
static void mcp_delete(tp_http_t *h, struct evhttp_request *req)
{
    const char *sid = evhttp_find_header(evhttp_request_get_input_headers(req), "Mcp-Session-Id");
    tp_http_mcp_t *x = sid ? mcp_find(h, sid) : NULL;
    if (sid == NULL)
        mcp_http_error(h, req, 400, TP_RPC_INVALID_REQUEST, "Bad Request: no Mcp-Session-Id header");
    else if (x == NULL)
        mcp_http_error(h, req, 404, TP_RPC_INVALID_REQUEST, "Not Found: no such session");
    else {
        mcp_end(h, x);
        reply(h, req, 204, NULL, NULL, 0);
    }
}

static void mcp_route(tp_http_t *h, struct evhttp_request *req, enum evhttp_cmd_type m)
{
    if (!origin_ok(req)) {
        mcp_http_error(h, req, 403, TP_RPC_INVALID_REQUEST, "Forbidden: the request's Origin is not this server");
        return;
    }
    if (m == EVHTTP_REQ_POST)
        mcp_post(h, req);
    else if (m == EVHTTP_REQ_DELETE)
        mcp_delete(h, req);
    else
        reply_method(h, req, "POST, DELETE");
}

/* ---- /v1/jobs/JOB/checkpoint ---- */

/*
 * PUT: {"step": N, "state": ANY} stores an agent loop's own checkpoint of
 * the job (the latest replaces the last), committed before the reply
 * {"job", "step"}. GET: {"job", "step", "state", "updated_ms"}, or 404.
 */
static void checkpoint_put(tp_http_t *h, struct evhttp_request *req, const char *job)
{
    size_t len;
    const char *body;
    if (body_of(h, req, &body, &len) < 0)
        return;
    json_error_t jerr;
    json_t *doc = body ? json_loadb(body, len, 0, &jerr) : NULL;
    json_t *jstep = json_object_get(doc, "step"), *state = json_object_get(doc, "state");
    if (doc == NULL) {
        if (body)
            reply_error(h, req, 400, "InvalidRequest", "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        else
            reply_error(h, req, 400, "InvalidRequest", "the body is empty: send {\"step\": N, \"state\": ...}");
        return;
    }
    const char *bad = !json_is_object(doc) ? "a checkpoint must be a JSON object"
                      : !json_is_integer(jstep) || json_integer_value(jstep) < 0
                          ? "\"step\" must be a non-negative integer"
                      : state == NULL ? "\"state\" is missing (any JSON will do)"
                                      : NULL;
    if (bad) {
        reply_error(h, req, 400, "InvalidRequest", "%s", bad);
        json_decref(doc);
        return;
    }
    uint64_t step = (uint64_t)json_integer_value(jstep);
    tp_buf_t text = {0};
    if (tp_json_write(&text, state, 0) < 0) {
        tp_buf_free(&text);
        json_decref(doc);
        reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    json_decref(doc);
    tp_store_t *store = tp_engine_store(h->e);
    if (store && strlen(job) > tp_store_max_key(store)) {
        tp_buf_free(&text);
        reply_error(h, req, 400, "InvalidRequest", "the job's name is %zu bytes; the store takes at most %zu",
                    strlen(job), tp_store_max_key(store));
        return;
    }
    MDB_txn *txn = store_txn(h, req);
    if (txn && !tp_engine_room(h->e, text.len))
        txn = NULL; /* the engine failed making room: it said why */
    int rc = txn ? tp_checkpoint_state_put(store, txn, job, step, (const char *)text.data, text.len) : 0;
    tp_buf_free(&text);
    if (txn == NULL) {
        if (tp_engine_failed(h->e))
            reply_error(h, req, 503, "Unavailable", "the store cannot be used now (see the service's log)");
        return;
    }
    if (rc) {
        store_error(h, req, rc, "saving a job's checkpoint");
        return;
    }
    reply_json_when_durable(h, req, 200, json_pack("{s:s, s:I}", "job", job, "step", (json_int_t)step));
}

static void checkpoint_get(tp_http_t *h, struct evhttp_request *req, const char *job)
{
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    json_t *o = NULL;
    int rc = tp_records_agent_state_json(tp_engine_store(h->e), txn, job, &o);
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "job \"%.500s\" has no checkpoint saved", job);
        reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else if (rc == ENOMEM) {
        reply_error(h, req, 500, "InternalError", "out of memory");
    } else if (rc) {
        store_error(h, req, rc, "reading a job's checkpoint");
    } else {
        reply_json_when_durable(h, req, 200, o);
    }
}

/* ---- /v1/breakers, /v1/escalations: what `toolpool breakers` and `escalations` do ---- */

static void breakers_get(tp_http_t *h, struct evhttp_request *req, const char *key)
{
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    tp_store_t *s = tp_engine_store(h->e);
    json_t *o = NULL;
    int rc;
    if (key == NULL) {
        json_t *all = NULL;
        rc = tp_records_breakers_json(s, txn, &all);
        if (rc == 0 && (o = json_pack("{s:o}", "breakers", all)) == NULL)
            rc = ENOMEM;
    } else {
        MDB_val k, v;
        rc = tp_records_breaker_find(s, txn, key, &k, &v);
        if (rc == 0 && (o = tp_records_breaker_json(&k, &v, true)) == NULL)
            rc = EPROTO;
    }
    char msg[800];
    if (rc == MDB_NOTFOUND || rc == EEXIST) {
        snprintf(msg, sizeof msg, "%s breaker %.600s", rc == EEXIST ? "more than one" : "no", key);
        reply_error_when_durable(h, req, rc == EEXIST ? 409 : 404, rc == EEXIST ? "Conflict" : "NotFound", msg);
    } else if (rc == ENOMEM) {
        reply_error(h, req, 500, "InternalError", "out of memory");
    } else if (rc) {
        store_error(h, req, rc, "reading the breakers");
    } else {
        reply_json_when_durable(h, req, 200, o);
    }
}

/* POST /v1/breakers/ID/reset: closes the breaker and forgets its failures, committed before the reply. */
static void breakers_reset(tp_http_t *h, struct evhttp_request *req, const char *key)
{
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    char id[TP_RECORDS_ID_MAX], msg[800];
    int rc = tp_records_breaker_reset(tp_engine_store(h->e), txn, key, id, sizeof id);
    if (rc == MDB_NOTFOUND || rc == EEXIST) {
        snprintf(msg, sizeof msg, "%s breaker %.600s", rc == EEXIST ? "more than one" : "no", key);
        reply_error_when_durable(h, req, rc == EEXIST ? 409 : 404, rc == EEXIST ? "Conflict" : "NotFound", msg);
    } else if (rc) {
        store_error(h, req, rc, "resetting a breaker");
    } else {
        reply_json_when_durable(h, req, 200, json_pack("{s:s, s:b}", "id", id, "reset", 1));
    }
}

static void escalations_get(tp_http_t *h, struct evhttp_request *req, const char *id)
{
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL)
        return;
    tp_store_t *s = tp_engine_store(h->e);
    json_t *o = NULL;
    int rc;
    if (id == NULL) {
        char all[8];
        json_t *list = NULL;
        bool everything = query_get(req, "all", all, sizeof all) && strcmp(all, "0") != 0 && strcmp(all, "false") != 0;
        rc = tp_records_escalations_json(s, txn, everything, &list);
        if (rc == 0 && (o = json_pack("{s:o}", "escalations", list)) == NULL)
            rc = ENOMEM;
    } else {
        Toolpool__Escalation *e;
        rc = tp_records_escalation_get(s, txn, id, &e);
        if (rc == 0) {
            o = tp_records_escalation_json(e, true);
            toolpool__escalation__free_unpacked(e, NULL);
            rc = o ? 0 : ENOMEM;
        }
    }
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "no escalation %.500s", id);
        reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else if (rc == ENOMEM) {
        reply_error(h, req, 500, "InternalError", "out of memory");
    } else if (rc) {
        store_error(h, req, rc, "reading the escalations");
    } else {
        reply_json_when_durable(h, req, 200, o);
    }
}

/* POST /v1/escalations/ID/resolve, body optional {"note": "..."}: the escalation as it is now resolved. */
static void escalations_resolve(tp_http_t *h, struct evhttp_request *req, const char *id)
{
    size_t len;
    const char *body;
    if (body_of(h, req, &body, &len) < 0)
        return;
    json_t *doc = NULL;
    const char *note = NULL;
    bool rerun = false;
    if (body) {
        json_error_t jerr;
        doc = json_loadb(body, len, 0, &jerr);
        if (doc == NULL) {
            reply_error(h, req, 400, "InvalidRequest", "not valid JSON: %s (column %d)", jerr.text, jerr.column);
            return;
        }
        json_t *jnote = json_object_get(doc, "note"), *jrerun = json_object_get(doc, "rerun");
        json_t *jaccept = json_object_get(doc, "accept");
        if (!json_is_object(doc) || (jnote && !json_is_string(jnote)) || (jrerun && !json_is_boolean(jrerun)) ||
            (jaccept && !json_is_boolean(jaccept)) || (json_is_true(jrerun) && json_is_true(jaccept))) {
            json_decref(doc);
            reply_error(h, req, 400, "InvalidRequest",
                        "the body must be {\"note\": \"...\", \"rerun\": true | \"accept\": true} (or nothing)");
            return;
        }
        note = json_string_value(jnote);
        rerun = json_is_true(jrerun);
    }
    MDB_txn *txn = store_txn(h, req);
    if (txn == NULL) {
        json_decref(doc);
        return;
    }
    tp_store_t *s = tp_engine_store(h->e);
    char call_id[600] = "";
    bool forgot = false;
    int rc = rerun ? tp_records_escalation_rerun(s, txn, id, note, call_id, sizeof call_id, &forgot)
                   : tp_records_escalation_resolve(s, txn, id, note);
    json_decref(doc);
    Toolpool__Escalation *e = NULL;
    if (rc == 0)
        rc = tp_records_escalation_get(s, txn, id, &e);
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "no escalation %.500s", id);
        reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else if (rc) {
        store_error(h, req, rc, "resolving an escalation");
    } else {
        json_t *o = tp_records_escalation_json(e, true);
        toolpool__escalation__free_unpacked(e, NULL);
        if (o && (json_object_set_new(o, "decision", json_string(rerun ? "rerun" : "accept")) != 0 ||
                  json_object_set_new(o, "forgot", json_boolean(forgot)) != 0)) {
            json_decref(o);
            o = NULL;
        }
        reply_json_when_durable(h, req, 200, o);
    }
}

/* ---- /v1/tools ---- */

/*
 * The registry's tools three ways, rendered once (the registry does not
 * change while serve runs) by supervisor/registry/toolsdoc.c, as `toolpool tools
 * export` prints them.
 */
static int tools_render(tp_http_t *h)
{
    const tp_registry_t *reg = tp_engine_registry(h->e);
    tp_buf_t *bufs[] = {&h->tools_own, &h->tools_openai, &h->tools_mcp};
    tp_toolsdoc_format_t fmts[] = {TP_TOOLSDOC_TOOLPOOL, TP_TOOLSDOC_OPENAI, TP_TOOLSDOC_MCP};
    for (size_t i = 0; i < 3; i++) {
        json_t *doc = tp_toolsdoc_render(reg, fmts[i]);
        if (doc == NULL || json_body(bufs[i], doc) < 0)
            return -1;
    }
    return 0;
}

static void tools_get(tp_http_t *h, struct evhttp_request *req)
{
    char format[32];
    const char *f = query_get(req, "format", format, sizeof format);
    const tp_buf_t *b = f == NULL || strcmp(f, "toolpool") == 0 ? &h->tools_own
                        : strcmp(f, "openai") == 0              ? &h->tools_openai
                        : strcmp(f, "mcp") == 0                 ? &h->tools_mcp
                                                                : NULL;
    if (b == NULL) {
        reply_error(h, req, 400, "InvalidRequest", "format \"%.100s\": expected openai, mcp or toolpool", f);
        return;
    }
    reply(h, req, 200, "application/json", b->data, b->len);
}

/* ---- /metrics ---- */

/* A label value, escaped as the text format wants (backslash, quote, newline). */
static void put_label(tp_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            tp_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            tp_buf_puts(b, "\\n");
        else
            tp_buf_append(b, v, 1);
    }
}

static void metric_head(tp_buf_t *b, const char *name, const char *type, const char *help)
{
    tp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Upper bounds of the latency buckets, in seconds: Prometheus's defaults, and a minute. */
static const double tp_metrics_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define TP_METRICS_LE (sizeof tp_metrics_le / sizeof tp_metrics_le[0])

/*
 * One histogram's samples from a summary's log-linear one (summary.h, ~6%
 * wide buckets): a bucket counts under a bound when its middle is at or
 * below it, so the counts are within the buckets' precision; _sum is the
 * exact sum. labels: what goes before le, with its trailing comma.
 */
static void put_histogram(tp_buf_t *b, const char *name, const char *labels, const tp_summary_t *s)
{
    uint64_t cum[TP_METRICS_LE] = {0}, total = 0;
    double sum_us = (double)s->sum_us;
    for (unsigned i = 0; i < TP_HIST_BUCKETS; i++) {
        uint64_t n = s->hist[i];
        if (n == 0)
            continue;
        uint64_t lo, hi;
        tp_summary_bucket_range(i, &lo, &hi);
        double mid = hi == UINT64_MAX ? (double)lo : (double)lo + (double)(hi - lo - 1) / 2;
        total += n;
        for (size_t k = 0; k < TP_METRICS_LE; k++)
            if (mid <= tp_metrics_le[k] * 1e6)
                cum[k] += n;
    }
    for (size_t k = 0; k < TP_METRICS_LE; k++)
        tp_buf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, tp_metrics_le[k], (unsigned long long)cum[k]);
    tp_buf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)total);
    size_t n = strlen(labels);
    tp_buf_printf(b, "%s_sum%s%.*s%s %.6f\n", name, n ? "{" : "", (int)(n ? n - 1 : 0), labels, n ? "}" : "",
                  sum_us / 1e6);
    tp_buf_printf(b, "%s_count%s%.*s%s %llu\n", name, n ? "{" : "", (int)(n ? n - 1 : 0), labels, n ? "}" : "",
                  (unsigned long long)total);
}

typedef struct {
    tp_buf_t *b;
    uint64_t n[2][3]; /* [call, tool][open, half-open, closed] */
    bool head;
} breaker_tally_t;

static int breaker_tally_cb(void *ctx, const tp_breaker_info_t *info)
{
    breaker_tally_t *t = ctx;
    int st = strcmp(info->state, "open") == 0 ? 0 : strcmp(info->state, "half-open") == 0 ? 1 : 2;
    t->n[info->is_tool][st]++;
    if (info->is_tool) {
        if (!t->head) {
            metric_head(t->b, "toolpool_tool_breaker_open", "gauge",
                        "A tool's breaker: 1 open, 0.5 half-open (probing), 0 closed.");
            t->head = true;
        }
        tp_buf_puts(t->b, "toolpool_tool_breaker_open{tool=\"");
        put_label(t->b, info->tool);
        tp_buf_printf(t->b, "\"} %s\n", st == 0 ? "1" : st == 1 ? "0.5" : "0");
    }
    return 0;
}

/*
 * GET /metrics: Prometheus text (0.0.4). Calls by tool and outcome,
 * attempts, retries, timeouts and latency from the engine's counters; the
 * breakers and open escalations from the store (every process's, as the
 * CLI sees them); workers, queue and commits now.
 */
static void metrics_get(tp_http_t *h, struct evhttp_request *req)
{
    tp_buf_t b = {0}, lab = {0};
    const tp_engine_stats_t *st = tp_engine_stats(h->e);
    const tp_registry_t *reg = tp_engine_registry(h->e);

    metric_head(&b, "toolpool_calls_total", "counter", "Calls answered, by tool and outcome (ok, or the error kind).");
    for (size_t i = 0; i < reg->n_tools; i++)
        for (int k = 0; k <= TP_KIND__COUNT; k++) {
            uint64_t n = st->tools[i].by_kind[k];
            if (n == 0)
                continue;
            tp_buf_puts(&b, "toolpool_calls_total{tool=\"");
            put_label(&b, reg->tools[i].name);
            tp_buf_printf(&b, "\",outcome=\"%s\"} %llu\n", k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                          (unsigned long long)n);
        }
    const struct {
        const char *name, *help;
        size_t off;
        /* clang-format off */
    } per_tool[] = {
        {"toolpool_attempts_total", "Attempts made, by tool (every try of every call).", offsetof(tp_summary_t, attempts)},
        {"toolpool_retries_total", "Attempts after a call's first, by tool.", offsetof(tp_summary_t, retries)},
    };
    /* clang-format on */
    for (size_t m = 0; m < sizeof per_tool / sizeof per_tool[0]; m++) {
        metric_head(&b, per_tool[m].name, "counter", per_tool[m].help);
        for (size_t i = 0; i < reg->n_tools; i++) {
            tp_buf_printf(&b, "%s{tool=\"", per_tool[m].name);
            put_label(&b, reg->tools[i].name);
            tp_buf_printf(&b, "\"} %llu\n",
                          (unsigned long long)*(const uint64_t *)((const char *)&st->tools[i] + per_tool[m].off));
        }
    }
    metric_head(&b, "toolpool_call_duration_seconds", "histogram",
                "Call latency, first attempt to end, by tool (from a ~6%-precision histogram).");
    for (size_t i = 0; i < reg->n_tools; i++) {
        tp_buf_reset(&lab);
        tp_buf_puts(&lab, "tool=\"");
        put_label(&lab, reg->tools[i].name);
        tp_buf_puts(&lab, "\",");
        tp_buf_append(&lab, "", 1);
        put_histogram(&b, "toolpool_call_duration_seconds", (const char *)lab.data, &st->tools[i]);
    }
    metric_head(&b, "toolpool_timeouts_total", "counter", "Attempts that ran into their timeout.");
    tp_buf_printf(&b, "toolpool_timeouts_total %llu\n", (unsigned long long)st->timeouts);
    metric_head(&b, "toolpool_answered_recorded_total", "counter", "Calls answered from the store, not run again.");
    tp_buf_printf(&b, "toolpool_answered_recorded_total %llu\n", (unsigned long long)st->answered_recorded);
    metric_head(&b, "toolpool_rejected_total", "counter",
                "Requests answered without a call (malformed, unknown tool).");
    tp_buf_printf(&b, "toolpool_rejected_total %llu\n", (unsigned long long)st->rejected);
    metric_head(&b, "toolpool_commits_total", "counter", "Store commits (each covers a group of results).");
    tp_buf_printf(&b, "toolpool_commits_total %llu\n", (unsigned long long)st->commits);
    metric_head(&b, "toolpool_commit_duration_seconds", "histogram", "How long store commits take (fsync included).");
    put_histogram(&b, "toolpool_commit_duration_seconds", "", &st->commit_latency);

    metric_head(&b, "toolpool_workers", "gauge", "Worker slots: busy (running an attempt) or idle (ready for one).");
    tp_buf_printf(&b, "toolpool_workers{state=\"busy\"} %d\ntoolpool_workers{state=\"idle\"} %d\n",
                  tp_engine_busy(h->e), tp_engine_idle(h->e));
    metric_head(&b, "toolpool_queue_depth", "gauge",
                "Calls waiting for a slot (ready, at a concurrency cap, or in a backoff).");
    tp_buf_printf(&b, "toolpool_queue_depth %zu\n", tp_engine_waiting(h->e));
    metric_head(&b, "toolpool_calls_live", "gauge", "Calls the engine holds now (submitted, not yet answered).");
    tp_buf_printf(&b, "toolpool_calls_live %zu\n", tp_engine_live(h->e));
    const tp_pool_stats_t *ps = tp_engine_pool_stats(h->e);
    metric_head(&b, "toolpool_worker_starts_total", "counter", "Worker processes started.");
    tp_buf_printf(&b, "toolpool_worker_starts_total %llu\n", (unsigned long long)ps->spawned);
    metric_head(&b, "toolpool_worker_crashes_total", "counter", "Workers that died without being told to.");
    tp_buf_printf(&b, "toolpool_worker_crashes_total %llu\n", (unsigned long long)ps->crashed);
    metric_head(&b, "toolpool_worker_recycles_total", "counter", "Workers replaced after --recycle-after calls.");
    tp_buf_printf(&b, "toolpool_worker_recycles_total %llu\n", (unsigned long long)ps->recycled);

    metric_head(&b, "toolpool_http_connections", "gauge", "Open HTTP connections.");
    tp_buf_printf(&b, "toolpool_http_connections %d\n", h->n_conns);
    metric_head(&b, "toolpool_http_connections_accepted_total", "counter", "HTTP connections accepted.");
    tp_buf_printf(&b, "toolpool_http_connections_accepted_total %llu\n", (unsigned long long)h->accepted);
    metric_head(&b, "toolpool_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int code = 100; code < 600; code++)
        if (h->by_status[code])
            tp_buf_printf(&b, "toolpool_http_responses_total{code=\"%d\"} %llu\n", code,
                          (unsigned long long)h->by_status[code]);
    metric_head(&b, "toolpool_http_calls_tracked", "gauge",
                "Calls the HTTP front tracks: running, or ended and kept for GET.");
    tp_buf_printf(&b, "toolpool_http_calls_tracked %zu\n", h->table_n);
    tp_buf_free(&lab);

    /* The store's part: every process's breakers and escalations, as the CLI lists them. */
    MDB_txn *txn = tp_engine_store(h->e) ? tp_engine_txn(h->e) : NULL;
    if (txn == NULL) {
        reply(h, req, 200, "text/plain; version=0.0.4", b.data, b.len);
        tp_buf_free(&b);
        return;
    }
    tp_store_t *s = tp_engine_store(h->e);
    breaker_tally_t t = {.b = &b};
    uint64_t open = 0, total = 0;
    int rc = tp_records_breakers_each(s, txn, breaker_tally_cb, &t);
    if (rc == 0)
        rc = tp_records_escalations_count(s, txn, &open, &total);
    if (rc) {
        tp_buf_free(&b);
        store_error(h, req, rc, "reading breakers and escalations for /metrics");
        return;
    }
    static const char *const states[] = {"open", "half-open", "closed"};
    metric_head(&b, "toolpool_breakers", "gauge", "Breakers in the store, by type (tool, call) and state.");
    for (int ty = 0; ty < 2; ty++)
        for (int k = 0; k < 3; k++)
            if (ty == 1 || k != 1) /* a same-call breaker is never half-open */
                tp_buf_printf(&b, "toolpool_breakers{type=\"%s\",state=\"%s\"} %llu\n", ty ? "tool" : "call", states[k],
                              (unsigned long long)t.n[ty][k]);
    metric_head(&b, "toolpool_escalations_open", "gauge", "Escalations waiting for a person.");
    tp_buf_printf(&b, "toolpool_escalations_open %llu\n", (unsigned long long)open);
    metric_head(&b, "toolpool_escalations", "gauge", "Escalations in the store, open and resolved.");
    tp_buf_printf(&b, "toolpool_escalations %llu\n", (unsigned long long)total);
    reply_when_durable(h, req, 200, "text/plain; version=0.0.4", &b);
}

/* ---- /healthz, /readyz ---- */

/* Why the service cannot take calls now, or NULL when it can: workers up, store usable, not draining. */
static const char *not_ready(tp_http_t *h)
{
    if (h->draining || tp_engine_draining(h->e))
        return "draining";
    if (tp_engine_failed(h->e))
        return "the engine stopped on an error (see the service's log)";
    if (tp_engine_store(h->e) == NULL)
        return "no store";
    if (tp_engine_busy(h->e) + tp_engine_idle(h->e) == 0)
        return "no worker is up yet";
    return NULL;
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
        tp_log_warn("http: cannot set a reply's Allow");
    reply_error(h, req, 405, "MethodNotAllowed", "this path takes %s", allow);
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

/*
 * The routes under /v1/ that name a record: /v1/calls/ID, /v1/jobs/JOB/checkpoint,
 * /v1/breakers/ID[/reset], /v1/escalations/ID[/resolve]. Returns false when
 * path is none of them.
 */
static bool route_record(tp_http_t *h, struct evhttp_request *req, const char *path, enum evhttp_cmd_type m)
{
    bool get = m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;
    size_t n = strlen(path);
    const char *rest;
    size_t rest_n;
    enum { CALL, JOB, BREAKER, BREAKER_RESET, ESCALATION, ESCALATION_RESOLVE } what;
    if (has_prefix(path, "/v1/calls/")) {
        what = CALL;
        rest = path + 10;
        rest_n = n - 10;
    } else if (has_prefix(path, "/v1/jobs/") && has_suffix(path + 9, n - 9, "/checkpoint")) {
        what = JOB;
        rest = path + 9;
        rest_n = n - 9 - 11;
    } else if (has_prefix(path, "/v1/breakers/")) {
        rest = path + 13;
        rest_n = n - 13;
        what = m == EVHTTP_REQ_POST && has_suffix(rest, rest_n, "/reset") ? BREAKER_RESET : BREAKER;
        if (what == BREAKER_RESET)
            rest_n -= 6;
    } else if (has_prefix(path, "/v1/escalations/")) {
        rest = path + 16;
        rest_n = n - 16;
        what = has_suffix(rest, rest_n, "/resolve") ? ESCALATION_RESOLVE : ESCALATION;
        if (what == ESCALATION_RESOLVE)
            rest_n -= 8;
    } else {
        return false;
    }
    char *name = rest_n ? path_decode(rest, rest_n) : NULL;
    if (name == NULL) {
        reply_error(h, req, 404, "NotFound", "no such path: %.600s", path);
        return true;
    }
    switch (what) {
    case CALL:
        if (get)
            calls_get(h, req, name);
        else if (m == EVHTTP_REQ_DELETE)
            calls_delete(h, req, name);
        else
            reply_method(h, req, "GET, DELETE");
        break;
    case JOB:
        if (get)
            checkpoint_get(h, req, name);
        else if (m == EVHTTP_REQ_PUT)
            checkpoint_put(h, req, name);
        else
            reply_method(h, req, "GET, PUT");
        break;
    case BREAKER:
        if (get)
            breakers_get(h, req, name);
        else
            reply_method(h, req, m == EVHTTP_REQ_POST ? "GET (POST on .../reset)" : "GET");
        break;
    case BREAKER_RESET:
        breakers_reset(h, req, name);
        break;
    case ESCALATION:
        if (get)
            escalations_get(h, req, name);
        else
            reply_method(h, req, "GET");
        break;
    case ESCALATION_RESOLVE:
        if (m == EVHTTP_REQ_POST)
            escalations_resolve(h, req, name);
        else
            reply_method(h, req, "POST");
        break;
    }
    free(name);
    return true;
}

/* Every request comes here (evhttp's generic callback): refused, unauthorized, or routed. */
static void request_cb(struct evhttp_request *req, void *arg)
{
    tp_http_t *h = arg;
    tp_http_conn_t *c = conn_of(h, req);
    if (c && c->refused) {
        if (evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close") != 0)
            tp_log_warn("http: cannot set a reply's Connection");
        reply_error(h, req, 503, "Unavailable", "too many connections (the most is %d); try again later",
                    h->o.max_connections);
        return;
    }
    if (h->o.token && !authorized(h, req)) {
        if (evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer") != 0)
            tp_log_warn("http: cannot set a reply's WWW-Authenticate");
        reply_error(h, req, 401, "Unauthorized", "this service needs \"Authorization: Bearer TOKEN\"");
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL || path[0] != '/') {
        reply_error(h, req, 400, "InvalidRequest", "the request has no path");
        return;
    }
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    bool get = m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;
    if (strcmp(path, "/healthz") == 0) {
        if (get)
            reply(h, req, 200, "text/plain", "ok\n", 3);
        else
            reply_method(h, req, "GET");
        return;
    }
    if (strcmp(path, "/readyz") == 0) {
        const char *why = not_ready(h);
        if (!get)
            reply_method(h, req, "GET");
        else if (why)
            reply_error(h, req, 503, "NotReady", "%s", why);
        else
            reply(h, req, 200, "text/plain", "ok\n", 3);
        return;
    }
    if (strcmp(path, "/metrics") == 0) {
        if (get)
            metrics_get(h, req);
        else
            reply_method(h, req, "GET");
        return;
    }
    if (h->draining) {
        reply_error(h, req, 503, "Unavailable", "the service is draining: it takes no new requests");
        return;
    }
    if (strcmp(path, "/v1/calls") == 0) {
        if (m == EVHTTP_REQ_POST)
            calls_post(h, req);
        else
            reply_method(h, req, "POST");
    } else if (strcmp(path, "/mcp") == 0) {
        mcp_route(h, req, m);
    } else if (strcmp(path, "/v1/batch") == 0) {
        if (m == EVHTTP_REQ_POST)
            batch_post(h, req);
        else
            reply_method(h, req, "POST");
    } else if (strcmp(path, "/v1/tools") == 0) {
        if (get)
            tools_get(h, req);
        else
            reply_method(h, req, "GET");
    } else if (strcmp(path, "/v1/breakers") == 0) {
        if (get)
            breakers_get(h, req, NULL);
        else
            reply_method(h, req, "GET");
    } else if (strcmp(path, "/v1/escalations") == 0) {
        if (get)
            escalations_get(h, req, NULL);
        else
            reply_method(h, req, "GET");
    } else if (!route_record(h, req, path, m)) {
        reply_error(h, req, 404, "NotFound", "no such path: %.600s", path);
    }
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
 * accept failed (EMFILE, ENFILE, ENOMEM...): libevent would retry at once
 * and spin; the listener rests a moment instead, while connections close.
 */
static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
    tp_http_t *h = arg;
    int e = EVUTIL_SOCKET_ERROR();
    if (!h->accept_error)
        tp_log_warn("http: accepting a connection: %s; pausing %dms", strerror(e), TP_HTTP_ACCEPT_PAUSE_MS);
    h->accept_error = true;
    listener_update(h);
    struct timeval tv = {0, TP_HTTP_ACCEPT_PAUSE_MS * 1000};
    if (evtimer_add(h->ev_resume, &tv) != 0) {
        tp_log_error("http: cannot arm the accept timer");
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
        tp_log_error("http: cannot %s accepting connections", run ? "resume" : "pause");
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
        h->unix_lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (h->unix_lock < 0) {
            snprintf(err, cap, "%s: %s", lock, strerror(errno));
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
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    /* A body past --max-body is read to its end and then refused, so the client hears the 413 (no reset). */
    if (evhttp_set_flags(h->http, EVHTTP_SERVER_LINGERING_CLOSE) != 0)
        tp_log_warn("http: this libevent cannot read an oversized body out before its 413");
    evhttp_set_gencb(h->http, request_cb, h);
    evhttp_set_bevcb(h->http, conn_bev_cb, h);
    if (tools_render(h) < 0 || (h->mcp_tools = tp_mcp_catalog_new(tp_engine_registry(h->e))) == NULL)
        goto nomem;
    tp_front_t f = {.feed = feed_cb, .flush = flush_cb, .ctx = h};
    if (tp_engine_add_front(h->e, &f) != 0) {
        tp_log_error("http: the engine takes no more fronts");
        tp_http_free(h);
        return NULL;
    }
    return h;
nomem:
    tp_log_error("http: out of memory starting the HTTP front");
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
        batch_maybe_end(b);
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
                wait_error(w, 503, "Unavailable", "the service stopped before the call ended");
    for (tp_http_wait_t *w = h->store_waits; w; w = w->snext)
        wait_error(w, 503, "Unavailable", "the service stopped before the store committed");
    for (tp_http_wait_t *w = h->mcp_waits; w; w = w->snext) {
        struct evhttp_request *req = wait_take(w);
        if (req && w->streaming)
            evhttp_send_reply_end(req);
        else if (req)
            mcp_http_error(h, req, 503, TP_RPC_INTERNAL_ERROR,
                           "Service Unavailable: the service stopped before the call ended");
    }
    for (tp_http_batch_t *b = h->batches; b; b = b->next) {
        batch_send(b);
        if (b->w->req && !b->ended && (b->cut || b->pending > 0 || b->off < b->len)) {
            /* Not whole (the engine stopped short of it): left on its connection, unended. */
            b->cut = b->cut_made = true;
            batch_close_when_out(b);
            continue;
        }
        struct evhttp_request *req = wait_take(b->w);
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
        tp_log_warn("http: cannot wait for the last replies to go out");
    } else if (event_base_dispatch(h->o.base) < 0) {
        tp_log_warn("http: the loop failed while the last replies went out");
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
            entry_free(e);
        }
    while (h->batches) {
        tp_http_batch_t *b = h->batches;
        b->ended = true;
        batch_free(b);
    }
    while (h->store_waits) {
        tp_http_wait_t *w = h->store_waits;
        h->store_waits = w->snext;
        wait_free(w);
    }
    while (h->mcp_sessions) {
        tp_http_mcp_t *x = h->mcp_sessions;
        h->mcp_sessions = x->next;
        tp_mcp_session_free(x->s);
        free(x);
    }
    while (h->mcp_waits) {
        tp_http_wait_t *w = h->mcp_waits;
        h->mcp_waits = w->snext;
        wait_free(w);
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
    /* The socket file, if it is still the one made (a successor may have replaced it). */
    struct stat st;
    if (h->unix_path[0] && stat(h->unix_path, &st) == 0 && st.st_dev == h->unix_dev && st.st_ino == h->unix_ino)
        unlink(h->unix_path);
    if (h->unix_lock >= 0)
        close(h->unix_lock); /* the lock file stays: removing it would race a successor's flock */
    free(h);
}
