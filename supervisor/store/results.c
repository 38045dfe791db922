#include "results.h"

#include <string.h>

int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r, const uint8_t *line, size_t len)
{
    Toolpool__StoredResult sr = TOOLPOOL__STORED_RESULT__INIT;
    sr.input_digest = r->input_digest;
    sr.line.data = (uint8_t *)line;
    sr.line.len = len;
    sr.ok = r->ok;
    sr.kind = r->kind;
    sr.attempts = r->attempts;
    sr.duration_us = r->duration_us;
    sr.ended_unix_us = tp_unix_us();
    return tp_store_put_msg(s, txn, TP_DB_RESULTS, r->id, strlen(r->id), &sr.base);
}

int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out)
{
    return tp_store_get_msg(s, txn, TP_DB_RESULTS, id, strlen(id), &toolpool__stored_result__descriptor,
                            (ProtobufCMessage **)out);
}
