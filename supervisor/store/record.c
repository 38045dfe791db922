#include "breakerlog.h"
#include "record.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "taxonomy.h"
#include "toolpool.pb-c.h"

#define TOOL_BUCKETS_MAX 10 /* supervisor/engine/breaker.c keeps ten slices of a window */

const ProtobufCMessageDescriptor *tp_record_type(tp_db_t db, const void *key, size_t klen)
{
    const char *k = key;
    switch (db) {
    case TP_DB_RESULTS:
        return &toolpool__stored_result__descriptor;
    case TP_DB_JOBS:
        return &toolpool__checkpoint__descriptor;
    case TP_DB_INFLIGHT:
        return &toolpool__in_flight__descriptor;
    case TP_DB_ESCALATIONS:
        return &toolpool__escalation__descriptor;
    case TP_DB_TASKS:
        return &toolpool__mcp_task__descriptor;
    case TP_DB_BREAKERS:
        if (klen > 0 && k[0] == 'c')
            return &toolpool__call_breaker__descriptor;
        if (klen > 0 && k[0] == 't')
            return &toolpool__tool_breaker__descriptor;
        return NULL;
    case TP_DB_META:
        if (klen == 6 && memcmp(k, "format", 6) == 0)
            return &toolpool__store_format__descriptor;
        if (klen == 6 && memcmp(k, "owners", 6) == 0)
            return &toolpool__owners__descriptor;
        if (klen == 5 && memcmp(k, "input", 5) == 0)
            return &toolpool__input_record__descriptor;
        return NULL;
    default:
        return NULL;
    }
}

static int bad(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return TP_EPROTO;
}

/* Whether the NUL-terminated s is exactly the n bytes at p. */
static bool same(const char *s, const void *p, size_t n)
{
    return strlen(s) == n && memcmp(s, p, n) == 0;
}

/* Empty, or one JSON value. */
static bool json_or_empty(ProtobufCBinaryData d)
{
    return d.len == 0 || tp_json_check(d.data, d.len, NULL) == 0;
}

/* The value of member name in a checked object text is exactly want (a JSON text). */
static bool member_is(const uint8_t *text, size_t n, const char *name, const char *want, size_t wlen)
{
    const char *v;
    size_t len;
    return tp_json_member(text, n, name, &v, &len) == 0 && len == wlen && memcmp(v, want, len) == 0;
}

/*
 * Whether the "id" of a checked object text is key, as the result writer
 * puts it (tp_json_put_string). Most ids need no escaping: those are
 * compared in place.
 */
static bool id_is(const uint8_t *text, size_t n, const void *key, size_t klen)
{
    const char *v;
    size_t len;
    if (tp_json_member(text, n, "id", &v, &len) < 0)
        return false;
    const uint8_t *k = key;
    size_t i = 0;
    while (i < klen && k[i] >= 0x20 && k[i] < 0x7f && k[i] != '"' && k[i] != '\\')
        i++;
    if (i == klen)
        return len == klen + 2 && v[0] == '"' && memcmp(v + 1, key, klen) == 0 && v[len - 1] == '"';
    tp_buf_t id = {0};
    bool same_id = tp_json_put_string(&id, key, klen) == 0 && id.len == len && memcmp(id.data, v, len) == 0;
    tp_buf_free(&id);
    return same_id;
}

/*
 * A result line of a record of formats 2 and 3 (or one format 4 kept), as
 * a rerun writes it out: one JSON object, one line, this call's id, and
 * the record's ok.
 */
static int check_line(const void *key, size_t klen, ProtobufCBinaryData l, bool ok, char *why, size_t cap)
{
    const uint8_t *line = l.data;
    size_t n = l.len, at;
    if (n == 0)
        return bad(why, cap, "its result line is empty");
    if (line[n - 1] != '\n')
        return bad(why, cap, "its result line does not end in a newline");
    if (memchr(line, '\n', n - 1) != NULL)
        return bad(why, cap, "its result line holds more than one line");
    if (line[0] != '{' || tp_json_check(line, n - 1, &at) < 0)
        return bad(why, cap, "its result line is not a JSON object (wrong at byte %zu)", line[0] != '{' ? 0 : at);
    if (!id_is(line, n - 1, key, klen))
        return bad(why, cap, "its result line is not this call's (its \"id\" is another)");
    if (!member_is(line, n - 1, "ok", ok ? "true" : "false", ok ? 4 : 5))
        return bad(why, cap, "its result line and its record disagree on \"ok\"");
    return 0;
}

/* JSON text that a result line can hold as it is: empty, or one value on one line. */
static bool json_one_line(ProtobufCBinaryData d)
{
    return d.len == 0 ||
           (json_or_empty(d) && memchr(d.data, '\n', d.len) == NULL && memchr(d.data, '\r', d.len) == NULL);
}

/*
 * results/ID: everything the line rendered from it relies on: this call's
 * id, a kind when it failed, a result and args that are JSON on one line,
 * the input digest a rerun compares;
 * and the records of its history (earlier versions of its tool) this call's.
 */
static int check_result(const void *key, size_t klen, const Toolpool__StoredResult *sr, char *why, size_t cap)
{
    const Toolpool__Result *r = sr->result;
    if (r == NULL) { /* formats 2 and 3 */
        if (sr->input_digest.len != TP_RECORD_DIGEST_LEN)
            return bad(why, cap, "its input digest is %zu bytes, not %d", sr->input_digest.len, TP_RECORD_DIGEST_LEN);
        int rc = check_line(key, klen, sr->line, sr->ok, why, cap);
        if (rc == 0 && !sr->ok && sr->kind[0] == 0)
            return bad(why, cap, "it failed but names no kind");
        return rc;
    }
    if (r->input_digest.len != TP_RECORD_DIGEST_LEN)
        return bad(why, cap, "its input digest is %zu bytes, not %d", r->input_digest.len, TP_RECORD_DIGEST_LEN);
    if (!r->has_id || !same(r->id, key, klen))
        return bad(why, cap, "its record is not this call's (its id is another)");
    if (!r->ok && r->kind[0] == 0)
        return bad(why, cap, "it failed but names no kind");
    if (!json_one_line(r->result))
        return bad(why, cap, "its result is not JSON on one line");
    if (!json_one_line(r->args))
        return bad(why, cap, "its args are not JSON on one line");
    for (size_t i = 0; i < sr->n_history; i++)
        if (sr->history[i]->input_digest.len != TP_RECORD_DIGEST_LEN || !sr->history[i]->has_id ||
            !same(sr->history[i]->id, key, klen))
            return bad(why, cap, "record %zu of its history is not this call's", i + 1);
    return sr->line.len ? check_line(key, klen, sr->line, r->ok, why, cap) : 0;
}

static int check_checkpoint(const void *key, size_t klen, const Toolpool__Checkpoint *cp, char *why, size_t cap)
{
    if (!same(cp->job, key, klen))
        return bad(why, cap, "its job is not its key");
    for (size_t i = 0; i < cp->n_calls; i++)
        if (cp->calls[i][0] == 0)
            return bad(why, cap, "call %zu of its message list has no id", i + 1);
    if (cp->stopped[0]) {
        tp_kind_t k = tp_kind_from_name(cp->stopped);
        if (k == TP_KIND_OTHER || tp_kind_class(k) != TP_CLASS_GUARD)
            return bad(why, cap, "what stopped it is no guard's kind");
    }
    if (!isfinite(cp->cost) || cp->cost < 0)
        return bad(why, cap, "its cost is not a finite number >= 0");
    if (cp->has_state && tp_json_check(cp->state.data, cp->state.len, NULL) < 0)
        return bad(why, cap, "its agent state is not JSON");
    return 0;
}

static int check_inflight(const void *key, size_t klen, const Toolpool__InFlight *f, char *why, size_t cap)
{
    if (!same(f->call_id, key, klen))
        return bad(why, cap, "its call id is not its key");
    if (f->input_digest.len != TP_RECORD_DIGEST_LEN)
        return bad(why, cap, "its input digest is %zu bytes, not %d", f->input_digest.len, TP_RECORD_DIGEST_LEN);
    if (f->tool[0] == 0)
        return bad(why, cap, "it names no tool");
    return 0;
}

static int check_escalation(const void *key, size_t klen, const Toolpool__Escalation *e, char *why, size_t cap)
{
    if (!same(e->id, key, klen))
        return bad(why, cap, "its id is not its key");
    if (e->tool[0] == 0)
        return bad(why, cap, "it names no tool");
    if (!json_or_empty(e->args))
        return bad(why, cap, "its args are not JSON");
    return 0;
}

static int check_task(const void *key, size_t klen, const Toolpool__McpTask *t, char *why, size_t cap)
{
    if (!same(t->task_id, key, klen))
        return bad(why, cap, "its task id is not its key");
    if (t->tool[0] == 0 || t->job[0] == 0)
        return bad(why, cap, "it names no tool, or no job");
    if (!json_or_empty(t->args))
        return bad(why, cap, "its args are not JSON");
    return 0;
}

/* breakers/'c' TOOL \0 DIGEST */
static int check_call_breaker(const void *key, size_t klen, const Toolpool__CallBreaker *cb, char *why, size_t cap)
{
    const uint8_t *k = key;
    const uint8_t *nul = klen > 1 ? memchr(k + 1, 0, klen - 1) : NULL;
    if (nul == NULL || (size_t)(k + klen - (nul + 1)) != TP_RECORD_DIGEST_LEN)
        return bad(why, cap, "its key is not 'c', a tool, a NUL and a %d-byte digest", TP_RECORD_DIGEST_LEN);
    if (!same(cb->tool, k + 1, (size_t)(nul - (k + 1))))
        return bad(why, cap, "its tool is not its key's");
    if (cb->digest.len != TP_RECORD_DIGEST_LEN || memcmp(cb->digest.data, nul + 1, TP_RECORD_DIGEST_LEN) != 0)
        return bad(why, cap, "its digest is not its key's");
    if (!json_or_empty(cb->args))
        return bad(why, cap, "its args are not JSON");
    if (cb->n_history > TP_BREAKER_HISTORY_MAX)
        return bad(why, cap, "it keeps %zu transitions, at most %d", cb->n_history, TP_BREAKER_HISTORY_MAX);
    return 0;
}

/* breakers/'t' TOOL */
static int check_tool_breaker(const void *key, size_t klen, const Toolpool__ToolBreaker *tb, char *why, size_t cap)
{
    if (klen < 1 || !same(tb->tool, (const char *)key + 1, klen - 1))
        return bad(why, cap, "its tool is not its key's");
    if (tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED && tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_OPEN &&
        tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN)
        return bad(why, cap, "its state (%d) is none of closed, open and half-open", (int)tb->state);
    if (tb->n_buckets > TOOL_BUCKETS_MAX)
        return bad(why, cap, "it keeps %zu slices of its window, at most %d", tb->n_buckets, TOOL_BUCKETS_MAX);
    for (size_t i = 0; i < tb->n_buckets; i++)
        if (tb->buckets[i]->failures > tb->buckets[i]->calls)
            return bad(why, cap, "slice %zu of its window counts more failures than calls", i + 1);
    if (tb->n_history > TP_BREAKER_HISTORY_MAX)
        return bad(why, cap, "it keeps %zu transitions, at most %d", tb->n_history, TP_BREAKER_HISTORY_MAX);
    return 0;
}

int tp_record_check(tp_db_t db, const void *key, size_t klen, const ProtobufCMessage *m, char *why, size_t cap)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    if (d == &toolpool__stored_result__descriptor)
        return check_result(key, klen, (const Toolpool__StoredResult *)m, why, cap);
    if (d == &toolpool__checkpoint__descriptor)
        return check_checkpoint(key, klen, (const Toolpool__Checkpoint *)m, why, cap);
    if (d == &toolpool__in_flight__descriptor)
        return check_inflight(key, klen, (const Toolpool__InFlight *)m, why, cap);
    if (d == &toolpool__escalation__descriptor)
        return check_escalation(key, klen, (const Toolpool__Escalation *)m, why, cap);
    if (d == &toolpool__mcp_task__descriptor)
        return check_task(key, klen, (const Toolpool__McpTask *)m, why, cap);
    if (d == &toolpool__call_breaker__descriptor)
        return check_call_breaker(key, klen, (const Toolpool__CallBreaker *)m, why, cap);
    if (d == &toolpool__tool_breaker__descriptor)
        return check_tool_breaker(key, klen, (const Toolpool__ToolBreaker *)m, why, cap);
    if (d == &toolpool__store_format__descriptor && ((const Toolpool__StoreFormat *)m)->version == 0)
        return bad(why, cap, "it names no format version");
    if (d == &toolpool__input_record__descriptor) {
        const Toolpool__InputRecord *in = (const Toolpool__InputRecord *)m;
        if (in->input_digest.len != TP_RECORD_DIGEST_LEN || in->registry_digest.len != TP_RECORD_DIGEST_LEN)
            return bad(why, cap, "its input or registry digest is not %d bytes", TP_RECORD_DIGEST_LEN);
        if (in->shard_count == 0 || in->shard_index >= in->shard_count || in->shard_calls > in->input_calls)
            return bad(why, cap, "shard %u of %u, %llu of %llu calls, cannot be", in->shard_index, in->shard_count,
                       (unsigned long long)in->shard_calls, (unsigned long long)in->input_calls);
    }
    if (d == &toolpool__owners__descriptor) {
        const Toolpool__Owners *o = (const Toolpool__Owners *)m;
        for (size_t i = 0; i < o->n_owners; i++)
            if (o->owners[i]->pid <= 0 || o->owners[i]->joined_generation > o->generation)
                return bad(why, cap, "owner %zu names no process, or a generation not yet made", i);
    }
    return 0;
}

int tp_record_unpack(tp_db_t db, const void *key, size_t klen, const void *val, size_t vlen,
                     const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, char *why, size_t cap)
{
    *out = protobuf_c_message_unpack(desc, NULL, vlen, val);
    if (*out == NULL)
        return bad(why, cap, "it does not unpack as a %s (%zu bytes)", desc->short_name, vlen);
    int rc = tp_record_check(db, key, klen, *out, why, cap);
    if (rc) {
        protobuf_c_message_free_unpacked(*out, NULL);
        *out = NULL;
    }
    return rc;
}

int tp_record_check_raw(tp_db_t db, const void *key, size_t klen, size_t vlen, char *why, size_t cap)
{
    if (db == TP_DB_META && klen == 14 && memcmp(key, "escalation_seq", 14) == 0 && vlen != 8)
        return bad(why, cap, "it is %zu bytes, not an 8-byte number", vlen);
    return 0;
}

/* Appends n bytes at p to out (at *len, cap bytes in all): printable UTF-8 as it is, the rest as \xNN. */
static void put_printable(char *out, size_t *len, size_t cap, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n && *len + 5 < cap; i++) {
        size_t u = s[i] >= 0x80 ? tp_utf8_len(s + i, n - i) : 0;
        if (u > 0) {
            memcpy(out + *len, s + i, u);
            *len += u;
            i += u - 1;
        } else if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\') {
            out[(*len)++] = (char)s[i];
        } else {
            *len += (size_t)snprintf(out + *len, cap - *len, "\\x%02x", s[i]);
        }
    }
    out[*len] = 0;
}

const char *tp_record_name(tp_db_t db, const void *key, size_t klen, char *buf, size_t cap)
{
    const uint8_t *k = key;
    size_t len = 0;
    if (cap < 8) {
        if (cap)
            buf[0] = 0;
        return buf;
    }
    len = (size_t)snprintf(buf, cap, "%s ", tp_store_db_name(db));
    if (len >= cap)
        len = cap - 1;
    const uint8_t *nul = db == TP_DB_BREAKERS && klen > 1 && k[0] == 'c' ? memchr(k + 1, 0, klen - 1) : NULL;
    if (db == TP_DB_BREAKERS && klen > 0 && k[0] == 't') {
        put_printable(buf, &len, cap, "tool/", 5);
        put_printable(buf, &len, cap, k + 1, klen - 1);
    } else if (nul && (size_t)(k + klen - (nul + 1)) == TP_RECORD_DIGEST_LEN) {
        put_printable(buf, &len, cap, "call/", 5);
        put_printable(buf, &len, cap, k + 1, (size_t)(nul - (k + 1)));
        put_printable(buf, &len, cap, "/", 1);
        for (int i = 0; i < TP_RECORD_DIGEST_LEN && len + 3 < cap; i++)
            len += (size_t)snprintf(buf + len, cap - len, "%02x", nul[1 + i]);
    } else if (len + 2 < cap) {
        buf[len++] = '"';
        put_printable(buf, &len, cap - 1, k, klen);
        buf[len++] = '"';
        buf[len] = 0;
    }
    return buf;
}
