/*
 * tp_outcome_from_text, the reading of a tool's answer that the exec and
 * plugin adapters share: an error object becomes the failure it names, any
 * other JSON is the result written compact, other text becomes a JSON
 * string, and a numeric top-level "cost" is read either way.
 */
#include <float.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "jsonscan.h"
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
    read_text(&o, "{\"error\": \"RateLimited\", \"message\": \"slow down\", \"retry_after_ms\": 1500}\n", true);
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
    /* ...and the message says it was ignored. */
    HOLDS(&o.message, " (its retry_after_ms is not a wait in milliseconds: ignored)");
    /* A wait past a year, however written, is a year: never a wrapped or tiny number. */
    const char *huge[] = {"99999999999999", "9223372036854775807", "1e300"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        char text[160];
        snprintf(text, sizeof text, "{\"error\":\"RateLimited\",\"retry_after_ms\":%s}", huge[i]);
        read_text(&o, text, true);
        CU_ASSERT_STRING_EQUAL(o.kind, "RateLimited");
        CU_ASSERT_EQUAL(o.retry_after_ms, 31536000000);
    }

    /* Not a failure without read_error, or when "error" is not a string: a result. */
    read_text(&o, "{\"error\": \"RateLimited\", \"message\": \"slow down\", \"retry_after_ms\": 1500}", false);
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
    read_text(&o, "{\n  \"rates\": [1, 2.5, -3e2],\n  \"ccy\" : \"EUR\",\n  \"ok\": true, \"none\": null\n}\n", true);
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

/*
 * JSON that jansson refuses to read (an integer past int64, a number past
 * a double's range, and the rest tp_json_check allows) is still JSON: an
 * error object is the failure it names, and a result keeps its text,
 * compact, every token as written.
 */
static void test_numbers_past_jansson(void)
{
    tp_outcome_t o = {0};
    read_text(&o, "{\"error\":\"NotFound\",\"order\":18446744073709551615}", true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "NotFound");
    HOLDS(&o.message, "");
    HOLDS(&o.result, "");
    read_text(&o,
              "{\"error\": \"RateLimited\", \"message\": \"slow down\", \"retry_after_ms\": 1200,"
              " \"cost\": 0.5, \"ids\": [1e400, -18446744073709551616]}\n",
              true);
    CU_ASSERT_STRING_EQUAL(o.kind, "RateLimited");
    HOLDS(&o.message, "slow down");
    CU_ASSERT_EQUAL(o.retry_after_ms, 1200);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 0.5, 0);
    HOLDS(&o.result, "");

    /* A result: its text compact, numbers and escapes as written, whitespace in strings kept. */
    read_text(&o,
              "{ \"order\" : 18446744073709551615,\n  \"x\": [1e400, -0, 1.0, 1E2, -1e-400],\n"
              "  \"s\": \" a\\u00e9 \\/ b \" }\n",
              true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "{\"order\":18446744073709551615,\"x\":[1e400,-0,1.0,1E2,-1e-400],\"s\":\" a\\u00e9 \\/ b \"}");
    /* Not read as a failure without read_error: the object is the result, as written. */
    read_text(&o, "{\"error\":\"NotFound\",\"order\":18446744073709551615}", false);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "{\"error\":\"NotFound\",\"order\":18446744073709551615}");
    /* Any value, not only an object. */
    read_text(&o, " 18446744073709551616 \n", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "18446744073709551616");
    read_text(&o, "[-9223372036854775809, \"\\ud800\"]", true);
    HOLDS(&o.result, "[-9223372036854775809,\"\\ud800\"]");

    /* The cost, as a double; one past a double's range is the largest. */
    read_text(&o, "{\"cost\": 18446744073709551616, \"n\": 1e400}", true);
    CU_ASSERT_TRUE(o.ok);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 18446744073709551616.0, 0);
    HOLDS(&o.result, "{\"cost\":18446744073709551616,\"n\":1e400}");
    read_text(&o, "{\"cost\": 1e400}", false);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, DBL_MAX, 0);

    /* retry_after_ms past int64 or a double is past any ceiling; below zero, not a wait. */
    read_text(&o, "{\"error\":\"RateLimited\",\"retry_after_ms\":18446744073709551616}", true);
    CU_ASSERT_EQUAL(o.retry_after_ms, 31536000000);
    read_text(&o, "{\"error\":\"RateLimited\",\"retry_after_ms\":1e400}", true);
    CU_ASSERT_EQUAL(o.retry_after_ms, 31536000000);
    read_text(&o, "{\"error\":\"RateLimited\",\"retry_after_ms\":-1e400}", true);
    CU_ASSERT_EQUAL(o.retry_after_ms, -1);
    HOLDS(&o.message, " (its retry_after_ms is not a wait in milliseconds: ignored)");

    /* The keys as jansson reads them: escaped, and the last of a repeated one. */
    read_text(&o, "{\"\\u0065rror\":\"NotFound\",\"n\":1e400}", true);
    CU_ASSERT_STRING_EQUAL(o.kind, "NotFound");
    read_text(&o, "{\"error\":\"NotFound\",\"error\":\"Timeout\",\"n\":1e400}", true);
    CU_ASSERT_STRING_EQUAL(o.kind, "Timeout");
    read_text(&o, "{\"error\":\"NotFound\",\"error\":null,\"n\":1e400}", true);
    CU_ASSERT_TRUE(o.ok);
    /* An "error" that is not a string is no failure, whatever jansson makes of it. */
    read_text(&o, "{\"error\":18446744073709551616}", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "{\"error\":18446744073709551616}");
    /* A kind with an escape jansson refuses (a lone surrogate) is its text as written. */
    read_text(&o, "{\"error\":\"Lost\\ud800\",\"message\":\"m\\udfff\"}", true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "Lost\\ud800");
    HOLDS(&o.message, "m\\udfff");

    /* Nesting past jansson's 2048 levels, within tp_json_check's 4096. */
    tp_buf_t deep = {0};
    tp_buf_puts(&deep, "{\"error\": \"ToolError\", \"deep\": ");
    for (int i = 0; i < 3000; i++)
        tp_buf_puts(&deep, "[");
    for (int i = 0; i < 3000; i++)
        tp_buf_puts(&deep, "]");
    tp_buf_puts(&deep, "}");
    tp_buf_append(&deep, "", 1);
    read_text(&o, (const char *)deep.data, true);
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "ToolError");
    tp_buf_free(&deep);

    /* What jansson reads is written as before: -0 is the integer 0, a real in its shortest form. */
    read_text(&o, "[-0, 1.0, 1E2, -0.0, 1.50]", true);
    HOLDS(&o.result, "[0,1.0,100.0,-0.0,1.5]");
    /* Past tp_json_check's grammar it is text, as before. */
    read_text(&o, "{\"n\": 18446744073709551616,}", true);
    CU_ASSERT_TRUE(o.ok);
    HOLDS(&o.result, "\"{\\\"n\\\": 18446744073709551616,}\"");
    tp_outcome_free(&o);
}

/*
 * An answer that came with a failure of its own (a non-zero exit, an HTTP
 * error status) is read only for an error object, which overrides it;
 * anything else leaves the outcome as it was.
 */
static void test_error_from_text(void)
{
    tp_outcome_t o = {0};
    tp_outcome_reset(&o);
    const char *rl = "{\"error\": \"RateLimited\", \"retry_after_ms\": 1200, \"cost\": 2}\n";
    CU_ASSERT_TRUE(tp_outcome_error_from_text(&o, rl, strlen(rl)));
    CU_ASSERT_FALSE(o.ok);
    CU_ASSERT_STRING_EQUAL(o.kind, "RateLimited");
    CU_ASSERT_EQUAL(o.retry_after_ms, 1200);
    CU_ASSERT_DOUBLE_EQUAL(o.cost, 2, 0);
    const char *big = "  {\"error\":\"NotFound\",\"message\":\"gone\",\"order\":18446744073709551615}";
    tp_outcome_reset(&o);
    CU_ASSERT_TRUE(tp_outcome_error_from_text(&o, big, strlen(big)));
    CU_ASSERT_STRING_EQUAL(o.kind, "NotFound");
    HOLDS(&o.message, "gone");

    const char *not_errors[] = {"",
                                "   ",
                                "exiting",
                                "{\"ok\": true, \"cost\": 3}",
                                "[{\"error\": \"X\"}]",
                                "{\"error\": 5}",
                                "{\"error\": \"X\"",
                                "\"{\\\"error\\\": \\\"X\\\"}\""};
    for (size_t i = 0; i < sizeof not_errors / sizeof not_errors[0]; i++) {
        tp_outcome_reset(&o);
        CU_ASSERT_FALSE(tp_outcome_error_from_text(&o, not_errors[i], strlen(not_errors[i])));
        CU_ASSERT_STRING_EQUAL(o.kind, "");
        CU_ASSERT_DOUBLE_EQUAL(o.cost, 0, 0);
        HOLDS(&o.result, "");
        HOLDS(&o.message, "");
    }
    tp_outcome_free(&o);
}

/* ---- the plain way against the jansson way ---- */

static unsigned rng_state = 20261201;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) % n;
}

/* A random string's body: ASCII, UTF-8, and escapes of every kind, some of them not the ones written back. */
static void gen_string(tp_buf_t *b)
{
    static const char *const pieces[] = {
        "a",       "Z",       " ",   "/",       "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\\n",     "\\t",
        "\\r",     "\\b",     "\\f", "\\\"",    "\\\\",        "\\u001f",      "\\u0001",          "\\u0000", "\\u000a",
        "\\u001F", "\\u00e9", "\\/", "\\ud83d", "\x7f",        "\xff",         "\xc0\x80"};
    tp_buf_append(b, "\"", 1);
    for (unsigned i = rnd(8); i > 0; i--)
        tp_buf_puts(b, pieces[rnd(sizeof pieces / sizeof pieces[0])]);
    tp_buf_append(b, "\"", 1);
}

static void gen_ws(tp_buf_t *b)
{
    static const char *const ws[] = {"", "", "", " ", "\n", "\t ", "\r\n"};
    tp_buf_puts(b, ws[rnd(7)]);
}

static void gen_value(tp_buf_t *b, int depth)
{
    static const char *const scalars[] = {"0",
                                          "-1",
                                          "42",
                                          "-0",
                                          "1.5",
                                          "1e3",
                                          "9223372036854775807",
                                          "9223372036854775808",
                                          "-9223372036854775808",
                                          "true",
                                          "false",
                                          "null",
                                          "007",
                                          "tru"};
    unsigned k = depth > 4 ? rnd(2) : rnd(4);
    gen_ws(b);
    if (k == 0) {
        tp_buf_puts(b, scalars[rnd(sizeof scalars / sizeof scalars[0])]);
    } else if (k == 1) {
        gen_string(b);
    } else if (k == 2) {
        tp_buf_append(b, "[", 1);
        for (unsigned i = rnd(4), first = 1; i > 0; i--, first = 0) {
            if (!first)
                tp_buf_append(b, ",", 1);
            gen_value(b, depth + 1);
        }
        tp_buf_append(b, "]", 1);
    } else {
        static const char *const keys[] = {"\"a\"",    "\"b\"",       "\"cost\"", "\"error\"",
                                           "\"k\\n\"", "\"\\u0000\"", "\"z\"",    "\"\xc3\xa9\""};
        tp_buf_append(b, "{", 1);
        for (unsigned i = rnd(4), first = 1; i > 0; i--, first = 0) {
            if (!first)
                tp_buf_append(b, ",", 1);
            gen_ws(b);
            tp_buf_puts(b, keys[rnd(sizeof keys / sizeof keys[0])]);
            gen_ws(b);
            tp_buf_append(b, ":", 1);
            gen_value(b, depth + 1);
        }
        tp_buf_append(b, "}", 1);
    }
    gen_ws(b);
}

/*
 * Most answers are plain JSON and take the way without a tree; each must
 * come out byte for byte as jansson's reading and tp_json_write would make
 * it (the fuzz target jsonscan does the same over arbitrary bytes). Half a
 * million generated answers, some of them damaged.
 */
static void test_plain_way(void)
{
    tp_outcome_t o = {0};
    tp_buf_t text = {0}, slow = {0};
    int plain = 0, checked = 0, refused = 0;
    for (int i = 0; i < 500000; i++) {
        tp_buf_reset(&text);
        gen_value(&text, 0);
        if (rnd(10) == 0 && text.len > 0)
            text.data[rnd((unsigned)text.len)] = (uint8_t) "\"{}[],:\\ x"[rnd(10)];
        tp_buf_t probe = {0};
        int rc = tp_json_compact_plain((const char *)text.data, text.len, &probe);
        json_t *v = json_loadb((const char *)text.data, text.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (rc == 1) {
            plain++;
            tp_buf_reset(&slow);
            CU_ASSERT_FATAL(v != NULL);
            CU_ASSERT_FATAL(tp_json_write(&slow, v, 0) == 0);
            if (slow.len != probe.len || memcmp(slow.data, probe.data, slow.len) != 0) {
                fprintf(stderr, "\n  text: %.*s\n  plain: %.*s\n  jansson: %.*s\n", (int)text.len, text.data,
                        (int)probe.len, probe.data, (int)slow.len, slow.data);
                CU_FAIL_FATAL("the plain way and the jansson way differ");
            }
        } else {
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            CU_ASSERT_EQUAL_FATAL(probe.len, 0);
        }
        if (v && !json_is_object(v)) {
            /* Whichever way it goes, the adapters' reading gives jansson's bytes. */
            tp_outcome_reset(&o);
            tp_outcome_from_text(&o, (const char *)text.data, text.len, true);
            tp_buf_reset(&slow);
            tp_json_write(&slow, v, 0);
            CU_ASSERT_TRUE(o.ok);
            CU_ASSERT_TRUE(o.result.len == slow.len && memcmp(o.result.data, slow.data, slow.len) == 0);
            checked++;
        } else if (v == NULL && tp_json_check(text.data, text.len, NULL) == 0) {
            /*
             * JSON that jansson refuses (an integer past int64, a lone
             * surrogate, \u0000 in a key): the result is the text compact,
             * or the failure its "error" names, as jansson reads the
             * error when it may read every integer as a real.
             */
            tp_outcome_reset(&o);
            tp_outcome_from_text(&o, (const char *)text.data, text.len, true);
            json_t *lenient = json_loadb((const char *)text.data, text.len,
                                         JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
            const char *kind = json_string_value(json_object_get(lenient, "error"));
            tp_buf_reset(&slow);
            CU_ASSERT_FATAL(tp_json_compact(text.data, text.len, &slow) == 0);
            bool kept = o.ok && o.result.len == slow.len && memcmp(o.result.data, slow.data, slow.len) == 0;
            CU_ASSERT(kind != NULL ? !o.ok && strcmp(o.kind, kind) == 0 : true);
            CU_ASSERT(kept || (!o.ok && o.result.len == 0));
            json_decref(lenient);
            refused++;
        }
        json_decref(v);
        tp_buf_free(&probe);
    }
    fprintf(stderr, "\n    %d of 500,000 plain; %d read through the adapters' way; %d JSON that jansson refuses\n",
            plain, checked, refused);
    CU_ASSERT(plain > 50000);
    CU_ASSERT(refused > 10000);
    tp_buf_free(&text);
    tp_buf_free(&slow);
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
    CU_add_test(s, "JSON that jansson refuses keeps its error and its text", test_numbers_past_jansson);
    CU_add_test(s, "an error object beside a failure of the answer's own", test_error_from_text);
    CU_add_test(s, "the plain way gives the jansson way's bytes", test_plain_way);
    return tp_test_run();
}
