/*
 * Crash-resilient runs, with the real toolpool binary killed for real:
 * rerunning serves recorded results and runs only the rest; an id reused
 * for other input is refused; a tool that is not idempotent is never run
 * twice; a full map and a full disk stop the run cleanly and the rerun,
 * with room again, completes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
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

/* toolpool run on dir's store, registry and calls; stdout/stderr to files. Returns the pid. */
static pid_t start_run(const char *calls, const char *out, const char *err, char *const extra_env[])
{
    char reg[1100], store[1100];
    path_in(reg, sizeof reg, "tools.json");
    path_in(store, sizeof store, "store");
    char *argv[] = {TP_TEST_BIN "/toolpool", "run", "-q", "-j", "2", "--store", store, "-r", reg, "-o", (char *)out,
                    (char *)calls,           NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *envp[64];
    int n = 0;
    for (char **e = environ; *e && n < 50; e++)
        envp[n++] = *e;
    for (int i = 0; extra_env && extra_env[i] && n < 62; i++)
        envp[n++] = extra_env[i];
    envp[n] = NULL;
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

static int run_to_end(const char *calls, const char *out, const char *err, char *const extra_env[])
{
    return wait_exit(start_run(calls, out, err, extra_env));
}

/* The result lines of a file, by id. */
static json_t *load(const char *path)
{
    json_t *by_id = json_object();
    char *text = tp_test_slurp(path, NULL);
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(v);
        if (v == NULL)
            continue;
        const char *id = json_string_value(json_object_get(v, "id"));
        CU_ASSERT_PTR_NULL(json_object_get(by_id, id ? id : "")); /* one record per id */
        json_object_set_new(by_id, id ? id : "", v);
    }
    free(text);
    return by_id;
}

/* How many times each id appears in an execution log. */
static json_t *load_log(const char *path)
{
    json_t *counts = json_object();
    char *text = tp_test_slurp(path, NULL);
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_int_t n = json_integer_value(json_object_get(counts, line));
        json_object_set_new(counts, line, json_integer(n + 1));
    }
    free(text);
    return counts;
}

static void setup(const char *tag, const char *registry)
{
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir(tag));
    char *reg = expand(registry);
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);
}

#define LOGGED_REG                                                                                                     \
    "{\"defaults\": {\"backoff\": {\"base\": \"1ms\"}}, \"tools\": [" PLUGIN_TOOL("deny") "," PLUGIN_TOOL(             \
        "noop") ","                                                                                                    \
                "{\"name\": \"logged\", \"plugin\": {\"path\": \"@P@\"}, \"idempotent\": false, \"timeout\": \"30s\"}]}"

/* A finished run, rerun: every result served from the store, no tool runs again. */
static void test_rerun_serves_recorded(void)
{
    setup("rerun", LOGGED_REG);
    char calls[1100], out1[1100], out2[1100], err[1100], log[1100], text[4096];
    path_in(log, sizeof log, "exec.log");
    snprintf(
        text, sizeof text,
        "{\"id\": \"a\", \"tool\": \"noop\"}\n"
        "{\"id\": \"b\", \"tool\": \"deny\"}\n"
        "{\"id\": \"c\", \"job\": \"j\", \"step\": 1, \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 1}}\n"
        "{\"id\": \"d\", \"job\": \"j\", \"step\": 2, \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 2}}\n",
        log, log);
    free(tp_test_write(dir, "calls.jsonl", text));
    path_in(calls, sizeof calls, "calls.jsonl");
    path_in(out1, sizeof out1, "out1.jsonl");
    path_in(out2, sizeof out2, "out2.jsonl");
    path_in(err, sizeof err, "err.txt");
    CU_ASSERT_EQUAL(run_to_end(calls, out1, err, NULL), 1);
    CU_ASSERT_EQUAL(run_to_end(calls, out2, err, NULL), 1);
    json_t *r1 = load(out1), *r2 = load(out2);
    CU_ASSERT_EQUAL(json_object_size(r1), 4);
    CU_ASSERT(json_equal(r1, r2)); /* served records are the records */
    json_t *counts = load_log(log);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(counts, "c")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(counts, "d")), 1);
    json_decref(r1);
    json_decref(r2);
    json_decref(counts);

    /* The same id with other args is refused, not served. */
    free(tp_test_write(dir, "calls2.jsonl", "{\"id\": \"a\", \"tool\": \"noop\", \"args\": {\"x\": 1}}\n"));
    path_in(calls, sizeof calls, "calls2.jsonl");
    CU_ASSERT_EQUAL(run_to_end(calls, out2, err, NULL), 1);
    r2 = load(out2);
    json_t *a = json_object_get(r2, "a");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "error")), "InvalidRequest");
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(a, "message")), "other input"));
    json_decref(r2);
}

/*
 * On a fresh store, an id that comes again later in the same run finds
 * the record its first call made: served when the input is the same (the
 * tool does not run again), refused when it is not. The engine skips the
 * store lookup for ids it has never written (seen.h): this is what must
 * not be skipped.
 */
static void test_fresh_store_repeat(void)
{
    setup("fresh-repeat", LOGGED_REG);
    char log[PATH_MAX], calls[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
    path_in(log, sizeof log, "exec.log");
    tp_buf_t text = {0};
    tp_buf_printf(&text, "{\"id\": \"dup\", \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 1}}\n", log);
    for (int i = 0; i < 3000; i++)
        tp_buf_printf(&text, "{\"id\": \"n%d\", \"tool\": \"noop\", \"args\": {}}\n", i);
    tp_buf_printf(&text, "{\"id\": \"dup\", \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 1}}\n", log);
    tp_buf_printf(&text, "{\"id\": \"dup\", \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 2}}\n", log);
    tp_buf_append(&text, "", 1); /* its end */
    free(tp_test_write(dir, "calls.jsonl", (const char *)text.data));
    tp_buf_free(&text);
    path_in(calls, sizeof calls, "calls.jsonl");
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    CU_ASSERT_EQUAL(run_to_end(calls, out, err, NULL), 1);
    json_t *counts = load_log(log);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(counts, "dup")), 1); /* ran once */
    json_decref(counts);
    int ok = 0, refused = 0;
    char *t = tp_test_slurp(out, NULL);
    for (char *save = NULL, *line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "{\"id\":\"dup\"", 11) != 0)
            continue;
        ok += strstr(line, "\"ok\":true") != NULL;
        refused += strstr(line, "recorded in the store for other input") != NULL;
    }
    free(t);
    CU_ASSERT_EQUAL(ok, 2);
    CU_ASSERT_EQUAL(refused, 1);
}

/* Waits until path has at least n lines (or 10 s pass). */
static bool wait_lines(const char *path, int n)
{
    for (int i = 0; i < 1000; i++) {
        char *t = tp_test_slurp(path, NULL);
        int lines = 0;
        for (char *p = t; p && *p; p++)
            lines += *p == '\n';
        free(t);
        if (lines >= n)
            return true;
        usleep(10000);
    }
    return false;
}

/* No process of ours is left: none whose command line names the test tools or a worker. */
static int leftover_workers(pid_t dead_parent)
{
    int n = 0;
    char path[64], buf[512];
    for (int pid = 2; pid < 4194304; pid++) {
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            if (pid > 65536)
                break;
            continue;
        }
        if (fgets(buf, sizeof buf, f)) {
            char *p = strrchr(buf, ')');
            int ppid = p ? atoi(p + 4) : 0;
            n += ppid == dead_parent;
        }
        fclose(f);
    }
    return n;
}

/*
 * SIGKILL of the supervisor while a tool that is not idempotent runs: the
 * workers go with it, and the rerun ends that call Interrupted, escalated,
 * without running it again; the job goes on after its checkpoint.
 */
static void test_kill_nonidempotent(void)
{
    setup("kill", LOGGED_REG);
    char calls[1100], out[1100], err[1100], log[1100], text[4096];
    path_in(log, sizeof log, "exec.log");
    snprintf(
        text, sizeof text,
        "{\"id\": \"s1\", \"job\": \"j\", \"step\": 1, \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 1}}\n"
        "{\"id\": \"s2\", \"job\": \"j\", \"step\": 2, \"tool\": \"logged\", \"args\": {\"log\":\"%s\", \"i\": 2, \"ms\": 5000}}\n"
        "{\"id\": \"s3\", \"job\": \"j\", \"step\": 3, \"tool\": \"noop\"}\n",
        log, log);
    free(tp_test_write(dir, "calls.jsonl", text));
    path_in(calls, sizeof calls, "calls.jsonl");
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    pid_t pid = start_run(calls, out, err, NULL);
    CU_ASSERT_FATAL(wait_lines(log, 2)); /* s2 is running */
    kill(pid, SIGKILL);
    wait_exit(pid);
    usleep(100000);
    CU_ASSERT_EQUAL(leftover_workers(pid), 0); /* the workers died with it */

    CU_ASSERT_EQUAL(run_to_end(calls, out, err, NULL), 1);
    json_t *r = load(out);
    CU_ASSERT_EQUAL(json_object_size(r), 3);
    CU_ASSERT(json_is_true(json_object_get(json_object_get(r, "s1"), "ok")));
    json_t *s2 = json_object_get(r, "s2");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s2, "error")), "Interrupted");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s2, "class")), "guard");
    CU_ASSERT(json_is_false(json_object_get(s2, "retryable")));
    CU_ASSERT(json_is_true(json_object_get(s2, "escalated")));
    CU_ASSERT(json_is_true(json_object_get(json_object_get(r, "s3"), "ok")));
    json_t *counts = load_log(log);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(counts, "s1")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(counts, "s2")), 1);
    json_decref(counts);
    json_decref(r);

    /* The checkpoint lists the job's three calls, in order. */
    char cmd[2400], store[1100];
    path_in(store, sizeof store, "store");
    snprintf(cmd, sizeof cmd, "%s/toolpool checkpoints show j --store %s > %s/cp.txt", TP_TEST_BIN, store, dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    path_in(cmd, sizeof cmd, "cp.txt");
    char *cp = tp_test_slurp(cmd, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    /* Whole step lines: the store's random directory name may hold "s3" too. */
    char *p1 = strstr(cp, "step 1  s1 "), *p2 = strstr(cp, "step 2  s2 "), *p3 = strstr(cp, "step 3  s3 ");
    CU_ASSERT(p1 && p2 && p3 && p1 < p2 && p2 < p3);
    CU_ASSERT_PTR_NOT_NULL(strstr(cp, "Interrupted"));
    free(cp);
}

/* Big results until the store is full; exit 2 with a clear message; rerun with room completes. */
static void fill_and_recover(const char *tag, bool disk)
{
    setup(tag, "{\"tools\": [" PLUGIN_TOOL("big") "]}");
    char calls[1100], out[1100], err[1100], store[1100];
    tp_buf_t text = {0};
    for (int i = 0; i < 60; i++)
        tp_buf_printf(&text, "{\"id\": \"b%d\", \"tool\": \"big\", \"args\": {\"n\": 100000, \"i\": %d}}\n", i, i);
    tp_buf_append(&text, "", 1);
    free(tp_test_write(dir, "calls.jsonl", (char *)text.data));
    tp_buf_free(&text);
    path_in(calls, sizeof calls, "calls.jsonl");
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    path_in(store, sizeof store, "store");
    char *env_small[] = {"TOOLPOOL_STORE_LIMIT=2097152", NULL};
    if (disk) {
        mkdir(store, 0755);
        if (mount("tmpfs", store, "tmpfs", 0, "size=3m") != 0) {
            fprintf(stderr, "mount tmpfs on %s: %s (this test needs root)\n", store, strerror(errno));
            CU_FAIL_FATAL("cannot mount a small tmpfs for the full-disk test");
        }
    }
    CU_ASSERT_EQUAL(run_to_end(calls, out, err, disk ? NULL : env_small), 2);
    char *msg = tp_test_slurp(err, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, disk ? "disk is full" : "size limit"));
    free(msg);
    json_t *first = load(out);
    size_t recorded = json_object_size(first);
    CU_ASSERT(recorded > 0 && recorded < 60);
    if (recorded == 0 || recorded >= 60)
        fprintf(stderr, "\n%s: %zu results before the store filled\n", tag, recorded);

    /* The store still opens. */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%s/toolpool checkpoints list --store %s > /dev/null", TP_TEST_BIN, store);
    CU_ASSERT_EQUAL(system(cmd), 0);

    if (disk)
        CU_ASSERT_EQUAL(mount("tmpfs", store, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    CU_ASSERT_EQUAL(run_to_end(calls, out, err, NULL), 0);
    json_t *all = load(out);
    CU_ASSERT_EQUAL(json_object_size(all), 60);
    /*
     * What was reported before the failure is served, unchanged; the calls
     * the failure stopped were reported Cancelled, not recorded, and ran now.
     */
    const char *id;
    json_t *v;
    json_object_foreach(first, id, v) {
        if (json_is_false(json_object_get(v, "ok"))) {
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "error")), "Cancelled");
            CU_ASSERT(json_is_true(json_object_get(json_object_get(all, id), "ok")));
        } else {
            CU_ASSERT(json_equal(v, json_object_get(all, id)));
        }
    }
    json_decref(first);
    json_decref(all);
    if (disk)
        umount2(store, MNT_DETACH);
}

static void test_full_map(void)
{
    fill_and_recover("fullmap", false);
}

static void test_full_disk(void)
{
    fill_and_recover("fulldisk", true);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("resume", NULL, NULL);
    CU_add_test(s, "rerun serves recorded results; reused id refused", test_rerun_serves_recorded);
    CU_add_test(s, "fresh store: an id again in the same run is served or refused", test_fresh_store_repeat);
    CU_add_test(s, "kill -9 with a non-idempotent call in flight", test_kill_nonidempotent);
    CU_add_test(s, "full map: clean stop, rerun completes", test_full_map);
    CU_add_test(s, "full disk: clean stop, rerun completes", test_full_disk);
    return tp_test_run();
}
