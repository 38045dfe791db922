/*
 * The loop a front runs on (run, serve, mcp alike): the engine's event
 * base; SIGINT and SIGTERM, handed to the front; and the drain's last
 * resort, a timer that stops the loop should a drain go on 10 s past its
 * grace (what is committed stays committed).
 */
#ifndef TP_LOOP_H
#define TP_LOOP_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    struct event_base *base;
    struct event *ev_int, *ev_term, *ev_stop;
    uint64_t drain_us;
} tp_loop_t;

/*
 * How many calls a front keeps in the engine at once with this many
 * workers: what the workers' pipelines hold, and a turn's worth more. A
 * call waits behind the window from submit to dispatch, so the window is
 * what its lines must stay cached across; it does not bound a commit
 * (answered calls leave it), which takes up to 4,096 results. With 1,024
 * more instead of 128, 20,000 no-op durable calls at -j 2 had 1.6x the
 * L2 misses (0.74M against 0.47M, 512 KB L2) and ran no faster.
 */
static inline size_t tp_loop_window(uint32_t workers)
{
    return (size_t)workers * 64 + 128;
}

/* The base, for an engine that may drain for drain_us. 0, or -1 logged. */
int tp_loop_new(tp_loop_t *l, uint64_t drain_us);

/* From now on SIGINT and SIGTERM call on_signal(signal, arg) in the loop. 0, or -1 logged. */
int tp_loop_signals(tp_loop_t *l, event_callback_fn on_signal, void *arg);

/* A drain has begun: arms the last resort. */
void tp_loop_draining(tp_loop_t *l);

/*
 * Whether epoll can watch fd (asked of a scratch epoll, so libevent does
 * not complain): a regular file or /dev/null cannot be, and a front reads
 * it as always ready.
 */
bool tp_loop_pollable(int fd);

/* Frees the signals, the timer and the base, after whatever ran on it. */
void tp_loop_free(tp_loop_t *l);

#endif
