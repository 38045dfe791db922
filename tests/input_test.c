/*
 * What `toolpool run` is given to read, with the real binary: a directory
 * is refused (exit 2), input epoll cannot watch (/dev/null) is read as a
 * file instead of hanging, and a read that fails ends the run with exit 2,
 * not as if the input had ended.
 */
#include <errno.h>
#include <fcntl.h>
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

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("input", NULL, NULL);
    CU_add_test(s, "directories, /dev/null and unreadable input", test_inputs);
    return tp_test_run();
}
