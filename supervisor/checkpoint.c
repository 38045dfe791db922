#include "checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "steps.h"

int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r, const uint8_t *line, size_t len)
{
    Toolpool__StoredResult sr = TOOLPOOL__STORED_RESULT__INIT;
    sr.input_digest = r->input_digest;
    sr.line.data = (uint8_t *)line;
    sr.line.len = len;
    sr.ok = r->ok;
    sr.kind = r->kind;
    sr.attempts = r->attempts;
    sr.duration_us = r->duration_us;
    sr.ended_unix_us = tp_unix_us();
    return tp_store_put_msg(s, txn, TP_DB_RESULTS, r->id, strlen(r->id), &sr.base);
}

int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out)
{
    return tp_store_get_msg(s, txn, TP_DB_RESULTS, id, strlen(id), &toolpool__stored_result__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_checkpoint_get(tp_store_t *s, MDB_txn *txn, const char *job, Toolpool__Checkpoint **out)
{
    return tp_store_get_msg(s, txn, TP_DB_JOBS, job, strlen(job), &toolpool__checkpoint__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_checkpoint_step(tp_store_t *s, MDB_txn *txn, const char *job, const char *call_id, uint64_t step,
                       const tp_job_usage_t *u, uint64_t wall_used_us, tp_kind_t stopped,
                       const char *stop_msg)
{
    Toolpool__Checkpoint *old = NULL;
    int rc = tp_checkpoint_get(s, txn, job, &old);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    Toolpool__Checkpoint cp = TOOLPOOL__CHECKPOINT__INIT;
    cp.job = (char *)job;
    /* A refusal ends as it comes, before the steps ahead of it: it does not move the job on. */
    cp.last_step = old && (old->last_step > step || u == NULL) ? old->last_step : u ? step : 0;
    if (old) {
        cp.calls = old->calls; /* none, once the store is of format 3 */
        cp.n_calls = old->n_calls;
        cp.calls_next = old->calls_next;
        cp.calls_listed = old->calls_listed;
    }
    bool added;
    if ((rc = tp_steps_add(s, txn, job, call_id, &cp, &added)) != 0) {
        toolpool__checkpoint__free_unpacked(old, NULL);
        return rc;
    }
    if (u) {
        cp.steps = u->steps;
        cp.attempts = u->calls;
        cp.cost = u->cost;
        cp.wall_used_us = wall_used_us;
        cp.stopped = (char *)(stopped != TP_KIND_OK ? tp_kind_name(stopped) : "");
        cp.stop_message = (char *)(stop_msg ? stop_msg : "");
    } else if (old) {
        cp.steps = old->steps;
        cp.attempts = old->attempts;
        cp.cost = old->cost;
        cp.wall_used_us = old->wall_used_us;
        cp.stopped = old->stopped;
        cp.stop_message = old->stop_message;
    }
    cp.updated_unix_us = tp_unix_us();
    if (old && old->has_state) {
        cp.has_state = true;
        cp.state = old->state;
        cp.state_step = old->state_step;
        cp.state_unix_us = old->state_unix_us;
    }
    rc = tp_store_put_msg(s, txn, TP_DB_JOBS, job, strlen(job), &cp.base);
    if (old)
        toolpool__checkpoint__free_unpacked(old, NULL);
    return rc;
}

int tp_checkpoint_state_put(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t step, const char *json,
                            size_t len)
{
    Toolpool__Checkpoint *old = NULL;
    int rc = tp_checkpoint_get(s, txn, job, &old);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    Toolpool__Checkpoint cp = TOOLPOOL__CHECKPOINT__INIT;
    if (old)
        cp = *old; /* what the engine recorded of the job stays */
    cp.job = (char *)job;
    cp.has_state = true;
    cp.state.data = (uint8_t *)json;
    cp.state.len = len;
    cp.state_step = step;
    cp.state_unix_us = tp_unix_us();
    cp.updated_unix_us = cp.state_unix_us;
    rc = tp_store_put_msg(s, txn, TP_DB_JOBS, job, strlen(job), &cp.base);
    if (old)
        toolpool__checkpoint__free_unpacked(old, NULL);
    return rc;
}

int tp_inflight_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InFlight *f)
{
    return tp_store_put_msg(s, txn, TP_DB_INFLIGHT, f->call_id, strlen(f->call_id), &f->base);
}

int tp_inflight_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__InFlight **out)
{
    return tp_store_get_msg(s, txn, TP_DB_INFLIGHT, id, strlen(id), &toolpool__in_flight__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_inflight_del(tp_store_t *s, MDB_txn *txn, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = mdb_del(txn, tp_store_dbi(s, TP_DB_INFLIGHT), &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}
