/*
 * One MCP session: the protocol behind every MCP front, whatever carries
 * its messages (stdio lines for `toolpool mcp`, HTTP POSTs for serve's
 * /mcp). JSON-RPC 2.0, revisions 2025-11-25 and 2025-06-18 (a session that
 * initialize opens) and 2026-07-28 (stateless: each request names its
 * revision and the client's capabilities in _meta), both at once:
 *
 *   initialize                 protocol version, capabilities, serverInfo (legacy)
 *   server/discover            every revision, capabilities, serverInfo (2026-07-28)
 *   ping, logging/setLevel     {} (legacy; 2026-07-28 has neither)
 *   tools/list                 the registry's tools, 100 a page, an opaque cursor
 *   tools/call                 one call through the engine: its answer as a CallToolResult
 *   tasks/get, tasks/result, tasks/list, tasks/cancel (2025-11-25), and
 *   tasks/get, tasks/cancel, tasks/update (2026-07-28's tasks extension):
 *                              a tools/call run as a task, recorded in the store
 *                              before its id is sent, its call under that id
 *   notifications/initialized, notifications/cancelled (the call is cancelled, and not answered)
 *
 * A 2026-07-28 result carries resultType, and serverInfo in its _meta; its
 * lists, ttlMs and cacheScope; its call is its own job unless it names one,
 * and hears log messages only at the _meta logLevel it asked for.
 *
 * A tool's failure, whatever it is, is a result with isError true and the
 * seed's tool message as its text, never a JSON-RPC error, so the model
 * reads it and decides; only a request the protocol itself refuses (bad
 * JSON, an unknown method or tool, bad params) is a JSON-RPC error.
 *
 * The session decides nothing about a call: it makes each tools/call a
 * call with an id of its own (mcp-SESSION-N, unique across sessions), a job
 * (the session, or the client's _meta.job) and the job's next step, and
 * renders the engine's answer.
 *
 * Messages go out through the transport's send hook, each tagged with what
 * the transport gave when it handed in the message that caused it: a
 * response (final) or a notification about that request before it. Over
 * stdio the tag means nothing; over HTTP it is the POST to answer.
 *
 * Everything runs on the engine's loop.
 */
#ifndef TP_MCP_SESSION_H
#define TP_MCP_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "mcpstdio.h" /* the revisions' names and 2026-07-28's _meta keys */

typedef struct tp_mcp_session tp_mcp_session_t;
typedef struct tp_mcp_catalog tp_mcp_catalog_t;

typedef struct {
    /*
     * A message out, without a line end. tag: as given to the take that
     * caused it. final: it is the response to that request (nothing more
     * about it follows); else a notification about it (progress, a log).
     * msg NULL (final): the request ends without a response (it was
     * cancelled, or the session closed). Returns 0, or -1 when it could not
     * be taken (out of memory).
     */
    int (*send)(void *ctx, void *tag, const char *msg, size_t len, bool final);
    void *ctx;
    /* Counts the session's calls whose client asked for progress, across sessions; may be NULL. */
    size_t *progress_count;
} tp_mcp_sink_t;

/* What a message handed in was. */
typedef enum {
    TP_MCP_TOOK_NOTIFICATION, /* a notification or a response: nothing is sent back */
    TP_MCP_TOOK_REQUEST,      /* a request: its response is sent, now or when its call ends */
    TP_MCP_TOOK_BAD,          /* not a message (a parse error, an invalid request): its error is sent, now */
} tp_mcp_took_t;

/* Every revision spoken, the newest first (server/discover, UnsupportedProtocolVersion). */
#define TP_MCP_SUPPORTED "[\"2026-07-28\",\"2025-11-25\",\"2025-06-18\"]"

/* JSON-RPC 2.0's error codes, the ones MCP uses. */
enum {
    TP_RPC_PARSE_ERROR = -32700,
    TP_RPC_INVALID_REQUEST = -32600,
    TP_RPC_METHOD_NOT_FOUND = -32601,
    TP_RPC_INVALID_PARAMS = -32602,
    TP_RPC_INTERNAL_ERROR = -32603,
    /* 2026-07-28's own */
    TP_RPC_HEADER_MISMATCH = -32020,
    TP_RPC_MISSING_CAPABILITY = -32021,
    TP_RPC_UNSUPPORTED_VERSION = -32022,
};

/* The registry's tools as tools/list lists them, rendered once for every session of a front. */
tp_mcp_catalog_t *tp_mcp_catalog_new(const tp_registry_t *reg);
void tp_mcp_catalog_free(tp_mcp_catalog_t *c);

/* Whether version is one this server speaks (an MCP-Protocol-Version header, say). */
bool tp_mcp_version_known(const char *version);
/* Whether it is 2026-07-28's: stateless, named in each request's _meta. */
bool tp_mcp_version_modern(const char *version);
/* Whether 2026-07-28 has method (what a stateless exchange answers other than -32601). */
bool tp_mcp_method_modern(const char *method);

/*
 * A new session on the engine; NULL when out of memory. version:
 * serverInfo.version; deadline_us: each call's deadline, from its start
 * (all its attempts and waits, so that the host hears its answer before
 * it gives up on the request); 0: none.
 */
tp_mcp_session_t *tp_mcp_session_new(tp_engine_t *e, const tp_mcp_catalog_t *tools, const char *version,
                                     uint64_t deadline_us, const tp_mcp_sink_t *sink);
/* The session's random part: call ids are "mcp-SESSION-N", the default job "mcp-SESSION". */
const char *tp_mcp_session_id(const tp_mcp_session_t *s);
/* Makes s serve 2026-07-28 requests alone, each on its own (serve's /mcp without a session); no initialize. */
void tp_mcp_session_stateless(tp_mcp_session_t *s);
/*
 * Cancels the tools/call taken with tag, if it still runs, as
 * notifications/cancelled would (2026-07-28 over HTTP: its client closed
 * the request's stream).
 */
void tp_mcp_session_cancel_tag(tp_mcp_session_t *s, void *tag, const char *why);
/* Whether initialize has been answered. */
bool tp_mcp_session_initialized(const tp_mcp_session_t *s);
/* Takes one message (its JSON text). tag goes with every message it causes. */
tp_mcp_took_t tp_mcp_session_take(tp_mcp_session_t *s, const char *text, size_t len, void *tag);
/*
 * The JSON-RPC error code of the response the last take sent at once (an
 * HTTP front gives 2026-07-28's status for it); 0: it sent a result, or
 * nothing yet.
 */
int tp_mcp_session_last_error(const tp_mcp_session_t *s);
/* Sends an error with a null id (a message that could not be read whole): a Parse error or Invalid Request. */
void tp_mcp_session_error(tp_mcp_session_t *s, void *tag, int code, const char *message);
/* Tells progress to the calls whose client asked for it: once a turn, after the engine has settled attempts. */
void tp_mcp_session_progress(tp_mcp_session_t *s);
/* Calls handed to the engine and not yet answered. */
size_t tp_mcp_session_live(const tp_mcp_session_t *s);
/* Calls answered, and answered ok. */
void tp_mcp_session_counts(const tp_mcp_session_t *s, uint64_t *calls, uint64_t *ok);
/*
 * Ends the session: nothing more is sent. Calls still running run on to
 * their end and are recorded; the session is freed once the last has been
 * answered (at once when none runs).
 */
void tp_mcp_session_close(tp_mcp_session_t *s);
/* Frees the session now, whatever runs: after the engine is freed (no answer may come any more). */
void tp_mcp_session_free(tp_mcp_session_t *s);

#endif
