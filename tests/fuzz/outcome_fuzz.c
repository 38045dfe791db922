/*
 * The reading of a tool's answer (worker/outcome.h) over arbitrary bytes:
 * whatever jansson reads as an object whose "error" is a string (every
 * integer read as a real, so that no number's size hides one) is that
 * failure, and nothing else is a failure. A result is one JSON text: when
 * jansson reads the answer, what tp_json_write makes of that; when only
 * the grammar allows it (tp_json_check), the answer compact, every token
 * as written; else a JSON string. tp_outcome_error_from_text says the
 * same, and leaves the outcome as it was when it says no.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "outcome.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    tp_outcome_t o = {0}, e = {0};
    tp_buf_t want = {0};
    tp_outcome_reset(&o);
    tp_outcome_from_text(&o, text, size, true);
    json_t *strict = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    json_t *lenient = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
    bool grammar = tp_json_check(data, size, NULL) == 0;
    /* jansson drops a raw NUL byte where it finds one (json.h): such a text is not JSON. */
    bool nul = memchr(data, 0, size) != NULL;
    const char *kind = json_string_value(json_object_get(lenient, "error"));
    if (kind != NULL && (strict != NULL || !nul))
        TP_FUZZ_CHECK(!o.ok && strncmp(o.kind, kind, sizeof o.kind - 1) == 0);
    if (o.ok) {
        TP_FUZZ_CHECK(tp_json_check(o.result.data, o.result.len, NULL) == 0);
        if (strict != NULL)
            TP_FUZZ_CHECK(tp_json_write(&want, strict, 0) == 0);
        else if (grammar)
            TP_FUZZ_CHECK(tp_json_compact(data, size, &want) == 0);
        if (strict != NULL || grammar)
            TP_FUZZ_CHECK(want.len == o.result.len && memcmp(want.data, o.result.data, want.len) == 0);
        else
            TP_FUZZ_CHECK(o.result.data[0] == '"');
    } else {
        TP_FUZZ_CHECK(strict != NULL || grammar);
        TP_FUZZ_CHECK(o.result.len == 0);
    }

    tp_outcome_reset(&e);
    bool is = tp_outcome_error_from_text(&e, text, size);
    TP_FUZZ_CHECK(is == !o.ok);
    if (is) {
        TP_FUZZ_CHECK(!e.ok && strcmp(e.kind, o.kind) == 0 && e.retry_after_ms == o.retry_after_ms);
        TP_FUZZ_CHECK(e.message.len == o.message.len &&
                      (e.message.len == 0 || memcmp(e.message.data, o.message.data, e.message.len) == 0));
    } else {
        TP_FUZZ_CHECK(e.kind[0] == 0 && e.cost == 0 && e.retry_after_ms == -1 && e.result.len == 0 &&
                      e.message.len == 0);
    }
    json_decref(strict);
    json_decref(lenient);
    tp_buf_free(&want);
    tp_outcome_free(&o);
    tp_outcome_free(&e);
    return 0;
}
