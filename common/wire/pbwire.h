/*
 * Protobuf's wire format, the little both hand-written encoders need (the
 * store's Result records, OTLP's spans): the wire types, and a varint's
 * size and bytes.
 */
#ifndef TP_PBWIRE_H
#define TP_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

enum { TP_PB_VARINT = 0, TP_PB_FIXED64 = 1, TP_PB_LEN = 2 };

static inline size_t tp_pb_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* v as a varint at p (room for tp_pb_varint_len(v) bytes); the byte after it. */
static inline uint8_t *tp_pb_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

#endif
