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

int tp_contain_init(void)
{
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

/* Whether this process has any child, live or a zombie: one system call. */
static bool has_children(void)
{
    siginfo_t si;
    si.si_pid = 0;
    return !(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD);
}

static void reap_all(void)
{
    for (;;) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r > 0 || (r < 0 && errno == EINTR))
            continue;
        return;
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
        int live = tp_proctree_kill(&tree, self);
        reap_all();
        if (live < 0) {
            tp_log_error("cannot read /proc to kill what a tool left running: %s", strerror(errno));
            return;
        }
        if (live == 0)
            return;
        if (tp_now_us() >= until) {
            tp_log_warn("%d process(es) a tool left would not die within %u ms", live, SWEEP_WAIT_US / 1000);
            return;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

void tp_contain_kill(void)
{
    if (has_children())
        tp_proctree_kill(&tree, getpid());
}

void tp_contain_kill_in_handler(void)
{
    int saved = errno;
    tp_proctree_kill(&handler_tree, getpid());
    errno = saved;
}
