/*
 * JSON Schema draft-07 (supervisor/jsonschema/): the messages a model reads when
 * its arguments fail a tool's schema, exactly; the cap; compile errors that
 * name the schema location; code-point lengths; integers written 1.0; JSON
 * equality; recursive and escaped $refs; the ECMA-262 side of regexes. The
 * official test suite runs in jsonschema_suite.c; this is what it does not
 * check: what the messages say.
 */
#include "buf.h"
#include "jsonformat.h"
#include "jsonschema.h"
#include "testutil.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static json_t *parse_at(const char *src, int line, const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
    if (v == NULL)
        fprintf(stderr, "\n%s:%d: bad JSON in the test: %s: %s\n", src, line, e.text, text);
    return v;
}

static tp_jsonschema_t *compile_at(const char *src, int line, const char *schema)
{
    char err[512];
    json_t *js = parse_at(src, line, schema);
    tp_jsonschema_t *s = js ? tp_jsonschema_compile(js, err, sizeof err) : NULL;
    if (js != NULL && s == NULL)
        fprintf(stderr, "\n%s:%d: did not compile: %s\n", src, line, err);
    json_decref(js);
    return s;
}

/*
 * Validates instance against schema (both JSON text) with the cap given;
 * the message must be exactly want ("" for valid) and the count n.
 */
static void expect_at(const char *src, int line, const char *schema, const char *instance, int max, int n,
                      const char *want)
{
    tp_jsonschema_t *s = compile_at(src, line, schema);
    json_t *inst = parse_at(src, line, instance);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inst);
    tp_buf_t msg = {0};
    int got = tp_jsonschema_validate(s, inst, &msg, max);
    tp_buf_append(&msg, "", 1);
    const char *text = (const char *)msg.data;
    CU_ASSERT_EQUAL(got, n);
    CU_ASSERT_STRING_EQUAL(text, want);
    if (got != n || strcmp(text, want) != 0)
        fprintf(stderr, "\n%s:%d:\n  got:  %d %s\n  want: %d %s\n", src, line, got, text, n, want);
    /* The count does not depend on whether a message is wanted. */
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, NULL, max), n);
    tp_buf_free(&msg);
    json_decref(inst);
    tp_jsonschema_free(s);
}
#define EXPECT(schema, instance, n, want) expect_at(__FILE__, __LINE__, (schema), (instance), 0, (n), (want))
#define EXPECT_CAP(schema, instance, max, n, want)                                                                     \
    expect_at(__FILE__, __LINE__, (schema), (instance), (max), (n), (want))
#define VALID(schema, instance) expect_at(__FILE__, __LINE__, (schema), (instance), 0, 0, "")

/* The schema must not compile, and the error must be exactly want. */
static void expect_compile_error_at(const char *src, int line, const char *schema, const char *want)
{
    char err[512] = "untouched";
    json_t *js = parse_at(src, line, schema);
    CU_ASSERT_PTR_NOT_NULL_FATAL(js);
    tp_jsonschema_t *s = tp_jsonschema_compile(js, err, sizeof err);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_STRING_EQUAL(err, want);
    if (s != NULL || strcmp(err, want) != 0)
        fprintf(stderr, "\n%s:%d:\n  got:  %s\n  want: %s\n", src, line, s ? "(compiled)" : err, want);
    tp_jsonschema_free(s);
    json_decref(js);
}
#define EXPECT_COMPILE_ERROR(schema, want) expect_compile_error_at(__FILE__, __LINE__, (schema), (want))

/* The kind of schema a tool declares; most tests below start from it. */
/* clang-format off */
static const char *const search_schema =
    "{\"type\": \"object\","
    " \"properties\": {"
    "   \"q\": {\"type\": \"string\", \"minLength\": 1},"
    "   \"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 100},"
    "   \"mode\": {\"enum\": [\"fast\", \"slow\"]},"
    "   \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"pattern\": \"^[a-z]+$\"}},"
    "   \"filters\": {\"type\": \"object\", \"required\": [\"from\"],"
    "                 \"properties\": {\"from\": {\"type\": \"string\"}}}},"
    " \"required\": [\"q\"],"
    " \"additionalProperties\": false}";
/* clang-format on */

/* ---- the messages, one violation each ---- */

static void test_typical_messages(void)
{
    VALID(search_schema, "{\"q\": \"refund\", \"limit\": 10, \"mode\": \"fast\", \"tags\": [\"a\"],"
                         " \"filters\": {\"from\": \"2024\"}}");
    EXPECT(search_schema, "{\"q\": 5}", 1, "/q: expected string, got number 5");
    EXPECT(search_schema, "{\"q\": \"x\", \"limit\": 250}", 1, "/limit: expected at most 100, got 250");
    EXPECT(search_schema, "{\"q\": \"x\", \"limit\": 0}", 1, "/limit: expected at least 1, got 0");
    EXPECT(search_schema, "{}", 1, "(root): missing required property \"q\"");
    EXPECT(search_schema, "{\"q\": \"x\", \"filters\": {}}", 1, "/filters: missing required property \"from\"");
    EXPECT(search_schema, "{\"q\": \"x\", \"tags\": [\"ok\", \"fine\", \"Bad!\"]}", 1,
           "/tags/2: expected a value matching ^[a-z]+$, got \"Bad!\"");
    EXPECT(search_schema, "{\"q\": \"x\", \"mode\": \"medium\"}", 1,
           "/mode: expected one of [\"fast\",\"slow\"], got \"medium\"");
    EXPECT(search_schema, "{\"q\": \"x\", \"extra\": 1}", 1,
           "/extra: unexpected property (additionalProperties is false)");
    EXPECT(search_schema, "[]", 1, "(root): expected object, got array []");
    EXPECT(search_schema, "{\"q\": \"\"}", 1, "/q: expected at least 1 character, got 0 (\"\")");
}

/* Every violation, in the instance's key order, then the missing ones. */
static void test_all_violations_joined(void)
{
    EXPECT(search_schema, "{\"limit\": 1.5, \"mode\": null, \"tags\": \"a\", \"zzz\": true}", 5,
           "/limit: expected integer, got number 1.5; "
           "/mode: expected one of [\"fast\",\"slow\"], got null; "
           "/tags: expected array, got string \"a\"; "
           "/zzz: unexpected property (additionalProperties is false); "
           "(root): missing required property \"q\"");
}

static void test_cap(void)
{
    const char *inst = "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5}";
    const char *schema = "{\"additionalProperties\": {\"type\": \"string\"}}";
    EXPECT_CAP(schema, inst, 2, 5,
               "/a: expected string, got number 1; /b: expected string, got number 2; ... and 3 more");
    EXPECT_CAP(schema, inst, 4, 5,
               "/a: expected string, got number 1; /b: expected string, got number 2; "
               "/c: expected string, got number 3; /d: expected string, got number 4; ... and 1 more");
    EXPECT_CAP(schema, inst, 5, 5,
               "/a: expected string, got number 1; /b: expected string, got number 2; "
               "/c: expected string, got number 3; /d: expected string, got number 4; "
               "/e: expected string, got number 5");
    EXPECT_CAP(schema, inst, 1, 5, "/a: expected string, got number 1; ... and 4 more");
}

/* A message is appended: what the buffer held stays; a valid value adds nothing. */
static void test_appends(void)
{
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, "{\"type\": \"string\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *ok = json_string("x"), *bad = json_integer(7);
    tp_buf_t msg = {0};
    tp_buf_puts(&msg, "args: ");
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, ok, &msg, 10), 0);
    CU_ASSERT_EQUAL(msg.len, 6);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, &msg, 10), 1);
    tp_buf_append(&msg, "", 1);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "args: (root): expected string, got number 7");
    CU_ASSERT_EQUAL(tp_jsonschema_validate(NULL, ok, &msg, 1), TP_EINVAL);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, NULL, &msg, 1), TP_EINVAL);
    tp_buf_free(&msg);
    json_decref(ok);
    json_decref(bad);
    tp_jsonschema_free(s);
    tp_jsonschema_free(NULL);
}

static void test_type_messages(void)
{
    EXPECT("{\"type\": [\"string\", \"null\"]}", "5", 1, "(root): expected string or null, got number 5");
    EXPECT("{\"type\": [\"string\", \"number\", \"boolean\"]}", "null", 1,
           "(root): expected string, number or boolean, got null");
    EXPECT("{\"type\": \"integer\"}", "1.5", 1, "(root): expected integer, got number 1.5");
    VALID("{\"type\": \"object\"}", "{\"a\": [1, 2]}");
    EXPECT("{\"type\": \"string\"}", "{\"a\": [1, 2]}", 1, "(root): expected string, got object {\"a\":[1,2]}");
    EXPECT("{\"type\": \"string\"}", "true", 1, "(root): expected string, got boolean true");
    EXPECT("{\"type\": \"number\"}", "\"5\"", 1, "(root): expected number, got string \"5\"");
    /* the wrong type is said once, not again by the keywords of that type */
    EXPECT("{\"type\": \"string\", \"minLength\": 3, \"enum\": [\"abc\"]}", "12", 1,
           "(root): expected string, got number 12");
}

/* draft-07: an integer is any number without a fractional part. */
static void test_integer(void)
{
    VALID("{\"type\": \"integer\"}", "1.0");
    VALID("{\"type\": \"integer\"}", "-0.0");
    VALID("{\"type\": \"integer\"}", "1e3");
    VALID("{\"type\": \"integer\", \"maximum\": 3}", "3.0");
    EXPECT("{\"type\": \"integer\"}", "1.0000001", 1, "(root): expected integer, got number 1.0000001");
    VALID("{\"minLength\": 2.0, \"maxItems\": 1.0}", "\"ab\"");
    /* JSON equality: 1 == 1.0, keys in any order */
    VALID("{\"enum\": [1]}", "1.0");
    VALID("{\"const\": 2.0}", "2");
    VALID("{\"const\": {\"a\": 1, \"b\": [1, {\"c\": null}]}}", "{\"b\": [1.0, {\"c\": null}], \"a\": 1}");
    EXPECT("{\"const\": {\"a\": 1}}", "{\"a\": 1, \"b\": 2}", 1, "(root): expected {\"a\":1}, got {\"a\":1,\"b\":2}");
    EXPECT("{\"enum\": [false]}", "0", 1, "(root): expected false, got 0");
    EXPECT("{\"uniqueItems\": true}", "[1, 2, 1.0]", 1, "(root): expected unique items, got 1 at 0 and 2");
    EXPECT("{\"uniqueItems\": true}", "[{\"a\": 1, \"b\": 2}, 3, {\"b\": 2, \"a\": 1}]", 1,
           "(root): expected unique items, got {\"a\":1,\"b\":2} at 0 and 2");
    VALID("{\"uniqueItems\": true}", "[1, true, \"1\", [1], {\"1\": 1}, null, 0, false]");
    /* big integers compare exactly, not through doubles */
    EXPECT("{\"maximum\": 9007199254740992}", "9007199254740993", 1,
           "(root): expected at most 9007199254740992, got 9007199254740993");
    VALID("{\"multipleOf\": 3}", "9007199254740993");
    EXPECT("{\"multipleOf\": 0.01}", "0.123", 1, "(root): expected a multiple of 0.01, got 0.123");
    VALID("{\"multipleOf\": 0.01}", "19.99");
    VALID("{\"multipleOf\": 0.0001}", "0.0075");
}

/* Past 32 items uniqueItems hashes; it must find the same first pair. */
static void test_unique_many(void)
{
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, "{\"uniqueItems\": true}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *arr = json_array();
    for (int i = 0; i < 200; i++)
        json_array_append_new(arr, i % 2 ? json_integer(i) : json_pack("{s:i,s:[i]}", "k", i, "v", i));
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, arr, NULL, 0), 0);
    json_array_set_new(arr, 150, json_real(37.0));
    json_array_set_new(arr, 170, json_pack("{s:[i],s:i}", "v", 20, "k", 20));
    tp_buf_t msg = {0};
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, arr, &msg, 0), 1);
    tp_buf_append(&msg, "", 1);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "(root): expected unique items, got 37 at 37 and 150");
    tp_buf_free(&msg);
    json_decref(arr);
    tp_jsonschema_free(s);
}

/* Lengths count code points: "é" is 1, an emoji (4 bytes) is 1. */
static void test_code_points(void)
{
    VALID("{\"maxLength\": 1}", "\"\xc3\xa9\"");
    VALID("{\"minLength\": 1, \"maxLength\": 1}", "\"\xf0\x9f\x98\x80\"");
    VALID("{\"maxLength\": 3}", "\"\xc3\xa9t\xc3\xa9\"");
    EXPECT("{\"minLength\": 5}", "\"caf\xc3\xa9\"", 1,
           "(root): expected at least 5 characters, got 4 (\"caf\xc3\xa9\")");
    EXPECT("{\"maxLength\": 3}", "\"caf\xc3\xa9\"", 1,
           "(root): expected at most 3 characters, got 4 (\"caf\xc3\xa9\")");
    EXPECT("{\"minLength\": 2}", "\"\xf0\x9f\x98\x80\"", 1,
           "(root): expected at least 2 characters, got 1 (\"\xf0\x9f\x98\x80\")");
    VALID("{\"minLength\": 2}", "\"\xc3\xa9\xc3\xa9\"");
    /* fewer bytes than minLength: the count said is still in characters */
    EXPECT("{\"minLength\": 5}", "\"\xc3\xa9\"", 1, "(root): expected at least 5 characters, got 1 (\"\xc3\xa9\")");
    EXPECT("{\"minLength\": 2}", "\"\xf0\x9f\x98\x80\"", 1,
           "(root): expected at least 2 characters, got 1 (\"\xf0\x9f\x98\x80\")");
}

/*
 * Long values are cut to 60 bytes at most, on a character boundary: a
 * string keeps its quotes ("...\"" at the end), a container ends "...".
 */
static void test_truncation(void)
{
    char inst[512];
    snprintf(inst, sizeof inst, "\"%s\"", "0123456789012345678901234567890123456789012345678901234567890123456789");
    EXPECT("{\"type\": \"number\"}", inst, 1,
           "(root): expected number, got string \"012345678901234567890123456789012345678901234567890123...\"");
    /* 40 two-byte characters: cut between characters, never inside one */
    tp_buf_t eacute = {0}, want = {0};
    tp_buf_puts(&eacute, "\"");
    for (int i = 0; i < 40; i++)
        tp_buf_puts(&eacute, "\xc3\xa9");
    tp_buf_append(&eacute, "\"", 2);
    tp_buf_puts(&want, "(root): expected a value matching ^a, got \"");
    for (int i = 0; i < 27; i++)
        tp_buf_puts(&want, "\xc3\xa9");
    tp_buf_append(&want, "...\"", 5);
    EXPECT("{\"pattern\": \"^a\"}", (char *)eacute.data, 1, (char *)want.data);
    tp_buf_free(&eacute);
    tp_buf_free(&want);
    EXPECT("{\"type\": \"string\"}",
           "[1000000, 2000000, 3000000, 4000000, 5000000, 6000000, 7000000, 8000000, 9000000, 10000000]", 1,
           "(root): expected string, got array [1000000,2000000,3000000,4000000,5000000,6000000,7000000,...");
    EXPECT("{\"type\": \"string\"}",
           "{\"k\": \""
           "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij\"}",
           1,
           "(root): expected string, got object "
           "{\"k\":\"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghija...");
}

/* Keys with '/' or '~' are escaped in pointers (RFC 6901). */
static void test_pointer_escapes(void)
{
    EXPECT("{\"additionalProperties\": false}", "{\"a/b\": 1}", 1,
           "/a~1b: unexpected property (additionalProperties is false)");
    EXPECT("{\"properties\": {\"~x\": {\"items\": {\"type\": \"null\"}}}}", "{\"~x\": [null, 0]}", 1,
           "/~0x/1: expected null, got number 0");
    EXPECT("{\"required\": [\"a\\\"b\"]}", "{}", 1, "(root): missing required property \"a\\\"b\"");
}

static void test_object_messages(void)
{
    EXPECT("{\"minProperties\": 2}", "{\"a\": 1}", 1, "(root): expected at least 2 properties, got 1");
    EXPECT("{\"maxProperties\": 1}", "{\"a\": 1, \"b\": 2}", 1, "(root): expected at most 1 property, got 2");
    EXPECT("{\"propertyNames\": {\"pattern\": \"^[a-z]+$\"}}", "{\"ok\": 1, \"Bad!\": 2}", 1,
           "(root): invalid property name \"Bad!\": expected a value matching ^[a-z]+$, got \"Bad!\"");
    EXPECT("{\"propertyNames\": {\"maxLength\": 3}}", "{\"long\": 1}", 1,
           "(root): invalid property name \"long\": expected at most 3 characters, got 4 (\"long\")");
    EXPECT("{\"dependencies\": {\"card\": [\"cvv\", \"expiry\"]}}", "{\"card\": 1, \"expiry\": 2}", 1,
           "(root): missing property \"cvv\" (required when \"card\" is present)");
    EXPECT("{\"dependencies\": {\"card\": {\"required\": [\"cvv\"]}}}", "{\"card\": 1}", 1,
           "(root): missing required property \"cvv\"");
    VALID("{\"dependencies\": {\"card\": [\"cvv\"]}}", "{\"cvv\": 1}");
    EXPECT("{\"patternProperties\": {\"^x_\": {\"type\": \"integer\"}}, \"additionalProperties\": false}",
           "{\"x_a\": 1, \"x_b\": \"2\", \"y\": 3}", 2,
           "/x_b: expected integer, got string \"2\"; /y: unexpected property (additionalProperties is false)");
    EXPECT("{\"additionalProperties\": {\"$ref\": \"#/definitions/no\"}, \"definitions\": {\"no\": false}}",
           "{\"a\": 1}", 1, "/a: unexpected property (additionalProperties is false)");
    EXPECT("{\"properties\": {\"a\": false}}", "{\"a\": 1}", 1,
           "/a: no value is allowed here (the schema is false), got 1");
    /* more than 64 required names: past the bitmask, still found */
    tp_buf_t schema = {0}, inst = {0};
    tp_buf_puts(&schema, "{\"required\": [");
    tp_buf_puts(&inst, "{");
    for (int i = 0; i < 70; i++) {
        tp_buf_printf(&schema, "%s\"k%d\"", i ? "," : "", i);
        if (i != 3 && i != 68)
            tp_buf_printf(&inst, "%s\"k%d\": %d", inst.len > 1 ? "," : "", i, i);
    }
    tp_buf_puts(&schema, "]}");
    tp_buf_append(&schema, "", 1);
    tp_buf_puts(&inst, "}");
    tp_buf_append(&inst, "", 1);
    EXPECT((char *)schema.data, (char *)inst.data, 2,
           "(root): missing required property \"k3\"; (root): missing required property \"k68\"");
    tp_buf_free(&schema);
    tp_buf_free(&inst);
}

static void test_array_messages(void)
{
    EXPECT("{\"minItems\": 2}", "[1]", 1, "(root): expected at least 2 items, got 1");
    EXPECT("{\"maxItems\": 1}", "[1, 2]", 1, "(root): expected at most 1 item, got 2");
    EXPECT("{\"items\": [{\"type\": \"string\"}, {\"type\": \"number\"}], \"additionalItems\": false}",
           "[\"a\", 1, 2, 3]", 1, "(root): expected at most 2 items (additionalItems is false), got 4");
    EXPECT("{\"items\": [{\"type\": \"string\"}], \"additionalItems\": {\"type\": \"number\"}}", "[1, 2, \"x\"]", 2,
           "/0: expected string, got number 1; /2: expected number, got string \"x\"");
    EXPECT("{\"contains\": {\"const\": \"x\"}}", "[\"a\", \"b\"]", 1,
           "(root): expected at least one item matching the \"contains\" schema, got none of 2");
    EXPECT("{\"contains\": {\"const\": \"x\"}}", "[]", 1,
           "(root): expected at least one item matching the \"contains\" schema, got none of 0");
    VALID("{\"contains\": {\"const\": \"x\"}}", "[1, \"x\"]");
}

static void test_number_messages(void)
{
    EXPECT("{\"exclusiveMinimum\": 0}", "0", 1, "(root): expected greater than 0, got 0");
    EXPECT("{\"exclusiveMaximum\": 1.5}", "1.5", 1, "(root): expected less than 1.5, got 1.5");
    EXPECT("{\"multipleOf\": 5}", "12", 1, "(root): expected a multiple of 5, got 12");
    EXPECT("{\"minimum\": 2, \"multipleOf\": 2}", "1", 2,
           "(root): expected at least 2, got 1; (root): expected a multiple of 2, got 1");
    EXPECT("{\"const\": \"a\"}", "\"b\"", 1, "(root): expected \"a\", got \"b\"");
    EXPECT("{\"not\": {\"type\": \"null\"}}", "null", 1,
           "(root): expected a value not matching the \"not\" schema, got null");
}

static void test_combinators(void)
{
    EXPECT("{\"properties\": {\"id\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}}}", "{\"id\": 5}", 1,
           "/id: matched none of 2 alternatives: (1) expected string, got number 5 (2) expected null, got "
           "number 5");
    EXPECT("{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "3", 1,
           "(root): matched 2 alternatives of oneOf, expected exactly 1 (#1, #2)");
    EXPECT("{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}, {\"maximum\": 9}]}", "3", 1,
           "(root): matched 3 alternatives of oneOf, expected exactly 1 (#1, #2, ...)");
    EXPECT("{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"boolean\"}]}", "1", 1,
           "(root): matched none of 2 alternatives (oneOf): (1) expected string, got number 1 "
           "(2) expected boolean, got number 1");
    /* a deeper failure keeps its pointer; more than one is counted */
    EXPECT("{\"anyOf\": [{\"properties\": {\"a\": {\"type\": \"string\"}}, \"required\": [\"b\"]},"
           "            {\"type\": \"array\"}]}",
           "{\"a\": 1}", 1,
           "(root): matched none of 2 alternatives: (1) /a: expected string, got number 1 (+1 more) "
           "(2) expected array, got object {\"a\":1}");
    EXPECT("{\"allOf\": [{\"minimum\": 2}, {\"multipleOf\": 2}]}", "1", 2,
           "(root): expected at least 2, got 1; (root): expected a multiple of 2, got 1");
    EXPECT("{\"if\": {\"properties\": {\"kind\": {\"const\": \"date\"}}},"
           " \"then\": {\"required\": [\"from\"]}, \"else\": {\"required\": [\"q\"]}}",
           "{\"kind\": \"date\"}", 1, "(root): missing required property \"from\"");
    EXPECT("{\"if\": {\"properties\": {\"kind\": {\"const\": \"date\"}}},"
           " \"then\": {\"required\": [\"from\"]}, \"else\": {\"required\": [\"q\"]}}",
           "{\"kind\": \"text\"}", 1, "(root): missing required property \"q\"");
    /* seven alternatives: five detailed */
    EXPECT("{\"anyOf\": [{\"const\": 1}, {\"const\": 2}, {\"const\": 3}, {\"const\": 4}, {\"const\": 5},"
           " {\"const\": 6}, {\"const\": 7}]}",
           "0", 1,
           "(root): matched none of 7 alternatives: (1) expected 1, got 0 (2) expected 2, got 0 "
           "(3) expected 3, got 0 (4) expected 4, got 0 (5) expected 5, got 0 (and 2 more)");
    /* the summary of an alternative does not count against the cap */
    EXPECT_CAP("{\"items\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}}", "[1, 2]", 1, 2,
               "/0: matched none of 2 alternatives: (1) expected string, got number 1 "
               "(2) expected null, got number 1; ... and 1 more");
}

/* $ref: recursive, escaped, percent-encoded, to booleans; siblings ignored. */
static void test_refs(void)
{
    /* clang-format off */
    const char *tree =
        "{\"type\": \"object\", \"required\": [\"value\"],"
        " \"properties\": {\"value\": {\"type\": \"number\"},"
        "                  \"children\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}}}";
    /* clang-format on */
    VALID(tree, "{\"value\": 1, \"children\": [{\"value\": 2, \"children\": [{\"value\": 3}]}]}");
    EXPECT(tree, "{\"value\": 1, \"children\": [{\"value\": 2, \"children\": [{\"value\": \"3\"}, {}]}]}", 2,
           "/children/0/children/0/value: expected number, got string \"3\"; "
           "/children/0/children/1: missing required property \"value\"");
    const char *defs = "{\"definitions\": {\"pos\": {\"type\": \"integer\", \"minimum\": 1},"
                       "                  \"a/b\": {\"$ref\": \"#/definitions/pos\"},"
                       "                  \"t~\": {\"type\": \"string\"}, \"q\\\"x\": {\"type\": \"null\"}},"
                       " \"properties\": {\"n\": {\"$ref\": \"#/definitions/a~1b\"},"
                       "                \"t\": {\"$ref\": \"#/definitions/t~0\"},"
                       "                \"q\": {\"$ref\": \"#/definitions/q%22x\"},"
                       "                \"s\": {\"$ref\": \"#/definitions/pos\", \"type\": \"string\"},"
                       "                \"i\": {\"$ref\": \"#/properties/n\"}}}";
    VALID(defs, "{\"n\": 3, \"t\": \"x\", \"q\": null, \"s\": 2, \"i\": 1}");
    EXPECT(defs, "{\"n\": 0, \"t\": 1, \"q\": 0, \"s\": \"x\", \"i\": 0}", 5,
           "/n: expected at least 1, got 0; /t: expected string, got number 1; /q: expected null, got number 0; "
           "/s: expected integer, got string \"x\"; /i: expected at least 1, got 0");
    VALID("{\"$ref\": \"#/definitions/t\", \"definitions\": {\"t\": true}}", "[1]");
    EXPECT("{\"items\": {\"$ref\": \"#/definitions/f\"}, \"definitions\": {\"f\": false}}", "[1]", 1,
           "/0: no value is allowed here (the schema is false), got 1");
    /* mutual recursion through definitions, and "#name" fragments */
    /* clang-format off */
    const char *mutual =
        "{\"$ref\": \"#/definitions/a\","
        " \"definitions\": {\"a\": {\"type\": \"object\", \"properties\": {\"b\": {\"$ref\": \"#B\"}}},"
        "                   \"b\": {\"$id\": \"#B\", \"type\": \"array\", \"items\": {\"$ref\": "
        "\"#/definitions/a\"}}}}";
    /* clang-format on */
    VALID(mutual, "{\"b\": [{\"b\": []}, {}]}");
    EXPECT(mutual, "{\"b\": [{\"b\": {}}]}", 1, "/b/0/b: expected array, got object {}");
    /* the root's own $id in front of a fragment */
    VALID("{\"$id\": \"http://example.com/s.json\", \"definitions\": {\"x\": {\"type\": \"null\"}},"
          " \"properties\": {\"a\": {\"$ref\": \"http://example.com/s.json#/definitions/x\"}}}",
          "{\"a\": null}");
}

/* A recursive schema over a very deep value stops at the guard, not the stack. */
static void test_depth_guard(void)
{
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, "{\"items\": {\"$ref\": \"#\"}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *v = json_array();
    for (int i = 0; i < TP_JSONSCHEMA_MAX_DEPTH + 50; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, v);
        v = outer;
    }
    tp_buf_t msg = {0};
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, v, &msg, 1), 1);
    tp_buf_append(&msg, "", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)msg.data, ": schema recursion too deep"));
    tp_buf_free(&msg);
    json_decref(v);
    tp_jsonschema_free(s);
}

/*
 * The doubling chain: a0 checks "q", and each a(k) is allOf two $refs to
 * a(k-1), so a(levels) reaches a0 2^levels ways. About 1 KB at 30 levels;
 * before, checking one call against it took 2^30 steps (a minute).
 * head goes first inside the root object ("\"$schema\": ..., " or "").
 */
static char *doubling_schema(int levels, const char *head)
{
    tp_buf_t b = {0};
    tp_buf_printf(&b, "{%s\"$defs\": {\"a0\": {\"properties\": {\"q\": {\"type\": \"string\"}}}", head);
    for (int i = 1; i <= levels; i++)
        tp_buf_printf(&b, ", \"a%d\": {\"allOf\": [{\"$ref\": \"#/$defs/a%d\"}, {\"$ref\": \"#/$defs/a%d\"}]}", i,
                      i - 1, i - 1);
    tp_buf_printf(&b, "}, \"$ref\": \"#/$defs/a%d\"}", levels);
    return (char *)b.data;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * A schema reached by references is checked once per value: the 30- and
 * 39-level chains cost a step per level, in both dialects, and the count
 * and messages are what 2^30 separate checks would say (the same
 * violation through every path, up to INT_MAX for 2^39).
 */
static void test_memo(void)
{
    static const char *const heads[] = {"", "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "};
    for (size_t h = 0; h < 2; h++) {
        char *text = doubling_schema(30, heads[h]);
        tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, text);
        free(text);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        json_t *ok = json_pack("{s:s}", "q", "refund"), *bad = json_pack("{s:i}", "q", 5);
        double t0 = now_s();
        CU_ASSERT_EQUAL(tp_jsonschema_validate(s, ok, NULL, 0), 0);
        tp_buf_t msg = {0};
        CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, &msg, 3), 1 << 30);
        CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, NULL, 0), 1 << 30);
        double took = now_s() - t0;
        CU_ASSERT(took < 0.5);
        if (took >= 0.5)
            fprintf(stderr, "\n  30 levels took %.3f s\n", took);
        tp_buf_append(&msg, "", 1);
        CU_ASSERT_STRING_EQUAL((char *)msg.data,
                               "/q: expected string, got number 5; /q: expected string, got number 5; "
                               "/q: expected string, got number 5; ... and 1073741821 more");
        tp_buf_free(&msg);
        json_decref(ok);
        json_decref(bad);
        tp_jsonschema_free(s);
    }
    char *text = doubling_schema(39, "");
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *bad = json_pack("{s:i}", "q", 5);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, NULL, 0), INT_MAX);
    json_decref(bad);
    tp_jsonschema_free(s);
    /* one value at two places (a caller's tree may share it): each place said */
    s = compile_at(__FILE__, __LINE__,
                   "{\"properties\": {\"a\": {\"$ref\": \"#/definitions/s\"}, \"b\": {\"$ref\": \"#/definitions/s\"}},"
                   " \"definitions\": {\"s\": {\"type\": \"string\"}}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *v = json_integer(7), *inst = json_object();
    json_object_set(inst, "a", v);
    json_object_set(inst, "b", v);
    tp_buf_t msg = {0};
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, &msg, 0), 2);
    tp_buf_append(&msg, "", 1);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "/a: expected string, got number 7; /b: expected string, got number 7");
    tp_buf_free(&msg);
    json_decref(v);
    json_decref(inst);
    tp_jsonschema_free(s);
    /* property names are values made for the check, one after another at the same address: never memoised */
    EXPECT("{\"propertyNames\": {\"$ref\": \"#/definitions/n\"}, \"definitions\": {\"n\": {\"pattern\": \"^a\"}}}",
           "{\"aa\": 1, \"bb\": 2, \"cc\": 3}", 2,
           "(root): invalid property name \"bb\": expected a value matching ^a, got \"bb\"; "
           "(root): invalid property name \"cc\": expected a value matching ^a, got \"cc\"");
}

/*
 * Where the memo cannot help (under unevaluatedProperties the chain's
 * annotations count too), the work bound stops the check: TP_E2BIG at a
 * million steps, in milliseconds, with what the caller had in the buffer
 * kept and the rest replaced by the reason. Arguments that are merely large
 * are not refused: the bound grows by 32 steps a value.
 */
static void test_work_bound(void)
{
    char *text = doubling_schema(30, "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "
                                     "\"unevaluatedProperties\": false, ");
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *inst = json_pack("{s:s}", "q", "refund");
    tp_buf_t msg = {0};
    tp_buf_puts(&msg, "args: ");
    double t0 = now_s();
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, &msg, 10), TP_E2BIG);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, NULL, 10), TP_E2BIG);
    double took = now_s() - t0;
    CU_ASSERT(took < 1.0);
    if (took >= 1.0)
        fprintf(stderr, "\n  two bounded checks took %.3f s\n", took);
    tp_buf_append(&msg, "", 1);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "args: the schema took too much work to check: over 1000064 steps (the "
                                             "limit: 1000000, and 32 more for each value in the instance)");
    tp_buf_free(&msg);
    json_decref(inst);
    tp_jsonschema_free(s);
    /* 400,000 items at 3 steps each: past the million, within 32 a value (and past the memo's 65,536 entries) */
    s = compile_at(__FILE__, __LINE__,
                   "{\"items\": {\"$ref\": \"#/definitions/n\"},"
                   " \"definitions\": {\"n\": {\"allOf\": [{\"type\": \"integer\"}, {\"minimum\": 0}]}}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *big = json_array();
    for (int i = 0; i < 400000; i++)
        json_array_append_new(big, json_integer(i));
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, big, NULL, 0), 0);
    json_array_append_new(big, json_integer(-1));
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, big, NULL, 0), 1);
    json_decref(big);
    tp_jsonschema_free(s);
    /* ...but 200 steps a value is not what a schema written by hand does */
    tp_buf_t wide = {0};
    tp_buf_puts(&wide, "{\"items\": {\"allOf\": [{}");
    for (int i = 1; i < 200; i++)
        tp_buf_puts(&wide, ", {}");
    tp_buf_append(&wide, "]}}", 4);
    s = compile_at(__FILE__, __LINE__, (char *)wide.data);
    tp_buf_free(&wide);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    big = json_array();
    for (int i = 0; i < 10000; i++)
        json_array_append_new(big, json_integer(i));
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, big, NULL, 0), TP_E2BIG);
    json_decref(big);
    tp_jsonschema_free(s);
}

static void test_compile_errors(void)
{
    EXPECT_COMPILE_ERROR("{\"properties\": {\"q\": {\"type\": \"strin\"}}}",
                         "/properties/q/type: unknown type \"strin\"");
    EXPECT_COMPILE_ERROR("{\"properties\": {\"p\": {\"pattern\": \"a(b\"}}}",
                         "/properties/p/pattern: invalid regex: missing closing parenthesis at offset 3");
    EXPECT_COMPILE_ERROR(
        "{\"patternProperties\": {\"[a-\": {}}}",
        "/patternProperties/[a-: invalid regex: missing terminating ] for character class at offset 3");
    EXPECT_COMPILE_ERROR("{\"$ref\": \"#/definitions/x\"}", "/$ref: unresolvable reference \"#/definitions/x\"");
    EXPECT_COMPILE_ERROR("{\"items\": {\"$ref\": \"other.json#/x\"}}",
                         "/items/$ref: unresolvable reference \"other.json#/x\" (a document that is not this "
                         "schema must be given in \"schema_refs\"; nothing is fetched from the network)");
    EXPECT_COMPILE_ERROR("{\"$schema\": \"http://json-schema.org/draft-04/schema#\"}",
                         "/$schema: unsupported dialect \"http://json-schema.org/draft-04/schema#\" (supported: "
                         "draft-07, 2020-12)");
    EXPECT_COMPILE_ERROR("{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", \"prefixItems\": []}",
                         "/prefixItems: expected a non-empty array of schemas");
    EXPECT_COMPILE_ERROR("{\"minLength\": -1}", "/minLength: expected a non-negative integer");
    EXPECT_COMPILE_ERROR("{\"maxItems\": 1.5}", "/maxItems: expected a non-negative integer");
    EXPECT_COMPILE_ERROR("{\"items\": [{}, 3]}", "/items/1: expected a schema (an object or a boolean), got number");
    EXPECT_COMPILE_ERROR("\"string\"", "(root): expected a schema (an object or a boolean), got string");
    EXPECT_COMPILE_ERROR("{\"type\": [\"string\", 5]}", "/type/1: expected a type name");
    EXPECT_COMPILE_ERROR("{\"required\": [\"a\", 1]}", "/required/1: expected a string");
    EXPECT_COMPILE_ERROR("{\"anyOf\": []}", "/anyOf: expected a non-empty array of schemas");
    EXPECT_COMPILE_ERROR("{\"multipleOf\": 0}", "/multipleOf: expected a number greater than 0");
    EXPECT_COMPILE_ERROR("{\"maximum\": \"5\"}", "/maximum: expected a number");
    EXPECT_COMPILE_ERROR("{\"uniqueItems\": 1}", "/uniqueItems: expected a boolean");
    EXPECT_COMPILE_ERROR("{\"enum\": 1}", "/enum: expected an array");
    EXPECT_COMPILE_ERROR("{\"dependencies\": {\"a\": [\"b\", 2]}}", "/dependencies/a/1: expected a string");
    EXPECT_COMPILE_ERROR("{\"properties\": {\"a/b\": {\"not\": 1}}}",
                         "/properties/a~1b/not: expected a schema (an object or a boolean), got number");
    /* an unused definition is still checked; a referenced one is named where it is */
    EXPECT_COMPILE_ERROR("{\"definitions\": {\"d\": {\"minimum\": null}}}",
                         "/definitions/d/minimum: expected a number");
    EXPECT_COMPILE_ERROR("{\"properties\": {\"x\": {\"$ref\": \"#/definitions/d\"}},"
                         " \"definitions\": {\"d\": {\"type\": \"nul\"}}}",
                         "/definitions/d/type: unknown type \"nul\"");
    /* loops that never descend into the value */
    EXPECT_COMPILE_ERROR("{\"$ref\": \"#\"}", "/$ref: circular reference \"#\"");
    EXPECT_COMPILE_ERROR("{\"anyOf\": [{\"type\": \"string\"}, {\"$ref\": \"#\"}]}",
                         "/anyOf/1/$ref: circular reference \"#\"");
    EXPECT_COMPILE_ERROR(
        "{\"definitions\": {\"a\": {\"$ref\": \"#/definitions/b\"}, \"b\": {\"$ref\": \"#/definitions/a\"}}}",
        "/definitions/b/$ref: circular reference \"#/definitions/a\"");
    /* under a base URI change, "#/b" is a pointer into the subschema with the "$id" */
    EXPECT_COMPILE_ERROR("{\"definitions\": {\"a\": {\"$id\": \"http://x/a.json\", \"items\": {\"$ref\": \"#/b\"}}}}",
                         "/definitions/a/items/$ref: unresolvable reference \"#/b\"");
    /* unknown keywords, format, and $ref's siblings are not checked */
    tp_jsonschema_t *s = compile_at(__FILE__, __LINE__,
                                    "{\"format\": \"no-such\", \"x-anything\": {\"type\": 5}, \"title\": 1,"
                                    " \"properties\": {\"a\": {\"$ref\": \"#\", \"type\": \"bogus\"}}}");
    CU_ASSERT_PTR_NOT_NULL(s);
    tp_jsonschema_free(s);
    /* a small err buffer is cut, not overrun */
    char small[12];
    json_t *js = json_loads("{\"properties\": {\"q\": {\"type\": \"strin\"}}}", 0, NULL);
    CU_ASSERT_PTR_NULL(tp_jsonschema_compile(js, small, sizeof small));
    CU_ASSERT_STRING_EQUAL(small, "/properties");
    CU_ASSERT_PTR_NULL(tp_jsonschema_compile(js, NULL, 0));
    json_decref(js);
}

/* Patterns follow ECMA-262 where PCRE2 alone would not. */
static void test_ecma_regex(void)
{
    EXPECT("{\"pattern\": \"^abc$\"}", "\"abc\\n\"", 1, "(root): expected a value matching ^abc$, got \"abc\\n\"");
    VALID("{\"pattern\": \"b\"}", "\"abc\"");           /* not anchored */
    VALID("{\"pattern\": \"^\\\\s$\"}", "\"\\u00a0\""); /* Unicode white space */
    VALID("{\"pattern\": \"^\\\\s$\"}", "\"\\ufeff\"");
    VALID("{\"pattern\": \"^[\\\\S]$\"}", "\"\\u00e9\"");
    EXPECT("{\"pattern\": \"^\\\\S$\"}", "\"\\u2028\"", 1,
           "(root): expected a value matching ^\\S$, got \"\xe2\x80\xa8\"");
    EXPECT("{\"pattern\": \"^\\\\d$\"}", "\"\\u0660\"", 1, "(root): expected a value matching ^\\d$, got \"\xd9\xa0\"");
    EXPECT("{\"pattern\": \"^\\\\w$\"}", "\"\\u00e9\"", 1, "(root): expected a value matching ^\\w$, got \"\xc3\xa9\"");
    EXPECT("{\"pattern\": \"^.$\"}", "\"\\r\"", 1, "(root): expected a value matching ^.$, got \"\\r\"");
    VALID("{\"pattern\": \"^.$\"}", "\"\\ud83d\\ude00\""); /* one code point */
    VALID("{\"pattern\": \"^[^]$\"}", "\"\\n\"");
    EXPECT("{\"pattern\": \"^[]$\"}", "\"\"", 1, "(root): expected a value matching ^[]$, got \"\"");
    VALID("{\"pattern\": \"^\\\\u00e9\\\\x41\\\\u{1F600}$\"}", "\"\\u00e9A\\ud83d\\ude00\"");
    VALID("{\"pattern\": \"^\\\\\\\\s$\"}", "\"\\\\s\""); /* an escaped backslash, then s */
    VALID("{\"pattern\": \"^[.]$\"}", "\".\"");
    EXPECT("{\"pattern\": \"^[.]$\"}", "\"x\"", 1, "(root): expected a value matching ^[.]$, got \"x\"");
    VALID("{\"pattern\": \"^[[:alpha:].]+$\"}", "\"a.b\"");
    VALID("{\"pattern\": \"^(a)?\\\\1b$\"}", "\"b\""); /* unset backreference: empty */
    VALID("{\"pattern\": \"^\\\\cC$\"}", "\"\\u0003\"");
    VALID("{\"patternProperties\": {\"^\\u00e1\": {\"type\": \"null\"}}, \"additionalProperties\": false}",
          "{\"\\u00e1rv\": null}");
}

/* The compiled schema owns a copy: the caller's may change or go. */
#define S2020 "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "

/* 2020-12: the keywords it adds, and their messages in the same JSON Pointer form. */
static void test_2020_12(void)
{
    /* an MCP-style input schema: $defs and a $ref into them */
    const char *mcp = "{" S2020 "\"type\": \"object\", \"properties\": {\"loc\": {\"$ref\": \"#/$defs/loc\"}},"
                      " \"required\": [\"loc\"], \"$defs\": {\"loc\": {\"type\": \"object\","
                      " \"properties\": {\"lat\": {\"type\": \"number\"}}, \"required\": [\"lat\"]}}}";
    VALID(mcp, "{\"loc\": {\"lat\": 1.5}}");
    EXPECT(mcp, "{\"loc\": {\"lat\": \"x\"}}", 1, "/loc/lat: expected number, got string \"x\"");
    /* 2020-12's $ref applies beside its siblings (draft-07 ignores them) */
    EXPECT("{" S2020 "\"$ref\": \"#/$defs/s\", \"maxLength\": 2, \"$defs\": {\"s\": {\"type\": \"string\"}}}",
           "\"abc\"", 1, "(root): expected at most 2 characters, got 3 (\"abc\")");
    VALID("{\"$ref\": \"#/definitions/s\", \"maxLength\": 2, \"definitions\": {\"s\": {\"type\": \"string\"}}}",
          "\"abc\"");
    EXPECT("{" S2020 "\"allOf\": [{\"properties\": {\"a\": true}}], \"unevaluatedProperties\": false}",
           "{\"a\": 1, \"b\": 2}", 1, "/b: unexpected property (unevaluatedProperties is false)");
    VALID("{" S2020 "\"anyOf\": [{\"properties\": {\"a\": true}}, {\"properties\": {\"b\": true}}],"
          " \"unevaluatedProperties\": false}",
          "{\"a\": 1, \"b\": 2}");
    EXPECT("{" S2020 "\"prefixItems\": [{\"type\": \"string\"}], \"items\": false}", "[\"a\", 1]", 1,
           "(root): expected at most 1 item (items is false), got 2");
    EXPECT("{" S2020 "\"prefixItems\": [true], \"unevaluatedItems\": {\"type\": \"string\"}}", "[1, 2]", 1,
           "/1: expected string, got number 2");
    EXPECT("{" S2020 "\"contains\": {\"type\": \"integer\"}, \"maxContains\": 1}", "[1, 2]", 1,
           "(root): expected at most 1 item matching the \"contains\" schema, got 2 of 2");
    EXPECT("{" S2020 "\"contains\": {\"type\": \"integer\"}, \"minContains\": 2}", "[1, \"x\"]", 1,
           "(root): expected at least 2 items matching the \"contains\" schema, got 1 of 2");
    EXPECT("{" S2020 "\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"a\": 1}", 1,
           "(root): missing property \"b\" (required when \"a\" is present)");
    EXPECT("{" S2020 "\"dependentSchemas\": {\"a\": {\"required\": [\"c\"]}}}", "{\"a\": 1}", 1,
           "(root): missing required property \"c\"");
    /* $anchor, and a $dynamicRef that the outer resource's $dynamicAnchor wins */
    EXPECT("{" S2020 "\"$ref\": \"#n\", \"$defs\": {\"x\": {\"$anchor\": \"n\", \"type\": \"null\"}}}", "1", 1,
           "(root): expected null, got number 1");
    const char *dyn = "{" S2020 "\"$id\": \"https://example.com/strict\", \"$dynamicAnchor\": \"node\","
                      " \"$ref\": \"tree\", \"unevaluatedProperties\": false,"
                      " \"$defs\": {\"tree\": {\"$id\": \"tree\", \"$dynamicAnchor\": \"node\","
                      " \"type\": \"object\", \"properties\": {\"kids\": {\"type\": \"array\","
                      " \"items\": {\"$dynamicRef\": \"#node\"}}}}}}";
    VALID(dyn, "{\"kids\": [{\"kids\": []}]}");
    /* the failed $ref's annotations are dropped, so "kids" is unevaluated at the root too */
    EXPECT(dyn, "{\"kids\": [{\"kidz\": []}]}", 2,
           "/kids/0/kidz: unexpected property (unevaluatedProperties is false); "
           "/kids: unexpected property (unevaluatedProperties is false)");
    /* without "$schema" the default is draft-07, where these keywords mean nothing */
    VALID("{\"prefixItems\": [{\"type\": \"string\"}], \"dependentRequired\": {\"a\": [\"b\"]}}", "[1]");
    /* ... unless the caller's default says 2020-12 */
    char err[512];
    json_t *js = json_loads("{\"prefixItems\": [{\"type\": \"string\"}]}", 0, NULL);
    tp_jsonschema_opts_t o = {.dialect = TP_JSONSCHEMA_2020_12};
    tp_jsonschema_t *s = tp_jsonschema_compile_opts(js, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(tp_jsonschema_dialect(s), TP_JSONSCHEMA_2020_12);
    json_t *inst = json_loads("[1]", 0, NULL);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, NULL, 0), 1);
    json_decref(inst);
    tp_jsonschema_free(s);
    json_decref(js);
    tp_jsonschema_dialect_t d;
    CU_ASSERT_EQUAL(tp_jsonschema_dialect_parse("2020-12", &d), 0);
    CU_ASSERT_EQUAL(d, TP_JSONSCHEMA_2020_12);
    CU_ASSERT_EQUAL(tp_jsonschema_dialect_parse("http://json-schema.org/draft-07/schema", &d), 0);
    CU_ASSERT_EQUAL(d, TP_JSONSCHEMA_DRAFT7);
    CU_ASSERT_EQUAL(tp_jsonschema_dialect_parse("draft-04", &d), TP_EINVAL);
}

/* draft-07's $ref in full: "$id" changes the base URI of what is under it. */
static void test_id_scopes(void)
{
    const char *s =
        "{\"$id\": \"http://x/root.json\", \"definitions\": {\"a\": {\"$id\": \"a.json\","
        " \"definitions\": {\"b\": {\"type\": \"integer\"}}, \"items\": {\"$ref\": \"#/definitions/b\"}}},"
        " \"properties\": {\"p\": {\"$ref\": \"a.json\"}, \"q\": {\"$ref\": \"/root.json#/definitions/a\"}}}";
    VALID(s, "{\"p\": [1], \"q\": [2]}");
    EXPECT(s, "{\"p\": [\"x\"], \"q\": [3.5]}", 2,
           "/p/0: expected integer, got string \"x\"; /q/0: expected integer, got number 3.5");
}

/* A loader standing in for schema_refs: one document, by URI. */
static json_t *load_one(const char *uri, void *arg)
{
    (void)arg;
    if (strcmp(uri, "https://example.com/a.json") != 0)
        return NULL;
    return json_loads("{\"definitions\": {\"id\": {\"type\": \"string\", \"minLength\": 3}}}", 0, NULL);
}

static void test_remote_and_formats(void)
{
    char err[512];
    json_t *js = json_loads("{\"properties\": {\"id\": {\"$ref\": \"https://example.com/a.json#/definitions/id\"},"
                            " \"day\": {\"type\": \"string\", \"format\": \"date\"}}}",
                            0, NULL);
    json_t *bad = json_loads("{\"id\": \"ab\", \"day\": \"tomorrow\"}", 0, NULL);
    CU_ASSERT_PTR_NULL(tp_jsonschema_compile(js, err, sizeof err)); /* no loader: unresolvable */
    tp_jsonschema_opts_t o = {.load = load_one};
    tp_jsonschema_t *s = tp_jsonschema_compile_opts(js, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_buf_t msg = {0};
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, &msg, 0), 1); /* format: an annotation */
    CU_ASSERT_EQUAL(tp_buf_append(&msg, "", 1), 0);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "/id: expected at least 3 characters, got 2 (\"ab\")");
    tp_jsonschema_free(s);
    o.assert_formats = true;
    s = tp_jsonschema_compile_opts(js, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_buf_reset(&msg);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, &msg, 0), 2);
    CU_ASSERT_EQUAL(tp_buf_append(&msg, "", 1), 0);
    CU_ASSERT_STRING_EQUAL((char *)msg.data, "/id: expected at least 3 characters, got 2 (\"ab\"); "
                                             "/day: expected a valid date, got \"tomorrow\"");
    tp_buf_free(&msg);
    tp_jsonschema_free(s);
    json_decref(bad);
    json_decref(js);
    /* the format checks themselves, a few edges each */
    static const struct {
        tp_format_t f;
        const char *s;
        bool ok;
        /* clang-format off */
    } cases[] = {
        {TP_FORMAT_DATE, "2024-02-29", true},         {TP_FORMAT_DATE, "2023-02-29", false},
        {TP_FORMAT_DATE_TIME, "2024-01-01T10:00:00Z", true}, {TP_FORMAT_DATE_TIME, "2024-01-01 10:00:00Z", false},
        {TP_FORMAT_TIME, "23:59:60Z", true},          {TP_FORMAT_TIME, "12:00:00", false},
        {TP_FORMAT_DURATION, "P1DT2H", true},         {TP_FORMAT_DURATION, "P1D2H", false},
        {TP_FORMAT_EMAIL, "a.b@example.com", true},   {TP_FORMAT_EMAIL, "a..b@example.com", false},
        {TP_FORMAT_HOSTNAME, "api-1.example.com", true}, {TP_FORMAT_HOSTNAME, "-x.com", false},
        {TP_FORMAT_IPV4, "192.168.0.1", true},        {TP_FORMAT_IPV4, "192.168.0.01", false},
        {TP_FORMAT_IPV6, "2001:db8::1", true},        {TP_FORMAT_IPV6, "1::2::3", false},
        {TP_FORMAT_URI, "https://example.com/a?b#c", true}, {TP_FORMAT_URI, "/relative", false},
        {TP_FORMAT_URI_REFERENCE, "/relative", true}, {TP_FORMAT_URI_REFERENCE, "a b", false},
        {TP_FORMAT_UUID, "123e4567-e89b-12d3-a456-426614174000", true}, {TP_FORMAT_UUID, "123e4567", false},
        {TP_FORMAT_JSON_POINTER, "/a~1b", true},      {TP_FORMAT_JSON_POINTER, "/a~2", false},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool got = tp_jsonformat_check(cases[i].f, cases[i].s, strlen(cases[i].s));
        CU_ASSERT_EQUAL(got, cases[i].ok);
        if (got != cases[i].ok)
            fprintf(stderr, "\n%s %s: got %d\n", tp_jsonformat_name(cases[i].f), cases[i].s, got);
    }
}

/* A loader that gives its own document for the draft-07 meta-schema's URI: null only. */
static json_t *load_own_meta(const char *uri, void *arg)
{
    (void)arg;
    return strcmp(uri, "http://json-schema.org/draft-07/schema") == 0 ? json_pack("{s:s}", "type", "null") : NULL;
}

/*
 * The dialects' meta-schemas are built in: a $ref to any of them (and to
 * 2020-12's vocabularies) resolves with no loader, by http or https, and
 * checks schemas as the meta-schema says; a loader's document for the
 * same URI wins.
 */
static void test_builtin_metaschemas(void)
{
    static const char *const uris[] = {
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2020-12/schema",
        "http://json-schema.org/draft/2020-12/schema#",
        "https://json-schema.org/draft/2020-12/meta/core",
        "https://json-schema.org/draft/2020-12/meta/applicator",
        "https://json-schema.org/draft/2020-12/meta/unevaluated",
        "https://json-schema.org/draft/2020-12/meta/validation",
        "https://json-schema.org/draft/2020-12/meta/meta-data",
        "https://json-schema.org/draft/2020-12/meta/format-annotation",
        "https://json-schema.org/draft/2020-12/meta/content",
    };
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"$ref\": \"%s\"}", uris[i]);
        tp_jsonschema_t *s = compile_at(__FILE__, __LINE__, text);
        CU_ASSERT_PTR_NOT_NULL(s);
        if (s == NULL) {
            fprintf(stderr, "\n  %s did not resolve\n", uris[i]);
            continue;
        }
        /* every one of them takes a schema, and has something to say against a number as a "$ref"... */
        json_t *ok = json_pack("{s:s}", "$comment", "fine"), *bad = json_pack("{s:i}", "$ref", 5);
        CU_ASSERT_EQUAL(tp_jsonschema_validate(s, ok, NULL, 0), 0);
        bool vocab_of_ref = strstr(uris[i], "/meta/") == NULL || strstr(uris[i], "/meta/core") != NULL;
        CU_ASSERT_EQUAL(tp_jsonschema_validate(s, bad, NULL, 0) > 0, vocab_of_ref);
        json_decref(ok);
        json_decref(bad);
        tp_jsonschema_free(s);
    }
    const char *d7 = "{\"properties\": {\"schema\": {\"$ref\": \"http://json-schema.org/draft-07/schema#\"}}}";
    VALID(d7,
          "{\"schema\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\", \"minLength\": 1}}}}");
    EXPECT(d7, "{\"schema\": {\"properties\": {\"q\": {\"minLength\": -1}}}}", 1,
           "/schema/properties/q/minLength: expected at least 0, got -1");
    /* 2020-12's recurses through $dynamicRef into its vocabularies */
    const char *d2020 = "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\","
                        " \"properties\": {\"schema\": {\"$ref\": \"https://json-schema.org/draft/2020-12/schema\"}}}";
    VALID(d2020,
          "{\"schema\": {\"$defs\": {\"a\": {\"type\": \"string\"}}, \"prefixItems\": [{\"$ref\": \"#/$defs/a\"}]}}");
    EXPECT(d2020, "{\"schema\": {\"$defs\": {\"a\": {\"type\": \"strin\"}}}}", 1,
           "/schema/$defs/a/type: matched none of 2 alternatives: (1) expected one of "
           "[\"array\",\"boolean\",\"integer\",\"null\",\"number\",\"object\",\"string\"], got \"strin\" (2) expected "
           "array, got string \"strin\"");
    /* the caller's document for the URI comes first */
    char err[512];
    json_t *js = json_loads(d7, 0, NULL), *null = json_loads("{\"schema\": null}", 0, NULL);
    tp_jsonschema_opts_t o = {.load = load_own_meta};
    tp_jsonschema_t *s = tp_jsonschema_compile_opts(js, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, null, NULL, 0), 0);
    tp_jsonschema_free(s);
    s = tp_jsonschema_compile(js, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, null, NULL, 0), 1);
    tp_jsonschema_free(s);
    json_decref(null);
    json_decref(js);
    /* other json-schema.org documents are not built in */
    EXPECT_COMPILE_ERROR("{\"$ref\": \"http://json-schema.org/draft-04/schema#\"}",
                         "/$ref: unresolvable reference \"http://json-schema.org/draft-04/schema#\" (a document that "
                         "is not this schema must be given in \"schema_refs\"; nothing is fetched from the network)");
}

static void test_owns_copy(void)
{
    json_t *js = json_loads("{\"properties\": {\"a\": {\"enum\": [\"x\"]}}}", 0, NULL);
    tp_jsonschema_t *s = tp_jsonschema_compile(js, NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_array_set_new(json_object_get(json_object_get(json_object_get(js, "properties"), "a"), "enum"), 0,
                       json_string("y"));
    json_decref(js);
    json_t *inst = json_pack("{s:s}", "a", "x");
    CU_ASSERT_EQUAL(tp_jsonschema_validate(s, inst, NULL, 0), 0);
    json_decref(inst);
    tp_jsonschema_free(s);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite suite = CU_add_suite("schema", NULL, NULL);
    CU_add_test(suite, "typical messages", test_typical_messages);
    CU_add_test(suite, "all violations joined", test_all_violations_joined);
    CU_add_test(suite, "cap", test_cap);
    CU_add_test(suite, "appends", test_appends);
    CU_add_test(suite, "type messages", test_type_messages);
    CU_add_test(suite, "integer and equality", test_integer);
    CU_add_test(suite, "uniqueItems, many", test_unique_many);
    CU_add_test(suite, "code points", test_code_points);
    CU_add_test(suite, "truncation", test_truncation);
    CU_add_test(suite, "pointer escapes", test_pointer_escapes);
    CU_add_test(suite, "object messages", test_object_messages);
    CU_add_test(suite, "array messages", test_array_messages);
    CU_add_test(suite, "number messages", test_number_messages);
    CU_add_test(suite, "combinators", test_combinators);
    CU_add_test(suite, "refs", test_refs);
    CU_add_test(suite, "2020-12", test_2020_12);
    CU_add_test(suite, "$id scopes", test_id_scopes);
    CU_add_test(suite, "remote documents and formats", test_remote_and_formats);
    CU_add_test(suite, "depth guard", test_depth_guard);
    CU_add_test(suite, "references memoised", test_memo);
    CU_add_test(suite, "work bound", test_work_bound);
    CU_add_test(suite, "compile errors", test_compile_errors);
    CU_add_test(suite, "ECMA-262 regex", test_ecma_regex);
    CU_add_test(suite, "built-in meta-schemas", test_builtin_metaschemas);
    CU_add_test(suite, "owns a copy", test_owns_copy);
    return tp_test_run();
}
