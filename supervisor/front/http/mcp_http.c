/*
 * /mcp, MCP's Streamable HTTP transport: each POST one JSON-RPC message of
 * a session (mcp_session.h), answered as JSON or as an event stream;
 * DELETE ends a session. The sessions are kept here, by Mcp-Session-Id.
 */
#include "http_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
 *
 * A POST with MCP-Protocol-Version: 2026-07-28 is that revision's, which
 * has no sessions: it goes to the one stateless session that takes every
 * such request, each POST on its own (an Mcp-Session-Id is ignored, none
 * is given). Its headers mirror its body for the proxies on the way
 * (Mcp-Method, Mcp-Name, Mcp-Param-*), and one that says otherwise is
 * refused, 400 HeaderMismatch; its errors have HTTP's status (-32601 404,
 * a bad request 400); and a client that closes its request's stream
 * cancels the call, as that revision has it.
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

/* What an event stream's reply says besides its type: not to be cached, nor held back by a proxy. */
static int sse_headers(tp_hreq_t *req)
{
    return tp_hreq_add_header(req, "Cache-Control", "no-cache") == 0 &&
                   tp_hreq_add_header(req, "X-Accel-Buffering", "no") == 0
               ? 0
               : -1;
}

/* One server-sent event carrying msg. */
static int sse_event(tp_buf_t *b, const char *msg, size_t len)
{
    return tp_buf_append(b, "event: message\ndata: ", 21) == 0 && tp_buf_append(b, msg, len) == 0 &&
                   tp_buf_append(b, "\n\n", 2) == 0
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
        tp_hreq_t *req = http_wait_take(w);
        if (w->streaming)
            tp_hreq_end(req);
        else if (w->sse)
            http_reply(h, req, 200, "text/event-stream", NULL, 0);
        else
            http_reply(h, req, 204, NULL, NULL, 0);
        mcp_wait_free(w);
        return 0;
    }
    if (!w->sse) {
        tp_hreq_t *req = http_wait_take(w);
        http_reply(h, req, 200, "application/json", msg, len);
        mcp_wait_free(w);
        return 0;
    }
    tp_buf_t b = {0};
    if (sse_event(&b, msg, len) != 0) {
        tp_buf_free(&b);
        return -1;
    }
    if (!w->streaming) {
        if (tp_hreq_add_header(w->req, "Content-Type", "text/event-stream") != 0 || sse_headers(w->req) != 0)
            tp_log_warn("http.header_failed", "http: cannot set an event stream's headers");
        http_count_reply(h, 200);
        tp_hreq_start(w->req, 200);
        w->streaming = true;
    }
    int rc = tp_hreq_chunk(w->req, b.data, b.len);
    tp_buf_free(&b);
    if (rc != 0)
        return -1;
    if (final) {
        tp_hreq_t *req = http_wait_take(w);
        tp_hreq_end(req);
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

static tp_http_mcp_t *mcp_make(tp_http_t *h)
{
    tp_http_mcp_t *x = calloc(1, sizeof *x);
    tp_mcp_sink_t sink = {.send = mcp_send_cb, .ctx = h, .progress_count = &h->mcp_progress};
    if (x == NULL ||
        (x->s = tp_mcp_session_new(h->e, h->mcp_tools, h->o.version, h->o.mcp_deadline_us, &sink)) == NULL) {
        free(x);
        return NULL;
    }
    return x;
}

static tp_http_mcp_t *mcp_new(tp_http_t *h)
{
    tp_http_mcp_t *x = mcp_make(h);
    if (x) {
        mcp_push(h, x);
        h->mcp_n++;
    }
    return x;
}

/* The session of every 2026-07-28 request, made at the first. */
static tp_http_mcp_t *mcp_stateless(tp_http_t *h)
{
    if (h->mcp_modern == NULL && (h->mcp_modern = mcp_make(h)) != NULL)
        tp_mcp_session_stateless(h->mcp_modern->s);
    return h->mcp_modern;
}

/* Whether the Accept header names type (or a wildcard for it). No header: anything. */
static bool accepts(tp_hreq_t *req, const char *type)
{
    const char *a = tp_hreq_header(req, "Accept");
    if (a == NULL || strstr(a, "*/*"))
        return true;
    return strstr(a, type) != NULL;
}

/*
 * A JSON-RPC error as the body of an HTTP error: for the request id (its
 * JSON text; NULL: null), with data (JSON text, or NULL).
 */
static void mcp_error_for(tp_http_t *h, tp_hreq_t *req, int status, int code, const char *id, const char *data,
                          const char *message)
{
    tp_buf_t b = {0};
    bool ok = tp_buf_printf(&b, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":%d,\"message\":", id ? id : "null",
                            code) >= 0 &&
              tp_json_put_string(&b, message, strlen(message)) == 0 &&
              (data == NULL || (tp_buf_puts(&b, ",\"data\":") == 0 && tp_buf_puts(&b, data) == 0)) &&
              tp_buf_puts(&b, "}}\n") == 0;
    if (ok)
        http_reply(h, req, status, "application/json", b.data, b.len);
    else
        http_reply(h, req, 500, NULL, NULL, 0); /* out of memory: not half an error */
    tp_buf_free(&b);
}

void http_mcp_error(tp_http_t *h, tp_hreq_t *req, int status, int code, const char *message)
{
    mcp_error_for(h, req, status, code, NULL, NULL, message);
}

/* ---- 2026-07-28's headers ---- */

/*
 * A header value as 2026-07-28 writes what is not plain ASCII:
 * "=?base64?VALUE?=", decoded into out (NUL-ended); any other value as it
 * is. false when the sentinel holds no Base64 (RFC 4648's, padded).
 */
static bool header_decode(const char *v, tp_buf_t *out)
{
    size_t n = strlen(v);
    if (n < 11 || strncmp(v, "=?base64?", 9) != 0 || strcmp(v + n - 2, "?=") != 0)
        return tp_buf_append(out, v, n + 1) == 0;
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 9, end = n - 2;
    if ((end - i) % 4 != 0 || (end - i >= 3 && v[end - 3] == '='))
        return false; /* padded to a multiple of four, with at most two '=' */
    for (; i < end && v[i] != '='; i++) {
        const char *at = strchr(abc, v[i]);
        if (at == NULL || v[i] == '\0')
            return false;
        acc = acc << 6 | (uint32_t)(at - abc);
        if ((bits += 6) >= 8) {
            bits -= 8;
            unsigned char c = (unsigned char)(acc >> bits);
            if (tp_buf_append(out, &c, 1) != 0)
                return false;
        }
    }
    for (; i < end; i++)
        if (v[i] != '=')
            return false;
    return tp_buf_append(out, "", 1) == 0;
}

/* Whether the header value names the body's value: a string as it is, a number by its value, a boolean as true/false. */
static bool header_matches(const char *hv, const json_t *body)
{
    tp_buf_t b = {0};
    bool ok = header_decode(hv, &b);
    const char *v = ok ? (const char *)b.data : "";
    if (!ok) {
        /* not Base64: matches nothing */
    } else if (json_is_string(body)) {
        ok = strlen(v) == json_string_length(body) && strcmp(v, json_string_value(body)) == 0;
    } else if (json_is_number(body)) {
        char *end;
        double d = strtod(v, &end);
        ok = end != v && *end == '\0' && d == json_number_value(body);
    } else if (json_is_boolean(body)) {
        ok = strcmp(v, json_is_true(body) ? "true" : "false") == 0;
    } else {
        ok = false;
    }
    tp_buf_free(&b);
    return ok;
}

/*
 * The Mcp-Param-NAME headers a tools/call needs: every property of the
 * tool's parameters marked "x-mcp-header": NAME (nested properties too),
 * whose value the arguments hold (not null), must come with its header,
 * naming that value. Writes why into why and returns false when one is
 * missing or says otherwise.
 */
static bool param_headers_ok(tp_hreq_t *in, const json_t *schema, const json_t *args, int depth, char *why, size_t cap)
{
    json_t *props = json_object_get(schema, "properties");
    const char *key;
    json_t *sub;
    if (!json_is_object(props) || !json_is_object(args) || depth > 32)
        return true;
    json_object_foreach(props, key, sub) {
        json_t *v = json_object_get(args, key);
        if (v == NULL || json_is_null(v))
            continue;
        const char *name = json_string_value(json_object_get(sub, "x-mcp-header"));
        if (name) {
            char hname[300];
            snprintf(hname, sizeof hname, "Mcp-Param-%.256s", name);
            const char *hv = tp_hreq_header(in, hname);
            if (hv == NULL) {
                snprintf(why, cap, "Header mismatch: the %.280s header is missing (argument \"%.100s\" is given)",
                         hname, key);
                return false;
            }
            if (!header_matches(hv, v)) {
                snprintf(why, cap, "Header mismatch: %.280s header value '%.100s' does not match argument \"%.100s\"",
                         hname, hv, key);
                return false;
            }
        }
        if (!param_headers_ok(in, sub, v, depth + 1, why, cap))
            return false;
    }
    return true;
}

/*
 * A 2026-07-28 request's headers against its body m: Mcp-Method its
 * method, Mcp-Name its params.name (tools/call, prompts/get), params.uri
 * (resources/read) or params.taskId (the tasks methods), MCP-Protocol-Version its _meta's revision, and a
 * tools/call's Mcp-Param-* headers. Writes why and returns false when one
 * is missing or says otherwise. A body the session will refuse anyway
 * (not a request, bad params) is let through to it.
 */
static bool modern_headers_ok(tp_http_t *h, tp_hreq_t *in, const char *version, const tp_mcp_msg_t *m, char *why,
                              size_t cap)
{
    if ((m->kind != TP_MCP_MSG_REQUEST && m->kind != TP_MCP_MSG_NOTIFICATION) || m->method == NULL)
        return true;
    /* a method 2026-07-28 lacks is answered -32601 (404) before anything else of the request is judged */
    if (m->kind == TP_MCP_MSG_REQUEST && !tp_mcp_method_modern(m->method))
        return true;
    const char *hm = tp_hreq_header(in, "Mcp-Method");
    if (hm == NULL) {
        snprintf(why, cap, "Header mismatch: the Mcp-Method header is missing (it carries the method, %.100s)",
                 m->method);
        return false;
    }
    if (strcmp(hm, m->method) != 0) {
        snprintf(why, cap, "Header mismatch: Mcp-Method header value '%.100s' does not match body value '%.100s'", hm,
                 m->method);
        return false;
    }
    /* the tasks extension routes tasks/get, tasks/update and tasks/cancel by their task's id */
    const char *field = strcmp(m->method, "tools/call") == 0 || strcmp(m->method, "prompts/get") == 0 ? "name"
                        : strcmp(m->method, "resources/read") == 0                                    ? "uri"
                        : strncmp(m->method, "tasks/", 6) == 0                                        ? "taskId"
                                                                                                      : NULL;
    json_t *named = field ? json_object_get(m->params, field) : NULL;
    if (json_is_string(named)) {
        const char *hn = tp_hreq_header(in, "Mcp-Name");
        if (hn == NULL) {
            snprintf(why, cap, "Header mismatch: the Mcp-Name header is missing (it carries params.%s)", field);
            return false;
        }
        if (!header_matches(hn, named)) {
            snprintf(why, cap, "Header mismatch: Mcp-Name header value '%.100s' does not match body value '%.100s'", hn,
                     json_string_value(named));
            return false;
        }
    }
    json_t *pv = json_object_get(json_object_get(m->params, "_meta"), TP_META_VERSION);
    if (json_is_string(pv) && strcmp(json_string_value(pv), version) != 0) {
        snprintf(why, cap,
                 "Header mismatch: MCP-Protocol-Version header value '%.40s' does not match body value '%.40s'",
                 version, json_string_value(pv));
        return false;
    }
    if (strcmp(m->method, "tools/call") == 0 && json_is_string(named)) {
        const tp_tool_t *t = tp_registry_find(tp_engine_registry(h->e), json_string_value(named));
        if (t && t->parameters &&
            !param_headers_ok(in, t->parameters, json_object_get(m->params, "arguments"), 0, why, cap))
            return false;
    }
    return true;
}

/* The HTTP status of a 2026-07-28 JSON-RPC error: an unknown method 404, what the request got wrong 400. */
static int modern_status(int code)
{
    if (code == 0)
        return 200;
    if (code == TP_RPC_METHOD_NOT_FOUND)
        return 404;
    return code == TP_RPC_INTERNAL_ERROR ? 500 : 400;
}

/*
 * A 2026-07-28 client closes its request's stream to cancel it, and the
 * server reads no further request of a connection while its request waits
 * for a reply: the connection is watched here. Readable with nothing to read is the
 * client's close (or a reset); bytes are a request sent behind this one,
 * and end the watch (such a client has not gone).
 */
static void close_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_http_wait_t *w = arg;
    char c;
    (void)what;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (event_add(w->gone_ev, NULL) != 0)
            tp_log_warn("http.event_failed", "http: cannot go on watching a connection for its close");
        return;
    }
    event_free(w->gone_ev);
    w->gone_ev = NULL;
    if (n <= 0)
        http_mcp_client_gone(w);
}

static void watch_close(tp_http_wait_t *w, evutil_socket_t fd)
{
    if (fd < 0 || (w->gone_ev = event_new(w->h->o.base, fd, EV_READ, close_cb, w)) == NULL ||
        event_add(w->gone_ev, NULL) != 0)
        tp_log_warn("http.event_failed",
                    "http: cannot watch a connection for its close: a 2026-07-28 client that goes will not "
                    "cancel its call");
}

/*
 * The session a POST goes to, by its headers: 2026-07-28's to the
 * stateless one, after its headers are checked against its body; else the
 * one its Mcp-Session-Id names, or a new one for an initialize. NULL when
 * it has answered; *fresh when the session was made for it.
 */
static tp_http_mcp_t *mcp_route(tp_http_t *h, tp_hreq_t *req, const char *body, size_t len, bool *fresh)
{
    tp_hreq_t *in = req;
    const char *version = tp_hreq_header(in, "MCP-Protocol-Version");
    *fresh = false;
    if (len == 0) {
        http_mcp_error(h, req, 400, TP_RPC_PARSE_ERROR, "Parse error: the body is empty (one JSON-RPC message)");
        return NULL;
    }
    const char *sid = tp_hreq_header(in, "Mcp-Session-Id");
    bool known = version == NULL || tp_mcp_version_known(version);
    bool modern = version && tp_mcp_version_modern(version);
    tp_mcp_msg_t m = {0};
    if ((modern || sid == NULL || !known) && tp_mcp_msg_read(&m, body, len) != 0) {
        http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
        return NULL;
    }
    if (!known) {
        /* the error carries the request's id, when the body has one */
        tp_buf_t data = {0}, msg = {0};
        tp_buf_puts(&data, "{\"supported\":" TP_MCP_SUPPORTED ",\"requested\":");
        tp_json_put_string(&data, version, strlen(version));
        tp_buf_append(&data, "}", 2);
        tp_buf_printf(&msg,
                      "Unsupported protocol version: MCP-Protocol-Version %.40s (this server speaks 2026-07-28, "
                      "2025-11-25 and 2025-06-18)",
                      version);
        mcp_error_for(h, req, 400, TP_RPC_UNSUPPORTED_VERSION, m.id, data.len ? (const char *)data.data : NULL,
                      msg.len ? (const char *)msg.data : "Unsupported protocol version");
        tp_buf_free(&data);
        tp_buf_free(&msg);
        tp_mcp_msg_clear(&m);
        return NULL;
    }
    char why[700];
    tp_http_mcp_t *x = NULL;
    json_t *pv = json_object_get(json_object_get(m.params, "_meta"), TP_META_VERSION);
    if (modern) {
        if (!modern_headers_ok(h, in, version, &m, why, sizeof why))
            mcp_error_for(h, req, 400, TP_RPC_HEADER_MISMATCH, m.id, NULL, why);
        else if ((x = mcp_stateless(h)) == NULL)
            http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
    } else if (sid) {
        if ((x = mcp_find(h, sid)) == NULL)
            http_mcp_error(h, req, 404, TP_RPC_INVALID_REQUEST,
                           "Not Found: no such session (it ended, or the server restarted): send initialize again");
    } else if (m.kind == TP_MCP_MSG_REQUEST && version == NULL && json_is_string(pv) &&
               tp_mcp_version_modern(json_string_value(pv))) {
        mcp_error_for(h, req, 400, TP_RPC_HEADER_MISMATCH, m.id, NULL,
                      "Header mismatch: the MCP-Protocol-Version header is missing (a 2026-07-28 request carries "
                      "it on every POST)");
    } else if (m.kind != TP_MCP_MSG_REQUEST || strcmp(m.method, "initialize") != 0) {
        http_mcp_error(h, req, 400, TP_RPC_INVALID_REQUEST,
                       "Bad Request: no Mcp-Session-Id header (a session begins with initialize; a 2026-07-28 "
                       "request sends MCP-Protocol-Version: 2026-07-28)");
    } else if (!mcp_room(h)) {
        http_mcp_error(h, req, 503, TP_RPC_INTERNAL_ERROR,
                       "Service Unavailable: too many MCP sessions with calls running");
    } else if ((x = mcp_new(h)) == NULL) {
        http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
    } else {
        *fresh = true;
    }
    tp_mcp_msg_clear(&m);
    return x;
}

void http_mcp_post(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    const char *body;
    size_t len;
    bool fresh;
    if (http_body_of(h, req, &body, &len) < 0)
        return;
    tp_http_mcp_t *x = mcp_route(h, req, body, len, &fresh);
    if (x == NULL)
        return;
    bool modern = x == h->mcp_modern;
    if (!modern) {
        mcp_unlink(h, x);
        mcp_push(h, x);
    }
    x->used_us = tp_now_us();
    tp_http_wait_t *w = http_wait_new(h, req, TP_WAIT_MCP);
    if (w == NULL) {
        if (fresh)
            mcp_end(h, x);
        http_mcp_error(h, req, 500, TP_RPC_INTERNAL_ERROR, "Internal error: out of memory");
        return;
    }
    w->mcp = x;
    w->modern = modern;
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
            if (tp_hreq_add_header(req, "Mcp-Session-Id", tp_mcp_session_id(x->s)) != 0)
                tp_log_warn("http.header_failed", "http: cannot set a reply's Mcp-Session-Id");
        } else {
            mcp_end(h, x); /* initialize was refused: no session */
        }
    }
    if (took == TP_MCP_TOOK_REQUEST && !w->answered) {
        /* Its answer comes when the call ends: the client only listens meanwhile. */
        if (modern)
            watch_close(w, tp_hreq_fd(req));
        return;
    }
    tp_hreq_t *r = http_wait_take(w);
    int status = modern ? modern_status(tp_mcp_session_last_error(x->s)) : 200;
    if (took == TP_MCP_TOOK_NOTIFICATION) {
        http_reply(h, r, 202, NULL, NULL, 0);
    } else if (took == TP_MCP_TOOK_BAD) {
        http_reply(h, r, 400, "application/json", w->body.data, w->body.len);
    } else if (!w->json_ok && w->sse && status == 200) {
        tp_buf_t b = {0};
        if (sse_event(&b, (const char *)w->body.data, w->body.len) != 0)
            tp_log_error("http.out_of_memory", "http: out of memory for an event");
        if (sse_headers(r) != 0)
            tp_log_warn("http.header_failed", "http: cannot set an event stream's headers");
        http_reply(h, r, 200, "text/event-stream", b.data, b.len);
        tp_buf_free(&b);
    } else {
        http_reply(h, r, status, "application/json", w->body.data, w->body.len);
    }
    mcp_wait_free(w);
}

/*
 * The client closed the connection of a POST still waiting for its call:
 * for a 2026-07-28 request that is its cancellation (the call ends
 * Cancelled, and nothing is sent for it); an earlier revision's call runs
 * on, as those revisions have it. w may be freed by it.
 */
void http_mcp_client_gone(tp_http_wait_t *w)
{
    if (w->gone_ev) {
        event_free(w->gone_ev);
        w->gone_ev = NULL;
    }
    if (w->modern && w->mcp)
        tp_mcp_session_cancel_tag(w->mcp->s, w,
                                  "cancelled by the MCP client: it closed the request's stream (2026-07-28)");
}

/* DELETE /mcp: the client ends its session. */
void http_mcp_delete(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    const char *sid = tp_hreq_header(req, "Mcp-Session-Id");
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
