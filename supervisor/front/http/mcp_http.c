/*
 * /mcp, MCP's Streamable HTTP transport: each POST one JSON-RPC message of
 * a session (mcp_session.h), answered as JSON or as an event stream;
 * DELETE ends a session. The sessions are kept here, by Mcp-Session-Id.
 */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "log.h"
#include "mcp_message.h"

/* ---- /mcp: MCP's Streamable HTTP transport ---- */

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
    http_wait_free(w);
}

/* The idle timeout applies again to the connection's next request. */
static void restore_timeouts(tp_http_t *h, struct evhttp_request *req)
{
    struct bufferevent *bev = http_req_bev(req);
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
        /*
         * Cancelled, or its session ended: no response comes (MCP's rule
         * for a cancelled request), and the client still there hears its
         * request's stream end with none; one that takes only JSON, where
         * a request's reply is its response, gets 204.
         */
        struct evhttp_request *req = http_wait_take(w);
        restore_timeouts(h, req);
        if (w->streaming)
            evhttp_send_reply_end(req);
        else if (w->sse)
            http_reply(h, req, 200, "text/event-stream", NULL, 0);
        else
            http_reply(h, req, 204, NULL, NULL, 0);
        mcp_wait_free(w);
        return 0;
    }
    if (!w->sse) {
        struct evhttp_request *req = http_wait_take(w);
        restore_timeouts(h, req);
        http_reply(h, req, 200, "application/json", msg, len);
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
        http_count_reply(h, 200);
        evhttp_send_reply_start(w->req, 200, NULL);
        w->streaming = true;
    }
    evhttp_send_reply_chunk(w->req, b);
    evbuffer_free(b);
    if (final) {
        struct evhttp_request *req = http_wait_take(w);
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
    if (x == NULL ||
        (x->s = tp_mcp_session_new(h->e, h->mcp_tools, h->o.version, h->o.mcp_deadline_us, &sink)) == NULL) {
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

/* A JSON-RPC error with a null id, as the body of an HTTP error. */
void http_mcp_error(tp_http_t *h, struct evhttp_request *req, int status, int code, const char *message)
{
    tp_buf_t b = {0};
    tp_buf_printf(&b, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":", code);
    tp_json_put_string(&b, message, strlen(message));
    tp_buf_puts(&b, "}}\n");
    http_reply(h, req, status, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/* Whether the body is an initialize request (read only for a POST without a session), read as the session reads it. */
static bool is_initialize(const char *body, size_t len)
{
    tp_mcp_msg_t m = {0};
    bool yes = tp_mcp_msg_read(&m, body, len) == 0 && m.kind == TP_MCP_MSG_REQUEST &&
               strcmp(m.method, "initialize") == 0;
    tp_mcp_msg_clear(&m);
    return yes;
}

void http_mcp_post(tp_http_t *h, struct evhttp_request *req, const char *name)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *body;
    size_t len;
    if (http_body_of(h, req, &body, &len) < 0)
        return;
    const char *version = evhttp_find_header(in, "MCP-Protocol-Version");
    if (version && !tp_mcp_version_known(version)) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "Bad Request: unsupported MCP-Protocol-Version %.40s (this server speaks "
                 "2025-11-25 and 2025-06-18)",
                 version);
        http_mcp_error(h, req, 400, TP_RPC_INVALID_REQUEST, msg);
        return;
    }
    if (len == 0) {
        http_mcp_error(h, req, 400, TP_RPC_PARSE_ERROR, "Parse error: the body is empty (one JSON-RPC message)");
        return;
    }
    const char *sid = evhttp_find_header(in, "Mcp-Session-Id");
    tp_http_mcp_t *x = NULL;
    bool fresh = false;
    if (sid) {
        if ((x = mcp_find(h, sid)) == NULL) {
            http_mcp_error(h, req, 404, TP_RPC_INVALID_REQUEST,
                           "Not Found: no such session (it ended, or the server restarted): send initialize again");
            return;
        }
    } else if (!is_initialize(body, len)) {
        http_mcp_error(h, req, 400, TP_RPC_INVALID_REQUEST,
                       "Bad Request: no Mcp-Session-Id header (a session begins with initialize)");
        return;
    } else if (!mcp_room(h)) {
        http_mcp_error(h, req, 503, TP_RPC_INTERNAL_ERROR,
                       "Service Unavailable: too many MCP sessions with calls running");
        return;
    } else if ((x = mcp_new(h)) == NULL) {
        http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
        return;
    } else {
        fresh = true;
    }
    mcp_unlink(h, x);
    mcp_push(h, x);
    x->used_us = tp_now_us();
    tp_http_wait_t *w = http_wait_new(h, req, TP_WAIT_MCP);
    if (w == NULL) {
        if (fresh)
            mcp_end(h, x);
        http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
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
        struct bufferevent *bev = http_req_bev(req);
        if (bev && bufferevent_set_timeouts(bev, NULL, &h->idle_tv) != 0)
            tp_log_warn("http: cannot lift a waiting connection's read timeout");
        return;
    }
    struct evhttp_request *r = http_wait_take(w);
    if (took == TP_MCP_TOOK_NOTIFICATION) {
        http_reply(h, r, 202, NULL, NULL, 0);
    } else if (took == TP_MCP_TOOK_BAD) {
        http_reply(h, r, 400, "application/json", w->body.data, w->body.len);
    } else if (!w->json_ok && w->sse) {
        struct evbuffer *b = evhttp_request_get_output_buffer(r);
        if (sse_event(b, (const char *)w->body.data, w->body.len) != 0)
            tp_log_error("http: out of memory for an event");
        http_reply(h, r, 200, "text/event-stream", NULL, 0);
    } else {
        http_reply(h, r, 200, "application/json", w->body.data, w->body.len);
    }
    mcp_wait_free(w);
}

/* DELETE /mcp: the client ends its session. */
void http_mcp_delete(tp_http_t *h, struct evhttp_request *req, const char *name)
{
    const char *sid = evhttp_find_header(evhttp_request_get_input_headers(req), "Mcp-Session-Id");
    tp_http_mcp_t *x = sid ? mcp_find(h, sid) : NULL;
    if (sid == NULL)
        http_mcp_error(h, req, 400, TP_RPC_INVALID_REQUEST, "Bad Request: no Mcp-Session-Id header");
    else if (x == NULL)
        http_mcp_error(h, req, 404, TP_RPC_INVALID_REQUEST, "Not Found: no such session");
    else {
        mcp_end(h, x);
        http_reply(h, req, 204, NULL, NULL, 0);
    }
}
