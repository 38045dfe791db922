/*
 * inflight/ID: a non-idempotent call whose attempt was committed as
 * started (Toolpool__InFlight), tied to its owner: found after a crash, the
 * call ends Interrupted instead of running again.
 */
#ifndef TP_INFLIGHT_H
#define TP_INFLIGHT_H

#include <stdbool.h>

#include "store.h"
#include "toolpool.pb-c.h"

int tp_inflight_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InFlight *f);
int tp_inflight_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__InFlight **out);
int tp_inflight_del(tp_store_t *s, MDB_txn *txn, const char *id);
/*
 * Calls fn with each marker, in id order; fn keeps the marker (returns
 * true, and frees it later with toolpool__in_flight__free_unpacked) or
 * leaves it to be freed. A damaged marker is noted (tp_store_note_bad) and
 * skipped. fn must not write to the markers' database. 0 or an LMDB code.
 */
int tp_inflight_each(tp_store_t *s, MDB_txn *txn, bool (*fn)(void *ctx, Toolpool__InFlight *f), void *ctx);

#endif
