/*
 * toolpool store: the store itself.
 *
 *   toolpool store check [--store DIR]
 *
 * check reads every record of every database in one read transaction (it
 * never blocks a running supervisor, and sees the store at one moment),
 * unpacks and checks each as every reader of the store does
 * (supervisor/store/record.h), and reports each bad one: its database, its key and
 * what is wrong. Exit 0 when every record is sound, 1 when one is not, 2
 * when the store cannot be opened.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "record.h"
#include "steps.h"
#include "store.h"

/* clang-format off */
static const char store_usage[] =
    "usage: toolpool store check [--store DIR]\n"
    "Reads every record of the store (meta, results, jobs, steps, inflight,\n"
    "breakers, escalations, tasks), unpacks it and checks its fields, and reports each bad one:\n"
    "its database, its key and what is wrong. Runs beside a running toolpool.\n"
    "exit status: 0 every record sound, 1 some record bad, 2 the store cannot\n"
    "be opened\n";
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

static int store_check(const char *dir)
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

int tp_cmd_store(int argc, char **argv)
{
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
    return store_check(dir);
}
