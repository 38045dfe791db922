/*
 * The store (supervisor/store/env.c): opening creates and reopens; a store of
 * another format, or no store at all, is refused with a message that names
 * the directory; the map grows to fit a write larger than half of it, and
 * stops at TOOLPOOL_STORE_LIMIT with a message; the small helpers (key
 * size, trim, reader check, one-transaction writes) do what they say.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "owners.h"
#include "store.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

#define MB (1024ull * 1024ull)

typedef struct {
    char *dir;  /* the test's temp directory */
    char *path; /* dir/store: the store's directory, not created yet */
    unsigned failures_before;
} fx_t;

static fx_t fx;

static void fx_open(void)
{
    memset(&fx, 0, sizeof fx);
    fx.failures_before = CU_get_number_of_failures();
    unsetenv("TOOLPOOL_STORE_LIMIT");
    fx.dir = strdup(tp_test_tmpdir("store-unit"));
    size_t n = strlen(fx.dir) + 16;
    fx.path = malloc(n);
    snprintf(fx.path, n, "%s/store", fx.dir);
}

/* The directory is kept (and named) when the test failed. */
static void fx_close(void)
{
    unsetenv("TOOLPOOL_STORE_LIMIT");
    if (CU_get_number_of_failures() != fx.failures_before)
        fprintf(stderr, "\n  kept %s\n", fx.dir);
    else
        tp_test_rmtree(fx.dir);
    free(fx.dir);
    free(fx.path);
}

static tp_store_t *open_store(const char *dir, unsigned flags)
{
    char err[1024];
    tp_store_t *s = tp_store_open(dir, flags, err, sizeof err);
    if (s == NULL)
        fprintf(stderr, "\n  open %s: %s\n", dir, err);
    return s;
}

static bool contains(const char *s, const char *needle)
{
    bool yes = strstr(s, needle) != NULL;
    if (!yes)
        fprintf(stderr, "\n  \"%s\" does not contain \"%s\"\n", s, needle);
    return yes;
}

/* Writes n bytes of a pattern under key in db (MDB_RESERVE, no buffer). */
static int put_big(MDB_txn *txn, tp_store_t *s, const char *key, size_t n)
{
    MDB_val k = {strlen(key), (void *)key}, v = {n, NULL};
    int rc = mdb_put(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v, MDB_RESERVE);
    if (rc == 0)
        for (size_t i = 0; i < n; i += 4096)
            ((uint8_t *)v.mv_data)[i] = (uint8_t)(i / 4096);
    return rc;
}

/* Whether key holds n bytes of put_big's pattern. */
static bool big_intact(tp_store_t *s, const char *key, size_t n)
{
    MDB_txn *txn;
    if (tp_store_read(s, &txn) != 0)
        return false;
    MDB_val k = {strlen(key), (void *)key}, v;
    bool ok = mdb_get(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v) == 0 && v.mv_size == n;
    for (size_t i = 0; ok && i < n; i += 4096)
        ok = ((const uint8_t *)v.mv_data)[i] == (uint8_t)(i / 4096);
    mdb_txn_abort(txn);
    return ok;
}

/*
 * Opens the store's LMDB environment directly (the tp store being closed:
 * one environment per process) and runs edit on its meta database.
 */
static int raw_meta(const char *dir, int (*edit)(MDB_txn *, MDB_dbi, void *), void *ctx)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    int rc = mdb_env_create(&env);
    if (rc)
        return rc;
    if ((rc = mdb_env_set_maxdbs(env, 8)) == 0 && (rc = mdb_env_open(env, dir, MDB_NOTLS, 0644)) == 0 &&
        (rc = mdb_txn_begin(env, NULL, 0, &txn)) == 0) {
        if ((rc = mdb_dbi_open(txn, "meta", 0, &meta)) == 0 && (rc = edit(txn, meta, ctx)) == 0)
            rc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    return rc;
}

static int put_format(MDB_txn *txn, MDB_dbi meta, void *ctx)
{
    Toolpool__StoreFormat f = TOOLPOOL__STORE_FORMAT__INIT;
    f.version = *(unsigned *)ctx;
    f.created_unix_us = 1;
    uint8_t buf[64];
    MDB_val k = {6, "format"}, v = {protobuf_c_message_pack(&f.base, buf), buf};
    return mdb_put(txn, meta, &k, &v, 0);
}

static int get_format(MDB_txn *txn, MDB_dbi meta, void *ctx)
{
    MDB_val k = {6, "format"}, v;
    int rc = mdb_get(txn, meta, &k, &v);
    if (rc)
        return rc;
    Toolpool__StoreFormat *f = toolpool__store_format__unpack(NULL, v.mv_size, v.mv_data);
    if (f == NULL)
        return TP_EPROTO;
    *(unsigned *)ctx = f->version;
    toolpool__store_format__free_unpacked(f, NULL);
    return 0;
}

static int put_garbage_format(MDB_txn *txn, MDB_dbi meta, void *ctx)
{
    MDB_val k = {6, "format"}, v = {3, "\xff\xff\xff"};
    return mdb_put(txn, meta, &k, &v, 0);
}

static int del_format(MDB_txn *txn, MDB_dbi meta, void *ctx)
{
    MDB_val k = {6, "format"};
    return mdb_del(txn, meta, &k, NULL);
}

/* ---- open ---- */

/* A writable open creates the directory and the format record; a reopen finds what was written. */
static void test_open_creates_and_reopens(void)
{
    fx_open();
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(fx.path, &st), 0);
    tp_store_t *s = open_store(fx.path, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(tp_store_dir(s), fx.path);
    CU_ASSERT_EQUAL(stat(fx.path, &st), 0);
    CU_ASSERT_TRUE(S_ISDIR(st.st_mode));
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", fx.path);
    CU_ASSERT_EQUAL(access(data, F_OK), 0);

    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    Toolpool__StoreFormat *fmt = NULL;
    CU_ASSERT_EQUAL(tp_store_get_msg(s, txn, TP_DB_META, "format", 6, &toolpool__store_format__descriptor,
                                     (ProtobufCMessage **)&fmt),
                    0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fmt);
    CU_ASSERT_EQUAL(fmt->version, TP_STORE_FORMAT);
    CU_ASSERT_NOT_EQUAL(fmt->created_unix_us, 0);
    uint64_t created = fmt->created_unix_us;
    protobuf_c_message_free_unpacked(&fmt->base, NULL);
    Toolpool__StoreFormat rec = TOOLPOOL__STORE_FORMAT__INIT;
    rec.version = 77;
    CU_ASSERT_EQUAL(tp_store_put_msg(s, txn, TP_DB_JOBS, "k", 1, &rec.base), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    tp_store_close(s);

    /* reopened (writable, then read-only): the record and the same format record */
    s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_store_close(s);
    s = open_store(fx.path, TP_STORE_RDONLY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL_FATAL(tp_store_read(s, &txn), 0);
    Toolpool__StoreFormat *got = NULL;
    CU_ASSERT_EQUAL(
        tp_store_get_msg(s, txn, TP_DB_JOBS, "k", 1, &toolpool__store_format__descriptor, (ProtobufCMessage **)&got),
        0);
    CU_ASSERT_EQUAL(got ? got->version : 0, 77);
    if (got)
        protobuf_c_message_free_unpacked(&got->base, NULL);
    CU_ASSERT_EQUAL(tp_store_get_msg(s, txn, TP_DB_META, "format", 6, &toolpool__store_format__descriptor,
                                     (ProtobufCMessage **)&fmt),
                    0);
    CU_ASSERT_EQUAL(fmt ? fmt->created_unix_us : 0, created);
    if (fmt)
        protobuf_c_message_free_unpacked(&fmt->base, NULL);
    mdb_txn_abort(txn);
    /* read-only: no write transaction, and the message says why */
    err[0] = 0;
    CU_ASSERT_EQUAL(tp_store_begin(s, &txn, err, sizeof err), TP_EACCES);
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "read-only"));
    tp_store_close(s);
    fx_close();
}

/* A directory whose parent does not exist is not created: the message names it. */
static void test_open_uncreatable(void)
{
    fx_open();
    char deep[4200], err[1024] = "";
    snprintf(deep, sizeof deep, "%s/no/such/parent", fx.dir);
    CU_ASSERT_PTR_NULL(tp_store_open(deep, 0, err, sizeof err));
    CU_ASSERT_TRUE(contains(err, deep));
    CU_ASSERT_TRUE(contains(err, "cannot create the store directory"));
    fx_close();
}

/*
 * A store of another format version is refused, named, and left as it was
 * (but format 2, which is upgraded: checkpoint_test).
 */
static void test_open_other_format(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_store_close(s);

    static const unsigned versions[] = {1, TP_STORE_FORMAT + 1};
    for (size_t i = 0; i < 2; i++) {
        unsigned v = versions[i];
        CU_ASSERT_EQUAL_FATAL(raw_meta(fx.path, put_format, &v), 0);
        char err[1024] = "", want[64];
        CU_ASSERT_PTR_NULL(tp_store_open(fx.path, 0, err, sizeof err));
        CU_ASSERT_TRUE(contains(err, fx.path));
        snprintf(want, sizeof want, "the store has format %u", v);
        CU_ASSERT_TRUE(contains(err, want));
        snprintf(want, sizeof want, "reads format %u", TP_STORE_FORMAT);
        CU_ASSERT_TRUE(contains(err, want));
        CU_ASSERT_TRUE(contains(err, "--store NEWDIR"));
        /* read-only too */
        err[0] = 0;
        CU_ASSERT_PTR_NULL(tp_store_open(fx.path, TP_STORE_RDONLY, err, sizeof err));
        CU_ASSERT_TRUE(contains(err, fx.path));
        /* the refused store still says its own format: the open did not rewrite it */
        unsigned got = 0;
        CU_ASSERT_EQUAL(raw_meta(fx.path, get_format, &got), 0);
        CU_ASSERT_EQUAL(got, v);
    }
    /* back to this format: opens again */
    unsigned v = TP_STORE_FORMAT;
    CU_ASSERT_EQUAL_FATAL(raw_meta(fx.path, put_format, &v), 0);
    s = open_store(fx.path, 0);
    CU_ASSERT_PTR_NOT_NULL(s);
    tp_store_close(s);
    fx_close();
}

/* A format record that does not unpack, or none at all on a read-only open, is refused by name. */
static void test_open_bad_format_record(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_store_close(s);
    char err[1024] = "";
    CU_ASSERT_EQUAL_FATAL(raw_meta(fx.path, put_garbage_format, NULL), 0);
    CU_ASSERT_PTR_NULL(tp_store_open(fx.path, 0, err, sizeof err));
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "cannot read the format record: "));
    CU_ASSERT_TRUE(contains(err, "does not unpack"));

    CU_ASSERT_EQUAL_FATAL(raw_meta(fx.path, del_format, NULL), 0);
    err[0] = 0;
    CU_ASSERT_PTR_NULL(tp_store_open(fx.path, TP_STORE_RDONLY, err, sizeof err));
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "not a toolpool store (no format record)"));
    fx_close();
}

/* Read-only open of a missing directory fails, names it, says what to do, and creates nothing. */
static void test_open_rdonly_missing(void)
{
    fx_open();
    char err[1024] = "";
    CU_ASSERT_PTR_NULL(tp_store_open(fx.path, TP_STORE_RDONLY, err, sizeof err));
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "no store here"));
    CU_ASSERT_TRUE(contains(err, "toolpool run --store"));
    CU_ASSERT_NOT_EQUAL(access(fx.path, F_OK), 0);
    /* an existing directory with no store in it: refused by name too */
    CU_ASSERT_EQUAL_FATAL(mkdir(fx.path, 0755), 0);
    err[0] = 0;
    CU_ASSERT_PTR_NULL(tp_store_open(fx.path, TP_STORE_RDONLY, err, sizeof err));
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "cannot open the store"));
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", fx.path);
    CU_ASSERT_NOT_EQUAL(access(data, F_OK), 0);
    fx_close();
}

/* ---- the map's size ---- */

/*
 * A 40 MB record in a fresh store: begin_room(90 MB) grows the 64 MB map
 * first, so the write fits, commits and reads back whole.
 */
static void test_begin_room_grows(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin_room(s, &txn, 90 * MB, err, sizeof err), 0);
    CU_ASSERT(tp_store_room(s) >= 90 * MB);
    CU_ASSERT_EQUAL(put_big(txn, s, "big", 40 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_TRUE(big_intact(s, "big", 40 * MB));
    /* the map stays grown: 128 MB less the 40 used */
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT(tp_store_room(s) >= 80 * MB && tp_store_room(s) < 90 * MB);
    mdb_txn_abort(txn);
    tp_store_close(s);
    /* reopened, the data is there */
    s = open_store(fx.path, TP_STORE_RDONLY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_TRUE(big_intact(s, "big", 40 * MB));
    tp_store_close(s);
    fx_close();
}

/*
 * The same 40 MB in a plain begin fits the fresh 64 MB map; with more than
 * half of it used, the next begin doubles the map before it starts.
 */
static void test_begin_doubles_over_half(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT(tp_store_room(s) > 60 * MB && tp_store_room(s) < 64 * MB);
    CU_ASSERT_EQUAL(put_big(txn, s, "big", 40 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    /* 128 MB less the 40 used; without the doubling, 24 */
    CU_ASSERT(tp_store_room(s) >= 80 * MB && tp_store_room(s) < 90 * MB);
    CU_ASSERT_EQUAL(put_big(txn, s, "big2", 40 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_TRUE(big_intact(s, "big", 40 * MB));
    CU_ASSERT_TRUE(big_intact(s, "big2", 40 * MB));
    tp_store_close(s);
    fx_close();
}

/*
 * A 70 MB record does not fit the fresh 64 MB map in a plain begin
 * (MDB_MAP_FULL, and nothing is lost); with begin_room(90 MB) it does.
 */
static void test_begin_room_needed(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT(tp_store_room(s) < 64 * MB);
    CU_ASSERT_EQUAL(put_big(txn, s, "big", 70 * MB), MDB_MAP_FULL);
    mdb_txn_abort(txn);
    CU_ASSERT_EQUAL_FATAL(tp_store_begin_room(s, &txn, 90 * MB, err, sizeof err), 0);
    CU_ASSERT_EQUAL(put_big(txn, s, "big", 70 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_TRUE(big_intact(s, "big", 70 * MB));
    tp_store_close(s);
    fx_close();
}

/*
 * With TOOLPOOL_STORE_LIMIT at 1 MiB, room for more than fits is refused
 * before any transaction begins, with a message naming the store and the
 * limit; room that fits is given; a record too big for the map is
 * MDB_MAP_FULL, and tp_store_strerror says what to do.
 */
static void test_store_limit(void)
{
    fx_open();
    setenv("TOOLPOOL_STORE_LIMIT", "1048576", 1);
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn = NULL;
    char err[1024] = "";
    int rc = tp_store_begin_room(s, &txn, 2 * MB, err, sizeof err);
    CU_ASSERT_EQUAL(rc, MDB_MAP_FULL);
    CU_ASSERT_PTR_NULL(txn);
    if (rc == 0)
        mdb_txn_abort(txn); /* a write transaction left open would block the next one */
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "2097152 bytes does not fit"));
    CU_ASSERT_TRUE(contains(err, "1048576"));
    CU_ASSERT_TRUE(contains(err, "TOOLPOOL_STORE_LIMIT"));
    /* exactly the limit does not fit either: some of the map is in use */
    rc = tp_store_begin_room(s, &txn, 1 * MB, err, sizeof err);
    CU_ASSERT_EQUAL(rc, MDB_MAP_FULL);
    if (rc == 0)
        mdb_txn_abort(txn);
    CU_ASSERT(tp_store_room(s) < 1 * MB);
    /* what fits is given, and the store still works */
    CU_ASSERT_EQUAL_FATAL(tp_store_begin_room(s, &txn, 256 * 1024, err, sizeof err), 0);
    CU_ASSERT(tp_store_room(s) >= 256 * 1024);
    CU_ASSERT_EQUAL(put_big(txn, s, "small", 256 * 1024), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_TRUE(big_intact(s, "small", 256 * 1024));
    /* a write that does not fit the map: MDB_MAP_FULL, explained */
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(put_big(txn, s, "huge", 2 * MB), MDB_MAP_FULL);
    mdb_txn_abort(txn);
    char why[512];
    CU_ASSERT_TRUE(contains(tp_store_strerror(s, MDB_MAP_FULL, why, sizeof why), "size limit (1048576 bytes"));
    CU_ASSERT_TRUE(contains(why, "TOOLPOOL_STORE_LIMIT"));
    CU_ASSERT_TRUE(big_intact(s, "small", 256 * 1024));
    tp_store_close(s);
    fx_close();
}

/* ---- small helpers ---- */

/*
 * tp_store_db_empty keeps its answer for a transaction: a put to the
 * database makes it read again (a breaker written, then asked about, in
 * one transaction), an abort takes the put back, a commit keeps it.
 */
static void test_db_empty_kept(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char err[1024];
    MDB_txn *txn;
    Toolpool__CallBreaker cb = TOOLPOOL__CALL_BREAKER__INIT;
    cb.tool = (char *)"t";
    for (int round = 0; round < 2; round++) {
        CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
        CU_ASSERT_TRUE(tp_store_db_empty(s, txn, TP_DB_BREAKERS));
        CU_ASSERT_TRUE(tp_store_db_empty(s, txn, TP_DB_BREAKERS)); /* kept */
        CU_ASSERT_TRUE(tp_store_db_empty(s, txn, TP_DB_ESCALATIONS));
        CU_ASSERT_EQUAL(tp_store_put_msg(s, txn, TP_DB_BREAKERS, "ck", 2, &cb.base), 0);
        CU_ASSERT_FALSE(tp_store_db_empty(s, txn, TP_DB_BREAKERS));
        CU_ASSERT_TRUE(tp_store_db_empty(s, txn, TP_DB_ESCALATIONS)); /* another database's answer stands */
        if (round == 0)
            mdb_txn_abort(txn); /* the next transaction has the same address and id: the put is gone */
        else
            CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    }
    CU_ASSERT_EQUAL_FATAL(tp_store_read(s, &txn), 0);
    CU_ASSERT_FALSE(tp_store_db_empty(s, txn, TP_DB_BREAKERS));
    mdb_txn_abort(txn);
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT_FALSE(tp_store_db_empty(s, txn, TP_DB_BREAKERS));
    mdb_txn_abort(txn);
    tp_store_close(s);
    fx_close();
}

/* One sync of me in a transaction of its own, committed. */
static void owners_sync_once(tp_store_t *s, const tp_owner_id_t *me, tp_owners_state_t *st)
{
    char err[1024];
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(tp_owners_sync(s, txn, me, st), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
}

/*
 * An owner alone keeps the owners record it found and syncs by comparing
 * it: another owner's arrival (a real process) changes the record and is
 * seen; its death is seen at the next sync and dropped once.
 */
static void test_owners_sync_kept(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_owner_id_t me, other;
    CU_ASSERT_EQUAL_FATAL(tp_owner_self(&me), 0);
    tp_owners_state_t st = {0}, ost = {0};
    owners_sync_once(s, &me, &st); /* joins: writes */
    CU_ASSERT_EQUAL(st.others, 0);
    CU_ASSERT_EQUAL(st.seen_len, 0);
    owners_sync_once(s, &me, &st); /* reads it back alone: kept */
    CU_ASSERT_TRUE(st.seen_len > 0);
    uint64_t gen = st.generation;
    owners_sync_once(s, &me, &st);
    CU_ASSERT_EQUAL(st.generation, gen);
    CU_ASSERT_EQUAL(st.others, 0);
    int p[2];
    CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
    pid_t kid = fork();
    CU_ASSERT_FATAL(kid >= 0);
    if (kid == 0) {
        tp_owner_self(&other);
        if (write(p[1], &other, sizeof other) != (ssize_t)sizeof other)
            _exit(1);
        pause();
        _exit(0);
    }
    close(p[1]);
    CU_ASSERT_EQUAL_FATAL(read(p[0], &other, sizeof other), (ssize_t)sizeof other);
    close(p[0]);
    owners_sync_once(s, &other, &ost); /* the other arrives */
    CU_ASSERT_EQUAL(ost.others, 1);
    owners_sync_once(s, &me, &st);
    CU_ASSERT_EQUAL(st.others, 1);
    CU_ASSERT_TRUE(st.generation > gen);
    CU_ASSERT_EQUAL(st.seen_len, 0); /* not alone: checked each time */
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    owners_sync_once(s, &me, &st);
    CU_ASSERT_EQUAL(st.others, 0);
    CU_ASSERT_EQUAL(st.dropped, 1);
    owners_sync_once(s, &me, &st);
    CU_ASSERT_EQUAL(st.dropped, 0);
    CU_ASSERT_TRUE(st.seen_len > 0);
    tp_store_close(s);
    fx_close();
}

static void test_max_key(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(tp_store_max_key(s), 511);
    /* a key that long is taken; one byte more is not */
    char key[513];
    memset(key, 'k', sizeof key);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    MDB_val k = {511, key}, v = {1, "v"};
    CU_ASSERT_EQUAL(mdb_put(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v, 0), 0);
    k.mv_size = 512;
    CU_ASSERT_EQUAL(mdb_put(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v, 0), MDB_BAD_VALSIZE);
    mdb_txn_abort(txn);
    tp_store_close(s);
    fx_close();
}

/* Trimming between transactions loses nothing, before the first write, twice, and after the map grew. */
static void test_trim(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_store_trim(s);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(put_big(txn, s, "a", 3 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    CU_ASSERT_TRUE(big_intact(s, "a", 3 * MB));
    tp_store_trim(s);
    tp_store_trim(s);
    CU_ASSERT_TRUE(big_intact(s, "a", 3 * MB));
    /* the map grows (and moves); trim finds it again */
    CU_ASSERT_EQUAL_FATAL(tp_store_begin_room(s, &txn, 100 * MB, err, sizeof err), 0);
    CU_ASSERT_EQUAL(put_big(txn, s, "b", 1 * MB), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    tp_store_trim(s);
    CU_ASSERT_TRUE(big_intact(s, "a", 3 * MB));
    CU_ASSERT_TRUE(big_intact(s, "b", 1 * MB));
    /* and writes go on after it */
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(put_big(txn, s, "c", 4096), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
    tp_store_trim(s);
    CU_ASSERT_TRUE(big_intact(s, "c", 4096));
    tp_store_close(s);
    fx_close();
}

/* No dead readers on a clean environment, with or without a live reader of our own. */
static void test_reader_check(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(tp_store_reader_check(s), 0);
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(s, &txn), 0);
    CU_ASSERT_EQUAL(tp_store_reader_check(s), 0);
    mdb_txn_abort(txn);
    CU_ASSERT_EQUAL(tp_store_reader_check(s), 0);
    tp_store_close(s);
    fx_close();
}

typedef struct {
    tp_store_t *s;
    const char *value;
    int fail_with;
} write_ctx_t;

static int apply_cb(MDB_txn *txn, void *ctx)
{
    write_ctx_t *w = ctx;
    MDB_val k = {3, "key"}, v = {strlen(w->value), (void *)w->value};
    int rc = mdb_put(txn, tp_store_dbi(w->s, TP_DB_RESULTS), &k, &v, 0);
    return rc ? rc : w->fail_with;
}

static bool value_is(tp_store_t *s, const char *want)
{
    MDB_txn *txn;
    if (tp_store_read(s, &txn) != 0)
        return false;
    MDB_val k = {3, "key"}, v;
    bool yes = mdb_get(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v) == 0 && v.mv_size == strlen(want) &&
               memcmp(v.mv_data, want, v.mv_size) == 0;
    mdb_txn_abort(txn);
    return yes;
}

/* tp_store_write commits what apply wrote, or, when apply fails, nothing, and says why. */
static void test_write(void)
{
    fx_open();
    tp_store_t *s = open_store(fx.path, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char err[1024] = "";
    write_ctx_t w = {s, "one", 0};
    CU_ASSERT_EQUAL(tp_store_write(s, apply_cb, &w, err, sizeof err), 0);
    CU_ASSERT_TRUE(value_is(s, "one"));
    w.value = "two";
    w.fail_with = TP_EPROTO;
    CU_ASSERT_EQUAL(tp_store_write(s, apply_cb, &w, err, sizeof err), TP_EPROTO);
    CU_ASSERT_TRUE(contains(err, fx.path));
    CU_ASSERT_TRUE(contains(err, "a corrupt record"));
    CU_ASSERT_TRUE(value_is(s, "one"));
    tp_store_close(s);
    fx_close();
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("open", NULL, NULL);
    CU_add_test(s, "creates, reopens, read-only", test_open_creates_and_reopens);
    CU_add_test(s, "a database's emptiness is kept for a transaction, read again after a put", test_db_empty_kept);
    CU_add_test(s, "an uncreatable directory", test_open_uncreatable);
    CU_add_test(s, "another format version is refused", test_open_other_format);
    CU_add_test(s, "a corrupt or missing format record", test_open_bad_format_record);
    CU_add_test(s, "read-only open of a missing store", test_open_rdonly_missing);
    s = CU_add_suite("map size", NULL, NULL);
    CU_add_test(s, "begin_room grows the map for 40 MB", test_begin_room_grows);
    CU_add_test(s, "a plain begin doubles a map over half full", test_begin_doubles_over_half);
    CU_add_test(s, "70 MB needs begin_room", test_begin_room_needed);
    CU_add_test(s, "TOOLPOOL_STORE_LIMIT", test_store_limit);
    s = CU_add_suite("helpers", NULL, NULL);
    CU_add_test(s, "an owner alone syncs by comparing the record", test_owners_sync_kept);
    CU_add_test(s, "max key is 511", test_max_key);
    CU_add_test(s, "trim between transactions", test_trim);
    CU_add_test(s, "reader check on a clean env", test_reader_check);
    CU_add_test(s, "tp_store_write commits or aborts", test_write);
    return tp_test_run();
}
