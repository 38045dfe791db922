/*
 * toolpool metrics: the Prometheus text exposition of every supervisor
 * working on a store (run, serve, mcp), from their scoreboards, and of the
 * store's breakers and escalations: what `serve` answers on /metrics,
 * for the supervisors that serve no HTTP.
 *
 *   toolpool metrics [--store DIR]
 *
 * Each sample of a supervisor carries its pid and command as labels. A
 * node exporter's textfile collector takes the output as it is (write it
 * to a temporary file and rename it into the collector's folder).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "boards.h"
#include "buf.h"
#include "cli.h"
#include "log.h"
#include "metrics_text.h"
#include "store.h"

/* clang-format off */
static const char metrics_usage[] =
    "usage: toolpool metrics [--store DIR]\n"
    "Prints, in the Prometheus text format, the counters of every supervisor\n"
    "working on the store now (run, serve, mcp; each sample labelled with its\n"
    "pid and command): calls by tool and outcome, attempts, retries, timeouts,\n"
    "latency histograms, calls running and queued, workers, commits; then the\n"
    "store's breakers and escalations. What `serve` answers on /metrics, for\n"
    "every supervisor on the store; a node exporter's textfile collector takes it.\n"
    "  -s, --store DIR     the store (default: $TOOLPOOL_STORE, else .toolpool)\n";
/* clang-format on */

int tp_cmd_metrics(int argc, char **argv)
{
    const char *dir = tp_store_default_dir();
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, metrics_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(metrics_usage);
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return 2;
    tp_lives_t lives;
    tp_buf_t b = {0};
    int status = 0;
    rc = tp_cli_lives(s, txn, &lives);
    if (rc == 0) {
        const tp_sb_snap_t **boards = calloc(lives.n ? lives.n : 1, sizeof *boards);
        size_t n = 0;
        for (size_t i = 0; boards && i < lives.n; i++)
            if (lives.v[i].board)
                boards[n++] = &lives.v[i].snap;
        if (boards == NULL)
            rc = TP_ENOMEM;
        else
            tp_metrics_text(&b, boards, n, true);
        free(boards);
        tp_cli_lives_free(&lives);
    }
    if (rc == 0)
        rc = tp_metrics_store_text(&b, s, txn);
    mdb_txn_abort(txn);
    tp_store_close(s);
    if (rc) {
        tp_log_error("store.read_failed", "%s: %s", dir, tp_strerror(rc));
        status = 2;
    } else if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
        status = 2;
    }
    tp_buf_free(&b);
    return status;
}
