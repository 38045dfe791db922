/*
 * toolpool mcp: the pool as an MCP server over stdio, so any MCP host (an
 * agent, an IDE) gets toolpool's recovery for its tool calls. The same
 * engine as `run` and `serve`, behind the MCP front (supervisor/front/mcp/front_mcp.c).
 *
 * This file is the command: options, the registry, the store, the engine
 * and the front, and the end of the session. The host ends it by closing
 * our stdin (the stdio transport's shutdown) or with SIGINT/SIGTERM: either
 * drains (no new request is read, running calls may finish for --drain and
 * are answered, calls not started are answered as such), and mcp exits 0.
 * A second signal stops the running calls at once. stdout carries MCP
 * messages only; everything else goes to stderr.
 */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"
#include "front_mcp.h"
#include "log.h"

#ifndef TP_VERSION
#define TP_VERSION "0"
#endif

/* clang-format off */
static const char mcp_usage[] =
    "usage: toolpool mcp [--registry FILE] [--store DIR] [-j N] [OPTIONS]\n"
    "\n"
    "Serves the registry's tools to an MCP host over stdio (JSON-RPC 2.0, one\n"
    "message a line on stdin and stdout; logs on stderr only). Protocol\n"
    "revisions 2025-11-25 and 2025-06-18 (initialize), and 2026-07-28\n"
    "(server/discover; each request names it in _meta). tools/list lists the tools;\n"
    "tools/call runs one through the pool with every recovery rule, and a\n"
    "failure comes back as a result with isError and the tool message\n"
    "{\"error\", \"message\", \"retryable\", \"attempts\"}. Each call is recorded in\n"
    "the store under an id of its own (mcp-SESSION-N), in the job the host\n"
    "names in _meta.job, else the session's. notifications/cancelled stops a\n"
    "call. A call may run as a task (2025-11-25's params.task, 2026-07-28's\n"
    "tasks extension): its id is sent once the task is in the store, and\n"
    "tasks/get (tasks/result) answers it, after a restart on the store too.\n"
    "The end of stdin, SIGINT or SIGTERM: running calls may finish\n"
    "(--drain), and mcp exits 0.\n"
    "\n"
    "An MCP host's configuration:\n"
    "  {\"mcpServers\": {\"toolpool\": {\"command\": \"toolpool\", \"args\": [\"mcp\",\n"
    "   \"--registry\", \"/path/tools.json\", \"--store\", \"/path/store\"]}}}\n"
    "\n"
    TP_ENGINE_HELP_FIRST
    "      --max-frame BYTES    longest frame on a pipe, and longest message\n"
    "                           from the host; a longer one is refused (-32600)\n"
    "                           and skipped (default: 67108864)\n"
    "      --max-args BYTES     a call whose arguments are longer is refused as\n"
    "                           InvalidRequest (default: 16777216)\n"
    "      --drain DURATION     at the end of the session, how long running\n"
    "                           calls may finish before they are killed\n"
    "                           (default: 10s)\n"
    "      --deadline DURATION  each call's whole time, all attempts and waits:\n"
    "                           the host hears its answer (a failure too) before\n"
    "                           its own request timeout, 60s in the MCP SDKs;\n"
    "                           a tool's shorter deadline wins; 0: none\n"
    "                           (default: 50s)\n"
    TP_ENGINE_HELP_LAST;
/* clang-format on */

typedef struct {
    tp_engine_t *e;
    tp_mcp_t *front;
    tp_loop_t loop;
    bool quiet;
} mcp_t;

/* The session ends (the host closed stdin or stopped reading, or a signal): drain, once. */
static void end_session(mcp_t *s, const char *why)
{
    if (tp_engine_draining(s->e))
        return;
    int busy = tp_engine_busy(s->e);
    if (!s->quiet)
        fprintf(stderr, "toolpool mcp: %s; finishing %d running call%s\n", why, busy, busy == 1 ? "" : "s");
    tp_mcp_drain(s->front);
    tp_engine_drain(s->e);
    tp_loop_draining(&s->loop);
}

static void closed_cb(void *ctx)
{
    end_session(ctx, "the client closed the session");
}

static void finish_cb(void *front, uint64_t timeout_us)
{
    tp_mcp_finish(front, timeout_us);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    mcp_t *s = arg;
    if (tp_engine_draining(s->e)) {
        tp_log_warn("mcp.stop_now", "%s again: stopping running calls now", strsignal((int)sig));
        tp_engine_drain(s->e);
        return;
    }
    end_session(s, strsignal((int)sig));
}

int tp_cmd_mcp(int argc, char **argv)
{
    static const struct option longopts[] = {
        TP_ENGINE_LONGOPTS,
        {"deadline", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    tp_engine_cli_t ec;
    tp_engine_cli_init(&ec, 10000000u);
    tp_engine_opts_t *eo = &ec.engine;
    uint64_t deadline_us = TP_MCP_DEADLINE_US;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, TP_ENGINE_SHORTOPTS "h", longopts, NULL)) != -1) {
        if (tp_engine_cli_take(&ec, c, optarg))
            continue;
        if (c == 'D') {
            deadline_us = tp_cli_duration("--deadline", optarg, 0);
            continue;
        }
        return tp_cli_usage(mcp_usage, c);
    }
    if (optind < argc) {
        tp_log_error("cli.usage", "mcp takes no arguments, got \"%s\" (the host speaks on stdin)", argv[optind]);
        return tp_cli_misuse(mcp_usage);
    }
    int status = 2;
    mcp_t s = {.quiet = ec.quiet};

    if (tp_engine_cli_open(&ec) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN); /* a host gone mid-answer is a write error, not our death */
    if (tp_loop_new(&s.loop, eo->drain_us) < 0)
        goto out;
    eo->base = s.loop.base;
    if ((s.e = tp_engine_new(eo)) == NULL)
        goto out;
    tp_engine_status(s.e, "mcp", 0);
    tp_mcp_opts_t mo = {
        .engine = s.e,
        .base = s.loop.base,
        .in_fd = 0,
        .out_fd = 1,
        .max_message = eo->max_frame,
        .window = tp_loop_window(eo->workers),
        .version = TP_VERSION,
        .deadline_us = deadline_us,
        .closed = closed_cb,
        .ctx = &s,
    };
    if ((s.front = tp_mcp_new(&mo)) == NULL)
        goto out;
    if (tp_loop_signals(&s.loop, signal_cb, &s) < 0 || tp_engine_start(s.e) != 0)
        goto out;
    if (!ec.quiet)
        fprintf(stderr, "toolpool mcp: serving %zu tool%s on stdio (session %s, %d worker%s, store %s)\n",
                eo->reg->n_tools, eo->reg->n_tools == 1 ? "" : "s", tp_mcp_session(s.front), eo->workers,
                eo->workers == 1 ? "" : "s", ec.store_dir);
    tp_host_retain_t *retain = tp_host_retain_start(s.e, ec.retain_us, ec.quiet);
    status = tp_host_finish(&s.loop, s.e, finish_cb, s.front);
    tp_host_retain_free(retain);
    if (!ec.quiet) {
        uint64_t calls, ok;
        tp_mcp_counts(s.front, &calls, &ok);
        fprintf(stderr, "toolpool mcp: stopped: %llu call%s answered, %llu ok\n", (unsigned long long)calls,
                calls == 1 ? "" : "s", (unsigned long long)ok);
    }
out:
    /* The engine first: no answer may come to the front after it is freed. */
    tp_engine_free(s.e);
    tp_mcp_free(s.front);
    tp_loop_free(&s.loop);
    tp_engine_cli_close(&ec);
    return status;
}
