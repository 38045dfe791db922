#include "results.h"

#include <stdlib.h>
#include <string.h>

#include "pbwire.h"
#include "record.h"
#include "resultline.h"

/*
 * ---- packing a record by hand ----
 *
 * Every call's end packs its record: protobuf-c's generic packer walks
 * each field through its descriptor twice (to size, then to pack), and a
 * nested Result three times, which cost more than the rest of recording a
 * call. This packs exactly the bytes protobuf-c would (field by field in
 * number order, proto3's defaults left out: results_test holds the two to
 * each other), in one sizing pass and one writing pass.
 */
enum { WT_VARINT = TP_PB_VARINT, WT_64 = TP_PB_FIXED64, WT_LEN = TP_PB_LEN };

static size_t key_len(unsigned field)
{
    return field < 16 ? 1 : 2;
}

static uint8_t *put_key(uint8_t *p, unsigned field, unsigned wt)
{
    return tp_pb_put_varint(p, (uint64_t)field << 3 | wt);
}

static size_t len_field(unsigned field, size_t n)
{
    return n ? key_len(field) + tp_pb_varint_len(n) + n : 0;
}

static size_t varint_field(unsigned field, uint64_t v)
{
    return v ? key_len(field) + tp_pb_varint_len(v) : 0;
}

static uint8_t *put_len(uint8_t *p, unsigned field, const void *data, size_t n)
{
    if (n == 0)
        return p;
    p = tp_pb_put_varint(put_key(p, field, WT_LEN), n);
    memcpy(p, data, n);
    return p + n;
}

static uint8_t *put_uint(uint8_t *p, unsigned field, uint64_t v)
{
    return v ? tp_pb_put_varint(put_key(p, field, WT_VARINT), v) : p;
}

/* The lengths of a record's strings, found once for both passes. */
typedef struct {
    size_t id, job, tool, kind, klass, message, served_by, escalation, version;
} lens_t;

static size_t slen(const char *s)
{
    return s ? strlen(s) : 0;
}

static size_t attempt_size(const Toolpool__Attempt *a, size_t tool, size_t outcome)
{
    return varint_field(1, a->attempt) + len_field(2, tool) + len_field(3, outcome) + varint_field(4, a->duration_us) +
           varint_field(5, a->backoff_us) + varint_field(6, a->start_us) + varint_field(7, a->spawn_us);
}

static size_t result_size(const Toolpool__Result *r, const lens_t *l)
{
    size_t n = len_field(1, l->id) + len_field(2, l->job) + varint_field(3, r->step) + len_field(4, l->tool) +
               varint_field(5, r->ok) + len_field(6, r->result.len) + len_field(7, l->kind) + len_field(8, l->klass) +
               len_field(9, l->message) + varint_field(10, r->retryable) + varint_field(11, r->attempts) +
               len_field(13, l->served_by) + varint_field(14, r->degraded) + varint_field(15, r->stale) +
               varint_field(16, r->escalated) + varint_field(17, r->duration_us) + len_field(18, r->args.len) +
               varint_field(19, r->has_id) + (r->cost != 0 ? key_len(20) + 8 : 0) + len_field(21, l->escalation) +
               len_field(22, r->input_digest.len) + varint_field(23, r->retry_after_ms) +
               varint_field(24, r->has_retry_after) + len_field(25, l->version);
    for (size_t i = 0; i < r->n_trace; i++) {
        const Toolpool__Attempt *a = r->trace[i];
        size_t m = attempt_size(a, slen(a->tool), slen(a->outcome));
        n += key_len(12) + tp_pb_varint_len(m) + m;
    }
    return n;
}

static uint8_t *put_attempt(uint8_t *p, const Toolpool__Attempt *a)
{
    size_t tool = slen(a->tool), outcome = slen(a->outcome);
    p = tp_pb_put_varint(put_key(p, 12, WT_LEN), attempt_size(a, tool, outcome));
    p = put_uint(p, 1, a->attempt);
    p = put_len(p, 2, a->tool, tool);
    p = put_len(p, 3, a->outcome, outcome);
    p = put_uint(p, 4, a->duration_us);
    p = put_uint(p, 5, a->backoff_us);
    p = put_uint(p, 6, a->start_us);
    return put_uint(p, 7, a->spawn_us);
}

static uint8_t *put_result(uint8_t *p, const Toolpool__Result *r, const lens_t *l)
{
    p = put_len(p, 1, r->id, l->id);
    p = put_len(p, 2, r->job, l->job);
    p = put_uint(p, 3, r->step);
    p = put_len(p, 4, r->tool, l->tool);
    p = put_uint(p, 5, r->ok);
    p = put_len(p, 6, r->result.data, r->result.len);
    p = put_len(p, 7, r->kind, l->kind);
    p = put_len(p, 8, r->klass, l->klass);
    p = put_len(p, 9, r->message, l->message);
    p = put_uint(p, 10, r->retryable);
    p = put_uint(p, 11, r->attempts);
    for (size_t i = 0; i < r->n_trace; i++)
        p = put_attempt(p, r->trace[i]);
    p = put_len(p, 13, r->served_by, l->served_by);
    p = put_uint(p, 14, r->degraded);
    p = put_uint(p, 15, r->stale);
    p = put_uint(p, 16, r->escalated);
    p = put_uint(p, 17, r->duration_us);
    p = put_len(p, 18, r->args.data, r->args.len);
    p = put_uint(p, 19, r->has_id);
    if (r->cost != 0) {
        p = put_key(p, 20, WT_64);
        memcpy(p, &r->cost, 8); /* little-endian, as the wire is: x86-64 and aarch64 */
        p += 8;
    }
    p = put_len(p, 21, r->escalation, l->escalation);
    p = put_len(p, 22, r->input_digest.data, r->input_digest.len);
    p = put_uint(p, 23, r->retry_after_ms);
    p = put_uint(p, 24, r->has_retry_after);
    return put_len(p, 25, r->version, l->version);
}

/* A record's size (out NULL) or the record written to out, its strings' lengths found already. */
static size_t result_pack(const Toolpool__Result *r, const lens_t *l, uint64_t ended_unix_us, size_t inner,
                          uint8_t *out)
{
    size_t n = varint_field(7, ended_unix_us) + key_len(8) + tp_pb_varint_len(inner) + inner;
    if (out == NULL)
        return n;
    uint8_t *p = put_uint(out, 7, ended_unix_us);
    p = tp_pb_put_varint(put_key(p, 8, WT_LEN), inner);
    p = put_result(p, r, l);
    return (size_t)(p - out);
}

static lens_t result_lens(const Toolpool__Result *r)
{
    return (lens_t){slen(r->id),      slen(r->job),       slen(r->tool),       slen(r->kind),   slen(r->klass),
                    slen(r->message), slen(r->served_by), slen(r->escalation), slen(r->version)};
}

size_t tp_result_pack(const Toolpool__Result *r, uint64_t ended_unix_us, uint8_t *out)
{
    lens_t l = result_lens(r);
    return result_pack(r, &l, ended_unix_us, result_size(r, &l), out);
}

void tp_result_refusal(Toolpool__Result *r, const char *id, const char *job, uint64_t step, const char *tool,
                       tp_kind_t kind, const char *msg)
{
    toolpool__result__init(r);
    r->has_id = id != NULL;
    r->id = (char *)(id ? id : "");
    r->job = (char *)(job ? job : "");
    r->step = step;
    r->tool = (char *)(tool ? tool : "");
    r->kind = (char *)tp_kind_name(kind);
    r->klass = (char *)tp_class_name(tp_kind_class(kind));
    r->message = (char *)msg;
}

int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r)
{
    uint64_t ended = tp_unix_us();
    /* The lengths and the size once, for both the reservation and the packing: this runs once a call. */
    lens_t l = result_lens(r);
    size_t inner = result_size(r, &l);
    size_t n = result_pack(r, &l, ended, inner, NULL);
    uint8_t *at;
    int rc = tp_store_reserve(s, txn, TP_DB_RESULTS, r->id, l.id, n, &at);
    if (rc == 0 && result_pack(r, &l, ended, inner, at) != n) {
        tp_store_note_bad(s, TP_DB_RESULTS, r->id, l.id, "it packed to other than its size");
        rc = TP_EPROTO;
    }
    return rc;
}

static int result_read(tp_store_t *s, const void *key, size_t klen, const void *data, size_t len,
                       Toolpool__StoredResult **out);

int tp_result_put_over(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r)
{
    size_t klen = strlen(r->id);
    MDB_val k = {klen, r->id}, v;
    Toolpool__StoredResult *old = NULL;
    int rc = tp_mdb(mdb_get(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v));
    if (rc == 0)
        rc = result_read(s, r->id, klen, v.mv_data, v.mv_size, &old);
    if (rc == MDB_NOTFOUND || rc == TP_EPROTO) /* none, or a corrupt one (named by result_read): replaced */
        return tp_result_put(s, txn, r);
    if (rc)
        return rc;
    size_t keep = old->n_history < TP_RESULT_HISTORY_MAX ? old->n_history : TP_RESULT_HISTORY_MAX - 1;
    Toolpool__Result **h = malloc((keep + 1) * sizeof *h);
    if (h == NULL) {
        tp_result_free(old);
        return TP_ENOMEM;
    }
    if (keep)
        memcpy(h, old->history + (old->n_history - keep), keep * sizeof *h);
    h[keep] = old->result;
    Toolpool__StoredResult nr = TOOLPOOL__STORED_RESULT__INIT;
    nr.result = (Toolpool__Result *)r;
    nr.ended_unix_us = tp_unix_us();
    nr.history = h;
    nr.n_history = keep + 1;
    size_t n = toolpool__stored_result__get_packed_size(&nr);
    uint8_t *at;
    rc = tp_store_reserve(s, txn, TP_DB_RESULTS, r->id, klen, n, &at);
    if (rc == 0 && toolpool__stored_result__pack(&nr, at) != n) {
        tp_store_note_bad(s, TP_DB_RESULTS, r->id, klen, "it packed to other than its size");
        rc = TP_EPROTO;
    }
    free(h);
    tp_result_free(old);
    return rc;
}

int tp_result_from_line(Toolpool__StoredResult *sr)
{
    bool same;
    Toolpool__Result *r;
    int rc = tp_result_read_line(sr->line.data, sr->line.len, &r, &same);
    if (rc)
        return rc;
    if (sr->input_digest.len > 0) {
        if ((r->input_digest.data = malloc(sr->input_digest.len)) == NULL) {
            toolpool__result__free_unpacked(r, NULL);
            return TP_ENOMEM;
        }
        memcpy(r->input_digest.data, sr->input_digest.data, sr->input_digest.len);
        r->input_digest.len = sr->input_digest.len;
    }
    sr->result = r;
    if (same)
        sr->line.len = 0; /* the bytes stay allocated, for free_unpacked */
    return 0;
}

/*
 * ---- reading a record by hand (the resume path) ----
 *
 * Each call answered from the store reads its record: protobuf-c's
 * generic unpacker parses field by field through the descriptors and
 * mallocs every string, which cost more than the rest of the answer. A
 * record as tp_result_pack writes it is read here into one block instead
 * (the messages, then the strings, each NUL-terminated); anything else (a
 * record of formats 2 and 3, a field this version does not write) goes
 * the generic way. tp_result_free frees either.
 */
static const char block_mark; /* base.unknown_fields of a record read into one block */

typedef struct {
    const uint8_t *p, *end;
} wire_t;

static inline __attribute__((always_inline)) bool get_varint(wire_t *w, uint64_t *v)
{
    if (w->p < w->end && *w->p < 0x80) { /* one byte: every key, most lengths and flags */
        *v = *w->p++;
        return true;
    }
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64 && w->p < w->end; shift += 7) {
        uint8_t b = *w->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* The next field: its number, and its value (a varint, 8 bytes, or a length and its bytes). */
typedef struct {
    unsigned field, wt;
    uint64_t v;
    const uint8_t *data;
} wfield_t;

static inline __attribute__((always_inline)) bool get_field(wire_t *w, wfield_t *f)
{
    uint64_t key;
    if (!get_varint(w, &key) || key >> 3 == 0 || key >> 3 > 64)
        return false;
    f->field = (unsigned)(key >> 3);
    f->wt = (unsigned)(key & 7);
    if (f->wt == WT_VARINT)
        return get_varint(w, &f->v);
    if (f->wt == WT_64) {
        if (w->end - w->p < 8)
            return false;
        f->data = w->p;
        w->p += 8;
        return true;
    }
    if (f->wt != WT_LEN || !get_varint(w, &f->v) || f->v > (uint64_t)(w->end - w->p))
        return false;
    f->data = w->p;
    w->p += f->v;
    return true;
}

/* The wire type field has in a Result (12: an Attempt), or -1 for a field it does not have. */
static int result_wt(unsigned field)
{
    static const signed char wt[26] = {-1,        WT_LEN,    WT_LEN,    WT_VARINT, WT_LEN,    WT_VARINT, WT_LEN,
                                       WT_LEN,    WT_LEN,    WT_LEN,    WT_VARINT, WT_VARINT, WT_LEN,    WT_LEN,
                                       WT_VARINT, WT_VARINT, WT_VARINT, WT_VARINT, WT_LEN,    WT_VARINT, WT_64,
                                       WT_LEN,    WT_LEN,    WT_VARINT, WT_VARINT, WT_LEN};
    return field < sizeof wt ? wt[field] : -1;
}

static int attempt_wt(unsigned field)
{
    static const signed char wt[8] = {-1, WT_VARINT, WT_LEN, WT_LEN, WT_VARINT, WT_VARINT, WT_VARINT, WT_VARINT};
    return field < sizeof wt ? wt[field] : -1;
}

typedef struct {
    uint8_t *at; /* the block's free space */
} block_t;

static void *take(block_t *b, size_t n)
{
    void *p = b->at;
    b->at += (n + 7) & ~(size_t)7;
    return p;
}

static char *take_str(block_t *b, const uint8_t *data, size_t n)
{
    char *s = (char *)b->at;
    memcpy(s, data, n);
    s[n] = 0;
    b->at += n + 1;
    return s;
}

static ProtobufCBinaryData take_bytes(block_t *b, const uint8_t *data, size_t n)
{
    ProtobufCBinaryData d = {n, b->at};
    memcpy(b->at, data, n);
    b->at += n;
    return d;
}

/* Pass 1 over a Result's bytes: whether this reader takes it, and how many attempts and strings it holds. */
static bool result_count(wire_t w, size_t *n_trace, size_t *n_len)
{
    wfield_t f = {0};
    *n_trace = *n_len = 0;
    while (w.p < w.end) {
        if (!get_field(&w, &f) || result_wt(f.field) != (int)f.wt)
            return false;
        if (f.wt == WT_LEN)
            ++*n_len;
        if (f.field != 12)
            continue;
        ++*n_trace;
        wire_t a = {f.data, f.data + f.v};
        while (a.p < a.end) {
            if (!get_field(&a, &f) || attempt_wt(f.field) != (int)f.wt)
                return false;
            *n_len += f.wt == WT_LEN;
        }
    }
    return true;
}

static void attempt_fill(block_t *b, wire_t w, Toolpool__Attempt *a)
{
    wfield_t f = {0};
    toolpool__attempt__init(a);
    while (w.p < w.end && get_field(&w, &f)) {
        switch (f.field) {
        case 1:
            a->attempt = (uint32_t)f.v;
            break;
        case 2:
            a->tool = take_str(b, f.data, f.v);
            break;
        case 3:
            a->outcome = take_str(b, f.data, f.v);
            break;
        case 4:
            a->duration_us = f.v;
            break;
        case 5:
            a->backoff_us = f.v;
            break;
        case 6:
            a->start_us = f.v;
            break;
        case 7:
            a->spawn_us = f.v;
            break;
        }
    }
}

/* Pass 2: the Result's fields into r, its strings and attempts into the block (pass 1 has checked them). */
static void result_fill(block_t *b, wire_t w, Toolpool__Result *r, size_t n_trace)
{
    wfield_t f = {0};
    toolpool__result__init(r);
    if (n_trace) {
        r->trace = take(b, n_trace * sizeof *r->trace);
        for (size_t i = 0; i < n_trace; i++)
            r->trace[i] = take(b, sizeof **r->trace);
    }
    while (w.p < w.end && get_field(&w, &f)) {
        /* clang-format off */
        switch (f.field) {
        case 1: r->id = take_str(b, f.data, f.v); break;
        case 2: r->job = take_str(b, f.data, f.v); break;
        case 3: r->step = f.v; break;
        case 4: r->tool = take_str(b, f.data, f.v); break;
        case 5: r->ok = f.v != 0; break;
        case 6: r->result = take_bytes(b, f.data, f.v); break;
        case 7: r->kind = take_str(b, f.data, f.v); break;
        case 8: r->klass = take_str(b, f.data, f.v); break;
        case 9: r->message = take_str(b, f.data, f.v); break;
        case 10: r->retryable = f.v != 0; break;
        case 11: r->attempts = (uint32_t)f.v; break;
        case 12: attempt_fill(b, (wire_t){f.data, f.data + f.v}, r->trace[r->n_trace++]); break;
        case 13: r->served_by = take_str(b, f.data, f.v); break;
        case 14: r->degraded = f.v != 0; break;
        case 15: r->stale = f.v != 0; break;
        case 16: r->escalated = f.v != 0; break;
        case 17: r->duration_us = f.v; break;
        case 18: r->args = take_bytes(b, f.data, f.v); break;
        case 19: r->has_id = f.v != 0; break;
        case 20: memcpy(&r->cost, f.data, 8); break;
        case 21: r->escalation = take_str(b, f.data, f.v); break;
        case 22: r->input_digest = take_bytes(b, f.data, f.v); break;
        case 23: r->retry_after_ms = f.v; break;
        case 24: r->has_retry_after = f.v != 0; break;
        case 25: r->version = take_str(b, f.data, f.v); break;
        }
        /* clang-format on */
    }
}

/*
 * A record as tp_result_pack writes it, into one block: *out, or NULL when
 * it is something else (left to protobuf-c). 0, or TP_ENOMEM.
 */
static int block_read(const uint8_t *data, size_t len, Toolpool__StoredResult **out)
{
    wire_t w = {data, data + len}, inner = {NULL, NULL};
    wfield_t f = {0};
    uint64_t ended = 0;
    *out = NULL;
    while (w.p < w.end) {
        if (!get_field(&w, &f))
            return 0;
        if (f.field == 7 && f.wt == WT_VARINT)
            ended = f.v;
        else if (f.field == 8 && f.wt == WT_LEN && inner.p == NULL)
            inner = (wire_t){f.data, f.data + f.v};
        else
            return 0;
    }
    size_t n_trace, n_len;
    if (inner.p == NULL || !result_count(inner, &n_trace, &n_len))
        return 0;
    size_t size = 8 * 4 + sizeof **out + sizeof *(*out)->result +
                  n_trace * (sizeof(Toolpool__Attempt *) + sizeof(Toolpool__Attempt) + 16) + len + n_len;
    uint8_t *mem = malloc(size);
    if (mem == NULL)
        return TP_ENOMEM;
    block_t b = {mem};
    Toolpool__StoredResult *sr = take(&b, sizeof *sr);
    toolpool__stored_result__init(sr);
    sr->base.unknown_fields = (ProtobufCMessageUnknownField *)&block_mark;
    sr->ended_unix_us = ended;
    sr->result = take(&b, sizeof *sr->result);
    result_fill(&b, inner, sr->result, n_trace);
    *out = sr;
    return 0;
}

void tp_result_free(Toolpool__StoredResult *sr)
{
    if (sr && sr->base.unknown_fields == (const void *)&block_mark)
        free(sr);
    else if (sr)
        toolpool__stored_result__free_unpacked(sr, NULL);
}

/* A value read by key or cursor: the one-block way when it can, else protobuf-c's; then checked. */
static int result_read(tp_store_t *s, const void *key, size_t klen, const void *data, size_t len,
                       Toolpool__StoredResult **out)
{
    int rc = block_read(data, len, out);
    if (rc)
        return rc;
    char why[256];
    if (*out == NULL) {
        rc = tp_record_unpack(TP_DB_RESULTS, key, klen, data, len, &toolpool__stored_result__descriptor,
                              (ProtobufCMessage **)out, why, sizeof why);
    } else if ((rc = tp_record_check(TP_DB_RESULTS, key, klen, &(*out)->base, why, sizeof why)) != 0) {
        tp_result_free(*out);
        *out = NULL;
    }
    if (rc) {
        if (s)
            tp_store_note_bad(s, TP_DB_RESULTS, key, klen, why);
        return rc;
    }
    if ((*out)->result == NULL && (rc = tp_result_from_line(*out)) != 0) {
        if (rc == TP_EPROTO && s)
            tp_store_note_bad(s, TP_DB_RESULTS, key, klen, "its result line cannot be read back");
        tp_result_free(*out);
        *out = NULL;
    }
    return rc;
}

int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out)
{
    size_t klen = strlen(id);
    MDB_val k = {klen, (void *)id}, v;
    *out = NULL;
    int rc = tp_mdb(mdb_get(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, &v));
    return rc ? rc : result_read(s, id, klen, v.mv_data, v.mv_size, out);
}

int tp_result_line(tp_buf_t *b, const Toolpool__StoredResult *sr)
{
    return sr->line.len ? tp_buf_append(b, sr->line.data, sr->line.len) : tp_result_write(b, sr->result);
}

int tp_result_unpack(const void *key, size_t klen, const void *data, size_t len, Toolpool__StoredResult **out)
{
    return result_read(NULL, key, klen, data, len, out);
}

int tp_results_upgrade(tp_store_t *s, MDB_txn *txn)
{
    MDB_dbi dbi = tp_store_dbi(s, TP_DB_RESULTS);
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    char key[512]; /* a key is at most the store's key size (mdb_env_get_maxkeysize: 511) */
    int rc = tp_mdb(mdb_cursor_open(txn, dbi, &cur));
    if (rc)
        return rc;
    for (rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__StoredResult *sr;
        if (k.mv_size > sizeof key)
            continue; /* none such: store check names it */
        if ((rc = tp_result_unpack(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &sr)) != 0) {
            if (rc != TP_EPROTO)
                break;
            rc = 0; /* a corrupt record stays as it is, for store check to name */
            continue;
        }
        /* What the record of format 4 holds: the result, its time, and a line only when it must stay. */
        Toolpool__StoredResult nr = TOOLPOOL__STORED_RESULT__INIT;
        nr.result = sr->result;
        nr.ended_unix_us = sr->ended_unix_us;
        nr.line = sr->line;
        memcpy(key, k.mv_data, k.mv_size);
        MDB_val nk = {k.mv_size, key};
        MDB_val nv = {toolpool__stored_result__get_packed_size(&nr), NULL};
        if ((nv.mv_data = malloc(nv.mv_size + 1)) == NULL) {
            rc = TP_ENOMEM;
        } else {
            toolpool__stored_result__pack(&nr, nv.mv_data);
            /* Written by key, then found again: the cursor walks on from where it was. */
            rc = tp_mdb(mdb_put(txn, dbi, &nk, &nv, 0));
            free(nv.mv_data);
            rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &nk, &v, MDB_SET));
        }
        tp_result_free(sr);
        if (rc)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}
