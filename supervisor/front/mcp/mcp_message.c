/*
 * A host's message read (mcp_message.h): jansson's reading, and for JSON it
 * cannot hold, stand-ins for the ids in it so that the rest is read and the
 * request answered under the id the host wrote.
 */
#include "mcp_message.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

void tp_mcp_msg_clear(tp_mcp_msg_t *m)
{
    json_decref(m->msg);
    tp_buf_free(&m->scratch);
    memset(m, 0, sizeof *m);
}

static int bad(tp_mcp_msg_t *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(tp_mcp_msg_t *m, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
    m->kind = TP_MCP_MSG_BAD;
    m->code = code;
    return 0;
}

/* A span of the host's text, and what stands for it in the text jansson reads. */
typedef struct {
    const char *at; /* NULL: none */
    size_t len;
    const char *as;
} span_t;

static const span_t no_span = {0};

/* Appends an id's text, NUL-ended: the host's when it stands as 0, else jansson's writing. Its offset, or -1. */
static long put_id(tp_buf_t *b, const json_t *id, const span_t *big)
{
    size_t at = b->len;
    int rc = big->at ? tp_buf_append(b, big->at, big->len) : tp_json_write(b, id, 0);
    if (rc < 0 || tp_buf_append(b, "", 1) < 0)
        return -1;
    return (long)at;
}

static bool id_kind(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id) || json_is_real(id);
}

/* m->msg read as a message; big_id and big_rid: the host's text of the ids that stand as 0 in it. */
static int read_parsed(tp_mcp_msg_t *m, const span_t *big_id, const span_t *big_rid)
{
    json_t *msg = m->msg;
    json_t *id = json_object_get(msg, "id"), *jv = json_object_get(msg, "jsonrpc");
    json_t *jm = json_object_get(msg, "method"), *params = json_object_get(msg, "params");
    long id_at = -1, rid_at = -1;
    if (id_kind(id) && (id_at = put_id(&m->scratch, id, big_id)) < 0)
        return TP_ENOMEM;
    if (json_is_string(jm) && strcmp(json_string_value(jm), "notifications/cancelled") == 0) {
        json_t *rid = json_object_get(params, "requestId");
        if (id_kind(rid) && (rid_at = put_id(&m->scratch, rid, big_rid)) < 0)
            return TP_ENOMEM;
    }
    const char *base = (const char *)m->scratch.data;
    m->id = id_at >= 0 ? base + id_at : NULL;
    m->request_id = rid_at >= 0 ? base + rid_at : NULL;
    if (!json_is_string(jv) || strcmp(json_string_value(jv), "2.0") != 0)
        return bad(m, -32600, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    if (jm == NULL && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
        m->kind = TP_MCP_MSG_RESPONSE;
        return 0;
    }
    if (!json_is_string(jm))
        return bad(m, -32600, "Invalid Request: \"method\" must be a string");
    if (id && !id_kind(id)) {
        m->id = NULL;
        return bad(m, -32600, "Invalid Request: \"id\" must be a string or a number (MCP: never null)");
    }
    if (params && !json_is_object(params) && !json_is_array(params))
        return bad(m, -32600, "Invalid Request: \"params\" must be an object");
    m->method = json_string_value(jm);
    m->params = params;
    m->kind = id ? TP_MCP_MSG_REQUEST : TP_MCP_MSG_NOTIFICATION;
    return 0;
}

/* Whether the value text at p (n bytes, JSON) is a number that jansson cannot hold. */
static bool number_past_jansson(const char *p, size_t n)
{
    if (n == 0 || !(*p == '-' || (*p >= '0' && *p <= '9')))
        return false;
    json_t *v = tp_json_loadb(p, n, JSON_DECODE_ANY, NULL);
    json_decref(v);
    return v == NULL;
}

/* The text with each span (in the text's order, apart) written as its stand-in, into out. */
static int replaced(const char *text, size_t len, const span_t *spans, int n, tp_buf_t *out)
{
    const char *from = text;
    int rc = 0;
    tp_buf_reset(out);
    for (int i = 0; i < n && rc == 0; i++) {
        if (spans[i].at == NULL)
            continue;
        rc = tp_buf_append(out, from, (size_t)(spans[i].at - from));
        if (rc == 0)
            rc = tp_buf_puts(out, spans[i].as);
        from = spans[i].at + spans[i].len;
    }
    return rc ? rc : tp_buf_append(out, from, (size_t)(text + len - from));
}

/* Two spans in the text's order. */
static void in_order(span_t *two, span_t a, span_t b)
{
    bool swap = a.at && b.at && b.at < a.at;
    two[0] = swap ? b : a;
    two[1] = swap ? a : b;
}

/* The column of jansson's error in a text with stand-ins, as a column of the host's text. */
static int host_column(const json_error_t *e, const span_t *spans, int n, const char *text)
{
    int col = e->column;
    size_t shift = 0;
    for (int i = 0; i < n; i++) {
        if (spans[i].at == NULL)
            continue;
        size_t d = spans[i].len - strlen(spans[i].as);
        if ((size_t)(spans[i].at - text) - shift < (size_t)e->position) {
            col += (int)d;
            shift += d;
        }
    }
    return col;
}

/* A member's value, as a span to stand in for; none when the text has no such member. */
static span_t member(const char *text, size_t len, const char *name, const char *as)
{
    const char *v;
    size_t n;
    return tp_json_member(text, len, name, &v, &n) == 0 ? (span_t){v, n, as} : no_span;
}

/*
 * Valid JSON (an object) that jansson would not read. A request's id, or a
 * cancellation's requestId, past what jansson holds stands as 0, its text
 * kept; if the rest then reads, it is the message. Else what cannot be read
 * decides the error: the params alone (the message reads with {} for them)
 * are the request's -32602, or nothing for a notification; more than them,
 * -32600.
 */
static int read_past_jansson(tp_mcp_msg_t *m, const char *text, size_t len)
{
    span_t id = member(text, len, "id", "0"), params = member(text, len, "params", "{}"), rid = no_span;
    if (id.at && !number_past_jansson(id.at, id.len))
        id = no_span;
    span_t method = member(text, len, "method", "");
    if (params.at && method.len == 25 && memcmp(method.at, "\"notifications/cancelled\"", 25) == 0) {
        rid = member(params.at, params.len, "requestId", "0");
        if (rid.at && !number_past_jansson(rid.at, rid.len))
            rid = no_span;
    }
    span_t spans[2];
    in_order(spans, id, rid);
    tp_buf_t copy = {0};
    json_error_t jerr;
    int rc = replaced(text, len, spans, 2, &copy);
    if (rc == 0 && (m->msg = tp_json_loadb((const char *)copy.data, copy.len, JSON_DECODE_ANY, &jerr)) != NULL) {
        rc = read_parsed(m, &id, &rid);
        goto out;
    }
    if (rc != 0)
        goto out;
    int col = host_column(&jerr, spans, 2, text);
    if (params.at) {
        in_order(spans, id, params);
        if ((rc = replaced(text, len, spans, 2, &copy)) != 0)
            goto out;
        if ((m->msg = tp_json_loadb((const char *)copy.data, copy.len, JSON_DECODE_ANY, NULL)) != NULL) {
            rc = read_parsed(m, &id, &no_span);
            if (rc == 0 && m->kind == TP_MCP_MSG_REQUEST) {
                bad(m, -32602,
                    "Invalid params: toolpool cannot hold them (%s, column %d): an integer must fit in 64 bits, a "
                    "number in a double, nesting in 2048 levels",
                    jerr.text, col);
                m->kind = TP_MCP_MSG_BAD_PARAMS;
            }
            json_decref(m->msg); /* its params are a stand-in: nothing may act on them */
            m->msg = NULL;
            m->method = NULL;
            m->params = NULL;
            m->request_id = NULL;
            goto out;
        }
    }
    /* more than the params: refused, under the id the host wrote when it is one */
    if (id.at == NULL)
        id = member(text, len, "id", "");
    if (id.at && (*id.at == '"' || *id.at == '-' || (*id.at >= '0' && *id.at <= '9'))) {
        if (tp_buf_append(&m->scratch, id.at, id.len) < 0 || tp_buf_append(&m->scratch, "", 1) < 0) {
            rc = TP_ENOMEM;
            goto out;
        }
        m->id = (const char *)m->scratch.data;
    }
    bad(m, -32600,
        "Invalid Request: toolpool cannot hold it (%s, column %d): an integer must fit in 64 bits, a number in a "
        "double, nesting in 2048 levels",
        jerr.text, col);
out:
    tp_buf_free(&copy);
    return rc;
}

int tp_mcp_msg_read(tp_mcp_msg_t *m, const char *text, size_t len)
{
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    if (i == len) {
        m->kind = TP_MCP_MSG_BLANK;
        return 0;
    }
    json_error_t jerr;
    json_t *v = tp_json_loadb(text, len, JSON_DECODE_ANY, &jerr);
    if (v == NULL && tp_json_check(text, len, NULL) != 0)
        return bad(m, -32700, "Parse error: %s (column %d)", jerr.text, jerr.column);
    bool batch = v ? json_is_array(v) : text[i] == '[', object = v ? json_is_object(v) : text[i] == '{';
    if (!object) {
        json_decref(v);
        if (batch)
            return bad(m, -32600, "Invalid Request: a batch (a JSON array); MCP takes one message at a time");
        return bad(m, -32600, "Invalid Request: a message must be a JSON object");
    }
    if (v == NULL)
        return read_past_jansson(m, text, len);
    m->msg = v;
    return read_parsed(m, &no_span, &no_span);
}
