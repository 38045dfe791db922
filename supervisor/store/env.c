#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "record.h"

#define MAP_INITIAL (64ull << 20)
#define MAX_READERS 512

struct tp_store {
    MDB_env *env;
    MDB_dbi dbi[TP_DB__COUNT];
    bool no_steps; /* a store of format 2, read-only: no steps database */
    bool no_tasks; /* a store no toolpool with MCP tasks has written, read-only: no tasks database */
    unsigned flags;
    size_t mapsize;
    size_t limit;                 /* the map never grows past this: $TOOLPOOL_STORE_LIMIT, else 1 TiB */
    size_t room;                  /* the map's free bytes when the last write transaction began */
    unsigned long map_lo, map_hi; /* where data.mdb is mapped, for tp_store_trim */
    size_t map_for;               /* the mapsize it was found for */
    int lock_fd;                  /* DIR/toolpool.lock, flock'd for as long as the store is open (-1: none) */
    /* tp_store_db_empty's answers in one transaction (a put to db clears its bit) */
    const MDB_txn *empty_txn;
    size_t empty_id;
    unsigned empty_known, empty_is;
    char bad[512]; /* the last bad record read, for tp_store_strerror(TP_EPROTO) */
    char dir[PATH_MAX];
};

uint64_t tp_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *tp_store_default_dir(void)
{
    const char *env = getenv("TOOLPOOL_STORE");
    return env && *env ? env : ".toolpool";
}

size_t tp_store_max_key(const tp_store_t *s)
{
    return (size_t)mdb_env_get_maxkeysize(s->env);
}

const char *tp_store_dir(const tp_store_t *s)
{
    return s->dir;
}

MDB_dbi tp_store_dbi(const tp_store_t *s, tp_db_t db)
{
    return s->dbi[db];
}

/*
 * A call asks several times a transaction; the answer is kept for the
 * transaction (its address and id: LMDB gives every write transaction the
 * same address, the next id; and forgotten at every begin through the
 * store, as an aborted one's successor has its address and id too) until
 * a put to db, after which it is read again. A delete keeps it: a
 * database said to hold something may then be empty, which costs only the
 * lookups it saves.
 */
bool tp_store_db_empty(tp_store_t *s, MDB_txn *txn, tp_db_t db)
{
    size_t id = mdb_txn_id(txn);
    unsigned bit = 1u << db;
    if (s->empty_txn != txn || s->empty_id != id) {
        s->empty_txn = txn;
        s->empty_id = id;
        s->empty_known = 0;
    }
    if (s->empty_known & bit)
        return s->empty_is & bit;
    MDB_stat st;
    bool empty = mdb_stat(txn, s->dbi[db], &st) == 0 && st.ms_entries == 0;
    s->empty_known |= bit;
    s->empty_is = empty ? s->empty_is | bit : s->empty_is & ~bit;
    return empty;
}

bool tp_store_has(const tp_store_t *s, tp_db_t db)
{
    return !(db == TP_DB_STEPS && s->no_steps) && !(db == TP_DB_TASKS && s->no_tasks);
}

bool tp_store_rdonly(const tp_store_t *s)
{
    return s->flags & TP_STORE_RDONLY;
}

const char *tp_store_bad(const tp_store_t *s)
{
    return s->bad;
}

/*
 * Opens every named database in one transaction, runs the format's check
 * in it, and commits. Opened read-only, a store without a steps database
 * is marked so (format 2: the check decides whether that is its format),
 * and so is one without a tasks database (no toolpool that keeps MCP
 * tasks has written to it: it has none, whatever its format).
 */
static int open_dbs(tp_store_t *s, tp_store_check_fn check, char *err, size_t errlen)
{
    bool rdonly = s->flags & TP_STORE_RDONLY;
    MDB_txn *txn;
    int rc = tp_mdb(mdb_txn_begin(s->env, NULL, rdonly ? MDB_RDONLY : 0, &txn));
    if (rc) {
        snprintf(err, errlen, "%s: cannot begin a transaction: %s", s->dir, tp_strerror(rc));
        return rc;
    }
    for (int i = 0; i < TP_DB__COUNT; i++) {
        rc = tp_mdb(mdb_dbi_open(txn, tp_store_db_name(i), rdonly ? 0 : MDB_CREATE, &s->dbi[i]));
        if (rc == MDB_NOTFOUND && rdonly && i == TP_DB_STEPS) {
            s->no_steps = true; /* format 2: the check decides */
            rc = 0;
        }
        if (rc == MDB_NOTFOUND && rdonly && i == TP_DB_TASKS) {
            s->no_tasks = true; /* the database came later than the format: an empty one reads the same */
            rc = 0;
        }
        if (rc) {
            snprintf(err, errlen, "%s: cannot open database %s: %s%s", s->dir, tp_store_db_name(i), tp_strerror(rc),
                     rc == MDB_NOTFOUND ? " (not a toolpool store, or one of an older format)" : "");
            mdb_txn_abort(txn);
            return rc;
        }
    }
    rc = check ? check(s, txn, err, errlen) : 0;
    if (rc) {
        mdb_txn_abort(txn);
        return rc;
    }
    rc = tp_mdb(mdb_txn_commit(txn));
    if (rc)
        snprintf(err, errlen, "%s: cannot commit: %s", s->dir, tp_strerror(rc));
    return rc;
}

/*
 * DIR/toolpool.lock: every process that opens the store holds a shared
 * flock on it while the store is open, taken before LMDB opens its
 * environment; `store compact` takes it exclusively (TP_STORE_EXCLUSIVE),
 * so that it swaps the store's data file only when no process has it
 * mapped, and a process that comes meanwhile waits here, before LMDB has
 * seen the old file. A store on a file system where the lock cannot be
 * created (read-only) is opened without it, read-only.
 */
static int take_lock(tp_store_t *s, char *err, size_t errlen)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", s->dir, TP_STORE_LOCK_FILE);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lock_fd < 0 && (s->flags & TP_STORE_RDONLY) && !(s->flags & TP_STORE_EXCLUSIVE))
        return 0;
    if (s->lock_fd < 0) {
        snprintf(err, errlen, "%s: cannot open %s: %s", s->dir, path, strerror(errno));
        return -1;
    }
    int how = (s->flags & TP_STORE_EXCLUSIVE) ? LOCK_EX | LOCK_NB : LOCK_SH;
    int rc;
    while ((rc = flock(s->lock_fd, how)) < 0 && errno == EINTR)
        ;
    if (rc == 0)
        return 0;
    int e = errno;
    if (e == EWOULDBLOCK)
        snprintf(err, errlen, "%s: the store is open in another process", s->dir);
    else
        snprintf(err, errlen, "%s: cannot lock %s: %s", s->dir, path, strerror(e));
    close(s->lock_fd);
    s->lock_fd = -1;
    return e == EWOULDBLOCK ? TP_EAGAIN : -1;
}

static const char *lmdb_says(int rc)
{
    return mdb_strerror(rc);
}

tp_store_t *tp_store_open_with(const char *dir, unsigned flags, tp_store_check_fn check, char *err, size_t errlen)
{
    tp_strerror_range(MDB_KEYEXIST, MDB_LAST_ERRCODE, lmdb_says);
    tp_store_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->flags = flags;
    if (!(flags & TP_STORE_RDONLY) && mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create the store directory: %s", dir, strerror(errno));
        free(s);
        return NULL;
    }
    if ((flags & TP_STORE_RDONLY) && access(dir, F_OK) < 0) {
        snprintf(err, errlen, "%s: no store here (%s); run toolpool run --store %s first", dir, strerror(errno), dir);
        free(s);
        return NULL;
    }
    s->lock_fd = -1;
    int lrc = take_lock(s, err, errlen);
    if (lrc != 0) {
        free(s);
        errno = lrc == TP_EAGAIN ? EAGAIN : EIO; /* EAGAIN: TP_STORE_EXCLUSIVE, and another process has it */
        return NULL;
    }
    int rc = tp_mdb(mdb_env_create(&s->env));
    if (rc == 0)
        rc = tp_mdb(mdb_env_set_maxdbs(s->env, TP_DB__COUNT + 2));
    if (rc == 0)
        rc = tp_mdb(mdb_env_set_maxreaders(s->env, MAX_READERS));
    /* The map is virtual: the file grows only with what is written. */
    s->limit = TP_STORE_MAP_LIMIT;
    const char *lim = getenv("TOOLPOOL_STORE_LIMIT");
    if (lim && *lim) {
        char *end;
        unsigned long long v = strtoull(lim, &end, 10);
        if (*end || v < 65536) {
            snprintf(err, errlen, "TOOLPOOL_STORE_LIMIT: expected a number of bytes >= 65536, got \"%s\"", lim);
            free(s);
            return NULL;
        }
        s->limit = (size_t)v;
    }
    s->mapsize = MAP_INITIAL < s->limit ? MAP_INITIAL : s->limit;
    if (rc == 0)
        rc = tp_mdb(mdb_env_set_mapsize(s->env, s->mapsize));
    unsigned envflags = MDB_NOTLS | MDB_NORDAHEAD | ((flags & TP_STORE_RDONLY) ? MDB_RDONLY : 0) |
                        ((flags & TP_STORE_NOSYNC) ? MDB_NOSYNC : 0);
    if (rc == 0)
        rc = tp_mdb(mdb_env_open(s->env, dir, envflags, 0644));
    if (rc) {
        snprintf(err, errlen, "%s: cannot open the store: %s", dir, tp_strerror(rc));
        goto fail;
    }
    MDB_envinfo info;
    mdb_env_info(s->env, &info);
    s->mapsize = info.me_mapsize;
    int dead;
    mdb_reader_check(s->env, &dead);
    if (open_dbs(s, check, err, errlen) != 0)
        goto fail;
    return s;
fail:
    if (s->env)
        mdb_env_close(s->env);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    free(s);
    return NULL;
}

void tp_store_close(tp_store_t *s)
{
    if (s == NULL)
        return;
    mdb_env_close(s->env);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* the flock goes with it, after the environment */
    free(s);
}

/*
 * LMDB reports a write cut short by a full disk as EIO; the free space on
 * the store's filesystem tells the two apart.
 */
static bool disk_nearly_full(const char *dir)
{
    struct statvfs st;
    return statvfs(dir, &st) == 0 && (uint64_t)st.f_bavail * st.f_frsize < (8u << 20);
}

const char *tp_store_strerror(const tp_store_t *s, int rc, char *buf, size_t cap)
{
    if (rc == MDB_MAP_FULL)
        snprintf(buf, cap,
                 "the store reached its size limit (%zu bytes; raise TOOLPOOL_STORE_LIMIT, or free "
                 "space and rerun: nothing recorded is lost)",
                 s->limit);
    else if (rc == TP_ENOSPC || (rc == TP_EIO && disk_nearly_full(s->dir)))
        snprintf(buf, cap, "the disk is full (free space and rerun: nothing recorded is lost)");
    else if (rc == TP_EPROTO && s->bad[0]) {
        /* Cut to fit the caller's buffer when the record's name and the path are long. */
        if (snprintf(buf, cap, "a corrupt record: %s (`toolpool store check --store %s` lists every bad record)",
                     s->bad, s->dir) >= (int)cap)
            buf[cap - 1] = '\0';
    } else if (rc == TP_EPROTO)
        snprintf(buf, cap, "a corrupt record");
    else
        snprintf(buf, cap, "%s", tp_strerror(rc));
    return buf;
}

/*
 * LMDB reads through a shared, read-only map of the data file: every page a
 * write has looked at stays mapped, so a growing store would grow the
 * process's resident set with it. Dropping the mapping's pages (they stay
 * in the page cache; the next read maps them again) keeps it flat. Safe at
 * any time, inside a transaction too: the map is shared and read-only, so
 * a page dropped is only read again from the page cache when next touched.
 */
/* Where this process maps data.mdb, from /proc (LMDB says only with MDB_FIXEDMAP). */
static void find_map(tp_store_t *s)
{
    char data[PATH_MAX + 16], real[PATH_MAX], line[PATH_MAX + 128];
    s->map_lo = s->map_hi = 0;
    s->map_for = s->mapsize;
    snprintf(data, sizeof data, "%s/data.mdb", s->dir);
    if (realpath(data, real) == NULL)
        return;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL)
        return;
    size_t rlen = strlen(real);
    while (fgets(line, sizeof line, maps)) {
        size_t n = strlen(line);
        while (n > 0 && line[n - 1] == '\n')
            line[--n] = 0;
        unsigned long lo, hi;
        if (n >= rlen && strcmp(line + n - rlen, real) == 0 && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            s->map_lo = lo;
            s->map_hi = hi;
        }
    }
    fclose(maps);
}

void tp_store_trim(tp_store_t *s)
{
    if (s->map_for != s->mapsize || s->map_hi == 0)
        find_map(s); /* the map moves when it grows */
    if (s->map_hi > s->map_lo)
        madvise((void *)s->map_lo, s->map_hi - s->map_lo, MADV_DONTNEED);
}

int tp_store_reader_check(tp_store_t *s)
{
    int dead = 0;
    mdb_reader_check(s->env, &dead);
    return dead;
}

/* Another process grew the map: adopt its size (no transaction is open here). */
static int adopt_mapsize(tp_store_t *s)
{
    int rc = tp_mdb(mdb_env_set_mapsize(s->env, 0));
    MDB_envinfo info;
    if (rc == 0 && mdb_env_info(s->env, &info) == 0)
        s->mapsize = info.me_mapsize;
    return rc;
}

int tp_store_read(tp_store_t *s, MDB_txn **txn)
{
    s->empty_known = 0; /* a new transaction: after an abort, the next has the aborted one's address and id */
    int rc = tp_mdb(mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn));
    if (rc == MDB_MAP_RESIZED && adopt_mapsize(s) == 0)
        rc = tp_mdb(mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn));
    return rc;
}

int tp_store_begin(tp_store_t *s, MDB_txn **txn, char *err, size_t errlen)
{
    return tp_store_begin_room(s, txn, 0, err, errlen);
}

int tp_store_begin_room(tp_store_t *s, MDB_txn **txn, size_t need, char *err, size_t errlen)
{
    if (s->flags & TP_STORE_RDONLY) {
        snprintf(err, errlen, "%s: opened read-only", s->dir);
        return TP_EACCES;
    }
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(s->env, &info) == 0 && mdb_env_stat(s->env, &st) == 0) {
        s->mapsize = info.me_mapsize;
        size_t used = (info.me_last_pgno + 1) * (size_t)st.ms_psize, grown = s->mapsize;
        /* Doubled while over half full, or short of what the caller will write, up to the limit. */
        while ((used > grown / 2 || grown - used < need) && grown < s->limit)
            grown = grown * 2 < s->limit ? grown * 2 : s->limit;
        if (grown != s->mapsize && mdb_env_set_mapsize(s->env, grown) == 0)
            s->mapsize = grown;
        s->room = s->mapsize > used ? s->mapsize - used : 0;
        if (s->room < need) {
            snprintf(err, errlen,
                     "%s: a write of %zu bytes does not fit in the store's size limit (%zu bytes; "
                     "$TOOLPOOL_STORE_LIMIT raises it)",
                     s->dir, need, s->limit);
            return MDB_MAP_FULL;
        }
    }
    s->empty_known = 0; /* a new transaction: after an abort, the next has the aborted one's address and id */
    int rc = tp_mdb(mdb_txn_begin(s->env, NULL, 0, txn));
    if (rc == MDB_MAP_RESIZED && adopt_mapsize(s) == 0)
        rc = tp_mdb(mdb_txn_begin(s->env, NULL, 0, txn));
    if (rc)
        snprintf(err, errlen, "%s: cannot begin a write: %s", s->dir, tp_strerror(rc));
    return rc;
}

size_t tp_store_room(const tp_store_t *s)
{
    return s->room;
}

int tp_store_commit(tp_store_t *s, MDB_txn *txn, char *err, size_t errlen)
{
    int rc = tp_mdb(mdb_txn_commit(txn));
    if (rc) {
        char why[256];
        snprintf(err, errlen, "%s: cannot commit: %s", s->dir, tp_store_strerror(s, rc, why, sizeof why));
    }
    return rc;
}

int tp_store_write(tp_store_t *s, tp_store_apply_fn apply, void *ctx, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = tp_store_begin(s, &txn, err, errlen);
    if (rc)
        return rc;
    rc = apply(txn, ctx);
    if (rc) {
        mdb_txn_abort(txn);
        char why[256];
        snprintf(err, errlen, "%s: %s", s->dir, tp_store_strerror(s, rc, why, sizeof why));
        return rc;
    }
    return tp_store_commit(s, txn, err, errlen);
}

int tp_store_reserve(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen, size_t n, uint8_t **at)
{
    MDB_val k = {klen, (void *)key}, v = {n, NULL};
    s->empty_known &= ~(1u << db);
    int rc = tp_mdb(mdb_put(txn, s->dbi[db], &k, &v, MDB_RESERVE));
    *at = rc ? NULL : v.mv_data;
    return rc;
}

int tp_store_put_msg(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen, const ProtobufCMessage *msg)
{
    MDB_val k = {klen, (void *)key}, v;
    v.mv_size = protobuf_c_message_get_packed_size(msg);
    s->empty_known &= ~(1u << db);
    int rc = tp_mdb(mdb_put(txn, s->dbi[db], &k, &v, MDB_RESERVE));
    if (rc)
        return rc;
    if (protobuf_c_message_pack(msg, v.mv_data) != v.mv_size) {
        tp_store_note_bad(s, db, key, klen, "it packed to other than its size");
        return TP_EPROTO;
    }
    return 0;
}

void tp_store_note_bad(tp_store_t *s, tp_db_t db, const void *key, size_t klen, const char *why)
{
    char name[300];
    snprintf(s->bad, sizeof s->bad, "%s: %s", tp_record_name(db, key, klen, name, sizeof name), why);
}

int tp_store_get_msg(tp_store_t *s, MDB_txn *txn, tp_db_t db, const void *key, size_t klen,
                     const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    MDB_val k = {klen, (void *)key}, v;
    *out = NULL;
    int rc = tp_mdb(mdb_get(txn, s->dbi[db], &k, &v));
    if (rc)
        return rc;
    char why[256];
    rc = tp_record_unpack(db, key, klen, v.mv_data, v.mv_size, desc, out, why, sizeof why);
    if (rc)
        tp_store_note_bad(s, db, key, klen, why);
    return rc;
}

int tp_store_space(tp_store_t *s, MDB_txn *txn, tp_store_space_t *sp)
{
    memset(sp, 0, sizeof *sp);
    MDB_envinfo info;
    MDB_stat st;
    int rc = tp_mdb(mdb_env_info(s->env, &info));
    if (rc == 0)
        rc = tp_mdb(mdb_env_stat(s->env, &st));
    if (rc)
        return rc;
    sp->page = st.ms_psize;
    sp->map = info.me_mapsize;
    sp->used = (info.me_last_pgno + 1) * (uint64_t)st.ms_psize;
    char path[PATH_MAX + 16];
    struct stat fs;
    snprintf(path, sizeof path, "%s/data.mdb", s->dir);
    if (stat(path, &fs) == 0)
        sp->file = (uint64_t)fs.st_size;
    /* The freelist (LMDB's database 0): each value is a count of pages, then their numbers (mdb_stat.c -f). */
    MDB_cursor *cur;
    if ((rc = tp_mdb(mdb_cursor_open(txn, 0, &cur))) != 0)
        return rc;
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT)))
        if (v.mv_size >= sizeof(size_t))
            sp->free_pages += *(const size_t *)v.mv_data;
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND)
        return rc;
    for (int db = 0; db < TP_DB__COUNT; db++) {
        if (!tp_store_has(s, db))
            continue;
        if ((rc = tp_mdb(mdb_stat(txn, s->dbi[db], &st))) != 0)
            return rc;
        sp->entries[db] = st.ms_entries;
        sp->pages[db] = st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
    }
    return 0;
}

/*
 * The records of every database, in key order, into a new environment at
 * to, each put with MDB_APPEND: LMDB then fills each page before it starts
 * the next. mdb_env_copy2's MDB_CP_COMPACT drops the free pages but copies
 * each page as full as it was, and a prune leaves its leaves sparse: its copy of a 20,000-call store pruned to 2,000 came out 25%
 * over a fresh store of those 2,000 (1.55 MB against 1.24 MB), this one at
 * 0.48 MB, under half of it (a fresh store fills its pages in the order
 * calls end, not in key order). A commit every
 * COPY_COMMIT records keeps each transaction's dirty pages few.
 */
#define COPY_COMMIT 50000

/* db's records into the copy's transaction *txn, which is committed and begun again every COPY_COMMIT records (*n). */
static int copy_db(tp_store_t *s, MDB_txn *from, MDB_env *env, MDB_txn **txn, size_t *n, tp_db_t db)
{
    MDB_dbi to;
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_dbi_open(*txn, tp_store_db_name(db), MDB_CREATE, &to));
    if (rc == 0)
        rc = tp_mdb(mdb_cursor_open(from, s->dbi[db], &cur));
    if (rc)
        return rc;
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if ((rc = tp_mdb(mdb_put(*txn, to, &k, &v, MDB_APPEND))) != 0)
            break;
        if (++*n % COPY_COMMIT == 0) {
            rc = tp_mdb(mdb_txn_commit(*txn));
            *txn = NULL;
            if (rc || (rc = tp_mdb(mdb_txn_begin(env, NULL, 0, txn))) != 0)
                break;
        }
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int tp_store_copy_compact(tp_store_t *s, const char *to, char *err, size_t errlen)
{
    MDB_env *env = NULL;
    MDB_txn *from = NULL;
    int rc = tp_mdb(mdb_env_create(&env));
    if (rc == 0)
        rc = tp_mdb(mdb_env_set_maxdbs(env, TP_DB__COUNT + 2));
    if (rc == 0)
        rc = tp_mdb(mdb_env_set_mapsize(env, s->mapsize));
    if (rc == 0)
        rc = tp_mdb(mdb_env_open(env, to, MDB_NOTLS | MDB_NOSYNC, 0644));
    MDB_txn *txn = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = tp_store_read(s, &from);
    if (rc == 0)
        rc = tp_mdb(mdb_txn_begin(env, NULL, 0, &txn));
    for (int db = 0; rc == 0 && db < TP_DB__COUNT; db++)
        if (tp_store_has(s, db))
            rc = copy_db(s, from, env, &txn, &n, db);
    if (rc == 0)
        rc = tp_mdb(mdb_txn_commit(txn));
    else if (txn)
        mdb_txn_abort(txn);
    if (from)
        mdb_txn_abort(from);
    /* The copy is the store from now on: on disk before anything is swapped. */
    if (rc == 0)
        rc = tp_mdb(mdb_env_sync(env, 1));
    if (env)
        mdb_env_close(env);
    if (rc)
        snprintf(err, errlen, "%s: cannot write a compacted copy to %s: %s", s->dir, to, tp_strerror(rc));
    return rc;
}
