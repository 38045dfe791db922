#include "resultline.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"

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

static size_t slen6(const char *s)
{
    return s ? strlen(s) * 6 + 2 : 2;
}

int tp_result_write(tp_buf_t *b, const Toolpool__Result *r)
{
    size_t mark = b->len;
    /*
     * Room for the whole line first (a string escapes to at most six bytes
     * a byte), so that no append after can fail and leave a line cut.
     */
    size_t need = 400 + slen6(r->id) + slen6(r->job) + slen6(r->tool) + slen6(r->kind) + slen6(r->klass) +
                  slen6(r->message) + slen6(r->served_by) + slen6(r->escalation) + slen6(r->version) + r->result.len +
                  r->args.len;
    for (size_t i = 0; i < r->n_trace; i++)
        need += 160 + slen6(r->trace[i]->tool) + slen6(r->trace[i]->outcome);
    if (tp_buf_reserve(b, need) < 0)
        return TP_ENOMEM;
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
    if (r->version && r->version[0]) /* only when its tool has one: other lines are as they were */
        put_str(b, ",\"version\":", r->version);
    put_bool(b, ",\"ok\":", r->ok);
    if (r->ok) {
        put_raw(b, ",\"result\":", r->result);
    } else {
        put_str(b, ",\"error\":", r->kind);
        put_str(b, ",\"class\":", r->klass);
        put_str(b, ",\"message\":", r->message);
        put_bool(b, ",\"retryable\":", r->retryable);
        if (r->has_retry_after)
            put_num(b, ",\"retry_after_ms\":", r->retry_after_ms);
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
        if (t->spawn_us)
            put_ms(b, ",\"spawn_ms\":", t->spawn_us); /* an exec attempt's: its process's start */
        tp_buf_puts(b, "}");
    }
    if (tp_buf_puts(b, "]}\n") < 0) {
        b->len = mark;
        return TP_ENOMEM;
    }
    return 0;
}

/* ---- a line read back: the records of formats 2 and 3 ---- */

typedef struct {
    const char *text; /* the object, its newline left off */
    size_t n;
    json_t *keep; /* what decoded strings point into, until the record is packed */
} reader_t;

/*
 * The raw text of member name, or NULL. Not inlined: gcc 12 at -O3 takes
 * the pointer handed back for one to the local it came through.
 */
__attribute__((noinline)) static const char *member(const reader_t *rd, const char *name, size_t *n)
{
    const char *v = NULL;
    *n = 0;
    return tp_json_member(rd->text, rd->n, name, &v, n) == 0 ? v : NULL;
}

static bool is_lit(const char *v, size_t n, const char *lit)
{
    return v && n == strlen(lit) && memcmp(v, lit, n) == 0;
}

/* A string member, decoded: "" when absent or null; false when it is not a string. */
static bool read_str(reader_t *rd, const char *name, char **out)
{
    size_t n;
    const char *v = member(rd, name, &n);
    *out = (char *)"";
    if (v == NULL || is_lit(v, n, "null"))
        return true;
    json_t *s = tp_json_loadb(v, n, JSON_DECODE_ANY, NULL);
    if (!json_is_string(s)) {
        json_decref(s);
        return false;
    }
    if (json_array_append_new(rd->keep, s) != 0)
        return false;
    *out = (char *)json_string_value(s);
    return true;
}

static bool read_bool(const reader_t *rd, const char *name, protobuf_c_boolean *out)
{
    size_t n;
    const char *v = member(rd, name, &n);
    *out = is_lit(v, n, "true");
    return v == NULL || *out || is_lit(v, n, "false");
}

/* Digits, into *out; false past uint64 or for anything else. */
static bool digits(const char *v, size_t n, uint64_t *out)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)(v[i] - '0');
        if (v[i] < '0' || v[i] > '9' || x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *out = x;
    return n > 0;
}

static bool read_u64(const reader_t *rd, const char *name, uint64_t *out)
{
    size_t n;
    const char *v = member(rd, name, &n);
    *out = 0;
    return v == NULL || digits(v, n, out);
}

/* Milliseconds as put_ms writes them (digits, a point, three digits), in microseconds. */
static bool read_ms(const reader_t *rd, const char *name, uint64_t *us)
{
    size_t n;
    const char *v = member(rd, name, &n);
    *us = 0;
    if (v == NULL)
        return true;
    const char *dot = memchr(v, '.', n);
    uint64_t whole, frac = 0;
    size_t fn = dot ? n - (size_t)(dot + 1 - v) : 0;
    if (!digits(v, dot ? (size_t)(dot - v) : n, &whole) || fn > 3 || (fn > 0 && !digits(dot + 1, fn, &frac)))
        return false;
    for (size_t i = fn; i < 3; i++)
        frac *= 10;
    *us = whole * 1000 + frac;
    return true;
}

/* A JSON text member kept as it is (none, or null: empty). */
static void read_raw(const reader_t *rd, const char *name, ProtobufCBinaryData *out)
{
    size_t n;
    const char *v = member(rd, name, &n);
    out->data = NULL;
    out->len = 0;
    if (v && !is_lit(v, n, "null")) {
        out->data = (uint8_t *)v;
        out->len = n;
    }
}

static uint64_t ms_to_us(const json_t *v)
{
    double ms = json_number_value(v);
    return ms > 0 ? (uint64_t)llround(ms * 1000.0) : 0;
}

/* The trace's attempts, into r (their strings in rd->keep). */
static bool read_trace(reader_t *rd, Toolpool__Result *r, Toolpool__Attempt **at)
{
    size_t n;
    const char *v = member(rd, "trace", &n);
    if (v == NULL)
        return true;
    json_t *a = tp_json_loadb(v, n, 0, NULL);
    if (!json_is_array(a)) {
        json_decref(a);
        return false;
    }
    if (json_array_append_new(rd->keep, a) != 0)
        return false;
    size_t count = json_array_size(a);
    if (count == 0)
        return true;
    Toolpool__Attempt *v_at = calloc(count, sizeof *v_at);
    r->trace = calloc(count, sizeof *r->trace);
    *at = v_at;
    if (v_at == NULL || r->trace == NULL)
        return false;
    for (size_t i = 0; i < count; i++) {
        json_t *e = json_array_get(a, i);
        const char *tool = json_string_value(json_object_get(e, "tool"));
        const char *outcome = json_string_value(json_object_get(e, "outcome"));
        json_int_t no = json_integer_value(json_object_get(e, "attempt"));
        if (!json_is_object(e) || tool == NULL || outcome == NULL)
            return false;
        toolpool__attempt__init(&v_at[i]);
        v_at[i].attempt = no > 0 ? (uint32_t)no : 0;
        v_at[i].tool = (char *)tool;
        v_at[i].outcome = (char *)outcome;
        v_at[i].duration_us = ms_to_us(json_object_get(e, "duration_ms"));
        v_at[i].backoff_us = ms_to_us(json_object_get(e, "backoff_ms"));
        v_at[i].start_us = ms_to_us(json_object_get(e, "start_ms"));
        v_at[i].spawn_us = ms_to_us(json_object_get(e, "spawn_ms"));
        r->trace[i] = &v_at[i];
    }
    r->n_trace = count;
    return true;
}

/* The line's members into r, which points into the line and rd->keep. */
static bool read_members(reader_t *rd, Toolpool__Result *r, Toolpool__Attempt **at)
{
    size_t id_n, n;
    const char *id = member(rd, "id", &id_n), *cost = member(rd, "cost", &n);
    uint64_t attempts;
    r->has_id = id != NULL && !is_lit(id, id_n, "null");
    if (!read_str(rd, "id", &r->id) || !read_str(rd, "job", &r->job) || !read_u64(rd, "step", &r->step) ||
        !read_str(rd, "tool", &r->tool) || !read_str(rd, "version", &r->version) || !read_bool(rd, "ok", &r->ok) ||
        !read_u64(rd, "attempts", &attempts) || !read_str(rd, "served_by", &r->served_by) ||
        !read_bool(rd, "degraded", &r->degraded) || !read_bool(rd, "stale", &r->stale) ||
        !read_bool(rd, "escalated", &r->escalated) || !read_str(rd, "escalation", &r->escalation) ||
        !read_ms(rd, "duration_ms", &r->duration_us) || attempts > UINT32_MAX)
        return false;
    r->attempts = (uint32_t)attempts;
    if (cost) {
        char num[64];
        char *end;
        if (n >= sizeof num)
            return false;
        memcpy(num, cost, n);
        num[n] = 0;
        r->cost = strtod(num, &end);
        if (*end != 0)
            return false;
    }
    if (r->ok) {
        read_raw(rd, "result", &r->result);
    } else if (!read_str(rd, "error", &r->kind) || !read_str(rd, "class", &r->klass) ||
               !read_str(rd, "message", &r->message) || !read_bool(rd, "retryable", &r->retryable) ||
               !read_u64(rd, "retry_after_ms", &r->retry_after_ms)) {
        return false;
    }
    r->has_retry_after = !r->ok && member(rd, "retry_after_ms", &n) != NULL;
    read_raw(rd, "args", &r->args);
    return read_trace(rd, r, at);
}

int tp_result_read_line(const uint8_t *line, size_t len, Toolpool__Result **out, bool *same)
{
    size_t n = len > 0 && line[len - 1] == '\n' ? len - 1 : len;
    if (n == 0 || line[0] != '{' || tp_json_check(line, n, NULL) < 0)
        return TP_EPROTO;
    reader_t rd = {.text = (const char *)line, .n = n, .keep = json_array()};
    if (rd.keep == NULL)
        return TP_ENOMEM;
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    Toolpool__Attempt *at = NULL;
    int rc = read_members(&rd, &r, &at) ? 0 : TP_EPROTO;
    uint8_t *packed = NULL;
    if (rc == 0 && (packed = malloc(toolpool__result__get_packed_size(&r) + 1)) == NULL)
        rc = TP_ENOMEM;
    if (rc == 0 && (*out = toolpool__result__unpack(NULL, toolpool__result__pack(&r, packed), packed)) == NULL)
        rc = TP_ENOMEM;
    free(packed);
    free(r.trace);
    free(at);
    json_decref(rd.keep);
    if (rc == 0 && same) {
        tp_buf_t b = {0};
        *same = tp_result_write(&b, *out) == 0 && b.len == len && memcmp(b.data, line, len) == 0;
        tp_buf_free(&b);
    }
    return rc;
}
