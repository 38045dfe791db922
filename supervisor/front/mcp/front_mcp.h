/*
 * The MCP front over stdio: `toolpool mcp`'s way in to the engine. The
 * Model Context Protocol as JSON-RPC 2.0, one message a line, requests
 * read from one descriptor (stdin) and answers written to another
 * (stdout); logs go to stderr only. One session (mcp_session.h, where the
 * methods are) for the process.
 *
 * Reading and writing never block the loop: input is read once per
 * readiness, answers are buffered and written as the output takes them.
 * Everything runs on the engine's loop.
 */
#ifndef TP_FRONT_MCP_H
#define TP_FRONT_MCP_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct {
    tp_engine_t *engine;
    struct event_base *base;
    int in_fd;            /* the client's messages (stdin) */
    int out_fd;           /* ours (stdout) */
    uint64_t max_message; /* a longer line is refused (-32600) and skipped */
    size_t window;        /* calls held at once before input waits (tp_engine_live) */
    const char *version;  /* serverInfo.version */
    uint64_t deadline_us; /* each call's deadline, from its start; 0: none */
    /*
     * The client closed its side (EOF on in_fd) or stopped reading ours:
     * the session is over. The command drains the engine, as for a signal.
     */
    void (*closed)(void *ctx);
    void *ctx;
} tp_mcp_opts_t;

typedef struct tp_mcp tp_mcp_t;

/* A front on o->engine (added to its fronts), reading from now on. NULL on failure, logged. */
tp_mcp_t *tp_mcp_new(const tp_mcp_opts_t *o);
/* The session's random part: call ids are "mcp-SESSION-N", the default job "mcp-SESSION". */
const char *tp_mcp_session(const tp_mcp_t *m);
/*
 * Stops reading (a signal, or the end of the input): calls already handed
 * over are answered as they end; nothing new is taken.
 */
void tp_mcp_drain(tp_mcp_t *m);
/*
 * After the loop has ended: writes what is still buffered, waiting for the
 * output at most timeout_us.
 */
void tp_mcp_finish(tp_mcp_t *m, uint64_t timeout_us);
/* Calls answered, and answered ok, for the summary at exit. */
void tp_mcp_counts(const tp_mcp_t *m, uint64_t *calls, uint64_t *ok);
/* Frees the front (after the engine: no answer may come any more). */
void tp_mcp_free(tp_mcp_t *m);

#endif
