/*
 * Ending a call: its record built from its trace and last attempt, and
 * written in the open transaction with its job's checkpoint;
 * its answer queued for after the commit; its job's next step let go. And
 * what a call's end updates besides: the same-call breaker, escalations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "clock.h"
#include "engine_internal.h"
#include "inflight.h"
#include "json.h"
#include "log.h"
#include "results.h"

/*
 * Records a call's result r in the open transaction, and the step in its
 * job's checkpoint. A Cancelled
 * call is not recorded (the same id again runs); its in-flight marker is
 * dropped only when no attempt of it ever started.
 */
static void record(tp_engine_t *e, tp_call_t *c, const Toolpool__Result *r, size_t bytes)
{
    if (!eng_ensure_txn(e))
        return;
    int rc = 0;
    /*
     * A call a drain cut short is not recorded: a rerun runs it. One its
     * front cancelled is, Cancelled, so that no other supervisor waits on
     * its marker and the same id sent again is answered from the store.
     */
    if (!r->ok && !c->cancelled && strcmp(r->kind, "Cancelled") == 0) {
        if (c->marked && c->n_trace == 0 && (rc = tp_inflight_del(e->o.store, e->txn, c->id)) != 0)
            tp_engine_store_failed(e, rc, "removing an in-flight marker");
        return;
    }
    tp_job_t *j = c->job;
    uint64_t now = tp_now_us();
    if (!eng_txn_fit(e, bytes, true))
        return;
    rc = c->keep_old ? tp_result_put_over(e->o.store, e->txn, r) : tp_result_put(e->o.store, e->txn, r);
    tp_seen_add(&e->recorded, r->id, strlen(r->id));
    /* A job named after its only call (the default) has nothing to checkpoint but that result. */
    bool own_job = strcmp(j->name, c->id) == 0;
    if (rc == 0 && !own_job)
        rc = tp_checkpoint_step(e->o.store, e->txn, j->name, c->id, c->step, &j->usage,
                                j->usage.first_us ? now - j->usage.first_us : 0, j->stopped, j->stop_msg);
    if (rc == 0 && c->marked) {
        rc = tp_inflight_del(e->o.store, e->txn, c->id);
        if (!c->claim_only)
            e->marker_pending = true; /* commit it now: a crash before would call it Interrupted */
    }
    if (c->tool->policy.once || c->hop_tool->policy.once)
        e->marker_pending = true; /* commit it now: a crash before would run it again */
    if (rc)
        tp_engine_store_failed(e, rc, "recording a result");
}

/*
 * c leaves its job: a current call lets the job's next step go (advance),
 * and a job left idle leaves the table now, while it is in cache; the
 * call's answer names the job by a copy of its name.
 */
static void leave_job(tp_engine_t *e, tp_call_t *c, bool advance)
{
    tp_job_t *j = c->job;
    c->job = NULL;
    if (c->current) {
        c->current = false;
        j->running = false;
        if (advance) {
            eng_job_advance(e, j);
            return;
        }
    }
    if (tp_job_idle(j) && !e->keep_jobs && !e->draining)
        tp_jobs_drop(&e->jobs, j);
}

/*
 * c has ended, its answer made (p; NULL: none to be had): it leaves the
 * live calls and its job, and everything it owns goes now, while it is in
 * cache. What is left of it is its front's handle, valid until p is
 * delivered, as engine.h promises (a cancel then finds it ended).
 */
static void retire(tp_engine_t *e, tp_call_t *c, tp_pending_t *p, bool advance)
{
    call_unlink(c);
    leave_job(e, c, advance);
    eng_call_teardown(c);
    if (p)
        p->hold = c;
    else
        eng_call_recycle(e, c);
    kick(e);
}

/*
 * Ends a call: builds its record, records it, and queues its answer for
 * after the commit, with the record copied into a block of the answer's
 * own (eng_pending_own); then the call is torn down (retire). For
 * END_FAIL, msg NULL means the last attempt's failure; otherwise kind and
 * msg are the engine's (a guard, a cancellation, an open circuit). The
 * job's next step becomes ready.
 */
void eng_finish(tp_engine_t *e, tp_call_t *c, tp_end_t end, tp_kind_t kind, const char *msg)
{
    tp_attempt_t *a = &c->att;
    if (msg && (c->end_msg = strdup(msg)) == NULL)
        msg = "out of memory";
    else if (msg)
        msg = c->end_msg;
    Toolpool__Result res = TOOLPOOL__RESULT__INIT, *r = &res;
    char *result_buf = NULL;
    r->has_id = true;
    r->id = c->id;
    r->job = c->job->name;
    r->step = c->step;
    r->tool = (char *)c->tool->name;
    if (c->tool->version_id)
        r->version = c->tool->version_id;
    r->ok = end != END_FAIL;
    r->attempts = 0;
    for (size_t i = 0; i < c->n_trace; i++)
        r->attempts += strcmp(c->trace[i]->outcome, "CircuitOpen") != 0;
    r->trace = c->trace;
    r->n_trace = c->n_trace;
    r->duration_us = c->first_us ? tp_now_us() - c->first_us : 0;
    r->args.data = (uint8_t *)c->args;
    r->args.len = c->args_len;
    r->cost = a->cost;
    r->escalated = c->escalated;
    r->escalation = c->escalation;
    if (end == END_ANSWER) {
        r->result.data = (uint8_t *)a->result;
        r->result.len = a->result_len;
        result_buf = a->result;
        r->served_by = (char *)c->hop_tool->name;
        r->degraded = c->hop > 0;
        r->stale = c->hop_tool->policy.stale;
    } else if (end == END_DEGRADED) {
        tp_json_write(&c->degraded, c->tool->policy.degraded, 0);
        r->result.data = c->degraded.data;
        r->result.len = c->degraded.len;
        result_buf = (char *)c->degraded.data;
        r->degraded = true;
    } else {
        bool from_attempt = msg == NULL;
        r->kind = from_attempt ? (char *)a->kind_name : (char *)tp_kind_name(kind);
        r->klass = (char *)tp_class_name(tp_kind_class(from_attempt ? a->kind : kind));
        r->message = (char *)(from_attempt ? (a->message ? a->message : "") : msg);
        r->retryable = from_attempt && a->kind < TP_KIND__COUNT &&
                       (c->hop_tool->policy.retry_on & (1ull << a->kind)) != 0;
        /* The wait the tool asked for: a caller that tries again later knows when. */
        r->has_retry_after = from_attempt && a->retry_after_ms >= 0;
        r->retry_after_ms = r->has_retry_after ? (uint64_t)a->retry_after_ms : 0;
    }
    r->input_digest.data = c->identity.b;
    r->input_digest.len = TP_DIGEST_LEN;
    e->results++;
    tp_sb_tool_t *bt = &tp_sb_tools(&e->sb)[c->tool->index];
    tp_sb_write_begin(&bt->gen);
    tp_summary_add(&bt->sum, r);
    tp_sb_write_end(&bt->gen);
    if (e->o.on_end)
        e->o.on_end(e->o.on_end_ctx, r, c->tctx);
    tp_pending_t *p = eng_pending_add(e, c->answer, c->answer_ctx);
    size_t bytes = eng_record_bytes(r);
    record(e, c, r, bytes);
    tp_log_call_t lc = eng_log_call(c);
    if (p == NULL) {
        tp_log_call_error("engine.answer_lost", &lc, "out of memory: the answer of call %s is lost", c->id);
    } else if (c->answer_staged && c->answer && !e->failed) {
        /* The front renders it now, from the record in cache: nothing is copied for after the commit. */
        p->staged = true;
        p->bytes = bytes;
        e->add->bytes += bytes;
        tp_answers_t *list = e->add;
        size_t at = (size_t)(p - list->v);
        c->answer(c->answer_ctx, &(tp_answer_t){.result = r, .call = c, .stage = TP_ANSWER_STAGED});
        p = &list->v[at]; /* a front that submitted meanwhile may have moved the list */
    } else {
        if (!eng_pending_own(e->add, p, r, c->args, result_buf))
            tp_log_call_error("engine.record_lost", &lc, "out of memory: the record of call %s is lost to its answer",
                              c->id);
        /* What the answer took over is its own now. */
        if (p->args_buf)
            c->args = NULL;
        if (p->result_buf && p->result_buf == a->result)
            a->result = NULL;
        else if (p->result_buf)
            c->degraded = (tp_buf_t){0};
        p->bytes = bytes;
        e->add->bytes += bytes;
    }
    retire(e, c, p, true);
}

/*
 * c has been answered otherwise (p: that answer, which owns its record):
 * it leaves the live calls now (retire), and what is left of it stays the
 * front's handle until p is delivered.
 */
void eng_hold_until(tp_engine_t *e, tp_call_t *c, tp_pending_t *p)
{
    retire(e, c, p, !e->draining);
}

/*
 * A call that never started, dropped while draining: no record, and its
 * answer says so (a rerun runs it).
 */
void eng_drop_unstarted(tp_engine_t *e, tp_call_t *c)
{
    tp_pending_t *p = eng_pending_add(e, c->answer, c->answer_ctx);
    if (p)
        p->not_started = true;
    int rc;
    if (c->marked && eng_ensure_txn(e) && (rc = tp_inflight_del(e->o.store, e->txn, c->id)) != 0)
        tp_engine_store_failed(e, rc, "removing a claim");
    eng_hold_until(e, c, p);
}

/* The job's next call, if it is its turn: on to ready. */
void eng_job_advance(tp_engine_t *e, tp_job_t *j)
{
    tp_call_t *c = tp_job_next(j);
    if (c) {
        e->n_job_waiting--;
        if (c->turn_us == 0)
            c->turn_us = tp_now_us();
        tp_queue_push(&e->ready, c);
    } else if (tp_job_idle(j) && !e->keep_jobs && !e->draining)
        tp_jobs_drop(&e->jobs, j);
}

/* Opens an escalation for c (once): a person takes it from here. */
void eng_escalate(tp_engine_t *e, tp_call_t *c, const char *kind, const char *message, const char *reason)
{
    if (c->escalated || !eng_ensure_txn(e))
        return;
    Toolpool__Escalation x = TOOLPOOL__ESCALATION__INIT;
    x.call_id = c->id;
    x.job = c->job->name;
    x.step = c->step;
    x.tool = (char *)c->hop_tool->name;
    if (c->hop_tool->policy.owner) /* who is paged: the owner of the tool that failed */
        x.owner = c->hop_tool->policy.owner;
    x.args.data = (uint8_t *)c->args;
    x.args.len = c->args_len;
    x.kind = (char *)kind;
    x.message = (char *)(message ? message : "");
    x.reason = (char *)reason;
    x.trace = c->trace;
    x.n_trace = c->n_trace;
    int rc = tp_escalate(e->o.store, e->txn, &x, c->escalation);
    if (rc) {
        tp_engine_store_failed(e, rc, "recording an escalation");
        return;
    }
    c->escalated = true;
}

/* Ends c Cancelled, with why the front gave. */
void eng_finish_cancelled(tp_engine_t *e, tp_call_t *c)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s cancelled: %s", c->tool->name, c->cancel_why ? c->cancel_why : "by its caller");
    eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, msg);
}

/*
 * A hop's final failure counts against its same-call breaker; the failure
 * that opens the circuit escalates the call (the seed's open_circuit +
 * escalate). A hop's answer clears the count.
 */
void eng_record_call_outcome(tp_engine_t *e, tp_call_t *c, bool failed)
{
    if (c->hop_tool->policy.same_call_off || !eng_ensure_txn(e))
        return;
    if (!failed && tp_breakers_none(e->o.store, e->txn))
        return; /* nothing to clear: the key is not even worked out */
    bool opened = false;
    const tp_attempt_t *a = &c->att;
    const tp_digest_t *key = call_breaker_key(c);
    int rc = tp_breaker_call_record(e->o.store, e->txn, c->hop_tool, key, call_breaker_job(c), c->id,
                                    c->hop_args ? c->hop_args : c->args, failed, a->kind_name, a->message, tp_unix_us(),
                                    &opened);
    if (rc) {
        tp_engine_store_failed(e, rc, "recording a breaker");
        return;
    }
    if (!opened)
        return;
    char reason[160];
    snprintf(reason, sizeof reason, "the same call failed %u times within %.3gs: its circuit is open",
             c->hop_tool->policy.same_call_failures, (double)c->hop_tool->policy.same_call_window_us / 1e6);
    eng_escalate(e, c, a->kind_name, a->message, reason);
    if (c->escalated) {
        rc = tp_breaker_call_set_escalation(e->o.store, e->txn, c->hop_tool, key, c->escalation);
        if (rc)
            tp_engine_store_failed(e, rc, "recording a breaker");
    }
}
