/*
 * The engine: calls in from the fronts, attempts out to the pool, one
 * answer per call back to its front once its record is durable.
 *
 * All work triggered by events (replies, reaps, timers, submits) is
 * gathered by one deferred "kick" per loop turn, inside one store
 * transaction: settle the attempts that ended, let the fronts feed more
 * calls, dispatch to idle slots; commit when the group-commit window
 * (commit.h) closes; only then deliver the answers the commit made
 * durable, in the order they were made.
 */
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call_internal.h"
#include "checkpoint.h"
#include "clock.h"
#include "commit.h"
#include "guard.h"
#include "json.h"
#include "log.h"
#include "owners.h"
#include "result.h"
#include "retry.h"
#include "suggest.h"
#include "jsonschema.h"

/* Results between two trims of the store's map from the resident set. */
#define TP_TRIM_EVERY 1024

/* Store lookups between two trims while resuming. */
#define TP_TRIM_LOOKUPS 256

/* Violations listed in an InvalidArguments message before "... and N more". */
#define TP_ARGS_ERRORS_MAX 10

#define TP_FRONTS_MAX 4

/*
 * How many attempts of a tool one worker may hold: as many as fit, one
 * after another, in TP_QUEUE_BUDGET_US (or opts.queue_budget_us) of its
 * average attempt, so a call queued behind others waits about that long at
 * most; known only after TP_FAST_SAMPLES answers, the fastest of which
 * seeds the average.
 */
#define TP_QUEUE_BUDGET_US 2000.0
#define TP_FAST_SAMPLES 8

typedef struct {
    int inflight;
    tp_queue_t waiting;
    double ewma_us; /* how long its attempts take, when they answer */
    uint32_t samples;
} tp_tool_state_t;

/*
 * An answer made, waiting for the commit that makes it durable; or a
 * front's wait for that commit (durable_fn).
 */
typedef struct {
    tp_answer_fn fn;
    void (*durable_fn)(void *ctx, bool ok);
    void *ctx;
    tp_call_t *call;     /* a call that ran: its record lives in it */
    tp_call_t *hold;     /* a call answered otherwise, kept until then: its handle stays valid */
    Toolpool__Result *r; /* a rejected or recorded answer's record, and its strings */
    size_t at, len;      /* its line in the answers' buffer */
    bool recorded;
    bool not_started;
    bool conflict;
} tp_pending_t;

typedef struct {
    tp_pending_t *v;
    size_t n, cap;
    tp_buf_t lines;
} tp_answers_t;

struct tp_engine {
    tp_engine_opts_t o;
    struct event_base *base;
    tp_pool_t *pool;
    tp_rng_t rng;
    tp_front_t fronts[TP_FRONTS_MAX];
    int n_fronts;
    /* calls */
    size_t live;       /* calls submitted and not yet ended */
    size_t live_bytes; /* their args' bytes */
    tp_call_t *all;    /* those calls */
    tp_queue_t ready;
    tp_queue_t settle;   /* calls whose attempt ended, for the next turn */
    tp_queue_t deferred; /* attempts that start once the turn has committed */
    size_t n_waiting;    /* calls parked at their tool's concurrency cap */
    int n_deferred;
    tp_tool_state_t *tools;
    tp_jobs_t jobs;
    tp_job_t *touched; /* jobs given calls since the last turn, in order */
    tp_job_t **touched_tail;
    bool keep_jobs; /* guards, no store: keep idle jobs' usage in memory */
    /* the store */
    MDB_txn *txn; /* the open write transaction, when there is a store */
    tp_commit_t commit;
    bool marker_pending;     /* a non-idempotent call ended in the open transaction */
    size_t txn_bytes;        /* what the open transaction has written, about */
    size_t made_durable;     /* the first answers of made a commit within the turn covered */
    size_t need_room;        /* free map the next transaction begins with */
    uint64_t results;        /* calls ended so far */
    uint64_t trimmed_at;     /* results when the store's map was last trimmed */
    uint64_t lookups;        /* ids looked up in the store */
    struct event *ev_commit; /* closes the commit window */
    /* sharing the store with other supervisors (owners.h) */
    tp_owner_id_t me;
    bool owner_known;         /* this process could name itself (/proc) */
    tp_owners_state_t owners; /* as of the open transaction */
    uint64_t seen_gen;        /* the newest arrival this engine has claimed its calls for */
    tp_queue_t parked;        /* calls another live supervisor runs: waiting for its record */
    size_t n_parked;
    struct event *ev_owners; /* looks for arrivals, and again at parked calls */
    /* answers made, and the ones being delivered */
    tp_answers_t made; /* answers made, waiting for their commit */
    tp_answers_t late; /* answers made while others are being delivered */
    tp_answers_t *add; /* where answers go now: made, or late during a delivery */
    /* lifecycle */
    struct event *ev_kick;
    struct event *ev_drain;
    bool close_asked;
    bool drain_asked;
    bool draining;
    bool closing;
    bool fatal;
    bool in_turn;             /* kick_cb is running */
    uint64_t started_unix_us; /* records older than this are earlier runs' */
    tp_engine_stats_t stats;
};

static void kick(tp_engine_t *e)
{
    event_active(e->ev_kick, EV_TIMEOUT, 0);
}

void tp_engine_kick(tp_engine_t *e)
{
    kick(e);
}

static void fail(tp_engine_t *e, const char *message)
{
    if (e->fatal)
        return;
    tp_log_error("%s", message);
    e->fatal = true;
    e->closing = true;
    tp_pool_shutdown(e->pool, true);
}

/* A store operation failed: the engine cannot record, so it cannot go on. */
void tp_engine_store_failed(tp_engine_t *e, int rc, const char *what)
{
    char msg[512], why[256];
    snprintf(msg, sizeof msg, "%s: %s: %s", tp_store_dir(e->o.store), what,
             tp_store_strerror(e->o.store, rc, why, sizeof why));
    fail(e, msg);
}

static void owners_sync(tp_engine_t *e);

/* Begins the write transaction if none is open; false when there is none to have. */
static bool ensure_txn(tp_engine_t *e)
{
    if (e->fatal)
        return false; /* one failure, one message: nothing more is written */
    if (e->txn)
        return true;
    if (e->o.store == NULL)
        return false;
    char err[512];
    e->txn_bytes = 0;
    if (tp_store_begin_room(e->o.store, &e->txn, e->need_room, err, sizeof err) != 0) {
        e->txn = NULL;
        fail(e, err);
        return false;
    }
    tp_commit_begin(&e->commit, tp_now_us(), e->results);
    if (!e->in_turn)
        kick(e); /* a turn will commit it */
    owners_sync(e);
    return !e->fatal;
}

MDB_txn *tp_engine_txn(tp_engine_t *e)
{
    return ensure_txn(e) ? e->txn : NULL;
}

static bool txn_fit(tp_engine_t *e, size_t len, bool last_is_this);

bool tp_engine_room(tp_engine_t *e, size_t len)
{
    return ensure_txn(e) && txn_fit(e, len, false);
}

/* ---- answers ---- */

static tp_pending_t *pending_add(tp_engine_t *e, tp_answer_fn fn, void *ctx)
{
    tp_answers_t *a = e->add;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        tp_pending_t *v = realloc(a->v, cap * sizeof *v);
        if (v == NULL)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    tp_pending_t *p = &a->v[a->n++];
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->ctx = ctx;
    p->at = a->lines.len;
    return p;
}

void tp_engine_when_durable(tp_engine_t *e, void (*cb)(void *ctx, bool ok), void *ctx)
{
    tp_pending_t *p = pending_add(e, NULL, ctx);
    if (p == NULL) {
        cb(ctx, false);
        return;
    }
    p->durable_fn = cb;
    kick(e);
}

/*
 * Copies the strings of r into one block the pending answer owns (r is a
 * rejected or recorded answer's, built on the stack).
 */
static void pending_own(tp_pending_t *p, const Toolpool__Result *r)
{
    const char *s[5] = {r->id, r->job, r->tool, r->message ? r->message : "", r->kind ? r->kind : ""};
    size_t n[5], total = sizeof *p->r;
    for (int i = 0; i < 5; i++)
        total += (n[i] = strlen(s[i]) + 1);
    if ((p->r = malloc(total)) == NULL)
        return;
    *p->r = *r;
    p->r->trace = NULL;
    p->r->n_trace = 0;
    p->r->args.data = NULL;
    p->r->args.len = 0;
    p->r->result.data = NULL;
    p->r->result.len = 0;
    char *o = (char *)(p->r + 1), **d[5] = {&p->r->id, &p->r->job, &p->r->tool, &p->r->message, &p->r->kind};
    for (int i = 0; i < 5; i++) {
        memcpy(o, s[i], n[i]);
        *d[i] = o;
        o += n[i];
    }
}

static bool txn_fit(tp_engine_t *e, size_t len, bool last_is_this);

static bool refusal_kind(const char *kind)
{
    return kind && tp_kind_class(tp_kind_from_name(kind)) == TP_CLASS_MALFORMED;
}

/*
 * Records a refusal (r, rendered as line) under its id, so trace, the
 * job's checkpoint and the next run see every call: unless the id holds a
 * record of another kind (a result that ran is never overwritten by a
 * refusal of other input), or the id or job is too long for a key.
 */
static void record_refusal(tp_engine_t *e, Toolpool__Result *r, const uint8_t *line, size_t len)
{
    size_t max_key = tp_store_max_key(e->o.store);
    if (strlen(r->id) > max_key || strlen(r->job) > max_key || !ensure_txn(e))
        return;
    Toolpool__StoredResult *old;
    int rc = tp_result_get(e->o.store, e->txn, r->id, &old);
    if (rc == 0) {
        bool refusal = !old->ok && refusal_kind(old->kind);
        toolpool__stored_result__free_unpacked(old, NULL);
        if (!refusal)
            return;
    } else if (rc != MDB_NOTFOUND) {
        return; /* a corrupt record stays as it is, for store check to name */
    }
    if (!txn_fit(e, len, true))
        return;
    tp_digest_t args_digest, identity;
    tp_digest_bytes(r->args.data ? r->args.data : (const uint8_t *)"{}", r->args.data ? r->args.len : 2, &args_digest);
    tp_identity_digest(r->tool, &args_digest, &identity);
    r->input_digest.data = identity.b;
    r->input_digest.len = TP_DIGEST_LEN;
    rc = tp_result_put(e->o.store, e->txn, r, line, len);
    if (rc == 0 && r->job[0] && strcmp(r->job, r->id) != 0)
        rc = tp_checkpoint_step(e->o.store, e->txn, r->job, r->id, r->step, NULL, 0, TP_KIND_OK, NULL);
    r->input_digest.data = NULL;
    r->input_digest.len = 0;
    if (rc)
        tp_engine_store_failed(e, rc, "recording a refused call");
}

/*
 * Answers a request that never became a call, in order with the rest.
 * keep: record it (a refusal of the call itself; not an id conflict,
 * whose record is another call's).
 */
static tp_pending_t *reject_as(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                               const char *args, tp_kind_t kind, const char *msg, bool keep, tp_answer_fn fn, void *ctx)
{
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = id != NULL;
    r.id = (char *)(id ? id : "");
    r.job = (char *)(job ? job : "");
    r.step = step;
    r.tool = (char *)(tool ? tool : "");
    r.ok = false;
    r.kind = (char *)tp_kind_name(kind);
    r.klass = (char *)tp_class_name(tp_kind_class(kind));
    r.message = (char *)msg;
    r.retryable = false;
    r.attempts = 0;
    if (args) {
        r.args.data = (uint8_t *)args;
        r.args.len = strlen(args);
    }
    e->stats.rejected++;
    e->results++;
    tp_pending_t *p = pending_add(e, fn, ctx);
    if (p == NULL)
        return NULL;
    tp_result_write(&e->add->lines, &r);
    p->len = e->add->lines.len - p->at;
    if (keep && id && e->o.store)
        record_refusal(e, &r, e->add->lines.data + p->at, p->len);
    pending_own(p, &r);
    kick(e);
    return p;
}

static tp_pending_t *reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                            const char *args, tp_kind_t kind, const char *msg, tp_answer_fn fn, void *ctx)
{
    return reject_as(e, id, job, step, tool, args, kind, msg, true, fn, ctx);
}

bool tp_rerun_match(const tp_rerun_t *f, const char *kind)
{
    if (f == NULL || kind == NULL || kind[0] == '\0')
        return false;
    if (f->all || (f->classes & (1u << tp_kind_class(tp_kind_from_name(kind)))))
        return true;
    for (size_t i = 0; i < f->n_kinds; i++)
        if (strcmp(f->kinds[i], kind) == 0)
            return true;
    return false;
}

/*
 * Whether a recorded result is to be done again rather than served: a
 * refusal (nothing ran, and the registry may have been fixed since), or
 * a failure the run's --retry-failed names.
 */
static bool redo_recorded(const tp_engine_t *e, const Toolpool__StoredResult *r)
{
    if (r->ok)
        return false;
    if (refusal_kind(r->kind))
        return true;
    /* Only failures earlier runs recorded: this run's own (the same id twice, another
     * supervisor's answer to a call it claimed) are served, so nothing is redone twice. */
    return r->ended_unix_us < e->started_unix_us && tp_rerun_match(e->o.rerun, r->kind);
}

void tp_engine_reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool, const char *msg,
                      tp_answer_fn answer, void *ctx)
{
    reject(e, id, job, step, tool, NULL, TP_KIND_INVALID_REQUEST, msg, answer, ctx);
}

static void call_unlink(tp_call_t *c)
{
    tp_engine_t *e = c->e;
    if (c->lprev)
        c->lprev->lnext = c->lnext;
    else
        e->all = c->lnext;
    if (c->lnext)
        c->lnext->lprev = c->lprev;
    c->lprev = c->lnext = NULL;
    e->live--;
    e->live_bytes -= c->args_len;
}

static void call_free(tp_call_t *c)
{
    for (size_t i = 1; i < c->n_trace; i++)
        free(c->trace[i]);
    if (c->trace != &c->trace0_at)
        free(c->trace);
    free(c->att.message);
    free(c->att.result);
    if (c->ev_backoff)
        event_free(c->ev_backoff);
    free(c->end_msg);
    free(c->cancel_why);
    tp_buf_free(&c->degraded);
    free(c->id);
    free(c->args);
    free(c->hop_args);
    free(c);
}

/* A delivered call lets go of its job: an idle job leaves the table. */
static void call_release(tp_engine_t *e, tp_call_t *c)
{
    tp_job_t *j = c->job;
    j->held--;
    if (tp_job_idle(j) && !e->keep_jobs && !e->draining)
        tp_jobs_drop(&e->jobs, j);
    call_free(c);
}

/*
 * Delivers the answers made so far (ok: their commit succeeded) to their
 * fronts, in order, then lets each front flush. Answers made while this
 * runs (a front that submits from its callback) wait for the next commit.
 * When the commit failed, answers are dropped: nothing is reported that is
 * not durable; but those an earlier commit in the turn covered (txn_fit)
 * are delivered all the same.
 */
static void deliver(tp_engine_t *e, bool ok)
{
    tp_answers_t *d = &e->made;
    if (d->n == 0)
        return;
    /* Answers made meanwhile go aside: these lines stay where they are until the fronts have flushed. */
    e->add = &e->late;
    size_t upto = ok ? d->n : e->made_durable;
    e->made_durable = 0;
    for (size_t i = 0; i < d->n; i++) {
        tp_pending_t *p = &d->v[i];
        if (p->durable_fn) {
            p->durable_fn(p->ctx, i < upto);
            continue;
        }
        if (i < upto && p->fn) {
            /* The record's copy could not be had (out of memory): the line still says it all. */
            Toolpool__Result bare = TOOLPOOL__RESULT__INIT;
            bare.kind = (char *)tp_kind_name(TP_KIND_CANCELLED);
            tp_call_t *c = p->call;
            tp_answer_t a = {
                .result = c                ? &c->res
                          : p->r           ? p->r
                          : p->not_started ? NULL
                                           : &bare,
                .call = c ? c : p->hold,
                .line = p->len ? d->lines.data + p->at : NULL,
                .len = p->len,
                .recorded = p->recorded,
                .not_started = p->not_started,
                .conflict = p->conflict,
            };
            p->fn(p->ctx, &a);
        }
    }
    if (upto > 0)
        for (int i = 0; i < e->n_fronts; i++)
            if (e->fronts[i].flush)
                e->fronts[i].flush(e->fronts[i].ctx);
    for (size_t i = 0; i < d->n; i++) {
        if (d->v[i].call)
            call_release(e, d->v[i].call);
        if (d->v[i].hold)
            call_release(e, d->v[i].hold);
        free(d->v[i].r);
    }
    d->n = 0;
    tp_buf_reset(&d->lines);
    e->add = &e->made;
    if (e->late.n > 0) {
        /* They wait for the next commit, first in line. */
        tp_answers_t t = e->made;
        e->made = e->late;
        e->late = t;
    }
}

/* ---- jobs ---- */

/*
 * A job seen for the first time takes up its checkpoint: the usage its
 * guards count (wall time included) and what stopped it.
 */
static void job_resume(tp_engine_t *e, tp_job_t *j)
{
    if (!ensure_txn(e))
        return;
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(e->o.store, e->txn, j->name, &cp);
    if (rc == MDB_NOTFOUND)
        return;
    if (rc) {
        tp_engine_store_failed(e, rc, "reading a checkpoint");
        return;
    }
    j->usage.steps = cp->steps;
    j->usage.calls = cp->attempts;
    j->max_step = cp->last_step;
    j->usage.cost = cp->cost;
    if (cp->wall_used_us)
        j->usage.first_us = tp_now_us() - cp->wall_used_us;
    if (cp->stopped[0]) {
        j->stopped = tp_kind_from_name(cp->stopped);
        j->stop_msg = strdup(cp->stop_message);
    }
    toolpool__checkpoint__free_unpacked(cp, NULL);
}

/* The job's next call, if it is its turn: on to ready. */
static void job_advance(tp_engine_t *e, tp_job_t *j)
{
    tp_call_t *c = tp_job_next(j);
    if (c) {
        if (c->turn_us == 0)
            c->turn_us = tp_now_us();
        tp_queue_push(&e->ready, c);
    } else if (tp_job_idle(j) && !e->keep_jobs && !e->draining)
        tp_jobs_drop(&e->jobs, j);
}

/*
 * Jobs that got calls since the last turn start their first pending step
 * only now, so steps submitted together start in step order, not in the
 * order they came.
 */
static void advance_touched(tp_engine_t *e)
{
    tp_job_t *j = e->touched;
    e->touched = NULL;
    e->touched_tail = &e->touched;
    while (j) {
        tp_job_t *nx = j->tnext;
        j->touched = false;
        job_advance(e, j);
        j = nx;
    }
}

/* ---- ending a call ---- */

static void txn_commit(tp_engine_t *e);

/*
 * Makes room in the open transaction for a record of len bytes: when the
 * map's free space, as the transaction began, may not hold it with what
 * the transaction wrote already (LMDB copies each page it changes), the
 * transaction commits now, and the next begins with room for the record
 * (the map grows first). A record larger than half the map would
 * otherwise never fit, whatever the store's size. The answers made so far
 * (but the last, when last_is_this: the record's own) are durable then,
 * and reach their fronts even if the engine fails later in the turn.
 * false: the engine failed.
 */
#define TP_TXN_MARGIN (1u << 20) /* for a transaction's other writes: checkpoints, breakers */

static bool txn_fit(tp_engine_t *e, size_t len, bool last_is_this)
{
    size_t need = 2 * len + 4096;
    if (e->txn_bytes + need + TP_TXN_MARGIN <= tp_store_room(e->o.store)) {
        e->txn_bytes += need;
        return true;
    }
    size_t covered = e->add == &e->made ? e->made.n - (last_is_this && e->made.n > 0) : 0;
    txn_commit(e); /* what came before it is durable now; its answers still wait for the turn */
    if (!e->fatal)
        e->made_durable = covered;
    e->need_room = need + TP_TXN_MARGIN;
    bool ok = ensure_txn(e);
    e->need_room = 0;
    e->txn_bytes = need;
    return ok;
}

/*
 * Records a call's result (its line, at line_at in the answers' buffer) in
 * the open transaction, and the step in its job's checkpoint. A Cancelled
 * call is not recorded (the same id again runs); its in-flight marker is
 * dropped only when no attempt of it ever started.
 */
static void record(tp_engine_t *e, tp_call_t *c, const Toolpool__Result *r, size_t line_at)
{
    if (!ensure_txn(e))
        return;
    int rc = 0;
    if (!r->ok && strcmp(r->kind, "Cancelled") == 0) {
        if (c->marked && c->n_trace == 0 && (rc = tp_inflight_del(e->o.store, e->txn, c->id)) != 0)
            tp_engine_store_failed(e, rc, "removing an in-flight marker");
        return;
    }
    tp_job_t *j = c->job;
    uint64_t now = tp_now_us();
    size_t len = e->add->lines.len - line_at;
    if (!txn_fit(e, len, true))
        return;
    rc = tp_result_put(e->o.store, e->txn, r, e->add->lines.data + line_at, len);
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
    if (rc)
        tp_engine_store_failed(e, rc, "recording a result");
}

typedef enum {
    END_ANSWER,   /* the current hop answered */
    END_DEGRADED, /* the chain ran out; the declared degraded answer stands in */
    END_FAIL,     /* a failure: the last attempt's, or the engine's own kind */
} tp_end_t;

/*
 * Ends a call: builds its record, renders and records it, and queues its
 * answer for after the commit. For END_FAIL, msg NULL means the last
 * attempt's failure; otherwise kind and msg are the engine's (a guard, a
 * cancellation, an open circuit). The job's next step becomes ready.
 */
static void finish(tp_engine_t *e, tp_call_t *c, tp_end_t end, tp_kind_t kind, const char *msg)
{
    const tp_attempt_t *a = &c->att;
    if (msg && (c->end_msg = strdup(msg)) == NULL)
        msg = "out of memory";
    else if (msg)
        msg = c->end_msg;
    Toolpool__Result *r = &c->res;
    toolpool__result__init(r);
    r->has_id = true;
    r->id = c->id;
    r->job = c->job->name;
    r->step = c->step;
    r->tool = (char *)c->tool->name;
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
        r->served_by = (char *)c->hop_tool->name;
        r->degraded = c->hop > 0;
        r->stale = c->hop_tool->policy.stale;
    } else if (end == END_DEGRADED) {
        tp_json_write(&c->degraded, c->tool->policy.degraded, 0);
        r->result.data = c->degraded.data;
        r->result.len = c->degraded.len;
        r->degraded = true;
    } else {
        bool from_attempt = msg == NULL;
        r->kind = from_attempt ? (char *)a->kind_name : (char *)tp_kind_name(kind);
        r->klass = (char *)tp_class_name(tp_kind_class(from_attempt ? a->kind : kind));
        r->message = (char *)(from_attempt ? (a->message ? a->message : "") : msg);
        r->retryable = from_attempt && a->kind < TP_KIND__COUNT &&
                       (c->hop_tool->policy.retry_on & (1ull << a->kind)) != 0;
    }
    r->input_digest.data = c->identity.b;
    r->input_digest.len = TP_DIGEST_LEN;
    e->results++;
    tp_summary_add(&e->stats.tools[c->tool->index], r);
    tp_pending_t *p = pending_add(e, c->answer, c->answer_ctx);
    size_t at = e->add->lines.len;
    tp_result_write(&e->add->lines, r);
    record(e, c, r, at);
    call_unlink(c);
    if (c->ev_backoff) {
        event_free(c->ev_backoff);
        c->ev_backoff = NULL;
    }
    tp_job_t *j = c->job;
    if (p == NULL) {
        tp_log_error("out of memory: the answer of call %s is lost", c->id);
        if (c->current) {
            c->current = false;
            j->running = false;
            job_advance(e, j);
        }
        j->held++;
        call_release(e, c);
        kick(e);
        return;
    }
    p->call = c;
    p->len = e->add->lines.len - at;
    j->held++;
    if (c->current) {
        c->current = false;
        j->running = false;
        job_advance(e, j);
    }
    kick(e);
}

/*
 * c has been answered otherwise (p: that answer): it leaves the live calls
 * now, but is kept until p is delivered, so the front's handle stays valid
 * until its answer, as engine.h promises.
 */
static void hold_until(tp_engine_t *e, tp_call_t *c, tp_pending_t *p)
{
    tp_job_t *j = c->job;
    bool current = c->current;
    if (current) {
        c->current = false;
        j->running = false;
    }
    call_unlink(c);
    if (c->ev_backoff) {
        event_free(c->ev_backoff);
        c->ev_backoff = NULL;
    }
    j->held++;
    if (p)
        p->hold = c;
    else
        call_release(e, c);
    if (current && !e->draining)
        job_advance(e, j);
    kick(e);
}

/*
 * A call that never started, dropped while draining: no record, and its
 * answer says so (a rerun runs it).
 */
static void drop_unstarted(tp_engine_t *e, tp_call_t *c)
{
    tp_pending_t *p = pending_add(e, c->answer, c->answer_ctx);
    if (p)
        p->not_started = true;
    int rc;
    if (c->marked && ensure_txn(e) && (rc = tp_inflight_del(e->o.store, e->txn, c->id)) != 0)
        tp_engine_store_failed(e, rc, "removing a claim");
    hold_until(e, c, p);
}

/*
 * Appends one entry to the call's trace. NULL when out of memory. The
 * first lives in the call itself, so a call that ends in one attempt
 * allocates nothing for its trace; the tool's name is the registry's.
 */
static Toolpool__Attempt *trace_add(tp_call_t *c, uint32_t number, const char *outcome, uint64_t duration_us)
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
    /* An attempt's start is set by settle; a hop not run starts (and ends) now. */
    uint64_t now = tp_now_us();
    t->at.start_us = c->turn_us && now > c->turn_us + duration_us ? now - c->turn_us - duration_us : 0;
    c->trace[c->n_trace++] = &t->at;
    return &t->at;
}

/* Opens an escalation for c (once): a person takes it from here. */
static void escalate(tp_engine_t *e, tp_call_t *c, const char *kind, const char *message, const char *reason)
{
    if (c->escalated || !ensure_txn(e))
        return;
    Toolpool__Escalation x = TOOLPOOL__ESCALATION__INIT;
    x.call_id = c->id;
    x.job = c->job->name;
    x.step = c->step;
    x.tool = (char *)c->hop_tool->name;
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
static void finish_cancelled(tp_engine_t *e, tp_call_t *c)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s cancelled: %s", c->tool->name, c->cancel_why ? c->cancel_why : "by its caller");
    finish(e, c, END_FAIL, TP_KIND_CANCELLED, msg);
}

static void hop_failed(tp_engine_t *e, tp_call_t *c, tp_kind_t kind, const char *msg);

/*
 * The value at a JSON Pointer (RFC 6901) in doc, or NULL: "" is doc itself;
 * "/a/0/b~1c" steps through keys and array indexes (~1 is "/", ~0 "~").
 */
static json_t *json_at(json_t *doc, const char *ptr)
{
    char tok[512];
    while (doc && *ptr == '/') {
        ptr++;
        size_t n = 0;
        for (; *ptr && *ptr != '/' && n + 1 < sizeof tok; ptr++) {
            if (ptr[0] == '~' && (ptr[1] == '0' || ptr[1] == '1')) {
                tok[n++] = ptr[1] == '0' ? '~' : '/';
                ptr++;
            } else {
                tok[n++] = *ptr;
            }
        }
        tok[n] = 0;
        if (json_is_object(doc)) {
            doc = json_object_get(doc, tok);
        } else if (json_is_array(doc)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            doc = *end || !*tok || (tok[0] == '0' && tok[1]) ? NULL : json_array_get(doc, i);
        } else {
            doc = NULL;
        }
    }
    return *ptr ? NULL : doc;
}

/*
 * The args the current hop gets: the call's, or (its fallback entry maps
 * them) an object built from JSON Pointers into them; then checked
 * against the hop's own parameters. Returns true when the hop may run;
 * false with why (InvalidArguments on this hop) in msg.
 */
static bool hop_args(tp_call_t *c, const json_t *map, char *msg, size_t cap)
{
    free(c->hop_args);
    c->hop_args = NULL;
    c->hop_digest = c->digest;
    const tp_tool_t *t = c->hop_tool;
    if (map == NULL && t->schema == NULL)
        return true;
    json_t *orig = json_loadb(c->args, c->args_len, 0, NULL), *args = NULL;
    if (orig == NULL) {
        snprintf(msg, cap, "%s: invalid arguments: the call's args cannot be read", t->name);
        return false;
    }
    if (map) {
        args = json_object();
        const char *k;
        json_t *p;
        json_object_foreach((json_t *)map, k, p) {
            json_t *v = json_at(orig, json_string_value(p));
            if (v == NULL) {
                snprintf(msg, cap, "%s: invalid arguments: %s: the call's args have nothing at %s (fallback args)",
                         t->name, k, json_string_value(p));
                json_decref(args);
                json_decref(orig);
                return false;
            }
            json_object_set(args, k, v);
        }
    } else {
        args = json_incref(orig);
    }
    json_decref(orig);
    bool ok = true;
    if (t->schema) {
        tp_buf_t why = {0};
        tp_buf_printf(&why, "%s: invalid arguments: ", t->name);
        int bad = tp_jsonschema_validate(t->schema, args, &why, TP_ARGS_ERRORS_MAX);
        if (bad != 0) {
            tp_buf_append(&why, "", 1);
            snprintf(msg, cap, "%s", bad > 0 ? (const char *)why.data : "out of memory validating the arguments");
            ok = false;
        }
        tp_buf_free(&why);
    }
    if (ok && map) {
        c->hop_args = json_dumps(args, JSON_COMPACT);
        c->hop_args_len = c->hop_args ? strlen(c->hop_args) : 0;
        tp_digest_args(args, &c->hop_digest);
        if (c->hop_args == NULL) {
            snprintf(msg, cap, "%s: out of memory building the fallback's args", t->name);
            ok = false;
        }
    }
    json_decref(args);
    return ok;
}

/* The next hop of the call's fallback chain becomes current. */
static void next_hop(tp_engine_t *e, tp_call_t *c)
{
    if (e->draining) {
        finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted before the next hop of the fallback chain");
        return;
    }
    const tp_policy_t *p = &c->tool->policy;
    const json_t *map = p->fallback_args ? p->fallback_args[c->hop] : NULL;
    c->hop_tool = tp_registry_find(e->o.reg, p->fallback[c->hop]);
    c->hop++;
    c->hop_attempts = 0;
    c->hop_deadline_us = 0;
    char msg[1024];
    if (!hop_args(c, map, msg, sizeof msg)) {
        /* Not run: the hop would refuse these args; the chain goes on. */
        if (!trace_add(c, 0, tp_kind_name(TP_KIND_INVALID_ARGUMENTS), 0)) {
            finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
            return;
        }
        hop_failed(e, c, TP_KIND_INVALID_ARGUMENTS, msg);
        return;
    }
    tp_queue_push(&e->ready, c);
}

/*
 * The current hop is done and did not answer (kind, msg as for finish).
 * The chain goes on to its next hop when the failure's class is one the
 * called tool falls back on (an open circuit always is); at the chain's end
 * comes the declared degraded answer, or the escalation queue.
 */
static void hop_failed(tp_engine_t *e, tp_call_t *c, tp_kind_t kind, const char *msg)
{
    const tp_policy_t *p = &c->tool->policy;
    tp_kind_t k = msg ? kind : c->att.kind;
    tp_class_t klass = tp_kind_class(k);
    /* A hop skipped (its circuit open, or args it would refuse) always moves the chain on. */
    bool fall = k == TP_KIND_CIRCUIT_OPEN || (k == TP_KIND_INVALID_ARGUMENTS && c->hop > 0) ||
                (p->fallback_on & (1u << klass));
    if (fall && c->hop < p->n_fallback) {
        next_hop(e, c);
        return;
    }
    if (p->n_fallback > 0 && fall) {
        if (p->degraded) {
            finish(e, c, END_DEGRADED, TP_KIND_OK, NULL);
            return;
        }
        escalate(e, c, msg ? tp_kind_name(kind) : c->att.kind_name, msg ? msg : c->att.message,
                 "every hop of the fallback chain failed");
    }
    finish(e, c, END_FAIL, kind, msg);
}

/*
 * A hop's final failure counts against its same-call breaker; the failure
 * that opens the circuit escalates the call (the seed's open_circuit +
 * escalate). A hop's answer clears the count.
 */
static void record_call_outcome(tp_engine_t *e, tp_call_t *c, bool failed)
{
    if (c->hop_tool->policy.same_call_off || !ensure_txn(e))
        return;
    bool opened = false;
    const tp_attempt_t *a = &c->att;
    tp_digest_t key;
    tp_breaker_call_digest(c->hop_tool, &c->hop_digest, c->job->name, &key);
    int rc = tp_breaker_call_record(e->o.store, e->txn, c->hop_tool, &key, c->job->name,
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
    escalate(e, c, a->kind_name, a->message, reason);
    if (c->escalated) {
        rc = tp_breaker_call_set_escalation(e->o.store, e->txn, c->hop_tool, &key, c->escalation);
        if (rc)
            tp_engine_store_failed(e, rc, "recording a breaker");
    }
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

/* The call's end for its whole run: the caller's own, or none. */
static uint64_t call_deadline(const tp_call_t *c)
{
    uint64_t d = c->hop_deadline_us;
    if (c->deadline_us && (d == 0 || c->deadline_us < d))
        d = c->deadline_us;
    return d;
}

/*
 * The turn's work for one ended attempt: its trace entry, the tool's
 * health, then a retry after its backoff, the next hop, or the call's end.
 */
static void settle(tp_engine_t *e, tp_call_t *c)
{
    tp_attempt_t *a = &c->att;
    tp_job_t *j = c->job;
    if (a->requeue) {
        /* Queued behind an attempt whose worker died: it never ran, and counts for nothing. */
        c->hop_attempts--;
        j->usage.calls--;
        c->readmit = true; /* admitted once (a half-open probe, maybe): it still is */
        if (c->cancelled)
            finish_cancelled(e, c);
        else if (!e->draining)
            tp_queue_push_front(&e->ready, c);
        else if (c->n_trace == 0)
            drop_unstarted(e, c);
        else
            finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        return;
    }
    classify(a);
    if (a->kind == TP_KIND_TIMEOUT)
        e->stats.timeouts++;
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
    Toolpool__Attempt *t = trace_add(c, a->number, a->ok ? "ok" : a->kind_name, a->ended_us - a->started_us);
    if (t == NULL) {
        finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
        return;
    }
    if (c->turn_us && a->started_us >= c->turn_us)
        t->start_us = a->started_us - c->turn_us;
    if (ensure_txn(e)) {
        int rc = tp_breaker_tool_record(e->o.store, e->txn, c->hop_tool, a->kind, c->probe, tp_unix_us());
        if (rc)
            tp_engine_store_failed(e, rc, "recording a breaker");
    }
    c->probe = false;
    if (c->cancelled) {
        finish_cancelled(e, c);
        return;
    }
    if (a->ok) {
        record_call_outcome(e, c, false);
        finish(e, c, END_ANSWER, TP_KIND_OK, NULL);
        return;
    }
    if (a->kind == TP_KIND_CANCELLED) {
        finish(e, c, END_FAIL, TP_KIND_CANCELLED, a->message);
        return;
    }
    tp_retry_t d = tp_retry_decide(&c->hop_tool->policy, a->kind, a->number, a->retry_after_ms, tp_now_us(),
                                   call_deadline(c), &e->rng);
    if (d.retry && e->draining) {
        char msg[256];
        snprintf(msg, sizeof msg, "run interrupted after %zu attempt%s (last: %s: %s)", c->n_trace,
                 c->n_trace == 1 ? "" : "s", a->kind_name, a->message ? a->message : "");
        finish(e, c, END_FAIL, TP_KIND_CANCELLED, msg);
        return;
    }
    if (!d.retry) {
        record_call_outcome(e, c, true);
        hop_failed(e, c, TP_KIND_OK, NULL);
        return;
    }
    t->backoff_us = d.wait_us;
    if (d.wait_us == 0) {
        tp_queue_push(&e->ready, c);
        return;
    }
    if (c->ev_backoff == NULL && (c->ev_backoff = evtimer_new(e->base, backoff_cb, c)) == NULL) {
        tp_queue_push(&e->ready, c); /* no timer to be had: retry at once */
        return;
    }
    struct timeval tv = {.tv_sec = (time_t)(d.wait_us / 1000000u), .tv_usec = (suseconds_t)(d.wait_us % 1000000u)};
    evtimer_add(c->ev_backoff, &tv);
}

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
        snprintf(msg, sizeof msg,
                 "%s was running when its supervisor stopped; it is not idempotent, so it is not run again",
                 c->tool->name);
        escalate(e, c, tp_kind_name(TP_KIND_INTERRUPTED), msg,
                 "a call of a tool that is not idempotent was in flight at a crash");
        c->marked = true; /* its marker goes with its record */
        finish(e, c, END_FAIL, TP_KIND_INTERRUPTED, msg);
        return false;
    }
    if (j->stopped != TP_KIND_OK) {
        snprintf(msg, sizeof msg, "not run: %s", j->stop_msg ? j->stop_msg : "the job was stopped");
        finish(e, c, END_FAIL, j->stopped, msg);
        return false;
    }
    tp_kind_t g = tp_guard_check(&e->o.reg->guards, &j->usage, !c->started, now, msg, sizeof msg);
    if (g != TP_KIND_OK) {
        j->stopped = g;
        free(j->stop_msg);
        j->stop_msg = strdup(msg);
        finish(e, c, END_FAIL, g, msg);
        return false;
    }
    if (c->deadline_us && now >= c->deadline_us) {
        snprintf(msg, sizeof msg, "%s: the call's deadline passed before %s", c->hop_tool->name,
                 c->n_trace ? "its next attempt" : "it started");
        finish(e, c, END_FAIL, TP_KIND_DEADLINE_EXCEEDED, msg);
        return false;
    }
    if (!ensure_txn(e)) {
        c->readmit = false;
        return !e->fatal;
    }
    uint64_t wall = tp_unix_us();
    if (c->hop_attempts == 0 && !c->hop_tool->policy.same_call_off) {
        bool open = false;
        char esc[TP_ESCALATION_ID_MAX] = "";
        tp_digest_t key;
        tp_breaker_call_digest(c->hop_tool, &c->hop_digest, c->job->name, &key);
        int rc = tp_breaker_call_check(e->o.store, e->txn, c->hop_tool, &key, wall, &open, esc, sizeof esc);
        if (rc) {
            tp_engine_store_failed(e, rc, "reading a breaker");
            return false;
        }
        if (open) {
            if (!trace_add(c, 0, "CircuitOpen", 0)) {
                finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
                return false;
            }
            if (!c->escalated && esc[0]) {
                c->escalated = true;
                snprintf(c->escalation, sizeof c->escalation, "%s", esc);
                if ((rc = tp_escalation_blocked(e->o.store, e->txn, esc)) != 0)
                    tp_engine_store_failed(e, rc, "recording an escalation");
            }
            snprintf(msg, sizeof msg, "%s: this call's circuit is open (it failed %u times within %.3gs)%s%s",
                     c->hop_tool->name, c->hop_tool->policy.same_call_failures,
                     (double)c->hop_tool->policy.same_call_window_us / 1e6, esc[0] ? "; escalated as " : "", esc);
            hop_failed(e, c, TP_KIND_CIRCUIT_OPEN, msg);
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
        if (!trace_add(c, c->hop_attempts + 1, "CircuitOpen", 0)) {
            finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
            return false;
        }
        snprintf(msg, sizeof msg, "%s: the tool's circuit is open (too many failures; probing again after %.3gs)",
                 c->hop_tool->name, (double)c->hop_tool->policy.tool_cooldown_us / 1e6);
        hop_failed(e, c, TP_KIND_CIRCUIT_OPEN, msg);
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

static void attempt_done_cb(void *ctx, tp_attempt_t *a);

/* Hands the prepared attempt to an idle slot (or a fast one to a busy worker's queue). */
static void submit_attempt(tp_engine_t *e, tp_call_t *c)
{
    int rc = tp_pool_submit(e->pool, &c->att);
    if (rc == -2) {
        /* Too big for a frame: the attempt ended before it began; a turn settles it. */
        attempt_done_cb(e, &c->att);
    } else if (rc < 0) {
        /* Cannot happen (the caller saw a slot): undo the attempt, keep any probe's admission. */
        e->tools[c->hop_tool->index].inflight--;
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
            hop_failed(e, c, TP_KIND_OK, NULL);
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
    e->tools[c->hop_tool->index].inflight++;
    if (!p->idempotent && ensure_txn(e)) {
        /* The marker must be durable before the tool can run: start after the commit. */
        Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
        f.call_id = c->id;
        f.input_digest.data = c->identity.b;
        f.input_digest.len = TP_DIGEST_LEN;
        f.tool = (char *)c->hop_tool->name;
        f.job = j->name;
        f.step = c->step;
        f.attempt = c->att.number;
        f.started_unix_us = tp_unix_us();
        f.owner_pid = e->me.pid;
        f.owner_start = e->me.start;
        f.owner_boot = e->me.boot;
        int rc = tp_inflight_put(e->o.store, e->txn, &f);
        if (rc) {
            tp_engine_store_failed(e, rc, "recording an in-flight marker");
            return;
        }
        c->marked = true;
        c->claim_only = false;
        tp_queue_push(&e->deferred, c);
        e->n_deferred++;
        return;
    }
    if (e->fatal)
        return;
    submit_attempt(e, c);
}

/*
 * An answer served from the store: the line as it was reported, and what
 * a summary counts of it.
 */
static tp_pending_t *answer_recorded(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                                     const Toolpool__StoredResult *r, tp_answer_fn fn, void *ctx)
{
    tp_pending_t *p = pending_add(e, fn, ctx);
    if (p == NULL)
        return NULL;
    Toolpool__Result counted = TOOLPOOL__RESULT__INIT;
    counted.has_id = true;
    counted.id = (char *)id;
    counted.job = (char *)job;
    counted.step = step;
    counted.tool = (char *)tool;
    counted.ok = r->ok;
    counted.kind = r->kind;
    counted.attempts = r->attempts;
    counted.duration_us = r->duration_us;
    tp_buf_append(&e->add->lines, r->line.data, r->line.len);
    p->len = e->add->lines.len - p->at;
    p->recorded = true;
    pending_own(p, &counted);
    e->results++;
    e->stats.answered_recorded++;
    kick(e);
    return p;
}

/*
 * Whether an in-flight marker found for a call means the call was running
 * when its supervisor died, and must not run again blindly: a marker of a
 * tool that is not idempotent whose owner is gone (or unnamed: an older
 * store), or one of this engine's own (the same id twice in its input).
 * A live owner's is no such thing (the call waits for its record), nor is
 * a bare claim of a call that never started or may run again.
 */
static bool marker_orphaned(tp_engine_t *e, const Toolpool__InFlight *f)
{
    if (tp_owner_is(&e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return !f->claim_only;
    if (tp_owner_alive(&e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return false;
    return !f->claim_only;
}

/* Writes this engine's claim of c (an in-flight marker that names it) in the open transaction. */
static int claim_put(tp_engine_t *e, tp_call_t *c, bool claim_only)
{
    Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
    f.call_id = c->id;
    f.input_digest.data = c->identity.b;
    f.input_digest.len = TP_DIGEST_LEN;
    f.tool = (char *)c->hop_tool->name;
    f.job = c->job->name;
    f.step = c->step;
    f.attempt = c->att.number;
    f.owner_pid = e->me.pid;
    f.owner_start = e->me.start;
    f.owner_boot = e->me.boot;
    f.claim_only = claim_only;
    int rc = tp_inflight_put(e->o.store, e->txn, &f);
    if (rc == 0) {
        c->marked = true;
        c->claim_only = claim_only;
        c->claimed = true;
    }
    return rc;
}

/*
 * Another supervisor has arrived on the store: every call this engine
 * holds gets its claim, in the transaction that then acknowledges the
 * arrival, so the newcomer, who starts nothing before that, never runs
 * one of them. A running call of a tool that is not idempotent has its
 * marker already.
 */
static void claim_live(tp_engine_t *e)
{
    for (tp_call_t *c = e->all; c; c = c->lnext) {
        if (c->marked)
            continue;
        int rc = claim_put(e, c, true);
        if (rc) {
            tp_engine_store_failed(e, rc, "claiming a call");
            return;
        }
    }
}

/*
 * At the start of each write transaction: joins the store's owners,
 * learns of arrivals and departures, and claims this engine's calls for
 * an arrival it has not seen yet.
 */
static void owners_sync(tp_engine_t *e)
{
    if (!e->owner_known || e->fatal)
        return;
    int rc = tp_owners_sync(e->o.store, e->txn, &e->me, &e->owners);
    if (rc == 0 && e->owners.generation > e->seen_gen) {
        if (e->owners.others > 0)
            claim_live(e);
        if (!e->fatal && (rc = tp_owners_ack(e->o.store, e->txn, &e->me, e->owners.generation)) == 0)
            e->seen_gen = e->owners.generation;
    }
    if (rc)
        tp_engine_store_failed(e, rc, "reading the store's owners");
}

typedef enum {
    CLAIM_OK,       /* it is this engine's to run */
    CLAIM_PARKED,   /* another live supervisor runs it: it waits for its record */
    CLAIM_ANSWERED, /* recorded meanwhile: answered from the store */
} tp_claim_t;

/*
 * On a store shared with other supervisors, before a call's first attempt:
 * in one transaction, its record is looked for (another supervisor may
 * have run it since it was submitted), its marker checked, and its claim
 * written. Until every other live supervisor has acknowledged this one's
 * arrival, nothing is claimed.
 */
static tp_claim_t claim(tp_engine_t *e, tp_call_t *c)
{
    if (!e->owners.peers_ready) {
        tp_queue_push(&e->parked, c);
        e->n_parked++;
        return CLAIM_PARKED;
    }
    Toolpool__StoredResult *r;
    int rc = tp_result_get(e->o.store, e->txn, c->id, &r);
    if (rc == 0 && redo_recorded(e, r)) {
        toolpool__stored_result__free_unpacked(r, NULL);
        rc = MDB_NOTFOUND; /* it was to be done again when it came, and still is */
    }
    if (rc == 0) {
        tp_pending_t *p;
        if (r->input_digest.len == TP_DIGEST_LEN && memcmp(r->input_digest.data, c->identity.b, TP_DIGEST_LEN) == 0) {
            p = answer_recorded(e, c->id, c->job->name, c->step, c->tool->name, r, c->answer, c->answer_ctx);
        } else {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "id \"%s\" was recorded in the store for other input while it waited; "
                     "give this call a new id, or run with a new store",
                     c->id);
            p = reject_as(e, c->id, c->job->name, c->step, c->tool->name, c->args, TP_KIND_INVALID_REQUEST, msg, false,
                          c->answer, c->answer_ctx);
            if (p)
                p->conflict = true;
        }
        toolpool__stored_result__free_unpacked(r, NULL);
        hold_until(e, c, p);
        return CLAIM_ANSWERED;
    }
    if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading a result");
        return CLAIM_PARKED;
    }
    Toolpool__InFlight *f;
    rc = tp_inflight_get(e->o.store, e->txn, c->id, &f);
    if (rc == 0) {
        bool mine = tp_owner_is(&e->me, f->owner_pid, f->owner_start, f->owner_boot);
        bool elsewhere = !mine && tp_owner_alive(&e->me, f->owner_pid, f->owner_start, f->owner_boot);
        bool orphaned = marker_orphaned(e, f);
        toolpool__in_flight__free_unpacked(f, NULL);
        if (elsewhere) {
            tp_queue_push(&e->parked, c);
            e->n_parked++;
            return CLAIM_PARKED;
        }
        if (orphaned) {
            c->interrupted = true; /* admit ends it Interrupted, and its marker with it */
            c->claimed = true;
            return CLAIM_OK;
        }
    } else if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading an in-flight marker");
        return CLAIM_PARKED;
    }
    if ((rc = claim_put(e, c, true)) != 0) {
        tp_engine_store_failed(e, rc, "claiming a call");
        return CLAIM_PARKED;
    }
    return CLAIM_OK;
}

/*
 * Every 50 ms: parked calls are looked at again (back to the ready
 * queue, to be claimed anew), and a newcomer on the store is looked for
 * in a read transaction, so an engine with nothing to write still
 * acknowledges it soon.
 */
#define TP_OWNERS_EVERY_US 50000

static void owners_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_t *e = arg;
    if (e->fatal || e->closing)
        return;
    if (e->n_parked > 0) {
        tp_call_t *c;
        while ((c = tp_queue_pop(&e->parked)) != NULL)
            tp_queue_push(&e->ready, c);
        e->n_parked = 0;
        kick(e);
    }
    if (e->txn || !e->owner_known)
        return; /* the open transaction looked when it began */
    MDB_txn *rd;
    uint64_t generation = 0;
    if (tp_store_read(e->o.store, &rd) != 0)
        return;
    tp_owners_generation(e->o.store, rd, &generation);
    mdb_txn_abort(rd);
    if (generation != e->seen_gen || (e->owners.others > 0 && !e->owners.peers_ready))
        ensure_txn(e);
}

/*
 * The next call to try: one parked at its tool's concurrency cap whose tool
 * has room now, else the head of the ready queue. Parked calls are looked
 * at only while there are some, so runs without caps never scan.
 */
static tp_call_t *next_call(tp_engine_t *e)
{
    if (e->n_waiting > 0) {
        for (size_t i = 0; i < e->o.reg->n_tools; i++) {
            tp_tool_state_t *ts = &e->tools[i];
            if (ts->waiting.head && ts->inflight < (int)e->o.reg->tools[i].policy.concurrency) {
                e->n_waiting--;
                return tp_queue_pop(&ts->waiting);
            }
        }
    }
    return tp_queue_pop(&e->ready);
}

static void dispatch(tp_engine_t *e)
{
    uint64_t now = tp_now_us();
    while (!e->closing && !e->draining) {
        bool idle = tp_pool_idle(e->pool) - e->n_deferred > 0;
        tp_call_t *c = next_call(e);
        if (c == NULL)
            return;
        /* Idle slots set aside for deferred attempts are not free for pipelining either. */
        if (!idle && (tp_pool_idle(e->pool) > 0 || !tp_pool_room(e->pool, tool_depth(e, c->hop_tool)))) {
            /* Only a fast tool waits in a busy worker's queue; this one waits for a free worker. */
            tp_queue_push_front(&e->ready, c);
            return;
        }
        tp_tool_state_t *ts = &e->tools[c->hop_tool->index];
        uint32_t cap = c->hop_tool->policy.concurrency;
        if (cap && ts->inflight >= (int)cap) {
            tp_queue_push(&ts->waiting, c);
            e->n_waiting++;
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
            ensure_txn(e) && claim(e, c) != CLAIM_OK)
            continue;
        bool probe;
        if (admit(e, c, now, &probe))
            start_attempt(e, c, probe);
    }
}

/* The pool's word that an attempt ended: its slot is free; the turn settles it. */
static void attempt_done_cb(void *ctx, tp_attempt_t *a)
{
    tp_engine_t *e = ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    e->tools[c->hop_tool->index].inflight--;
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
static void attempt_notice_cb(void *ctx, tp_attempt_t *a, const char *method, const uint8_t *params, size_t len)
{
    (void)ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    if (c->notice && !c->cancelled)
        c->notice(c->answer_ctx, method, (const char *)params, len);
}

static void idle_cb(void *ctx)
{
    kick(ctx);
}

static void fatal_cb(void *ctx, const char *message)
{
    fail(ctx, message);
}

static void closed_cb(void *ctx)
{
    tp_engine_t *e = ctx;
    event_base_loopexit(e->base, NULL);
}

/* ---- submitting ---- */

/* "WHERE: ", the start of a message about the request, or "". */
static const char *prefix(char *buf, size_t cap, const tp_request_t *rq)
{
    snprintf(buf, cap, "%s%s", rq->where ? rq->where : "", rq->where ? ": " : "");
    return buf;
}

/* The tool a recorded line names, for a message. */
static const char *stored_tool(const Toolpool__StoredResult *r, char *buf, size_t cap)
{
    json_t *v = json_loadb((const char *)r->line.data, r->line.len, 0, NULL);
    const char *t = json_string_value(json_object_get(v, "tool"));
    snprintf(buf, cap, "%s", t ? t : "?");
    json_decref(v);
    return buf;
}

/*
 * A call the store already knows. Its recorded result, when the input is
 * the same, is the answer instead of running it again (returns true); an
 * id recorded for other input is answered InvalidRequest, never served
 * (true as well). An in-flight marker means the call was running when a
 * supervisor died.
 */
static bool resume_lookup(tp_engine_t *e, const tp_request_t *rq, const char *job, const tp_digest_t *identity,
                          bool *interrupted, bool *redo, tp_answer_fn fn, void *ctx)
{
    Toolpool__StoredResult *r;
    /*
     * Lookups of ids scattered over a large store fault in pages all over
     * its map (and the kernel maps their neighbours too): trim often here,
     * which is safe at any time, since the map is shared and read-only.
     */
    if (++e->lookups % TP_TRIM_LOOKUPS == 0)
        tp_store_trim(e->o.store);
    int rc = tp_result_get(e->o.store, e->txn, rq->id, &r);
    if (rc == 0 && redo_recorded(e, r) &&
        (refusal_kind(r->kind) ||
         (r->input_digest.len == TP_DIGEST_LEN && memcmp(r->input_digest.data, identity->b, TP_DIGEST_LEN) == 0))) {
        /* Done again: its new record replaces this one. */
        toolpool__stored_result__free_unpacked(r, NULL);
        *redo = true;
        e->stats.rerun++;
        rc = MDB_NOTFOUND;
    }
    if (rc == 0) {
        if (r->input_digest.len == TP_DIGEST_LEN && memcmp(r->input_digest.data, identity->b, TP_DIGEST_LEN) == 0) {
            answer_recorded(e, rq->id, job, rq->step, rq->tool, r, fn, ctx);
        } else {
            char msg[512], tool_buf[128], pre[96];
            snprintf(msg, sizeof msg,
                     "%sid \"%s\" is recorded in the store for other input (tool %s, other args); "
                     "give this call a new id, or run with a new store",
                     prefix(pre, sizeof pre, rq), rq->id, stored_tool(r, tool_buf, sizeof tool_buf));
            tp_pending_t *p = reject_as(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, false,
                                        fn, ctx);
            if (p)
                p->conflict = true;
        }
        toolpool__stored_result__free_unpacked(r, NULL);
        return true;
    }
    if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading a result");
        return true;
    }
    Toolpool__InFlight *f;
    rc = tp_inflight_get(e->o.store, e->txn, rq->id, &f);
    if (rc == 0) {
        *interrupted = marker_orphaned(e, f);
        toolpool__in_flight__free_unpacked(f, NULL);
    } else if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading an in-flight marker");
        return true;
    }
    return false;
}

/* Late steps said one by one on stderr, then only counted (the summary has them all). */
#define TP_LATE_SAID 10

/*
 * A step that came after a later step of its job had started (or ended,
 * in an earlier run): steps run in order only among the calls read so far,
 * so this one runs out of order. Never silent: said on stderr, counted.
 */
static void late_step(tp_engine_t *e, const tp_request_t *rq, const tp_job_t *j)
{
    char pre[96];
    if (++e->stats.late <= TP_LATE_SAID)
        tp_log_warn("%scall %s (job %s, step %llu) came after step %llu of its job had started: it runs out of "
                    "order%s",
                    prefix(pre, sizeof pre, rq), rq->id, j->name, (unsigned long long)rq->step,
                    (unsigned long long)j->max_step,
                    e->stats.late == TP_LATE_SAID ? " (further late steps are counted in the summary only)" : "");
}

tp_call_t *tp_engine_submit(tp_engine_t *e, const tp_request_t *rq, tp_answer_fn fn, void *ctx)
{
    char msg[512], pre[96];
    const char *job = rq->job ? rq->job : rq->id;
    const char *args = rq->args ? rq->args : "{}";
    char *owned_args = rq->give_args ? rq->args : NULL;
    json_t *owned_json = NULL;
    tp_call_t *c = NULL;
    if (e->fatal)
        goto out;
    if (e->draining || e->closing || e->close_asked) {
        tp_pending_t *p = pending_add(e, fn, ctx);
        if (p)
            p->not_started = true;
        kick(e);
        goto out;
    }
    size_t args_len = rq->args ? rq->args_len : 2;
    if (e->o.max_args && args_len > e->o.max_args) {
        snprintf(msg, sizeof msg, "%sargs are %zu bytes, over the %zu-byte limit (--max-args)",
                 prefix(pre, sizeof pre, rq), args_len, e->o.max_args);
        reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx);
        goto out;
    }
    /* The store keys calls by id and jobs by name: LMDB takes keys of at most 511 bytes. */
    size_t max_key = e->o.store ? tp_store_max_key(e->o.store) : SIZE_MAX;
    if (strlen(rq->id) > max_key || strlen(job) > max_key) {
        bool id_long = strlen(rq->id) > max_key;
        snprintf(msg, sizeof msg, "%s\"%s\" is %zu bytes; the store takes ids and job names of at most %zu",
                 prefix(pre, sizeof pre, rq), id_long ? "id" : "job", strlen(id_long ? rq->id : job), max_key);
        reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx); /* not recorded */
        goto out;
    }
    const tp_tool_t *t = tp_registry_find(e->o.reg, rq->tool);
    if (t == NULL) {
        char near[256];
        tp_registry_suggest(e->o.reg, rq->tool, near, sizeof near);
        snprintf(msg, sizeof msg, "%sunknown tool \"%s\"%s%s%s", prefix(pre, sizeof pre, rq), rq->tool,
                 near[0] ? " (closest: " : "", near, near[0] ? ")" : "");
        reject(e, rq->id, job, rq->step, rq->tool, args, TP_KIND_UNKNOWN_TOOL, msg, fn, ctx);
        goto out;
    }
    const json_t *jargs = rq->jargs;
    bool need_tree = t->schema != NULL || (e->o.store && rq->canon == NULL);
    if (need_tree && jargs == NULL && (jargs = owned_json = json_loads(args, 0, NULL)) == NULL) {
        snprintf(msg, sizeof msg, "%sargs are not a JSON object", prefix(pre, sizeof pre, rq));
        reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx);
        goto out;
    }
    if (t->schema) {
        /* Malformed: the model's to fix, so no call happens and the message says what to change. */
        tp_buf_t why = {0};
        tp_buf_printf(&why, "%s: invalid arguments: ", t->name);
        int bad = tp_jsonschema_validate(t->schema, jargs, &why, TP_ARGS_ERRORS_MAX);
        if (bad != 0) {
            tp_buf_append(&why, "", 1);
            reject(e, rq->id, job, rq->step, rq->tool, args, TP_KIND_INVALID_ARGUMENTS,
                   bad > 0 ? (const char *)why.data : "out of memory validating the arguments", fn, ctx);
            tp_buf_free(&why);
            goto out;
        }
        tp_buf_free(&why);
    }
    tp_digest_t digest = {{0}}, identity = {{0}};
    bool interrupted = false, redo = false;
    if (e->o.store) {
        if (rq->canon)
            tp_digest_bytes(rq->canon, rq->canon_len, &digest);
        else
            tp_digest_args(jargs, &digest);
        tp_identity_digest(t->name, &digest, &identity);
        if (!ensure_txn(e) || resume_lookup(e, rq, job, &identity, &interrupted, &redo, fn, ctx))
            goto out;
    }
    bool created;
    c = calloc(1, sizeof *c);
    tp_job_t *j = c ? tp_jobs_get(&e->jobs, job, strlen(job), &created) : NULL;
    if (j && created && strcmp(job, rq->id) != 0)
        job_resume(e, j); /* a job named after its one call has no checkpoint */
    if (c == NULL || j == NULL || (c->id = strdup(rq->id)) == NULL ||
        (c->args = owned_args ? owned_args : strdup(args)) == NULL) {
        reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, "out of memory", fn, ctx);
        if (c)
            free(c->id);
        free(c);
        c = NULL;
        goto out;
    }
    owned_args = NULL;
    if (!redo && rq->step < j->max_step)
        late_step(e, rq, j);
    c->e = e;
    c->tool = t;
    c->hop_tool = t;
    c->digest = digest;
    c->hop_digest = digest;
    c->identity = identity;
    c->interrupted = interrupted;
    c->args_len = args_len;
    c->step = rq->step;
    c->deadline_us = rq->deadline_us;
    c->submitted_gen = e->owners.generation;
    c->submitted_shared = e->owners.others > 0;
    c->answer = fn;
    c->answer_ctx = ctx;
    c->notice = rq->notice;
    c->att.kind = TP_KIND_OK;
    tp_job_add(j, c);
    if (!j->touched) {
        j->touched = true;
        j->tnext = NULL;
        *e->touched_tail = j;
        e->touched_tail = &j->tnext;
    }
    c->lnext = e->all;
    if (e->all)
        e->all->lprev = c;
    e->all = c;
    e->live++;
    e->live_bytes += c->args_len;
    kick(e);
out:
    free(owned_args);
    json_decref(owned_json);
    return c;
}

void tp_engine_cancel(tp_engine_t *e, tp_call_t *c, const char *why)
{
    if (c->cancelled || (c->lprev == NULL && e->all != c))
        return; /* cancelled already, or ended: its answer is on its way */
    c->cancelled = true;
    c->cancel_why = strdup(why ? why : "by its caller");
    bool waiting = (!c->current && tp_job_remove(c->job, c)) || tp_queue_remove(&e->ready, c);
    if (!waiting && tp_queue_remove(&e->tools[c->hop_tool->index].waiting, c)) {
        e->n_waiting--;
        waiting = true;
    }
    if (!waiting && tp_queue_remove(&e->parked, c)) {
        e->n_parked--;
        waiting = true;
    }
    if (!waiting && c->ev_backoff && evtimer_pending(c->ev_backoff, NULL)) {
        evtimer_del(c->ev_backoff);
        waiting = true;
    }
    if (waiting) {
        finish_cancelled(e, c);
        return;
    }
    /* Running: its worker's group is killed, and the end comes through settle. */
    if (tp_pool_is_running(e->pool, &c->att))
        tp_pool_cancel(e->pool, &c->att);
    kick(e);
}

void tp_call_info(const tp_call_t *c, tp_call_info_t *out)
{
    /* The call's record is filled when it ends, and only then (finish). */
    *out = (tp_call_info_t){.entries = (uint32_t)c->n_trace, .ended = c->res.has_id};
    if (c->n_trace == 0)
        return;
    const Toolpool__Attempt *last = c->trace[c->n_trace - 1];
    out->number = last->attempt;
    out->tool = last->tool;
    out->outcome = last->outcome;
    out->backoff_us = last->backoff_us;
}

size_t tp_engine_live(const tp_engine_t *e)
{
    return e->live;
}

bool tp_engine_takes(const tp_engine_t *e, size_t window)
{
    return e->live < window && (e->live == 0 || e->live_bytes < TP_ENGINE_LIVE_BYTES);
}

/* ---- the turn ---- */

static bool commit_urgent(const tp_engine_t *e)
{
    return e->fatal || e->closing || e->draining || e->drain_asked || e->n_deferred > 0 || e->marker_pending;
}

/*
 * Commits the open transaction (aborts it after a failure), and keeps the
 * resident set flat however large the store grows.
 */
static void txn_commit(tp_engine_t *e)
{
    char err[512];
    MDB_txn *txn = e->txn;
    e->txn = NULL;
    e->marker_pending = false;
    evtimer_del(e->ev_commit);
    if (e->fatal) {
        mdb_txn_abort(txn);
    } else {
        uint64_t t0 = tp_now_us();
        if (tp_store_commit(e->o.store, txn, err, sizeof err) != 0)
            fail(e, err);
        uint64_t took = tp_now_us() - t0;
        tp_commit_took(&e->commit, took);
        e->stats.commits++;
        tp_summary_add_latency(&e->stats.commit_latency, took);
    }
    if (e->results - e->trimmed_at >= TP_TRIM_EVERY) {
        e->trimmed_at = e->results;
        tp_store_trim(e->o.store);
    }
}

static void drain(tp_engine_t *e);

/*
 * kick_cb: the loop turn's gathered work, in one store transaction: settle the
 * attempts that ended, let the fronts feed more calls, dispatch to idle
 * slots; commit; only then deliver the answers, so a record is durable
 * before it is reported. A turn whose commit fails reports nothing and
 * stops the engine.
 */
static void turn(tp_engine_t *e);

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_t *e = arg;
    e->in_turn = true;
    turn(e);
    e->in_turn = false;
}

static void turn(tp_engine_t *e)
{
    ensure_txn(e);
    tp_call_t *c;
    while ((c = tp_queue_pop(&e->settle)) != NULL)
        settle(e, c);
    if (e->drain_asked && !e->draining)
        drain(e);
    if (!e->closing) {
        for (int i = 0; i < e->n_fronts; i++)
            if (e->fronts[i].feed && !e->draining)
                e->fronts[i].feed(e->fronts[i].ctx);
        advance_touched(e);
        dispatch(e);
    }
    tp_pool_flush(e->pool); /* the workers start on them during the commit */
    uint64_t now = tp_now_us(), hold;
    /* A window whose answers hold TP_COMMIT_BYTES commits now, whatever their count: memory stays bounded. */
    bool urgent = commit_urgent(e) || e->add->lines.len >= TP_COMMIT_BYTES;
    bool due = e->txn && tp_commit_due(&e->commit, now, e->results, tp_pool_busy(e->pool), urgent);
    if (due && (hold = tp_commit_hold(&e->commit, now, e->results, tp_pool_next_deadline(e->pool), urgent)) > 0) {
        struct timeval tv = {.tv_sec = (time_t)(hold / 1000000u), .tv_usec = (suseconds_t)(hold % 1000000u)};
        evtimer_add(e->ev_commit, &tv);
        return;
    }
    if (e->txn && !due) {
        /*
         * Group commit: more results will come before the window closes;
         * one fsync will cover them all. The turn's answers wait for it.
         */
        if (!evtimer_pending(e->ev_commit, NULL)) {
            uint64_t window = tp_commit_window_us(&e->commit), since = now - e->commit.since_us;
            uint64_t left = since < window ? window - since : 0;
            struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t)left};
            evtimer_add(e->ev_commit, &tv);
        }
        return;
    }
    if (e->txn)
        txn_commit(e);
    tp_call_t *d;
    while ((d = tp_queue_pop(&e->deferred)) != NULL) {
        e->n_deferred--;
        if (d->cancelled) {
            e->tools[d->hop_tool->index].inflight--;
            d->hop_attempts--;
            finish_cancelled(e, d);
        } else if (e->fatal || e->closing) {
            tp_queue_push(&e->ready, d); /* never started; freed with the rest */
        } else {
            submit_attempt(e, d);
        }
    }
    deliver(e, !e->fatal);
    bool idle = e->live == 0 || (e->draining && tp_pool_busy(e->pool) == 0);
    if (!e->closing && (e->close_asked || e->draining) && idle) {
        e->closing = true;
        tp_pool_shutdown(e->pool, false);
    }
}

/*
 * Stops taking calls. Calls never started are answered not_started (a
 * rerun runs them); calls between attempts end Cancelled now; running
 * attempts may finish until the drain timer.
 */
static void drain(tp_engine_t *e)
{
    e->draining = true;
    e->ready.head = e->ready.tail = NULL;
    for (size_t i = 0; i < e->o.reg->n_tools; i++)
        e->tools[i].waiting.head = e->tools[i].waiting.tail = NULL;
    e->n_waiting = 0;
    e->parked.head = e->parked.tail = NULL;
    e->n_parked = 0;
    for (size_t k = 0; k < e->jobs.cap; k++)
        for (tp_job_t *j = e->jobs.slots[k]; j; j = j->hnext)
            j->pending.head = j->pending.tail = NULL; /* the calls stay on the live list */
    /*
     * The settle queue was emptied just before, and the deferred queue at
     * the last commit (an attempt deferred makes its turn's commit urgent):
     * a call not running now is waiting (for its turn, a slot, a backoff).
     */
    tp_call_t *c = e->all, *nx;
    for (; c; c = nx) {
        nx = c->lnext;
        if (tp_pool_is_running(e->pool, &c->att))
            continue;
        if (c->n_trace == 0) {
            drop_unstarted(e, c);
        } else {
            if (c->ev_backoff)
                event_del(c->ev_backoff);
            finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        }
    }
}

static void commit_cb(evutil_socket_t fd, short what, void *arg)
{
    kick(arg);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_t *e = arg;
    e->closing = true;
    tp_pool_shutdown(e->pool, true);
}

void tp_engine_drain(tp_engine_t *e)
{
    if (e->drain_asked) {
        drain_timeout_cb(-1, 0, e);
        return;
    }
    e->drain_asked = true;
    struct timeval tv = {.tv_sec = (time_t)(e->o.drain_us / 1000000u),
                         .tv_usec = (suseconds_t)(e->o.drain_us % 1000000u)};
    evtimer_add(e->ev_drain, &tv);
    kick(e);
}

void tp_engine_close(tp_engine_t *e)
{
    e->close_asked = true;
    kick(e);
}

bool tp_engine_draining(const tp_engine_t *e)
{
    return e->drain_asked;
}

bool tp_engine_failed(const tp_engine_t *e)
{
    return e->fatal;
}

/* ---- the engine itself ---- */

struct event_base *tp_engine_base_new(void)
{
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    if (event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) != 0 ||
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME) != 0)
        tp_log_warn("cannot ask for precise timers");
    /*
     * epoll's change list: the adds and deletes of a loop turn reach the
     * kernel as one epoll_ctl per descriptor, at the next wait, instead of
     * one each. An HTTP request on a kept-alive connection costs evhttp four
     * of them (read off, write on with read, write off, read on), three with
     * the list (strace of serve under wrk: 40,209 epoll_ctl for 10,000
     * requests, 30,152 with it). libevent's caveat is descriptors cloned by
     * dup(): a registration outlives close() while a clone is open. The
     * supervisor hands libevent no clone (pipe_high closes the original it
     * raises); a spawned worker holds copies only until its exec closes them.
     */
    if (event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST) != 0)
        tp_log_warn("cannot ask for epoll's change list");
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

tp_engine_t *tp_engine_new(const tp_engine_opts_t *o)
{
    tp_engine_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->o = *o;
    e->base = o->base;
    e->touched_tail = &e->touched;
    e->add = &e->made;
    e->started_unix_us = tp_unix_us();
    tp_rng_seed(&e->rng, o->seed);
    /* Without /proc it cannot name itself to other supervisors: it works as if alone. */
    e->owner_known = o->store && tp_owner_self(&e->me) == 0;
    const tp_guards_t *g = &o->reg->guards;
    /* Without a store there is no checkpoint to take a job's usage up again from. */
    e->keep_jobs = o->store == NULL && (g->max_steps || g->max_calls || g->max_wall_us || g->max_cost > 0);
    size_t n = o->reg->n_tools ? o->reg->n_tools : 1;
    e->tools = calloc(n, sizeof *e->tools);
    e->stats.tools = calloc(n, sizeof *e->stats.tools);
    tp_pool_opts_t po = {
        .workers = o->workers,
        .worker_path = o->worker_path,
        .max_frame = o->max_frame,
        .recycle_after = o->recycle_after,
        .pipeline = o->pipeline,
        .done_cb = attempt_done_cb,
        .notice_cb = attempt_notice_cb,
        .idle_cb = idle_cb,
        .fatal_cb = fatal_cb,
        .closed_cb = closed_cb,
        .ctx = e,
    };
    if (e->tools == NULL || e->stats.tools == NULL || tp_jobs_init(&e->jobs) < 0 ||
        (e->pool = tp_pool_new(e->base, &po)) == NULL || (e->ev_kick = event_new(e->base, -1, 0, kick_cb, e)) == NULL ||
        (e->ev_drain = evtimer_new(e->base, drain_timeout_cb, e)) == NULL ||
        (e->ev_commit = evtimer_new(e->base, commit_cb, e)) == NULL ||
        (e->ev_owners = event_new(e->base, -1, EV_PERSIST, owners_cb, e)) == NULL) {
        tp_log_error("out of memory starting the engine");
        tp_engine_free(e);
        return NULL;
    }
    return e;
}

int tp_engine_add_front(tp_engine_t *e, const tp_front_t *front)
{
    if (e->n_fronts == TP_FRONTS_MAX)
        return -1;
    e->fronts[e->n_fronts++] = *front;
    return 0;
}

int tp_engine_start(tp_engine_t *e)
{
    if (tp_pool_start(e->pool) < 0)
        return -1;
    if (e->owner_known) {
        struct timeval tv = {0, TP_OWNERS_EVERY_US};
        if (evtimer_add(e->ev_owners, &tv) < 0) {
            tp_log_error("cannot arm the owners timer");
            return -1;
        }
    }
    kick(e);
    return 0;
}

/* Answers made and never delivered (the loop ended early), and their calls. */
static void answers_free(tp_engine_t *e, tp_answers_t *a)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->v[i].call)
            call_release(e, a->v[i].call);
        if (a->v[i].hold)
            call_release(e, a->v[i].hold);
        free(a->v[i].r);
    }
    free(a->v);
    tp_buf_free(&a->lines);
}

void tp_engine_free(tp_engine_t *e)
{
    if (e == NULL)
        return;
    if (e->txn) {
        mdb_txn_abort(e->txn); /* only after a failure: a clean end commits in its last turn */
        e->txn = NULL;
    }
    tp_pool_free(e->pool);
    e->keep_jobs = true; /* the jobs go all at once below */
    while (e->all) {
        tp_call_t *c = e->all;
        call_unlink(c);
        call_free(c);
    }
    answers_free(e, &e->made);
    answers_free(e, &e->late);
    tp_jobs_free(&e->jobs);
    if (e->ev_kick)
        event_free(e->ev_kick);
    if (e->ev_drain)
        event_free(e->ev_drain);
    if (e->ev_commit)
        event_free(e->ev_commit);
    if (e->ev_owners)
        event_free(e->ev_owners);
    free(e->tools);
    free(e->stats.tools);
    free(e);
}

/*
 * After the loop: attempts the pool settled on its way out still get
 * their records and answers.
 */
void tp_engine_finish(tp_engine_t *e)
{
    e->closing = true;
    kick_cb(-1, 0, e);
    /* The last transaction: this engine leaves the store's owners. */
    char err[512];
    int rc;
    if (e->owner_known && e->seen_gen && !e->fatal && ensure_txn(e)) {
        MDB_txn *txn = e->txn;
        e->txn = NULL;
        if ((rc = tp_owners_leave(e->o.store, txn, &e->me)) != 0) {
            mdb_txn_abort(txn);
            tp_engine_store_failed(e, rc, "leaving the store's owners");
        } else if (tp_store_commit(e->o.store, txn, err, sizeof err) != 0) {
            fail(e, err);
        }
    }
}

const tp_engine_stats_t *tp_engine_stats(const tp_engine_t *e)
{
    return &e->stats;
}

const tp_pool_stats_t *tp_engine_pool_stats(const tp_engine_t *e)
{
    return tp_pool_stats(e->pool);
}

int tp_engine_busy(const tp_engine_t *e)
{
    return tp_pool_busy(e->pool);
}

int tp_engine_idle(const tp_engine_t *e)
{
    return tp_pool_idle(e->pool);
}

size_t tp_engine_waiting(const tp_engine_t *e)
{
    size_t n = e->n_waiting;
    for (tp_call_t *c = e->ready.head; c; c = c->next)
        n++;
    return n;
}

const tp_registry_t *tp_engine_registry(const tp_engine_t *e)
{
    return e->o.reg;
}

tp_store_t *tp_engine_store(const tp_engine_t *e)
{
    return e->o.store;
}
