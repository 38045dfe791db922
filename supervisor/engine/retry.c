#include "retry.h"

#include <math.h>
#include <sys/random.h>

void tp_rng_seed(tp_rng_t *r, uint64_t seed)
{
    if (seed == 0 && getrandom(&seed, sizeof seed, 0) != sizeof seed)
        seed = 0x9e3779b97f4a7c15ull;
    r->s = seed ? seed : 1;
}

uint64_t tp_rng_next(tp_rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n]. */
static uint64_t rng_upto(tp_rng_t *r, uint64_t n)
{
    if (n == UINT64_MAX)
        return tp_rng_next(r);
    return tp_rng_next(r) % (n + 1);
}

uint64_t tp_backoff_us(const tp_policy_t *p, uint32_t attempt, tp_rng_t *rng)
{
    double d = (double)p->backoff_base_us * pow(p->backoff_factor, attempt > 0 ? attempt - 1 : 0);
    uint64_t delay = d >= (double)p->backoff_max_us ? p->backoff_max_us : (uint64_t)d;
    switch (p->jitter) {
    case TP_JITTER_NONE:
        return delay;
    case TP_JITTER_EQUAL:
        return delay / 2 + rng_upto(rng, delay - delay / 2);
    case TP_JITTER_FULL:
    default:
        return rng_upto(rng, delay);
    }
}

tp_retry_t tp_retry_decide(const tp_policy_t *p, tp_kind_t kind, uint32_t attempt, int64_t retry_after_ms,
                           uint64_t now_us, uint64_t deadline_us, tp_rng_t *rng)
{
    tp_retry_t r = {.retry = false, .wait_us = 0, .why_not = NULL};
    if (kind == TP_KIND_OK) {
        r.why_not = "ok";
        return r;
    }
    if (kind >= TP_KIND__COUNT || !(p->retry_on & (1ull << kind))) {
        r.why_not = tp_class_name(tp_kind_class(kind));
        return r;
    }
    if (attempt >= p->attempts) {
        r.why_not = "attempts";
        return r;
    }
    uint64_t wait = tp_backoff_us(p, attempt, rng);
    if (retry_after_ms >= 0 && p->max_retry_after_us && (uint64_t)retry_after_ms > p->max_retry_after_us / 1000u) {
        /* Asked to wait longer than the tool's ceiling: the call ends now, the wait it was told in its result. */
        r.why_not = "retry_after";
        return r;
    }
    if (retry_after_ms >= 0 && (uint64_t)retry_after_ms * 1000u > wait)
        wait = (uint64_t)retry_after_ms * 1000u;
    if (deadline_us != 0 && now_us + wait >= deadline_us) {
        r.why_not = "deadline";
        return r;
    }
    r.retry = true;
    r.wait_us = wait;
    return r;
}
