/*
 * The HTTP front: `toolpool serve`'s way in to the engine, on its
 * own HTTP/1.1 server (hserver.h).
 *
 *   POST   /v1/calls[?wait=0]            one call; its result line once durable (202 at once with wait=0)
 *   GET    /v1/calls/ID                  its result (200), 202 while it runs, 404 unknown
 *   DELETE /v1/calls/ID                  cancels it; its final result
 *   POST   /v1/batch                     JSONL in, result lines streamed back as they end
 *   GET    /v1/tools[?format=openai|mcp] the registry's tools
 *   PUT|GET /v1/jobs/JOB/checkpoint      an agent loop's own checkpoint
 *   GET    /v1/breakers[/ID], POST /v1/breakers/ID/reset
 *   GET    /v1/escalations[/ID], POST /v1/escalations/ID/resolve
 *   POST|DELETE /mcp                     MCP's Streamable HTTP transport (mcp_session.h)
 *   GET    /metrics, /healthz, /readyz
 *
 * The front decides nothing about a call: it reads it (request.h), hands it
 * to the engine, and renders the answer. What it keeps of its own is a table
 * of the calls it has handed over, by id, so that a second request for a
 * live id attaches to that call instead of running it twice, and the answers
 * of calls a client did not wait for (a bounded number, oldest dropped
 * first). Every read or write of the store goes through the engine's open
 * transaction and is answered only once durable (tp_engine_when_durable).
 *
 * Everything runs on the engine's loop.
 */
#ifndef TP_FRONT_HTTP_H
#define TP_FRONT_HTTP_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "engine.h"
#include "otlp.h"

/* Where serve listens: "unix:PATH" or "HOST:PORT" (a port of 0 takes a free one). */
typedef struct {
    bool is_unix;
    char path[108];             /* unix: the socket file */
    struct sockaddr_storage sa; /* tcp: the address resolved */
    socklen_t salen;
    bool loopback;  /* a Unix socket, or every TCP address it names is loopback */
    char text[320]; /* as people read it; once bound, with the port taken */
} tp_http_addr_t;

/* Reads spec into a. 0, or -1 with err saying why. */
int tp_http_addr_parse(const char *spec, tp_http_addr_t *a, char *err, size_t cap);

typedef struct {
    tp_engine_t *engine;
    struct event_base *base;
    const char *token;        /* every request needs "Authorization: Bearer TOKEN"; NULL: none does */
    size_t max_body;          /* bytes of a request body; past it, 413 */
    uint64_t idle_timeout_us; /* a client silent this long (or not reading) is dropped */
    int max_connections;      /* past it, a connection's requests are answered 503 */
    size_t max_queued;        /* calls held at once; past it, a new call is answered 503 */
    size_t window;            /* calls held at once (tp_engine_live) while batches feed more */
    uint64_t max_line;        /* longest line of a batch, as run's --max-frame */
    const char *version;      /* serverInfo.version of /mcp */
    uint64_t mcp_deadline_us; /* each /mcp call's deadline, from its start; 0: none */
    /* The trace exporter: calls' traceparent headers are read, /metrics counts its spans; NULL: export is off. */
    tp_otlp_t *otlp;
} tp_http_opts_t;

typedef struct tp_http tp_http_t;

/* A front on o->engine (added to its fronts). NULL on failure, logged. */
tp_http_t *tp_http_new(const tp_http_opts_t *o);
/*
 * Listens on a: a stale Unix socket file (nothing accepts on it) is
 * replaced, a live one refused; the new one is made mode 0600. a->text gets
 * the port a TCP address took. 0, or -1 with err saying why.
 */
int tp_http_listen(tp_http_t *h, tp_http_addr_t *a, char *err, size_t cap);
/*
 * Stops accepting connections (the listening socket is closed) and answers
 * every later request 503, but /healthz, /readyz and /metrics. Calls
 * already handed over go on.
 */
void tp_http_drain(tp_http_t *h);
/*
 * After the loop has ended: answers what still waits (503, or the end of a
 * batch's stream), then runs the loop until every reply is written, at most
 * timeout_us.
 */
void tp_http_finish(tp_http_t *h, uint64_t timeout_us);
/* Frees the front (after the engine: no answer may come any more). Removes the Unix socket it made. */
void tp_http_free(tp_http_t *h);

#endif
