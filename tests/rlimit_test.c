/*
 * Resource limits, run for real: exec tools and plugins that allocate
 * 200 MB under a 64M memory limit, spin under a 1s cpu limit, open past a
 * files limit, or write past the output limit. Each ends in its own kind
 * (OutOfMemory, ResourceLimit, OutputTooLarge: permanent, one attempt),
 * with a message that names the limit; the same work without the limit
 * succeeds, on the same worker.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runutil.h"
#include "testutil.h"

#define HOG TP_TEST_HOG

static bool contains(const char *s, const char *needle)
{
    bool ok = strstr(s, needle) != NULL;
    if (!ok)
        fprintf(stderr, "\n  \"%s\" does not contain \"%s\"\n", s, needle);
    return ok;
}

/* A failed call of a permanent kind: one attempt, not retried. */
static void expect_fail(json_t *v, const char *kind, const char *needle)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), kind);
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "permanent");
    CU_ASSERT(json_is_false(json_object_get(v, "retryable")));
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    CU_ASSERT(contains(str(v, "message"), needle));
}

static void expect_ok(json_t *v)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    if (!json_is_true(json_object_get(v, "ok")))
        fprintf(stderr, "\n  %s: %s: %s\n", str(v, "id"), str(v, "error"), str(v, "message"));
}

/*
 * An exec tool that allocates 200 MB under a 64M memory limit: malloc
 * fails, the tool says so on stderr and exits 1: OutOfMemory. The same
 * tool without the limit allocates them; a tool under the limit that
 * needs less is fine.
 */
static void test_exec_memory(void)
{
    run_t r = run_calls(
        NULL,
        "{\"tools\": ["
        "{\"name\": \"hog\", \"exec\": [\"" HOG "\", \"mem\", \"200\"], \"limits\": {\"memory\": \"64M\"}},"
        "{\"name\": \"small\", \"exec\": [\"" HOG "\", \"mem\", \"8\"], \"limits\": {\"memory\": \"64M\"}},"
        "{\"name\": \"free\", \"exec\": [\"" HOG "\", \"mem\", \"200\"]}]}",
        "{\"id\": \"h\", \"tool\": \"hog\"}\n"
        "{\"id\": \"s\", \"tool\": \"small\"}\n"
        "{\"id\": \"f\", \"tool\": \"free\"}\n",
        1, 0);
    expect_fail(row(&r, "h"), "OutOfMemory", "hog ran out of memory under its memory limit (64M)");
    CU_ASSERT(contains(str(row(&r, "h"), "message"), "Cannot allocate memory"));
    expect_ok(row(&r, "s"));
    expect_ok(row(&r, "f"));
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 1); /* one worker ran all three */
    json_decref(r.rows);
}

/* Python's MemoryError (a traceback on stderr, exit 1) under a memory limit: OutOfMemory. */
static void test_exec_memory_python(void)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        fprintf(stderr, "(no python3: skipped) ");
        return;
    }
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"py\", \"exec\": [\"python3\", \"-c\","
                        " \"import sys; sys.stdin.read(); b = bytearray(200 * 1024 * 1024)\"],"
                        " \"limits\": {\"memory\": \"64M\"}, \"timeout\": \"60s\"}]}",
                        "{\"id\": \"p\", \"tool\": \"py\"}\n", 1, 0);
    expect_fail(row(&r, "p"), "OutOfMemory", "py ran out of memory under its memory limit (64M): ");
    CU_ASSERT(contains(str(row(&r, "p"), "message"), "MemoryError"));
    json_decref(r.rows);
}

/* An exec tool that spins under a 1s cpu limit: SIGXCPU at one second of CPU time: ResourceLimit. */
static void test_exec_cpu(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"spin\", \"exec\": [\"" HOG "\", \"spin\"],"
                        " \"limits\": {\"cpu\": \"1s\"}, \"timeout\": \"60s\"}]}",
                        "{\"id\": \"c\", \"tool\": \"spin\"}\n", 1, 0);
    expect_fail(row(&r, "c"), "ResourceLimit", "spin exceeded its cpu limit (1s of CPU time; killed by SIGXCPU)");
    CU_ASSERT(trace_ms(row(&r, "c"), 0, "duration_ms") >= 900);
    json_decref(r.rows);
}

/* Opening past a files limit: EMFILE, named on stderr: ResourceLimit. */
static void test_exec_files(void)
{
    run_t r = run_calls(NULL,
                        "{\"defaults\": {\"limits\": {\"files\": 16}}, \"tools\": ["
                        "{\"name\": \"many\", \"exec\": [\"" HOG "\", \"files\", \"64\"]},"
                        "{\"name\": \"few\", \"exec\": [\"" HOG "\", \"files\", \"8\"]}]}",
                        "{\"id\": \"m\", \"tool\": \"many\"}\n"
                        "{\"id\": \"f\", \"tool\": \"few\"}\n",
                        1, 0);
    expect_fail(row(&r, "m"), "ResourceLimit", "many ran out of descriptors under its files limit (16)");
    CU_ASSERT(contains(str(row(&r, "m"), "message"), "Too many open files"));
    expect_ok(row(&r, "f"));
    json_decref(r.rows);
}

/* limits.output is max_output: stdout past it ends the call OutputTooLarge. */
static void test_exec_output(void)
{
    run_t r = run_calls(
        NULL, "{\"tools\": [{\"name\": \"yes\", \"exec\": [\"@T@/yes.sh\"], \"limits\": {\"output\": \"4K\"}}]}",
        "{\"id\": \"y\", \"tool\": \"yes\"}\n", 1, 0);
    expect_fail(row(&r, "y"), "OutputTooLarge", "(4096 bytes)");
    json_decref(r.rows);
}

/*
 * A plugin runs in the worker: the worker's soft RLIMIT_AS is lowered
 * around the call, so its malloc of 200 MB fails and it gives up:
 * OutOfMemory. The limit is put back after: the next call, without a
 * limit, allocates the 200 MB in the same worker.
 */
static void test_plugin_memory(void)
{
#ifdef TP_TEST_SANITIZE
    /* ASan reserves terabytes of address space at start: no RLIMIT_AS fits around it. */
    fprintf(stderr, "(sanitizer build: skipped) ");
    return;
#endif
    run_t r = run_calls(
        NULL,
        "{\"tools\": [{\"name\": \"hog\", \"plugin\": {\"path\": \"@P@\"}, \"limits\": {\"memory\": "
        "\"64M\"}}," PLUGIN_TOOL("hog_free") "]}",
        "{\"id\": \"h\", \"job\": \"j\", \"step\": 1, \"tool\": \"hog\", \"args\": {\"mb\": 200}}\n"
        "{\"id\": \"s\", \"job\": \"j\", \"step\": 2, \"tool\": \"hog\", \"args\": {\"mb\": 4}}\n"
        "{\"id\": \"f\", \"job\": \"j\", \"step\": 3, \"tool\": \"hog_free\", \"args\": {\"mb\": 200}}\n",
        1, 0);
    expect_fail(row(&r, "h"), "OutOfMemory",
                "hog ran out of memory under its memory limit (64M, the worker's own included)");
    expect_ok(row(&r, "s"));
    expect_ok(row(&r, "f"));
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 1);
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    json_decref(r.rows);
}

/*
 * A plugin that spins under a 1s cpu limit: its worker gets SIGXCPU and
 * dies of it: ResourceLimit, not a crash; a fresh worker takes the next
 * call.
 */
static void test_plugin_cpu(void)
{
    run_t r = run_calls(
        NULL,
        "{\"tools\": [{\"name\": \"spin\", \"plugin\": {\"path\": \"@P@\"}, \"limits\": {\"cpu\": \"1s\"},"
        " \"timeout\": \"60s\"}," PLUGIN_TOOL("noop") "]}",
        "{\"id\": \"c\", \"job\": \"j\", \"step\": 1, \"tool\": \"spin\"}\n"
        "{\"id\": \"n\", \"job\": \"j\", \"step\": 2, \"tool\": \"noop\"}\n",
        1, 0);
    expect_fail(row(&r, "c"), "ResourceLimit", "spin exceeded its cpu limit (1s of CPU time; killed by SIGXCPU)");
    expect_ok(row(&r, "n"));
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 2);
    json_decref(r.rows);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("resource limits", NULL, NULL);
    CU_add_test(s, "exec: 200 MB under a 64M memory limit", test_exec_memory);
    CU_add_test(s, "exec: Python's MemoryError under a memory limit", test_exec_memory_python);
    CU_add_test(s, "exec: spinning under a 1s cpu limit", test_exec_cpu);
    CU_add_test(s, "exec: opening past a files limit", test_exec_files);
    CU_add_test(s, "exec: limits.output caps stdout", test_exec_output);
    CU_add_test(s, "plugin: 200 MB under a 64M memory limit", test_plugin_memory);
    CU_add_test(s, "plugin: spinning under a 1s cpu limit", test_plugin_cpu);
    return tp_test_run();
}
