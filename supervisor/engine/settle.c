/*
 * An attempt that ended, settled in the turn after the pool reports it:
 * its kind checked, the tool's pace and health updated, its trace entry
 * added; then the call answers, retries after its backoff, moves on down
 * its fallback chain, or ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine_internal.h"
#include "log.h"

/*
 * Appends one entry to the call's trace. NULL when out of memory. The
 * first lives in the call itself, so a call that ends in one attempt
 * allocates nothing for its trace; the tool's name is the registry's.
 */
Toolpool__Attempt *eng_trace_add(tp_call_t *c, uint32_t number, const char *outcome, uint64_t duration_us)
{
    tp_trace_entry_t *t;
    if (c->n_trace == 0) {
        t = &c->trace0;
        c->trace0_at = &t->at;
        c->trace = &c->trace0_at;
    } else {
        bool inline_first = c->trace == &c->trace0_at;
        Toolpool__Attempt **grown = realloc(inline_first ? NULL : c->trace, (c->n_trace + 1) * sizeof *grown);
        if (grown == NULL)
            return NULL;
        if (inline_first)
            grown[0] = c->trace0_at;
        c->trace = grown;
        if ((t = malloc(sizeof *t)) == NULL)
            return NULL;
    }
    toolpool__attempt__init(&t->at);
    t->at.attempt = number;
    t->at.tool = (char *)c->hop_tool->name;
    size_t n = strnlen(outcome, sizeof t->outcome - 1);
    memcpy(t->outcome, outcome, n);
    t->outcome[n] = 0;
    t->at.outcome = t->outcome;
    t->at.duration_us = duration_us;
    /* An attempt's start is set by eng_settle; a hop not run starts (and ends) now. */
    uint64_t now = tp_now_us();
    t->at.start_us = c->turn_us && now > c->turn_us + duration_us ? now - c->turn_us - duration_us : 0;
    c->trace[c->n_trace++] = &t->at;
    return &t->at;
}

static void backoff_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_call_t *c = arg;
    tp_queue_push(&c->e->ready, c);
    kick(c->e);
}

/*
 * Guard and malformed kinds are the engine's to give, never a tool's: a
 * tool that claims one (a Cancelled, an InvalidArguments of its own) has
 * failed, as ToolError, and its message says what it claimed. One
 * exception: an MCP server that answers -32601 to tools/call does not
 * have the tool the registry names, which is UnknownTool.
 */
static void classify(tp_attempt_t *a)
{
    if (a->ok || !a->from_tool || a->kind >= TP_KIND__COUNT)
        return;
    if (a->kind == TP_KIND_UNKNOWN_TOOL && a->tool->adapter == TP_ADAPTER_MCP)
        return;
    tp_class_t klass = tp_kind_class(a->kind);
    if (klass != TP_CLASS_GUARD && klass != TP_CLASS_MALFORMED)
        return;
    char msg[512];
    snprintf(msg, sizeof msg, "%s reported %s, a kind only toolpool gives: %s", a->tool->name, a->kind_name,
             a->message ? a->message : "");
    a->kind = TP_KIND_TOOL_ERROR;
    snprintf(a->kind_name, sizeof a->kind_name, "%s", tp_kind_name(TP_KIND_TOOL_ERROR));
    free(a->message);
    a->message = strdup(msg);
}

/*
 * The turn's work for one ended attempt: its trace entry, the tool's
 * health, then a retry after its backoff, the next hop, or the call's end.
 */
void eng_settle(tp_engine_t *e, tp_call_t *c)
{
    tp_attempt_t *a = &c->att;
    tp_job_t *j = c->job;
    if (a->requeue) {
        /* Queued behind an attempt whose worker died: it never ran, and counts for nothing. */
        c->hop_attempts--;
        j->usage.calls--;
        c->readmit = true; /* admitted once (a half-open probe, maybe): it still is */
        if (c->cancelled)
            eng_finish_cancelled(e, c);
        else if (!e->draining)
            tp_queue_push_front(&e->ready, c);
        else if (c->n_trace == 0)
            eng_drop_unstarted(e, c);
        else
            eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        return;
    }
    classify(a);
    if (a->kind == TP_KIND_TIMEOUT) {
        e->stats.timeouts++;
        tp_sb_add(&tp_sb_tools(&e->sb)[c->hop_tool->index].timeouts, 1);
    }
    if (a->ok || (a->kind != TP_KIND_TIMEOUT && a->kind != TP_KIND_WORKER_CRASHED && a->kind != TP_KIND_CANCELLED)) {
        tp_tool_state_t *ts = &e->tools[c->hop_tool->index];
        double us = (double)(a->ended_us - a->started_us);
        /* The warm-up keeps the fastest answer: a worker's first call of a
         * tool pays for loading it, which says nothing of the calls after. */
        if (ts->samples < TP_FAST_SAMPLES)
            ts->ewma_us = ts->samples == 0 || us < ts->ewma_us ? us : ts->ewma_us;
        else
            ts->ewma_us = ts->ewma_us * 0.9 + us * 0.1;
        ts->samples++;
    }
    j->usage.cost += a->cost;
    Toolpool__Attempt *t = eng_trace_add(c, a->number, a->ok ? "ok" : a->kind_name, a->ended_us - a->started_us);
    if (t == NULL) {
        eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
        return;
    }
    if (c->turn_us && a->started_us >= c->turn_us)
        t->start_us = a->started_us - c->turn_us;
    t->spawn_us = a->spawn_us;
    /* A call taken down with its worker counts for nothing in its tool's health (a probe still reports back). */
    if ((!a->shared_fate || c->probe) && eng_ensure_txn(e)) {
        int rc = tp_breaker_tool_record(e->o.store, e->txn, c->hop_tool, a->kind, c->probe, tp_unix_us());
        if (rc)
            tp_engine_store_failed(e, rc, "recording a breaker");
    }
    c->probe = false;
    if (a->ok) { /* its answer came before the cancel could stop it: the work is done, and recorded so */
        eng_record_call_outcome(e, c, false);
        eng_finish(e, c, END_ANSWER, TP_KIND_OK, NULL);
        return;
    }
    if (c->cancelled) {
        eng_finish_cancelled(e, c);
        return;
    }
    if (a->kind == TP_KIND_CANCELLED) {
        eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, a->message);
        return;
    }
    if (a->kind == TP_KIND_WORKER_CRASHED && !c->hop_tool->policy.idempotent) {
        /*
         * Its worker died under it (killed, crashed, or taken down with
         * another call it held): the tool may have done its work, or part
         * of it. As after a supervisor's crash, a person decides.
         */
        char msg[700];
        snprintf(msg, sizeof msg,
                 "%s was running when its worker died (%s); it is not idempotent, so it is not run again",
                 c->hop_tool->name, a->message ? a->message : "");
        eng_escalate(e, c, tp_kind_name(TP_KIND_INTERRUPTED), msg,
                     "a call of a tool that is not idempotent was running when its worker died");
        eng_finish(e, c, END_FAIL, TP_KIND_INTERRUPTED, msg);
        return;
    }
    tp_retry_t d = tp_retry_decide(&c->hop_tool->policy, a->kind, a->number, a->retry_after_ms, tp_now_us(),
                                   call_deadline(c), &e->rng);
    if (d.retry && a->kind == TP_KIND_TIMEOUT && !a->unstarted && !c->hop_tool->policy.idempotent) {
        /* It ran out of time while running: it may have done its work, so it is not run again. */
        char *msg = NULL;
        if (asprintf(&msg, "%s; not tried again: %s is not idempotent, and may have done its work",
                     a->message ? a->message : "timed out", c->hop_tool->name) >= 0) {
            free(a->message);
            a->message = msg;
        }
        d.retry = false;
    }
    if (d.retry && e->draining) {
        char msg[256];
        snprintf(msg, sizeof msg, "run interrupted after %zu attempt%s (last: %s: %s)", c->n_trace,
                 c->n_trace == 1 ? "" : "s", a->kind_name, a->message ? a->message : "");
        eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, msg);
        return;
    }
    if (!d.retry) {
        eng_record_call_outcome(e, c, true);
        eng_hop_failed(e, c, TP_KIND_OK, NULL);
        return;
    }
    t->backoff_us = d.wait_us;
    if (d.wait_us == 0) {
        tp_queue_push(&e->ready, c);
        return;
    }
    if (c->ev_backoff == NULL && (c->ev_backoff = evtimer_new(e->base, backoff_cb, c)) == NULL) {
        t->backoff_us = 0; /* no timer to be had: retry at once, and the trace says no wait */
        tp_queue_push(&e->ready, c);
        return;
    }
    struct timeval tv = {.tv_sec = (time_t)(d.wait_us / 1000000u), .tv_usec = (suseconds_t)(d.wait_us % 1000000u)};
    if (evtimer_add(c->ev_backoff, &tv) != 0) {
        /* Asleep on a timer that never fires, the call would never end: it retries at once instead. */
        tp_log_call_t lc = eng_log_call(c);
        tp_log_call_warn("engine.backoff_timer_failed", &lc, "call %s: cannot arm its backoff timer; retrying at once",
                         c->id);
        t->backoff_us = 0;
        tp_queue_push(&e->ready, c);
    }
}

/* The pool's word that an attempt ended: its slot is free; the turn settles it. */
void eng_attempt_done_cb(void *ctx, tp_attempt_t *a)
{
    tp_engine_t *e = ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    e->tools[c->hop_tool->index].inflight--;
    call_board_end(e, c);
    /*
     * Workers never open the store, but a crash on this machine is the
     * moment to clear reader slots any dead process (another supervisor,
     * an inspection command) left behind, before they pin old pages.
     */
    if (a->kind == TP_KIND_WORKER_CRASHED && e->o.store)
        tp_store_reader_check(e->o.store);
    tp_queue_push(&e->settle, c);
    kick(e);
}

/* A notification of the running attempt's MCP server: to the front that listens, unless it gave up on the call. */
void eng_attempt_notice_cb(void *ctx, tp_attempt_t *a, const char *method, const uint8_t *params, size_t len)
{
    (void)ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    if (c->notice && !c->cancelled)
        c->notice(c->answer_ctx, method, (const char *)params, len);
}
