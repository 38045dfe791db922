/*
 * The engine's options, shared by run, serve and mcp: one table of them,
 * one parser of their values and one start-up (the registry read with its
 * policy, the store opened), so that the three commands take the same
 * options, with the same defaults and bounds, and say the same thing of a
 * bad value. Each command adds its own options to the table and its own
 * start-up after this one. Then the loop that serve and mcp both run their
 * engine on, with its signals and the drain's last resort.
 */
#ifndef TP_ENGINEOPTS_H
#define TP_ENGINEOPTS_H

#include <event2/event.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "engine.h"
#include "loop.h"
#include "otlp.h"

/* getopt_long's codes of the engine options with no short form, after TP_OPT_POLICY. */
enum {
    TP_OPT_RELAXED = TP_OPT_POLICY + 1,
    TP_OPT_RECYCLE_AFTER,
    TP_OPT_PIPELINE,
    TP_OPT_MAX_FRAME,
    TP_OPT_MAX_ARGS,
    TP_OPT_DRAIN,
    TP_OPT_SEED,
    TP_OPT_RETAIN,
    TP_OPT_ON_VERSION_CHANGE,
    TP_OPT_OTLP,
    TP_OPT_OTLP_PAYLOADS,
    TP_OPT_LOG_FORMAT,
    TP_OPT_LOG_FILE,
    TP_OPT_OTLP_PROTOCOL,
};

/* A command's getopt_long optstring starts with these... */
#define TP_ENGINE_SHORTOPTS "r:s:j:q"
/* ...and its long options with these. */
#define TP_ENGINE_LONGOPTS                                                                                             \
    {"registry", required_argument, NULL, 'r'}, {"policy", required_argument, NULL, TP_OPT_POLICY},                    \
        {"store", required_argument, NULL, 's'}, {"workers", required_argument, NULL, 'j'},                            \
        {"relaxed", no_argument, NULL, TP_OPT_RELAXED},                                                                \
        {"recycle-after", required_argument, NULL, TP_OPT_RECYCLE_AFTER},                                              \
        {"pipeline", required_argument, NULL, TP_OPT_PIPELINE},                                                        \
        {"max-frame", required_argument, NULL, TP_OPT_MAX_FRAME},                                                      \
        {"max-args", required_argument, NULL, TP_OPT_MAX_ARGS}, {"drain", required_argument, NULL, TP_OPT_DRAIN},      \
        {"seed", required_argument, NULL, TP_OPT_SEED}, {"retain", required_argument, NULL, TP_OPT_RETAIN},            \
        {"on-version-change", required_argument, NULL, TP_OPT_ON_VERSION_CHANGE},                                      \
        {"seed", required_argument, NULL, TP_OPT_SEED}, {"otlp", required_argument, NULL, TP_OPT_OTLP},                \
        {"otlp-payloads", no_argument, NULL, TP_OPT_OTLP_PAYLOADS},                                                    \
        {"log-format", required_argument, NULL, TP_OPT_LOG_FORMAT},                                                    \
        {"log-file", required_argument, NULL, TP_OPT_LOG_FILE},                                                        \
        {"otlp-protocol", required_argument, NULL, TP_OPT_OTLP_PROTOCOL},                                              \
    {                                                                                                                  \
        "quiet", no_argument, NULL, 'q'                                                                                \
    }

/* The trace export options' --help lines, the same in run, serve and mcp. */
#define TP_ENGINE_HELP_OTLP                                                                                            \
    "      --otlp URL           export a trace of every call over OTLP/HTTP to\n"                                      \
    "                           this collector (its base URL, or its /v1/traces\n"                                     \
    "                           endpoint; default: $OTEL_EXPORTER_OTLP_ENDPOINT)\n"                                    \
    "      --otlp-protocol P    the requests' encoding: http/protobuf or\n"                                            \
    "                           http/json (default:\n"                                                                 \
    "                           $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else\n"                                           \
    "                           $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf;\n"                                   \
    "                           grpc is not offered: it warns, sends protobuf)\n"                                      \
    "      --otlp-payloads      put a call's args and result on its span\n"

/* The log options' --help lines, the same in run, serve and mcp. */
#define TP_ENGINE_HELP_LOG                                                                                             \
    "      --log-format text|json\n"                                                                                   \
    "                           warnings and errors as text lines (the default)\n"                                     \
    "                           or one JSON object a line, each with its event\n"                                      \
    "                           name (docs/logs.md; default: $TOOLPOOL_LOG_FORMAT)\n"                                  \
    "      --log-file FILE      append them to FILE, not stderr, the workers'\n"                                       \
    "                           too (default: $TOOLPOOL_LOG_FILE)\n"

/*
 * serve's and mcp's --help lines of the engine options they describe
 * alike (run's --help says more of each): the first from -r to
 * --pipeline, the last from --seed to --help.
 */
#define TP_ENGINE_HELP_FIRST                                                                                           \
    "  -r, --registry FILE      the tools (default: tools.json): toolpool's own\n"                                     \
    "                           file, an OpenAI tool list or an MCP tools/list\n"                                      \
    "                           result, as written\n"                                                                  \
    "      --policy FILE        toolpool's settings of those tools, in a file of\n"                                    \
    "                           their own ({\"run\": {TOOL: {...}}, \"defaults\"...})\n"                               \
    "  -s, --store DIR          the store (default: $TOOLPOOL_STORE, else\n"                                           \
    "                           .toolpool in this directory)\n"                                                        \
    "  -j, --workers N          worker processes (default: the number of cores)\n"                                     \
    "      --relaxed            commit without fsync (see `toolpool run --help`)\n"                                    \
    "      --recycle-after N    replace a worker after N calls (default: never)\n"                                     \
    "      --pipeline N         calls of a quick tool one worker may hold\n"                                           \
    "                           (default: 64; 1: off)\n"
#define TP_ENGINE_HELP_LAST                                                                                            \
    "      --seed N             seed the backoff jitter (default: random)\n" TP_ENGINE_HELP_OTLP TP_ENGINE_HELP_LOG    \
    "      --retain D           prune results recorded more than D ago (\"30d\"),\n"                                   \
    "                           at start and then daily (default: the registry's\n"                                    \
    "                           \"retain\", else keep every result)\n"                                                 \
    "      --on-version-change rerun|serve|refuse\n"                                                                   \
    "                           a result recorded under another version of its\n"                                      \
    "                           tool: run it again, keeping the old record as\n"                                       \
    "                           history (the default), serve it, or exit 2\n"                                          \
    "                           before starting, naming the tools that changed\n"                                      \
    "  -q, --quiet              no startup line, no summary at exit\n"                                                 \
    "  -h, --help               this text\n"

/* What the engine options say, and what the start-up opens from them. */
typedef struct {
    const char *registry;    /* -r: the registry file */
    const char *policy;      /* --policy: its settings, from a file of their own; NULL: none */
    const char *store_dir;   /* -s */
    bool relaxed;            /* --relaxed: commit without fsync */
    bool quiet;              /* -q: what it quiets is the command's */
    uint64_t retain_us;      /* --retain, else the registry's "retain" (once opened); 0: keep every result */
    tp_engine_opts_t engine; /* -j and the rest; reg and store once tp_engine_cli_open has opened them */
    tp_otlp_opts_t otlp;     /* --otlp, --otlp-protocol, --otlp-payloads */
    tp_otlp_t *exporter;     /* the trace exporter tp_engine_cli_open started; NULL: export is off */
} tp_engine_cli_t;

/* c with every option at its default; --drain's, drain_us, is the command's. */
void tp_engine_cli_init(tp_engine_cli_t *c, uint64_t drain_us);

/*
 * Takes getopt_long's answer opt (its value arg) into c when it is one of
 * the engine options: 1; 0 when it is not (the command's own, or an error).
 * A bad value is logged, naming the option, and exits 2.
 */
int tp_engine_cli_take(tp_engine_cli_t *c, int opt, const char *arg);

/*
 * The start-up: the registry with its policy, then the store, into
 * c->engine, and the trace exporter when export is asked for (its hook in
 * c->engine too). With --on-version-change=refuse, a store holding results
 * made under another version of a tool than the registry's now is refused
 * here, before anything runs: each such tool named, with its old and new
 * versions. 0, or -1 logged, with nothing left open.
 */
int tp_engine_cli_open(tp_engine_cli_t *c);

/*
 * Stops the trace exporter (sending what it holds), closes the store and
 * frees the registry that tp_engine_cli_open opened (any may be unopened).
 */
void tp_engine_cli_close(tp_engine_cli_t *c);

/* An integer option in [min, max], or exit 2 naming the option. */
unsigned long long tp_cli_count(const char *opt, const char *v, unsigned long long min, unsigned long long max);

/* A duration option ("10s", "250ms") of at least min_us, or exit 2 naming the option. */
uint64_t tp_cli_duration(const char *opt, const char *v, uint64_t min_us);

/*
 * The deadline of each call through an MCP front unless --deadline (mcp) or
 * --mcp-deadline (serve) says otherwise: under the 60 s an MCP SDK client
 * waits for a request, so the host hears the answer, a failure included,
 * before it gives up.
 */
#define TP_MCP_DEADLINE_US (50 * 1000000ull)

/* How long a front may take, once the loop has ended, to write what it still holds. */
#define TP_HOST_FINISH_US 2000000u

/*
 * The end of serve's and mcp's run, once the engine has started on loop:
 * the loop until it exits (the drain over, or its last resort), the
 * engine's last turn, then the front's, finish(front, TP_HOST_FINISH_US).
 * The engine goes first, so that the front finishes with every answer
 * there will be. Answers the exit status: 2 when the engine has failed,
 * as it may still while the front finishes; else 0.
 */
int tp_host_finish(tp_loop_t *loop, tp_engine_t *e, void (*finish)(void *front, uint64_t timeout_us), void *front);

/*
 * Retention (--retain, the registry's "retain"): results recorded more
 * than retain_us ago are pruned (supervisor/store/prune.h), with the
 * checkpoints of jobs left with none.
 *
 * tp_host_retain_now prunes the store at once, a write transaction a batch
 * (run, at its end). 0, or -1 logged.
 */
int tp_host_retain_now(tp_store_t *s, uint64_t retain_us, bool quiet);
/*
 * serve and mcp: a prune at start and then every TP_HOST_RETAIN_EVERY_US,
 * one batch each loop turn in the engine's own transaction
 * (tp_engine_store_op), so that calls go on between batches. NULL when
 * retain_us is 0 (or, logged, out of memory). Free with tp_host_retain_free.
 */
#define TP_HOST_RETAIN_EVERY_US (24ull * 3600 * 1000000)
typedef struct tp_host_retain tp_host_retain_t;
tp_host_retain_t *tp_host_retain_start(tp_engine_t *e, uint64_t retain_us, bool quiet);
void tp_host_retain_free(tp_host_retain_t *r);

#endif
