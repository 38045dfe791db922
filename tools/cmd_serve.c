/*
 * toolpool serve: the pool as a service. The same engine as `run`, behind
 * the HTTP front (supervisor/front/http/) instead of the JSONL one.
 *
 * This file is the command: options, the registry, the store, the engine
 * and the front, and the signals. SIGINT or SIGTERM drains: no new
 * connection or request is taken, running calls may finish for --drain,
 * their results are committed and answered, and serve exits 0. A second
 * signal stops the running calls at once.
 */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"
#include "front_http.h"
#include "log.h"

/* clang-format off */
static const char serve_usage[] =
    "usage: toolpool serve [--listen unix:PATH | HOST:PORT] [--registry FILE] [--store DIR] [-j N] [OPTIONS]\n"
    "\n"
    "Runs the pool as an HTTP/JSON service: POST /v1/calls runs a call and\n"
    "answers its result line (the same bytes as `run` writes) once it is\n"
    "committed; POST /v1/batch takes `run`'s JSONL and streams the results\n"
    "back. A call may be a model's own (an OpenAI tool_calls or function_call\n"
    "item, an Anthropic tool_use block), and ?format=openai, openai-responses\n"
    "or anthropic answers with the message its conversation appends. GET\n"
    "/v1/tools, /v1/breakers, /v1/escalations, /metrics, /healthz, /readyz;\n"
    "PUT|GET /v1/jobs/JOB/checkpoint; and MCP over HTTP at /mcp\n"
    "(MCP's Streamable HTTP transport; docs/guide.md has them all). A call\n"
    "id already recorded in the store is answered from it, never run\n"
    "again. SIGINT/SIGTERM: stop taking requests, let running calls finish\n"
    "(--drain), exit 0.\n"
    "\n"
    "  -l, --listen ADDR        unix:PATH (a socket file, mode 0600) or HOST:PORT\n"
    "                           (default: unix:./toolpool.sock); an address other\n"
    "                           than loopback needs --token-file\n"
    "      --token-file FILE    every request must carry \"Authorization: Bearer\n"
    "                           TOKEN\", TOKEN being the file's first line\n"
    TP_ENGINE_HELP_FIRST
    "      --max-frame BYTES    longest frame on a pipe, and longest line of a\n"
    "                           batch (default: 67108864)\n"
    "      --max-args BYTES     a call whose args are longer is refused (400, or\n"
    "                           an InvalidRequest line in a batch; default:\n"
    "                           16777216)\n"
    "      --max-body BYTES     longest request body; past it, 413 (default:\n"
    "                           67108864)\n"
    "      --max-connections N  open connections; past it, requests are answered\n"
    "                           503 (default: 1024)\n"
    "      --max-queued N       calls held at once, running or waiting; past it,\n"
    "                           a new call is answered 503 with Retry-After\n"
    "                           (default: 10000)\n"
    "      --idle-timeout DURATION  drop a client that sends nothing, or reads\n"
    "                           nothing, this long (default: 60s)\n"
    "      --mcp-deadline DURATION  each /mcp call's whole time, all attempts and\n"
    "                           waits, under the host's request timeout (60s in\n"
    "                           the MCP SDKs); 0: none (default: 50s)\n"
    "      --drain DURATION     after SIGINT/SIGTERM, how long running calls may\n"
    "                           finish before they are killed (default: 30s)\n"
    TP_ENGINE_HELP_LAST;
/* clang-format on */

/*
 * The token: the file's first line, without its line break. A token
 * others can read is no secret, so a file readable by group or others is
 * refused.
 */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        tp_log_error("serve.token_file", "--token-file %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = 0;
    if (fstat(fileno(f), &st) != 0)
        tp_log_error("serve.token_file", "--token-file %s: %s", path, strerror(errno));
    else if (st.st_mode & 077)
        tp_log_error("serve.token_file", "--token-file %s: readable by others (mode %03o): chmod 600 it", path,
                     (unsigned)(st.st_mode & 0777));
    else if ((n = getline(&line, &cap, f)) <= 0)
        tp_log_error("serve.token_file", "--token-file %s: no token in it", path);
    fclose(f);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = 0;
    if (n <= 0) {
        if (line && n == 0)
            tp_log_error("serve.token_file", "--token-file %s: no token in it", path);
        free(line);
        return NULL;
    }
    return line;
}

/*
 * Each connection is a descriptor: raise the soft limit to the hard one,
 * so --max-connections (and the workers' pipes) fit under it.
 */
static void raise_nofile(int max_connections, int workers)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
        return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur < (rlim_t)(max_connections + 4 * workers + 64))
        tp_log_warn("serve.few_descriptors", "only %llu descriptors: --max-connections %d may not be reached",
                    (unsigned long long)rl.rlim_cur, max_connections);
}

typedef struct {
    tp_engine_t *e;
    tp_http_t *front;
    tp_loop_t loop;
    bool quiet;
} serve_t;

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    serve_t *s = arg;
    if (tp_engine_draining(s->e)) {
        tp_log_warn("serve.stop_now", "second signal: stopping running calls now");
        tp_engine_drain(s->e);
        return;
    }
    int busy = tp_engine_busy(s->e);
    if (!s->quiet)
        tp_log_warn("serve.draining", "%s: draining; finishing %d running call%s (signal again to stop now)",
                    strsignal((int)sig), busy, busy == 1 ? "" : "s");
    tp_http_drain(s->front);
    tp_engine_drain(s->e);
    tp_loop_draining(&s->loop);
}

static void finish_cb(void *front, uint64_t timeout_us)
{
    tp_http_finish(front, timeout_us);
}

int tp_cmd_serve(int argc, char **argv)
{
    static const struct option longopts[] = {
        TP_ENGINE_LONGOPTS,
        {"listen", required_argument, NULL, 'l'},
        {"token-file", required_argument, NULL, 'T'},
        {"max-body", required_argument, NULL, 'B'},
        {"max-connections", required_argument, NULL, 'C'},
        {"max-queued", required_argument, NULL, 'Q'},
        {"idle-timeout", required_argument, NULL, 'I'},
        {"mcp-deadline", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "unix:./toolpool.sock", *token_file = NULL;
    tp_engine_cli_t ec;
    tp_engine_cli_init(&ec, 30000000u);
    tp_engine_opts_t *eo = &ec.engine;
    tp_http_opts_t ho = {
        .max_body = 64u << 20,
        .idle_timeout_us = 60000000u,
        .max_connections = 1024,
        .max_queued = 10000,
        .mcp_deadline_us = TP_MCP_DEADLINE_US,
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, TP_ENGINE_SHORTOPTS "l:h", longopts, NULL)) != -1) {
        if (tp_engine_cli_take(&ec, c, optarg))
            continue;
        switch (c) {
        case 'l':
            listen = optarg;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 'B':
            ho.max_body = (size_t)tp_cli_count("--max-body", optarg, 1, 1ull << 40);
            break;
        case 'C':
            ho.max_connections = (int)tp_cli_count("--max-connections", optarg, 1, 1000000);
            break;
        case 'Q':
            ho.max_queued = (size_t)tp_cli_count("--max-queued", optarg, 1, 100000000);
            break;
        case 'I':
            ho.idle_timeout_us = tp_cli_duration("--idle-timeout", optarg, 1);
            break;
        case 'D':
            ho.mcp_deadline_us = tp_cli_duration("--mcp-deadline", optarg, 0);
            break;
        default:
            return tp_cli_usage(serve_usage, c);
        }
    }
    if (optind < argc) {
        tp_log_error("cli.usage", "serve takes no arguments, got \"%s\"", argv[optind]);
        return tp_cli_misuse(serve_usage);
    }

    int status = 2;
    char err[1024];
    char *token = NULL;
    serve_t s = {.quiet = ec.quiet};
    tp_http_addr_t addr;

    if (tp_http_addr_parse(listen, &addr, err, sizeof err) < 0) {
        tp_log_error("cli.bad_option", "%s", err);
        goto out;
    }
    /* Anyone who can reach a port that is not loopback could run tools: not without a token. */
    if (!addr.loopback && token_file == NULL) {
        tp_log_error("serve.listen_refused",
                     "--listen %s: not a loopback address; serving it needs --token-file (then every request "
                     "must carry \"Authorization: Bearer TOKEN\"), or listen on 127.0.0.1 or a unix: socket",
                     listen);
        goto out;
    }
    if (token_file && (token = read_token(token_file)) == NULL)
        goto out;
    if (tp_engine_cli_open(&ec) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-reply is an error on its connection, not our death */
    raise_nofile(ho.max_connections, eo->workers);
    if (tp_loop_new(&s.loop, eo->drain_us) < 0)
        goto out;
    eo->base = ho.base = s.loop.base;
    ho.token = token;
    ho.window = tp_loop_window(eo->workers);
    ho.max_line = eo->max_frame;
    ho.version = TP_VERSION;
    ho.otlp = ec.exporter;
    if ((s.e = tp_engine_new(eo)) == NULL)
        goto out;
    tp_engine_status(s.e, "serve", 0);
    ho.engine = s.e;
    if ((s.front = tp_http_new(&ho)) == NULL)
        goto out;
    if (tp_http_listen(s.front, &addr, err, sizeof err) < 0) {
        tp_log_error("serve.start_failed", "%s", err);
        goto out;
    }
    if (tp_loop_signals(&s.loop, signal_cb, &s) < 0 || tp_engine_start(s.e) != 0)
        goto out;
    if (!ec.quiet)
        fprintf(stderr, "toolpool serve: listening on %s (%d worker%s, store %s)\n", addr.text, eo->workers,
                eo->workers == 1 ? "" : "s", ec.store_dir);
    tp_host_retain_t *retain = tp_host_retain_start(s.e, ec.retain_us, ec.quiet);
    status = tp_host_finish(&s.loop, s.e, finish_cb, s.front);
    tp_host_retain_free(retain);
    if (!ec.quiet) {
        const tp_engine_stats_t *st = tp_engine_stats(s.e);
        uint64_t calls = 0, ok = 0;
        const tp_scoreboard_t *sb = tp_engine_board(s.e);
        for (size_t i = 0; i < eo->reg->n_tools; i++) {
            calls += tp_sb_tools(sb)[i].sum.calls;
            ok += tp_sb_tools(sb)[i].sum.ok;
        }
        fprintf(stderr, "toolpool serve: stopped: %llu call%s answered, %llu ok, %llu from the store\n",
                (unsigned long long)calls, calls == 1 ? "" : "s", (unsigned long long)ok,
                (unsigned long long)st->answered_recorded);
    }
out:
    /* The engine first: no answer may come to the front after it is freed. */
    tp_engine_free(s.e);
    tp_http_free(s.front);
    tp_loop_free(&s.loop);
    tp_engine_cli_close(&ec);
    free(token);
    return status;
}
