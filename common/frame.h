/*
 * Frames: a little-endian u32 length, then one protobuf message.
 *
 * The length is checked against the caller's maximum before anything is
 * allocated for the body: an oversized or garbage length is a protocol
 * error, never an allocation.
 */
#ifndef TP_FRAME_H
#define TP_FRAME_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include "buf.h"

#define TP_FRAME_HEADER 4u
#define TP_FRAME_DEFAULT_MAX (64u << 20)

enum {
    TP_FRAME_MORE = 0,      /* not a whole frame yet */
    TP_FRAME_READY = 1,     /* *body / *len point into the buffer */
    TP_FRAME_TOO_BIG = -2,  /* the header announced more than max */
};

/*
 * Looks for one whole frame at the head of in. On TP_FRAME_READY the body
 * stays valid until the caller calls tp_buf_consume(in, TP_FRAME_HEADER +
 * *len) or changes the buffer.
 */
int tp_frame_peek(const tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len);

/* Appends header + packed msg to out. 0, or -1 (ENOMEM, or too big). */
int tp_frame_append(tp_buf_t *out, const ProtobufCMessage *msg, uint32_t max);

/*
 * Blocking: reads until one whole frame is buffered. Returns TP_FRAME_READY,
 * TP_FRAME_TOO_BIG, 0 at a clean EOF between frames, -1 on a read error or
 * an EOF inside a frame (errno EPIPE).
 */
int tp_frame_recv(int fd, tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len);

#endif
