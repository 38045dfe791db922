#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"

int tp_buf_grow(tp_buf_t *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    if (b->off > 0 && b->cap - (b->len - b->off) >= extra) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        return 0;
    }
    if (extra > SIZE_MAX - b->len || tp_array_grow(&b->data, &b->cap, b->len + extra, 1, 256) < 0) {
        errno = ENOMEM;
        return TP_ENOMEM;
    }
    return 0;
}

int tp_buf_printf(tp_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || tp_buf_reserve(b, (size_t)n + 1) < 0)
        return TP_ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void tp_buf_consume(tp_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) {
        b->off = 0;
        b->len = 0;
    }
}

void tp_buf_reset(tp_buf_t *b)
{
    b->off = 0;
    b->len = 0;
}

void tp_buf_free(tp_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

ssize_t tp_buf_read_fd(tp_buf_t *b, int fd)
{
    if (tp_buf_reserve(b, 65536) < 0)
        return TP_ENOMEM;
    ssize_t n;
    do {
        n = read(fd, b->data + b->len, b->cap - b->len);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return tp_errno(errno);
    b->len += (size_t)n;
    return n;
}

void tp_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void tp_close_pipe(int p[2])
{
    tp_close_fd(&p[0]);
    tp_close_fd(&p[1]);
}

int tp_write_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                /* Someone else made the descriptor non-blocking: wait, as a blocking write would. */
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                poll(&pf, 1, -1);
                continue;
            }
            return tp_errno(errno);
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

void tp_pipe_fit(int fd, size_t n, size_t *asked)
{
    if (n <= 65536 || n <= *asked || *asked >= TP_PIPE_MAX)
        return;
    size_t want = 131072;
    while (want < n && want < TP_PIPE_MAX)
        want <<= 1;
    *asked = want;
    (void)fcntl(fd, F_SETPIPE_SZ, (int)want);
}
