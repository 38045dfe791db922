#include "escalate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "record.h"

int tp_escalate(tp_store_t *s, MDB_txn *txn, Toolpool__Escalation *e, char id[TP_ESCALATION_ID_MAX])
{
    MDB_dbi meta = tp_store_dbi(s, TP_DB_META);
    MDB_val k = {14, "escalation_seq"}, v;
    uint64_t seq = 0;
    int rc = tp_mdb(mdb_get(txn, meta, &k, &v));
    if (rc == 0) {
        /* A damaged sequence would hand out an id already taken, over its record. */
        char why[128];
        if (tp_record_check_raw(TP_DB_META, k.mv_data, k.mv_size, v.mv_size, why, sizeof why) != 0) {
            tp_store_note_bad(s, TP_DB_META, k.mv_data, k.mv_size, why);
            return TP_EPROTO;
        }
        memcpy(&seq, v.mv_data, sizeof seq);
    } else if (rc != MDB_NOTFOUND) {
        return rc;
    }
    seq++;
    v.mv_size = sizeof seq;
    v.mv_data = &seq;
    if ((rc = tp_mdb(mdb_put(txn, meta, &k, &v, 0))) != 0)
        return rc;
    snprintf(id, TP_ESCALATION_ID_MAX, "E%06llu", (unsigned long long)seq);
    e->id = id;
    e->created_unix_us = tp_unix_us();
    return tp_store_put_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &e->base);
}

int tp_escalation_blocked(tp_store_t *s, MDB_txn *txn, const char *id)
{
    Toolpool__Escalation *e;
    int rc = tp_store_get_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &toolpool__escalation__descriptor,
                              (ProtobufCMessage **)&e);
    if (rc)
        return rc == MDB_NOTFOUND ? 0 : rc;
    e->blocked++;
    rc = tp_store_put_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &e->base);
    protobuf_c_message_free_unpacked(&e->base, NULL);
    return rc;
}
