/*
 * POST /v1/batch: a JSONL body read as run reads its input, its calls fed
 * to the engine a window at a time (the engine's feed hook), their result
 * lines streamed back as each commit's answers are delivered (the flush
 * hook). The feed hook also gives the /mcp sessions their turn to report
 * progress.
 */
#include "http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

/* Batch lines one engine turn takes at most, as run reads input: a turn stays short. */
#define TP_HTTP_LINES_PER_TURN 1024

/*
 * Result lines a batch's client has not read yet: past this, no more of its
 * lines are handed over until the socket drains, so a slow reader holds
 * memory to about this, not to its whole output.
 */
#define TP_HTTP_BATCH_BACKLOG (4u << 20)

/* ---- POST /v1/batch ---- */

static bool batch_taking(const tp_http_batch_t *b)
{
    return b->w->req != NULL && !b->ended && b->off < b->len && !b->h->draining;
}

void http_batch_free(tp_http_batch_t *b)
{
    tp_http_t *h = b->h;
    if (b->prev)
        b->prev->next = b->next;
    else
        h->batches = b->next;
    if (b->next)
        b->next->prev = b->prev;
    http_wait_free(b->w);
    tp_buf_free(&b->out);
    free(b);
}

/* Sends the result lines gathered so far as one chunk. */
static void batch_written_cb(void *arg);

void http_batch_send(tp_http_batch_t *b)
{
    if (b->out.len == 0)
        return;
    if (b->w->req != NULL && !b->ended && tp_hreq_chunk(b->w->req, b->out.data, b->out.len) == 0 &&
        tp_hreq_unsent(b->w->req) > 0)
        tp_hreq_when_sent(b->w->req, batch_written_cb, b);
    b->out.len = b->out.off = 0;
}

/* Closes the sending side of a cut batch's connection once all it was sent has left. */
void http_batch_close_when_out(tp_http_batch_t *b)
{
    if (b->w->req)
        tp_hreq_shutdown(b->w->req);
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
void http_batch_maybe_end(tp_http_batch_t *b)
{
    if (batch_taking(b) || b->pending > 0)
        return;
    if (b->w->req != NULL && !b->ended && (b->cut || (b->h->draining && b->off < b->len))) {
        b->cut = true;
        if (!b->cut_made) {
            b->cut_made = true;
            http_batch_send(b);
            http_batch_close_when_out(b);
        }
        return;
    }
    http_batch_send(b);
    tp_hreq_t *req = http_wait_take(b->w);
    if (req && !b->ended)
        tp_hreq_end(req);
    b->ended = true;
    http_batch_free(b);
}

static void batch_written_cb(void *arg)
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
void http_batch_client_gone(tp_http_batch_t *b)
{
    b->data = NULL;
    b->len = b->off = 0;
    http_batch_maybe_end(b);
}

void http_batch_answer_line(tp_http_batch_t *b, const tp_answer_t *a)
{
    b->pending--;
    if (a->not_started)
        b->cut = true;
    if (a->not_started || b->w->req == NULL || b->ended)
        return;
    tp_buf_t *line = &b->h->line;
    tp_buf_reset(line);
    if (tp_format_write(line, b->format, a) < 0 || tp_buf_append(&b->out, line->data, line->len) != 0)
        tp_log_error("http.out_of_memory", "http: out of memory for a batch's result line");
}

static void batch_reject_cb(void *ctx, const tp_answer_t *a)
{
    http_batch_answer_line(ctx, a);
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
    http_identity_of(&rq, &identity);
    tp_http_entry_t *e = http_table_get(h, rq.id);
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
            http_entry_drop(h, e);
        e = http_entry_new(h, rq.id, rq.tool, &identity);
        fresh = true;
    }
    tp_http_link_t *l = e ? calloc(1, sizeof *l) : NULL;
    if (l == NULL) {
        snprintf(msg, sizeof msg, "%s: out of memory", where);
        if (e && fresh)
            http_entry_drop(h, e);
        batch_reject(b, rq.id, rq.job ? rq.job : rq.id, rq.step, rq.tool, msg);
        return;
    }
    l->batch = b;
    l->next = e->batches;
    e->batches = l;
    b->pending++;
    if (fresh)
        http_entry_submit(h, e, &rq, b->w->req);
}

/* Bytes of the batch's results not yet read by its client. */
static size_t batch_backlog(const tp_http_batch_t *b)
{
    return b->out.len + (b->w->req ? tp_hreq_unsent(b->w->req) : 0);
}

/*
 * The engine's turn is open: hand it more batch lines, while the calls it
 * holds stay under the window, a turn's budget lasts, and each client
 * keeps up with its results. Batches take turns (the first of one turn is
 * the last of the next), so one large batch does not starve the others.
 */
void http_feed_cb(void *ctx)
{
    tp_http_t *h = ctx;
    if (h->mcp_progress > 0) {
        for (tp_http_mcp_t *x = h->mcp_sessions; x; x = x->next)
            tp_mcp_session_progress(x->s);
        if (h->mcp_modern)
            tp_mcp_session_progress(h->mcp_modern->s);
    }
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
        http_batch_maybe_end(b);
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
void http_flush_cb(void *ctx)
{
    tp_http_t *h = ctx;
    for (tp_http_batch_t *b = h->batches, *nx; b; b = nx) {
        nx = b->next;
        http_batch_send(b);
        http_batch_maybe_end(b);
    }
}

/*
 * POST /v1/batch: the body is JSONL, run's input; the reply is a stream of
 * result lines (chunked), each as it is committed, in the order the calls
 * end. Lines are read exactly as run reads them, and a bad one gets its
 * own result line. A client that only listens while the stream runs is
 * not idle; one that stops reading it is dropped after the idle timeout.
 */
void http_batch_post(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    const char *body;
    size_t len;
    tp_format_t format;
    if (http_query_format(h, req, &format) < 0 || http_body_of(h, req, &body, &len) < 0)
        return;
    tp_http_batch_t *b = calloc(1, sizeof *b);
    if (b == NULL || (b->w = http_wait_new(h, req, TP_WAIT_BATCH)) == NULL) {
        free(b);
        http_reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    b->h = h;
    b->format = format;
    b->w->batch = b;
    b->data = body;
    b->len = len;
    b->next = h->batches;
    if (b->next)
        b->next->prev = b;
    h->batches = b;
    if (tp_hreq_add_header(req, "Content-Type", "application/x-ndjson") != 0)
        tp_log_warn("http.header_failed", "http: cannot set a reply's Content-Type");
    http_count_reply(h, 200);
    tp_hreq_start(req, 200);
    tp_engine_kick(h->e);
}
