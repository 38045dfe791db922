/*
 * toolpool forget: drops recorded results, so that the next run on the
 * store does those calls again.
 *
 *   toolpool forget [--store DIR] ID...
 *   toolpool forget [--store DIR] --job JOB...
 *
 * All of it in one write transaction: either every record named goes, or,
 * when one is not there, none does (exit 2 naming it). Breakers,
 * escalations and every other result stay as they are.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "records.h"
#include "store.h"

/* clang-format off */
static const char forget_usage[] =
    "usage: toolpool forget [--store DIR] ID...\n"
    "       toolpool forget [--store DIR] --job JOB...\n"
    "Drops the recorded results of the calls named (or, with --job, of every\n"
    "call of the jobs named, and their checkpoints; an agent loop's own saved\n"
    "state stays), so that the next run on the store does them again.\n"
    "Breakers, escalations and every other result stay. Nothing is dropped\n"
    "when one of the names is not in the store.\n"
    "  -s, --store DIR   the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "      --job         the names are jobs, not call ids\n"
    "exit status: 0 done, 2 usage, a name the store does not know, or a store error\n";
/* clang-format on */

typedef struct {
    tp_store_t *s;
    char **names;
    int n;
    bool jobs;
    uint64_t dropped;
    const char *missing;
} forget_t;

static int forget_apply(MDB_txn *txn, void *arg)
{
    forget_t *f = arg;
    f->dropped = 0;
    for (int i = 0; i < f->n; i++) {
        uint64_t n = 1;
        int rc = f->jobs ? tp_records_forget_job(f->s, txn, f->names[i], &n)
                         : tp_records_forget(f->s, txn, f->names[i]);
        if (rc == MDB_NOTFOUND)
            f->missing = f->names[i];
        if (rc)
            return rc;
        f->dropped += n;
    }
    return 0;
}

int tp_cmd_forget(int argc, char **argv)
{
    forget_t f = {0};
    const char *dir = tp_store_default_dir();
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {"job", 0, false, &f.jobs, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, forget_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind >= argc)
        return tp_cli_misuse(forget_usage);
    f.names = argv + optind;
    f.n = argc - optind;
    char err[1024];
    if ((f.s = tp_store_open(dir, 0, err, sizeof err)) == NULL) {
        tp_log_error("store.open_failed", "%s", err);
        return 2;
    }
    rc = tp_store_write(f.s, forget_apply, &f, err, sizeof err);
    tp_store_close(f.s);
    if (rc == MDB_NOTFOUND && f.missing) {
        tp_log_error("cli.not_found", "%s: no %s %s is recorded; nothing was forgotten", dir, f.jobs ? "job" : "call",
                     f.missing);
        return 2;
    }
    if (rc) {
        tp_log_error("store.forget_failed", "%s", err);
        return 2;
    }
    printf("forgot %llu recorded result%s: the next run on %s does %s again\n", (unsigned long long)f.dropped,
           f.dropped == 1 ? "" : "s", dir, f.dropped == 1 ? "it" : "them");
    return 0;
}
