/*
 * Dispatch: the turn hands idle slots the calls whose turn it is. Each is
 * admitted first (its job's guards, its deadline, the same-call and tool
 * breakers), then its attempt is prepared and started: at once, or after
 * the commit that makes its in-flight marker durable.
 */
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "engine_internal.h"
#include "guard.h"
#include "inflight.h"
#include "log.h"

/*
 * Before an attempt starts: the job's guards, then (at a hop's start) the
 * same-call breaker, then the tool breaker. Returns true when the call may
 * run; otherwise it has been moved on (ended, or on to its next hop).
 */
static bool admit(tp_engine_t *e, tp_call_t *c, uint64_t now, bool *probe)
{
    tp_job_t *j = c->job;
    char msg[256];
    *probe = false;
    if (c->interrupted) {
        /* Another supervisor may have settled it from its marker since it came (eng_settle_orphans). */
        if (eng_ensure_txn(e) && eng_answered_from_record(e, c))
            return false;
        if (e->failed)
            return false;
        snprintf(msg, sizeof msg,
                 "%s was running when its supervisor stopped; it is not idempotent, so it is not run again",
                 c->tool->name);
        eng_escalate(e, c, tp_kind_name(TP_KIND_INTERRUPTED), msg,
                     "a call of a tool that is not idempotent was in flight at a crash");
        c->marked = true; /* its marker goes with its record */
        eng_finish(e, c, END_FAIL, TP_KIND_INTERRUPTED, msg);
        return false;
    }
    if (j->stopped != TP_KIND_OK) {
        snprintf(msg, sizeof msg, "not run: %s", j->stop_msg ? j->stop_msg : "the job was stopped");
        eng_finish(e, c, END_FAIL, j->stopped, msg);
        return false;
    }
    tp_kind_t g = tp_guard_check(&e->o.reg->guards, &j->usage, !c->started, now, msg, sizeof msg);
    if (g != TP_KIND_OK) {
        j->stopped = g;
        free(j->stop_msg);
        j->stop_msg = strdup(msg);
        eng_finish(e, c, END_FAIL, g, msg);
        return false;
    }
    if (c->deadline_us && now >= c->deadline_us) {
        snprintf(msg, sizeof msg, "%s: the call's deadline passed before %s", c->hop_tool->name,
                 c->n_trace ? "its next attempt" : "it started");
        eng_finish(e, c, END_FAIL, TP_KIND_DEADLINE_EXCEEDED, msg);
        return false;
    }
    if (!eng_ensure_txn(e)) {
        c->readmit = false;
        return !e->failed;
    }
    uint64_t wall = tp_unix_us();
    if (c->hop_attempts == 0 && !c->hop_tool->policy.same_call_off && !tp_breakers_none(e->o.store, e->txn)) {
        bool open = false;
        char esc[TP_ESCALATION_ID_MAX] = "";
        int rc = tp_breaker_call_check(e->o.store, e->txn, c->hop_tool, call_breaker_key(c), wall, &open, esc,
                                       sizeof esc);
        if (rc) {
            tp_engine_store_failed(e, rc, "reading a breaker");
            return false;
        }
        if (open) {
            if (!eng_trace_add(c, 0, "CircuitOpen", 0)) {
                eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
                return false;
            }
            if (!c->escalated && esc[0]) {
                c->escalated = true;
                snprintf(c->escalation, sizeof c->escalation, "%s", esc);
                if ((rc = tp_escalation_blocked(e->o.store, e->txn, esc)) != 0)
                    tp_engine_store_failed(e, rc, "recording an escalation");
            }
            /* What the model reads names no escalation: their numbers follow the order they were made. */
            char id[TP_BREAKER_ID_MAX];
            snprintf(msg, sizeof msg,
                     "%s: this call's circuit is open (it failed %u times within %.3gs)%s; `toolpool breakers "
                     "reset %s` closes it",
                     c->hop_tool->name, c->hop_tool->policy.same_call_failures,
                     (double)c->hop_tool->policy.same_call_window_us / 1e6, esc[0] ? "; escalated to a person" : "",
                     tp_breaker_call_id(c->hop_tool->name, call_breaker_key(c), id, sizeof id));
            eng_hop_failed(e, c, TP_KIND_CIRCUIT_OPEN, msg);
            return false;
        }
    }
    if (c->readmit) {
        /* Its attempt never started: the tool breaker's earlier admission (a probe) stands. */
        c->readmit = false;
        *probe = c->probe;
        return true;
    }
    tp_admit_t adm;
    int rc = tp_breaker_tool_admit(e->o.store, e->txn, c->hop_tool, wall, &adm);
    if (rc) {
        tp_engine_store_failed(e, rc, "reading a breaker");
        return false;
    }
    if (adm == TP_ADMIT_NO) {
        if (!eng_trace_add(c, c->hop_attempts + 1, "CircuitOpen", 0)) {
            eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
            return false;
        }
        snprintf(msg, sizeof msg,
                 "%s: the tool's circuit is open (too many failures; probing again after %.3gs); `toolpool "
                 "breakers reset tool/%s` closes it",
                 c->hop_tool->name, (double)c->hop_tool->policy.tool_cooldown_us / 1e6, c->hop_tool->name);
        eng_hop_failed(e, c, TP_KIND_CIRCUIT_OPEN, msg);
        return false;
    }
    *probe = adm == TP_ADMIT_PROBE;
    return true;
}

static int tool_depth(const tp_engine_t *e, const tp_tool_t *t)
{
    const tp_tool_state_t *ts = &e->tools[t->index];
    if (!t->policy.idempotent || ts->samples < TP_FAST_SAMPLES || e->o.pipeline <= 1)
        return 1;
    double budget = e->o.queue_budget_us ? (double)e->o.queue_budget_us : TP_QUEUE_BUDGET_US;
    double fit = budget / (ts->ewma_us > 1 ? ts->ewma_us : 1);
    return fit >= e->o.pipeline ? e->o.pipeline : fit < 1 ? 1 : (int)fit;
}

/* Hands the prepared attempt to an idle slot (or a fast one to a busy worker's queue). */
void eng_submit_attempt(tp_engine_t *e, tp_call_t *c)
{
    int rc = tp_pool_submit(e->pool, &c->att);
    if (rc == 0 && c->att.started_us == 0) {
        /* queued behind another on its worker: not started, its clock not running (started_cb starts it) */
        tp_sb_slot_restart(&e->sb, c->sb_slot, 0, c->att.timeout_us);
    } else if (rc == TP_E2BIG || rc == TP_ENOMEM) {
        /* Too big for a frame: the attempt ended before it began; a turn settles it. */
        eng_attempt_done_cb(e, &c->att);
    } else if (rc < 0) {
        /*
         * No slot after all (the caller saw one; an http call since took
         * the idle slot a deferred attempt counted on): undo the attempt,
         * keep any probe's admission.
         */
        e->tools[c->hop_tool->index].inflight--;
        call_board_end(e, c);
        c->hop_attempts--;
        c->job->usage.calls--;
        c->readmit = true;
        tp_queue_push(&e->ready, c);
    }
}

/* Prepares the call's next attempt and starts it (the caller checked a slot is idle). */
static void start_attempt(tp_engine_t *e, tp_call_t *c, bool probe)
{
    const tp_policy_t *p = &c->hop_tool->policy;
    tp_job_t *j = c->job;
    uint64_t now = tp_now_us();
    if (c->first_us == 0)
        c->first_us = now;
    if (!c->started) {
        c->started = true;
        j->usage.steps++;
        if (j->usage.first_us == 0)
            j->usage.first_us = now;
    }
    if (c->hop_attempts == 0)
        c->hop_deadline_us = p->deadline_us ? now + p->deadline_us : 0;
    uint64_t timeout = p->timeout_us;
    if (c->hop_deadline_us) {
        if (now >= c->hop_deadline_us) {
            eng_hop_failed(e, c, TP_KIND_OK, NULL);
            return;
        }
        if (c->hop_deadline_us - now < timeout)
            timeout = c->hop_deadline_us - now;
    }
    if (c->deadline_us && c->deadline_us - now < timeout)
        timeout = c->deadline_us - now; /* admit saw it still ahead */
    uint64_t wall_left = tp_guard_wall_left(&e->o.reg->guards, &j->usage, now);
    if (wall_left < timeout)
        timeout = wall_left;
    /* The absolute limit, for an attempt that starts later (queued behind another). */
    uint64_t limit = call_deadline(c);
    if (wall_left != UINT64_MAX && (limit == 0 || now + wall_left < limit))
        limit = now + wall_left;
    j->usage.calls++;
    free(c->att.message);
    free(c->att.result);
    c->hop_attempts++;
    c->probe = probe;
    c->att = (tp_attempt_t){
        .tool = c->hop_tool,
        .call_id = c->id,
        .job = j->name,
        .step = c->step,
        .number = c->hop_attempts,
        .args = c->hop_args ? c->hop_args : c->args,
        .args_len = c->hop_args ? c->hop_args_len : c->args_len,
        .timeout_us = timeout,
        .limit_us = limit,
        .kind = TP_KIND_OK,
        .depth = tool_depth(e, c->hop_tool),
        .notify = c->notice != NULL,
    };
    if (c->tctx && c->hop_tool->adapter != TP_ADAPTER_PLUGIN) {
        /*
         * The attempt's span, its tool's parent: entry n_trace of the trace,
         * once the attempt ends. A plugin is given no context: not sent.
         */
        eng_trace_attempt_tp(c->tctx, c->n_trace);
        c->att.traceparent = c->tctx->attempt_tp;
    }
    e->tools[c->hop_tool->index].inflight++;
    call_board_start(e, c, now);
    if (!p->idempotent && eng_ensure_txn(e)) {
        /* The marker must be durable before the tool can run: start after the commit. */
        int rc = eng_marker_put(e, c, false);
        if (rc) {
            e->tools[c->hop_tool->index].inflight--;
            call_board_end(e, c);
            tp_engine_store_failed(e, rc, "recording an in-flight marker");
            return;
        }
        tp_queue_push(&e->deferred, c);
        e->n_deferred++;
        return;
    }
    if (e->failed) {
        e->tools[c->hop_tool->index].inflight--;
        call_board_end(e, c);
        return;
    }
    eng_submit_attempt(e, c);
}

/*
 * Asks for the lines of the call at the head of the ready queue, and what
 * its turn reads (its job, id and args), while the one before it runs:
 * a call waits there behind a front's window of others (1,024 and more),
 * long enough to have left the cache; and for the line of the one after
 * it, whose job and strings the next round asks for.
 */
static void prefetch_ready(const tp_engine_t *e)
{
    const tp_call_t *n = e->ready.head;
    if (n == NULL)
        return;
    for (size_t off = 0; off < sizeof *n; off += 64)
        __builtin_prefetch((const char *)n + off, 1);
    __builtin_prefetch(n->job, 1);
    __builtin_prefetch(n->id);
    __builtin_prefetch(n->args);
    if (n->next)
        __builtin_prefetch(n->next, 1);
}

/*
 * A tool's "rate": a token bucket, refilled at calls per per up to burst.
 * An attempt takes a token as it starts; one that finds none waits,
 * parked with the calls at the tool's concurrency cap, and the engine's
 * rate timer wakes the dispatch when the next token is due. The wait
 * counts against the call's deadline, and shows as queue wait in the
 * trace; it never fails the call.
 */
static void rate_refill(tp_tool_state_t *ts, const tp_policy_t *p, uint64_t now)
{
    if (now > ts->refill_us) {
        ts->tokens += (double)(now - ts->refill_us) * p->rate_calls / (double)p->rate_per_us;
        if (ts->tokens > p->rate_burst)
            ts->tokens = p->rate_burst;
    }
    ts->refill_us = now;
}

static bool rate_ready(tp_tool_state_t *ts, const tp_policy_t *p, uint64_t now)
{
    if (p->rate_calls == 0)
        return true;
    rate_refill(ts, p, now);
    return ts->tokens >= 1.0;
}

/*
 * Arms the rate timer for wait from now, unless it fires sooner already:
 * the next token of a rate-limited tool, or the soonest deadline of a
 * parked call.
 */
static void park_wake(tp_engine_t *e, uint64_t wait, uint64_t now)
{
    if (e->rate_wake_us && e->rate_wake_us <= now + wait)
        return;
    struct timeval tv = {.tv_sec = (time_t)(wait / 1000000u), .tv_usec = (suseconds_t)(wait % 1000000u)};
    if (evtimer_add(e->ev_rate, &tv) != 0) {
        /* No timer: the next turn (an answer, a submit) looks again; a lone parked call waits for one. */
        tp_log_error("engine.timer_failed", "cannot arm the rate timer: a rate-limited call waits for the next turn");
        return;
    }
    e->rate_wake_us = now + wait;
}

/* Arms the rate timer for when ts has its next token. */
static void rate_wake(tp_engine_t *e, const tp_tool_state_t *ts, const tp_policy_t *p, uint64_t now)
{
    park_wake(e, (uint64_t)((1.0 - ts->tokens) * (double)p->rate_per_us / p->rate_calls) + 1, now);
}

/* c waits, parked behind ts's others: its deadline, if it has one, is kept while it waits. */
static void park(tp_engine_t *e, tp_tool_state_t *ts, tp_call_t *c, uint64_t now)
{
    tp_queue_push(&ts->waiting, c);
    e->n_waiting++;
    uint64_t due = call_deadline(c);
    if (due == 0 || (ts->waiting_due_us && ts->waiting_due_us <= due))
        return;
    ts->waiting_due_us = due;
    park_wake(e, due > now ? due - now : 0, now);
}

/*
 * The calls parked at ts whose deadline has passed end now, as admit
 * would end them, not when their token or their turn comes: past the
 * call's own deadline DeadlineExceeded, past its hop's the hop's failure
 * (its fallback next). The soonest deadline of those left is ts's again.
 */
static void expire_parked(tp_engine_t *e, tp_tool_state_t *ts, uint64_t now)
{
    tp_queue_t keep = {0}, gone = {0};
    uint64_t due = 0;
    for (tp_call_t *c; (c = tp_queue_pop(&ts->waiting)) != NULL;) {
        uint64_t d = call_deadline(c);
        if (d && d <= now) {
            tp_queue_push(&gone, c);
            continue;
        }
        tp_queue_push(&keep, c);
        if (d && (due == 0 || d < due))
            due = d;
    }
    ts->waiting = keep;
    ts->waiting_due_us = due;
    for (tp_call_t *c; (c = tp_queue_pop(&gone)) != NULL;) {
        e->n_waiting--;
        if (c->deadline_us && c->deadline_us <= now) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s: the call's deadline passed before %s, while it waited for its turn",
                     c->hop_tool->name, c->n_trace ? "its next attempt" : "it started");
            eng_finish(e, c, END_FAIL, TP_KIND_DEADLINE_EXCEEDED, msg);
        } else {
            eng_hop_failed(e, c, TP_KIND_OK, NULL);
        }
    }
    if (due)
        park_wake(e, due > now ? due - now : 0, now);
}

/*
 * The next call to try: one parked at its tool's concurrency cap or rate
 * whose tool has room and a token now, else the head of the ready queue.
 * Parked calls are looked at only while there are some, so runs without
 * caps never scan.
 */
static tp_call_t *next_call(tp_engine_t *e, uint64_t now)
{
    if (e->n_waiting > 0) {
        for (size_t i = 0; i < e->o.reg->n_tools; i++) {
            tp_tool_state_t *ts = &e->tools[i];
            const tp_policy_t *p = &e->o.reg->tools[i].policy;
            if (ts->waiting_due_us && ts->waiting_due_us <= now)
                expire_parked(e, ts, now);
            else if (ts->waiting_due_us)
                /*
                 * Armed again: the timer may have fired a little before the
                 * deadline (libevent adds a timeout to the loop's cached
                 * time), and the token's wake armed next must not replace it.
                 */
                park_wake(e, ts->waiting_due_us - now, now);
            if (ts->waiting.head == NULL || (p->concurrency && ts->inflight >= (int)p->concurrency))
                continue;
            if (rate_ready(ts, p, now)) {
                e->n_waiting--;
                return tp_queue_pop(&ts->waiting);
            }
            rate_wake(e, ts, p, now); /* its head waits for a token: the timer brings the next turn */
        }
    }
    return tp_queue_pop(&e->ready);
}

void eng_dispatch(tp_engine_t *e)
{
    uint64_t now = tp_now_us();
    while (!e->closing && !e->draining) {
        bool idle = tp_pool_idle(e->pool) - e->n_deferred > 0;
        tp_call_t *c = next_call(e, now);
        if (c == NULL)
            return;
        prefetch_ready(e);
        /*
         * An http or mcp tool's call goes beside the others a worker holds in
         * flight. Otherwise idle slots set aside for deferred attempts are
         * not free for pipelining either.
         */
        bool room = tp_pool_flies(c->hop_tool)
                        ? tp_pool_room(e->pool, c->hop_tool, 1)
                        : idle || (tp_pool_idle(e->pool) == 0 &&
                                   tp_pool_room(e->pool, c->hop_tool, tool_depth(e, c->hop_tool)));
        if (!room) {
            /* Only a fast tool waits in a busy worker's queue; this one waits for a free worker. */
            tp_queue_push_front(&e->ready, c);
            return;
        }
        tp_tool_state_t *ts = &e->tools[c->hop_tool->index];
        uint32_t cap = c->hop_tool->policy.concurrency;
        const tp_policy_t *pol = &c->hop_tool->policy;
        bool no_token = !rate_ready(ts, pol, now);
        if ((cap && ts->inflight >= (int)cap) || no_token) {
            /* Behind the tool's parked calls, in order; a token due wakes the dispatch, and so does a deadline. */
            park(e, ts, c, now);
            if (no_token)
                rate_wake(e, ts, pol, now);
            continue;
        }
        /*
         * On a store shared with other supervisors, a call is checked and
         * claimed before it first runs; so is one that was submitted while
         * the store was shared, or before another supervisor came (and
         * maybe went, having recorded it).
         */
        if (!c->claimed && !c->started &&
            (e->owners.others > 0 || c->submitted_shared || c->submitted_gen != e->owners.generation) &&
            eng_ensure_txn(e) && eng_claim(e, c) != CLAIM_OK)
            continue;
        bool probe;
        if (admit(e, c, now, &probe)) {
            if (pol->rate_calls)
                ts->tokens -= 1.0; /* the attempt's token */
            start_attempt(e, c, probe);
        }
    }
}
