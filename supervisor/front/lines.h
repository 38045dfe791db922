/*
 * Lines of input read into a buffer a piece at a time: run's calls and MCP's
 * messages over stdio. Each whole line is handed out once; a line that
 * grows past the limit with no newline is reported once and dropped as it
 * comes, never held; bytes already searched for a newline are not searched
 * again when more arrive.
 */
#ifndef TP_LINES_H
#define TP_LINES_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

typedef struct {
    size_t scan; /* bytes at the buffer's head already searched for '\n' */
    bool skip;   /* dropping the rest of an overlong line */
} tp_lines_t;

typedef enum {
    TP_LINES_MORE, /* no whole line yet: read more (*len: bytes of an overlong line dropped) */
    TP_LINES_LINE, /* *len bytes at the buffer's head are a line, its '\n' after them */
    TP_LINES_TAIL, /* the same, but the end of an overlong line already reported: not to be used */
    TP_LINES_LONG, /* a line passed max bytes with no '\n': report it (*len: its bytes, dropped) */
} tp_lines_rc_t;

/*
 * The next line of b. After TP_LINES_LINE or TP_LINES_TAIL the caller
 * drops it with tp_lines_done; after TP_LINES_LONG and TP_LINES_MORE, what
 * was dropped (*len bytes) is already gone from b.
 */
tp_lines_rc_t tp_lines_next(tp_lines_t *l, tp_buf_t *b, size_t max, size_t *len);

/* Drops the line of len bytes and its '\n' from b's head. */
void tp_lines_done(tp_lines_t *l, tp_buf_t *b, size_t len);

/* At the end of the input: whether b's rest is a last line without its '\n' (not an overlong one's end). */
static inline bool tp_lines_rest(const tp_lines_t *l, const tp_buf_t *b)
{
    return tp_buf_avail(b) > 0 && !l->skip;
}

/* Forgets what was searched and skipped (b emptied by its owner). */
static inline void tp_lines_reset(tp_lines_t *l)
{
    *l = (tp_lines_t){0};
}

#endif
