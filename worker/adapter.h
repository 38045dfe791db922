/*
 * The tool adapters: each runs one Call and fills the attempt's outcome
 * (outcome.h) for the worker loop.
 */
#ifndef TP_ADAPTER_H
#define TP_ADAPTER_H

#include "outcome.h"
#include "toolpool.pb-c.h"

/* exec adapter: fork+exec argv, args on stdin, answer on stdout. */
void tp_exec_run(const Toolpool__Call *call, tp_outcome_t *o);
/* plugin adapter: dlopen once per path, call tp_plugin_call_v1. */
void tp_plugin_run(const Toolpool__Call *call, tp_outcome_t *o);

#endif
