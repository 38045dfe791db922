/*
 * A growable byte buffer with a read offset: the accumulator under every
 * frame reader and writer, and the output line builder.
 */
#ifndef TP_BUF_H
#define TP_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "error.h"

typedef struct {
    uint8_t *data;
    size_t off; /* first unconsumed byte */
    size_t len; /* end of valid bytes */
    size_t cap;
} tp_buf_t;

/*
 * The buffer's functions return 0, or TP_ENOMEM when it cannot grow (the
 * bytes it holds stay as they were).
 */

/* tp_buf_reserve's slow way: compacts or grows. 0, or TP_ENOMEM. */
int tp_buf_grow(tp_buf_t *b, size_t extra);

/*
 * Makes room for extra more bytes after len. 0, or TP_ENOMEM. Inline,
 * with the appends: result lines and frames are built of many small ones.
 */
static inline int tp_buf_reserve(tp_buf_t *b, size_t extra)
{
    return b->cap - b->len >= extra ? 0 : tp_buf_grow(b, extra);
}

/* Appends n bytes from p. 0, or TP_ENOMEM. */
static inline int tp_buf_append(tp_buf_t *b, const void *p, size_t n)
{
    if (tp_buf_reserve(b, n) < 0)
        return TP_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* Appends the string s, without its NUL. 0, or TP_ENOMEM. */
static inline int tp_buf_puts(tp_buf_t *b, const char *s)
{
    return tp_buf_append(b, s, strlen(s));
}

/* v in decimal at out, which has room for 20 bytes, with no NUL: the count written. No printf: it runs on calls' paths. */
static inline size_t tp_u64_dec(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* Appends v in decimal, as printf's %llu and %lld write it. 0, or TP_ENOMEM. */
static inline int tp_buf_put_u64(tp_buf_t *b, uint64_t v)
{
    if (tp_buf_reserve(b, 20) < 0)
        return TP_ENOMEM;
    b->len += tp_u64_dec((char *)b->data + b->len, v);
    return 0;
}
static inline int tp_buf_put_i64(tp_buf_t *b, int64_t v)
{
    if (tp_buf_reserve(b, 21) < 0)
        return TP_ENOMEM;
    char *o = (char *)b->data + b->len;
    bool neg = v < 0;
    *o = '-';
    /* the magnitude without overflow, INT64_MIN too */
    b->len += neg + tp_u64_dec(o + neg, neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    return 0;
}

/* Appends fmt as printf formats it, without a NUL. 0, or TP_ENOMEM. */
int tp_buf_printf(tp_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops n consumed bytes from the front; compacts when worth it. */
void tp_buf_consume(tp_buf_t *b, size_t n);
static inline size_t tp_buf_avail(const tp_buf_t *b)
{
    return b->len - b->off;
}
/* The unconsumed bytes' start; NULL for a buffer never grown (NULL + 0 is undefined in C). */
static inline const uint8_t *tp_buf_head(const tp_buf_t *b)
{
    return b->data ? b->data + b->off : NULL;
}
void tp_buf_reset(tp_buf_t *b);
void tp_buf_free(tp_buf_t *b);

/* The n bytes at in as 2n lowercase hex digits at out (no NUL). */
static inline void tp_hex(char *out, const void *in, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
}

/*
 * One read(2) into the buffer (at least 64 KiB of room). Returns the bytes
 * read, 0 at EOF, or a negative code: TP_ENOMEM, or read's errno as one
 * (TP_EAGAIN on a non-blocking descriptor with nothing to read); errno is
 * set too.
 */
ssize_t tp_buf_read_fd(tp_buf_t *b, int fd);

/*
 * write(2) until all n bytes are out, resuming after EINTR (and, on a
 * descriptor someone made non-blocking, waiting). 0, or write's errno as a
 * code (TP_EPIPE: the reader is gone); errno is set too.
 */
int tp_write_all(int fd, const void *p, size_t n);

/* Closes *fd if it is open, and marks it closed (-1). */
void tp_close_fd(int *fd);
/* Both ends of a pipe, as tp_close_fd. */
void tp_close_pipe(int p[2]);

/*
 * Grows a pipe (either end) so that n bytes fit in it at once, up to
 * TP_PIPE_MAX: a 1 MiB frame then crosses in one write and one read instead
 * of sixteen 64 KiB hand-overs, each a wake-up of the other side. A pipe's
 * pages are taken only while they hold data, but its size counts against the
 * user's pipe quota, so pipes grow only when a frame needs it. *asked keeps
 * what was last asked for this pipe (0 at first): the call costs nothing for
 * frames that already fit, and a refusal (a quota, or an older kernel) is not
 * asked again; the pipe then works as before, in pieces.
 */
#define TP_PIPE_MAX (1u << 20)
void tp_pipe_fit(int fd, size_t n, size_t *asked);

#endif
