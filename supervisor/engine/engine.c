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
 *
 * Here: the engine's life, its write transaction, and the turn. What the
 * turn does to each call is in the files engine_internal.h lists.
 */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "engine_internal.h"
#include "log.h"
#include "results.h"

/* Results between two trims of the store's map from the resident set. */
#define TP_TRIM_EVERY 1024

void tp_engine_kick(tp_engine_t *e)
{
    kick(e);
}

/* The engine cannot go on: rc (< 0) is kept as its failure, message logged; only the first counts. */
static void fail(tp_engine_t *e, int rc, const char *message)
{
    if (e->failed)
        return;
    tp_log_error("engine.failed", "%s", message);
    e->failed = rc < 0 ? rc : TP_EIO;
    e->closing = true;
    tp_pool_shutdown(e->pool, true);
}

/* A store operation failed: the engine cannot record, so it cannot go on. */
void tp_engine_store_failed(tp_engine_t *e, int rc, const char *what)
{
    char msg[512], why[256];
    snprintf(msg, sizeof msg, "%s: %s: %s", tp_store_dir(e->o.store), what,
             tp_store_strerror(e->o.store, rc, why, sizeof why));
    fail(e, rc, msg);
}

/* Begins the write transaction if none is open; false when there is none to have. */
/*
 * Whether calls may skip their lookup in the store (seen.h): at the first
 * transaction, when the store holds no results and no in-flight markers
 * and this engine is alone on it; until another supervisor joins it (an
 * arrival is always acknowledged in a transaction of ours, before the
 * newcomer writes anything).
 */
static void look_at_store(tp_engine_t *e)
{
    if (e->owners.others > 0 || !e->owner_known) {
        tp_seen_off(&e->recorded);
        e->store_looked = true;
        return;
    }
    if (e->store_looked)
        return;
    e->store_looked = true;
    MDB_stat r, f;
    if (mdb_stat(e->txn, tp_store_dbi(e->o.store, TP_DB_RESULTS), &r) == 0 &&
        mdb_stat(e->txn, tp_store_dbi(e->o.store, TP_DB_INFLIGHT), &f) == 0 && r.ms_entries == 0 && f.ms_entries == 0)
        tp_seen_on(&e->recorded);
}

bool eng_ensure_txn(tp_engine_t *e)
{
    if (e->failed)
        return false; /* one failure, one message: nothing more is written */
    if (e->txn)
        return true;
    if (e->o.store == NULL)
        return false;
    char err[512];
    e->txn_bytes = 0;
    int rc = tp_store_begin_room(e->o.store, &e->txn, e->need_room, err, sizeof err);
    if (rc != 0) {
        e->txn = NULL;
        fail(e, rc, err);
        return false;
    }
    tp_commit_begin(&e->commit, tp_now_us(), e->results);
    if (!e->in_turn)
        kick(e); /* a turn will commit it */
    eng_owners_sync(e);
    if (!e->failed)
        look_at_store(e);
    return !e->failed;
}

int tp_engine_store_op(tp_engine_t *e, size_t room, tp_store_op_fn op, void *ctx)
{
    if (e->o.store == NULL || !eng_ensure_txn(e))
        return TP_EAGAIN;
    if (e->sweep_due) /* the op sees what an owner gone left settled (a GET its record) */
        eng_settle_orphans(e);
    if (e->failed || (room > 0 && !eng_txn_fit(e, room, false)))
        return TP_EAGAIN;
    return op(ctx, e->o.store, e->txn);
}

static void txn_commit(tp_engine_t *e);

/*
 * Makes room in the open transaction for a record of len bytes: when the
 * map's free space, as the transaction began, may not hold it with what
 * the transaction wrote already (LMDB copies each page it changes), the
 * transaction commits now, and the next begins with room for the record
 * (the map grows first). A record larger than half the map would
 * otherwise never fit, whatever the store's size. The answers made so far
 * (but the last, when last_is_this: the record's own) are durable then,
 * and reach their fronts even if the engine fails later in the turn; not
 * those made after the turn's commit (the deferred part, which answers
 * only a cancelled call): after a failure there they are reported lost,
 * their records kept for a rerun.
 * false: the engine failed.
 */
#define TP_TXN_MARGIN (1u << 20) /* for a transaction's other writes: checkpoints, breakers */

bool eng_txn_fit(tp_engine_t *e, size_t len, bool last_is_this)
{
    size_t need = 2 * len + 4096;
    if (e->txn_bytes + need + TP_TXN_MARGIN <= tp_store_room(e->o.store)) {
        e->txn_bytes += need;
        return true;
    }
    bool made = e->add == &e->made; /* else the made ones' count stands (or is reset: eng_deliver) */
    size_t covered = made ? e->made.n - (last_is_this && e->made.n > 0) : 0;
    txn_commit(e); /* what came before it is durable now; its answers still wait for the turn */
    if (!e->failed && made)
        e->made_durable = covered;
    e->need_room = need + TP_TXN_MARGIN;
    bool ok = eng_ensure_txn(e);
    e->need_room = 0;
    e->txn_bytes = need;
    return ok;
}

/* Whether a tool of reg is an http tool: its workers load libcurl as they start. */
static bool reg_has_http(const tp_registry_t *reg)
{
    for (size_t i = 0; i < reg->n_tools; i++)
        if (reg->tools[i].adapter == TP_ADAPTER_HTTP)
            return true;
    return false;
}

/* ---- the turn ---- */

static bool commit_urgent(const tp_engine_t *e)
{
    return e->failed || e->closing || e->draining || e->drain_asked || e->n_deferred > 0 || e->marker_pending;
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
    if (e->failed) {
        mdb_txn_abort(txn);
    } else {
        uint64_t t0 = tp_now_us();
        int rc = tp_store_commit(e->o.store, txn, err, sizeof err);
        if (rc != 0)
            fail(e, rc, err);
        uint64_t took = tp_now_us() - t0;
        tp_commit_took(&e->commit, took);
        e->stats.commits++;
        tp_sb_header_t *h = tp_sb_header(&e->sb);
        tp_sb_write_begin(&h->gen);
        tp_summary_add_latency(&h->commit_latency, took);
        tp_sb_write_end(&h->gen);
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
    e->kicked = false; /* a kick from here on makes another turn */
    e->in_turn = true;
    uint64_t start = tp_now_us();
    e->waited_us = start - e->turn_end_us;
    turn(e);
    e->turn_end_us = tp_now_us();
    e->in_turn = false;
}

static void turn(tp_engine_t *e)
{
    eng_ensure_txn(e);
    if (e->sweep_due && !e->closing)
        eng_settle_orphans(e);
    tp_call_t *c;
    while ((c = tp_queue_pop(&e->settle)) != NULL)
        eng_settle(e, c);
    if (e->drain_asked && !e->draining)
        drain(e);
    if (!e->closing) {
        for (int i = 0; i < e->n_fronts; i++)
            if (e->fronts[i].feed && !e->draining)
                e->fronts[i].feed(e->fronts[i].ctx);
        eng_advance_touched(e);
        eng_dispatch(e);
    }
    tp_pool_flush(e->pool); /* the workers start on them during the commit */
    uint64_t now = tp_now_us(), hold;
    /* A window whose answers hold TP_COMMIT_BYTES commits now, whatever their count: memory stays bounded. */
    bool urgent = commit_urgent(e) || e->add->bytes >= TP_COMMIT_BYTES;
    bool queued = e->ready.head != NULL || e->n_waiting > 0 || e->n_job_waiting > 0 || e->held_back;
    bool backlog = tp_commit_backlog(queued, e->waited_us, e->commit.took_us);
    e->held_back = false; /* a front held back from here on says so again */
    bool due = e->txn && tp_commit_due(&e->commit, now, e->results, tp_pool_busy(e->pool), backlog, urgent);
    if (due && (hold = tp_commit_hold(&e->commit, now, e->results, tp_pool_next_deadline(e->pool), urgent)) > 0) {
        struct timeval tv = {.tv_sec = (time_t)(hold / 1000000u), .tv_usec = (suseconds_t)(hold % 1000000u)};
        if (evtimer_add(e->ev_commit, &tv) == 0)
            return;
        /* No timer to wait on: the commit is made now, and its answers go out. */
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
            if (evtimer_add(e->ev_commit, &tv) != 0)
                due = true; /* no timer to wait on: commit now */
        }
        if (!due)
            return;
    }
    if (e->txn)
        txn_commit(e);
    if (!e->failed)
        e->made_durable = e->made.n; /* a failure from here on loses none of these */
    /* An answer made from here on waits for a commit of its own (below). */
    e->add = &e->late;
    tp_call_t *d;
    while ((d = tp_queue_pop(&e->deferred)) != NULL) {
        e->n_deferred--;
        if (d->cancelled) {
            e->tools[d->hop_tool->index].inflight--;
            call_board_end(e, d);
            d->hop_attempts--;
            eng_finish_cancelled(e, d);
        } else if (e->failed || e->closing) {
            /* never started; freed with the rest, and not shown running */
            e->tools[d->hop_tool->index].inflight--;
            call_board_end(e, d);
            tp_queue_push(&e->ready, d);
        } else {
            eng_submit_attempt(e, d);
        }
    }
    size_t cancelled = e->late.n;
    eng_deliver(e, !e->failed);
    if (cancelled > 0 && e->txn) {
        /* A deferred call cancelled meanwhile: its record is committed before its answer goes. */
        txn_commit(e);
        eng_deliver(e, !e->failed);
    }
    eng_publish(e);
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
    e->n_job_waiting = 0;
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
            eng_drop_unstarted(e, c);
        } else {
            if (c->ev_backoff)
                event_del(c->ev_backoff);
            eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        }
    }
}

static void commit_cb(evutil_socket_t fd, short what, void *arg)
{
    kick(arg);
}

static void rate_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_t *e = arg;
    e->rate_wake_us = 0;
    kick(e);
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
    if (evtimer_add(e->ev_drain, &tv) != 0) {
        /* The drain could not be bounded: rather than let running calls go on past it, they stop now. */
        tp_log_error("engine.timer_failed", "cannot arm the drain's timer; stopping running calls now");
        drain_timeout_cb(-1, 0, e);
    }
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

int tp_engine_failed(const tp_engine_t *e)
{
    return e->failed;
}

/* ---- the engine itself ---- */

/* A pipelined attempt's clock started late (it waited in its worker's queue): its record says so. */
static void attempt_started_cb(void *ctx, tp_attempt_t *a)
{
    tp_engine_t *e = ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    tp_sb_slot_restart(&e->sb, c->sb_slot, a->started_us, a->timeout_us);
}

static void idle_cb(void *ctx)
{
    kick(ctx);
}

static void fatal_cb(void *ctx, int rc, const char *message)
{
    fail(ctx, rc, message);
}

static void closed_cb(void *ctx)
{
    tp_engine_t *e = ctx;
    event_base_loopexit(e->base, NULL);
}

struct event_base *tp_engine_base_new(void)
{
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    if (event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) != 0 ||
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME) != 0)
        tp_log_warn("engine.loop_setup", "cannot ask for precise timers");
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
        tp_log_warn("engine.loop_setup", "cannot ask for epoll's change list");
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

/*
 * The scoreboard: a record for every attempt the pool can hold at once
 * (each slot's, times the pipeline; an http or mcp tool's worker holds
 * up to its max_in_flight), at most TP_BOARD_SLOTS_MAX (an attempt past
 * them runs unshown, and is counted so). Published only with a store,
 * where readers find it.
 */
#define TP_BOARD_SLOTS_MAX 4096u

static int board_new(tp_engine_t *e)
{
    const tp_registry_t *reg = e->o.reg;
    uint64_t per = e->o.pipeline > 1 ? (uint64_t)e->o.pipeline : 1;
    for (size_t i = 0; i < reg->n_tools; i++)
        if (tp_pool_flies(&reg->tools[i]) && reg->tools[i].max_in_flight > per)
            per = reg->tools[i].max_in_flight;
    uint64_t n = (uint64_t)(e->o.workers > 0 ? e->o.workers : 1) * per;
    if (n > TP_BOARD_SLOTS_MAX)
        n = TP_BOARD_SLOTS_MAX;
    const char **names = calloc(reg->n_tools ? reg->n_tools : 1, sizeof *names);
    if (names == NULL)
        return TP_ENOMEM;
    for (size_t i = 0; i < reg->n_tools; i++)
        names[i] = reg->tools[i].name;
    /* one tool record at least: a registry of none still has its header's */
    int rc = tp_sb_create(&e->sb, (uint32_t)n, names, (uint32_t)(reg->n_tools ? reg->n_tools : 1),
                          e->o.store != NULL && e->owner_known);
    free(names);
    if (rc == 0)
        snprintf(e->me.board, sizeof e->me.board, "%s", e->sb.path);
    return rc;
}

/*
 * The scoreboard's header, as of this turn: what the engine, its pool and
 * its run say now. About twenty stores under the header's seqlock, once a
 * turn.
 */
void eng_publish(tp_engine_t *e)
{
    tp_sb_header_t *h = tp_sb_header(&e->sb);
    const tp_pool_stats_t *ps = tp_pool_stats(e->pool);
    tp_sb_write_begin(&h->gen);
    tp_sb_counts_t *c = &h->c;
    c->total = e->status_total;
    c->done = e->results; /* ended, served from the store and refused alike */
    c->live = e->live;
    c->busy = tp_pool_busy(e->pool);
    /* held and not running (tp_engine_waiting walks the ready queue: too dear for every turn) */
    c->waiting = e->live > (size_t)(c->busy > 0 ? c->busy : 0) ? e->live - (size_t)(c->busy > 0 ? c->busy : 0) : 0;
    c->idle = tp_pool_idle(e->pool);
    c->answered_recorded = e->stats.answered_recorded;
    c->rejected = e->stats.rejected;
    c->rerun = e->stats.rerun;
    c->version_rerun = e->stats.version_rerun;
    c->late = e->stats.late;
    c->timeouts = e->stats.timeouts;
    c->commits = e->stats.commits;
    c->spawned = ps->spawned;
    c->crashed = ps->crashed;
    c->recycled = ps->recycled;
    tp_sb_write_end(&h->gen);
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
    for (size_t i = 0; e->tools && i < o->reg->n_tools; i++)
        e->tools[i].tokens = o->reg->tools[i].policy.rate_burst;
    int board_rc = board_new(e);
    tp_pool_opts_t po = {
        .workers = o->workers,
        .worker_path = o->worker_path,
        .max_frame = o->max_frame,
        .recycle_after = o->recycle_after,
        .pipeline = o->pipeline,
        .http = reg_has_http(o->reg),
        .done_cb = eng_attempt_done_cb,
        .notice_cb = eng_attempt_notice_cb,
        .started_cb = attempt_started_cb,
        .idle_cb = idle_cb,
        .fatal_cb = fatal_cb,
        .closed_cb = closed_cb,
        .ctx = e,
    };
    if (e->tools == NULL || board_rc != 0 || tp_jobs_init(&e->jobs) < 0 ||
        (e->pool = tp_pool_new(e->base, &po)) == NULL || (e->ev_kick = event_new(e->base, -1, 0, kick_cb, e)) == NULL ||
        (e->ev_drain = evtimer_new(e->base, drain_timeout_cb, e)) == NULL ||
        (e->ev_commit = evtimer_new(e->base, commit_cb, e)) == NULL ||
        (e->ev_rate = evtimer_new(e->base, rate_cb, e)) == NULL ||
        (e->ev_owners = event_new(e->base, -1, EV_PERSIST, eng_owners_cb, e)) == NULL) {
        tp_log_error("engine.out_of_memory", "out of memory starting the engine");
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
            tp_log_error("engine.timer_failed", "cannot arm the owners timer");
            return -1;
        }
    }
    kick(e);
    return 0;
}

/* Answers made and never delivered (the loop ended early), and their calls. */
static void answers_free(tp_engine_t *e, tp_answers_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        eng_pending_free(e, &a->v[i]);
    eng_arena_reset(a, false);
    free(a->v);
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
        eng_call_free(c);
    }
    answers_free(e, &e->made);
    answers_free(e, &e->late);
    while (e->spare) {
        tp_call_t *c = e->spare;
        e->spare = c->next;
        free(c);
    }
    tp_jobs_free(&e->jobs);
    tp_seen_off(&e->recorded);
    if (e->ev_kick)
        event_free(e->ev_kick);
    if (e->ev_drain)
        event_free(e->ev_drain);
    if (e->ev_commit)
        event_free(e->ev_commit);
    if (e->ev_rate)
        event_free(e->ev_rate);
    if (e->ev_owners)
        event_free(e->ev_owners);
    for (size_t i = 0; i < e->n_settled; i++)
        free(e->settled[i]);
    free(e->settled);
    free(e->tools);
    tp_sb_destroy(&e->sb);
    free(e);
}

/*
 * After the loop: attempts the pool settled on its way out still get
 * their records and answers.
 */
int tp_engine_finish(tp_engine_t *e)
{
    e->closing = true;
    kick_cb(-1, 0, e);
    /* The last transaction: this engine leaves the store's owners. */
    char err[512];
    int rc;
    if (e->owner_known && e->seen_gen && !e->failed && eng_ensure_txn(e)) {
        MDB_txn *txn = e->txn;
        e->txn = NULL;
        if ((rc = tp_owners_leave(e->o.store, txn, &e->me)) != 0) {
            mdb_txn_abort(txn);
            tp_engine_store_failed(e, rc, "leaving the store's owners");
        } else if ((rc = tp_store_commit(e->o.store, txn, err, sizeof err)) != 0) {
            fail(e, rc, err);
        }
    }
    return e->failed;
}

const tp_engine_stats_t *tp_engine_stats(const tp_engine_t *e)
{
    return &e->stats;
}

const tp_scoreboard_t *tp_engine_board(tp_engine_t *e)
{
    eng_publish(e);
    return &e->sb;
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

bool tp_engine_traced(const tp_engine_t *e)
{
    return e->o.on_end != NULL;
}

struct event_base *tp_engine_loop(const tp_engine_t *e)
{
    return e->base;
}

tp_store_t *tp_engine_store(const tp_engine_t *e)
{
    return e->o.store;
}
