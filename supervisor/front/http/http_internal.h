/*
 * What the files of the HTTP front share (front_http.h is its API), private
 * to supervisor/front/http/: no file outside it includes this.
 *
 *   hserver.c      HTTP/1.1 itself: connections read, requests framed, replies written
 *   front_http.c   the core: lifecycle, listening, connections (their cap,
 *                  the token), replies, replies sent once durable, the route
 *                  table and its dispatcher
 *   calls.c        the call table, /v1/calls
 *   batch.c        POST /v1/batch, and the engine's feed and flush hooks
 *   mcp_http.c     /mcp, MCP's Streamable HTTP transport
 *   checkpoints.c  /v1/jobs/JOB/checkpoint
 *   admin.c        /v1/breakers, /v1/escalations, /v1/tools, /healthz, /readyz
 *   metrics.c      /metrics
 *
 * What the front holds (struct tp_http):
 *   conns    each open connection (the server's user pointer), with the
 *            requests on it whose reply comes later: when the connection
 *            goes, their pointers are dropped (the server frees them), never
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
 *
 * The functions shared here are named http_*; each file's own are static.
 */
#ifndef TP_HTTP_INTERNAL_H
#define TP_HTTP_INTERNAL_H

#include <event2/listener.h>
#include <netdb.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "agent.h"
#include "buf.h"
#include "digest.h"
#include "engine.h"
#include "front_http.h"
#include "hserver.h"
#include "mcp_session.h"
#include "request.h"

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
    tp_hreq_t *req;                /* NULL once its connection is gone (or replied) */
    tp_http_conn_t *conn;          /* NULL when not tracked, or gone */
    tp_http_wait_t *cprev, *cnext; /* on conn->waits */
    tp_http_wait_t *next;          /* on its entry's waits */
    tp_http_wait_t *sprev, *snext; /* TP_WAIT_STORE: on h->store_waits */
    int status;                    /* TP_WAIT_STORE: the reply */
    const char *ctype;
    tp_buf_t body;
    tp_format_t format;     /* TP_WAIT_CALL, TP_WAIT_CANCEL: the form its answer is rendered in (?format=) */
    tp_http_batch_t *batch; /* TP_WAIT_BATCH */
    /* TP_WAIT_MCP (on h->mcp_waits by sprev/snext) */
    tp_http_mcp_t *mcp;
    bool sse;              /* the client takes an event stream: notifications go before the response */
    bool json_ok;          /* the client takes application/json */
    bool streaming;        /* the event stream has begun */
    bool in_take;          /* the session is taking its message: a response now is the reply */
    bool answered;         /* the response came while in_take, in body */
    bool modern;           /* a 2026-07-28 request, of the stateless session: its client gone cancels it */
    struct event *gone_ev; /* modern: watches its connection for the client's close while the call runs */
};

/* An MCP session over HTTP (POST /mcp), by its Mcp-Session-Id. */
struct tp_http_mcp {
    tp_http_mcp_t *prev, *next; /* on h->mcp_sessions, the most recently used first */
    tp_mcp_session_t *s;
    uint64_t used_us; /* its last request */
};

struct tp_http_conn {
    tp_http_t *h;
    bool refused; /* over --max-connections: answered 503, then closed */
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
    tp_format_t format; /* its result lines' form (?format=) */
    size_t pending;     /* lines handed over, not yet answered */
    tp_buf_t out;       /* result lines not yet sent */
    bool stalled;       /* held back: its client reads slower than results come */
    bool ended;         /* its reply has ended */
    bool cut;           /* a drain left some of its lines without a result line */
    bool cut_made;      /* cut: its last lines are sent, its stream left unended */
};

struct tp_http {
    tp_http_opts_t o;
    tp_engine_t *e;
    tp_hs_t *hs;
    struct evconnlistener *listener;
    struct event *ev_resume; /* re-enables the listener after an accept error */
    struct timeval idle_tv;
    bool listener_paused; /* at the hard cap, or resting after an accept error */
    bool accept_error;
    bool draining, finished, freeing;
    tp_buf_t line;                /* a batch's result line, rendered before it is queued */
    tp_buf_t answer;              /* a call's answer, rendered before it is sent (unless kept) */
    char unix_path[108];          /* the socket file made, removed at free */
    bool tcp;                     /* it listens on TCP: a browser may reach it (Host, Origin, Content-Type checked) */
    char listen_host[NI_MAXHOST]; /* the numeric address it listens on ("127.0.0.1", "::1") */
    int unix_lock;                /* PATH.lock, flocked while we serve on PATH; -1: none */
    dev_t unix_dev;
    ino_t unix_ino;
    /* connections */
    int n_conns;
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
    tp_http_mcp_t *mcp_modern; /* the stateless session every 2026-07-28 request goes to; NULL until one comes */
    size_t mcp_n;
    size_t mcp_progress; /* their calls whose client asked for progress */
    tp_http_wait_t *mcp_waits;
    /* /v1/tools, rendered once */
    tp_buf_t tools_own, tools_openai, tools_mcp;
    /* counted for /metrics */
    uint64_t by_status[600]; /* replies, by status code */
    uint64_t accepted;
};

/*
 * A route's handler: name is the percent-decoded name its path carries
 * (/v1/calls/ID's ID), or NULL for a route of one exact path.
 */
typedef void http_handler_t(tp_http_t *h, tp_hreq_t *req, const char *name);

/* front_http.c: replies */
void http_count_reply(tp_http_t *h, int status);
void http_reply(tp_http_t *h, tp_hreq_t *req, int status, const char *ctype, const void *body, size_t len);
void http_error_body(tp_buf_t *b, const char *error, const char *message);
void http_reply_error(tp_http_t *h, tp_hreq_t *req, int status, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int http_json_body(tp_buf_t *b, json_t *v);
const char *http_query_get(tp_hreq_t *req, const char *name, char *buf, size_t cap);
int http_query_format(tp_http_t *h, tp_hreq_t *req, tp_format_t *out);
int http_body_of(tp_http_t *h, tp_hreq_t *req, const char **p, size_t *len);

/* front_http.c: requests whose reply comes later */
tp_http_wait_t *http_wait_new(tp_http_t *h, tp_hreq_t *req, tp_wait_kind_t kind);
tp_hreq_t *http_wait_take(tp_http_wait_t *w);
void http_wait_reply(tp_http_wait_t *w, int status, const char *ctype, const void *body, size_t len);
void http_wait_error(tp_http_wait_t *w, int status, const char *error, const char *message);
void http_wait_free(tp_http_wait_t *w);
void http_reply_when_durable(tp_http_t *h, tp_hreq_t *req, int status, const char *ctype, tp_buf_t *body);
void http_reply_json_when_durable(tp_http_t *h, tp_hreq_t *req, int status, json_t *v);
void http_reply_error_when_durable(tp_http_t *h, tp_hreq_t *req, int status, const char *error, const char *message);
int http_store_op(tp_http_t *h, tp_hreq_t *req, size_t room, tp_store_op_fn op, void *ctx);
void http_store_error(tp_http_t *h, tp_hreq_t *req, int rc, const char *what);

/* calls.c: the call table, /v1/calls */
tp_http_entry_t *http_table_get(tp_http_t *h, const char *id);
void http_entry_free(tp_http_entry_t *e);
void http_entry_drop(tp_http_t *h, tp_http_entry_t *e);
tp_http_entry_t *http_entry_new(tp_http_t *h, const char *id, const char *tool, const tp_digest_t *identity);
void http_identity_of(const tp_request_t *rq, tp_digest_t *out);
void http_entry_submit(tp_http_t *h, tp_http_entry_t *e, tp_request_t *rq, tp_hreq_t *req);
http_handler_t http_calls_post, http_calls_get, http_calls_delete;

/* batch.c: POST /v1/batch */
void http_batch_free(tp_http_batch_t *b);
void http_batch_send(tp_http_batch_t *b);
void http_batch_close_when_out(tp_http_batch_t *b);
void http_batch_maybe_end(tp_http_batch_t *b);
void http_batch_client_gone(tp_http_batch_t *b);
void http_mcp_client_gone(tp_http_wait_t *w);
void http_batch_answer_line(tp_http_batch_t *b, const tp_answer_t *a);
void http_feed_cb(void *ctx);
void http_flush_cb(void *ctx);
http_handler_t http_batch_post;

/* mcp_http.c: /mcp */
void http_mcp_error(tp_http_t *h, tp_hreq_t *req, int status, int code, const char *message);
http_handler_t http_mcp_post, http_mcp_delete;

/* checkpoints.c: /v1/jobs/JOB/checkpoint */
http_handler_t http_checkpoint_get, http_checkpoint_put;

/* admin.c: /v1/breakers, /v1/escalations, /v1/tools, /healthz, /readyz */
int http_tools_render(tp_http_t *h);
http_handler_t http_breakers_get, http_breakers_reset, http_escalations_get, http_escalations_resolve;
http_handler_t http_tools_get, http_healthz, http_readyz;

/* metrics.c: /metrics */
http_handler_t http_metrics_get;

#endif
