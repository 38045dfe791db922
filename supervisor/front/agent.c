#include "agent.h"

#include <string.h>

#include "error.h"
#include "json.h"
#include "resultline.h"
#include "taxonomy.h"

int tp_format_from_name(const char *name, tp_format_t *out)
{
    static const struct {
        const char *name;
        tp_format_t f;
    } names[] = {
        {"toolpool", TP_FORMAT_TOOLPOOL},
        {"openai", TP_FORMAT_OPENAI},
        {"openai-responses", TP_FORMAT_OPENAI_RESPONSES},
        {"anthropic", TP_FORMAT_ANTHROPIC},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].f;
            return 0;
        }
    return -1;
}

/* key, then s as a JSON string; every append checked by the caller's last one (a buf that failed stays failed). */
static int put_str(tp_buf_t *b, const char *key, const char *s)
{
    int rc = tp_buf_puts(b, key);
    return rc ? rc : tp_json_put_string(b, s ? s : "", s ? strlen(s) : 0);
}

int tp_tool_message_write(tp_buf_t *b, const char *kind, const char *klass, const char *message, bool retryable,
                          uint64_t attempts, const char *served_by, bool escalated, const char *escalation)
{
    int rc = put_str(b, "{\"error\":", kind);
    rc = rc ? rc : put_str(b, ",\"message\":", message);
    rc = rc ? rc
            : tp_buf_printf(b, ",\"retryable\":%s,\"attempts\":%llu", retryable ? "true" : "false",
                            (unsigned long long)attempts);
    rc = rc ? rc
            : put_str(b,
                      ",\"class\":", klass && klass[0] ? klass : tp_class_name(tp_kind_class(tp_kind_from_name(kind))));
    if (rc == 0 && served_by && served_by[0])
        rc = put_str(b, ",\"served_by\":", served_by);
    rc = rc ? rc : tp_buf_puts(b, escalated ? ",\"escalated\":true" : ",\"escalated\":false");
    if (rc == 0 && escalation && escalation[0])
        rc = put_str(b, ",\"escalation\":", escalation);
    rc = rc ? rc : tp_buf_puts(b, "}");
    return rc < 0 ? TP_ENOMEM : 0;
}

/*
 * TEXT: the result's JSON (null for none) when r is ok, else its tool
 * message; as a JSON string.
 */
static int put_text(tp_buf_t *b, const Toolpool__Result *r, tp_buf_t *scratch)
{
    if (r->ok) {
        if (r->result.len == 0)
            return tp_json_put_string(b, "null", 4);
        return tp_json_put_string(b, (const char *)r->result.data, r->result.len);
    }
    if (tp_tool_message_write(scratch, r->kind, r->klass, r->message, r->retryable, r->attempts, r->served_by,
                              r->escalated, r->escalation) < 0)
        return TP_ENOMEM;
    return tp_json_put_string(b, (const char *)scratch->data, scratch->len);
}

int tp_format_write_result(tp_buf_t *b, tp_format_t f, const Toolpool__Result *r)
{
    static const char *const heads[] = {
        [TP_FORMAT_OPENAI] = "{\"role\":\"tool\",\"tool_call_id\":",
        [TP_FORMAT_OPENAI_RESPONSES] = "{\"type\":\"function_call_output\",\"call_id\":",
        [TP_FORMAT_ANTHROPIC] = "{\"type\":\"tool_result\",\"tool_use_id\":",
    };
    static const char *const text_keys[] = {
        [TP_FORMAT_OPENAI] = ",\"content\":",
        [TP_FORMAT_OPENAI_RESPONSES] = ",\"output\":",
        [TP_FORMAT_ANTHROPIC] = ",\"content\":",
    };
    if (f == TP_FORMAT_TOOLPOOL)
        return tp_result_write(b, r);
    size_t mark = b->len;
    tp_buf_t scratch = {0};
    int rc = tp_buf_puts(b, heads[f]);
    if (rc == 0)
        rc = r->has_id ? tp_json_put_string(b, r->id, strlen(r->id)) : tp_buf_puts(b, "null");
    rc = rc ? rc : tp_buf_puts(b, text_keys[f]);
    rc = rc ? rc : put_text(b, r, &scratch);
    if (rc == 0 && f == TP_FORMAT_ANTHROPIC)
        rc = tp_buf_puts(b, r->ok ? ",\"is_error\":false" : ",\"is_error\":true");
    rc = rc ? rc : tp_buf_puts(b, "}\n");
    tp_buf_free(&scratch);
    if (rc < 0) {
        b->len = mark;
        return TP_ENOMEM;
    }
    return 0;
}

int tp_format_write(tp_buf_t *b, tp_format_t f, const tp_answer_t *a)
{
    if (f == TP_FORMAT_TOOLPOOL)
        return tp_answer_write(b, a);
    return a->result ? tp_format_write_result(b, f, a->result) : TP_EINVAL;
}
