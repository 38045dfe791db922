/*
 * toolpool mcp: the pool as an MCP server over stdio, so any MCP host (an
 * agent, an IDE) gets toolpool's recovery for its tool calls. The same
 * engine as `run` and `serve`, behind the MCP front (supervisor/front_mcp.c).
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

#include "engineopts.h"
#include "front_mcp.h"
#include "log.h"

#ifndef TP_VERSION
#define TP_VERSION "0"
#endif

static const char mcp_usage[] =
    "usage: toolpool mcp [--registry FILE] [--store DIR] [-j N] [OPTIONS]\n"
    "\n"
    "Serves the registry's tools to an MCP host over stdio (JSON-RPC 2.0, one\n"
    "message a line on stdin and stdout; logs on stderr only). Protocol\n"
    "revisions 2025-11-25 and 2025-06-18. tools/list lists the tools;\n"
    "tools/call runs one through the pool with every recovery rule, and a\n"
    "failure comes back as a result with isError and the tool message\n"
    "{\"error\", \"message\", \"retryable\", \"attempts\"}. Each call is recorded in\n"
    "the store under an id of its own (mcp-SESSION-N), in the job the host\n"
    "names in _meta.job, else the session's. notifications/cancelled stops a\n"
    "call. The end of stdin, SIGINT or SIGTERM: running calls may finish\n"
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
    TP_ENGINE_HELP_LAST;

typedef struct {
    tp_engine_t *e;
    tp_mcp_t *front;
    struct event_base *base;
    struct event *ev_stop;      /* the last resort, should the drain not end */
    uint64_t drain_us;
    bool quiet;
} mcp_t;

/* The drain went on far past its grace: stop the loop; what is committed stays. */
static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
    mcp_t *s = arg;
    tp_log_error("the drain did not end; stopping");
    event_base_loopbreak(s->base);
}

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
    uint64_t us = s->drain_us + 10000000u;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u)};
    if (evtimer_add(s->ev_stop, &tv) != 0)
        tp_log_warn("cannot arm the drain's last-resort timer");
}

static void closed_cb(void *ctx)
{
    end_session(ctx, "the client closed the session");
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    mcp_t *s = arg;
    if (tp_engine_draining(s->e)) {
        tp_log_warn("%s again: stopping running calls now", strsignal((int)sig));
        tp_engine_drain(s->e);
        return;
    }
    end_session(s, strsignal((int)sig));
}

int tp_cmd_mcp(int argc, char **argv)
{
    static const struct option longopts[] = {
        TP_ENGINE_LONGOPTS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    tp_engine_cli_t ec;
    tp_engine_cli_init(&ec, 10000000u);
    tp_engine_opts_t *eo = &ec.engine;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, TP_ENGINE_SHORTOPTS "h", longopts, NULL)) != -1) {
        if (tp_engine_cli_take(&ec, c, optarg))
            continue;
        fputs(mcp_usage, c == 'h' ? stdout : stderr);
        return c == 'h' ? 0 : 2;
    }
    if (optind < argc) {
        tp_log_error("mcp takes no arguments, got \"%s\" (the host speaks on stdin)", argv[optind]);
        fputs(mcp_usage, stderr);
        return 2;
    }
    int status = 2;
    struct event_base *base = NULL;
    mcp_t s = {.drain_us = eo->drain_us, .quiet = ec.quiet};
    struct event *ev_int = NULL, *ev_term = NULL;

    if (tp_engine_cli_open(&ec) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN); /* a host gone mid-answer is a write error, not our death */
    if ((base = tp_engine_base_new()) == NULL) {
        tp_log_error("out of memory");
        goto out;
    }
    eo->base = base;
    s.base = base;
    if ((s.e = tp_engine_new(eo)) == NULL)
        goto out;
    tp_mcp_opts_t mo = {
        .engine = s.e,
        .base = base,
        .in_fd = 0,
        .out_fd = 1,
        .max_message = eo->max_frame,
        .window = (size_t)eo->workers * 64 + 1024,
        .version = TP_VERSION,
        .closed = closed_cb,
        .ctx = &s,
    };
    if ((s.front = tp_mcp_new(&mo)) == NULL)
        goto out;
    ev_int = evsignal_new(base, SIGINT, signal_cb, &s);
    ev_term = evsignal_new(base, SIGTERM, signal_cb, &s);
    s.ev_stop = evtimer_new(base, stop_cb, &s);
    if (ev_int == NULL || ev_term == NULL || s.ev_stop == NULL || evsignal_add(ev_int, NULL) != 0 ||
        evsignal_add(ev_term, NULL) != 0) {
        tp_log_error("cannot set up the signals");
        goto out;
    }
    if (tp_engine_start(s.e) != 0)
        goto out;
    if (!ec.quiet)
        fprintf(stderr, "toolpool mcp: serving %zu tool%s on stdio (session %s, %d worker%s, store %s)\n",
                eo->reg->n_tools, eo->reg->n_tools == 1 ? "" : "s", tp_mcp_session(s.front), eo->workers,
                eo->workers == 1 ? "" : "s", ec.store_dir);
    if (event_base_dispatch(base) < 0)
        tp_log_error("the event loop failed");
    tp_engine_finish(s.e);
    tp_mcp_finish(s.front, 2000000u);
    status = tp_engine_failed(s.e) ? 2 : 0;
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
    if (ev_int)
        event_free(ev_int);
    if (ev_term)
        event_free(ev_term);
    if (s.ev_stop)
        event_free(s.ev_stop);
    if (base)
        event_base_free(base);
    tp_engine_cli_close(&ec);
    return status;
}
