/*
 * The supervisors working on a store now, and their scoreboards: what
 * `toolpool top`, `toolpool metrics` and `toolpool stats` read of a live
 * store. Each owner entry the store lists is checked alive (as the
 * supervisors check each other's claims), and its scoreboard (the memfd
 * its entry names, /proc/PID/fd/N) is mapped read-only, copied under its
 * seqlocks and unmapped: reading never blocks a supervisor. Each board's
 * running calls come oldest first.
 */
#ifndef TP_BOARDS_H
#define TP_BOARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scoreboard.h"
#include "store.h"

typedef struct {
    int32_t pid;
    char command[TP_SB_COMMAND]; /* its owner entry's, or its board's */
    uint64_t joined_unix_us;
    bool board;   /* its scoreboard was read (an older toolpool's, or one without memfd, has none) */
    int board_rc; /* why not: TP_ENOENT (none named, or gone), TP_EACCES (another user's), ... */
    tp_sb_snap_t snap;
} tp_live_t;

typedef struct {
    tp_live_t *v;
    size_t n;
} tp_lives_t;

/* The live supervisors of the store s, in txn, by pid. 0, or TP_ENOMEM, or an LMDB code. */
int tp_cli_lives(tp_store_t *s, MDB_txn *txn, tp_lives_t *out);
void tp_cli_lives_free(tp_lives_t *l);
/*
 * Text for a terminal, in place: the n bytes at s with every control
 * character (C0, DEL, and C1 as UTF-8 writes it) made '?'. Call ids and
 * jobs are clients' text, and reach an operator's terminal through top
 * and stats.
 */
void tp_cli_scrub(char *s, size_t n);

#endif
