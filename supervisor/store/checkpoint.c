#include "checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "steps.h"

int tp_checkpoint_get(tp_store_t *s, MDB_txn *txn, const char *job, Toolpool__Checkpoint **out)
{
    return tp_store_get_msg(s, txn, TP_DB_JOBS, job, strlen(job), &toolpool__checkpoint__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_checkpoint_step(tp_store_t *s, MDB_txn *txn, const char *job, const char *call_id, uint64_t step,
                       const tp_job_usage_t *u, uint64_t wall_used_us, tp_kind_t stopped, const char *stop_msg)
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

int tp_checkpoint_state_put(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t step, const char *json, size_t len)
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
