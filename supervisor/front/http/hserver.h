/*
 * serve's HTTP/1.1 server: connections read, requests framed, replies
 * written, on the engine's loop. It knows HTTP and nothing of the routes
 * (front_http.c hands each request to one).
 *
 * A connection reads one request at a time: once a request is whole (its
 * head and its body, by Content-Length or chunked), it goes to on_request,
 * and the connection is not read until that one's reply has been given
 * (tp_hreq_reply, or tp_hreq_start ... tp_hreq_end). A request already
 * read behind it goes to on_request from the loop, never from inside the
 * call that gave the reply. Replies go out in the order their requests
 * came, each written at once, the rest when the socket takes it. After a
 * reply that closes its connection nothing more is served on it: its
 * sending side is shut down once the reply is out, and what the client
 * still sends is read and dropped for a moment, so the reply is not lost
 * to a reset.
 *
 * A request's strings and body stay where they were read, valid until its
 * reply has been given or its connection goes: on_close tells the owner of
 * the connection's user pointer that it went, and every pointer to its
 * request is dead from then on. A connection never goes while a call
 * into this module runs: a write that fails closes it from the loop.
 *
 * The idle timeout drops a connection that sends nothing of a request for
 * that long after its last reply (none at all, or half of one), and one
 * whose reply it does not read for that long; a connection whose request
 * waits for its reply is not idle.
 */
#ifndef TP_HSERVER_H
#define TP_HSERVER_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/time.h>

/* A request's method, as bits, so a route can take several. */
#define TP_HM_GET 0x01u
#define TP_HM_POST 0x02u
#define TP_HM_HEAD 0x04u
#define TP_HM_PUT 0x08u
#define TP_HM_DELETE 0x10u
#define TP_HM_OPTIONS 0x20u
#define TP_HM_PATCH 0x40u
#define TP_HM_OTHER 0x80u /* any other token */

typedef struct tp_hs tp_hs_t;
typedef struct tp_hs_conn tp_hs_conn_t;
typedef struct tp_hreq tp_hreq_t;

typedef struct {
    struct event_base *base;
    size_t max_body;     /* a request body's bytes; past it, 413 */
    size_t max_head;     /* the request line and headers' bytes; past them, 431 */
    struct timeval idle; /* the idle timeout */
    void (*on_request)(void *ctx, tp_hreq_t *r);
    void (*on_close)(void *ctx, void *user); /* a connection went; user as adopted */
    void *ctx;
} tp_hs_opts_t;

/* NULL when out of memory. */
tp_hs_t *tp_hs_new(const tp_hs_opts_t *o);
/* Closes every connection (on_close for each) and frees the server. */
void tp_hs_free(tp_hs_t *s);
/*
 * Serves the connected socket fd (non-blocking), with user as its owner's
 * pointer. -1 when out of memory: fd is closed, and on_close is not called.
 */
int tp_hs_adopt(tp_hs_t *s, int fd, void *user);
/* Bytes of replies not yet taken by the kernel, over every connection. */
size_t tp_hs_unsent(const tp_hs_t *s);

/* ---- a request ---- */

void *tp_hreq_user(const tp_hreq_t *r);
unsigned tp_hreq_method(const tp_hreq_t *r); /* TP_HM_* */
/* The path as sent (not decoded), without its query; never NULL. */
const char *tp_hreq_path(const tp_hreq_t *r);
/* The query after '?', as sent; NULL when there is none. */
const char *tp_hreq_query(const tp_hreq_t *r);
/* The first header of name (any case), its value trimmed; NULL when none. */
const char *tp_hreq_header(const tp_hreq_t *r, const char *name);
/* The headers in the order they came: count, and the i-th's name (with its length) and value. */
size_t tp_hreq_headers(const tp_hreq_t *r);
const char *tp_hreq_header_at(const tp_hreq_t *r, size_t i, size_t *name_len, const char **value);
/* The body (NULL when empty), contiguous. */
const char *tp_hreq_body(const tp_hreq_t *r, size_t *len);
/* The connection's socket, for a caller that watches it while the request waits. */
int tp_hreq_fd(const tp_hreq_t *r);

/* Adds a header to the reply. 0, or -1 (out of memory, or a name or value with CR or LF). */
int tp_hreq_add_header(tp_hreq_t *r, const char *name, const char *value);
/* The connection closes once this request's reply is out (its reply says Connection: close). */
void tp_hreq_close_after(tp_hreq_t *r);
/*
 * The whole reply: status, the headers added, Date (HTTP/1.1), and the
 * body (not for HEAD, 204, 304) with its Content-Length. r is done with.
 */
void tp_hreq_reply(tp_hreq_t *r, int status, const void *body, size_t len);
/* A reply sent in pieces: chunked on HTTP/1.1, up to the connection's close on HTTP/1.0. */
void tp_hreq_start(tp_hreq_t *r, int status);
/* One piece; 0, or -1 when out of memory (the connection is closed). */
int tp_hreq_chunk(tp_hreq_t *r, const void *p, size_t n);
/* The reply's end: r is done with. */
void tp_hreq_end(tp_hreq_t *r);
/* Bytes of its connection's replies not yet taken by the kernel. */
size_t tp_hreq_unsent(const tp_hreq_t *r);
/*
 * Calls cb(arg) once, from the loop, when its connection's unsent replies
 * have all gone out; forgotten once r's reply has ended.
 */
void tp_hreq_when_sent(tp_hreq_t *r, void (*cb)(void *arg), void *arg);
/* Ends the sending side of its connection once its unsent bytes are out (a cut stream). */
void tp_hreq_shutdown(tp_hreq_t *r);

/* The reason phrase of status ("OK", "Not Found"). */
const char *tp_hs_reason(int status);

#endif
