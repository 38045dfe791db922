/*
 * What a front may read of a call the engine holds, between its submit and
 * its answer: the attempts it has made so far.
 *
 * engine.h tells a front a call's end and nothing between; an MCP client
 * that asked for progress wants to hear of each retry as it happens. Until
 * the engine tells its fronts of attempts itself (an on-attempt hook beside
 * feed and flush would do), this reads them from the call (call.h), in one
 * place, so no front reaches into the engine's call on its own.
 */
#ifndef TP_CALLINFO_H
#define TP_CALLINFO_H

#include <stdint.h>

#include "engine.h"

typedef struct {
    uint32_t entries;           /* trace entries so far: attempts ended, and hops skipped (circuit open) */
    uint32_t number;            /* the last entry's attempt number in its hop (0: a hop not run) */
    const char *tool;           /* its tool (the registry's string); NULL with no entry */
    const char *outcome;        /* its outcome: "ok" or the kind */
    uint64_t backoff_us;        /* the wait after it, before the next (0: none, or not yet known) */
    bool ended;                 /* the call has ended: its answer is on its way, and says it all */
} tp_call_info_t;

/* c: a handle tp_engine_submit gave, before its answer has been delivered. */
void tp_call_info(const tp_call_t *c, tp_call_info_t *out);

#endif
