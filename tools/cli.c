/*
 * What the subcommands share beside the engine options (host.c): the
 * options of the commands that read or change a store or a registry
 * (stats, trace, store, forget, tools, breakers, escalations, checkpoints)
 * from one table each, the usage text's two ways out, and the store opened
 * for reading.
 */
#include <getopt.h>
#include <stdio.h>
#include <time.h>

#include "buf.h"
#include "cli.h"
#include "json.h"
#include "log.h"
#include "registry.h"
#include "results.h"
#include "store.h"

int tp_cli_usage(const char *usage, int opt)
{
    fputs(usage, opt == 'h' ? stdout : stderr);
    return opt == 'h' ? 0 : 2;
}

int tp_cli_misuse(const char *usage)
{
    return tp_cli_usage(usage, '?');
}

int tp_cli_put_json(FILE *out, const json_t *v)
{
    tp_buf_t b = {0};
    int rc = tp_json_write(&b, v, 0) == 0 && tp_buf_append(&b, "\n", 1) == 0 ? 0 : TP_ENOMEM;
    if (rc == 0 && fwrite(b.data + b.off, 1, b.len - b.off, out) != b.len - b.off)
        rc = TP_EIO;
    tp_buf_free(&b);
    return rc;
}

/*
 * getopt_long over the table as it is written: its long options in its
 * order (an abbreviation that fits two is named with both, in that order),
 * then --help; the short forms the table gives, then -h. An option without
 * a short form answers its index past TP_CLI_OPT_BASE. Each option is
 * taken as it comes, so the first bad one, or --help, ends the parse.
 */
int tp_cli_options(int argc, char **argv, const char *usage, const tp_cli_opt_t *opts)
{
    struct option longopts[TP_CLI_OPTS_MAX + 2];
    char shortopts[2 * TP_CLI_OPTS_MAX + 2];
    size_t n = 0, ns = 0;
    for (; opts[n].name != NULL; n++) {
        if (n == TP_CLI_OPTS_MAX) {
            tp_log_error("cli.usage", "%s: more than %d options", argv[0], TP_CLI_OPTS_MAX);
            return 2;
        }
        const tp_cli_opt_t *o = &opts[n];
        longopts[n] = (struct option){o->name, o->has_arg ? required_argument : no_argument, NULL,
                                      o->letter ? o->letter : TP_CLI_OPT_BASE + (int)n};
        if (o->letter) {
            shortopts[ns++] = o->letter;
            if (o->has_arg)
                shortopts[ns++] = ':';
        }
    }
    longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n + 1] = (struct option){NULL, 0, NULL, 0};
    shortopts[ns++] = 'h';
    shortopts[ns] = '\0';

    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const tp_cli_opt_t *o = NULL;
        for (size_t i = 0; o == NULL && i < n; i++)
            if (longopts[i].val == c)
                o = &opts[i];
        if (o == NULL)
            return tp_cli_usage(usage, c);
        if (o->take) {
            int rc = o->take(o, optarg);
            if (rc)
                return rc;
        } else if (o->has_arg) {
            *(const char **)o->to = optarg;
        } else {
            *(bool *)o->to = true;
        }
    }
    return TP_CLI_GO_ON;
}

tp_store_t *tp_cli_store_read(const char *dir, MDB_txn **txn)
{
    char err[1024];
    tp_store_t *s = tp_store_open(dir, TP_STORE_RDONLY, err, sizeof err);
    if (s == NULL) {
        tp_log_error("store.open_failed", "%s", err);
        return NULL;
    }
    int rc = tp_store_read(s, txn);
    if (rc) {
        tp_log_error("store.read_failed", "%s: cannot read: %s", dir, tp_strerror(rc));
        tp_store_close(s);
        return NULL;
    }
    return s;
}

int tp_cli_each_result(const char *dir, int (*fn)(void *ctx, const Toolpool__StoredResult *sr), void *ctx)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return 2;
    int status = 0;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_RESULTS), &cur));
    for (rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__StoredResult *sr;
        if (tp_result_unpack(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &sr) != 0) {
            tp_log_error("store.corrupt_record",
                         "%s: results \"%.*s\": a corrupt record (`toolpool store check --store %s` lists them)", dir,
                         (int)k.mv_size, (const char *)k.mv_data, dir);
            status = 2;
            continue;
        }
        int frc = fn(ctx, sr);
        tp_result_free(sr);
        if (frc < 0) {
            tp_log_error("cli.out_of_memory", "out of memory");
            status = 2;
            break;
        }
    }
    if (rc && rc != MDB_NOTFOUND) {
        tp_log_error("store.read_failed", "%s: cannot read %s: %s", dir, tp_store_db_name(TP_DB_RESULTS),
                     tp_strerror(rc));
        status = 2;
    }
    if (rc == 0 || rc == MDB_NOTFOUND)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}

int tp_cli_take_since(const tp_cli_opt_t *o, const char *arg)
{
    if (tp_duration_parse(arg, o->to) < 0 || *(uint64_t *)o->to == 0) {
        tp_log_error("cli.bad_option", "--%s: expected a duration like \"1h\" or \"30m\", got \"%s\"", o->name, arg);
        return 2;
    }
    return 0;
}

const char *tp_cli_when(uint64_t us, char *buf, size_t cap)
{
    time_t t = (time_t)(us / 1000000u);
    struct tm tm;
    if (us == 0 || localtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, cap, "-");
    return buf;
}

/* Bytes for a person: "812 B", "16.7 MB" (decimal units, as ls -h --si and df -H say them). */
const char *tp_cli_size(uint64_t n, char *buf, size_t cap)
{
    if (n < 1000)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else if (n < 1000000)
        snprintf(buf, cap, "%.1f kB", (double)n / 1e3);
    else if (n < 1000000000)
        snprintf(buf, cap, "%.1f MB", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.2f GB", (double)n / 1e9);
    return buf;
}
