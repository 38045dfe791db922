#include "tasks.h"

#include <string.h>

#include "record.h"

int tp_task_put(tp_store_t *s, MDB_txn *txn, const Toolpool__McpTask *t)
{
    return tp_store_put_msg(s, txn, TP_DB_TASKS, t->task_id, strlen(t->task_id), &t->base);
}

int tp_task_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__McpTask **out)
{
    *out = NULL;
    if (!tp_store_has(s, TP_DB_TASKS))
        return MDB_NOTFOUND;
    return tp_store_get_msg(s, txn, TP_DB_TASKS, id, strlen(id), &toolpool__mcp_task__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_task_del(tp_store_t *s, MDB_txn *txn, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_TASKS), &k, NULL));
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int tp_task_page(tp_store_t *s, MDB_txn *txn, const char *after, Toolpool__McpTask **out, size_t max, size_t *n,
                 bool *more)
{
    *n = 0;
    *more = false;
    if (!tp_store_has(s, TP_DB_TASKS))
        return 0;
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_TASKS), &cur));
    if (rc)
        return rc;
    size_t alen = after ? strlen(after) : 0;
    MDB_val k = {alen, (void *)after}, v;
    rc = tp_mdb(mdb_cursor_get(cur, &k, &v, alen ? MDB_SET_RANGE : MDB_FIRST));
    if (rc == 0 && alen && k.mv_size == alen && memcmp(k.mv_data, after, alen) == 0)
        rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT));
    for (; rc == 0; rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if (*n == max) {
            *more = true;
            break;
        }
        char why[256];
        if (tp_record_unpack(TP_DB_TASKS, k.mv_data, k.mv_size, v.mv_data, v.mv_size, &toolpool__mcp_task__descriptor,
                             (ProtobufCMessage **)&out[*n], why, sizeof why) != 0) {
            tp_store_note_bad(s, TP_DB_TASKS, k.mv_data, k.mv_size, why); /* store check reports it */
            continue;
        }
        (*n)++;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND || rc == 0)
        return 0;
    for (size_t i = 0; i < *n; i++)
        toolpool__mcp_task__free_unpacked(out[i], NULL);
    *n = 0;
    return rc;
}
