#include "lines.h"

#include <string.h>

tp_lines_rc_t tp_lines_next(tp_lines_t *l, tp_buf_t *b, size_t max, size_t *len)
{
    const uint8_t *head = tp_buf_head(b);
    size_t avail = tp_buf_avail(b);
    const uint8_t *nl = avail > l->scan ? memchr(head + l->scan, '\n', avail - l->scan) : NULL;
    if (nl != NULL) {
        *len = (size_t)(nl - head);
        l->scan = 0;
        if (l->skip) {
            l->skip = false;
            return TP_LINES_TAIL;
        }
        return TP_LINES_LINE;
    }
    l->scan = avail;
    tp_lines_rc_t rc = TP_LINES_MORE;
    if (avail > max && !l->skip) {
        l->skip = true;
        rc = TP_LINES_LONG;
    }
    *len = 0;
    if (l->skip) {
        *len = avail;
        tp_buf_reset(b);
        l->scan = 0;
    }
    return rc;
}

void tp_lines_done(tp_lines_t *l, tp_buf_t *b, size_t len)
{
    tp_buf_consume(b, len + 1);
    l->scan = 0;
}
