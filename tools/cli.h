/* The toolpool subcommands, one file each, dispatched from toolpool.c. */
#ifndef TP_CLI_H
#define TP_CLI_H

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
int tp_cmd_tools(int argc, char **argv);

typedef struct tp_store tp_store_t;
typedef struct MDB_txn MDB_txn;
/* The store at dir, opened read-only, and a read transaction on it; NULL (logged) when it cannot be. */
tp_store_t *tp_cli_store_read(const char *dir, MDB_txn **txn);

/* The long option --policy FILE of every command that loads a registry (no short form). */
#define TP_OPT_POLICY 0x100

/*
 * run --ordered: reads the calls file fd once for each call's job and
 * step, and gives a copy (*out_fd, an unlinked temporary file) with each
 * job's calls together in step order, and the user's line number of each
 * of its lines (*line_map, n_map of them; free it). 0, or -1 logged.
 */
int tp_order_input(int fd, const char *name, int *out_fd, long **line_map, size_t *n_map);

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
