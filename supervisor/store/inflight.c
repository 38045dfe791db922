#include "inflight.h"

#include <string.h>

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
