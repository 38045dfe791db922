/*
 * The store's records as people and programs see them: breakers,
 * escalations and job checkpoints, found, changed and rendered as JSON.
 *
 * One piece of code for every way in: the inspection commands
 * (tools/cmd_inspect.c, in their own transactions) and serve's /v1/breakers,
 * /v1/escalations and /v1/jobs (front/http/admin.c and checkpoints.c, in the engine's), so that a
 * breaker reset or an escalation resolved means the same whichever did it.
 *
 * Every function works inside the caller's transaction (read or write) and
 * returns 0, MDB_NOTFOUND, TP_EEXIST (a prefix that names more than one
 * record), TP_EPROTO (a record that does not unpack), TP_ENOMEM, or an LMDB code.
 * Times in the JSON are milliseconds since the epoch ("..._ms"), durations
 * milliseconds.
 */
#ifndef TP_RECORDS_H
#define TP_RECORDS_H

#include <jansson.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "store.h"
#include "toolpool.pb-c.h"

/* Room for a breaker's id: "call/" + a tool's name + "/" + 32 hex digits. */
#define TP_RECORDS_ID_MAX 700

/* ---- breakers: tool/NAME (a tool's failure rate) and call/NAME/DIGEST (one call's args) ---- */

/* The id of the breaker stored under key. */
void tp_records_breaker_id(const MDB_val *key, char *id, size_t cap);
/* A breaker state's name: "open", "half-open", "closed". */
const char *tp_records_breaker_state(Toolpool__BreakerState st);
/*
 * The one breaker whose id starts with prefix: a tool breaker's id in full,
 * a call breaker's with as much of its digest as tells it apart. key and
 * val point into the transaction's pages.
 */
int tp_records_breaker_find(tp_store_t *s, MDB_txn *txn, const char *prefix, MDB_val *key, MDB_val *val);
/*
 * Closes that breaker and forgets its failures (breakerlog.h: one that has
 * opened is kept, closed, its history telling the reset); id gets its full
 * id. MDB_NOTFOUND too for one that has nothing to reset (closed, nothing
 * counted).
 */
int tp_records_breaker_reset(tp_store_t *s, MDB_txn *txn, const char *prefix, char *id, size_t cap);
/* What one breaker says, for a count (metrics). */
typedef struct {
    const char *id;
    const char *tool;  /* its tool's name */
    bool is_tool;      /* a tool breaker (else a same-call one) */
    const char *state; /* "open", "half-open" or "closed" */
} tp_breaker_info_t;
/* Calls fn for each breaker, in key order; a non-zero return from fn stops the walk and is returned. */
int tp_records_breakers_each(tp_store_t *s, MDB_txn *txn, int (*fn)(void *ctx, const tp_breaker_info_t *b), void *ctx);
/*
 * One breaker: {"id", "type": "tool"|"call", "tool", "state", ...}; full
 * adds a call breaker's args, its last failure and the failure times.
 * NULL when the record does not unpack or memory ran out.
 */
json_t *tp_records_breaker_json(const MDB_val *key, const MDB_val *val, bool full);
/* Every breaker, an array in key order. */
int tp_records_breakers_json(tp_store_t *s, MDB_txn *txn, json_t **out);

/* ---- escalations ---- */

/* Free with toolpool__escalation__free_unpacked. */
int tp_records_escalation_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__Escalation **out);
/* Marks escalation id resolved now, with note (NULL: it keeps the one it has). */
int tp_records_escalation_resolve(tp_store_t *s, MDB_txn *txn, const char *id, const char *note);
/* One escalation; full adds its trace. */
json_t *tp_records_escalation_json(const Toolpool__Escalation *e, bool full);
/* The open escalations (all: resolved ones too), an array in id order. */
int tp_records_escalations_json(tp_store_t *s, MDB_txn *txn, bool all, json_t **out);
/* How many escalations are open, and how many there are. */
int tp_records_escalations_count(tp_store_t *s, MDB_txn *txn, uint64_t *open, uint64_t *total);

/*
 * resolve --rerun: marks escalation id resolved (note as above) and lets
 * the next run do its call again: the call's recorded result is forgotten
 * (unless it is a success by now) and a same-call breaker opened with
 * this escalation is reset. *call_id (cap bytes) gets the call's id;
 * *forgot whether a record was dropped.
 */
int tp_records_escalation_rerun(tp_store_t *s, MDB_txn *txn, const char *id, const char *note, char *call_id,
                                size_t cap, bool *forgot);

/* ---- forgetting results: the next run does the calls again ---- */

/*
 * Drops call id's recorded result, and its place in its job's checkpoint
 * (the job's usage stays). MDB_NOTFOUND when nothing is recorded for it.
 * An in-flight marker is left alone: the call may be running now.
 */
int tp_records_forget(tp_store_t *s, MDB_txn *txn, const char *id);
/*
 * Drops every recorded result of job (its checkpoint's calls; a job named
 * after its one call, that call) and the job's checkpoint, but for an
 * agent loop's own state, which stays. *n gets the results dropped.
 * MDB_NOTFOUND when the store knows no such job.
 */
int tp_records_forget_job(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t *n);

/* ---- job checkpoints ---- */

/*
 * A job's checkpoint: {"job", "step", "calls": [ids], "steps", "attempts",
 * "cost", "wall_ms", "stopped", "stop_message", "updated_ms"}, and
 * "agent": {"step", "state", "updated_ms"} when an agent loop stored its own.
 */
json_t *tp_records_checkpoint_json(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp);
/* Every job's checkpoint, an array in job order. */
int tp_records_checkpoints_json(tp_store_t *s, MDB_txn *txn, json_t **out);
/*
 * Appends the recorded results of a checkpoint's calls, in order (the
 * job's message list), as a JSON array text: each its result line as
 * recorded (without its newline), so that a tool's result that jansson
 * cannot hold shows as the tool wrote it; a call with no readable record
 * is {"id": ID, "missing": true}. 0, TP_ENOMEM, or the store's code (out
 * as it was).
 */
int tp_records_checkpoint_results_text(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp, tp_buf_t *out);
/*
 * An agent loop's own checkpoint of a job (serve's GET /v1/jobs/JOB/checkpoint):
 * {"job", "step", "state", "updated_ms"}. MDB_NOTFOUND when the job has
 * none (no checkpoint, or one the engine wrote alone).
 */
int tp_records_agent_state_json(tp_store_t *s, MDB_txn *txn, const char *job, json_t **out);

#endif
