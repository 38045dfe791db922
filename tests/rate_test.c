/*
 * A tool's "rate" (a token bucket of its attempts, in the supervisor):
 * attempts start no faster than calls per per, burst of them at once after
 * a quiet spell; a call waits for its token, it never fails for it; a tool
 * without a rate is not held back.
 */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "runutil.h"
#include "testutil.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The first attempts' starts of the calls c1..cN, in order. */
static void starts(const run_t *r, int n, double *out)
{
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i + 1);
        json_t *v = row(r, id);
        CU_ASSERT_PTR_NOT_NULL(v);
        CU_ASSERT_TRUE(v && json_is_true(json_object_get(v, "ok")));
        out[i] = v ? trace_ms(v, 0, "start_ms") : 0;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_double);
}

static char *calls(int n)
{
    static char text[4096];
    text[0] = 0;
    for (int i = 0; i < n; i++) {
        char line[96];
        snprintf(line, sizeof line, "{\"id\": \"c%d\", \"tool\": \"noop\", \"args\": {}}\n", i + 1);
        strcat(text, line);
    }
    return text;
}

/* 5 a second, one at a time: six calls at -j 2 start 200 ms apart, and all succeed. */
static void test_spacing(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"noop\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"rate\": {\"calls\": 5, \"per\": \"1s\"}}]}",
                        calls(6), 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    double s[6];
    starts(&r, 6, s);
    for (int i = 1; i < 6; i++) {
        if (s[i] - s[i - 1] < 190)
            fprintf(stderr, "\n  rate: start %d at %.1f ms, %.1f ms after the one before", i, s[i], s[i] - s[i - 1]);
        CU_ASSERT(s[i] - s[i - 1] >= 190);
    }
    CU_ASSERT(r.secs >= 0.95);
    CU_ASSERT(r.secs < 10);
    json_decref(r.rows);
}

/* A burst of 3: the first three start at once, the rest at the rate. */
static void test_burst(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"noop\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"rate\": {\"calls\": 5, \"per\": \"1s\", \"burst\": 3}}]}",
                        calls(6), 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    double s[6];
    starts(&r, 6, s);
    CU_ASSERT(s[2] - s[0] < 150);
    CU_ASSERT(s[3] - s[0] >= 150);
    CU_ASSERT(s[5] - s[3] >= 380);
    json_decref(r.rows);
}

/*
 * A call's deadline is kept while it waits for a token: three calls fail
 * at once (a burst of 3), each retry waits for the next token (10 s
 * away), and each ends at its 500 ms deadline with its failure, not when
 * the token comes.
 */
static void test_deadline_while_parked(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"noop\", \"exec\": [\"sh\", \"-c\", \"cat >/dev/null; echo "
                        "'{\\\"error\\\": \\\"ServerError\\\", \\\"message\\\": \\\"down\\\"}'\"],"
                        " \"deadline\": \"500ms\", \"backoff\": {\"base\": \"10ms\"},"
                        " \"rate\": {\"calls\": 1, \"per\": \"10s\", \"burst\": 3}}]}",
                        calls(3), 2, 0);
    CU_ASSERT_EQUAL(r.status, 1);
    for (int i = 1; i <= 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        json_t *v = row(&r, id);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "error")), "ServerError");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(v, "attempts")), 1);
    }
    if (r.secs >= 3)
        fprintf(stderr, "\n  rate: the parked retries ended after %.2f s, not at their 0.5 s deadline", r.secs);
    CU_ASSERT(r.secs < 3);
    json_decref(r.rows);
}

/* Without a rate, the same calls are not held back. */
static void test_no_rate(void)
{
    run_t r = run_calls(NULL, "{\"tools\": [" PLUGIN_TOOL("noop") "]}", calls(6), 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    double s[6];
    starts(&r, 6, s);
    CU_ASSERT(s[5] - s[0] < 150);
    json_decref(r.rows);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("rate", NULL, NULL);
    CU_add_test(s, "calls per period, one at a time", test_spacing);
    CU_add_test(s, "a burst, then the rate", test_burst);
    CU_add_test(s, "no rate: nothing held back", test_no_rate);
    CU_add_test(s, "a deadline is kept while a call waits for its token", test_deadline_while_parked);
    return tp_test_run();
}
