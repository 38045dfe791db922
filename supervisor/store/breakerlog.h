/*
 * A breaker's history: each open and close (and a tool breaker's
 * half-open), with its time, cause and the calls it refused while open,
 * kept in the breaker's own record, the last TP_BREAKER_HISTORY_MAX of
 * them. Written only at a transition, never on a call that changes no
 * state. A same-call breaker that has a history is kept, closed, when it
 * closes (rather than deleted), so `toolpool breakers show` can tell what
 * happened to it; one that never opened is still dropped at its close.
 *
 * Every function works inside the caller's write transaction.
 */
#ifndef TP_BREAKERLOG_H
#define TP_BREAKERLOG_H

#include <lmdb.h>
#include <stdint.h>

#include "store.h"
#include "toolpool.pb-c.h"

#define TP_BREAKER_HISTORY_MAX 16
/* The cause a reset by a person leaves in the history. */
#define TP_BREAKER_RESET_CAUSE "reset by a person"

/* Room for a record's history with one more entry: what a record being written points into. */
typedef struct {
    Toolpool__BreakerEvent ev;
    Toolpool__BreakerEvent *v[TP_BREAKER_HISTORY_MAX];
} tp_breaker_history_t;

/*
 * *hist and *n become old's entries (the newest of them) plus one: state
 * at now, cause (not copied: valid until the record is written) and
 * refused. They point into h and old.
 */
void tp_breaker_history_add(tp_breaker_history_t *h, Toolpool__BreakerEvent *const *old, size_t n_old,
                            Toolpool__BreakerState state, const char *cause, uint64_t refused, uint64_t now,
                            Toolpool__BreakerEvent ***hist, size_t *n);

/*
 * Closes the same-call breaker cb stored under key: its failures, refusals
 * and escalation forgotten. One that was open, or has a history, is
 * rewritten closed with the close in its history (cause; the calls it
 * refused); one that never opened is deleted; one closed already with
 * nothing counted is left as it is.
 */
int tp_breaker_call_close(tp_store_t *s, MDB_txn *txn, const MDB_val *key, const Toolpool__CallBreaker *cb,
                          const char *cause, uint64_t now);

/* The same for a tool breaker: closed, its window emptied, its probes forgotten. */
int tp_breaker_tool_close(tp_store_t *s, MDB_txn *txn, const MDB_val *key, const Toolpool__ToolBreaker *tb,
                          const char *cause, uint64_t now);

#endif
