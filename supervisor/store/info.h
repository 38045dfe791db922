/*
 * What a store holds and how big it is (`toolpool store info`, and the
 * store's lines of `toolpool stats`): the space of the file and the map
 * (store.h's tp_store_space), and its records by kind with their bytes,
 * counted in one read transaction, so that the figures are of one moment
 * and a running supervisor is never blocked.
 */
#ifndef TP_INFO_H
#define TP_INFO_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/* A count of records and the bytes of their keys and values. */
typedef struct {
    uint64_t n, bytes;
} tp_info_count_t;

/* The results of one outcome: "ok", or a failure's kind ("Timeout"...). */
typedef struct {
    char kind[32];
    tp_info_count_t c;
} tp_info_outcome_t;

#define TP_INFO_OUTCOMES 32

typedef struct {
    unsigned format;
    uint64_t created_us;
    tp_store_space_t space;
    tp_info_count_t results, checkpoints, steps, escalations, escalations_open, breakers, call_breakers, tool_breakers,
        inflight, claims, inflight_live, owners, owners_live, meta, tasks;
    tp_info_outcome_t outcomes[TP_INFO_OUTCOMES]; /* in the order first met; the rest counted as "other" */
    size_t n_outcomes;
    uint64_t undated;              /* results of a store older than their record time */
    uint64_t oldest_us, newest_us; /* of the dated results; 0 when none */
    char oldest_id[256], newest_id[256];
    uint64_t bad; /* records that did not unpack (counted, not broken down: `store check` names them) */
} tp_store_info_t;

/* Fills *in from the read transaction txn. 0 or an LMDB code. */
int tp_store_info(tp_store_t *s, MDB_txn *txn, tp_store_info_t *in);

#endif
