/*
 * Protobuf's wire format, the little both hand-written encoders need (the
 * store's Result records, OTLP's spans): the wire types, and a varint's
 * size and bytes; and reading one back (a Reply frame, a collector's
 * answer).
 */
#ifndef TP_PBWIRE_H
#define TP_PBWIRE_H

#include <stdbool.h>
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

/*
 * Reads one varint of at most max bytes (10 hold any 64-bit value) at *p,
 * before end, moving *p past it; false when it runs past either, or past
 * the 64th bit.
 */
static inline bool tp_pb_get_varint(const uint8_t **p, const uint8_t *end, unsigned max, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0, shift = 0; i < max && *p < end; i++, shift += 7) {
        uint8_t c = *(*p)++;
        if (shift == 63 && c > 1)
            return false;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

#endif
