/*
 * toolpool store: the store itself.
 *
 *   toolpool store check [--store DIR]
 *   toolpool store info [--store DIR] [--json]
 *   toolpool store prune ...      (cmd_store_prune.c)
 *   toolpool store compact ...    (cmd_store_compact.c)
 *
 * check reads every record of every database in one read transaction (it
 * never blocks a running supervisor, and sees the store at one moment),
 * unpacks and checks each as every reader of the store does
 * (supervisor/store/record.h), and reports each bad one: its database, its key and
 * what is wrong. Exit 0 when every record is sound, 1 when one is not, 2
 * when the store cannot be opened.
 *
 * info says how big the store is and what it holds (supervisor/store/info.h),
 * from one read transaction too.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "info.h"
#include "log.h"
#include "record.h"
#include "steps.h"
#include "store.h"

/* clang-format off */
static const char store_usage[] =
    "usage: toolpool store check|info|prune|compact [--store DIR] [OPTIONS]\n"
    "  check     read and check every record; report the bad ones\n"
    "  info      how big the store is, and what it holds\n"
    "  prune     drop recorded results (by age, job, outcome, tool) and their checkpoints\n"
    "  compact   give the space pruned results left back to the file system\n"
    "`toolpool store VERB --help` says more of each.\n"
    "exit status: 0 done, 1 as each verb says, 2 usage or store error\n";

static const char check_usage[] =
    "usage: toolpool store check [--store DIR]\n"
    "Reads every record of the store (meta, results, jobs, steps, inflight,\n"
    "breakers, escalations, tasks), unpacks it and checks its fields, and reports each bad one:\n"
    "its database, its key and what is wrong. Runs beside a running toolpool.\n"
    "exit status: 0 every record sound, 1 some record bad, 2 the store cannot\n"
    "be opened\n";

static const char info_usage[] =
    "usage: toolpool store info [--store DIR] [--json]\n"
    "How big the store is and what it holds, from one read transaction (it\n"
    "runs beside a running toolpool): the data file's size, the map's size and\n"
    "what of it is used, the pages free (LMDB's freelist: space new records\n"
    "reuse, and that `toolpool store compact` gives back), the records of each\n"
    "kind with their bytes (keys and values), results by outcome, the oldest\n"
    "and newest result, and the store's format.\n"
    "  -s, --store DIR   the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "      --json        one JSON object\n"
    "exit status: 0, or 2 when the store cannot be read\n";
/* clang-format on */

/* The databases in the order check reads them, which is the order it reports them. */
static const tp_db_t check_order[] = {TP_DB_META,     TP_DB_RESULTS,  TP_DB_JOBS,        TP_DB_STEPS,
                                      TP_DB_INFLIGHT, TP_DB_BREAKERS, TP_DB_ESCALATIONS, TP_DB_TASKS};

typedef struct {
    const char *dir;
    unsigned long long records, bad, unknown;
    unsigned long long per_db[TP_DB__COUNT];
} check_t;

static void say_bad(check_t *c, tp_db_t db, const MDB_val *k, const char *why)
{
    char name[300];
    printf("%s: %s: %s\n", c->dir, tp_record_name(db, k->mv_data, k->mv_size, name, sizeof name), why);
    c->bad++;
}

/* Checks one record: a message of its database's, a raw value, or a meta key of a later version. */
static void check_one(check_t *c, tp_db_t db, const MDB_val *k, const MDB_val *v)
{
    char why[256];
    const ProtobufCMessageDescriptor *desc = tp_record_type(db, k->mv_data, k->mv_size);
    if (desc != NULL) {
        ProtobufCMessage *m;
        if (tp_record_unpack(db, k->mv_data, k->mv_size, v->mv_data, v->mv_size, desc, &m, why, sizeof why) != 0)
            say_bad(c, db, k, why);
        else
            protobuf_c_message_free_unpacked(m, NULL);
        return;
    }
    if (db == TP_DB_STEPS) {
        if (!tp_steps_record_ok(k->mv_data, k->mv_size, v->mv_data, v->mv_size, why, sizeof why))
            say_bad(c, db, k, why);
        return;
    }
    if (db == TP_DB_META && k->mv_size == 14 && memcmp(k->mv_data, "escalation_seq", 14) == 0) {
        if (tp_record_check_raw(db, k->mv_data, k->mv_size, v->mv_size, why, sizeof why) != 0)
            say_bad(c, db, k, why);
        return;
    }
    if (db == TP_DB_META) {
        /* A record a later version added: this one cannot say whether it is sound. */
        char name[300];
        printf("%s: %s: not checked (a record this toolpool does not know)\n", c->dir,
               tp_record_name(db, k->mv_data, k->mv_size, name, sizeof name));
        c->unknown++;
        return;
    }
    snprintf(why, sizeof why, "no %s record has a key like it", tp_store_db_name(db));
    say_bad(c, db, k, why);
}

/* Every record of db. 0, or the LMDB error that stopped the walk (reported, and counted bad). */
static int check_db(check_t *c, tp_store_t *s, MDB_txn *txn, tp_db_t db)
{
    if (!tp_store_has(s, db))
        return 0; /* a store of format 2, or one without tasks */
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, db), &cur));
    if (rc) {
        printf("%s: %s: cannot be read: %s\n", c->dir, tp_store_db_name(db), tp_strerror(rc));
        c->bad++;
        return rc;
    }
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        c->records++;
        c->per_db[db]++;
        check_one(c, db, &k, &v);
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        return 0;
    printf("%s: %s: cannot be read past its record %llu: %s\n", c->dir, tp_store_db_name(db), c->per_db[db],
           tp_strerror(rc));
    c->bad++;
    return rc;
}

int tp_cli_store_check(const char *dir, unsigned long long *records)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return 2;
    check_t c = {.dir = dir};
    for (size_t i = 0; i < sizeof check_order / sizeof check_order[0]; i++)
        check_db(&c, s, txn, check_order[i]);
    mdb_txn_abort(txn);
    tp_store_close(s);
    if (records)
        memcpy(records, c.per_db, sizeof c.per_db);

    char counts[256];
    size_t len = 0;
    for (size_t i = 0; i < sizeof check_order / sizeof check_order[0]; i++)
        len += (size_t)snprintf(counts + len, sizeof counts - len, "%s%s %llu", i ? ", " : "",
                                tp_store_db_name(check_order[i]), c.per_db[check_order[i]]);
    if (c.bad == 0)
        printf("%s: %llu record%s, all sound (%s)\n", dir, c.records, c.records == 1 ? "" : "s", counts);
    else
        printf("%s: %llu bad record%s of %llu (%s)\n", dir, c.bad, c.bad == 1 ? "" : "s", c.records, counts);
    return c.bad ? 1 : 0;
}

/* ---- info ---- */

static void count_line(FILE *out, const char *what, const tp_info_count_t *c, const char *more)
{
    char b[32];
    fprintf(out, "  %-12s %10llu  %9s%s%s\n", what, (unsigned long long)c->n, tp_cli_size(c->bytes, b, sizeof b),
            more[0] ? "   " : "", more);
}

/* Reads the figures of the store at dir. 0, or 2 logged. */
static int read_info(const char *dir, tp_store_info_t *in)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return 2;
    int rc = tp_store_info(s, txn, in);
    mdb_txn_abort(txn);
    tp_store_close(s);
    if (rc) {
        tp_log_error("store.read_failed", "%s: cannot read the store's figures: %s", dir, tp_strerror(rc));
        return 2;
    }
    return 0;
}

static void print_space(const char *dir, const tp_store_info_t *in, FILE *out)
{
    char f[32], m[32], u[32], fr[32];
    const tp_store_space_t *sp = &in->space;
    fprintf(out, "%s: %s file, format %u; map %s, %s used, %s free inside it (%llu pages of %llu bytes)\n", dir,
            tp_cli_size(sp->file, f, sizeof f), in->format, tp_cli_size(sp->map, m, sizeof m),
            tp_cli_size(sp->used, u, sizeof u), tp_cli_size(sp->free_pages * sp->page, fr, sizeof fr),
            (unsigned long long)sp->free_pages, (unsigned long long)sp->page);
}

int tp_cli_store_summary(const char *dir, FILE *out)
{
    tp_store_info_t in;
    if (read_info(dir, &in) != 0)
        return 2;
    char b[32], o[32], n[32];
    print_space(dir, &in, out);
    fprintf(out, "  %llu results (%s), %llu checkpoints, %llu open escalations; oldest result %s, newest %s\n",
            (unsigned long long)in.results.n, tp_cli_size(in.results.bytes, b, sizeof b),
            (unsigned long long)in.checkpoints.n, (unsigned long long)in.escalations_open.n,
            tp_cli_when(in.oldest_us, o, sizeof o), tp_cli_when(in.newest_us, n, sizeof n));
    return 0;
}

static void print_info(const char *dir, const tp_store_info_t *in)
{
    char more[512], b[32], o[32], n[32];
    print_space(dir, in, stdout);
    if (in->created_us)
        printf("  created      %s\n", tp_cli_when(in->created_us, o, sizeof o));
    size_t len = 0;
    for (size_t i = 0; i < in->n_outcomes && len < sizeof more - 64; i++)
        len += (size_t)snprintf(more + len, sizeof more - len, "%s%s %llu (%s)", i ? ", " : "", in->outcomes[i].kind,
                                (unsigned long long)in->outcomes[i].c.n,
                                tp_cli_size(in->outcomes[i].c.bytes, b, sizeof b));
    more[len] = '\0';
    printf("  %-12s %10s  %9s\n", "", "records", "bytes");
    count_line(stdout, "results", &in->results, more);
    count_line(stdout, "checkpoints", &in->checkpoints, "");
    count_line(stdout, "steps", &in->steps, "(two records for each call listed in a job)");
    snprintf(more, sizeof more, "%llu open", (unsigned long long)in->escalations_open.n);
    count_line(stdout, "escalations", &in->escalations, more);
    snprintf(more, sizeof more, "%llu of tools, %llu of calls", (unsigned long long)in->tool_breakers.n,
             (unsigned long long)in->call_breakers.n);
    count_line(stdout, "breakers", &in->breakers, more);
    snprintf(more, sizeof more, "%llu of live owners", (unsigned long long)in->inflight_live.n);
    tp_info_count_t all = {in->inflight.n + in->claims.n, in->inflight.bytes + in->claims.bytes};
    char both[64];
    snprintf(both, sizeof both, "in flight");
    count_line(stdout, both, &all, more);
    snprintf(more, sizeof more, "%llu started, %llu claims", (unsigned long long)in->inflight.n,
             (unsigned long long)in->claims.n);
    printf("  %-12s %10s  %9s   %s\n", "", "", "", more);
    count_line(stdout, "MCP tasks", &in->tasks, "");
    printf("  %-12s %10llu  %9s   %llu alive\n", "owners", (unsigned long long)in->owners.n, "",
           (unsigned long long)in->owners_live.n);
    if (in->results.n) {
        printf("  oldest       %s  (%s)\n", tp_cli_when(in->oldest_us, o, sizeof o), in->oldest_id);
        printf("  newest       %s  (%s)\n", tp_cli_when(in->newest_us, n, sizeof n), in->newest_id);
    }
    if (in->undated)
        printf("  undated      %10llu results of an older toolpool, with no record time\n",
               (unsigned long long)in->undated);
    if (in->bad)
        printf("  bad          %10llu records that do not unpack (`toolpool store check --store %s` names them)\n",
               (unsigned long long)in->bad, dir);
}

static json_t *count_json(const tp_info_count_t *c)
{
    return json_pack("{s:I,s:I}", "count", (json_int_t)c->n, "bytes", (json_int_t)c->bytes);
}

static json_t *info_json(const char *dir, const tp_store_info_t *in)
{
    const tp_store_space_t *sp = &in->space;
    json_t *by = json_object(), *dbs = json_object();
    for (size_t i = 0; by && i < in->n_outcomes; i++)
        json_object_set_new(by, in->outcomes[i].kind, count_json(&in->outcomes[i].c));
    for (int db = 0; dbs && db < TP_DB__COUNT; db++)
        json_object_set_new(
            dbs, tp_store_db_name(db),
            json_pack("{s:I,s:I}", "records", (json_int_t)sp->entries[db], "pages", (json_int_t)sp->pages[db]));
    json_t *results = count_json(&in->results);
    if (results)
        json_object_update_new(results,
                               json_pack("{s:o?,s:I,s:s,s:I,s:s,s:I,s:I}", "by_outcome", by, "oldest_ms",
                                         (json_int_t)(in->oldest_us / 1000), "oldest_id", in->oldest_id, "newest_ms",
                                         (json_int_t)(in->newest_us / 1000), "newest_id", in->newest_id, "undated",
                                         (json_int_t)in->undated, "bad", (json_int_t)in->bad));
    return json_pack(
        "{s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o?,s:o?,s:o?,s:{s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,"
        "s:I,s:I},s:{s:I,s:I},s:o?,s:o?}",
        "store", dir, "format", (int)in->format, "created_ms", (json_int_t)(in->created_us / 1000), "file_bytes",
        (json_int_t)sp->file, "map_bytes", (json_int_t)sp->map, "map_used_bytes", (json_int_t)sp->used, "page_bytes",
        (json_int_t)sp->page, "free_pages", (json_int_t)sp->free_pages, "free_bytes",
        (json_int_t)(sp->free_pages * sp->page), "results", results, "checkpoints", count_json(&in->checkpoints),
        "steps", count_json(&in->steps), "escalations", "count", (json_int_t)in->escalations.n, "bytes",
        (json_int_t)in->escalations.bytes, "open", (json_int_t)in->escalations_open.n, "breakers", "count",
        (json_int_t)in->breakers.n, "bytes", (json_int_t)in->breakers.bytes, "tool", (json_int_t)in->tool_breakers.n,
        "call", (json_int_t)in->call_breakers.n, "inflight", "count", (json_int_t)(in->inflight.n + in->claims.n),
        "bytes", (json_int_t)(in->inflight.bytes + in->claims.bytes), "started", (json_int_t)in->inflight.n, "claims",
        (json_int_t)in->claims.n, "live", (json_int_t)in->inflight_live.n, "owners", "count", (json_int_t)in->owners.n,
        "live", (json_int_t)in->owners_live.n, "tasks", count_json(&in->tasks), "databases", dbs);
}

static int store_info(int argc, char **argv)
{
    const char *dir = tp_store_default_dir();
    bool json = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {"json", 0, false, &json, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, info_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(info_usage);
    tp_store_info_t in;
    if (read_info(dir, &in) != 0)
        return 2;
    if (!json) {
        print_info(dir, &in);
        return 0;
    }
    json_t *o = info_json(dir, &in);
    rc = o ? tp_cli_put_json(stdout, o) : TP_ENOMEM;
    json_decref(o);
    if (rc)
        tp_log_error("cli.write_failed", "cannot write the store's figures: %s", tp_strerror(rc));
    return rc ? 2 : 0;
}

static int store_check(int argc, char **argv)
{
    const char *dir = tp_store_default_dir();
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, check_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(check_usage);
    return tp_cli_store_check(dir, NULL);
}

static const struct {
    const char *verb;
    int (*run)(int argc, char **argv);
} verbs[] = {
    {"check", store_check},
    {"info", store_info},
    {"prune", tp_cmd_store_prune},
    {"compact", tp_cmd_store_compact},
};

int tp_cmd_store(int argc, char **argv)
{
    /* toolpool store VERB [OPTIONS], and, as before, toolpool store [--store DIR] check. */
    for (size_t i = 0; argc > 1 && i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(argv[1], verbs[i].verb) == 0)
            return verbs[i].run(argc - 1, argv + 1);
    const char *dir = tp_store_default_dir(), *verb = NULL;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, store_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        verb = argv[optind++];
    if (verb == NULL || strcmp(verb, "check") != 0 || optind < argc)
        return tp_cli_misuse(store_usage);
    return tp_cli_store_check(dir, NULL);
}
