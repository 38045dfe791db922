/*
 * The one error convention, in LMDB's manner: a function that can fail
 * returns 0 on success and a negative code on failure, from one space:
 *
 *   -errno           a system call's error: TP_ENOMEM is -ENOMEM, TP_EIO -EIO...
 *   LMDB's own       MDB_KEYEXIST (-30799) to MDB_LAST_ERRCODE, passed through
 *                    by the store (MDB_NOTFOUND: no such record)
 *   toolpool's own   TP_ECLOSED and the rest below, from -40001 down
 *
 * tp_strerror says what any of them means. A component whose codes come
 * from a library common/ does not link (the store's LMDB) registers how to
 * say them (tp_strerror_range). Every public function's comment lists the
 * codes it returns.
 */
#ifndef TP_ERROR_H
#define TP_ERROR_H

#include <errno.h>

enum {
    TP_OK = 0,
    TP_ENOMEM = -ENOMEM,
    TP_EIO = -EIO,
    TP_EINVAL = -EINVAL,
    TP_EPROTO = -EPROTO, /* a corrupt frame or record: it does not unpack, or is not sane */
    TP_ENOSPC = -ENOSPC,
    TP_EAGAIN = -EAGAIN,
    TP_EINTR = -EINTR,
    TP_EEXIST = -EEXIST,
    TP_ENOENT = -ENOENT, /* no such thing: a file, a running attempt */
    TP_E2BIG = -E2BIG,   /* longer than the limit allows: a frame, a line, a message */
    TP_ETIMEDOUT = -ETIMEDOUT,
    TP_EPIPE = -EPIPE,
    TP_EACCES = -EACCES,   /* not allowed: a write to a store opened read-only */
    TP_EBADMSG = -EBADMSG, /* a message that does not read: an MCP server's answer the JSON parser cannot hold */

    TP_ECLOSED = -40001,  /* the other end closed: EOF on a pipe, a server that went away */
    TP_EREFUSED = -40002, /* the other end answered, but refused: a JSON-RPC error to initialize */
    TP_EWORKER = -40003,  /* the pool's workers cannot be started, or their deadlines kept */
    TP_E_LAST = -40003,
};

/* A system call's errno as a code: -e, or TP_EIO for an errno of 0 (a call that failed without saying why). */
static inline int tp_errno(int e)
{
    return e > 0 ? -e : TP_EIO;
}

/*
 * What rc means, for a person: static text (or this thread's buffer), never
 * NULL. A positive rc is taken as an errno, as a library returns it.
 */
const char *tp_strerror(int rc);

/*
 * Says the codes from hi down to lo (both negative, hi > lo) with fn, which
 * takes them as its library returns them. At most 4 ranges; a later one
 * for the same range replaces it.
 */
void tp_strerror_range(int lo, int hi, const char *(*fn)(int rc));

#endif
