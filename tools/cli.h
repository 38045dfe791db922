/* The toolpool subcommands, one file each, dispatched from main.c, and what they share (cli.c). */
#ifndef TP_CLI_H
#define TP_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int tp_cmd_run(int argc, char **argv);
int tp_cmd_trace(int argc, char **argv);
int tp_cmd_demo(int argc, char **argv);
int tp_cmd_breakers(int argc, char **argv);
int tp_cmd_escalations(int argc, char **argv);
int tp_cmd_checkpoints(int argc, char **argv);
int tp_cmd_serve(int argc, char **argv);
int tp_cmd_store(int argc, char **argv);
int tp_cmd_mcp(int argc, char **argv);
int tp_cmd_forget(int argc, char **argv);
int tp_cmd_stats(int argc, char **argv);
int tp_cmd_failures(int argc, char **argv);
int tp_cmd_top(int argc, char **argv);
int tp_cmd_metrics(int argc, char **argv);
int tp_cmd_tools(int argc, char **argv);
int tp_cmd_merge(int argc, char **argv);
int tp_cmd_shard_status(int argc, char **argv);

typedef struct tp_store tp_store_t;
typedef struct MDB_txn MDB_txn;
/* The store at dir, opened read-only, and a read transaction on it; NULL (logged) when it cannot be. */
tp_store_t *tp_cli_store_read(const char *dir, MDB_txn **txn);

/*
 * Gives fn each result recorded in the store at dir (its StoredResult), in
 * one read transaction; a record that does not unpack is named on stderr
 * and skipped. fn returns 0, or -1 to stop (out of memory: said here). 0,
 * or 2 when a record was bad, the store unreadable or fn stopped.
 */
typedef struct Toolpool__StoredResult Toolpool__StoredResult;
int tp_cli_each_result(const char *dir, int (*fn)(void *ctx, const Toolpool__StoredResult *sr), void *ctx);

/*
 * Writes v and a newline to out as toolpool writes JSON everywhere (json.h's
 * one writer, which run's lines and serve's answers come from): compact,
 * each number in its shortest form that reads back the same, so 64.22 a
 * tool answered shows as 64.22. 0, or TP_ENOMEM, or TP_EIO when out fails.
 */
int tp_cli_put_json(FILE *out, const json_t *v);

/* The long option --policy FILE of every command that loads a registry (no short form). */
#define TP_OPT_POLICY 0x100

/*
 * What a command does with getopt_long's answer opt that none of its
 * options took: 'h' (-h, --help) prints usage on stdout and answers 0, the
 * exit status; anything else (getopt has said what was wrong) prints it on
 * stderr and answers 2.
 */
int tp_cli_usage(const char *usage, int opt);
/* Operands the command does not take: usage on stderr, and 2. */
int tp_cli_misuse(const char *usage);

/*
 * One option of a command's table, for tp_cli_options: --name, and -letter
 * when letter is not 0. One with a value (has_arg) stores it, a const
 * char *, in *to; one without sets the bool *to. take, when there is one,
 * does instead: it gets the option and its value (NULL without) and
 * answers 0, or the exit status once it has logged why.
 */
typedef struct tp_cli_opt tp_cli_opt_t;
struct tp_cli_opt {
    const char *name;
    char letter;
    bool has_arg;
    void *to;
    int (*take)(const tp_cli_opt_t *o, const char *arg);
};

/* The most options a table holds, and the codes getopt_long gives those without a short form. */
#define TP_CLI_OPTS_MAX 16
#define TP_CLI_OPT_BASE 0x200
/* tp_cli_options took every option: optind is the first operand. */
#define TP_CLI_GO_ON (-1)

/*
 * Takes argv's options by opts (ended by one with a NULL name) and
 * -h/--help, in the order they come. TP_CLI_GO_ON, or the status the
 * command exits with: 0 when --help has printed usage on stdout, 2 when an
 * option was bad (usage on stderr after getopt's word), or what a take
 * answered.
 */
int tp_cli_options(int argc, char **argv, const char *usage, const tp_cli_opt_t *opts);
/* A record time (us since the epoch) as the local "YYYY-MM-DD HH:MM:SS"; "-" for none. Returns buf. */
const char *tp_cli_when(uint64_t us, char *buf, size_t cap);

/* Bytes for a person: "812 B", "16.7 MB" (decimal units, as ls --si and df -H give them). Returns buf. */
const char *tp_cli_size(uint64_t n, char *buf, size_t cap);

/*
 * `store check` of the store at dir (cmd_store.c): every record read and
 * checked, each bad one named on stdout, then a summary line. records, when
 * not NULL, gets each database's count of records (TP_DB__COUNT of them).
 * 0 every record sound, 1 some bad, 2 the store cannot be opened.
 */
int tp_cli_store_check(const char *dir, unsigned long long *records);
/* `store prune` and `store compact` (cmd_store_prune.c, cmd_store_compact.c), argv[0] the verb. */
int tp_cmd_store_prune(int argc, char **argv);
int tp_cmd_store_compact(int argc, char **argv);
/* `store info`'s text of the store at dir, as `stats` shows it too (cmd_store.c). 0, or 2 logged. */
int tp_cli_store_summary(const char *dir, FILE *out);

/*
 * A take for --since DURATION (and prune's --older-than): a duration above
 * 0, in us, into the uint64_t at o->to; 0, or 2 (said, naming the option).
 */
int tp_cli_take_since(const tp_cli_opt_t *o, const char *arg);

/*
 * run --ordered: reads the calls file fd once for each call's job and
 * step, and gives a copy (*out_fd, an unlinked temporary file) with each
 * job's calls together in step order, and the user's line number of each
 * of its lines (*line_map, n_map of them; free it). 0, or -1 logged.
 */
int tp_order_input(int fd, const char *name, int *out_fd, long **line_map, size_t *n_map);

/*
 * run --shard: reads the calls file at input_fd (a regular file; its
 * offset does not move) through and records in store s what the shard is
 * made from (inputrec.h): the file's and the registry's (and policy's)
 * digests, the shard, and its totals. Refuses a store that holds another
 * shard. 0, or -1 logged.
 */
typedef struct tp_shard tp_shard_t;
int tp_run_shard_prepare(tp_store_t *s, const char *registry, const char *policy, int input_fd, const char *input_name,
                         const tp_shard_t *sh, size_t max_line);

/*
 * One trace line: "  attempt 2 → Timeout after 0.8s   (backoff 1.0s)", and
 * "   [at +1.3s]" when start_ms (after the call's turn came) is known (>= 0).
 */
void tp_trace_attempt(FILE *out, const char *called, uint32_t number, const char *tool, const char *outcome,
                      double duration_ms, double backoff_ms, double start_ms);

/*
 * Prints every result line of in as the seed's trace (json: each record as
 * one compact JSON line). 0, or 2 on input that is not results: the first
 * line that is not a result record stops it, with what was found.
 */
int tp_trace_print(FILE *in, const char *name, FILE *out);
int tp_trace_print_as(FILE *in, const char *name, FILE *out, bool json);

#endif
