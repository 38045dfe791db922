/*
 * tp_json_loadb (common/json/jsonload.c) against json_loadb, with every
 * flag it knows and a few together: the same value, written back alike
 * (types, key order, spelling of each number), or the same error. And
 * where its own parser takes a text, jansson reads that text the same.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"

/* v's compact text (the fuzzer's scratch), or NULL. */
static char *dump(const json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)) : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t flags[] = {
        0,
        JSON_DECODE_ANY,
        JSON_REJECT_DUPLICATES,
        JSON_DECODE_ANY | JSON_ALLOW_NUL,
        JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL,
        JSON_DISABLE_EOF_CHECK, /* one it does not know: jansson's all the way */
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        json_error_t want_err, got_err;
        json_t *want = json_loadb((const char *)data, size, flags[i], &want_err);
        json_t *got = tp_json_loadb((const char *)data, size, flags[i], &got_err);
        json_t *fast = tp_json_load_fast((const char *)data, size, flags[i]);
        TP_FUZZ_CHECK((want == NULL) == (got == NULL));
        TP_FUZZ_CHECK(fast == NULL || want != NULL);
        TP_FUZZ_CHECK(want_err.position == got_err.position && want_err.line == got_err.line &&
                      want_err.column == got_err.column && strcmp(want_err.source, got_err.source) == 0);
        if (want == NULL) {
            TP_FUZZ_CHECK(strcmp(want_err.text, got_err.text) == 0);
        } else {
            char *w = dump(want), *g = dump(got), *f = dump(fast);
            TP_FUZZ_CHECK(w != NULL && g != NULL && strcmp(w, g) == 0);
            TP_FUZZ_CHECK(fast == NULL || (f != NULL && strcmp(w, f) == 0));
            TP_FUZZ_CHECK(json_equal(want, got));
            free(w);
            free(g);
            free(f);
        }
        json_decref(want);
        json_decref(got);
        json_decref(fast);
    }
    return 0;
}
