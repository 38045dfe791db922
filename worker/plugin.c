/*
 * The plugin adapter: a shared object loaded once per path and called in
 * the worker's own process, the fast path for evaluation harnesses.
 *
 * A tool's limits bind the worker itself around the call (rlimit.h): its
 * soft limits are lowered before and put back after. An allocation past
 * the memory limit fails in the plugin (malloc returns NULL, errno ENOMEM);
 * past the cpu limit the worker gets SIGXCPU and dies of it, which the
 * supervisor reports as ResourceLimit.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <toolpool/plugin.h>

#include "adapter.h"
#include "rlimit.h"

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
        tp_outcome_fail(o, "ToolError", "plugin %s has no %s entry point (ABI %d)", path, TP_PLUGIN_ENTRY_V1,
                        TP_PLUGIN_ABI);
        dlclose(h);
        return NULL;
    }
    char *copy = strdup(path);
    if (copy != NULL) { /* out of memory: not kept, and loaded again (the same handle) next time */
        loaded[n_loaded].path = copy;
        loaded[n_loaded].call = fn;
        n_loaded++;
    }
    return fn;
}

/*
 * Whether a failed call failed for one of the tool's limits: the plugin
 * returned non-zero or reported ToolError (not a kind of its own), and
 * errno, as it returned, is ENOMEM under a memory limit (OutOfMemory) or
 * EMFILE under a files limit (ResourceLimit). errno is what its last
 * failing call left, so a plugin that gives up as soon as malloc returns
 * NULL is recognized; one that crashes on the NULL is WorkerCrashed.
 */
static bool limit_hit(const Toolpool__Call *call, const tp_rlimit_t *lim, int rc, const tp_plugin_reply_t *rep, int err,
                      tp_outcome_t *o)
{
    char size[32];
    const char *msg = rep->message ? rep->message : "";
    if (rc == 0 && (rep->error == NULL || strcmp(rep->error, "ToolError") != 0))
        return false;
    if (lim->memory && err == ENOMEM) {
        tp_outcome_fail(o, "OutOfMemory",
                        "%s ran out of memory under its memory limit (%s, the worker's own "
                        "included)%s%s",
                        call->tool, tp_rlimit_size(size, sizeof size, lim->memory), *msg ? ": " : "", msg);
        return true;
    }
    if (lim->files && err == EMFILE) {
        tp_outcome_fail(o, "ResourceLimit", "%s ran out of descriptors under its files limit (%u)%s%s", call->tool,
                        lim->files, *msg ? ": " : "", msg);
        return true;
    }
    return false;
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
    tp_rlimit_t lim = tp_rlimit_of(call);
    tp_rlimit_saved_t saved;
    bool limited = tp_rlimit_any(&lim);
    if (limited)
        tp_rlimit_enter(&lim, &saved);
    errno = 0;
    int rc = fn(&pc, &rep);
    int err = errno;
    if (limited)
        tp_rlimit_leave(&lim, &saved);
    free(args);
    if (limit_hit(call, &lim, rc, &rep, err, o)) {
        /* o names the limit */
    } else if (rc != 0) {
        tp_outcome_fail(o, "ToolError", "plugin %s failed (returned %d)%s%s", call->tool, rc, rep.message ? ": " : "",
                        rep.message ? rep.message : "");
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
