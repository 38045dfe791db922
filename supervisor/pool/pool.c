/*
 * Slots: spawn, talk to, time out, kill, reap and respawn workers.
 *
 * Every slot moves through one small state machine:
 *
 *   DOWN --spawn--> STARTING --Hello--> IDLE --submit--> BUSY --Reply--> IDLE
 *                                                         |
 *        (deadline: kill the group; EOF, garbage: kill) STOPPING --reaped--> DOWN
 *
 * A slot leaves the living only through SIGCHLD. The attempt it held ends
 * when no process of it can run code of its own any more, so a retry never
 * runs beside the attempt it replaces: when the worker has been reaped, or,
 * at a deadline, as soon as SIGKILL has gone to every process the worker
 * started and to its whole process group (no process returns to user space
 * after that; one in the middle of a system call finishes that call, and
 * the reap follows on its own). A kill stops the group, kills the worker's
 * descendants that left it (setsid, daemons: slot_kill), then the group.
 * The slot remembers why it stopped its worker (stop_why_t), so a timeout
 * kill, a recycle or a shutdown is never mistaken for a crash.
 *
 * A deadline is kept to within a tenth of a millisecond, whatever the loop
 * is doing (a commit's fsync can take 100 ms on a stalling disk): a thread
 * of the pool's own (deadline.c) sleeps until TP_DEADLINE_LEAD_US before
 * it, then in short steps (an idle CPU can take milliseconds to wake),
 * stops the group, kills what the worker started and the group, and tells
 * the loop, which ends the attempt as of the stop. The thread leaves to the loop a worker that has died
 * already, an answer waiting unread in the pipe, and an attempt with a
 * kill_grace; the loop's own timer (the same lead and steps) keeps those;
 * respawns and commits, which block the loop for a millisecond or more,
 * wait until such a deadline, if near, has passed.
 */
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "deadline.h"
#include "frame.h"
#include "log.h"
#include "procfs.h"
#include "proctree.h"
#include "toolpool.pb-c.h"

extern char **environ;

#define START_FAILURES_MAX 5
#define CRASH_DELAY_MAX_US 1000000u
#define EOF_GRACE_US 5000000u
#define EOF_LINGER_US 1000000u
#define PIPE_MAX 64
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

typedef enum {
    SLOT_DOWN,     /* no process; maybe waiting for a throttled respawn */
    SLOT_STARTING, /* spawned, no Hello yet */
    SLOT_IDLE,
    SLOT_BUSY,
    SLOT_STOPPING, /* told to go (EOF or a signal); waiting for the reap */
} slot_state_t;

typedef enum {
    WHY_NONE, /* nobody asked it to stop: a crash */
    WHY_TIMEOUT,
    WHY_RECYCLE,
    WHY_PROTOCOL,
    WHY_HELLO, /* never said Hello in time */
    WHY_SHUTDOWN,
    WHY_CANCEL, /* its running attempt was cancelled */
} stop_why_t;

typedef struct tp_slot {
    tp_pool_t *pool;
    int index;
    pid_t pid;
    int call_fd;      /* we write Calls */
    size_t call_pipe; /* what tp_pipe_fit last asked of it */
    int reply_fd;     /* we read Hello and Replies */
    struct event *ev_read;
    struct event *ev_write;
    struct event *ev_timer; /* hello, attempt deadline, kill grace, respawn */
    tp_buf_t in;
    tp_buf_t out;
    slot_state_t state;
    stop_why_t why;
    bool term_sent; /* told to go (TERM or EOF); SIGKILL follows at the timer */
    bool dead;      /* reaped; its last frames are being read */
    bool said_hello;
    bool eof;       /* its reply pipe reached EOF */
    bool unflushed; /* out holds Calls the flush event will write */
    bool retiring;  /* past a tool's worker.max_calls or max_rss: replaced once its queue is done */
    uint64_t calls;
    uint64_t call_cap; /* the most calls it may answer: --recycle-after, and the lowest
                          worker.max_calls of the tools it has been given; 0: no cap */
    uint64_t seq;
    tp_attempt_t *attempt;         /* running now */
    uint64_t deadline_us;          /* when the running attempt times out */
    bool thread_keeps;             /* the deadline thread keeps it (else the loop's timer) */
    uint64_t held_since_us;        /* a respawn put off for a deadline: since when */
    tp_attempt_t *queue[PIPE_MAX]; /* sent after it, waiting their turn in the worker */
    int queued;
    unsigned crash_streak;
    unsigned start_failures;
    char detail[160]; /* what went wrong, for the attempt's message */
} tp_slot_t;

struct tp_pool {
    struct event_base *base;
    tp_pool_opts_t o;
    tp_slot_t *slots;
    int n;
    int idle;
    int busy;
    int live; /* slots with a process */
    struct event *ev_chld;
    struct event *ev_flush; /* writes every slot's new Calls, once a turn */
    tp_arena_t arena;       /* what a worker's frame unpacks into */
    tp_buf_t *heads;        /* by tool index: the tool's fields of a Call, packed once */
    tp_buf_t *tails;        /* by tool index: its limits, packed once (empty: none) */
    size_t n_heads;
    bool flush_pending;
    bool shutting_down;
    bool kill_busy;
    bool fatal;
    char fatal_msg[256];          /* a failure found where fatal_cb cannot be called: flush_cb calls it */
    bool closed;                  /* closed_cb has fired */
    bool pipeline_room_cb_needed; /* a queue shrank: the caller may submit more */
    tp_pool_stats_t stats;
    char max_frame_arg[16];
    /*
     * The deadline thread (deadline.h): it sends SIGKILL at each deadline
     * that needs no grace, whatever the loop is doing (an fsync, a spawn),
     * and tells the loop, which ends the attempt in deadline_cb.
     */
    tp_deadline_t *deadline;
    tp_proctree_t *tree; /* the loop's scratch for killing a worker's processes */
};

static void slot_spawn(tp_slot_t *s);
static int slot_stop(tp_slot_t *s, stop_why_t why, int sig);
static void slot_deadline(tp_slot_t *s, uint64_t killed_us);

/* The pool cannot go on: fatal_cb, once. */
static void pool_fatal(tp_pool_t *p, const char *msg)
{
    if (p->fatal)
        return;
    p->fatal = true;
    p->o.fatal_cb(p->o.ctx, msg);
}

/*
 * The slot's one timer keeps its deadline, its hello timeout, its kill
 * grace and its respawn: a slot whose timer cannot be armed (libevent out
 * of memory) could hang an attempt past its deadline, or never respawn.
 * The pool stops then, from flush_cb: the caller of timer_arm may be in the
 * middle of handing out an attempt, no place to shut the pool down.
 */
static void timer_arm(tp_slot_t *s, uint64_t us)
{
    tp_pool_t *p = s->pool;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u)};
    if (evtimer_add(s->ev_timer, &tv) == 0)
        return;
    tp_log_error("worker slot %d (pid %d): cannot arm its timer", s->index, (int)s->pid);
    if (!p->fatal && !p->fatal_msg[0]) {
        snprintf(p->fatal_msg, sizeof p->fatal_msg, "cannot arm worker slot %d's timer: its deadlines cannot be kept",
                 s->index);
        event_active(p->ev_flush, 0, 0);
    }
}

/*
 * Arms the deadline of a, which starts now on s. The deadline thread keeps
 * it when a needs no kill_grace (the loop's timer is then a fallback);
 * otherwise the loop's timer does, TP_DEADLINE_LEAD_US early.
 */
static void deadline_arm(tp_slot_t *s, const tp_attempt_t *a, uint64_t now)
{
    tp_pool_t *p = s->pool;
    s->deadline_us = now + a->timeout_us;
    bool thread = tp_deadline_running(p->deadline) && a->tool->policy.kill_grace_us == 0 && !s->dead;
    s->thread_keeps = thread;
    tp_deadline_arm(p->deadline, s->index, thread ? s->deadline_us : 0);
    if (thread) {
        timer_arm(s, a->timeout_us + DEADLINE_FALLBACK_US);
        return;
    }
    timer_arm(s, a->timeout_us > 2 * TP_DEADLINE_LEAD_US ? a->timeout_us - TP_DEADLINE_LEAD_US : a->timeout_us);
}

/* A pipe whose ends are CLOEXEC and above fd 4, so dup2 to 3 and 4 always copies. */
static int pipe_high(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        if (p[i] > 4)
            continue;
        int hi = fcntl(p[i], F_DUPFD_CLOEXEC, 5);
        if (hi < 0)
            return -1;
        close(p[i]);
        p[i] = hi;
    }
    return 0;
}

/*
 * Kills worker s and everything it started, the processes that left its
 * group (setsid, a double-forked daemon) included: the group is stopped
 * first, so none of it runs or forks on; every descendant of the worker is
 * killed (common/proc/proctree.h: the worker is alive, stopped, so its orphans
 * are still reparented to it, and unreaped, since the loop reaps); then
 * the group. Returns the group kill's result. About 1-2 ms with 150
 * processes on the machine, the walk of /proc.
 */
static int slot_kill(tp_slot_t *s)
{
    if (kill(-s->pid, SIGSTOP) == 0 && tp_proctree_kill(s->pool->tree, s->pid) < 0)
        tp_log_error("cannot read /proc to kill what worker %d started outside its group: %s", (int)s->pid,
                     strerror(errno));
    return kill(-s->pid, SIGKILL);
}

static void slot_close_fds(tp_slot_t *s)
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

/* Flushes queued Call bytes; arms the write event while some remain. */
static void slot_flush(tp_slot_t *s)
{
    tp_pipe_fit(s->call_fd, tp_buf_avail(&s->out), &s->call_pipe);
    while (tp_buf_avail(&s->out) > 0) {
        ssize_t w = write(s->call_fd, tp_buf_head(&s->out), tp_buf_avail(&s->out));
        if (w > 0) {
            tp_buf_consume(&s->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            if (event_add(s->ev_write, NULL) == 0)
                return;
            /* Its Calls would wait for a wake-up that never comes: the worker goes, they are retried. */
            tp_log_error("worker %d (slot %d): cannot wait for its call pipe to drain", (int)s->pid, s->index);
            snprintf(s->detail, sizeof s->detail, "cannot wait for worker %d's call pipe to drain", (int)s->pid);
            tp_buf_reset(&s->out);
            slot_stop(s, WHY_PROTOCOL, SIGKILL);
            return;
        }
        /* EPIPE: the worker is gone; SIGCHLD will tell us how. */
        tp_buf_reset(&s->out);
        break;
    }
    event_del(s->ev_write);
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
    slot_flush(arg);
}

/*
 * A turn's new Calls go out in one write per worker, not in one write
 * each: a write costs a syscall, and a wake-up when the worker sleeps in
 * read(). They go when the caller says (tp_pool_flush), or else after the
 * turn's callbacks.
 */
static void slot_flush_now(tp_slot_t *s)
{
    s->unflushed = false;
    if (s->call_fd >= 0)
        slot_flush(s);
}

void tp_pool_flush(tp_pool_t *p)
{
    p->flush_pending = false;
    for (int i = 0; i < p->n; i++)
        if (p->slots[i].unflushed)
            slot_flush_now(&p->slots[i]);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_pool_t *p = arg;
    if (p->fatal_msg[0] && !p->fatal) {
        pool_fatal(p, p->fatal_msg);
        return;
    }
    if (p->flush_pending)
        tp_pool_flush(p);
}

static void slot_flush_later(tp_slot_t *s)
{
    tp_pool_t *p = s->pool;
    s->unflushed = true;
    if (!p->flush_pending) {
        p->flush_pending = true;
        event_active(p->ev_flush, 0, 0);
    }
}

/* The attempt ends: fill in the failure, hand it back. */
static void attempt_fail(tp_attempt_t *a, tp_kind_t kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void attempt_fail(tp_attempt_t *a, tp_kind_t kind, const char *fmt, ...)
{
    a->ok = false;
    a->kind = kind;
    snprintf(a->kind_name, sizeof a->kind_name, "%s", tp_kind_name(kind));
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(a->message);
    a->message = strdup(msg);
    a->ended_us = tp_now_us();
}

static void slot_become_idle(tp_slot_t *s)
{
    s->state = SLOT_IDLE;
    s->pool->idle++;
}

/*
 * After a reply of a's tool: whether its worker has served its time: it
 * has answered as many calls as its cap (--recycle-after, or the lowest
 * worker.max_calls of the tools it has run), or a's tool sets max_rss and
 * the worker holds that much resident, read from /proc after the reply
 * (only then: a read of /proc costs some microseconds). It is then
 * replaced between calls, never during one: it takes no more calls, and
 * its pipe is closed once those it holds are done (it exits at EOF).
 */
static bool slot_served(const tp_slot_t *s, const tp_attempt_t *a)
{
    const tp_policy_t *pol = &a->tool->policy;
    if (s->call_cap && s->calls >= s->call_cap)
        return true;
    if (pol->worker_max_rss) {
        uint64_t rss = tp_proc_rss(s->pid);
        if (rss >= pol->worker_max_rss)
            return true;
    }
    return false;
}

/* Takes a Reply off the pipe into the slot's attempt. */
static void slot_reply(tp_slot_t *s, const Toolpool__Reply *r)
{
    tp_pool_t *p = s->pool;
    tp_attempt_t *a = s->attempt;
    evtimer_del(s->ev_timer);
    a->ended_us = tp_now_us();
    a->ok = r->ok;
    a->cost = r->cost;
    a->retry_after_ms = r->retry_after_ms;
    if (r->ok) {
        a->kind = TP_KIND_OK;
        a->result = malloc(r->result.len + 1);
        if (a->result) {
            memcpy(a->result, r->result.data, r->result.len);
            a->result[r->result.len] = 0;
            a->result_len = r->result.len;
        } else {
            attempt_fail(a, TP_KIND_SERVER_ERROR, "out of memory for the result");
        }
    } else {
        /* The kind as the tool gave it: the engine decides what it may claim. */
        a->kind = tp_kind_from_name(r->kind);
        a->from_tool = true;
        snprintf(a->kind_name, sizeof a->kind_name, "%s", r->kind[0] ? r->kind : "ToolError");
        a->message = strdup(r->message);
    }
    if (!isfinite(a->cost) || a->cost < 0)
        a->cost = 0;
    s->attempt = NULL;
    s->calls++;
    s->crash_streak = 0;
    p->busy--;
    if (!s->retiring && slot_served(s, a))
        s->retiring = true;
    if (s->queued > 0) {
        /* The worker has moved on to the next one: its clock starts now. */
        tp_attempt_t *next = s->queue[0];
        memmove(s->queue, s->queue + 1, (size_t)--s->queued * sizeof s->queue[0]);
        s->attempt = next;
        next->started_us = a->ended_us;
        /* It waited: what is left of its deadline may now be less than its timeout. */
        if (next->limit_us && next->limit_us < next->started_us + next->timeout_us)
            next->timeout_us = next->limit_us > next->started_us ? next->limit_us - next->started_us : 1;
        deadline_arm(s, next, next->started_us);
        p->o.done_cb(p->o.ctx, a);
        if (p->pipeline_room_cb_needed)
            p->o.idle_cb(p->o.ctx);
        return;
    }
    bool recycle = s->retiring;
    if (s->dead)
        s->state = SLOT_STOPPING;
    else if (p->shutting_down || recycle)
        slot_stop(s, p->shutting_down ? WHY_SHUTDOWN : WHY_RECYCLE, 0);
    else
        slot_become_idle(s);
    p->o.done_cb(p->o.ctx, a);
    if (s->state == SLOT_IDLE && !p->shutting_down)
        p->o.idle_cb(p->o.ctx);
}

/*
 * Handles one whole frame from a worker. Returns -1 when the frame breaks
 * the protocol (the caller kills the worker).
 */
static int slot_frame(tp_slot_t *s, const uint8_t *body, uint32_t len)
{
    tp_pool_t *p = s->pool;
    Toolpool__Reply plain;
    Toolpool__WorkerFrame plain_wf = TOOLPOOL__WORKER_FRAME__INIT, *wf = &plain_wf;
    if (tp_reply_decode_plain(body, len, &plain)) {
        plain_wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_REPLY;
        plain_wf.reply = &plain;
    } else {
        wf = toolpool__worker_frame__unpack(&p->arena.allocator, len, body);
    }
    if (wf == NULL) {
        tp_arena_reset(&p->arena);
        snprintf(s->detail, sizeof s->detail, "garbage frame (%u bytes) from worker %d", len, (int)s->pid);
        return -1;
    }
    int rc = 0;
    if (s->why != WHY_NONE) {
        /* Stopping: whatever it says now is too late. */
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_HELLO && s->state == SLOT_STARTING) {
        if (wf->hello->protocol != TOOLPOOL__PROTOCOL__PROTOCOL_VERSION) {
            snprintf(s->detail, sizeof s->detail, "worker speaks protocol %u, supervisor %u", wf->hello->protocol,
                     (unsigned)TOOLPOOL__PROTOCOL__PROTOCOL_VERSION);
            rc = -1;
        } else {
            evtimer_del(s->ev_timer);
            s->start_failures = 0;
            s->said_hello = true;
            slot_become_idle(s);
            if (!p->shutting_down)
                p->o.idle_cb(p->o.ctx);
            else
                slot_stop(s, WHY_SHUTDOWN, 0);
        }
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_NOTICE) {
        /* Only while its attempt runs, and only when someone listens: else it is too late, and dropped. */
        if (s->state == SLOT_BUSY && wf->notice->seq == s->attempt->seq && s->attempt->notify && p->o.notice_cb)
            p->o.notice_cb(p->o.ctx, s->attempt, wf->notice->method, wf->notice->params.data, wf->notice->params.len);
    } else if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY && s->state == SLOT_BUSY &&
               wf->reply->seq == s->attempt->seq) {
        uint64_t killed = tp_deadline_disarm(p->deadline, s->index);
        if (killed)
            slot_deadline(s, killed); /* the KILL went out first: too late */
        else
            slot_reply(s, wf->reply);
    } else {
        snprintf(s->detail, sizeof s->detail, "unexpected frame (case %d) from worker %d", (int)wf->body_case,
                 (int)s->pid);
        rc = -1;
    }
    tp_arena_reset(&p->arena);
    return rc;
}

/* Parses every whole frame buffered from the worker. -1 on a protocol error. */
static int slot_parse(tp_slot_t *s)
{
    for (;;) {
        const uint8_t *body;
        uint32_t len;
        int rc = tp_frame_peek(&s->in, s->pool->o.max_frame, &body, &len);
        if (rc == TP_EAGAIN)
            return 0;
        if (rc == TP_E2BIG) {
            snprintf(s->detail, sizeof s->detail, "oversized frame from worker %d (limit %u bytes)", (int)s->pid,
                     s->pool->o.max_frame);
            return -1;
        }
        int frc = slot_frame(s, body, len);
        if (s->reply_fd < 0)
            return 0; /* the slot was torn down under us */
        tp_buf_consume(&s->in, TP_FRAME_HEADER + len);
        if (frc < 0)
            return -1;
    }
}

/* Reads what the worker sent. EOF: the worker is going; make sure it goes. */
static void read_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_slot_t *s = arg;
    ssize_t n = tp_buf_read_fd(&s->in, s->reply_fd);
    if (n == TP_EAGAIN || n == TP_EINTR)
        return;
    if (n <= 0) {
        /*
         * EOF: the worker is dying (its SIGCHLD will say how) or has closed
         * its pipe and lingers; the latter is killed after a grace.
         */
        event_del(s->ev_read);
        if (s->why == WHY_NONE && !s->eof) {
            s->eof = true;
            timer_arm(s, EOF_LINGER_US);
        }
        return;
    }
    if (slot_parse(s) < 0)
        slot_stop(s, WHY_PROTOCOL, SIGKILL);
}

/*
 * Asks a worker to go: sig 0 closes its call pipe (it exits at EOF),
 * otherwise the signal goes to its whole process group. With a TERM, a KILL
 * follows after the attempt's tool's kill_grace. Returns kill's result (0
 * with sig 0).
 */
static int slot_stop(tp_slot_t *s, stop_why_t why, int sig)
{
    tp_pool_t *p = s->pool;
    if (s->state == SLOT_IDLE)
        p->idle--;
    if (s->why == WHY_NONE)
        s->why = why;
    s->state = SLOT_STOPPING;
    evtimer_del(s->ev_timer);
    if (sig == 0) {
        if (s->unflushed)
            slot_flush_now(s); /* the Calls it holds come before its EOF */
        if (s->ev_write)
            event_del(s->ev_write);
        if (s->call_fd >= 0)
            close(s->call_fd);
        s->call_fd = -1;
        /* One that does not leave at EOF (stuck before its Hello, say) is killed. */
        s->term_sent = true;
        timer_arm(s, EOF_GRACE_US);
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
    if (sig == SIGTERM) {
        s->term_sent = true;
        timer_arm(s, s->attempt ? s->attempt->tool->policy.kill_grace_us : 0);
    }
    return rc;
}

/* The attempts queued on a slot whose running attempt ended without a Reply. */
typedef struct {
    int n;
    tp_attempt_t *a[PIPE_MAX];
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
    attempt_fail(a, TP_KIND_TIMEOUT, "%s exceeded %.3gs", a->tool->name, (double)a->timeout_us / 1e6);
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
static void slot_deadline(tp_slot_t *s, uint64_t killed_us)
{
    tp_pool_t *p = s->pool;
    uint64_t grace = s->attempt->tool->policy.kill_grace_us;
    p->stats.timeouts++;
    if (killed_us) {
        s->why = WHY_TIMEOUT;
        s->state = SLOT_STOPPING;
        evtimer_del(s->ev_timer);
        slot_timed_out(s, killed_us);
        return;
    }
    /* A KILL that failed to go out ends the attempt at the reap instead. */
    if (slot_stop(s, WHY_TIMEOUT, grace > 0 ? SIGTERM : SIGKILL) == 0 && grace == 0)
        slot_timed_out(s, 0);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_slot_t *s = arg;
    tp_pool_t *p = s->pool;
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
                timer_arm(s, (d > now ? d - now : 0) + 50);
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
        uint64_t now = tp_now_us();
        if (now < s->deadline_us) {
            /* Woken early on purpose: short sleeps until the deadline. */
            uint64_t left = s->deadline_us - now;
            timer_arm(s, left > TP_DEADLINE_LEAD_US   ? left - TP_DEADLINE_LEAD_US
                         : left > TP_DEADLINE_STEP_US ? TP_DEADLINE_STEP_US
                                                      : left);
            break;
        }
        slot_deadline(s, tp_deadline_disarm(p->deadline, s->index));
        break;
    }
    case SLOT_STOPPING:
        if (s->term_sent && slot_kill(s) == 0 && s->why == WHY_TIMEOUT)
            slot_timed_out(s, 0);
        break;
    case SLOT_IDLE:
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
    char how[96];
    describe_status(how, sizeof how, status);

    if (was == SLOT_IDLE)
        p->idle--;
    if (a != NULL)
        p->busy--;
    queued_t q;
    slot_take_queue(s, &q);
    slot_close_fds(s);
    evtimer_del(s->ev_timer);
    s->attempt = NULL;
    s->state = SLOT_DOWN;
    s->why = WHY_NONE;
    s->term_sent = false;
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
    if (crash || why == WHY_HELLO)
        p->stats.crashed++;

    if (a != NULL) {
        if (why == WHY_TIMEOUT)
            attempt_fail(a, TP_KIND_TIMEOUT, "%s exceeded %.3gs", a->tool->name, (double)a->timeout_us / 1e6);
        else if (why == WHY_SHUTDOWN)
            attempt_fail(a, TP_KIND_CANCELLED, "%s cancelled: the run was stopped", a->tool->name);
        else if (why == WHY_CANCEL)
            attempt_fail(a, TP_KIND_CANCELLED, "%s cancelled while it ran", a->tool->name);
        else if (why == WHY_PROTOCOL)
            attempt_fail(a, TP_KIND_WORKER_CRASHED, "%s: protocol error: %s", a->tool->name, s->detail);
        else if (cpu_limit)
            attempt_fail(a, TP_KIND_RESOURCE_LIMIT, "%s exceeded its cpu limit (%llus of CPU time; killed by SIGXCPU)",
                         a->tool->name, (unsigned long long)((a->tool->policy.limit_cpu_us + 999999u) / 1000000u));
        else
            attempt_fail(a, TP_KIND_WORKER_CRASHED, "worker running %s %s", a->tool->name, how);
    }

    if (p->shutting_down) {
        /* no respawn */
    } else if (start_failure) {
        s->start_failures++;
        if (s->start_failures >= START_FAILURES_MAX && !p->fatal) {
            char msg[512];
            snprintf(msg, sizeof msg, "worker %s cannot start: %s (%u tries)", p->o.worker_path,
                     why == WHY_HELLO || why == WHY_PROTOCOL ? s->detail : how, s->start_failures);
            pool_fatal(p, msg);
        } else if (!p->fatal) {
            timer_arm(s, 100000u * s->start_failures);
        }
    } else if (crash) {
        s->crash_streak++;
        uint64_t delay = s->crash_streak <= 1 ? 0 : 10000u << (s->crash_streak < 9 ? s->crash_streak - 2 : 7);
        timer_arm(s, delay > CRASH_DELAY_MAX_US ? CRASH_DELAY_MAX_US : delay);
    } else {
        /* At once, but after this turn has recorded the attempt and written it out. */
        timer_arm(s, 0);
    }

    if (a != NULL)
        p->o.done_cb(p->o.ctx, a);
    pool_hand_back(p, &q);
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
static void chld_cb(evutil_socket_t fd, short what, void *arg)
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

/*
 * Starts a worker in slot s: posix_spawn (vfork speed) with its own process
 * group, default signal dispositions, an empty mask, /dev/null on stdin and
 * stdout, the two pipes on fds 3 and 4, and every other fd closed.
 *
 * Each of those settings is asked for by a call that can fail (ENOMEM). A
 * worker started without one (every fd closed, a group of its own) must not
 * start at all: a failed setting is a failed spawn, logged each time with
 * what failed, as nginx logs a failed fork, and throttled as a crash at
 * start-up is. The reply pipe's event is set up before the spawn, so that
 * nothing that fails after it has to take a worker back.
 */
static void slot_spawn(tp_slot_t *s)
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

    if (pipe_high(call_p) < 0 || pipe_high(reply_p) < 0) {
        rc = errno;
        goto fail;
    }
    what = "event_new";
    s->ev_read = event_new(p->base, reply_p[0], EV_READ | EV_PERSIST, read_cb, s);
    s->ev_write = event_new(p->base, call_p[1], EV_WRITE | EV_PERSIST, write_cb, s);
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
    SPAWN_STEP(posix_spawn_file_actions_addclosefrom_np, &fa, 5);
    SPAWN_STEP(posix_spawnattr_init, &attr);
    attr_made = true;
    SPAWN_STEP(posix_spawnattr_setflags, &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    SPAWN_STEP(posix_spawnattr_setpgroup, &attr, 0);
    SPAWN_STEP(posix_spawnattr_setsigdefault, &attr, &all);
    SPAWN_STEP(posix_spawnattr_setsigmask, &attr, &none);
    char *argv[] = {(char *)p->o.worker_path, "--max-frame", p->max_frame_arg, NULL};
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
    timer_arm(s, p->o.hello_timeout_us);
    return;
fail:
    tp_log_error("%s failed while starting worker slot %d (%s): %s", what, s->index, p->o.worker_path, strerror(rc));
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
    if (s->start_failures >= START_FAILURES_MAX) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot start worker %s: %s: %s", p->o.worker_path, what, strerror(rc));
        pool_fatal(p, msg);
        return;
    }
    timer_arm(s, 100000u * s->start_failures);
}

tp_pool_t *tp_pool_new(struct event_base *base, const tp_pool_opts_t *opts)
{
    tp_pool_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->base = base;
    p->o = *opts;
    if (p->o.workers < 1)
        p->o.workers = 1;
    if (p->o.max_frame == 0)
        p->o.max_frame = TP_FRAME_DEFAULT_MAX;
    if (p->o.hello_timeout_us == 0)
        p->o.hello_timeout_us = 10000000u;
    if (p->o.pipeline < 1)
        p->o.pipeline = 1;
    if (p->o.pipeline > PIPE_MAX)
        p->o.pipeline = PIPE_MAX;
    p->pipeline_room_cb_needed = p->o.pipeline > 1;
    snprintf(p->max_frame_arg, sizeof p->max_frame_arg, "%u", p->o.max_frame);
    p->n = p->o.workers;
    p->slots = calloc((size_t)p->n, sizeof *p->slots);
    p->tree = calloc(1, sizeof *p->tree);
    p->deadline = p->slots && p->tree ? tp_deadline_new(p->n) : NULL;
    if (p->deadline == NULL) {
        free(p->tree);
        free(p->slots);
        free(p);
        return NULL;
    }
    bool made = true;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        s->pool = p;
        s->index = i;
        s->call_fd = s->reply_fd = -1;
        s->ev_timer = evtimer_new(base, timer_cb, s);
        made = made && s->ev_timer != NULL;
    }
    p->ev_chld = evsignal_new(base, SIGCHLD, chld_cb, p);
    p->ev_flush = event_new(base, -1, 0, flush_cb, p);
    tp_arena_init(&p->arena, 4096);
    if (!made || p->ev_chld == NULL || p->ev_flush == NULL) {
        tp_log_error("cannot make the pool's events: out of memory");
        tp_pool_free(p);
        return NULL;
    }
    return p;
}

/* The loop hears from the deadline thread: end the attempts it killed. */
static void deadline_cb(void *arg)
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

int tp_pool_start(tp_pool_t *p)
{
    if (access(p->o.worker_path, X_OK) < 0) {
        int rc = tp_errno(errno);
        tp_log_error("worker program %s: %s", p->o.worker_path, tp_strerror(rc));
        return rc;
    }
    if (p->ev_chld == NULL || p->ev_flush == NULL || evsignal_add(p->ev_chld, NULL) < 0) {
        tp_log_error("cannot watch SIGCHLD");
        return TP_EIO;
    }
    tp_deadline_start(p->deadline, p->base, deadline_cb, p);
    for (int i = 0; i < p->n; i++)
        slot_spawn(&p->slots[i]);
    return 0;
}

int tp_pool_idle(const tp_pool_t *p)
{
    return p->shutting_down ? 0 : p->idle;
}

int tp_pool_busy(const tp_pool_t *p)
{
    return p->busy;
}

/*
 * The busy worker with the shortest queue that may take one more attempt of
 * this depth: each attempt it holds allows one more, it is not being
 * stopped or retired, and the attempt will not carry it past its recycling
 * count.
 */
static tp_slot_t *pipeline_slot(tp_pool_t *p, int depth)
{
    tp_slot_t *best = NULL;
    if (p->o.pipeline <= 1 || p->shutting_down || depth <= 1)
        return NULL;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        int held = s->queued + 1;
        if (s->state != SLOT_BUSY || s->why != WHY_NONE || s->eof || held >= depth || held >= p->o.pipeline ||
            s->queued >= PIPE_MAX || s->attempt->depth <= held)
            continue;
        if (s->retiring || (s->call_cap && s->calls + 1 + (uint64_t)held > s->call_cap))
            continue;
        bool all = true;
        for (int k = 0; k < s->queued && all; k++)
            all = s->queue[k]->depth > held;
        if (all && (best == NULL || s->queued < best->queued))
            best = s;
    }
    return best;
}

bool tp_pool_room(const tp_pool_t *p, int depth)
{
    return pipeline_slot((tp_pool_t *)p, depth) != NULL;
}

uint64_t tp_pool_next_deadline(const tp_pool_t *p)
{
    uint64_t next = 0;
    for (int i = 0; i < p->n; i++) {
        const tp_slot_t *s = &p->slots[i];
        /*
         * One at EOF waits out its linger instead: its deadline no longer
         * stands. One the thread keeps is kept whatever the loop does.
         */
        if (s->state == SLOT_BUSY && s->why == WHY_NONE && !s->eof && !s->thread_keeps &&
            (next == 0 || s->deadline_us < next))
            next = s->deadline_us;
    }
    return next;
}

bool tp_pool_is_running(const tp_pool_t *p, const tp_attempt_t *a)
{
    for (int i = 0; i < p->n; i++) {
        const tp_slot_t *s = &p->slots[i];
        if (s->attempt == a)
            return true;
        for (int k = 0; k < s->queued; k++)
            if (s->queue[k] == a)
                return true;
    }
    return false;
}

/*
 * The tool's fields of a Call, packed at its first call, and its limits
 * (*tail; the CPU time in whole seconds, rounded up, as RLIMIT_CPU counts
 * it). NULL: out of memory.
 */
static const tp_buf_t *tool_head(tp_pool_t *p, const tp_tool_t *t, const tp_buf_t **tail)
{
    if (t->index >= p->n_heads) {
        size_t n = t->index + 1 > 2 * p->n_heads ? t->index + 1 : 2 * p->n_heads;
        tp_buf_t *h = realloc(p->heads, n * sizeof *h);
        if (h != NULL)
            p->heads = h;
        tp_buf_t *tl = h ? realloc(p->tails, n * sizeof *tl) : NULL;
        if (tl == NULL)
            return NULL;
        p->tails = tl;
        memset(h + p->n_heads, 0, (n - p->n_heads) * sizeof *h);
        memset(tl + p->n_heads, 0, (n - p->n_heads) * sizeof *tl);
        p->n_heads = n;
    }
    tp_buf_t *h = &p->heads[t->index];
    *tail = &p->tails[t->index];
    if (h->len == 0) {
        const tp_policy_t *pol = &t->policy;
        int adapter = t->adapter == TP_ADAPTER_PLUGIN ? TOOLPOOL__ADAPTER__ADAPTER_PLUGIN
                      : t->adapter == TP_ADAPTER_MCP  ? TOOLPOOL__ADAPTER__ADAPTER_MCP
                                                      : TOOLPOOL__ADAPTER__ADAPTER_EXEC;
        char **argv = t->adapter == TP_ADAPTER_MCP ? t->mcp_command : t->argv;
        size_t argc = 0;
        while (argv != NULL && argv[argc] != NULL)
            argc++;
        uint64_t cpu_s = (pol->limit_cpu_us + 999999u) / 1000000u;
        uint32_t cpu = cpu_s > UINT32_MAX ? UINT32_MAX : (uint32_t)cpu_s;
        if (tp_call_head_pack(h, t->name, adapter, argv, argc, t->plugin_path, pol->max_output) < 0 ||
            tp_call_tail_pack(&p->tails[t->index], pol->limit_memory, cpu, pol->limit_files, t->mcp_tool, t->mcp_env,
                              t->mcp_cwd, t->cwd) < 0) {
            tp_buf_reset(h);
            return NULL;
        }
    }
    return h;
}

int tp_pool_submit(tp_pool_t *p, tp_attempt_t *a)
{
    tp_slot_t *s = NULL;
    for (int i = 0; i < p->n && s == NULL; i++)
        if (p->slots[i].state == SLOT_IDLE && p->slots[i].why == WHY_NONE)
            s = &p->slots[i];
    if (s == NULL)
        s = pipeline_slot(p, a->depth);
    if (s == NULL || p->shutting_down)
        return TP_EAGAIN;
    const tp_buf_t *tail = NULL, *head = tool_head(p, a->tool, &tail);
    a->seq = ++s->seq;
    a->requeue = false;
    tp_call_frame_t call = {
        .head = head,
        .tail = tail,
        .seq = a->seq,
        .args = (const uint8_t *)a->args,
        .args_len = a->args_len,
        .call_id = a->call_id,
        .job = a->job,
        .step = a->step,
        .attempt = a->number,
        .notify = a->notify,
    };
    a->started_us = tp_now_us();
    a->result = NULL;
    a->message = NULL;
    a->retry_after_ms = -1;
    int rc = head != NULL ? tp_call_frame_append(&s->out, &call, p->o.max_frame) : TP_ENOMEM;
    if (rc != 0) {
        if (rc == TP_E2BIG)
            attempt_fail(a, TP_KIND_BAD_ARGUMENTS, "the call does not fit in a frame of %u bytes", p->o.max_frame);
        else
            attempt_fail(a, TP_KIND_SERVER_ERROR, "out of memory for the call's frame");
        return rc == TP_E2BIG ? TP_E2BIG : TP_ENOMEM;
    }
    p->busy++;
    uint64_t max_calls = a->tool->policy.worker_max_calls;
    if (max_calls && (s->call_cap == 0 || max_calls < s->call_cap))
        s->call_cap = max_calls;
    if (s->state == SLOT_BUSY) {
        a->started_us = 0; /* it starts when the one before it ends */
        s->queue[s->queued++] = a;
    } else {
        s->attempt = a;
        s->state = SLOT_BUSY;
        p->idle--;
        deadline_arm(s, a, a->started_us);
    }
    slot_flush_later(s);
    return 0;
}

static void closed_now_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_pool_t *p = arg;
    if (!p->closed && p->live == 0) {
        p->closed = true;
        p->o.closed_cb(p->o.ctx);
    }
}

void tp_pool_shutdown(tp_pool_t *p, bool kill_busy)
{
    if (p->shutting_down && !kill_busy)
        return;
    p->shutting_down = true;
    p->kill_busy = kill_busy;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        switch (s->state) {
        case SLOT_DOWN:
            evtimer_del(s->ev_timer);
            break;
        case SLOT_STARTING:
            /* A worker stuck before its Hello may never read its EOF. */
            slot_stop(s, WHY_SHUTDOWN, kill_busy ? SIGKILL : 0);
            break;
        case SLOT_IDLE:
            slot_stop(s, WHY_SHUTDOWN, 0);
            break;
        case SLOT_BUSY:
            if (kill_busy)
                slot_stop(s, WHY_SHUTDOWN, SIGKILL);
            break;
        case SLOT_STOPPING:
            if (kill_busy)
                slot_kill(s);
            break;
        }
    }
    if (p->live == 0 && event_base_once(p->base, -1, EV_TIMEOUT, closed_now_cb, p, NULL) < 0) {
        /* Said from here, then, rather than never. */
        tp_log_error("cannot defer the pool's closing: out of memory");
        closed_now_cb(-1, 0, p);
    }
}

int tp_pool_cancel(tp_pool_t *p, tp_attempt_t *a)
{
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        if (s->attempt != a || s->state != SLOT_BUSY)
            continue;
        tp_deadline_disarm(p->deadline, s->index); /* the deadline thread must not end it as a Timeout */
        return slot_stop(s, WHY_CANCEL, SIGKILL) == 0 ? 0 : TP_ENOENT;
    }
    return TP_ENOENT;
}

const tp_pool_stats_t *tp_pool_stats(const tp_pool_t *p)
{
    return &p->stats;
}

/*
 * Frees the pool. Any worker still alive is killed and reaped here, so a
 * caller that stops early still leaves no zombie behind.
 */
void tp_pool_free(tp_pool_t *p)
{
    if (p == NULL)
        return;
    tp_deadline_free(p->deadline);
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        if (s->pid > 0) {
            slot_kill(s);
            while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        slot_close_fds(s);
        if (s->ev_timer)
            event_free(s->ev_timer);
        tp_buf_free(&s->in);
        tp_buf_free(&s->out);
    }
    if (p->ev_chld)
        event_free(p->ev_chld);
    if (p->ev_flush)
        event_free(p->ev_flush);
    tp_arena_free(&p->arena);
    free(p->tree);
    for (size_t i = 0; i < p->n_heads; i++) {
        tp_buf_free(&p->heads[i]);
        tp_buf_free(&p->tails[i]);
    }
    free(p->heads);
    free(p->tails);
    free(p->slots);
    free(p);
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
