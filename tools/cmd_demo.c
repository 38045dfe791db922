/*
 * toolpool demo: the seed's scenario, bundled in examples/demo.
 *
 * search_kb hangs and is killed at its 0.8s timeout three times (backoff
 * 0.5s, then 1s: jitter "none" reproduces the seed's exact waits), then its
 * declared fallback kb_cache answers, disclosed as stale. delete_record is
 * refused after one attempt; the agent repeats the identical call, the
 * third failure opens that call's circuit and escalates it to a person, and
 * the fourth is answered CircuitOpen without running. get_rates is
 * rate-limited once and the retry waits the 1.2s the tool asked for.
 * The run uses a fresh store in a temporary directory; the results print as
 * JSON lines and as the seed's trace, then the escalation queue.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front_jsonl.h"
#include "cli.h"
#include "log.h"

/* examples/demo: $TOOLPOOL_EXAMPLES, the source tree, or beside the program. */
static const char *demo_dir(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("TOOLPOOL_EXAMPLES");
    snprintf(path, sizeof path, "%s/demo", env && *env ? env : TP_EXAMPLES_DIR);
    if (access(path, R_OK) == 0)
        return path;
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        *slash = 0;
        snprintf(path, sizeof path, "%s/../share/toolpool/examples/demo", exe);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

/* The demo's store is its own: data.mdb, lock.mdb and the directory. */
static void remove_store(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

int tp_cmd_demo(int argc, char **argv)
{
    if (argc > 1) {
        fputs("usage: toolpool demo\n"
              "Runs examples/demo/calls.jsonl against examples/demo/tools.json and prints\n"
              "the results and each call's trace. It takes about four seconds.\n",
              strcmp(argv[1], "--help") == 0 ? stdout : stderr);
        return strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    const char *dir = demo_dir();
    if (dir == NULL) {
        tp_log_error("demo.no_examples", "cannot find the examples (set TOOLPOOL_EXAMPLES to the examples folder)");
        return 2;
    }
    char reg_path[PATH_MAX + 32], calls_path[PATH_MAX + 32], out_path[] = "/tmp/toolpool-demo-XXXXXX";
    char store_dir[] = "/tmp/toolpool-demo-store-XXXXXX";
    snprintf(reg_path, sizeof reg_path, "%s/tools.json", dir);
    snprintf(calls_path, sizeof calls_path, "%s/calls.jsonl", dir);
    char err[1024];
    tp_registry_t *reg = tp_registry_load(reg_path, err, sizeof err);
    if (reg == NULL) {
        tp_log_error("registry.invalid", "%s", err);
        return 2;
    }
    FILE *calls = fopen(calls_path, "r");
    int out_fd = mkstemp(out_path);
    if (calls == NULL || out_fd < 0) {
        tp_log_error("cli.open_failed", "%s: %s", calls == NULL ? calls_path : out_path, strerror(errno));
        if (calls)
            fclose(calls);
        tp_registry_free(reg);
        return 2;
    }
    unlink(out_path);
    tp_store_t *store = mkdtemp(store_dir) ? tp_store_open(store_dir, 0, err, sizeof err) : NULL;
    if (store == NULL) {
        tp_log_error("store.open_failed", "demo store: %s", store_dir[0] ? err : strerror(errno));
        fclose(calls);
        close(out_fd);
        tp_registry_free(reg);
        return 2;
    }
    printf("toolpool demo: %s\n", calls_path);
    printf("  search_kb hangs (timeout 0.8s, 3 attempts, backoff 0.5s then 1s), then its\n"
           "  fallback kb_cache answers (stale); delete_record is forbidden, and the agent\n"
           "  repeats it until its circuit opens and a person is paged; get_rates is\n"
           "  rate-limited once; lookup_order just works.\n\n");
    fflush(stdout);
    tp_batch_opts_t o = {
        .engine = {.reg = reg,
                   .store = store,
                   .workers = 4,
                   .worker_path = tp_pool_default_worker(),
                   .max_frame = 1u << 20,
                   .drain_us = 2000000u},
        .input_fd = fileno(calls),
        .input_name = calls_path,
        .output_fd = out_fd,
    };
    tp_batch_report_t rep;
    tp_log_export_env(); /* the workers log as the supervisor does */
    int status = tp_batch_run(&o, &rep);
    fclose(calls);
    tp_registry_free(reg);
    tp_store_close(store);
    if (status == 2) {
        close(out_fd);
        remove_store(store_dir);
        return 2;
    }

    FILE *res = fdopen(out_fd, "r");
    rewind(res);
    char *line = NULL;
    size_t cap = 0;
    puts("results (one JSON line per call):");
    while (getline(&line, &cap, res) > 0)
        fputs(line, stdout);
    free(line);
    puts("\ntrace:\n");
    rewind(res);
    tp_trace_print(res, "demo results", stdout);
    fclose(res);
    tp_summary_print(stdout, &rep.summary, rep.elapsed_s);
    puts("\nescalations (toolpool escalations list):");
    fflush(stdout);
    char *esc_argv[] = {"escalations", "list", "--store", store_dir, NULL};
    tp_cmd_escalations(4, esc_argv);
    remove_store(store_dir);
    /* The demo shows failures on purpose: it succeeded when it could run. */
    return 0;
}
