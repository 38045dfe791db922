/*
 * The classification table, the exit-status mapping, and the retry policy:
 * which kinds retry, how long the backoff is, how jitter spreads it, and
 * how retry-after and the deadline bound it.
 */
#include <string.h>

#include "registry.h"
#include "retry.h"
#include "taxonomy.h"
#include "testutil.h"

static void test_classes(void)
{
    static const struct {
        const char *kind;
        tp_class_t klass;
        /* clang-format off */
    } rows[] = {
        {"Timeout", TP_CLASS_TRANSIENT},          {"RateLimited", TP_CLASS_TRANSIENT},
        {"ServerError", TP_CLASS_TRANSIENT},      {"WorkerCrashed", TP_CLASS_TRANSIENT},
        {"PermissionDenied", TP_CLASS_PERMANENT}, {"NotFound", TP_CLASS_PERMANENT},
        {"BadArguments", TP_CLASS_PERMANENT},     {"ToolError", TP_CLASS_PERMANENT},
        {"OutputTooLarge", TP_CLASS_PERMANENT},   {"OutOfMemory", TP_CLASS_PERMANENT},
        {"ResourceLimit", TP_CLASS_PERMANENT},    {"InvalidArguments", TP_CLASS_MALFORMED},
        {"UnknownTool", TP_CLASS_MALFORMED},      {"InvalidRequest", TP_CLASS_MALFORMED},
        {"BudgetExceeded", TP_CLASS_GUARD},       {"StepCapReached", TP_CLASS_GUARD},
        {"CircuitOpen", TP_CLASS_GUARD},          {"DeadlineExceeded", TP_CLASS_GUARD},
        {"Cancelled", TP_CLASS_GUARD},            {"Interrupted", TP_CLASS_GUARD},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        tp_kind_t k = tp_kind_from_name(rows[i].kind);
        CU_ASSERT_NOT_EQUAL(k, TP_KIND_OTHER);
        CU_ASSERT_STRING_EQUAL(tp_kind_name(k), rows[i].kind);
        CU_ASSERT_EQUAL(tp_kind_class(k), rows[i].klass);
        CU_ASSERT_EQUAL(tp_class_retryable(tp_kind_class(k)), rows[i].klass == TP_CLASS_TRANSIENT);
    }
    /* A kind a tool invents is permanent: never retried blindly. */
    CU_ASSERT_EQUAL(tp_kind_from_name("QuotaGone"), TP_KIND_OTHER);
    CU_ASSERT_EQUAL(tp_kind_class(TP_KIND_OTHER), TP_CLASS_PERMANENT);
    CU_ASSERT_EQUAL(tp_kind_from_name(NULL), TP_KIND_OTHER);
    CU_ASSERT_STRING_EQUAL(tp_class_name(TP_CLASS_GUARD), "guard");
}

static void test_exit_mapping(void)
{
    CU_ASSERT_EQUAL(tp_kind_from_exit(0), TP_KIND_OK);
    CU_ASSERT_EQUAL(tp_kind_from_exit(75), TP_KIND_SERVER_ERROR);
    CU_ASSERT_EQUAL(tp_kind_from_exit(77), TP_KIND_PERMISSION_DENIED);
    CU_ASSERT_EQUAL(tp_kind_from_exit(64), TP_KIND_BAD_ARGUMENTS);
    CU_ASSERT_EQUAL(tp_kind_from_exit(65), TP_KIND_BAD_ARGUMENTS);
    CU_ASSERT_EQUAL(tp_kind_from_exit(1), TP_KIND_TOOL_ERROR);
    CU_ASSERT_EQUAL(tp_kind_from_exit(127), TP_KIND_TOOL_ERROR);
}

static tp_policy_t seed_policy(tp_jitter_t jitter)
{
    tp_policy_t p;
    tp_policy_init(&p);
    p.attempts = 3;
    p.backoff_base_us = 500000;
    p.backoff_factor = 2;
    p.backoff_max_us = 30000000;
    p.jitter = jitter;
    return p;
}

/* jitter "none" is the seed's exact schedule: 0.5s, then 1s. */
static void test_backoff_none(void)
{
    tp_policy_t p = seed_policy(TP_JITTER_NONE);
    tp_rng_t rng;
    tp_rng_seed(&rng, 1);
    CU_ASSERT_EQUAL(tp_backoff_us(&p, 1, &rng), 500000);
    CU_ASSERT_EQUAL(tp_backoff_us(&p, 2, &rng), 1000000);
    CU_ASSERT_EQUAL(tp_backoff_us(&p, 3, &rng), 2000000);
    /* the cap */
    p.backoff_max_us = 1500000;
    CU_ASSERT_EQUAL(tp_backoff_us(&p, 3, &rng), 1500000);
    CU_ASSERT_EQUAL(tp_backoff_us(&p, 60, &rng), 1500000);
}

/* Full jitter: uniform in [0, delay]; it must actually spread. */
static void test_backoff_full_jitter(void)
{
    tp_policy_t p = seed_policy(TP_JITTER_FULL);
    tp_rng_t rng;
    tp_rng_seed(&rng, 12345);
    enum { N = 20000 };
    uint64_t lo = UINT64_MAX, hi = 0;
    double sum = 0;
    int buckets[10] = {0};
    for (int i = 0; i < N; i++) {
        uint64_t w = tp_backoff_us(&p, 2, &rng); /* delay 1s */
        CU_ASSERT_FATAL(w <= 1000000);
        lo = w < lo ? w : lo;
        hi = w > hi ? w : hi;
        sum += (double)w;
        buckets[w * 10 / 1000001]++;
    }
    CU_ASSERT(lo < 10000);
    CU_ASSERT(hi > 990000);
    double mean = sum / N;
    CU_ASSERT(mean > 480000 && mean < 520000);
    for (int k = 0; k < 10; k++)
        CU_ASSERT(buckets[k] > N / 10 * 8 / 10 && buckets[k] < N / 10 * 12 / 10);
    /* Two processes seeded from the kernel do not retry in lockstep. */
    tp_rng_t a, b;
    tp_rng_seed(&a, 0);
    tp_rng_seed(&b, 0);
    CU_ASSERT_NOT_EQUAL(tp_rng_next(&a), tp_rng_next(&b));
}

static void test_backoff_equal_jitter(void)
{
    tp_policy_t p = seed_policy(TP_JITTER_EQUAL);
    tp_rng_t rng;
    tp_rng_seed(&rng, 99);
    for (int i = 0; i < 5000; i++) {
        uint64_t w = tp_backoff_us(&p, 1, &rng);
        CU_ASSERT_FATAL(w >= 250000 && w <= 500000);
    }
}

static void test_retry_decisions(void)
{
    tp_policy_t p = seed_policy(TP_JITTER_NONE);
    tp_rng_t rng;
    tp_rng_seed(&rng, 7);
    /* transient: retried until attempts run out */
    tp_retry_t r = tp_retry_decide(&p, TP_KIND_TIMEOUT, 1, -1, 0, 0, &rng);
    CU_ASSERT(r.retry);
    CU_ASSERT_EQUAL(r.wait_us, 500000);
    r = tp_retry_decide(&p, TP_KIND_TIMEOUT, 2, -1, 0, 0, &rng);
    CU_ASSERT(r.retry);
    CU_ASSERT_EQUAL(r.wait_us, 1000000);
    r = tp_retry_decide(&p, TP_KIND_TIMEOUT, 3, -1, 0, 0, &rng);
    CU_ASSERT(!r.retry);
    CU_ASSERT_STRING_EQUAL(r.why_not, "attempts");
    /* permanent, malformed, guard and unknown kinds: one attempt */
    tp_kind_t never[] = {
        TP_KIND_PERMISSION_DENIED, TP_KIND_NOT_FOUND,      TP_KIND_BAD_ARGUMENTS,     TP_KIND_TOOL_ERROR,
        TP_KIND_OUT_OF_MEMORY,     TP_KIND_RESOURCE_LIMIT, TP_KIND_INVALID_ARGUMENTS, TP_KIND_CIRCUIT_OPEN,
        TP_KIND_CANCELLED,         TP_KIND_OTHER};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        CU_ASSERT(!tp_retry_decide(&p, never[i], 1, -1, 0, 0, &rng).retry);
    /* every transient kind retries by default */
    tp_kind_t always[] = {TP_KIND_TIMEOUT, TP_KIND_RATE_LIMITED, TP_KIND_SERVER_ERROR, TP_KIND_WORKER_CRASHED};
    for (size_t i = 0; i < 4; i++)
        CU_ASSERT(tp_retry_decide(&p, always[i], 1, -1, 0, 0, &rng).retry);
    /* retry_on narrows it */
    p.retry_on = 1ull << TP_KIND_RATE_LIMITED;
    CU_ASSERT(!tp_retry_decide(&p, TP_KIND_TIMEOUT, 1, -1, 0, 0, &rng).retry);
    CU_ASSERT(tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, -1, 0, 0, &rng).retry);
}

static void test_retry_after_and_deadline(void)
{
    tp_policy_t p = seed_policy(TP_JITTER_NONE);
    tp_rng_t rng;
    tp_rng_seed(&rng, 7);
    /* retry-after longer than the backoff wins; shorter does not shorten it */
    tp_retry_t r = tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, 2000, 0, 0, &rng);
    CU_ASSERT(r.retry);
    CU_ASSERT_EQUAL(r.wait_us, 2000000);
    r = tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, 10, 0, 0, &rng);
    CU_ASSERT_EQUAL(r.wait_us, 500000);
    /* no retry that would start at or past the deadline */
    r = tp_retry_decide(&p, TP_KIND_TIMEOUT, 1, -1, 1000000, 1400000, &rng);
    CU_ASSERT(!r.retry);
    CU_ASSERT_STRING_EQUAL(r.why_not, "deadline");
    r = tp_retry_decide(&p, TP_KIND_TIMEOUT, 1, -1, 1000000, 1600000, &rng);
    CU_ASSERT(r.retry);
    r = tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, 5000, 1000000, 3000000, &rng);
    CU_ASSERT(!r.retry);
    /* a wait past max_retry_after (1 h by default) ends the call at once, however long, with or without a deadline */
    CU_ASSERT_EQUAL(p.max_retry_after_us, 3600000000u);
    r = tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, 3600000, 0, 0, &rng);
    CU_ASSERT(r.retry);
    CU_ASSERT_EQUAL(r.wait_us, 3600000000u);
    int64_t huge[] = {3600001, 99999999999999, 31536000000, INT64_MAX};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        r = tp_retry_decide(&p, TP_KIND_RATE_LIMITED, 1, huge[i], 0, 0, &rng);
        CU_ASSERT(!r.retry);
        CU_ASSERT_STRING_EQUAL(r.why_not, "retry_after");
    }
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("taxonomy", NULL, NULL);
    CU_add_test(s, "classification table", test_classes);
    CU_add_test(s, "exit status mapping", test_exit_mapping);
    s = CU_add_suite("retry", NULL, NULL);
    CU_add_test(s, "backoff without jitter is the seed's", test_backoff_none);
    CU_add_test(s, "full jitter bounds and spread", test_backoff_full_jitter);
    CU_add_test(s, "equal jitter bounds", test_backoff_equal_jitter);
    CU_add_test(s, "which kinds retry", test_retry_decisions);
    CU_add_test(s, "retry-after and deadline", test_retry_after_and_deadline);
    return tp_test_run();
}
