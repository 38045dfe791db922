/*
 * toolpool breakers, escalations and checkpoints: a person's view of the
 * store (or a program's, with --json).
 *
 *   toolpool breakers [list [--all] | show ID | reset ID] [--store DIR] [--json]
 *   toolpool escalations [list [--all] | show ID | resolve ID [--note TEXT]] [--store DIR] [--json]
 *   toolpool checkpoints [list | show JOB] [--store DIR] [--json]
 *
 * Reads run in a read transaction, so they never block a running
 * supervisor; reset and resolve take one short write. What they find and
 * change, and the JSON, come from supervisor/store/records.c, which serve's
 * endpoints use too.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "cli.h"
#include "json.h"
#include "log.h"
#include "record.h"
#include "records.h"
#include "steps.h"
#include "store.h"
#include "toolpool.pb-c.h"

typedef struct {
    const char *store;
    const char *verb;
    const char *id;
    const char *note;
    bool all;
    bool json;
    const char *decision; /* resolve: "rerun" or "accept", the name of the option given; NULL neither */
} args_t;

/* --rerun or --accept, into the const char *o->to: either, once or more, but not both. */
static int take_decision(const tp_cli_opt_t *o, const char *arg)
{
    const char **decision = o->to;
    (void)arg;
    if (*decision && *decision != o->name) {
        tp_log_error("cli.usage", "--rerun and --accept: give one of them");
        return 2;
    }
    *decision = o->name;
    return 0;
}

/*
 * [VERB [ID]] [--store DIR] [--all] [--note TEXT] [--json], in any order.
 * TP_CLI_GO_ON, or the status to exit with (tp_cli_options).
 */
static int parse(int argc, char **argv, args_t *a, const char *usage)
{
    *a = (args_t){.store = tp_store_default_dir(), .verb = "list"};
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &a->store, NULL},
        {"all", 0, false, &a->all, NULL},
        {"note", 0, true, &a->note, NULL},
        {"json", 0, false, &a->json, NULL},
        {"rerun", 0, false, &a->decision, take_decision},
        {"accept", 0, false, &a->decision, take_decision},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        a->verb = argv[optind++];
    if (optind < argc)
        a->id = argv[optind++];
    if (optind < argc)
        return tp_cli_misuse(usage);
    return TP_CLI_GO_ON;
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

/* Prints v (taking its reference) as one compact JSON line; 0, or 2 when it could not be built. */
static int print_json(json_t *v, const args_t *a)
{
    if (v == NULL) {
        tp_log_error("cli.out_of_memory", "%s: out of memory rendering JSON", a->store);
        return 2;
    }
    int rc = tp_cli_put_json(stdout, v) == 0 ? 0 : 2;
    json_decref(v);
    return rc;
}

/* Prints each record of a list (taking the array's reference) as a JSON line of its own. */
static int print_json_lines(json_t *all, const args_t *a)
{
    if (all == NULL)
        return print_json(NULL, a);
    int rc = 0;
    size_t i;
    json_t *v;
    json_array_foreach(all, i, v) {
        if (rc == 0)
            rc = print_json(json_incref(v), a);
    }
    json_decref(all);
    return rc;
}

/* Opens the store named by the arguments (writable for a verb that writes); NULL is logged. */
static tp_store_t *open_store(const args_t *a, bool write)
{
    char err[1024];
    tp_store_t *s = tp_store_open(a->store, write ? 0 : TP_STORE_RDONLY, err, sizeof err);
    if (s == NULL)
        tp_log_error("store.open_failed", "%s", err);
    return s;
}

/* A read transaction on s, or NULL (logged). */
static MDB_txn *read_txn(tp_store_t *s, const args_t *a)
{
    MDB_txn *txn;
    if (tp_store_read(s, &txn) == 0)
        return txn;
    tp_log_error("store.read_failed", "%s: cannot read", a->store);
    return NULL;
}

/*
 * Whether the record at k is sound (supervisor/store/record.h): a bad one is said on
 * stderr by name, with what is wrong, never printed.
 */
static bool sound(const args_t *a, tp_db_t db, const MDB_val *k, const MDB_val *v)
{
    char why[256], name[300];
    ProtobufCMessage *m = NULL;
    const ProtobufCMessageDescriptor *desc = tp_record_type(db, k->mv_data, k->mv_size);
    int rc = TP_EPROTO;
    if (desc == NULL)
        snprintf(why, sizeof why, "no %s record has a key like it", tp_store_db_name(db));
    else
        rc = tp_record_unpack(db, k->mv_data, k->mv_size, v->mv_data, v->mv_size, desc, &m, why, sizeof why);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    if (rc)
        tp_log_error("store.corrupt_record",
                     "%s: %s: a corrupt record: %s (`toolpool store check --store %s` lists every bad record)",
                     a->store, tp_record_name(db, k->mv_data, k->mv_size, name, sizeof name), why, a->store);
    return rc == 0;
}

/*
 * The list view of a database: each record checked (sound) and handed to
 * each(k, v, ctx), which returns 1 for a record it listed, 0 for one it
 * passed over, -1 for one it could not read. A database with nothing
 * listed says none. The exit status: 2 when a record was bad or the walk
 * failed, else 0.
 */
static int walk(tp_store_t *s, MDB_txn *txn, const args_t *a, tp_db_t db,
                int (*each)(const MDB_val *k, const MDB_val *v, void *ctx), void *ctx, const char *none)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int status = 0, n = 0, rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, db), &cur));
    if (rc == 0) {
        for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
             rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
            int got = sound(a, db, &k, &v) ? each(&k, &v, ctx) : -1;
            if (got < 0)
                status = 2;
            else
                n += got;
        }
        mdb_cursor_close(cur);
    }
    if (rc != MDB_NOTFOUND) {
        tp_log_error("store.read_failed", "%s: cannot read %s: %s", a->store, tp_store_db_name(db), tp_strerror(rc));
        return 2;
    }
    if (n == 0)
        puts(none);
    return status;
}

/*
 * Runs a verb that writes (reset, resolve) in one transaction, says what it
 * did (naming id_out, the record's full id, when fn filled it in), closes
 * the store, and returns the exit status.
 */
static int run_write(tp_store_t *s, const args_t *a, tp_store_apply_fn fn, void *ctx, const char *thing,
                     const char *done, const char *id_out)
{
    char err[1024];
    int rc = tp_store_write(s, fn, ctx, err, sizeof err);
    tp_store_close(s);
    if (rc == MDB_NOTFOUND || rc == TP_EEXIST) {
        tp_log_error("cli.not_found", "%s: %s %s %s", a->store, rc == TP_EEXIST ? "more than one" : "no", thing, a->id);
        return 2;
    }
    if (rc) {
        tp_log_error("store.read_failed", "%s", err);
        return 2;
    }
    const char *id = id_out && id_out[0] ? id_out : a->id;
    if (a->json)
        return print_json(json_pack("{s:s, s:b}", "id", id, done, 1), a);
    printf("%s %s\n", done, id);
    return 0;
}

/* ---- breakers ---- */

/* clang-format off */
static const char breakers_usage[] =
    "usage: toolpool breakers [list [--all] | show ID | reset ID] [--store DIR] [--json]\n"
    "Circuit breakers in the store. A tool breaker's ID is tool/NAME; a same-call\n"
    "breaker's is call/NAME/DIGEST (a unique prefix of the digest will do).\n"
    "A same-call breaker of scope \"job\" (the default) counts one job's repeats\n"
    "and shows its job; one of scope \"global\" counts every job's.\n"
    "list shows the open and half-open breakers first, then the tool breakers and\n"
    "the call breakers that opened in the last day; the other closed call breakers\n"
    "are counted (--all lists them). show prints a breaker's last 16 opens and\n"
    "closes: when, why, and the calls it refused while open.\n"
    "reset closes the breaker and forgets its failures. --json: JSON lines, a record each.\n";
/* clang-format on */

/* A breaker's transitions, one a line: when, the state it went to, why, and what it refused while open. */
static void show_history(FILE *out, Toolpool__BreakerEvent *const *h, size_t n)
{
    if (n == 0)
        return;
    fputs("  history:\n", out);
    for (size_t i = 0; i < n; i++) {
        fputs("    ", out);
        put_time(out, h[i]->at_unix_us);
        fprintf(out, "  %-9s %s", tp_records_breaker_state(h[i]->state), h[i]->cause);
        if (h[i]->state != TOOLPOOL__BREAKER_STATE__BREAKER_OPEN)
            fprintf(out, " (%llu call%s refused while open)", (unsigned long long)h[i]->refused,
                    h[i]->refused == 1 ? "" : "s");
        fputc('\n', out);
    }
}

static void show_breaker(FILE *out, const char *id, const MDB_val *v, bool full)
{
    if (strncmp(id, "tool/", 5) == 0) {
        Toolpool__ToolBreaker *tb = toolpool__tool_breaker__unpack(NULL, v->mv_size, v->mv_data);
        if (tb == NULL) {
            fprintf(out, "%s  (corrupt record)\n", id);
            return;
        }
        uint64_t calls = 0, fails = 0;
        for (size_t i = 0; i < tb->n_buckets; i++) {
            calls += tb->buckets[i]->calls;
            fails += tb->buckets[i]->failures;
        }
        fprintf(out, "%-40s %-9s %llu/%llu failed in window, tripped %llu time%s", id,
                tp_records_breaker_state(tb->state), (unsigned long long)fails, (unsigned long long)calls,
                (unsigned long long)tb->trips, tb->trips == 1 ? "" : "s");
        if (tb->opened_unix_us && tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED) {
            fputs(", opened ", out);
            put_time(out, tb->opened_unix_us);
            fprintf(out, ", %llu attempt%s refused", (unsigned long long)tb->refused, tb->refused == 1 ? "" : "s");
        }
        fputc('\n', out);
        if (full)
            show_history(out, tb->history, tb->n_history);
        toolpool__tool_breaker__free_unpacked(tb, NULL);
        return;
    }
    Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, v->mv_size, v->mv_data);
    if (cb == NULL) {
        fprintf(out, "%s  (corrupt record)\n", id);
        return;
    }
    fprintf(out, "%-40s %-9s %zu failure%s", id, cb->opened_unix_us ? "open" : "closed", cb->n_failures_unix_us,
            cb->n_failures_unix_us == 1 ? "" : "s");
    if (cb->job[0])
        fprintf(out, " in job %s", cb->job);
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
        show_history(out, cb->history, cb->n_history);
    }
    toolpool__call_breaker__free_unpacked(cb, NULL);
}

typedef struct {
    tp_store_t *s;
    const char *prefix;
    char id[TP_RECORDS_ID_MAX];
} reset_ctx_t;

static int reset_apply(MDB_txn *txn, void *arg)
{
    reset_ctx_t *c = arg;
    return tp_records_breaker_reset(c->s, txn, c->prefix, c->id, sizeof c->id);
}

/* A closed breaker that opened this recently is listed beside the open ones. */
#define TP_BREAKER_RECENT_US (24ull * 3600 * 1000000)

/*
 * Where `breakers list` puts a breaker: 0 open or half-open (or a record
 * it cannot read, to be named), 1 a tool breaker, or a call breaker that
 * opened within TP_BREAKER_RECENT_US, 2 any other closed call breaker
 * (counted, and listed with --all).
 */
static int breaker_rank(const MDB_val *k, const MDB_val *v, uint64_t now)
{
    if (k->mv_size > 0 && ((const char *)k->mv_data)[0] == 't') {
        Toolpool__ToolBreaker *tb = toolpool__tool_breaker__unpack(NULL, v->mv_size, v->mv_data);
        int rank = tb == NULL || tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED ? 0 : 1;
        if (tb)
            toolpool__tool_breaker__free_unpacked(tb, NULL);
        return rank;
    }
    Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, v->mv_size, v->mv_data);
    int rank = 2;
    for (size_t i = 0; cb && i < cb->n_history; i++)
        if (cb->history[i]->state == TOOLPOOL__BREAKER_STATE__BREAKER_OPEN &&
            cb->history[i]->at_unix_us + TP_BREAKER_RECENT_US > now)
            rank = 1;
    if (cb == NULL || cb->opened_unix_us)
        rank = 0;
    if (cb)
        toolpool__call_breaker__free_unpacked(cb, NULL);
    return rank;
}

/*
 * `breakers list`: the open (and half-open) breakers first, then the tool
 * breakers and the call breakers that tripped lately, then, with --all,
 * the other closed call breakers; without it, how many there are.
 */
static int list_breakers(tp_store_t *s, MDB_txn *txn, const args_t *a)
{
    uint64_t now = tp_unix_us(), folded = 0, listed = 0;
    int status = 0;
    MDB_cursor *cur;
    MDB_val k, v;
    char id[TP_RECORDS_ID_MAX];
    int rc = 0;
    for (int pass = 0; pass < 3 && rc == 0; pass++) {
        rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_BREAKERS), &cur));
        if (rc)
            break;
        for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
             rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
            if (breaker_rank(&k, &v, now) != pass)
                continue;
            if (pass == 0 && !sound(a, TP_DB_BREAKERS, &k, &v)) {
                status = 2;
                continue;
            }
            if (pass == 2 && !a->all) {
                folded++;
                continue;
            }
            tp_records_breaker_id(&k, id, sizeof id);
            show_breaker(stdout, id, &v, false);
            listed++;
        }
        mdb_cursor_close(cur);
        rc = rc == MDB_NOTFOUND ? 0 : rc;
    }
    if (rc) {
        tp_log_error("store.read_failed", "%s: cannot read %s: %s", a->store, tp_store_db_name(TP_DB_BREAKERS),
                     tp_strerror(rc));
        return 2;
    }
    if (folded)
        printf("%llu closed call breaker%s; --all lists %s\n", (unsigned long long)folded, folded == 1 ? "" : "s",
               folded == 1 ? "it" : "them");
    else if (listed == 0)
        puts("no breakers: every circuit is closed");
    return status;
}

int tp_cmd_breakers(int argc, char **argv)
{
    args_t a;
    int parsed = parse(argc, argv, &a, breakers_usage);
    if (parsed != TP_CLI_GO_ON)
        return parsed;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0, reset = strcmp(a.verb, "reset") == 0;
    if (!(list || show || reset) || (list && a.id) || (!list && !a.id) || a.decision)
        return tp_cli_misuse(breakers_usage);
    tp_store_t *s = open_store(&a, reset);
    if (s == NULL)
        return 2;
    if (reset) {
        reset_ctx_t ctx = {.s = s, .prefix = a.id};
        return run_write(s, &a, reset_apply, &ctx, "breaker", "reset", ctx.id);
    }
    int status = 0;
    MDB_txn *txn = read_txn(s, &a);
    if (txn == NULL) {
        tp_store_close(s);
        return 2;
    }
    char id[TP_RECORDS_ID_MAX];
    if (show) {
        MDB_val k, v;
        int rc = tp_records_breaker_find(s, txn, a.id, &k, &v);
        if (rc) {
            tp_log_error("cli.not_found", "%s: %s breaker %s", a.store, rc == TP_EEXIST ? "more than one" : "no", a.id);
            status = 2;
        } else if (a.json) {
            status = print_json(tp_records_breaker_json(&k, &v, true), &a);
        } else {
            tp_records_breaker_id(&k, id, sizeof id);
            if (sound(&a, TP_DB_BREAKERS, &k, &v))
                show_breaker(stdout, id, &v, true);
            else
                status = 2;
        }
    } else if (a.json) {
        json_t *all = NULL;
        int rc = tp_records_breakers_json(s, txn, &all);
        if (rc) {
            tp_log_error("store.read_failed", "%s: cannot read %s: %s", a.store, tp_store_db_name(TP_DB_BREAKERS),
                         tp_strerror(rc));
            status = 2;
        } else {
            status = print_json_lines(all, &a);
        }
    } else {
        status = list_breakers(s, txn, &a);
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}

/* ---- escalations ---- */

/* clang-format off */
static const char escalations_usage[] =
    "usage: toolpool escalations [list [--all] | show ID | resolve ID [--rerun | --accept] [--note TEXT]]\n"
    "                            [--store DIR] [--json]\n"
    "Calls handed to a person: an open same-call circuit, a fallback chain\n"
    "that ran out, or a call of a tool that is not idempotent interrupted by a\n"
    "crash. list shows the open ones (--all: resolved ones too). --json: JSON lines, a record each.\n"
    "resolve --rerun: the next run on the store does the call again (its\n"
    "recorded failure is forgotten, the same-call circuit it opened closed);\n"
    "--accept (the default): the call keeps its recorded failure.\n";
/* clang-format on */

static void show_escalation(FILE *out, const Toolpool__Escalation *e, bool full)
{
    if (!full) {
        fprintf(out, "%-8s %-8s ", e->id, e->resolved ? "resolved" : "open");
        put_time(out, e->created_unix_us);
        fprintf(out, "  %s(call %s, job %s): %s", e->tool, e->call_id, e->job, e->kind);
        if (e->owner[0])
            fprintf(out, ", owner %s", e->owner);
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
    if (e->owner[0])
        fprintf(out, "  owner: %s (the tool's \"owner\": who is paged)\n", e->owner);
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
                         (double)t->backoff_us / 1e3, t->start_us ? (double)t->start_us / 1e3 : -1);
    }
}

typedef struct {
    tp_store_t *s;
    const char *id;
    const char *note;
    bool rerun;
    bool forgot;
    char call_id[600];
} resolve_ctx_t;

static int resolve_apply(MDB_txn *txn, void *arg)
{
    resolve_ctx_t *c = arg;
    if (c->rerun)
        return tp_records_escalation_rerun(c->s, txn, c->id, c->note, c->call_id, sizeof c->call_id, &c->forgot);
    Toolpool__Escalation *e;
    int rc = tp_records_escalation_get(c->s, txn, c->id, &e);
    if (rc)
        return rc;
    snprintf(c->call_id, sizeof c->call_id, "%s", e->call_id);
    toolpool__escalation__free_unpacked(e, NULL);
    return tp_records_escalation_resolve(c->s, txn, c->id, c->note);
}

/* resolve: one write, then what it means for the call, said in words (or JSON). */
static int resolve_run(tp_store_t *s, const args_t *a)
{
    char err[1024];
    resolve_ctx_t ctx = {
        .s = s, .id = a->id, .note = a->note, .rerun = a->decision && strcmp(a->decision, "rerun") == 0};
    int rc = tp_store_write(s, resolve_apply, &ctx, err, sizeof err);
    tp_store_close(s);
    if (rc == MDB_NOTFOUND) {
        tp_log_error("cli.not_found", "%s: no escalation %s", a->store, a->id);
        return 2;
    }
    if (rc) {
        tp_log_error("store.read_failed", "%s", err);
        return 2;
    }
    if (a->json)
        return print_json(json_pack("{s:s, s:b, s:s, s:s, s:b}", "id", a->id, "resolved", 1, "call_id", ctx.call_id,
                                    "decision", ctx.rerun ? "rerun" : "accept", "forgot", ctx.forgot),
                          a);
    if (!ctx.rerun)
        printf("resolved %s: call %s keeps its recorded result (accepted); `resolve %s --rerun` would run it again\n",
               a->id, ctx.call_id, a->id);
    else if (ctx.forgot)
        printf("resolved %s: call %s is forgotten, and the next run on %s runs it again\n", a->id, ctx.call_id,
               a->store);
    else
        printf("resolved %s: call %s has no recorded failure to forget (it succeeded since, or never ended); "
               "its circuit is closed\n",
               a->id, ctx.call_id);
    return 0;
}

static int list_escalation(const MDB_val *k, const MDB_val *v, void *ctx)
{
    const args_t *a = ctx;
    Toolpool__Escalation *e = toolpool__escalation__unpack(NULL, v->mv_size, v->mv_data);
    if (e == NULL)
        return -1;
    bool listed = a->all || !e->resolved;
    if (listed)
        show_escalation(stdout, e, false);
    toolpool__escalation__free_unpacked(e, NULL);
    return listed;
}

int tp_cmd_escalations(int argc, char **argv)
{
    args_t a;
    int parsed = parse(argc, argv, &a, escalations_usage);
    if (parsed != TP_CLI_GO_ON)
        return parsed;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0,
         resolve = strcmp(a.verb, "resolve") == 0;
    if (!(list || show || resolve) || (list && a.id) || (!list && !a.id) || (a.decision && !resolve))
        return tp_cli_misuse(escalations_usage);
    tp_store_t *s = open_store(&a, resolve);
    if (s == NULL)
        return 2;
    if (resolve)
        return resolve_run(s, &a);
    int status = 0;
    MDB_txn *txn = read_txn(s, &a);
    if (txn == NULL) {
        tp_store_close(s);
        return 2;
    }
    if (show) {
        Toolpool__Escalation *e;
        int rc = tp_records_escalation_get(s, txn, a.id, &e);
        if (rc) {
            tp_log_error("cli.not_found", "%s: %s escalation %s", a.store, rc == TP_EPROTO ? "corrupt" : "no", a.id);
            status = 2;
        } else {
            if (a.json)
                status = print_json(tp_records_escalation_json(e, true), &a);
            else
                show_escalation(stdout, e, true);
            toolpool__escalation__free_unpacked(e, NULL);
        }
    } else if (a.json) {
        json_t *all = NULL;
        int rc = tp_records_escalations_json(s, txn, a.all, &all);
        if (rc) {
            tp_log_error("store.read_failed", "%s: cannot read %s: %s", a.store, tp_store_db_name(TP_DB_ESCALATIONS),
                         tp_strerror(rc));
            status = 2;
        } else {
            status = print_json_lines(all, &a);
        }
    } else {
        status = walk(s, txn, &a, TP_DB_ESCALATIONS, list_escalation, &a,
                      a.all ? "no escalations" : "no open escalations");
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}

/* ---- checkpoints ---- */

/* clang-format off */
static const char checkpoints_usage[] =
    "usage: toolpool checkpoints [list | show JOB] [--store DIR] [--json]\n"
    "Each job's checkpoint: the step it reached, the usage its guards count, and\n"
    "(show) its message list: every ended call in order, with what it returned,\n"
    "and the agent loop's own state when it saved one (serve's\n"
    "PUT /v1/jobs/JOB/checkpoint). --json: JSON lines, a record each.\n";
/* clang-format on */

static void put_secs_us(FILE *out, uint64_t us)
{
    fprintf(out, "%.3gs", (double)us / 1e6);
}

static void list_checkpoint(FILE *out, const Toolpool__Checkpoint *cp)
{
    fprintf(out, "%-24s step %-6llu %zu call%s ended, %llu attempt%s, cost %g, wall ", cp->job,
            (unsigned long long)cp->last_step, tp_steps_count(cp), tp_steps_count(cp) == 1 ? "" : "s",
            (unsigned long long)cp->attempts, cp->attempts == 1 ? "" : "s", cp->cost);
    put_secs_us(out, cp->wall_used_us);
    if (cp->stopped[0])
        fprintf(out, ", stopped: %s", cp->stopped);
    if (cp->has_state)
        fprintf(out, ", agent state at step %llu", (unsigned long long)cp->state_step);
    fputc('\n', out);
}

/* The agent loop's own checkpoint, when it saved one: its step, when, and its state (cut at 2000 bytes). */
static void show_agent_state(FILE *out, const Toolpool__Checkpoint *cp)
{
    if (!cp->has_state)
        return;
    fprintf(out, "  agent state: step %llu, saved ", (unsigned long long)cp->state_step);
    put_time(out, cp->state_unix_us);
    int n = cp->state.len > 2000 ? 2000 : (int)cp->state.len;
    fprintf(out, "\n    %.*s%s\n", n, (const char *)cp->state.data, cp->state.len > 2000 ? "..." : "");
}

/* One line of a job's message list: the call and what came back. */
static void show_step(FILE *out, tp_store_t *s, MDB_txn *txn, const char *id)
{
    Toolpool__StoredResult *sr;
    int rc = tp_result_get(s, txn, id, &sr);
    if (rc) {
        fprintf(out, "  %s: (no record: %s)\n", id, rc == MDB_NOTFOUND ? "missing" : "corrupt");
        return;
    }
    const Toolpool__Result *r = sr->result;
    ProtobufCBinaryData args = r->args.len ? r->args : (ProtobufCBinaryData){4, (uint8_t *)"null"};
    fprintf(out, "  step %llu  %s  %s(args=%.*s)\n    → ", (unsigned long long)r->step, id, r->tool,
            (int)(args.len > 200 ? 200 : args.len), (const char *)args.data);
    if (r->ok) {
        ProtobufCBinaryData res = r->result.len ? r->result : (ProtobufCBinaryData){4, (uint8_t *)"null"};
        fprintf(out, "%s%.*s%s\n", r->degraded ? "(degraded) " : "", (int)(res.len > 300 ? 300 : res.len),
                (const char *)res.data, res.len > 300 ? "..." : "");
    } else {
        fprintf(out, "%s: %s\n", r->kind, r->message);
    }
    tp_result_free(sr);
}

/*
 * show JOB --json: the checkpoint, with the recorded results of its calls
 * in order, each as its result line (tp_records_checkpoint_results_text),
 * put in after the checkpoint's own members: a tree could not hold every
 * tool's JSON.
 */
static int show_checkpoint_json(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp, const args_t *a)
{
    json_t *o = tp_records_checkpoint_json(s, txn, cp);
    tp_buf_t b = {0};
    int rc = o != NULL && tp_json_write(&b, o, 0) == 0 ? 0 : TP_ENOMEM;
    json_decref(o);
    /* the head without its closing brace, then the results */
    if (rc == 0) {
        b.len--;
        rc = tp_buf_puts(&b, b.len > 1 ? ",\"results\":" : "\"results\":") == 0
                 ? tp_records_checkpoint_results_text(s, txn, cp, &b)
                 : TP_ENOMEM;
    }
    if (rc == 0 && tp_buf_puts(&b, "}\n") < 0)
        rc = TP_ENOMEM;
    if (rc) {
        tp_log_error("store.read_failed", "%s: cannot read the results of job %s: %s", a->store, cp->job,
                     tp_strerror(rc));
        tp_buf_free(&b);
        return 2;
    }
    rc = fwrite(b.data, 1, b.len, stdout) == b.len ? 0 : 2;
    tp_buf_free(&b);
    return rc;
}

static int list_job(const MDB_val *k, const MDB_val *v, void *ctx)
{
    Toolpool__Checkpoint *cp = toolpool__checkpoint__unpack(NULL, v->mv_size, v->mv_data);
    if (cp == NULL)
        return -1;
    list_checkpoint(stdout, cp);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    return 1;
}

int tp_cmd_checkpoints(int argc, char **argv)
{
    args_t a;
    int parsed = parse(argc, argv, &a, checkpoints_usage);
    if (parsed != TP_CLI_GO_ON)
        return parsed;
    bool list = strcmp(a.verb, "list") == 0, show = strcmp(a.verb, "show") == 0;
    if (!(list || show) || (list && a.id) || (show && !a.id) || a.decision)
        return tp_cli_misuse(checkpoints_usage);
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
        int rc = tp_checkpoint_get(s, txn, a.id, &cp);
        if (rc) {
            tp_log_error("cli.not_found", "%s: %s checkpoint for job %s", a.store, rc == TP_EPROTO ? "corrupt" : "no",
                         a.id);
            status = 2;
        } else if (a.json) {
            status = show_checkpoint_json(s, txn, cp, &a);
            toolpool__checkpoint__free_unpacked(cp, NULL);
        } else {
            list_checkpoint(stdout, cp);
            if (cp->stopped[0])
                printf("  stopped: %s\n", cp->stop_message);
            show_agent_state(stdout, cp);
            char **ids;
            size_t n_ids;
            rc = tp_steps_list(s, txn, cp, &ids, &n_ids);
            if (rc) {
                tp_log_error("store.read_failed", "%s: cannot read the message list of job %s: %s", a.store, a.id,
                             rc == TP_EPROTO ? "a corrupt record" : tp_strerror(rc));
                status = 2;
            }
            for (size_t i = 0; rc == 0 && i < n_ids; i++)
                show_step(stdout, s, txn, ids[i]);
            free(ids);
            toolpool__checkpoint__free_unpacked(cp, NULL);
        }
    } else if (a.json) {
        json_t *all = NULL;
        int rc = tp_records_checkpoints_json(s, txn, &all);
        if (rc) {
            tp_log_error("store.read_failed", "%s: cannot read %s: %s", a.store, tp_store_db_name(TP_DB_JOBS),
                         tp_strerror(rc));
            status = 2;
        } else {
            status = print_json_lines(all, &a);
        }
    } else {
        status = walk(s, txn, &a, TP_DB_JOBS, list_job, NULL, "no checkpoints");
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return status;
}
