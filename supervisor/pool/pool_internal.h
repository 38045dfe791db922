/*
 * What the files of the pool share (pool.h is its API), private to
 * supervisor/pool/: no file outside it includes this.
 *
 *   pool.c      the core: the pool's life, its public calls (submit,
 *               cancel, shutdown, the counts), the slot's one timer, an
 *               attempt's failure filled in
 *   spawn.c     a worker started: its pipes, posix_spawn, its fds closed
 *               again; the worker program found
 *   pipes.c     what goes over a slot's pipes: Calls packed (the tools'
 *               heads) and written once a turn; Hello, Reply and Notice
 *               frames read and handled
 *   reap.c      a worker's end: stopped, killed, timed out at its deadline
 *               (the loop's timer, the deadline thread's kill), reaped on
 *               SIGCHLD, and the slot respawned
 *   deadline.c  the deadline thread (deadline.h)
 *
 * The functions shared here are named pool_* (of the pool) or slot_* (of
 * one slot); each file's own are static.
 */
#ifndef TP_POOL_INTERNAL_H
#define TP_POOL_INTERNAL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "buf.h"
#include "deadline.h"
#include "frame.h"
#include "pool.h"
#include "proctree.h"
#include "startboard.h"

/* Attempts one worker may hold at once, the running one included. */
#define TP_POOL_PIPE_MAX 64
/*
 * An http tool's worker ends a call's transfer at its timeout itself and
 * answers Timeout, keeping its connections and its other calls: the kill
 * comes this much later, as the backstop for a worker that does not.
 */
#define TP_POOL_HTTP_GRACE_US 1000000u
/*
 * An exec tool's attempt has this long (or its timeout, when longer) for its
 * process to start (the worker's mark on the start board, startboard.h);
 * its timeout counts from the start.
 */
#define TP_POOL_SPAWN_LIMIT_US 10000000u
/* Workers in a row that cannot start (spawn fails, or dies before its Hello) stop the pool. */
#define TP_POOL_START_FAILURES_MAX 5

/*
 * A slot's state, and what each event does in it: the table the code's
 * switches follow. "KILL" is slot_kill: the group stopped,
 * every process the worker started killed, then the group; the stop's
 * reason (why) is the first one given and is kept until the reap. While
 * the pool shuts down, submit is TP_EAGAIN in every state, and nothing
 * respawns. The deadline thread's kill (pool_deadline_cb, reap.c) only
 * ever concerns a BUSY slot.
 *
 * DOWN: no process; the timer, when armed, is the respawn.
 *   frame, EOF  none (no pipe)
 *   timer     respawn -> STARTING; held while a deadline the loop keeps is
 *             under 2 ms away (10 ms at most); a spawn that fails stays
 *             DOWN, retried after 100 ms x failures (the 5th: fatal_cb)
 *   reaped    none (no process)
 *   submit    not chosen          cancel  TP_ENOENT
 *   shutdown  the respawn timer is cancelled
 *
 * STARTING: spawned, no Hello yet; the timer is the hello timeout.
 *   Hello     right protocol: -> IDLE, idle_cb (shutting down: EOF ->
 *             STOPPING); another protocol: KILL (protocol) -> DYING
 *   Notice    dropped             Reply, garbage  KILL (protocol) -> DYING
 *   EOF       eof; the timer becomes its 1 s linger, then KILL (protocol)
 *   timer     KILL (hello) -> DYING
 *   reaped    -> DOWN, a start failure (not when SIGKILLed from outside:
 *             a crash): respawn after 100 ms x failures, the 5th: fatal_cb
 *   submit    not chosen          cancel  TP_ENOENT
 *   shutdown  EOF -> STOPPING; kill_busy: KILL (shutdown) -> DYING
 *
 * IDLE: said Hello, holds no attempt; no timer.
 *   Notice    dropped             Hello, Reply, garbage  KILL (protocol) -> DYING
 *   EOF       eof; 1 s linger, then KILL (protocol)
 *   timer     none (but the linger)
 *   reaped    -> DOWN, a crash: respawn at once, then throttled
 *   submit    -> BUSY: the first IDLE slot takes it, its deadline armed
 *             (an IDLE slot at EOF too: the deadline replaces its linger)
 *   cancel    TP_ENOENT           shutdown  EOF -> STOPPING
 *
 * BUSY: an attempt runs, more may be queued behind it; the timer is its
 * deadline (the deadline thread's fallback, or the loop's own). Or, in
 * flight (attempt NULL, n_flight > 0): http attempts run side by side,
 * each ended by its own Reply, in any order; the timer is the backstop,
 * the soonest of their deadlines plus TP_POOL_HTTP_GRACE_US (the worker
 * keeps the deadlines itself), and the deadline thread keeps none. What
 * differs in flight:
 *   Reply     a seq it holds: that attempt ends; none left: -> IDLE, or
 *             EOF -> STOPPING (retiring, shutting down); the backstop
 *             re-armed. Another seq: KILL (protocol) -> DYING
 *   timer     the backstop: KILL (timeout) -> DYING; the attempts past
 *             theirs end Timeout now, the others WorkerCrashed
 *   reaped    every attempt it held ends (WorkerCrashed; Cancelled after
 *             a shutdown)
 *   submit    another http attempt, while it holds fewer than the tool's
 *             max_in_flight and is not retiring or at EOF
 *   cancel    a Cancel frame; the attempt's backstop becomes now + grace
 *   Reply     its seq: the attempt ends (Timeout instead when the thread's
 *             KILL went out first); the next queued one starts, its
 *             deadline armed, BUSY; none queued: -> IDLE, or EOF ->
 *             STOPPING (retiring: recycle; shutting down: shutdown).
 *             Another seq: KILL (protocol) -> DYING
 *   Notice    its seq, notify, a notice_cb: handed on; else dropped
 *   Hello, garbage  KILL (protocol) -> DYING
 *   EOF       eof: the timer becomes its 1 s linger, then KILL (protocol);
 *             nothing is queued on it; its deadline leaves the loop's list
 *   timer     early: short sleeps; at the deadline: no grace: KILL ->
 *             DYING, Timeout now, the queue handed back; a grace: TERM
 *             (mcp: the worker alone) -> STOPPING
 *   thread kill  -> DYING, Timeout as of the stop, the queue handed back
 *   reaped    a Reply left in the pipe still counts; then WorkerCrashed
 *             (ResourceLimit: SIGXCPU under a cpu limit), the queue handed
 *             back, -> DOWN, respawn at once, then throttled; after the
 *             thread's KILL: as a thread kill first, then as DYING
 *   submit    queued behind, when pipelining, the depths, eof, retiring
 *             and the call cap allow; else not chosen
 *   cancel    its running attempt: KILL (cancel) -> DYING; Cancelled at the reap
 *   shutdown  runs on (stopped at its last Reply); kill_busy: KILL
 *             (shutdown) -> DYING, Cancelled at the reap
 *
 * STOPPING: told to go by EOF (its call pipe closed) or TERM; the timer
 * sends the KILL after EOF_GRACE_US or the tool's kill_grace.
 *   frames    too late: ignored; garbage: KILL -> DYING
 *   EOF       none
 *   timer     KILL -> DYING; a timeout's attempt ends Timeout once it is out
 *   reaped    -> DOWN; its attempt, if any, ends by why (Timeout, Cancelled,
 *             WorkerCrashed); respawn at once after a timeout, recycle or
 *             cancel, throttled after a protocol error or no Hello (as a
 *             start failure when it never said Hello)
 *   submit    not chosen          cancel  TP_ENOENT
 *   shutdown  kill_busy: KILL now; the state and its timer stay
 *
 * DYING: the KILL has gone out (or failed: the attempt then ends at the
 * reap), or the worker was reaped while a Reply was read; no timer.
 *   frames    too late: ignored; garbage: KILL again
 *   EOF, timer  none
 *   reaped    as STOPPING
 *   submit    not chosen          cancel  TP_ENOENT
 *   shutdown  kill_busy: KILL again
 *
 * The flags beside the state are not states: eof (the worker closed its
 * reply pipe) can befall STARTING, IDLE and BUSY alike, and a BUSY slot at
 * EOF still holds its attempt; retiring (a BUSY worker takes no more, and
 * goes once its queue is done) is a want, as s6-supervise keeps
 * flagwantup beside its state; said_hello is the worker's history, read at the reap
 * from whatever state it left; dead marks the reap's reading of the last
 * frames, in which a Reply is handled as in BUSY; unflushed and
 * thread_keeps say which Calls await the flush and who keeps the deadline.
 */
typedef enum {
    SLOT_DOWN,     /* no process; maybe waiting for a throttled respawn */
    SLOT_STARTING, /* spawned, no Hello yet */
    SLOT_IDLE,
    SLOT_BUSY,
    SLOT_STOPPING, /* told to go (EOF or TERM): the timer sends SIGKILL */
    SLOT_DYING,    /* SIGKILL sent (or the worker is gone): only the reap is left */
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
    /*
     * ev_timer is the fallback of a deadline the thread keeps, left armed
     * from attempt to attempt (slot_fallback_arm): it fires at timer_at, no
     * later than the running attempt's fallback is due, maybe for one ended.
     */
    bool timer_lazy;
    uint64_t timer_at;
    tp_buf_t in;
    tp_buf_t out;
    slot_state_t state;
    stop_why_t why;
    bool dead; /* reaped; its last frames are being read */
    bool said_hello;
    bool eof;       /* its reply pipe reached EOF */
    bool unflushed; /* out holds Calls the flush event will write */
    bool retiring;  /* past a tool's worker.max_calls or max_rss: replaced once its queue is done */
    uint64_t calls;
    uint64_t call_cap; /* the most calls it may answer: --recycle-after, and the lowest
                          worker.max_calls of the tools it has been given; 0: no cap */
    uint64_t seq;
    tp_attempt_t *attempt;                 /* running now */
    uint64_t deadline_us;                  /* when the running attempt times out */
    uint64_t spawn_until;                  /* an exec attempt not known to have started: its spawn limit; else 0 */
    bool thread_keeps;                     /* the deadline thread keeps it (else the loop's timer) */
    uint64_t held_since_us;                /* a respawn put off for a deadline: since when */
    tp_attempt_t *queue[TP_POOL_PIPE_MAX]; /* sent after it, waiting their turn in the worker */
    int queued;
    int queue_min;         /* the lowest depth among the queued (slot_queue_push), when queued */
    int queue_at_min;      /* how many of them have it */
    tp_attempt_t **flight; /* http or mcp attempts running side by side (attempt is NULL then) */
    /*
     * The MCP servers (tp_tool_t.mcp_server_id; -1: none) whose sessions
     * its worker holds, as the worker keeps them (worker/mcp.c's
     * server_for): a call of one not there takes an empty place, else the
     * place used longest ago.
     */
    int sessions[TP_WORKER_MCP_SESSIONS];
    uint64_t session_used[TP_WORKER_MCP_SESSIONS];
    uint64_t session_clock; /* counts the MCP calls sent, to order session_used */
    int n_sessions;
    int n_flight;
    int flight_cap; /* what flight has room for */
    unsigned crash_streak;
    unsigned start_failures;
    char detail[160]; /* what went wrong, for the attempt's message */
} tp_slot_t;

/* Forgets the MCP sessions s's worker held: a new worker holds none. */
void tp_slot_sessions_clear(tp_slot_t *s);

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
    char fatal_msg[256];          /* found where fatal_cb cannot be called: pool_flush_cb (pipes.c) calls it */
    bool closed;                  /* closed_cb has fired */
    bool pipeline_room_cb_needed; /* a queue shrank: the caller may submit more */
    tp_pool_stats_t stats;
    char max_frame_arg[16];
    /*
     * The deadline thread (deadline.h): it sends SIGKILL at each deadline
     * that needs no grace, whatever the loop is doing (an fsync, a spawn),
     * and tells the loop, which ends the attempt in pool_deadline_cb (reap.c).
     */
    tp_deadline_t *deadline;
    tp_proctree_t *tree; /* the loop's scratch for killing a worker's processes */
    /* The start board (startboard.h): a line a slot, which its worker marks as its exec tools start. */
    tp_start_line_t *starts;
    int starts_fd; /* -1: no board (the clock then starts at the send) */
};

/* pool.c */
void pool_fatal(tp_pool_t *p, int rc, const char *msg);
void slot_timer_arm(tp_slot_t *s, uint64_t us);
/* Disarms the slot's timer, whatever it was armed for. */
static inline void slot_timer_stop(tp_slot_t *s)
{
    evtimer_del(s->ev_timer);
    s->timer_lazy = false;
}
void pool_attempt_fail(tp_attempt_t *a, tp_kind_t kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* spawn.c */
void slot_spawn(tp_slot_t *s);
void slot_close_fds(tp_slot_t *s);

/* pipes.c */
const tp_buf_t *pool_tool_head(tp_pool_t *p, const tp_tool_t *t, const tp_buf_t **tail);
void slot_flush_now(tp_slot_t *s);
void slot_flush_later(tp_slot_t *s);
int slot_parse(tp_slot_t *s);
void slot_read_cb(evutil_socket_t fd, short what, void *arg);
void slot_write_cb(evutil_socket_t fd, short what, void *arg);
void pool_flush_cb(evutil_socket_t fd, short what, void *arg);

/* reap.c */
void slot_flight_arm(tp_slot_t *s);
int slot_kill(tp_slot_t *s);
int slot_stop(tp_slot_t *s, stop_why_t why, int sig);
void slot_deadline_arm(tp_slot_t *s, const tp_attempt_t *a, uint64_t now);
void slot_deadline(tp_slot_t *s, uint64_t killed_us);
void slot_timed_out_fail(tp_slot_t *s, tp_attempt_t *a);
void slot_timer_cb(evutil_socket_t fd, short what, void *arg);
void pool_chld_cb(evutil_socket_t fd, short what, void *arg);
void pool_deadline_cb(void *arg);

/*
 * The queue behind a slot's running attempt, with the lowest depth among
 * its attempts kept as they come and go, so that finding a slot with room
 * (pipeline_slot) does not look at every queued attempt of every slot.
 */
static inline void slot_queue_push(tp_slot_t *s, tp_attempt_t *a)
{
    if (s->queued == 0 || a->depth < s->queue_min) {
        s->queue_min = a->depth;
        s->queue_at_min = 1;
    } else if (a->depth == s->queue_min) {
        s->queue_at_min++;
    }
    s->queue[s->queued++] = a;
}

/* The first queued attempt, taken off; the queue must not be empty. */
static inline tp_attempt_t *slot_queue_pop(tp_slot_t *s)
{
    tp_attempt_t *a = s->queue[0];
    memmove(s->queue, s->queue + 1, (size_t)--s->queued * sizeof s->queue[0]);
    if (a->depth == s->queue_min && --s->queue_at_min == 0 && s->queued > 0) {
        s->queue_min = s->queue[0]->depth;
        for (int k = 0; k < s->queued; k++) {
            int d = s->queue[k]->depth;
            if (d < s->queue_min) {
                s->queue_min = d;
                s->queue_at_min = 0;
            }
            s->queue_at_min += d == s->queue_min;
        }
    }
    return a;
}

#endif
