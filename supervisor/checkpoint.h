/*
 * What makes a run resumable: every call's result, each job's checkpoint,
 * and the in-flight markers of tools that must not run twice.
 *
 * results/ID     the call's final record: its result line and the digest
 *                of its tool and args (Toolpool__StoredResult): a rerun
 *                serves the line instead of running the call, but only to
 *                the same input
 * jobs/JOB       the job's checkpoint, after each of its steps ends: the ids
 *                of its ended calls in order (its message list) and the
 *                usage its guards count, so a rerun continues where it was;
 *                an agent loop's own checkpoint (serve's PUT /v1/jobs/JOB/checkpoint)
 *                rides along: an opaque JSON document and its step
 * inflight/ID    a non-idempotent call whose attempt was committed as started
 *
 * All of it is written inside the supervisor's per-turn transaction.
 */
#ifndef TP_CHECKPOINT_H
#define TP_CHECKPOINT_H

#include "breaker.h"
#include "digest.h"
#include "guard.h"
#include "store.h"
#include "toolpool.pb-c.h"

/* Records r, reported as the JSON line (len bytes). */
int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r, const uint8_t *line, size_t len);
/* 0 and *out (free with toolpool__stored_result__free_unpacked), MDB_NOTFOUND, or EPROTO. */
int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out);

/* The checkpoint of job, or MDB_NOTFOUND. Free with toolpool__checkpoint__free_unpacked. */
int tp_checkpoint_get(tp_store_t *s, MDB_txn *txn, const char *job, Toolpool__Checkpoint **out);
/*
 * Appends the ended call call_id (step) to job's checkpoint and stores the
 * usage its guards count, and what stopped it (TP_KIND_OK: nothing). A
 * call already in the list (run again) keeps its place. u NULL: a call
 * refused before it ran, listed with the usage and stop left as they were.
 */
int tp_checkpoint_step(tp_store_t *s, MDB_txn *txn, const char *job, const char *call_id, uint64_t step,
                       const tp_job_usage_t *u, uint64_t wall_used_us, tp_kind_t stopped,
                       const char *stop_msg);

/*
 * Stores an agent loop's own checkpoint of job (an opaque JSON document of
 * len bytes: its message list and loop state) with its step, in the job's
 * checkpoint (state, state_step, state_unix_us), beside what the engine
 * records of the job's calls; the latest replaces the one before.
 */
int tp_checkpoint_state_put(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t step, const char *json,
                            size_t len);

int tp_inflight_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InFlight *f);
int tp_inflight_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__InFlight **out);
int tp_inflight_del(tp_store_t *s, MDB_txn *txn, const char *id);

#endif
