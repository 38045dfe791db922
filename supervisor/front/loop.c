#include "loop.h"

#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

#include "engine.h"
#include "log.h"

int tp_loop_new(tp_loop_t *l, uint64_t drain_us)
{
    *l = (tp_loop_t){.drain_us = drain_us};
    if ((l->base = tp_engine_base_new()) == NULL) {
        tp_log_error("loop.out_of_memory", "out of memory");
        return -1;
    }
    return 0;
}

/* The drain went on far past its grace: stop the loop. */
static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_loop_t *l = arg;
    tp_log_error("loop.drain_stuck", "the drain did not end; stopping");
    event_base_loopbreak(l->base);
}

int tp_loop_signals(tp_loop_t *l, event_callback_fn on_signal, void *arg)
{
    l->ev_int = evsignal_new(l->base, SIGINT, on_signal, arg);
    l->ev_term = evsignal_new(l->base, SIGTERM, on_signal, arg);
    l->ev_stop = evtimer_new(l->base, stop_cb, l);
    if (l->ev_int == NULL || l->ev_term == NULL || l->ev_stop == NULL || evsignal_add(l->ev_int, NULL) != 0 ||
        evsignal_add(l->ev_term, NULL) != 0) {
        tp_log_error("loop.signal_failed", "cannot set up the signals");
        return -1;
    }
    return 0;
}

void tp_loop_draining(tp_loop_t *l)
{
    uint64_t us = l->drain_us + 10000000u;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u)};
    if (evtimer_add(l->ev_stop, &tv) != 0)
        tp_log_warn("loop.timer_failed", "cannot arm the drain's last-resort timer");
}

void tp_loop_free(tp_loop_t *l)
{
    struct event *evs[] = {l->ev_int, l->ev_term, l->ev_stop};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
        if (evs[i])
            event_free(evs[i]);
    if (l->base)
        event_base_free(l->base);
}

bool tp_loop_pollable(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return true; /* libevent will say what is wrong */
    struct epoll_event ev = {.events = EPOLLIN};
    bool ok = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0 || errno != EPERM;
    close(ep);
    return ok;
}
