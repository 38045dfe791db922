#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int tp_frame_peek(const tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len)
{
    size_t avail = tp_buf_avail(in);
    if (avail < TP_FRAME_HEADER)
        return TP_FRAME_MORE;
    uint32_t n = get_le32(tp_buf_head(in));
    if (n > max)
        return TP_FRAME_TOO_BIG;
    if (avail - TP_FRAME_HEADER < n)
        return TP_FRAME_MORE;
    *body = tp_buf_head(in) + TP_FRAME_HEADER;
    *len = n;
    return TP_FRAME_READY;
}

int tp_frame_append(tp_buf_t *out, const ProtobufCMessage *msg, uint32_t max)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > max) {
        errno = EMSGSIZE;
        return -1;
    }
    if (tp_buf_reserve(out, TP_FRAME_HEADER + n) < 0)
        return -1;
    uint8_t *p = out->data + out->len;
    p[0] = (uint8_t)n;
    p[1] = (uint8_t)(n >> 8);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 24);
    size_t packed = protobuf_c_message_pack(msg, p + TP_FRAME_HEADER);
    if (packed != n) {
        errno = EPROTO;
        return -1;
    }
    out->len += TP_FRAME_HEADER + n;
    return 0;
}

int tp_frame_recv(int fd, tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len)
{
    for (;;) {
        int rc = tp_frame_peek(in, max, body, len);
        if (rc != TP_FRAME_MORE)
            return rc;
        ssize_t n = tp_buf_read_fd(in, fd);
        if (n < 0)
            return -1;
        if (n == 0) {
            if (tp_buf_avail(in) == 0)
                return 0;
            errno = EPIPE;
            return -1;
        }
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
