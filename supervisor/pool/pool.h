/*
 * The pool: N worker slots owned by one libevent loop.
 *
 * A slot is one worker process (fork+exec of toolpool-worker, leader of its
 * own process group) and the two pipes to it. The pool runs one attempt per
 * slot at a time (and queues more behind it), or, for http tools, many at
 * once (up to the tool's max_in_flight a worker), arms the attempt's timer,
 * kills the worker's whole group when the timer fires, reports the
 * attempt's end once nothing of it can run any more (the group has been
 * sent SIGKILL, or the worker reaped), reaps it on SIGCHLD and respawns the
 * slot. Respawns of crashing workers are throttled; a worker that cannot
 * even start stops the pool.
 *
 * The pool holds no policy: it reports every attempt's end through done_cb
 * and the caller decides what follows.
 */
#ifndef TP_POOL_H
#define TP_POOL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "registry.h"
#include "taxonomy.h"

/* One attempt of one call: what the pool needs to run it, and its outcome. */
typedef struct tp_attempt {
    /* set by the caller */
    const tp_tool_t *tool;
    const char *call_id;
    const char *job;
    uint64_t step;
    uint32_t number;  /* 1 for the first attempt */
    const char *args; /* JSON text */
    size_t args_len;
    uint64_t timeout_us;
    uint64_t limit_us;       /* absolute end of its time (deadline, max_wall); 0: none */
    int depth;               /* the most attempts a worker may hold while this one
                                   is among them (itself included); 1: it waits for an
                                   idle worker */
    bool notify;             /* notice_cb hears its MCP server's notifications */
    const char *traceparent; /* the attempt's span, passed on to its tool (W3C); NULL: none */
    /* set by the pool */
    uint64_t seq;         /* its frame's sequence number on the slot */
    uint64_t backstop_us; /* http, in flight: past this its worker is killed (its deadline and a grace) */
    bool requeue;         /* ended without starting (it was queued behind a
                                   worker that died): run it again, uncounted */
    /* set by the pool when the attempt ends */
    bool ok;
    tp_kind_t kind;   /* TP_KIND_OTHER: see kind_name */
    bool from_tool;   /* the kind is what the tool's Reply said (the pool's own: false) */
    bool unstarted;   /* a Timeout before its tool started (an exec tool's spawn never came) */
    bool shared_fate; /* ended with its worker, which held other calls too and was killed at another's
                         deadline or died: it says nothing of its own tool's health */
    char kind_name[64];
    char *message; /* malloc'd or NULL; the caller frees */
    char *result;  /* malloc'd JSON text when ok; the caller frees */
    size_t result_len;
    int64_t retry_after_ms; /* -1: none */
    double cost;
    uint64_t started_us; /* its Call sent (a queued one: the one before it answered) */
    uint64_t ended_us;
    uint64_t spawn_us; /* an exec tool's: its process started this long after started_us (its Reply says) */
} tp_attempt_t;

typedef struct tp_pool tp_pool_t;

typedef struct {
    int workers;               /* slots */
    const char *worker_path;   /* the toolpool-worker program */
    uint32_t max_frame;        /* bytes; a longer frame is a protocol error */
    uint64_t recycle_after;    /* calls per worker before a fresh one; 0 = never */
    uint64_t hello_timeout_us; /* a worker that says nothing this long is dead */
    int pipeline;              /* attempts one worker may hold at once (1: no pipelining) */
    bool http;                 /* the registry has http tools: each worker loads libcurl as it starts */
    /* An attempt ended (ok, failed, timed out, crashed). Called from the loop. */
    void (*done_cb)(void *ctx, tp_attempt_t *a);
    /*
     * While an attempt with notify runs: a notification of its MCP server
     * (method, and params: JSON text of an object, as the worker passed it
     * on, not checked). Called from the loop. May be NULL.
     */
    void (*notice_cb)(void *ctx, tp_attempt_t *a, const char *method, const uint8_t *params, size_t len);
    /*
     * An attempt that waited in its worker's queue (pipelining) starts now:
     * its started_us and timeout_us are set anew. Called from the loop. May
     * be NULL.
     */
    void (*started_cb)(void *ctx, tp_attempt_t *a);
    /* A slot can take an attempt: the caller may submit more. */
    void (*idle_cb)(void *ctx);
    /* The pool cannot go on (a worker cannot start): rc is TP_EWORKER, or the system's code; message says why. */
    void (*fatal_cb)(void *ctx, int rc, const char *message);
    /* Every worker has been reaped after tp_pool_shutdown. */
    void (*closed_cb)(void *ctx);
    void *ctx;
} tp_pool_opts_t;

typedef struct {
    uint64_t spawned;
    uint64_t crashed;  /* workers that died without being told to */
    uint64_t timeouts; /* workers killed at an attempt's deadline */
    uint64_t recycled;
    uint64_t requeued; /* queued attempts handed back unstarted */
} tp_pool_stats_t;

tp_pool_t *tp_pool_new(struct event_base *base, const tp_pool_opts_t *opts);
/* Starts the workers. 0, or with the reason logged the worker program's errno as a code, or TP_EIO. */
int tp_pool_start(tp_pool_t *pool);
/* Slots ready for an attempt now. */
int tp_pool_idle(const tp_pool_t *pool);
/*
 * Whether a worker can take an attempt of tool t now without an idle slot:
 * an http tool's, when a worker holding http calls has room for one more
 * (or a slot is idle); another's, when some busy worker can queue one of
 * this depth behind its current one.
 */
bool tp_pool_room(const tp_pool_t *pool, const tp_tool_t *t, int depth);
/* Whether t's calls run side by side in one worker (http, mcp) rather than one at a time. */
static inline bool tp_pool_flies(const tp_tool_t *t)
{
    return t->adapter == TP_ADAPTER_HTTP || t->adapter == TP_ADAPTER_MCP;
}
/* Attempts running now. */
int tp_pool_busy(const tp_pool_t *pool);
/*
 * Writes the Calls submitted since the last flush to their workers. They
 * go by themselves after the loop's current callbacks; a caller about to
 * block (in a commit's fsync) sends them first, so the workers are busy
 * meanwhile.
 */
void tp_pool_flush(tp_pool_t *pool);
/*
 * The soonest deadline the loop itself has to keep (tp_now_us() time), or
 * 0: that of a running attempt with a kill_grace, or any when there is no
 * deadline thread. Work that would block the loop for a while (a commit's
 * fsync) can wait until it has been kept.
 */
uint64_t tp_pool_next_deadline(const tp_pool_t *pool);
/* Whether a is on a slot now (submitted, running or queued, not yet ended). */
bool tp_pool_is_running(const tp_pool_t *pool, const tp_attempt_t *a);
/*
 * Hands a to an idle slot, or, when a->depth allows, queues it on a busy
 * worker whose attempts all allow one more. An http tool's attempt goes
 * to the worker holding the fewest http calls that has room for it under
 * its tool's max_in_flight (an idle one holds none); it runs beside them,
 * its own timeout kept by the worker. Its timer starts when the
 * worker starts it (the reply before it arrives). The pool keeps the pointer
 * until done_cb. Returns 0; TP_EAGAIN when no slot can take it now; or
 * TP_E2BIG (it does not fit in a frame) or TP_ENOMEM, and then the attempt
 * has ended before it began: a is filled in as failed.
 */
int tp_pool_submit(tp_pool_t *pool, tp_attempt_t *a);
/*
 * Ends a's attempt now, if it is a slot's running attempt: its worker's
 * group is killed, and the attempt ends Cancelled at the reap (done_cb).
 * An http attempt is ended by its worker alone, told with a Cancel frame,
 * which its other calls outlive; it ends Cancelled when the worker
 * answers (its worker is killed if it does not within a short grace).
 * An attempt queued behind another in a worker is left to end by itself
 * (a pipelined attempt is a short one). Returns 0, or TP_ENOENT when a is
 * not running.
 */
int tp_pool_cancel(tp_pool_t *pool, tp_attempt_t *a);
/*
 * Stops the pool: idle workers get EOF and exit; with kill_busy, busy ones
 * are killed at once (their attempts end Cancelled), else they finish first.
 * closed_cb fires when every worker has been reaped.
 */
void tp_pool_shutdown(tp_pool_t *pool, bool kill_busy);
const tp_pool_stats_t *tp_pool_stats(const tp_pool_t *pool);
void tp_pool_free(tp_pool_t *pool);

/* The toolpool-worker beside the running program, or $TOOLPOOL_WORKER. */
const char *tp_pool_default_worker(void);

#endif
