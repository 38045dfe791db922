/*
 * GET /metrics: the engine's counters and the pool's (its scoreboard, in
 * the renderer `toolpool metrics` shares: metrics_text.h), the front's own
 * and the store's breakers and escalations, as Prometheus text.
 */
#include "http_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "metrics_text.h"

/* The store's part of /metrics, in the engine's turn: every process's breakers and escalations. */
static int store_tally_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    return tp_metrics_store_text(ctx, s, txn);
}

/*
 * GET /metrics: Prometheus text (0.0.4). Calls by tool and outcome,
 * attempts, retries, timeouts, latency, workers, queue and commits from
 * the engine's scoreboard, as `toolpool metrics` prints them; the
 * breakers and open escalations from the store (every process's, as the
 * CLI sees them).
 */
void http_metrics_get(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    tp_buf_t b = {0};
    tp_sb_snap_t snap;
    const tp_scoreboard_t *sb = tp_engine_board(h->e);
    if (tp_sb_snapshot(sb->base, sb->size, &snap) == 0) {
        const tp_sb_snap_t *one = &snap;
        tp_metrics_text(&b, &one, 1, false);
        tp_sb_snap_free(&snap);
    }
    if (h->o.otlp) {
        uint64_t exported, dropped;
        tp_otlp_counts(h->o.otlp, &exported, &dropped);
        tp_metrics_head(&b, "toolpool_otlp_spans_exported_total", "counter", "Trace spans the OTLP collector took.");
        tp_buf_printf(&b, "toolpool_otlp_spans_exported_total %llu\n", (unsigned long long)exported);
        tp_metrics_head(&b, "toolpool_otlp_spans_dropped_total", "counter",
                        "Trace spans dropped: the export queue was full, or the collector refused or never answered.");
        tp_buf_printf(&b, "toolpool_otlp_spans_dropped_total %llu\n", (unsigned long long)dropped);
    }

    tp_metrics_head(&b, "toolpool_http_connections", "gauge", "Open HTTP connections.");
    tp_buf_printf(&b, "toolpool_http_connections %d\n", h->n_conns);
    tp_metrics_head(&b, "toolpool_http_connections_accepted_total", "counter", "HTTP connections accepted.");
    tp_buf_printf(&b, "toolpool_http_connections_accepted_total %llu\n", (unsigned long long)h->accepted);
    tp_metrics_head(&b, "toolpool_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int code = 100; code < 600; code++)
        if (h->by_status[code])
            tp_buf_printf(&b, "toolpool_http_responses_total{code=\"%d\"} %llu\n", code,
                          (unsigned long long)h->by_status[code]);
    tp_metrics_head(&b, "toolpool_http_calls_tracked", "gauge",
                    "Calls the HTTP front tracks: running, or ended and kept for GET.");
    tp_buf_printf(&b, "toolpool_http_calls_tracked %zu\n", h->table_n);

    /* The store's part: every process's breakers and escalations, as the CLI lists them. */
    int rc = tp_engine_store_op(h->e, 0, store_tally_op, &b);
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
    http_reply_when_durable(h, req, 200, "text/plain; version=0.0.4", &b);
}
