/*
 * tasks/ID: the MCP tasks of the store's MCP fronts (Toolpool__McpTask),
 * one a task, keyed by its id (the id its call runs under). Written in
 * the engine's write transaction (tp_engine_store_op) so that a task is
 * durable before its client hears of it; read back to answer tasks/get
 * after the supervisor that created it has gone.
 */
#ifndef TP_TASKS_H
#define TP_TASKS_H

#include <stddef.h>

#include "store.h"
#include "toolpool.pb-c.h"

/* Records t under its task_id. 0, or what tp_store_put_msg returns. */
int tp_task_put(tp_store_t *s, MDB_txn *txn, const Toolpool__McpTask *t);
/*
 * 0 and *out (free with toolpool__mcp_task__free_unpacked); MDB_NOTFOUND
 * (none, or a store without the tasks database), TP_EPROTO, or an LMDB
 * error.
 */
int tp_task_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__McpTask **out);
/* Drops the task's record (none: 0). 0 or an LMDB error. */
int tp_task_del(tp_store_t *s, MDB_txn *txn, const char *id);
/*
 * Up to max tasks in id order, from the first id after `after` (NULL or
 * "": the first), each unpacked into out[]; *n how many, *more whether
 * others follow. A damaged record is noted (tp_store_note_bad) and
 * skipped. 0 or an LMDB error (then nothing is left in out).
 */
int tp_task_page(tp_store_t *s, MDB_txn *txn, const char *after, Toolpool__McpTask **out, size_t max, size_t *n,
                 bool *more);

#endif
