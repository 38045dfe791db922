/*
 * GET /metrics: the engine's counters, the pool's, the front's own and the
 * store's breakers and escalations, as Prometheus text.
 */
#include "http_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "records.h"
#include "taxonomy.h"

/* ---- /metrics ---- */

/* A label value, escaped as the text format wants (backslash, quote, newline). */
static void put_label(tp_buf_t *b, const char *v)
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

static void metric_head(tp_buf_t *b, const char *name, const char *type, const char *help)
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

typedef struct {
    tp_buf_t *b;
    uint64_t n[2][3]; /* [call, tool][open, half-open, closed] */
    bool head;
    uint64_t open, total; /* escalations */
} breaker_tally_t;

static int breaker_tally_cb(void *ctx, const tp_breaker_info_t *info)
{
    breaker_tally_t *t = ctx;
    int st = strcmp(info->state, "open") == 0 ? 0 : strcmp(info->state, "half-open") == 0 ? 1 : 2;
    t->n[info->is_tool][st]++;
    if (info->is_tool) {
        if (!t->head) {
            metric_head(t->b, "toolpool_tool_breaker_open", "gauge",
                        "A tool's breaker: 1 open, 0.5 half-open (probing), 0 closed.");
            t->head = true;
        }
        tp_buf_puts(t->b, "toolpool_tool_breaker_open{tool=\"");
        put_label(t->b, info->tool);
        tp_buf_printf(t->b, "\"} %s\n", st == 0 ? "1" : st == 1 ? "0.5" : "0");
    }
    return 0;
}

/* The store's part of /metrics, in the engine's turn: each breaker tallied, the escalations counted. */
static int store_tally_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    breaker_tally_t *t = ctx;
    int rc = tp_records_breakers_each(s, txn, breaker_tally_cb, t);
    return rc ? rc : tp_records_escalations_count(s, txn, &t->open, &t->total);
}

/*
 * GET /metrics: Prometheus text (0.0.4). Calls by tool and outcome,
 * attempts, retries, timeouts and latency from the engine's counters; the
 * breakers and open escalations from the store (every process's, as the
 * CLI sees them); workers, queue and commits now.
 */
void http_metrics_get(tp_http_t *h, struct evhttp_request *req, const char *name)
{
    tp_buf_t b = {0}, lab = {0};
    const tp_engine_stats_t *st = tp_engine_stats(h->e);
    const tp_registry_t *reg = tp_engine_registry(h->e);

    metric_head(&b, "toolpool_calls_total", "counter", "Calls answered, by tool and outcome (ok, or the error kind).");
    for (size_t i = 0; i < reg->n_tools; i++)
        for (int k = 0; k <= TP_KIND__COUNT; k++) {
            uint64_t n = st->tools[i].by_kind[k];
            if (n == 0)
                continue;
            tp_buf_puts(&b, "toolpool_calls_total{tool=\"");
            put_label(&b, reg->tools[i].name);
            tp_buf_printf(&b, "\",outcome=\"%s\"} %llu\n", k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                          (unsigned long long)n);
        }
    const struct {
        const char *name, *help;
        size_t off;
        /* clang-format off */
    } per_tool[] = {
        {"toolpool_attempts_total", "Attempts made, by tool (every try of every call).", offsetof(tp_summary_t, attempts)},
        {"toolpool_retries_total", "Attempts after a call's first, by tool.", offsetof(tp_summary_t, retries)},
    };
    /* clang-format on */
    for (size_t m = 0; m < sizeof per_tool / sizeof per_tool[0]; m++) {
        metric_head(&b, per_tool[m].name, "counter", per_tool[m].help);
        for (size_t i = 0; i < reg->n_tools; i++) {
            tp_buf_printf(&b, "%s{tool=\"", per_tool[m].name);
            put_label(&b, reg->tools[i].name);
            tp_buf_printf(&b, "\"} %llu\n",
                          (unsigned long long)*(const uint64_t *)((const char *)&st->tools[i] + per_tool[m].off));
        }
    }
    metric_head(&b, "toolpool_call_duration_seconds", "histogram",
                "Call latency, first attempt to end, by tool (from a ~6%-precision histogram).");
    for (size_t i = 0; i < reg->n_tools; i++) {
        tp_buf_reset(&lab);
        tp_buf_puts(&lab, "tool=\"");
        put_label(&lab, reg->tools[i].name);
        tp_buf_puts(&lab, "\",");
        tp_buf_append(&lab, "", 1);
        put_histogram(&b, "toolpool_call_duration_seconds", (const char *)lab.data, &st->tools[i]);
    }
    metric_head(&b, "toolpool_timeouts_total", "counter", "Attempts that ran into their timeout.");
    tp_buf_printf(&b, "toolpool_timeouts_total %llu\n", (unsigned long long)st->timeouts);
    metric_head(&b, "toolpool_answered_recorded_total", "counter", "Calls answered from the store, not run again.");
    tp_buf_printf(&b, "toolpool_answered_recorded_total %llu\n", (unsigned long long)st->answered_recorded);
    metric_head(&b, "toolpool_rejected_total", "counter",
                "Requests answered without a call (malformed, unknown tool).");
    tp_buf_printf(&b, "toolpool_rejected_total %llu\n", (unsigned long long)st->rejected);
    metric_head(&b, "toolpool_commits_total", "counter", "Store commits (each covers a group of results).");
    tp_buf_printf(&b, "toolpool_commits_total %llu\n", (unsigned long long)st->commits);
    metric_head(&b, "toolpool_commit_duration_seconds", "histogram", "How long store commits take (fsync included).");
    put_histogram(&b, "toolpool_commit_duration_seconds", "", &st->commit_latency);

    if (h->o.otlp) {
        uint64_t exported, dropped;
        tp_otlp_counts(h->o.otlp, &exported, &dropped);
        metric_head(&b, "toolpool_otlp_spans_exported_total", "counter", "Trace spans the OTLP collector took.");
        tp_buf_printf(&b, "toolpool_otlp_spans_exported_total %llu\n", (unsigned long long)exported);
        metric_head(&b, "toolpool_otlp_spans_dropped_total", "counter",
                    "Trace spans dropped: the export queue was full, or the collector refused or never answered.");
        tp_buf_printf(&b, "toolpool_otlp_spans_dropped_total %llu\n", (unsigned long long)dropped);
    }

    metric_head(&b, "toolpool_workers", "gauge", "Worker slots: busy (running an attempt) or idle (ready for one).");
    tp_buf_printf(&b, "toolpool_workers{state=\"busy\"} %d\ntoolpool_workers{state=\"idle\"} %d\n",
                  tp_engine_busy(h->e), tp_engine_idle(h->e));
    metric_head(&b, "toolpool_queue_depth", "gauge",
                "Calls waiting for a slot (ready, at a concurrency cap, or in a backoff).");
    tp_buf_printf(&b, "toolpool_queue_depth %zu\n", tp_engine_waiting(h->e));
    metric_head(&b, "toolpool_calls_live", "gauge", "Calls the engine holds now (submitted, not yet answered).");
    tp_buf_printf(&b, "toolpool_calls_live %zu\n", tp_engine_live(h->e));
    const tp_pool_stats_t *ps = tp_engine_pool_stats(h->e);
    metric_head(&b, "toolpool_worker_starts_total", "counter", "Worker processes started.");
    tp_buf_printf(&b, "toolpool_worker_starts_total %llu\n", (unsigned long long)ps->spawned);
    metric_head(&b, "toolpool_worker_crashes_total", "counter", "Workers that died without being told to.");
    tp_buf_printf(&b, "toolpool_worker_crashes_total %llu\n", (unsigned long long)ps->crashed);
    metric_head(&b, "toolpool_worker_recycles_total", "counter", "Workers replaced after --recycle-after calls.");
    tp_buf_printf(&b, "toolpool_worker_recycles_total %llu\n", (unsigned long long)ps->recycled);

    metric_head(&b, "toolpool_http_connections", "gauge", "Open HTTP connections.");
    tp_buf_printf(&b, "toolpool_http_connections %d\n", h->n_conns);
    metric_head(&b, "toolpool_http_connections_accepted_total", "counter", "HTTP connections accepted.");
    tp_buf_printf(&b, "toolpool_http_connections_accepted_total %llu\n", (unsigned long long)h->accepted);
    metric_head(&b, "toolpool_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int code = 100; code < 600; code++)
        if (h->by_status[code])
            tp_buf_printf(&b, "toolpool_http_responses_total{code=\"%d\"} %llu\n", code,
                          (unsigned long long)h->by_status[code]);
    metric_head(&b, "toolpool_http_calls_tracked", "gauge",
                "Calls the HTTP front tracks: running, or ended and kept for GET.");
    tp_buf_printf(&b, "toolpool_http_calls_tracked %zu\n", h->table_n);
    tp_buf_free(&lab);

    /* The store's part: every process's breakers and escalations, as the CLI lists them. */
    breaker_tally_t t = {.b = &b};
    int rc = tp_engine_store_op(h->e, 0, store_tally_op, &t);
    if (rc == TP_EAGAIN) {
        http_reply(h, req, 200, "text/plain; version=0.0.4", b.data, b.len);
        tp_buf_free(&b);
        return;
    }
    if (rc) {
        tp_buf_free(&b);
        http_store_error(h, req, rc, "reading breakers and escalations for /metrics");
        return;
    }
    static const char *const states[] = {"open", "half-open", "closed"};
    metric_head(&b, "toolpool_breakers", "gauge", "Breakers in the store, by type (tool, call) and state.");
    for (int ty = 0; ty < 2; ty++)
        for (int k = 0; k < 3; k++)
            if (ty == 1 || k != 1) /* a same-call breaker is never half-open */
                tp_buf_printf(&b, "toolpool_breakers{type=\"%s\",state=\"%s\"} %llu\n", ty ? "tool" : "call", states[k],
                              (unsigned long long)t.n[ty][k]);
    metric_head(&b, "toolpool_escalations_open", "gauge", "Escalations waiting for a person.");
    tp_buf_printf(&b, "toolpool_escalations_open %llu\n", (unsigned long long)t.open);
    metric_head(&b, "toolpool_escalations", "gauge", "Escalations in the store, open and resolved.");
    tp_buf_printf(&b, "toolpool_escalations %llu\n", (unsigned long long)t.total);
    http_reply_when_durable(h, req, 200, "text/plain; version=0.0.4", &b);
}
