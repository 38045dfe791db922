/*
 * What the mcp adapter makes of a server's answer to tools/call
 * (worker/mcp_result.h), the answer read as the client reads a line
 * (tp_mcpio_parse): every answer is a success or a failure, never neither.
 * A success is compact JSON within max_output, {"content": [...]} with the
 * answer's own content blocks, each an object with a string "type"; a
 * failure of toolpool's naming says why.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "mcp_result.h"
#include "mcpstdio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *answer = NULL;
    char why[200];
    if (tp_mcpio_parse((const char *)data, size, &answer, why, sizeof why) != 0) {
        json_decref(answer);
        return 0;
    }
    uint64_t max_output = size > 0 && data[0] == '{' ? 1u << 20 : 64; /* some past the cap */
    tp_outcome_t o = {0};
    tp_outcome_reset(&o);
    tp_mcp_result("fuzz", max_output, answer, &o);
    if (o.ok) {
        TP_FUZZ_CHECK(o.kind[0] == '\0');
        TP_FUZZ_CHECK(o.result.len <= max_output);
        TP_FUZZ_CHECK(tp_json_check(o.result.data, o.result.len, NULL) == 0);
        json_t *r = json_loadb((const char *)o.result.data, o.result.len, 0, NULL);
        json_t *content = json_object_get(r, "content");
        TP_FUZZ_CHECK(json_is_array(content));
        TP_FUZZ_CHECK(json_equal(content, json_object_get(json_object_get(answer, "result"), "content")));
        size_t i;
        json_t *block;
        json_array_foreach(content, i, block)
            TP_FUZZ_CHECK(json_is_string(json_object_get(block, "type")));
        json_decref(r);
    } else if (!json_is_true(json_object_get(json_object_get(answer, "result"), "isError"))) {
        /* a failure of toolpool's naming says why (a tool's own error object may name a kind and say nothing) */
        TP_FUZZ_CHECK(o.kind[0] != '\0' && o.message.len > 0);
    }
    tp_outcome_free(&o);
    json_decref(answer);
    return 0;
}
