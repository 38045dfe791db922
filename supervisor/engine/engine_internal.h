/*
 * The engine's own state, shared by its files: the struct tp_engine, the
 * answers waiting for their commit, and the functions one file of the
 * engine calls in another. Internal to supervisor/engine/ (struct tp_call
 * and its queues: call_internal.h).
 *
 *   engine.c    the engine's life, its transaction, the turn and its commit
 *   submit.c    a request taken: checked, looked up in the store, queued in its job
 *   dispatch.c  the next call admitted (guards, breakers) and its attempt started
 *   settle.c    an ended attempt settled: its trace, a retry after backoff, or the call's end
 *   fallback.c  a hop of the fallback chain taken, its args mapped and checked
 *   finish.c    a call ended: its record built and written, breakers and escalations
 *   answer.c    answers made, refusals, and their delivery once durable
 *   claim.c     calls claimed on a store other supervisors share
 */
#ifndef TP_ENGINE_INTERNAL_H
#define TP_ENGINE_INTERNAL_H

#include <event2/event.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "call_internal.h"
#include "commit.h"
#include "engine.h"
#include "jobs.h"
#include "owners.h"
#include "retry.h"
#include "seen.h"

/* How often a supervisor's owner entry says what it is doing (tp_engine_status). */
#define TP_OWNER_STATUS_US 1000000u
#include "taxonomy.h"
#include "toolpool.pb-c.h"

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
    tp_queue_t waiting;      /* calls parked at its concurrency cap, or waiting for a token of its rate */
    uint64_t waiting_due_us; /* the soonest deadline of a call parked there (0: none) */
    double ewma_us;          /* how long its attempts take, when they answer */
    uint32_t samples;
    /* "rate": the bucket's tokens as of refill_us (the tool's burst at first) */
    double tokens;
    uint64_t refill_us;
} tp_tool_state_t;

/*
 * An answer made, waiting for the commit that makes it durable; or a
 * front's wait for that commit (durable_fn).
 */
typedef struct {
    tp_answer_fn fn;
    void (*durable_fn)(void *ctx, bool ok);
    void *ctx;
    tp_call_t *hold;                /* what is left of the call it answers: its handle stays valid until then */
    Toolpool__Result *r;            /* its record, with everything it points to (eng_pending_own) */
    void *own;                      /* r's block, when it is malloc'd (not in its list's arena) */
    char *args_buf;                 /* large args the record points to, taken over from the call */
    char *result_buf;               /* a large result the record points to, likewise */
    Toolpool__StoredResult *stored; /* a recorded answer's record, as the store gave it */
    size_t bytes;                   /* what its record holds, about (for the commit's byte bound) */
    bool recorded;
    bool not_started;
    bool conflict;
    bool staged; /* fn had the answer when it was made; it hears of the commit */
} tp_pending_t;

typedef struct tp_arena_chunk {
    struct tp_arena_chunk *next;
    size_t used;
    char data[];
} tp_arena_chunk_t;

typedef struct {
    tp_pending_t *v;
    size_t n, cap;
    size_t bytes;                 /* what their records hold, about */
    tp_arena_chunk_t *arena;      /* their records' blocks, newest chunk first */
    tp_arena_chunk_t *arena_free; /* empty chunks kept for the next ones */
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
    tp_call_t *spare;  /* ended calls kept for reuse, through their next */
    size_t n_spare;
    tp_queue_t ready;
    tp_queue_t settle;    /* calls whose attempt ended, for the next turn */
    tp_queue_t deferred;  /* attempts that start once the turn has committed */
    size_t n_waiting;     /* calls parked at their tool's concurrency cap */
    size_t n_job_waiting; /* calls waiting in their job for the step before them */
    bool held_back;       /* in this turn, a front had calls the engine would not take yet */
    int n_deferred;
    tp_tool_state_t *tools;
    tp_jobs_t jobs;
    tp_job_t *touched; /* jobs given calls since the last turn, in order */
    tp_job_t **touched_tail;
    bool keep_jobs; /* guards, no store: keep idle jobs' usage in memory */
    /* the store */
    MDB_txn *txn; /* the open write transaction, when there is a store */
    tp_commit_t commit;
    uint64_t turn_end_us;    /* when the last turn ended: the loop waited from then until this one */
    uint64_t waited_us;      /* how long it waited before this turn */
    bool marker_pending;     /* a non-idempotent call, or one of a tool marked once, ended in the open transaction */
    size_t txn_bytes;        /* what the open transaction has written, about */
    size_t made_durable;     /* how many of made's first answers an early commit in the turn made durable */
    size_t need_room;        /* free map the next transaction begins with */
    uint64_t results;        /* calls ended so far */
    uint64_t trimmed_at;     /* results when the store's map was last trimmed */
    uint64_t lookups;        /* ids looked up in the store */
    tp_seen_t recorded;      /* ids it wrote results or markers for, while it alone writes a store it found empty */
    bool store_looked;       /* whether the store was empty is known */
    struct event *ev_commit; /* closes the commit window */
    struct event *ev_rate;   /* a rate-limited tool's next token: its parked calls may go */
    uint64_t rate_wake_us;   /* when ev_rate fires (0: not armed) */
    /* sharing the store with other supervisors (owners.h) */
    tp_owner_id_t me;
    bool owner_known;         /* this process could name itself (/proc) */
    tp_owners_state_t owners; /* as of the open transaction */
    uint64_t seen_gen;        /* the newest arrival this engine has claimed its calls for */
    const char *status_cmd;   /* tp_engine_status: what its owner entry says it is (NULL: nothing said) */
    uint64_t status_total;
    uint64_t status_at_us; /* when the entry was last written */
    bool sweep_due;        /* markers of owners gone may wait to be settled (eng_settle_orphans) */
    char **settled;        /* ids it settled so (few): their answers here are this run's, not resumed */
    size_t n_settled;
    tp_queue_t parked; /* calls another live supervisor runs: waiting for its record */
    size_t n_parked;
    struct event *ev_owners; /* looks for arrivals, and again at parked calls */
    /* answers made, and the ones being delivered */
    tp_answers_t made; /* answers made, waiting for their commit */
    tp_answers_t late; /* answers made while others are being delivered */
    tp_answers_t *add; /* where answers go now: made, or late during a delivery */
    /* lifecycle */
    struct event *ev_kick;
    bool kicked; /* ev_kick is active: a turn is coming (a call's few kicks make one event_active) */
    struct event *ev_drain;
    bool close_asked;
    bool drain_asked;
    bool draining;
    bool closing;
    int failed;               /* the first failure's code (error.h), 0 while none: the engine stops at it */
    bool in_turn;             /* kick_cb is running */
    uint64_t started_unix_us; /* records older than this are earlier runs' */
    tp_engine_stats_t stats;
    tp_scoreboard_t sb; /* the live state, and the per-tool counters */
};

typedef enum {
    END_ANSWER,   /* the current hop answered */
    END_DEGRADED, /* the chain ran out; the declared degraded answer stands in */
    END_FAIL,     /* a failure: the last attempt's, or the engine's own kind */
} tp_end_t;

typedef enum {
    CLAIM_OK,       /* it is this engine's to run */
    CLAIM_PARKED,   /* another live supervisor runs it: it waits for its record */
    CLAIM_ANSWERED, /* recorded meanwhile: answered from the store */
} tp_claim_t;

/*
 * Every 50 ms: parked calls are looked at again (back to the ready
 * queue, to be claimed anew), and a newcomer on the store is looked for
 * in a read transaction, so an engine with nothing to write still
 * acknowledges it soon.
 */
#define TP_OWNERS_EVERY_US 50000

static inline void kick(tp_engine_t *e)
{
    if (e->kicked)
        return;
    e->kicked = true;
    event_active(e->ev_kick, EV_TIMEOUT, 0);
}

static inline bool refusal_kind(const char *kind)
{
    return kind && tp_kind_class(tp_kind_from_name(kind)) == TP_CLASS_MALFORMED;
}

static inline void call_unlink(tp_call_t *c)
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
    tp_sb_add(&tp_sb_tools(&e->sb)[c->tool->index].held, -1);
}

/* The call's end for its whole run: the caller's own, or none. */
static inline uint64_t call_deadline(const tp_call_t *c)
{
    uint64_t d = c->hop_deadline_us;
    if (c->deadline_us && (d == 0 || c->deadline_us < d))
        d = c->deadline_us;
    return d;
}

/* The job whose failures c's count with in the same-call breaker (tp_request_t.breaker_job). */
static inline const char *call_breaker_job(const tp_call_t *c)
{
    return c->breaker_job ? c->breaker_job : c->job->name;
}

/*
 * The same-call breaker's key of c's current hop (tp_breaker_call_digest:
 * under the scope "job", a hash of the args' digest and the job's name),
 * worked out once a hop, for both its check at admission and its record
 * at the hop's end. submit works out the first hop's while the job's name
 * is in cache.
 */
static inline const tp_digest_t *call_breaker_key(tp_call_t *c)
{
    if (!c->hop_key_set) {
        tp_breaker_call_digest(c->hop_tool, &c->hop_digest, call_breaker_job(c), &c->hop_key);
        c->hop_key_set = true;
    }
    return &c->hop_key;
}

/* The call's attempt started (its scoreboard record taken, its tool's count up), or ended. */
static inline void call_board_start(tp_engine_t *e, tp_call_t *c, uint64_t now)
{
    tp_sb_add(&tp_sb_tools(&e->sb)[c->hop_tool->index].in_flight, 1);
    c->sb_slot = tp_sb_slot_take(&e->sb, (uint32_t)c->hop_tool->index, c->att.number, now, c->att.timeout_us, c->id,
                                 c->job->name);
}
static inline void call_board_end(tp_engine_t *e, tp_call_t *c)
{
    tp_sb_add(&tp_sb_tools(&e->sb)[c->hop_tool->index].in_flight, -1);
    tp_sb_slot_give(&e->sb, c->sb_slot);
}

/* engine.c */
void eng_publish(tp_engine_t *e);
bool eng_ensure_txn(tp_engine_t *e);
bool eng_txn_fit(tp_engine_t *e, size_t len, bool last_is_this);

/* submit.c */
void eng_advance_touched(tp_engine_t *e);
bool eng_redo_recorded(const tp_engine_t *e, const Toolpool__StoredResult *r);
/* Whether the record r was made for this input (its digest is identity). */
bool eng_same_input(const Toolpool__StoredResult *r, const tp_digest_t *identity);
/* Whether args pass t's schema; if not, *why holds the InvalidArguments message (NUL-terminated). */
bool eng_args_valid(const tp_tool_t *t, const json_t *args, tp_buf_t *why);

/* dispatch.c */
void eng_dispatch(tp_engine_t *e);
void eng_submit_attempt(tp_engine_t *e, tp_call_t *c);

/* settle.c */
void eng_settle(tp_engine_t *e, tp_call_t *c);
Toolpool__Attempt *eng_trace_add(tp_call_t *c, uint32_t number, const char *outcome, uint64_t duration_us);
void eng_attempt_done_cb(void *ctx, tp_attempt_t *a);
void eng_attempt_notice_cb(void *ctx, tp_attempt_t *a, const char *method, const uint8_t *params, size_t len);

/* fallback.c */
void eng_hop_failed(tp_engine_t *e, tp_call_t *c, tp_kind_t kind, const char *msg);

/* finish.c */
void eng_finish(tp_engine_t *e, tp_call_t *c, tp_end_t end, tp_kind_t kind, const char *msg);
void eng_finish_cancelled(tp_engine_t *e, tp_call_t *c);
void eng_hold_until(tp_engine_t *e, tp_call_t *c, tp_pending_t *p);
void eng_drop_unstarted(tp_engine_t *e, tp_call_t *c);
void eng_job_advance(tp_engine_t *e, tp_job_t *j);
void eng_escalate(tp_engine_t *e, tp_call_t *c, const char *kind, const char *message, const char *reason);
void eng_record_call_outcome(tp_engine_t *e, tp_call_t *c, bool failed);

/* answer.c */
tp_pending_t *eng_pending_add(tp_engine_t *e, tp_answer_fn fn, void *ctx);
tp_pending_t *eng_reject_as(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                            const char *args, tp_kind_t kind, const char *msg, bool keep, tp_answer_fn fn, void *ctx);
tp_pending_t *eng_reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                         const char *args, tp_kind_t kind, const char *msg, tp_answer_fn fn, void *ctx);
tp_pending_t *eng_answer_recorded(tp_engine_t *e, Toolpool__StoredResult *r, tp_answer_fn fn, void *ctx);
/* About how many bytes r holds: what a transaction's room and a commit's byte bound count for it. */
size_t eng_record_bytes(const Toolpool__Result *r);
bool eng_pending_own(tp_answers_t *a, tp_pending_t *p, const Toolpool__Result *r, char *args_buf, char *result_buf);
void eng_arena_reset(tp_answers_t *a, bool keep);
void eng_pending_free(tp_engine_t *e, tp_pending_t *p);
tp_call_t *eng_call_new(tp_engine_t *e);
void eng_call_teardown(tp_call_t *c);
tp_trace_ctx_t *eng_trace_ctx_keep(tp_call_t *c, const tp_trace_ctx_t *tc);
void eng_trace_attempt_tp(tp_trace_ctx_t *tc, size_t i);
void eng_call_free(tp_call_t *c);
void eng_call_recycle(tp_engine_t *e, tp_call_t *c);
void eng_deliver(tp_engine_t *e, bool ok);

/* claim.c */
bool eng_marker_orphaned(tp_engine_t *e, const Toolpool__InFlight *f);
int eng_marker_put(tp_engine_t *e, tp_call_t *c, bool claim_only);
void eng_settle_orphans(tp_engine_t *e);
bool eng_settled_here(const tp_engine_t *e, const char *id);
bool eng_answered_from_record(tp_engine_t *e, tp_call_t *c);
void eng_owners_sync(tp_engine_t *e);
tp_claim_t eng_claim(tp_engine_t *e, tp_call_t *c);
void eng_owners_cb(evutil_socket_t fd, short what, void *arg);

#endif
