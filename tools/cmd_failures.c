/*
 * toolpool failures: the morning after a run, its failed calls grouped.
 *
 *   toolpool failures [--store DIR | RESULTS.jsonl] [--tool T] [--since D] [--examples N] [--json]
 *
 * A group is the calls of one tool (and version of it, when it has one)
 * that failed with one kind and one message, numbers aside ("no record 17" and "no record 42" are one
 * group: an id or a count in a message would split every call into a
 * group of its own). The groups come the largest first, each with its
 * count, when it was first and last seen (the store's record times; a
 * results file's line numbers) and the ids of its first calls, to give to
 * `toolpool trace`.
 *
 * One pass over the results, the store's in one read transaction or the
 * file's lines; the groups are kept in a jansson object by key.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "cli.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "results.h"
#include "store.h"
#include "taxonomy.h"

/* clang-format off */
static const char failures_usage[] =
    "usage: toolpool failures [--store DIR | RESULTS.jsonl] [--tool T] [--since DURATION]\n"
    "                         [--examples N] [--json]\n"
    "Failed calls grouped by tool (and the version of it they ran under, when it\n"
    "has one), kind and message (numbers in a message aside:\n"
    "\"no record 17\" and \"no record 42\" are one group), the largest group first:\n"
    "how many, when first and last seen (the store's record times, or a results\n"
    "file's line numbers) and the ids of its first calls (for `toolpool trace`).\n"
    "  -s, --store DIR     the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "  RESULTS.jsonl       a results file instead (`-`: standard input)\n"
    "      --tool T        only calls of tool T\n"
    "      --since D       only results recorded in the last D (\"1h\"; the store only)\n"
    "      --examples N    ids shown per group (default 3)\n"
    "      --json          one JSON object a line, a group each\n";
/* clang-format on */

typedef struct {
    char *tool, *kind, *klass, *message; /* message: the group's first, as written */
    char *version;                       /* the tool's version its calls ran under; "": none */
    uint64_t count, first, last;         /* first, last: unix us (store) or line numbers (file) */
    char **ids;                          /* the earliest calls' (by when) */
    uint64_t *ids_at;
    size_t n_ids;
} group_t;

typedef struct {
    json_t *index; /* key -> integer index into v */
    group_t *v;
    size_t n, cap;
    size_t examples;
} groups_t;

/* The message with every run of digits taken as one "#". */
static int shape_of(tp_buf_t *b, const char *message)
{
    for (const char *p = message; *p;) {
        if (*p >= '0' && *p <= '9') {
            while (*p >= '0' && *p <= '9')
                p++;
            if (tp_buf_append(b, "#", 1) < 0)
                return -1;
        } else if (tp_buf_append(b, p++, 1) < 0) {
            return -1;
        }
    }
    return 0;
}

static void group_free(group_t *x)
{
    for (size_t k = 0; k < x->n_ids; k++)
        free(x->ids[k]);
    free(x->ids);
    free(x->ids_at);
    free(x->tool);
    free(x->version);
    free(x->kind);
    free(x->klass);
    free(x->message);
}

/* Counts one failed call into its group; -1 when out of memory. */
static int group_add(groups_t *g, const char *id, const char *tool, const char *version, const char *kind,
                     const char *klass, const char *message, uint64_t when)
{
    tp_buf_t key = {0};
    if (tp_buf_puts(&key, tool) < 0 || tp_buf_append(&key, "\x1f", 1) < 0 || tp_buf_puts(&key, version) < 0 ||
        tp_buf_append(&key, "\x1f", 1) < 0 || tp_buf_puts(&key, kind) < 0 || tp_buf_append(&key, "\x1f", 1) < 0 ||
        shape_of(&key, message) < 0 || tp_buf_append(&key, "", 1) < 0) {
        tp_buf_free(&key);
        return -1;
    }
    json_t *at = json_object_get(g->index, (const char *)key.data);
    group_t *x;
    if (at) {
        x = &g->v[json_integer_value(at)];
    } else {
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 64;
            group_t *v = realloc(g->v, cap * sizeof *v);
            if (v == NULL) {
                tp_buf_free(&key);
                return -1;
            }
            g->v = v;
            g->cap = cap;
        }
        x = &g->v[g->n];
        *x = (group_t){.tool = strdup(tool),
                       .version = strdup(version),
                       .kind = strdup(kind),
                       .klass = strdup(klass),
                       .message = strdup(message),
                       .first = when,
                       .last = when,
                       .ids = calloc(g->examples ? g->examples : 1, sizeof *x->ids),
                       .ids_at = calloc(g->examples ? g->examples : 1, sizeof *x->ids_at)};
        if (x->tool == NULL || x->version == NULL || x->kind == NULL || x->klass == NULL || x->message == NULL ||
            x->ids == NULL || x->ids_at == NULL ||
            json_object_set_new(g->index, (const char *)key.data, json_integer((json_int_t)g->n)) != 0) {
            group_free(x);
            tp_buf_free(&key);
            return -1;
        }
        g->n++;
    }
    tp_buf_free(&key);
    x->count++;
    if (when < x->first)
        x->first = when;
    if (when > x->last)
        x->last = when;
    /* Kept in time order: a store's results come in id order, not in the order they ended. */
    size_t pos = x->n_ids;
    while (pos > 0 && x->ids_at[pos - 1] > when)
        pos--;
    if (pos >= g->examples)
        return 0;
    char *copy = strdup(id);
    if (copy == NULL)
        return -1;
    if (x->n_ids == g->examples)
        free(x->ids[--x->n_ids]);
    memmove(x->ids + pos + 1, x->ids + pos, (x->n_ids - pos) * sizeof *x->ids);
    memmove(x->ids_at + pos + 1, x->ids_at + pos, (x->n_ids - pos) * sizeof *x->ids_at);
    x->ids[pos] = copy;
    x->ids_at[pos] = when;
    x->n_ids++;
    return 0;
}

/* What failures takes of the store's results: the failed ones, of one tool, since a time. */
typedef struct {
    groups_t *g;
    const char *only;
    uint64_t after;
} pick_t;

static int pick_cb(void *ctx, const Toolpool__StoredResult *sr)
{
    pick_t *pk = ctx;
    const Toolpool__Result *r = sr->result;
    if (r->ok || sr->ended_unix_us < pk->after || (pk->only && strcmp(r->tool, pk->only) != 0))
        return 0;
    const char *klass = r->klass[0] ? r->klass : tp_class_name(tp_kind_class(tp_kind_from_name(r->kind)));
    return group_add(pk->g, r->id, r->tool, r->version, r->kind, klass, r->message, sr->ended_unix_us);
}

/* A results file's failed lines; 0, or 2 (said: a line that is not a result names the file and line). */
static int from_file(groups_t *g, const char *path, const char *only)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (f == NULL) {
        tp_log_error("cli.open_failed", "%s: %s", path, strerror(errno));
        return 2;
    }
    const char *name = f == stdin ? "standard input" : path;
    char *line = NULL;
    size_t cap = 0;
    uint64_t n = 0;
    int status = 0;
    while (status == 0 && getline(&line, &cap, f) >= 0) {
        n++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        json_error_t jerr;
        json_t *r = tp_json_loadb(line, strlen(line), JSON_DECODE_INT_AS_REAL,
                                  &jerr); /* big ints in args: only strings are read */
        const char *id = json_string_value(json_object_get(r, "id"));
        const char *tool = json_string_value(json_object_get(r, "tool"));
        json_t *ok = json_object_get(r, "ok");
        if (!json_is_object(r) || id == NULL || tool == NULL || !json_is_boolean(ok)) {
            tp_log_error("cli.bad_input",
                         "%s:%llu: not a result line (a JSON object with a string \"id\" and \"tool\" and a "
                         "boolean \"ok\", as run writes)",
                         name, (unsigned long long)n);
            status = 2;
        } else if (!json_is_true(ok) && (!only || strcmp(tool, only) == 0)) {
            const char *kind = json_string_value(json_object_get(r, "error"));
            const char *klass = json_string_value(json_object_get(r, "class"));
            const char *message = json_string_value(json_object_get(r, "message"));
            const char *version = json_string_value(json_object_get(r, "version"));
            kind = kind ? kind : "?";
            if (group_add(g, id, tool, version ? version : "", kind,
                          klass ? klass : tp_class_name(tp_kind_class(tp_kind_from_name(kind))), message ? message : "",
                          n) < 0) {
                tp_log_error("cli.out_of_memory", "out of memory");
                status = 2;
            }
        }
        json_decref(r);
    }
    if (status == 0 && ferror(f)) {
        tp_log_error("cli.read_failed", "%s: %s", name, strerror(errno));
        status = 2;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    return status;
}

static int by_count(const void *a, const void *b)
{
    const group_t *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    int c = strcmp(x->tool, y->tool);
    c = c ? c : strcmp(x->version, y->version);
    return c ? c : strcmp(x->kind, y->kind);
}

static json_t *group_json(const group_t *x, bool lines)
{
    json_t *ids = json_array();
    for (size_t i = 0; ids && i < x->n_ids; i++)
        json_array_append_new(ids, json_string(x->ids[i]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:o}", "tool", x->tool, "error", x->kind, "class", x->klass,
                          "message", x->message, "count", (json_int_t)x->count, "ids", ids ? ids : json_array());
    if (o == NULL)
        return NULL;
    if (x->version[0])
        json_object_set_new(o, "version", json_string(x->version));
    if (lines) {
        json_object_set_new(o, "first_line", json_integer((json_int_t)x->first));
        json_object_set_new(o, "last_line", json_integer((json_int_t)x->last));
    } else if (x->first) {
        json_object_set_new(o, "first_unix_ms", json_integer((json_int_t)(x->first / 1000u)));
        json_object_set_new(o, "last_unix_ms", json_integer((json_int_t)(x->last / 1000u)));
    }
    return o;
}

static void group_print(const group_t *x, bool lines)
{
    char a[32], b[32];
    printf("%8llu  %s%s%s%s %s (%s), ", (unsigned long long)x->count, x->tool, x->version[0] ? " (version " : "",
           x->version, x->version[0] ? ")" : "", x->kind, x->klass);
    if (lines)
        printf("lines %llu to %llu\n", (unsigned long long)x->first, (unsigned long long)x->last);
    else
        printf("first %s, last %s\n", tp_cli_when(x->first, a, sizeof a), tp_cli_when(x->last, b, sizeof b));
    printf("          %s\n", x->message);
    if (x->n_ids) {
        printf("          e.g.");
        for (size_t i = 0; i < x->n_ids; i++)
            printf(" %s", x->ids[i]);
        printf("\n");
    }
}

static int take_examples(const tp_cli_opt_t *o, const char *arg)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(arg, &end, 10);
    if (errno || end == arg || *end || n > 1000 || arg[0] == '-') {
        tp_log_error("cli.bad_option", "--examples: expected a number from 0 to 1000, got \"%s\"", arg);
        return 2;
    }
    *(size_t *)o->to = n;
    return 0;
}

int tp_cmd_failures(int argc, char **argv)
{
    const char *dir = NULL, *only = NULL;
    uint64_t since_us = 0;
    bool json = false;
    groups_t g = {.examples = 3};
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {"tool", 0, true, &only, NULL},
        {"since", 0, true, &since_us, tp_cli_take_since},
        {"examples", 0, true, &g.examples, take_examples},
        {"json", 0, false, &json, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, failures_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    const char *file = optind < argc ? argv[optind] : NULL;
    if (argc - optind > 1 || (file && dir)) {
        tp_log_error("cli.usage", "failures reads one store or one results file");
        return tp_cli_misuse(failures_usage);
    }
    if (file && since_us) {
        tp_log_error("cli.usage", "--since reads the store's record times: a results file has none");
        return 2;
    }
    if ((g.index = json_object()) == NULL) {
        tp_log_error("cli.out_of_memory", "out of memory");
        return 2;
    }
    pick_t pk = {.g = &g, .only = only, .after = since_us ? tp_unix_us() - since_us : 0};
    int status = file ? from_file(&g, file, only)
                      : tp_cli_each_result(dir ? dir : tp_store_default_dir(), pick_cb, &pk);
    if (g.n)
        qsort(g.v, g.n, sizeof *g.v, by_count);
    uint64_t total = 0;
    for (size_t i = 0; i < g.n; i++)
        total += g.v[i].count;
    if (status == 0 && !json && total == 0)
        printf("no failed calls\n");
    else if (status == 0 && !json)
        printf("%llu failed call%s in %zu group%s\n", (unsigned long long)total, total == 1 ? "" : "s", g.n,
               g.n == 1 ? "" : "s");
    for (size_t i = 0; status == 0 && i < g.n; i++) {
        if (json) {
            json_t *o = group_json(&g.v[i], file != NULL);
            if (o == NULL || tp_cli_put_json(stdout, o) != 0)
                status = 2;
            json_decref(o);
        } else {
            group_print(&g.v[i], file != NULL);
        }
    }
    for (size_t i = 0; i < g.n; i++)
        group_free(&g.v[i]);
    free(g.v);
    json_decref(g.index);
    return status;
}
