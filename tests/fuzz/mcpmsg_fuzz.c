/*
 * A host's message as toolpool's MCP fronts read it
 * (supervisor/front/mcp/mcp_message.h), against jansson and the grammar
 * check: text that is not JSON, and only that, is -32700; every id kept is
 * one JSON value, jansson's writing of the id whenever jansson reads the
 * message; a request has a method and an id, a notification no id, and an
 * error a code JSON-RPC names and a message.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "mcp_message.h"

static bool one_value(const char *text)
{
    return text == NULL || tp_json_check(text, strlen(text), NULL) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    tp_mcp_msg_t m = {0};
    if (tp_mcp_msg_read(&m, text, size) != 0) {
        tp_mcp_msg_clear(&m);
        return 0;
    }
    size_t i = 0;
    while (i < size && text[i] && strchr(" \t\r\n", text[i]))
        i++;
    bool blank = i == size, grammar = tp_json_check(data, size, NULL) == 0;
    json_t *v = json_loadb(text, size, JSON_DECODE_ANY, NULL);
    TP_FUZZ_CHECK((m.kind == TP_MCP_MSG_BLANK) == blank);
    TP_FUZZ_CHECK(one_value(m.id) && one_value(m.request_id));
    switch (m.kind) {
    case TP_MCP_MSG_REQUEST:
        TP_FUZZ_CHECK(m.msg != NULL && m.method != NULL && m.id != NULL);
        break;
    case TP_MCP_MSG_NOTIFICATION:
        TP_FUZZ_CHECK(m.id == NULL);
        break;
    case TP_MCP_MSG_BAD:
    case TP_MCP_MSG_BAD_PARAMS:
        TP_FUZZ_CHECK(m.code == -32700 || m.code == -32600 || m.code == -32602);
        TP_FUZZ_CHECK(m.error[0] != '\0');
        TP_FUZZ_CHECK((m.code == -32700) == (!blank && !grammar && v == NULL));
        TP_FUZZ_CHECK(m.kind == TP_MCP_MSG_BAD || (m.code == -32602 && m.id != NULL));
        break;
    default:
        break;
    }
    json_t *id = json_object_get(v, "id");
    if (v != NULL) {
        TP_FUZZ_CHECK(m.kind != TP_MCP_MSG_BAD_PARAMS);
        if (m.id != NULL && (json_is_string(id) || json_is_integer(id) || json_is_real(id))) {
            tp_buf_t w = {0};
            TP_FUZZ_CHECK(tp_json_write(&w, id, 0) == 0);
            TP_FUZZ_CHECK(w.len == strlen(m.id) && memcmp(w.data, m.id, w.len) == 0);
            tp_buf_free(&w);
        }
    }
    json_decref(v);
    tp_mcp_msg_clear(&m);
    return 0;
}
