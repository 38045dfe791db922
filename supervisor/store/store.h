/*
 * The store: one LMDB environment in a directory, shared by every toolpool
 * process on the machine that names the same directory.
 *
 * LMDB by its caveats (lmdb.h): one environment per process, opened after
 * exec (only the supervisor and the CLI open it; workers never do); every
 * named database opened once, at open, in a committed transaction; a map
 * that grows on MDB_MAP_FULL and follows other processes' growth on
 * MDB_MAP_RESIZED; stale reader slots of dead processes cleared at open.
 *
 * The supervisor writes once per loop turn (tp_store_begin/commit): a turn's
 * whole group of writes commits or none of it does.
 */
#ifndef TP_STORE_H
#define TP_STORE_H

#include <lmdb.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dbs.h"
#include "error.h"

#define TP_STORE_MAP_LIMIT (1ull << 40)

enum {
    TP_STORE_RDONLY = 1, /* inspection commands: no write, no create */
    TP_STORE_NOSYNC = 2, /* relaxed durability: a crash of the OS may lose the last commits */
    /* the only process with the store open (`store compact`): the open fails, errno EAGAIN, when another has it */
    TP_STORE_EXCLUSIVE = 4,
};

/* The file in a store's directory that every process holding the store open has flock'd (env.c). */
#define TP_STORE_LOCK_FILE "toolpool.lock"

typedef struct tp_store tp_store_t;

/*
 * An LMDB return in the one error space (error.h): LMDB's own codes are
 * negative already; a system error it passes on as a positive errno
 * (EIO, ENOSPC, ENOMEM) becomes its negative.
 */
static inline int tp_mdb(int rc)
{
    return rc > 0 ? -rc : rc;
}

/*
 * Opens (creating when writable) the store in dir, with its format record
 * checked and the store upgraded when it is of an older format (format.c).
 * NULL on failure with a message in err naming the directory and what to do.
 */
tp_store_t *tp_store_open(const char *dir, unsigned flags, char *err, size_t errlen);
/*
 * The same, but the format check is check(s, txn, err, errlen), run in the
 * transaction that opens the databases, before it commits: 0, or a code
 * with err set, and the open fails. tp_store_open is tp_store_open_with
 * and the format's check.
 */
typedef int (*tp_store_check_fn)(tp_store_t *s, MDB_txn *txn, char *err, size_t errlen);
tp_store_t *tp_store_open_with(const char *dir, unsigned flags, tp_store_check_fn check, char *err, size_t errlen);
/* Whether the store was opened TP_STORE_RDONLY. */
bool tp_store_rdonly(const tp_store_t *s);
/* The last bad record tp_store_note_bad noted, in words ("" when none). */
const char *tp_store_bad(const tp_store_t *s);
void tp_store_close(tp_store_t *s);
const char *tp_store_dir(const tp_store_t *s);

/* The default store directory: $TOOLPOOL_STORE, else ".toolpool" in the cwd. */
const char *tp_store_default_dir(void);

/*
 * Begins the write transaction of one turn. When the data has filled more
 * than half of the map, the map is doubled first (no transaction is open
 * then, as LMDB requires), so a turn meets MDB_MAP_FULL only at the map's
 * limit. 0 or an LMDB code, with err saying what.
 */
int tp_store_begin(tp_store_t *s, MDB_txn **txn, char *err, size_t errlen);
/*
 * The same, with room for at least need bytes of new pages: the map grows
 * first when it has less free (one record larger than half the map would
 * otherwise never fit). MDB_MAP_FULL when the limit leaves no such room.
 */
int tp_store_begin_room(tp_store_t *s, MDB_txn **txn, size_t need, char *err, size_t errlen);
/* The map's free bytes when the last write transaction began. */
size_t tp_store_room(const tp_store_t *s);
/* The longest key LMDB takes (ids, job names): mdb_env_get_maxkeysize. */
size_t tp_store_max_key(const tp_store_t *s);
/* Commits; on failure err names the store and the cause (a full disk too). */
int tp_store_commit(tp_store_t *s, MDB_txn *txn, char *err, size_t errlen);

/* One write transaction around apply(txn, ctx): begin, apply, commit. */
typedef int (*tp_store_apply_fn)(MDB_txn *txn, void *ctx);
int tp_store_write(tp_store_t *s, tp_store_apply_fn apply, void *ctx, char *err, size_t errlen);

/* A read transaction (end it with mdb_txn_abort). 0 or an LMDB code. */
int tp_store_read(tp_store_t *s, MDB_txn **txn);

MDB_dbi tp_store_dbi(const tp_store_t *s, tp_db_t db);
/*
 * Whether db holds no record as txn sees it: a question of the database's
 * header, so a call's path may skip the lookups and keys of a database
 * that is nearly always empty (the breakers). false when it cannot tell.
 * Kept for the transaction until a put to db through tp_store_reserve or
 * tp_store_put_msg (the ways a breaker is written). Only the loop's thread
 * asks.
 */
bool tp_store_db_empty(tp_store_t *s, MDB_txn *txn, tp_db_t db);

/* Packs msg into db[key] (MDB_RESERVE: packed straight into the page). */
int tp_store_put_msg(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen,
                     const ProtobufCMessage *msg);
/* Room for a value of n bytes under key, at *at, to fill before the next write. 0, or an LMDB error. */
int tp_store_reserve(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen, size_t n, uint8_t **at);
/*
 * Reads db[key], unpacks it with desc and checks it (supervisor/store/record.h).
 * Returns 0 and *out (free with protobuf_c_message_free_unpacked),
 * MDB_NOTFOUND, or TP_EPROTO for a record that does not unpack or is not
 * sane; tp_store_strerror(TP_EPROTO) then names the record and what is wrong.
 */
int tp_store_get_msg(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen,
                     const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out);

/*
 * Notes a bad record found in db under key, and why: the next
 * tp_store_strerror(TP_EPROTO) names it. tp_store_get_msg calls it; so does a
 * reader of a raw value.
 */
void tp_store_note_bad(tp_store_t *s, tp_db_t db, const void *key, size_t klen, const char *why);
/*
 * Whether the store has database db: all do, but for the steps database of
 * a store of format 2 opened read-only (its lists are in its checkpoints).
 */
bool tp_store_has(const tp_store_t *s, tp_db_t db);

/* What an LMDB or errno code means for a person, with what to do about it. */
const char *tp_store_strerror(const tp_store_t *s, int rc, char *buf, size_t cap);

/* Unmaps the data pages this process has touched (between transactions only). */
void tp_store_trim(tp_store_t *s);

/*
 * How big the store is, as `store info` shows it: in bytes the data file
 * (file), the map (map) and what of it is used (used, up to the last page
 * written); the freelist's pages (free pages: space a write reuses, and
 * that only `store compact` gives back), and each database's records and
 * pages. From the read transaction txn.
 */
typedef struct {
    uint64_t file, map, used, page, free_pages;
    uint64_t entries[TP_DB__COUNT], pages[TP_DB__COUNT];
} tp_store_space_t;
int tp_store_space(tp_store_t *s, MDB_txn *txn, tp_store_space_t *sp);

/*
 * Writes a compacted copy of the store as to/data.mdb, in an existing
 * empty directory: every record, in key order, into pages filled one after
 * another (no free pages, none half empty), and syncs it. 0, or a code
 * with err naming both.
 */
int tp_store_copy_compact(tp_store_t *s, const char *to, char *err, size_t errlen);

/* Clears reader slots left by dead processes; returns how many. */
int tp_store_reader_check(tp_store_t *s);

/* Wall-clock microseconds: the time base of everything persisted. */
uint64_t tp_unix_us(void);

#endif
