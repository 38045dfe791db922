/*
 * The deadline thread (deadline.h). It keeps the deadlines of attempts
 * without a kill_grace, so that no fsync or spawn in the loop can hold up
 * a kill; the loop's own timer for such an attempt is only a fallback.
 */
#include "deadline.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proctree.h"

/* One slot, as the thread sees it. Shared with the loop, under mu. */
typedef struct {
    pid_t pid;          /* the worker until it is reaped: its group may be killed */
    int reply_fd;       /* its reply pipe while open: an answer there comes first */
    uint64_t deadline;  /* the running attempt's, for the thread to keep; 0: none */
    uint64_t killed_us; /* when the thread stopped the group to kill it; 0: it has not */
    bool sweeping;      /* stopped; the thread is killing it outside mu (the loop waits) */
    /* An exec attempt not known to have started (until != 0): tp_deadline_arm_spawn's. */
    const tp_start_line_t *line;
    uint64_t seq, timeout_us, until, cap;
} watch_t;

struct tp_deadline {
    int n;
    watch_t *slots; /* by slot index */
    bool running;   /* the loop's alone */
    bool stop;
    uint64_t next; /* the deadline the thread waits for; 0: none */
    pthread_t thread;
    pthread_mutex_t mu; /* over slots, stop and next */
    pthread_cond_t cond;
    pthread_t sweeper;
    pthread_cond_t to_sweep; /* the sweeper's: a slot is sweeping */
    pthread_cond_t swept;    /* a slot's sweeping has ended */
    tp_proctree_t *tree;     /* the sweeper's scratch for tp_proctree_kill */
    int fd;                  /* eventfd */
    struct event *ev;
    tp_deadline_cb_t killed_cb;
    void *ctx;
};

tp_deadline_t *tp_deadline_new(int n)
{
    tp_deadline_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->slots = calloc((size_t)(n > 0 ? n : 1), sizeof *d->slots);
    if (d->slots == NULL) {
        free(d);
        return NULL;
    }
    d->tree = calloc(1, sizeof *d->tree);
    if (d->tree == NULL) {
        free(d->slots);
        free(d);
        return NULL;
    }
    d->n = n;
    for (int i = 0; i < n; i++)
        d->slots[i].reply_fd = -1;
    d->fd = -1;
    return d;
}

/* The loop hears from the deadline thread: the pool ends the attempts it killed. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_deadline_t *d = arg;
    uint64_t n;
    if (read(fd, &n, sizeof n) < 0 && errno != EAGAIN)
        tp_log_error("pool.deadline_thread_failed", "deadline thread's eventfd: %s", strerror(errno));
    d->killed_cb(d->ctx);
}

/*
 * The sweeper thread: kills what an attempt started, after the deadline
 * thread stopped its worker's group (SIGSTOP, at the deadline itself, so
 * none of it runs). Outside mu it kills every descendant of the worker,
 * those that left the group included (a walk of /proc: 1 to 3 ms), then
 * the group, and tells the loop. A thread of its own, so that no walk
 * holds up the deadline thread: the deadlines of two workers often fall
 * together, and a walk between the two would make the second late. The
 * worker is alive, stopped, throughout, so its orphaned descendants are
 * still reparented to it, and the loop waits (sweeping) before it could
 * reap it, so no pid signalled here can have been reused. It leaves when
 * told to stop, once nothing is left to sweep.
 */
static void *sweeper_main(void *arg)
{
    tp_deadline_t *d = arg;
    /*
     * Below the deadline thread and the loop (nice 10, this thread alone):
     * on two cores, a walk that held one while the loop held the other kept
     * the deadline thread from waking for the next deadline.
     */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        watch_t *w = NULL;
        for (int i = 0; i < d->n && w == NULL; i++)
            if (d->slots[i].sweeping)
                w = &d->slots[i];
        if (w == NULL) {
            if (d->stop)
                break;
            pthread_cond_wait(&d->to_sweep, &d->mu);
            continue;
        }
        pid_t pid = w->pid;
        pthread_mutex_unlock(&d->mu);
        if (tp_proctree_kill(d->tree, pid) < 0)
            tp_log_error("pool.proc_unreadable",
                         "cannot read /proc to kill what worker %d started outside its group: %s", (int)pid,
                         strerror(errno));
        kill(-pid, SIGKILL);
        uint64_t one = 1;
        pthread_mutex_lock(&d->mu);
        w->sweeping = false;
        pthread_cond_broadcast(&d->swept);
        pthread_mutex_unlock(&d->mu);
        if (write(d->fd, &one, sizeof one) < 0 && errno != EAGAIN)
            tp_log_error("pool.deadline_thread_failed",
                         "the deadline thread cannot wake the loop; its fallback timers will");
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/*
 * The deadline thread. It sleeps until TP_DEADLINE_LEAD_US before the
 * soonest deadline it keeps, then in TP_DEADLINE_STEP_US steps (an idle
 * vCPU is slow to wake), stops the group of each worker whose deadline has
 * come (SIGSTOP: from then on none of it runs) and hands it to the sweeper
 * thread, which kills it and tells the loop. It touches nothing but the
 * fields under mu, and signals a group only while its worker is unreaped
 * (pid), so the group's id cannot have been reused.
 */
static void *deadline_main(void *arg)
{
    tp_deadline_t *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        uint64_t now = tp_now_us(), next = 0;
        for (int i = 0; i < d->n; i++) {
            watch_t *w = &d->slots[i];
            if (w->deadline == 0 || w->killed_us != 0 || w->pid <= 0)
                continue;
            if (w->deadline <= now && w->until != 0) {
                /* Its tool's start decides: a later deadline, another look, or (at the spawn limit) the kill. */
                bool started;
                uint64_t at, dl = tp_deadline_spawn_deadline(w->line, w->seq, w->timeout_us, w->until, w->cap, now,
                                                             &started, &at);
                if (started || dl <= now)
                    w->until = 0; /* a deadline as any other from here */
                w->deadline = dl;
            }
            if (w->deadline <= now) {
                siginfo_t si = {0};
                int unread = 0;
                if ((waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0) ||
                    (w->reply_fd >= 0 && ioctl(w->reply_fd, FIONREAD, &unread) == 0 && unread > 0)) {
                    /*
                     * The worker has died of something else, or an answer
                     * waits in its pipe: the loop, soon free, decides
                     * (its fallback timer follows).
                     */
                    w->deadline = 0;
                } else if (kill(-w->pid, SIGSTOP) == 0) {
                    w->killed_us = tp_now_us();
                    w->sweeping = true;
                    pthread_cond_signal(&d->to_sweep);
                } else {
                    w->deadline = 0; /* the loop's fallback timer will see to it */
                }
            } else if (next == 0 || w->deadline < next) {
                next = w->deadline;
            }
        }
        d->next = next;
        if (next == 0) {
            pthread_cond_wait(&d->cond, &d->mu);
        } else if (next > now + TP_DEADLINE_LEAD_US) {
            uint64_t at = next - TP_DEADLINE_LEAD_US;
            struct timespec ts = {.tv_sec = (time_t)(at / 1000000u), .tv_nsec = (long)(at % 1000000u) * 1000};
            pthread_cond_timedwait(&d->cond, &d->mu, &ts);
        } else {
            uint64_t step = next - now < TP_DEADLINE_STEP_US ? next - now : TP_DEADLINE_STEP_US;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000};
            pthread_mutex_unlock(&d->mu);
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&d->mu);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/*
 * Starts the deadline thread, with every signal blocked (they are the
 * loop's). Without it (no thread, no eventfd), the loop's timers keep
 * every deadline, as they do for attempts with a kill_grace.
 */
void tp_deadline_start(tp_deadline_t *d, struct event_base *base, tp_deadline_cb_t killed_cb, void *ctx)
{
    pthread_condattr_t ca;
    const char *what;
    int rc;
    d->killed_cb = killed_cb;
    d->ctx = ctx;
    d->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->fd < 0) {
        what = "eventfd";
        rc = errno;
        goto fail;
    }
    /* Without its event the loop would never hear of a kill: no thread then. */
    d->ev = event_new(base, d->fd, EV_READ | EV_PERSIST, wake_cb, d);
    if (d->ev == NULL) {
        what = "event_new";
        rc = ENOMEM;
        goto fail;
    }
    errno = 0;
    if (event_add(d->ev, NULL) < 0) {
        what = "event_add";
        rc = errno ? errno : ENOMEM;
        event_free(d->ev);
        d->ev = NULL;
        goto fail;
    }
    if ((rc = pthread_condattr_init(&ca)) != 0) {
        what = "pthread_condattr_init";
        goto fail;
    }
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&d->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        what = "pthread_cond_init";
        goto fail;
    }
    if (pthread_cond_init(&d->to_sweep, NULL) != 0)
        goto no_to_sweep;
    if (pthread_cond_init(&d->swept, NULL) != 0)
        goto no_swept;
    if (pthread_mutex_init(&d->mu, NULL) != 0)
        goto no_mutex;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&d->sweeper, NULL, sweeper_main, d) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        goto no_thread;
    }
    d->running = pthread_create(&d->thread, NULL, deadline_main, d) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (d->running)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->to_sweep);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->sweeper, NULL);
no_thread:
    pthread_mutex_destroy(&d->mu);
no_mutex:
    pthread_cond_destroy(&d->swept);
no_swept:
    pthread_cond_destroy(&d->to_sweep);
no_to_sweep:
    pthread_cond_destroy(&d->cond);
    tp_log_error("pool.deadline_thread_failed", "no deadline thread; the loop's timers keep the deadlines");
    return;
fail:
    tp_log_error("pool.deadline_thread_failed", "no deadline thread (%s: %s); the loop's timers keep the deadlines",
                 what, strerror(rc));
}

bool tp_deadline_running(const tp_deadline_t *d)
{
    return d->running;
}

/*
 * Stops and joins the threads (the sweeper once it has killed what it was
 * given), closes the eventfd. Safe to call again.
 */
static void deadline_stop(tp_deadline_t *d)
{
    if (d->running) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_signal(&d->cond);
        pthread_cond_signal(&d->to_sweep);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        pthread_join(d->sweeper, NULL); /* once what it was given is swept */
        pthread_cond_destroy(&d->cond);
        pthread_cond_destroy(&d->to_sweep);
        pthread_cond_destroy(&d->swept);
        pthread_mutex_destroy(&d->mu);
        d->running = false;
    }
    if (d->ev)
        event_free(d->ev);
    d->ev = NULL;
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
}

void tp_deadline_free(tp_deadline_t *d)
{
    if (d == NULL)
        return;
    deadline_stop(d);
    free(d->tree);
    free(d->slots);
    free(d);
}

/*
 * What every change to slot i begins with: mu taken, and the thread done
 * killing the slot's processes, should it be at it. false, nothing taken,
 * when there is no thread (then there is nothing to change).
 */
static bool slot_lock(tp_deadline_t *d, int i)
{
    if (!d->running)
        return false;
    pthread_mutex_lock(&d->mu);
    while (d->slots[i].sweeping)
        pthread_cond_wait(&d->swept, &d->mu);
    return true;
}

/* Called under mu: slot i's deadline gone; what the kill of its last one took (0: none), gone too. */
static uint64_t slot_disarm(tp_deadline_t *d, int i)
{
    uint64_t killed = d->slots[i].killed_us;
    d->slots[i].deadline = 0;
    d->slots[i].until = 0;
    d->slots[i].killed_us = 0;
    return killed;
}

void tp_deadline_watch(tp_deadline_t *d, int i, pid_t pid, int reply_fd)
{
    if (!slot_lock(d, i))
        return;
    d->slots[i].pid = pid;
    d->slots[i].reply_fd = reply_fd;
    slot_disarm(d, i);
    pthread_mutex_unlock(&d->mu);
}

uint64_t tp_deadline_forget(tp_deadline_t *d, int i)
{
    if (!slot_lock(d, i))
        return 0;
    d->slots[i].pid = 0;
    d->slots[i].reply_fd = -1;
    uint64_t killed = slot_disarm(d, i);
    pthread_mutex_unlock(&d->mu);
    return killed;
}

uint64_t tp_deadline_spawn_deadline(const tp_start_line_t *line, uint64_t seq, uint64_t timeout_us, uint64_t until,
                                    uint64_t cap, uint64_t now, bool *started, uint64_t *at_us)
{
    *started = tp_start_read(line, seq, at_us);
    if (*started) {
        uint64_t dl = *at_us + timeout_us;
        return cap && dl > cap ? cap : dl;
    }
    return until > now + TP_START_POLL_US ? now + TP_START_POLL_US : until;
}

void tp_deadline_arm_spawn(tp_deadline_t *d, int i, uint64_t at, const tp_start_line_t *line, uint64_t seq,
                           uint64_t timeout_us, uint64_t until, uint64_t cap)
{
    if (!slot_lock(d, i))
        return;
    watch_t *w = &d->slots[i];
    w->line = line;
    w->seq = seq;
    w->timeout_us = timeout_us;
    w->until = until > at ? until : 0;
    w->cap = cap;
    w->deadline = at;
    w->killed_us = 0;
    if (at != 0 && (d->next == 0 || at < d->next))
        pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
}

void tp_deadline_arm(tp_deadline_t *d, int i, uint64_t at)
{
    if (!slot_lock(d, i))
        return;
    d->slots[i].deadline = at;
    d->slots[i].until = 0;
    d->slots[i].killed_us = 0;
    if (at != 0 && (d->next == 0 || at < d->next))
        pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
}

uint64_t tp_deadline_disarm(tp_deadline_t *d, int i)
{
    if (!slot_lock(d, i))
        return 0;
    uint64_t killed = slot_disarm(d, i);
    pthread_mutex_unlock(&d->mu);
    return killed;
}

uint64_t tp_deadline_killed(tp_deadline_t *d, int i)
{
    if (!slot_lock(d, i))
        return 0;
    uint64_t killed = d->slots[i].killed_us;
    pthread_mutex_unlock(&d->mu);
    return killed;
}
