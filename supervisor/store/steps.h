/*
 * A job's message list: the ids of its ended calls, in the order they
 * ended, in the store's "steps" database.
 *
 * The list used to live in the job's checkpoint record, which every ended
 * step rewrote whole: a job of n steps wrote n^2/2 ids, and an MCP session
 * (one job) slowed down with every call it made. Here each id is two small
 * records beside the checkpoint, written once:
 *
 *   'o' JOBHASH SEQ  -> the call's id       (the list, in order: SEQ is big-endian)
 *   'i' JOBHASH IDHASH -> SEQ               (whether, and where, an id is listed)
 *
 * JOBHASH and IDHASH are XXH3-128 digests of the job's and the call's whole
 * names (a job name and an id may each take a whole LMDB key). The
 * checkpoint keeps two counters: the SEQ the next id gets (calls_next) and
 * how many are listed (calls_listed). A store of format 2 kept the list in
 * the checkpoint (its repeated "calls"); tp_steps_migrate moves it here.
 */
#ifndef TP_STEPS_H
#define TP_STEPS_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "toolpool.pb-c.h"

/*
 * Lists id at the end of job's list, unless it is listed already (then
 * *added is false). cp is the checkpoint about to be written: its counters
 * move. 0 or an LMDB error.
 */
int tp_steps_add(tp_store_t *s, MDB_txn *txn, const char *job, const char *id, Toolpool__Checkpoint *cp, bool *added);

/* Takes id out of job's list, when it is there (*removed); cp's count follows. 0 or an LMDB error. */
int tp_steps_remove(tp_store_t *s, MDB_txn *txn, const char *job, const char *id, Toolpool__Checkpoint *cp,
                    bool *removed);

/* Takes job's whole list out. 0 or an LMDB error. */
int tp_steps_clear(tp_store_t *s, MDB_txn *txn, const char *job);

/*
 * Every id of job's list, in order: those a format-2 checkpoint still
 * holds (cp->calls), then the steps database's. *ids is one malloc'd block
 * (the pointers, then the strings): free(*ids). 0, TP_ENOMEM, TP_EPROTO (a bad
 * record, named in the store's last-bad note), or an LMDB error.
 */
int tp_steps_list(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp, char ***ids, size_t *n);

/* How many calls job's list holds. */
static inline size_t tp_steps_count(const Toolpool__Checkpoint *cp)
{
    return cp->n_calls + (size_t)cp->calls_listed;
}

/* Moves every format-2 checkpoint's list into the steps database (the store's upgrade to format 3). */
int tp_steps_migrate(tp_store_t *s, MDB_txn *txn);

/* Whether a steps record (key and value) is well formed; why not in why. */
bool tp_steps_record_ok(const void *key, size_t klen, const void *val, size_t vlen, char *why, size_t cap);

#endif
