/*
 * What a job has used of its guards' budgets: counted by the engine,
 * checked by the guards (guard.h), kept in the job's checkpoint
 * (checkpoint.h) so that a rerun goes on counting where it was.
 */
#ifndef TP_USAGE_H
#define TP_USAGE_H

#include <stdint.h>

typedef struct {
    uint64_t steps;    /* calls of the job started */
    uint64_t calls;    /* attempts of the job's calls, every hop counted */
    double cost;       /* what the job's tools reported */
    uint64_t first_us; /* when the job's first call started (0: not yet) */
} tp_job_usage_t;

#endif
