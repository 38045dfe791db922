/*
 * The worker's side of containment (contain.h): the subreaper, and the
 * sweeps that kill what a tool left behind.
 */
#include "contain.h"

#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proctree.h"

#define SWEEP_WAIT_US 250000u

/*
 * Scratch for the walks: one for the worker's own flow, one for its
 * SIGTERM handler, which may interrupt the other. Untouched (so not
 * resident) until a tool leaves something behind.
 */
static tp_proctree_t tree, handler_tree;

/* Live MCP servers: left alone by the sweeps (contain.h). */
static pid_t spare[TP_CONTAIN_SPARE_MAX];
static size_t n_spare;

int tp_contain_spare(pid_t pid, bool on)
{
    for (size_t i = 0; i < n_spare; i++) {
        if (spare[i] == pid) {
            if (!on)
                spare[i] = spare[--n_spare];
            return 0;
        }
    }
    if (!on)
        return 0;
    if (n_spare == TP_CONTAIN_SPARE_MAX)
        return TP_ENOSPC;
    spare[n_spare++] = pid;
    return 0;
}

int tp_contain_init(void)
{
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 ? tp_errno(errno) : 0;
}

/* Whether this process has any child, live or a zombie: one system call. */
static bool has_children(void)
{
    siginfo_t si;
    si.si_pid = 0;
    return !(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD);
}

static void reap_any(void)
{
    for (;;) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r > 0 || (r < 0 && errno == EINTR))
            continue;
        return;
    }
}

/*
 * Reaps what has exited, never a spared process: its session reaps it and
 * reads how it ended. waitpid(-1) would take it.
 */
static void reap_all(void)
{
    if (n_spare == 0) {
        reap_any();
        return;
    }
    for (;;) {
        siginfo_t si;
        si.si_pid = 0;
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            return;
        bool mine = false;
        for (size_t i = 0; i < n_spare && !mine; i++)
            mine = spare[i] == si.si_pid;
        if (mine)
            return; /* a server that exited: left for its session (others wait for the next sweep) */
        waitpid(si.si_pid, NULL, WNOHANG);
    }
}

/*
 * Kill, reap, and look again until no descendant is alive: a process
 * killed is alive for a moment more, and those it leaves reparent to us.
 * One that will not die (in uninterruptible sleep, or another user's, so
 * the kill was refused) is left after SWEEP_WAIT_US and logged: the call
 * has ended and must answer.
 */
void tp_contain_sweep(void)
{
    if (!has_children())
        return;
    pid_t self = getpid();
    uint64_t until = tp_now_us() + SWEEP_WAIT_US;
    for (;;) {
        int live = tp_proctree_kill_but(&tree, self, spare, n_spare);
        reap_all();
        if (live < 0) {
            tp_log_error("worker.proc_unreadable", "cannot read /proc to kill what a tool left running: %s",
                         strerror(-live));
            return;
        }
        if (live == 0)
            return;
        if (tp_now_us() >= until) {
            tp_log_warn("worker.leftovers_alive", "%d process(es) a tool left would not die within %u ms", live,
                        SWEEP_WAIT_US / 1000);
            return;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

void tp_contain_kill(void)
{
    if (has_children())
        tp_proctree_kill_but(&tree, getpid(), spare, n_spare);
}

void tp_contain_kill_in_handler(void)
{
    int saved = errno;
    tp_proctree_kill(&handler_tree, getpid());
    errno = saved;
}
