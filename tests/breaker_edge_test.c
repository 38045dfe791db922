/*
 * Edges of the breakers' keys and clocks, each once a bug:
 *
 * 1. Long tool names. The breakers key their records by the tool's whole
 * name (the same-call key is 'c' NAME \0 DIGEST, the tool key 't' NAME),
 * and LMDB takes keys of at most 511 bytes: a failure of a tool named with
 * 494 bytes or more stopped the run with MDB_BAD_VALSIZE. The registry now
 * refuses names over TP_TOOL_NAME_MAX (200) bytes, and a name of exactly
 * that many keeps both breakers working. The identity digest hashed only
 * a name's first 495 bytes; it now hashes the whole name.
 *
 * 2. A wall clock that steps back. Times are uint64_t and were compared as
 * now - then: a clock stepped back by 1 us wrapped that to a huge gap,
 * closing an open circuit and letting a probe through before its cooldown.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "breaker.h"
#include "checkpoint.h"
#include "testutil.h"

#define SEC 1000000ull
#define T0 (1700000000ull * SEC)

static char *dir;
static tp_store_t *store;
static tp_registry_t *reg;

/* A name of n bytes: 'x' repeated, its last byte last. */
static char *long_name(size_t n, char last)
{
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n - 1] = last;
    s[n] = 0;
    return s;
}

/* Loads a registry of the named tools (NULL-terminated), breaker failures 3 and min_calls 4. */
static void fx_open(const char *const *names)
{
    dir = strdup(tp_test_tmpdir("breakerbugs"));
    size_t cap = 4096;
    for (size_t i = 0; names[i]; i++)
        cap += strlen(names[i]) + 64;
    char *json = malloc(cap);
    size_t len = (size_t)snprintf(json, cap,
                                  "{\"defaults\": {\"breaker\": {\"same_call\": {\"failures\": 3},"
                                  " \"tool\": {\"min_calls\": 4}}}, \"tools\": [");
    for (size_t i = 0; names[i]; i++)
        len += (size_t)snprintf(json + len, cap - len, "%s{\"name\": \"%s\", \"exec\": [\"/bin/true\"]}", i ? ", " : "",
                                names[i]);
    snprintf(json + len, cap - len, "]}\n");
    char *path = tp_test_write(dir, "tools.json", json);
    char err[1024];
    reg = tp_registry_load(path, err, sizeof err);
    if (reg == NULL)
        fprintf(stderr, "\n  registry: %s\n", err);
    free(path);
    free(json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    char sd[4200];
    snprintf(sd, sizeof sd, "%s/store", dir);
    store = tp_store_open(sd, TP_STORE_NOSYNC, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(store);
}

static void fx_close(void)
{
    tp_store_close(store);
    tp_registry_free(reg);
    tp_test_rmtree(dir);
    free(dir);
}

/* One failed call of t with args {} in a transaction of its own: the record's return code. */
static int call_fail(const tp_tool_t *t, uint64_t now, bool *opened)
{
    tp_digest_t d;
    tp_digest_bytes("{}", 2, &d);
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(store, &txn, err, sizeof err), 0);
    int rc = tp_breaker_call_record(store, txn, t, &d, NULL, NULL, "{}", true, "Timeout", "slow", now, opened);
    if (rc == 0)
        rc = tp_store_commit(store, txn, err, sizeof err);
    else
        mdb_txn_abort(txn);
    return rc;
}

static bool call_open(const tp_tool_t *t, uint64_t now)
{
    tp_digest_t d;
    tp_digest_bytes("{}", 2, &d);
    MDB_txn *txn;
    char err[1024], esc[32];
    bool open = false;
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(store, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(tp_breaker_call_check(store, txn, t, &d, now, &open, esc, sizeof esc), 0);
    CU_ASSERT_EQUAL(tp_store_commit(store, txn, err, sizeof err), 0);
    return open;
}

/* A name of TP_TOOL_NAME_MAX bytes: a failed call is recorded, and the third opens its circuit. */
static void test_call_breaker_longest_name(void)
{
    char *name = long_name(TP_TOOL_NAME_MAX, 'x');
    const char *const names[] = {name, NULL};
    fx_open(names);
    const tp_tool_t *t = &reg->tools[0];
    bool opened = false;
    int rc = call_fail(t, T0, &opened);
    if (rc)
        fprintf(stderr, "\n  tp_breaker_call_record: %s\n", tp_strerror(rc));
    CU_ASSERT_EQUAL(rc, 0); /* fails: MDB_BAD_VALSIZE */
    CU_ASSERT_EQUAL(call_fail(t, T0 + 1, &opened), 0);
    CU_ASSERT_EQUAL(call_fail(t, T0 + 2, &opened), 0);
    CU_ASSERT_TRUE(opened);
    CU_ASSERT_TRUE(call_open(t, T0 + 3));
    fx_close();
    free(name);
}

/* The same name: a transient failure is recorded on the tool breaker too, and four open it. */
static void test_tool_breaker_longest_name(void)
{
    char *name = long_name(TP_TOOL_NAME_MAX, 'x');
    const char *const names[] = {name, NULL};
    fx_open(names);
    const tp_tool_t *t = &reg->tools[0];
    MDB_txn *txn;
    char err[1024];
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(tp_store_begin(store, &txn, err, sizeof err), 0);
        int rc = tp_breaker_tool_record(store, txn, t, TP_KIND_TIMEOUT, false, T0 + (uint64_t)i);
        if (rc)
            fprintf(stderr, "\n  tp_breaker_tool_record: %s\n", tp_strerror(rc));
        CU_ASSERT_EQUAL(rc, 0); /* fails: MDB_BAD_VALSIZE */
        if (rc == 0) {
            CU_ASSERT_EQUAL(tp_store_commit(store, txn, err, sizeof err), 0);
        } else {
            mdb_txn_abort(txn);
        }
    }
    tp_admit_t a = TP_ADMIT_YES;
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(store, &txn, err, sizeof err), 0);
    CU_ASSERT_EQUAL(tp_breaker_tool_admit(store, txn, t, T0 + 5, &a), 0);
    mdb_txn_abort(txn);
    CU_ASSERT_EQUAL(a, TP_ADMIT_NO);
    fx_close();
    free(name);
}

/* One byte more than TP_TOOL_NAME_MAX: the registry refuses the name, saying how long it may be. */
static void test_longer_name_refused(void)
{
    char *name = long_name(TP_TOOL_NAME_MAX + 1, 'x');
    char *d = strdup(tp_test_tmpdir("breakername"));
    char *json = malloc(strlen(name) + 200);
    sprintf(json, "{\"tools\": [{\"name\": \"%s\", \"exec\": [\"/bin/true\"]}]}\n", name);
    char *path = tp_test_write(d, "tools.json", json);
    char err[2048];
    tp_registry_t *r = tp_registry_load(path, err, sizeof err);
    CU_ASSERT_PTR_NULL(r);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 200 bytes"));
    tp_registry_free(r);
    tp_test_rmtree(d);
    free(d);
    free(path);
    free(json);
    free(name);
}

/* Two 600-byte names differing in their last byte: the same args are two identities. */
static void test_identity_of_long_names(void)
{
    char *n1 = long_name(600, '1'), *n2 = long_name(600, '2');
    tp_digest_t args, i1, i2;
    tp_digest_bytes("{}", 2, &args);
    tp_identity_digest(n1, &args, &i1);
    tp_identity_digest(n2, &args, &i2);
    CU_ASSERT_NOT_EQUAL(memcmp(i1.b, i2.b, TP_DIGEST_LEN), 0); /* the whole name is hashed */
    free(n1);
    free(n2);
}

/* The clock steps back 1 s after a call's circuit opened: it stays open. */
static void test_call_clock_back(void)
{
    const char *const names[] = {"a", NULL};
    fx_open(names);
    const tp_tool_t *t = &reg->tools[0];
    bool opened = false;
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(call_fail(t, T0 + (uint64_t)i, &opened), 0);
    CU_ASSERT_TRUE_FATAL(opened);
    CU_ASSERT_TRUE(call_open(t, T0 + 3));
    CU_ASSERT_TRUE(call_open(t, T0 + 2 - SEC)); /* the clock stepped back: still open */
    CU_ASSERT_TRUE(call_open(t, T0 + 4));
    fx_close();
}

/* The clock steps back 1 s after the tool breaker opened: still no attempt, no probe. */
static void test_tool_clock_back(void)
{
    const char *const names[] = {"a", NULL};
    fx_open(names);
    const tp_tool_t *t = &reg->tools[0];
    MDB_txn *txn;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(store, &txn, err, sizeof err), 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(tp_breaker_tool_record(store, txn, t, TP_KIND_TIMEOUT, false, T0), 0);
    tp_admit_t a = TP_ADMIT_YES;
    CU_ASSERT_EQUAL(tp_breaker_tool_admit(store, txn, t, T0 + 1, &a), 0);
    CU_ASSERT_EQUAL(a, TP_ADMIT_NO);
    CU_ASSERT_EQUAL(tp_breaker_tool_admit(store, txn, t, T0 - SEC, &a), 0);
    CU_ASSERT_EQUAL(a, TP_ADMIT_NO); /* no probe before the cooldown, whatever the clock did */
    mdb_txn_abort(txn);
    fx_close();
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("long tool names", NULL, NULL);
    CU_add_test(s, "same-call breaker, the longest name", test_call_breaker_longest_name);
    CU_add_test(s, "tool breaker, the longest name", test_tool_breaker_longest_name);
    CU_add_test(s, "a longer name is refused", test_longer_name_refused);
    CU_add_test(s, "identity digests of long names apart", test_identity_of_long_names);
    s = CU_add_suite("wall clock stepping back", NULL, NULL);
    CU_add_test(s, "an open call circuit stays open", test_call_clock_back);
    CU_add_test(s, "an open tool breaker stays open", test_tool_clock_back);
    return tp_test_run();
}
