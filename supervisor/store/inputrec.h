/*
 * meta/"input": what a shard's run was made from (the calls file's and the
 * registry's digests, the shard, its totals): an InputRecord, written by
 * `toolpool run --shard` before its first call, read by `toolpool merge`
 * and `toolpool shard-status`. A store without one is of a run without
 * --shard, or of a toolpool older than the record: read as it is.
 */
#ifndef TP_INPUTREC_H
#define TP_INPUTREC_H

#include "store.h"
#include "toolpool.pb-c.h"

/* The record: 0 and *out (free with protobuf_c_message_free_unpacked), MDB_NOTFOUND, or TP_EPROTO. */
int tp_input_record_get(tp_store_t *s, MDB_txn *txn, Toolpool__InputRecord **out);
/* Writes it over what was there. 0, or an LMDB error. */
int tp_input_record_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InputRecord *r);

#endif
