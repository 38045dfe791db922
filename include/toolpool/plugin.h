/*
 * toolpool plugin ABI, version 1.
 *
 * A plugin is a shared object with one entry point, tp_plugin_call_v1. A
 * worker dlopen()s it the first time one of its tools is called and calls
 * the entry point once per attempt, in the worker's own process: a crash or
 * a hang in a plugin costs the worker (the supervisor kills and replaces it,
 * and the attempt ends WorkerCrashed or Timeout), never the run.
 *
 * The worker is single-threaded: the entry point is never called twice at
 * once in one process. A future ABI gets a new entry point name
 * (tp_plugin_call_v2); a worker looks for the names it knows.
 *
 * Build: cc -shared -fPIC -o my.so my.c
 * Registry: {"name": "t", "plugin": {"path": "my.so"}}
 */
#ifndef TOOLPOOL_PLUGIN_H
#define TOOLPOOL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define TP_PLUGIN_ABI 1
#define TP_PLUGIN_ENTRY_V1 "tp_plugin_call_v1"

typedef struct {
    const char *tool; /* the registry name of the tool called */
    const char *args; /* the call's args, JSON text, NUL-terminated */
    size_t args_len;
    const char *call_id;
    const char *job;
    uint64_t step;
    uint32_t attempt; /* 1 for the first */
} tp_plugin_call_t;

typedef struct {
    /*
     * Success: set result to malloc()ed JSON text (the worker free()s it;
     * text that is not JSON is returned as a JSON string). NULL means null.
     */
    char *result;
    /*
     * Failure: set error to a kind name ("RateLimited", "NotFound", ...; a
     * string with static storage) and optionally message (malloc()ed; the
     * worker free()s it) and retry_after_ms (>= 0; -1, the initial value,
     * means none).
     */
    const char *error;
    char *message;
    int64_t retry_after_ms;
    double cost; /* what the call cost, if the tool knows */
} tp_plugin_reply_t;

/*
 * Returns 0 when it filled reply (success or a named failure); non-zero
 * means the plugin itself failed, reported as ToolError.
 */
typedef int (*tp_plugin_call_v1_fn)(const tp_plugin_call_t *call, tp_plugin_reply_t *reply);

int tp_plugin_call_v1(const tp_plugin_call_t *call, tp_plugin_reply_t *reply);

#endif
