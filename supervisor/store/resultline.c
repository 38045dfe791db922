#include "resultline.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"

/*
 * The line's pieces. tp_result_write reserves room for the whole line
 * first, so these append without a check, and a key's length is known
 * where it is written (KEY), not counted at each line.
 */
static inline __attribute__((always_inline)) void put_lit(tp_buf_t *b, const char *s, size_t n)
{
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

#define KEY(b, s) put_lit(b, s, sizeof(s) - 1)

static inline __attribute__((always_inline)) void put_str(tp_buf_t *b, const char *key, size_t klen, const char *v,
                                                          size_t n)
{
    put_lit(b, key, klen);
    tp_json_put_string(b, v, n);
}

/* Decimal digits of v, into the room reserved for the line. */
static void put_u64(tp_buf_t *b, uint64_t v)
{
    b->len += tp_u64_dec((char *)b->data + b->len, v);
}

/* Milliseconds with three decimals, from microseconds. */
static void put_ms(tp_buf_t *b, uint64_t us)
{
    put_u64(b, us / 1000u);
    uint8_t *p = b->data + b->len;
    p[0] = '.';
    p[1] = (uint8_t)('0' + us % 1000 / 100);
    p[2] = (uint8_t)('0' + us % 100 / 10);
    p[3] = (uint8_t)('0' + us % 10);
    b->len += 4;
}

static inline __attribute__((always_inline)) void put_raw(tp_buf_t *b, ProtobufCBinaryData v)
{
    if (v.len == 0)
        KEY(b, "null");
    else
        put_lit(b, (const char *)v.data, v.len);
}

#define STR(b, key, v, n) put_str(b, key, sizeof(key) - 1, v, n)
#define NUM(b, key, v) (KEY(b, key), put_u64(b, v))
#define MS(b, key, us) (KEY(b, key), put_ms(b, us))
#define BOOL(b, key, v) ((v) ? KEY(b, key "true") : KEY(b, key "false"))

int tp_result_write(tp_buf_t *b, const Toolpool__Result *r)
{
    /*
     * Room for the whole line first, so that no append after can fail and
     * leave a line cut: the keys and numbers (at most 345 bytes, a cost's
     * 24 more; an attempt's at most 201), every string escaped at six bytes
     * a byte, the result and the args.
     */
    size_t id = r->has_id ? strlen(r->id) : 0, job = strlen(r->job), tool = strlen(r->tool), by = strlen(r->served_by),
           esc = strlen(r->escalation), ver = r->version ? strlen(r->version) : 0;
    size_t kind = 0, klass = 0, msg = 0;
    if (!r->ok) {
        kind = strlen(r->kind);
        klass = strlen(r->klass);
        msg = strlen(r->message);
    }
    size_t need = 512 + (id + job + tool + by + esc + ver + kind + klass + msg) * 6 + 18 + r->result.len + r->args.len;
    for (size_t i = 0; i < r->n_trace; i++)
        need += 256 + (strlen(r->trace[i]->tool) + strlen(r->trace[i]->outcome)) * 6 + 4;
    if (tp_buf_reserve(b, need) < 0)
        return TP_ENOMEM;
    if (r->has_id)
        STR(b, "{\"id\":", r->id, id);
    else
        KEY(b, "{\"id\":null");
    if (job)
        STR(b, ",\"job\":", r->job, job);
    else
        KEY(b, ",\"job\":null");
    NUM(b, ",\"step\":", r->step);
    if (tool)
        STR(b, ",\"tool\":", r->tool, tool);
    else
        KEY(b, ",\"tool\":null");
    if (ver) /* only when its tool has one: other lines are as they were */
        STR(b, ",\"version\":", r->version, ver);
    if (r->ok) {
        KEY(b, ",\"ok\":true,\"result\":");
        put_raw(b, r->result);
    } else {
        STR(b, ",\"ok\":false,\"error\":", r->kind, kind);
        STR(b, ",\"class\":", r->klass, klass);
        STR(b, ",\"message\":", r->message, msg);
        BOOL(b, ",\"retryable\":", r->retryable);
        if (r->has_retry_after)
            NUM(b, ",\"retry_after_ms\":", r->retry_after_ms);
    }
    NUM(b, ",\"attempts\":", r->attempts);
    if (by)
        STR(b, ",\"served_by\":", r->served_by, by);
    else
        KEY(b, ",\"served_by\":null");
    if (!r->degraded && !r->stale && !r->escalated) {
        KEY(b, ",\"degraded\":false,\"stale\":false,\"escalated\":false");
    } else {
        BOOL(b, ",\"degraded\":", r->degraded);
        BOOL(b, ",\"stale\":", r->stale);
        BOOL(b, ",\"escalated\":", r->escalated);
    }
    if (esc)
        STR(b, ",\"escalation\":", r->escalation, esc);
    MS(b, ",\"duration_ms\":", r->duration_us);
    if (r->cost != 0) {
        KEY(b, ",\"cost\":");
        if (tp_json_put_real(b, r->cost) < 0)
            return TP_ENOMEM; /* within the room reserved: not reached */
    }
    KEY(b, ",\"args\":");
    put_raw(b, r->args);
    KEY(b, ",\"trace\":[");
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *t = r->trace[i];
        if (i)
            KEY(b, ",");
        NUM(b, "{\"attempt\":", t->attempt);
        STR(b, ",\"tool\":", t->tool, strlen(t->tool));
        STR(b, ",\"outcome\":", t->outcome, strlen(t->outcome));
        MS(b, ",\"duration_ms\":", t->duration_us);
        if (t->backoff_us)
            MS(b, ",\"backoff_ms\":", t->backoff_us);
        else
            KEY(b, ",\"backoff_ms\":0.000");
        MS(b, ",\"start_ms\":", t->start_us);
        if (t->spawn_us)
            MS(b, ",\"spawn_ms\":", t->spawn_us); /* an exec attempt's: its process's start */
        KEY(b, "}");
    }
    KEY(b, "]}\n");
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
