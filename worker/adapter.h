/*
 * The tool adapters: each runs one Call and fills the attempt's outcome
 * (outcome.h) for the worker loop.
 */
#ifndef TP_ADAPTER_H
#define TP_ADAPTER_H

#include <signal.h>

#include "outcome.h"
#include "toolpool.pb-c.h"

/* exec adapter: fork+exec argv, args on stdin, answer on stdout. */
void tp_exec_run(const Toolpool__Call *call, tp_outcome_t *o);
/* plugin adapter: dlopen once per path, call tp_plugin_call_v1. */
void tp_plugin_run(const Toolpool__Call *call, tp_outcome_t *o);
/*
 * mcp adapter: tools/call on the worker's session with the tool's MCP
 * server, started (and the handshake run) at the first call that needs it.
 */
void tp_mcp_run(const Toolpool__Call *call, tp_outcome_t *o);
/*
 * Tells the supervisor, while call seq runs, of a notification its MCP
 * server sent (method, and its params as JSON text). One too large for a
 * frame is dropped.
 */
void tp_worker_notice(uint64_t seq, const char *method, const char *params, size_t len);
/* Ends every MCP session of the worker: each server's stdin closed, then killed. */
void tp_mcp_shutdown(void);
/* Set by the worker's SIGTERM handler: a call waiting on its MCP server cancels it. */
extern volatile sig_atomic_t tp_mcp_interrupt;

#endif
