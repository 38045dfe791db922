/*
 * What `toolpool run` is given to read, with the real binary: a directory
 * is refused (exit 2), input epoll cannot watch (/dev/null) is read as a
 * file instead of hanging, and a read that fails ends the run with exit 2,
 * not as if the input had ended.
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

#include "runutil.h"
#include "testutil.h"

extern char **environ;

static char dir[1024];

/* Waits up to secs for pid; its exit status, or -1 after killing it for hanging. */
static int wait_for(pid_t pid, int secs)
{
    for (int i = 0; i < secs * 100; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    wait_exit(pid);
    return -1;
}

/* toolpool run on input (a path, or "-" with stdin opened from stdin_path with stdin_flags). */
static pid_t start(const char *input, const char *stdin_path, int stdin_flags)
{
    char reg[1100], store[1100], err[1100];
    snprintf(reg, sizeof reg, "%s/tools.json", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    char *argv[] = {TP_TEST_BIN "/toolpool", "run", "-q", "-j", "1", "--store", store, "-r", reg, (char *)input, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (stdin_path)
        posix_spawn_file_actions_addopen(&fa, 0, stdin_path, stdin_flags, 0644);
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

static char *stderr_text(void)
{
    char err[1100];
    snprintf(err, sizeof err, "%s/err.txt", dir);
    char *t = tp_test_slurp(err, NULL);
    return t ? t : strdup("");
}

static void test_inputs(void)
{
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("input"));
    char *reg = expand("{\"tools\": [" PLUGIN_TOOL("noop") "]}");
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);

    /* A directory, named or as standard input: refused. */
    CU_ASSERT_EQUAL(wait_for(start(dir, NULL, 0), 20), 2);
    char *msg = stderr_text();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "is a directory"));
    free(msg);
    CU_ASSERT_EQUAL(wait_for(start("-", dir, O_RDONLY | O_DIRECTORY), 20), 2);
    msg = stderr_text();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "standard input is a directory"));
    free(msg);

    /* /dev/null, which epoll refuses: an empty input, at once. */
    CU_ASSERT_EQUAL(wait_for(start("/dev/null", NULL, 0), 20), 0);
    CU_ASSERT_EQUAL(wait_for(start("-", "/dev/null", O_RDONLY), 20), 0);
    msg = stderr_text();
    CU_ASSERT_PTR_NULL(strstr(msg, "Epoll"));
    free(msg);

    /* A standard input that cannot be read (opened for writing): exit 2, saying why. */
    char wo[1100];
    snprintf(wo, sizeof wo, "%s/write-only", dir);
    CU_ASSERT_EQUAL(wait_for(start("-", wo, O_WRONLY | O_CREAT), 20), 2);
    msg = stderr_text();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "reading standard input"));
    free(msg);
}

/* Lines that are calls in form only: each is refused on its own, saying why, and trace reads the results. */
static void test_bad_lines(void)
{
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("input-lines"));
    char *reg = expand("{\"tools\": [" PLUGIN_TOOL("noop") "," PLUGIN_TOOL("echo") "]}");
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);
    free(tp_test_write(dir, "calls.jsonl",
                       "{\"id\": \"neg\", \"tool\": \"noop\", \"step\": -1}\n"
                       "{\"id\": \"real\", \"tool\": \"noop\", \"step\": 1.5}\n"
                       "{\"id\": \"dup\", \"tool\": \"noop\", \"tool\": \"echo\"}\n"
                       "{\"id\": \"big\", \"tool\": \"echo\", \"args\": {\"n\": 123456789012345678901234567890}}\n"
                       "{\"id\": \"nested\", \"tool\": \"echo\", \"args\": {\"a\": 1, \"a\": 2}}\n"));
    char calls[1100], out[1100], err[1100], store[1100], reg_path[1100];
    snprintf(calls, sizeof calls, "%s/calls.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(reg_path, sizeof reg_path, "%s/tools.json", dir);
    char *args[] = {"run", "-q", "--store", store, "-r", reg_path, "-o", out, calls, NULL};
    CU_ASSERT_EQUAL(wait_exit(spawn_toolpool(args, err, NULL)), 1);
    int lines;
    json_t *rows = load_results(out, &lines);
    CU_ASSERT_EQUAL(lines, 5);
    json_t *neg = json_object_get(rows, "neg"), *real = json_object_get(rows, "real");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(neg, "error")), "InvalidRequest");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(neg, "step")), 0); /* not 18446744073709551615 */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(real, "error")), "InvalidRequest");
    /* Nested in the args, the last one counts, as before. */
    json_t *nested = json_object_get(rows, "nested");
    CU_ASSERT_TRUE(json_is_true(json_object_get(nested, "ok")));
    json_decref(rows);
    /*
     * The duplicated key: refused, naming it (no id is trusted from an
     * ambiguous call); the integer beyond 64 bits: said as such, not "not
     * valid JSON".
     */
    char *text = tp_test_slurp(out, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "line 3: a key is given twice (duplicate object key near '\\\"tool\\\"')"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "a number toolpool cannot represent exactly"));
    CU_ASSERT_PTR_NULL(strstr(text, "not valid JSON"));
    free(text);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%s/toolpool trace %s > /dev/null", TP_TEST_BIN, out);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("input", NULL, NULL);
    CU_add_test(s, "directories, /dev/null and unreadable input", test_inputs);
    CU_add_test(s, "bad steps, repeated keys, integers beyond 64 bits", test_bad_lines);
    return tp_test_run();
}
