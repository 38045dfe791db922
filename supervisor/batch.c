/*
 * The batch runner: input lines become calls, calls become attempts on the
 * pool, attempts become one result line per call.
 *
 * Queues, all intrusive singly linked lists of tp_call_t:
 *   job->pending   a job's calls not yet started, in step order
 *   ready          calls whose turn it is, first come first served
 *   tool->waiting  calls whose tool is at its concurrency cap
 * A call is in at most one of them, or running, or waiting out a backoff.
 *
 * All work triggered by events (replies, reaps, timers, input) is gathered
 * by one deferred "kick" per loop turn: read more input, dispatch to idle
 * slots, write the finished results out in one write.
 */
#include "batch.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "buf.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "result.h"
#include "retry.h"

typedef struct tp_job tp_job_t;

typedef struct tp_call {
    struct tp_call *next;
    struct tp_call *lprev;      /* every live call, for drain and teardown */
    struct tp_call *lnext;
    tp_job_t *job;
    const tp_tool_t *tool;
    char *id;
    char *args;
    size_t args_len;
    uint64_t step;
    long line;
    uint64_t first_us;          /* first attempt's start */
    uint64_t deadline_us;       /* absolute; 0 = none */
    tp_attempt_t att;
    Toolpool__Attempt **trace;
    size_t n_trace;
    struct event *ev_backoff;
    struct tp_batch *b;
} tp_call_t;

struct tp_job {
    tp_job_t *hnext;
    tp_job_t *tnext;            /* on the batch's touched list */
    bool touched;
    uint64_t hash;
    tp_call_t *head;            /* pending, sorted by step */
    tp_call_t *tail;
    bool running;
    char name[];
};

typedef struct {
    tp_call_t *head;
    tp_call_t *tail;
} tp_queue_t;

typedef struct {
    int inflight;
    tp_queue_t waiting;
} tp_tool_state_t;

typedef struct tp_batch {
    const tp_batch_opts_t *o;
    struct event_base *base;
    tp_pool_t *pool;
    tp_rng_t rng;
    /* input */
    tp_buf_t in;
    size_t scan;                /* bytes of in already searched for '\n' */
    bool in_eof;
    bool in_regular;
    bool in_skip;               /* discarding the rest of an overlong line */
    off_t in_size;
    uint64_t in_read;
    long line_no;
    struct event *ev_input;
    /* calls */
    size_t live;                /* calls read and not yet finished */
    tp_call_t *all;             /* the live calls */
    size_t window;
    tp_queue_t ready;
    tp_tool_state_t *tools;
    tp_job_t **jobs;
    tp_job_t *touched;          /* jobs given calls this turn, to advance after reading */
    size_t jobs_cap;
    size_t jobs_n;
    /* output */
    tp_buf_t out;
    int status;
    /* lifecycle */
    struct event *ev_kick;
    struct event *ev_sigint;
    struct event *ev_sigterm;
    struct event *ev_drain;
    struct event *ev_progress;
    bool draining;
    bool closing;
    bool fatal;
    uint64_t t0;
    tp_batch_report_t *report;
} tp_batch_t;

static void kick(tp_batch_t *b)
{
    event_active(b->ev_kick, EV_TIMEOUT, 0);
}

static void q_push(tp_queue_t *q, tp_call_t *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
}

static tp_call_t *q_pop(tp_queue_t *q)
{
    tp_call_t *c = q->head;
    if (c) {
        q->head = c->next;
        if (q->head == NULL)
            q->tail = NULL;
        c->next = NULL;
    }
    return c;
}

/* ---- jobs: a chained hash table, entries removed when a job goes idle ---- */

static tp_job_t *job_get(tp_batch_t *b, const char *name, size_t len)
{
    uint64_t h = XXH3_64bits(name, len);
    size_t i = h & (b->jobs_cap - 1);
    for (tp_job_t *j = b->jobs[i]; j; j = j->hnext)
        if (j->hash == h && strncmp(j->name, name, len) == 0 && j->name[len] == 0)
            return j;
    if (b->jobs_n + 1 > b->jobs_cap) {
        size_t cap = b->jobs_cap * 2;
        tp_job_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return NULL;
        for (size_t k = 0; k < b->jobs_cap; k++)
            for (tp_job_t *j = b->jobs[k], *nx; j; j = nx) {
                nx = j->hnext;
                j->hnext = t[j->hash & (cap - 1)];
                t[j->hash & (cap - 1)] = j;
            }
        free(b->jobs);
        b->jobs = t;
        b->jobs_cap = cap;
        i = h & (cap - 1);
    }
    tp_job_t *j = calloc(1, sizeof *j + len + 1);
    if (j == NULL)
        return NULL;
    memcpy(j->name, name, len);
    j->hash = h;
    j->hnext = b->jobs[i];
    b->jobs[i] = j;
    b->jobs_n++;
    return j;
}

static void job_drop(tp_batch_t *b, tp_job_t *j)
{
    tp_job_t **pp = &b->jobs[j->hash & (b->jobs_cap - 1)];
    while (*pp != j)
        pp = &(*pp)->hnext;
    *pp = j->hnext;
    b->jobs_n--;
    free(j);
}

/* Inserts c among its job's pending calls, keeping step order. */
static void job_add(tp_job_t *j, tp_call_t *c)
{
    c->job = j;
    c->next = NULL;
    if (j->tail == NULL) {
        j->head = j->tail = c;
    } else if (j->tail->step <= c->step) {
        j->tail->next = c;
        j->tail = c;
    } else {
        tp_call_t **pp = &j->head;
        while ((*pp)->step <= c->step)
            pp = &(*pp)->next;
        c->next = *pp;
        *pp = c;
    }
}

/* The job's next call, if it is the job's turn: moves it to ready. */
static void job_advance(tp_batch_t *b, tp_job_t *j)
{
    if (j->running)
        return;
    tp_call_t *c = j->head;
    if (c == NULL) {
        job_drop(b, j);
        return;
    }
    j->head = c->next;
    if (j->head == NULL)
        j->tail = NULL;
    j->running = true;
    q_push(&b->ready, c);
}

/* ---- results ---- */

static void call_free(tp_call_t *c)
{
    tp_batch_t *b = c->b;
    if (c->lprev)
        c->lprev->lnext = c->lnext;
    else
        b->all = c->lnext;
    if (c->lnext)
        c->lnext->lprev = c->lprev;
    b->live--;
    for (size_t i = 0; i < c->n_trace; i++) {
        free(c->trace[i]->tool);
        free(c->trace[i]->outcome);
        free(c->trace[i]);
    }
    free(c->trace);
    free(c->att.message);
    free(c->att.result);
    if (c->ev_backoff)
        event_free(c->ev_backoff);
    free(c->id);
    free(c->args);
    free(c);
}

/* Appends the record, counts it, updates the exit status. */
static void emit(tp_batch_t *b, const Toolpool__Result *r)
{
    tp_result_write(&b->out, r);
    tp_summary_add(&b->report->summary, r);
    if (!r->ok && b->status == 0)
        b->status = 1;
}

/* A result for an input line that never became a call. */
static void emit_rejected(tp_batch_t *b, const char *id, const char *job, uint64_t step,
                          const char *tool, const char *args, tp_kind_t kind, const char *msg)
{
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = id != NULL;
    r.id = (char *)(id ? id : "");
    r.job = (char *)(job ? job : "");
    r.step = step;
    r.tool = (char *)(tool ? tool : "");
    r.ok = false;
    r.kind = (char *)tp_kind_name(kind);
    r.klass = (char *)tp_class_name(tp_kind_class(kind));
    r.message = (char *)msg;
    r.retryable = false;
    r.attempts = 0;
    if (args) {
        r.args.data = (uint8_t *)args;
        r.args.len = strlen(args);
    }
    emit(b, &r);
}

/*
 * Ends a call: its last attempt's outcome (or `kind` with `msg` when the
 * runner itself ends it) becomes its record. Its job's next step becomes
 * ready.
 */
static void finish(tp_batch_t *b, tp_call_t *c, tp_kind_t kind, const char *msg)
{
    const tp_attempt_t *a = &c->att;
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = true;
    r.id = c->id;
    r.job = c->job->name;
    r.step = c->step;
    r.tool = c->tool->name;
    r.ok = kind == TP_KIND_OK;
    r.attempts = (uint32_t)c->n_trace;
    r.trace = c->trace;
    r.n_trace = c->n_trace;
    r.served_by = c->tool->name;
    r.duration_us = c->first_us ? tp_now_us() - c->first_us : 0;
    r.args.data = (uint8_t *)c->args;
    r.args.len = c->args_len;
    r.cost = a->cost;
    if (r.ok) {
        r.result.data = (uint8_t *)a->result;
        r.result.len = a->result_len;
    } else {
        bool from_attempt = msg == NULL;
        r.kind = from_attempt ? (char *)a->kind_name : (char *)tp_kind_name(kind);
        r.klass = (char *)tp_class_name(tp_kind_class(from_attempt ? a->kind : kind));
        r.message = (char *)(from_attempt ? (a->message ? a->message : "") : msg);
        r.retryable = from_attempt && a->kind < TP_KIND__COUNT &&
                      (c->tool->policy.retry_on & (1ull << a->kind)) != 0;
        r.served_by = "";
    }
    emit(b, &r);
    tp_job_t *j = c->job;
    j->running = false;
    job_advance(b, j);
    call_free(c);
    kick(b);
}

/* ---- dispatch and retry ---- */

static void backoff_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_call_t *c = arg;
    q_push(&c->b->ready, c);
    kick(c->b);
}

/* Starts the call's next attempt on an idle slot (the caller checked one is idle). */
static void start_attempt(tp_batch_t *b, tp_call_t *c)
{
    const tp_policy_t *p = &c->tool->policy;
    uint64_t now = tp_now_us();
    if (c->first_us == 0) {
        c->first_us = now;
        c->deadline_us = p->deadline_us ? now + p->deadline_us : 0;
    }
    uint64_t timeout = p->timeout_us;
    if (c->deadline_us) {
        if (now >= c->deadline_us) {
            finish(b, c, c->att.kind, NULL);
            return;
        }
        if (c->deadline_us - now < timeout)
            timeout = c->deadline_us - now;
    }
    free(c->att.message);
    free(c->att.result);
    c->att = (tp_attempt_t){
        .tool = c->tool,
        .call_id = c->id,
        .job = c->job->name,
        .step = c->step,
        .number = (uint32_t)c->n_trace + 1,
        .args = c->args,
        .args_len = c->args_len,
        .timeout_us = timeout,
    };
    b->tools[c->tool->index].inflight++;
    int rc = tp_pool_submit(b->pool, &c->att);
    if (rc == -2) {
        b->tools[c->tool->index].inflight--;
        finish(b, c, TP_KIND_BAD_ARGUMENTS, c->att.message);
    } else if (rc < 0) {
        b->tools[c->tool->index].inflight--;
        q_push(&b->ready, c); /* cannot happen: the caller saw an idle slot */
    }
}

static void dispatch(tp_batch_t *b)
{
    while (tp_pool_idle(b->pool) > 0 && !b->closing) {
        tp_call_t *c = q_pop(&b->ready);
        if (c == NULL)
            return;
        tp_tool_state_t *ts = &b->tools[c->tool->index];
        uint32_t cap = c->tool->policy.concurrency;
        if (cap && ts->inflight >= (int)cap) {
            q_push(&ts->waiting, c);
            continue;
        }
        start_attempt(b, c);
    }
}

/* The pool's word that an attempt ended: record it, then retry or finish. */
static void attempt_done_cb(void *ctx, tp_attempt_t *a)
{
    tp_batch_t *b = ctx;
    tp_call_t *c = (tp_call_t *)((char *)a - offsetof(tp_call_t, att));
    tp_tool_state_t *ts = &b->tools[c->tool->index];
    ts->inflight--;
    tp_call_t *w = q_pop(&ts->waiting);
    if (w)
        q_push(&b->ready, w);

    Toolpool__Attempt *t = malloc(sizeof *t);
    Toolpool__Attempt **grown = realloc(c->trace, (c->n_trace + 1) * sizeof *grown);
    if (t == NULL || grown == NULL) {
        free(t);
        if (grown)
            c->trace = grown;
        finish(b, c, TP_KIND_SERVER_ERROR, "out of memory recording the trace");
        return;
    }
    toolpool__attempt__init(t);
    c->trace = grown;
    c->trace[c->n_trace++] = t;
    t->attempt = a->number;
    t->tool = strdup(c->tool->name);
    t->outcome = strdup(a->ok ? "ok" : a->kind_name);
    t->duration_us = a->ended_us - a->started_us;

    if (a->ok) {
        finish(b, c, TP_KIND_OK, NULL);
        return;
    }
    if (a->kind == TP_KIND_CANCELLED) {
        finish(b, c, TP_KIND_CANCELLED, a->message);
        return;
    }
    tp_retry_t d = tp_retry_decide(&c->tool->policy, a->kind, a->number, a->retry_after_ms,
                                   tp_now_us(), c->deadline_us, &b->rng);
    if (!d.retry) {
        finish(b, c, a->kind, NULL);
        return;
    }
    if (b->draining) {
        char msg[256];
        snprintf(msg, sizeof msg, "run interrupted after %zu attempt%s (last: %s: %s)", c->n_trace,
                 c->n_trace == 1 ? "" : "s", a->kind_name, a->message ? a->message : "");
        finish(b, c, TP_KIND_CANCELLED, msg);
        return;
    }
    t->backoff_us = d.wait_us;
    if (d.wait_us == 0) {
        q_push(&b->ready, c);
        kick(b);
        return;
    }
    if (c->ev_backoff == NULL)
        c->ev_backoff = evtimer_new(b->base, backoff_cb, c);
    struct timeval tv = {.tv_sec = (time_t)(d.wait_us / 1000000u),
                         .tv_usec = (suseconds_t)(d.wait_us % 1000000u)};
    evtimer_add(c->ev_backoff, &tv);
}

static void idle_cb(void *ctx)
{
    kick(ctx);
}

static void fatal_cb(void *ctx, const char *message)
{
    tp_batch_t *b = ctx;
    tp_log_error("%s", message);
    b->fatal = true;
    b->status = 2;
    b->closing = true;
    tp_pool_shutdown(b->pool, true);
}

static void closed_cb(void *ctx)
{
    tp_batch_t *b = ctx;
    event_base_loopexit(b->base, NULL);
}

/* ---- input ---- */

/* The closest tool names to a mistyped one (edit distance), for the message. */
static void suggest(const tp_registry_t *reg, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name), best[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    const char *who[3] = {NULL, NULL, NULL};
    if (n > 64)
        n = 64;
    for (size_t t = 0; t < reg->n_tools; t++) {
        const char *cand = reg->tools[t].name;
        size_t m = strlen(cand);
        if (m > 64)
            continue;
        size_t row[65];
        for (size_t j = 0; j <= m; j++)
            row[j] = j;
        for (size_t i = 1; i <= n; i++) {
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= m; j++) {
                size_t up = row[j];
                size_t cost = name[i - 1] == cand[j - 1] ? 0 : 1;
                size_t v = diag + cost;
                if (row[j] + 1 < v)
                    v = row[j] + 1;
                if (row[j - 1] + 1 < v)
                    v = row[j - 1] + 1;
                row[j] = v;
                diag = up;
            }
        }
        size_t d = row[m];
        for (int k = 0; k < 3; k++)
            if (d < best[k]) {
                for (int s = 2; s > k; s--) {
                    best[s] = best[s - 1];
                    who[s] = who[s - 1];
                }
                best[k] = d;
                who[k] = cand;
                break;
            }
    }
    out[0] = 0;
    size_t len = 0;
    for (int k = 0; k < 3 && who[k]; k++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", k ? ", " : "", who[k]);
}

/* Turns one input line into a call, or into a result of its own. */
static void take_line(tp_batch_t *b, const char *line, size_t len)
{
    long no = b->line_no;
    size_t i = 0;
    while (i < len && strchr(" \t\r", line[i]))
        i++;
    if (i == len)
        return; /* blank lines are not calls */

    char msg[512];
    json_error_t jerr;
    json_t *v = json_loadb(line, len, 0, &jerr);
    if (v == NULL || !json_is_object(v)) {
        if (v == NULL)
            snprintf(msg, sizeof msg, "line %ld: not valid JSON: %s (column %d)", no, jerr.text, jerr.column);
        else
            snprintf(msg, sizeof msg, "line %ld: a call must be a JSON object", no);
        emit_rejected(b, NULL, NULL, 0, NULL, NULL, TP_KIND_INVALID_REQUEST, msg);
        json_decref(v);
        return;
    }
    json_t *jid = json_object_get(v, "id"), *jjob = json_object_get(v, "job");
    json_t *jstep = json_object_get(v, "step"), *jtool = json_object_get(v, "tool");
    json_t *jargs = json_object_get(v, "args");
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
    char *args = NULL;
    tp_buf_t ab = {0};
    if (jargs == NULL)
        args = strdup("{}");
    else if (tp_json_write(&ab, jargs, 0) == 0 && tp_buf_append(&ab, "", 1) == 0)
        args = (char *)ab.data;
    else
        tp_buf_free(&ab);
    if (bad) {
        snprintf(msg, sizeof msg, "line %ld: %s", no, bad);
        emit_rejected(b, id, id ? job : NULL, step, tool, NULL, TP_KIND_INVALID_REQUEST, msg);
        goto out;
    }
    const tp_tool_t *t = tp_registry_find(b->o->reg, tool);
    if (t == NULL) {
        char near[256];
        suggest(b->o->reg, tool, near, sizeof near);
        snprintf(msg, sizeof msg, "line %ld: unknown tool \"%s\"%s%s%s", no, tool,
                 near[0] ? " (closest: " : "", near, near[0] ? ")" : "");
        emit_rejected(b, id, job, step, tool, args, TP_KIND_UNKNOWN_TOOL, msg);
        goto out;
    }
    tp_call_t *c = calloc(1, sizeof *c);
    tp_job_t *j = c ? job_get(b, job, strlen(job)) : NULL;
    if (c == NULL || j == NULL || args == NULL || (c->id = strdup(id)) == NULL) {
        emit_rejected(b, id, job, step, tool, NULL, TP_KIND_INVALID_REQUEST, "out of memory");
        if (c)
            free(c->id);
        free(c);
        goto out;
    }
    c->b = b;
    c->tool = t;
    c->args = args;
    c->args_len = strlen(args);
    args = NULL;
    c->step = step;
    c->line = no;
    c->att.kind = TP_KIND_OK;
    job_add(j, c);
    if (!j->touched) {
        j->touched = true;
        j->tnext = b->touched;
        b->touched = j;
    }
    c->lnext = b->all;
    if (b->all)
        b->all->lprev = c;
    b->all = c;
    b->live++;
out:
    free(args);
    json_decref(v);
}

/*
 * Reads and takes input lines while fewer than the window of calls are
 * live. Returns when the window is full, at EOF, or when a pipe has nothing
 * more for now (its event calls back).
 */
static void pump_input(tp_batch_t *b)
{
    while (!b->in_eof && !b->draining && b->live < b->window) {
        uint8_t *head = b->in.data + b->in.off;
        size_t avail = tp_buf_avail(&b->in);
        uint8_t *nl = avail > b->scan ? memchr(head + b->scan, '\n', avail - b->scan) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - head);
            b->line_no++;
            b->scan = 0;
            if (b->in_skip)
                b->in_skip = false;
            else
                take_line(b, (const char *)head, len);
            tp_buf_consume(&b->in, len + 1);
            b->in_read += len + 1;
            continue;
        }
        b->scan = avail;
        if (avail > b->o->max_frame && !b->in_skip) {
            char msg[128];
            b->in_skip = true;
            snprintf(msg, sizeof msg, "line %ld: longer than the %u-byte limit", b->line_no + 1,
                     b->o->max_frame);
            emit_rejected(b, NULL, NULL, 0, NULL, NULL, TP_KIND_INVALID_REQUEST, msg);
        }
        if (b->in_skip) {
            b->in_read += avail;
            tp_buf_reset(&b->in);
            b->scan = 0;
        }
        ssize_t n = tp_buf_read_fd(&b->in, b->o->input_fd);
        if (n < 0 && errno == EAGAIN) {
            event_add(b->ev_input, NULL);
            return;
        }
        if (n < 0)
            tp_log_error("reading %s: %s", b->o->input_name, strerror(errno));
        if (n <= 0) {
            b->in_eof = true;
            if (tp_buf_avail(&b->in) > 0 && !b->in_skip) {
                b->line_no++;
                take_line(b, (const char *)tp_buf_head(&b->in), tp_buf_avail(&b->in));
            }
            b->in_read += tp_buf_avail(&b->in);
            tp_buf_reset(&b->in);
        }
    }
}

/*
 * Jobs that got calls while reading start their first pending step only
 * now, so steps read in one turn start in step order, not line order.
 */
static void advance_touched(tp_batch_t *b)
{
    tp_job_t *j = b->touched;
    b->touched = NULL;
    while (j) {
        tp_job_t *nx = j->tnext;
        j->touched = false;
        job_advance(b, j);
        j = nx;
    }
}

static void input_cb(evutil_socket_t fd, short what, void *arg)
{
    kick(arg);
}

/* ---- lifecycle ---- */

static void flush_output(tp_batch_t *b)
{
    if (tp_buf_avail(&b->out) == 0)
        return;
    if (tp_write_all(b->o->output_fd, tp_buf_head(&b->out), tp_buf_avail(&b->out)) < 0 && !b->fatal) {
        tp_log_error("writing results: %s", strerror(errno));
        fatal_cb(b, "cannot write results; stopping");
    }
    tp_buf_reset(&b->out);
}

/* The loop turn's gathered work: input, dispatch, output, and the end. */
static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    if (!b->closing) {
        pump_input(b);
        advance_touched(b);
        dispatch(b);
    }
    flush_output(b);
    bool idle = b->live == 0 || (b->draining && tp_pool_busy(b->pool) == 0);
    if (!b->closing && (b->in_eof || b->draining) && idle) {
        b->closing = true;
        tp_pool_shutdown(b->pool, false);
    }
}

/*
 * Stops taking calls. Calls read but never started get no record (a rerun
 * runs them); calls between attempts end Cancelled now; running attempts
 * may finish until the drain timer.
 */
static void drain(tp_batch_t *b)
{
    b->draining = true;
    b->report->interrupted = true;
    if (b->status == 0)
        b->status = 1;
    event_del(b->ev_input);
    b->ready.head = b->ready.tail = NULL;
    for (size_t i = 0; i < b->o->reg->n_tools; i++)
        b->tools[i].waiting.head = b->tools[i].waiting.tail = NULL;
    for (size_t k = 0; k < b->jobs_cap; k++)
        for (tp_job_t *j = b->jobs[k]; j; j = j->hnext)
            j->head = j->tail = NULL; /* the calls stay on the live list */
    tp_call_t *c = b->all, *nx;
    for (; c; c = nx) {
        nx = c->lnext;
        if (tp_pool_is_running(b->pool, &c->att))
            continue;
        if (c->n_trace == 0) {
            b->report->not_started++;
            call_free(c);
        } else {
            if (c->ev_backoff)
                event_del(c->ev_backoff);
            finish(b, c, TP_KIND_CANCELLED, "run interrupted between attempts");
        }
    }
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    b->closing = true;
    tp_pool_shutdown(b->pool, true);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    tp_batch_t *b = arg;
    if (b->draining) {
        tp_log_warn("second signal: stopping running calls now");
        drain_timeout_cb(-1, 0, b);
        return;
    }
    tp_log_warn("%s: finishing %d running call%s (signal again to stop now)", strsignal((int)sig),
                tp_pool_busy(b->pool), tp_pool_busy(b->pool) == 1 ? "" : "s");
    drain(b);
    struct timeval tv = {.tv_sec = (time_t)(b->o->drain_us / 1000000u),
                         .tv_usec = (suseconds_t)(b->o->drain_us % 1000000u)};
    evtimer_add(b->ev_drain, &tv);
    kick(b);
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_batch_t *b = arg;
    /* Calls done over calls expected: exact at EOF, else scaled from the bytes read. */
    double done = (double)b->report->summary.calls, seen = done + (double)b->live, frac = -1;
    if (b->in_eof)
        frac = seen > 0 ? done / seen : 1;
    else if (b->in_regular && b->in_read > 0 && b->in_size > 0)
        frac = done / (seen * (double)b->in_size / (double)b->in_read);
    tp_progress_draw(stderr, &b->report->summary, frac, (double)(tp_now_us() - b->t0) / 1e6,
                     tp_pool_busy(b->pool));
}

/* Frees what is left when the loop ends early (a fatal error). */
static void free_leftovers(tp_batch_t *b)
{
    while (b->all)
        call_free(b->all);
    for (size_t k = 0; k < b->jobs_cap; k++)
        for (tp_job_t *j = b->jobs[k], *nx; j; j = nx) {
            nx = j->hnext;
            free(j);
        }
}

int tp_batch_run(const tp_batch_opts_t *o, tp_batch_report_t *report)
{
    tp_batch_t b = {.o = o, .report = report, .t0 = tp_now_us()};
    memset(report, 0, sizeof *report);
    struct stat st;
    if (fstat(o->input_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        b.in_regular = true;
        b.in_size = st.st_size;
    } else {
        fcntl(o->input_fd, F_SETFL, fcntl(o->input_fd, F_GETFL) | O_NONBLOCK);
    }
    signal(SIGPIPE, SIG_IGN);
    tp_rng_seed(&b.rng, o->seed);
    b.window = o->window ? o->window : (size_t)o->workers * 64 + 1024;
    b.jobs_cap = 1024;
    b.jobs = calloc(b.jobs_cap, sizeof *b.jobs);
    b.tools = calloc(o->reg->n_tools, sizeof *b.tools);
    /* Attempt deadlines want better than epoll's millisecond rounding: timerfd. */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        b.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (b.jobs == NULL || b.tools == NULL || b.base == NULL) {
        tp_log_error("out of memory");
        return 2;
    }
    tp_pool_opts_t po = {
        .workers = o->workers,
        .worker_path = o->worker_path,
        .max_frame = o->max_frame,
        .recycle_after = o->recycle_after,
        .done_cb = attempt_done_cb,
        .idle_cb = idle_cb,
        .fatal_cb = fatal_cb,
        .closed_cb = closed_cb,
        .ctx = &b,
    };
    b.pool = tp_pool_new(b.base, &po);
    b.ev_kick = event_new(b.base, -1, 0, kick_cb, &b);
    b.ev_input = event_new(b.base, o->input_fd, EV_READ, input_cb, &b);
    b.ev_sigint = evsignal_new(b.base, SIGINT, signal_cb, &b);
    b.ev_sigterm = evsignal_new(b.base, SIGTERM, signal_cb, &b);
    b.ev_drain = evtimer_new(b.base, drain_timeout_cb, &b);
    evsignal_add(b.ev_sigint, NULL);
    evsignal_add(b.ev_sigterm, NULL);
    if (o->progress) {
        b.ev_progress = event_new(b.base, -1, EV_PERSIST, progress_cb, &b);
        struct timeval tv = {0, 200000};
        evtimer_add(b.ev_progress, &tv);
    }
    int status;
    if (b.pool == NULL || tp_pool_start(b.pool) < 0) {
        status = 2;
    } else {
        kick(&b);
        event_base_dispatch(b.base);
        flush_output(&b);
        status = b.status;
    }
    if (o->progress)
        fputs("\r\033[K", stderr);
    report->elapsed_s = (double)(tp_now_us() - b.t0) / 1e6;
    if (b.pool)
        report->pool = *tp_pool_stats(b.pool);
    tp_pool_free(b.pool);
    free_leftovers(&b);
    if (b.ev_progress)
        event_free(b.ev_progress);
    event_free(b.ev_kick);
    event_free(b.ev_input);
    event_free(b.ev_sigint);
    event_free(b.ev_sigterm);
    event_free(b.ev_drain);
    event_base_free(b.base);
    free(b.jobs);
    free(b.tools);
    tp_buf_free(&b.in);
    tp_buf_free(&b.out);
    return status;
}
