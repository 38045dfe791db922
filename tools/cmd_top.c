/*
 * toolpool top: what every supervisor on a store is doing now, from their
 * scoreboards (boards.h), refreshed every second on a terminal.
 *
 *   toolpool top [--store DIR] [--sort age|tool|job|id] [--interval S] [--once] [--json]
 *
 * Per supervisor: its command and pid, how long it has run, a run's
 * progress and ETA (when it gave its total), calls answered, running and
 * queued, and workers busy; per tool: calls, ok, failed, calls/s, running,
 * queued, latency p50/p99 and failures by kind; then every running call
 * with its tool, job, attempt, age and timeout, oldest first: one past its
 * timeout is STUCK (its worker should have been killed: a tool that
 * ignores TERM during its kill_grace, or a supervisor that cannot keep up).
 *
 * The live view is the terminal's alternate screen in raw mode: q quits, s
 * changes the order. Calls/s there is over the last refresh; with --once
 * (one snapshot, text or --json, for scripts) it is since the supervisor
 * began.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "boards.h"
#include "buf.h"
#include "cli.h"
#include "clock.h"
#include "log.h"
#include "store.h"
#include "taxonomy.h"

/* clang-format off */
static const char top_usage[] =
    "usage: toolpool top [--store DIR] [--sort age|tool|job|id] [--interval SECONDS]\n"
    "                    [--once] [--json]\n"
    "What every supervisor working on the store (run, serve, mcp) is doing now,\n"
    "read from its scoreboard in shared memory, refreshed every second: a run's\n"
    "progress and ETA, calls answered, running and queued, and workers busy; per\n"
    "tool calls, ok, failed, calls/s, running, queued, latency p50/p99 and\n"
    "failures by kind; every running call with its tool, job, attempt, age and\n"
    "timeout, oldest first (a call past its timeout shows as STUCK).\n"
    "Keys: q quits, s changes the order of the running calls.\n"
    "  -s, --store DIR     the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "      --sort KEY      running calls by age (the default, oldest first),\n"
    "                      tool, job or id\n"
    "      --interval S    seconds between refreshes (default 1)\n"
    "      --once          print one snapshot and exit (calls/s since each began)\n"
    "      --json          with --once: one JSON object, {\"supervisors\": [...]}\n";
/* clang-format on */

typedef enum { SORT_AGE, SORT_TOOL, SORT_JOB, SORT_ID, SORT__N } sort_t;
static const char *const sort_names[SORT__N] = {"age", "tool", "job", "id"};

/* Calls answered per tool at the last refresh, for the live view's calls/s. */
typedef struct {
    int32_t pid;
    uint32_t tool;
    uint64_t calls;
    uint64_t done;
} prev_t;

typedef struct {
    const char *dir;
    sort_t sort;
    uint64_t now_us; /* tp_now_us() of the snapshot */
    prev_t *prev;
    size_t n_prev;
    double prev_dt; /* seconds since the last refresh; 0: none */
    bool live;      /* the live view is up: what goes wrong is said once it is down (why) */
    char why[600];
} top_t;

static const tp_sb_snap_t *sort_snap; /* qsort's context: the board whose calls are sorted */
static sort_t sort_key;

static int by_key(const void *a, const void *b)
{
    const tp_sb_slot_t *x = a, *y = b;
    int c = 0;
    switch (sort_key) {
    case SORT_TOOL:
        c = strcmp(sort_snap->tools[x->tool].name, sort_snap->tools[y->tool].name);
        break;
    case SORT_JOB:
        c = strcmp(x->job, y->job);
        break;
    case SORT_ID:
        c = strcmp(x->call_id, y->call_id);
        break;
    default:
        break;
    }
    if (c == 0) {
        /* oldest first; a call queued on its worker (not started) after every running one */
        uint64_t xs = x->started_us ? x->started_us : UINT64_MAX, ys = y->started_us ? y->started_us : UINT64_MAX;
        c = (xs > ys) - (xs < ys);
    }
    return c;
}

static void sort_calls(const tp_sb_snap_t *s, sort_t key)
{
    sort_snap = s;
    sort_key = key;
    if (s->n_busy > 1)
        qsort(s->slots, s->n_busy, sizeof *s->slots, by_key);
}

static const prev_t *prev_of(const top_t *t, int32_t pid, uint32_t tool)
{
    for (size_t i = 0; i < t->n_prev; i++)
        if (t->prev[i].pid == pid && t->prev[i].tool == tool)
            return &t->prev[i];
    return NULL;
}

static double uptime_s(const top_t *t, const tp_sb_snap_t *s)
{
    return t->now_us > s->started_mono_us ? (double)(t->now_us - s->started_mono_us) / 1e6 : 0;
}

/* Calls/s of a tool (tool < n_tools) or of the whole board (tool UINT32_MAX). */
static double rate(const top_t *t, const tp_sb_snap_t *s, uint32_t tool)
{
    uint64_t now = tool == UINT32_MAX ? s->c.done : s->tools[tool].sum.calls;
    const prev_t *p = t->prev_dt > 0 ? prev_of(t, s->pid, tool) : NULL;
    uint64_t was = p ? (tool == UINT32_MAX ? p->done : p->calls) : 0;
    if (p && now >= was)
        return (double)(now - was) / t->prev_dt;
    double up = uptime_s(t, s);
    return up > 0 ? (double)now / up : 0;
}

static bool stuck(const top_t *t, const tp_sb_slot_t *c)
{
    return c->timeout_us && c->started_us && t->now_us > c->started_us && t->now_us - c->started_us > c->timeout_us;
}

static uint64_t queued(const tp_sb_tool_t *x)
{
    uint64_t held = atomic_load_explicit(&x->held, memory_order_relaxed);
    uint64_t in = atomic_load_explicit(&x->in_flight, memory_order_relaxed);
    return held > in ? held - in : 0;
}

/* ---- --json ---- */

static json_t *tool_json(const top_t *t, const tp_sb_snap_t *s, uint32_t i)
{
    const tp_sb_tool_t *x = &s->tools[i];
    json_t *fail = json_object(), *classes = json_object();
    for (int k = TP_KIND_TIMEOUT; k <= TP_KIND_OTHER; k++) {
        uint64_t n = x->sum.by_kind[k];
        if (n == 0)
            continue;
        json_object_set_new(fail, k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                            json_integer((json_int_t)n));
        const char *cls = k == TP_KIND_OTHER ? "permanent" : tp_class_name(tp_kind_class((tp_kind_t)k));
        json_t *was = json_object_get(classes, cls);
        json_object_set_new(classes, cls, json_integer((was ? json_integer_value(was) : 0) + (json_int_t)n));
    }
    return json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:o, s:o}", "tool", x->name, "calls",
        (json_int_t)x->sum.calls, "ok", (json_int_t)x->sum.ok, "failed", (json_int_t)(x->sum.calls - x->sum.ok),
        "attempts", (json_int_t)x->sum.attempts, "retries", (json_int_t)x->sum.retries, "timeouts",
        (json_int_t)atomic_load_explicit(&x->timeouts, memory_order_relaxed), "in_flight",
        (json_int_t)atomic_load_explicit(&x->in_flight, memory_order_relaxed), "queued", (json_int_t)queued(x),
        "calls_per_s", rate(t, s, i), "p50_ms", (double)tp_summary_quantile_us(&x->sum, 0.5) / 1e3, "p99_ms",
        (double)tp_summary_quantile_us(&x->sum, 0.99) / 1e3, "failures", fail, "classes", classes);
}

static json_t *board_json(const top_t *t, const tp_live_t *l)
{
    if (!l->board)
        return json_pack("{s:i, s:s, s:b, s:I}", "pid", (int)l->pid, "command", l->command, "scoreboard", 0,
                         "since_unix_ms", (json_int_t)(l->joined_unix_us / 1000));
    const tp_sb_snap_t *s = &l->snap;
    double r = rate(t, s, UINT32_MAX);
    bool eta = s->c.total > s->c.done && r > 0;
    json_t *calls = json_array(), *tools = json_array();
    for (uint32_t i = 0; i < s->n_busy; i++) {
        const tp_sb_slot_t *c = &s->slots[i];
        double age = c->started_us && t->now_us > c->started_us ? (double)(t->now_us - c->started_us) / 1e6 : 0;
        json_array_append_new(calls, json_pack("{s:s, s:s, s:s, s:i, s:f, s:o, s:b, s:b}", "id", c->call_id, "job",
                                               c->job, "tool", s->tools[c->tool].name, "attempt", (int)c->attempt,
                                               "age_s", age, "timeout_s",
                                               c->timeout_us ? json_real((double)c->timeout_us / 1e6) : json_null(),
                                               "stuck", stuck(t, c), "queued", c->started_us == 0));
    }
    for (uint32_t i = 0; i < s->n_tools; i++)
        if (s->tools[i].name[0])
            json_array_append_new(tools, tool_json(t, s, i));
    return json_pack(
        "{s:i, s:s, s:b, s:I, s:f, s:o, s:I, s:o, s:f, s:o, s:I, s:I, s:I, s:{s:I, s:I}, s:I, s:o, s:o}", "pid",
        (int)s->pid, "command", l->command, "scoreboard", 1, "started_unix_ms", (json_int_t)(s->started_unix_us / 1000),
        "uptime_s", uptime_s(t, s), "total", s->c.total ? json_integer((json_int_t)s->c.total) : json_null(), "done",
        (json_int_t)s->c.done, "progress",
        s->c.total ? json_real((double)s->c.done / (double)(s->c.total > s->c.done ? s->c.total : s->c.done))
                   : json_null(),
        "calls_per_s", r, "eta_s", eta ? json_real((double)(s->c.total - s->c.done) / r) : json_null(), "live",
        (json_int_t)s->c.live, "queued", (json_int_t)s->c.waiting, "unshown", (json_int_t)s->c.unshown, "workers",
        "busy", (json_int_t)(s->c.busy > 0 ? s->c.busy : 0), "idle", (json_int_t)(s->c.idle > 0 ? s->c.idle : 0),
        "timeouts", (json_int_t)s->c.timeouts, "running", calls, "tools", tools);
}

/* ---- text ---- */

static void put_dur(char *buf, size_t cap, double s)
{
    if (s < 0.001)
        snprintf(buf, cap, "%.0fus", s * 1e6);
    else if (s < 1)
        snprintf(buf, cap, "%.0fms", s * 1e3);
    else if (s < 60)
        snprintf(buf, cap, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else if (s < 3.6e8)
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(buf, cap, ">99999h");
}

/* A line of the view into out, cut to width columns (0: not cut). */
static void line(tp_buf_t *out, int width, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(tp_buf_t *out, int width, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    if (width > 0 && n > width)
        n = width;
    tp_cli_scrub(buf, (size_t)n);
    tp_buf_append(out, buf, (size_t)n);
    tp_buf_puts(out, "\n");
}

static void board_text(tp_buf_t *out, int width, const top_t *t, const tp_live_t *l)
{
    char up[32], eta[48] = "", d1[32], d2[32];
    if (!l->board) {
        line(out, width, "%s (pid %d): no scoreboard to read (%s)", l->command, (int)l->pid,
             l->board_rc == TP_ENOENT   ? "none named: an older toolpool, or no memfd"
             : l->board_rc == TP_EACCES ? "another user's"
                                        : tp_strerror(l->board_rc));
        return;
    }
    const tp_sb_snap_t *s = &l->snap;
    put_dur(up, sizeof up, uptime_s(t, s));
    double r = rate(t, s, UINT32_MAX);
    char progress[96] = "";
    if (s->c.total) {
        uint64_t total = s->c.total > s->c.done ? s->c.total : s->c.done;
        snprintf(progress, sizeof progress, " of about %llu (%.1f%%)", (unsigned long long)total,
                 100.0 * (double)s->c.done / (double)total);
        if (s->c.total > s->c.done && r > 0) {
            put_dur(d1, sizeof d1, (double)(s->c.total - s->c.done) / r);
            snprintf(eta, sizeof eta, ", ETA %s", d1);
        }
    }
    line(out, width,
         "%s (pid %d), up %s: %llu answered%s, %lld running, %llu queued, %lld/%lld workers busy, %.1f calls/s%s",
         l->command, (int)l->pid, up, (unsigned long long)s->c.done, progress, (long long)s->c.busy,
         (unsigned long long)s->c.waiting, (long long)s->c.busy,
         (long long)(s->c.busy + (s->c.idle > 0 ? s->c.idle : 0)), r, eta);
    line(out, width, "  %-20s %8s %8s %7s %8s %7s %6s %8s %8s  %s", "TOOL", "CALLS", "OK", "FAILED", "CALLS/S",
         "RUNNING", "QUEUED", "P50", "P99", "FAILURES");
    for (uint32_t i = 0; i < s->n_tools; i++) {
        const tp_sb_tool_t *x = &s->tools[i];
        if (x->name[0] == 0)
            continue;
        char fails[256] = "";
        size_t at = 0;
        for (int k = TP_KIND_TIMEOUT; k <= TP_KIND_OTHER && at < sizeof fails - 1; k++)
            if (x->sum.by_kind[k]) {
                int w = snprintf(fails + at, sizeof fails - at, "%s%s %llu", at ? ", " : "",
                                 k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                                 (unsigned long long)x->sum.by_kind[k]);
                if (w < 0)
                    break;
                at += (size_t)w < sizeof fails - at ? (size_t)w : sizeof fails - at - 1;
            }
        put_dur(d1, sizeof d1, (double)tp_summary_quantile_us(&x->sum, 0.5) / 1e6);
        put_dur(d2, sizeof d2, (double)tp_summary_quantile_us(&x->sum, 0.99) / 1e6);
        line(out, width, "  %-20.20s %8llu %8llu %7llu %8.1f %7llu %6llu %8s %8s  %s", x->name,
             (unsigned long long)x->sum.calls, (unsigned long long)x->sum.ok,
             (unsigned long long)(x->sum.calls - x->sum.ok), rate(t, s, i),
             (unsigned long long)atomic_load_explicit(&x->in_flight, memory_order_relaxed),
             (unsigned long long)queued(x), x->sum.timed ? d1 : "-", x->sum.timed ? d2 : "-", fails);
    }
    if (s->n_busy == 0) {
        line(out, width, "  no call running");
        return;
    }
    line(out, width, "  %-24s %-6s %-16s %-16s %7s %9s %8s", "RUNNING CALL", "", "TOOL", "JOB", "ATTEMPT", "AGE",
         "TIMEOUT");
    for (uint32_t i = 0; i < s->n_busy; i++) {
        const tp_sb_slot_t *c = &s->slots[i];
        if (c->started_us)
            put_dur(d1, sizeof d1, t->now_us > c->started_us ? (double)(t->now_us - c->started_us) / 1e6 : 0);
        else
            snprintf(d1, sizeof d1, "queued");
        if (c->timeout_us)
            put_dur(d2, sizeof d2, (double)c->timeout_us / 1e6);
        line(out, width, "  %-24.24s %-6s %-16.16s %-16.16s %7u %9s %8s", c->call_id, stuck(t, c) ? "STUCK" : "",
             s->tools[c->tool].name, c->job, c->attempt, d1, c->timeout_us ? d2 : "-");
    }
    if (s->c.unshown)
        line(out, width, "  ... and %llu more running (past the scoreboard's records)",
             (unsigned long long)s->c.unshown);
}

/* Reads the store's live supervisors now. 0, or 2 (said). */
static int read_lives(top_t *t, tp_lives_t *lives)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(t->dir, &txn);
    if (s == NULL) {
        snprintf(t->why, sizeof t->why, "%s: the store could not be opened", t->dir);
        return 2;
    }
    int rc = tp_cli_lives(s, txn, lives);
    mdb_txn_abort(txn);
    tp_store_close(s);
    t->now_us = tp_now_us();
    if (rc) {
        snprintf(t->why, sizeof t->why, "%s: reading the store's supervisors: %s", t->dir, tp_strerror(rc));
        if (!t->live)
            tp_log_error("store.read_failed", "%s", t->why);
        return 2;
    }
    for (size_t i = 0; i < lives->n; i++)
        if (lives->v[i].board)
            sort_calls(&lives->v[i].snap, t->sort);
    return 0;
}

static void frame_text(tp_buf_t *out, int width, top_t *t, const tp_lives_t *lives, bool live_view)
{
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&now, &tm));
    line(out, width, "toolpool top - store %s - %s - %zu supervisor%s%s", t->dir, when, lives->n,
         lives->n == 1 ? "" : "s", live_view ? " - q quits, s sorts" : "");
    if (live_view)
        line(out, width, "running calls by %s", sort_names[t->sort]);
    if (lives->n == 0)
        line(out, width, "no supervisor is working on this store");
    for (size_t i = 0; i < lives->n; i++) {
        line(out, width, "%s", "");
        board_text(out, width, t, &lives->v[i]);
    }
}

/* What the next refresh's calls/s count from. */
static void keep_prev(top_t *t, const tp_lives_t *lives)
{
    size_t n = 0;
    for (size_t i = 0; i < lives->n; i++)
        n += lives->v[i].board ? lives->v[i].snap.n_tools + 1 : 0;
    prev_t *p = realloc(t->prev, (n ? n : 1) * sizeof *p);
    if (p == NULL)
        return; /* calls/s from the start again */
    t->prev = p;
    t->n_prev = 0;
    for (size_t i = 0; i < lives->n; i++) {
        const tp_sb_snap_t *s = &lives->v[i].snap;
        if (!lives->v[i].board)
            continue;
        for (uint32_t k = 0; k < s->n_tools; k++)
            p[t->n_prev++] = (prev_t){.pid = s->pid, .tool = k, .calls = s->tools[k].sum.calls};
        p[t->n_prev++] = (prev_t){.pid = s->pid, .tool = UINT32_MAX, .done = s->c.done};
    }
}

static volatile sig_atomic_t top_stop;
static void top_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/* The live view: the alternate screen, raw keys, a frame per interval. */
static int live_view(top_t *t, double interval)
{
    /* the handlers first: a signal between raw mode and them would leave the terminal raw */
    struct sigaction sa = {.sa_handler = top_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    struct termios was, raw;
    bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &was) == 0;
    if (tty) {
        raw = was;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    bool keys = true; /* stdin is read for keys until its end, or an error */
    fputs("\033[?1049h\033[?25l", stdout);
    t->live = true;
    int status = 0;
    uint64_t last = 0;
    tp_buf_t out = {0};
    while (!top_stop) {
        tp_lives_t lives;
        if ((status = read_lives(t, &lives)) != 0)
            break;
        t->prev_dt = last ? (double)(t->now_us - last) / 1e6 : 0;
        last = t->now_us;
        struct winsize ws;
        int width = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 0;
        tp_buf_reset(&out);
        tp_buf_puts(&out, "\033[H\033[2J");
        frame_text(&out, width, t, &lives, true);
        fwrite(out.data, 1, out.len, stdout);
        fflush(stdout);
        keep_prev(t, &lives);
        tp_cli_lives_free(&lives);
        /* Keys until the next frame. */
        uint64_t due = t->now_us + (uint64_t)(interval * 1e6);
        bool redraw = false;
        while (!top_stop && !redraw) {
            uint64_t now = tp_now_us();
            if (now >= due)
                break;
            struct pollfd pf = {.fd = keys ? STDIN_FILENO : -1, .events = POLLIN};
            int n = poll(&pf, 1, (int)((due - now) / 1000) + 1);
            if (n < 0 && errno != EINTR)
                break;
            if (n <= 0)
                continue;
            if (pf.revents & POLLNVAL) {
                keys = false; /* stdin closed: only the timer and signals stop it */
                continue;
            }
            char key;
            ssize_t got = read(STDIN_FILENO, &key, 1);
            if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
                keys = false; /* stdin at its end */
                continue;
            }
            if (got < 0)
                continue;
            if (key == 'q' || key == 'Q')
                top_stop = 1;
            else if (key == 's') {
                t->sort = (sort_t)((t->sort + 1) % SORT__N);
                redraw = true;
            }
        }
    }
    tp_buf_free(&out);
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (tty)
        tcsetattr(STDIN_FILENO, TCSANOW, &was);
    t->live = false;
    if (status != 0 && t->why[0])
        tp_log_error("store.read_failed", "%s", t->why); /* said where it can be read */
    return status;
}

int tp_cmd_top(int argc, char **argv)
{
    const char *dir = tp_store_default_dir(), *sort = "age", *interval = "1";
    bool once = false, json = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL}, {"sort", 0, true, &sort, NULL},  {"interval", 0, true, &interval, NULL},
        {"once", 0, false, &once, NULL},  {"json", 0, false, &json, NULL}, {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, top_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(top_usage);
    top_t t = {.dir = dir, .sort = SORT__N};
    for (int k = 0; k < SORT__N; k++)
        if (strcmp(sort, sort_names[k]) == 0)
            t.sort = (sort_t)k;
    if (t.sort == SORT__N) {
        tp_log_error("cli.bad_option", "--sort: expected age, tool, job or id, got \"%s\"", sort);
        return 2;
    }
    char *end;
    double every = strtod(interval, &end);
    if (*end || !(every >= 0.1 && every <= 3600)) {
        tp_log_error("cli.bad_option", "--interval: expected seconds from 0.1 to 3600, got \"%s\"", interval);
        return 2;
    }
    if (json && !once) {
        tp_log_error("cli.usage", "--json goes with --once (one snapshot)");
        return 2;
    }
    if (!once) {
        if (!isatty(STDOUT_FILENO)) {
            tp_log_error("cli.usage",
                         "the live view needs a terminal: --once prints one snapshot (--json for scripts)");
            return 2;
        }
        int status = live_view(&t, every);
        free(t.prev);
        return status;
    }
    tp_lives_t lives;
    if ((rc = read_lives(&t, &lives)) != 0)
        return rc;
    int status = 0;
    if (json) {
        json_t *all = json_array();
        for (size_t i = 0; i < lives.n; i++)
            json_array_append_new(all, board_json(&t, &lives.v[i]));
        json_t *o = json_pack("{s:s, s:I, s:o}", "store", dir, "as_of_unix_ms", (json_int_t)(tp_unix_us() / 1000),
                              "supervisors", all);
        if (o == NULL || tp_cli_put_json(stdout, o) != 0)
            status = 2;
        json_decref(o);
    } else {
        tp_buf_t out = {0};
        frame_text(&out, 0, &t, &lives, false);
        if (fwrite(out.data, 1, out.len, stdout) != out.len)
            status = 2;
        tp_buf_free(&out);
    }
    tp_cli_lives_free(&lives);
    return status;
}
