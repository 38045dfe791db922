/*
 * tp_outcome_from_text, the reading of a tool's answer that the exec and
 * plugin adapters share: an error object becomes the failure it names, any
 * other JSON is the result written compact, other text becomes a JSON
 * string, and a numeric top-level "cost" is read either way.
 */
#include <stdio.h>
#include <string.h>

#include "outcome.h"
#include "testutil.h"

/* Whether b holds exactly want; when not, says what it holds. */
static int holds_at(const char *src, int line, const tp_buf_t *b, const char *want)
{
    size_t n = strlen(want), have = b->len - b->off;
    if (have == n && (n == 0 || memcmp(b->data + b->off, want, n) == 0))
        return 1;
    fprintf(stderr, "\n%s:%d:\n  got:  %.*s\n  want: %s\n", src, line, (int)have,
            have ? (const char *)b->data + b->off : "", want);
    return 0;
}
#define HOLDS(b, want) CU_ASSERT(holds_at(__FILE__, __LINE__, (b), (want)))

/* o, reset as before every attempt, then read from text (all of it but the NUL). */
static void read_text(tp_outcome_t *o, const char *text, bool read_error)
{
    tp_outcome_reset(o);
    tp_outcome_from_text(o, text, strlen(text), read_error);
}

static void test_error_object(void)
{
    tp_outcome_t o = {0};
    read_text(&o, "{\"error\": \"RateLimited\", \"message\": \"slow down\", \"retry_after_ms\": 1500}\n",
              true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "RateLimited");
    HOLDS(&o.message, "slow down");
    CU_ASSERT_EQUAL(o.retry_after_ms, 1500);
    HOLDS(&o.result, "");
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);

    /* No message: an empty one. A fractional retry_after_ms is cut to whole ms. */
    read_text(&o, "{\"error\":\"NotFound\",\"retry_after_ms\":250.9}", true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "NotFound");
    HOLDS(&o.message, "");
    CU_ASSERT_EQUAL(o.retry_after_ms, 250);

    /* A negative or non-numeric retry_after_ms is none. */
    read_text(&o, "{\"error\":\"ServerError\",\"message\":\"x\",\"retry_after_ms\":-5}", true);
    CU_ASSERT_STRING_EQUAL(o.kind, "ServerError");
    CU_ASSERT_EQUAL(o.retry_after_ms, -1);
    read_text(&o, "{\"error\":\"ServerError\",\"retry_after_ms\":\"10\"}", true);
    CU_ASSERT_EQUAL(o.retry_after_ms, -1);

    /* Not a failure without read_error, or when "error" is not a string: a result. */
    read_text(&o, "{\"error\": \"RateLimited\", \"message\": \"slow down\", \"retry_after_ms\": 1500}",
              false);
    CU_ASSERT_TRUE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "");
    CU_ASSERT_EQUAL(o.retry_after_ms, -1);
    HOLDS(&o.result, "{\"error\":\"RateLimited\",\"message\":\"slow down\",\"retry_after_ms\":1500}");
    read_text(&o, "{\"error\": {\"code\": 5}}", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "{\"error\":{\"code\":5}}");
    tp_outcome_free(&o);
}

static void test_result_compacted(void)
{
    tp_outcome_t o = {0};
    /* Keys keep their order; a real stays a real (-3e2 is -300.0). */
    read_text(&o,
              "{\n  \"rates\": [1, 2.5, -3e2],\n  \"ccy\" : \"EUR\",\n  \"ok\": true, \"none\": null\n}\n",
              true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "{\"rates\":[1,2.5,-300.0],\"ccy\":\"EUR\",\"ok\":true,\"none\":null}");
    HOLDS(&o.message, "");
    CU_ASSERT_EQUAL(o.retry_after_ms, -1);

    /* Any JSON value, not only an object. */
    read_text(&o, "  42 \n", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "42");
    read_text(&o, "[ ]", false);
    HOLDS(&o.result, "[]");
    read_text(&o, "\"quoted\"\n", false);
    HOLDS(&o.result, "\"quoted\"");
    read_text(&o, "null", false);
    HOLDS(&o.result, "null");
    tp_outcome_free(&o);
}

static void test_text_becomes_string(void)
{
    tp_outcome_t o = {0};
    read_text(&o, "hello world \t\r\n", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "\"hello world\"");

    /* Only trailing white space goes: leading and inner stay, escaped. */
    read_text(&o, "  say \"hi\"\nbye\n\n", false);
    HOLDS(&o.result, "\"  say \\\"hi\\\"\\nbye\"");
    /* Almost JSON is text. */
    read_text(&o, "{\"a\": 1\n", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "\"{\\\"a\\\": 1\"");
    /* Nothing, or only white space: the empty string. */
    read_text(&o, "", false);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "\"\"");
    read_text(&o, " \r\n", false);
    HOLDS(&o.result, "\"\"");
    tp_outcome_free(&o);
}

static void test_cost(void)
{
    tp_outcome_t o = {0};
    read_text(&o, "{\"answer\": 42, \"cost\": 0.25}", false);
    CU_ASSERT_TRUE(o.ok);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0.25, 0);
    HOLDS(&o.result, "{\"answer\":42,\"cost\":0.25}");
    read_text(&o, "{\"cost\": 3}", true);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 3, 0);

    /* A failure's cost is read too. */
    read_text(&o, "{\"error\": \"Timeout\", \"message\": \"slow\", \"cost\": 1.5}", true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "Timeout");
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 1.5, 0);

    /* Only a number, only at the top level of an object. */
    read_text(&o, "{\"cost\": \"0.5\"}", false);
    CU_ASSERT_TRUE(o.ok);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);
    read_text(&o, "{\"data\": {\"cost\": 7}}", false);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);
    read_text(&o, "[{\"cost\": 7}]", false);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);
    read_text(&o, "cost: 7", false);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);
    HOLDS(&o.result, "\"cost: 7\"");
    tp_outcome_free(&o);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("outcome", NULL, NULL);
    CU_add_test(s, "an error object is the failure it names", test_error_object);
    CU_add_test(s, "any other JSON is the result, compact", test_result_compacted);
    CU_add_test(s, "other text is a JSON string", test_text_becomes_string);
    CU_add_test(s, "a numeric top-level cost", test_cost);
    return tp_test_run();
}
