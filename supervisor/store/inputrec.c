#include "inputrec.h"

#define INPUT_KEY "input"

int tp_input_record_get(tp_store_t *s, MDB_txn *txn, Toolpool__InputRecord **out)
{
    return tp_store_get_msg(s, txn, TP_DB_META, INPUT_KEY, sizeof INPUT_KEY - 1, &toolpool__input_record__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_input_record_put(tp_store_t *s, MDB_txn *txn, const Toolpool__InputRecord *r)
{
    return tp_store_put_msg(s, txn, TP_DB_META, INPUT_KEY, sizeof INPUT_KEY - 1, &r->base);
}
