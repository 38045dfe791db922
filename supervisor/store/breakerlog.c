#include "breakerlog.h"

#include <string.h>

void tp_breaker_history_add(tp_breaker_history_t *h, Toolpool__BreakerEvent *const *old, size_t n_old,
                            Toolpool__BreakerState state, const char *cause, uint64_t refused, uint64_t now,
                            Toolpool__BreakerEvent ***hist, size_t *n)
{
    size_t keep = n_old < TP_BREAKER_HISTORY_MAX ? n_old : TP_BREAKER_HISTORY_MAX - 1;
    for (size_t i = 0; i < keep; i++)
        h->v[i] = old[n_old - keep + i];
    toolpool__breaker_event__init(&h->ev);
    h->ev.at_unix_us = now;
    h->ev.state = state;
    h->ev.cause = (char *)(cause ? cause : "");
    h->ev.refused = refused;
    h->v[keep] = &h->ev;
    *hist = h->v;
    *n = keep + 1;
}

int tp_breaker_call_close(tp_store_t *s, MDB_txn *txn, const MDB_val *key, const Toolpool__CallBreaker *cb,
                          const char *cause, uint64_t now)
{
    MDB_val k = *key;
    if (cb->opened_unix_us == 0 && cb->n_history == 0)
        return tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &k, NULL));
    if (cb->opened_unix_us == 0 && cb->n_failures_unix_us == 0)
        return 0; /* closed already, nothing counted: nothing to write */
    Toolpool__CallBreaker c = *cb;
    tp_breaker_history_t h;
    if (cb->opened_unix_us)
        tp_breaker_history_add(&h, cb->history, cb->n_history, TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED, cause,
                               cb->blocked, now, &c.history, &c.n_history);
    c.n_failures_unix_us = c.n_failed_ids = 0;
    c.opened_unix_us = c.blocked = 0;
    c.escalation = (char *)"";
    return tp_store_put_msg(s, txn, TP_DB_BREAKERS, key->mv_data, key->mv_size, &c.base);
}

int tp_breaker_tool_close(tp_store_t *s, MDB_txn *txn, const MDB_val *key, const Toolpool__ToolBreaker *tb,
                          const char *cause, uint64_t now)
{
    MDB_val k = *key;
    if (tb->state == TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED && tb->n_history == 0)
        return tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &k, NULL));
    Toolpool__ToolBreaker c = *tb;
    tp_breaker_history_t h;
    if (tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED)
        tp_breaker_history_add(&h, tb->history, tb->n_history, TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED, cause,
                               tb->refused, now, &c.history, &c.n_history);
    c.state = TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED;
    c.n_buckets = 0;
    c.probes_out = 0;
    c.refused = 0;
    return tp_store_put_msg(s, txn, TP_DB_BREAKERS, key->mv_data, key->mv_size, &c.base);
}
