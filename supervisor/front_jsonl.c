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
#include "front_jsonl.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "callline.h"
#include "clock.h"
#include "engine.h"
#include "json.h"
#include "log.h"

/* Input lines one turn takes at most. */
#define TP_LINES_PER_TURN 1024

typedef struct tp_jsonl {
    const tp_batch_opts_t *o;
    tp_engine_t *e;
    struct event_base *base;
    /* input */
    tp_buf_t in;
    tp_buf_t line_strs, line_canon; /* scratch of the fast way in (callline.h) */
    size_t scan;                /* bytes of in already searched for '\n' */
    bool in_eof;
    bool in_regular;
    bool in_ready;              /* a pipe's read event fired: one read will not block */
    bool in_skip;               /* discarding the rest of an overlong line */
    bool in_failed;             /* a read failed: exit 2 */
    off_t in_size;
    uint64_t in_read;
    long line_no;
    size_t window;
    struct event *ev_input;
    /* output */
    tp_buf_t out;
    bool out_failed;
    int status;
    /* lifecycle */
    struct event *ev_sigint;
    struct event *ev_sigterm;
    struct event *ev_progress;
    uint64_t t0;
    tp_batch_report_t *report;
} tp_jsonl_t;

static void input_failed(tp_jsonl_t *f);

/* One call's answer: its line goes out with the rest of its commit's. */
static void answer_cb(void *ctx, const tp_answer_t *a)
{
    tp_jsonl_t *f = ctx;
    if (a->not_started) {
        f->report->not_started++;
        return;
    }
    tp_buf_append(&f->out, a->line, a->len);
    tp_summary_add(&f->report->summary, a->result);
    if (a->recorded)
        f->report->resumed++;
    if (!a->result->ok && f->status == 0)
        f->status = 1;
}

static void flush_cb(void *ctx)
{
    tp_jsonl_t *f = ctx;
    if (tp_buf_avail(&f->out) == 0)
        return;
    if (!f->out_failed && tp_write_all(f->o->output_fd, tp_buf_head(&f->out), tp_buf_avail(&f->out)) < 0) {
        tp_log_error("writing results: %s", strerror(errno));
        tp_log_error("cannot write results; stopping");
        f->out_failed = true;
        f->status = 2;
        tp_engine_drain(f->e);
        tp_engine_drain(f->e); /* a second time: kill what runs */
    }
    tp_buf_reset(&f->out);
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

/* Turns one input line into a call for the engine, or into an answer of its own. */
static void take_line(tp_jsonl_t *f, const char *line, size_t len)
{
    long no = f->line_no;
    size_t i = 0;
    while (i < len && line[i] && strchr(" \t\r", line[i]))
        i++;
    if (i == len)
        return; /* blank lines are not calls */

    char msg[512], where[32];
    tp_request_t rq = {.where = line_where(where, no)};
    json_t *v = NULL;
    tp_call_line_t fast;
    int plain = tp_call_line_scan(line, len, &fast, &f->line_strs, &f->line_canon);
    if (plain < 0) {
        snprintf(msg, sizeof msg, "line %ld: out of memory reading the call", no);
        tp_engine_reject(f->e, NULL, NULL, 0, NULL, msg, answer_cb, f);
        return;
    }
    if (plain) {
        rq.id = fast.id;
        rq.tool = fast.tool;
        rq.job = fast.job;
        rq.step = fast.step;
        rq.args = fast.args;
        rq.args_len = fast.args_len;
        rq.give_args = true;
        rq.canon = fast.canon;
        rq.canon_len = fast.canon_len;
        tp_engine_submit(f->e, &rq, answer_cb, f);
        return;
    }
    /* jansson's way: escapes, reals, and every message for a bad line. */
    json_error_t jerr;
    v = json_loadb(line, len, 0, &jerr);
    if (v == NULL || !json_is_object(v)) {
        if (v == NULL)
            snprintf(msg, sizeof msg, "line %ld: not valid JSON: %s (column %d)", no, jerr.text, jerr.column);
        else
            snprintf(msg, sizeof msg, "line %ld: a call must be a JSON object", no);
        tp_engine_reject(f->e, NULL, NULL, 0, NULL, msg, answer_cb, f);
        json_decref(v);
        return;
    }
    json_t *jid = json_object_get(v, "id"), *jjob = json_object_get(v, "job");
    json_t *jstep = json_object_get(v, "step"), *jtool = json_object_get(v, "tool");
    json_t *jargs = json_object_get(v, "args"), *owned_args = NULL;
    const char *id = json_is_string(jid) && json_string_length(jid) > 0 ? json_string_value(jid) : NULL;
    const char *tool = json_string_value(jtool);
    const char *bad = NULL;
    if (id == NULL)
        bad = "\"id\" must be a non-empty string";
    else if (jjob && (!json_is_string(jjob) || json_string_length(jjob) == 0))
        bad = "\"job\" must be a non-empty string";
    else if (jstep && (!json_is_integer(jstep) || json_integer_value(jstep) < 0))
        bad = "\"step\" must be a non-negative integer";
    else if (tool == NULL || !*tool)
        bad = "\"tool\" must be a non-empty string";
    else if (jargs && !json_is_object(jargs))
        bad = "\"args\" must be a JSON object";
    const char *job = jjob ? json_string_value(jjob) : id;
    uint64_t step = jstep ? (uint64_t)json_integer_value(jstep) : 0;
    if (bad) {
        snprintf(msg, sizeof msg, "line %ld: %s", no, bad);
        tp_engine_reject(f->e, id, id ? job : NULL, step, tool, msg, answer_cb, f);
        json_decref(v);
        return;
    }
    if (jargs == NULL)
        jargs = owned_args = json_object();
    tp_buf_t ab = {0};
    if (jargs && tp_json_write(&ab, jargs, 0) == 0 && tp_buf_append(&ab, "", 1) == 0) {
        rq.id = id;
        rq.tool = tool;
        rq.job = job;
        rq.step = step;
        rq.args = (char *)ab.data;
        rq.args_len = ab.len - 1;
        rq.give_args = true;
        rq.jargs = jargs;
        tp_engine_submit(f->e, &rq, answer_cb, f);
    } else {
        tp_buf_free(&ab);
        tp_engine_reject(f->e, id, job, step, tool, "out of memory", answer_cb, f);
    }
    json_decref(owned_args);
    json_decref(v);
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
    while (!f->in_eof && !tp_engine_draining(f->e) && tp_engine_live(f->e) < f->window) {
        if (budget-- == 0) {
            tp_engine_kick(f->e);
            return;
        }
        uint8_t *head = f->in.data + f->in.off;
        size_t avail = tp_buf_avail(&f->in);
        uint8_t *nl = avail > f->scan ? memchr(head + f->scan, '\n', avail - f->scan) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - head);
            f->line_no++;
            f->scan = 0;
            if (f->in_skip)
                f->in_skip = false;
            else
                take_line(f, (const char *)head, len);
            tp_buf_consume(&f->in, len + 1);
            f->in_read += len + 1;
            continue;
        }
        f->scan = avail;
        if (avail > f->o->max_frame && !f->in_skip) {
            char msg[128];
            f->in_skip = true;
            snprintf(msg, sizeof msg, "line %ld: longer than the %u-byte limit", f->line_no + 1, f->o->max_frame);
            tp_engine_reject(f->e, NULL, NULL, 0, NULL, msg, answer_cb, f);
        }
        if (f->in_skip) {
            f->in_read += avail;
            tp_buf_reset(&f->in);
            f->scan = 0;
        }
        /*
         * A pipe or terminal is read once per readiness event, blocking: no
         * O_NONBLOCK on a descriptor we share (stdin's open file may be
         * stdout's too). A regular file is always ready.
         */
        if (!f->in_regular && !f->in_ready) {
            if (event_add(f->ev_input, NULL) < 0) {
                tp_log_error("reading %s: cannot wait for input", f->o->input_name);
                input_failed(f);
            }
            return;
        }
        f->in_ready = false;
        ssize_t n = tp_buf_read_fd(&f->in, f->o->input_fd);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0) {
            /* Not the end of the input: the calls after it were never read. */
            tp_log_error("reading %s: %s", f->o->input_name, strerror(errno));
            input_failed(f);
            return;
        }
        if (n == 0) {
            f->in_eof = true;
            if (tp_buf_avail(&f->in) > 0 && !f->in_skip) {
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
        tp_log_warn("second signal: stopping running calls now");
        tp_engine_drain(f->e);
        return;
    }
    int busy = tp_engine_busy(f->e);
    tp_log_warn("%s: finishing %d running call%s (signal again to stop now)", strsignal((int)sig), busy,
                busy == 1 ? "" : "s");
    f->report->interrupted = true;
    if (f->status == 0)
        f->status = 1;
    event_del(f->ev_input);
    tp_engine_drain(f->e);
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_jsonl_t *f = arg;
    /* Calls done over calls expected: exact at EOF, else scaled from the bytes read. */
    double done = (double)f->report->summary.calls, seen = done + (double)tp_engine_live(f->e), frac = -1;
    if (f->in_eof)
        frac = seen > 0 ? done / seen : 1;
    else if (f->in_regular && f->in_read > 0 && f->in_size > 0)
        frac = done / (seen * (double)f->in_size / (double)f->in_read);
    tp_progress_draw(stderr, &f->report->summary, frac, (double)(tp_now_us() - f->t0) / 1e6,
                     tp_engine_busy(f->e));
}

/* Whether epoll can watch fd (asked of a scratch epoll, so libevent does not complain). */
static bool pollable(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return true; /* libevent will say what is wrong */
    struct epoll_event ev = {.events = EPOLLIN};
    bool ok = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0 || errno != EPERM;
    close(ep);
    return ok;
}

int tp_batch_run(const tp_batch_opts_t *o, tp_batch_report_t *report)
{
    tp_jsonl_t f = {.o = o, .report = report, .t0 = tp_now_us()};
    memset(report, 0, sizeof *report);
    struct stat st;
    if (fstat(o->input_fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        tp_log_error("%s is a directory: give a file of calls, one JSON object a line", o->input_name);
        return 2;
    }
    if (fstat(o->input_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        f.in_regular = true;
        f.in_size = st.st_size;
    }
    signal(SIGPIPE, SIG_IGN);
    f.window = o->window ? o->window : (size_t)o->workers * 64 + 1024;
    /* Attempt deadlines want better than epoll's millisecond rounding: timerfd. */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        /* A timer is armed from the clock now, not from the loop turn's start. */
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
        f.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (f.base == NULL) {
        tp_log_error("out of memory");
        return 2;
    }
    tp_engine_opts_t eo = {
        .reg = o->reg,
        .store = o->store,
        .base = f.base,
        .workers = o->workers,
        .worker_path = o->worker_path,
        .max_frame = o->max_frame,
        .recycle_after = o->recycle_after,
        .pipeline = o->pipeline,
        .drain_us = o->drain_us,
        .max_args = o->max_args,
        .seed = o->seed,
    };
    tp_front_t front = {.feed = feed_cb, .flush = flush_cb, .ctx = &f};
    int status = 2;
    f.e = tp_engine_new(&eo);
    f.ev_input = event_new(f.base, o->input_fd, EV_READ, input_cb, &f);
    f.ev_sigint = evsignal_new(f.base, SIGINT, signal_cb, &f);
    f.ev_sigterm = evsignal_new(f.base, SIGTERM, signal_cb, &f);
    if (f.e == NULL || f.ev_input == NULL || f.ev_sigint == NULL || f.ev_sigterm == NULL ||
        tp_engine_add_front(f.e, &front) < 0 || evsignal_add(f.ev_sigint, NULL) < 0 ||
        evsignal_add(f.ev_sigterm, NULL) < 0) {
        tp_log_error("out of memory");
        goto out;
    }
    /*
     * What epoll refuses to watch (/dev/null, some devices) is read the way
     * a regular file is: each read blocks until there is something, or EOF.
     */
    if (!f.in_regular && !pollable(o->input_fd))
        f.in_regular = true;
    if (o->progress) {
        f.ev_progress = event_new(f.base, -1, EV_PERSIST, progress_cb, &f);
        struct timeval tv = {0, 200000};
        if (f.ev_progress)
            evtimer_add(f.ev_progress, &tv);
    }
    if (tp_engine_start(f.e) == 0) {
        event_base_dispatch(f.base);
        tp_engine_finish(f.e);
        status = tp_engine_failed(f.e) || f.out_failed || f.in_failed ? 2 : f.status;
    }
    if (o->progress)
        fputs("\r\033[K", stderr);
out:
    report->elapsed_s = (double)(tp_now_us() - f.t0) / 1e6;
    if (f.e)
        report->pool = *tp_engine_pool_stats(f.e);
    tp_engine_free(f.e);
    if (f.ev_progress)
        event_free(f.ev_progress);
    if (f.ev_input)
        event_free(f.ev_input);
    if (f.ev_sigint)
        event_free(f.ev_sigint);
    if (f.ev_sigterm)
        event_free(f.ev_sigterm);
    event_base_free(f.base);
    tp_buf_free(&f.in);
    tp_buf_free(&f.line_strs);
    tp_buf_free(&f.line_canon);
    tp_buf_free(&f.out);
    return status;
}
