/*
 * Recovery through the store, with real workers and a real LMDB store on
 * disk: the same-call breaker and its escalation, the tool breaker with its
 * half-open probe, fallback chains, guards, and two supervisor processes
 * sharing one breaker at the same time.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "escalate.h"
#include "runutil.h"
#include "store.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

extern char **environ;

static char *new_store(void)
{
    char *dir = strdup(tp_test_tmpdir("store"));
    return dir;
}

/* The escalation id, in store dir, read back with a fresh process-local handle. */
static Toolpool__Escalation *read_escalation(const char *dir, const char *id)
{
    char err[512];
    tp_store_t *s = tp_store_open(dir, TP_STORE_RDONLY, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_read(s, &txn), 0);
    Toolpool__Escalation *e = NULL;
    tp_store_get_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &toolpool__escalation__descriptor,
                     (ProtobufCMessage **)&e);
    mdb_txn_abort(txn);
    tp_store_close(s);
    return e;
}

#define DENY_REG "{\"tools\": [" PLUGIN_TOOL("deny") "]}"

/* The seed's breaker: the third identical failure opens, the fourth is not run. */
static void test_same_call_breaker(void)
{
    char *dir = new_store();
    run_t r = run_calls(
        dir, DENY_REG,
        "{\"id\": \"d1\", \"job\": \"a\", \"step\": 1, \"tool\": \"deny\", \"args\": {\"id\": 7, \"x\": 1}}\n"
        "{\"id\": \"d2\", \"job\": \"a\", \"step\": 2, \"tool\": \"deny\", \"args\": {\"x\": 1.0, \"id\": 7}}\n"
        "{\"id\": \"d3\", \"job\": \"a\", \"step\": 3, \"tool\": \"deny\", \"args\": {\"id\": 7, \"x\": 1}}\n"
        "{\"id\": \"d4\", \"job\": \"a\", \"step\": 4, \"tool\": \"deny\", \"args\": {\"id\": 7, \"x\": 1}}\n"
        "{\"id\": \"d5\", \"job\": \"a\", \"step\": 5, \"tool\": \"deny\", \"args\": {\"id\": 7, \"x\": 1}}\n"
        "{\"id\": \"o1\", \"job\": \"a\", \"step\": 6, \"tool\": \"deny\", \"args\": {\"id\": 8}}\n",
        1, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 6);
    for (int i = 1; i <= 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "d%d", i);
        json_t *v = row(&r, id);
        CU_ASSERT_STRING_EQUAL(str(v, "error"), "PermissionDenied");
        CU_ASSERT_EQUAL(num(v, "attempts"), 1);
        CU_ASSERT_EQUAL(json_is_true(json_object_get(v, "escalated")), i == 3);
    }
    CU_ASSERT_STRING_EQUAL(str(row(&r, "d3"), "escalation"), "E000001");
    for (int i = 4; i <= 5; i++) {
        char id[8];
        snprintf(id, sizeof id, "d%d", i);
        json_t *v = row(&r, id);
        CU_ASSERT_STRING_EQUAL(str(v, "error"), "CircuitOpen");
        CU_ASSERT_STRING_EQUAL(str(v, "class"), "guard");
        CU_ASSERT_EQUAL(num(v, "attempts"), 0);
        CU_ASSERT(json_is_true(json_object_get(v, "escalated")));
        CU_ASSERT_STRING_EQUAL(str(v, "escalation"), "E000001");
    }
    /* other args: a circuit of their own */
    CU_ASSERT_STRING_EQUAL(str(row(&r, "o1"), "error"), "PermissionDenied");
    CU_ASSERT(json_is_false(json_object_get(row(&r, "o1"), "escalated")));
    Toolpool__Escalation *e = read_escalation(dir, "E000001");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_STRING_EQUAL(e->call_id, "d3");
    CU_ASSERT_STRING_EQUAL(e->kind, "PermissionDenied");
    CU_ASSERT_EQUAL(e->blocked, 2);
    CU_ASSERT_EQUAL(e->n_trace, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->reason, "failed 3 times"));
    toolpool__escalation__free_unpacked(e, NULL);
    json_decref(r.rows);

    /* The job's next run sees its open circuit; another job (scope "job", the default) has its own. */
    r = run_calls(
        dir, DENY_REG,
        "{\"id\": \"n1\", \"job\": \"a\", \"step\": 7, \"tool\": \"deny\", \"args\": {\"x\": 1, \"id\": 7}}\n"
        "{\"id\": \"n2\", \"job\": \"b\", \"step\": 1, \"tool\": \"deny\", \"args\": {\"x\": 1, \"id\": 7}}\n",
        1, 0);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "n1"), "error"), "CircuitOpen");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "n2"), "error"), "PermissionDenied");
    json_decref(r.rows);
    free(dir);
}

/* Retries of one call never open its own circuit: only final outcomes count. */
static void test_retries_do_not_count(void)
{
    char *dir = new_store();
    run_t r = run_calls(dir,
                        "{\"tools\": [{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"}, \"attempts\": 5,"
                        " \"backoff\": {\"base\": \"1ms\"}}]}",
                        "{\"id\": \"f1\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 99}}\n", 1, 0);
    json_t *v = row(&r, "f1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "ServerError");
    CU_ASSERT_EQUAL(num(v, "attempts"), 5);
    CU_ASSERT(json_is_false(json_object_get(v, "escalated")));
    json_decref(r.rows);
    free(dir);
}

/* The tool breaker opens on a failure rate, then lets one probe through after the cooldown. */
static void test_tool_breaker(void)
{
    char *dir = new_store();
    const char *reg = "{\"tools\": [{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"}, \"attempts\": 1,"
                      " \"breaker\": {\"same_call\": {\"failures\": 100},"
                      " \"tool\": {\"failure_rate\": 0.5, \"min_calls\": 4, \"window\": \"60s\","
                      " \"cooldown\": \"300ms\", \"probes\": 1}}}]}";
    run_t r = run_calls(
        dir, reg,
        "{\"id\": \"a1\", \"job\": \"j\", \"step\": 1, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n"
        "{\"id\": \"a2\", \"job\": \"j\", \"step\": 2, \"tool\": \"flaky\", \"args\": {\"ok_at\": 9}}\n"
        "{\"id\": \"a3\", \"job\": \"j\", \"step\": 3, \"tool\": \"flaky\", \"args\": {\"ok_at\": 9}}\n"
        "{\"id\": \"a4\", \"job\": \"j\", \"step\": 4, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n"
        "{\"id\": \"a5\", \"job\": \"j\", \"step\": 5, \"tool\": \"flaky\", \"args\": {\"ok_at\": 9}}\n"
        "{\"id\": \"a6\", \"job\": \"j\", \"step\": 6, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n",
        1, 0);
    /*
     * A tool's window starts at its first failure (a1 is not counted: a tool
     * that never failed keeps no record). a2-a4: 2 of 3 failed, under
     * min_calls; a5 makes 3 of 4 and opens the breaker; a6 is not run.
     */
    CU_ASSERT(json_is_true(json_object_get(row(&r, "a4"), "ok")));
    CU_ASSERT_STRING_EQUAL(str(row(&r, "a2"), "error"), "ServerError");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "a5"), "error"), "ServerError");
    json_t *v = row(&r, "a6");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "CircuitOpen");
    CU_ASSERT_EQUAL(num(v, "attempts"), 0);
    json_decref(r.rows);

    /* Still open in the next run... */
    r = run_calls(dir, reg, "{\"id\": \"b1\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n", 1, 0);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "b1"), "error"), "CircuitOpen");
    json_decref(r.rows);
    /* ...until the cooldown: one probe goes through; its failure reopens it. */
    usleep(350000);
    r = run_calls(dir, reg,
                  "{\"id\": \"c1\", \"job\": \"k\", \"step\": 1, \"tool\": \"flaky\", \"args\": {\"ok_at\": 9}}\n"
                  "{\"id\": \"c2\", \"job\": \"k\", \"step\": 2, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n",
                  1, 0);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "c1"), "error"), "ServerError");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "c2"), "error"), "CircuitOpen");
    json_decref(r.rows);
    /* A successful probe closes it. */
    usleep(350000);
    r = run_calls(dir, reg,
                  "{\"id\": \"d1\", \"job\": \"k\", \"step\": 1, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n"
                  "{\"id\": \"d2\", \"job\": \"k\", \"step\": 2, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n",
                  1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "d1"), "ok")));
    CU_ASSERT(json_is_true(json_object_get(row(&r, "d2"), "ok")));
    json_decref(r.rows);
    free(dir);
}

/* The declared chain: a transient failure falls back; the answer says who gave it. */
static void test_fallback_chain(void)
{
    char *dir = new_store();
    run_t r = run_calls(
        dir,
        "{\"defaults\": {\"attempts\": 2, \"backoff\": {\"base\": \"1ms\"}}, \"tools\": ["
        "{\"name\": \"hang\", \"exec\": [\"@T@/hang.sh\"], \"timeout\": \"100ms\", \"fallback\": [\"flaky\", \"echo\"]},"
        "{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"}, \"attempts\": 1},"
        "{\"name\": \"echo\", \"plugin\": {\"path\": \"@P@\"}, \"stale\": true},"
        "{\"name\": \"deny\", \"plugin\": {\"path\": \"@P@\"}, \"fallback\": \"echo\"},"
        "{\"name\": \"segv\", \"plugin\": {\"path\": \"@P@\"}, \"fallback\": \"flaky\", \"degraded\": {\"answer\": null, \"gap\": \"unavailable\"}},"
        "{\"name\": \"e75\", \"exec\": [\"@T@/exit.sh\", \"75\"], \"fallback\": \"flaky\", \"attempts\": 1}]}",
        "{\"id\": \"h\", \"tool\": \"hang\", \"args\": {\"ok_at\": 9}}\n"
        "{\"id\": \"p\", \"tool\": \"deny\"}\n"
        "{\"id\": \"s\", \"tool\": \"segv\", \"args\": {\"ok_at\": 9}}\n"
        "{\"id\": \"s2\", \"tool\": \"e75\", \"args\": {\"ok_at\": 9}}\n",
        2, 0);
    /* hang: 2 timeouts, flaky fails once, echo answers, stale */
    json_t *v = row(&r, "h");
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT_STRING_EQUAL(str(v, "served_by"), "echo");
    CU_ASSERT(json_is_true(json_object_get(v, "degraded")));
    CU_ASSERT(json_is_true(json_object_get(v, "stale")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(v, "result"), "ok_at")), 9);
    json_t *trace = json_object_get(v, "trace");
    CU_ASSERT_EQUAL_FATAL(json_array_size(trace), 4);
    CU_ASSERT_STRING_EQUAL(str(json_array_get(trace, 0), "tool"), "hang");
    CU_ASSERT_STRING_EQUAL(str(json_array_get(trace, 1), "outcome"), "Timeout");
    CU_ASSERT_STRING_EQUAL(str(json_array_get(trace, 2), "tool"), "flaky");
    CU_ASSERT_STRING_EQUAL(str(json_array_get(trace, 3), "tool"), "echo");
    CU_ASSERT_EQUAL(num(v, "attempts"), 4);
    /* a permanent failure is not a reason to fall back (fallback_on: transient) */
    v = row(&r, "p");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "PermissionDenied");
    CU_ASSERT(json_is_null(json_object_get(v, "served_by")));
    CU_ASSERT(json_is_false(json_object_get(v, "degraded")));
    /* the chain runs out: the declared degraded answer */
    v = row(&r, "s");
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT(json_is_true(json_object_get(v, "degraded")));
    CU_ASSERT_STRING_EQUAL(str(json_object_get(v, "result"), "gap"), "unavailable");
    CU_ASSERT(json_is_null(json_object_get(v, "served_by")));
    /* ...or, with none declared, a person */
    v = row(&r, "s2");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "ServerError");
    CU_ASSERT(json_is_true(json_object_get(v, "escalated")));
    Toolpool__Escalation *e = read_escalation(dir, str(v, "escalation"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->reason, "fallback chain"));
    CU_ASSERT_EQUAL(e->n_trace, 2);
    toolpool__escalation__free_unpacked(e, NULL);
    json_decref(r.rows);
    free(dir);
}

/* Guards stop a job: the call that crosses the line, and every later one, end with the guard's kind. */
static void test_guards(void)
{
    char *dir = new_store();
    run_t r = run_calls(dir, "{\"guards\": {\"max_steps\": 2}, \"tools\": [" PLUGIN_TOOL("noop") "]}",
                        "{\"id\": \"s1\", \"job\": \"j\", \"step\": 1, \"tool\": \"noop\"}\n"
                        "{\"id\": \"s2\", \"job\": \"j\", \"step\": 2, \"tool\": \"noop\"}\n"
                        "{\"id\": \"s3\", \"job\": \"j\", \"step\": 3, \"tool\": \"noop\"}\n"
                        "{\"id\": \"s4\", \"job\": \"j\", \"step\": 4, \"tool\": \"noop\"}\n"
                        "{\"id\": \"o1\", \"job\": \"other\", \"step\": 1, \"tool\": \"noop\"}\n",
                        2, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "s2"), "ok")));
    CU_ASSERT_STRING_EQUAL(str(row(&r, "s3"), "error"), "StepCapReached");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "s3"), "class"), "guard");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "s4"), "error"), "StepCapReached");
    CU_ASSERT_EQUAL(num(row(&r, "s4"), "attempts"), 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "o1"), "ok")));
    json_decref(r.rows);

    /* A job's usage lives in its checkpoint: the next run goes on counting. */
    free(dir);
    dir = new_store();
    r = run_calls(dir, "{\"guards\": {\"max_steps\": 2}, \"tools\": [" PLUGIN_TOOL("noop") "]}",
                  "{\"id\": \"k1\", \"job\": \"k\", \"step\": 1, \"tool\": \"noop\"}\n", 1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "k1"), "ok")));
    json_decref(r.rows);
    r = run_calls(dir, "{\"guards\": {\"max_steps\": 2}, \"tools\": [" PLUGIN_TOOL("noop") "]}",
                  "{\"id\": \"k2\", \"job\": \"k\", \"step\": 2, \"tool\": \"noop\"}\n"
                  "{\"id\": \"k3\", \"job\": \"k\", \"step\": 3, \"tool\": \"noop\"}\n",
                  1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "k2"), "ok")));
    CU_ASSERT_STRING_EQUAL(str(row(&r, "k3"), "error"), "StepCapReached");
    json_decref(r.rows);

    free(dir);
    dir = new_store(); /* a job's usage lives in its checkpoint: a new store, a new job */
    r = run_calls(dir, "{\"guards\": {\"max_cost\": 1}, \"tools\": [" PLUGIN_TOOL("costly") "]}",
                  "{\"id\": \"c1\", \"job\": \"j\", \"step\": 1, \"tool\": \"costly\", \"args\": {\"cents\": 60}}\n"
                  "{\"id\": \"c2\", \"job\": \"j\", \"step\": 2, \"tool\": \"costly\", \"args\": {\"cents\": 60}}\n"
                  "{\"id\": \"c3\", \"job\": \"j\", \"step\": 3, \"tool\": \"costly\", \"args\": {\"cents\": 60}}\n",
                  1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "c2"), "ok")));
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(row(&r, "c2"), "cost")), 0.6, 1e-9);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "c3"), "error"), "BudgetExceeded");
    json_decref(r.rows);

    free(dir);
    dir = new_store();
    r = run_calls(dir,
                  "{\"guards\": {\"max_calls\": 3}, \"tools\": [{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"},"
                  " \"attempts\": 5, \"backoff\": {\"base\": \"1ms\"}}]}",
                  "{\"id\": \"f1\", \"job\": \"j\", \"step\": 1, \"tool\": \"flaky\", \"args\": {\"ok_at\": 9}}\n"
                  "{\"id\": \"f2\", \"job\": \"j\", \"step\": 2, \"tool\": \"flaky\", \"args\": {\"ok_at\": 1}}\n",
                  1, 0);
    json_t *v = row(&r, "f1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "BudgetExceeded");
    CU_ASSERT_EQUAL(num(v, "attempts"), 3);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "f2"), "error"), "BudgetExceeded");
    json_decref(r.rows);

    free(dir);
    dir = new_store();
    r = run_calls(dir, "{\"guards\": {\"max_wall\": \"300ms\"}, \"tools\": [" PLUGIN_TOOL("sleep") "]}",
                  "{\"id\": \"w1\", \"job\": \"j\", \"step\": 1, \"tool\": \"sleep\", \"args\": {\"ms\": 200}}\n"
                  "{\"id\": \"w2\", \"job\": \"j\", \"step\": 2, \"tool\": \"sleep\", \"args\": {\"ms\": 200}}\n"
                  "{\"id\": \"w3\", \"job\": \"j\", \"step\": 3, \"tool\": \"sleep\", \"args\": {\"ms\": 200}}\n",
                  1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "w1"), "ok")));
    /* w2 gets only what is left of the job's wall time: its attempts time out */
    CU_ASSERT_STRING_EQUAL(str(row(&r, "w2"), "error"), "DeadlineExceeded");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "w3"), "error"), "DeadlineExceeded");
    json_decref(r.rows);
    free(dir);
}

/*
 * Pipelined calls of a fast tool must not take the idle worker set aside
 * for a non-idempotent attempt waiting for its marker's commit: the call
 * pushed back used to be counted twice against max_calls.
 */
static void test_pipelining_beside_markers(void)
{
    char *dir = new_store();
    tp_buf_t calls = {0};
    for (int i = 0; i < 200; i++)
        tp_buf_printf(&calls, "{\"id\": \"w%d\", \"tool\": \"noop\", \"args\": {\"i\": %d}}\n", i, i);
    for (int j = 0; j < 300; j++) {
        tp_buf_printf(&calls,
                      "{\"id\": \"a%d\", \"job\": \"j%d\", \"step\": 1, \"tool\": \"pid\", \"args\": {\"i\": %d}}\n", j,
                      j, j);
        tp_buf_printf(&calls, "{\"id\": \"n%d\", \"tool\": \"noop\", \"args\": {\"j\": %d}}\n", j, j);
        tp_buf_printf(&calls,
                      "{\"id\": \"b%d\", \"job\": \"j%d\", \"step\": 2, \"tool\": \"pid\", \"args\": {\"i\": %d}}\n", j,
                      j, j);
    }
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(dir,
                        "{\"guards\": {\"max_calls\": 2}, \"tools\": [" PLUGIN_TOOL(
                            "noop") ","
                                    "{\"name\": \"pid\", \"plugin\": {\"path\": \"@P@\"}, \"idempotent\": false}]}",
                        (char *)calls.data, 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 1100);
    CU_ASSERT_EQUAL(r.rep.summary.ok, 1100);
    json_decref(r.rows);
    tp_buf_free(&calls);
    free(dir);
}

/*
 * A half-open probe queued behind an attempt whose worker is killed never
 * started: it keeps its admission and runs, instead of being refused by
 * the probe slot it still holds.
 */
static void test_requeued_probe_runs(void)
{
    char *dir = new_store();
    tp_buf_t calls = {0};
    for (int i = 0; i < 10; i++)
        tp_buf_printf(&calls, "{\"id\": \"ok%d\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 1, \"i\": %d}}\n", i, i);
    for (int i = 0; i < 10; i++)
        tp_buf_printf(&calls, "{\"id\": \"z%d\", \"tool\": \"sleep\", \"args\": {\"ms\": 0, \"i\": %d}}\n", i, i);
    for (int i = 0; i < 4; i++)
        tp_buf_printf(&calls, "{\"id\": \"bad%d\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 9, \"i\": %d}}\n", i, i);
    tp_buf_puts(&calls, "{\"id\": \"wait\", \"tool\": \"echo\", \"args\": {}}\n");
    tp_buf_puts(&calls, "{\"id\": \"pause\", \"tool\": \"logged\", \"args\": {\"log\":\"/dev/null\", \"ms\": 400}}\n");
    tp_buf_puts(&calls, "{\"id\": \"hang\", \"tool\": \"sleep\", \"args\": {\"ms\": 5000}}\n");
    tp_buf_puts(&calls, "{\"id\": \"probe\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 1, \"i\": 99}}\n");
    tp_buf_append(&calls, "", 1);
    run_queue_budget_us = 1000000; /* the probe queues behind the hung call however loaded the machine */
    run_t r = run_calls(dir,
                        "{\"defaults\": {\"attempts\": 1}, \"tools\": ["
                        "{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"breaker\": {\"tool\": {\"failure_rate\": 0.2, \"min_calls\": 4, \"cooldown\": \"300ms\"}}},"
                        "{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"}, \"timeout\": \"100ms\"}," PLUGIN_TOOL(
                            "echo") "," PLUGIN_TOOL("logged") "]}",
                        (char *)calls.data, 1, 0);
    run_queue_budget_us = 0;
    CU_ASSERT_STRING_EQUAL(str(row(&r, "hang"), "error"), "Timeout");
    json_t *v = row(&r, "probe");
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    CU_ASSERT(r.rep.pool.requeued > 0); /* it was queued behind the hung call */
    json_decref(r.rows);
    tp_buf_free(&calls);
    free(dir);
}

/* Starts `toolpool run` on a store; returns its pid. */
static pid_t spawn_run(const char *dir, const char *reg, const char *calls, const char *out)
{
    char *argv[] = {
        TP_TEST_BIN "/toolpool", "run", "-q", "-j", "1", "--store", (char *)dir, "-r", (char *)reg, "-o", (char *)out,
        (char *)calls,           NULL};
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    return pid;
}

static json_t *read_results(const char *path, const char *id)
{
    char *text = tp_test_slurp(path, NULL);
    json_t *found = NULL;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        json_t *v = json_loads(line, 0, NULL);
        if (v && strcmp(str(v, "id"), id) == 0) {
            found = v;
            break;
        }
        json_decref(v);
    }
    free(text);
    return found;
}

/*
 * Two supervisors at the same time on one store: A's two failures and B's
 * one add up, so B's failure is the third and opens the circuit; A, still
 * running, then finds it open.
 */
static void test_two_supervisors_share_a_breaker(void)
{
    char dir[1024], reg[1100], ca[1100], cb[1100], oa[1100], ob[1100];
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("shared"));
    /* Scope "global": every job and every process on the store counts together. */
    char *regtext = expand("{\"defaults\": {\"breaker\": {\"same_call\": {\"scope\": \"global\"}}},"
                           " \"tools\": [" PLUGIN_TOOL("deny") "," PLUGIN_TOOL("sleep") "]}");
    free(tp_test_write(dir, "tools.json", regtext));
    free(regtext);
    snprintf(reg, sizeof reg, "%s/tools.json", dir);
    free(tp_test_write(dir, "a.jsonl",
                       "{\"id\": \"a1\", \"job\": \"a\", \"step\": 1, \"tool\": \"deny\", \"args\": {\"r\": 1}}\n"
                       "{\"id\": \"a2\", \"job\": \"a\", \"step\": 2, \"tool\": \"deny\", \"args\": {\"r\": 1}}\n"
                       "{\"id\": \"a3\", \"job\": \"a\", \"step\": 3, \"tool\": \"sleep\", \"args\": {\"ms\": 1200}}\n"
                       "{\"id\": \"a4\", \"job\": \"a\", \"step\": 4, \"tool\": \"deny\", \"args\": {\"r\": 1}}\n"));
    free(tp_test_write(dir, "b.jsonl",
                       "{\"id\": \"b1\", \"job\": \"b\", \"step\": 1, \"tool\": \"sleep\", \"args\": {\"ms\": 600}}\n"
                       "{\"id\": \"b2\", \"job\": \"b\", \"step\": 2, \"tool\": \"deny\", \"args\": {\"r\": 1}}\n"));
    snprintf(ca, sizeof ca, "%s/a.jsonl", dir);
    snprintf(cb, sizeof cb, "%s/b.jsonl", dir);
    snprintf(oa, sizeof oa, "%s/a.out", dir);
    snprintf(ob, sizeof ob, "%s/b.out", dir);
    char store[1100];
    snprintf(store, sizeof store, "%s/store", dir);
    pid_t pa = spawn_run(store, reg, ca, oa);
    pid_t pb = spawn_run(store, reg, cb, ob);
    int sa, sb;
    waitpid(pa, &sa, 0);
    waitpid(pb, &sb, 0);
    CU_ASSERT(WIFEXITED(sa) && WEXITSTATUS(sa) == 1);
    CU_ASSERT(WIFEXITED(sb) && WEXITSTATUS(sb) == 1);
    json_t *b2 = read_results(ob, "b2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b2);
    CU_ASSERT_STRING_EQUAL(str(b2, "error"), "PermissionDenied");
    CU_ASSERT(json_is_true(json_object_get(b2, "escalated")));
    json_t *a4 = read_results(oa, "a4");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a4);
    CU_ASSERT_STRING_EQUAL(str(a4, "error"), "CircuitOpen");
    CU_ASSERT_STRING_EQUAL(str(a4, "escalation"), str(b2, "escalation"));
    json_decref(a4);
    json_decref(b2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("recovery", NULL, NULL);
    CU_add_test(s, "same-call breaker opens, escalates, persists", test_same_call_breaker);
    CU_add_test(s, "a call's retries do not open its circuit", test_retries_do_not_count);
    CU_add_test(s, "tool breaker: rate, cooldown, probe", test_tool_breaker);
    CU_add_test(s, "fallback chain, degraded answer, escalation", test_fallback_chain);
    CU_add_test(s, "guards: steps, cost, calls, wall", test_guards);
    CU_add_test(s, "two supervisors share one breaker", test_two_supervisors_share_a_breaker);
    CU_add_test(s, "pipelining beside in-flight markers", test_pipelining_beside_markers);
    CU_add_test(s, "a requeued half-open probe still runs", test_requeued_probe_runs);
    return tp_test_run();
}
