/*
 * The JSON Schema compiler and validator (common/jsonschema.h). The input
 * is a schema and an instance, split at the first NUL byte (with none, the
 * schema is checked against itself). A schema that does not compile says
 * why; one that does gives the same number of violations with and without
 * a message, a message exactly when there are violations, and the same
 * count again once the caller's copy of the schema is gone (the compiled
 * schema owns its own).
 */
#include <string.h>

#include "fuzz.h"
#include "jsonschema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    json_t *schema = json_loadb((const char *)data, slen, JSON_DECODE_ANY, NULL);
    if (schema == NULL)
        return 0;
    json_t *instance = nul ? json_loadb((const char *)nul + 1, size - slen - 1, JSON_DECODE_ANY, NULL)
                           : json_incref(schema);
    char err[512];
    err[0] = 0;
    tp_jsonschema_t *s = tp_jsonschema_compile(schema, err, sizeof err);
    if (s == NULL) {
        TP_FUZZ_CHECK(err[0] != 0);
    } else if (instance) {
        tp_buf_t msg = {0};
        int n = tp_jsonschema_validate(s, instance, &msg, 10);
        TP_FUZZ_CHECK(n >= 0);
        TP_FUZZ_CHECK((n == 0) == (msg.len == 0));
        TP_FUZZ_CHECK(tp_jsonschema_validate(s, instance, NULL, 0) == n);
        json_decref(schema);
        schema = NULL;
        TP_FUZZ_CHECK(tp_jsonschema_validate(s, instance, NULL, 0) == n);
        tp_buf_free(&msg);
    }
    tp_jsonschema_free(s);
    json_decref(schema);
    json_decref(instance);
    return 0;
}
