/*
 * The Prometheus text exposition (0.0.4) of scoreboards: what `serve`'s
 * /metrics and `toolpool metrics --store DIR` print, from one renderer.
 *
 * Each metric's HELP and TYPE come once, then its samples for every board
 * given: with labelled, each sample carries its supervisor's pid and
 * command (`toolpool metrics`: several supervisors may share a store);
 * without, none (/metrics: the serve's own board alone).
 */
#ifndef TP_METRICS_TEXT_H
#define TP_METRICS_TEXT_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "scoreboard.h"
#include "store.h"

/* The boards' metrics: calls by tool and outcome, attempts, retries, latency, in flight, queue, workers, commits. */
void tp_metrics_text(tp_buf_t *b, const tp_sb_snap_t *const *boards, size_t n, bool labelled);

/* The store's: breakers by type and state, each tool's breaker, escalations. In txn; 0 or an LMDB code. */
int tp_metrics_store_text(tp_buf_t *b, tp_store_t *s, MDB_txn *txn);

/* HELP and TYPE of one metric. */
void tp_metrics_head(tp_buf_t *b, const char *name, const char *type, const char *help);
/* A label value, escaped as the text format wants (backslash, quote, newline). */
void tp_metrics_label(tp_buf_t *b, const char *v);

#endif
