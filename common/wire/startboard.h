/*
 * The start board: one cache line per worker slot, in a memfd the pool
 * makes and every worker maps (fd 5, its line named by --slot). When an
 * exec tool's process has started (its exec done), the worker writes there
 * the seq of the call and when, on the machine's monotonic clock
 * (tp_now_us()). The deadline thread reads it without the loop's help, so
 * an exec attempt's timeout counts from its tool's start, not from its
 * Call's send, even while the loop is busy (an fsync): a loaded machine's
 * slow spawn is not the tool's time.
 *
 * Each line is a seqlock of one writer (the slot's worker) and any number
 * of readers that never block it: the writer clears seq, fences, writes
 * at_us, then publishes seq; a reader takes at_us only when it read the
 * same seq before and after it.
 */
#ifndef TP_STARTBOARD_H
#define TP_STARTBOARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The worker's fd for the board. */
#define TP_START_FD 5

typedef struct {
    _Atomic uint64_t seq;   /* the call whose tool has started; 0: being written, or none yet */
    _Atomic uint64_t at_us; /* when, tp_now_us() */
    char pad[48];           /* a line each: a worker's write never touches another's */
} tp_start_line_t;

/* The board for n slots: *fd (close-on-exec) and its lines, mapped. 0, or a negative errno. */
int tp_startboard_create(int n, tp_start_line_t **lines, int *fd);
void tp_startboard_free(tp_start_line_t *lines, int n, int fd);
/*
 * The worker's line: slot's, of the board at fd, which is closed either way.
 * NULL when there is none (no board, a slot past its end).
 */
tp_start_line_t *tp_startboard_map(int fd, int slot);

/* Call seq's tool started at at_us. */
static inline void tp_start_mark(tp_start_line_t *l, uint64_t seq, uint64_t at_us)
{
    atomic_store_explicit(&l->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&l->at_us, at_us, memory_order_relaxed);
    atomic_store_explicit(&l->seq, seq, memory_order_release);
}

/* Whether call seq's tool has started (*at_us: when), as far as l says now. */
static inline bool tp_start_read(const tp_start_line_t *l, uint64_t seq, uint64_t *at_us)
{
    if (l == NULL || seq == 0)
        return false;
    uint64_t s1 = atomic_load_explicit(&((tp_start_line_t *)l)->seq, memory_order_acquire);
    uint64_t at = atomic_load_explicit(&((tp_start_line_t *)l)->at_us, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&((tp_start_line_t *)l)->seq, memory_order_relaxed);
    if (s1 != seq || s2 != seq)
        return false;
    *at_us = at;
    return true;
}

#endif
