/*
 * The JSONL front: the batch runner behind `toolpool run`. Calls in as
 * JSON lines, results out as JSON lines, one per call; the engine
 * (engine.h) runs them.
 *
 * Input is streamed: at most a window of calls is held at once, so a file
 * of any size runs in flat memory. Calls of one job run one at a time in
 * step order; jobs run in parallel across the pool.
 */
#ifndef TP_FRONT_JSONL_H
#define TP_FRONT_JSONL_H

#include <stdbool.h>
#include <stdint.h>

#include "agent.h"
#include "commit.h"
#include "engine.h"
#include "pool.h"
#include "registry.h"
#include "shard.h"
#include "store.h"
#include "summary.h"

/* How a run shows its progress on stderr. */
enum {
    TP_PROGRESS_NONE,
    TP_PROGRESS_BAR,   /* one line redrawn five times a second: for a terminal */
    TP_PROGRESS_LINES, /* a line every TP_PROGRESS_EVERY_S: for a log file, cron's mail, a CI log */
};
#define TP_PROGRESS_EVERY_S 10

typedef struct {
    tp_engine_opts_t engine; /* its max_frame is also the longest input line; base: not read (the batch's own) */
    int input_fd;
    const char *input_name; /* for messages */
    int output_fd;
    tp_format_t format; /* how each answer is written (--output-format): toolpool's result line, or a model's message */
    int progress;       /* on stderr: TP_PROGRESS_* */
    size_t window;      /* calls held at once; 0 = automatic */
    const long *line_map; /* --ordered: the input's line i+1 is line line_map[i] of the user's file */
    size_t n_line_map;
    const tp_shard_t *shard; /* --shard: only this shard's lines are taken (shard.h); NULL: all */
} tp_batch_opts_t;

typedef struct {
    tp_summary_t summary;
    tp_pool_stats_t pool;
    uint64_t not_started;   /* calls read but never started (interrupted run) */
    uint64_t resumed;       /* recorded results served from the store */
    uint64_t rerun;         /* recorded failures (and refusals) done again */
    uint64_t version_rerun; /* recorded results of another version of their tool run again */
    uint64_t late;          /* steps that came after a later step of their job had started */
    uint64_t other_shard;   /* lines left to the other shards (--shard), before anything was written */
    bool interrupted;
    double elapsed_s;
} tp_batch_report_t;

/*
 * Runs the whole input. Returns the exit status the contract gives: 0 when
 * every call ended ok, 1 when some call did not (or the run was interrupted),
 * 2 when the run could not go on (a worker that cannot start, an output
 * that cannot be written).
 */
int tp_batch_run(const tp_batch_opts_t *opts, tp_batch_report_t *report);

#endif
