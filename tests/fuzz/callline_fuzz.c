/*
 * The call-line scanner (supervisor/front/callline.h) against jansson: whatever
 * line the scanner takes as a plain call, jansson must read as one too
 * (an object with a non-empty string id and tool, a non-empty string job if
 * any, a step that is an integer >= 0 if any, args an object if any), with
 * the same id, tool, job and step, and byte for byte the same compact and
 * canonical args as tp_json_write makes of jansson's tree.
 */
#include <jansson.h>
#include <string.h>

#include "callline.h"
#include "fuzz.h"
#include "json.h"

static tp_buf_t strs, canon;

static bool same_str(json_t *v, const char *s, size_t len)
{
    return json_is_string(v) && json_string_length(v) == len && memcmp(json_string_value(v), s, len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tp_call_line_t c;
    int rc = tp_call_line_scan((const char *)data, size, &c, &strs, &canon);
    TP_FUZZ_CHECK(rc == 0 || rc == 1);
    if (rc != 1)
        return 0;
    json_t *v = json_loadb((const char *)data, size, 0, NULL);
    TP_FUZZ_CHECK(json_is_object(v));
    json_t *id = json_object_get(v, "id"), *tool = json_object_get(v, "tool"), *job = json_object_get(v, "job");
    json_t *step = json_object_get(v, "step"), *args = json_object_get(v, "args");
    TP_FUZZ_CHECK(json_is_string(id) && json_string_length(id) > 0 && same_str(id, c.id, strlen(c.id)));
    TP_FUZZ_CHECK(json_is_string(tool) && json_string_length(tool) > 0 && same_str(tool, c.tool, strlen(c.tool)));
    if (job)
        TP_FUZZ_CHECK(c.job && json_string_length(job) > 0 && same_str(job, c.job, c.job_len) &&
                      strlen(c.job) == c.job_len);
    else
        TP_FUZZ_CHECK(c.job == NULL);
    if (step)
        TP_FUZZ_CHECK(json_is_integer(step) && json_integer_value(step) >= 0 && c.has_step &&
                      (uint64_t)json_integer_value(step) == c.step);
    else
        TP_FUZZ_CHECK(!c.has_step);
    TP_FUZZ_CHECK(args == NULL || json_is_object(args));
    json_t *empty = args ? NULL : json_object();
    tp_buf_t compact = {0}, canonical = {0};
    TP_FUZZ_CHECK(tp_json_write(&compact, args ? args : empty, 0) == 0);
    TP_FUZZ_CHECK(tp_json_write(&canonical, args ? args : empty, TP_JSON_CANONICAL) == 0);
    TP_FUZZ_CHECK(compact.len == c.args_len && memcmp(compact.data, c.args, c.args_len) == 0 &&
                  c.args[c.args_len] == 0);
    TP_FUZZ_CHECK(canonical.len == c.canon_len && memcmp(canonical.data, c.canon, c.canon_len) == 0);
    tp_buf_free(&compact);
    tp_buf_free(&canonical);
    json_decref(empty);
    json_decref(v);
    free(c.args);
    return 0;
}
