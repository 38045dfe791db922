/*
 * The batch runner: input lines become calls, calls become attempts on the
 * pool, attempts become one result line per call.
 *
 * Queues, all intrusive singly linked lists of tp_call_t:
 *   job->pending   a job's calls not yet started, in step order
 *   ready          calls whose turn it is, first come first served
 *   tool->waiting  calls whose tool is at its concurrency cap
 * A call is in at most one of them, or running, or waiting out a backoff.
 *
 * All work triggered by events (replies, reaps, timers, input) is gathered
 * by one deferred "kick" per loop turn: read more input, dispatch to idle
 * slots, write the finished results out in one write.
 */
#include "batch.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "breaker.h"
#include "callline.h"
#include "checkpoint.h"
#include "buf.h"
#include "clock.h"
#include "escalate.h"
#include "guard.h"
#include "json.h"
#include "log.h"
#include "result.h"
#include "retry.h"
#include "jsonschema.h"

/*
 * Group commit: a write transaction stays open across loop turns, while
 * attempts are running, for at most a window or this many results; one
 * fsync then covers every result in it. The loop waits out each commit,
 * so the window is TP_COMMIT_SPAN times what commits take (their average),
 * within its bounds: the loop spends a ninth of its time in them at most.
 * A longer window also makes each commit cheaper per result (the same two
 * flushes, and the B-tree's upper pages rewritten once for more results):
 * 100,000 no-op calls took 15-20% less time with 8 and 20 ms than with 4
 * and 10 ms. The cost is that a result line may wait up to 20 ms (up to
 * 20 ms more when a deadline the loop keeps holds the commit back), and a
 * crash of the supervisor may lose (and a rerun redo) up to 20 ms of
 * idempotent calls; a call of a tool that is not idempotent commits at once.
 *
 * The count bounds the memory a window holds (its result lines and the
 * store's dirty pages, about 900 bytes a result), whatever the pace: with
 * 4,096 the supervisor's peak RSS followed the pace of each run (7.1 MiB at
 * 78,000 calls/s, 8.3 MiB at 128,000); with 1,024 it stays at 5.5 MiB, and
 * 100,000 and 1,000,000 no-op calls took no longer.
 */
#define TP_COMMIT_WINDOW_MIN_US 2000.0
#define TP_COMMIT_WINDOW_MAX_US 20000.0
#define TP_COMMIT_SPAN 8.0
#define TP_COMMIT_RESULTS 1024u
/* Room left between a commit's expected end and an attempt's deadline. */
#define TP_COMMIT_DEADLINE_MARGIN_US 500u
/* A deadline this far behind has been kept, or its timer is late anyway. */
#define TP_COMMIT_DEADLINE_PAST_US 1000u

/* Results between two trims of the store's map from the resident set. */
#define TP_TRIM_EVERY 1024

/* Store lookups between two trims while resuming. */
#define TP_TRIM_LOOKUPS 256

/* Input lines one loop turn takes at most. */
#define TP_LINES_PER_TURN 1024

/* Violations listed in an InvalidArguments message before "... and N more". */
#define TP_ARGS_ERRORS_MAX 10

typedef struct tp_job tp_job_t;

typedef struct tp_call {
    struct tp_call *next;       /* the queue it is in: pending, ready, waiting or settle */
    struct tp_call *lprev;      /* every live call, for drain and teardown */
    struct tp_call *lnext;
    tp_job_t *job;
    const tp_tool_t *tool;      /* the tool called */
    const tp_tool_t *hop_tool;  /* the tool of the current hop of its fallback chain */
    uint32_t hop;               /* 0: the tool called; n: its nth fallback */
    char *id;
    char *args;
    size_t args_len;
    tp_digest_t digest;         /* of the canonical args: the same-call breaker's key */
    tp_digest_t identity;       /* of tool and args: with the id, what a recorded result answers */
    bool marked;                /* an in-flight marker is in the store (not idempotent) */
    bool interrupted;           /* found in flight after a crash: not to be run again */
    uint64_t step;
    bool started;               /* counted as a step of its job */
    bool probe;                 /* the running attempt is a half-open probe */
    bool readmit;               /* its attempt never started: admitted already */
    bool escalated;
    char escalation[TP_ESCALATION_ID_MAX];
    uint64_t first_us;          /* first attempt's start */
    uint64_t hop_deadline_us;   /* absolute, for the current hop; 0 = none */
    uint32_t hop_attempts;      /* attempts made in the current hop */
    tp_attempt_t att;
    Toolpool__Attempt **trace;
    size_t n_trace;
    struct event *ev_backoff;
    struct tp_batch *b;
} tp_call_t;

struct tp_job {
    tp_job_t *hnext;
    tp_job_t *tnext;            /* on the batch's touched list */
    bool touched;
    uint64_t hash;
    tp_call_t *head;            /* pending, sorted by step */
    tp_call_t *tail;
    bool running;
    tp_job_usage_t usage;       /* what the guards count */
    tp_kind_t stopped;          /* a guard fired: later calls end with this kind */
    char *stop_msg;
    char name[];
};

typedef struct {
    tp_call_t *head;
    tp_call_t *tail;
} tp_queue_t;

typedef struct {
    int inflight;
    tp_queue_t waiting;
    double ewma_us;             /* how long its attempts take, when they answer */
    uint32_t samples;
} tp_tool_state_t;

/*
 * How many attempts of a tool one worker may hold: as many as fit, one
 * after another, in TP_QUEUE_BUDGET_US of its average attempt, so a call
 * queued behind others waits about that long at most; known only after
 * TP_FAST_SAMPLES answers, the fastest of which seeds the average.
 */
#define TP_QUEUE_BUDGET_US 2000.0
#define TP_FAST_SAMPLES 8

typedef struct tp_batch {
    const tp_batch_opts_t *o;
    struct event_base *base;
    tp_pool_t *pool;
    tp_rng_t rng;
    /* input */
    tp_buf_t in;
    tp_buf_t line_strs, line_canon; /* scratch of the fast way in (callline.h) */
    size_t scan;                /* bytes of in already searched for '\n' */
    bool in_eof;
    bool in_regular;
    bool in_ready;              /* a pipe's read event fired: one read will not block */
    bool in_skip;               /* discarding the rest of an overlong line */
    off_t in_size;
    uint64_t in_read;
    long line_no;
    struct event *ev_input;
    /* calls */
    size_t live;                /* calls read and not yet finished */
    tp_call_t *all;             /* the live calls */
    size_t window;
    tp_queue_t ready;
    tp_queue_t settle;          /* calls whose attempt ended, for the next turn */
    tp_queue_t deferred;        /* attempts that start once the turn has committed */
    size_t n_waiting;           /* calls parked at their tool's concurrency cap */
    int n_deferred;
    MDB_txn *txn;               /* the open write transaction, when there is a store */
    uint64_t txn_since_us;      /* when it began */
    double commit_us;           /* what commits take, on average */
    uint64_t txn_results;       /* results counted when it began */
    struct event *ev_commit;    /* closes the commit window */
    bool marker_pending;        /* a non-idempotent call ended in the open transaction */
    bool keep_jobs;             /* guards, no store: keep idle jobs' usage in memory */
    uint64_t trimmed_at;        /* results when the store's map was last trimmed */
    uint64_t lookups;           /* ids looked up in the store */
    tp_tool_state_t *tools;
    tp_job_t **jobs;
    tp_job_t *touched;          /* jobs given calls this turn, in input order */
    tp_job_t **touched_tail;
    size_t jobs_cap;
    size_t jobs_n;
    /* output */
    tp_buf_t out;
    int status;
    /* lifecycle */
    struct event *ev_kick;
    struct event *ev_sigint;
    struct event *ev_sigterm;
    struct event *ev_drain;
    struct event *ev_progress;
    bool drain_asked;
    bool draining;
    bool closing;
    bool fatal;
    uint64_t t0;
    tp_batch_report_t *report;
} tp_batch_t;

static void kick(tp_batch_t *b)
{
    event_active(b->ev_kick, EV_TIMEOUT, 0);
}

static void q_push(tp_queue_t *q, tp_call_t *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
}

static void q_push_front(tp_queue_t *q, tp_call_t *c)
{
    c->next = q->head;
    q->head = c;
    if (q->tail == NULL)
        q->tail = c;
}

static tp_call_t *q_pop(tp_queue_t *q)
{
    tp_call_t *c = q->head;
    if (c) {
        q->head = c->next;
        if (q->head == NULL)
            q->tail = NULL;
        c->next = NULL;
    }
    return c;
}

/* ---- jobs: a chained hash table, entries removed when a job goes idle ---- */

static void fatal_cb(void *ctx, const char *message);
static void store_failed(tp_batch_t *b, int rc, const char *what);

/*
 * A job seen for the first time in this run takes up its checkpoint: the
 * usage its guards count (wall time included) and what stopped it.
 */
static void job_resume(tp_batch_t *b, tp_job_t *j)
{
    if (b->txn == NULL)
        return;
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(b->o->store, b->txn, j->name, &cp);
    if (rc == MDB_NOTFOUND)
        return;
    if (rc) {
        store_failed(b, rc, "reading a checkpoint");
        return;
    }
    j->usage.steps = cp->steps;
    j->usage.calls = cp->attempts;
    j->usage.cost = cp->cost;
    if (cp->wall_used_us)
        j->usage.first_us = tp_now_us() - cp->wall_used_us;
    if (cp->stopped[0]) {
        j->stopped = tp_kind_from_name(cp->stopped);
        j->stop_msg = strdup(cp->stop_message);
    }
    toolpool__checkpoint__free_unpacked(cp, NULL);
}

static tp_job_t *job_get(tp_batch_t *b, const char *name, size_t len, bool own)
{
    uint64_t h = XXH3_64bits(name, len);
    size_t i = h & (b->jobs_cap - 1);
    for (tp_job_t *j = b->jobs[i]; j; j = j->hnext)
        if (j->hash == h && strncmp(j->name, name, len) == 0 && j->name[len] == 0)
            return j;
    if (b->jobs_n + 1 > b->jobs_cap) {
        size_t cap = b->jobs_cap * 2;
        tp_job_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return NULL;
        for (size_t k = 0; k < b->jobs_cap; k++)
            for (tp_job_t *j = b->jobs[k], *nx; j; j = nx) {
                nx = j->hnext;
                j->hnext = t[j->hash & (cap - 1)];
                t[j->hash & (cap - 1)] = j;
            }
        free(b->jobs);
        b->jobs = t;
        b->jobs_cap = cap;
        i = h & (cap - 1);
    }
    tp_job_t *j = calloc(1, sizeof *j + len + 1);
    if (j == NULL)
        return NULL;
    memcpy(j->name, name, len);
    j->hash = h;
    j->hnext = b->jobs[i];
    b->jobs[i] = j;
    b->jobs_n++;
    if (!own)
        job_resume(b, j); /* a job named after its one call has no checkpoint */
    return j;
}

static void job_drop(tp_batch_t *b, tp_job_t *j)
{
    tp_job_t **pp = &b->jobs[j->hash & (b->jobs_cap - 1)];
    while (*pp != j)
        pp = &(*pp)->hnext;
    *pp = j->hnext;
    b->jobs_n--;
    free(j->stop_msg);
    free(j);
}

/* Inserts c among its job's pending calls, keeping step order. */
static void job_add(tp_job_t *j, tp_call_t *c)
{
    c->job = j;
    c->next = NULL;
    if (j->tail == NULL) {
        j->head = j->tail = c;
    } else if (j->tail->step <= c->step) {
        j->tail->next = c;
        j->tail = c;
    } else {
        tp_call_t **pp = &j->head;
        while ((*pp)->step <= c->step)
            pp = &(*pp)->next;
        c->next = *pp;
        *pp = c;
    }
}

/* The job's next call, if it is the job's turn: moves it to ready. */
static void job_advance(tp_batch_t *b, tp_job_t *j)
{
    if (j->running)
        return;
    tp_call_t *c = j->head;
    if (c == NULL) {
        if (!b->keep_jobs)
            job_drop(b, j);
        return;
    }
    j->head = c->next;
    if (j->head == NULL)
        j->tail = NULL;
    j->running = true;
    q_push(&b->ready, c);
}

/* ---- results ---- */

static void call_free(tp_call_t *c)
{
    tp_batch_t *b = c->b;
    if (c->lprev)
        c->lprev->lnext = c->lnext;
    else
        b->all = c->lnext;
    if (c->lnext)
        c->lnext->lprev = c->lprev;
    b->live--;
    for (size_t i = 0; i < c->n_trace; i++) {
        free(c->trace[i]->tool);
        free(c->trace[i]->outcome);
        free(c->trace[i]);
    }
    free(c->trace);
    free(c->att.message);
    free(c->att.result);
    if (c->ev_backoff)
        event_free(c->ev_backoff);
    free(c->id);
    free(c->args);
    free(c);
}

/* Appends the record, counts it, updates the exit status. */
static void emit(tp_batch_t *b, const Toolpool__Result *r)
{
    tp_result_write(&b->out, r);
    tp_summary_add(&b->report->summary, r);
    if (!r->ok && b->status == 0)
        b->status = 1;
}

/*
 * Records a call's result (its line, written at line_at in the output) in
 * the turn's transaction, and the step in its job's checkpoint. A Cancelled
 * call is not recorded: a rerun runs it.
 */
static void record(tp_batch_t *b, tp_call_t *c, const Toolpool__Result *r, size_t line_at)
{
    if (b->txn == NULL || (!r->ok && strcmp(r->kind, "Cancelled") == 0))
        return;
    tp_job_t *j = c->job;
    uint64_t now = tp_now_us();
    int rc = tp_result_put(b->o->store, b->txn, r, b->out.data + line_at, b->out.len - line_at);
    /* A job named after its only call (the default) has nothing to checkpoint but that result. */
    bool own_job = strcmp(j->name, c->id) == 0;
    if (rc == 0 && !own_job)
        rc = tp_checkpoint_step(b->o->store, b->txn, j->name, c->id, c->step, &j->usage,
                                j->usage.first_us ? now - j->usage.first_us : 0, j->stopped, j->stop_msg);
    if (rc == 0 && c->marked) {
        rc = tp_inflight_del(b->o->store, b->txn, c->id);
        b->marker_pending = true; /* commit it now: a crash before would call it Interrupted */
    }
    if (rc)
        store_failed(b, rc, "recording a result");
}

/* A result for an input line that never became a call. */
static void emit_rejected(tp_batch_t *b, const char *id, const char *job, uint64_t step,
                          const char *tool, const char *args, tp_kind_t kind, const char *msg)
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
    emit(b, &r);
}

/* A store operation failed: the run cannot record, so it cannot go on. */
static void store_failed(tp_batch_t *b, int rc, const char *what)
{
    char msg[512], why[256];
    snprintf(msg, sizeof msg, "%s: %s: %s", tp_store_dir(b->o->store), what,
             tp_store_strerror(b->o->store, rc, why, sizeof why));
    fatal_cb(b, msg);
}

typedef enum {
    END_ANSWER,    /* the current hop answered */
    END_DEGRADED,  /* the chain ran out; the declared degraded answer stands in */
    END_FAIL,      /* a failure: the last attempt's, or the runner's own kind */
} tp_end_t;

/*
 * Ends a call and writes its record. For END_FAIL, msg NULL means the last
 * attempt's failure; otherwise kind and msg are the runner's (a guard, a
 * cancellation, an open circuit). The job's next step becomes ready.
 */
static void finish(tp_batch_t *b, tp_call_t *c, tp_end_t end, tp_kind_t kind, const char *msg)
{
    const tp_attempt_t *a = &c->att;
    tp_buf_t degraded = {0};
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = true;
    r.id = c->id;
    r.job = c->job->name;
    r.step = c->step;
    r.tool = c->tool->name;
    r.ok = end != END_FAIL;
    r.attempts = 0;
    for (size_t i = 0; i < c->n_trace; i++)
        r.attempts += strcmp(c->trace[i]->outcome, "CircuitOpen") != 0;
    r.trace = c->trace;
    r.n_trace = c->n_trace;
    r.duration_us = c->first_us ? tp_now_us() - c->first_us : 0;
    r.args.data = (uint8_t *)c->args;
    r.args.len = c->args_len;
    r.cost = a->cost;
    r.escalated = c->escalated;
    r.escalation = c->escalation;
    if (end == END_ANSWER) {
        r.result.data = (uint8_t *)a->result;
        r.result.len = a->result_len;
        r.served_by = (char *)c->hop_tool->name;
        r.degraded = c->hop > 0;
        r.stale = c->hop_tool->policy.stale;
    } else if (end == END_DEGRADED) {
        tp_json_write(&degraded, c->tool->policy.degraded, 0);
        r.result.data = degraded.data;
        r.result.len = degraded.len;
        r.degraded = true;
    } else {
        bool from_attempt = msg == NULL;
        r.kind = from_attempt ? (char *)a->kind_name : (char *)tp_kind_name(kind);
        r.klass = (char *)tp_class_name(tp_kind_class(from_attempt ? a->kind : kind));
        r.message = (char *)(from_attempt ? (a->message ? a->message : "") : msg);
        r.retryable = from_attempt && a->kind < TP_KIND__COUNT &&
                      (c->hop_tool->policy.retry_on & (1ull << a->kind)) != 0;
    }
    r.input_digest.data = c->identity.b;
    r.input_digest.len = TP_DIGEST_LEN;
    size_t line_at = b->out.len;
    emit(b, &r);
    record(b, c, &r, line_at);
    tp_buf_free(&degraded);
    tp_job_t *j = c->job;
    j->running = false;
    job_advance(b, j);
    call_free(c);
    kick(b);
}

/* Appends one entry to the call's trace. NULL when out of memory. */
static Toolpool__Attempt *trace_add(tp_call_t *c, uint32_t number, const char *outcome, uint64_t duration_us)
{
    Toolpool__Attempt *t = malloc(sizeof *t);
    Toolpool__Attempt **grown = realloc(c->trace, (c->n_trace + 1) * sizeof *grown);
    if (grown)
        c->trace = grown;
    if (t == NULL || grown == NULL) {
        free(t);
        return NULL;
    }
    toolpool__attempt__init(t);
    t->attempt = number;
    t->tool = strdup(c->hop_tool->name);
    t->outcome = strdup(outcome);
    t->duration_us = duration_us;
    c->trace[c->n_trace++] = t;
    return t;
}

/* Opens an escalation for c (once): a person takes it from here. */
static void escalate(tp_batch_t *b, tp_call_t *c, const char *kind, const char *message, const char *reason)
{
    if (b->txn == NULL || c->escalated)
        return;
    Toolpool__Escalation e = TOOLPOOL__ESCALATION__INIT;
    e.call_id = c->id;
    e.job = c->job->name;
    e.step = c->step;
    e.tool = (char *)c->hop_tool->name;
    e.args.data = (uint8_t *)c->args;
    e.args.len = c->args_len;
    e.kind = (char *)kind;
    e.message = (char *)(message ? message : "");
    e.reason = (char *)reason;
    e.trace = c->trace;
    e.n_trace = c->n_trace;
    int rc = tp_escalate(b->o->store, b->txn, &e, c->escalation);
    if (rc) {
        store_failed(b, rc, "recording an escalation");
        return;
    }
    c->escalated = true;
}

/* The next hop of the call's fallback chain becomes current. */
static void next_hop(tp_batch_t *b, tp_call_t *c)
{
    if (b->draining) {
        finish(b, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted before the next hop of the fallback chain");
        return;
    }
    c->hop_tool = tp_registry_find(b->o->reg, c->tool->policy.fallback[c->hop]);
    c->hop++;
    c->hop_attempts = 0;
    c->hop_deadline_us = 0;
    q_push(&b->ready, c);
}

/*
 * The current hop is done and did not answer (kind, msg as for finish).
 * The chain goes on to its next hop when the failure's class is one the
 * called tool falls back on (an open circuit always is); at the chain's end
 * comes the declared degraded answer, or the escalation queue.
 */
static void hop_failed(tp_batch_t *b, tp_call_t *c, tp_kind_t kind, const char *msg)
{
    const tp_policy_t *p = &c->tool->policy;
    tp_kind_t k = msg ? kind : c->att.kind;
    tp_class_t klass = tp_kind_class(k);
    bool fall = k == TP_KIND_CIRCUIT_OPEN || (p->fallback_on & (1u << klass));
    if (fall && c->hop < p->n_fallback) {
        next_hop(b, c);
        return;
    }
    if (p->n_fallback > 0 && fall) {
        if (p->degraded) {
            finish(b, c, END_DEGRADED, TP_KIND_OK, NULL);
            return;
        }
        escalate(b, c, msg ? tp_kind_name(kind) : c->att.kind_name, msg ? msg : c->att.message,
                 "every hop of the fallback chain failed");
    }
    finish(b, c, END_FAIL, kind, msg);
}

/*
 * A hop's final failure counts against its same-call breaker; the failure
 * that opens the circuit escalates the call (the seed's open_circuit +
 * escalate). A hop's answer clears the count.
 */
static void record_call_outcome(tp_batch_t *b, tp_call_t *c, bool failed)
{
    if (b->txn == NULL)
        return;
    bool opened = false;
    const tp_attempt_t *a = &c->att;
    int rc = tp_breaker_call_record(b->o->store, b->txn, c->hop_tool, &c->digest, c->args, failed,
                                    a->kind_name, a->message, tp_unix_us(), &opened);
    if (rc) {
        store_failed(b, rc, "recording a breaker");
        return;
    }
    if (!opened)
        return;
    char reason[160];
    snprintf(reason, sizeof reason, "the same call failed %u times within %.3gs: its circuit is open",
             c->hop_tool->policy.same_call_failures, (double)c->hop_tool->policy.same_call_window_us / 1e6);
    escalate(b, c, a->kind_name, a->message, reason);
    if (c->escalated) {
        rc = tp_breaker_call_set_escalation(b->o->store, b->txn, c->hop_tool, &c->digest, c->escalation);
        if (rc)
            store_failed(b, rc, "recording a breaker");
    }
}

static void backoff_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_call_t *c = arg;
    q_push(&c->b->ready, c);
    kick(c->b);
}

/*
 * The turn's work for one ended attempt: its trace entry, the tool's
 * health, then a retry after its backoff, the next hop, or the call's end.
 */
static void settle(tp_batch_t *b, tp_call_t *c)
{
    tp_attempt_t *a = &c->att;
    tp_job_t *j = c->job;
    if (a->requeue) {
        /* Queued behind an attempt whose worker died: it never ran, and counts for nothing. */
        c->hop_attempts--;
        j->usage.calls--;
        c->readmit = true; /* admitted once (a half-open probe, maybe): it still is */
        if (!b->draining) {
            q_push_front(&b->ready, c);
        } else if (c->n_trace == 0) {
            b->report->not_started++;
            c->job->running = false;
            call_free(c);
        } else {
            finish(b, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        }
        return;
    }
    if (a->ok || (a->kind != TP_KIND_TIMEOUT && a->kind != TP_KIND_WORKER_CRASHED && a->kind != TP_KIND_CANCELLED)) {
        tp_tool_state_t *ts = &b->tools[c->hop_tool->index];
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
        finish(b, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
        return;
    }
    if (b->txn) {
        int rc = tp_breaker_tool_record(b->o->store, b->txn, c->hop_tool, a->kind, c->probe, tp_unix_us());
        if (rc)
            store_failed(b, rc, "recording a breaker");
    }
    c->probe = false;
    if (a->ok) {
        record_call_outcome(b, c, false);
        finish(b, c, END_ANSWER, TP_KIND_OK, NULL);
        return;
    }
    if (a->kind == TP_KIND_CANCELLED) {
        finish(b, c, END_FAIL, TP_KIND_CANCELLED, a->message);
        return;
    }
    tp_retry_t d = tp_retry_decide(&c->hop_tool->policy, a->kind, a->number, a->retry_after_ms, tp_now_us(),
                                   c->hop_deadline_us, &b->rng);
    if (d.retry && b->draining) {
        char msg[256];
        snprintf(msg, sizeof msg, "run interrupted after %zu attempt%s (last: %s: %s)", c->n_trace,
                 c->n_trace == 1 ? "" : "s", a->kind_name, a->message ? a->message : "");
        finish(b, c, END_FAIL, TP_KIND_CANCELLED, msg);
        return;
    }
    if (!d.retry) {
        record_call_outcome(b, c, true);
        hop_failed(b, c, TP_KIND_OK, NULL);
        return;
    }
    t->backoff_us = d.wait_us;
    if (d.wait_us == 0) {
        q_push(&b->ready, c);
        return;
    }
    if (c->ev_backoff == NULL)
        c->ev_backoff = evtimer_new(b->base, backoff_cb, c);
    struct timeval tv = {.tv_sec = (time_t)(d.wait_us / 1000000u), .tv_usec = (suseconds_t)(d.wait_us % 1000000u)};
    evtimer_add(c->ev_backoff, &tv);
}

/*
 * Before an attempt starts: the job's guards, then (at a hop's start) the
 * same-call breaker, then the tool breaker. Returns true when the call may
 * run; otherwise it has been moved on (ended, or on to its next hop).
 */
static bool admit(tp_batch_t *b, tp_call_t *c, uint64_t now, bool *probe)
{
    tp_job_t *j = c->job;
    char msg[256];
    *probe = false;
    if (c->interrupted) {
        snprintf(msg, sizeof msg,
                 "%s was running when its supervisor stopped; it is not idempotent, so it is not run again",
                 c->tool->name);
        escalate(b, c, tp_kind_name(TP_KIND_INTERRUPTED), msg,
                 "a call of a tool that is not idempotent was in flight at a crash");
        c->marked = true; /* its marker goes with its record */
        finish(b, c, END_FAIL, TP_KIND_INTERRUPTED, msg);
        return false;
    }
    if (j->stopped != TP_KIND_OK) {
        snprintf(msg, sizeof msg, "not run: %s", j->stop_msg ? j->stop_msg : "the job was stopped");
        finish(b, c, END_FAIL, j->stopped, msg);
        return false;
    }
    tp_kind_t g = tp_guard_check(&b->o->reg->guards, &j->usage, !c->started, now, msg, sizeof msg);
    if (g != TP_KIND_OK) {
        j->stopped = g;
        free(j->stop_msg);
        j->stop_msg = strdup(msg);
        finish(b, c, END_FAIL, g, msg);
        return false;
    }
    if (b->txn == NULL) {
        c->readmit = false;
        return true;
    }
    uint64_t wall = tp_unix_us();
    if (c->hop_attempts == 0) {
        bool open = false;
        char esc[TP_ESCALATION_ID_MAX] = "";
        int rc = tp_breaker_call_check(b->o->store, b->txn, c->hop_tool, &c->digest, wall, &open, esc, sizeof esc);
        if (rc) {
            store_failed(b, rc, "reading a breaker");
            return false;
        }
        if (open) {
            if (!trace_add(c, 0, "CircuitOpen", 0)) {
                finish(b, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
                return false;
            }
            if (!c->escalated && esc[0]) {
                c->escalated = true;
                snprintf(c->escalation, sizeof c->escalation, "%s", esc);
                if ((rc = tp_escalation_blocked(b->o->store, b->txn, esc)) != 0)
                    store_failed(b, rc, "recording an escalation");
            }
            snprintf(msg, sizeof msg, "%s: this call's circuit is open (it failed %u times within %.3gs)%s%s",
                     c->hop_tool->name, c->hop_tool->policy.same_call_failures,
                     (double)c->hop_tool->policy.same_call_window_us / 1e6, esc[0] ? "; escalated as " : "", esc);
            hop_failed(b, c, TP_KIND_CIRCUIT_OPEN, msg);
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
    int rc = tp_breaker_tool_admit(b->o->store, b->txn, c->hop_tool, wall, &adm);
    if (rc) {
        store_failed(b, rc, "reading a breaker");
        return false;
    }
    if (adm == TP_ADMIT_NO) {
        if (!trace_add(c, c->hop_attempts + 1, "CircuitOpen", 0)) {
            finish(b, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
            return false;
        }
        snprintf(msg, sizeof msg, "%s: the tool's circuit is open (too many failures; probing again after %.3gs)",
                 c->hop_tool->name, (double)c->hop_tool->policy.tool_cooldown_us / 1e6);
        hop_failed(b, c, TP_KIND_CIRCUIT_OPEN, msg);
        return false;
    }
    *probe = adm == TP_ADMIT_PROBE;
    return true;
}

static int tool_depth(const tp_batch_t *b, const tp_tool_t *t)
{
    const tp_tool_state_t *ts = &b->tools[t->index];
    if (!t->policy.idempotent || ts->samples < TP_FAST_SAMPLES || b->o->pipeline <= 1)
        return 1;
    double fit = TP_QUEUE_BUDGET_US / (ts->ewma_us > 1 ? ts->ewma_us : 1);
    return fit >= b->o->pipeline ? b->o->pipeline : fit < 1 ? 1 : (int)fit;
}

/* Hands the prepared attempt to an idle slot (or a fast one to a busy worker's queue). */
static void attempt_done_cb(void *ctx, tp_attempt_t *a);

static void submit(tp_batch_t *b, tp_call_t *c)
{
    int rc = tp_pool_submit(b->pool, &c->att);
    if (rc == -2) {
        /* Too big for a frame: the attempt ended before it began; a turn settles it. */
        attempt_done_cb(b, &c->att);
    } else if (rc < 0) {
        /* Cannot happen (the caller saw a slot): undo the attempt, keep any probe's admission. */
        b->tools[c->hop_tool->index].inflight--;
        c->hop_attempts--;
        c->job->usage.calls--;
        c->readmit = true;
        q_push(&b->ready, c);
    }
}

/* Prepares the call's next attempt and starts it (the caller checked a slot is idle). */
static void start_attempt(tp_batch_t *b, tp_call_t *c, bool probe)
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
            hop_failed(b, c, TP_KIND_OK, NULL);
            return;
        }
        if (c->hop_deadline_us - now < timeout)
            timeout = c->hop_deadline_us - now;
    }
    uint64_t wall_left = tp_guard_wall_left(&b->o->reg->guards, &j->usage, now);
    if (wall_left < timeout)
        timeout = wall_left;
    /* The absolute limit, for an attempt that starts later (queued behind another). */
    uint64_t limit = c->hop_deadline_us;
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
        .args = c->args,
        .args_len = c->args_len,
        .timeout_us = timeout,
        .limit_us = limit,
        .kind = TP_KIND_OK,
        .depth = tool_depth(b, c->hop_tool),
    };
    b->tools[c->hop_tool->index].inflight++;
    if (b->txn && !p->idempotent) {
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
        int rc = tp_inflight_put(b->o->store, b->txn, &f);
        if (rc) {
            store_failed(b, rc, "recording an in-flight marker");
            return;
        }
        c->marked = true;
        q_push(&b->deferred, c);
        b->n_deferred++;
        return;
    }
    submit(b, c);
}

/*
 * The next call to try: one parked at its tool's concurrency cap whose tool
 * has room now, else the head of the ready queue. Parked calls are looked
 * at only while there are some, so runs without caps never scan.
 */
static tp_call_t *next_call(tp_batch_t *b)
{
    if (b->n_waiting > 0) {
        for (size_t i = 0; i < b->o->reg->n_tools; i++) {
            tp_tool_state_t *ts = &b->tools[i];
            if (ts->waiting.head && ts->inflight < (int)b->o->reg->tools[i].policy.concurrency) {
                b->n_waiting--;
                return q_pop(&ts->waiting);
            }
        }
    }
    return q_pop(&b->ready);
}

static void dispatch(tp_batch_t *b)
{
    uint64_t now = tp_now_us();
    while (!b->closing && !b->draining) {
        bool idle = tp_pool_idle(b->pool) - b->n_deferred > 0;
        tp_call_t *c = next_call(b);
        if (c == NULL)
            return;
        /* Idle slots set aside for deferred attempts are not free for pipelining either. */
        if (!idle && (tp_pool_idle(b->pool) > 0 || !tp_pool_room(b->pool, tool_depth(b, c->hop_tool)))) {
            /* Only a fast tool waits in a busy worker's queue; this one waits for a free worker. */
            q_push_front(&b->ready, c);
            return;
        }
        tp_tool_state_t *ts = &b->tools[c->hop_tool->index];
        uint32_t cap = c->hop_tool->policy.concurrency;
        if (cap && ts->inflight >= (int)cap) {
            q_push(&ts->waiting, c);
            b->n_waiting++;
            continue;
        }
        bool probe;
        if (admit(b, c, now, &probe))
            start_attempt(b, c, probe);
    }
}

/* The pool's word that an attempt ended: its slot is free; the turn settles it. */
static void attempt_done_cb(void *ctx, tp_attempt_t *a)
{
    tp_batch_t *b = ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    b->tools[c->hop_tool->index].inflight--;
    /*
     * Workers never open the store, but a crash on this machine is the
     * moment to clear reader slots any dead process (another supervisor,
     * an inspection command) left behind, before they pin old pages.
     */
    if (a->kind == TP_KIND_WORKER_CRASHED && b->o->store)
        tp_store_reader_check(b->o->store);
    q_push(&b->settle, c);
    kick(b);
}

static void idle_cb(void *ctx)
{
    kick(ctx);
}

static void fatal_cb(void *ctx, const char *message)
{
    tp_batch_t *b = ctx;
    tp_log_error("%s", message);
    b->fatal = true;
    b->status = 2;
    b->closing = true;
    tp_pool_shutdown(b->pool, true);
}

static void closed_cb(void *ctx)
{
    tp_batch_t *b = ctx;
    event_base_loopexit(b->base, NULL);
}

/* ---- input ---- */

/* The closest tool names to a mistyped one (edit distance), for the message. */
static void suggest(const tp_registry_t *reg, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name), best[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    const char *who[3] = {NULL, NULL, NULL};
    if (n > 64)
        n = 64;
    for (size_t t = 0; t < reg->n_tools; t++) {
        const char *cand = reg->tools[t].name;
        size_t m = strlen(cand);
        if (m > 64)
            continue;
        size_t row[65];
        for (size_t j = 0; j <= m; j++)
            row[j] = j;
        for (size_t i = 1; i <= n; i++) {
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= m; j++) {
                size_t up = row[j];
                size_t cost = name[i - 1] == cand[j - 1] ? 0 : 1;
                size_t v = diag + cost;
                if (row[j] + 1 < v)
                    v = row[j] + 1;
                if (row[j - 1] + 1 < v)
                    v = row[j - 1] + 1;
                row[j] = v;
                diag = up;
            }
        }
        size_t d = row[m];
        for (int k = 0; k < 3; k++)
            if (d < best[k]) {
                for (int s = 2; s > k; s--) {
                    best[s] = best[s - 1];
                    who[s] = who[s - 1];
                }
                best[k] = d;
                who[k] = cand;
                break;
            }
    }
    out[0] = 0;
    size_t len = 0;
    for (int k = 0; k < 3 && who[k]; k++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", k ? ", " : "", who[k]);
}

/* The tool a recorded line names, for a message. */
static const char *stored_tool(const Toolpool__StoredResult *r, char *buf, size_t cap)
{
    json_t *v = json_loadb((const char *)r->line.data, r->line.len, 0, NULL);
    snprintf(buf, cap, "%s", v && json_string_value(json_object_get(v, "tool")) ? json_string_value(json_object_get(v, "tool")) : "?");
    json_decref(v);
    return buf;
}

/*
 * A call the store already knows. Its recorded result, when the input is
 * the same, is served instead of running it again (returns true); an id
 * recorded for other input is reported, never served (true as well). An
 * in-flight marker means the call was running when a supervisor died.
 */
static bool resume_lookup(tp_batch_t *b, const char *id, const char *job, uint64_t step, const char *tool,
                          const tp_digest_t *identity, long no, bool *interrupted)
{
    Toolpool__StoredResult *r;
    /*
     * Lookups of ids scattered over a large store fault in pages all over
     * its map (and the kernel maps their neighbours too): trim often here,
     * which is safe at any time, since the map is shared and read-only.
     */
    if (++b->lookups % TP_TRIM_LOOKUPS == 0)
        tp_store_trim(b->o->store);
    int rc = tp_result_get(b->o->store, b->txn, id, &r);
    if (rc == 0) {
        if (r->input_digest.len == TP_DIGEST_LEN && memcmp(r->input_digest.data, identity->b, TP_DIGEST_LEN) == 0) {
            /* The line as it was reported; the summary counts it as the run did. */
            Toolpool__Result counted = TOOLPOOL__RESULT__INIT;
            counted.ok = r->ok;
            counted.kind = r->kind;
            counted.attempts = r->attempts;
            counted.duration_us = r->duration_us;
            tp_buf_append(&b->out, r->line.data, r->line.len);
            tp_summary_add(&b->report->summary, &counted);
            if (!r->ok && b->status == 0)
                b->status = 1;
            b->report->resumed++;
        } else {
            char msg[512], tool_buf[128];
            snprintf(msg, sizeof msg,
                     "line %ld: id \"%s\" is recorded in the store for other input (tool %s, other args); "
                     "give this call a new id, or run with a new store",
                     no, id, stored_tool(r, tool_buf, sizeof tool_buf));
            emit_rejected(b, id, job, step, tool, NULL, TP_KIND_INVALID_REQUEST, msg);
        }
        toolpool__stored_result__free_unpacked(r, NULL);
        return true;
    }
    if (rc != MDB_NOTFOUND) {
        store_failed(b, rc, "reading a result");
        return true;
    }
    Toolpool__InFlight *f;
    rc = tp_inflight_get(b->o->store, b->txn, id, &f);
    if (rc == 0) {
        *interrupted = true;
        toolpool__in_flight__free_unpacked(f, NULL);
    } else if (rc != MDB_NOTFOUND) {
        store_failed(b, rc, "reading an in-flight marker");
        return true;
    }
    return false;
}

/* Turns one input line into a call, or into a result of its own. */
static void take_line(tp_batch_t *b, const char *line, size_t len)
{
    long no = b->line_no;
    size_t i = 0;
    while (i < len && line[i] && strchr(" \t\r", line[i]))
        i++;
    if (i == len)
        return; /* blank lines are not calls */

    char msg[512];
    const char *id, *job, *tool;
    uint64_t step;
    char *args = NULL;
    json_t *v = NULL, *jargs = NULL, *owned_args = NULL;
    tp_call_line_t fast;
    int plain = tp_call_line_scan(line, len, &fast, &b->line_strs, &b->line_canon);
    if (plain < 0) {
        snprintf(msg, sizeof msg, "line %ld: out of memory reading the call", no);
        emit_rejected(b, NULL, NULL, 0, NULL, NULL, TP_KIND_INVALID_REQUEST, msg);
        return;
    }
    if (plain) {
        id = fast.id;
        tool = fast.tool;
        job = fast.job ? fast.job : id;
        step = fast.step;
        args = fast.args;
    } else {
        /* jansson's way: escapes, reals, and every message for a bad line. */
        json_error_t jerr;
        v = json_loadb(line, len, 0, &jerr);
        if (v == NULL || !json_is_object(v)) {
            if (v == NULL)
                snprintf(msg, sizeof msg, "line %ld: not valid JSON: %s (column %d)", no, jerr.text, jerr.column);
            else
                snprintf(msg, sizeof msg, "line %ld: a call must be a JSON object", no);
            emit_rejected(b, NULL, NULL, 0, NULL, NULL, TP_KIND_INVALID_REQUEST, msg);
            json_decref(v);
            return;
        }
        json_t *jid = json_object_get(v, "id"), *jjob = json_object_get(v, "job");
        json_t *jstep = json_object_get(v, "step"), *jtool = json_object_get(v, "tool");
        jargs = json_object_get(v, "args");
        id = json_is_string(jid) && json_string_length(jid) > 0 ? json_string_value(jid) : NULL;
        tool = json_string_value(jtool);
        const char *bad = NULL;
        if (id == NULL)
            bad = "\"id\" must be a non-empty string";
        else if (jjob && (!json_is_string(jjob) || json_string_length(jjob) == 0))
            bad = "\"job\" must be a non-empty string";
        else if (jstep && (!json_is_integer(jstep) || json_integer_value(jstep) < 0))
            bad = "\"step\" must be a non-negative integer";
        else if (tool == NULL || !*tool)
            bad = "\"tool\" must be a non-empty string";
        else if (jargs && !json_is_object(jargs))
            bad = "\"args\" must be a JSON object";
        job = jjob ? json_string_value(jjob) : id;
        step = jstep ? (uint64_t)json_integer_value(jstep) : 0;
        tp_buf_t ab = {0};
        if (jargs == NULL)
            args = strdup("{}");
        else if (tp_json_write(&ab, jargs, 0) == 0 && tp_buf_append(&ab, "", 1) == 0)
            args = (char *)ab.data;
        else
            tp_buf_free(&ab);
        if (bad) {
            snprintf(msg, sizeof msg, "line %ld: %s", no, bad);
            emit_rejected(b, id, id ? job : NULL, step, tool, NULL, TP_KIND_INVALID_REQUEST, msg);
            goto out;
        }
        if (jargs == NULL)
            jargs = owned_args = json_object();
    }
    const tp_tool_t *t = tp_registry_find(b->o->reg, tool);
    if (t == NULL) {
        char near[256];
        suggest(b->o->reg, tool, near, sizeof near);
        snprintf(msg, sizeof msg, "line %ld: unknown tool \"%s\"%s%s%s", no, tool,
                 near[0] ? " (closest: " : "", near, near[0] ? ")" : "");
        emit_rejected(b, id, job, step, tool, args, TP_KIND_UNKNOWN_TOOL, msg);
        goto out;
    }
    if (t->schema && jargs == NULL && args && (jargs = owned_args = json_loads(args, 0, NULL)) == NULL) {
        emit_rejected(b, id, job, step, tool, args, TP_KIND_INVALID_ARGUMENTS, "out of memory validating the arguments");
        goto out;
    }
    if (t->schema) {
        /* Malformed: the model's to fix, so no call happens and the message says what to change. */
        tp_buf_t why = {0};
        tp_buf_printf(&why, "%s: invalid arguments: ", t->name);
        int bad_args = tp_jsonschema_validate(t->schema, jargs, &why, TP_ARGS_ERRORS_MAX);
        if (bad_args != 0) {
            tp_buf_append(&why, "", 1);
            emit_rejected(b, id, job, step, tool, args, TP_KIND_INVALID_ARGUMENTS,
                          bad_args > 0 ? (const char *)why.data : "out of memory validating the arguments");
            tp_buf_free(&why);
            goto out;
        }
        tp_buf_free(&why);
    }
    tp_digest_t digest = {{0}}, identity = {{0}};
    bool interrupted = false;
    if (b->o->store) {
        if (plain)
            tp_digest_bytes(fast.canon, fast.canon_len, &digest);
        else
            tp_digest_args(jargs, &digest);
        tp_identity_digest(t->name, &digest, &identity);
        if (resume_lookup(b, id, job, step, tool, &identity, no, &interrupted))
            goto out;
    }
    tp_call_t *c = calloc(1, sizeof *c);
    tp_job_t *j = c ? job_get(b, job, strlen(job), strcmp(job, id) == 0) : NULL;
    if (c == NULL || j == NULL || args == NULL || (c->id = strdup(id)) == NULL) {
        emit_rejected(b, id, job, step, tool, NULL, TP_KIND_INVALID_REQUEST, "out of memory");
        if (c)
            free(c->id);
        free(c);
        goto out;
    }
    c->b = b;
    c->tool = t;
    c->hop_tool = t;
    c->digest = digest;
    c->identity = identity;
    c->interrupted = interrupted;
    c->args = args;
    c->args_len = strlen(args);
    args = NULL;
    c->step = step;
    c->att.kind = TP_KIND_OK;
    job_add(j, c);
    if (!j->touched) {
        j->touched = true;
        j->tnext = NULL;
        *b->touched_tail = j;
        b->touched_tail = &j->tnext;
    }
    c->lnext = b->all;
    if (b->all)
        b->all->lprev = c;
    b->all = c;
    b->live++;
out:
    free(args);
    json_decref(owned_args);
    json_decref(v);
}

/*
 * Reads and takes input lines while fewer than the window of calls are
 * live. Returns when the window is full, at EOF, or when a pipe has nothing
 * more for now (its event calls back).
 */
static void pump_input(tp_batch_t *b)
{
    /*
     * Lines that need no call (served from the store, malformed) do not
     * fill the window; a turn still takes no more than this many, so its
     * output and its transaction stay small and the loop stays responsive.
     */
    int budget = TP_LINES_PER_TURN;
    while (!b->in_eof && !b->draining && b->live < b->window) {
        if (budget-- == 0) {
            kick(b);
            return;
        }
        uint8_t *head = b->in.data + b->in.off;
        size_t avail = tp_buf_avail(&b->in);
        uint8_t *nl = avail > b->scan ? memchr(head + b->scan, '\n', avail - b->scan) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - head);
            b->line_no++;
            b->scan = 0;
            if (b->in_skip)
                b->in_skip = false;
            else
                take_line(b, (const char *)head, len);
            tp_buf_consume(&b->in, len + 1);
            b->in_read += len + 1;
            continue;
        }
        b->scan = avail;
        if (avail > b->o->max_frame && !b->in_skip) {
            char msg[128];
            b->in_skip = true;
            snprintf(msg, sizeof msg, "line %ld: longer than the %u-byte limit", b->line_no + 1,
                     b->o->max_frame);
            emit_rejected(b, NULL, NULL, 0, NULL, NULL, TP_KIND_INVALID_REQUEST, msg);
        }
        if (b->in_skip) {
            b->in_read += avail;
            tp_buf_reset(&b->in);
            b->scan = 0;
        }
        /*
         * A pipe or terminal is read once per readiness event, blocking: no
         * O_NONBLOCK on a descriptor we share (stdin's open file may be
         * stdout's too). A regular file is always ready.
         */
        if (!b->in_regular && !b->in_ready) {
            event_add(b->ev_input, NULL);
            return;
        }
        b->in_ready = false;
        ssize_t n = tp_buf_read_fd(&b->in, b->o->input_fd);
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n < 0)
            tp_log_error("reading %s: %s", b->o->input_name, strerror(errno));
        if (n <= 0) {
            b->in_eof = true;
            if (tp_buf_avail(&b->in) > 0 && !b->in_skip) {
                b->line_no++;
                take_line(b, (const char *)tp_buf_head(&b->in), tp_buf_avail(&b->in));
            }
            b->in_read += tp_buf_avail(&b->in);
            tp_buf_reset(&b->in);
        }
    }
}

/*
 * Jobs that got calls while reading start their first pending step only
 * now, so steps read in one turn start in step order, not line order.
 */
static void advance_touched(tp_batch_t *b)
{
    tp_job_t *j = b->touched;
    b->touched = NULL;
    b->touched_tail = &b->touched;
    while (j) {
        tp_job_t *nx = j->tnext;
        j->touched = false;
        job_advance(b, j);
        j = nx;
    }
}

static void input_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    b->in_ready = true;
    kick(b);
}

/* ---- lifecycle ---- */

static void flush_output(tp_batch_t *b)
{
    if (tp_buf_avail(&b->out) == 0)
        return;
    if (tp_write_all(b->o->output_fd, tp_buf_head(&b->out), tp_buf_avail(&b->out)) < 0 && !b->fatal) {
        tp_log_error("writing results: %s", strerror(errno));
        fatal_cb(b, "cannot write results; stopping");
    }
    tp_buf_reset(&b->out);
}

static void drain(tp_batch_t *b);

/*
 * Whether the open transaction should commit at the end of this turn: the
 * commit window has closed, or enough results wait, or nothing is running
 * that could add to them, or an attempt waits for its in-flight marker to
 * be durable, or a call of a tool that is not idempotent has ended (until
 * its result is durable, a crash would leave it Interrupted), or the run is
 * ending.
 */
static uint64_t commit_window_us(const tp_batch_t *b)
{
    double w = b->commit_us * TP_COMMIT_SPAN;
    return (uint64_t)(w < TP_COMMIT_WINDOW_MIN_US ? TP_COMMIT_WINDOW_MIN_US
                      : w > TP_COMMIT_WINDOW_MAX_US ? TP_COMMIT_WINDOW_MAX_US : w);
}

static bool commit_urgent(const tp_batch_t *b)
{
    return b->fatal || b->closing || b->draining || b->drain_asked || b->n_deferred > 0 || b->marker_pending;
}

static bool commit_due(const tp_batch_t *b)
{
    return commit_urgent(b) || tp_pool_busy(b->pool) == 0 ||
           b->report->summary.calls - b->txn_results >= TP_COMMIT_RESULTS ||
           tp_now_us() - b->txn_since_us >= commit_window_us(b);
}

/*
 * The loop sits in a commit's fsync for a while; a deadline the loop keeps
 * itself (tp_pool_next_deadline: a kill_grace's TERM) that falls in it
 * would be kept late. A commit that is due but not urgent waits for such
 * a deadline (for at most TP_COMMIT_WINDOW_MAX_US beyond its
 * window). Returns how long to wait, or 0 to commit now.
 */
uint64_t tp_commit_hold_us(uint64_t now, uint64_t deadline, uint64_t since, uint64_t window, double commit_us)
{
    double span = 2 * commit_us + TP_COMMIT_DEADLINE_MARGIN_US;
    if (span > TP_COMMIT_WINDOW_MAX_US)
        span = TP_COMMIT_WINDOW_MAX_US;
    uint64_t limit = since + window + (uint64_t)TP_COMMIT_WINDOW_MAX_US;
    /* No deadline near; or one long past (its timer is about to fire); or held long enough. */
    if (deadline == 0 || (double)deadline > (double)now + span || deadline + TP_COMMIT_DEADLINE_PAST_US < now ||
        now >= limit)
        return 0;
    uint64_t hold = (deadline > now ? deadline - now : 0) + 50;
    return hold < limit - now ? hold : limit - now;
}

static uint64_t commit_hold_us(const tp_batch_t *b)
{
    /* Urgent, or as many results as a window may hold: at once. */
    if (commit_urgent(b) || b->report->summary.calls - b->txn_results >= TP_COMMIT_RESULTS)
        return 0;
    return tp_commit_hold_us(tp_now_us(), tp_pool_next_deadline(b->pool), b->txn_since_us, commit_window_us(b),
                             b->commit_us);
}

/*
 * The loop turn's gathered work, in one store transaction: settle the
 * attempts that ended, read more input, dispatch to idle slots; commit;
 * only then write the turn's results out, so a record is durable before it
 * is reported. A turn whose commit fails reports nothing and stops the run.
 */
static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    char err[512];
    if (b->o->store && !b->fatal && b->txn == NULL) {
        if (tp_store_begin(b->o->store, &b->txn, err, sizeof err) != 0) {
            b->txn = NULL;
            fatal_cb(b, err);
        }
        b->txn_since_us = tp_now_us();
        b->txn_results = b->report->summary.calls;
    }
    tp_call_t *c;
    while ((c = q_pop(&b->settle)) != NULL)
        settle(b, c);
    if (b->drain_asked && !b->draining)
        drain(b);
    if (!b->closing) {
        pump_input(b);
        advance_touched(b);
        dispatch(b);
    }
    tp_pool_flush(b->pool); /* the workers start on them during the commit */
    uint64_t hold;
    if (b->txn && commit_due(b) && (hold = commit_hold_us(b)) > 0) {
        struct timeval tv = {.tv_sec = (time_t)(hold / 1000000u), .tv_usec = (suseconds_t)(hold % 1000000u)};
        evtimer_add(b->ev_commit, &tv);
        return;
    }
    if (b->txn && !commit_due(b)) {
        /*
         * Group commit: more results will come before the window closes;
         * one fsync will cover them all. The turn's lines wait for it.
         */
        if (!evtimer_pending(b->ev_commit, NULL)) {
            uint64_t window = commit_window_us(b), since = tp_now_us() - b->txn_since_us;
            uint64_t left = since < window ? window - since : 0;
            struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t)left};
            evtimer_add(b->ev_commit, &tv);
        }
        return;
    }
    if (b->txn) {
        MDB_txn *txn = b->txn;
        b->txn = NULL;
        b->marker_pending = false;
        evtimer_del(b->ev_commit);
        if (b->fatal) {
            mdb_txn_abort(txn);
            tp_buf_reset(&b->out);
        } else {
            uint64_t t0 = tp_now_us();
            if (tp_store_commit(b->o->store, txn, err, sizeof err) != 0) {
                tp_buf_reset(&b->out);
                fatal_cb(b, err);
            }
            b->commit_us = b->commit_us * 0.8 + (double)(tp_now_us() - t0) * 0.2;
        }
        /* Keep the resident set flat however large the store grows. */
        if (b->report->summary.calls - b->trimmed_at >= TP_TRIM_EVERY) {
            b->trimmed_at = b->report->summary.calls;
            tp_store_trim(b->o->store);
        }
    }
    tp_call_t *d;
    while ((d = q_pop(&b->deferred)) != NULL) {
        b->n_deferred--;
        if (b->fatal || b->closing)
            q_push(&b->ready, d); /* never started; freed with the rest */
        else
            submit(b, d);
    }
    flush_output(b);
    bool idle = b->live == 0 || (b->draining && tp_pool_busy(b->pool) == 0);
    if (!b->closing && (b->in_eof || b->draining) && idle) {
        b->closing = true;
        tp_pool_shutdown(b->pool, false);
    }
}

/*
 * Stops taking calls. Calls read but never started get no record (a rerun
 * runs them); calls between attempts end Cancelled now; running attempts
 * may finish until the drain timer.
 */
static void drain(tp_batch_t *b)
{
    b->draining = true;
    b->report->interrupted = true;
    if (b->status == 0)
        b->status = 1;
    event_del(b->ev_input);
    b->ready.head = b->ready.tail = NULL;
    for (size_t i = 0; i < b->o->reg->n_tools; i++)
        b->tools[i].waiting.head = b->tools[i].waiting.tail = NULL;
    b->n_waiting = 0;
    for (size_t k = 0; k < b->jobs_cap; k++)
        for (tp_job_t *j = b->jobs[k]; j; j = j->hnext)
            j->head = j->tail = NULL; /* the calls stay on the live list */
    tp_call_t *c = b->all, *nx;
    for (; c; c = nx) {
        nx = c->lnext;
        if (tp_pool_is_running(b->pool, &c->att))
            continue;
        if (c->n_trace == 0) {
            b->report->not_started++;
            call_free(c);
        } else {
            if (c->ev_backoff)
                event_del(c->ev_backoff);
            finish(b, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted between attempts");
        }
    }
}

static void commit_cb(evutil_socket_t fd, short what, void *arg)
{
    kick(arg);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    b->closing = true;
    tp_pool_shutdown(b->pool, true);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    tp_batch_t *b = arg;
    if (b->drain_asked) {
        tp_log_warn("second signal: stopping running calls now");
        drain_timeout_cb(-1, 0, b);
        return;
    }
    tp_log_warn("%s: finishing %d running call%s (signal again to stop now)", strsignal((int)sig),
                tp_pool_busy(b->pool), tp_pool_busy(b->pool) == 1 ? "" : "s");
    b->drain_asked = true;
    struct timeval tv = {.tv_sec = (time_t)(b->o->drain_us / 1000000u),
                         .tv_usec = (suseconds_t)(b->o->drain_us % 1000000u)};
    evtimer_add(b->ev_drain, &tv);
    kick(b);
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    /* Calls done over calls expected: exact at EOF, else scaled from the bytes read. */
    double done = (double)b->report->summary.calls, seen = done + (double)b->live, frac = -1;
    if (b->in_eof)
        frac = seen > 0 ? done / seen : 1;
    else if (b->in_regular && b->in_read > 0 && b->in_size > 0)
        frac = done / (seen * (double)b->in_size / (double)b->in_read);
    tp_progress_draw(stderr, &b->report->summary, frac, (double)(tp_now_us() - b->t0) / 1e6,
                     tp_pool_busy(b->pool));
}

/* Frees what is left when the loop ends early (a fatal error). */
static void free_leftovers(tp_batch_t *b)
{
    while (b->all)
        call_free(b->all);
    for (size_t k = 0; k < b->jobs_cap; k++)
        for (tp_job_t *j = b->jobs[k], *nx; j; j = nx) {
            nx = j->hnext;
            free(j->stop_msg);
            free(j);
        }
}

int tp_batch_run(const tp_batch_opts_t *o, tp_batch_report_t *report)
{
    tp_batch_t b = {.o = o, .report = report, .t0 = tp_now_us()};
    b.touched_tail = &b.touched;
    memset(report, 0, sizeof *report);
    struct stat st;
    if (fstat(o->input_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        b.in_regular = true;
        b.in_size = st.st_size;
    }
    signal(SIGPIPE, SIG_IGN);
    tp_rng_seed(&b.rng, o->seed);
    b.window = o->window ? o->window : (size_t)o->workers * 64 + 1024;
    const tp_guards_t *g = &o->reg->guards;
    /* Without a store there is no checkpoint to take a job's usage up again from. */
    b.keep_jobs = o->store == NULL && (g->max_steps || g->max_calls || g->max_wall_us || g->max_cost > 0);
    b.jobs_cap = 1024;
    b.jobs = calloc(b.jobs_cap, sizeof *b.jobs);
    b.tools = calloc(o->reg->n_tools, sizeof *b.tools);
    /* Attempt deadlines want better than epoll's millisecond rounding: timerfd. */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        /* A timer is armed from the clock now, not from the loop turn's start. */
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
        b.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (b.jobs == NULL || b.tools == NULL || b.base == NULL) {
        tp_log_error("out of memory");
        return 2;
    }
    tp_pool_opts_t po = {
        .workers = o->workers,
        .worker_path = o->worker_path,
        .max_frame = o->max_frame,
        .recycle_after = o->recycle_after,
        .pipeline = o->pipeline,
        .done_cb = attempt_done_cb,
        .idle_cb = idle_cb,
        .fatal_cb = fatal_cb,
        .closed_cb = closed_cb,
        .ctx = &b,
    };
    b.pool = tp_pool_new(b.base, &po);
    b.ev_kick = event_new(b.base, -1, 0, kick_cb, &b);
    b.ev_input = event_new(b.base, o->input_fd, EV_READ, input_cb, &b);
    b.ev_sigint = evsignal_new(b.base, SIGINT, signal_cb, &b);
    b.ev_sigterm = evsignal_new(b.base, SIGTERM, signal_cb, &b);
    b.ev_drain = evtimer_new(b.base, drain_timeout_cb, &b);
    b.ev_commit = evtimer_new(b.base, commit_cb, &b);
    evsignal_add(b.ev_sigint, NULL);
    evsignal_add(b.ev_sigterm, NULL);
    if (o->progress) {
        b.ev_progress = event_new(b.base, -1, EV_PERSIST, progress_cb, &b);
        struct timeval tv = {0, 200000};
        evtimer_add(b.ev_progress, &tv);
    }
    int status;
    if (b.pool == NULL || tp_pool_start(b.pool) < 0) {
        status = 2;
    } else {
        kick(&b);
        event_base_dispatch(b.base);
        /* Attempts the pool settled on its way out still get their records. */
        b.closing = true;
        kick_cb(-1, 0, &b);
        status = b.status;
    }
    if (o->progress)
        fputs("\r\033[K", stderr);
    report->elapsed_s = (double)(tp_now_us() - b.t0) / 1e6;
    if (b.pool)
        report->pool = *tp_pool_stats(b.pool);
    tp_pool_free(b.pool);
    free_leftovers(&b);
    if (b.ev_progress)
        event_free(b.ev_progress);
    event_free(b.ev_kick);
    event_free(b.ev_input);
    event_free(b.ev_sigint);
    event_free(b.ev_sigterm);
    event_free(b.ev_drain);
    event_free(b.ev_commit);
    event_base_free(b.base);
    free(b.jobs);
    free(b.tools);
    tp_buf_free(&b.in);
    tp_buf_free(&b.line_strs);
    tp_buf_free(&b.line_canon);
    tp_buf_free(&b.out);
    return status;
}
