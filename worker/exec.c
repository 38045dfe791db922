/*
 * The exec adapter: argv (never a shell), the args JSON on stdin, the answer
 * on stdout.
 *
 * The tool is started with posix_spawnp and runs in the worker's process group, so the supervisor's kill of
 * that group at a timeout takes the tool and anything it started with it.
 * stdin, stdout and stderr are pumped with poll(2) so a tool that writes a
 * lot before reading all of its input cannot deadlock against us. stdout is
 * kept up to call->max_output bytes: past that the tool is killed and the
 * attempt ends OutputTooLarge. The tail of stderr is kept for the message
 * of a failed exit.
 *
 * When the tool exits, whatever it left running is killed at once
 * (contain.h): a background process that holds the tool's stdout open
 * would otherwise keep the call waiting for an EOF until its timeout. The
 * tool's exit is seen through a pidfd in the poll set (Linux 5.3 and
 * later; without one, the call waits for the EOF as before, and the
 * sweep after the call kills the rest).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adapter.h"
#include "contain.h"
#include "taxonomy.h"

#define STDERR_KEEP 2048

extern char **environ;

/*
 * The tool's environment: the worker's, less any TOOLPOOL_ call variables
 * it carries, plus this call's. The strings live in vars; envp points into
 * them and into environ. NULL when out of memory.
 */
static char **call_env(const Toolpool__Call *call, char vars[4][320])
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = malloc((n + 5) * sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TOOLPOOL_CALL_ID=", 17) && strncmp(environ[i], "TOOLPOOL_JOB=", 13) &&
            strncmp(environ[i], "TOOLPOOL_STEP=", 14) && strncmp(environ[i], "TOOLPOOL_ATTEMPT=", 17))
            envp[k++] = environ[i];
    snprintf(vars[0], 320, "TOOLPOOL_CALL_ID=%s", call->call_id);
    snprintf(vars[1], 320, "TOOLPOOL_JOB=%s", call->job);
    snprintf(vars[2], 320, "TOOLPOOL_STEP=%llu", (unsigned long long)call->step);
    snprintf(vars[3], 320, "TOOLPOOL_ATTEMPT=%u", call->attempt);
    for (int i = 0; i < 4; i++)
        envp[k++] = vars[i];
    envp[k] = NULL;
    return envp;
}

/*
 * Starts the tool with posix_spawnp (vfork speed; it stays in the worker's
 * process group): fds 0-2 on the pipes, SIGPIPE back to its default (the
 * worker ignores it), the call in its environment. Every other fd the
 * worker holds is close-on-exec. Returns the pid, or -1 with errno.
 */
static pid_t spawn_tool(const Toolpool__Call *call, char **argv, int in_fd, int out_fd, int err_fd)
{
    char vars[4][320];
    char **envp = call_env(call, vars);
    if (envp == NULL) {
        errno = ENOMEM;
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGTERM);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigdefault(&attr, &def);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(envp);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* Keeps the last STDERR_KEEP bytes of what the tool wrote on stderr. */
static void keep_tail(tp_buf_t *b, const char *p, size_t n)
{
    if (n >= STDERR_KEEP) {
        tp_buf_reset(b);
        tp_buf_append(b, p + n - STDERR_KEEP, STDERR_KEEP);
        return;
    }
    if (tp_buf_avail(b) + n > STDERR_KEEP)
        tp_buf_consume(b, tp_buf_avail(b) + n - STDERR_KEEP);
    tp_buf_append(b, p, n);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The stderr tail as one line for a message: trimmed, newlines as "; ". */
static const char *stderr_line(tp_buf_t *err, char *line, size_t cap)
{
    size_t n = tp_buf_avail(err), j = 0;
    const char *p = (const char *)tp_buf_head(err);
    while (n > 0 && p[n - 1] && strchr(" \t\r\n", p[n - 1]))
        n--;
    for (size_t i = 0; i < n && j + 3 < cap; i++) {
        if (p[i] == '\n') {
            line[j++] = ';';
            line[j++] = ' ';
        } else if (p[i] != '\r') {
            line[j++] = p[i];
        }
    }
    line[j] = 0;
    return line;
}

void tp_exec_run(const Toolpool__Call *call, tp_outcome_t *o)
{
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    if (call->n_argv == 0) {
        tp_outcome_fail(o, "ToolError", "exec tool %s has an empty argv", call->tool);
        return;
    }
    char **argv = calloc(call->n_argv + 1, sizeof *argv);
    if (argv == NULL) {
        tp_outcome_fail(o, "ServerError", "out of memory");
        return;
    }
    memcpy(argv, call->argv, call->n_argv * sizeof *argv);
    if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0) {
        tp_outcome_fail(o, "ToolError", "pipe: %s", strerror(errno));
        goto out;
    }
    pid_t pid = spawn_tool(call, argv, in_p[0], out_p[1], err_p[1]);
    if (pid < 0) {
        if (errno == EAGAIN || errno == ENOMEM)
            tp_outcome_fail(o, "ServerError", "cannot start %s: %s", argv[0], strerror(errno));
        else
            tp_outcome_fail(o, "ToolError", "cannot exec %s: %s", argv[0], strerror(errno));
        goto out;
    }
    close_fd(&in_p[0]);
    close_fd(&out_p[1]);
    close_fd(&err_p[1]);
    fcntl(in_p[1], F_SETFL, O_NONBLOCK);
    int exit_fd = -1; /* readable when the tool has exited */
#ifdef SYS_pidfd_open
    exit_fd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif

    tp_buf_t out = {0}, err = {0};
    size_t sent = 0;
    bool too_big = false;
    if (call->args.len == 0)
        close_fd(&in_p[1]);
    while (out_p[0] >= 0 || err_p[0] >= 0) {
        struct pollfd pf[4] = {
            {.fd = out_p[0], .events = POLLIN},
            {.fd = err_p[0], .events = POLLIN},
            {.fd = in_p[1], .events = POLLOUT},
            {.fd = exit_fd, .events = POLLIN},
        };
        if (poll(pf, 4, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[3].revents) {
            /* The tool is gone: what it left must let go of its pipes; what it wrote stays. */
            tp_contain_kill();
            close_fd(&exit_fd);
        }
        if (pf[2].revents) {
            ssize_t w = write(in_p[1], call->args.data + sent, call->args.len - sent);
            if (w > 0)
                sent += (size_t)w;
            if ((w < 0 && errno != EAGAIN) || sent == call->args.len)
                close_fd(&in_p[1]); /* all sent, or the tool stopped reading */
        }
        if (pf[0].revents) {
            ssize_t r = tp_buf_read_fd(&out, out_p[0]);
            if (r <= 0 && !(r < 0 && errno == EAGAIN))
                close_fd(&out_p[0]);
            if (out.len > call->max_output) {
                too_big = true;
                kill(pid, SIGKILL);
                close_fd(&out_p[0]);
                close_fd(&err_p[0]);
            }
        }
        if (pf[1].revents) {
            char chunk[4096];
            ssize_t r = read(err_p[0], chunk, sizeof chunk);
            if (r > 0)
                keep_tail(&err, chunk, (size_t)r);
            else if (!(r < 0 && (errno == EAGAIN || errno == EINTR)))
                close_fd(&err_p[0]);
        }
    }
    close_fd(&in_p[1]);
    close_fd(&exit_fd);

    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char line[1024];
    if (too_big) {
        tp_outcome_fail(o, "OutputTooLarge", "%s wrote more than max_output (%llu bytes) on stdout",
                        call->tool, (unsigned long long)call->max_output);
    } else if (WIFSIGNALED(status)) {
        tp_outcome_fail(o, "WorkerCrashed", "%s killed by signal %d (%s)%s%s", call->tool,
                        WTERMSIG(status), strsignal(WTERMSIG(status)),
                        tp_buf_avail(&err) ? ": " : "", stderr_line(&err, line, sizeof line));
    } else if (WEXITSTATUS(status) != 0) {
        int code = WEXITSTATUS(status);
        tp_outcome_fail(o, tp_kind_name(tp_kind_from_exit(code)), "%s exited with status %d%s%s",
                        call->tool, code, tp_buf_avail(&err) ? ": " : "",
                        stderr_line(&err, line, sizeof line));
    } else {
        tp_outcome_from_text(o, (const char *)out.data, out.len, true);
    }
    tp_buf_free(&out);
    tp_buf_free(&err);
out:
    free(argv);
    close_fd(&in_p[0]);
    close_fd(&in_p[1]);
    close_fd(&out_p[0]);
    close_fd(&out_p[1]);
    close_fd(&err_p[0]);
    close_fd(&err_p[1]);
}
