/*
 * The plain-JSON scanner (common/json/jsonscan.h) against jansson, as the worker
 * uses it for results: whatever text the scanner takes as plain, jansson
 * must read (JSON_DECODE_ANY | JSON_ALLOW_NUL, as the worker reads), and
 * tp_json_write must make of jansson's value byte for byte what the
 * scanner copied; whatever jansson refuses, the scanner must refuse too.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "jsonscan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tp_buf_t fast = {0}, slow = {0};
    tp_buf_append(&fast, "pre", 3); /* appended after what is there */
    int rc = tp_json_compact_plain((const char *)data, size, &fast);
    TP_FUZZ_CHECK(rc == 0 || rc == 1);
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (rc == 1) {
        TP_FUZZ_CHECK(v != NULL);
        TP_FUZZ_CHECK(tp_json_write(&slow, v, 0) == 0);
        TP_FUZZ_CHECK(fast.len == slow.len + 3 && memcmp(fast.data + 3, slow.data, slow.len) == 0);
    } else {
        TP_FUZZ_CHECK(fast.len == 3 && memcmp(fast.data, "pre", 3) == 0);
    }
    json_decref(v);
    tp_buf_free(&fast);
    tp_buf_free(&slow);
    return 0;
}
