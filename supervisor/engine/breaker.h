/*
 * Circuit breakers, kept in the store so that every supervisor on the
 * machine, and the next run, sees the same state.
 *
 * Same-call breaker (the seed's): failed calls of one tool with the same
 * canonical args are counted inside a window; the Nth opens that call's
 * circuit, which then answers CircuitOpen without running until the window
 * has passed since it opened, or a person resets it. A success of the call
 * clears its count. Only a call's final outcome counts, never its retries.
 *
 * Tool breaker: the failure rate of a tool's attempts over a sliding window
 * (ten buckets), with a minimum number of attempts. A tool that has never
 * failed keeps no record (no write per healthy attempt): its window starts
 * at its first failure. Open, it refuses the
 * tool; after the cooldown it lets `probes` attempts through (half-open);
 * a probe's success closes it, a probe's failure opens it again. Only
 * transient kinds count as failures: a 403 says the tool is up.
 *
 * Every function works inside the caller's write transaction.
 */
#ifndef TP_BREAKER_H
#define TP_BREAKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "registry.h"
#include "store.h"
#include "taxonomy.h"

/*
 * The same-call breaker's key digest for args (tp_digest_args) called by
 * job: with the tool's scope "job", the job's own (XXH128 of the args
 * digest and the job's name), so one job's failures never open another's
 * circuit; with "global", the args digest itself, shared by every job.
 */
void tp_breaker_call_digest(const tp_tool_t *t, const tp_digest_t *args, const char *job, tp_digest_t *out);

/*
 * Whether the call's circuit is open now. When it is, the call is counted
 * as blocked and *escalation names the escalation it was opened with.
 * An open circuit whose window has passed closes here.
 */
int tp_breaker_call_check(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d, uint64_t now,
                          bool *open, char *escalation, size_t esc_len);
/*
 * Records a call's final outcome. A failure is counted, once a call: the
 * failure of a call id counted before (a --retry-failed rerun, or a rerun
 * after forget) takes that one's place. *opened says whether this failure
 * opened the circuit (the caller escalates it and then calls
 * tp_breaker_call_set_escalation). A success clears the count. job: the
 * job it counts for (scope "job"; shown by `toolpool breakers`), or NULL.
 */
int tp_breaker_call_record(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d, const char *job,
                           const char *call_id, const char *args, bool failed, const char *kind, const char *message,
                           uint64_t now, bool *opened);
int tp_breaker_call_set_escalation(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d,
                                   const char *escalation);

typedef enum {
    TP_ADMIT_YES,
    TP_ADMIT_PROBE, /* half-open: this attempt is a probe */
    TP_ADMIT_NO,
} tp_admit_t;

/*
 * Whether the store holds no breaker of any kind (txn's view): then every
 * circuit is closed and a success has nothing to clear, and a call's path
 * skips its breaker keys and lookups. A failure is recorded whatever this
 * says.
 */
static inline bool tp_breakers_none(tp_store_t *s, MDB_txn *txn)
{
    return tp_store_db_empty(s, txn, TP_DB_BREAKERS);
}

/* Whether the tool may run an attempt now. */
int tp_breaker_tool_admit(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, uint64_t now, tp_admit_t *out);
/* Records an attempt's outcome (kind), and whether it was a probe. */
int tp_breaker_tool_record(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, tp_kind_t kind, bool probe, uint64_t now);

/*
 * The same-call breaker's id as `toolpool breakers` takes it:
 * call/TOOL/DIGEST, the digest's first 6 bytes in hex (a prefix will do).
 * Returns buf.
 */
#define TP_BREAKER_ID_MAX 320
const char *tp_breaker_call_id(const char *tool, const tp_digest_t *d, char *buf, size_t cap);

/* Keys, for the inspection commands: 'c' TOOL \0 DIGEST and 't' TOOL. */
size_t tp_breaker_call_key(const char *tool, const tp_digest_t *d, uint8_t *key, size_t cap);
size_t tp_breaker_tool_key(const char *tool, uint8_t *key, size_t cap);

#endif
