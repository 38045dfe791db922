/*
 * The pool's core: its life (tp_pool_new, tp_pool_start, tp_pool_free),
 * its public calls, and what every file of it uses (the slot's one timer,
 * an attempt's failure filled in). The files of the pool and what they
 * share: pool_internal.h.
 *
 * Every slot moves through one small state machine (each state and event:
 * the table in pool_internal.h):
 *
 *   DOWN --spawn--> STARTING --Hello--> IDLE --submit--> BUSY --Reply--> IDLE
 *   STARTING, IDLE, BUSY --told to go: EOF or TERM--> STOPPING --timer: KILL--> DYING
 *   STARTING, IDLE, BUSY --KILL: deadline, garbage, cancel, no Hello--> DYING
 *   STOPPING, DYING (or any with a process) --reaped--> DOWN --timer--> respawn
 *
 * A slot leaves the living only through SIGCHLD. The attempt it held ends
 * when no process of it can run code of its own any more, so a retry never
 * runs beside the attempt it replaces: when the worker has been reaped, or,
 * at a deadline, as soon as SIGKILL has gone to every process the worker
 * started and to its whole process group (no process returns to user space
 * after that; one in the middle of a system call finishes that call, and
 * the reap follows on its own). A kill stops the group, kills the worker's
 * descendants that left it (setsid, daemons: slot_kill, reap.c), then the
 * group. The slot remembers why it stopped its worker (stop_why_t), so a
 * timeout kill, a recycle or a shutdown is never mistaken for a crash.
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
#include "pool_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

/* The pool cannot go on: fatal_cb, once. */
void pool_fatal(tp_pool_t *p, int rc, const char *msg)
{
    if (p->fatal)
        return;
    p->fatal = true;
    p->o.fatal_cb(p->o.ctx, rc, msg);
}

/*
 * The slot's one timer keeps its deadline, its hello timeout, its kill
 * grace and its respawn: a slot whose timer cannot be armed (libevent out
 * of memory) could hang an attempt past its deadline, or never respawn.
 * The pool stops then, from pool_flush_cb (pipes.c): the caller of
 * slot_timer_arm may be in the middle of handing out an attempt, no place
 * to shut the pool down.
 */
void slot_timer_arm(tp_slot_t *s, uint64_t us)
{
    tp_pool_t *p = s->pool;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u)};
    s->timer_lazy = false;
    if (evtimer_add(s->ev_timer, &tv) == 0)
        return;
    tp_log_error("pool.timer_failed", "worker slot %d (pid %d): cannot arm its timer", s->index, (int)s->pid);
    if (!p->fatal && !p->fatal_msg[0]) {
        snprintf(p->fatal_msg, sizeof p->fatal_msg, "cannot arm worker slot %d's timer: its deadlines cannot be kept",
                 s->index);
        event_active(p->ev_flush, 0, 0);
    }
}

/* The attempt ends: fill in the failure, hand it back. */
void pool_attempt_fail(tp_attempt_t *a, tp_kind_t kind, const char *fmt, ...)
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
    if (p->o.pipeline > TP_POOL_PIPE_MAX)
        p->o.pipeline = TP_POOL_PIPE_MAX;
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
        tp_slot_sessions_clear(s);
        s->call_fd = s->reply_fd = -1;
        s->ev_timer = evtimer_new(base, slot_timer_cb, s);
        made = made && s->ev_timer != NULL;
    }
    /* Without a board (no memfd), an exec attempt's clock starts at its Call's send, as other adapters' do. */
    p->starts_fd = -1;
    int brc = tp_startboard_create(p->n, &p->starts, &p->starts_fd);
    if (brc < 0) {
        p->starts = NULL;
        p->starts_fd = -1;
        tp_log_error("pool.no_start_board", "no start board (%s): an exec tool's timeout counts from its call's send",
                     strerror(-brc));
    }
    p->ev_chld = evsignal_new(base, SIGCHLD, pool_chld_cb, p);
    p->ev_flush = event_new(base, -1, 0, pool_flush_cb, p);
    tp_arena_init(&p->arena, 4096);
    if (!made || p->ev_chld == NULL || p->ev_flush == NULL) {
        tp_log_error("pool.out_of_memory", "cannot make the pool's events: out of memory");
        tp_pool_free(p);
        return NULL;
    }
    return p;
}

int tp_pool_start(tp_pool_t *p)
{
    if (access(p->o.worker_path, X_OK) < 0) {
        int rc = tp_errno(errno);
        tp_log_error("pool.worker_program", "worker program %s: %s", p->o.worker_path, tp_strerror(rc));
        return rc;
    }
    if (p->ev_chld == NULL || p->ev_flush == NULL || evsignal_add(p->ev_chld, NULL) < 0) {
        tp_log_error("pool.signal_failed", "cannot watch SIGCHLD");
        return TP_EIO;
    }
    tp_deadline_start(p->deadline, p->base, pool_deadline_cb, p);
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
        if (s->state != SLOT_BUSY || s->attempt == NULL || s->why != WHY_NONE || s->eof || held >= depth ||
            held >= p->o.pipeline || s->queued >= TP_POOL_PIPE_MAX || s->attempt->depth <= held)
            continue;
        if (s->retiring || (s->call_cap && s->calls + 1 + (uint64_t)held > s->call_cap))
            continue;
        if ((s->queued == 0 || s->queue_min > held) && (best == NULL || s->queued < best->queued))
            best = s;
    }
    return best;
}

void tp_slot_sessions_clear(tp_slot_t *s)
{
    for (int i = 0; i < TP_WORKER_MCP_SESSIONS; i++) {
        s->sessions[i] = -1;
        s->session_used[i] = 0;
    }
    s->n_sessions = 0;
    s->session_clock = 0;
}

/* Whether s's worker holds a session with MCP server `server`. */
static bool slot_holds(const tp_slot_t *s, int server)
{
    for (int i = 0; i < TP_WORKER_MCP_SESSIONS; i++)
        if (s->sessions[i] == server)
            return true;
    return false;
}

/*
 * A call of MCP server `server` sent to s's worker: its session's place
 * touched, or one taken, as the worker's server_for does (the first place
 * that holds it; else an empty one, or the one used longest ago).
 */
static void slot_session_use(tp_slot_t *s, int server)
{
    int at = -1, oldest = -1;
    for (int i = 0; i < TP_WORKER_MCP_SESSIONS && at < 0; i++) {
        if (s->sessions[i] == server)
            at = i;
        else if (oldest < 0 ||
                 (s->sessions[oldest] >= 0 && (s->sessions[i] < 0 || s->session_used[i] < s->session_used[oldest])))
            oldest = i;
    }
    if (at < 0) {
        at = oldest;
        if (s->sessions[at] < 0)
            s->n_sessions++;
        s->sessions[at] = server;
    }
    s->session_used[at] = ++s->session_clock;
}

/* Whether s holds fewer than t's max_in_flight of t's attempts (counted only when it holds that many in all). */
static bool flight_room(const tp_slot_t *s, const tp_tool_t *t)
{
    if (s->n_flight < (int)t->max_in_flight)
        return true;
    int mine = 0;
    for (int k = 0; k < s->n_flight; k++)
        mine += s->flight[k]->tool == t;
    return mine < (int)t->max_in_flight;
}

/*
 * The worker for one more attempt of http or mcp tool t, among those that
 * are idle or hold attempts in flight already, have room under t's
 * max_in_flight (a cap on t's attempts in one worker), are not being
 * stopped or retired and will not pass their recycling count with it:
 *   http  the one holding fewest, of those holding no MCP session; when
 *         none of those can, of those holding one (its worker waits on
 *         both: with every worker holding a session, an http call would
 *         otherwise never run);
 *   mcp   one whose worker holds t's server's session (among the others
 *         it holds: calls of several servers fly side by side in one
 *         worker), the least loaded;
 *         but while fewer workers than its instances hold one, an idle
 *         worker holding none takes a new copy of the server; and when
 *         none holds one and every idle worker holds another's, one of
 *         those takes it (its worker keeps the other session too).
 */
static tp_slot_t *flight_slot(tp_pool_t *p, const tp_tool_t *t)
{
    tp_slot_t *best = NULL, *fresh = NULL, *other = NULL, *shared = NULL;
    if (p->shutting_down)
        return NULL;
    bool mcp = t->adapter == TP_ADAPTER_MCP;
    uint32_t bound = 0;
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        bool mine = mcp && slot_holds(s, t->mcp_server_id);
        bound += mine && s->state != SLOT_DOWN && s->why == WHY_NONE;
        bool in_flight = s->state == SLOT_BUSY && s->attempt == NULL;
        if ((s->state != SLOT_IDLE && !in_flight) || s->why != WHY_NONE || s->eof || s->retiring || !flight_room(s, t))
            continue;
        if (s->call_cap && s->calls + (uint64_t)s->n_flight + 1 > s->call_cap)
            continue;
        if (mcp && !mine) {
            if (s->state == SLOT_IDLE && s->n_sessions == 0 && fresh == NULL)
                fresh = s;
            else if (s->state == SLOT_IDLE && other == NULL)
                other = s;
            continue;
        }
        if (!mcp && s->n_sessions > 0) {
            if (shared == NULL || s->n_flight < shared->n_flight)
                shared = s;
            continue;
        }
        if (best == NULL || s->n_flight < best->n_flight)
            best = s;
    }
    if (mcp && fresh != NULL && bound < t->mcp_instances)
        return fresh;
    if (mcp && best == NULL && bound == 0)
        return other;
    if (!mcp && best == NULL)
        return shared; /* every worker that could take it holds a session: one of those, rather than none ever */
    return best;
}

bool tp_pool_room(const tp_pool_t *p, const tp_tool_t *t, int depth)
{
    if (tp_pool_flies(t))
        return flight_slot((tp_pool_t *)p, t) != NULL;
    return pipeline_slot((tp_pool_t *)p, depth) != NULL;
}

/* a joins s's attempts in flight. false: out of memory. */
static bool flight_add(tp_slot_t *s, tp_attempt_t *a)
{
    if (s->n_flight == s->flight_cap) {
        int cap = s->flight_cap ? 2 * s->flight_cap : 16;
        tp_attempt_t **f = realloc(s->flight, (size_t)cap * sizeof *f);
        if (f == NULL)
            return false;
        s->flight = f;
        s->flight_cap = cap;
    }
    s->flight[s->n_flight++] = a;
    return true;
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
        if (s->state == SLOT_BUSY && s->attempt != NULL && s->why == WHY_NONE && !s->eof && !s->thread_keeps &&
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
        for (int k = 0; k < s->n_flight; k++)
            if (s->flight[k] == a)
                return true;
    }
    return false;
}

int tp_pool_submit(tp_pool_t *p, tp_attempt_t *a)
{
    tp_slot_t *s = NULL;
    bool http = tp_pool_flies(a->tool); /* in flight, as an http call is */
    if (http)
        s = flight_slot(p, a->tool);
    /* an idle worker holding no MCP session first: one that holds one keeps it for its calls */
    for (int pass = 0; pass < 2 && s == NULL && !http; pass++)
        for (int i = 0; i < p->n && s == NULL; i++)
            if (p->slots[i].state == SLOT_IDLE && p->slots[i].why == WHY_NONE &&
                (pass == 1 || p->slots[i].n_sessions == 0))
                s = &p->slots[i];
    if (s == NULL && !http)
        s = pipeline_slot(p, a->depth);
    if (s == NULL || p->shutting_down)
        return TP_EAGAIN;
    const tp_buf_t *tail = NULL, *head = pool_tool_head(p, a->tool, &tail);
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
        .mcp_protocol = a->tool->adapter == TP_ADAPTER_MCP ? (uint32_t)a->tool->mcp_protocol : 0,
        .traceparent = a->traceparent,
    };
    a->started_us = tp_now_us();
    /* The worker ends an http or mcp call at the very deadline the supervisor keeps: the clock is the machine's. */
    call.deadline_us = http ? a->started_us + a->timeout_us : 0;
    a->spawn_us = 0;
    a->result = NULL;
    a->message = NULL;
    a->retry_after_ms = -1;
    size_t before = s->out.len;
    int rc = head != NULL ? tp_call_frame_append(&s->out, &call, p->o.max_frame) : TP_ENOMEM;
    if (rc == 0 && http && !flight_add(s, a)) {
        s->out.len = before; /* the frame goes unsent */
        rc = TP_ENOMEM;
    }
    if (rc != 0) {
        if (rc == TP_E2BIG)
            pool_attempt_fail(a, TP_KIND_BAD_ARGUMENTS, "the call does not fit in a frame of %u bytes", p->o.max_frame);
        else
            pool_attempt_fail(a, TP_KIND_SERVER_ERROR, "out of memory for the call's frame");
        return rc == TP_E2BIG ? TP_E2BIG : TP_ENOMEM;
    }
    if (a->tool->adapter == TP_ADAPTER_MCP) /* the worker gets it: its session as the worker keeps it */
        slot_session_use(s, a->tool->mcp_server_id);
    p->busy++;
    uint64_t max_calls = a->tool->policy.worker_max_calls;
    if (max_calls && (s->call_cap == 0 || max_calls < s->call_cap))
        s->call_cap = max_calls;
    if (http) {
        a->backstop_us = a->started_us + a->timeout_us + TP_POOL_HTTP_GRACE_US;
        if (s->state == SLOT_IDLE) {
            s->state = SLOT_BUSY;
            p->idle--;
        }
        slot_flight_arm(s);
    } else if (s->state == SLOT_BUSY) {
        a->started_us = 0; /* it starts when the one before it ends */
        slot_queue_push(s, a);
    } else {
        s->attempt = a;
        s->state = SLOT_BUSY;
        p->idle--;
        slot_deadline_arm(s, a, a->started_us);
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
            slot_timer_stop(s);
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
        case SLOT_DYING:
            /* A STOPPING slot's timer still fires: a timeout's attempt ends once that KILL is out. */
            if (kill_busy)
                slot_kill(s);
            break;
        }
    }
    if (p->live == 0 && event_base_once(p->base, -1, EV_TIMEOUT, closed_now_cb, p, NULL) < 0) {
        /* Said from here, then, rather than never. */
        tp_log_error("pool.out_of_memory", "cannot defer the pool's closing: out of memory");
        closed_now_cb(-1, 0, p);
    }
}

/* Cancels a if it is in flight on s: its worker is told, and has the grace to answer. */
static bool flight_cancel(tp_slot_t *s, tp_attempt_t *a)
{
    for (int k = 0; k < s->n_flight; k++) {
        if (s->flight[k] != a)
            continue;
        if (s->why != WHY_NONE || s->call_fd < 0)
            return true; /* its worker is going: the attempt ends at the reap */
        if (tp_cancel_frame_append(&s->out, a->seq) == 0) {
            uint64_t by = tp_now_us() + TP_POOL_HTTP_GRACE_US;
            if (by < a->backstop_us)
                a->backstop_us = by;
            slot_flight_arm(s);
            slot_flush_later(s);
        } else {
            /* No memory for the frame: the worker goes, and its attempts with it (the engine knows this one's cancelled). */
            snprintf(s->detail, sizeof s->detail, "no memory to cancel a call on worker %d", (int)s->pid);
            slot_stop(s, WHY_PROTOCOL, SIGKILL);
        }
        return true;
    }
    return false;
}

int tp_pool_cancel(tp_pool_t *p, tp_attempt_t *a)
{
    for (int i = 0; i < p->n; i++) {
        tp_slot_t *s = &p->slots[i];
        if (flight_cancel(s, a))
            return 0;
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
        free(s->flight);
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
    tp_startboard_free(p->starts, p->n, p->starts_fd);
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
