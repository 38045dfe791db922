/*
 * What makes a run resumable: every call's result (results.h), each job's
 * checkpoint (here), and the in-flight markers of tools that must not run
 * twice (inflight.h); this header brings all three.
 *
 * jobs/JOB       the job's checkpoint, after each of its steps ends: the ids
 *                of its ended calls in order (its message list, in the steps
 *                database: steps.h) and the usage its guards count, so a
 *                rerun continues where it was; an agent loop's own checkpoint
 *                (serve's PUT /v1/jobs/JOB/checkpoint) rides along: an opaque
 *                JSON document and its step
 *
 * All of it is written inside the supervisor's per-turn transaction.
 */
#ifndef TP_CHECKPOINT_H
#define TP_CHECKPOINT_H

#include "digest.h"
#include "inflight.h"
#include "results.h"
#include "store.h"
#include "taxonomy.h"
#include "toolpool.pb-c.h"
#include "usage.h"

/* The checkpoint of job, or MDB_NOTFOUND. Free with toolpool__checkpoint__free_unpacked. */
int tp_checkpoint_get(tp_store_t *s, MDB_txn *txn, const char *job, Toolpool__Checkpoint **out);
/*
 * Appends the ended call call_id (step) to job's checkpoint and stores the
 * usage its guards count, and what stopped it (TP_KIND_OK: nothing). A
 * call already in the list (run again) keeps its place. u NULL: a call
 * refused before it ran, listed with the usage and stop left as they were.
 */
int tp_checkpoint_step(tp_store_t *s, MDB_txn *txn, const char *job, const char *call_id, uint64_t step,
                       const tp_job_usage_t *u, uint64_t wall_used_us, tp_kind_t stopped, const char *stop_msg);

/*
 * Stores an agent loop's own checkpoint of job (an opaque JSON document of
 * len bytes: its message list and loop state) with its step, in the job's
 * checkpoint (state, state_step, state_unix_us), beside what the engine
 * records of the job's calls; the latest replaces the one before.
 */
int tp_checkpoint_state_put(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t step, const char *json, size_t len);

#endif
