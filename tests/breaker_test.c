/*
 * The circuit breakers (supervisor/engine/breaker.c) against a real store, with
 * the clock given to every call: the same-call breaker (N failures of one
 * tool and args inside the window open it, a success clears it, the window
 * measured to the microsecond), the tool breaker (failure rate over ten
 * buckets with min_calls, only transient kinds counted, cooldown, probes,
 * a probe that never reports back), and the escalation ids an opened
 * circuit is handed to a person under (supervisor/engine/escalate.c).
 *
 * Every breaker operation runs in a write transaction of its own, as the
 * engine's turns do, so each test also shows the state survives commits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "breaker.h"
#include "escalate.h"
#include "registry.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

#define SEC 1000000ull
/* A wall-clock time on a whole second, so the tool window's 1 s buckets start on it. */
#define T0 (1700000000ull * SEC)

/*
 * Tools with small, round breaker settings: "a", "b" and "c" share them;
 * "two" lets two probes through at once; "dflt" is in a registry of its
 * own with no breaker settings at all, so it gets the real defaults.
 */
/* clang-format off */
static const char *const REGISTRY =
    "{\"defaults\": {\"breaker\": {\n"
    "   \"same_call\": {\"failures\": 3, \"window\": \"10s\"},\n"
    "   \"tool\": {\"failure_rate\": 0.5, \"min_calls\": 4, \"window\": \"10s\",\n"
    "            \"cooldown\": \"30s\", \"probes\": 1}}},\n"
    " \"tools\": [\n"
    "   {\"name\": \"a\", \"exec\": [\"/bin/true\"]},\n"
    "   {\"name\": \"b\", \"exec\": [\"/bin/true\"]},\n"
    "   {\"name\": \"c\", \"exec\": [\"/bin/true\"]},\n"
    "   {\"name\": \"two\", \"exec\": [\"/bin/true\"], \"breaker\": {\"tool\": {\"probes\": 2}}}\n"
    " ]}\n";
/* clang-format on */
/* clang-format off */
static const char *const REGISTRY_DEFAULTS =
    "{\"tools\": [{\"name\": \"dflt\", \"exec\": [\"/bin/true\"]}]}\n";
/* clang-format on */

typedef struct {
    char *dir;
    tp_registry_t *reg;
    tp_registry_t *reg_dflt;
    tp_store_t *store;
    const tp_tool_t *a, *b, *c, *two, *dflt;
    unsigned failures_before;
} fx_t;

static fx_t fx;

static tp_registry_t *load_registry(const char *name, const char *json)
{
    char err[1024];
    char *path = tp_test_write(fx.dir, name, json);
    tp_registry_t *reg = tp_registry_load(path, err, sizeof err);
    if (reg == NULL)
        fprintf(stderr, "\n  %s: %s\n", name, err);
    free(path);
    return reg;
}

/* A fresh directory, registries and store for one test. */
static void fx_open(void)
{
    memset(&fx, 0, sizeof fx);
    fx.failures_before = CU_get_number_of_failures();
    fx.dir = strdup(tp_test_tmpdir("breaker"));
    fx.reg = load_registry("tools.json", REGISTRY);
    fx.reg_dflt = load_registry("defaults.json", REGISTRY_DEFAULTS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.reg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.reg_dflt);
    fx.a = tp_registry_find(fx.reg, "a");
    fx.b = tp_registry_find(fx.reg, "b");
    fx.c = tp_registry_find(fx.reg, "c");
    fx.two = tp_registry_find(fx.reg, "two");
    fx.dflt = tp_registry_find(fx.reg_dflt, "dflt");
    CU_ASSERT_FATAL(fx.a && fx.b && fx.c && fx.two && fx.dflt);
    char sd[4200], err[1024];
    snprintf(sd, sizeof sd, "%s/store", fx.dir);
    fx.store = tp_store_open(sd, TP_STORE_NOSYNC, err, sizeof err);
    if (fx.store == NULL)
        fprintf(stderr, "\n  store: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
}

/* Closes everything; the directory is kept (and named) when the test failed. */
static void fx_close(void)
{
    tp_store_close(fx.store);
    tp_registry_free(fx.reg);
    tp_registry_free(fx.reg_dflt);
    if (CU_get_number_of_failures() != fx.failures_before)
        fprintf(stderr, "\n  kept %s\n", fx.dir);
    else
        tp_test_rmtree(fx.dir);
    free(fx.dir);
}

static MDB_txn *begin(void)
{
    MDB_txn *txn = NULL;
    char err[1024];
    int rc = tp_store_begin(fx.store, &txn, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  begin: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return txn;
}

static void commit(MDB_txn *txn)
{
    char err[1024];
    int rc = tp_store_commit(fx.store, txn, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  commit: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void digest(const char *args_json, tp_digest_t *d)
{
    json_t *args = json_loads(args_json, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(args);
    tp_digest_args(args, d);
    json_decref(args);
}

/* ---- same-call helpers: one transaction each ---- */

/* Whether the call's circuit is open at now; esc (may be NULL) gets its escalation. */
static bool call_open(const tp_tool_t *t, const tp_digest_t *d, uint64_t now, char *esc, size_t esc_len)
{
    char buf[TP_ESCALATION_ID_MAX] = "unset";
    bool open = true;
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_call_check(fx.store, txn, t, d, now, &open, buf, sizeof buf), 0);
    commit(txn);
    if (esc)
        snprintf(esc, esc_len, "%s", open ? buf : "");
    return open;
}

/* Records the call's final outcome at now; returns whether it opened the circuit. */
static bool call_record(const tp_tool_t *t, const tp_digest_t *d, bool failed, uint64_t now)
{
    bool opened = !failed; /* must be cleared by the call either way */
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_call_record(fx.store, txn, t, d, NULL, NULL, "{\"q\":1}", failed,
                                           failed ? "Timeout" : "", failed ? "took too long" : NULL, now, &opened),
                    0);
    commit(txn);
    return opened;
}

/* The stored same-call record, or NULL when there is none. */
static Toolpool__CallBreaker *call_raw(const tp_tool_t *t, const tp_digest_t *d)
{
    uint8_t key[600];
    size_t klen = tp_breaker_call_key(t->name, d, key, sizeof key);
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    Toolpool__CallBreaker *cb = NULL;
    int rc = tp_store_get_msg(fx.store, txn, TP_DB_BREAKERS, key, klen, &toolpool__call_breaker__descriptor,
                              (ProtobufCMessage **)&cb);
    mdb_txn_abort(txn);
    CU_ASSERT(rc == 0 || rc == MDB_NOTFOUND);
    return rc == 0 ? cb : NULL;
}

static void call_raw_free(Toolpool__CallBreaker *cb)
{
    if (cb)
        protobuf_c_message_free_unpacked(&cb->base, NULL);
}

/* ---- tool-breaker helpers ---- */

static tp_admit_t admit(const tp_tool_t *t, uint64_t now)
{
    tp_admit_t out = (tp_admit_t)-1;
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_tool_admit(fx.store, txn, t, now, &out), 0);
    commit(txn);
    return out;
}

static void record(const tp_tool_t *t, tp_kind_t kind, bool probe, uint64_t now)
{
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_tool_record(fx.store, txn, t, kind, probe, now), 0);
    commit(txn);
}

/* The stored tool record, or NULL when there is none. */
static Toolpool__ToolBreaker *tool_raw(const tp_tool_t *t)
{
    uint8_t key[600];
    size_t klen = tp_breaker_tool_key(t->name, key, sizeof key);
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    Toolpool__ToolBreaker *tb = NULL;
    int rc = tp_store_get_msg(fx.store, txn, TP_DB_BREAKERS, key, klen, &toolpool__tool_breaker__descriptor,
                              (ProtobufCMessage **)&tb);
    mdb_txn_abort(txn);
    CU_ASSERT(rc == 0 || rc == MDB_NOTFOUND);
    return rc == 0 ? tb : NULL;
}

static void tool_raw_free(Toolpool__ToolBreaker *tb)
{
    if (tb)
        protobuf_c_message_free_unpacked(&tb->base, NULL);
}

/* Calls and failures summed over the stored buckets. */
static void tool_counts(const tp_tool_t *t, uint64_t *calls, uint64_t *fails)
{
    *calls = *fails = 0;
    Toolpool__ToolBreaker *tb = tool_raw(t);
    for (size_t i = 0; tb && i < tb->n_buckets; i++) {
        *calls += tb->buckets[i]->calls;
        *fails += tb->buckets[i]->failures;
    }
    tool_raw_free(tb);
}

static Toolpool__BreakerState tool_state(const tp_tool_t *t)
{
    Toolpool__ToolBreaker *tb = tool_raw(t);
    Toolpool__BreakerState st = tb ? tb->state : TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED;
    tool_raw_free(tb);
    return st;
}

static uint64_t tool_trips(const tp_tool_t *t)
{
    Toolpool__ToolBreaker *tb = tool_raw(t);
    uint64_t n = tb ? tb->trips : 0;
    tool_raw_free(tb);
    return n;
}

/* Opens t's breaker at now with min_calls (4) timeouts; returns now. */
static uint64_t trip(const tp_tool_t *t, uint64_t now)
{
    for (int i = 0; i < 4; i++)
        record(t, TP_KIND_TIMEOUT, false, now);
    CU_ASSERT_EQUAL(tool_state(t), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(admit(t, now), TP_ADMIT_NO);
    return now;
}

/* ---- policies and digests ---- */

/* The registry gives the breakers the documented defaults, and our settings where given. */
static void test_policy_from_registry(void)
{
    fx_open();
    const tp_policy_t *d = &fx.dflt->policy;
    CU_ASSERT_EQUAL(d->same_call_failures, 3);
    CU_ASSERT_EQUAL(d->same_call_window_us, 600 * SEC);
    CU_ASSERT_DOUBLE_EQUAL(d->tool_failure_rate, 0.5, 1e-12);
    CU_ASSERT_EQUAL(d->tool_min_calls, 20);
    CU_ASSERT_EQUAL(d->tool_window_us, 60 * SEC);
    CU_ASSERT_EQUAL(d->tool_cooldown_us, 30 * SEC);
    CU_ASSERT_EQUAL(d->tool_probes, 1);
    const tp_policy_t *p = &fx.a->policy;
    CU_ASSERT_EQUAL(p->same_call_failures, 3);
    CU_ASSERT_EQUAL(p->same_call_window_us, 10 * SEC);
    CU_ASSERT_EQUAL(p->tool_min_calls, 4);
    CU_ASSERT_EQUAL(p->tool_window_us, 10 * SEC);
    CU_ASSERT_EQUAL(p->tool_cooldown_us, 30 * SEC);
    CU_ASSERT_EQUAL(p->tool_probes, 1);
    /* a tool's own key overrides one default and keeps the rest */
    CU_ASSERT_EQUAL(fx.two->policy.tool_probes, 2);
    CU_ASSERT_EQUAL(fx.two->policy.tool_cooldown_us, 30 * SEC);
    CU_ASSERT_EQUAL(fx.two->policy.tool_min_calls, 4);
    fx_close();
}

/* The digest is of the canonical form: key order does not matter, values do. */
static void test_digest(void)
{
    tp_digest_t d1, d2, d3, d4;
    digest("{\"a\": 1, \"b\": [1, 2], \"c\": {\"y\": 1, \"x\": 2}}", &d1);
    digest("{\"c\": {\"x\": 2, \"y\": 1}, \"b\": [1, 2], \"a\": 1}", &d2);
    digest("{\"a\": 1, \"b\": [2, 1], \"c\": {\"y\": 1, \"x\": 2}}", &d3);
    digest("{\"a\": 2, \"b\": [1, 2], \"c\": {\"y\": 1, \"x\": 2}}", &d4);
    CU_ASSERT_EQUAL(memcmp(d1.b, d2.b, TP_DIGEST_LEN), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(d1.b, d3.b, TP_DIGEST_LEN), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(d1.b, d4.b, TP_DIGEST_LEN), 0);
    char hex[2 * TP_DIGEST_LEN + 1];
    tp_digest_hex(&d1, hex);
    CU_ASSERT_EQUAL(strlen(hex), 32);
    CU_ASSERT_EQUAL(strspn(hex, "0123456789abcdef"), 32);
    char two[3];
    snprintf(two, sizeof two, "%02x", d1.b[0]);
    CU_ASSERT_EQUAL(strncmp(hex, two, 2), 0);
}

/* ---- same-call breaker (failures 3, window 10 s) ---- */

/* The Nth failure opens the circuit; the next check says open and counts it blocked. */
static void test_call_opens_after_n_failures(void)
{
    fx_open();
    tp_digest_t d;
    digest("{\"q\": 1}", &d);
    CU_ASSERT_FALSE(call_open(fx.a, &d, T0, NULL, 0));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0));
    CU_ASSERT_FALSE(call_open(fx.a, &d, T0 + 1, NULL, 0));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0 + 1 * SEC));
    CU_ASSERT_FALSE(call_open(fx.a, &d, T0 + 1 * SEC + 1, NULL, 0));
    CU_ASSERT_TRUE(call_record(fx.a, &d, true, T0 + 2 * SEC));

    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->opened_unix_us, T0 + 2 * SEC);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us, 3);
    CU_ASSERT_EQUAL(cb->blocked, 0);
    CU_ASSERT_STRING_EQUAL(cb->tool, "a");
    CU_ASSERT_STRING_EQUAL(cb->last_kind, "Timeout");
    CU_ASSERT_STRING_EQUAL(cb->last_message, "took too long");
    CU_ASSERT_EQUAL(cb->args.len, 7);
    CU_ASSERT_EQUAL(memcmp(cb->args.data, "{\"q\":1}", 7), 0);
    CU_ASSERT_EQUAL(cb->digest.len, TP_DIGEST_LEN);
    CU_ASSERT_EQUAL(memcmp(cb->digest.data, d.b, TP_DIGEST_LEN), 0);
    call_raw_free(cb);

    /* the (N+1)th call: open, and counted as blocked, each time it is checked */
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 3 * SEC, NULL, 0));
    cb = call_raw(fx.a, &d);
    CU_ASSERT_EQUAL(cb ? cb->blocked : 0, 1);
    call_raw_free(cb);
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 4 * SEC, NULL, 0));
    cb = call_raw(fx.a, &d);
    CU_ASSERT_EQUAL(cb ? cb->blocked : 0, 2);
    call_raw_free(cb);
    fx_close();
}

/* With failures 1, the first failure opens it. */
static void test_call_n_is_the_policy(void)
{
    fx_open();
    tp_tool_t one = *fx.a;
    one.policy.same_call_failures = 1;
    tp_digest_t d;
    digest("{}", &d);
    CU_ASSERT_TRUE(call_record(&one, &d, true, T0));
    CU_ASSERT_TRUE(call_open(&one, &d, T0, NULL, 0));
    /* with the registry's 3, two failures are not enough */
    tp_digest_t e;
    digest("[]", &e);
    CU_ASSERT_FALSE(call_record(fx.a, &e, true, T0));
    CU_ASSERT_FALSE(call_record(fx.a, &e, true, T0));
    CU_ASSERT_FALSE(call_open(fx.a, &e, T0, NULL, 0));
    fx_close();
}

/* A success clears the count: two more failures after it do not open the circuit. */
static void test_call_success_clears(void)
{
    fx_open();
    tp_digest_t d;
    digest("{\"q\": 2}", &d);
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0 + 1));
    CU_ASSERT_FALSE(call_record(fx.a, &d, false, T0 + 2));
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NULL(cb); /* nothing kept */
    call_raw_free(cb);
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0 + 3));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0 + 4));
    CU_ASSERT_FALSE(call_open(fx.a, &d, T0 + 5, NULL, 0));
    /* the third failure since the success does */
    CU_ASSERT_TRUE(call_record(fx.a, &d, true, T0 + 6));
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 7, NULL, 0));
    /* a success of a call that never failed is no error and leaves nothing */
    tp_digest_t e;
    digest("{\"q\": 3}", &e);
    CU_ASSERT_FALSE(call_record(fx.a, &e, false, T0));
    cb = call_raw(fx.a, &e);
    CU_ASSERT_PTR_NULL(cb);
    call_raw_free(cb);
    fx_close();
}

/*
 * A failure counts while it is less than the window old: exactly one
 * window old, it no longer does.
 */
static void test_call_window_boundary(void)
{
    fx_open();
    const uint64_t W = 10 * SEC;
    tp_digest_t d1, d2;
    digest("{\"k\": \"inside\"}", &d1);
    digest("{\"k\": \"outside\"}", &d2);
    /* first failure W - 1 us before the third: still counts, so it opens */
    CU_ASSERT_FALSE(call_record(fx.a, &d1, true, T0));
    CU_ASSERT_FALSE(call_record(fx.a, &d1, true, T0 + 5 * SEC));
    CU_ASSERT_TRUE(call_record(fx.a, &d1, true, T0 + W - 1));
    /* first failure exactly W before the third: dropped, two left, closed */
    CU_ASSERT_FALSE(call_record(fx.a, &d2, true, T0));
    CU_ASSERT_FALSE(call_record(fx.a, &d2, true, T0 + 5 * SEC));
    CU_ASSERT_FALSE(call_record(fx.a, &d2, true, T0 + W));
    CU_ASSERT_FALSE(call_open(fx.a, &d2, T0 + W, NULL, 0));
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us, 2);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us == 2 ? cb->failures_unix_us[0] : 0, T0 + 5 * SEC);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us == 2 ? cb->failures_unix_us[1] : 0, T0 + W);
    CU_ASSERT_EQUAL(cb->opened_unix_us, 0);
    call_raw_free(cb);
    /* and the next failure within the window of those two opens it */
    CU_ASSERT_TRUE(call_record(fx.a, &d2, true, T0 + 5 * SEC + W - 1));
    fx_close();
}

/* An open circuit stays open for less than a window since it opened, then closes. */
static void test_call_open_closes_after_window(void)
{
    fx_open();
    const uint64_t W = 10 * SEC, opened = T0 + 2;
    tp_digest_t d;
    digest("{\"q\": 4}", &d);
    call_record(fx.a, &d, true, T0);
    call_record(fx.a, &d, true, T0 + 1);
    CU_ASSERT_TRUE(call_record(fx.a, &d, true, opened));
    CU_ASSERT_TRUE(call_open(fx.a, &d, opened, NULL, 0));
    CU_ASSERT_TRUE(call_open(fx.a, &d, opened + W - 1, NULL, 0));
    CU_ASSERT_FALSE(call_open(fx.a, &d, opened + W, NULL, 0));
    /*
     * closing forgets its failures, and the count starts again; the record
     * stays, closed, for its history: opened, then closed with the two
     * calls it refused
     */
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->opened_unix_us, 0);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us, 0);
    CU_ASSERT_EQUAL_FATAL(cb->n_history, 2);
    CU_ASSERT_EQUAL(cb->history[0]->state, TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(cb->history[0]->at_unix_us, opened);
    CU_ASSERT_PTR_NOT_NULL(strstr(cb->history[0]->cause, "failed 3 times within 10s"));
    CU_ASSERT_EQUAL(cb->history[1]->state, TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(cb->history[1]->at_unix_us, opened + W);
    CU_ASSERT_STRING_EQUAL(cb->history[1]->cause, "its window (10s) passed");
    CU_ASSERT_EQUAL(cb->history[1]->refused, 2);
    call_raw_free(cb);
    CU_ASSERT_FALSE(call_open(fx.a, &d, opened + W + 1, NULL, 0));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, opened + W + 2));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, opened + W + 3));
    CU_ASSERT_TRUE(call_record(fx.a, &d, true, opened + W + 4));
    fx_close();
}

/*
 * Each open and close goes in the record's history, at the transition only:
 * a success of a call whose circuit opened closes it ("the call
 * succeeded"), a success or a check that changes nothing writes nothing,
 * and the history keeps the last 16 transitions.
 */
static void test_call_history(void)
{
    fx_open();
    tp_digest_t d;
    digest("{\"q\": 41}", &d);
    uint64_t now = T0;
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 3; i++)
            call_record(fx.a, &d, true, now++);
        CU_ASSERT_TRUE(call_open(fx.a, &d, now++, NULL, 0));
        CU_ASSERT_FALSE(call_record(fx.a, &d, false, now++)); /* a call already running succeeds */
    }
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->opened_unix_us, 0);
    CU_ASSERT_EQUAL_FATAL(cb->n_history, 16); /* 20 transitions, the last 16 kept, oldest first */
    for (size_t i = 0; i < cb->n_history; i++) {
        bool open = i % 2 == 0;
        CU_ASSERT_EQUAL(cb->history[i]->state,
                        open ? TOOLPOOL__BREAKER_STATE__BREAKER_OPEN : TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
        if (!open) {
            CU_ASSERT_STRING_EQUAL(cb->history[i]->cause, "the call succeeded");
            CU_ASSERT_EQUAL(cb->history[i]->refused, 1);
        }
        if (i > 0)
            CU_ASSERT(cb->history[i]->at_unix_us > cb->history[i - 1]->at_unix_us);
    }
    CU_ASSERT_EQUAL(cb->history[15]->at_unix_us, now - 1);
    call_raw_free(cb);
    /* Closed, nothing counted: more successes and checks leave it byte for byte. */
    uint8_t key[600];
    size_t klen = tp_breaker_call_key(fx.a->name, &d, key, sizeof key);
    MDB_txn *txn;
    MDB_val k = {klen, key}, before, after;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    CU_ASSERT_EQUAL_FATAL(mdb_get(txn, tp_store_dbi(fx.store, TP_DB_BREAKERS), &k, &before), 0);
    uint8_t *copy = malloc(before.mv_size);
    memcpy(copy, before.mv_data, before.mv_size);
    size_t copy_len = before.mv_size;
    mdb_txn_abort(txn);
    call_record(fx.a, &d, false, now + 1);
    CU_ASSERT_FALSE(call_open(fx.a, &d, now + 2, NULL, 0));
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    CU_ASSERT_EQUAL_FATAL(mdb_get(txn, tp_store_dbi(fx.store, TP_DB_BREAKERS), &k, &after), 0);
    CU_ASSERT(after.mv_size == copy_len && memcmp(after.mv_data, copy, copy_len) == 0);
    mdb_txn_abort(txn);
    free(copy);
    /* One that never opened is still dropped by a success. */
    tp_digest_t d2;
    digest("{\"q\": 42}", &d2);
    call_record(fx.a, &d2, true, now);
    call_record(fx.a, &d2, false, now + 1);
    CU_ASSERT_PTR_NULL(call_raw(fx.a, &d2));
    fx_close();
}

/*
 * A failure recorded while the circuit is open (a call that was already
 * running) keeps it open as it was: same opening time, escalation, blocked
 * count; it does not report opening it again.
 */
static void test_call_failure_while_open(void)
{
    fx_open();
    tp_digest_t d;
    digest("{\"q\": 5}", &d);
    call_record(fx.a, &d, true, T0);
    call_record(fx.a, &d, true, T0 + 1);
    CU_ASSERT_TRUE(call_record(fx.a, &d, true, T0 + 2));
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_call_set_escalation(fx.store, txn, fx.a, &d, "E000042"), 0);
    commit(txn);
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 3, NULL, 0));
    CU_ASSERT_FALSE(call_record(fx.a, &d, true, T0 + 4));
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->opened_unix_us, T0 + 2);
    CU_ASSERT_STRING_EQUAL(cb->escalation, "E000042");
    CU_ASSERT_EQUAL(cb->blocked, 1);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us, 4);
    call_raw_free(cb);
    /* it still closes a window after it opened, not after the last failure */
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 2 + 10 * SEC - 1, NULL, 0));
    CU_ASSERT_FALSE(call_open(fx.a, &d, T0 + 2 + 10 * SEC, NULL, 0));
    fx_close();
}

/* Other args, or the same args of another tool, have circuits of their own. */
static void test_call_independent(void)
{
    fx_open();
    tp_digest_t d1, d2;
    digest("{\"q\": \"x\"}", &d1);
    digest("{\"q\": \"y\"}", &d2);
    for (int i = 0; i < 3; i++)
        call_record(fx.a, &d1, true, T0 + (uint64_t)i);
    CU_ASSERT_TRUE(call_open(fx.a, &d1, T0 + 3, NULL, 0));
    CU_ASSERT_FALSE(call_open(fx.a, &d2, T0 + 3, NULL, 0));
    CU_ASSERT_FALSE(call_open(fx.b, &d1, T0 + 3, NULL, 0));
    /* d2's count is its own: two failures of it do not open it */
    CU_ASSERT_FALSE(call_record(fx.a, &d2, true, T0 + 4));
    CU_ASSERT_FALSE(call_record(fx.a, &d2, true, T0 + 5));
    CU_ASSERT_FALSE(call_open(fx.a, &d2, T0 + 6, NULL, 0));
    /* a success of d2 leaves d1 open */
    call_record(fx.a, &d2, false, T0 + 7);
    CU_ASSERT_TRUE(call_open(fx.a, &d1, T0 + 8, NULL, 0));
    /* the blocked count of d1 only counted d1's checks */
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d1);
    CU_ASSERT_EQUAL(cb ? cb->blocked : 0, 2);
    call_raw_free(cb);
    fx_close();
}

/* The escalation set after opening is what every later check names. */
static void test_call_escalation_remembered(void)
{
    fx_open();
    tp_digest_t d, other;
    digest("{\"q\": 6}", &d);
    digest("{\"q\": 7}", &other);
    char esc[TP_ESCALATION_ID_MAX];
    for (int i = 0; i < 3; i++)
        call_record(fx.a, &d, true, T0 + (uint64_t)i);
    /* open, no escalation yet: an empty name */
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 3, esc, sizeof esc));
    CU_ASSERT_STRING_EQUAL(esc, "");
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_call_set_escalation(fx.store, txn, fx.a, &d, "E000007"), 0);
    /* no record for these args: nothing to attach it to */
    CU_ASSERT_EQUAL(tp_breaker_call_set_escalation(fx.store, txn, fx.a, &other, "E000008"), MDB_NOTFOUND);
    commit(txn);
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 4, esc, sizeof esc));
    CU_ASSERT_STRING_EQUAL(esc, "E000007");
    CU_ASSERT_TRUE(call_open(fx.a, &d, T0 + 5, esc, sizeof esc));
    CU_ASSERT_STRING_EQUAL(esc, "E000007");
    /* setting it changed nothing else */
    Toolpool__CallBreaker *cb = call_raw(fx.a, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL(cb->opened_unix_us, T0 + 2);
    CU_ASSERT_EQUAL(cb->blocked, 3);
    CU_ASSERT_EQUAL(cb->n_failures_unix_us, 3);
    call_raw_free(cb);
    /* a short buffer gets a truncated, terminated name */
    char small[4];
    bool open = false;
    txn = begin();
    CU_ASSERT_EQUAL(tp_breaker_call_check(fx.store, txn, fx.a, &d, T0 + 6, &open, small, sizeof small), 0);
    commit(txn);
    CU_ASSERT_TRUE(open);
    CU_ASSERT_STRING_EQUAL(small, "E00");
    fx_close();
}

/* ---- tool breaker (rate 0.5, min_calls 4, window 10 s in 1 s buckets, cooldown 30 s) ---- */

/* A tool that never failed keeps no record and is always admitted. */
static void test_tool_healthy_keeps_no_record(void)
{
    fx_open();
    for (int i = 0; i < 50; i++)
        record(fx.a, TP_KIND_OK, false, T0 + (uint64_t)i);
    /* a permanent kind says the tool is up: no record either */
    record(fx.a, TP_KIND_PERMISSION_DENIED, false, T0 + 60);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NULL(tb);
    tool_raw_free(tb);
    CU_ASSERT_EQUAL(admit(fx.a, T0 + 100), TP_ADMIT_YES);
    /* admitting writes nothing either */
    tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NULL(tb);
    tool_raw_free(tb);
    fx_close();
}

/* Below min_calls a 100% failure rate does not open the breaker. */
static void test_tool_below_min_calls(void)
{
    fx_open();
    for (int i = 0; i < 3; i++) {
        record(fx.a, TP_KIND_TIMEOUT, false, T0 + (uint64_t)i * SEC);
        CU_ASSERT_EQUAL(admit(fx.a, T0 + (uint64_t)i * SEC + 1), TP_ADMIT_YES);
    }
    uint64_t calls, fails;
    tool_counts(fx.a, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 3);
    CU_ASSERT_EQUAL(fails, 3);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 0);
    fx_close();
}

/*
 * At min_calls, a rate exactly at the threshold opens it (2 of 4); under
 * the threshold (1 of 4, 2 of 5) it stays closed.
 */
static void test_tool_threshold(void)
{
    fx_open();
    /* a: F F S -> 3 calls, below min; S -> 2/4 = 0.5: opens */
    record(fx.a, TP_KIND_TIMEOUT, false, T0);
    record(fx.a, TP_KIND_SERVER_ERROR, false, T0 + 1);
    record(fx.a, TP_KIND_OK, false, T0 + 2);
    CU_ASSERT_EQUAL(admit(fx.a, T0 + 3), TP_ADMIT_YES);
    record(fx.a, TP_KIND_OK, false, T0 + 4);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(admit(fx.a, T0 + 5), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 1);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->opened_unix_us, T0 + 4);
    CU_ASSERT_EQUAL(tb->n_buckets, 0); /* opening starts a fresh window */
    tool_raw_free(tb);

    /* b: F S S S -> 1/4 under 0.5: closed */
    record(fx.b, TP_KIND_RATE_LIMITED, false, T0);
    for (int i = 1; i <= 3; i++)
        record(fx.b, TP_KIND_OK, false, T0 + (uint64_t)i);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(fx.b, T0 + 5), TP_ADMIT_YES);
    /* ... F -> 2/5 = 0.4, still under; F -> 3/6 = 0.5: opens */
    record(fx.b, TP_KIND_WORKER_CRASHED, false, T0 + 6);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    record(fx.b, TP_KIND_TIMEOUT, false, T0 + 7);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(admit(fx.b, T0 + 8), TP_ADMIT_NO);
    /* c was never touched */
    CU_ASSERT_EQUAL(admit(fx.c, T0 + 8), TP_ADMIT_YES);
    fx_close();
}

/* Every transient kind is a failure; permanent kinds are calls, not failures. */
static void test_tool_which_kinds_count(void)
{
    fx_open();
    static const tp_kind_t transient[] = {TP_KIND_TIMEOUT, TP_KIND_RATE_LIMITED, TP_KIND_SERVER_ERROR,
                                          TP_KIND_WORKER_CRASHED};
    for (size_t i = 0; i < 4; i++)
        record(fx.a, transient[i], false, T0 + i);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);

    /* b: one timeout, then PermissionDenied and other permanent kinds: 1/4 */
    record(fx.b, TP_KIND_TIMEOUT, false, T0);
    record(fx.b, TP_KIND_PERMISSION_DENIED, false, T0 + 1);
    record(fx.b, TP_KIND_NOT_FOUND, false, T0 + 2);
    record(fx.b, TP_KIND_TOOL_ERROR, false, T0 + 3);
    uint64_t calls, fails;
    tool_counts(fx.b, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 4);
    CU_ASSERT_EQUAL(fails, 1);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    /* more PermissionDenied: 1/6, closed (six timeouts would have opened it) */
    record(fx.b, TP_KIND_PERMISSION_DENIED, false, T0 + 4);
    record(fx.b, TP_KIND_PERMISSION_DENIED, false, T0 + 5);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(fx.b, T0 + 6), TP_ADMIT_YES);

    /* c: guard and malformed kinds (and a kind the taxonomy does not know) are not calls at all */
    record(fx.c, TP_KIND_TIMEOUT, false, T0);
    record(fx.c, TP_KIND_TIMEOUT, false, T0 + 1);
    static const tp_kind_t neither[] = {
        TP_KIND_CANCELLED,       TP_KIND_CIRCUIT_OPEN,      TP_KIND_DEADLINE_EXCEEDED, TP_KIND_INTERRUPTED,
        TP_KIND_BUDGET_EXCEEDED, TP_KIND_INVALID_ARGUMENTS, TP_KIND_UNKNOWN_TOOL,      TP_KIND_OTHER};
    for (size_t i = 0; i < sizeof neither / sizeof neither[0]; i++)
        record(fx.c, neither[i], false, T0 + 2);
    tool_counts(fx.c, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 2);
    CU_ASSERT_EQUAL(fails, 2);
    CU_ASSERT_EQUAL(tool_state(fx.c), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    record(fx.c, TP_KIND_TIMEOUT, false, T0 + 3);
    record(fx.c, TP_KIND_TIMEOUT, false, T0 + 4);
    CU_ASSERT_EQUAL(tool_state(fx.c), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    fx_close();
}

/*
 * The window is ten 1 s buckets aligned on whole seconds; a bucket leaves
 * the window exactly when now reaches its start plus the window, even if
 * its calls came late in its second.
 */
static void test_tool_bucket_rollover(void)
{
    fx_open();
    const uint64_t W = 10 * SEC;
    /* a and b: three failures late in the bucket starting at T0 */
    for (int i = 0; i < 3; i++) {
        record(fx.a, TP_KIND_TIMEOUT, false, T0 + 900000 + (uint64_t)i);
        record(fx.b, TP_KIND_TIMEOUT, false, T0 + 900000 + (uint64_t)i);
    }
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->n_buckets, 1);
    CU_ASSERT_EQUAL(tb->n_buckets ? tb->buckets[0]->start_unix_us : 0, T0);
    tool_raw_free(tb);
    /* a: a success 1 us before the bucket leaves: 3/4, opens */
    record(fx.a, TP_KIND_OK, false, T0 + W - 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    /* b: a success when it leaves (only 9.1 s after the failures): 0/1, closed */
    record(fx.b, TP_KIND_OK, false, T0 + W);
    CU_ASSERT_EQUAL(tool_state(fx.b), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    uint64_t calls, fails;
    tool_counts(fx.b, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 1);
    CU_ASSERT_EQUAL(fails, 0);
    tb = tool_raw(fx.b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->n_buckets, 1);
    CU_ASSERT_EQUAL(tb->n_buckets ? tb->buckets[0]->start_unix_us : 0, T0 + W);
    tool_raw_free(tb);
    fx_close();
}

/*
 * One failure a second in three buckets; the fourth, ten seconds after the
 * first, finds the first bucket gone: 3 calls, below min_calls. The fifth
 * makes four in the window and opens it. Every bucket in the window is
 * kept, oldest first, one per second.
 */
static void test_tool_window_slides(void)
{
    fx_open();
    const uint64_t W = 10 * SEC;
    record(fx.a, TP_KIND_TIMEOUT, false, T0);
    record(fx.a, TP_KIND_TIMEOUT, false, T0 + 1 * SEC);
    record(fx.a, TP_KIND_TIMEOUT, false, T0 + 2 * SEC);
    record(fx.a, TP_KIND_TIMEOUT, false, T0 + W);
    uint64_t calls, fails;
    tool_counts(fx.a, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 3);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL_FATAL(tb->n_buckets, 3);
    CU_ASSERT_EQUAL(tb->buckets[0]->start_unix_us, T0 + 1 * SEC);
    CU_ASSERT_EQUAL(tb->buckets[1]->start_unix_us, T0 + 2 * SEC);
    CU_ASSERT_EQUAL(tb->buckets[2]->start_unix_us, T0 + W);
    tool_raw_free(tb);
    record(fx.a, TP_KIND_TIMEOUT, false, T0 + W + 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);

    /* b: one call in each of ten consecutive buckets, all kept; the eleventh drops the first */
    for (int i = 0; i < 10; i++)
        record(fx.b, i == 0 ? TP_KIND_TIMEOUT : TP_KIND_OK, false, T0 + (uint64_t)i * SEC + 500000);
    tb = tool_raw(fx.b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->n_buckets, 10);
    for (size_t i = 0; i < tb->n_buckets; i++)
        CU_ASSERT_EQUAL(tb->buckets[i]->start_unix_us, T0 + i * SEC);
    tool_raw_free(tb);
    record(fx.b, TP_KIND_OK, false, T0 + W + 500000);
    tb = tool_raw(fx.b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->n_buckets, 10);
    CU_ASSERT_EQUAL(tb->n_buckets ? tb->buckets[0]->start_unix_us : 0, T0 + 1 * SEC);
    CU_ASSERT_EQUAL(tb->n_buckets ? tb->buckets[tb->n_buckets - 1]->start_unix_us : 0, T0 + W);
    tool_raw_free(tb);
    tool_counts(fx.b, &calls, &fails);
    CU_ASSERT_EQUAL(calls, 10);
    CU_ASSERT_EQUAL(fails, 0);
    fx_close();
}

/* Open, it refuses until the cooldown; then one probe (probes 1), then refuses again. */
static void test_tool_cooldown_then_probe(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.a, T0);
    CU_ASSERT_EQUAL(admit(fx.a, opened + 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C - 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C + 1), TP_ADMIT_NO);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->probes_out, 1);
    CU_ASSERT_EQUAL(tb->probe_unix_us, opened + C);
    tool_raw_free(tb);
    /* the probe succeeds: closed, a fresh window, every attempt admitted */
    record(fx.a, TP_KIND_OK, true, opened + C + 2);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C + 3), TP_ADMIT_YES);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C + 3), TP_ADMIT_YES);
    tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->probes_out, 0);
    CU_ASSERT_EQUAL(tb->n_buckets, 0);
    CU_ASSERT_EQUAL(tb->trips, 1);
    /* its history: each transition, its cause, and the attempts refused in the state it left */
    CU_ASSERT_EQUAL_FATAL(tb->n_history, 3);
    CU_ASSERT_EQUAL(tb->history[0]->state, TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(tb->history[0]->at_unix_us, opened);
    CU_ASSERT_STRING_EQUAL(tb->history[0]->cause, "4 of 4 attempts failed within 10s (last: Timeout)");
    CU_ASSERT_EQUAL(tb->history[1]->state, TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(tb->history[1]->at_unix_us, opened + C);
    CU_ASSERT_STRING_EQUAL(tb->history[1]->cause, "its cooldown (30s) passed: probing");
    CU_ASSERT_EQUAL(tb->history[1]->refused, 3);
    CU_ASSERT_EQUAL(tb->history[2]->state, TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_STRING_EQUAL(tb->history[2]->cause, "a probe answered (ok)");
    CU_ASSERT_EQUAL(tb->history[2]->refused, 2);
    CU_ASSERT_EQUAL(tb->refused, 0);
    tool_raw_free(tb);
    /* the old failures are forgotten: three timeouts are below min_calls again */
    for (int i = 0; i < 3; i++)
        record(fx.a, TP_KIND_TIMEOUT, false, opened + C + 4);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    fx_close();
}

/* With probes 2, two concurrent probes go through and the third attempt is refused. */
static void test_tool_probes_limit(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.two, T0);
    CU_ASSERT_EQUAL(admit(fx.two, opened + C), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, opened + C + 1), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, opened + C + 2), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.two, opened + C + 3), TP_ADMIT_NO);
    /* a probe that succeeds closes it, whatever the other one is doing */
    record(fx.two, TP_KIND_OK, true, opened + C + 4);
    CU_ASSERT_EQUAL(tool_state(fx.two), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(fx.two, opened + C + 5), TP_ADMIT_YES);
    fx_close();
}

/* A probe that fails opens it again, for a full cooldown from then, and counts a trip. */
static void test_tool_probe_failure_reopens(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.a, T0);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 1);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C), TP_ADMIT_PROBE);
    uint64_t failed_at = opened + C + 5 * SEC;
    record(fx.a, TP_KIND_RATE_LIMITED, true, failed_at);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->state, TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(tb->opened_unix_us, failed_at);
    CU_ASSERT_EQUAL(tb->trips, 2);
    CU_ASSERT_EQUAL(tb->probes_out, 0);
    tool_raw_free(tb);
    CU_ASSERT_EQUAL(admit(fx.a, failed_at + 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, failed_at + C - 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, failed_at + C), TP_ADMIT_PROBE);
    /* and again: three trips */
    record(fx.a, TP_KIND_TIMEOUT, true, failed_at + C + 1);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 3);
    CU_ASSERT_EQUAL(admit(fx.a, failed_at + C + 2), TP_ADMIT_NO);
    fx_close();
}

/* A probe answered PermissionDenied shows the tool is up: it closes the breaker. */
static void test_tool_probe_permanent_closes(void)
{
    fx_open();
    uint64_t opened = trip(fx.a, T0);
    CU_ASSERT_EQUAL(admit(fx.a, opened + 30 * SEC), TP_ADMIT_PROBE);
    record(fx.a, TP_KIND_PERMISSION_DENIED, true, opened + 30 * SEC + 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 1);
    CU_ASSERT_EQUAL(admit(fx.a, opened + 30 * SEC + 2), TP_ADMIT_YES);
    fx_close();
}

/*
 * Attempts that were admitted before the breaker opened and report while
 * it is open or half-open are not probes: they neither close nor reopen it,
 * nor take a probe's place.
 */
static void test_tool_stragglers_are_not_probes(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.a, T0);
    record(fx.a, TP_KIND_OK, false, opened + 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_OPEN);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C - 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C), TP_ADMIT_PROBE);
    record(fx.a, TP_KIND_OK, false, opened + C + 1);
    record(fx.a, TP_KIND_TIMEOUT, false, opened + C + 2);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 1);
    CU_ASSERT_EQUAL(admit(fx.a, opened + C + 3), TP_ADMIT_NO);
    fx_close();
}

/*
 * A probe that never reports back (its supervisor died, its attempt never
 * ran) is given up a cooldown after it went out: the next attempt is a new
 * probe. Refusals in between do not push that moment back, so a tool that
 * is asked all the time is not refused forever.
 */
static void test_tool_lost_probe(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.a, T0);
    uint64_t p = opened + C;
    CU_ASSERT_EQUAL(admit(fx.a, p), TP_ADMIT_PROBE);
    /* ... and it is never recorded. Every second until a cooldown after it: refused. */
    for (uint64_t t = p + 1; t < p + C; t += SEC)
        CU_ASSERT_EQUAL(admit(fx.a, t), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, p + C - 1), TP_ADMIT_NO);
    Toolpool__ToolBreaker *tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->state, TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(tb->probes_out, 1);
    CU_ASSERT_EQUAL(tb->probe_unix_us, p); /* refusals left it alone */
    tool_raw_free(tb);
    /* a cooldown after the lost probe went out: a new probe, and only one */
    CU_ASSERT_EQUAL(admit(fx.a, p + C), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.a, p + C), TP_ADMIT_NO);
    tb = tool_raw(fx.a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(tb->probes_out, 1);
    CU_ASSERT_EQUAL(tb->probe_unix_us, p + C);
    tool_raw_free(tb);
    /* that one is lost too: the same again, a cooldown after it */
    CU_ASSERT_EQUAL(admit(fx.a, p + 2 * C - 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.a, p + 2 * C), TP_ADMIT_PROBE);
    /* this one comes back healthy: closed */
    record(fx.a, TP_KIND_OK, true, p + 2 * C + 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(fx.a, p + 2 * C + 2), TP_ADMIT_YES);
    fx_close();
}

/*
 * With probes 2, both lost: the cooldown counts from the later of them, and
 * then both slots are free again.
 */
static void test_tool_lost_probes_counted_from_last(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.two, T0);
    uint64_t p1 = opened + C, p2 = p1 + 5 * SEC;
    CU_ASSERT_EQUAL(admit(fx.two, p1), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, p2), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, p1 + C), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.two, p2 + C - 1), TP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(fx.two, p2 + C), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, p2 + C), TP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(fx.two, p2 + C), TP_ADMIT_NO);
    fx_close();
}

/*
 * A probe whose attempt ends in a guard kind (cancelled, interrupted) says
 * nothing of the tool's health: the record leaves the breaker alone, so
 * that probe's slot is freed like a lost probe's, a cooldown after it went
 * out at the latest.
 */
static void test_tool_cancelled_probe(void)
{
    fx_open();
    const uint64_t C = 30 * SEC;
    uint64_t opened = trip(fx.a, T0);
    uint64_t p = opened + C;
    CU_ASSERT_EQUAL(admit(fx.a, p), TP_ADMIT_PROBE);
    record(fx.a, TP_KIND_CANCELLED, true, p + 1);
    CU_ASSERT_EQUAL(tool_state(fx.a), TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(tool_trips(fx.a), 1);
    CU_ASSERT_EQUAL(admit(fx.a, p + C), TP_ADMIT_PROBE);
    fx_close();
}

/* ---- escalation ids ---- */

static void escalate(MDB_txn *txn, const char *call_id, const char *want)
{
    Toolpool__Escalation e = TOOLPOOL__ESCALATION__INIT;
    e.call_id = (char *)call_id;
    e.tool = "a";
    e.reason = "same call failed 3 times";
    char id[TP_ESCALATION_ID_MAX] = "";
    CU_ASSERT_EQUAL(tp_escalate(fx.store, txn, &e, id), 0);
    CU_ASSERT_STRING_EQUAL(id, want);
    if (strcmp(id, want) != 0)
        fprintf(stderr, "\n  escalation of %s: got id \"%s\", want \"%s\"\n", call_id, id, want);
    CU_ASSERT_PTR_EQUAL(e.id, id);
    CU_ASSERT_NOT_EQUAL(e.created_unix_us, 0);
}

static Toolpool__Escalation *escalation_raw(const char *id)
{
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    Toolpool__Escalation *e = NULL;
    int rc = tp_store_get_msg(fx.store, txn, TP_DB_ESCALATIONS, id, strlen(id), &toolpool__escalation__descriptor,
                              (ProtobufCMessage **)&e);
    mdb_txn_abort(txn);
    return rc == 0 ? e : NULL;
}

/* Ids are E and a six-digit sequence, continued across transactions and reopenings. */
static void test_escalation_ids_sequential(void)
{
    fx_open();
    MDB_txn *txn = begin();
    escalate(txn, "c1", "E000001");
    escalate(txn, "c2", "E000002");
    commit(txn);
    txn = begin();
    escalate(txn, "c3", "E000003");
    commit(txn);
    /* an aborted transaction takes its ids back with it */
    txn = begin();
    escalate(txn, "gone", "E000004");
    mdb_txn_abort(txn);
    txn = begin();
    escalate(txn, "c4", "E000004");
    commit(txn);
    /* another process on the store (here: the store reopened) continues the sequence */
    char sd[4200], err[1024];
    snprintf(sd, sizeof sd, "%s", tp_store_dir(fx.store));
    tp_store_close(fx.store);
    fx.store = tp_store_open(sd, TP_STORE_NOSYNC, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
    txn = begin();
    escalate(txn, "c5", "E000005");
    commit(txn);
    /* each record is stored under its id with what it was given */
    Toolpool__Escalation *e = escalation_raw("E000003");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_STRING_EQUAL(e->id, "E000003");
    CU_ASSERT_STRING_EQUAL(e->call_id, "c3");
    CU_ASSERT_STRING_EQUAL(e->reason, "same call failed 3 times");
    protobuf_c_message_free_unpacked(&e->base, NULL);
    e = escalation_raw("E000004");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_STRING_EQUAL(e->call_id, "c4");
    protobuf_c_message_free_unpacked(&e->base, NULL);
    fx_close();
}

/* Blocked calls are counted on the escalation; an unknown id is no error. */
static void test_escalation_blocked(void)
{
    fx_open();
    MDB_txn *txn = begin();
    escalate(txn, "c1", "E000001");
    CU_ASSERT_EQUAL(tp_escalation_blocked(fx.store, txn, "E000001"), 0);
    commit(txn);
    txn = begin();
    CU_ASSERT_EQUAL(tp_escalation_blocked(fx.store, txn, "E000001"), 0);
    CU_ASSERT_EQUAL(tp_escalation_blocked(fx.store, txn, "E999999"), 0);
    commit(txn);
    Toolpool__Escalation *e = escalation_raw("E000001");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(e->blocked, 2);
    protobuf_c_message_free_unpacked(&e->base, NULL);
    e = escalation_raw("E999999");
    CU_ASSERT_PTR_NULL(e);
    fx_close();
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("breaker policy", NULL, NULL);
    CU_add_test(s, "registry defaults and overrides", test_policy_from_registry);
    CU_add_test(s, "args digest is canonical", test_digest);
    s = CU_add_suite("same-call breaker", NULL, NULL);
    CU_add_test(s, "N failures open it, the next check is blocked", test_call_opens_after_n_failures);
    CU_add_test(s, "N comes from the policy", test_call_n_is_the_policy);
    CU_add_test(s, "a success clears the count", test_call_success_clears);
    CU_add_test(s, "failures exactly a window old do not count", test_call_window_boundary);
    CU_add_test(s, "open closes a window after opening", test_call_open_closes_after_window);
    CU_add_test(s, "a failure while open keeps it as it was", test_call_failure_while_open);
    CU_add_test(s, "opens and closes are kept, the last 16", test_call_history);
    CU_add_test(s, "other args and other tools are independent", test_call_independent);
    CU_add_test(s, "set_escalation is returned by check", test_call_escalation_remembered);
    s = CU_add_suite("tool breaker", NULL, NULL);
    CU_add_test(s, "a healthy tool keeps no record", test_tool_healthy_keeps_no_record);
    CU_add_test(s, "below min_calls never opens", test_tool_below_min_calls);
    CU_add_test(s, "opens at the threshold rate", test_tool_threshold);
    CU_add_test(s, "only transient kinds are failures", test_tool_which_kinds_count);
    CU_add_test(s, "a bucket leaves exactly at start + window", test_tool_bucket_rollover);
    CU_add_test(s, "the window slides bucket by bucket", test_tool_window_slides);
    CU_add_test(s, "cooldown, then a probe, a success closes", test_tool_cooldown_then_probe);
    CU_add_test(s, "at most probes concurrent probes", test_tool_probes_limit);
    CU_add_test(s, "a probe's failure reopens it", test_tool_probe_failure_reopens);
    CU_add_test(s, "a probe's PermissionDenied closes it", test_tool_probe_permanent_closes);
    CU_add_test(s, "late non-probe attempts change nothing", test_tool_stragglers_are_not_probes);
    CU_add_test(s, "a lost probe is replaced a cooldown later", test_tool_lost_probe);
    CU_add_test(s, "lost probes: cooldown from the last one", test_tool_lost_probes_counted_from_last);
    CU_add_test(s, "a cancelled probe frees its slot", test_tool_cancelled_probe);
    s = CU_add_suite("escalation ids", NULL, NULL);
    CU_add_test(s, "sequential across transactions", test_escalation_ids_sequential);
    CU_add_test(s, "blocked calls are counted", test_escalation_blocked);
    return tp_test_run();
}
