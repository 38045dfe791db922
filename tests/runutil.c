#include "runutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "testutil.h"


int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the DIR's own fd */
}

/* Replaces @P@ with the test plugin's path and @T@ with the test tools' folder. */
char *expand(const char *tmpl)
{
    tp_buf_t b = {0};
    for (const char *p = tmpl; *p; p++) {
        if (strncmp(p, "@P@", 3) == 0) {
            tp_buf_puts(&b, TP_TEST_PLUGIN);
            p += 2;
        } else if (strncmp(p, "@T@", 3) == 0) {
            tp_buf_puts(&b, TP_TEST_TOOLS);
            p += 2;
        } else {
            tp_buf_append(&b, p, 1);
        }
    }
    tp_buf_append(&b, "", 1);
    return (char *)b.data;
}

/*
 * Runs calls against registry with `workers` slots; returns the parsed
 * results. Asserts that the run left no child process and no descriptor.
 */
uint64_t run_queue_budget_us;

run_t run_calls(const char *store_dir, const char *registry, const char *calls, int workers, uint64_t recycle)
{
    run_t r = {0};
    const char *dir = tp_test_tmpdir("pool");
    char *reg_text = expand(registry);
    char *calls_text = expand(calls);
    char *reg_path = tp_test_write(dir, "tools.json", reg_text);
    char *calls_path = tp_test_write(dir, "calls.jsonl", calls_text);
    char out_path[4200];
    snprintf(out_path, sizeof out_path, "%s/results.jsonl", dir);
    char err[1024];
    tp_registry_t *reg = tp_registry_load(reg_path, err, sizeof err);
    if (reg == NULL) {
        fprintf(stderr, "registry: %s\n", err);
        CU_FAIL_FATAL("registry did not load");
    }
    int fds_before = count_fds();
    int in = open(calls_path, O_RDONLY | O_CLOEXEC);
    int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    tp_store_t *store = NULL;
    if (store_dir) {
        store = tp_store_open(store_dir, 0, err, sizeof err);
        if (store == NULL) {
            fprintf(stderr, "store: %s\n", err);
            CU_FAIL_FATAL("store did not open");
        }
    }
    tp_batch_opts_t o = {
        .engine = {.reg = reg,
                   .store = store,
                   .workers = workers,
                   .worker_path = TP_TEST_BIN "/toolpool-worker",
                   .max_frame = 1u << 20,
                   .recycle_after = recycle,
                   .pipeline = 64,
                   .drain_us = 1000000,
                   .queue_budget_us = run_queue_budget_us},
        .input_fd = in,
        .input_name = calls_path,
        .output_fd = out,
    };
    uint64_t t0 = tp_now_us();
    r.status = tp_batch_run(&o, &r.rep);
    r.secs = (double)(tp_now_us() - t0) / 1e6;
    close(in);
    close(out);
    tp_store_close(store);
    /* Nothing left behind: no child of ours, alive or zombie, and no fd. */
    CU_ASSERT_EQUAL(waitpid(-1, NULL, WNOHANG), -1);
    CU_ASSERT_EQUAL(errno, ECHILD);
    CU_ASSERT_EQUAL(count_fds(), fds_before);

    r.rows = json_array();
    FILE *f = fopen(out_path, "r");
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *v = json_loads(line, 0, &jerr);
        CU_ASSERT_PTR_NOT_NULL(v);
        if (v)
            json_array_append_new(r.rows, v);
    }
    free(line);
    fclose(f);
    tp_registry_free(reg);
    free(reg_text);
    free(calls_text);
    free(reg_path);
    free(calls_path);
    return r;
}

json_t *row(const run_t *r, const char *id)
{
    size_t i;
    json_t *v;
    json_array_foreach(r->rows, i, v) {
        const char *vid = json_string_value(json_object_get(v, "id"));
        if (vid && strcmp(vid, id) == 0)
            return v;
    }
    return NULL;
}

const char *str(json_t *v, const char *key)
{
    const char *s = json_string_value(json_object_get(v, key));
    return s ? s : "";
}

long num(json_t *v, const char *key)
{
    return (long)json_integer_value(json_object_get(v, key));
}

double trace_ms(json_t *v, size_t i, const char *key)
{
    return json_number_value(json_object_get(json_array_get(json_object_get(v, "trace"), i), key));
}


int wait_exit(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

extern char **environ;

pid_t spawn_toolpool(char *const args[], const char *err_path, char *const extra_env[])
{
    char *argv[64], *envp[128];
    int n = 0, m = 0;
    argv[n++] = TP_TEST_BIN "/toolpool";
    for (int i = 0; args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    for (char **e = environ; *e && m < 100; e++)
        envp[m++] = *e;
    for (int i = 0; extra_env && extra_env[i] && m < 127; i++)
        envp[m++] = extra_env[i];
    envp[m] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

json_t *load_results(const char *path, int *lines)
{
    json_t *by_id = json_object();
    char *text = tp_test_slurp(path, NULL);
    int n = 0;
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(v);
        if (v == NULL)
            continue;
        n++;
        const char *id = json_string_value(json_object_get(v, "id"));
        json_object_set_new(by_id, id ? id : "", v);
    }
    free(text);
    if (lines)
        *lines = n;
    return by_id;
}
