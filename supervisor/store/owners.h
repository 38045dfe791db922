/*
 * Owners: the supervisors working on one store now.
 *
 * Several supervisors may share a store (a `serve` beside a `run`, one
 * `toolpool mcp` per MCP host session), and none may run a call another
 * one is running. A supervisor that shares the store claims each call in
 * the same write transaction that checks it (an in-flight marker naming
 * it as the owner); a marker whose owner is alive means "running
 * elsewhere: wait for its record", one whose owner is gone was orphaned by
 * a crash. Alone on its store a supervisor claims nothing (it marks only
 * the calls of tools that are not idempotent, as before); it learns of a
 * newcomer from meta/"owners" at its next transaction, and then claims
 * every call it holds before it acknowledges the newcomer, who starts
 * nothing until every live owner has.
 *
 * LMDB serializes write transactions across processes, so a check and a
 * claim in one of them cannot interleave with another supervisor's.
 */
#ifndef TP_OWNERS_H
#define TP_OWNERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"
#include "toolpool.pb-c.h"

/* A process, told apart from a later one with the same pid. */
typedef struct {
    int32_t pid;
    uint64_t start; /* /proc/PID/stat starttime: clock ticks after boot */
    char boot[40];  /* /proc/sys/kernel/random/boot_id */
    char board[48]; /* its scoreboard, as others open it (/proc/PID/fd/N); "": none */
} tp_owner_id_t;

typedef struct {
    uint64_t generation; /* bumped by each arrival */
    uint64_t joined;     /* the generation this owner's arrival made */
    size_t others;       /* other owners alive now */
    bool peers_ready;    /* every other live owner has seen this one's arrival */
    size_t dropped;      /* owners this sync found gone (their calls' markers are orphans now) */
    /*
     * The owners record as a sync found it with this owner alone in it
     * (seen_len 0: not kept): the same bytes again mean the same state,
     * with nothing to check (no other owner's liveness) and nothing to
     * write, so the sync of each write transaction is one lookup.
     */
    uint8_t seen[256];
    size_t seen_len;
} tp_owners_state_t;

/* This process. 0, or -1 (no /proc). */
int tp_owner_self(tp_owner_id_t *me);
/* Whether pid, start, boot is me. */
bool tp_owner_is(const tp_owner_id_t *me, int32_t pid, uint64_t start, const char *boot);
/* Whether pid, start, boot is a process running now (me included). */
bool tp_owner_alive(const tp_owner_id_t *me, int32_t pid, uint64_t start, const char *boot);

/*
 * In txn: joins (st->joined 0: adds me, with a new generation), and drops
 * owners that are gone. Fills st. Writes only when something changed.
 * 0 or an LMDB code.
 */
int tp_owners_sync(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, tp_owners_state_t *st);
/* In txn: I have claimed my live calls as of generation. */
int tp_owners_ack(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, uint64_t generation);
/* What an owner is doing, for `stats` on a live store (toolpool.proto's Owner, fields 7 to 12). */
typedef struct {
    const char *command; /* run, serve or mcp */
    uint64_t total;      /* 0: not known */
    uint64_t done;
    uint64_t running;
    uint64_t waiting;
} tp_owner_status_t;

/* In txn: my entry says status (and when). */
int tp_owners_status(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, const tp_owner_status_t *status);
/* In txn: I leave the store. */
int tp_owners_leave(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me);
/* The owners' record (*out NULL when there is none; free with toolpool__owners__free_unpacked). 0 or an LMDB code. */
int tp_owners_read(tp_store_t *s, MDB_txn *txn, Toolpool__Owners **out);
/* The generation now, from a read transaction; 0 when none. */
int tp_owners_generation(tp_store_t *s, MDB_txn *txn, uint64_t *generation);

#endif
