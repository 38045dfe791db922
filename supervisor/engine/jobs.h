/*
 * Jobs: the calls of one agent job run one at a time, in step order.
 *
 * A chained hash table of the jobs that have calls held (a job that goes
 * idle is dropped, unless the caller keeps idle jobs: guards without a
 * store have nowhere else to keep a job's usage). Each job keeps its
 * pending calls sorted by step and lets the next one go only when the one
 * before it has ended.
 *
 * The calls are the engine's (call_internal.h); a job only links them through their
 * `next` field while they are pending.
 */
#ifndef TP_JOBS_H
#define TP_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guard.h"
#include "taxonomy.h"

typedef struct tp_call tp_call_t;

/* A queue of calls, linked through their `next` (its operations: call_internal.h). */
typedef struct {
    tp_call_t *head;
    tp_call_t *tail;
} tp_queue_t;

typedef struct tp_job {
    struct tp_job *hnext; /* hash chain */
    struct tp_job *tnext; /* on the engine's touched list */
    bool touched;
    bool running; /* one of its calls is between its turn and its end */
    uint64_t hash;
    tp_queue_t pending;   /* sorted by step */
    tp_job_usage_t usage; /* what the guards count */
    uint64_t max_step;    /* the highest step started in this run, or ended (its checkpoint) */
    tp_kind_t stopped;    /* a guard fired: later calls end with this kind */
    char *stop_msg;
    char name[];
} tp_job_t;

typedef struct {
    tp_job_t **slots;
    size_t cap; /* a power of two */
    size_t n;
} tp_jobs_t;

/* 0, or -1 out of memory. */
int tp_jobs_init(tp_jobs_t *t);
/* Frees every job left (not their calls). */
void tp_jobs_free(tp_jobs_t *t);
/* The job named name[0..len), added when new (*created set); NULL out of memory. */
tp_job_t *tp_jobs_get(tp_jobs_t *t, const char *name, size_t len, bool *created);
/* Removes and frees j. */
void tp_jobs_drop(tp_jobs_t *t, tp_job_t *j);
/* Whether j holds nothing: no call pending or running (an ended call's answer names it by a copy). */
bool tp_job_idle(const tp_job_t *j);

/* Inserts c among j's pending calls, keeping step order (equal steps: in arrival order). */
void tp_job_add(tp_job_t *j, tp_call_t *c);
/* Takes c out of j's pending calls; false when it is not among them. */
bool tp_job_remove(tp_job_t *j, tp_call_t *c);
/* The job's next call, when it is its turn (none running): j is running from then on. */
tp_call_t *tp_job_next(tp_job_t *j);

#endif
