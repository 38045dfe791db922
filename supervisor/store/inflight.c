#include "inflight.h"

#include <string.h>

#include "record.h"

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
    int rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_INFLIGHT), &k, NULL));
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int tp_inflight_each(tp_store_t *s, MDB_txn *txn, bool (*fn)(void *ctx, Toolpool__InFlight *f), void *ctx)
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_INFLIGHT), &cur));
    if (rc)
        return rc;
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__InFlight *f;
        char why[256];
        if (tp_record_unpack(TP_DB_INFLIGHT, k.mv_data, k.mv_size, v.mv_data, v.mv_size,
                             &toolpool__in_flight__descriptor, (ProtobufCMessage **)&f, why, sizeof why) != 0) {
            tp_store_note_bad(s, TP_DB_INFLIGHT, k.mv_data, k.mv_size, why); /* store check reports it */
            continue;
        }
        if (!fn(ctx, f))
            toolpool__in_flight__free_unpacked(f, NULL);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}
