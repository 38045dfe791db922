/*
 * Running calls through tp_batch_run for the tests: registry and calls
 * written to a fresh directory (@P@ becomes the test plugin's path, @T@ the
 * test tools' folder), results read back as JSON, and a check that the run
 * left no child process and no descriptor behind.
 */
#ifndef TP_RUNUTIL_H
#define TP_RUNUTIL_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "front_jsonl.h"

typedef struct {
    json_t *rows; /* array of result objects */
    int status;
    tp_batch_report_t rep;
    double secs;
} run_t;

/* store_dir NULL: no store (no breakers, no escalations). */
run_t run_calls(const char *store_dir, const char *registry, const char *calls, int workers, uint64_t recycle);
/*
 * The engine's queue budget for the next run_calls (0: the default): a
 * test that needs calls pipelined behind a busy worker, whatever the
 * machine's load, sets it to a second.
 */
extern uint64_t run_queue_budget_us;
json_t *row(const run_t *r, const char *id);
const char *str(json_t *v, const char *key);
long num(json_t *v, const char *key);
double trace_ms(json_t *v, size_t i, const char *key);
char *expand(const char *tmpl);
/* Waits for a child: its exit status, or 128 + the signal that killed it. */
int wait_exit(pid_t pid);
int count_fds(void);
/*
 * Starts the toolpool binary with args (NULL-terminated, without argv[0]),
 * stderr to err_path (truncated), extra_env added to the environment.
 */
pid_t spawn_toolpool(char *const args[], const char *err_path, char *const extra_env[]);
/* The result lines of a file, by id ("" for none); *lines counts them (may be NULL). */
json_t *load_results(const char *path, int *lines);

#define PLUGIN_TOOL(name) "{\"name\": \"" name "\", \"plugin\": {\"path\": \"@P@\"}}"

#endif
