/*
 * The scoreboard: a supervisor's live state in shared memory, in the
 * manner of Apache's and PHP-FPM's scoreboards, for `toolpool top`,
 * `toolpool metrics` and `/metrics`.
 *
 * Each supervisor makes one memfd segment and names it in its owner
 * entry of the store (owners.h: /proc/PID/fd/N), where any process of
 * the same user finds it, opens it read-only and maps it. The segment
 * holds a header (who, since when, the run's total and what is done, the
 * engine's counters and its commit latency), one record per running
 * attempt (its tool, call id, job, attempt number, start and timeout) and
 * one record per tool (calls by outcome, attempts, retries and latency:
 * the engine's own counters, which live here and nowhere else; attempts
 * in flight, calls held, timeouts).
 *
 * One writer (the engine's loop) and any number of readers that never
 * block it: each record is a seqlock. The writer makes its generation
 * odd, fences, writes, and publishes the next even generation with a
 * release store; a reader copies a record only between two equal even
 * generations, and tries again otherwise, so it never sees a torn one.
 * Lone counters (in flight, held) are single atomic words, stored with
 * relaxed order: one writer needs no read-modify-write.
 *
 * Without a memfd (or with TOOLPOOL_SCOREBOARD=0) the same layout lives
 * in the process's own memory, unpublished: the engine counts the same
 * way either way.
 */
#ifndef TP_SCOREBOARD_H
#define TP_SCOREBOARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "summary.h"

#define TP_SB_MAGIC 0x3162737074706f74ull /* "toptpsb1" in memory: a toolpool scoreboard */
#define TP_SB_VERSION 2u
#define TP_SB_NAME 64       /* a call id or job, cut to this (NUL included) */
#define TP_SB_TOOL_NAME 208 /* a tool's name, whole (TP_TOOL_NAME_MAX and its NUL, rounded up) */
#define TP_SB_COMMAND 16    /* run, serve, mcp */
#define TP_SB_PATH 48       /* /proc/PID/fd/N */

typedef enum {
    TP_SB_IDLE = 0,
    TP_SB_BUSY = 1,
} tp_sb_state_t;

/* The header's counters, written at each turn of the loop under the header's seqlock. */
typedef struct {
    uint64_t total; /* calls a run expects in all (0: not known) */
    uint64_t done;  /* calls answered since it began (served from the store and refused included) */
    uint64_t live;  /* calls held now */
    uint64_t waiting;
    int64_t busy; /* attempts running */
    int64_t idle; /* slots ready for one */
    uint64_t answered_recorded, rejected, rerun, version_rerun, late;
    uint64_t timeouts;
    uint64_t commits;
    uint64_t spawned, crashed, recycled;
    uint64_t unshown; /* attempts running that found no free record (more than the segment holds) */
    char command[TP_SB_COMMAND];
} tp_sb_counts_t;

typedef struct {
    uint64_t magic;
    uint32_t version;
    uint32_t n_slots;
    uint32_t n_tools;
    int32_t pid;
    uint64_t size; /* the segment's bytes */
    uint64_t slots_off, tools_off;
    uint64_t started_unix_us;
    uint64_t started_mono_us; /* tp_now_us(): CLOCK_MONOTONIC, the same in every process */
    _Atomic uint64_t gen;
    tp_sb_counts_t c;
    tp_summary_t commit_latency;
} tp_sb_header_t;

/* One running attempt. */
typedef struct {
    _Atomic uint64_t gen;
    uint32_t state; /* tp_sb_state_t */
    uint32_t tool;  /* index into the tools */
    uint32_t attempt;
    uint32_t slot_pad;
    uint64_t started_us; /* tp_now_us(); 0: queued on its worker behind another, not started */
    uint64_t timeout_us; /* the attempt's own; 0: none */
    char call_id[TP_SB_NAME];
    char job[TP_SB_NAME];
    char pad[24]; /* three cache lines each */
} tp_sb_slot_t;

/* One tool: its name (written once), its lone counters, and its summary under gen. */
typedef struct {
    char name[TP_SB_TOOL_NAME];
    _Atomic uint64_t in_flight; /* attempts of it running */
    _Atomic uint64_t held;      /* calls of it held (queued, in backoff or running) */
    _Atomic uint64_t timeouts;  /* attempts of it that ran into their timeout */
    _Atomic uint64_t gen;
    tp_summary_t sum;
} tp_sb_tool_t;

/* The writer's handle. */
typedef struct {
    void *base;
    size_t size;
    int fd;         /* the memfd; -1 when the board is private */
    uint32_t *free; /* free slot records, a stack */
    uint32_t n_free;
    char path[TP_SB_PATH]; /* "/proc/PID/fd/N", "" when private */
} tp_scoreboard_t;

/*
 * Makes a board for n_slots running attempts and the tools named (n of
 * them): in a memfd unless publish is false or TOOLPOOL_SCOREBOARD is
 * "0", else (or when the memfd cannot be made) in private memory.
 * 0, or TP_ENOMEM.
 */
int tp_sb_create(tp_scoreboard_t *sb, uint32_t n_slots, const char *const *names, uint32_t n, bool publish);
void tp_sb_destroy(tp_scoreboard_t *sb);

static inline tp_sb_header_t *tp_sb_header(const tp_scoreboard_t *sb)
{
    return (tp_sb_header_t *)sb->base;
}
static inline tp_sb_slot_t *tp_sb_slots(const tp_scoreboard_t *sb)
{
    return (tp_sb_slot_t *)((char *)sb->base + tp_sb_header(sb)->slots_off);
}
static inline tp_sb_tool_t *tp_sb_tools(const tp_scoreboard_t *sb)
{
    return (tp_sb_tool_t *)((char *)sb->base + tp_sb_header(sb)->tools_off);
}

/* The writer's side of a seqlock: begin makes gen odd, end publishes the next even one. */
static inline void tp_sb_write_begin(_Atomic uint64_t *gen)
{
    atomic_store_explicit(gen, atomic_load_explicit(gen, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}
static inline void tp_sb_write_end(_Atomic uint64_t *gen)
{
    atomic_store_explicit(gen, atomic_load_explicit(gen, memory_order_relaxed) + 1, memory_order_release);
}
/* A lone counter, by its one writer. */
static inline void tp_sb_add(_Atomic uint64_t *v, int64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + (uint64_t)d, memory_order_relaxed);
}

/*
 * Takes a record for an attempt and writes it busy: its index, or -1 when
 * every record is taken (counted in the header's unshown).
 */
int tp_sb_slot_take(tp_scoreboard_t *sb, uint32_t tool, uint32_t attempt, uint64_t started_us, uint64_t timeout_us,
                    const char *call_id, const char *job);
/* The attempt of record i ended. */
void tp_sb_slot_give(tp_scoreboard_t *sb, int i);
/* Record i's attempt (one that waited in its worker's queue) starts now, with this timeout. */
void tp_sb_slot_restart(tp_scoreboard_t *sb, int i, uint64_t started_us, uint64_t timeout_us);

/*
 * The reader's side: copies len bytes of the record at src, guarded by gen,
 * into dst, retrying while it is being written. false when the writer kept
 * it busy through every try (the copy is then not to be used).
 */
bool tp_sb_read(const _Atomic uint64_t *gen, void *dst, const void *src, size_t len);

/* A board mapped read-only from another process. */
typedef struct {
    const void *base;
    size_t size;
} tp_sb_view_t;

/*
 * Maps the board at path (an owner entry's), and checks it is one and is
 * pid's. 0, TP_ENOENT (gone), TP_EPROTO (not a board, or another's), or
 * -errno.
 */
int tp_sb_open(tp_sb_view_t *v, const char *path, int32_t pid);
void tp_sb_close(tp_sb_view_t *v);

/* A consistent copy of a board, for a reader to work on. */
typedef struct {
    int32_t pid;
    uint64_t started_unix_us;
    uint64_t started_mono_us;
    tp_sb_counts_t c;
    tp_summary_t commit_latency;
    uint32_t n_slots, n_tools;
    tp_sb_slot_t *slots; /* the busy ones only, n_busy of them (slot_pad: the record's index) */
    uint32_t n_busy;
    tp_sb_tool_t *tools;
} tp_sb_snap_t;

/*
 * Copies the board mapped at base (size bytes: a view's, or the writer's
 * own) into out: its header, its busy slot records (each one's index in
 * slot_pad) and its tools. 0; TP_EPROTO (not a board, or one that does
 * not fit its size); TP_EAGAIN (the header was being written through
 * every try: try again); TP_ENOMEM.
 */
int tp_sb_snapshot(const void *base, size_t size, tp_sb_snap_t *out);
void tp_sb_snap_free(tp_sb_snap_t *s);

#endif
