/*
 * The plugin adapter: a shared object loaded once per path and called in
 * the worker's own process, the fast path for evaluation harnesses.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <toolpool/plugin.h>

#include "adapter.h"

#define MAX_PLUGINS 16

static struct {
    char *path;
    tp_plugin_call_v1_fn call;
} loaded[MAX_PLUGINS];
static int n_loaded;

/* The entry point of the plugin at path, loading it the first time. */
static tp_plugin_call_v1_fn plugin_entry(const char *path, tp_outcome_t *o)
{
    for (int i = 0; i < n_loaded; i++)
        if (strcmp(loaded[i].path, path) == 0)
            return loaded[i].call;
    if (n_loaded == MAX_PLUGINS) {
        tp_outcome_fail(o, "ToolError", "more than %d plugins in one worker", MAX_PLUGINS);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        tp_outcome_fail(o, "ToolError", "cannot load plugin: %s", dlerror());
        return NULL;
    }
    tp_plugin_call_v1_fn fn = (tp_plugin_call_v1_fn)(uintptr_t)dlsym(h, TP_PLUGIN_ENTRY_V1);
    if (fn == NULL) {
        tp_outcome_fail(o, "ToolError", "plugin %s has no %s entry point (ABI %d)", path,
                        TP_PLUGIN_ENTRY_V1, TP_PLUGIN_ABI);
        dlclose(h);
        return NULL;
    }
    loaded[n_loaded].path = strdup(path);
    loaded[n_loaded].call = fn;
    n_loaded++;
    return fn;
}

void tp_plugin_run(const Toolpool__Call *call, tp_outcome_t *o)
{
    tp_plugin_call_v1_fn fn = plugin_entry(call->plugin_path, o);
    if (fn == NULL)
        return;
    /* The args must be NUL-terminated for the plugin; a frame's bytes are not. */
    char *args = malloc(call->args.len + 1);
    if (args == NULL) {
        tp_outcome_fail(o, "ServerError", "out of memory");
        return;
    }
    memcpy(args, call->args.data, call->args.len);
    args[call->args.len] = 0;
    tp_plugin_call_t pc = {
        .tool = call->tool,
        .args = args,
        .args_len = call->args.len,
        .call_id = call->call_id,
        .job = call->job,
        .step = call->step,
        .attempt = call->attempt,
    };
    tp_plugin_reply_t rep = {.retry_after_ms = -1};
    int rc = fn(&pc, &rep);
    free(args);
    if (rc != 0) {
        tp_outcome_fail(o, "ToolError", "plugin %s failed (returned %d)%s%s", call->tool, rc,
                        rep.message ? ": " : "", rep.message ? rep.message : "");
    } else if (rep.error != NULL) {
        tp_outcome_fail(o, rep.error, "%s", rep.message ? rep.message : "");
        o->retry_after_ms = rep.retry_after_ms;
    } else if (rep.result == NULL) {
        tp_outcome_from_text(o, "null", 4, false);
    } else if (strlen(rep.result) > call->max_output) {
        tp_outcome_fail(o, "OutputTooLarge", "%s returned more than max_output (%llu bytes)", call->tool,
                        (unsigned long long)call->max_output);
    } else {
        tp_outcome_from_text(o, rep.result, strlen(rep.result), false);
    }
    o->cost = isfinite(rep.cost) && rep.cost > 0 ? rep.cost : 0;
    free(rep.result);
    free(rep.message);
}
