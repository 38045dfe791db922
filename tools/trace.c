/*
 * toolpool trace: a results file as the seed prints a call's story.
 *
 *   search_kb(args={"q": "refund window"})
 *     attempt 1 → Timeout after 0.8s   (backoff 0.5s)
 *     attempt 2 → Timeout after 0.8s   (backoff 1.0s)
 *     attempt 3 → Timeout after 0.8s
 *     → tool message: {"error": "Timeout", "retryable": true, "attempts": 3}
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "buf.h"
#include "checkpoint.h"
#include "cli.h"
#include "result.h"
#include "log.h"

/* Seconds as the seed writes them: "8.0s", "0.5s"; short ones keep 3 places. */
static void put_secs(FILE *out, double ms)
{
    double s = ms / 1000.0;
    if (s >= 0.1 || s == 0) {
        fprintf(out, "%.1fs", s);
        return;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%.3f", s);
    size_t n = strlen(buf);
    while (n > 3 && buf[n - 1] == '0')
        buf[--n] = 0;
    fprintf(out, "%ss", buf);
}

static void put_json(FILE *out, json_t *v, size_t max)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    if (s == NULL)
        return;
    if (strlen(s) > max)
        fprintf(out, "%.*s...", (int)max, s);
    else
        fputs(s, out);
    free(s);
}

/*
 * A hop of a fallback chain other than the tool called is shown by name;
 * a hop skipped because its circuit was open shows no duration.
 */
void tp_trace_attempt(FILE *out, const char *called, uint32_t number, const char *tool, const char *outcome,
                      double duration_ms, double backoff_ms)
{
    bool other = tool && called && strcmp(tool, called) != 0;
    outcome = outcome ? outcome : "?";
    if (strcmp(outcome, "CircuitOpen") == 0 && duration_ms == 0) {
        fprintf(out, "  %s%s → CircuitOpen, not run\n", other ? "fallback " : "", tool ? tool : "?");
        return;
    }
    if (other)
        fprintf(out, "  fallback %s attempt %u → %s after ", tool, number, outcome);
    else
        fprintf(out, "  attempt %u → %s after ", number, outcome);
    put_secs(out, duration_ms);
    if (backoff_ms > 0) {
        fputs("   (backoff ", out);
        put_secs(out, backoff_ms);
        fputs(")", out);
    }
    fputc('\n', out);
}

static void print_one(json_t *r, FILE *out)
{
    const char *tool = json_string_value(json_object_get(r, "tool"));
    json_t *args = json_object_get(r, "args");
    if (tool) {
        fprintf(out, "%s(args=", tool);
        if (args)
            put_json(out, args, 400);
        else
            fputs("{}", out);
        fputs(")\n", out);
    } else {
        fputs("(rejected input)\n", out);
    }
    size_t i;
    json_t *t, *trace = json_object_get(r, "trace");
    json_array_foreach(trace, i, t) {
        tp_trace_attempt(out, tool, (uint32_t)json_integer_value(json_object_get(t, "attempt")),
                         json_string_value(json_object_get(t, "tool")),
                         json_string_value(json_object_get(t, "outcome")),
                         json_number_value(json_object_get(t, "duration_ms")),
                         json_number_value(json_object_get(t, "backoff_ms")));
    }
    if (json_is_true(json_object_get(r, "ok"))) {
        const char *by = json_string_value(json_object_get(r, "served_by"));
        if (json_is_true(json_object_get(r, "degraded")))
            fprintf(out, "  → %s%s: ", by ? "answered by fallback " : "degraded answer", by ? by : "");
        else
            fputs("  → result: ", out);
        if (json_is_true(json_object_get(r, "stale")))
            fputs("(stale) ", out);
        put_json(out, json_object_get(r, "result"), 200);
        fputc('\n', out);
        return;
    }
    const char *kind = json_string_value(json_object_get(r, "error"));
    const char *msg = json_string_value(json_object_get(r, "message"));
    fprintf(out, "  → tool message: {\"error\": \"%s\", \"retryable\": %s, \"attempts\": %lld}\n",
            kind ? kind : "?", json_is_true(json_object_get(r, "retryable")) ? "true" : "false",
            (long long)json_integer_value(json_object_get(r, "attempts")));
    if (msg && *msg)
        fprintf(out, "    %s\n", msg);
    const char *esc = json_string_value(json_object_get(r, "escalation"));
    if (esc)
        fprintf(out, "    escalated to a person: %s (toolpool escalations show %s)\n", esc, esc);
}

int tp_trace_print(FILE *in, const char *name, FILE *out)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long no = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        no++;
        json_error_t err;
        json_t *r = json_loadb(line, (size_t)n, 0, &err);
        if (r == NULL || !json_is_object(r)) {
            if (n > 1)
                tp_log_error("%s:%ld: not a result record: %s", name, no, r ? "not an object" : err.text);
            if (n > 1)
                rc = 2;
            json_decref(r);
            continue;
        }
        print_one(r, out);
        fputc('\n', out);
        json_decref(r);
    }
    free(line);
    return rc;
}

/* Prints the recorded result of each call id from the store. */
static int trace_store(const char *dir, int n, char **ids)
{
    char err[1024];
    tp_store_t *s = tp_store_open(dir, TP_STORE_RDONLY, err, sizeof err);
    if (s == NULL) {
        tp_log_error("%s", err);
        return 2;
    }
    MDB_txn *txn;
    if (tp_store_read(s, &txn) != 0) {
        tp_log_error("%s: cannot read", dir);
        tp_store_close(s);
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        Toolpool__StoredResult *r;
        int grc = tp_result_get(s, txn, ids[i], &r);
        if (grc == MDB_NOTFOUND) {
            tp_log_error("%s: no recorded call %s", dir, ids[i]);
            rc = 2;
            continue;
        }
        if (grc) {
            char why[600];
            tp_log_error("%s: call %s: %s", dir, ids[i], tp_store_strerror(s, grc, why, sizeof why));
            rc = 2;
            continue;
        }
        json_error_t jerr;
        json_t *v = json_loadb((const char *)r->line.data, r->line.len, 0, &jerr);
        toolpool__stored_result__free_unpacked(r, NULL);
        if (v == NULL) {
            /* Sound JSON that jansson still refuses (a number past int64, say). */
            tp_log_error("%s: call %s: its recorded line cannot be read: %s", dir, ids[i], jerr.text);
            rc = 2;
            continue;
        }
        print_one(v, stdout);
        fputc('\n', stdout);
        json_decref(v);
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return rc;
}

int tp_cmd_trace(int argc, char **argv)
{
    static const char usage[] =
        "usage: toolpool trace RESULTS.jsonl | -\n"
        "       toolpool trace [--store DIR] CALL_ID...\n"
        "Prints each result as its call's story: the call, every attempt with its\n"
        "outcome, duration and backoff, and what the model is told. With call ids,\n"
        "the results recorded in the store are printed.\n";
    const char *store = NULL;
    int i = 1;
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc > 2 && (strcmp(argv[1], "--store") == 0 || strcmp(argv[1], "-s") == 0)) {
        store = argv[2];
        i = 3;
    }
    if (i >= argc) {
        fputs(usage, stderr);
        return 2;
    }
    const char *path = argv[i];
    if (store == NULL && (strcmp(path, "-") == 0 || access(path, F_OK) == 0)) {
        FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
        if (in == NULL) {
            tp_log_error("%s: %s", path, strerror(errno));
            return 2;
        }
        int rc = tp_trace_print(in, path, stdout);
        if (in != stdin)
            fclose(in);
        return rc;
    }
    return trace_store(store ? store : tp_store_default_dir(), argc - i, argv + i);
}
