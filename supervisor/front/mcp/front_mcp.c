/*
 * The MCP front over stdio, behind `toolpool mcp`: JSON-RPC 2.0 lines in on
 * stdin, lines out on stdout, one session (mcp_session.h) for the process.
 *
 * Input is read the way the JSONL front reads it: in the engine's turn
 * (its feed hook), once per readiness event, from a descriptor left
 * blocking (stdin's open file may be shared). Output never blocks the
 * loop: the answers go into one buffer, written as far as the descriptor
 * takes them, the rest when it is writable again (a socket is written
 * with MSG_DONTWAIT, a pipe through a non-blocking open file of our own).
 */
#include "front_mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "lines.h"
#include "log.h"
#include "loop.h"
#include "mcp_session.h"

/* Input lines one turn takes at most: a turn stays short, whatever the client sends. */
#define TP_MCP_LINES_PER_TURN 256
/* Answers not yet taken by the client past which no more input is read (it is not reading). */
#define TP_MCP_OUT_HIGH ((size_t)8 << 20)

/* How answers reach the output without blocking the loop. */
typedef enum {
    TP_OUT_BLOCKING, /* a file or a terminal: write(2) as it is */
    TP_OUT_NONBLOCK, /* a pipe, through an open file of our own with O_NONBLOCK */
    TP_OUT_SOCKET,   /* a socket (Node's child stdio is one): send(2) with MSG_DONTWAIT */
} tp_out_mode_t;

struct tp_mcp {
    tp_mcp_opts_t o;
    tp_engine_t *e;
    tp_mcp_catalog_t *tools;
    tp_mcp_session_t *s;
    size_t progress; /* calls whose client asked for progress */
    /* input */
    tp_buf_t in;
    tp_lines_t lines; /* in, split into lines */
    bool in_eof;
    bool in_regular;  /* epoll cannot watch it (a file, /dev/null): every read is ready */
    bool in_ready;    /* a read event fired: one read will not block */
    bool in_waiting;  /* ev_in is armed */
    bool held_window; /* input waits for calls to end (flush asks for a turn) */
    bool held_out;    /* input waits for the client to read (a drained output asks for a turn) */
    struct event *ev_in;
    /* output */
    tp_buf_t out;
    int out_fd;
    bool own_out_fd;   /* out_fd is ours to close */
    int restore_flags; /* out_fd's flags to put back at the end; -1: none changed */
    tp_out_mode_t out_mode;
    bool out_waiting; /* ev_out is armed */
    bool out_failed;
    struct event *ev_out;
    bool draining;
    bool closed_told;
};

/* The session's messages, a line each, into the output buffer. */
static int send_cb(void *ctx, void *tag, const char *msg, size_t len, bool final)
{
    tp_mcp_t *m = ctx;
    (void)tag;
    (void) final;
    if (m->out_failed || msg == NULL)
        return 0; /* nobody reads, or nothing to say: dropped */
    size_t mark = m->out.len;
    if (tp_buf_append(&m->out, msg, len) < 0 || tp_buf_append(&m->out, "\n", 1) < 0) {
        m->out.len = mark;
        return -1;
    }
    return 0;
}


/* ---- output ---- */

static void tell_closed(tp_mcp_t *m)
{
    if (m->closed_told)
        return;
    m->closed_told = true;
    if (m->o.closed)
        m->o.closed(m->o.ctx);
}

/* The client stopped reading (EPIPE, or the like): the session is over. */
static void out_fail(tp_mcp_t *m, int err)
{
    m->out_failed = true;
    tp_buf_reset(&m->out);
    if (err == EPIPE || err == ECONNRESET)
        tp_log_warn("mcp.client_closed", "mcp: the client closed its end; stopping");
    else
        tp_log_error("mcp.write_failed", "mcp: writing to the client: %s; stopping", strerror(err));
    tell_closed(m);
}

static ssize_t out_write(tp_mcp_t *m, const void *p, size_t n)
{
    if (m->out_mode == TP_OUT_SOCKET)
        return send(m->out_fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    return write(m->out_fd, p, n);
}

/*
 * Writes what the output takes now. The rest waits for the descriptor to
 * be writable (ev_out calls back). Input held back by a full output is let
 * go again once it has drained.
 */
static void out_flush(tp_mcp_t *m)
{
    if (m->out_failed || m->out_waiting)
        return;
    while (tp_buf_avail(&m->out) > 0) {
        ssize_t w = out_write(m, tp_buf_head(&m->out), tp_buf_avail(&m->out));
        if (w > 0) {
            tp_buf_consume(&m->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (event_add(m->ev_out, NULL) == 0) {
                m->out_waiting = true;
                return;
            }
            tp_log_error("mcp.event_failed", "mcp: cannot wait for the output");
            out_fail(m, EIO);
            return;
        }
        out_fail(m, w < 0 ? errno : EIO);
        return;
    }
    if (m->held_out) {
        m->held_out = false;
        tp_engine_kick(m->e); /* input waited for the client to read: read on */
    }
}

static void out_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_mcp_t *m = arg;
    m->out_waiting = false;
    out_flush(m);
}

/*
 * Picks how to write out_fd without blocking the loop. A pipe's open file
 * may be shared (the same pipe as another process's stdout): O_NONBLOCK set
 * on it would surprise them, so the pipe is opened anew, through /proc,
 * with a file of our own; only where that cannot be is the flag set on the
 * shared one, and put back at the end.
 */
static void out_setup(tp_mcp_t *m)
{
    struct stat st;
    m->out_fd = m->o.out_fd;
    m->restore_flags = -1;
    m->out_mode = TP_OUT_BLOCKING;
    if (fstat(m->out_fd, &st) != 0)
        return;
    if (S_ISSOCK(st.st_mode)) {
        m->out_mode = TP_OUT_SOCKET;
        return;
    }
    if (!S_ISFIFO(st.st_mode))
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", m->out_fd);
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
        m->out_fd = fd;
        m->own_out_fd = true;
        m->out_mode = TP_OUT_NONBLOCK;
        return;
    }
    int flags = fcntl(m->out_fd, F_GETFL);
    if (flags >= 0 && fcntl(m->out_fd, F_SETFL, flags | O_NONBLOCK) == 0) {
        m->restore_flags = flags;
        m->out_mode = TP_OUT_NONBLOCK;
    }
}

/* A commit's answers are in the buffer: out they go; input that waited for calls to end reads on. */
static void flush_cb(void *ctx)
{
    tp_mcp_t *m = ctx;
    out_flush(m);
    if (m->held_window) {
        m->held_window = false;
        tp_engine_kick(m->e);
    }
}

/* ---- input, in the engine's turn ---- */

static void input_end(tp_mcp_t *m)
{
    m->in_eof = true;
    tp_buf_reset(&m->in);
    tp_lines_reset(&m->lines);
    tell_closed(m);
}

/* A line past the limit: refused whole (the rest of it is skipped as it comes), never allocated. */
static void too_long(tp_mcp_t *m)
{
    char text[160];
    snprintf(text, sizeof text, "Invalid Request: a message longer than the %llu-byte limit (--max-frame); skipped",
             (unsigned long long)m->o.max_message);
    tp_mcp_session_error(m->s, NULL, TP_RPC_INVALID_REQUEST, text);
}

/*
 * The engine's turn: tells progress, then reads and takes input lines
 * while fewer than the window of calls are live and the client reads its
 * answers. Returns when it must wait (for input, for the window, for the
 * output), at EOF, or at the turn's budget (then it asks for another).
 */
static void feed_cb(void *ctx)
{
    tp_mcp_t *m = ctx;
    if (m->progress)
        tp_mcp_session_progress(m->s);
    int budget = TP_MCP_LINES_PER_TURN;
    m->held_window = m->held_out = false;
    while (!m->in_eof && !m->draining && !m->out_failed) {
        if (!tp_engine_takes(m->e, m->o.window)) {
            m->held_window = true;
            break;
        }
        if (tp_buf_avail(&m->out) > TP_MCP_OUT_HIGH) {
            m->held_out = true;
            break;
        }
        if (budget-- == 0) {
            tp_engine_kick(m->e);
            break;
        }
        size_t len;
        tp_lines_rc_t rc = tp_lines_next(&m->lines, &m->in, m->o.max_message, &len);
        if (rc == TP_LINES_LINE || rc == TP_LINES_TAIL) {
            /* A tail is the end of a line already refused whole. */
            if (rc == TP_LINES_LINE && len > m->o.max_message)
                too_long(m);
            else if (rc == TP_LINES_LINE)
                tp_mcp_session_take(m->s, (const char *)tp_buf_head(&m->in), len, NULL);
            tp_lines_done(&m->lines, &m->in, len);
            continue;
        }
        if (rc == TP_LINES_LONG)
            too_long(m);
        if (!m->in_regular && !m->in_ready) {
            if (!m->in_waiting) {
                if (event_add(m->ev_in, NULL) != 0) {
                    tp_log_error("mcp.event_failed", "mcp: cannot wait for input");
                    input_end(m);
                    break;
                }
                m->in_waiting = true;
            }
            break;
        }
        m->in_ready = false;
        ssize_t n = tp_buf_read_fd(&m->in, m->o.in_fd);
        if (n == TP_EAGAIN || n == TP_EINTR)
            continue;
        if (n < 0) {
            tp_log_error("mcp.read_failed", "mcp: reading the client's messages: %s; stopping", tp_strerror((int)n));
            input_end(m);
            break;
        }
        if (n == 0) {
            /* The last message may lack its newline. */
            if (tp_lines_rest(&m->lines, &m->in) && tp_buf_avail(&m->in) > m->o.max_message)
                too_long(m);
            else if (tp_lines_rest(&m->lines, &m->in))
                tp_mcp_session_take(m->s, (const char *)tp_buf_head(&m->in), tp_buf_avail(&m->in), NULL);
            input_end(m);
            break;
        }
    }
    out_flush(m);
}

static void input_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_mcp_t *m = arg;
    m->in_waiting = false;
    m->in_ready = true;
    tp_engine_kick(m->e);
}

/* ---- the front ---- */

tp_mcp_t *tp_mcp_new(const tp_mcp_opts_t *o)
{
    tp_mcp_t *m = calloc(1, sizeof *m);
    if (m == NULL) {
        tp_log_error("mcp.out_of_memory", "out of memory");
        return NULL;
    }
    m->o = *o;
    m->e = o->engine;
    if (m->o.window == 0)
        m->o.window = 1024;
    out_setup(m);
    m->in_regular = !tp_loop_pollable(o->in_fd);
    m->ev_in = event_new(o->base, o->in_fd, EV_READ, input_cb, m);
    m->ev_out = event_new(o->base, m->out_fd, EV_WRITE, out_cb, m);
    tp_mcp_sink_t sink = {.send = send_cb, .ctx = m, .progress_count = &m->progress};
    tp_front_t front = {.feed = feed_cb, .flush = flush_cb, .ctx = m};
    if (m->ev_in == NULL || m->ev_out == NULL ||
        (m->tools = tp_mcp_catalog_new(tp_engine_registry(o->engine))) == NULL ||
        (m->s = tp_mcp_session_new(o->engine, m->tools, o->version, o->deadline_us, &sink)) == NULL ||
        tp_engine_add_front(m->e, &front) != 0) {
        tp_log_error("mcp.out_of_memory", "mcp: out of memory setting up");
        tp_mcp_free(m);
        return NULL;
    }
    tp_engine_kick(m->e); /* the first turn reads */
    return m;
}

const char *tp_mcp_session(const tp_mcp_t *m)
{
    return tp_mcp_session_id(m->s);
}

void tp_mcp_drain(tp_mcp_t *m)
{
    m->draining = true;
    if (m->in_waiting) {
        event_del(m->ev_in);
        m->in_waiting = false;
    }
}

void tp_mcp_finish(tp_mcp_t *m, uint64_t timeout_us)
{
    tp_mcp_drain(m);
    if (m->out_waiting) {
        event_del(m->ev_out);
        m->out_waiting = false;
    }
    uint64_t until = tp_now_us() + timeout_us;
    while (!m->out_failed && tp_buf_avail(&m->out) > 0) {
        ssize_t w = out_write(m, tp_buf_head(&m->out), tp_buf_avail(&m->out));
        if (w > 0) {
            tp_buf_consume(&m->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        uint64_t now = tp_now_us();
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && now < until) {
            struct pollfd pfd = {.fd = m->out_fd, .events = POLLOUT};
            int ms = (int)((until - now + 999) / 1000);
            if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
                break;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            tp_log_warn("mcp.output_dropped", "mcp: the client did not read its last answers; %zu bytes dropped",
                        tp_buf_avail(&m->out));
        else
            out_fail(m, w < 0 ? errno : EIO);
        break;
    }
}

void tp_mcp_counts(const tp_mcp_t *m, uint64_t *calls, uint64_t *ok)
{
    tp_mcp_session_counts(m->s, calls, ok);
}

void tp_mcp_free(tp_mcp_t *m)
{
    if (m == NULL)
        return;
    tp_mcp_session_free(m->s);
    tp_mcp_catalog_free(m->tools);
    if (m->ev_in)
        event_free(m->ev_in);
    if (m->ev_out)
        event_free(m->ev_out);
    if (m->restore_flags >= 0 && fcntl(m->out_fd, F_SETFL, m->restore_flags) != 0)
        tp_log_warn("mcp.stdout_flags", "mcp: cannot restore stdout's flags: %s", strerror(errno));
    if (m->own_out_fd)
        close(m->out_fd);
    tp_buf_free(&m->in);
    tp_buf_free(&m->out);
    free(m);
}
