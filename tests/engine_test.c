/*
 * The engine behind every front, driven directly as a front would drive
 * it, with real workers, a real store and the test plugin: one answer per
 * call, in order, after its commit; recorded ids answered from the store;
 * cancels of waiting and running calls; a caller's deadline; draining; a
 * front's own writes waiting for their commit; a tool that claims a kind
 * only the engine gives; answers taken staged, before their commit.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "clock.h"
#include "commit.h"
#include "engine.h"
#include "results.h"
#include "runutil.h"
#include "testutil.h"

#define MAX_ANSWERS 256

typedef struct {
    char id[64];
    bool got;
    bool recorded;
    bool not_started;
    bool ok;
    char kind[64];
    char klass[32];
    char message[512];
    char *line;
    uint64_t at_us;
    int order;
    bool staged;    /* its answer came staged (answer_staged) */
    int staged_at;  /* the how-manieth staged answer it was */
    int durable_at; /* the how-manieth to hear its commit */
} answer_t;

typedef struct {
    struct event_base *base;
    tp_engine_t *e;
    tp_registry_t *reg;
    tp_store_t *store;
    answer_t a[MAX_ANSWERS];
    int n;
    int got;
    int expect; /* close the engine once this many answers came */
    int durable_order[8];
    int n_durable;
    int n_staged, n_released;
    tp_call_t *handles[MAX_ANSWERS];
} fx_t;

static void answer_cb(void *ctx, const tp_answer_t *ans)
{
    answer_t *a = ctx;
    fx_t *fx = (fx_t *)((char *)(a - (a->order)) - offsetof(fx_t, a));
    CU_ASSERT_FALSE(a->got); /* exactly once */
    a->got = true;
    a->recorded = ans->recorded;
    a->not_started = ans->not_started;
    a->at_us = tp_now_us();
    if (ans->result) {
        a->ok = ans->result->ok;
        snprintf(a->kind, sizeof a->kind, "%s", ans->result->kind ? ans->result->kind : "");
        snprintf(a->klass, sizeof a->klass, "%s", ans->result->klass ? ans->result->klass : "");
        snprintf(a->message, sizeof a->message, "%s", ans->result->message ? ans->result->message : "");
    }
    if (ans->result) {
        tp_buf_t line = {0};
        CU_ASSERT_EQUAL(tp_answer_write(&line, ans), 0);
        CU_ASSERT_EQUAL(line.len > 0 ? line.data[line.len - 1] : 0, '\n');
        a->line = strndup((const char *)line.data, line.len);
        tp_buf_free(&line);
    }
    fx->handles[a->order] = NULL;
    if (++fx->got == fx->expect)
        tp_engine_close(fx->e);
}

static void fx_open(fx_t *fx, const char *registry, bool store, int workers)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = tp_test_tmpdir("engine");
    char *text = expand(registry);
    char *path = tp_test_write(dir, "tools.json", text);
    char err[1024];
    fx->reg = tp_registry_load(path, err, sizeof err);
    if (fx->reg == NULL)
        fprintf(stderr, "registry: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx->reg);
    if (store) {
        char sd[1100];
        snprintf(sd, sizeof sd, "%s/store", dir);
        fx->store = tp_store_open(sd, TP_STORE_NOSYNC, err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fx->store);
    }
    fx->base = event_base_new();
    tp_engine_opts_t o = {
        .reg = fx->reg,
        .store = fx->store,
        .base = fx->base,
        .workers = workers,
        .worker_path = TP_TEST_BIN "/toolpool-worker",
        .max_frame = 16u << 20,
        .pipeline = 1,
        .drain_us = 5000000,
        .seed = 7,
    };
    fx->e = tp_engine_new(&o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx->e);
    free(text);
    free(path);
}

/* Submits rq, its answer heard by fn and landing in fx->a[fx->n]. */
static tp_call_t *fx_submit_rq(fx_t *fx, tp_request_t *rq, tp_answer_fn fn)
{
    answer_t *a = &fx->a[fx->n];
    a->order = fx->n;
    snprintf(a->id, sizeof a->id, "%s", rq->id);
    tp_call_t *c = tp_engine_submit(fx->e, rq, fn, a);
    fx->handles[fx->n++] = c;
    return c;
}

/* Submits a call whose answer lands in fx->a[fx->n]. */
static tp_call_t *fx_submit(fx_t *fx, const char *id, const char *job, uint64_t step, const char *tool,
                            const char *args, uint64_t deadline_us)
{
    tp_request_t rq = {
        .id = id,
        .job = job,
        .step = step,
        .tool = tool,
        .args = (char *)args,
        .args_len = args ? strlen(args) : 0,
        .deadline_us = deadline_us,
    };
    return fx_submit_rq(fx, &rq, answer_cb);
}

static void fx_run(fx_t *fx)
{
    CU_ASSERT_EQUAL_FATAL(tp_engine_start(fx->e), 0);
    event_base_dispatch(fx->base);
    tp_engine_finish(fx->e);
}

static void fx_close(fx_t *fx)
{
    tp_engine_free(fx->e);
    event_base_free(fx->base);
    if (fx->store)
        tp_store_close(fx->store);
    tp_registry_free(fx->reg);
    for (int i = 0; i < fx->n; i++)
        free(fx->a[i].line);
}

static const char *REG = "{\"defaults\": {\"timeout\": \"5s\", \"backoff\": {\"base\": \"10ms\"}},"
                         " \"tools\": ["
                         "{\"name\": \"noop\", \"plugin\": {\"path\": \"@P@\"}},"
                         "{\"name\": \"echo\", \"plugin\": {\"path\": \"@P@\"},"
                         " \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}}},"
                         "{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"}, \"attempts\": 1},"
                         "{\"name\": \"liar\", \"exec\": [\"@T@/print.sh\","
                         " \"{\\\"error\\\": \\\"Cancelled\\\", \\\"message\\\": \\\"I say so\\\"}\"]}"
                         "]}";

/*
 * The group-commit policy, a pure function: while calls run, results wait
 * for the window, or commit at once when nothing waits behind the running
 * calls (backlog false); never without a result to commit, unless nothing
 * runs or it is urgent.
 */
static void test_commit_policy(void)
{
    tp_commit_t c = {0};
    tp_commit_begin(&c, 1000000, 10);
    tp_commit_took(&c, 100); /* window: the 2 ms floor */
    uint64_t soon = 1000000 + 100, late = 1000000 + (uint64_t)TP_COMMIT_WINDOW_MIN_US;
    CU_ASSERT(!tp_commit_due(&c, soon, 15, 4, true, false));  /* more come from the backlog: the window holds them */
    CU_ASSERT(tp_commit_due(&c, soon, 15, 4, false, false));  /* no backlog: they go now */
    CU_ASSERT(!tp_commit_due(&c, soon, 10, 4, false, false)); /* no backlog, but nothing to commit yet */
    CU_ASSERT(tp_commit_due(&c, soon, 10, 0, true, false));   /* nothing runs */
    CU_ASSERT(tp_commit_due(&c, soon, 10, 4, true, true));    /* urgent */
    CU_ASSERT(tp_commit_due(&c, late, 11, 4, true, false));   /* the window has closed */
    CU_ASSERT(tp_commit_due(&c, soon, 10 + TP_COMMIT_RESULTS, 4, true, false));
    /* the backlog: calls queued behind the running ones, or a loop kept busy (under half a commit between turns) */
    CU_ASSERT(tp_commit_backlog(true, 1000000, 100.0));
    CU_ASSERT(tp_commit_backlog(false, 49, 100.0));
    CU_ASSERT(!tp_commit_backlog(false, 50, 100.0));
    CU_ASSERT(!tp_commit_backlog(false, 1000000, 100.0));
}

/*
 * Fronts take calls by bytes as well as by count: once the args held reach
 * TP_ENGINE_LIVE_BYTES the engine takes no more, however wide a front's
 * window, but it always takes one; and every call is answered all the same.
 */
static void test_live_bytes(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 2);
    size_t big = TP_ENGINE_LIVE_BYTES / 4 + 1;
    char *args = malloc(big + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(args);
    int n = snprintf(args, 16, "{\"p\":\"");
    memset(args + n, 'x', big);
    strcpy(args + n + big, "\"}");
    CU_ASSERT_TRUE(tp_engine_takes(fx.e, 1000));
    fx_submit(&fx, "b0", NULL, 0, "noop", args, 0);
    CU_ASSERT_TRUE(tp_engine_takes(fx.e, 1000)); /* a quarter of the budget */
    fx_submit(&fx, "b1", NULL, 0, "noop", args, 0);
    fx_submit(&fx, "b2", NULL, 0, "noop", args, 0);
    CU_ASSERT_TRUE(tp_engine_takes(fx.e, 1000));
    fx_submit(&fx, "b3", NULL, 0, "noop", args, 0);
    CU_ASSERT_EQUAL(tp_engine_live(fx.e), 4);
    CU_ASSERT_FALSE(tp_engine_takes(fx.e, 1000)); /* past the bytes, far from the count */
    CU_ASSERT_FALSE(tp_engine_takes(fx.e, 4));
    fx.expect = 4;
    fx_run(&fx);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_TRUE(fx.a[i].got && fx.a[i].ok);
    CU_ASSERT_EQUAL(tp_engine_live(fx.e), 0);
    CU_ASSERT_TRUE(tp_engine_takes(fx.e, 1)); /* nothing held: one is always taken */
    free(args);
    fx_close(&fx);
}

/* Every call answered once, in the order they ended; the line is the record's. */
static void test_answers(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 2);
    char id[32], job[32];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "a%d", i);
        snprintf(job, sizeof job, "j%d", i % 4);
        fx_submit(&fx, id, job, (uint64_t)(i / 4), "noop", NULL, 0);
    }
    fx_submit(&fx, "bad", NULL, 0, "nopp", NULL, 0);
    fx_submit(&fx, "badargs", NULL, 0, "echo", "{\"n\":\"x\"}", 0);
    fx.expect = fx.n;
    fx_run(&fx);
    CU_ASSERT_EQUAL(fx.got, 42);
    for (int i = 0; i < 40; i++) {
        CU_ASSERT_TRUE(fx.a[i].got && fx.a[i].ok && !fx.a[i].recorded);
        json_t *v = json_loads(fx.a[i].line, 0, NULL);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "id")), fx.a[i].id);
        json_decref(v);
    }
    /* Steps of a job in order: j0's step 1 answered after its step 0. */
    CU_ASSERT_TRUE(fx.a[0].at_us <= fx.a[4].at_us);
    CU_ASSERT_STRING_EQUAL(fx.a[40].kind, "UnknownTool");
    CU_ASSERT_STRING_EQUAL(fx.a[40].klass, "malformed");
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[40].message, "(closest: noop"));
    CU_ASSERT_STRING_EQUAL(fx.a[41].kind, "InvalidArguments");
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[41].message, "/n"));
    fx_close(&fx);
}

static void durable_cb(void *ctx, bool ok)
{
    int *slot = ctx;
    CU_ASSERT_TRUE(ok);
    *slot = 1;
}

/* A front's own write and read in the engine's turn: an agent's checkpoint of job "agent", at step 7. */
static int state_put_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    (void)ctx;
    return tp_checkpoint_state_put(s, txn, "agent", 7, "{\"m\":[]}", 8);
}

static int state_step_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(s, txn, "agent", &cp);
    if (rc == 0) {
        *(uint64_t *)ctx = cp->state_step;
        toolpool__checkpoint__free_unpacked(cp, NULL);
    }
    return rc;
}

/* A recorded id is answered from the store with the same line, without running. */
/* Whether a read transaction (one the open write transaction is not) finds the record of id. */
static bool committed(fx_t *fx, const char *id)
{
    MDB_txn *t;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(fx->store, &t), 0);
    Toolpool__StoredResult *r = NULL;
    int rc = tp_result_get(fx->store, t, id, &r);
    mdb_txn_abort(t);
    if (r)
        tp_result_free(r);
    CU_ASSERT(rc == 0 || rc == MDB_NOTFOUND);
    return rc == 0;
}

static void staged_cb(void *ctx, const tp_answer_t *ans)
{
    answer_t *a = ctx;
    fx_t *fx = (fx_t *)((char *)(a - (a->order)) - offsetof(fx_t, a));
    if (ans->stage != TP_ANSWER_DURABLE) {
        answer_cb(ctx, ans); /* staged, or (from the store, refused) final */
        a->staged = ans->stage == TP_ANSWER_STAGED;
        if (a->staged) {
            /* made, its record written in the open transaction, not committed */
            CU_ASSERT_PTR_NOT_NULL(ans->result);
            CU_ASSERT_FALSE(committed(fx, a->id));
            a->staged_at = fx->n_staged++;
            fx->got--; /* counted when it is durable */
        }
        return;
    }
    CU_ASSERT_TRUE(a->staged);
    CU_ASSERT_PTR_NULL(ans->result);
    CU_ASSERT_TRUE(committed(fx, a->id));
    a->durable_at = fx->n_released++;
    if (++fx->got == fx->expect)
        tp_engine_close(fx->e);
}

/*
 * A front that takes its answers staged has each call's answer when it is
 * made, before its commit (its record is not there for a reader yet), and
 * hears of the commit after, once for each, in the order they were made;
 * answers of other kinds come as they did, once.
 */
static void test_staged(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 2);
    char id[32];
    for (int i = 0; i < 60; i++) {
        snprintf(id, sizeof id, "s%d", i);
        tp_request_t rq = {.id = id, .tool = i % 10 == 9 ? "nopp" : "noop", .answer_staged = true};
        fx_submit_rq(&fx, &rq, staged_cb);
    }
    fx.expect = fx.n;
    fx_run(&fx);
    CU_ASSERT_EQUAL(fx.got, 60);
    CU_ASSERT_EQUAL(fx.n_staged, 54);
    CU_ASSERT_EQUAL(fx.n_released, 54);
    for (int i = 0; i < 60; i++) {
        answer_t *a = &fx.a[i];
        CU_ASSERT_TRUE(a->got);
        if (i % 10 == 9) {
            CU_ASSERT_FALSE(a->staged); /* refused: never a call, answered as before */
            CU_ASSERT_STRING_EQUAL(a->kind, "UnknownTool");
        } else {
            CU_ASSERT_TRUE(a->staged && a->ok);
            CU_ASSERT_EQUAL(a->durable_at, a->staged_at);
            CU_ASSERT_TRUE(a->line != NULL && strstr(a->line, a->id) != NULL);
        }
    }
    fx_close(&fx);
}

static void test_recorded(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 1);
    fx_submit(&fx, "r1", NULL, 0, "echo", "{\"n\":1}", 0);
    fx.expect = 1;
    fx_run(&fx);
    CU_ASSERT_TRUE_FATAL(fx.a[0].got && fx.a[0].ok);
    char *first = strdup(fx.a[0].line);
    tp_engine_free(fx.e);
    event_base_free(fx.base);
    fx.base = event_base_new();
    tp_engine_opts_t o = {.reg = fx.reg,
                          .store = fx.store,
                          .base = fx.base,
                          .workers = 1,
                          .worker_path = TP_TEST_BIN "/toolpool-worker",
                          .max_frame = 1u << 20,
                          .pipeline = 1,
                          .drain_us = 1000000};
    fx.e = tp_engine_new(&o);
    free(fx.a[0].line);
    fx.a[0].line = NULL;
    fx.n = 0;
    fx.got = 0;
    memset(fx.a, 0, sizeof fx.a);
    tp_call_t *h = fx_submit(&fx, "r1", NULL, 0, "echo", "{\"n\":1}", 0);
    CU_ASSERT_PTR_NULL(h);                                 /* answered at once: nothing to cancel */
    fx_submit(&fx, "r1", NULL, 0, "echo", "{\"n\":2}", 0); /* other input under the same id */
    /* A front's own write waits for its commit, in order with the answers. */
    int durable = 0;
    CU_ASSERT_EQUAL(tp_engine_store_op(fx.e, 64, state_put_op, NULL), 0);
    tp_engine_when_durable(fx.e, durable_cb, &durable);
    fx.expect = 2;
    fx_run(&fx);
    CU_ASSERT_TRUE(fx.a[0].recorded);
    CU_ASSERT_STRING_EQUAL(fx.a[0].line, first);
    CU_ASSERT_FALSE(fx.a[1].recorded);
    CU_ASSERT_STRING_EQUAL(fx.a[1].kind, "InvalidRequest");
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[1].message, "recorded in the store for other input"));
    CU_ASSERT_EQUAL(durable, 1);
    CU_ASSERT_EQUAL(tp_engine_stats(fx.e)->answered_recorded, 1);
    uint64_t step = 0;
    CU_ASSERT_EQUAL(tp_engine_store_op(fx.e, 0, state_step_op, &step), 0);
    CU_ASSERT_EQUAL(step, 7);
    free(first);
    fx_close(&fx);
}

static void cancel_running_cb(evutil_socket_t fd, short what, void *arg)
{
    fx_t *fx = arg;
    /* The running sleep, then the step waiting behind it, then a call waiting for a slot. */
    for (int i = 0; i < 3; i++)
        if (fx->handles[i])
            tp_engine_cancel(fx->e, fx->handles[i], "the caller hung up");
}

/* Cancels end a running call at once (its worker killed), and waiting ones without running. */
static void test_cancel(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 1);
    uint64_t t0 = tp_now_us();
    fx_submit(&fx, "s1", "job", 1, "sleep", "{\"ms\":4000}", 0);
    fx_submit(&fx, "s2", "job", 2, "noop", NULL, 0);
    fx_submit(&fx, "s3", NULL, 0, "sleep", "{\"ms\":4000}", 0);
    fx_submit(&fx, "s4", NULL, 0, "noop", NULL, 0);
    fx.expect = 4;
    struct timeval tv = {0, 300000};
    event_base_once(fx.base, -1, EV_TIMEOUT, cancel_running_cb, &fx, &tv);
    fx_run(&fx);
    CU_ASSERT_TRUE(tp_now_us() - t0 < 3000000);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_STRING_EQUAL(fx.a[i].kind, "Cancelled");
        CU_ASSERT_STRING_EQUAL(fx.a[i].klass, "guard");
        CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[i].message, "the caller hung up"));
    }
    /* s1 ran (one attempt), s2 and s3 never did. */
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[0].line, "\"attempts\":1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[1].line, "\"attempts\":0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[2].line, "\"attempts\":0"));
    /* The slot's worker was replaced, and the next call ran on it. */
    CU_ASSERT_TRUE(fx.a[3].ok);
    fx_close(&fx);
}

/* A caller's deadline bounds the whole call; a tool may not claim a guard kind. */
static void test_deadline_and_claims(void)
{
    fx_t fx;
    fx_open(&fx, REG, false, 2);
    uint64_t t0 = tp_now_us();
    fx_submit(&fx, "d1", NULL, 0, "sleep", "{\"ms\":3000}", t0 + 300000);
    fx_submit(&fx, "l1", NULL, 0, "liar", NULL, 0);
    fx.expect = 2;
    fx_run(&fx);
    CU_ASSERT_STRING_EQUAL(fx.a[0].kind, "Timeout");
    CU_ASSERT_TRUE(fx.a[0].at_us - t0 < 2000000);
    CU_ASSERT_STRING_EQUAL(fx.a[1].kind, "ToolError");
    CU_ASSERT_STRING_EQUAL(fx.a[1].klass, "permanent");
    CU_ASSERT_PTR_NOT_NULL(strstr(fx.a[1].message, "reported Cancelled, a kind only toolpool gives"));
    fx_close(&fx);
}

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_drain(arg);
}

/* Draining: running calls finish, calls never started are answered not_started. */
static void test_drain(void)
{
    fx_t fx;
    fx_open(&fx, REG, true, 2);
    char id[16];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "w%d", i);
        fx_submit(&fx, id, NULL, 0, "sleep", "{\"ms\":400}", 0);
    }
    struct timeval tv = {0, 150000};
    event_base_once(fx.base, -1, EV_TIMEOUT, drain_cb, fx.e, &tv);
    fx_run(&fx);
    int ok = 0, unstarted = 0;
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_TRUE(fx.a[i].got);
        ok += fx.a[i].ok;
        unstarted += fx.a[i].not_started;
    }
    CU_ASSERT_EQUAL(ok, 2);
    CU_ASSERT_EQUAL(unstarted, 4);
    fx_close(&fx);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("engine", NULL, NULL);
    CU_add_test(s, "the group-commit policy", test_commit_policy);
    CU_add_test(s, "the args held bound what fronts hand over", test_live_bytes);
    CU_add_test(s, "every call answered once, after its commit", test_answers);
    CU_add_test(s, "a recorded id is answered from the store", test_recorded);
    CU_add_test(s, "answers taken staged: when made, then their commit", test_staged);
    CU_add_test(s, "cancel a running call and waiting ones", test_cancel);
    CU_add_test(s, "a caller's deadline; a tool's claim of a guard kind", test_deadline_and_claims);
    CU_add_test(s, "draining", test_drain);
    return tp_test_run();
}
