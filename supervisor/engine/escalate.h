/*
 * The escalation queue: calls handed to a person (the seed's human queue).
 *
 * A record holds the call, its args, its last error, the full trace and the
 * reason; ids are "E" and a sequence number kept in the store's meta, so
 * they are unique across every process sharing the store.
 */
#ifndef TP_ESCALATE_H
#define TP_ESCALATE_H

#include "store.h"
#include "toolpool.pb-c.h"

#define TP_ESCALATION_ID_MAX 32

/* Adds e (its id and created time are filled in) inside txn; id gets the new id. */
int tp_escalate(tp_store_t *s, MDB_txn *txn, Toolpool__Escalation *e, char id[TP_ESCALATION_ID_MAX]);
/* One more call answered CircuitOpen under escalation id. */
int tp_escalation_blocked(tp_store_t *s, MDB_txn *txn, const char *id);

#endif
