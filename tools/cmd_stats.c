/*
 * toolpool stats: what the store's recorded results say, per tool.
 *
 *   toolpool stats [--store DIR] [--tool T] [--since D] [--by tool|version] [--json]
 *
 * One read transaction over the results: each record says its tool,
 * outcome, attempts and trace. Per tool (the tool called): calls, ok,
 * failures by class and by kind (a tool's own kind under its own name),
 * attempts, retries, fallback hops, timeouts, latency (p50, p90, p99, max)
 * and queue wait (the time from a call's turn to its end that neither an
 * attempt nor a backoff took: waiting for a worker, or for a commit).
 * Latencies are exact (sorted, not bucketed): a store of a million results
 * costs 16 MB here. With --by version, per tool and the version of it each
 * record was made under.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "boards.h"
#include "checkpoint.h"
#include "cli.h"
#include "clock.h"
#include "log.h"
#include "owners.h"
#include "registry.h"
#include "store.h"
#include "taxonomy.h"

/* clang-format off */
static const char stats_usage[] =
    "usage: toolpool stats [--store DIR] [--tool T] [--since DURATION]\n"
    "                      [--by tool|version] [--json]\n"
    "Per tool, from the results recorded in the store: calls, ok, failures by\n"
    "class and by kind, attempts, retries (attempts after the first, in each hop\n"
    "of a fallback chain), fallback hops, timeouts, latency p50/p90/p99/max\n"
    "(a call's duration_ms) and queue wait (a call's time from its turn to its\n"
    "end spent neither in an attempt nor in a backoff). Then, but with --json,\n"
    "the store's size and records in two lines (`toolpool store info` says more).\n"
    "  -s, --store DIR     the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "      --tool T        only calls of tool T\n"
    "      --since D       only results recorded in the last D (\"1h\", \"30m\")\n"
    "      --by version    per tool and version of it (the registry's \"version\"\n"
    "                      each result was made under), not per tool alone\n"
    "      --json          one JSON object a line, one line per tool\n"
    "A supervisor working on the store now (run, serve, mcp) is listed first:\n"
    "calls answered, running and waiting, calls/s, and for a run its expected\n"
    "total and the time left (with --json, a line {\"supervisor\": {...}} each),\n"
    "and the calls it is running now from its scoreboard (\"in_flight\", and\n"
    "\"in_flight_calls\" with each one's id, tool, job, attempt, age and whether\n"
    "it is past its timeout); a tool's line says its attempts in flight now.\n";
/* clang-format on */

typedef struct {
    double *v;
    size_t n, cap;
} series_t;

typedef struct {
    char *tool;
    char *version; /* --by version: the version its records were made under ("": none); else NULL */
    uint64_t calls, ok, attempts, retries, hops, timeouts;
    uint64_t in_flight;         /* attempts of it running now on the store's live supervisors */
    json_t *by_class, *by_kind; /* name -> count */
    series_t latency, wait;
} tool_stats_t;

typedef struct {
    tool_stats_t *v;
    size_t n, cap;
} table_t;

static int series_add(series_t *s, double x)
{
    if (tp_array_fit(&s->v, &s->cap, s->n + 1, sizeof *s->v, 64) < 0)
        return -1;
    s->v[s->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of a sorted series (nearest rank), 0 when empty. */
static double quantile(const series_t *s, double q)
{
    if (s->n == 0)
        return 0;
    size_t rank = (size_t)(q * (double)(s->n - 1) + 0.5);
    return s->v[rank < s->n ? rank : s->n - 1];
}

/* The row of tool (and version, when not NULL: --by version), made when it is the first. */
static tool_stats_t *table_get(table_t *t, const char *tool, const char *version)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].tool, tool) == 0 && (version == NULL || strcmp(t->v[i].version, version) == 0))
            return &t->v[i];
    if (tp_array_fit(&t->v, &t->cap, t->n + 1, sizeof *t->v, 16) < 0)
        return NULL;
    tool_stats_t *s = &t->v[t->n];
    memset(s, 0, sizeof *s);
    if ((s->tool = strdup(tool)) == NULL || (version && (s->version = strdup(version)) == NULL) ||
        (s->by_class = json_object()) == NULL || (s->by_kind = json_object()) == NULL) {
        free(s->tool);
        free(s->version);
        json_decref(s->by_class);
        return NULL;
    }
    t->n++;
    return s;
}

static void count(json_t *o, const char *name)
{
    json_int_t n = json_integer_value(json_object_get(o, name));
    json_object_set_new(o, name, json_integer(n + 1));
}

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

/* Adds one recorded result r; -1 when out of memory. */
static int add_result(table_t *t, const Toolpool__Result *r, bool by_version)
{
    tool_stats_t *s = table_get(t, r->tool[0] ? r->tool : "(none)", by_version ? r->version : NULL);
    if (s == NULL)
        return -1;
    s->calls++;
    if (r->ok) {
        s->ok++;
    } else {
        count(s->by_kind, r->kind[0] ? r->kind : "?");
        count(s->by_class, r->klass[0] ? r->klass : tp_class_name(tp_kind_class(tp_kind_from_name(r->kind))));
    }
    const char *hop = r->tool;
    uint32_t in_hop = 0;
    double run = 0, backoff = 0, end = 0;
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *e = r->trace[i];
        double d = ms(e->duration_us);
        bool ran = !(strcmp(e->outcome, "CircuitOpen") == 0 && d == 0);
        if (strcmp(e->tool, hop) != 0) {
            s->hops++;
            hop = e->tool;
            in_hop = 0;
        }
        if (ran) {
            s->attempts++;
            if (in_hop++ > 0)
                s->retries++;
        }
        if (strcmp(e->outcome, "Timeout") == 0)
            s->timeouts++;
        if (ms(e->start_us) + d > end)
            end = ms(e->start_us) + d;
        run += d;
        if (i + 1 < r->n_trace)
            backoff += ms(e->backoff_us);
    }
    if (series_add(&s->latency, ms(r->duration_us)) < 0)
        return -1;
    if (r->n_trace > 0 && series_add(&s->wait, end - run - backoff > 0 ? end - run - backoff : 0) < 0)
        return -1;
    return 0;
}

static json_t *tool_json(tool_stats_t *s)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:O, s:O, s:I, s:I, s:I, s:I}", "tool", s->tool, "calls",
                          (json_int_t)s->calls, "ok", (json_int_t)s->ok, "failed", (json_int_t)(s->calls - s->ok),
                          "by_class", s->by_class, "by_kind", s->by_kind, "attempts", (json_int_t)s->attempts,
                          "retries", (json_int_t)s->retries, "fallback_hops", (json_int_t)s->hops, "timeouts",
                          (json_int_t)s->timeouts);
    if (o && json_object_set_new(o, "in_flight", json_integer((json_int_t)s->in_flight))) {
        json_decref(o);
        o = NULL;
    }
    json_t *lat = json_pack("{s:f, s:f, s:f, s:f}", "p50", quantile(&s->latency, 0.5), "p90",
                            quantile(&s->latency, 0.9), "p99", quantile(&s->latency, 0.99), "max",
                            s->latency.n ? s->latency.v[s->latency.n - 1] : 0.0);
    double total = 0;
    for (size_t i = 0; i < s->wait.n; i++)
        total += s->wait.v[i];
    json_t *wait = json_pack("{s:I, s:f, s:f, s:f, s:f}", "calls", (json_int_t)s->wait.n, "p50",
                             quantile(&s->wait, 0.5), "p99", quantile(&s->wait, 0.99), "max",
                             s->wait.n ? s->wait.v[s->wait.n - 1] : 0.0, "total", total);
    if (o && s->version && json_object_set_new(o, "version", s->version[0] ? json_string(s->version) : json_null())) {
        json_decref(o);
        o = NULL;
    }
    if (o == NULL || lat == NULL || wait == NULL || json_object_set_new(o, "latency_ms", lat) != 0 ||
        json_object_set_new(o, "queue_wait_ms", wait) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void put_ms(double ms)
{
    if (ms >= 1000)
        printf("%.2fs", ms / 1000);
    else
        printf("%.3gms", ms);
}

static void print_counts(const char *label, json_t *o)
{
    if (json_object_size(o) == 0)
        return;
    printf("  %s:", label);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
        printf(" %s %lld", k, (long long)json_integer_value(v));
    putchar('\n');
}

static void tool_print(tool_stats_t *s)
{
    if (s->version)
        printf("%s, %s%s: ", s->tool, s->version[0] ? "version " : "no version", s->version);
    else
        printf("%s: ", s->tool);
    printf("%llu calls, %llu ok, %llu failed; %llu attempts, %llu retries, %llu fallback hops, %llu timeouts\n",
           (unsigned long long)s->calls, (unsigned long long)s->ok, (unsigned long long)(s->calls - s->ok),
           (unsigned long long)s->attempts, (unsigned long long)s->retries, (unsigned long long)s->hops,
           (unsigned long long)s->timeouts);
    if (s->in_flight)
        printf("  in flight now: %llu attempts running\n", (unsigned long long)s->in_flight);
    print_counts("failures by class", s->by_class);
    print_counts("failures by kind", s->by_kind);
    printf("  latency: p50 ");
    put_ms(quantile(&s->latency, 0.5));
    printf(", p90 ");
    put_ms(quantile(&s->latency, 0.9));
    printf(", p99 ");
    put_ms(quantile(&s->latency, 0.99));
    printf(", max ");
    put_ms(s->latency.n ? s->latency.v[s->latency.n - 1] : 0);
    putchar('\n');
    if (s->wait.n) {
        printf("  queue wait: p50 ");
        put_ms(quantile(&s->wait, 0.5));
        printf(", p99 ");
        put_ms(quantile(&s->wait, 0.99));
        printf(", max ");
        put_ms(s->wait.v[s->wait.n - 1]);
        printf(" (%zu calls with start times)\n", s->wait.n);
    }
}

static int by_name(const void *a, const void *b)
{
    const tool_stats_t *x = a, *y = b;
    int c = strcmp(x->tool, y->tool);
    return c ? c : strcmp(x->version ? x->version : "", y->version ? y->version : "");
}

/* --since D: into the uint64_t *o->to, in microseconds, more than 0. */
/* What stats takes of the store's results: one tool's, or those since a time. */
typedef struct {
    table_t *t;
    const char *only;
    bool by_version;
    uint64_t since_us, after, undated;
} pick_t;

static int pick_cb(void *ctx, const Toolpool__StoredResult *sr)
{
    pick_t *pk = ctx;
    if (pk->since_us && sr->ended_unix_us == 0)
        pk->undated++;
    if ((pk->since_us && sr->ended_unix_us < pk->after) || (pk->only && strcmp(sr->result->tool, pk->only) != 0))
        return 0;
    return add_result(pk->t, sr->result, pk->by_version);
}

/* "1m20s", "38s", "2h05m": a duration for people, whole seconds. */
static void put_left(double s)
{
    uint64_t t = (uint64_t)(s + 0.5);
    if (t >= 3600)
        printf("%lluh%02llum", (unsigned long long)(t / 3600), (unsigned long long)(t % 3600 / 60));
    else if (t >= 60)
        printf("%llum%02llus", (unsigned long long)(t / 60), (unsigned long long)(t % 60));
    else
        printf("%llus", (unsigned long long)t);
}

/* The calls a live supervisor runs now, from its scoreboard (l NULL: it has none): as JSON, or a line. */
#define TP_STATS_CALLS_SHOWN 8

static json_t *in_flight_json(const tp_live_t *l)
{
    json_t *a = json_array();
    uint64_t now = tp_now_us();
    for (uint32_t i = 0; a && l && l->board && i < l->snap.n_busy; i++) {
        const tp_sb_slot_t *c = &l->snap.slots[i];
        uint64_t age = c->started_us && now > c->started_us ? now - c->started_us : 0; /* 0: queued, not started */
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:i, s:f, s:b}", "id", c->call_id, "tool",
                                           l->snap.tools[c->tool].name, "job", c->job, "attempt", (int)c->attempt,
                                           "age_s", (double)age / 1e6, "stuck", c->timeout_us && age > c->timeout_us));
    }
    return a;
}

static void in_flight_print(const tp_live_t *l)
{
    if (l == NULL || !l->board || l->snap.n_busy == 0)
        return;
    uint64_t now = tp_now_us();
    printf("  in flight:");
    for (uint32_t i = 0; i < l->snap.n_busy && i < TP_STATS_CALLS_SHOWN; i++) {
        const tp_sb_slot_t *c = &l->snap.slots[i];
        uint64_t age = c->started_us && now > c->started_us ? now - c->started_us : 0; /* 0: queued, not started */
        char id[TP_SB_NAME];
        memcpy(id, c->call_id, sizeof id);
        tp_cli_scrub(id, strlen(id));
        printf("%s %s (%s, attempt %u, %.1fs%s)", i ? "," : "", id, l->snap.tools[c->tool].name, c->attempt,
               (double)age / 1e6, c->timeout_us && age > c->timeout_us ? ", stuck" : "");
    }
    if (l->snap.n_busy > TP_STATS_CALLS_SHOWN)
        printf(" and %u more", l->snap.n_busy - TP_STATS_CALLS_SHOWN);
    putchar('\n');
}

/* Attempts of tool running now on the store's live supervisors (their scoreboards). */
static uint64_t in_flight_of(const tp_lives_t *lives, const char *tool)
{
    uint64_t n = 0;
    for (size_t i = 0; lives && i < lives->n; i++)
        for (uint32_t k = 0; lives->v[i].board && k < lives->v[i].snap.n_tools; k++)
            if (strcmp(lives->v[i].snap.tools[k].name, tool) == 0)
                n += atomic_load_explicit(&lives->v[i].snap.tools[k].in_flight, memory_order_relaxed);
    return n;
}

/* One live owner's entry: what it said of itself at its last write (fields 7 to 12), and its scoreboard's calls. */
static int live_one(const Toolpool__Owner *w, const tp_live_t *l, bool json)
{
    uint64_t now = tp_unix_us();
    double span = w->status_unix_us > w->joined_unix_us ? (double)(w->status_unix_us - w->joined_unix_us) / 1e6 : 0;
    double rate = span > 0 ? (double)w->done / span : 0;
    bool eta = w->total > w->done && rate > 0;
    double left = eta ? (double)(w->total - w->done) / rate : 0;
    const char *cmd = w->command && w->command[0] ? w->command : "supervisor";
    if (json) {
        json_t *o = json_pack("{s:{s:i, s:s, s:I, s:I, s:I, s:I, s:f, s:I}}", "supervisor", "pid", (int)w->pid,
                              "command", cmd, "since_unix_ms", (json_int_t)(w->joined_unix_us / 1000), "done",
                              (json_int_t)w->done, "running", (json_int_t)w->running, "waiting", (json_int_t)w->waiting,
                              "calls_per_s", rate, "as_of_unix_ms", (json_int_t)(w->status_unix_us / 1000));
        json_t *in = json_object_get(o, "supervisor");
        if (o == NULL ||
            json_object_set_new(in, "in_flight",
                                json_integer((json_int_t)(l && l->board ? l->snap.n_busy : w->running))) ||
            json_object_set_new(in, "in_flight_calls", in_flight_json(l)) ||
            json_object_set_new(in, "total", w->total ? json_integer((json_int_t)w->total) : json_null()) ||
            json_object_set_new(in, "eta_s", eta ? json_real(left) : json_null())) {
            json_decref(o);
            return -1;
        }
        int rc = json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(10)) != 0 || putchar('\n') == EOF ? -1 : 0;
        json_decref(o);
        return rc;
    }
    printf("live: %s (pid %d): %llu calls answered", cmd, (int)w->pid, (unsigned long long)w->done);
    if (w->total)
        printf(" of about %llu (%.1f%%)", (unsigned long long)w->total,
               100.0 * (double)w->done / (double)(w->total > w->done ? w->total : w->done));
    printf(", %llu running, %llu waiting; %.0f calls/s", (unsigned long long)w->running, (unsigned long long)w->waiting,
           rate);
    if (eta) {
        printf(", about ");
        put_left(left);
        printf(" left");
    }
    if (w->status_unix_us == 0)
        printf(" (it has said nothing yet)\n");
    else
        printf(" (as of %.1fs ago)\n", now > w->status_unix_us ? (double)(now - w->status_unix_us) / 1e6 : 0.0);
    in_flight_print(l);
    return 0;
}

/*
 * The supervisors working on the store now, from its owners' record (each
 * checked alive, as the supervisors check each other). -1: it cannot be
 * read or written out.
 */
static int live_supervisors(const char *dir, bool json, tp_lives_t *lives)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return -1;
    Toolpool__Owners *o = NULL;
    tp_owner_id_t me;
    int rc = 0;
    if (tp_cli_lives(s, txn, lives) != 0)
        memset(lives, 0, sizeof *lives); /* what the owners' entries say, without the calls in flight */
    if (tp_owners_read(s, txn, &o) == 0 && o && tp_owner_self(&me) == 0)
        for (size_t i = 0; i < o->n_owners && rc == 0; i++)
            if (tp_owner_alive(&me, o->owners[i]->pid, o->owners[i]->start, o->owners[i]->boot)) {
                const tp_live_t *l = NULL;
                for (size_t k = 0; k < lives->n; k++)
                    if (lives->v[k].pid == o->owners[i]->pid)
                        l = &lives->v[k];
                rc = live_one(o->owners[i], l, json);
            }
    toolpool__owners__free_unpacked(o, NULL);
    mdb_txn_abort(txn);
    tp_store_close(s);
    return rc;
}

int tp_cmd_stats(int argc, char **argv)
{
    const char *dir = tp_store_default_dir(), *only = NULL, *by = "tool";
    uint64_t since_us = 0;
    bool json = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {"tool", 0, true, &only, NULL},
        {"since", 0, true, &since_us, tp_cli_take_since},
        {"by", 0, true, &by, NULL},
        {"json", 0, false, &json, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, stats_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(stats_usage);
    if (strcmp(by, "tool") != 0 && strcmp(by, "version") != 0) {
        tp_log_error("cli.bad_option", "--by: expected tool or version, got \"%s\"", by);
        return 2;
    }
    table_t t = {0};
    pick_t pk = {.t = &t,
                 .only = only,
                 .by_version = strcmp(by, "version") == 0,
                 .since_us = since_us,
                 .after = since_us ? tp_unix_us() - since_us : 0};
    int status = tp_cli_each_result(dir, pick_cb, &pk);
    uint64_t undated = pk.undated;
    tp_lives_t lives = {0};
    if (status != 2 && live_supervisors(dir, json, &lives) < 0)
        status = 2;
    if (t.n)
        qsort(t.v, t.n, sizeof *t.v, by_name);
    for (size_t i = 0; i < t.n; i++) {
        if (t.v[i].latency.n)
            qsort(t.v[i].latency.v, t.v[i].latency.n, sizeof(double), cmp_double);
        if (t.v[i].wait.n)
            qsort(t.v[i].wait.v, t.v[i].wait.n, sizeof(double), cmp_double);
        t.v[i].in_flight = in_flight_of(&lives, t.v[i].tool);
        if (json) {
            json_t *o = tool_json(&t.v[i]);
            if (o == NULL || json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(10)) != 0 || putchar('\n') == EOF)
                status = 2;
            json_decref(o);
        } else {
            tool_print(&t.v[i]);
        }
    }
    if (!json && t.n == 0)
        printf("no recorded results%s%s%s\n", only ? " of " : "", only ? only : "", since_us ? " in that time" : "");
    if (!json && status == 0)
        status = tp_cli_store_summary(dir, stdout);
    if (undated)
        tp_log_warn("stats.untimed_results",
                    "%llu results recorded by an older toolpool carry no time and are left out by --since",
                    (unsigned long long)undated);
    for (size_t i = 0; i < t.n; i++) {
        free(t.v[i].tool);
        free(t.v[i].version);
        json_decref(t.v[i].by_class);
        json_decref(t.v[i].by_kind);
        free(t.v[i].latency.v);
        free(t.v[i].wait.v);
    }
    free(t.v);
    tp_cli_lives_free(&lives);
    return status;
}
