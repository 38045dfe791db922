/*
 * The call table and /v1/calls: POST hands a call to the engine (or
 * attaches to the live one of its id), GET answers from the table or the
 * store, DELETE cancels. Each entry is one id's call while it runs, and
 * after it the answer of a call nobody waited for (wait=0) or one
 * cancelled, kept for GET within TP_HTTP_KEEP_MAX and TP_HTTP_KEEP_BYTES.
 * POST /v1/batch (batch.c) puts its calls in the same table.
 */
#include "http_internal.h"

#include <errno.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "json.h"
#include "log.h"
#include "inflight.h"
#include "resultline.h"
#include "results.h"
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

/* ---- the call table ---- */

/* {"id": ID, "status": "running"}: a call that has not ended yet. */
/* {"id": ID, "status": "running"}, and the pid of the supervisor running it when it is another (owner > 0). */
static void running_body(tp_buf_t *b, const char *id, int32_t owner)
{
    tp_buf_puts(b, "{\"id\":");
    tp_json_put_string(b, id, strlen(id));
    tp_buf_puts(b, ",\"status\":\"running\"");
    if (owner > 0)
        tp_buf_printf(b, ",\"supervisor_pid\":%d", (int)owner);
    tp_buf_puts(b, "}\n");
}

static uint64_t id_hash(const char *id)
{
    return XXH3_64bits(id, strlen(id));
}

tp_http_entry_t *http_table_get(tp_http_t *h, const char *id)
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
void http_entry_free(tp_http_entry_t *e)
{
    while (e->waits) {
        tp_http_wait_t *w = e->waits;
        e->waits = w->next;
        http_wait_free(w);
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
void http_entry_drop(tp_http_t *h, tp_http_entry_t *e)
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
    http_entry_free(e);
}

tp_http_entry_t *http_entry_new(tp_http_t *h, const char *id, const char *tool, const tp_digest_t *identity)
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
        http_entry_free(e);
        return NULL;
    }
    return e;
}

/* The identity of a call's input, as the engine works it out for the store: its tool and canonical args. */
void http_identity_of(const tp_request_t *rq, tp_digest_t *out)
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
        http_error_body(body, "Unavailable", "the service is draining: the call was not started (send it again later)");
        return 503;
    }
    const Toolpool__Result *r = a->result;
    if (r && !r->ok && !a->recorded && r->kind) {
        tp_kind_t k = tp_kind_from_name(r->kind);
        if (k == TP_KIND_UNKNOWN_TOOL || k == TP_KIND_INVALID_REQUEST) {
            const char *msg = r->message ? r->message : "";
            http_error_body(body, r->kind, msg);
            return k == TP_KIND_UNKNOWN_TOOL ? 404 : a->conflict ? 409 : 400;
        }
    }
    if (tp_answer_write(body, a) < 0) {
        tp_buf_reset(body);
        http_error_body(body, "InternalError", a->result ? "out of memory" : "the call ended without a result");
        return 500;
    }
    return 200;
}

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
    /* Rendered where the last answer was, unless it is to be kept (then the body is the entry's). */
    bool keep = e->keep && !h->freeing;
    tp_buf_t mine = {0}, *bp = keep ? &mine : &h->answer;
    bp->len = bp->off = 0;
    int status = answer_render(a, bp);
    tp_buf_t body = *bp; /* read only, below */
    while (e->waits) {
        tp_http_wait_t *w = e->waits;
        e->waits = w->next;
        /* A DELETE that came as the call ended (its answer waiting for its commit) did not cancel it. */
        bool cancelled = e->cancelled && a->result && a->result->kind && strcmp(a->result->kind, "Cancelled") == 0;
        if (w->kind == TP_WAIT_CANCEL && !cancelled) {
            char msg[600];
            snprintf(msg, sizeof msg, "call \"%.500s\" ended before it could be cancelled", e->id);
            http_wait_error(w, 409, "Conflict", msg);
        } else if (status == 200 && w->format != TP_FORMAT_TOOLPOOL) {
            tp_buf_t as = {0};
            if (tp_format_write(&as, w->format, a) == 0)
                http_wait_reply(w, 200, "application/json", as.data, as.len);
            else
                http_wait_error(w, 500, "InternalError", "out of memory");
            tp_buf_free(&as);
        } else {
            http_wait_reply(w, status, "application/json", body.data, body.len);
        }
        http_wait_free(w);
    }
    while (e->batches) {
        tp_http_link_t *l = e->batches;
        e->batches = l->next;
        http_batch_answer_line(l->batch, a);
        free(l);
    }
    /* Only a result is kept: an error answer (a conflict, a refusal) would hide what the store holds. */
    if (!keep || status != 200) {
        if (keep)
            tp_buf_free(&body);
        http_entry_drop(h, e);
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
        http_entry_drop(h, h->kept_head);
}

/*
 * Hands the call to the engine (its args too, without a copy), with the
 * trace context of req's traceparent and tracestate headers when traces
 * are exported (the engine copies them before this returns).
 */
void http_entry_submit(tp_http_t *h, tp_http_entry_t *e, tp_request_t *rq, tp_hreq_t *req)
{
    tp_trace_ctx_t tc;
    if (h->o.otlp && req) {
        tc = (tp_trace_ctx_t){.traceparent = tp_hreq_header(req, "traceparent"),
                              .tracestate = tp_hreq_header(req, "tracestate")};
        if (tc.traceparent)
            rq->trace = &tc;
    }
    e->live = true;
    tp_request_give_args(&h->parser, rq);
    e->call = tp_engine_submit(h->e, rq, entry_answer_cb, e);
}

/* A query parameter is off when it says 0 or false. */
static bool query_off(tp_hreq_t *req, const char *name)
{
    char v[16];
    return http_query_get(req, name, v, sizeof v) && (strcmp(v, "0") == 0 || strcmp(v, "false") == 0);
}

static void reply_accepted(tp_http_t *h, tp_hreq_t *req, const char *id)
{
    char *enc = evhttp_uriencode(id, -1, 0);
    char loc[2048];
    if (enc && snprintf(loc, sizeof loc, "/v1/calls/%s", enc) < (int)sizeof loc &&
        tp_hreq_add_header(req, "Location", loc) != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Location");
    free(enc);
    tp_buf_t b = {0};
    running_body(&b, id, 0);
    http_reply(h, req, 202, "application/json", b.data, b.len);
    tp_buf_free(&b);
}

/*
 * POST /v1/calls: one call. Its answer, once durable, is the reply; with
 * wait=0 the reply is 202 at once and the answer is kept for GET. An id
 * that is live here is attached to, never run a second time; an id the
 * store has recorded is answered from it by the engine.
 */
void http_calls_post(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    bool wait = !query_off(req, "wait");
    size_t len;
    const char *body;
    tp_format_t format;
    if (http_query_format(h, req, &format) < 0 || http_body_of(h, req, &body, &len) < 0)
        return;
    tp_request_t rq;
    tp_request_bad_t bad;
    char id[64];
    switch (tp_request_parse_line(&h->parser, body ? body : "", len, NULL, TP_REQUEST_ID_OPTIONAL | TP_REQUEST_DEADLINE,
                                  &rq, &bad)) {
    case TP_REQUEST_BLANK:
        http_reply_error(h, req, 400, "InvalidRequest", "the body is empty: send one call, a JSON object");
        return;
    case TP_REQUEST_BAD:
        http_reply_error(h, req, 400, "InvalidRequest", "%s", bad.message);
        return;
    case TP_REQUEST_CALL:
        break;
    }
    if (rq.id == NULL) {
        new_id(h, id, sizeof id);
        rq.id = id;
    }
    tp_digest_t identity;
    http_identity_of(&rq, &identity);
    tp_http_entry_t *e = http_table_get(h, rq.id);
    if (tp_engine_failed(h->e)) {
        http_reply_error(h, req, 503, "Unavailable", "the engine stopped on an error (see the service's log)");
        return;
    }
    if (e && e->live) {
        if (memcmp(e->identity.b, identity.b, TP_DIGEST_LEN) != 0) {
            http_reply_error(h, req, 409, "InvalidRequest",
                             "id \"%.300s\" is running now for other input (tool %.100s); give this call a new id",
                             rq.id, e->tool);
            return;
        }
    } else {
        if (tp_engine_live(h->e) >= h->o.max_queued) {
            /* However many clients send wait=0 calls, what the service holds stays bounded. */
            tp_hreq_add_header(req, "Retry-After", "1");
            http_reply_error(h, req, 503, "Unavailable",
                             "%zu calls are held already (--max-queued); send it again shortly", tp_engine_live(h->e));
            return;
        }
        if (e)
            http_entry_drop(h, e); /* an ended call's kept answer: the engine answers the id anew */
        /* A wait=0 call to an unknown tool is told 404 like any other: it waits for the engine's answer. */
        if (!wait && tp_registry_find(tp_engine_registry(h->e), rq.tool) == NULL)
            wait = true;
        e = http_entry_new(h, rq.id, rq.tool, &identity);
        if (e == NULL) {
            http_reply_error(h, req, 500, "InternalError", "out of memory");
            return;
        }
        http_entry_submit(h, e, &rq, req);
    }
    if (!wait) {
        e->keep = true;
        reply_accepted(h, req, e->id);
        return;
    }
    tp_http_wait_t *w = http_wait_new(h, req, TP_WAIT_CALL);
    if (w == NULL) {
        e->keep = true; /* the call goes on: its answer can be fetched */
        http_reply_error(h, req, 500, "InternalError", "out of memory; the call runs on: GET /v1/calls/%.300s", e->id);
        return;
    }
    w->format = format;
    w->next = e->waits;
    e->waits = w;
}

/* A call's record, looked up in the engine's turn. */
typedef struct {
    const char *id;
    Toolpool__StoredResult *sr;
    bool marker;   /* look for its in-flight marker when it is not recorded */
    int32_t owner; /* found: the pid of the supervisor that runs it */
} result_get_t;

static int result_get_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    result_get_t *g = ctx;
    int rc = tp_result_get(s, txn, g->id, &g->sr);
    Toolpool__InFlight *f;
    if (rc == MDB_NOTFOUND && g->marker && tp_inflight_get(s, txn, g->id, &f) == 0) {
        /* Not recorded, but marked: another supervisor on the store runs it (one gone has had it settled). */
        g->owner = f->owner_pid > 0 ? f->owner_pid : 1;
        toolpool__in_flight__free_unpacked(f, NULL);
    }
    return rc;
}

/*
 * A kept answer (its result line) rendered in another format: the line
 * read back into its record.
 */
static void reply_kept_as(tp_http_t *h, tp_hreq_t *req, const tp_http_entry_t *e, tp_format_t format)
{
    Toolpool__Result *r = NULL;
    tp_buf_t b = {0};
    if (tp_result_read_line((const uint8_t *)e->body, e->body_len, &r, NULL) == 0 &&
        tp_format_write_result(&b, format, r) == 0)
        http_reply(h, req, e->status, "application/json", b.data, b.len);
    else
        http_reply_error(h, req, 500, "InternalError", "cannot render the call's answer as asked");
    if (r)
        toolpool__result__free_unpacked(r, NULL);
    tp_buf_free(&b);
}

/*
 * GET /v1/calls/ID: the answer (200 and the result line), 202 while it
 * runs (here, or in another supervisor on the store), 404 unknown.
 */
void http_calls_get(tp_http_t *h, tp_hreq_t *req, const char *id)
{
    tp_format_t format;
    if (http_query_format(h, req, &format) < 0)
        return;
    tp_http_entry_t *e = http_table_get(h, id);
    if (e && e->live) {
        tp_buf_t b = {0};
        running_body(&b, id, 0);
        http_reply(h, req, 202, "application/json", b.data, b.len);
        tp_buf_free(&b);
        return;
    }
    if (e && format != TP_FORMAT_TOOLPOOL) {
        reply_kept_as(h, req, e, format);
        return;
    }
    if (e) {
        http_reply(h, req, e->status, "application/json", e->body, e->body_len);
        return;
    }
    result_get_t g = {.id = id, .marker = true};
    int rc = http_store_op(h, req, 0, result_get_op, &g);
    Toolpool__StoredResult *sr = g.sr;
    if (rc == TP_EAGAIN)
        return;
    if (rc == MDB_NOTFOUND && g.owner) {
        tp_buf_t b = {0};
        running_body(&b, id, g.owner);
        http_reply(h, req, 202, "application/json", b.data, b.len);
        tp_buf_free(&b);
        return;
    }
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "no call \"%.500s\" is running here or recorded in the store", id);
        http_reply_error_when_durable(h, req, 404, "NotFound", msg);
        return;
    }
    if (rc) {
        http_store_error(h, req, rc, "reading a result");
        return;
    }
    tp_buf_t b = {0};
    int ok = format == TP_FORMAT_TOOLPOOL ? tp_result_line(&b, sr) : tp_format_write_result(&b, format, sr->result);
    tp_result_free(sr);
    if (ok < 0) {
        tp_buf_free(&b);
        http_reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    http_reply_when_durable(h, req, 200, "application/json", &b);
}

/*
 * DELETE /v1/calls/ID: cancels a call that waits or runs; the reply is its
 * final answer (Cancelled, class guard, unless it ended first). 409 for a
 * call that has ended, 404 for one nobody knows.
 */
void http_calls_delete(tp_http_t *h, tp_hreq_t *req, const char *id)
{
    tp_format_t format;
    if (http_query_format(h, req, &format) < 0)
        return;
    tp_http_entry_t *e = http_table_get(h, id);
    if (e && e->live) {
        tp_http_wait_t *w = http_wait_new(h, req, TP_WAIT_CANCEL);
        if (w == NULL) {
            http_reply_error(h, req, 500, "InternalError", "out of memory");
            return;
        }
        w->format = format;
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
        http_reply_error(h, req, 409, "Conflict", "call \"%.500s\" has already ended", id);
        return;
    }
    result_get_t g = {.id = id};
    int rc = http_store_op(h, req, 0, result_get_op, &g);
    char msg[600];
    if (rc == TP_EAGAIN)
        return;
    if (rc == 0) {
        tp_result_free(g.sr);
        snprintf(msg, sizeof msg, "call \"%.500s\" has already ended (its result is recorded)", id);
        http_reply_error_when_durable(h, req, 409, "Conflict", msg);
    } else if (rc == MDB_NOTFOUND || rc == TP_EPROTO) {
        snprintf(msg, sizeof msg, "no call \"%.500s\" is running here or recorded in the store", id);
        http_reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else {
        http_store_error(h, req, rc, "reading a result");
    }
}
