/*
 * The tool adapters: each runs one Call and fills the attempt's outcome
 * (outcome.h) for the worker loop.
 */
#ifndef TP_ADAPTER_H
#define TP_ADAPTER_H

#include <poll.h>
#include <signal.h>

#include "outcome.h"
#include "startboard.h"
#include "toolpool.pb-c.h"

/* One adapter: how the worker runs a call of its kind. */
typedef void (*tp_adapter_run_fn)(const Toolpool__Call *call, tp_outcome_t *o);
typedef struct {
    Toolpool__Adapter kind;
    const char *name;
    tp_adapter_run_fn run;
} tp_worker_adapter_t;

/* The adapter of kind, or NULL for one this worker does not know. */
const tp_worker_adapter_t *tp_adapter_find(Toolpool__Adapter kind);

/* exec adapter: fork+exec argv, args on stdin, answer on stdout. */
void tp_exec_run(const Toolpool__Call *call, tp_outcome_t *o);
/*
 * The worker's line of the start board (startboard.h), where the exec
 * adapter marks each tool's start for the supervisor's deadline thread;
 * NULL: none (the supervisor then counts the time from the call's send).
 */
extern tp_start_line_t *tp_exec_start_line;
/* plugin adapter: dlopen once per path, call tp_plugin_call_v1. */
void tp_plugin_run(const Toolpool__Call *call, tp_outcome_t *o);

/*
 * http adapter: one HTTP request a call (its HttpCall), many calls in
 * flight at once on the worker's kept connections. The worker's loop
 * starts each call (tp_http_start), waits in tp_http_wait for the
 * transfers and its call pipe together, and hears each call's answer, in
 * whatever order they end, through the function set with tp_http_set_done.
 */
typedef void (*tp_http_done_fn)(const Toolpool__Call *call, tp_outcome_t *o);
void tp_http_set_done(tp_http_done_fn fn);
/* Starts frame's call; the transfer owns frame from here (freed when it ends). Its answer may come at once. */
void tp_http_start(Toolpool__SupervisorFrame *frame);
/* Ends the call of seq now, answered Cancelled. false when no such call is in flight (it has answered). */
bool tp_http_cancel(uint64_t seq);
/* Calls in flight. */
int tp_http_in_flight(void);
/*
 * Makes the client now (libcurl loaded and started), when the registry has
 * http tools, so a worker's first http call does not pay for it. A failure
 * is left for that call to report.
 */
void tp_http_preload(void);
/*
 * Waits up to timeout_ms for the transfers, for fd to be readable
 * (*fd_ready; fd -1: none) and for the n descriptors of extra (their
 * revents set: the worker's MCP servers, from tp_mcp_poll_set, when MCP
 * calls run beside), then moves every transfer on, answering those that
 * ended. 0, or TP_EIO when curl fails.
 */
int tp_http_wait(int fd, int timeout_ms, bool *fd_ready, struct pollfd *extra, int n);
/* Drops every call in flight unanswered, and frees the client. */
void tp_http_shutdown(void);
/*
 * Where the mcp adapter sends, while call seq runs, a notification its MCP
 * server sent (method, and its params as JSON text): the worker's main
 * forwards it to the supervisor. Unset, notifications are dropped.
 */
typedef void (*tp_mcp_notice_fn)(uint64_t seq, const char *method, const char *params, size_t len);
void tp_mcp_set_notice(tp_mcp_notice_fn fn);
/*
 * mcp adapter: each call is a tools/call on the worker's session with the
 * tool's MCP server (started, and the handshake run, at the first call
 * that needs it), many in flight at once on one session, matched by their
 * JSON-RPC ids, as for http: tp_mcp_start, tp_mcp_cancel, tp_mcp_wait, and
 * each call's answer through the function set with tp_mcp_set_done.
 */
typedef void (*tp_mcp_done_fn)(const Toolpool__Call *call, tp_outcome_t *o);
void tp_mcp_set_done(tp_mcp_done_fn fn);
/* Starts frame's call (its server started first if need be); the call owns frame. Its answer may come at once. */
void tp_mcp_start(Toolpool__SupervisorFrame *frame);
/* Ends the call of seq now, answered Cancelled (the server told so). false when it is not in flight. */
bool tp_mcp_cancel(uint64_t seq);
/* Calls in flight. */
int tp_mcp_in_flight(void);
/*
 * Waits up to timeout_ms for the servers' output and for fd (*fd_ready;
 * -1: none), then takes every answer that came, ends the calls past their
 * deadline (Timeout, the server told to cancel) and replaces a server that
 * did not answer the ping after one, that ended, or that wrote what is not
 * JSON-RPC (its calls end WorkerCrashed). 0, or TP_EIO.
 */
int tp_mcp_wait(int fd, int timeout_ms, bool *fd_ready);
/*
 * tp_mcp_wait in two halves, for a wait that polls more (the http
 * adapter's, when http and MCP calls run side by side in one worker): the
 * turn's writes, then the servers' pipes into pf (room for
 * TP_MCP_POLL_MAX; returns how many) and *timeout_ms lowered to the
 * earliest deadline, ping or stuck stdin it must see; after the poll,
 * what the pipes said (pf's revents) taken as tp_mcp_wait takes it.
 */
#define TP_MCP_POLL_MAX 24
int tp_mcp_poll_set(struct pollfd *pf, int *timeout_ms);
void tp_mcp_poll_done(const struct pollfd *pf);
/*
 * tp_mcp_start queues its tools/call; this writes what each server has
 * queued, once a turn of the worker's loop (tp_mcp_wait calls it first).
 */
void tp_mcp_flush(void);
/* Ends every MCP session of the worker: each server's stdin closed, then killed. */
void tp_mcp_shutdown(void);
/* Set by the worker's SIGTERM handler: a call waiting on its MCP server cancels it. */
extern volatile sig_atomic_t tp_mcp_interrupt;

#endif
