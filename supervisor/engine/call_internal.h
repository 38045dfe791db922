/*
 * A call as the engine holds it, from submit to answer, and the intrusive
 * queues it moves through. Internal to the engine (supervisor/engine/).
 *
 * Queues, all singly linked through `next`:
 *   job->pending   a job's calls not yet started, in step order (jobs.h)
 *   ready          calls whose turn it is, first come first served
 *   tool waiting   calls whose tool is at its concurrency cap
 *   settle         calls whose attempt ended, for the turn to look at
 *   deferred       attempts that start once the turn's commit has made
 *                  their in-flight marker durable
 * A call is in at most one of them, or running, or waiting out a backoff.
 */
#ifndef TP_CALL_INTERNAL_H
#define TP_CALL_INTERNAL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "breaker.h"
#include "buf.h"
#include "engine.h"
#include "escalate.h"
#include "jobs.h"
#include "log.h"
#include "pool.h"
#include "toolpool.pb-c.h"

/* One entry of a call's trace, with the outcome's name it points to. */
typedef struct {
    Toolpool__Attempt at;
    char outcome[64];
} tp_trace_entry_t;

/*
 * Laid out by when a call's fields are first written, so that a call
 * reused cold (eng_call_new) is written only where submit needs it: the
 * fields before att are cleared at submit (about 5 of its 12 cache
 * lines); att is cleared at the call's teardown, while it is in cache,
 * and written whole when an attempt starts; trace0 is written when the
 * first trace entry is made. 20,000 no-op durable calls had 0.15M L2
 * write misses in clearing the whole call at submit.
 */
struct tp_call {
    struct tp_call *next;  /* the queue it is in */
    struct tp_call *lprev; /* every call not yet ended, for drain and teardown */
    struct tp_call *lnext;
    tp_job_t *job;
    const tp_tool_t *tool;     /* the tool called */
    const tp_tool_t *hop_tool; /* the tool of the current hop of its fallback chain */
    char *id;
    char *args;
    size_t args_len;
    tp_digest_t digest;     /* of the canonical args: the same-call breaker's key */
    tp_digest_t identity;   /* of tool and args: with the id, what a recorded result answers */
    tp_digest_t hop_digest; /* of the current hop's args */
    tp_digest_t hop_key;    /* the current hop's same-call breaker key (call_breaker_key), once worked out */
    char *hop_args;         /* the current hop's args, when its fallback entry maps them; else NULL */
    char *breaker_job;      /* the request's breaker_job, when it named one; else NULL (the job's name) */
    size_t hop_args_len;
    uint64_t submitted_gen; /* the store's owners' generation then */
    uint64_t step;
    uint64_t deadline_us;     /* the caller's end for the whole call; 0: none */
    uint64_t first_us;        /* first attempt's start */
    uint64_t turn_us;         /* when its turn came: ready to run, its job's earlier steps ended */
    uint64_t hop_deadline_us; /* absolute, for the current hop; 0 = none */
    tp_answer_fn answer;
    void *answer_ctx;
    tp_notice_fn notice;  /* NULL: nobody listens to its MCP server's notifications */
    tp_trace_ctx_t *tctx; /* the caller's trace context: tctx_own, or one block with its strings; NULL: none */
    tp_engine_t *e;
    Toolpool__Attempt **trace; /* &trace0_at while there is one entry; then malloc'd */
    size_t n_trace;
    struct event *ev_backoff;
    char *end_msg; /* the engine's own message (a guard, a cancel) */
    char *cancel_why;
    tp_buf_t degraded;     /* the declared degraded answer, when it stood in */
    uint32_t hop;          /* 0: the tool called; n: its nth fallback */
    uint32_t hop_attempts; /* attempts made in the current hop */
    int sb_slot;           /* the running attempt's scoreboard record (-1: none free) */
    bool hop_key_set;
    bool marked;           /* an in-flight marker of ours is in the store */
    bool claim_only;       /* ... written only to claim it (orphaned, it may run again) */
    bool claimed;          /* checked and claimed in one transaction, on a shared store */
    bool submitted_shared; /* other supervisors were on the store when it came */
    bool interrupted;      /* found in flight after a crash: not to be run again */
    bool keep_old;         /* run again for its tool's new version: its record keeps the old one */
    bool current;          /* its job's call between its turn and its end */
    bool started;          /* counted as a step of its job */
    bool probe;            /* the running attempt is a half-open probe */
    bool answer_staged;    /* its front takes its answer staged (tp_request_t.answer_staged) */
    bool readmit;          /* its attempt never started: admitted already */
    bool cancelled;        /* the front cancelled it: it ends Cancelled at the next chance */
    bool ended;            /* its answer is made: what is left is its front's handle */
    bool escalated;
    char escalation[TP_ESCALATION_ID_MAX];
    /* Cleared at teardown, not at submit. */
    tp_attempt_t att;
    /* Written when the first entry is made (eng_trace_add). */
    Toolpool__Attempt *trace0_at;
    tp_trace_entry_t trace0; /* the first entry: most calls have no other */
    /* Written when a traced call comes with no strings in its context (most): tctx, without a malloc. */
    tp_trace_ctx_t tctx_own;
};

/* The call c as a log line's fields: id, job, the tool called, the attempts made so far. */
static inline tp_log_call_t eng_log_call(const tp_call_t *c)
{
    return (tp_log_call_t){c->id, c->job ? c->job->name : NULL, c->tool ? c->tool->name : NULL, (unsigned)c->n_trace};
}

static inline void tp_queue_push(tp_queue_t *q, tp_call_t *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
}

static inline void tp_queue_push_front(tp_queue_t *q, tp_call_t *c)
{
    c->next = q->head;
    q->head = c;
    if (q->tail == NULL)
        q->tail = c;
}

static inline tp_call_t *tp_queue_pop(tp_queue_t *q)
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

/* Takes c out of q; false when it is not there. */
static inline bool tp_queue_remove(tp_queue_t *q, tp_call_t *c)
{
    tp_call_t *prev = NULL;
    for (tp_call_t *p = q->head; p; prev = p, p = p->next) {
        if (p != c)
            continue;
        if (prev)
            prev->next = c->next;
        else
            q->head = c->next;
        if (q->tail == c)
            q->tail = prev;
        c->next = NULL;
        return true;
    }
    return false;
}

#endif
