#include "result.h"

#include "json.h"

#include <stdio.h>
#include <string.h>

static void put_str(tp_buf_t *b, const char *key, const char *v)
{
    tp_buf_puts(b, key);
    tp_json_put_string(b, v, strlen(v));
}

static void put_bool(tp_buf_t *b, const char *key, protobuf_c_boolean v)
{
    tp_buf_puts(b, key);
    tp_buf_puts(b, v ? "true" : "false");
}

/* Decimal digits of v, without printf: this runs several times a result line. */
static void put_u64(tp_buf_t *b, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (tp_buf_reserve(b, (size_t)n) < 0)
        return;
    while (n > 0)
        b->data[b->len++] = (uint8_t)tmp[--n];
}

static void put_num(tp_buf_t *b, const char *key, uint64_t v)
{
    tp_buf_puts(b, key);
    put_u64(b, v);
}

static void put_ms(tp_buf_t *b, const char *key, uint64_t us)
{
    tp_buf_puts(b, key);
    put_u64(b, us / 1000u);
    char frac[5] = {'.', (char)('0' + us % 1000 / 100), (char)('0' + us % 100 / 10), (char)('0' + us % 10), 0};
    tp_buf_append(b, frac, 4);
}

static void put_raw(tp_buf_t *b, const char *key, ProtobufCBinaryData v)
{
    tp_buf_puts(b, key);
    if (v.len == 0)
        tp_buf_puts(b, "null");
    else
        tp_buf_append(b, v.data, v.len);
}

int tp_result_write(tp_buf_t *b, const Toolpool__Result *r)
{
    size_t mark = b->len;
    if (r->has_id)
        put_str(b, "{\"id\":", r->id);
    else
        tp_buf_puts(b, "{\"id\":null");
    if (r->job[0])
        put_str(b, ",\"job\":", r->job);
    else
        tp_buf_puts(b, ",\"job\":null");
    put_num(b, ",\"step\":", r->step);
    if (r->tool[0])
        put_str(b, ",\"tool\":", r->tool);
    else
        tp_buf_puts(b, ",\"tool\":null");
    put_bool(b, ",\"ok\":", r->ok);
    if (r->ok) {
        put_raw(b, ",\"result\":", r->result);
    } else {
        put_str(b, ",\"error\":", r->kind);
        put_str(b, ",\"class\":", r->klass);
        put_str(b, ",\"message\":", r->message);
        put_bool(b, ",\"retryable\":", r->retryable);
    }
    put_num(b, ",\"attempts\":", r->attempts);
    if (r->served_by[0])
        put_str(b, ",\"served_by\":", r->served_by);
    else
        tp_buf_puts(b, ",\"served_by\":null");
    put_bool(b, ",\"degraded\":", r->degraded);
    put_bool(b, ",\"stale\":", r->stale);
    put_bool(b, ",\"escalated\":", r->escalated);
    if (r->escalation[0])
        put_str(b, ",\"escalation\":", r->escalation);
    put_ms(b, ",\"duration_ms\":", r->duration_us);
    if (r->cost != 0) {
        tp_buf_puts(b, ",\"cost\":");
        tp_json_put_real(b, r->cost);
    }
    put_raw(b, ",\"args\":", r->args);
    tp_buf_puts(b, ",\"trace\":[");
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        put_num(b, i ? ",{\"attempt\":" : "{\"attempt\":", t->attempt);
        put_str(b, ",\"tool\":", t->tool);
        put_str(b, ",\"outcome\":", t->outcome);
        put_ms(b, ",\"duration_ms\":", t->duration_us);
        put_ms(b, ",\"backoff_ms\":", t->backoff_us);
        put_ms(b, ",\"start_ms\":", t->start_us);
        tp_buf_puts(b, "}");
    }
    if (tp_buf_puts(b, "]}\n") < 0) {
        b->len = mark;
        return -1;
    }
    return 0;
}
