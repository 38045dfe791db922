/*
 * Supervisors sharing one store, with real `toolpool run` processes: two
 * runs of the same calls started together run each call once between them
 * (whether its tool is idempotent or not), and each run answers every
 * call, the other's with the recorded result; one of them SIGKILLed
 * mid-run leaves the other to finish, running no call of a tool that is
 * not idempotent twice, and never calling a live run's calls Interrupted.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "runutil.h"
#include "testutil.h"

static char dir[1024];

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static pid_t start_run(const char *out, const char *errname)
{
    char reg[1100], err[1100], store[1100], calls[1100];
    path_in(reg, sizeof reg, "tools.json");
    path_in(err, sizeof err, errname);
    path_in(store, sizeof store, "store");
    path_in(calls, sizeof calls, "calls.jsonl");
    char *args[] = {"run", "-q", "-j", "2", "--store", store, "-r", reg, "-o", (char *)out, calls, NULL};
    return spawn_toolpool(args, err, NULL);
}

/* How many times each id is in the log (one line per execution). */
static json_t *count_log(const char *path)
{
    json_t *n = json_object();
    size_t len;
    char *text = tp_test_slurp(path, &len);
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        if (sp)
            *sp = 0; /* log.sh writes "JOB STEP"; the job is the id */
        json_int_t k = json_integer_value(json_object_get(n, line));
        json_object_set_new(n, line, json_integer(k + 1));
    }
    free(text);
    return n;
}

enum { CALLS = 200 };

static void setup(const char *tag)
{
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir(tag));
    char log_once[1100], log_any[1100];
    path_in(log_once, sizeof log_once, "once.log");
    path_in(log_any, sizeof log_any, "any.log");
    char *reg_tmpl = NULL;
    tp_buf_t r = {0};
    tp_buf_printf(&r,
                  "{\"defaults\": {\"timeout\": \"10s\"}, \"tools\": ["
                  "{\"name\": \"logged\", \"plugin\": {\"path\": \"@P@\"}, \"idempotent\": false},"
                  "{\"name\": \"logsh\", \"exec\": [\"@T@/log.sh\", \"%s\"]}]}",
                  log_any);
    tp_buf_append(&r, "", 1);
    reg_tmpl = expand((char *)r.data);
    free(tp_test_write(dir, "tools.json", reg_tmpl));
    free(reg_tmpl);
    tp_buf_free(&r);
    tp_buf_t text = {0};
    for (int i = 0; i < CALLS; i++) {
        if (i % 2)
            tp_buf_printf(&text, "{\"id\": \"c%d\", \"tool\": \"logsh\", \"args\": {\"i\": %d}}\n", i, i);
        else
            tp_buf_printf(
                &text, "{\"id\": \"c%d\", \"tool\": \"logged\", \"args\": {\"i\": %d, \"log\": \"%s\", \"ms\": 5}}\n",
                i, i, log_once);
    }
    tp_buf_append(&text, "", 1);
    free(tp_test_write(dir, "calls.jsonl", (char *)text.data));
    tp_buf_free(&text);
}

/* Executions per id over both logs. */
static json_t *executions(void)
{
    char log_once[1100], log_any[1100];
    path_in(log_once, sizeof log_once, "once.log");
    path_in(log_any, sizeof log_any, "any.log");
    json_t *a = count_log(log_once), *b = count_log(log_any);
    json_object_update(a, b);
    json_decref(b);
    return a;
}

/*
 * The second run starts delay_ms after the first: at once, while the
 * first is busy, and when it is nearly done (its calls then finish, and it
 * leaves the store, while the second waits for them).
 */
static void two_runs(long delay_ms)
{
    setup("shared");
    char out1[1100], out2[1100];
    path_in(out1, sizeof out1, "out1.jsonl");
    path_in(out2, sizeof out2, "out2.jsonl");
    pid_t a = start_run(out1, "err1.txt");
    struct timespec ts = {0, delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    pid_t b = start_run(out2, "err2.txt");
    CU_ASSERT_EQUAL(wait_exit(a), 0);
    CU_ASSERT_EQUAL(wait_exit(b), 0);
    json_t *ex = executions();
    int once = 0;
    for (int i = 0; i < CALLS; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        json_int_t n = json_integer_value(json_object_get(ex, id));
        if (n != 1)
            fprintf(stderr, "shared_test: %s ran %lld times\n", id, (long long)n);
        once += n == 1;
    }
    CU_ASSERT_EQUAL(once, CALLS);
    int lines1, lines2;
    json_t *r1 = load_results(out1, &lines1), *r2 = load_results(out2, &lines2);
    CU_ASSERT_EQUAL(lines1, CALLS);
    CU_ASSERT_EQUAL(lines2, CALLS);
    const char *id;
    json_t *v;
    int ok = 0;
    json_object_foreach(r1, id, v)
        ok += json_is_true(json_object_get(v, "ok"));
    json_object_foreach(r2, id, v)
        ok += json_is_true(json_object_get(v, "ok"));
    CU_ASSERT_EQUAL(ok, 2 * CALLS); /* none Interrupted, none escalated */
    json_decref(r1);
    json_decref(r2);
    json_decref(ex);
}

static void test_two_runs_together(void)
{
    for (long delay = 0; delay <= 300; delay += 30)
        two_runs(delay);
}

static void test_one_killed(void)
{
    setup("shared-kill");
    char out1[1100], out2[1100];
    path_in(out1, sizeof out1, "out1.jsonl");
    path_in(out2, sizeof out2, "out2.jsonl");
    pid_t a = start_run(out1, "err1.txt");
    pid_t b = start_run(out2, "err2.txt");
    struct timespec ts = {0, 250 * 1000000L};
    nanosleep(&ts, NULL);
    kill(a, SIGKILL);
    wait_exit(a);
    int status_b = wait_exit(b);
    CU_ASSERT_TRUE(status_b == 0 || status_b == 1);
    json_t *ex = executions();
    int lines2;
    json_t *r2 = load_results(out2, &lines2);
    CU_ASSERT_EQUAL(lines2, CALLS);
    for (int i = 0; i < CALLS; i += 2) { /* the tool that is not idempotent */
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        json_int_t n = json_integer_value(json_object_get(ex, id));
        json_t *res = json_object_get(r2, id);
        CU_ASSERT_TRUE(n <= 1);
        if (json_is_true(json_object_get(res, "ok"))) {
            CU_ASSERT_EQUAL(n, 1);
        } else {
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(res, "error")), "Interrupted");
        }
    }
    json_decref(r2);
    json_decref(ex);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("shared store", NULL, NULL);
    CU_add_test(s, "two runs of the same calls at once run each call once", test_two_runs_together);
    CU_add_test(s, "one of two runs killed: the other finishes, nothing runs twice", test_one_killed);
    return tp_test_run();
}
