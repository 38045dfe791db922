/*
 * The engine: the pool, the store and every recovery decision, behind one
 * small interface that each way in (a "front") calls.
 *
 * A front hands the engine calls (tp_engine_submit) and gets back, for each,
 * exactly one answer: the call's Result record and its JSON rendering (the
 * result line of `toolpool run`), delivered only once that record is
 * durable in the store. Everything between (admission, guards, breakers,
 * attempts on the pool, timeouts, classification, retries with backoff,
 * fallback hops, degraded answers, escalations, in-flight markers of tools
 * that are not idempotent, group commit, answering recorded ids from the
 * store) is the engine's; no front decides any of it, and the engine never
 * reads or writes a front's bytes.
 *
 *      JSONL (run)   HTTP (serve)   MCP
 *            \            |         /
 *             tp_engine_submit / answer
 *                         |
 *              engine: policy, store, pool
 *
 * Threading: everything here runs on the loop (the event_base given in the
 * options), as do the callbacks.
 *
 * Ordering: answers are delivered in the order the engine produced them
 * (the order calls ended, or were answered from the store, or rejected),
 * after the commit that made them durable; then each front's flush hook
 * runs once, so a front can write a turn's answers in one write.
 */
#ifndef TP_ENGINE_H
#define TP_ENGINE_H

#include <event2/event.h>
#include <jansson.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "pool.h"
#include "registry.h"
#include "scoreboard.h"
#include "store.h"
#include "summary.h"
#include "toolpool.pb-c.h"

typedef struct tp_engine tp_engine_t;
/* A call the engine holds: the front's handle for tp_engine_cancel, valid until its answer. */
typedef struct tp_call tp_call_t;

/*
 * Which recorded failures a run does again (`run --retry-failed`): every
 * one, or those of the given classes and kinds (a tool's own kinds by
 * name). Recorded refusals (class malformed) are always checked again.
 */
typedef struct {
    bool all;
    uint32_t classes; /* bit (1 << tp_class_t) per class */
    char **kinds;     /* kind names, n_kinds of them */
    size_t n_kinds;
} tp_rerun_t;

/* Whether a recorded failure of kind is one f does again. */
bool tp_rerun_match(const tp_rerun_t *f, const char *kind);

/*
 * What a rerun does with a recorded result made under another version of
 * its tool than the registry's now (--on-version-change): runs the call
 * again, keeping the old record in the new one's history (the default);
 * serves it as it is; or refuses to start (the front's start-up walks the
 * store: tp_engine_cli_open).
 */
typedef enum {
    TP_VERSION_RERUN = 0,
    TP_VERSION_SERVE,
    TP_VERSION_REFUSE,
} tp_on_version_t;

/*
 * The trace context a caller gave with a call (W3C Trace Context: the
 * traceparent and tracestate as written, not checked here), and what its
 * front adds to the call's span. Any string may be NULL. The ids are the
 * call's span's, set by the begin hook (opts.on_begin) when the engine
 * keeps the call: its attempts' span ids follow from them
 * (tp_trace_span_id), and so does the traceparent each attempt passes on
 * to its tool (attempt_tp, written as the attempt starts).
 */
typedef struct {
    const char *traceparent;
    const char *tracestate;
    const char *rpc_id; /* an MCP front's JSON-RPC request id, as text: the call came as tools/call */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags; /* the W3C trace flags passed on (01: sampled) */
    char attempt_tp[56];
} tp_trace_ctx_t;

/*
 * The span id of entry i of a traced call's trace (an attempt), or of the
 * backoff after it (backoff true): a mix of the call's span id and i, so
 * that the span an attempt names to its tool is the one exported.
 */
void tp_trace_span_id(const tp_trace_ctx_t *tc, size_t i, bool backoff, uint8_t out[8]);

/* Sets tc's trace and span ids when the engine keeps a traced call (its caller's parent read there). */
typedef void (*tp_call_begin_fn)(void *ctx, tp_trace_ctx_t *tc);

/*
 * Told of every call that ran, at its end, with its record (valid for the
 * hook's return only) and its trace context. On the loop: it must not
 * block (the OTLP exporter queues and returns).
 */
typedef void (*tp_call_end_fn)(void *ctx, const Toolpool__Result *r, const tp_trace_ctx_t *tc);

typedef struct {
    const tp_registry_t *reg;
    tp_store_t *store; /* results, checkpoints, breakers, escalations; NULL: none */
    tp_on_version_t on_version_change;
    const tp_rerun_t *rerun; /* recorded failures to run again; NULL: none */
    struct event_base *base; /* the loop the engine and its pool run on */
    int workers;
    const char *worker_path;
    uint32_t max_frame;
    uint64_t recycle_after;
    int pipeline; /* attempts of a fast tool one worker may hold (1: none) */
    /*
     * How long a call queued behind others in a worker may expect to wait:
     * a tool's depth is as many of its average attempts as fit in it
     * (0: TP_QUEUE_BUDGET_US). Tests that need calls queued whatever the
     * machine's speed give it generously.
     */
    uint64_t queue_budget_us;
    uint64_t drain_us; /* tp_engine_drain: how long running calls may finish */
    size_t max_args;   /* a call's args longer than this are refused (InvalidRequest); 0: none */
    uint64_t seed;     /* jitter seed; 0 = random */
    /*
     * Trace export: the hooks when a call is kept and at its end, and
     * their ctx; on_end NULL: none, and no trace context is kept.
     */
    tp_call_begin_fn on_begin;
    tp_call_end_fn on_end;
    void *on_end_ctx;
} tp_engine_opts_t;

/*
 * A notification the MCP server of a running attempt sent about the call
 * (notifications/progress, with the worker's own progressToken, or
 * notifications/message): method, and its params as the server wrote them
 * (JSON text, not checked). ctx is the call's answer ctx.
 */
typedef void (*tp_notice_fn)(void *ctx, const char *method, const char *params, size_t len);

/* One call, as a front read it. The engine copies what it keeps. */
typedef struct {
    const char *id;  /* non-empty */
    const char *job; /* NULL: the id (a job of one call) */
    /*
     * Whose failures the same-call breaker counts this call's with under
     * the scope "job", when that is not its job: a front whose calls are
     * each a job of their own (an MCP 2026-07-28 request) names the
     * conversation they come in. NULL: the job.
     */
    const char *breaker_job;
    uint64_t step;
    const char *tool;
    char *args; /* compact JSON object text, NUL-terminated; NULL: {} */
    size_t args_len;
    bool give_args; /* args is malloc'd, and the engine's from now on (no copy) */
    /*
     * The front takes the call's answer as soon as it is made, before the
     * commit that makes it durable (tp_answer_t.stage): it renders it then,
     * while the record is in cache, and sends nothing until it hears that
     * commit. Only an answer of a call that ran now comes staged; the others
     * (from the store, refused, never started) come as usual, in their
     * order among them.
     */
    bool answer_staged;
    /* Optional, when the front has them already (else the engine works them out): */
    const json_t *jargs; /* the args parsed */
    const char *canon;   /* the args' canonical form (json.h), for the digests */
    size_t canon_len;
    const char *where;           /* prefix for messages about the call ("line 7"); NULL: none */
    uint64_t deadline_us;        /* the caller's end for the whole call (tp_now_us time); 0: none */
    tp_notice_fn notice;         /* hears what an mcp tool's server says while the call runs; NULL: none */
    const tp_trace_ctx_t *trace; /* the caller's trace context; NULL: none (kept only with opts.on_end) */
} tp_request_t;

/*
 * What a front gets back for one call: its record, which the front renders
 * as it sends it (tp_answer_write for the JSON line). Valid until the
 * fronts' flush hooks return; a staged answer's (stage below), only during
 * the call that hands it over.
 */
typedef struct {
    /*
     * The record, whole: the call's as it ran now, or as the store keeps
     * it (recorded). NULL when the call never started (not_started).
     */
    const Toolpool__Result *result;
    /*
     * A recorded answer of an older toolpool's store whose line today's
     * rendering would not give byte for byte: that line, as first reported
     * ('\n' included); else NULL.
     */
    const uint8_t *kept_line;
    size_t kept_len;
    bool recorded; /* answered from the store: it did not run now */
    bool conflict; /* InvalidRequest: the id is recorded (or claimed) for other input */
    /* The engine was draining and the call never started: no record, no line; a rerun runs it. */
    bool not_started;
    tp_call_t *call; /* the handle submit gave, or NULL */
    /*
     * For a request made with answer_staged, the answer of its call comes
     * in two: TP_ANSWER_STAGED when it is made (result set, not durable
     * yet: render, hold, send nothing), then TP_ANSWER_DURABLE once its
     * commit is made (send what was held) or TP_ANSWER_LOST when that
     * commit failed (drop it), result NULL both times. The held answers come
     * back in the order they were made. Every other answer is
     * TP_ANSWER_FINAL: durable, sent as it comes. A staged answer comes
     * from inside the engine (a cancel may bring one at once): its callback
     * renders and returns, calling nothing of the engine's. An engine
     * freed with answers still waiting for their commit tells nothing more.
     */
    enum { TP_ANSWER_FINAL, TP_ANSWER_STAGED, TP_ANSWER_DURABLE, TP_ANSWER_LOST } stage;
} tp_answer_t;

typedef void (*tp_answer_fn)(void *ctx, const tp_answer_t *a);

/*
 * Appends a's JSON line (the contract's result line, '\n' included): its
 * kept line, or its record rendered (resultline.h). 0, TP_ENOMEM, or
 * TP_EINVAL for a call that never started (it has no line).
 */
int tp_answer_write(tp_buf_t *b, const tp_answer_t *a);

/* A front's hooks into the engine's turn. Any of them may be NULL. */
typedef struct {
    /*
     * The engine's turn is open (its store transaction too): a front that
     * reads calls in batches submits the next ones now. It keeps
     * tp_engine_live() under its own window, and asks for another turn
     * (tp_engine_kick) when it stops early with more to give.
     */
    void (*feed)(void *ctx);
    /* A commit's answers have all been delivered. */
    void (*flush)(void *ctx);
    void *ctx;
} tp_front_t;

/*
 * What the engine counts, for a front that reports it (run's summary).
 * Counters only grow. Per tool (calls by outcome, attempts, retries,
 * latency) and the commits' latency it counts on its scoreboard
 * (tp_engine_board), where /metrics, `toolpool top` and `toolpool
 * metrics` read them.
 */
typedef struct {
    uint64_t timeouts;          /* attempts that ran into their timeout */
    uint64_t answered_recorded; /* answers served from the store */
    uint64_t rerun;             /* recorded failures run again (--retry-failed), refusals checked again */
    uint64_t version_rerun;     /* recorded results of another version of their tool run again */
    uint64_t late;              /* calls that came after a later step of their job had started */
    uint64_t rejected;          /* requests answered without a call (malformed, unknown tool) */
    uint64_t commits;
} tp_engine_stats_t;

/*
 * The loop an engine runs on, as it needs it: timers from timerfd (attempt
 * deadlines want better than epoll's millisecond rounding), armed from the
 * clock, not from the turn's cached time. NULL when out of memory.
 */
struct event_base *tp_engine_base_new(void);

tp_engine_t *tp_engine_new(const tp_engine_opts_t *opts);
/* At most 4 fronts. 0, or -1 when full. */
int tp_engine_add_front(tp_engine_t *e, const tp_front_t *front);
/* Starts the workers. 0, or -1 with the reason logged (the caller exits 2). */
int tp_engine_start(tp_engine_t *e);
void tp_engine_free(tp_engine_t *e);

/*
 * Hands the engine one call; answer(ctx, ...) follows exactly once, on a
 * later loop turn, never from inside this function. A call whose id the
 * store has recorded for the same tool and args is answered from the store
 * and not run; one recorded for other input is answered InvalidRequest. An
 * unknown tool is answered UnknownTool, args that fail the tool's schema
 * InvalidArguments (both class malformed, nothing run). A refusal is
 * recorded like any result (unless the id holds a record of another kind),
 * and a recorded refusal is checked again, never served: nothing ran, so
 * a fixed registry takes effect on the next run. A recorded failure that
 * opts.rerun matches runs again.
 * Returns the call's handle while it is held (so the front may cancel it),
 * NULL when it was answered at once (from the store, or rejected) or the
 * engine is draining (then it answers not_started). After the engine has
 * failed (tp_engine_failed) nothing is answered any more.
 */
tp_call_t *tp_engine_submit(tp_engine_t *e, const tp_request_t *req, tp_answer_fn answer, void *ctx);

/*
 * Answers a request the front could not make a call of (a line that is not
 * JSON, a missing field) with an InvalidRequest result, in order with the
 * engine's other answers. Any of id, job, tool may be NULL.
 */
void tp_engine_reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool, const char *msg,
                      tp_answer_fn answer, void *ctx);

/*
 * Ends a call the front no longer wants: one waiting (for its turn in its
 * job, a slot, a backoff) ends at once; a running attempt's worker group is
 * killed. Its answer is Cancelled (class guard), recorded like any result
 * (its in-flight marker goes in the same commit), so the same id submitted
 * again is answered from the store; one whose answer came first ends with
 * it. why goes into the message.
 */
void tp_engine_cancel(tp_engine_t *e, tp_call_t *c, const char *why);

/*
 * What a front may read of a call it holds a handle to, between submit and
 * answer: the attempts made so far (an MCP host that asked for progress
 * hears of each retry as it happens).
 */
typedef struct {
    uint32_t entries;    /* trace entries so far: attempts ended, and hops skipped (circuit open) */
    uint32_t number;     /* the last entry's attempt number in its hop (0: a hop not run) */
    const char *tool;    /* its tool (the registry's string); NULL with no entry */
    const char *outcome; /* its outcome: "ok" or the kind */
    uint64_t backoff_us; /* the wait after it, before the next (0: none, or not yet known) */
    bool ended;          /* the call has ended: its answer is on its way, and says it all */
} tp_call_info_t;

/* c: a handle tp_engine_submit gave, before its answer has been delivered. */
void tp_call_info(const tp_call_t *c, tp_call_info_t *out);

/* Calls held now (submitted, not yet ended; their answers may still wait for a commit). */
size_t tp_engine_live(const tp_engine_t *e);
/*
 * The args of calls held, in bytes, past which fronts hand over no more
 * (one call is always taken): with large payloads the memory held follows
 * this, not the count of calls in a front's window.
 */
#define TP_ENGINE_LIVE_BYTES ((size_t)8 << 20)
/* Whether a front may hand over another call: fewer than window are held, and their args under TP_ENGINE_LIVE_BYTES. */
bool tp_engine_takes(tp_engine_t *e, size_t window);
/* Asks for a turn soon (a front with more to feed). */
void tp_engine_kick(tp_engine_t *e);

/*
 * A front's own read or write of the store (a recorded result looked up,
 * an agent's checkpoint saved, a breaker reset), done by the store
 * module's functions in the engine's turn: op runs now, in the engine's
 * open write transaction (begun if there is none), which the engine
 * commits with its group commit; a front that wrote answers once
 * tp_engine_when_durable says so. room: the bytes op may write (0 for a
 * read): the transaction makes room first, committing what it holds and
 * growing the map when the write might not fit. op gets no transaction to
 * keep: it is the engine's. Returns what op returns, or TP_EAGAIN without
 * calling it when there is no store or the engine has failed.
 */
typedef int (*tp_store_op_fn)(void *ctx, tp_store_t *s, MDB_txn *txn);
int tp_engine_store_op(tp_engine_t *e, size_t room, tp_store_op_fn op, void *ctx);
/*
 * cb(ctx, ok) once everything written so far is committed (ok), or could
 * not be (the engine failed), in order with the answers.
 */
void tp_engine_when_durable(tp_engine_t *e, void (*cb)(void *ctx, bool ok), void *ctx);
/* A store operation of a front's failed: the engine cannot go on (as for its own). */
void tp_engine_store_failed(tp_engine_t *e, int rc, const char *what);

/*
 * No more calls will come (the input ended): once the held ones are
 * answered, the workers stop, and the loop exits.
 */
void tp_engine_close(tp_engine_t *e);
/*
 * Stops taking calls: calls not started are answered not_started, calls
 * between attempts end Cancelled, running attempts may finish for drain_us,
 * then are killed; then the engine closes. A second drain kills them now.
 */
void tp_engine_drain(tp_engine_t *e);
bool tp_engine_draining(const tp_engine_t *e);
/*
 * After the loop has exited: the last turn, so attempts the pool ended on
 * its way out still get their records and answers. 0, or the code of the
 * failure the engine stopped at (tp_engine_failed): exit 2.
 */
int tp_engine_finish(tp_engine_t *e);
/*
 * 0, or the code of the first failure the engine stopped at, which it
 * logged: a store error (an LMDB code, TP_EPROTO, -errno) or the pool's
 * (TP_EWORKER, -errno). Nothing is answered after it.
 */
int tp_engine_failed(const tp_engine_t *e);

const tp_engine_stats_t *tp_engine_stats(const tp_engine_t *e);
/*
 * The engine's scoreboard (scoreboard.h): its live state, published in
 * shared memory when it has a store (else private, counted the same).
 * Its header's counters are brought up to date first (they are
 * written at each turn's end too, for the readers in other processes).
 */
const tp_scoreboard_t *tp_engine_board(tp_engine_t *e);
const tp_pool_stats_t *tp_engine_pool_stats(const tp_engine_t *e);
/* Attempts running, and slots ready for one. */
int tp_engine_busy(const tp_engine_t *e);
int tp_engine_idle(const tp_engine_t *e);
/* Calls waiting for a slot (ready, parked at a concurrency cap, or in a backoff). */
size_t tp_engine_waiting(const tp_engine_t *e);
const tp_registry_t *tp_engine_registry(const tp_engine_t *e);
/* Whether calls' ends are traced (opts.on_end): a front reads trace context only then. */
bool tp_engine_traced(const tp_engine_t *e);
tp_store_t *tp_engine_store(const tp_engine_t *e);
/*
 * What `toolpool stats` shows of this supervisor while it runs (the
 * store's record of its owners, rewritten at most once a second, at the
 * start of a write transaction): command ("run", "serve", "mcp": a literal),
 * and the calls a run expects in all (0: not known). The engine counts the
 * calls answered and the attempts running itself.
 */
void tp_engine_status(tp_engine_t *e, const char *command, uint64_t total);
/* The loop the engine runs on (its options' base). */
struct event_base *tp_engine_loop(const tp_engine_t *e);

#endif
