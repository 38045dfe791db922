/*
 * What makes a run resumable (supervisor/store/checkpoint.c), against a real
 * store: results stored and served back byte for byte with their input's
 * digest, a job's checkpoint growing step by step, an agent loop's own
 * state riding beside it without either write losing the other's, and the
 * in-flight markers of calls that must not run twice.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "records.h"
#include "resultline.h"
#include "steps.h"
#include "testutil.h"

typedef struct {
    char *dir;
    tp_store_t *store;
    unsigned failures_before;
} fx_t;

static fx_t fx;

static void fx_open(void)
{
    memset(&fx, 0, sizeof fx);
    fx.failures_before = CU_get_number_of_failures();
    fx.dir = strdup(tp_test_tmpdir("checkpoint"));
    char err[1024];
    fx.store = tp_store_open(fx.dir, TP_STORE_NOSYNC, err, sizeof err);
    if (fx.store == NULL)
        fprintf(stderr, "\n  store: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
}

/* Closes the store; the directory is kept (and named) when the test failed. */
static void fx_close(void)
{
    tp_store_close(fx.store);
    if (CU_get_number_of_failures() != fx.failures_before)
        fprintf(stderr, "\n  kept %s\n", fx.dir);
    else
        tp_test_rmtree(fx.dir);
    free(fx.dir);
}

/* Closes and reopens the store: what follows reads what was committed. */
static void fx_reopen(void)
{
    char err[1024];
    tp_store_close(fx.store);
    fx.store = tp_store_open(fx.dir, TP_STORE_NOSYNC, err, sizeof err);
    if (fx.store == NULL)
        fprintf(stderr, "\n  reopen: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
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

static MDB_txn *reader(void)
{
    MDB_txn *txn = NULL;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx.store, &txn), 0);
    return txn;
}

/* The job's checkpoint as committed; NULL (and the assertion fails) when there is none. */
static Toolpool__Checkpoint *checkpoint(const char *job)
{
    Toolpool__Checkpoint *cp = NULL;
    MDB_txn *txn = reader();
    CU_ASSERT_EQUAL(tp_checkpoint_get(fx.store, txn, job, &cp), 0);
    mdb_txn_abort(txn);
    return cp;
}

/* One step, in a transaction of its own. */
static void step(const char *job, const char *call, uint64_t n, uint64_t steps, uint64_t attempts, double cost,
                 uint64_t wall, tp_kind_t stopped, const char *msg)
{
    tp_job_usage_t u = {.steps = steps, .calls = attempts, .cost = cost, .first_us = 1};
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, job, call, n, &u, wall, stopped, msg), 0);
    commit(txn);
}

static void state_put(const char *job, uint64_t n, const char *json)
{
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_checkpoint_state_put(fx.store, txn, job, n, json, strlen(json)), 0);
    commit(txn);
}

/* The job's message list (the steps database, steps.h) is exactly want, and its count says so. */
static bool calls_are(const Toolpool__Checkpoint *cp, const char *const *want, size_t n)
{
    if (cp == NULL || tp_steps_count(cp) != n)
        return false;
    char **ids;
    size_t got;
    MDB_txn *txn = reader();
    int rc = tp_steps_list(fx.store, txn, cp, &ids, &got);
    mdb_txn_abort(txn);
    bool same = rc == 0 && got == n;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(ids[i], want[i]) == 0;
    if (rc == 0)
        free(ids);
    return same;
}

static bool state_is(const Toolpool__Checkpoint *cp, const char *json)
{
    return cp && cp->has_state && cp->state.len == strlen(json) && memcmp(cp->state.data, json, cp->state.len) == 0;
}

/* ---- identity and results ---- */

/* The identity digest depends on the tool and the args' digest, and is stable. */
static void test_identity_digest(void)
{
    tp_digest_t args1, args2, a1, a1again, b1, a2;
    tp_digest_bytes("{\"q\":1}", 7, &args1);
    tp_digest_bytes("{\"q\":2}", 7, &args2);
    tp_identity_digest("a", &args1, &a1);
    tp_identity_digest("a", &args1, &a1again);
    tp_identity_digest("b", &args1, &b1);
    tp_identity_digest("a", &args2, &a2);
    CU_ASSERT_EQUAL(memcmp(a1.b, a1again.b, TP_DIGEST_LEN), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a1.b, b1.b, TP_DIGEST_LEN), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a1.b, a2.b, TP_DIGEST_LEN), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a1.b, args1.b, TP_DIGEST_LEN), 0);
}

/*
 * A result comes back as stored: its line byte for byte (a NUL inside
 * included), its input digest, and what the summary counts.
 */
static void test_result_round_trip(void)
{
    fx_open();
    tp_digest_t args, ident;
    tp_digest_bytes("{\"q\":1}", 7, &args);
    tp_identity_digest("search", &args, &ident);
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = true;
    r.id = "call-1";
    r.result.data = (uint8_t *)"\"a\\u0000b\"";
    r.result.len = strlen((const char *)r.result.data);
    r.tool = "search";
    r.ok = true;
    r.kind = "";
    r.attempts = 2;
    r.duration_us = 123456;
    r.input_digest.data = ident.b;
    r.input_digest.len = TP_DIGEST_LEN;
    tp_buf_t line = {0};
    CU_ASSERT_EQUAL_FATAL(tp_result_write(&line, &r), 0);
    Toolpool__Result f = TOOLPOOL__RESULT__INIT;
    f.has_id = true;
    f.id = "call-2";
    f.ok = false;
    f.kind = "Timeout";
    f.attempts = 3;
    f.duration_us = 9;
    f.input_digest.data = ident.b;
    f.input_digest.len = TP_DIGEST_LEN;
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_result_put(fx.store, txn, &r), 0);
    CU_ASSERT_EQUAL(tp_result_put(fx.store, txn, &f), 0);
    /* readable inside the transaction that wrote it */
    Toolpool__StoredResult *sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "call-1", &sr), 0);
    CU_ASSERT_PTR_NOT_NULL(sr);
    if (sr)
        tp_result_free(sr);
    commit(txn);
    fx_reopen();

    txn = reader();
    sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "call-1", &sr), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
    /* the record, not a line: its fields, and the line rendered from it the same */
    CU_ASSERT_EQUAL(sr->line.len, 0);
    const Toolpool__Result *got = sr->result;
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    tp_buf_t again = {0};
    CU_ASSERT_EQUAL(tp_result_line(&again, sr), 0);
    CU_ASSERT_EQUAL(again.len, line.len);
    CU_ASSERT_EQUAL(again.len == line.len ? memcmp(again.data, line.data, line.len) : -1, 0);
    tp_buf_free(&again);
    tp_buf_free(&line);
    CU_ASSERT_EQUAL(got->input_digest.len, TP_DIGEST_LEN);
    CU_ASSERT_EQUAL(
        got->input_digest.len == TP_DIGEST_LEN ? memcmp(got->input_digest.data, ident.b, TP_DIGEST_LEN) : -1, 0);
    CU_ASSERT_TRUE(got->ok);
    CU_ASSERT_STRING_EQUAL(got->kind, "");
    CU_ASSERT_STRING_EQUAL(got->tool, "search");
    CU_ASSERT_EQUAL(got->attempts, 2);
    CU_ASSERT_EQUAL(got->duration_us, 123456);
    CU_ASSERT_NOT_EQUAL(sr->ended_unix_us, 0);
    tp_result_free(sr);

    sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "call-2", &sr), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
    CU_ASSERT_FALSE(sr->result->ok);
    CU_ASSERT_STRING_EQUAL(sr->result->kind, "Timeout");
    CU_ASSERT_EQUAL(sr->result->attempts, 3);
    CU_ASSERT_EQUAL(sr->result->input_digest.len, TP_DIGEST_LEN);
    tp_result_free(sr);

    /* an unknown id, or a prefix of a known one: MDB_NOTFOUND, nothing returned */
    Toolpool__StoredResult dummy;
    sr = &dummy; /* must be cleared */
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "call-3", &sr), MDB_NOTFOUND);
    CU_ASSERT_PTR_NULL(sr);
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "call", &sr), MDB_NOTFOUND);
    mdb_txn_abort(txn);
    fx_close();
}

/* A result stored again under the same id replaces the first; a record that does not unpack is TP_EPROTO. */
static void test_result_replace_and_corrupt(void)
{
    fx_open();
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    uint8_t digest[TP_DIGEST_LEN] = {1};
    r.has_id = true;
    r.id = "x";
    r.kind = "Timeout";
    r.message = "first";
    r.attempts = 1;
    r.input_digest.data = digest;
    r.input_digest.len = TP_DIGEST_LEN;
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_result_put(fx.store, txn, &r), 0);
    commit(txn);
    r.attempts = 4;
    r.message = "second";
    txn = begin();
    CU_ASSERT_EQUAL(tp_result_put(fx.store, txn, &r), 0);
    /* a record that is not a StoredResult */
    MDB_val k = {7, "garbage"}, v = {3, "\xff\xff\xff"};
    CU_ASSERT_EQUAL(mdb_put(txn, tp_store_dbi(fx.store, TP_DB_RESULTS), &k, &v, 0), 0);
    commit(txn);
    txn = reader();
    Toolpool__StoredResult *sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "x", &sr), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
    CU_ASSERT_STRING_EQUAL(sr->result->message, "second");
    CU_ASSERT_EQUAL(sr->result->attempts, 4);
    tp_result_free(sr);
    sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "garbage", &sr), TP_EPROTO);
    CU_ASSERT_PTR_NULL(sr);
    mdb_txn_abort(txn);
    fx_close();
}

/* ---- job checkpoints ---- */

/*
 * Each step appends its call, in the order the steps end; last_step is the
 * highest step ended, not the last; usage, wall and what stopped the job
 * are the latest.
 */
static void test_checkpoint_steps(void)
{
    fx_open();
    Toolpool__Checkpoint *cp = NULL;
    MDB_txn *txn = reader();
    CU_ASSERT_EQUAL(tp_checkpoint_get(fx.store, txn, "j1", &cp), MDB_NOTFOUND);
    CU_ASSERT_PTR_NULL(cp);
    mdb_txn_abort(txn);

    step("j1", "c1", 1, 1, 1, 0.0, 1000, TP_KIND_OK, NULL);
    step("j1", "c2", 3, 2, 3, 0.25, 2000, TP_KIND_OK, NULL);
    step("j1", "c3", 2, 3, 5, 0.5, 7000, TP_KIND_OK, NULL);
    step("j2", "other", 9, 1, 1, 0.0, 1, TP_KIND_OK, NULL);
    fx_reopen();

    cp = checkpoint("j1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want[] = {"c1", "c2", "c3"};
    CU_ASSERT_TRUE(calls_are(cp, want, 3));
    CU_ASSERT_STRING_EQUAL(cp->job, "j1");
    CU_ASSERT_EQUAL(cp->last_step, 3);
    CU_ASSERT_EQUAL(cp->steps, 3);
    CU_ASSERT_EQUAL(cp->attempts, 5);
    CU_ASSERT_DOUBLE_EQUAL(cp->cost, 0.5, 1e-12);
    CU_ASSERT_EQUAL(cp->wall_used_us, 7000);
    CU_ASSERT_STRING_EQUAL(cp->stopped, "");
    CU_ASSERT_STRING_EQUAL(cp->stop_message, "");
    CU_ASSERT_NOT_EQUAL(cp->updated_unix_us, 0);
    CU_ASSERT_FALSE(cp->has_state);
    toolpool__checkpoint__free_unpacked(cp, NULL);

    /* another job's steps are its own */
    cp = checkpoint("j2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want2[] = {"other"};
    CU_ASSERT_TRUE(calls_are(cp, want2, 1));
    CU_ASSERT_EQUAL(cp->last_step, 9);
    toolpool__checkpoint__free_unpacked(cp, NULL);

    /* a guard stops the job: its kind's name and message are kept */
    step("j1", "c4", 4, 4, 6, 1.5, 8000, TP_KIND_BUDGET_EXCEEDED, "max_cost 1 reached");
    cp = checkpoint("j1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want3[] = {"c1", "c2", "c3", "c4"};
    CU_ASSERT_TRUE(calls_are(cp, want3, 4));
    CU_ASSERT_EQUAL(cp->last_step, 4);
    CU_ASSERT_STRING_EQUAL(cp->stopped, "BudgetExceeded");
    CU_ASSERT_STRING_EQUAL(cp->stop_message, "max_cost 1 reached");
    CU_ASSERT_DOUBLE_EQUAL(cp->cost, 1.5, 1e-12);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    fx_close();
}

/* Steps of one turn share a transaction: each sees the one before it. */
static void test_checkpoint_steps_one_txn(void)
{
    fx_open();
    tp_job_usage_t u = {.steps = 1, .calls = 1};
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, "j", "a", 5, &u, 0, TP_KIND_OK, NULL), 0);
    u.steps = 2;
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, "j", "b", 6, &u, 0, TP_KIND_OK, NULL), 0);
    u.steps = 3;
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, "j", "c", 1, &u, 0, TP_KIND_STEP_CAP_REACHED, NULL), 0);
    commit(txn);
    Toolpool__Checkpoint *cp = checkpoint("j");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want[] = {"a", "b", "c"};
    CU_ASSERT_TRUE(calls_are(cp, want, 3));
    CU_ASSERT_EQUAL(cp->last_step, 6);
    CU_ASSERT_EQUAL(cp->steps, 3);
    CU_ASSERT_STRING_EQUAL(cp->stopped, "StepCapReached");
    CU_ASSERT_STRING_EQUAL(cp->stop_message, "");
    toolpool__checkpoint__free_unpacked(cp, NULL);
    /* an aborted turn leaves the checkpoint as it was */
    txn = begin();
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, "j", "d", 7, &u, 0, TP_KIND_OK, NULL), 0);
    mdb_txn_abort(txn);
    cp = checkpoint("j");
    CU_ASSERT_TRUE(calls_are(cp, want, 3));
    if (cp)
        toolpool__checkpoint__free_unpacked(cp, NULL);
    fx_close();
}

/*
 * The agent loop's state and the engine's steps share one record: a state
 * write keeps every step, a step keeps the state, and the latest state
 * replaces the one before (a shorter one too).
 */
static void test_checkpoint_state_and_steps(void)
{
    fx_open();
    const char *s1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"turn\":5}";
    const char *s2 = "{\"turn\":7}";

    /* state first, on a job with no checkpoint yet */
    state_put("j", 5, s1);
    Toolpool__Checkpoint *cp = checkpoint("j");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    CU_ASSERT_STRING_EQUAL(cp->job, "j");
    CU_ASSERT_TRUE(state_is(cp, s1));
    CU_ASSERT_EQUAL(cp->state_step, 5);
    CU_ASSERT_NOT_EQUAL(cp->state_unix_us, 0);
    CU_ASSERT_EQUAL(tp_steps_count(cp), 0);
    CU_ASSERT_EQUAL(cp->last_step, 0);
    uint64_t state_at = cp->state_unix_us;
    toolpool__checkpoint__free_unpacked(cp, NULL);

    /* a step keeps the state, its step and its time */
    step("j", "c1", 6, 1, 2, 0.125, 300, TP_KIND_OK, NULL);
    cp = checkpoint("j");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want1[] = {"c1"};
    CU_ASSERT_TRUE(calls_are(cp, want1, 1));
    CU_ASSERT_TRUE(state_is(cp, s1));
    CU_ASSERT_EQUAL(cp->state_step, 5);
    CU_ASSERT_EQUAL(cp->state_unix_us, state_at);
    toolpool__checkpoint__free_unpacked(cp, NULL);

    /* a later state keeps the steps, usage and stop, and replaces the document */
    step("j", "c2", 7, 2, 3, 0.25, 400, TP_KIND_DEADLINE_EXCEEDED, "max_wall 1s");
    state_put("j", 7, s2);
    cp = checkpoint("j");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want2[] = {"c1", "c2"};
    CU_ASSERT_TRUE(calls_are(cp, want2, 2));
    CU_ASSERT_EQUAL(cp->last_step, 7);
    CU_ASSERT_EQUAL(cp->steps, 2);
    CU_ASSERT_EQUAL(cp->attempts, 3);
    CU_ASSERT_DOUBLE_EQUAL(cp->cost, 0.25, 1e-12);
    CU_ASSERT_EQUAL(cp->wall_used_us, 400);
    CU_ASSERT_STRING_EQUAL(cp->stopped, "DeadlineExceeded");
    CU_ASSERT_STRING_EQUAL(cp->stop_message, "max_wall 1s");
    CU_ASSERT_TRUE(state_is(cp, s2));
    CU_ASSERT_EQUAL(cp->state_step, 7);
    toolpool__checkpoint__free_unpacked(cp, NULL);

    /* and a step after that keeps the new one, across a reopening */
    fx_reopen();
    step("j", "c3", 8, 3, 4, 0.5, 500, TP_KIND_OK, NULL);
    cp = checkpoint("j");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char *const want3[] = {"c1", "c2", "c3"};
    CU_ASSERT_TRUE(calls_are(cp, want3, 3));
    CU_ASSERT_TRUE(state_is(cp, s2));
    CU_ASSERT_EQUAL(cp->state_step, 7);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    fx_close();
}

/* A state document of a few hundred kilobytes comes back whole. */
static void test_checkpoint_large_state(void)
{
    fx_open();
    size_t n = 300000;
    char *doc = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    for (size_t i = 0; i < n; i++)
        doc[i] = (char)('a' + i % 26);
    doc[0] = '"';
    doc[n - 1] = '"';
    doc[n] = 0;
    state_put("big", 1, doc);
    step("big", "c1", 1, 1, 1, 0, 0, TP_KIND_OK, NULL);
    Toolpool__Checkpoint *cp = checkpoint("big");
    CU_ASSERT_TRUE(state_is(cp, doc));
    if (cp)
        toolpool__checkpoint__free_unpacked(cp, NULL);
    free(doc);
    fx_close();
}

/* ---- in-flight markers ---- */

static void test_inflight(void)
{
    fx_open();
    tp_digest_t d;
    tp_digest_bytes("x", 1, &d);
    Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
    f.call_id = "pay-1";
    f.input_digest.data = d.b;
    f.input_digest.len = TP_DIGEST_LEN;
    f.tool = "payments.charge";
    f.job = "order-7";
    f.step = 3;
    f.attempt = 1;
    f.started_unix_us = 1700000000000000ull;
    f.owner_pid = 4242;
    f.owner_start = 987654;
    f.owner_boot = "6f1c2d3e-boot";
    f.claim_only = true;
    MDB_txn *txn = begin();
    CU_ASSERT_EQUAL(tp_inflight_put(fx.store, txn, &f), 0);
    commit(txn);
    fx_reopen();

    Toolpool__InFlight *g = NULL;
    txn = reader();
    CU_ASSERT_EQUAL(tp_inflight_get(fx.store, txn, "pay-1", &g), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(g->call_id, "pay-1");
    CU_ASSERT_EQUAL(g->input_digest.len, TP_DIGEST_LEN);
    CU_ASSERT_EQUAL(g->input_digest.len == TP_DIGEST_LEN ? memcmp(g->input_digest.data, d.b, TP_DIGEST_LEN) : -1, 0);
    CU_ASSERT_STRING_EQUAL(g->tool, "payments.charge");
    CU_ASSERT_STRING_EQUAL(g->job, "order-7");
    CU_ASSERT_EQUAL(g->step, 3);
    CU_ASSERT_EQUAL(g->attempt, 1);
    CU_ASSERT_EQUAL(g->started_unix_us, 1700000000000000ull);
    CU_ASSERT_EQUAL(g->owner_pid, 4242);
    CU_ASSERT_EQUAL(g->owner_start, 987654);
    CU_ASSERT_STRING_EQUAL(g->owner_boot, "6f1c2d3e-boot");
    CU_ASSERT_TRUE(g->claim_only);
    protobuf_c_message_free_unpacked(&g->base, NULL);
    g = NULL;
    CU_ASSERT_EQUAL(tp_inflight_get(fx.store, txn, "pay-2", &g), MDB_NOTFOUND);
    CU_ASSERT_PTR_NULL(g);
    mdb_txn_abort(txn);

    /* deleted: gone; deleting it again, or one never written, is no error */
    txn = begin();
    CU_ASSERT_EQUAL(tp_inflight_del(fx.store, txn, "pay-1"), 0);
    CU_ASSERT_EQUAL(tp_inflight_del(fx.store, txn, "pay-1"), 0);
    CU_ASSERT_EQUAL(tp_inflight_del(fx.store, txn, "never"), 0);
    commit(txn);
    txn = reader();
    CU_ASSERT_EQUAL(tp_inflight_get(fx.store, txn, "pay-1", &g), MDB_NOTFOUND);
    mdb_txn_abort(txn);
    /* a marker is not a result: results and in-flight markers are apart */
    txn = begin();
    CU_ASSERT_EQUAL(tp_inflight_put(fx.store, txn, &f), 0);
    Toolpool__StoredResult *sr = NULL;
    CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "pay-1", &sr), MDB_NOTFOUND);
    commit(txn);
    fx_close();
}

/*
 * A job of many steps writes each id once: the checkpoint record stays
 * small however long the list (it held every id before, rewritten at each
 * step), and a call listed again (a rerun) keeps its place.
 */
static void test_long_job_list(void)
{
    fx_open();
    tp_job_usage_t u = {.first_us = 1};
    MDB_txn *txn = begin();
    char id[32];
    for (int i = 1; i <= 5000; i++) {
        snprintf(id, sizeof id, "call-%d", i);
        u.steps = (uint64_t)i;
        CU_ASSERT_EQUAL_FATAL(tp_checkpoint_step(fx.store, txn, "long", id, (uint64_t)i, &u, 0, TP_KIND_OK, NULL), 0);
    }
    CU_ASSERT_EQUAL(tp_checkpoint_step(fx.store, txn, "long", "call-7", 7, &u, 0, TP_KIND_OK, NULL), 0);
    commit(txn);
    txn = reader();
    MDB_val k = {4, "long"}, v;
    CU_ASSERT_EQUAL(mdb_get(txn, tp_store_dbi(fx.store, TP_DB_JOBS), &k, &v), 0);
    CU_ASSERT(v.mv_size < 128);
    mdb_txn_abort(txn);
    Toolpool__Checkpoint *cp = checkpoint("long");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    CU_ASSERT_EQUAL(tp_steps_count(cp), 5000);
    char **ids;
    size_t n;
    txn = reader();
    CU_ASSERT_EQUAL_FATAL(tp_steps_list(fx.store, txn, cp, &ids, &n), 0);
    mdb_txn_abort(txn);
    CU_ASSERT_EQUAL(n, 5000);
    bool in_order = n == 5000;
    for (size_t i = 0; in_order && i < n; i++) {
        snprintf(id, sizeof id, "call-%zu", i + 1);
        in_order = strcmp(ids[i], id) == 0;
    }
    CU_ASSERT_TRUE(in_order);
    free(ids);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    /* forget: one call out of the list (by its result), then the whole job */
    tp_digest_t args;
    tp_digest_bytes("{}", 2, &args);
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = true;
    r.id = "call-10";
    r.job = "long";
    r.step = 10;
    r.ok = true;
    r.kind = "";
    r.input_digest.data = args.b;
    r.input_digest.len = TP_DIGEST_LEN;
    txn = begin();
    CU_ASSERT_EQUAL(tp_result_put(fx.store, txn, &r), 0);
    CU_ASSERT_EQUAL(tp_records_forget(fx.store, txn, "call-10"), 0);
    commit(txn);
    cp = checkpoint("long");
    CU_ASSERT_EQUAL(tp_steps_count(cp), 4999);
    CU_ASSERT_EQUAL(cp->last_step, 9); /* back below the forgotten step */
    txn = reader();
    CU_ASSERT_EQUAL_FATAL(tp_steps_list(fx.store, txn, cp, &ids, &n), 0);
    mdb_txn_abort(txn);
    CU_ASSERT(n == 4999 && strcmp(ids[8], "call-9") == 0 && strcmp(ids[9], "call-11") == 0);
    free(ids);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    uint64_t forgot = 0;
    txn = begin();
    int frc = tp_records_forget_job(fx.store, txn, "long", &forgot);
    if (frc)
        fprintf(stderr, "forget_job: %d %s\n", frc, tp_strerror(frc));
    CU_ASSERT_EQUAL(frc, 0);
    commit(txn);
    txn = reader();
    MDB_stat st;
    CU_ASSERT_EQUAL(mdb_stat(txn, tp_store_dbi(fx.store, TP_DB_STEPS), &st), 0);
    CU_ASSERT_EQUAL(st.ms_entries, 0); /* the list went with the job */
    mdb_txn_abort(txn);
    fx_close();
}

/*
 * A store of format 2 kept each job's list in its checkpoint. Opened
 * read-only it is read as it is; opened for writing it is upgraded to
 * format 4 at once, its lists moved to the steps database, in order.
 */
static void test_format_2_upgrade(void)
{
    fx_open();
    /* Make it a store of format 2: a list in the record, no steps database, format 2. */
    MDB_txn *txn = begin();
    char *calls[] = {"old-1", "old-2", "old-3"};
    Toolpool__Checkpoint cp = TOOLPOOL__CHECKPOINT__INIT;
    cp.job = "legacy";
    cp.last_step = 3;
    cp.calls = calls;
    cp.n_calls = 3;
    CU_ASSERT_EQUAL(tp_store_put_msg(fx.store, txn, TP_DB_JOBS, "legacy", 6, &cp.base), 0);
    CU_ASSERT_EQUAL(mdb_drop(txn, tp_store_dbi(fx.store, TP_DB_STEPS), 1), 0);
    Toolpool__StoreFormat fmt = TOOLPOOL__STORE_FORMAT__INIT;
    fmt.version = 2;
    CU_ASSERT_EQUAL(tp_store_put_msg(fx.store, txn, TP_DB_META, "format", 6, &fmt.base), 0);
    commit(txn);
    tp_store_close(fx.store);

    char err[1024];
    static const char *const want[] = {"old-1", "old-2", "old-3"};
    static const char *const want4[] = {"old-1", "old-2", "old-3", "new-4"};
    fx.store = tp_store_open(fx.dir, TP_STORE_RDONLY, err, sizeof err);
    if (fx.store == NULL)
        fprintf(stderr, "\n  open read-only: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
    CU_ASSERT_FALSE(tp_store_has(fx.store, TP_DB_STEPS));
    Toolpool__Checkpoint *got = checkpoint("legacy");
    CU_ASSERT_TRUE(calls_are(got, want, 3));
    toolpool__checkpoint__free_unpacked(got, NULL);
    tp_store_close(fx.store);

    fx.store = tp_store_open(fx.dir, TP_STORE_NOSYNC, err, sizeof err);
    if (fx.store == NULL)
        fprintf(stderr, "\n  open: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
    CU_ASSERT_TRUE(tp_store_has(fx.store, TP_DB_STEPS));
    got = checkpoint("legacy");
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL(got->n_calls, 0); /* moved */
    CU_ASSERT_EQUAL(got->last_step, 3);
    CU_ASSERT_TRUE(calls_are(got, want, 3));
    toolpool__checkpoint__free_unpacked(got, NULL);
    step("legacy", "new-4", 4, 4, 4, 0, 0, TP_KIND_OK, NULL);
    step("legacy", "old-2", 2, 5, 5, 0, 0, TP_KIND_OK, NULL); /* listed already: keeps its place */
    got = checkpoint("legacy");
    CU_ASSERT_TRUE(calls_are(got, want4, 4));
    toolpool__checkpoint__free_unpacked(got, NULL);
    txn = reader();
    Toolpool__StoreFormat *f = NULL;
    CU_ASSERT_EQUAL(tp_store_get_msg(fx.store, txn, TP_DB_META, "format", 6, &toolpool__store_format__descriptor,
                                     (ProtobufCMessage **)&f),
                    0);
    CU_ASSERT(f && f->version == TP_STORE_FORMAT && TP_STORE_FORMAT == 4);
    if (f)
        toolpool__store_format__free_unpacked(f, NULL);
    mdb_txn_abort(txn);
    fx_close();
}

/* A results value as a store of format 3 kept it: the line, and the digest, ok and kind beside it. */
static void put_line_record(MDB_txn *txn, const char *id, const char *line, bool ok, const char *kind)
{
    static uint8_t digest[TP_DIGEST_LEN] = {7, 7, 7};
    Toolpool__StoredResult sr = TOOLPOOL__STORED_RESULT__INIT;
    sr.input_digest.data = digest;
    sr.input_digest.len = TP_DIGEST_LEN;
    sr.line.data = (uint8_t *)line;
    sr.line.len = strlen(line);
    sr.ok = ok;
    sr.kind = (char *)kind;
    sr.ended_unix_us = 1234;
    CU_ASSERT_EQUAL(tp_store_put_msg(fx.store, txn, TP_DB_RESULTS, id, strlen(id), &sr.base), 0);
}

/* The line a record of id renders as, read through the store. */
static bool renders_as(MDB_txn *txn, const char *id, const char *want)
{
    Toolpool__StoredResult *sr = NULL;
    tp_buf_t b = {0};
    int grc = tp_result_get(fx.store, txn, id, &sr);
    bool same = grc == 0 && tp_result_line(&b, sr) == 0 && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0;
    if (!same)
        fprintf(stderr, "\n  %s renders as %.*s (%s: %s)\n", id, (int)b.len, b.data ? (const char *)b.data : "(none)",
                tp_strerror(grc), tp_store_bad(fx.store));
    tp_buf_free(&b);
    if (sr)
        tp_result_free(sr);
    return same;
}

/*
 * A store of format 3 kept each result as its rendered line. Read-only,
 * each line is read back into the record; opened for writing, every
 * record is rewritten as a Result, keeping its line only where today's
 * rendering would not give it byte for byte (an older toolpool's line),
 * so every front still sends what it sent. A line that cannot be read
 * back stays as it was, for store check to name.
 */
static void test_format_3_upgrade(void)
{
    fx_open();
    /* today's rendering: escapes, a null id's neighbours, a trace, cost, a big step, a huge number */
    static const char today[] =
        "{\"id\":\"n\u00e9\\\"w\",\"job\":\"j\",\"step\":18446744073709551615,\"tool\":\"echo\",\"ok\":true,"
        "\"result\":{\"big\":123456789012345678901234567890,\"s\":\"\\n\"},\"attempts\":2,\"served_by\":\"echo2\","
        "\"degraded\":true,\"stale\":false,\"escalated\":false,\"duration_ms\":12.345,\"cost\":0.1,"
        "\"args\":{\"q\":[1,2,{\"x\":null}]},\"trace\":[{\"attempt\":1,\"tool\":\"echo\",\"outcome\":\"Timeout\","
        "\"duration_ms\":10.000,\"backoff_ms\":0.250,\"start_ms\":0.000},{\"attempt\":1,\"tool\":\"echo2\","
        "\"outcome\":\"ok\",\"duration_ms\":2.001,\"backoff_ms\":0.000,\"start_ms\":10.250}]}\n";
    static const char failed[] =
        "{\"id\":\"f\",\"job\":null,\"step\":0,\"tool\":\"t\",\"ok\":false,\"error\":\"RateLimited\","
        "\"class\":\"transient\",\"message\":\"slow down\",\"retryable\":true,\"attempts\":3,\"served_by\":null,"
        "\"degraded\":false,\"stale\":false,\"escalated\":true,\"escalation\":\"E000001\",\"duration_ms\":0.001,"
        "\"args\":null,\"trace\":[]}\n";
    /* an older toolpool's line: no start_ms in its trace */
    static const char older[] = "{\"id\":\"o\",\"job\":\"o\",\"step\":0,\"tool\":\"t\",\"ok\":true,\"result\":1,"
                                "\"attempts\":1,\"served_by\":\"t\",\"degraded\":false,\"stale\":false,"
                                "\"escalated\":false,\"duration_ms\":1.000,\"args\":{},\"trace\":[{\"attempt\":1,"
                                "\"tool\":\"t\",\"outcome\":\"ok\",\"duration_ms\":1.000,\"backoff_ms\":0.000}]}\n";
    static const char unreadable[] = "{\"id\":\"u\",\"ok\":true,\"step\":\"seven\"}\n";
    MDB_txn *txn = begin();
    put_line_record(txn, "n\u00e9\"w", today, true, "");
    put_line_record(txn, "f", failed, false, "RateLimited");
    put_line_record(txn, "o", older, true, "");
    put_line_record(txn, "u", unreadable, true, "");
    Toolpool__StoreFormat fmt = TOOLPOOL__STORE_FORMAT__INIT;
    fmt.version = 3;
    CU_ASSERT_EQUAL(tp_store_put_msg(fx.store, txn, TP_DB_META, "format", 6, &fmt.base), 0);
    commit(txn);
    tp_store_close(fx.store);

    char err[1024];
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: read-only, as it is; pass 1: opened for writing, upgraded */
        fx.store = tp_store_open(fx.dir, pass ? TP_STORE_NOSYNC : TP_STORE_RDONLY, err, sizeof err);
        if (fx.store == NULL)
            fprintf(stderr, "\n  open: %s\n", err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fx.store);
        txn = reader();
        CU_ASSERT_TRUE(renders_as(txn, "n\u00e9\"w", today));
        CU_ASSERT_TRUE(renders_as(txn, "f", failed));
        CU_ASSERT_TRUE(renders_as(txn, "o", older));
        Toolpool__StoredResult *sr = NULL;
        CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "n\u00e9\"w", &sr), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
        const Toolpool__Result *r = sr->result;
        CU_ASSERT_EQUAL(sr->line.len, 0);
        CU_ASSERT_STRING_EQUAL(r->id, "n\u00e9\"w");
        CU_ASSERT_EQUAL(r->step, UINT64_MAX);
        CU_ASSERT_EQUAL(r->duration_us, 12345);
        CU_ASSERT_EQUAL(r->attempts, 2);
        CU_ASSERT_TRUE(r->degraded);
        CU_ASSERT_STRING_EQUAL(r->served_by, "echo2");
        CU_ASSERT_DOUBLE_EQUAL(r->cost, 0.1, 1e-12);
        CU_ASSERT_EQUAL_FATAL(r->n_trace, 2);
        CU_ASSERT_EQUAL(r->trace[0]->backoff_us, 250);
        CU_ASSERT_EQUAL(r->trace[1]->start_us, 10250);
        CU_ASSERT_STRING_EQUAL(r->trace[1]->tool, "echo2");
        CU_ASSERT_EQUAL(r->input_digest.len, TP_DIGEST_LEN);
        CU_ASSERT_EQUAL(r->input_digest.len ? r->input_digest.data[0] : 0, 7);
        CU_ASSERT_EQUAL(sr->ended_unix_us, 1234);
        tp_result_free(sr);
        CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "f", &sr), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
        CU_ASSERT_FALSE(sr->result->ok);
        CU_ASSERT_STRING_EQUAL(sr->result->kind, "RateLimited");
        CU_ASSERT_STRING_EQUAL(sr->result->escalation, "E000001");
        CU_ASSERT_TRUE(sr->result->retryable);
        CU_ASSERT_EQUAL(sr->result->args.len, 0);
        tp_result_free(sr);
        /* the older line is kept, and its record read from it */
        CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "o", &sr), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(sr);
        CU_ASSERT_EQUAL(sr->line.len, sizeof older - 1);
        CU_ASSERT_EQUAL(sr->result->n_trace, 1);
        tp_result_free(sr);
        /* a line that cannot be read back: corrupt, by name */
        CU_ASSERT_EQUAL(tp_result_get(fx.store, txn, "u", &sr), TP_EPROTO);
        CU_ASSERT_PTR_NULL(sr);
        if (pass == 1) {
            /* rewritten: the raw records hold a Result now (but the unreadable one, as it was) */
            const char *ids[] = {"n\u00e9\"w", "f", "o", "u"};
            for (int i = 0; i < 4; i++) {
                MDB_val k = {strlen(ids[i]), (void *)ids[i]}, v;
                CU_ASSERT_EQUAL_FATAL(mdb_get(txn, tp_store_dbi(fx.store, TP_DB_RESULTS), &k, &v), 0);
                Toolpool__StoredResult *raw = toolpool__stored_result__unpack(NULL, v.mv_size, v.mv_data);
                CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
                CU_ASSERT_EQUAL(raw->result != NULL, i < 3);
                CU_ASSERT_EQUAL(raw->line.len > 0, i >= 2);
                CU_ASSERT_EQUAL(raw->ended_unix_us, 1234);
                tp_result_free(raw);
            }
            Toolpool__StoreFormat *f = NULL;
            CU_ASSERT_EQUAL(tp_store_get_msg(fx.store, txn, TP_DB_META, "format", 6,
                                             &toolpool__store_format__descriptor, (ProtobufCMessage **)&f),
                            0);
            CU_ASSERT(f && f->version == 4);
            if (f)
                toolpool__store_format__free_unpacked(f, NULL);
        }
        mdb_txn_abort(txn);
        tp_store_close(fx.store);
        fx.store = NULL;
    }
    fx_close();
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("results", NULL, NULL);
    CU_add_test(s, "identity digest", test_identity_digest);
    CU_add_test(s, "put/get round trip, unknown id", test_result_round_trip);
    CU_add_test(s, "replaced; a corrupt record is TP_EPROTO", test_result_replace_and_corrupt);
    s = CU_add_suite("checkpoints", NULL, NULL);
    CU_add_test(s, "steps append in order, max last_step, usage, stop", test_checkpoint_steps);
    CU_add_test(s, "steps of one transaction; an aborted one", test_checkpoint_steps_one_txn);
    CU_add_test(s, "agent state and steps keep each other", test_checkpoint_state_and_steps);
    CU_add_test(s, "a large state document", test_checkpoint_large_state);
    CU_add_test(s, "a long job's list: each id written once, in order", test_long_job_list);
    CU_add_test(s, "a store of format 2: read as it is, upgraded when written", test_format_2_upgrade);
    CU_add_test(s, "a store of format 3: lines read back, rewritten as records when written", test_format_3_upgrade);
    s = CU_add_suite("in-flight", NULL, NULL);
    CU_add_test(s, "put, get, del", test_inflight);
    return tp_test_run();
}
