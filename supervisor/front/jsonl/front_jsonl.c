/*
 * The JSONL front, behind `toolpool run`: input lines become calls handed
 * to the engine, and each call's answer becomes one output line.
 *
 * Input is streamed: at most a window of calls is held at once, so a file
 * of any size runs in flat memory. The engine asks for more at each of its
 * turns (feed); the answers of a commit are written out in one write
 * (flush). A signal drains the engine: running calls may finish, calls not
 * started are left for a rerun.
 */
#include "array.h"
#include "front_jsonl.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "engine.h"
#include "lines.h"
#include "log.h"
#include "loop.h"
#include "request.h"

/* Input lines one turn takes at most. */
#define TP_LINES_PER_TURN 1024

typedef struct tp_jsonl {
    const tp_batch_opts_t *o;
    tp_engine_t *e;
    struct event_base *base;
    /* input */
    tp_buf_t in;
    tp_request_parser_t parser; /* reads a line into a call (request.h) */
    tp_lines_t lines;           /* in, split into lines */
    bool in_eof;
    bool in_regular;
    bool in_ready;  /* a pipe's read event fired: one read will not block */
    bool in_failed; /* a read failed: exit 2 */
    off_t in_size;
    uint64_t in_read;
    long line_no;
    size_t window;
    struct event *ev_input;
    /* output: the lines of a commit's answers, written at its flush */
    tp_buf_t out;
    /*
     * The lines of answers made and not yet durable (staged, engine.h),
     * in the order they were made: held[i] ends at held[i].end in staged,
     * the oldest at held_head. Each moves to out when its commit is made.
     */
    tp_buf_t staged;
    struct held {
        size_t end;
        uint64_t seq; /* the how-manieth staged answer it is */
        tp_summary_call_t call;
    } * held;
    size_t held_n, held_head, held_cap;
    uint64_t staged_seq, released_seq; /* staged answers made, and told of their commits */
    bool out_failed;
    int status;
    /* lifecycle: the loop with its signals and the drain's last resort */
    tp_loop_t loop;
    struct event *ev_progress;
    uint64_t t0;
    tp_batch_report_t *report;
} tp_jsonl_t;

static void input_failed(tp_jsonl_t *f);
static void out_stop(tp_jsonl_t *f);

/* A staged answer (engine.h): its line is held until its commit, then goes out, or is dropped. */
static void staged_cb(tp_jsonl_t *f, const tp_answer_t *a)
{
    if (a->stage == TP_ANSWER_STAGED) {
        uint64_t seq = f->staged_seq++;
        size_t mark = f->staged.len;
        if (f->held_n == f->held_cap) {
            size_t cap = f->held_cap ? f->held_cap * 2 : 1024;
            struct held *v = realloc(f->held, cap * sizeof *v);
            if (v == NULL)
                goto nomem;
            f->held = v;
            f->held_cap = cap;
        }
        if (tp_format_write(&f->staged, f->o->format, a) < 0)
            goto nomem;
        f->held[f->held_n++] = (struct held){.end = f->staged.len, .seq = seq, .call = tp_summary_call_of(a->result)};
        return;
    nomem:
        /* Not held: when its commit comes, the oldest held is another's (or none is), and it passes. */
        f->staged.len = mark;
        tp_log_error("run.out_of_memory", "out of memory writing results; stopping");
        out_stop(f);
        return;
    }
    uint64_t seq = f->released_seq++;
    if (f->held_head == f->held_n || f->held[f->held_head].seq != seq)
        return; /* it was never held (out of memory above): the run is stopping, exit 2 */
    const struct held *h = &f->held[f->held_head];
    size_t start = f->held_head ? f->held[f->held_head - 1].end : 0;
    f->held_head++;
    if (a->stage == TP_ANSWER_DURABLE) {
        if (tp_buf_append(&f->out, f->staged.data + start, h->end - start) < 0) {
            tp_log_error("run.out_of_memory", "out of memory writing results; stopping");
            out_stop(f);
        }
        tp_summary_add_call(&f->report->summary, h->call);
        if (h->call.kind != TP_KIND_OK && f->status == 0)
            f->status = 1;
    }
    if (f->held_head == f->held_n) {
        f->held_head = f->held_n = 0; /* every line held has gone: the buffer starts over */
        f->staged.len = 0;
    }
}

/* One call's answer: its line, rendered in the run's format, goes out with the rest of its commit's. */
static void answer_cb(void *ctx, const tp_answer_t *a)
{
    tp_jsonl_t *f = ctx;
    if (a->stage != TP_ANSWER_FINAL) {
        staged_cb(f, a);
        return;
    }
    if (a->not_started) {
        f->report->not_started++;
        return;
    }
    if (tp_format_write(&f->out, f->o->format, a) < 0) {
        tp_log_error("run.out_of_memory", "out of memory writing results; stopping");
        out_stop(f);
        return;
    }
    if (a->recorded) {
        tp_summary_add_served(&f->report->summary, a->result);
        f->report->resumed++;
    } else {
        tp_summary_add(&f->report->summary, a->result);
    }
    if (!a->result->ok && f->status == 0)
        f->status = 1;
}

/* The output cannot be written: the run stops now, running calls killed (exit 2). */
static void out_stop(tp_jsonl_t *f)
{
    f->out_failed = true;
    f->status = 2;
    tp_engine_drain(f->e);
    tp_engine_drain(f->e); /* a second time: kill what runs */
}

/* Calls expected in all: exact at EOF, else scaled from the share of a file's bytes read; -1 on a pipe. */
static double expected_total(const tp_jsonl_t *f)
{
    double seen = (double)f->report->summary.calls + (double)tp_engine_live(f->e);
    if (f->in_eof)
        return seen;
    if (f->in_regular && f->in_read > 0 && f->in_size > 0)
        return seen * (double)f->in_size / (double)f->in_read;
    return -1;
}

/* A commit's answers have been delivered: their lines go out in one write, resumed after a short one. */
static void flush_cb(void *ctx)
{
    tp_jsonl_t *f = ctx;
    double total = expected_total(f);
    tp_engine_status(f->e, "run", total > 0 ? (uint64_t)(total + 0.5) : 0); /* for stats on the live store */
    int rc = f->out_failed ? 0 : tp_write_all(f->o->output_fd, f->out.data, f->out.len);
    tp_buf_reset(&f->out);
    if (rc < 0) {
        tp_log_error("run.write_failed", "writing results: %s", tp_strerror(rc));
        tp_log_error("run.write_failed", "cannot write results; stopping");
        out_stop(f);
    }
}

/* The line number in the user's file: with --ordered the input read is a reordered copy. */
static long user_line(const tp_jsonl_t *f, long no)
{
    const tp_batch_opts_t *o = f->o;
    return o->line_map && no >= 1 && (size_t)no <= o->n_line_map ? o->line_map[no - 1] : no;
}

/* "line N", without printf: this runs once a line. */
static const char *line_where(char buf[32], long no)
{
    char digits[24];
    int n = 0;
    unsigned long v = (unsigned long)no;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(buf, "line ", 5);
    int k = 5;
    while (n > 0)
        buf[k++] = digits[--n];
    buf[k] = 0;
    return buf;
}

/* Turns one input line into a call for the engine, or into an answer of its own (request.h). */
static void take_line(tp_jsonl_t *f, const char *line, size_t len)
{
    char where[32];
    tp_request_t rq;
    tp_request_bad_t bad;
    tp_request_kind_t kind = tp_request_parse_line(&f->parser, line, len, line_where(where, user_line(f, f->line_no)),
                                                   f->o->engine.on_end ? TP_REQUEST_TRACE : 0, &rq, &bad);
    /* Another shard's line: skipped here, before the engine (and so the store) sees it. */
    if (f->o->shard && kind != TP_REQUEST_BLANK && !tp_shard_takes(f->o->shard, kind, &rq, &bad)) {
        f->report->other_shard++;
        return;
    }
    switch (kind) {
    case TP_REQUEST_BLANK:
        return; /* blank lines are not calls */
    case TP_REQUEST_BAD:
        tp_engine_reject(f->e, bad.id, bad.job, bad.step, bad.tool, bad.message, answer_cb, f);
        return;
    case TP_REQUEST_CALL:
        tp_request_give_args(&f->parser, &rq);
        rq.answer_staged = true;
        tp_engine_submit(f->e, &rq, answer_cb, f);
        return;
    }
}

/*
 * The engine's turn: reads and takes input lines while fewer than the
 * window of calls are live. Returns when the window is full, at EOF, or
 * when a pipe has nothing more for now (its event calls back).
 */
static void feed_cb(void *ctx)
{
    tp_jsonl_t *f = ctx;
    /*
     * Lines that need no call (served from the store, malformed) do not
     * fill the window; a turn still takes no more than this many, so its
     * answers and its transaction stay small and the loop stays responsive.
     */
    int budget = TP_LINES_PER_TURN;
    while (!f->in_eof && !tp_engine_draining(f->e) && tp_engine_takes(f->e, f->window)) {
        if (budget-- == 0) {
            tp_engine_kick(f->e);
            return;
        }
        size_t len;
        switch (tp_lines_next(&f->lines, &f->in, f->o->engine.max_frame, &len)) {
        case TP_LINES_LINE:
            f->line_no++;
            take_line(f, (const char *)tp_buf_head(&f->in), len);
            tp_lines_done(&f->lines, &f->in, len);
            f->in_read += len + 1;
            continue;
        case TP_LINES_TAIL:
            f->line_no++;
            tp_lines_done(&f->lines, &f->in, len);
            f->in_read += len + 1;
            continue;
        case TP_LINES_LONG: {
            char msg[128], where[32];
            if (f->o->shard && f->o->shard->index != 0) { /* no id: shard 0's (shard.h) */
                f->report->other_shard++;
                f->in_read += len;
                break;
            }
            tp_request_too_long(msg, sizeof msg, line_where(where, user_line(f, f->line_no + 1)),
                                f->o->engine.max_frame);
            tp_engine_reject(f->e, NULL, NULL, 0, NULL, msg, answer_cb, f);
            f->in_read += len;
            break;
        }
        case TP_LINES_MORE:
            f->in_read += len;
            break;
        }
        /*
         * A pipe or terminal is read once per readiness event, blocking: no
         * O_NONBLOCK on a descriptor we share (stdin's open file may be
         * stdout's too). A regular file is always ready.
         */
        if (!f->in_regular && !f->in_ready) {
            if (event_add(f->ev_input, NULL) < 0) {
                tp_log_error("run.read_failed", "reading %s: cannot wait for input", f->o->input_name);
                input_failed(f);
            }
            return;
        }
        f->in_ready = false;
        ssize_t n = tp_buf_read_fd(&f->in, f->o->input_fd);
        if (n == TP_EAGAIN || n == TP_EINTR)
            continue;
        if (n < 0) {
            /* Not the end of the input: the calls after it were never read. */
            tp_log_error("run.read_failed", "reading %s: %s", f->o->input_name, tp_strerror((int)n));
            input_failed(f);
            return;
        }
        if (n == 0) {
            f->in_eof = true;
            if (tp_lines_rest(&f->lines, &f->in)) {
                f->line_no++;
                take_line(f, (const char *)tp_buf_head(&f->in), tp_buf_avail(&f->in));
            }
            f->in_read += tp_buf_avail(&f->in);
            tp_buf_reset(&f->in);
            tp_engine_close(f->e);
        }
    }
}

/*
 * The input cannot be read on: the calls read so far finish, and the run
 * ends with exit 2 (a rerun on the same store takes it up from there).
 */
static void input_failed(tp_jsonl_t *f)
{
    f->in_eof = true;
    f->in_failed = true;
    tp_buf_reset(&f->in);
    tp_engine_close(f->e);
}

static void input_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_jsonl_t *f = arg;
    f->in_ready = true;
    tp_engine_kick(f->e);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    tp_jsonl_t *f = arg;
    if (tp_engine_draining(f->e)) {
        tp_log_warn("run.stop_now", "second signal: stopping running calls now");
        tp_engine_drain(f->e);
        return;
    }
    int busy = tp_engine_busy(f->e);
    tp_log_warn("run.draining", "%s: finishing %d running call%s (signal again to stop now)", strsignal((int)sig), busy,
                busy == 1 ? "" : "s");
    f->report->interrupted = true;
    if (f->status == 0)
        f->status = 1;
    event_del(f->ev_input);
    tp_engine_drain(f->e);
    tp_loop_draining(&f->loop);
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_jsonl_t *f = arg;
    double total = expected_total(f);
    double elapsed = (double)(tp_now_us() - f->t0) / 1e6;
    if (f->o->progress == TP_PROGRESS_BAR)
        tp_progress_draw(stderr, &f->report->summary, total, elapsed, tp_engine_busy(f->e));
    else
        tp_progress_line(stderr, &f->report->summary, total, elapsed, tp_engine_busy(f->e));
}

int tp_batch_run(const tp_batch_opts_t *o, tp_batch_report_t *report)
{
    tp_jsonl_t f = {.o = o, .report = report, .t0 = tp_now_us()};
    memset(report, 0, sizeof *report);
    struct stat st;
    if (fstat(o->input_fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        tp_log_error("run.bad_input", "%s is a directory: give a file of calls, one JSON object a line", o->input_name);
        return 2;
    }
    if (fstat(o->input_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        f.in_regular = true;
        f.in_size = st.st_size;
    }
    signal(SIGPIPE, SIG_IGN);
    f.window = o->window ? o->window : tp_loop_window(o->engine.workers);
    if (tp_loop_new(&f.loop, o->engine.drain_us) < 0)
        return 2;
    f.base = f.loop.base;
    tp_engine_opts_t eo = o->engine;
    eo.base = f.base;
    tp_front_t front = {.feed = feed_cb, .flush = flush_cb, .ctx = &f};
    int status = 2;
    f.e = tp_engine_new(&eo);
    f.ev_input = event_new(f.base, o->input_fd, EV_READ, input_cb, &f);
    if (f.e == NULL || f.ev_input == NULL || tp_engine_add_front(f.e, &front) < 0) {
        tp_log_error("run.out_of_memory", "out of memory");
        goto out;
    }
    if (tp_loop_signals(&f.loop, signal_cb, &f) < 0)
        goto out;
    /*
     * What epoll refuses to watch (/dev/null, some devices) is read the way
     * a regular file is: each read blocks until there is something, or EOF.
     */
    if (!f.in_regular && !tp_loop_pollable(o->input_fd))
        f.in_regular = true;
    if (o->progress) {
        f.ev_progress = event_new(f.base, -1, EV_PERSIST, progress_cb, &f);
        struct timeval tv = {o->progress == TP_PROGRESS_BAR ? 0 : TP_PROGRESS_EVERY_S,
                             o->progress == TP_PROGRESS_BAR ? 200000 : 0};
        if (f.ev_progress == NULL || evtimer_add(f.ev_progress, &tv) != 0)
            tp_log_warn("run.no_progress_bar", "no progress bar: cannot arm its timer");
    }
    if (tp_engine_start(f.e) == 0) {
        event_base_dispatch(f.base);
        int failed = tp_engine_finish(f.e);
        status = failed || f.out_failed || f.in_failed ? 2 : f.status;
    }
    if (o->progress == TP_PROGRESS_BAR)
        fputs("\r\033[K", stderr);
out:
    report->elapsed_s = (double)(tp_now_us() - f.t0) / 1e6;
    if (f.e) {
        report->pool = *tp_engine_pool_stats(f.e);
        report->rerun = tp_engine_stats(f.e)->rerun;
        report->version_rerun = tp_engine_stats(f.e)->version_rerun;
        report->late = tp_engine_stats(f.e)->late;
    }
    tp_engine_free(f.e);
    if (f.ev_progress)
        event_free(f.ev_progress);
    if (f.ev_input)
        event_free(f.ev_input);
    tp_loop_free(&f.loop);
    tp_buf_free(&f.in);
    tp_request_parser_free(&f.parser);
    tp_buf_free(&f.out);
    tp_buf_free(&f.staged);
    free(f.held);
    return status;
}
