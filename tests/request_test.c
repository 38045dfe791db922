/*
 * Reading one call (supervisor/front/request.h), as every front does: what a
 * good call gives the engine, the words for a bad one (run's), the fast
 * and the jansson way giving the same call, and serve's optional id and
 * deadline.
 */
#include <CUnit/Basic.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "breaker.h"
#include "clock.h"
#include "json.h"
#include "request.h"
#include "testutil.h"

static tp_request_parser_t parser;

static tp_request_kind_t parse(const char *line, const char *where, unsigned flags, tp_request_t *req,
                               tp_request_bad_t *bad)
{
    memset(req, 0, sizeof *req);
    memset(bad, 0, sizeof *bad);
    return tp_request_parse_line(&parser, line, strlen(line), where, flags, req, bad);
}

static void test_blank(void)
{
    tp_request_t r;
    tp_request_bad_t b;
    CU_ASSERT_EQUAL(parse("", "line 1", 0, &r, &b), TP_REQUEST_BLANK);
    CU_ASSERT_EQUAL(parse(" \t\r", "line 1", 0, &r, &b), TP_REQUEST_BLANK);
    CU_ASSERT_EQUAL(parse("\n \n", NULL, 0, &r, &b), TP_REQUEST_BLANK);
}

/* A bad line's message, with run's "line N: " and without it (serve's 400). */
static void expect_bad(const char *line, const char *message, const char *id, const char *job, const char *tool)
{
    tp_request_t r;
    tp_request_bad_t b;
    char want[600];
    snprintf(want, sizeof want, "line 7: %s", message);
    CU_ASSERT_EQUAL_FATAL(parse(line, "line 7", 0, &r, &b), TP_REQUEST_BAD);
    CU_ASSERT_STRING_EQUAL(b.message, want);
    CU_ASSERT(id ? b.id && strcmp(b.id, id) == 0 : b.id == NULL);
    CU_ASSERT(job ? b.job && strcmp(b.job, job) == 0 : b.job == NULL);
    CU_ASSERT(tool ? b.tool && strcmp(b.tool, tool) == 0 : b.tool == NULL);
    CU_ASSERT_EQUAL_FATAL(parse(line, NULL, 0, &r, &b), TP_REQUEST_BAD);
    CU_ASSERT_STRING_EQUAL(b.message, message);
}

static void test_bad_calls(void)
{
    expect_bad("not json", "not valid JSON: '[' or '{' expected near 'not' (column 3)", NULL, NULL, NULL);
    expect_bad("[1, 2]", "a call must be a JSON object", NULL, NULL, NULL);
    expect_bad("{\"tool\": \"t\"}", "\"id\" must be a non-empty string", NULL, NULL, "t");
    expect_bad("{\"id\": \"\", \"tool\": \"t\"}", "\"id\" must be a non-empty string", NULL, NULL, "t");
    expect_bad("{\"id\": 5, \"tool\": \"t\"}", "\"id\" must be a non-empty string", NULL, NULL, "t");
    expect_bad("{\"id\": \"a\", \"job\": 1, \"tool\": \"t\"}", "\"job\" must be a non-empty string", "a", NULL, "t");
    expect_bad("{\"id\": \"a\", \"step\": -1, \"tool\": \"t\"}", "\"step\" must be a non-negative integer", "a", "a",
               "t");
    expect_bad("{\"id\": \"a\", \"step\": 1.5, \"tool\": \"t\"}", "\"step\" must be a non-negative integer", "a", "a",
               "t");
    expect_bad("{\"id\": \"a\", \"job\": \"j\"}", "\"tool\" must be a non-empty string", "a", "j", NULL);
    expect_bad("{\"id\": \"a\", \"tool\": \"\"}", "\"tool\" must be a non-empty string", "a", "a", "");
    expect_bad("{\"id\": \"a\", \"tool\": \"t\", \"args\": []}", "\"args\" must be a JSON object", "a", "a", "t");
    char msg[128];
    tp_request_too_long(msg, sizeof msg, "line 9", 1024);
    CU_ASSERT_STRING_EQUAL(msg, "line 9: longer than the 1024-byte limit");
    tp_request_too_long(msg, sizeof msg, NULL, 1024);
    CU_ASSERT_STRING_EQUAL(msg, "longer than the 1024-byte limit");
}

static void test_plain_call(void)
{
    tp_request_t r;
    tp_request_bad_t b;
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"id\": \"c1\", \"job\": \"j\", \"step\": 3, \"tool\": \"t\", \"args\": {\"b\": 1, \"a\": [true]}}",
              "line 2", 0, &r, &b),
        TP_REQUEST_CALL);
    CU_ASSERT_STRING_EQUAL(r.id, "c1");
    CU_ASSERT_STRING_EQUAL(r.job, "j");
    CU_ASSERT_STRING_EQUAL(r.tool, "t");
    CU_ASSERT_EQUAL(r.step, 3);
    CU_ASSERT_STRING_EQUAL(r.args, "{\"b\":1,\"a\":[true]}");
    CU_ASSERT_EQUAL(r.args_len, strlen(r.args));
    CU_ASSERT_PTR_NOT_NULL(r.canon);
    CU_ASSERT_STRING_EQUAL(r.where, "line 2");
    CU_ASSERT_EQUAL(r.deadline_us, 0);
    CU_ASSERT_FALSE(r.give_args);
    /* No job: the engine takes the id. No args: {}. */
    CU_ASSERT_EQUAL_FATAL(parse("{\"id\": \"c2\", \"tool\": \"t\"}", NULL, 0, &r, &b), TP_REQUEST_CALL);
    CU_ASSERT_PTR_NULL(r.job);
    CU_ASSERT_STRING_EQUAL(r.args, "{}");
}

/* The digest the engine files a call's args under. */
static void digest_of(const tp_request_t *r, tp_digest_t *d)
{
    if (r->canon)
        tp_digest_bytes(r->canon, r->canon_len, d);
    else
        tp_digest_args(r->jargs, d);
}

/*
 * The scanner and jansson give one call: a line with a "deadline" key goes
 * jansson's way when the flag asks for a deadline, the scanner's
 * otherwise; everything else is the same.
 */
static void test_both_ways_agree(void)
{
    static const char *const lines[] = {
        "{\"id\": \"a\", \"tool\": \"t\", \"deadline\": \"5s\", \"args\": {\"z\": \"deadline\", \"a\": {\"y\": 1, "
        "\"b\": [1, -2, \"x\"]}}}",
        "{\"args\": {\"deadline\": 0, \"k\": null}, \"tool\": \"t\", \"id\": \"b\", \"step\": 9, \"job\": \"j\", "
        "\"deadline\": \"1m\"}",
        "  {\"deadline\":\"2s\",\"id\":\"c\",\"tool\":\"t\",\"args\":{\"deadline\":{\"b\":{},\"a\":[]}}}  ",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        tp_request_t fast, slow;
        tp_request_bad_t b;
        CU_ASSERT_EQUAL_FATAL(parse(lines[i], NULL, 0, &fast, &b), TP_REQUEST_CALL);
        CU_ASSERT_PTR_NOT_NULL(fast.canon);
        CU_ASSERT_EQUAL(fast.deadline_us, 0);
        char *fast_args = strdup(fast.args), *fast_id = strdup(fast.id), *fast_job = fast.job ? strdup(fast.job) : NULL;
        uint64_t fast_step = fast.step;
        tp_digest_t d1, d2;
        digest_of(&fast, &d1);
        CU_ASSERT_EQUAL_FATAL(parse(lines[i], NULL, TP_REQUEST_DEADLINE, &slow, &b), TP_REQUEST_CALL);
        CU_ASSERT_PTR_NULL(slow.canon);
        CU_ASSERT_PTR_NOT_NULL(slow.jargs);
        CU_ASSERT(slow.deadline_us > 0);
        digest_of(&slow, &d2);
        CU_ASSERT_STRING_EQUAL(slow.args, fast_args);
        CU_ASSERT_STRING_EQUAL(slow.id, fast_id);
        CU_ASSERT(fast_job ? slow.job && strcmp(slow.job, fast_job) == 0 : slow.job == NULL);
        CU_ASSERT_EQUAL(slow.step, fast_step);
        CU_ASSERT_EQUAL(memcmp(d1.b, d2.b, TP_DIGEST_LEN), 0);
        free(fast_args);
        free(fast_id);
        free(fast_job);
    }
    /* The words only in the args (a key or a value there): the scanner's way, flags or not. */
    tp_request_t r;
    tp_request_bad_t b;
    CU_ASSERT_EQUAL_FATAL(parse("{\"id\": \"n\", \"tool\": \"t\", \"args\": {\"deadline\": \"traceparent\", "
                                "\"traceparent\": {\"deadline\": 1}}}",
                                NULL, TP_REQUEST_DEADLINE | TP_REQUEST_TRACE, &r, &b),
                          TP_REQUEST_CALL);
    CU_ASSERT_PTR_NOT_NULL(r.canon);
    CU_ASSERT_EQUAL(r.deadline_us, 0);
    CU_ASSERT_PTR_NULL(r.trace);
}

/* A traceparent key is read when the flag asks for trace context (jansson's way), and ignored otherwise. */
static void test_traceparent(void)
{
    static const char line[] = "{\"id\": \"t1\", \"tool\": \"t\", \"args\": {\"q\": 1}, "
                               "\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}";
    tp_request_t r;
    tp_request_bad_t b;
    CU_ASSERT_EQUAL_FATAL(parse(line, NULL, TP_REQUEST_TRACE, &r, &b), TP_REQUEST_CALL);
    CU_ASSERT_PTR_NULL(r.canon);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.trace);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.trace->traceparent);
    CU_ASSERT_STRING_EQUAL(r.trace->traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    CU_ASSERT_STRING_EQUAL(r.args, "{\"q\":1}");
    CU_ASSERT_EQUAL_FATAL(parse(line, NULL, 0, &r, &b), TP_REQUEST_CALL);
    CU_ASSERT_PTR_NOT_NULL(r.canon);
    CU_ASSERT_PTR_NULL(r.trace);
    CU_ASSERT_STRING_EQUAL(r.args, "{\"q\":1}");
}

static void test_serve_flags(void)
{
    tp_request_t r;
    tp_request_bad_t b;
    unsigned f = TP_REQUEST_ID_OPTIONAL | TP_REQUEST_DEADLINE;
    /* serve makes up a missing id, but an id given must be one. */
    CU_ASSERT_EQUAL_FATAL(parse("{\"tool\": \"t\", \"args\": {\"q\": 1}}", NULL, f, &r, &b), TP_REQUEST_CALL);
    CU_ASSERT_PTR_NULL(r.id);
    CU_ASSERT_STRING_EQUAL(r.args, "{\"q\":1}");
    CU_ASSERT_EQUAL(parse("{\"id\": \"\", \"tool\": \"t\"}", NULL, f, &r, &b), TP_REQUEST_BAD);
    CU_ASSERT_STRING_EQUAL(b.message, "\"id\" must be a non-empty string");
    CU_ASSERT_EQUAL(parse("{\"tool\": \"t\"}", NULL, 0, &r, &b), TP_REQUEST_BAD);
    /* A deadline: now plus it. */
    uint64_t t0 = tp_now_us();
    CU_ASSERT_EQUAL_FATAL(parse("{\"id\": \"d\", \"tool\": \"t\", \"deadline\": \"30s\"}", NULL, f, &r, &b),
                          TP_REQUEST_CALL);
    CU_ASSERT(r.deadline_us >= t0 + 30000000u && r.deadline_us <= tp_now_us() + 30000000u);
    CU_ASSERT_EQUAL(parse("{\"id\": \"d\", \"tool\": \"t\", \"deadline\": 30}", NULL, f, &r, &b), TP_REQUEST_BAD);
    CU_ASSERT_STRING_EQUAL(b.message, "\"deadline\" must be a duration string like \"30s\"");
    /* Without the flag, "deadline" is one more key run ignores. */
    CU_ASSERT_EQUAL_FATAL(parse("{\"id\": \"d\", \"tool\": \"t\", \"deadline\": 30}", NULL, 0, &r, &b),
                          TP_REQUEST_CALL);
    CU_ASSERT_EQUAL(r.deadline_us, 0);
}

static void test_give_args(void)
{
    tp_request_t r;
    tp_request_bad_t b;
    CU_ASSERT_EQUAL_FATAL(parse("{\"id\": \"g\", \"tool\": \"t\", \"args\": {\"x\": 1}}", NULL, 0, &r, &b),
                          TP_REQUEST_CALL);
    tp_request_give_args(&parser, &r);
    CU_ASSERT_TRUE(r.give_args);
    CU_ASSERT_PTR_NULL(parser.args);
    char *mine = r.args;
    /* The next parse leaves them alone: they are the engine's (here, ours). */
    CU_ASSERT_EQUAL(parse("{\"id\": \"h\", \"tool\": \"t\"}", NULL, 0, &r, &b), TP_REQUEST_CALL);
    CU_ASSERT_STRING_EQUAL(mine, "{\"x\":1}");
    free(mine);
}

/*
 * A model's call, in each provider's shape: the same call as toolpool's
 * line gives (the args, compact, and their digest), job and step beside
 * its fields; stringified arguments read, and named when they are bad.
 */
static void test_model_calls(void)
{
    static const char *const same[] = {
        "{\"id\": \"c\", \"tool\": \"t\", \"args\": {\"b\": [1], \"a\": \"x\"}, \"job\": \"j\", \"step\": 4}",
        "{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"t\", \"arguments\": "
        "\"{\\\"b\\\": [1], \\\"a\\\": \\\"x\\\"}\"}, \"job\": \"j\", \"step\": 4}",
        "{\"id\": \"c\", \"function\": {\"name\": \"t\", \"arguments\": {\"b\": [1], \"a\": \"x\"}}, \"job\": \"j\", "
        "\"step\": 4}",
        "{\"type\": \"function_call\", \"id\": \"fc_1\", \"call_id\": \"c\", \"name\": \"t\", \"arguments\": "
        "\"{\\\"b\\\":[1],\\\"a\\\":\\\"x\\\"}\", \"status\": \"completed\", \"job\": \"j\", \"step\": 4}",
        "{\"type\": \"tool_use\", \"id\": \"c\", \"name\": \"t\", \"input\": {\"b\": [1], \"a\": \"x\"}, \"job\": \"j\", "
        "\"step\": 4}",
    };
    tp_digest_t want, got;
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        tp_request_t r;
        tp_request_bad_t b;
        CU_ASSERT_EQUAL_FATAL(parse(same[i], "line 1", 0, &r, &b), TP_REQUEST_CALL);
        CU_ASSERT_STRING_EQUAL(r.id, "c");
        CU_ASSERT_STRING_EQUAL(r.tool, "t");
        CU_ASSERT_STRING_EQUAL(r.job, "j");
        CU_ASSERT_EQUAL(r.step, 4);
        CU_ASSERT_STRING_EQUAL(r.args, "{\"b\":[1],\"a\":\"x\"}");
        digest_of(&r, i == 0 ? &want : &got);
        if (i > 0)
            CU_ASSERT_EQUAL(memcmp(want.b, got.b, TP_DIGEST_LEN), 0);
    }
    expect_bad(
        "{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"t\", \"arguments\": \"{\\\"q\\\":\"}}",
        "\"function.arguments\" is not valid JSON: unexpected token near end of file (column 5)", "c", "c", "t");
    expect_bad("{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"t\", \"arguments\": \"\\\"s\\\"\"}",
               "\"arguments\" must hold a JSON object, not a string", "c", "c", "t");
    expect_bad("{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"t\", \"arguments\": \"\"}",
               "\"arguments\" is not valid JSON: unexpected token near end of file (column 0)", "c", "c", "t");
    expect_bad("{\"type\": \"function_call\", \"id\": \"fc\", \"name\": \"t\"}",
               "\"call_id\" must be a non-empty string", NULL, NULL, "t");
    expect_bad("{\"type\": \"tool_use\", \"id\": \"u\", \"name\": \"\", \"input\": {}}",
               "\"name\" must be a non-empty string", "u", "u", "");
    expect_bad("{\"type\": \"tool_use\", \"id\": \"u\", \"name\": \"t\", \"input\": []}",
               "\"input\" must be a JSON object", "u", "u", "t");
    expect_bad("{\"id\": \"c\", \"type\": \"custom\", \"function\": {\"name\": \"t\"}}",
               "\"type\" must be \"function\" in an OpenAI tool_calls item", "c", "c", "t");
    expect_bad("{\"id\": \"c\", \"function\": {\"name\": \"t\"}, \"args\": {}}",
               "a call in two shapes: \"function\" makes it an OpenAI tool_calls item, but \"args\" is a toolpool "
               "call's key (give each call in one shape)",
               NULL, NULL, NULL);
    expect_bad("{\"type\": \"tool_use\", \"id\": \"u\", \"name\": \"t\", \"function\": {}}",
               "a call in two shapes: \"type\" \"tool_use\" makes it an Anthropic tool_use block, but \"function\" is "
               "an OpenAI tool_calls item's key (give each call in one shape)",
               NULL, NULL, NULL);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("request", NULL, NULL);
    CU_add_test(s, "blank lines are not calls", test_blank);
    CU_add_test(s, "bad calls, in run's words", test_bad_calls);
    CU_add_test(s, "a plain call", test_plain_call);
    CU_add_test(s, "the scanner and jansson give one call", test_both_ways_agree);
    CU_add_test(s, "a call's traceparent, read only when asked for", test_traceparent);
    CU_add_test(s, "serve's optional id and deadline", test_serve_flags);
    CU_add_test(s, "args handed over without a copy", test_give_args);
    CU_add_test(s, "models' calls, in each provider's shape", test_model_calls);
    int rc = tp_test_run();
    tp_request_parser_free(&parser);
    return rc;
}
