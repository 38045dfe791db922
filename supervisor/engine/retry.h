/*
 * The retry policy: which outcomes are retried and how long to wait.
 *
 * One pure function decides, so the policy can be read and tested in one
 * place: the seed's call_tool loop, with jitter, retry-after and a deadline.
 */
#ifndef TP_RETRY_H
#define TP_RETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"
#include "taxonomy.h"

/* xorshift64*: per-process jitter source, seeded from getrandom(2). */
typedef struct {
    uint64_t s;
} tp_rng_t;

void tp_rng_seed(tp_rng_t *r, uint64_t seed); /* seed 0: from the kernel */
uint64_t tp_rng_next(tp_rng_t *r);

/*
 * The wait after failed attempt number `attempt` (1-based):
 * min(max, base * factor^(attempt-1)), then jittered per p->jitter.
 */
uint64_t tp_backoff_us(const tp_policy_t *p, uint32_t attempt, tp_rng_t *rng);

typedef struct {
    bool retry;
    uint64_t wait_us;    /* when retry: the backoff before the next attempt */
    const char *why_not; /* when not: "permanent", "attempts", "deadline", ... */
} tp_retry_t;

/*
 * Decides what follows failed attempt number `attempt` of kind `kind`.
 * retry_after_ms (-1: none) raises the wait to at least what the tool asked.
 * deadline_us (absolute, tp_now_us clock; 0: none) bounds attempts and
 * backoffs: no retry is scheduled that would start at or past it.
 */
tp_retry_t tp_retry_decide(const tp_policy_t *p, tp_kind_t kind, uint32_t attempt, int64_t retry_after_ms,
                           uint64_t now_us, uint64_t deadline_us, tp_rng_t *rng);

#endif
