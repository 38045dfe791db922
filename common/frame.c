#include "frame.h"

#include <errno.h>
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
