/*
 * Chaos, with real processes killed for real.
 *
 * 1. 10,000 calls over 100 jobs mixing ok, transient, permanent, hanging and
 *    non-idempotent tools: a clean run, then the same run with its
 *    supervisor SIGKILLed at a dozen random moments and rerun until done.
 *    Every call has exactly one result, the output equals the clean run's
 *    (timing aside; a non-idempotent call caught in flight ends Interrupted
 *    instead), and no non-idempotent call ran twice (the tool logs every
 *    execution).
 * 2. 100,000 calls while random workers are SIGKILLed 1,000 times: no call
 *    lost, no call with two results, every call ok.
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
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "runutil.h"
#include "testutil.h"

extern char **environ;

static char dir[1024];

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* toolpool run on the store, reading its calls from IN (a path, or standard
 * input when NULL) and standard input from FD (when not -1). */
static pid_t spawn_run(const char *store, const char *calls, int fd, const char *out, const char *workers)
{
    char reg[1100], err[1100];
    path_in(reg, sizeof reg, "tools.json");
    path_in(err, sizeof err, "stderr.txt");
    char *argv[] = {TP_TEST_BIN "/toolpool",
                    "run",
                    "-q",
                    "-j",
                    (char *)workers,
                    "--relaxed",
                    "--store",
                    (char *)store,
                    "-r",
                    reg,
                    "-o",
                    (char *)out,
                    calls ? (char *)calls : "-",
                    NULL};
    posix_spawn_file_actions_t fa;
    CU_ASSERT_EQUAL_FATAL(posix_spawn_file_actions_init(&fa), 0);
    CU_ASSERT_EQUAL_FATAL(posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_APPEND, 0644), 0);
    if (fd >= 0)
        CU_ASSERT_EQUAL_FATAL(posix_spawn_file_actions_adddup2(&fa, fd, 0), 0);
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

static pid_t start_run(const char *store, const char *calls, const char *out, const char *workers)
{
    return spawn_run(store, calls, -1, out, workers);
}

static pid_t start_run_fd(const char *store, int fd, const char *out, const char *workers)
{
    return spawn_run(store, NULL, fd, out, workers);
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Results by id; counts duplicates in *dups. */
static json_t *load(const char *path, int *dups)
{
    json_t *by_id = json_object();
    size_t len;
    char *text = tp_test_slurp(path, &len);
    *dups = 0;
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(line, 0, NULL);
        if (v == NULL) {
            CU_FAIL("a result line is not JSON");
            continue;
        }
        const char *id = json_string_value(json_object_get(v, "id"));
        if (json_object_get(by_id, id))
            (*dups)++;
        json_object_set_new(by_id, id, v);
    }
    free(text);
    return by_id;
}

/* A record without what differs from run to run: timings and escalation ids. */
static void normalize(json_t *v)
{
    json_object_del(v, "duration_ms");
    json_object_del(v, "escalation");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(v, "trace"), i, t) {
        json_object_del(t, "duration_ms");
        json_object_del(t, "backoff_ms");
        json_object_del(t, "start_ms"); /* a timing too: when the attempt started after its turn */
    }
}

static void test_supervisor_kills(void)
{
    enum { JOBS = 100, STEPS = 100, KILLS = 12 };
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("chaos"));
    char *reg = expand(
        "{\"defaults\": {\"backoff\": {\"base\": \"1ms\", \"jitter\": \"none\"},"
        " \"breaker\": {\"same_call\": {\"failures\": 1000}, \"tool\": {\"min_calls\": 1000000}}},"
        " \"tools\": [" PLUGIN_TOOL("noop") "," PLUGIN_TOOL(
            "deny") ","
                    "{\"name\": \"flaky\", \"plugin\": {\"path\": \"@P@\"}, \"attempts\": 3},"
                    "{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"}, \"timeout\": \"50ms\", \"attempts\": 1},"
                    "{\"name\": \"logged\", \"plugin\": {\"path\": \"@P@\"}, \"idempotent\": false}]}");
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);
    char log[1100], calls[1100], clean_store[1100], chaos_store[1100], out[1100], clean_out[1100], clean_log[1100];
    path_in(log, sizeof log, "exec.log");
    path_in(calls, sizeof calls, "calls.jsonl");
    path_in(clean_store, sizeof clean_store, "clean-store");
    path_in(chaos_store, sizeof chaos_store, "chaos-store");
    path_in(clean_out, sizeof clean_out, "clean.jsonl");
    path_in(clean_log, sizeof clean_log, "clean-exec.log");
    tp_buf_t text = {0};
    for (int s = 1; s <= STEPS; s++)
        for (int j = 0; j < JOBS; j++) {
            int i = (s - 1) * JOBS + j;
            const char *tool = "noop";
            char extra[1200] = "";
            switch (i % 10) {
            case 6:
                tool = "flaky";
                snprintf(extra, sizeof extra, ", \"ok_at\": 2");
                break;
            case 7:
                tool = "deny";
                break;
            case 8:
                tool = "logged";
                snprintf(extra, sizeof extra, ", \"log\":\"%s\", \"ms\": 2", log);
                break;
            case 9:
                if (i % 100 == 9) {
                    tool = "sleep";
                    snprintf(extra, sizeof extra, ", \"ms\": 10000");
                }
                break;
            }
            tp_buf_printf(
                &text, "{\"id\": \"c%d\", \"job\": \"j%d\", \"step\": %d, \"tool\": \"%s\", \"args\": {\"i\": %d%s}}\n",
                i, j, s, tool, i, extra);
        }
    tp_buf_append(&text, "", 1);
    free(tp_test_write(dir, "calls.jsonl", (char *)text.data));
    tp_buf_free(&text);

    /* The clean run. */
    CU_ASSERT_EQUAL_FATAL(wait_exit(start_run(clean_store, calls, clean_out, "2")), 1);
    CU_ASSERT_EQUAL(rename(log, clean_log), 0);

    /* The same run, killed again and again, then run to its end. */
    srand(20261129);
    int killed = 0, finished_early = 0;
    for (int k = 0; k < KILLS; k++) {
        snprintf(out, sizeof out, "%s/chaos-%d.jsonl", dir, k);
        pid_t pid = start_run(chaos_store, calls, out, "2");
        usleep((useconds_t)(50000 + rand() % 300000));
        if (kill(pid, SIGKILL) == 0)
            killed++;
        int rc = wait_exit(pid);
        finished_early += rc == 0 || rc == 1;
    }
    fprintf(stderr, "\n    %d supervisor kills (%d runs had already finished)\n", killed, finished_early);
    CU_ASSERT(killed - finished_early >= 10);
    path_in(out, sizeof out, "final.jsonl");
    CU_ASSERT_EQUAL(wait_exit(start_run(chaos_store, calls, out, "2")), 1);

    int dups_clean, dups_final;
    json_t *clean = load(clean_out, &dups_clean), *final = load(out, &dups_final);
    CU_ASSERT_EQUAL(dups_clean, 0);
    CU_ASSERT_EQUAL(dups_final, 0);
    CU_ASSERT_EQUAL(json_object_size(clean), JOBS * STEPS);
    CU_ASSERT_EQUAL(json_object_size(final), JOBS * STEPS);
    int interrupted = 0, differ = 0;
    const char *id;
    json_t *v;
    json_object_foreach(final, id, v) {
        json_t *c = json_object_get(clean, id);
        if (c == NULL) {
            differ++;
            continue;
        }
        const char *kind = json_string_value(json_object_get(v, "error"));
        if (kind && strcmp(kind, "Interrupted") == 0) {
            interrupted++;
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "tool")), "logged");
            CU_ASSERT(json_is_true(json_object_get(v, "escalated")));
            continue;
        }
        normalize(v);
        normalize(c);
        if (!json_equal(v, c)) {
            if (differ++ < 3) {
                char *a = json_dumps(v, 0), *b = json_dumps(c, 0);
                fprintf(stderr, "    differs:\n      chaos %s\n      clean %s\n", a, b);
                free(a);
                free(b);
            }
        }
    }
    fprintf(stderr, "    %zu results, %d interrupted (non-idempotent, in flight at a kill), %d differ\n",
            json_object_size(final), interrupted, differ);
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT(interrupted <= killed * 2); /* at most one per worker (-j 2) per kill */

    /* No non-idempotent call ran twice; every one that succeeded ran exactly once. */
    json_t *runs = json_object();
    char *logtext = tp_test_slurp(log, NULL);
    for (char *save = NULL, *line = logtext ? strtok_r(logtext, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save))
        json_object_set_new(runs, line, json_integer(json_integer_value(json_object_get(runs, line)) + 1));
    free(logtext);
    int twice = 0, missing = 0;
    json_object_foreach(runs, id, v)
        twice += json_integer_value(v) > 1;
    json_object_foreach(final, id, v) {
        if (strcmp(json_string_value(json_object_get(v, "tool")), "logged") == 0 &&
            json_is_true(json_object_get(v, "ok")))
            missing += json_integer_value(json_object_get(runs, id)) != 1;
    }
    CU_ASSERT_EQUAL(twice, 0);
    CU_ASSERT_EQUAL(missing, 0);
    json_decref(runs);
    json_decref(clean);
    json_decref(final);
}

/* The worker pids of a supervisor: its children, from /proc. */
static int children(pid_t pid, pid_t *out, int cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, v;
    while (n < cap && fscanf(f, "%d", &v) == 1)
        out[n++] = v;
    fclose(f);
    return n;
}

static void test_worker_kills(void)
{
    enum { N = 100000, KILLS = 1000, PER_KILL = N / KILLS };
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("workers"));
    char *reg = expand("{\"defaults\": {\"attempts\": 20, \"backoff\": {\"base\": \"1ms\", \"max\": \"5ms\"},"
                       " \"breaker\": {\"tool\": {\"min_calls\": 1000000}}},"
                       " \"tools\": [" PLUGIN_TOOL("noop") "]}");
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);
    char store[1100], out[1100];
    path_in(store, sizeof store, "store");
    path_in(out, sizeof out, "out.jsonl");
    /* The calls go in through a pipe, PER_KILL of them after each kill: the
     * run cannot end before every kill has landed, however fast the machine. */
    int in[2];
    CU_ASSERT_EQUAL_FATAL(pipe2(in, O_CLOEXEC), 0);
    pid_t sup = start_run_fd(store, in[0], out, "4");
    close(in[0]);
    int kills = 0, sent = 0;
    srand(7);
    tp_buf_t text = {0};
    while (kills < KILLS) {
        pid_t kids[16];
        int n = children(sup, kids, 16);
        if (n < 0 || waitpid(sup, NULL, WNOHANG) == sup)
            break; /* the supervisor is gone */
        if (n > 0 && kill(kids[rand() % n], SIGKILL) == 0) {
            kills++;
            text.len = 0;
            for (int i = 0; i < PER_KILL; i++, sent++)
                tp_buf_printf(&text, "{\"id\": \"n%d\", \"tool\": \"noop\", \"args\": {\"i\": %d}}\n", sent, sent);
            if (write_all(in[1], text.data, text.len) != 0)
                break;
        }
        usleep(1500);
    }
    tp_buf_free(&text);
    close(in[1]);
    int rc = wait_exit(sup);
    fprintf(stderr, "\n    %d worker kills\n", kills);
    CU_ASSERT_EQUAL(kills, KILLS);
    CU_ASSERT_EQUAL(rc, 0);
    int dups;
    json_t *all = load(out, &dups);
    CU_ASSERT_EQUAL(dups, 0);
    CU_ASSERT_EQUAL(json_object_size(all), (size_t)sent);
    CU_ASSERT_EQUAL(sent, N);
    int crashed = 0, failed = 0;
    const char *id;
    json_t *v;
    json_object_foreach(all, id, v) {
        failed += !json_is_true(json_object_get(v, "ok"));
        crashed += json_integer_value(json_object_get(v, "attempts")) > 1;
    }
    fprintf(stderr, "    %zu results, %d retried after a crash, %d failed\n", json_object_size(all), crashed, failed);
    CU_ASSERT(crashed > 0);
    CU_ASSERT_EQUAL(failed, 0);
    json_decref(all);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("chaos", NULL, NULL);
    CU_add_test(s, "10,000 calls, supervisor SIGKILLed a dozen times", test_supervisor_kills);
    CU_add_test(s, "100,000 calls, workers SIGKILLed 1,000 times", test_worker_kills);
    return tp_test_run();
}
