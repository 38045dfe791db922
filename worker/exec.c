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
 * would otherwise keep the call waiting for an EOF until its timeout; the
 * kill repeats while a pipe stays open, for one a pass missed. The
 * tool's exit is seen through a pidfd in the poll set (Linux 5.3 and
 * later; without one, the call waits for the EOF as before, and the
 * sweep after the call kills the rest).
 *
 * A tool with resource limits (rlimit.h) is started with fork, setrlimit
 * and execve instead (spawn_limited says why), and its end is read against
 * them (limit_hit): OutOfMemory or ResourceLimit, naming the limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adapter.h"
#include "clock.h"
#include "contain.h"
#include "log.h"
#include "rlimit.h"
#include "taxonomy.h"

#define STDERR_KEEP 2048

/* The longest wait between kills of what an exited tool left holding its pipes. */
#define REKILL_MAX_MS 200

extern char **environ;

/*
 * The tool's environment: the worker's, less any TOOLPOOL_ call variables
 * it carries, plus this call's. The strings live in vars; envp points into
 * them and into environ. NULL when out of memory.
 */
static char **call_env(const Toolpool__Call *call, char vars[5][320])
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = malloc((n + 6) * sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TOOLPOOL_CALL_ID=", 17) && strncmp(environ[i], "TOOLPOOL_JOB=", 13) &&
            strncmp(environ[i], "TOOLPOOL_STEP=", 14) && strncmp(environ[i], "TOOLPOOL_ATTEMPT=", 17) &&
            !(*call->traceparent && strncmp(environ[i], "TRACEPARENT=", 12) == 0))
            envp[k++] = environ[i];
    snprintf(vars[0], 320, "TOOLPOOL_CALL_ID=%s", call->call_id);
    snprintf(vars[1], 320, "TOOLPOOL_JOB=%s", call->job);
    snprintf(vars[2], 320, "TOOLPOOL_STEP=%llu", (unsigned long long)call->step);
    snprintf(vars[3], 320, "TOOLPOOL_ATTEMPT=%u", call->attempt);
    for (int i = 0; i < 4; i++)
        envp[k++] = vars[i];
    /* A traced attempt: its span, the parent of whatever the tool traces (the OTel TRACEPARENT convention). */
    if (*call->traceparent && snprintf(vars[4], 320, "TRACEPARENT=%s", call->traceparent) < 320)
        envp[k++] = vars[4];
    envp[k] = NULL;
    return envp;
}

/*
 * name as posix_spawnp finds it: as given when it holds a '/', else the
 * first executable file of that name in a directory of $PATH. 0, or
 * TP_ENOENT, or TP_EACCES when one was found but not executable.
 */
static int find_program(const char *name, char *buf, size_t cap)
{
    if (strchr(name, '/') != NULL) {
        snprintf(buf, cap, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    int err = ENOENT;
    for (const char *p = path;;) {
        const char *end = strchrnul(p, ':');
        size_t n = (size_t)(end - p);
        snprintf(buf, cap, "%.*s%s%s", (int)n, p, n ? "/" : "", name);
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(buf, X_OK) == 0)
                return 0;
            err = EACCES;
        }
        if (*end == '\0')
            break;
        p = end + 1;
    }
    return tp_errno(err);
}

/*
 * Starts the tool under its resource limits: fork, then in the child what
 * posix_spawn would do (fds 0-2 on the pipes, SIGPIPE and SIGTERM back to
 * their defaults), setrlimit, execve. posix_spawn has no attribute for
 * resource limits, and the other ways are worse. prlimit(2) on the pid
 * posix_spawn returns comes too late: posix_spawn returns once the child
 * has exec'd, so the tool may already have allocated past its limit, or
 * opened past it, before the limit lands. Lowering the worker's own limits
 * around the spawn binds the worker itself meanwhile (its CPU time so far
 * counts against RLIMIT_CPU), and a hard limit an unprivileged worker has
 * lowered can never be raised again, so the tool could only get soft
 * limits, which it may raise. In the child the limits are its own, hard
 * ones included. fork costs about 0.1 ms more than posix_spawn's vfork for
 * a worker of a few MB, and only tools with limits pay it. The child calls
 * only async-signal-safe functions (a plugin may have left threads), so
 * the program is found on PATH before the fork, and an exec failure comes
 * back through a close-on-exec pipe (*in_child set: the limits may be why).
 * The pid, or the -errno of what failed.
 */
static pid_t spawn_limited(char **argv, char **envp, const char *cwd, int in_fd, int out_fd, int err_fd,
                           const tp_rlimit_t *lim, bool *in_child)
{
    char path[4096];
    int ep[2];
    int rc = find_program(argv[0], path, sizeof path);
    if (rc < 0)
        return rc;
    if (pipe2(ep, O_CLOEXEC) < 0)
        return tp_errno(errno);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* no handler of the worker's may run in the child */
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGPIPE, &dfl, NULL);
        sigaction(SIGTERM, &dfl, NULL);
        sigaction(SIGXCPU, &dfl, NULL);
        if (dup2(in_fd, 0) >= 0 && dup2(out_fd, 1) >= 0 && dup2(err_fd, 2) >= 0 && (cwd == NULL || chdir(cwd) == 0) &&
            tp_rlimit_apply(lim) == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            execve(path, argv, envp);
        }
        int e = errno;
        ssize_t w = write(ep[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (pid < 0) {
        close(ep[0]);
        return tp_errno(fork_errno);
    }
    int child_errno = 0;
    ssize_t r;
    do {
        r = read(ep[0], &child_errno, sizeof child_errno);
    } while (r < 0 && errno == EINTR);
    close(ep[0]);
    if (r == (ssize_t)sizeof child_errno) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        *in_child = true;
        return tp_errno(child_errno);
    }
    return pid;
}

/*
 * Starts the tool, in the worker's process group: fds 0-2 on the pipes,
 * SIGPIPE back to its default (the worker ignores it), the call in its
 * environment. Every other fd the worker holds is close-on-exec. Without
 * limits, with posix_spawnp (vfork speed); with them, spawn_limited.
 * Returns the pid, or the -errno of the step *what names (*in_child: the
 * child failed to start the program).
 */
static pid_t spawn_tool(const Toolpool__Call *call, char **argv, int in_fd, int out_fd, int err_fd,
                        const tp_rlimit_t *lim, bool *in_child, const char **what)
{
    char vars[5][320];
    char **envp = call_env(call, vars);
    if (envp == NULL) {
        *what = "malloc";
        return TP_ENOMEM;
    }
    if (tp_rlimit_any(lim)) {
        *what = "posix_spawnp"; /* the tool's own start, as far as the caller can tell */
        pid_t pid = spawn_limited(argv, envp, call->cwd && call->cwd[0] ? call->cwd : NULL, in_fd, out_fd, err_fd, lim,
                                  in_child);
        free(envp);
        return pid;
    }
    /*
     * Each setting is asked for by a call that can fail (ENOMEM): a tool
     * started without one (its stdin not the args pipe, SIGPIPE ignored)
     * must not start at all, so a failed setting is a failed start, logged
     * with the tool and the call, as nginx logs a failed fork.
     */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_made = false, attr_made = false;
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGTERM);
    pid_t pid = -1;
    int rc;
#define SPAWN_STEP(fn, ...)                                                                                            \
    do {                                                                                                               \
        *what = #fn;                                                                                                   \
        if ((rc = fn(__VA_ARGS__)) != 0)                                                                               \
            goto out;                                                                                                  \
    } while (0)
    SPAWN_STEP(posix_spawn_file_actions_init, &fa);
    fa_made = true;
    SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, in_fd, 0);
    SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, out_fd, 1);
    SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, err_fd, 2);
    if (call->cwd && call->cwd[0]) /* the registry's folder, or the tool's cwd (glibc 2.29) */
        SPAWN_STEP(posix_spawn_file_actions_addchdir_np, &fa, call->cwd);
    SPAWN_STEP(posix_spawnattr_init, &attr);
    attr_made = true;
    SPAWN_STEP(posix_spawnattr_setflags, &attr, POSIX_SPAWN_SETSIGDEF);
    SPAWN_STEP(posix_spawnattr_setsigdefault, &attr, &def);
    SPAWN_STEP(posix_spawnp, &pid, argv[0], &fa, &attr, argv, envp);
#undef SPAWN_STEP
out:
    if (fa_made)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_made)
        posix_spawnattr_destroy(&attr);
    free(envp);
    return rc != 0 ? tp_errno(rc) : pid;
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

/*
 * Whether the tool ran into one of its limits; if so, o says which, its
 * message naming the limit:
 *   cpu     killed by SIGXCPU (the soft limit), or by SIGKILL with its CPU
 *           time at the limit (the hard one, a second on): ResourceLimit;
 *   memory  failed (a non-zero exit or a signal) with stderr naming a failed
 *           allocation (tp_rlimit_says_oom): OutOfMemory;
 *   files   failed with stderr naming EMFILE: ResourceLimit.
 * A tool that dies of SIGSEGV, or exits without a word, after an
 * allocation failed is not recognized: it stays WorkerCrashed or ToolError.
 */
static bool limit_hit(const Toolpool__Call *call, const tp_rlimit_t *lim, int status, const struct rusage *ru,
                      tp_buf_t *err, tp_outcome_t *o)
{
    char line[1024], size[32];
    bool sig = WIFSIGNALED(status), failed = sig || WEXITSTATUS(status) != 0;
    const char *text = (const char *)tp_buf_head(err);
    size_t n = tp_buf_avail(err);
    double cpu = (double)ru->ru_utime.tv_sec + (double)ru->ru_stime.tv_sec +
                 (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e6;
    int signo = sig ? WTERMSIG(status) : 0;
    if (lim->cpu && (signo == SIGXCPU || (signo == SIGKILL && cpu >= lim->cpu))) {
        tp_outcome_fail(o, "ResourceLimit", "%s exceeded its cpu limit (%us of CPU time; killed by %s)", call->tool,
                        lim->cpu, signo == SIGXCPU ? "SIGXCPU" : "SIGKILL");
        return true;
    }
    if (lim->memory && failed && tp_rlimit_says_oom(text, n)) {
        tp_outcome_fail(o, "OutOfMemory", "%s ran out of memory under its memory limit (%s): %s", call->tool,
                        tp_rlimit_size(size, sizeof size, lim->memory), stderr_line(err, line, sizeof line));
        return true;
    }
    if (lim->files && failed && tp_rlimit_says_emfile(text, n)) {
        tp_outcome_fail(o, "ResourceLimit", "%s ran out of descriptors under its files limit (%u): %s", call->tool,
                        lim->files, stderr_line(err, line, sizeof line));
        return true;
    }
    return false;
}

tp_start_line_t *tp_exec_start_line;

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
    /*
     * Large args cross in one write, and the answer in few reads (a tool
     * that reads large args tends to answer at length): each 64 KiB
     * hand-over would wake the other side.
     */
    size_t in_asked = 0, out_asked = 0;
    tp_pipe_fit(in_p[1], call->args.len, &in_asked);
    tp_pipe_fit(out_p[0], call->args.len < call->max_output ? call->args.len : call->max_output, &out_asked);
    tp_rlimit_t lim = tp_rlimit_of(call);
    bool in_child = false;
    char size[32];
    const char *what = "posix_spawnp";
    pid_t pid = spawn_tool(call, argv, in_p[0], out_p[1], err_p[1], &lim, &in_child, &what);
    if (pid < 0) {
        int err = (int)-pid;
        if (strcmp(what, "posix_spawnp") != 0) {
            /* Not the tool's doing: the worker could not set its start up. Transient. */
            tp_log_call_t lc = {call->call_id, call->job, call->tool, call->attempt};
            tp_log_call_error("worker.tool_start_failed", &lc,
                              "%s failed while starting tool %s (call %s, attempt %u): %s", what, call->tool,
                              call->call_id, call->attempt, strerror(err));
            tp_outcome_fail(o, "ServerError", "cannot start %s: %s: %s", argv[0], what, strerror(err));
        } else if (in_child && err == ENOMEM && lim.memory) {
            tp_outcome_fail(o, "OutOfMemory", "cannot start %s under its memory limit (%s): %s", argv[0],
                            tp_rlimit_size(size, sizeof size, lim.memory), strerror(err));
        } else if (err == EAGAIN || err == ENOMEM) {
            tp_outcome_fail(o, "ServerError", "cannot start %s: %s", argv[0], strerror(err));
        } else {
            tp_outcome_fail(o, "ToolError", "cannot exec %s: %s", argv[0], strerror(err));
        }
        goto out;
    }
    /*
     * posix_spawnp and spawn_limited return once the child has exec'd: the
     * tool runs from here, and its timeout counts from here (the board).
     */
    o->started_us = tp_now_us();
    if (tp_exec_start_line != NULL)
        tp_start_mark(tp_exec_start_line, call->seq, o->started_us);
    tp_close_fd(&in_p[0]);
    tp_close_fd(&out_p[1]);
    tp_close_fd(&err_p[1]);
    fcntl(in_p[1], F_SETFL, O_NONBLOCK);
    int exit_fd = -1; /* readable when the tool has exited */
#ifdef SYS_pidfd_open
    exit_fd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif

    tp_buf_t out = {0}, err = {0};
    size_t sent = 0;
    bool too_big = false;
    int status = 0;
    struct rusage ru = {0};
    bool reaped = false;
    /*
     * Once the tool is gone, how long to wait for its pipes' EOF before
     * killing again (-1: it runs): a kill pass can miss a process its
     * parent hands to us as the parent dies (/proc's children lists are
     * read unlocked), so the kill repeats, each wait twice the last,
     * while a pipe stays open.
     */
    int rekill_ms = -1;
    if (call->args.len == 0)
        tp_close_fd(&in_p[1]);
    while (out_p[0] >= 0 || err_p[0] >= 0) {
        struct pollfd pf[4] = {
            {.fd = out_p[0], .events = POLLIN},
            {.fd = err_p[0], .events = POLLIN},
            {.fd = in_p[1], .events = POLLOUT},
            {.fd = exit_fd, .events = POLLIN},
        };
        int n = poll(pf, 4, rekill_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (n == 0) {
            tp_contain_kill();
            rekill_ms = rekill_ms < REKILL_MAX_MS / 2 ? rekill_ms * 2 : REKILL_MAX_MS;
            continue;
        }
        if (pf[3].revents) {
            /*
             * The tool is gone: what it left must let go of its pipes; what
             * it wrote stays. Reaped first, so that a tool that left nothing
             * costs no look through /proc (the kill looks only when the
             * worker has a child: a process the tool left, reparented here).
             */
            pid_t r = 0;
            while (!reaped && (r = wait4(pid, &status, WNOHANG, &ru)) < 0 && errno == EINTR)
                ;
            reaped = reaped || r == pid;
            tp_contain_kill();
            tp_close_fd(&exit_fd);
            rekill_ms = 1;
        }
        if (pf[2].revents) {
            ssize_t w = write(in_p[1], call->args.data + sent, call->args.len - sent);
            if (w > 0)
                sent += (size_t)w;
            if ((w < 0 && errno != EAGAIN) || sent == call->args.len)
                tp_close_fd(&in_p[1]); /* all sent, or the tool stopped reading */
        }
        if (pf[0].revents) {
            ssize_t r = tp_buf_read_fd(&out, out_p[0]);
            if (r <= 0 && r != TP_EAGAIN)
                tp_close_fd(&out_p[0]);
            if (out.len > call->max_output) {
                too_big = true;
                kill(pid, SIGKILL);
                tp_close_fd(&out_p[0]);
                tp_close_fd(&err_p[0]);
            }
        }
        if (pf[1].revents) {
            char chunk[4096];
            ssize_t r = read(err_p[0], chunk, sizeof chunk);
            if (r > 0)
                keep_tail(&err, chunk, (size_t)r);
            else if (!(r < 0 && (errno == EAGAIN || errno == EINTR)))
                tp_close_fd(&err_p[0]);
        }
    }
    tp_close_fd(&in_p[1]);
    tp_close_fd(&exit_fd);

    while (!reaped && wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    char line[1024];
    if (too_big) {
        tp_outcome_fail(o, "OutputTooLarge", "%s wrote more than max_output (%llu bytes) on stdout", call->tool,
                        (unsigned long long)call->max_output);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
               tp_outcome_error_from_text(o, (const char *)out.data, out.len)) {
        /*
         * The tool said what failed, in the error convention: its word
         * beats what its exit status would say (a script's `exit 1` after
         * printing {"error": "RateLimited"}, a shell's set -e).
         */
    } else if (limit_hit(call, &lim, status, &ru, &err, o)) {
        /* o names the limit */
    } else if (WIFSIGNALED(status)) {
        tp_outcome_fail(o, "WorkerCrashed", "%s killed by signal %d (%s)%s%s", call->tool, WTERMSIG(status),
                        strsignal(WTERMSIG(status)), tp_buf_avail(&err) ? ": " : "",
                        stderr_line(&err, line, sizeof line));
    } else if (WEXITSTATUS(status) != 0) {
        int code = WEXITSTATUS(status);
        tp_outcome_fail(o, tp_kind_name(tp_kind_from_exit(code)), "%s exited with status %d%s%s", call->tool, code,
                        tp_buf_avail(&err) ? ": " : "", stderr_line(&err, line, sizeof line));
    } else {
        tp_outcome_from_text(o, (const char *)out.data, out.len, true);
    }
    tp_buf_free(&out);
    tp_buf_free(&err);
out:
    free(argv);
    tp_close_pipe(in_p);
    tp_close_pipe(out_p);
    tp_close_pipe(err_p);
}
