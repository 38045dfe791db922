#include "metrics_text.h"

#include <stdio.h>
#include <string.h>

#include "records.h"
#include "taxonomy.h"

void tp_metrics_label(tp_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            tp_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            tp_buf_puts(b, "\\n");
        else
            tp_buf_append(b, v, 1);
    }
}

void tp_metrics_head(tp_buf_t *b, const char *name, const char *type, const char *help)
{
    tp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Upper bounds of the latency buckets, in seconds: Prometheus's defaults, and a minute. */
static const double tp_metrics_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define TP_METRICS_LE (sizeof tp_metrics_le / sizeof tp_metrics_le[0])

/*
 * One histogram's samples from a summary's log-linear one (summary.h, ~6%
 * wide buckets): a bucket counts under a bound when its middle is at or
 * below it, so the counts are within the buckets' precision; _sum is the
 * exact sum. labels: what goes before le, with its trailing comma.
 */
static void put_histogram(tp_buf_t *b, const char *name, const char *labels, const tp_summary_t *s)
{
    uint64_t cum[TP_METRICS_LE] = {0}, total = 0;
    double sum_us = (double)s->sum_us;
    for (unsigned i = 0; i < TP_HIST_BUCKETS; i++) {
        uint64_t n = s->hist[i];
        if (n == 0)
            continue;
        uint64_t lo, hi;
        tp_summary_bucket_range(i, &lo, &hi);
        double mid = hi == UINT64_MAX ? (double)lo : (double)lo + (double)(hi - lo - 1) / 2;
        total += n;
        for (size_t k = 0; k < TP_METRICS_LE; k++)
            if (mid <= tp_metrics_le[k] * 1e6)
                cum[k] += n;
    }
    for (size_t k = 0; k < TP_METRICS_LE; k++)
        tp_buf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, tp_metrics_le[k], (unsigned long long)cum[k]);
    tp_buf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)total);
    size_t n = strlen(labels);
    tp_buf_printf(b, "%s_sum%s%.*s%s %.6f\n", name, n ? "{" : "", (int)(n ? n - 1 : 0), labels, n ? "}" : "",
                  sum_us / 1e6);
    tp_buf_printf(b, "%s_count%s%.*s%s %llu\n", name, n ? "{" : "", (int)(n ? n - 1 : 0), labels, n ? "}" : "",
                  (unsigned long long)total);
}

/* A board's labels into lab, each with its trailing comma: pid and command when labelled, then tool if given. */
static void labels(tp_buf_t *lab, const tp_sb_snap_t *s, bool labelled, const char *tool)
{
    tp_buf_reset(lab);
    if (labelled) {
        tp_buf_printf(lab, "pid=\"%d\",command=\"", (int)s->pid);
        tp_metrics_label(lab, s->c.command[0] ? s->c.command : "supervisor");
        tp_buf_puts(lab, "\",");
    }
    if (tool) {
        tp_buf_puts(lab, "tool=\"");
        tp_metrics_label(lab, tool);
        tp_buf_puts(lab, "\",");
    }
    tp_buf_append(lab, "", 1);
    lab->len--; /* NUL-terminated, not counted */
}

/* One sample: name{labels extra} value, the labels' trailing comma dropped when nothing follows. */
static void sample(tp_buf_t *b, const char *name, const tp_buf_t *lab, const char *extra, const char *value)
{
    size_t n = lab->len;
    if (extra == NULL && n > 0)
        n--;
    if (n == 0 && extra == NULL)
        tp_buf_printf(b, "%s %s\n", name, value);
    else
        tp_buf_printf(b, "%s{%.*s%s} %s\n", name, (int)n, (const char *)lab->data, extra ? extra : "", value);
}

static void sample_u(tp_buf_t *b, const char *name, const tp_buf_t *lab, const char *extra, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    sample(b, name, lab, extra, num);
}

/* Per tool: a value of each board's tool records. */
typedef uint64_t (*tool_value_fn)(const tp_sb_tool_t *t);

static uint64_t v_attempts(const tp_sb_tool_t *t)
{
    return t->sum.attempts;
}
static uint64_t v_retries(const tp_sb_tool_t *t)
{
    return t->sum.retries;
}
static uint64_t v_timeouts(const tp_sb_tool_t *t)
{
    return atomic_load_explicit(&t->timeouts, memory_order_relaxed);
}
static uint64_t v_in_flight(const tp_sb_tool_t *t)
{
    return atomic_load_explicit(&t->in_flight, memory_order_relaxed);
}
static uint64_t v_queued(const tp_sb_tool_t *t)
{
    uint64_t held = atomic_load_explicit(&t->held, memory_order_relaxed), in = v_in_flight(t);
    return held > in ? held - in : 0;
}

/* A board's header value. */
typedef uint64_t (*board_value_fn)(const tp_sb_snap_t *s);

static uint64_t b_timeouts(const tp_sb_snap_t *s)
{
    return s->c.timeouts;
}
static uint64_t b_recorded(const tp_sb_snap_t *s)
{
    return s->c.answered_recorded;
}
static uint64_t b_rejected(const tp_sb_snap_t *s)
{
    return s->c.rejected;
}
static uint64_t b_commits(const tp_sb_snap_t *s)
{
    return s->c.commits;
}
static uint64_t b_waiting(const tp_sb_snap_t *s)
{
    return s->c.waiting;
}
static uint64_t b_live(const tp_sb_snap_t *s)
{
    return s->c.live;
}
static uint64_t b_done(const tp_sb_snap_t *s)
{
    return s->c.done;
}
static uint64_t b_spawned(const tp_sb_snap_t *s)
{
    return s->c.spawned;
}
static uint64_t b_crashed(const tp_sb_snap_t *s)
{
    return s->c.crashed;
}
static uint64_t b_recycled(const tp_sb_snap_t *s)
{
    return s->c.recycled;
}

void tp_metrics_text(tp_buf_t *b, const tp_sb_snap_t *const *boards, size_t n, bool labelled)
{
    tp_buf_t lab = {0};
    if (labelled) {
        tp_metrics_head(b, "toolpool_supervisor_start_time_seconds", "gauge",
                        "When each supervisor on the store started (Unix time).");
        for (size_t i = 0; i < n; i++) {
            char v[32];
            labels(&lab, boards[i], true, NULL);
            snprintf(v, sizeof v, "%.3f", (double)boards[i]->started_unix_us / 1e6);
            sample(b, "toolpool_supervisor_start_time_seconds", &lab, NULL, v);
        }
        tp_metrics_head(b, "toolpool_run_calls_expected", "gauge",
                        "Calls a run expects in all (only runs that know their total).");
        for (size_t i = 0; i < n; i++)
            if (boards[i]->c.total) {
                labels(&lab, boards[i], true, NULL);
                sample_u(b, "toolpool_run_calls_expected", &lab, NULL, boards[i]->c.total);
            }
    }
    tp_metrics_head(b, "toolpool_calls_total", "counter",
                    "Calls answered, by tool and outcome (ok, or the error kind).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t t = 0; t < boards[i]->n_tools; t++)
            for (int k = 0; k <= TP_KIND__COUNT; k++) {
                uint64_t v = boards[i]->tools[t].sum.by_kind[k];
                if (v == 0)
                    continue;
                char extra[96];
                labels(&lab, boards[i], labelled, boards[i]->tools[t].name);
                snprintf(extra, sizeof extra, "outcome=\"%s\"",
                         k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k));
                sample_u(b, "toolpool_calls_total", &lab, extra, v);
            }
    const struct {
        const char *name, *type, *help;
        tool_value_fn v;
        /* clang-format off */
    } per_tool[] = {
        {"toolpool_attempts_total", "counter", "Attempts made, by tool (every try of every call).", v_attempts},
        {"toolpool_retries_total", "counter", "Attempts after a call's first, by tool.", v_retries},
        {"toolpool_tool_timeouts_total", "counter", "Attempts that ran into their timeout, by tool.", v_timeouts},
        {"toolpool_calls_in_flight", "gauge", "Attempts running now, by tool.", v_in_flight},
        {"toolpool_calls_queued", "gauge", "Calls held and not running, by tool (waiting their turn, a slot or a backoff).", v_queued},
    };
    /* clang-format on */
    for (size_t m = 0; m < sizeof per_tool / sizeof per_tool[0]; m++) {
        tp_metrics_head(b, per_tool[m].name, per_tool[m].type, per_tool[m].help);
        for (size_t i = 0; i < n; i++)
            for (uint32_t t = 0; t < boards[i]->n_tools; t++) {
                if (boards[i]->tools[t].name[0] == 0)
                    continue; /* a registry of no tools: its placeholder */
                labels(&lab, boards[i], labelled, boards[i]->tools[t].name);
                sample_u(b, per_tool[m].name, &lab, NULL, per_tool[m].v(&boards[i]->tools[t]));
            }
    }
    tp_metrics_head(b, "toolpool_call_duration_seconds", "histogram",
                    "Call latency, first attempt to end, by tool (from a ~6%-precision histogram).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t t = 0; t < boards[i]->n_tools; t++) {
            if (boards[i]->tools[t].name[0] == 0)
                continue;
            labels(&lab, boards[i], labelled, boards[i]->tools[t].name);
            put_histogram(b, "toolpool_call_duration_seconds", (const char *)lab.data, &boards[i]->tools[t].sum);
        }
    const struct {
        const char *name, *type, *help;
        board_value_fn v;
        /* clang-format off */
    } per_board[] = {
        {"toolpool_timeouts_total", "counter", "Attempts that ran into their timeout.", b_timeouts},
        {"toolpool_answered_recorded_total", "counter", "Calls answered from the store, not run again.", b_recorded},
        {"toolpool_rejected_total", "counter", "Requests answered without a call (malformed, unknown tool).", b_rejected},
        {"toolpool_answered_total", "counter", "Calls answered since the supervisor began (from the store and refused included).", b_done},
        {"toolpool_commits_total", "counter", "Store commits (each covers a group of results).", b_commits},
    };
    /* clang-format on */
    for (size_t m = 0; m < sizeof per_board / sizeof per_board[0]; m++) {
        tp_metrics_head(b, per_board[m].name, per_board[m].type, per_board[m].help);
        for (size_t i = 0; i < n; i++) {
            labels(&lab, boards[i], labelled, NULL);
            sample_u(b, per_board[m].name, &lab, NULL, per_board[m].v(boards[i]));
        }
    }
    tp_metrics_head(b, "toolpool_commit_duration_seconds", "histogram",
                    "How long store commits take (fsync included).");
    for (size_t i = 0; i < n; i++) {
        labels(&lab, boards[i], labelled, NULL);
        put_histogram(b, "toolpool_commit_duration_seconds", (const char *)lab.data, &boards[i]->commit_latency);
    }
    tp_metrics_head(b, "toolpool_workers", "gauge", "Worker slots: busy (running an attempt) or idle (ready for one).");
    for (size_t i = 0; i < n; i++) {
        labels(&lab, boards[i], labelled, NULL);
        sample_u(b, "toolpool_workers", &lab, "state=\"busy\"",
                 boards[i]->c.busy > 0 ? (uint64_t)boards[i]->c.busy : 0);
        sample_u(b, "toolpool_workers", &lab, "state=\"idle\"",
                 boards[i]->c.idle > 0 ? (uint64_t)boards[i]->c.idle : 0);
    }
    const struct {
        const char *name, *type, *help;
        board_value_fn v;
        /* clang-format off */
    } now[] = {
        {"toolpool_queue_depth", "gauge", "Calls held and not running (waiting their turn in a job, a slot, a concurrency cap, a rate token or a backoff).", b_waiting},
        {"toolpool_calls_live", "gauge", "Calls the engine holds now (submitted, not yet answered).", b_live},
        {"toolpool_worker_starts_total", "counter", "Worker processes started.", b_spawned},
        {"toolpool_worker_crashes_total", "counter", "Workers that died without being told to.", b_crashed},
        {"toolpool_worker_recycles_total", "counter", "Workers replaced after --recycle-after calls.", b_recycled},
    };
    /* clang-format on */
    for (size_t m = 0; m < sizeof now / sizeof now[0]; m++) {
        tp_metrics_head(b, now[m].name, now[m].type, now[m].help);
        for (size_t i = 0; i < n; i++) {
            labels(&lab, boards[i], labelled, NULL);
            sample_u(b, now[m].name, &lab, NULL, now[m].v(boards[i]));
        }
    }
    tp_buf_free(&lab);
}

typedef struct {
    tp_buf_t *b;
    uint64_t n[2][3]; /* [call, tool][open, half-open, closed] */
    bool head;
} breaker_tally_t;

static int breaker_tally_cb(void *ctx, const tp_breaker_info_t *info)
{
    breaker_tally_t *t = ctx;
    int st = strcmp(info->state, "open") == 0 ? 0 : strcmp(info->state, "half-open") == 0 ? 1 : 2;
    t->n[info->is_tool][st]++;
    if (info->is_tool) {
        if (!t->head) {
            tp_metrics_head(t->b, "toolpool_tool_breaker_open", "gauge",
                            "A tool's breaker: 1 open, 0.5 half-open (probing), 0 closed.");
            t->head = true;
        }
        tp_buf_puts(t->b, "toolpool_tool_breaker_open{tool=\"");
        tp_metrics_label(t->b, info->tool);
        tp_buf_printf(t->b, "\"} %s\n", st == 0 ? "1" : st == 1 ? "0.5" : "0");
    }
    return 0;
}

int tp_metrics_store_text(tp_buf_t *b, tp_store_t *s, MDB_txn *txn)
{
    breaker_tally_t t = {.b = b};
    uint64_t open = 0, total = 0;
    int rc = tp_records_breakers_each(s, txn, breaker_tally_cb, &t);
    if (rc == 0)
        rc = tp_records_escalations_count(s, txn, &open, &total);
    if (rc)
        return rc;
    static const char *const states[] = {"open", "half-open", "closed"};
    tp_metrics_head(b, "toolpool_breakers", "gauge", "Breakers in the store, by type (tool, call) and state.");
    for (int ty = 0; ty < 2; ty++)
        for (int k = 0; k < 3; k++)
            if (ty == 1 || k != 1) /* a same-call breaker is never half-open */
                tp_buf_printf(b, "toolpool_breakers{type=\"%s\",state=\"%s\"} %llu\n", ty ? "tool" : "call", states[k],
                              (unsigned long long)t.n[ty][k]);
    tp_metrics_head(b, "toolpool_escalations_open", "gauge", "Escalations waiting for a person.");
    tp_buf_printf(b, "toolpool_escalations_open %llu\n", (unsigned long long)open);
    tp_metrics_head(b, "toolpool_escalations", "gauge", "Escalations in the store, open and resolved.");
    tp_buf_printf(b, "toolpool_escalations %llu\n", (unsigned long long)total);
    return 0;
}
