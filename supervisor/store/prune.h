/*
 * Pruning a store: dropping the recorded results a selector names, with
 * their places in their jobs' lists, and the checkpoint of a job left with
 * no result (`toolpool store prune`, and the retention of run, serve and
 * mcp). Each result goes as `toolpool forget` drops one (records.h's
 * tp_records_forget), so that a pruned call is, to the next run, a call
 * never made.
 *
 * The work is done in batches, each in the caller's write transaction, so
 * that a supervisor writing the same store waits at most one batch, and a
 * prune killed at any point leaves a store whose every committed batch is
 * whole; the next prune finds what is left. Never pruned: the result of a
 * call with an open escalation (a person has yet to look at it), and the
 * results and checkpoint of a job a live supervisor has a call of in
 * flight (owners.h says who is alive); in-flight markers and claims are
 * never touched.
 */
#ifndef TP_PRUNE_H
#define TP_PRUNE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "toolpool.pb-c.h"

enum { TP_PRUNE_ANY = 0, TP_PRUNE_OK, TP_PRUNE_FAILED };

/* Which results go: those that match every selector set. */
typedef struct {
    uint64_t before_us;      /* recorded before this time (0: any time); an undated result never matches */
    const char *const *jobs; /* of these jobs, sorted by strcmp (NULL: of any job) */
    size_t n_jobs;
    int outcome;      /* TP_PRUNE_OK, TP_PRUNE_FAILED, or TP_PRUNE_ANY */
    const char *kind; /* failed with this kind ("Timeout"); NULL: any */
    const char *tool; /* of this tool; NULL: any */
} tp_prune_sel_t;

/* Where a prune is, and what it has done so far. Zero it to start. */
typedef struct {
    char at[512]; /* the last key looked at: the next batch starts past it */
    size_t at_len;
    bool started, done;
    uint64_t results, bytes, ok, failed, checkpoints;
    uint64_t kept_escalated, kept_live, undated;
} tp_prune_t;

/*
 * One batch: looks at the results past p's place until max of them match
 * (or the end: p->done), and drops them in txn (dry: only counts them),
 * with the checkpoints of their jobs left empty. each, when not NULL, is
 * told of every result that goes, before it does. 0, or an LMDB code, a
 * TP_E* code (the transaction is then the caller's to abort, and p's
 * counts are past what it held).
 */
int tp_prune_batch(tp_store_t *s, MDB_txn *txn, const tp_prune_sel_t *sel, tp_prune_t *p, size_t max, bool dry,
                   void (*each)(void *ctx, const Toolpool__StoredResult *sr), void *ctx);

/*
 * A whole prune, batch after batch, each in its own write transaction,
 * until the end or, between batches, *stop (a signal's flag; NULL: none).
 * err names the store and what failed. 0, or the code that stopped it
 * (every batch before it committed).
 */
int tp_prune_run(tp_store_t *s, const tp_prune_sel_t *sel, tp_prune_t *p, const volatile sig_atomic_t *stop, char *err,
                 size_t errlen);

/* The results a batch takes at most: one batch is a write of about a megabyte. */
#define TP_PRUNE_BATCH 1000

#endif
