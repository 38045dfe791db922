/*
 * toolpool run: a file of calls (JSON lines) through the JSONL front, one
 * result line per call, the summary, and --retry-failed's choice of what
 * to run again.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "host.h"
#include "frame.h"
#include "front_jsonl.h"
#include "log.h"
#include "registry.h"
#include "shard.h"
#include "taxonomy.h"

/* clang-format off */
static const char run_usage[] =
    "usage: toolpool run [--registry FILE] [--store DIR] [-j N] [-o FILE] [OPTIONS] [CALLS.jsonl | -]\n"
    "\n"
    "Reads calls, one JSON object a line ({\"id\", \"job\", \"step\", \"tool\", \"args\"}),\n"
    "from CALLS (default: standard input), runs them, and writes one result line\n"
    "per call. A line may also be a model's call as its API gives it: an OpenAI\n"
    "tool_calls item, an OpenAI Responses function_call item or an Anthropic\n"
    "tool_use block (\"job\" and \"step\" beside its fields). A summary goes to\n"
    "stderr, and progress: a bar on a terminal, else a line every 10 s.\n"
    "Every result is committed to the store before it is written out; rerunning\n"
    "the same command on the same store resumes: recorded calls are not run again,\n"
    "their recorded results are written instead.\n"
    "\n"
    "  -r, --registry FILE    the tools (default: tools.json): toolpool's own\n"
    "                         file, an OpenAI tool list or an MCP tools/list\n"
    "                         result, as written (docs/guide.md, \"The registry\")\n"
    "      --policy FILE      toolpool's settings of those tools, in a file of\n"
    "                         their own: {\"run\": {TOOL: {\"exec\": [...], ...}},\n"
    "                         \"defaults\": {...}, \"guards\": {...}}\n"
    "  -s, --store DIR        the store: results, checkpoints, breakers and\n"
    "                         escalations (default: $TOOLPOOL_STORE, else\n"
    "                         .toolpool in this directory)\n"
    "  -j, --workers N        worker processes (default: the number of cores)\n"
    "  -o, --output FILE      results file (default: standard output)\n"
    "      --output-format F  what each result line is: toolpool (the default:\n"
    "                         the result line), or the message to append to a\n"
    "                         model's conversation: openai ({\"role\": \"tool\",\n"
    "                         \"tool_call_id\", \"content\"}), openai-responses\n"
    "                         ({\"type\": \"function_call_output\", \"call_id\",\n"
    "                         \"output\"}) or anthropic ({\"type\": \"tool_result\",\n"
    "                         \"tool_use_id\", \"content\", \"is_error\"}); the content\n"
    "                         is the result's JSON, or the failure's tool message\n"
    "      --relaxed          commit without fsync: a crash of toolpool loses\n"
    "                         nothing; a crash of the machine can lose the last\n"
    "                         results or damage the store (for runs you could redo)\n"
    "      --recycle-after N  replace a worker after N calls (default: never)\n"
    "      --pipeline N       let a worker hold up to N calls of a quick tool, as\n"
    "                         many as its average call fits in 2ms: the next\n"
    "                         starts as soon as one ends (default: 64, the most;\n"
    "                         1: off)\n"
    "      --max-frame BYTES  longest frame on a pipe, and longest input line\n"
    "                         (default: 67108864)\n"
    "      --max-args BYTES   a call whose args are longer is refused as\n"
    "                         InvalidRequest (default: 16777216)\n"
    "      --drain DURATION   after SIGINT/SIGTERM, how long running calls may\n"
    "                         finish before they are killed (default: 10s)\n"
    "      --seed N           seed the backoff jitter (default: random)\n"
    "      --retain D         at the end, prune the store's results recorded\n"
    "                         more than D ago (\"30d\"; `toolpool store prune\n"
    "                         --help`); default: the registry's \"retain\", else\n"
    "                         keep every result\n"
    "      --otlp URL         export a trace of every call over OTLP/HTTP to this\n"
    "                         collector: its base URL (http://127.0.0.1:4318) or\n"
    "                         its /v1/traces endpoint (default:\n"
    "                         $OTEL_EXPORTER_OTLP_ENDPOINT; see docs/guide.md)\n"
    "      --otlp-protocol P  the requests' encoding: http/protobuf or http/json\n"
    "                         (default: $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else\n"
    "                         $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf);\n"
    "                         grpc is not offered: it warns and sends protobuf\n"
    "      --otlp-payloads    put a call's args and result on its span\n"
    "      --log-format text|json\n"
    "                         warnings and errors as text lines (the default)\n"
    "                         or one JSON object a line (time, level, event,\n"
    "                         call_id, job, tool, attempt, message; the events\n"
    "                         are listed in docs/logs.md; default:\n"
    "                         $TOOLPOOL_LOG_FORMAT)\n"
    "      --log-file FILE    append them to FILE instead of stderr, the\n"
    "                         workers' too (default: $TOOLPOOL_LOG_FILE)\n"
    "      --retry-failed[=LIST]\n"
    "                         run again the calls whose recorded result is a\n"
    "                         failure (all of them, or those of LIST: classes\n"
    "                         and kinds, e.g. transient or ServerError,Timeout),\n"
    "                         keeping every other result, breakers and\n"
    "                         checkpoints; refusals (malformed) are always\n"
    "                         checked again\n"
    "      --on-version-change rerun|serve|refuse\n"
    "                         a result recorded under another version of its\n"
    "                         tool (its \"version\" in the registry, an exec\n"
    "                         file's digest, an imported MCP server's version): rerun (the\n"
    "                         default) runs the call again and keeps the old\n"
    "                         record in the new one's history (`toolpool trace\n"
    "                         --store`); serve serves it; refuse exits 2 before\n"
    "                         running anything, naming each tool that changed\n"
    "                         with its old and new versions\n"
    "      --shard K/N        run only shard K of N (K from 0) of CALLS (a file):\n"
    "                         the calls whose job (its \"job\", else its id) hashes\n"
    "                         to K; the others are skipped before anything is\n"
    "                         written. slurm: K and N from SLURM_ARRAY_TASK_ID\n"
    "                         and _COUNT (or _MIN and _MAX); k8s/N: K from\n"
    "                         JOB_COMPLETION_INDEX. The store records the file's\n"
    "                         and the registry's digests for `toolpool merge`\n"
    "      --ordered          read CALLS (a file) once for each call's job and\n"
    "                         step first, then run each job strictly in step\n"
    "                         order, however its lines were placed\n"
    "      --summary-json FILE\n"
    "                         write the run's summary to FILE as one JSON object:\n"
    "                         calls, ok, failed, attempts, retries, by_kind,\n"
    "                         latency_ms, elapsed_s, resumed, done_again,\n"
    "                         new_version, ...\n"
    "  -q, --quiet            no summary, no progress\n"
    "      --progress MODE    bar (redrawn: done/total, failures, running, calls/s,\n"
    "                         ETA), lines (the same as a line every 10 s), none;\n"
    "                         auto (the default): bar on a terminal, else lines\n"
    "      --no-progress      --progress none\n"
    "  -h, --help             this text\n";
/* clang-format on */

/*
 * --retry-failed's LIST: comma-separated class names (transient,
 * permanent, malformed, guard) and kind names; a name the taxonomy does
 * not know is taken as a tool's own kind, and said so. NULL or "": all.
 * Exits 2 on an empty item.
 */
static void parse_rerun(const char *list, tp_rerun_t *f)
{
    if (list == NULL || *list == '\0') {
        f->all = true;
        return;
    }
    char *copy = strdup(list), *save = NULL;
    if (copy == NULL) {
        tp_log_error("cli.out_of_memory", "out of memory");
        exit(2);
    }
    for (const char *p = list; *p; p++)
        if (*p == ',' && (p == list || p[1] == ',' || p[1] == '\0')) {
            tp_log_error("cli.bad_option",
                         "--retry-failed: an empty name in \"%s\" (expected classes and kinds, comma-separated)", list);
            exit(2);
        }
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int c;
        for (c = TP_CLASS_TRANSIENT; c <= TP_CLASS_GUARD; c++)
            if (strcmp(tok, tp_class_name((tp_class_t)c)) == 0)
                break;
        if (c <= TP_CLASS_GUARD) {
            f->classes |= 1u << c;
            continue;
        }
        if (tp_kind_from_name(tok) == TP_KIND_OTHER)
            tp_log_warn("cli.unknown_kind",
                        "--retry-failed: \"%s\" is not a class or a kind toolpool gives; "
                        "taken as a tool's own kind",
                        tok);
        char **grown = realloc(f->kinds, (f->n_kinds + 1) * sizeof *grown);
        if (grown == NULL || (grown[f->n_kinds] = strdup(tok)) == NULL) {
            tp_log_error("cli.out_of_memory", "out of memory");
            exit(2);
        }
        f->kinds = grown;
        f->n_kinds++;
    }
    free(copy);
}

/*
 * --summary-json FILE: the run's summary as one JSON object, for a program
 * (the same figures as the summary on stderr). 0, or -1 logged.
 */
static int write_summary_json(const char *path, const tp_batch_report_t *rep, int status)
{
    const tp_summary_t *s = &rep->summary;
    json_t *kinds = json_object();
    for (int k = TP_KIND_TIMEOUT; kinds && k <= TP_KIND_OTHER; k++)
        if (s->by_kind[k])
            json_object_set_new(kinds, k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                                json_integer((json_int_t)s->by_kind[k]));
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:o, s:{s:f, s:f, s:f}, s:f, s:f, s:I, s:I, s:I, s:I, s:b, s:I, s:i}", "calls",
        (json_int_t)s->calls, "ok", (json_int_t)s->ok, "failed", (json_int_t)(s->calls - s->ok), "attempts",
        (json_int_t)s->attempts, "retries", (json_int_t)s->retries, "by_kind", kinds, "latency_ms", "p50",
        (double)tp_summary_quantile_us(s, 0.5) / 1e3, "p99", (double)tp_summary_quantile_us(s, 0.99) / 1e3, "max",
        (double)s->max_us / 1e3, "elapsed_s", rep->elapsed_s, "calls_per_s",
        rep->elapsed_s > 0 ? (double)s->calls / rep->elapsed_s : 0.0, "resumed", (json_int_t)rep->resumed, "done_again",
        (json_int_t)rep->rerun, "new_version", (json_int_t)rep->version_rerun, "late_steps", (json_int_t)rep->late,
        "interrupted", rep->interrupted, "not_started", (json_int_t)rep->not_started, "exit_status", status);
    if (o == NULL) {
        tp_log_error("cli.out_of_memory", "%s: out of memory rendering the summary", path);
        return -1;
    }
    FILE *f = fopen(path, "w");
    int rc = f && json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(10)) == 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc)
        tp_log_error("run.summary_failed", "%s: %s", path, strerror(errno ? errno : EIO));
    json_decref(o);
    return rc;
}

static void rerun_free(tp_rerun_t *f)
{
    for (size_t i = 0; i < f->n_kinds; i++)
        free(f->kinds[i]);
    free(f->kinds);
}

int tp_cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        TP_ENGINE_LONGOPTS,
        {"output", required_argument, NULL, 'o'},
        {"no-progress", no_argument, NULL, 'P'},
        {"progress", required_argument, NULL, 'G'},
        {"retry-failed", optional_argument, NULL, 'X'},
        {"summary-json", required_argument, NULL, 'Y'},
        {"ordered", no_argument, NULL, 'O'},
        {"output-format", required_argument, NULL, 'F'},
        {"shard", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    tp_engine_cli_t ec;
    tp_engine_cli_init(&ec, 10000000u);
    const char *output = NULL, *summary_json = NULL;
    int progress = isatty(2) ? TP_PROGRESS_BAR : TP_PROGRESS_LINES;
    bool ordered = false, want_rerun = false;
    tp_format_t format = TP_FORMAT_TOOLPOOL;
    tp_shard_t shard = {0};
    char shard_err[256];
    tp_rerun_t rerun = {0};
    long *line_map = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, TP_ENGINE_SHORTOPTS "o:h", longopts, NULL)) != -1) {
        if (tp_engine_cli_take(&ec, c, optarg))
            continue;
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'P':
            progress = TP_PROGRESS_NONE;
            break;
        case 'G':
            if (strcmp(optarg, "auto") == 0) {
                progress = isatty(2) ? TP_PROGRESS_BAR : TP_PROGRESS_LINES;
            } else if (strcmp(optarg, "bar") == 0) {
                progress = TP_PROGRESS_BAR;
            } else if (strcmp(optarg, "lines") == 0) {
                progress = TP_PROGRESS_LINES;
            } else if (strcmp(optarg, "none") == 0) {
                progress = TP_PROGRESS_NONE;
            } else {
                tp_log_error("cli.bad_option", "--progress: expected auto, bar, lines or none, got \"%s\"", optarg);
                return 2;
            }
            break;
        case 'Y':
            summary_json = optarg;
            break;
        case 'O':
            ordered = true;
            break;
        case 'F':
            if (tp_format_from_name(optarg, &format) < 0) {
                tp_log_error("cli.bad_option", "--output-format: expected " TP_FORMAT_NAMES ", got \"%s\"", optarg);
                rerun_free(&rerun);
                return 2;
            }
            break;
        case 'K':
            if (tp_shard_parse(optarg, &shard, shard_err, sizeof shard_err) < 0) {
                tp_log_error("cli.bad_option", "%s", shard_err);
                rerun_free(&rerun);
                return 2;
            }
            break;
        case 'X':
            rerun_free(&rerun);
            rerun = (tp_rerun_t){0};
            parse_rerun(optarg, &rerun);
            want_rerun = true;
            break;
        default:
            return tp_cli_usage(run_usage, c);
        }
    }
    tp_batch_opts_t o = {.input_fd = -1, .output_fd = -1, .format = format};
    int status = 2;
    if (argc - optind > 1) {
        tp_log_error("cli.usage", "run takes one calls file, got %d", argc - optind);
        goto out;
    }
    const char *input = optind < argc ? argv[optind] : "-";
    if (tp_engine_cli_open(&ec) < 0)
        goto out;
    o.engine = ec.engine;
    o.input_name = strcmp(input, "-") == 0 ? "standard input" : input;
    o.input_fd = strcmp(input, "-") == 0 ? 0 : open(input, O_RDONLY | O_CLOEXEC);
    if (o.input_fd < 0) {
        tp_log_error("cli.open_failed", "%s: %s", input, strerror(errno));
        goto out;
    }
    if (shard.count) {
        if (tp_run_shard_prepare(ec.engine.store, ec.registry, ec.policy, o.input_fd, o.input_name, &shard,
                                 ec.engine.max_frame) < 0)
            goto out;
        o.shard = &shard;
    }
    if (ordered) {
        int copy;
        if (tp_order_input(o.input_fd, o.input_name, &copy, &line_map, &o.n_line_map) < 0)
            goto out;
        if (o.input_fd > 0)
            close(o.input_fd);
        o.input_fd = copy;
        o.line_map = line_map;
    }
    o.output_fd = output ? open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : 1;
    if (o.output_fd < 0) {
        tp_log_error("cli.open_failed", "%s: %s", output, strerror(errno));
        goto out;
    }
    o.progress = ec.quiet ? TP_PROGRESS_NONE : progress;
    o.engine.rerun = want_rerun ? &rerun : NULL;
    tp_batch_report_t rep;
    status = tp_batch_run(&o, &rep);
    if (status != 2 && tp_host_retain_now(ec.engine.store, ec.retain_us, ec.quiet) < 0)
        status = 2;
    if (!ec.quiet) {
        tp_summary_print(stderr, &rep.summary, rep.elapsed_s);
        if (rep.resumed)
            fprintf(stderr,
                    "  resumed: %llu recorded result%s served from %s, not run again (the retries and latency "
                    "above are the %llu run now)\n",
                    (unsigned long long)rep.resumed, rep.resumed == 1 ? "" : "s", ec.store_dir,
                    (unsigned long long)(rep.summary.calls - rep.resumed));
        if (rep.rerun)
            fprintf(stderr, "  done again: %llu recorded failure%s and refusal%s\n", (unsigned long long)rep.rerun,
                    rep.rerun == 1 ? "" : "s", rep.rerun == 1 ? "" : "s");
        if (rep.version_rerun)
            fprintf(stderr,
                    "  new version: %llu recorded result%s made under another version of %s tool, run again (the "
                    "old record%s kept: `toolpool trace ID --store %s`)\n",
                    (unsigned long long)rep.version_rerun, rep.version_rerun == 1 ? "" : "s",
                    rep.version_rerun == 1 ? "its" : "their", rep.version_rerun == 1 ? "" : "s", ec.store_dir);
        uint64_t open = rep.summary.by_kind[TP_KIND_CIRCUIT_OPEN];
        if (open)
            fprintf(stderr,
                    "  circuit open: %llu call%s refused without running; `toolpool breakers list --store %s` "
                    "shows the breakers, `toolpool breakers reset ID` closes one\n",
                    (unsigned long long)open, open == 1 ? "" : "s", ec.store_dir);
        if (rep.late)
            fprintf(stderr,
                    "  late steps: %llu call%s came after a later step of their job had started, "
                    "and ran out of order\n",
                    (unsigned long long)rep.late, rep.late == 1 ? "" : "s");
        if (shard.count > 1)
            fprintf(stderr, "  shard %u/%u: %llu line%s left to the other shards, not run here\n", shard.index,
                    shard.count, (unsigned long long)rep.other_shard, rep.other_shard == 1 ? "" : "s");
        if (rep.interrupted)
            fprintf(stderr, "  interrupted: %llu call%s read but not started; rerun to run them\n",
                    (unsigned long long)rep.not_started, rep.not_started == 1 ? "" : "s");
    }
    if (summary_json && write_summary_json(summary_json, &rep, status) < 0)
        status = 2;
out:
    if (o.input_fd > 0)
        close(o.input_fd);
    free(line_map);
    rerun_free(&rerun);
    if (output && o.output_fd >= 0 && close(o.output_fd) < 0) {
        tp_log_error("run.write_failed", "%s: %s", output, strerror(errno));
        status = 2;
    }
    tp_engine_cli_close(&ec);
    return status;
}
