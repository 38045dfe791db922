#include "frame.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pbwire.h"


static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int tp_frame_peek(const tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len)
{
    size_t avail = tp_buf_avail(in);
    if (avail < TP_FRAME_HEADER)
        return TP_EAGAIN;
    uint32_t n = get_le32(tp_buf_head(in));
    if (n > max)
        return TP_E2BIG;
    if (avail - TP_FRAME_HEADER < n)
        return TP_EAGAIN;
    *body = tp_buf_head(in) + TP_FRAME_HEADER;
    *len = n;
    return 0;
}

/*
 * Room for a frame of n body bytes at the end of out, its header written:
 * the body goes at *body (out->len is left for the caller to advance). 0,
 * TP_E2BIG when n is over max, or TP_ENOMEM.
 */
static int frame_begin(tp_buf_t *out, size_t n, uint32_t max, uint8_t **body)
{
    if (n > max)
        return TP_E2BIG;
    if (tp_buf_reserve(out, TP_FRAME_HEADER + n) < 0)
        return TP_ENOMEM;
    uint8_t *p = out->data + out->len;
    p[0] = (uint8_t)n;
    p[1] = (uint8_t)(n >> 8);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 24);
    *body = p + TP_FRAME_HEADER;
    return 0;
}

int tp_frame_append(tp_buf_t *out, const ProtobufCMessage *msg, uint32_t max)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *p;
    int rc = frame_begin(out, n, max, &p);
    if (rc != 0)
        return rc;
    if (protobuf_c_message_pack(msg, p) != n)
        return TP_EPROTO;
    out->len += TP_FRAME_HEADER + n;
    return 0;
}

/*
 * The wire format (protobuf's encoding, for the fields of
 * schema/toolpool.proto this writes): a key is (field number << 3) | wire
 * type, 0 for a varint and 2 for length-delimited bytes.
 */
enum {
    KEY_FRAME_CALL = 1 << 3 | 2,
    KEY_SEQ = 1 << 3 | 0,
    KEY_ARGS = 7 << 3 | 2,
    KEY_CALL_ID = 8 << 3 | 2,
    KEY_JOB = 9 << 3 | 2,
    KEY_STEP = 10 << 3 | 0,
    KEY_ATTEMPT = 11 << 3 | 0,
};

/* Call.notify (19) set: its key (a two-byte varint) and true. */
static const uint8_t NOTIFY_FIELD[3] = {0x98, 0x01, 0x01}; /* (19 << 3 | 0) = 152 as a varint, then 1 */
/* Call.deadline_us (21)'s key: (21 << 3 | 0) = 168 as a varint. */
enum { TIMEOUT_KEY0 = 0xa8, TIMEOUT_KEY1 = 0x01 };
/* Call.mcp_protocol (22)'s key: (22 << 3 | 0) = 176 as a varint. */
enum { PROTOCOL_KEY0 = 0xb0, PROTOCOL_KEY1 = 0x01 };
/* Call.traceparent (23, length-delimited): its key as a varint. */
enum { TRACEPARENT_KEY0 = 0xba, TRACEPARENT_KEY1 = 0x01 };

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        *p++ = (uint8_t)(v | 0x80);
    *p++ = (uint8_t)v;
    return p;
}

/* Bytes of one field; as protobuf-c leaves out a zero or empty one, so does this. */
static size_t varint_field_len(uint64_t v)
{
    return v ? 1 + varint_len(v) : 0;
}

static size_t bytes_field_len(size_t n)
{
    return n ? 1 + varint_len(n) + n : 0;
}

static uint8_t *put_varint_field(uint8_t *p, uint8_t key, uint64_t v)
{
    if (v == 0)
        return p;
    *p++ = key;
    return put_varint(p, v);
}

static uint8_t *put_bytes_field(uint8_t *p, uint8_t key, const void *data, size_t n)
{
    if (n == 0)
        return p;
    *p++ = key;
    p = put_varint(p, n);
    memcpy(p, data, n);
    return p + n;
}

int tp_call_head_pack(tp_buf_t *head, const char *tool, int adapter, char **argv, size_t argc, const char *plugin_path,
                      uint64_t max_output)
{
    Toolpool__Call call = TOOLPOOL__CALL__INIT;
    call.tool = (char *)tool;
    call.adapter = (Toolpool__Adapter)adapter;
    call.argv = argv;
    call.n_argv = argc;
    call.plugin_path = (char *)(plugin_path ? plugin_path : "");
    call.max_output = max_output;
    size_t n = protobuf_c_message_get_packed_size(&call.base);
    tp_buf_reset(head);
    if (tp_buf_reserve(head, n) < 0)
        return TP_ENOMEM;
    head->len = protobuf_c_message_pack(&call.base, head->data);
    return head->len == n ? 0 : TP_EPROTO;
}

int tp_call_tail_pack(tp_buf_t *tail, uint64_t limit_memory, uint32_t limit_cpu, uint32_t limit_files,
                      const char *mcp_tool, char **mcp_env, const char *mcp_cwd, const char *cwd)
{
    Toolpool__Call call = TOOLPOOL__CALL__INIT;
    call.cwd = (char *)(cwd ? cwd : "");
    call.limit_memory = limit_memory;
    call.limit_cpu = limit_cpu;
    call.limit_files = limit_files;
    call.mcp_tool = (char *)(mcp_tool ? mcp_tool : "");
    call.mcp_env = mcp_env;
    for (call.n_mcp_env = 0; mcp_env && mcp_env[call.n_mcp_env]; call.n_mcp_env++)
        ;
    call.mcp_cwd = (char *)(mcp_cwd ? mcp_cwd : "");
    size_t n = protobuf_c_message_get_packed_size(&call.base);
    tp_buf_reset(tail);
    if (tp_buf_reserve(tail, n) < 0)
        return TP_ENOMEM;
    tail->len = protobuf_c_message_pack(&call.base, tail->data);
    return tail->len == n ? 0 : TP_EPROTO;
}

int tp_call_http_pack(tp_buf_t *tail, const Toolpool__HttpCall *http)
{
    Toolpool__Call call = TOOLPOOL__CALL__INIT;
    call.http = (Toolpool__HttpCall *)http;
    size_t n = protobuf_c_message_get_packed_size(&call.base);
    if (tp_buf_reserve(tail, n) < 0)
        return TP_ENOMEM;
    size_t got = protobuf_c_message_pack(&call.base, tail->data + tail->len);
    tail->len += got;
    return got == n ? 0 : TP_EPROTO;
}

int tp_call_frame_append(tp_buf_t *out, const tp_call_frame_t *c, uint32_t max)
{
    size_t id_len = c->call_id ? strlen(c->call_id) : 0, job_len = c->job ? strlen(c->job) : 0;
    size_t tail_len = c->tail ? c->tail->len : 0, tp_len = c->traceparent ? strlen(c->traceparent) : 0;
    size_t call_len = varint_field_len(c->seq) + c->head->len + bytes_field_len(c->args_len) + bytes_field_len(id_len) +
                      bytes_field_len(job_len) + varint_field_len(c->step) + varint_field_len(c->attempt) + tail_len +
                      (c->notify ? sizeof NOTIFY_FIELD : 0) + (c->deadline_us ? 2 + varint_len(c->deadline_us) : 0) +
                      (c->mcp_protocol ? 2 + varint_len(c->mcp_protocol) : 0) +
                      (tp_len ? 2 + varint_len(tp_len) + tp_len : 0);
    size_t n = 1 + varint_len(call_len) + call_len;
    uint8_t *p;
    int rc = frame_begin(out, n, max, &p);
    if (rc != 0)
        return rc;
    *p++ = KEY_FRAME_CALL;
    p = put_varint(p, call_len);
    /* In field-number order, as protobuf-c packs: seq (1), the head (2-6), 7-11, the tail (12-18, 20), 19, 21, 22, 23. */
    p = put_varint_field(p, KEY_SEQ, c->seq);
    memcpy(p, c->head->data, c->head->len);
    p += c->head->len;
    p = put_bytes_field(p, KEY_ARGS, c->args, c->args_len);
    p = put_bytes_field(p, KEY_CALL_ID, c->call_id, id_len);
    p = put_bytes_field(p, KEY_JOB, c->job, job_len);
    p = put_varint_field(p, KEY_STEP, c->step);
    p = put_varint_field(p, KEY_ATTEMPT, c->attempt);
    if (tail_len)
        memcpy(p, c->tail->data, tail_len); /* 12-18: the tool's limits, an mcp server's fields, the directory */
    p += tail_len;
    if (c->notify) {
        memcpy(p, NOTIFY_FIELD, sizeof NOTIFY_FIELD);
        p += sizeof NOTIFY_FIELD;
    }
    if (c->deadline_us) {
        *p++ = TIMEOUT_KEY0;
        *p++ = TIMEOUT_KEY1;
        p = put_varint(p, c->deadline_us);
    }
    if (c->mcp_protocol) {
        *p++ = PROTOCOL_KEY0;
        *p++ = PROTOCOL_KEY1;
        p = put_varint(p, c->mcp_protocol);
    }
    if (tp_len) {
        *p++ = TRACEPARENT_KEY0;
        *p++ = TRACEPARENT_KEY1;
        p = put_varint(p, tp_len);
        memcpy(p, c->traceparent, tp_len);
        p += tp_len;
    }
    out->len += TP_FRAME_HEADER + n;
    return 0;
}

int tp_cancel_frame_append(tp_buf_t *out, uint64_t seq)
{
    Toolpool__Cancel cancel = TOOLPOOL__CANCEL__INIT;
    cancel.seq = seq;
    Toolpool__SupervisorFrame sf = TOOLPOOL__SUPERVISOR_FRAME__INIT;
    sf.body_case = TOOLPOOL__SUPERVISOR_FRAME__BODY_CANCEL;
    sf.cancel = &cancel;
    return tp_frame_append(out, &sf.base, UINT32_MAX);
}

/*
 * The varints of a Reply, read by protobuf-c's rules (protobuf-c.c,
 * 1.4): whatever this decoder takes, protobuf-c must take too, and read
 * the same. A field's key (parse_tag_and_wiretype) and a length prefix
 * (scan_length_prefixed_data) are at most 5 bytes, and a length no more
 * than INT_MAX: a longer form is an error there, even one that says 0
 * ("80 80 80 80 80 80 80 80 00"). A value is at most 10 bytes; bits past
 * the 64th are left to protobuf-c (parse_boolean and parse_uint64 would
 * read them differently).
 */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    return tp_pb_get_varint(p, end, 10, v);
}

static bool get_key(const uint8_t **p, const uint8_t *end, uint64_t *key)
{
    return tp_pb_get_varint(p, end, 5, key);
}

static bool get_length(const uint8_t **p, const uint8_t *end, uint64_t *len)
{
    return tp_pb_get_varint(p, end, 5, len) && *len <= INT_MAX;
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a Reply's cost is read as a little-endian double");

bool tp_reply_decode_plain(const uint8_t *body, size_t len, Toolpool__Reply *r)
{
    const uint8_t *p = body, *end = body + len;
    uint64_t key, n;
    if (!get_key(&p, end, &key) || key != (2 << 3 | 2) || !get_length(&p, end, &n) || n != (uint64_t)(end - p))
        return false;
    Toolpool__Reply init = TOOLPOOL__REPLY__INIT;
    *r = init;
    unsigned seen = 0;
    while (p < end) {
        if (!get_key(&p, end, &key) || key > (8 << 3 | 7))
            return false;
        unsigned field = (unsigned)(key >> 3), type = (unsigned)(key & 7);
        if (seen & 1u << field)
            return false; /* a repeated field: protobuf-c's rules decide */
        seen |= 1u << field;
        uint64_t v;
        switch (field) {
        case 1: /* seq */
        case 2: /* ok */
        case 6: /* retry_after_ms */
        case 8: /* started_us */
            if (type != 0 || !get_varint(&p, end, &v))
                return false;
            if (field == 1)
                r->seq = v;
            else if (field == 2)
                r->ok = v != 0;
            else if (field == 6)
                r->retry_after_ms = (int64_t)v;
            else
                r->started_us = v;
            break;
        case 3: /* result */
            if (type != 2 || !get_length(&p, end, &v) || v > (uint64_t)(end - p))
                return false;
            r->result.data = (uint8_t *)p;
            r->result.len = (size_t)v;
            p += v;
            break;
        case 7: /* cost */
            if (type != 1 || end - p < 8)
                return false;
            memcpy(&v, p, 8); /* little-endian, as the hosts this runs on */
            memcpy(&r->cost, &v, 8);
            p += 8;
            break;
        default: /* kind, message (not plain) or a field this does not know */
            return false;
        }
    }
    return true;
}

int tp_frame_recv(int fd, tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len)
{
    for (;;) {
        int rc = tp_frame_peek(in, max, body, len);
        if (rc != TP_EAGAIN)
            return rc;
        ssize_t n = tp_buf_read_fd(in, fd);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return tp_buf_avail(in) == 0 ? TP_ECLOSED : TP_EPIPE;
    }
}

/* ---- the unpacking arena ---- */

#define TP_ARENA_ALIGN 16u

static void *arena_alloc(void *data, size_t size)
{
    tp_arena_t *ar = data;
    size_t need = (size + TP_ARENA_ALIGN - 1) & ~(size_t)(TP_ARENA_ALIGN - 1);
    if (need >= size && ar->cap - ar->used >= need) {
        void *p = ar->block + ar->used;
        ar->used += need;
        return p;
    }
    if (size > SIZE_MAX - TP_ARENA_ALIGN)
        return NULL;
    uint8_t *chunk = malloc(TP_ARENA_ALIGN + size);
    if (chunk == NULL)
        return NULL;
    memcpy(chunk, &ar->big, sizeof ar->big);
    ar->big = chunk;
    return chunk + TP_ARENA_ALIGN;
}

static void arena_free(void *data, void *p)
{
    (void)data;
    (void)p; /* all at once, in tp_arena_reset */
}

void tp_arena_init(tp_arena_t *ar, size_t cap)
{
    memset(ar, 0, sizeof *ar);
    ar->allocator.alloc = arena_alloc;
    ar->allocator.free = arena_free;
    ar->allocator.allocator_data = ar;
    ar->block = malloc(cap);
    ar->cap = ar->block ? cap : 0; /* without its block, every allocation is big */
}

void tp_arena_reset(tp_arena_t *ar)
{
    while (ar->big) {
        void *next;
        memcpy(&next, ar->big, sizeof next);
        free(ar->big);
        ar->big = next;
    }
    ar->used = 0;
}

void tp_arena_free(tp_arena_t *ar)
{
    tp_arena_reset(ar);
    free(ar->block);
    ar->block = NULL;
    ar->cap = 0;
}
