#include "callinfo.h"

#include "call.h"

void tp_call_info(const tp_call_t *c, tp_call_info_t *out)
{
    /* The engine fills the call's record when it ends, and only then (engine.c, finish). */
    *out = (tp_call_info_t){.entries = (uint32_t)c->n_trace, .ended = c->res.has_id};
    if (c->n_trace == 0)
        return;
    const Toolpool__Attempt *last = c->trace[c->n_trace - 1];
    out->number = last->attempt;
    out->tool = last->tool;
    out->outcome = last->outcome;
    out->backoff_us = last->backoff_us;
}
