#include "guard.h"

#include <stdio.h>

tp_kind_t tp_guard_check(const tp_guards_t *g, const tp_job_usage_t *u, bool new_step, uint64_t now, char *msg,
                         size_t cap)
{
    if (new_step && g->max_steps && u->steps >= g->max_steps) {
        snprintf(msg, cap, "the job reached max_steps (%llu)", (unsigned long long)g->max_steps);
        return TP_KIND_STEP_CAP_REACHED;
    }
    if (g->max_calls && u->calls >= g->max_calls) {
        snprintf(msg, cap, "the job used its max_calls (%llu tool calls)", (unsigned long long)g->max_calls);
        return TP_KIND_BUDGET_EXCEEDED;
    }
    if (g->max_cost > 0 && u->cost >= g->max_cost) {
        snprintf(msg, cap, "the job spent its max_cost (%g of %g)", u->cost, g->max_cost);
        return TP_KIND_BUDGET_EXCEEDED;
    }
    if (g->max_wall_us && u->first_us && now - u->first_us >= g->max_wall_us) {
        snprintf(msg, cap, "the job ran past its max_wall (%.3gs)", (double)g->max_wall_us / 1e6);
        return TP_KIND_DEADLINE_EXCEEDED;
    }
    return TP_KIND_OK;
}

uint64_t tp_guard_wall_left(const tp_guards_t *g, const tp_job_usage_t *u, uint64_t now)
{
    if (!g->max_wall_us || !u->first_us)
        return g->max_wall_us ? g->max_wall_us : UINT64_MAX;
    uint64_t used = now - u->first_us;
    return used >= g->max_wall_us ? 0 : g->max_wall_us - used;
}
