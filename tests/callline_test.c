/*
 * The fast way in for call lines (supervisor/front/callline.h) against jansson's:
 * whatever line the scanner takes, jansson must read the same call from it,
 * with byte-identical compact and canonical args; what it declines, the
 * jansson way handles.
 */
#include <CUnit/Basic.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callline.h"
#include "json.h"

static tp_buf_t strs, canon;

/* The call jansson reads from line, as the scanner reports it; false if it is not a plain call. */
static bool agree_with_jansson(const char *line, size_t len, const tp_call_line_t *c)
{
    json_t *v = json_loadb(line, len, 0, NULL);
    bool same = v != NULL;
    if (same) {
        json_t *args = json_object_get(v, "args"), *job = json_object_get(v, "job"), *step = json_object_get(v, "step");
        json_t *empty = args ? NULL : json_object();
        tp_buf_t compact = {0}, canonical = {0};
        tp_json_write(&compact, args ? args : empty, 0);
        tp_json_write(&canonical, args ? args : empty, TP_JSON_CANONICAL);
        same = strcmp(json_string_value(json_object_get(v, "id")), c->id) == 0 &&
               strcmp(json_string_value(json_object_get(v, "tool")), c->tool) == 0 &&
               (job ? c->job && strcmp(json_string_value(job), c->job) == 0 && c->job_len == strlen(c->job)
                    : c->job == NULL) &&
               (step ? c->has_step && (uint64_t)json_integer_value(step) == c->step : !c->has_step) &&
               compact.len == c->args_len && memcmp(compact.data, c->args, c->args_len) == 0 &&
               c->args[c->args_len] == 0 && canonical.len == c->canon_len &&
               memcmp(canonical.data, c->canon, c->canon_len) == 0;
        if (!same)
            fprintf(stderr, "\n  line %s\n  compact %.*s / %s\n  canonical %.*s / %.*s\n", line, (int)compact.len,
                    (const char *)compact.data, c->args, (int)canonical.len, (const char *)canonical.data,
                    (int)c->canon_len, c->canon);
        tp_buf_free(&compact);
        tp_buf_free(&canonical);
        json_decref(empty);
    }
    json_decref(v);
    return same;
}

static int scan(const char *line, tp_call_line_t *c)
{
    return tp_call_line_scan(line, strlen(line), c, &strs, &canon);
}

static void test_plain_lines(void)
{
    static const char *lines[] = {
        "{\"id\":\"c1\",\"tool\":\"noop\",\"args\":{}}",
        "{\"id\":\"c1\",\"tool\":\"noop\"}",
        "  { \"tool\" : \"t\" , \"id\" : \"x\" , \"job\" : \"j\" , \"step\" : 7 , \"args\" : { } }\r",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"q\":\"x\",\"limit\":5,\"deep\":{\"z\":[1,{\"b\":null,\"a\":true}],\"a\":false}}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"b\":1,\"ba\":2,\"a\":3,\"\":4}}",
        "{\"id\":\"é\",\"tool\":\"t\",\"args\":{\"q\":\"naïve 日本 😀 / \x7f\",\"n\":-9223372036854775808,\"m\":9223372036854775807}}",
        "{\"id\":\"a\",\"extra\":[1,2,{\"k\":\"v\",\"k\":\"w\"}],\"tool\":\"t\",\"step\":0,\"args\":{\"x\":[[],[[]],{}]}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"s\":\"a,b}c]d\\\"\"}}", /* an escape: not plain */
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        tp_call_line_t c;
        int rc = scan(lines[i], &c);
        if (i == sizeof lines / sizeof *lines - 1) {
            CU_ASSERT_EQUAL(rc, 0);
            continue;
        }
        CU_ASSERT_EQUAL(rc, 1);
        if (rc == 1) {
            CU_ASSERT(agree_with_jansson(lines[i], strlen(lines[i]), &c));
            free(c.args);
        }
    }
    tp_call_line_t c;
    CU_ASSERT_EQUAL_FATAL(scan(lines[3], &c), 1);
    CU_ASSERT_EQUAL(strncmp(c.canon,
                            "{\"deep\":{\"a\":false,\"z\":[1,{\"a\":true,\"b\":null}]},\"limit\":5,\"q\":\"x\"}",
                            c.canon_len),
                    0);
    free(c.args);
    CU_ASSERT_EQUAL_FATAL(scan(lines[0], &c), 1);
    CU_ASSERT_PTR_EQUAL(c.canon, c.args); /* sorted already: one copy */
    free(c.args);
}

static void test_declined_lines(void)
{
    static const char *lines[] = {
        "",
        "[]",
        "{}",
        "{\"id\":\"a\"}",
        "{\"tool\":\"t\"}",
        "{\"id\":\"\",\"tool\":\"t\"}",
        "{\"id\":\"a\",\"tool\":\"\"}",
        "{\"id\":\"a\",\"tool\":\"t\",\"job\":\"\"}",
        "{\"id\":\"a\",\"tool\":\"t\",\"job\":3}",
        "{\"id\":\"a\",\"tool\":\"t\",\"step\":-1}",
        "{\"id\":\"a\",\"tool\":\"t\",\"step\":1.0}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":[]}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":null}",
        "{\"id\":\"a\",\"tool\":\"t\",\"id\":\"b\"}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":1,\"j\":2,\"k\":3}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":1,\"k\":1}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":1.5}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":1e3}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":-0}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":01}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":9223372036854775808}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":-9223372036854775809}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":\"\\n\"}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":\"\t\"}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":\"\xc3\"}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":\"\xed\xa0\x80\"}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":tru}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":1,}}",
        "{\"id\":\"a\",\"tool\":\"t\",\"args\":{\"k\":[1,]}}",
        "{\"id\":\"a\",\"tool\":\"t\"} x",
        "{\"id\":\"a\",\"tool\":\"t\"",
        "{\"id\":\"a\" \"tool\":\"t\"}",
        "{\"id\":\"a\",\"tool\":\"t\",\"type\":\"tool_use\"}", /* maybe a model's call: request.c tells */
        "{\"id\":\"a\",\"tool\":\"t\",\"function\":{}}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        tp_call_line_t c;
        int rc = scan(lines[i], &c);
        if (rc != 0)
            fprintf(stderr, "\n  taken: %s\n", lines[i]);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NULL(c.args);
    }
    /* Deeper than the scanner goes: jansson's way. */
    tp_buf_t deep = {0};
    tp_buf_puts(&deep, "{\"id\":\"a\",\"tool\":\"t\",\"args\":");
    for (int i = 0; i < 100; i++)
        tp_buf_puts(&deep, "{\"a\":");
    tp_buf_puts(&deep, "1");
    for (int i = 0; i < 101; i++)
        tp_buf_puts(&deep, "}");
    tp_call_line_t c;
    CU_ASSERT_EQUAL(tp_call_line_scan((const char *)deep.data, deep.len, &c, &strs, &canon), 0);
    tp_buf_free(&deep);
}

/* ---- random lines ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void ws(tp_buf_t *b)
{
    static const char *pick[] = {"", "", "", " ", "  ", "\t", "\r", " \n "};
    tp_buf_puts(b, pick[rnd(8)]);
}

static void rand_string(tp_buf_t *b)
{
    static const char *parts[] = {"a", "b", "k", "ab", "é",    "日",  "😀",       ",",
                                  "}", "]", ":", "/",  "\\\"", "\\n", "\\u00e9", " "};
    tp_buf_puts(b, "\"");
    for (uint32_t i = 0, n = rnd(4); i < n; i++)
        tp_buf_puts(b, parts[rnd(rnd(3) ? 12 : 16)]); /* now and then an escape */
    tp_buf_puts(b, "\"");
}

static void rand_value(tp_buf_t *b, int depth)
{
    static const char *nums[] = {"0",   "1",   "-1", "42", "-7", "123456789012", "9223372036854775807",
                                 "1.5", "1e2", "-0", "2.0"};
    switch (depth > 4 ? rnd(3) + 2 : rnd(6)) {
    case 0:
        tp_buf_puts(b, "{");
        for (uint32_t i = 0, n = rnd(5); i < n; i++) {
            if (i)
                tp_buf_puts(b, ",");
            ws(b);
            rand_string(b);
            ws(b);
            tp_buf_puts(b, ":");
            rand_value(b, depth + 1);
        }
        ws(b);
        tp_buf_puts(b, "}");
        break;
    case 1:
        tp_buf_puts(b, "[");
        for (uint32_t i = 0, n = rnd(4); i < n; i++) {
            if (i)
                tp_buf_puts(b, ",");
            rand_value(b, depth + 1);
        }
        ws(b);
        tp_buf_puts(b, "]");
        break;
    case 2:
        rand_string(b);
        break;
    case 3:
        tp_buf_puts(b, nums[rnd(rnd(4) ? 7 : 11)]);
        break;
    default: {
        static const char *lits[] = {"true", "false", "null"};
        tp_buf_puts(b, lits[rnd(3)]);
    }
    }
    ws(b);
}

static void test_random_lines(void)
{
    int taken = 0, declined = 0;
    for (int i = 0; i < 20000; i++) {
        tp_buf_t b = {0};
        ws(&b);
        tp_buf_puts(&b, "{");
        tp_buf_printf(&b, "\"id\":\"c%d\",", i);
        if (rnd(2)) {
            tp_buf_puts(&b, "\"job\":");
            rand_string(&b);
            tp_buf_puts(&b, ",");
        }
        tp_buf_puts(&b, "\"tool\":\"t\"");
        if (rnd(4)) {
            tp_buf_puts(&b, ", \"args\":{\"a\":");
            rand_value(&b, 0);
            tp_buf_puts(&b, ",\"b\":");
            rand_value(&b, 0);
            tp_buf_puts(&b, "}");
        }
        tp_buf_puts(&b, "}");
        /* Now and then a byte changed: the scanner must never take what jansson refuses. */
        if (rnd(8) == 0)
            b.data[rnd((uint32_t)b.len)] = (uint8_t) "{}[],:\"\\0-e. x\xff"[rnd(16)];
        tp_buf_append(&b, "", 1);
        tp_call_line_t c;
        int rc = tp_call_line_scan((const char *)b.data, b.len - 1, &c, &strs, &canon);
        CU_ASSERT(rc >= 0);
        if (rc == 1) {
            taken++;
            CU_ASSERT(agree_with_jansson((const char *)b.data, b.len - 1, &c));
            free(c.args);
        } else {
            declined++;
        }
        tp_buf_free(&b);
    }
    printf("(%d taken, %d declined) ", taken, declined);
    CU_ASSERT(taken > 5000);
    CU_ASSERT(declined > 2000);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("callline", NULL, NULL);
    CU_add_test(s, "plain lines read as jansson reads them", test_plain_lines);
    CU_add_test(s, "lines left to jansson", test_declined_lines);
    CU_add_test(s, "20,000 random lines against jansson", test_random_lines);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    tp_buf_free(&strs);
    tp_buf_free(&canon);
    return failed ? 1 : 0;
}
