/*
 * The JSON Schema compiler and validator (supervisor/jsonschema/jsonschema.h). The input
 * is a schema and an instance, split at the first NUL byte (with none, the
 * schema is checked against itself). The schema is compiled twice: as
 * draft-07 with formats annotations, and as 2020-12 (its default dialect)
 * with formats asserted and a loader that serves the schema itself as the
 * document "https://fuzz.example/self", so $dynamicRef, unevaluated*,
 * remote references and the format checks are reached too. A schema that
 * does not compile says why; one that does gives the same number of
 * violations with and without a message, a message exactly when there are
 * violations, and the same count again once the caller's copy of the
 * schema is gone (the compiled schema owns its own). A check that passes
 * the work bound (TP_E2BIG) says so in its message; writing messages costs
 * steps, so the bound may fall between a run with one and a run without.
 * The corpus has the doubling $ref chain in both forms: the one the memo
 * collapses and the one (under unevaluatedProperties) the bound stops.
 */
#include <string.h>

#include "fuzz.h"
#include "jsonschema.h"

static json_t *self_doc;

static json_t *load_self(const char *uri, void *arg)
{
    (void)arg;
    return strcmp(uri, "https://fuzz.example/self") == 0 && self_doc ? json_incref(self_doc) : NULL;
}

static void one(const json_t *schema_in, const json_t *instance, const tp_jsonschema_opts_t *opts)
{
    json_t *schema = json_deep_copy(schema_in);
    if (schema == NULL)
        return;
    char err[512];
    err[0] = 0;
    tp_jsonschema_t *s = tp_jsonschema_compile_opts(schema, opts, err, sizeof err);
    if (s == NULL) {
        TP_FUZZ_CHECK(err[0] != 0);
    } else if (instance) {
        tp_buf_t msg = {0};
        int n = tp_jsonschema_validate(s, instance, &msg, 10);
        TP_FUZZ_CHECK(n >= 0 || n == TP_E2BIG);
        TP_FUZZ_CHECK((n == 0) == (msg.len == 0));
        int quiet = tp_jsonschema_validate(s, instance, NULL, 0);
        TP_FUZZ_CHECK(quiet == n || quiet == TP_E2BIG || n == TP_E2BIG);
        json_decref(schema);
        schema = NULL;
        TP_FUZZ_CHECK(tp_jsonschema_validate(s, instance, NULL, 0) == quiet);
        tp_buf_free(&msg);
    }
    tp_jsonschema_free(s);
    json_decref(schema);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    json_t *schema = json_loadb((const char *)data, slen, JSON_DECODE_ANY, NULL);
    if (schema == NULL)
        return 0;
    json_t *instance = nul ? json_loadb((const char *)nul + 1, size - slen - 1, JSON_DECODE_ANY, NULL)
                           : json_incref(schema);
    tp_jsonschema_opts_t d7 = {.dialect = TP_JSONSCHEMA_DRAFT7};
    one(schema, instance, &d7);
    self_doc = schema;
    tp_jsonschema_opts_t d2020 = {.dialect = TP_JSONSCHEMA_2020_12, .assert_formats = true, .load = load_self};
    one(schema, instance, &d2020);
    self_doc = NULL;
    json_decref(schema);
    json_decref(instance);
    return 0;
}
