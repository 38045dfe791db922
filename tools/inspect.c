/*
 * toolpool breakers and toolpool escalations: a person's view of the store.
 *
 *   toolpool breakers [list | show ID | reset ID] [--store DIR]
 *   toolpool escalations [list [--all] | show ID | resolve ID [--note TEXT]] [--store DIR]
 *
 * Reads run in a read transaction, so they never block a running
 * supervisor; reset and resolve take one short write.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "breaker.h"
#include "cli.h"
#include "log.h"
#include "record.h"
#include "store.h"
#include "toolpool.pb-c.h"

typedef struct {
    const char *store;
    const char *verb;
    const char *id;
    const char *note;
    bool all;
} args_t;

/* [VERB [ID]] [--store DIR] [--all] [--note TEXT], in any order. */
static int parse(int argc, char **argv, args_t *a, const char *usage)
{
    static const struct option longopts[] = {
        {"store", required_argument, NULL, 's'},
        {"all", no_argument, NULL, 'a'},
        {"note", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (args_t){.store = tp_store_default_dir(), .verb = "list"};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': a->store = optarg; break;
        case 'a': a->all = true; break;
        case 'n': a->note = optarg; break;
        case 'h': fputs(usage, stdout); exit(0);
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc)
        a->verb = argv[optind++];
    if (optind < argc)
        a->id = argv[optind++];
    if (optind < argc) {
        fputs(usage, stderr);
        return 2;
    }
    return 0;
}

static void put_time(FILE *out, uint64_t unix_us)
{
    time_t t = (time_t)(unix_us / 1000000u);
    struct tm tm;
    char buf[32];
    localtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    fputs(buf, out);
}

/* Opens the store named by the arguments (writable for a verb that writes); NULL is logged. */
static tp_store_t *open_store(const args_t *a, bool write)
{
    char err[1024];
    tp_store_t *s = tp_store_open(a->store, write ? 0 : TP_STORE_RDONLY, err, sizeof err);
    if (s == NULL)
        tp_log_error("%s", err);
    return s;
}

/* A read transaction on s, or NULL (logged). */
static MDB_txn *read_txn(tp_store_t *s, const args_t *a)
{
    MDB_txn *txn;
    if (tp_store_read(s, &txn) == 0)
        return txn;
    tp_log_error("%s: cannot read", a->store);
    return NULL;
}

/* A bad record met while listing or showing: said on stderr by name, with what is wrong. */
static void report_bad(const args_t *a, tp_db_t db, const MDB_val *k, const char *why)
{
    char name[300];
    tp_log_error("%s: %s: a corrupt record: %s (`toolpool store check --store %s` lists every bad record)",
                 a->store, tp_record_name(db, k->mv_data, k->mv_size, name, sizeof name), why, a->store);
}

/* Unpacks and checks the record at k (report_bad when it is bad): 0 and *m, or EPROTO. */
static int record_at(const args_t *a, tp_db_t db, const MDB_val *k, const MDB_val *v, ProtobufCMessage **m)
{
    char why[256];
    const ProtobufCMessageDescriptor *desc = tp_record_type(db, k->mv_data, k->mv_size);
    int rc = EPROTO;
    *m = NULL;
    if (desc == NULL)
        snprintf(why, sizeof why, "no %s record has a key like it", tp_store_db_name(db));
    else
        rc = tp_record_unpack(db, k->mv_data, k->mv_size, v->mv_data, v->mv_size, desc, m, why, sizeof why);
    if (rc)
        report_bad(a, db, k, why);
    return rc;
}

typedef void (*each_fn)(const MDB_val *k, const ProtobufCMessage *m, void *ctx);

/*
 * Calls fn on every record of db, unpacked and checked, in key order. A
 * bad record is reported and passed over. 0, or 2 when some record was
 * bad or the database could not be read to its end.
 */
static int walk(tp_store_t *s, MDB_txn *txn, const args_t *a, tp_db_t db, each_fn fn, void *ctx)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, tp_store_dbi(s, db), &cur);
    if (rc) {
        tp_log_error("%s: cannot read %s: %s", a->store, tp_store_db_name(db), mdb_strerror(rc));
        return 2;
    }
    int status = 0;
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ProtobufCMessage *m;
        if (record_at(a, db, &k, &v, &m) != 0) {
            status = 2;
            continue;
        }
        fn(&k, m, ctx);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (rc != MDB_NOTFOUND) {
        tp_log_error("%s: cannot read %s to its end: %s", a->store, tp_store_db_name(db), mdb_strerror(rc));
        status = 2;
    }
    mdb_cursor_close(cur);
    return status;
}

/*
 * Runs a verb that writes (reset, resolve) in one transaction, says what it
 * did, closes the store, and returns the exit status.
 */
static int run_write(tp_store_t *s, const args_t *a, tp_store_apply_fn fn, void *ctx, const char *thing,
                     const char *done)
{
    char err[1024];
    int rc = tp_store_write(s, fn, ctx, err, sizeof err);
    tp_store_close(s);
    if (rc == MDB_NOTFOUND || rc == EEXIST) {
        tp_log_error("%s: %s %s %s", a->store, rc == EEXIST ? "more than one" : "no", thing, a->id);
        return 2;
    }
    if (rc) {
        tp_log_error("%s", err);
        return 2;
    }
    printf("%s %s\n", done, a->id);
    return 0;
}

/* ---- breakers ---- */

static const char breakers_usage[] =
    "usage: toolpool breakers [list | show ID | reset ID] [--store DIR]\n"
    "Circuit breakers in the store. A tool breaker's ID is tool/NAME; a same-call\n"
    "breaker's is call/NAME/DIGEST (a unique prefix of the digest will do).\n"
    "reset closes the breaker and forgets its failures.\n";

static const char *state_name(Toolpool__BreakerState st)
{
    return st == TOOLPOOL__BREAKER_STATE__BREAKER_OPEN        ? "open"
           : st == TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN ? "half-open"
                                                              : "closed";
}

/* Writes the printable id of the breaker at key into id. */
static void breaker_id(const MDB_val *k, char *id, size_t cap)
{
    const char *p = k->mv_data;
    if (k->mv_size > 0 && p[0] == 't') {
        snprintf(id, cap, "tool/%.*s", (int)(k->mv_size - 1), p + 1);
        return;
    }
    size_t n = strnlen(p + 1, k->mv_size - 1);
    tp_digest_t d = {0};
    if (k->mv_size >= n + 2 + TP_DIGEST_LEN)
        memcpy(d.b, p + 2 + n, TP_DIGEST_LEN);
    char hex[2 * TP_DIGEST_LEN + 1];
    tp_digest_hex(&d, hex);
    snprintf(id, cap, "call/%.*s/%s", (int)n, p + 1, hex);
}

/* One breaker (a ToolBreaker or a CallBreaker, checked), as a line; full adds its failures. */
static void show_breaker(FILE *out, const char *id, const ProtobufCMessage *m, bool full)
{
    if (m->descriptor == &toolpool__tool_breaker__descriptor) {
        const Toolpool__ToolBreaker *tb = (const Toolpool__ToolBreaker *)m;
        uint64_t calls = 0, fails = 0;
        for (size_t i = 0; i < tb->n_buckets; i++) {
            calls += tb->buckets[i]->calls;
            fails += tb->buckets[i]->failures;
        }
        fprintf(out, "%-40s %-9s %llu/%llu failed in window, tripped %llu time%s", id, state_name(tb->state),
                (unsigned long long)fails, (unsigned long long)calls, (unsigned long long)tb->trips,
                tb->trips == 1 ? "" : "s");
        if (tb->opened_unix_us && tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED) {
            fputs(", opened ", out);
            put_time(out, tb->opened_unix_us);
        }
        fputc('\n', out);
        return;
    }
    const Toolpool__CallBreaker *cb = (const Toolpool__CallBreaker *)m;
    fprintf(out, "%-40s %-9s %zu failure%s", id, cb->opened_unix_us ? "open" : "closed",
            cb->n_failures_unix_us, cb->n_failures_unix_us == 1 ? "" : "s");
    if (cb->opened_unix_us) {
        fputs(", opened ", out);
        put_time(out, cb->opened_unix_us);
        fprintf(out, ", %llu call%s blocked", (unsigned long long)cb->blocked, cb->blocked == 1 ? "" : "s");
        if (cb->escalation[0])
            fprintf(out, ", escalated %s", cb->escalation);
    }
    fputc('\n', out);
    if (full) {
        fprintf(out, "  args: %.*s\n", (int)cb->args.len, cb->args.data);
        fprintf(out, "  last failure: %s: %s\n", cb->last_kind, cb->last_message);
        for (size_t i = 0; i < cb->n_failures_unix_us; i++) {
            fputs("  failed at ", out);
            put_time(out, cb->failures_unix_us[i]);
            fputc('\n', out);
        }
    }
}

static void list_breaker(const MDB_val *k, const ProtobufCMessage *m, void *ctx)
{
    char id[700];
    breaker_id(k, id, sizeof id);
    show_breaker(stdout, id, m, false);
    ++*(int *)ctx;
}

/* The one breaker whose id starts with prefix: 0, MDB_NOTFOUND, or EEXIST (ambiguous). */
static int find_breaker(tp_store_t *s, MDB_txn *txn, const char *prefix, MDB_val *key, MDB_val *val)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_BREAKERS), &cur);
    if (rc)
        return rc;
    MDB_val k, v;
    int found = 0;
    char id[700];
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        breaker_id(&k, id, sizeof id);
        if (strncmp(id, prefix, strlen(prefix)) == 0 && (strlen(prefix) == strlen(id) || strncmp(prefix, "call/", 5) == 0)) {
            *key = k;
            *val = v;
            found++;
        }
    }
    mdb_cursor_close(cur);
    return found == 1 ? 0 : found == 0 ? MDB_NOTFOUND : EEXIST;
}

static int reset_apply(MDB_txn *txn, void *ctx)
{
    void **c = ctx;
    tp_store_t *s = c[0];
    MDB_val key, val;
    int rc = find_breaker(s, txn, c[1], &key, &val);
    if (rc)
        return rc;
    return mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &key, NULL);
}

int tp_cmd_breakers(int argc, char **argv)
{
    args_t a;
    if (parse(argc, argv, &a, breakers_usage))
        return 2;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0, reset = strcmp(a.verb, "reset") == 0;
    if (!(list || show || reset) || (list && a.id) || (!list && !a.id)) {
        fputs(breakers_usage, stderr);
        return 2;
    }
    tp_store_t *s = open_store(&a, reset);
    if (s == NULL)
        return 2;
    if (reset) {
        void *ctx[2] = {s, (void *)a.id};
        return run_write(s, &a, reset_apply, ctx, "breaker", "reset");
    }
    int status = 0;
    MDB_txn *txn = read_txn(s, &a);
    if (txn == NULL) {
        tp_store_close(s);
        return 2;
    }
    if (show) {
        MDB_val k, v;
        ProtobufCMessage *m;
        int rc = find_breaker(s, txn, a.id, &k, &v);
        if (rc == EEXIST || rc == MDB_NOTFOUND) {
            tp_log_error("%s: %s breaker %s", a.store, rc == EEXIST ? "more than one" : "no", a.id);
            status = 2;
        } else if (rc) {
            tp_log_error("%s: cannot read breakers: %s", a.store, mdb_strerror(rc));
            status = 2;
        } else if (record_at(&a, TP_DB_BREAKERS, &k, &v, &m) != 0) {
            status = 2;
        } else {
            char id[700];
            breaker_id(&k, id, sizeof id);
            show_breaker(stdout, id, m, true);
            protobuf_c_message_free_unpacked(m, NULL);
        }
    } else {
        int n = 0;
        status = walk(s, txn, &a, TP_DB_BREAKERS, list_breaker, &n);
        if (n == 0 && status == 0)
            puts("no breakers: every circuit is closed");
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}

/* ---- escalations ---- */

static const char escalations_usage[] =
    "usage: toolpool escalations [list [--all] | show ID | resolve ID [--note TEXT]] [--store DIR]\n"
    "Calls handed to a person: an open same-call circuit, or a fallback chain\n"
    "that ran out. list shows the open ones (--all: resolved ones too).\n";

static void show_escalation(FILE *out, const Toolpool__Escalation *e, bool full)
{
    if (!full) {
        fprintf(out, "%-8s %-8s ", e->id, e->resolved ? "resolved" : "open");
        put_time(out, e->created_unix_us);
        fprintf(out, "  %s(call %s, job %s): %s", e->tool, e->call_id, e->job, e->kind);
        if (e->blocked)
            fprintf(out, ", %llu later call%s blocked", (unsigned long long)e->blocked, e->blocked == 1 ? "" : "s");
        fputc('\n', out);
        return;
    }
    fprintf(out, "escalation %s (%s)\n  created ", e->id, e->resolved ? "resolved" : "open");
    put_time(out, e->created_unix_us);
    fprintf(out, "\n  call %s, job %s, step %llu\n  reason: %s\n", e->call_id, e->job, (unsigned long long)e->step,
            e->reason);
    fprintf(out, "  last error: %s: %s\n", e->kind, e->message);
    if (e->blocked)
        fprintf(out, "  later calls answered CircuitOpen: %llu\n", (unsigned long long)e->blocked);
    if (e->resolved) {
        fputs("  resolved ", out);
        put_time(out, e->resolved_unix_us);
        fprintf(out, "%s%s\n", e->note[0] ? ": " : "", e->note);
    }
    fprintf(out, "\n%s(args=%.*s)\n", e->tool, (int)e->args.len, e->args.data);
    for (size_t i = 0; i < e->n_trace; i++) {
        const Toolpool__Attempt *t = e->trace[i];
        tp_trace_attempt(out, e->tool, t->attempt, t->tool, t->outcome, (double)t->duration_us / 1e3,
                         (double)t->backoff_us / 1e3);
    }
}

typedef struct {
    bool all;
    int n;
} esc_list_t;

static void list_escalation(const MDB_val *k, const ProtobufCMessage *m, void *ctx)
{
    const Toolpool__Escalation *e = (const Toolpool__Escalation *)m;
    esc_list_t *l = ctx;
    if (l->all || !e->resolved) {
        show_escalation(stdout, e, false);
        l->n++;
    }
}

static int resolve_apply(MDB_txn *txn, void *ctx)
{
    void **c = ctx;
    tp_store_t *s = c[0];
    const char *id = c[1], *note = c[2];
    Toolpool__Escalation *e;
    int rc = tp_store_get_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &toolpool__escalation__descriptor,
                              (ProtobufCMessage **)&e);
    if (rc)
        return rc;
    char *keep = e->note;
    e->resolved = true;
    e->resolved_unix_us = tp_unix_us();
    if (note)
        e->note = (char *)note;
    rc = tp_store_put_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &e->base);
    e->note = keep;
    protobuf_c_message_free_unpacked(&e->base, NULL);
    return rc;
}

int tp_cmd_escalations(int argc, char **argv)
{
    args_t a;
    if (parse(argc, argv, &a, escalations_usage))
        return 2;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0,
         resolve = strcmp(a.verb, "resolve") == 0;
    if (!(list || show || resolve) || (list && a.id) || (!list && !a.id)) {
        fputs(escalations_usage, stderr);
        return 2;
    }
    tp_store_t *s = open_store(&a, resolve);
    if (s == NULL)
        return 2;
    if (resolve) {
        void *ctx[3] = {s, (void *)a.id, (void *)a.note};
        return run_write(s, &a, resolve_apply, ctx, "escalation", "resolved");
    }
    int status = 0;
    MDB_txn *txn = read_txn(s, &a);
    if (txn == NULL) {
        tp_store_close(s);
        return 2;
    }
    if (show) {
        Toolpool__Escalation *e;
        int rc = tp_store_get_msg(s, txn, TP_DB_ESCALATIONS, a.id, strlen(a.id), &toolpool__escalation__descriptor,
                                  (ProtobufCMessage **)&e);
        if (rc) {
            char why[600];
            if (rc == MDB_NOTFOUND)
                tp_log_error("%s: no escalation %s", a.store, a.id);
            else
                tp_log_error("%s: escalation %s: %s", a.store, a.id, tp_store_strerror(s, rc, why, sizeof why));
            status = 2;
        } else {
            show_escalation(stdout, e, true);
            protobuf_c_message_free_unpacked(&e->base, NULL);
        }
    } else {
        esc_list_t l = {.all = a.all};
        status = walk(s, txn, &a, TP_DB_ESCALATIONS, list_escalation, &l);
        if (l.n == 0 && status == 0)
            puts(a.all ? "no escalations" : "no open escalations");
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}

/* ---- checkpoints ---- */

static const char checkpoints_usage[] =
    "usage: toolpool checkpoints [list | show JOB] [--store DIR]\n"
    "Each job's checkpoint: the step it reached, the usage its guards count, and\n"
    "(show) its message list: every ended call in order, with what it returned.\n";

static void put_secs_us(FILE *out, uint64_t us)
{
    fprintf(out, "%.3gs", (double)us / 1e6);
}

static void list_checkpoint(FILE *out, const Toolpool__Checkpoint *cp)
{
    fprintf(out, "%-24s step %-6llu %zu call%s ended, %llu attempt%s, cost %g, wall ", cp->job,
            (unsigned long long)cp->last_step, cp->n_calls, cp->n_calls == 1 ? "" : "s",
            (unsigned long long)cp->attempts, cp->attempts == 1 ? "" : "s", cp->cost);
    put_secs_us(out, cp->wall_used_us);
    if (cp->stopped[0])
        fprintf(out, ", stopped: %s", cp->stopped);
    fputc('\n', out);
}

/*
 * One line of a job's message list: the call and what came back. 0, or 2
 * when its record is corrupt (said on stderr; the line says so, and shows
 * none of its bytes).
 */
static int show_step(FILE *out, tp_store_t *s, MDB_txn *txn, const args_t *a, const char *id)
{
    Toolpool__StoredResult *sr;
    int rc = tp_store_get_msg(s, txn, TP_DB_RESULTS, id, strlen(id), &toolpool__stored_result__descriptor,
                              (ProtobufCMessage **)&sr);
    json_t *r = rc ? NULL : json_loadb((const char *)sr->line.data, sr->line.len, 0, NULL);
    if (rc == 0)
        toolpool__stored_result__free_unpacked(sr, NULL);
    if (r == NULL) {
        char why[600];
        if (rc == MDB_NOTFOUND) {
            fprintf(out, "  %s: (no record: missing)\n", id);
            return 0;
        }
        fprintf(out, "  %s: (no record: corrupt)\n", id);
        tp_log_error("%s: call %s: %s", a->store, id, tp_store_strerror(s, rc ? rc : EPROTO, why, sizeof why));
        return 2;
    }
    const char *tool = json_string_value(json_object_get(r, "tool"));
    char *args = json_dumps(json_object_get(r, "args"), JSON_COMPACT | JSON_ENCODE_ANY);
    fprintf(out, "  step %lld  %s  %s(args=%.200s)\n    → ", (long long)json_integer_value(json_object_get(r, "step")),
            id, tool ? tool : "?", args ? args : "{}");
    free(args);
    if (json_is_true(json_object_get(r, "ok"))) {
        char *res = json_dumps(json_object_get(r, "result"), JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(out, "%s%.300s%s\n", json_is_true(json_object_get(r, "degraded")) ? "(degraded) " : "",
                res ? res : "null", res && strlen(res) > 300 ? "..." : "");
        free(res);
    } else {
        const char *kind = json_string_value(json_object_get(r, "error"));
        const char *msg = json_string_value(json_object_get(r, "message"));
        fprintf(out, "%s: %s\n", kind ? kind : "?", msg ? msg : "");
    }
    json_decref(r);
    return 0;
}

static void list_checkpoint_cb(const MDB_val *k, const ProtobufCMessage *m, void *ctx)
{
    list_checkpoint(stdout, (const Toolpool__Checkpoint *)m);
    ++*(int *)ctx;
}

int tp_cmd_checkpoints(int argc, char **argv)
{
    args_t a;
    if (parse(argc, argv, &a, checkpoints_usage))
        return 2;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0;
    if (!(list || show) || (list && a.id) || (show && !a.id)) {
        fputs(checkpoints_usage, stderr);
        return 2;
    }
    tp_store_t *s = open_store(&a, false);
    if (s == NULL)
        return 2;
    MDB_txn *txn = read_txn(s, &a);
    if (txn == NULL) {
        tp_store_close(s);
        return 2;
    }
    int status = 0;
    if (show) {
        Toolpool__Checkpoint *cp;
        int rc = tp_store_get_msg(s, txn, TP_DB_JOBS, a.id, strlen(a.id), &toolpool__checkpoint__descriptor,
                                  (ProtobufCMessage **)&cp);
        if (rc) {
            char why[600];
            if (rc == MDB_NOTFOUND)
                tp_log_error("%s: no checkpoint for job %s", a.store, a.id);
            else
                tp_log_error("%s: checkpoint of job %s: %s", a.store, a.id, tp_store_strerror(s, rc, why, sizeof why));
            status = 2;
        } else {
            list_checkpoint(stdout, cp);
            if (cp->stopped[0])
                printf("  stopped: %s\n", cp->stop_message);
            for (size_t i = 0; i < cp->n_calls; i++)
                if (show_step(stdout, s, txn, &a, cp->calls[i]) != 0)
                    status = 2;
            toolpool__checkpoint__free_unpacked(cp, NULL);
        }
    } else {
        int n = 0;
        status = walk(s, txn, &a, TP_DB_JOBS, list_checkpoint_cb, &n);
        if (n == 0 && status == 0)
            puts("no checkpoints");
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}
