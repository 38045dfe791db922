/*
 * A worker's end: asked to go (EOF or a signal), killed with everything it
 * started, its attempt timed out at its deadline (by the slot's timer, or
 * by the deadline thread's kill, deadline.c), reaped on SIGCHLD, and the
 * slot respawned, at once after a deliberate stop, throttled after a
 * crash. The attempt a worker held ends here whenever no Reply ended it,
 * and the attempts queued behind it are handed back unstarted.
 */
#include "pool_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proctree.h"

/* The longest wait before a crashing slot respawns (the waits double from 10 ms). */
#define CRASH_DELAY_MAX_US 1000000u
/* A worker told to go by EOF that is still there this long after is killed. */
#define EOF_GRACE_US 5000000u
/*
 * When the deadline thread keeps an attempt's deadline, the loop's own
 * timer for it is only a fallback (for a kill the thread could not send),
 * this long after the deadline.
 */
#define DEADLINE_FALLBACK_US 5000u
/*
 * A respawn blocks the loop for about a millisecond (posix_spawn returns
 * once the child has exec'd). One due this close to a deadline the loop
 * keeps waits until that deadline has been kept, for at most
 * SPAWN_HOLD_MAX_US in all.
 */
#define SPAWN_QUIET_US 2000u
#define SPAWN_HOLD_MAX_US 10000u

/*
 * Kills worker s and everything it started, the processes that left its
 * group (setsid, a double-forked daemon) included: the group is stopped
 * first, so none of it runs or forks on; every descendant of the worker is
 * killed (common/proc/proctree.h: the worker is alive, stopped, so its orphans
 * are still reparented to it, and unreaped, since the loop reaps); then
 * the group. Returns the group kill's result. About 1-2 ms with 150
 * processes on the machine, the walk of /proc.
 */
int slot_kill(tp_slot_t *s)
{
    if (kill(-s->pid, SIGSTOP) == 0 && tp_proctree_kill(s->pool->tree, s->pid) < 0)
        tp_log_error("pool.proc_unreadable", "cannot read /proc to kill what worker %d started outside its group: %s",
                     (int)s->pid, strerror(errno));
    return kill(-s->pid, SIGKILL);
}

/*
 * Asks a worker to go: sig 0 closes its call pipe (it exits at EOF),
 * otherwise the signal goes to its whole process group. After EOF or a
 * TERM the slot is STOPPING, and its timer sends the KILL (after
 * EOF_GRACE_US, or the attempt's tool's kill_grace); after a KILL it is
 * DYING. Returns kill's result (0 with sig 0).
 */
int slot_stop(tp_slot_t *s, stop_why_t why, int sig)
{
    tp_pool_t *p = s->pool;
    if (s->state == SLOT_IDLE)
        p->idle--;
    if (s->why == WHY_NONE)
        s->why = why;
    s->state = sig == 0 || sig == SIGTERM ? SLOT_STOPPING : SLOT_DYING;
    slot_timer_stop(s);
    if (sig == 0) {
        if (s->unflushed)
            slot_flush_now(s); /* the Calls it holds come before its EOF */
        if (s->ev_write)
            event_del(s->ev_write);
        if (s->call_fd >= 0)
            close(s->call_fd);
        s->call_fd = -1;
        /* One that does not leave at EOF (stuck before its Hello, say) is killed. */
        slot_timer_arm(s, EOF_GRACE_US);
        return 0;
    }
    /*
     * An mcp tool's TERM goes to the worker alone: the worker tells its
     * server the request is cancelled (notifications/cancelled), which is
     * the polite stop MCP has, and the server has the grace to wind down
     * before the KILL takes the whole group. A TERM to the group would end
     * most servers before they could read the cancellation.
     */
    bool worker_only = sig == SIGTERM && s->attempt && s->attempt->tool->adapter == TP_ADAPTER_MCP;
    int rc = sig == SIGKILL ? slot_kill(s) : kill(worker_only ? s->pid : -s->pid, sig);
    if (sig == SIGTERM)
        slot_timer_arm(s, s->attempt ? s->attempt->tool->policy.kill_grace_us : 0);
    return rc;
}

/* The attempts queued on a slot whose running attempt ended without a Reply. */
typedef struct {
    int n;
    tp_attempt_t *a[TP_POOL_PIPE_MAX];
} queued_t;

/* Takes the queue off s, before any callback can look at the pool. */
static void slot_take_queue(tp_slot_t *s, queued_t *q)
{
    q->n = s->queued;
    memcpy(q->a, s->queue, (size_t)q->n * sizeof q->a[0]);
    s->queued = 0;
    s->pool->busy -= q->n;
}

/* They never started: they go back, to run again uncounted. */
static void pool_hand_back(tp_pool_t *p, queued_t *q)
{
    p->stats.requeued += (uint64_t)q->n;
    uint64_t now = tp_now_us();
    for (int i = 0; i < q->n; i++) {
        q->a[i]->requeue = true;
        q->a[i]->ended_us = now;
        p->o.done_cb(p->o.ctx, q->a[i]);
    }
}

/*
 * The loop's fallback for a deadline the thread keeps, due then: a timer
 * already armed to fire no later stays as it is (it looks again when it
 * fires), so attempts of like timeouts one after another arm it about once
 * a timeout, not once each.
 */
static void slot_fallback_arm(tp_slot_t *s, uint64_t due)
{
    if (s->timer_lazy && s->timer_at <= due)
        return;
    uint64_t now = tp_now_us();
    slot_timer_arm(s, due > now ? due - now : 0);
    s->timer_lazy = evtimer_pending(s->ev_timer, NULL) != 0;
    s->timer_at = due > now ? due : now;
}

/*
 * Arms the deadline of a, which starts now on s. The deadline thread keeps
 * it when a needs no kill_grace (the loop's timer is then a fallback);
 * otherwise the loop's timer does, TP_DEADLINE_LEAD_US early. An exec
 * tool's timeout counts from its tool's start (the start board): until its
 * worker marks the start, the deadline is the one it would have had it
 * started at once, past which the thread (or the loop) looks at the board
 * and moves it, up to the spawn limit.
 */
void slot_deadline_arm(tp_slot_t *s, const tp_attempt_t *a, uint64_t now)
{
    tp_pool_t *p = s->pool;
    uint64_t timeout = a->timeout_us;
    s->deadline_us = now + timeout;
    s->spawn_until = 0;
    if (a->tool->adapter == TP_ADAPTER_EXEC && p->starts != NULL) {
        uint64_t limit = timeout > TP_POOL_SPAWN_LIMIT_US ? timeout : TP_POOL_SPAWN_LIMIT_US;
        s->spawn_until = now + limit;
        if (a->limit_us && a->limit_us < s->spawn_until)
            s->spawn_until = a->limit_us > s->deadline_us ? a->limit_us : s->deadline_us;
        if (s->spawn_until <= s->deadline_us)
            s->spawn_until = 0;
    }
    bool thread = tp_deadline_running(p->deadline) && a->tool->policy.kill_grace_us == 0 && !s->dead;
    s->thread_keeps = thread;
    if (thread && s->spawn_until)
        tp_deadline_arm_spawn(p->deadline, s->index, s->deadline_us, &p->starts[s->index], a->seq, timeout,
                              s->spawn_until, a->limit_us);
    else
        tp_deadline_arm(p->deadline, s->index, thread ? s->deadline_us : 0);
    uint64_t left = s->deadline_us > now ? s->deadline_us - now : 0;
    if (thread) {
        slot_fallback_arm(s, now + left + DEADLINE_FALLBACK_US);
        return;
    }
    slot_timer_arm(s, left > 2 * TP_DEADLINE_LEAD_US ? left - TP_DEADLINE_LEAD_US : left);
}

/*
 * s's running attempt is past its deadline as the loop last knew it: an
 * exec tool's that its worker has since marked started (or not yet, within
 * the spawn limit) gets its deadline moved, as the deadline thread would
 * move it; true then, with the thread and the timer armed anew.
 */
static bool slot_deadline_moves(tp_slot_t *s, uint64_t now)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t *a = s->attempt;
    if (s->spawn_until == 0)
        return false;
    bool started;
    uint64_t at, dl = tp_deadline_spawn_deadline(&p->starts[s->index], a->seq, a->timeout_us, s->spawn_until,
                                                 a->limit_us, now, &started, &at);
    if (dl <= now)
        return false; /* started and overran, or not started within the limit */
    uint64_t until = started ? 0 : s->spawn_until;
    s->deadline_us = dl;
    bool thread = s->thread_keeps;
    if (thread && until)
        tp_deadline_arm_spawn(p->deadline, s->index, dl, &p->starts[s->index], a->seq, a->timeout_us, until,
                              a->limit_us);
    else
        tp_deadline_arm(p->deadline, s->index, thread ? dl : 0);
    s->spawn_until = until;
    uint64_t left = dl - now;
    slot_timer_arm(s, thread                           ? left + DEADLINE_FALLBACK_US
                      : left > 2 * TP_DEADLINE_LEAD_US ? left - TP_DEADLINE_LEAD_US
                                                       : left);
    return true;
}

/*
 * a's time ran out on s: Timeout, saying whether its tool had started (an
 * exec tool's start, from the board: spawn_us too).
 */
void slot_timed_out_fail(tp_slot_t *s, tp_attempt_t *a)
{
    tp_pool_t *p = s->pool;
    uint64_t at;
    bool exec = a->tool->adapter == TP_ADAPTER_EXEC && p->starts != NULL;
    if (exec && tp_start_read(&p->starts[s->index], a->seq, &at) && at >= a->started_us) {
        a->spawn_us = at - a->started_us;
        pool_attempt_fail(a, TP_KIND_TIMEOUT, "%s exceeded %.3gs", a->tool->name, (double)a->timeout_us / 1e6);
    } else if (exec) {
        uint64_t waited = s->spawn_until > a->started_us ? s->spawn_until - a->started_us : a->timeout_us;
        a->unstarted = true;
        pool_attempt_fail(a, TP_KIND_TIMEOUT, "%s did not start within %.3gs", a->tool->name, (double)waited / 1e6);
    } else {
        pool_attempt_fail(a, TP_KIND_TIMEOUT, "%s exceeded %.3gs", a->tool->name, (double)a->timeout_us / 1e6);
    }
}

/*
 * SIGKILL has gone to the group of a worker whose attempt timed out (at
 * killed_us; 0: just now): the attempt is over, and so is the wait of
 * those queued behind it.
 */
static void slot_timed_out(tp_slot_t *s, uint64_t killed_us)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t *a = s->attempt;
    if (a == NULL)
        return;
    s->attempt = NULL;
    p->busy--;
    queued_t q;
    slot_take_queue(s, &q);
    slot_timed_out_fail(s, a);
    if (killed_us)
        a->ended_us = killed_us;
    p->o.done_cb(p->o.ctx, a);
    pool_hand_back(p, &q);
}

/*
 * The running attempt's deadline has passed: the group gets its signal
 * (unless the deadline thread sent SIGKILL already, at killed_us) and,
 * with no kill_grace, the attempt ends.
 */
void slot_deadline(tp_slot_t *s, uint64_t killed_us)
{
    tp_pool_t *p = s->pool;
    const tp_attempt_t *a = s->attempt;
    uint64_t grace = a->tool->policy.kill_grace_us;
    p->stats.timeouts++;
    tp_log_call_t lc = {a->call_id, a->job, a->tool->name, a->number};
    tp_log_json_event(TP_LOG_WARN, "pool.worker_killed", &lc,
                      "worker %d (slot %d): %s exceeded %.3gs: its group is killed", (int)s->pid, s->index,
                      a->tool->name, (double)a->timeout_us / 1e6);
    if (killed_us) {
        s->why = WHY_TIMEOUT;
        s->state = SLOT_DYING;
        slot_timer_stop(s);
        slot_timed_out(s, killed_us);
        return;
    }
    /* A KILL that failed to go out ends the attempt at the reap instead. */
    if (slot_stop(s, WHY_TIMEOUT, grace > 0 ? SIGTERM : SIGKILL) == 0 && grace == 0)
        slot_timed_out(s, 0);
}

/*
 * Arms s's backstop: the soonest of its attempts' in flight. Not while it
 * lingers at EOF: that timer stands.
 */
void slot_flight_arm(tp_slot_t *s)
{
    if (s->eof || s->n_flight == 0)
        return;
    uint64_t soonest = s->flight[0]->backstop_us, now = tp_now_us();
    for (int k = 1; k < s->n_flight; k++)
        if (s->flight[k]->backstop_us < soonest)
            soonest = s->flight[k]->backstop_us;
    slot_timer_arm(s, soonest > now ? soonest - now : 0);
}

/*
 * How an attempt in flight ends when its worker is killed at another's
 * backstop, or at its own: there is nothing left of it to run.
 */
static void flight_killed(tp_attempt_t *a, uint64_t now, const char *detail)
{
    if (a->backstop_us <= now)
        pool_attempt_fail(a, TP_KIND_TIMEOUT, "%s exceeded %.3gs, and its worker did not end it: killed", a->tool->name,
                          (double)a->timeout_us / 1e6);
    else
        pool_attempt_fail(a, TP_KIND_WORKER_CRASHED, "%s: its worker was killed: %s", a->tool->name, detail);
}

/* Ends every attempt s holds in flight through fail (or by why, at the reap), and hands them back. */
static void flight_end_all(tp_slot_t *s, stop_why_t why, const char *how)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t **held = s->flight;
    int n = s->n_flight;
    s->flight = NULL;
    s->n_flight = s->flight_cap = 0;
    p->busy -= n;
    uint64_t now = tp_now_us();
    for (int k = 0; k < n; k++) {
        tp_attempt_t *a = held[k];
        a->shared_fate = !(why == WHY_TIMEOUT && a->backstop_us <= now);
        if (why == WHY_TIMEOUT)
            flight_killed(a, now, s->detail);
        else if (why == WHY_SHUTDOWN)
            pool_attempt_fail(a, TP_KIND_CANCELLED, "%s cancelled: the run was stopped", a->tool->name);
        else if (why == WHY_PROTOCOL)
            pool_attempt_fail(a, TP_KIND_WORKER_CRASHED, "%s: protocol error: %s", a->tool->name, s->detail);
        else
            pool_attempt_fail(a, TP_KIND_WORKER_CRASHED, "worker running %s %s", a->tool->name, how);
    }
    for (int k = 0; k < n; k++)
        p->o.done_cb(p->o.ctx, held[k]);
    free(held);
}

/*
 * The backstop of a slot in flight: an attempt whose worker has not
 * answered it by its deadline and the grace after. The worker is killed,
 * and with the KILL out every attempt it held ends: the late ones
 * Timeout, the others WorkerCrashed, for the engine to retry or not by
 * their tools' policies. Else (woken early, or by an attempt that has
 * answered since) the timer is armed again.
 */
static void slot_flight_backstop(tp_slot_t *s)
{
    tp_pool_t *p = s->pool;
    uint64_t now = tp_now_us();
    const tp_attempt_t *late = NULL;
    for (int k = 0; k < s->n_flight && late == NULL; k++)
        if (s->flight[k]->backstop_us <= now)
            late = s->flight[k];
    if (late == NULL) {
        slot_flight_arm(s);
        return;
    }
    p->stats.timeouts++;
    snprintf(s->detail, sizeof s->detail, "call %s held with it did not end at its deadline", late->call_id);
    tp_log_call_t lc = {late->call_id, late->job, late->tool->name, late->number};
    tp_log_json_event(
        TP_LOG_WARN, "pool.worker_killed", &lc,
        "worker %d (slot %d): %s exceeded %.3gs and its worker did not end it: killed with the %d call%s it held",
        (int)s->pid, s->index, late->tool->name, (double)late->timeout_us / 1e6, s->n_flight,
        s->n_flight == 1 ? "" : "s");
    /* A KILL that failed to go out ends them at the reap instead. */
    if (slot_stop(s, WHY_TIMEOUT, SIGKILL) == 0)
        flight_end_all(s, WHY_TIMEOUT, NULL);
}

/* The loop hears from the deadline thread: end the attempts it killed. */
void pool_deadline_cb(void *arg)
{
    tp_pool_t *p = arg;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        if (s->state != SLOT_BUSY || s->why != WHY_NONE || s->attempt == NULL)
            continue;
        if (tp_deadline_killed(p->deadline, s->index))
            slot_deadline(s, tp_deadline_disarm(p->deadline, s->index));
    }
}

/*
 * The slot's one timer. What it was armed for follows from the slot's
 * state: a respawn (DOWN), the hello timeout (STARTING), the running
 * attempt's deadline (BUSY), the KILL after a TERM's or an EOF's grace
 * (STOPPING; none is armed in IDLE or DYING); and, before any of them,
 * the linger of a worker that closed its reply pipe but has not exited
 * (eof).
 */
void slot_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_slot_t *s = arg;
    tp_pool_t *p = s->pool;
    if (s->timer_lazy) {
        s->timer_lazy = false;
        if (s->state != SLOT_BUSY || s->attempt == NULL || !s->thread_keeps)
            return; /* the fallback of an attempt that has ended */
        uint64_t now = tp_now_us(), due = s->deadline_us + DEADLINE_FALLBACK_US;
        if (now < due) {
            slot_fallback_arm(s, due); /* armed for an earlier attempt */
            return;
        }
    }
    if (s->eof && s->why == WHY_NONE && s->state != SLOT_DOWN) {
        snprintf(s->detail, sizeof s->detail, "worker %d closed its pipe but did not exit", (int)s->pid);
        slot_stop(s, WHY_PROTOCOL, SIGKILL);
        return;
    }
    switch (s->state) {
    case SLOT_DOWN: {
        uint64_t now = tp_now_us(), d = tp_pool_next_deadline(p);
        if (d != 0 && d < now + SPAWN_QUIET_US) {
            if (s->held_since_us == 0)
                s->held_since_us = now;
            if (now - s->held_since_us < SPAWN_HOLD_MAX_US) {
                slot_timer_arm(s, (d > now ? d - now : 0) + 50);
                break;
            }
        }
        s->held_since_us = 0;
        slot_spawn(s);
        break;
    }
    case SLOT_STARTING:
        snprintf(s->detail, sizeof s->detail, "worker %d sent no hello within %.1fs", (int)s->pid,
                 (double)p->o.hello_timeout_us / 1e6);
        slot_stop(s, WHY_HELLO, SIGKILL);
        break;
    case SLOT_BUSY: {
        if (s->attempt == NULL) {
            slot_flight_backstop(s);
            break;
        }
        uint64_t now = tp_now_us();
        if (now < s->deadline_us) {
            /* Woken early on purpose: short sleeps until the deadline. */
            uint64_t left = s->deadline_us - now;
            slot_timer_arm(s, left > TP_DEADLINE_LEAD_US   ? left - TP_DEADLINE_LEAD_US
                              : left > TP_DEADLINE_STEP_US ? TP_DEADLINE_STEP_US
                                                           : left);
            break;
        }
        uint64_t killed = tp_deadline_disarm(p->deadline, s->index);
        if (killed == 0 && slot_deadline_moves(s, now))
            break; /* an exec tool that started late, or has yet to: its time counts from its start */
        slot_deadline(s, killed);
        break;
    }
    case SLOT_STOPPING:
        s->state = SLOT_DYING;
        if (slot_kill(s) == 0 && s->why == WHY_TIMEOUT)
            slot_timed_out(s, 0);
        break;
    case SLOT_IDLE:
    case SLOT_DYING:
        break;
    }
}

static void describe_status(char *buf, size_t cap, int status)
{
    if (WIFSIGNALED(status))
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
}

/*
 * After waitpid: settle the attempt the worker held, then respawn the slot
 * (at once after a deliberate stop, throttled after a crash) unless the pool
 * is shutting down.
 */
static void slot_reaped(tp_slot_t *s, int status)
{
    tp_pool_t *p = s->pool;
    /* A Reply may sit in the pipe from a worker that then exited. */
    s->dead = true;
    if (s->why == WHY_NONE && s->state == SLOT_BUSY && s->reply_fd >= 0) {
        while (tp_buf_read_fd(&s->in, s->reply_fd) > 0)
            ;
        if (slot_parse(s) < 0 && s->why == WHY_NONE)
            s->why = WHY_PROTOCOL;
    }
    slot_state_t was = s->state;
    stop_why_t why = s->why;
    tp_attempt_t *a = s->attempt;
    pid_t pid = s->pid;
    char how[96];
    describe_status(how, sizeof how, status);

    if (was == SLOT_IDLE)
        p->idle--;
    if (a != NULL)
        p->busy--;
    queued_t q;
    slot_take_queue(s, &q);
    slot_close_fds(s);
    slot_timer_stop(s);
    s->attempt = NULL;
    s->state = SLOT_DOWN;
    s->why = WHY_NONE;
    s->dead = false;
    s->pid = 0;
    s->calls = 0;
    p->live--;

    /*
     * A plugin past its cpu limit: the worker, whose soft RLIMIT_CPU was
     * lowered around the call, died of SIGXCPU. The tool's failure, not a
     * crash of the worker's.
     */
    bool cpu_limit = a != NULL && why == WHY_NONE && a->tool->policy.limit_cpu_us && WIFSIGNALED(status) &&
                     WTERMSIG(status) == SIGXCPU;
    bool crash = (why == WHY_NONE && !cpu_limit) || why == WHY_PROTOCOL;
    /*
     * A worker that cannot start says so by exiting or crashing before its
     * Hello; one killed from outside (SIGKILL: an operator, the OOM killer)
     * is a crash like any other, throttled but never fatal.
     */
    bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && why == WHY_NONE;
    bool start_failure = !s->said_hello && !killed && (crash || why == WHY_HELLO);
    if (why == WHY_RECYCLE)
        p->stats.recycled++;
    if (crash || why == WHY_HELLO) {
        p->stats.crashed++;
        tp_log_call_t lc = {0};
        if (a)
            lc = (tp_log_call_t){a->call_id, a->job, a->tool->name, a->number};
        tp_log_json_event(TP_LOG_WARN, "pool.worker_crashed", &lc, "worker %d (slot %d) %s%s%s", (int)pid, s->index,
                          why == WHY_NONE    ? how
                          : why == WHY_HELLO ? "sent no hello"
                                             : "broke the protocol",
                          why == WHY_PROTOCOL && s->detail[0] ? ": " : "", why == WHY_PROTOCOL ? s->detail : "");
    }

    if (a != NULL) {
        if (why == WHY_TIMEOUT)
            slot_timed_out_fail(s, a);
        else if (why == WHY_SHUTDOWN)
            pool_attempt_fail(a, TP_KIND_CANCELLED, "%s cancelled: the run was stopped", a->tool->name);
        else if (why == WHY_CANCEL)
            pool_attempt_fail(a, TP_KIND_CANCELLED, "%s cancelled while it ran", a->tool->name);
        else if (why == WHY_PROTOCOL)
            pool_attempt_fail(a, TP_KIND_WORKER_CRASHED, "%s: protocol error: %s", a->tool->name, s->detail);
        else if (cpu_limit)
            pool_attempt_fail(a, TP_KIND_RESOURCE_LIMIT,
                              "%s exceeded its cpu limit (%llus of CPU time; killed by SIGXCPU)", a->tool->name,
                              (unsigned long long)((a->tool->policy.limit_cpu_us + 999999u) / 1000000u));
        else
            pool_attempt_fail(a, TP_KIND_WORKER_CRASHED, "worker running %s %s", a->tool->name, how);
    }

    if (p->shutting_down) {
        /* no respawn */
    } else if (start_failure) {
        s->start_failures++;
        if (s->start_failures >= TP_POOL_START_FAILURES_MAX && !p->fatal) {
            char msg[512];
            snprintf(msg, sizeof msg, "worker %s cannot start: %s (%u tries)", p->o.worker_path,
                     why == WHY_HELLO || why == WHY_PROTOCOL ? s->detail : how, s->start_failures);
            pool_fatal(p, TP_EWORKER, msg);
        } else if (!p->fatal) {
            slot_timer_arm(s, 100000u * s->start_failures);
        }
    } else if (crash) {
        s->crash_streak++;
        uint64_t delay = s->crash_streak <= 1 ? 0 : 10000u << (s->crash_streak < 9 ? s->crash_streak - 2 : 7);
        slot_timer_arm(s, delay > CRASH_DELAY_MAX_US ? CRASH_DELAY_MAX_US : delay);
    } else {
        /* At once, but after this turn has recorded the attempt and written it out. */
        slot_timer_arm(s, 0);
    }

    if (a != NULL)
        p->o.done_cb(p->o.ctx, a);
    pool_hand_back(p, &q);
    if (s->n_flight > 0)
        flight_end_all(s, why, how);
    if (p->shutting_down && p->live == 0 && !p->closed) {
        p->closed = true;
        p->o.closed_cb(p->o.ctx);
    }
}

/*
 * SIGCHLD: for each slot whose worker has exited, KILL what is left of its
 * process group (a tool's background children) while the unreaped worker
 * still holds the group's id, so the id cannot have been reused; then reap.
 */
void pool_chld_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_pool_t *p = arg;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        if (s->pid <= 0)
            continue;
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != s->pid)
            continue;
        /*
         * The thread must not signal the group once the id can be reused
         * (it forgets the reply pipe too: closed in slot_reaped).
         */
        uint64_t killed = tp_deadline_forget(p->deadline, s->index);
        if (killed && s->state == SLOT_BUSY && s->why == WHY_NONE && s->attempt)
            slot_deadline(s, killed); /* the thread's KILL, not a crash */
        kill(-s->pid, SIGKILL);
        int status;
        pid_t r;
        do {
            r = waitpid(s->pid, &status, WNOHANG);
        } while (r < 0 && errno == EINTR);
        if (r == s->pid)
            slot_reaped(s, status);
    }
}
