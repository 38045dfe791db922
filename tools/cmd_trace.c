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
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "buf.h"
#include "checkpoint.h"
#include "cli.h"
#include "resultline.h"
#include "json.h"
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

/*
 * The numbers of a JSON text that jansson cannot hold (an integer past
 * int64, a real past double's range) written as strings of their digits,
 * into b; every other byte as it is.
 */
static int tame_numbers(const char *p, size_t n, tp_buf_t *b)
{
    size_t i = 0, from = 0;
    bool in_str = false;
    while (i < n) {
        char c = p[i];
        if (in_str) {
            i += c == '\\' ? 2 : 1;
            in_str = c != '"';
            continue;
        }
        if (c == '"') {
            in_str = true;
            i++;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) {
            i++;
            continue;
        }
        size_t at = i;
        bool real = false;
        for (; i < n && strchr("+-0123456789.eE", p[i]) != NULL; i++)
            real |= p[i] == '.' || p[i] == 'e' || p[i] == 'E';
        char tok[400];
        size_t len = i - at < sizeof tok - 1 ? i - at : sizeof tok - 1;
        memcpy(tok, p + at, len);
        tok[len] = 0;
        errno = 0;
        bool holds = real ? !isinf(strtod(tok, NULL)) : (strtoll(tok, NULL, 10), errno != ERANGE);
        if (holds && i - at < sizeof tok - 1)
            continue;
        if (tp_buf_append(b, p + from, at - from) < 0 || tp_buf_append(b, "\"", 1) < 0 ||
            tp_buf_append(b, p + at, i - at) < 0 || tp_buf_append(b, "\"", 1) < 0)
            return -1;
        from = i;
    }
    return tp_buf_append(b, p + from, n - from);
}

/*
 * A result line read to be told: as JSON, or, when it holds a number
 * jansson cannot (a tool's answer may), with such numbers as strings of
 * their digits (a story shows its figures; --json writes the line as is).
 */
static json_t *load_told(const char *text, size_t len, json_error_t *err)
{
    json_t *v = tp_json_loadb(text, len, 0, err);
    if (v != NULL)
        return v;
    tp_buf_t b = {0};
    if (tame_numbers(text, len, &b) == 0)
        v = tp_json_loadb((const char *)b.data, b.len, 0, err);
    tp_buf_free(&b);
    return v;
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
                      double duration_ms, double backoff_ms, double start_ms)
{
    bool other = tool && called && strcmp(tool, called) != 0;
    outcome = outcome ? outcome : "?";
    if (strcmp(outcome, "CircuitOpen") == 0 && duration_ms == 0) {
        fprintf(out, "  %s%s → CircuitOpen, not run", other ? "fallback " : "", tool ? tool : "?");
        if (start_ms >= 0) {
            fputs("   [at +", out);
            put_secs(out, start_ms);
            fputc(']', out);
        }
        fputc('\n', out);
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
    if (start_ms >= 0) {
        fputs("   [at +", out);
        put_secs(out, start_ms);
        fputc(']', out);
    }
    fputc('\n', out);
}

/*
 * Where a call's time went, when its trace has start offsets: from its turn
 * to its last attempt's end, what the attempts took, the backoffs, and the
 * rest, which is waiting (for a worker, or for a commit before a
 * non-idempotent attempt). Nothing for a call that never ran.
 */
static void print_timeline(FILE *out, json_t *trace)
{
    size_t i, n = json_array_size(trace);
    json_t *t;
    double run = 0, backoff = 0, end = 0;
    bool known = false;
    json_array_foreach(trace, i, t) {
        json_t *start = json_object_get(t, "start_ms");
        double d = json_number_value(json_object_get(t, "duration_ms"));
        if (json_is_number(start)) {
            known = true;
            if (json_number_value(start) + d > end)
                end = json_number_value(start) + d;
        }
        run += d;
        if (i + 1 < n)
            backoff += json_number_value(json_object_get(t, "backoff_ms"));
    }
    if (!known || n == 0 || end == 0)
        return;
    double wait = end - run - backoff;
    fputs("  took ", out);
    put_secs(out, end);
    fputs(" from its turn: attempts ", out);
    put_secs(out, run);
    fputs(", backoff ", out);
    put_secs(out, backoff);
    fputs(", waiting ", out);
    put_secs(out, wait > 0 ? wait : 0);
    fputc('\n', out);
}

static void print_one(json_t *r, FILE *out)
{
    const char *tool = json_string_value(json_object_get(r, "tool"));
    const char *id = json_string_value(json_object_get(r, "id"));
    const char *job = json_string_value(json_object_get(r, "job"));
    json_t *args = json_object_get(r, "args");
    if (id) {
        fprintf(out, "call %s", id);
        if (job && strcmp(job, id) != 0)
            fprintf(out, ", job %s, step %lld", job, (long long)json_integer_value(json_object_get(r, "step")));
        fputc('\n', out);
    }
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
    const char *version = json_string_value(json_object_get(r, "version"));
    if (version)
        fprintf(out, "  under version %s of %s\n", version, tool ? tool : "its tool");
    size_t i;
    json_t *t, *trace = json_object_get(r, "trace");
    json_array_foreach(trace, i, t) {
        tp_trace_attempt(
            out, tool, (uint32_t)json_integer_value(json_object_get(t, "attempt")),
            json_string_value(json_object_get(t, "tool")), json_string_value(json_object_get(t, "outcome")),
            json_number_value(json_object_get(t, "duration_ms")), json_number_value(json_object_get(t, "backoff_ms")),
            json_is_number(json_object_get(t, "start_ms")) ? json_number_value(json_object_get(t, "start_ms")) : -1);
    }
    print_timeline(out, trace);
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
    fprintf(out, "  → tool message: {\"error\": \"%s\", \"retryable\": %s, \"attempts\": %lld}\n", kind ? kind : "?",
            json_is_true(json_object_get(r, "retryable")) ? "true" : "false",
            (long long)json_integer_value(json_object_get(r, "attempts")));
    if (msg && *msg)
        fprintf(out, "    %s\n", msg);
    const char *esc = json_string_value(json_object_get(r, "escalation"));
    if (esc)
        fprintf(out, "    escalated to a person: %s (toolpool escalations show %s)\n", esc, esc);
}

/*
 * Whether r is a result record (what run writes): "ok" a boolean and a
 * "trace" array. If not, what it looks like instead, for the message.
 */
static const char *not_a_result(json_t *r)
{
    if (!json_is_object(r))
        return "a JSON value that is not an object";
    if (json_is_boolean(json_object_get(r, "ok")) && json_is_array(json_object_get(r, "trace")))
        return NULL;
    if (json_object_get(r, "tool") && json_object_get(r, "ok") == NULL)
        return "a call (id, tool, args; no \"ok\"): toolpool run's input, not its results";
    if (json_object_get(r, "calls") && json_object_get(r, "by_kind"))
        return "a run summary (--summary-json), not results";
    return "a JSON object without \"ok\" and \"trace\"";
}

int tp_trace_print_as(FILE *in, const char *name, FILE *out, bool json)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long no = 0;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        no++;
        if (strspn(line, " \t\r\n") == (size_t)n)
            continue;
        json_error_t err;
        json_t *r = load_told(line, (size_t)n, &err);
        const char *what = r ? not_a_result(r) : NULL;
        if (r == NULL || what) {
            tp_log_error("cli.bad_input",
                         "%s:%ld: not a result record: found %s%s; trace reads what toolpool run writes", name, no,
                         r ? what : "text that is not JSON: ", r ? "" : err.text);
            rc = 2;
        } else if (json) {
            /* the line as it was written, only its spaces gone: every number as the tool wrote it */
            tp_buf_t b = {0};
            if (tp_json_compact(line, (size_t)n, &b) < 0 || tp_buf_append(&b, "\n", 1) < 0 ||
                fwrite(b.data, 1, b.len, out) != b.len)
                rc = 2;
            tp_buf_free(&b);
        } else {
            print_one(r, out);
            fputc('\n', out);
        }
        json_decref(r);
    }
    free(line);
    return rc;
}

int tp_trace_print(FILE *in, const char *name, FILE *out)
{
    return tp_trace_print_as(in, name, out, false);
}

/*
 * A recorded call's result line (what trace reads from a file too): with
 * json as it is, what run wrote byte for byte; else read and told as its
 * story. 0, or 2 (logged).
 */
static int print_recorded(const char *dir, const char *id, const tp_buf_t *line, bool json)
{
    if (json) {
        bool ended = line->len > 0 && line->data[line->len - 1] == '\n';
        return fwrite(line->data, 1, line->len, stdout) == line->len && (ended || fputc('\n', stdout) != EOF) ? 0 : 2;
    }
    json_error_t jerr;
    json_t *v = load_told((const char *)line->data, line->len, &jerr);
    if (v == NULL) {
        /* Sound JSON that jansson still refuses (nesting past its depth, say). */
        tp_log_error("store.corrupt_record", "%s: call %s: its recorded line cannot be read: %s", dir, id, jerr.text);
        return 2;
    }
    print_one(v, stdout);
    fputc('\n', stdout);
    json_decref(v);
    return 0;
}

/* Prints the recorded result of each call id from the store. */
static int trace_store(const char *dir, int n, char **ids, bool json)
{
    MDB_txn *txn;
    tp_store_t *s = tp_cli_store_read(dir, &txn);
    if (s == NULL)
        return 2;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        Toolpool__StoredResult *r;
        int grc = tp_result_get(s, txn, ids[i], &r);
        if (grc == MDB_NOTFOUND) {
            tp_log_error("cli.not_found", "%s: no recorded call %s", dir, ids[i]);
            rc = 2;
            continue;
        }
        if (grc) {
            char why[600];
            tp_log_error("store.read_failed", "%s: call %s: %s", dir, ids[i],
                         tp_store_strerror(s, grc, why, sizeof why));
            rc = 2;
            continue;
        }
        tp_buf_t line = {0};
        int lrc = tp_result_line(&line, r);
        if (lrc < 0) {
            tp_log_error("cli.out_of_memory", "%s: call %s: out of memory", dir, ids[i]);
            rc = 2;
        } else if (print_recorded(dir, ids[i], &line, json) != 0) {
            rc = 2;
        }
        /* The records it replaced, made under earlier versions of its tool: newest first, told only. */
        for (size_t h = r->n_history; h-- > 0 && !json && lrc == 0;) {
            const Toolpool__Result *old = r->history[h];
            printf("earlier record %zu of %zu, made under %s%s (replaced when its tool changed version):\n", h + 1,
                   r->n_history, old->version[0] ? "version " : "no version", old->version);
            line.len = 0;
            if ((lrc = tp_result_write(&line, old)) < 0 || print_recorded(dir, ids[i], &line, false) != 0)
                rc = 2;
        }
        tp_result_free(r);
        tp_buf_free(&line);
    }
    mdb_txn_abort(txn);
    tp_store_close(s);
    return rc;
}

int tp_cmd_trace(int argc, char **argv)
{
    /* clang-format off */
    static const char usage[] =
        "usage: toolpool trace [--json] RESULTS.jsonl | -\n"
        "       toolpool trace [--json] [--store DIR] CALL_ID...\n"
        "Prints each result as its call's story: its id and job, the call, every\n"
        "attempt with its outcome, duration, backoff and start (after the call's\n"
        "turn came), where its time went (attempts, backoff, waiting), and what\n"
        "the model is told. With call ids, the results recorded in the store are\n"
        "printed, each followed by the records it replaced when its tool changed\n"
        "version (its history; `run --on-version-change`), newest first. A result\n"
        "made under a tool's version says which. Input that is not results (a\n"
        "calls file, say) is refused (exit 2).\n"
        "  --json   each result record as one JSON line\n";
    /* clang-format on */
    const char *store = NULL;
    bool json = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &store, NULL},
        {"json", 0, false, &json, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind >= argc)
        return tp_cli_misuse(usage);
    const char *path = argv[optind];
    if (store == NULL && (strcmp(path, "-") == 0 || access(path, F_OK) == 0)) {
        if (argc - optind > 1) {
            tp_log_error("cli.usage", "trace reads one results file, got %d names", argc - optind);
            return 2;
        }
        FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
        if (in == NULL) {
            tp_log_error("cli.open_failed", "%s: %s", path, strerror(errno));
            return 2;
        }
        rc = tp_trace_print_as(in, path, stdout, json);
        if (in != stdin)
            fclose(in);
        return rc;
    }
    return trace_store(store ? store : tp_store_default_dir(), argc - optind, argv + optind, json);
}
