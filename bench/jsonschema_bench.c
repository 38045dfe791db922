/*
 * How long tp_jsonschema_validate takes on a typical call's arguments: a
 * 5-property object (types, required, an enum, a maximum, a pattern, a
 * nested object) against its tool's schema, the check every call pays
 * before it is dispatched. The target is under 2 us per validation.
 *
 *   cmake --build BUILD --target jsonschema_bench && BUILD/jsonschema_bench [N]
 *
 * Averages over N validations (default 1,000,000) after a warm-up, and sets
 * the figure beside its peer on the same path: parsing the same arguments
 * from their JSON text with jansson (json_loads), which every call also
 * pays. Also times an invalid call, message included (3 violations).
 */
#include "buf.h"
#include "jsonschema.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* clang-format off */
static const char *const schema_text =
    "{\"type\": \"object\","
    " \"properties\": {"
    "   \"q\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 500},"
    "   \"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 100},"
    "   \"lang\": {\"type\": \"string\", \"enum\": [\"en\", \"de\", \"fr\", \"es\", \"ja\"]},"
    "   \"filters\": {\"type\": \"object\","
    "                 \"properties\": {\"from\": {\"type\": \"string\", \"pattern\": "
    "\"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"},"
    "                                \"to\": {\"type\": \"string\", \"pattern\": "
    "\"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"}},"
    "                 \"required\": [\"from\"], \"additionalProperties\": false},"
    "   \"exact\": {\"type\": \"boolean\"}},"
    " \"required\": [\"q\"],"
    " \"additionalProperties\": false}";
/* clang-format on */

/*
 * The same tool as an MCP server writes its inputSchema in 2020-12: the
 * filters object in $defs behind a $ref, the closed object closed with
 * unevaluatedProperties (what Pydantic and Zod emit), so the walk collects
 * annotations through the $ref.
 */
/* clang-format off */
static const char *const schema2020_text =
    "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\","
    " \"type\": \"object\","
    " \"properties\": {"
    "   \"q\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 500},"
    "   \"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 100},"
    "   \"lang\": {\"type\": \"string\", \"enum\": [\"en\", \"de\", \"fr\", \"es\", \"ja\"]},"
    "   \"filters\": {\"$ref\": \"#/$defs/filters\"},"
    "   \"exact\": {\"type\": \"boolean\"}},"
    " \"required\": [\"q\"],"
    " \"unevaluatedProperties\": false,"
    " \"$defs\": {\"day\": {\"type\": \"string\", \"pattern\": \"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"},"
    "   \"filters\": {\"type\": \"object\","
    "               \"properties\": {\"from\": {\"$ref\": \"#/$defs/day\"}, \"to\": {\"$ref\": \"#/$defs/day\"}},"
    "               \"required\": [\"from\"], \"unevaluatedProperties\": false}}}";
/* clang-format on */

/* clang-format off */
static const char *const args_text =
    "{\"q\": \"refund window\", \"limit\": 10, \"lang\": \"en\", \"filters\": {\"from\": \"2024-01-01\"},"
    " \"exact\": false}";
/* clang-format on */

/* clang-format off */
static const char *const bad_text =
    "{\"q\": \"refund window\", \"limit\": 250, \"lang\": \"xx\", \"filters\": {\"from\": \"yesterday\"},"
    " \"exact\": false}";
/* clang-format on */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Average ns of one validation over n, msg NULL or reset each time. */
static double time_validate(const tp_jsonschema_t *s, const json_t *v, tp_buf_t *msg, long n, int want)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (msg != NULL)
            tp_buf_reset(msg);
        if (tp_jsonschema_validate(s, v, msg, 10) != want) {
            fprintf(stderr, "jsonschema_bench: unexpected verdict\n");
            exit(1);
        }
    }
    return (now_ns() - t0) / (double)n;
}

static double time_parse(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        json_t *v = json_loads(args_text, 0, NULL);
        if (v == NULL)
            exit(1);
        json_decref(v);
    }
    return (now_ns() - t0) / (double)n;
}

/* Compiles text or exits. */
static tp_jsonschema_t *compile_or_die(const char *text)
{
    char err[256];
    json_t *js = json_loads(text, 0, NULL);
    tp_jsonschema_t *s = js ? tp_jsonschema_compile(js, err, sizeof err) : NULL;
    json_decref(js);
    if (s == NULL) {
        fprintf(stderr, "jsonschema_bench: %s\n", js ? err : "bad schema fixture");
        exit(1);
    }
    return s;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    json_t *args = json_loads(args_text, 0, NULL);
    json_t *bad = json_loads(bad_text, 0, NULL);
    if (args == NULL || bad == NULL || n < 1) {
        fprintf(stderr, "jsonschema_bench: bad fixture or N\n");
        return 1;
    }
    tp_jsonschema_t *s = compile_or_die(schema_text);
    tp_jsonschema_t *s2020 = compile_or_die(schema2020_text);
    tp_buf_t msg = {0};
    tp_jsonschema_validate(s, bad, &msg, 10);
    printf("invalid args say: %.*s\n", (int)msg.len, (char *)msg.data);

    time_validate(s, args, NULL, n / 10 + 1, 0); /* warm-up */
    double valid = time_validate(s, args, NULL, n, 0);
    double valid_msg = time_validate(s, args, &msg, n, 0);
    double invalid = time_validate(s, bad, &msg, n / 10 + 1, 3);
    double valid2020 = time_validate(s2020, args, NULL, n, 0);
    double invalid2020 = time_validate(s2020, bad, &msg, n / 10 + 1, 3);
    double parse = time_parse(n / 10 + 1);

    printf("draft-07, valid args          %8.1f ns  (%ld runs; target < 2000 ns: %s)\n", valid, n,
           valid < 2000 ? "met" : "MISSED");
    printf("draft-07, valid args, msg buf %8.1f ns\n", valid_msg);
    printf("draft-07, invalid + message   %8.1f ns  (3 violations)\n", invalid);
    printf("2020-12 $defs/$ref/unevaluatedProperties, valid args %8.1f ns  (%.2fx draft-07; target < 2000 ns: %s)\n",
           valid2020, valid2020 / valid, valid2020 < 2000 ? "met" : "MISSED");
    printf("2020-12, invalid + message    %8.1f ns  (3 violations)\n", invalid2020);
    printf("json_loads of the same args   %8.1f ns  (peer: validate costs %.2fx a parse)\n", parse, valid / parse);
    tp_buf_free(&msg);
    tp_jsonschema_free(s);
    tp_jsonschema_free(s2020);
    json_decref(args);
    json_decref(bad);
    return valid < 2000 && valid2020 < 2000 ? 0 : 1;
}
