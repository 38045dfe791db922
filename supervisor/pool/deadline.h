/*
 * The deadline thread: at each deadline that needs no grace, whatever the
 * loop is doing (an fsync, a spawn), it stops the worker's process group
 * (SIGSTOP). A second thread, the sweeper, then kills every process the
 * worker started, those that left the group included (common/proc/proctree.h),
 * then the group, and tells the loop through an eventfd; the loop ends the
 * attempt as of the moment of the stop, from which none of the group ran.
 * The walk of /proc takes a millisecond or more: in a thread apart, it
 * never makes the next deadline late. The pool's other files keep the
 * slots and their state machine (pool_internal.h); this keeps, by slot
 * index, what the thread needs to know of each, under one mutex: the
 * worker until it is reaped, its reply pipe, the running attempt's
 * deadline, and when the thread stopped the group. While the thread
 * kills a slot's processes (a millisecond or two), every call for that
 * slot waits for it to finish.
 *
 * Every function is called from the loop's thread. Without the thread (not
 * started, or it could not start), the per-slot calls do nothing and report
 * no kill: the loop's timers keep every deadline, as they do for attempts
 * with a kill_grace.
 */
#ifndef TP_DEADLINE_H
#define TP_DEADLINE_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "startboard.h"

/*
 * How early an attempt's timer wakes the loop before its deadline, and the
 * short sleeps it takes from then on. A timer on a CPU that has gone idle
 * fires late, by up to a few milliseconds on a virtual machine whose halted
 * vCPU the host has to wake; sleeps as short as a step end before an idle
 * CPU halts (a guest's halt polling lasts about 200 us), so the deadline is
 * kept to within about a step. The price: twenty wake-ups per attempt that
 * runs into its deadline.
 */
#define TP_DEADLINE_LEAD_US 2000u
#define TP_DEADLINE_STEP_US 100u

typedef struct tp_deadline tp_deadline_t;

/* Called on the loop when the thread has killed a group: ctx is tp_deadline_start's. */
typedef void (*tp_deadline_cb_t)(void *ctx);

/* The state for n slots, thread not started. NULL when out of memory. */
tp_deadline_t *tp_deadline_new(int n);
/*
 * Starts the thread and the sweeper, with every signal blocked (they are
 * the loop's), and watches their eventfd on base: killed_cb(ctx) runs
 * there after each kill. When something fails, logs it and the loop's
 * timers keep the deadlines.
 */
void tp_deadline_start(tp_deadline_t *d, struct event_base *base, tp_deadline_cb_t killed_cb, void *ctx);
/* Whether the thread runs: it keeps the deadlines given to tp_deadline_arm. */
bool tp_deadline_running(const tp_deadline_t *d);
/* Stops the thread and frees d. NULL is fine. */
void tp_deadline_free(tp_deadline_t *d);

/*
 * Slot i has a new worker, pid, answering on reply_fd: its group may be
 * killed from now on. No deadline yet.
 */
void tp_deadline_watch(tp_deadline_t *d, int i, pid_t pid, int reply_fd);
/*
 * Slot i's worker has exited and is about to be reaped: the thread must not
 * signal the group once the id can be reused. Forgets the worker, its reply
 * pipe (the caller closes it) and its deadline. Returns when the thread
 * stopped the group to kill it for the running attempt, or 0.
 */
uint64_t tp_deadline_forget(tp_deadline_t *d, int i);
/*
 * The running attempt on slot i times out at `at` (tp_now_us() time), for
 * the thread to keep; 0: the loop keeps it (a kill_grace). Wakes the thread
 * when it is the soonest.
 */
void tp_deadline_arm(tp_deadline_t *d, int i, uint64_t at);
/*
 * The running attempt on slot i is an exec tool's, call seq, not known to
 * have started: `at` is its deadline should its tool have started on time
 * (its Call's send plus timeout_us). At `at` the thread reads the slot's
 * line of the start board: started at t, the deadline becomes t +
 * timeout_us (cap at most, when cap is set), and is kept as any other;
 * not started, the thread looks again every TP_START_POLL_US until until
 * (the spawn limit), and kills it then. tp_deadline_spawn_deadline says
 * the same for the loop's own timer.
 */
void tp_deadline_arm_spawn(tp_deadline_t *d, int i, uint64_t at, const tp_start_line_t *line, uint64_t seq,
                           uint64_t timeout_us, uint64_t until, uint64_t cap);
/* How often a deadline waiting for its tool's start looks at the board. */
#define TP_START_POLL_US 10000u
/*
 * The deadline of an exec attempt (seq, its line, its timeout, the spawn
 * limit until and the cap as tp_deadline_arm_spawn takes them) at now:
 * *started says whether its tool has started (*at_us: when). Started: its
 * start plus timeout_us, within cap. Not: the next look, now plus
 * TP_START_POLL_US, or until when sooner.
 */
uint64_t tp_deadline_spawn_deadline(const tp_start_line_t *line, uint64_t seq, uint64_t timeout_us, uint64_t until,
                                    uint64_t cap, uint64_t now, bool *started, uint64_t *at_us);
/*
 * Takes slot i's deadline back from the thread. Returns when the thread
 * stopped the group to kill it (it is dead by the time this returns), or
 * 0: it has not, and now will not.
 */
uint64_t tp_deadline_disarm(tp_deadline_t *d, int i);
/* When the thread stopped slot i's group to kill it, or 0; the deadline stays with it. */
uint64_t tp_deadline_killed(tp_deadline_t *d, int i);

#endif
