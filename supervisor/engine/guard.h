/*
 * Guards: a job's stopping conditions (the seed's budgets and step caps).
 *
 * Checked before every call of a job starts and before every attempt. When
 * one fires, the call ends with its kind (class guard, never retried) and
 * the job's later calls are not dispatched: they end with the same kind.
 */
#ifndef TP_GUARD_H
#define TP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"
#include "taxonomy.h"
#include "usage.h"


/*
 * TP_KIND_OK when the job may go on; otherwise StepCapReached (max_steps),
 * BudgetExceeded (max_calls, max_cost) or DeadlineExceeded (max_wall), with
 * msg saying which. new_step: the check is for a call's first attempt.
 */
tp_kind_t tp_guard_check(const tp_guards_t *g, const tp_job_usage_t *u, bool new_step, uint64_t now, char *msg,
                         size_t cap);
/* Microseconds left of max_wall (UINT64_MAX when there is no such guard). */
uint64_t tp_guard_wall_left(const tp_guards_t *g, const tp_job_usage_t *u, uint64_t now);

#endif
