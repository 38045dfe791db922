/*
 * inflight/ID: a non-idempotent call whose attempt was committed as
 * started (Toolpool__InFlight), tied to its owner: found after a crash, the
 * call ends Interrupted instead of running again.
 */
#ifndef TP_INFLIGHT_H
#define TP_INFLIGHT_H

#include "store.h"
#include "toolpool.pb-c.h"

int tp_inflight_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InFlight *f);
int tp_inflight_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__InFlight **out);
int tp_inflight_del(tp_store_t *s, MDB_txn *txn, const char *id);

#endif
