/*
 * results/ID: each call's final record (Toolpool__StoredResult): its result
 * line and the digest of its tool and args, so that a rerun serves the line
 * instead of running the call, but only to the same input.
 */
#ifndef TP_RESULTS_H
#define TP_RESULTS_H

#include "store.h"
#include "toolpool.pb-c.h"

/* Records r, reported as the JSON line (len bytes). */
int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r, const uint8_t *line, size_t len);
/* 0 and *out (free with toolpool__stored_result__free_unpacked), MDB_NOTFOUND, or TP_EPROTO. */
int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out);

#endif
