/*
 * What goes over a slot's two pipes. Out: the Calls submitted in a turn,
 * packed (a tool's own fields once, pool_tool_head) and written in one
 * write per worker once the turn's callbacks are done, or when the caller
 * flushes. In: the worker's frames read as they come and handled one
 * whole frame at a time: Hello (the slot goes IDLE), Notice (handed to
 * notice_cb), Reply (the running attempt ends, the next queued one
 * starts); anything else breaks the protocol and the worker is killed.
 */
#include "pool_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "procfs.h"
#include "toolpool.pb-c.h"

/*
 * A worker whose reply pipe reaches EOF but does not exit is killed this
 * long after.
 */
#define EOF_LINGER_US 1000000u

/* Flushes queued Call bytes; arms the write event while some remain. */
static void slot_flush(tp_slot_t *s)
{
    tp_pipe_fit(s->call_fd, tp_buf_avail(&s->out), &s->call_pipe);
    while (tp_buf_avail(&s->out) > 0) {
        ssize_t w = write(s->call_fd, tp_buf_head(&s->out), tp_buf_avail(&s->out));
        if (w > 0) {
            tp_buf_consume(&s->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            if (event_add(s->ev_write, NULL) == 0)
                return;
            /* Its Calls would wait for a wake-up that never comes: the worker goes, they are retried. */
            tp_log_error("pool.pipe_wait_failed", "worker %d (slot %d): cannot wait for its call pipe to drain",
                         (int)s->pid, s->index);
            snprintf(s->detail, sizeof s->detail, "cannot wait for worker %d's call pipe to drain", (int)s->pid);
            tp_buf_reset(&s->out);
            slot_stop(s, WHY_PROTOCOL, SIGKILL);
            return;
        }
        /* EPIPE: the worker is gone; SIGCHLD will tell us how. */
        tp_buf_reset(&s->out);
        break;
    }
    event_del(s->ev_write);
}

void slot_write_cb(evutil_socket_t fd, short what, void *arg)
{
    slot_flush(arg);
}

/*
 * A turn's new Calls go out in one write per worker, not in one write
 * each: a write costs a syscall, and a wake-up when the worker sleeps in
 * read(). They go when the caller says (tp_pool_flush), or else after the
 * turn's callbacks.
 */
void slot_flush_now(tp_slot_t *s)
{
    s->unflushed = false;
    if (s->call_fd >= 0)
        slot_flush(s);
}

void tp_pool_flush(tp_pool_t *p)
{
    p->flush_pending = false;
    for (int i = 0; i < p->n; i++)
        if (p->slots[i].unflushed)
            slot_flush_now(&p->slots[i]);
}

/*
 * The flush event, active once a turn's callbacks are done: the turn's
 * Calls go out, unless a failure put off to here (slot_timer_arm, pool.c)
 * has to stop the pool first.
 */
void pool_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_pool_t *p = arg;
    if (p->fatal_msg[0] && !p->fatal) {
        pool_fatal(p, TP_EWORKER, p->fatal_msg);
        return;
    }
    if (p->flush_pending)
        tp_pool_flush(p);
}

/* s holds new Calls (tp_pool_submit, pool.c): they go with the turn's flush. */
void slot_flush_later(tp_slot_t *s)
{
    tp_pool_t *p = s->pool;
    s->unflushed = true;
    if (!p->flush_pending) {
        p->flush_pending = true;
        event_active(p->ev_flush, 0, 0);
    }
}

/*
 * The tool's fields of a Call, packed at its first call, and its limits
 * (*tail; the CPU time in whole seconds, rounded up, as RLIMIT_CPU counts
 * it). NULL: out of memory.
 */
/* An http tool's request, its secrets resolved, onto its tail. */
static int http_pack(tp_buf_t *tail, const tp_tool_t *t)
{
    Toolpool__HttpCall http = TOOLPOOL__HTTP_CALL__INIT;
    http.url = t->http_target;
    http.method = t->http_method;
    http.query = t->http_query;
    for (http.n_query = 0; t->http_query && t->http_query[http.n_query]; http.n_query++)
        ;
    http.headers = t->http_header_lines;
    for (http.n_headers = 0; t->http_header_lines && t->http_header_lines[http.n_headers]; http.n_headers++)
        ;
    http.body_args = t->http_body != NULL;
    http.ca_file = t->http_ca_file ? t->http_ca_file : (char *)"";
    http.timeout_ms = (t->policy.timeout_us + 999u) / 1000u;
    http.connect_timeout_ms = (t->connect_timeout_us + 999u) / 1000u;
    http.redact = t->http_secrets;
    for (http.n_redact = 0; t->http_secrets && t->http_secrets[http.n_redact]; http.n_redact++)
        ;
    return tp_call_http_pack(tail, &http);
}

const tp_buf_t *pool_tool_head(tp_pool_t *p, const tp_tool_t *t, const tp_buf_t **tail)
{
    if (t->index >= p->n_heads) {
        size_t n = t->index + 1 > 2 * p->n_heads ? t->index + 1 : 2 * p->n_heads;
        tp_buf_t *h = realloc(p->heads, n * sizeof *h);
        if (h != NULL)
            p->heads = h;
        tp_buf_t *tl = h ? realloc(p->tails, n * sizeof *tl) : NULL;
        if (tl == NULL)
            return NULL;
        p->tails = tl;
        memset(h + p->n_heads, 0, (n - p->n_heads) * sizeof *h);
        memset(tl + p->n_heads, 0, (n - p->n_heads) * sizeof *tl);
        p->n_heads = n;
    }
    tp_buf_t *h = &p->heads[t->index];
    *tail = &p->tails[t->index];
    if (h->len == 0) {
        const tp_policy_t *pol = &t->policy;
        int adapter = t->adapter == TP_ADAPTER_PLUGIN ? TOOLPOOL__ADAPTER__ADAPTER_PLUGIN
                      : t->adapter == TP_ADAPTER_MCP  ? TOOLPOOL__ADAPTER__ADAPTER_MCP
                      : t->adapter == TP_ADAPTER_HTTP ? TOOLPOOL__ADAPTER__ADAPTER_HTTP
                                                      : TOOLPOOL__ADAPTER__ADAPTER_EXEC;
        char **argv = t->adapter == TP_ADAPTER_MCP ? t->mcp_command : t->argv;
        size_t argc = 0;
        while (argv != NULL && argv[argc] != NULL)
            argc++;
        uint64_t cpu_s = (pol->limit_cpu_us + 999999u) / 1000000u;
        uint32_t cpu = cpu_s > UINT32_MAX ? UINT32_MAX : (uint32_t)cpu_s;
        if (tp_call_head_pack(h, t->name, adapter, argv, argc, t->plugin_path, pol->max_output) < 0 ||
            tp_call_tail_pack(&p->tails[t->index], pol->limit_memory, cpu, pol->limit_files, t->mcp_tool, t->mcp_env,
                              t->mcp_cwd, t->cwd) < 0 ||
            (t->adapter == TP_ADAPTER_HTTP && http_pack(&p->tails[t->index], t) < 0)) {
            tp_buf_reset(h);
            return NULL;
        }
    }
    return h;
}

static void slot_become_idle(tp_slot_t *s)
{
    s->state = SLOT_IDLE;
    s->pool->idle++;
}

/*
 * After a reply of a's tool: whether its worker has served its time: it
 * has answered as many calls as its cap (--recycle-after, or the lowest
 * worker.max_calls of the tools it has run), or a's tool sets max_rss and
 * the worker holds that much resident, read from /proc after the reply
 * (only then: a read of /proc costs some microseconds). It is then
 * replaced between calls, never during one: it takes no more calls, and
 * its pipe is closed once those it holds are done (it exits at EOF).
 */
static bool slot_served(const tp_slot_t *s, const tp_attempt_t *a)
{
    const tp_policy_t *pol = &a->tool->policy;
    if (s->call_cap && s->calls >= s->call_cap)
        return true;
    if (pol->worker_max_rss) {
        uint64_t rss = tp_proc_rss(s->pid);
        if (rss >= pol->worker_max_rss)
            return true;
    }
    return false;
}

/* Fills a in from its Reply. */
static void attempt_answered(tp_attempt_t *a, const Toolpool__Reply *r)
{
    a->ended_us = tp_now_us();
    a->ok = r->ok;
    a->cost = r->cost;
    a->retry_after_ms = r->retry_after_ms;
    if (r->ok) {
        a->kind = TP_KIND_OK;
        a->result = malloc(r->result.len + 1);
        if (a->result) {
            memcpy(a->result, r->result.data, r->result.len);
            a->result[r->result.len] = 0;
            a->result_len = r->result.len;
        } else {
            pool_attempt_fail(a, TP_KIND_SERVER_ERROR, "out of memory for the result");
        }
    } else {
        /* The kind as the tool gave it: the engine decides what it may claim. */
        a->kind = tp_kind_from_name(r->kind);
        a->from_tool = true;
        snprintf(a->kind_name, sizeof a->kind_name, "%s", r->kind[0] ? r->kind : "ToolError");
        a->message = strdup(r->message);
    }
    if (!isfinite(a->cost) || a->cost < 0)
        a->cost = 0;
    /* The time before the tool's process started: the worker's and the machine's, not the tool's. */
    if (r->started_us > a->started_us && r->started_us <= a->ended_us)
        a->spawn_us = r->started_us - a->started_us;
}

/* s answered a call and holds no more: it goes idle, or goes (retiring, shutting down, reaped already). */
static void slot_done_holding(tp_slot_t *s)
{
    tp_pool_t *p = s->pool;
    if (s->dead)
        s->state = SLOT_DYING; /* reaped already: the rest of the reap follows */
    else if (p->shutting_down || s->retiring)
        slot_stop(s, p->shutting_down ? WHY_SHUTDOWN : WHY_RECYCLE, 0);
    else
        slot_become_idle(s);
}

/* Takes a Reply off the pipe into the slot's attempt. */
static void slot_reply(tp_slot_t *s, const Toolpool__Reply *r)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t *a = s->attempt;
    if (!s->timer_lazy)
        evtimer_del(s->ev_timer); /* a fallback stays armed for the next attempt (slot_fallback_arm) */
    attempt_answered(a, r);
    s->attempt = NULL;
    s->calls++;
    s->crash_streak = 0;
    p->busy--;
    if (!s->retiring && slot_served(s, a))
        s->retiring = true;
    if (s->queued > 0) {
        /* The worker has moved on to the next one: its clock starts now. */
        tp_attempt_t *next = slot_queue_pop(s);
        s->attempt = next;
        next->started_us = a->ended_us;
        /* It waited: what is left of its deadline may now be less than its timeout. */
        if (next->limit_us && next->limit_us < next->started_us + next->timeout_us)
            next->timeout_us = next->limit_us > next->started_us ? next->limit_us - next->started_us : 1;
        slot_deadline_arm(s, next, next->started_us);
        if (p->o.started_cb)
            p->o.started_cb(p->o.ctx, next);
        p->o.done_cb(p->o.ctx, a);
        if (p->pipeline_room_cb_needed)
            p->o.idle_cb(p->o.ctx);
        return;
    }
    slot_done_holding(s);
    p->o.done_cb(p->o.ctx, a);
    if (s->state == SLOT_IDLE && !p->shutting_down)
        p->o.idle_cb(p->o.ctx);
}

/* The attempt in flight on s whose seq this is, or -1. */
static int flight_find(const tp_slot_t *s, uint64_t seq)
{
    for (int k = 0; k < s->n_flight; k++)
        if (s->flight[k]->seq == seq)
            return k;
    return -1;
}

/* A Reply to s's k-th attempt in flight: it ends; the others run on. */
static void slot_flight_reply(tp_slot_t *s, int k, const Toolpool__Reply *r)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t *a = s->flight[k];
    s->flight[k] = s->flight[--s->n_flight];
    attempt_answered(a, r);
    s->calls++;
    s->crash_streak = 0;
    p->busy--;
    if (!s->retiring && slot_served(s, a))
        s->retiring = true;
    if (s->n_flight == 0) {
        slot_timer_stop(s);
        slot_done_holding(s);
    } else {
        slot_flight_arm(s);
    }
    p->o.done_cb(p->o.ctx, a);
    /* Room for one more, in flight or on an idle slot. */
    if (s->state == SLOT_BUSY || s->state == SLOT_IDLE)
        if (!p->shutting_down)
            p->o.idle_cb(p->o.ctx);
}

/*
 * Handles one whole frame from a worker. Returns -1 when the frame breaks
 * the protocol (the caller kills the worker).
 */
static int slot_frame(tp_slot_t *s, const uint8_t *body, uint32_t len)
{
    tp_pool_t *p = s->pool;
    Toolpool__Reply plain;
    Toolpool__WorkerFrame plain_wf = TOOLPOOL__WORKER_FRAME__INIT, *wf = &plain_wf;
    if (tp_reply_decode_plain(body, len, &plain)) {
        plain_wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_REPLY;
        plain_wf.reply = &plain;
    } else {
        wf = toolpool__worker_frame__unpack(&p->arena.allocator, len, body);
    }
    if (wf == NULL) {
        tp_arena_reset(&p->arena);
        snprintf(s->detail, sizeof s->detail, "garbage frame (%u bytes) from worker %d", len, (int)s->pid);
        return -1;
    }
    int rc = 0, k;
    if (s->why != WHY_NONE) {
        /* Stopping: whatever it says now is too late. */
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_HELLO && s->state == SLOT_STARTING) {
        if (wf->hello->protocol != TOOLPOOL__PROTOCOL__PROTOCOL_VERSION) {
            snprintf(s->detail, sizeof s->detail, "worker speaks protocol %u, supervisor %u", wf->hello->protocol,
                     (unsigned)TOOLPOOL__PROTOCOL__PROTOCOL_VERSION);
            rc = -1;
        } else {
            slot_timer_stop(s);
            s->start_failures = 0;
            s->said_hello = true;
            slot_become_idle(s);
            if (!p->shutting_down)
                p->o.idle_cb(p->o.ctx);
            else
                slot_stop(s, WHY_SHUTDOWN, 0);
        }
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_NOTICE) {
        /* Only while its attempt runs, and only when someone listens: else it is too late, and dropped. */
        tp_attempt_t *to = NULL;
        if (s->state == SLOT_BUSY && s->attempt && wf->notice->seq == s->attempt->seq)
            to = s->attempt;
        else if (s->state == SLOT_BUSY && s->attempt == NULL && (k = flight_find(s, wf->notice->seq)) >= 0)
            to = s->flight[k]; /* one of the calls in flight on an MCP session */
        if (to && to->notify && p->o.notice_cb)
            p->o.notice_cb(p->o.ctx, to, wf->notice->method, wf->notice->params.data, wf->notice->params.len);
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY && s->state == SLOT_BUSY && s->attempt == NULL &&
               (k = flight_find(s, wf->reply->seq)) >= 0) {
        slot_flight_reply(s, k, wf->reply);
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY && s->state == SLOT_BUSY && s->attempt &&
               wf->reply->seq == s->attempt->seq) {
        uint64_t killed = tp_deadline_disarm(p->deadline, s->index);
        if (killed)
            slot_deadline(s, killed); /* the KILL went out first: too late */
        else
            slot_reply(s, wf->reply);
    } else {
        snprintf(s->detail, sizeof s->detail, "unexpected frame (case %d) from worker %d", (int)wf->body_case,
                 (int)s->pid);
        rc = -1;
    }
    tp_arena_reset(&p->arena);
    return rc;
}

/* Parses every whole frame buffered from the worker. -1 on a protocol error. */
int slot_parse(tp_slot_t *s)
{
    for (;;) {
        const uint8_t *body;
        uint32_t len;
        int rc = tp_frame_peek(&s->in, s->pool->o.max_frame, &body, &len);
        if (rc == TP_EAGAIN)
            return 0;
        if (rc == TP_E2BIG) {
            snprintf(s->detail, sizeof s->detail, "oversized frame from worker %d (limit %u bytes)", (int)s->pid,
                     s->pool->o.max_frame);
            return -1;
        }
        int frc = slot_frame(s, body, len);
        if (s->reply_fd < 0)
            return 0; /* the slot was torn down under us */
        tp_buf_consume(&s->in, TP_FRAME_HEADER + len);
        if (frc < 0)
            return -1;
    }
}

/* Reads what the worker sent. EOF: the worker is going; make sure it goes. */
void slot_read_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_slot_t *s = arg;
    ssize_t n = tp_buf_read_fd(&s->in, s->reply_fd);
    if (n == TP_EAGAIN || n == TP_EINTR)
        return;
    if (n <= 0) {
        /*
         * EOF: the worker is dying (its SIGCHLD will say how) or has closed
         * its pipe and lingers; the latter is killed after a grace.
         */
        event_del(s->ev_read);
        if (s->why == WHY_NONE && !s->eof) {
            s->eof = true;
            slot_timer_arm(s, EOF_LINGER_US);
        }
        return;
    }
    if (slot_parse(s) < 0)
        slot_stop(s, WHY_PROTOCOL, SIGKILL);
}
