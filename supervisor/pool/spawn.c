/*
 * A worker started in a slot: its two pipes, posix_spawn with the settings
 * a worker needs, and its descriptors closed again once it is gone; and
 * the worker program found. Called from the pool's start (pool.c) and the
 * slot's timer at a respawn (reap.c).
 */
#include "pool_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

extern char **environ;

/* A pipe whose ends are CLOEXEC and above fd 4, so dup2 to 3 and 4 always copies. */
static int pipe_high(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        if (p[i] > TP_START_FD)
            continue;
        int hi = fcntl(p[i], F_DUPFD_CLOEXEC, TP_START_FD + 1);
        if (hi < 0)
            return -1;
        close(p[i]);
        p[i] = hi;
    }
    return 0;
}

/*
 * Starts a worker in slot s: posix_spawn (vfork speed) with its own process
 * group, default signal dispositions, an empty mask, /dev/null on stdin and
 * stdout, the two pipes on fds 3 and 4, the start board on 5, and every other fd closed.
 *
 * Each of those settings is asked for by a call that can fail (ENOMEM). A
 * worker started without one (every fd closed, a group of its own) must not
 * start at all: a failed setting is a failed spawn, logged each time with
 * what failed, as nginx logs a failed fork, and throttled as a crash at
 * start-up is. The reply pipe's event is set up before the spawn, so that
 * nothing that fails after it has to take a worker back.
 */
void slot_spawn(tp_slot_t *s)
{
    tp_pool_t *p = s->pool;
    int call_p[2] = {-1, -1}, reply_p[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_made = false, attr_made = false;
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    const char *what = "pipe2";
    int rc = 0;
    tp_slot_sessions_clear(s); /* a new worker holds no MCP session yet */

    if (pipe_high(call_p) < 0 || pipe_high(reply_p) < 0) {
        rc = errno;
        goto fail;
    }
    what = "event_new";
    s->ev_read = event_new(p->base, reply_p[0], EV_READ | EV_PERSIST, slot_read_cb, s);
    s->ev_write = event_new(p->base, call_p[1], EV_WRITE | EV_PERSIST, slot_write_cb, s);
    if (s->ev_read == NULL || s->ev_write == NULL) {
        rc = ENOMEM;
        goto fail;
    }
    what = "event_add";
    errno = 0;
    if (event_add(s->ev_read, NULL) < 0) {
        rc = errno ? errno : ENOMEM;
        goto fail;
    }
#define SPAWN_STEP(fn, ...)                                                                                            \
    do {                                                                                                               \
        what = #fn;                                                                                                    \
        if ((rc = fn(__VA_ARGS__)) != 0)                                                                               \
            goto fail;                                                                                                 \
    } while (0)
    SPAWN_STEP(posix_spawn_file_actions_init, &fa);
    fa_made = true;
    SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, call_p[0], 3);
    SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, reply_p[1], 4);
    SPAWN_STEP(posix_spawn_file_actions_addopen, &fa, 0, "/dev/null", O_RDONLY, 0);
    SPAWN_STEP(posix_spawn_file_actions_addopen, &fa, 1, "/dev/null", O_WRONLY, 0);
    if (p->starts_fd >= 0)
        SPAWN_STEP(posix_spawn_file_actions_adddup2, &fa, p->starts_fd, TP_START_FD);
    SPAWN_STEP(posix_spawn_file_actions_addclosefrom_np, &fa, p->starts_fd >= 0 ? TP_START_FD + 1 : TP_START_FD);
    SPAWN_STEP(posix_spawnattr_init, &attr);
    attr_made = true;
    SPAWN_STEP(posix_spawnattr_setflags, &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    SPAWN_STEP(posix_spawnattr_setpgroup, &attr, 0);
    SPAWN_STEP(posix_spawnattr_setsigdefault, &attr, &all);
    SPAWN_STEP(posix_spawnattr_setsigmask, &attr, &none);
    char slot_arg[16];
    snprintf(slot_arg, sizeof slot_arg, "%d", s->index);
    char *argv[8] = {(char *)p->o.worker_path, "--max-frame", p->max_frame_arg};
    int argc = 3;
    if (p->starts_fd >= 0) { /* no board: no line to name */
        argv[argc++] = "--slot";
        argv[argc++] = slot_arg;
    }
    if (p->o.http) {
        argv[argc++] = "--http";
        argv[argc++] = "1";
    }
    argv[argc] = NULL;
    pid_t pid;
    SPAWN_STEP(posix_spawn, &pid, p->o.worker_path, &fa, &attr, argv, environ);
#undef SPAWN_STEP
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(call_p[0]);
    close(reply_p[1]);
    s->pid = pid;
    tp_deadline_watch(p->deadline, s->index, pid, reply_p[0]);
    s->call_fd = call_p[1];
    s->call_pipe = 0;
    s->reply_fd = reply_p[0];
    fcntl(s->call_fd, F_SETFL, O_NONBLOCK);
    fcntl(s->reply_fd, F_SETFL, O_NONBLOCK);
    s->state = SLOT_STARTING;
    s->why = WHY_NONE;
    s->retiring = false;
    s->call_cap = p->o.recycle_after;
    s->said_hello = false;
    s->eof = false;
    s->detail[0] = 0;
    p->live++;
    p->stats.spawned++;
    slot_timer_arm(s, p->o.hello_timeout_us);
    return;
fail:
    tp_log_error("pool.spawn_failed", "%s failed while starting worker slot %d (%s): %s", what, s->index,
                 p->o.worker_path, strerror(rc));
    if (fa_made)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_made)
        posix_spawnattr_destroy(&attr);
    if (s->ev_read)
        event_free(s->ev_read);
    if (s->ev_write)
        event_free(s->ev_write);
    s->ev_read = s->ev_write = NULL;
    for (int i = 0; i < 2; i++) {
        if (call_p[i] >= 0)
            close(call_p[i]);
        if (reply_p[i] >= 0)
            close(reply_p[i]);
    }
    /* Out of processes, fds or memory: the same throttle as a crash at start-up. */
    s->start_failures++;
    snprintf(s->detail, sizeof s->detail, "%s: %s", what, strerror(rc));
    if (s->start_failures >= TP_POOL_START_FAILURES_MAX) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot start worker %s: %s: %s", p->o.worker_path, what, strerror(rc));
        pool_fatal(p, tp_errno(rc), msg);
        return;
    }
    slot_timer_arm(s, 100000u * s->start_failures);
}

/*
 * Closes a slot's pipes and frees their events, with whatever is still
 * buffered either way: once its worker has been reaped (reap.c), and in
 * tp_pool_free (pool.c).
 */
void slot_close_fds(tp_slot_t *s)
{
    if (s->ev_read)
        event_free(s->ev_read);
    if (s->ev_write)
        event_free(s->ev_write);
    s->ev_read = s->ev_write = NULL;
    if (s->call_fd >= 0)
        close(s->call_fd);
    if (s->reply_fd >= 0)
        close(s->reply_fd);
    s->call_fd = s->reply_fd = -1;
    tp_buf_reset(&s->in);
    tp_buf_reset(&s->out);
    s->unflushed = false;
}

const char *tp_pool_default_worker(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("TOOLPOOL_WORKER");
    if (env && *env)
        return env;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0)
        return "toolpool-worker";
    path[n] = 0;
    char *slash = strrchr(path, '/');
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "toolpool-worker");
    return path;
}
