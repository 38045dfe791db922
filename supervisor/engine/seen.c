#include "seen.h"

#include <stdlib.h>
#include <xxhash.h>

/*
 * 2^14 lines of 512 bits (1 MiB, its pages touched only as ids land on
 * them). At a million ids, an eighth of its bits, about 3 % of the ids
 * never added are looked up anyway; past that the filter turns itself off.
 */
#define SEEN_LINE_BITS 14
#define SEEN_LINES ((size_t)1 << SEEN_LINE_BITS)
#define SEEN_WORDS (SEEN_LINES * 8)
#define SEEN_CAP ((size_t)1 << 20)

bool tp_seen_on(tp_seen_t *s)
{
    s->n = 0;
    s->bits = calloc(SEEN_WORDS, sizeof *s->bits);
    return s->bits != NULL;
}

void tp_seen_off(tp_seen_t *s)
{
    free(s->bits);
    s->bits = NULL;
}

/* The line's first word, and the three bits (0..511) in it. */
static uint64_t *place(const tp_seen_t *s, const char *id, size_t len, unsigned bit[3])
{
    uint64_t h = XXH3_64bits(id, len);
    for (int k = 0; k < 3; k++)
        bit[k] = (unsigned)(h >> (SEEN_LINE_BITS + 9 * k)) & 511u;
    return s->bits + (h & (SEEN_LINES - 1)) * 8;
}

void tp_seen_add(tp_seen_t *s, const char *id, size_t len)
{
    if (s->bits == NULL)
        return;
    if (++s->n > SEEN_CAP) {
        tp_seen_off(s);
        return;
    }
    unsigned bit[3];
    uint64_t *line = place(s, id, len, bit);
    for (int k = 0; k < 3; k++)
        line[bit[k] >> 6] |= (uint64_t)1 << (bit[k] & 63);
}

bool tp_seen_maybe(const tp_seen_t *s, const char *id, size_t len)
{
    if (s->bits == NULL)
        return true;
    unsigned bit[3];
    const uint64_t *line = place(s, id, len, bit);
    for (int k = 0; k < 3; k++)
        if (!(line[bit[k] >> 6] >> (bit[k] & 63) & 1))
            return false;
    return true;
}
