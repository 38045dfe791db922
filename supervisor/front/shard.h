/*
 * One shard of a batch: `toolpool run --shard K/N` runs only the calls of
 * the jobs that fall in shard K of N, so that N machines (a Slurm job
 * array, a Kubernetes Indexed Job) each run one share of one calls file,
 * each on a store of its own, and `toolpool merge` joins their stores.
 *
 * A line's shard is XXH3-64 of its job's name (the call's "job", else its
 * id: a job of one call) modulo N. So the steps of a job stay on one
 * machine, in order, with their checkpoint and their same-call breakers,
 * and where a job lands depends neither on the file's order nor on its
 * size. A line that names no job at all (a refusal with no usable id) is
 * shard 0's. The hash is part of the contract: a store's shard must not
 * move from one version to the next, or a rerun would run another share.
 */
#ifndef TP_SHARD_H
#define TP_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

/* The most shards a batch is split into. */
#define TP_SHARD_MAX 1000000u

typedef struct tp_shard {
    uint32_t index; /* K, from 0 (as Slurm's array index and JOB_COMPLETION_INDEX count) */
    uint32_t count; /* N; 0: not sharded, every line is taken */
} tp_shard_t;

/*
 * Reads --shard's value: "K/N"; "slurm" (SLURM_ARRAY_TASK_ID, less
 * SLURM_ARRAY_TASK_MIN, over SLURM_ARRAY_TASK_STEP, of
 * SLURM_ARRAY_TASK_COUNT, else of the MIN-to-MAX range); "k8s/N"
 * (JOB_COMPLETION_INDEX of N). 0, or -1 with err saying what is missing
 * or wrong (K not below N, a variable not set).
 */
int tp_shard_parse(const char *spec, tp_shard_t *out, char *err, size_t errlen);

/* The shard of the job named by the len bytes at job, of count. */
uint32_t tp_shard_of(const char *job, size_t len, uint32_t count);

/*
 * Whether the line just parsed (kind, with rq or bad filled as
 * tp_request_parse_line filled them) is sh's. A blank line is no one's.
 */
bool tp_shard_takes(const tp_shard_t *sh, tp_request_kind_t kind, const tp_request_t *rq, const tp_request_bad_t *bad);

/* What a calls file holds for a shard, read as `run` will read it. */
typedef struct {
    uint8_t digest[16]; /* XXH128 of its bytes */
    uint64_t lines;     /* lines that are not blank: calls and refusals of every shard */
    uint64_t own;       /* those of the shard that get a record: the ones with an id */
} tp_shard_input_t;

/*
 * Reads the calls file at fd (a regular file; read with pread, so its
 * offset does not move) through: its digest and how many of its lines are
 * sh's. max_line: the longest line `run` takes (a longer one is refused
 * with no id: shard 0's). 0, or -1 logged with name.
 */
int tp_shard_scan(int fd, const char *name, const tp_shard_t *sh, size_t max_line, tp_shard_input_t *out);

#endif
