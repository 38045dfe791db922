/*
 * cli_test: the `toolpool` program from the outside, as a user runs it.
 *
 * Every test writes a registry and a calls file into a fresh temp dir, runs
 * the real binary as a child process (stdout and stderr to files), and
 * checks its result lines (parsed with jansson), its stderr and its exit
 * status. The signal tests also watch /proc while the run goes: the
 * supervisor's children are its workers, and every process in a worker's
 * process group is a tool it started; none may outlive the run.
 *
 * This process makes itself a child subreaper, so whatever the run leaves
 * behind is re-parented here rather than to init: it can be seen, reaped
 * and killed by the test that caused it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "testutil.h"

#define TOOLPOOL TP_TEST_BIN "/toolpool"
#define MAX_PIDS 256

extern char **environ;

/* ---- assertions that say what they found ---- */

#define EXPECT_INT(a, b)                                                                                               \
    do {                                                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                            \
        if (a_ != b_)                                                                                                  \
            fprintf(stderr, "\n  %s:%d: %s is %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_);                 \
        CU_assertImplementation(a_ == b_, __LINE__, #a " == " #b, __FILE__, "", CU_FALSE);                             \
    } while (0)

#define EXPECT_STR(a, b)                                                                                               \
    do {                                                                                                               \
        const char *a_ = (a), *b_ = (b);                                                                               \
        bool eq_ = a_ != NULL && strcmp(a_, b_) == 0;                                                                  \
        if (!eq_)                                                                                                      \
            fprintf(stderr, "\n  %s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a, a_ ? a_ : "(null)",  \
                    b_);                                                                                               \
        CU_assertImplementation(eq_, __LINE__, #a " == " #b, __FILE__, "", CU_FALSE);                                  \
    } while (0)

#define EXPECT_HAS(hay, needle)                                                                                        \
    do {                                                                                                               \
        const char *h_ = (hay), *n_ = (needle);                                                                        \
        bool in_ = h_ != NULL && strstr(h_, n_) != NULL;                                                               \
        if (!in_)                                                                                                      \
            fprintf(stderr, "\n  %s:%d: %s lacks \"%s\": \"%s\"\n", __FILE__, __LINE__, #hay, n_, h_ ? h_ : "(null)"); \
        CU_assertImplementation(in_, __LINE__, #hay " contains " #needle, __FILE__, "", CU_FALSE);                     \
    } while (0)

#define EXPECT_PREFIX(s, prefix)                                                                                       \
    do {                                                                                                               \
        const char *s_ = (s), *p_ = (prefix);                                                                          \
        bool ok_ = s_ != NULL && strncmp(s_, p_, strlen(p_)) == 0;                                                     \
        if (!ok_)                                                                                                      \
            fprintf(stderr, "\n  %s:%d: %s is \"%s\", expected it to start \"%s\"\n", __FILE__, __LINE__, #s,          \
                    s_ ? s_ : "(null)", p_);                                                                           \
        CU_assertImplementation(ok_, __LINE__, #s " starts with " #prefix, __FILE__, "", CU_FALSE);                    \
    } while (0)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- /proc ---- */

typedef struct {
    pid_t pid;
    pid_t ppid;
    pid_t pgrp;
    char state;
} proc_info_t;

/* Reads /proc/PID/stat; the command name may hold spaces and parens. */
static int proc_info(pid_t pid, proc_info_t *pi)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    int ppid, pgrp;
    if (rp == NULL || sscanf(rp + 1, " %c %d %d", &pi->state, &ppid, &pgrp) != 3)
        return -1;
    pi->pid = pid;
    pi->ppid = ppid;
    pi->pgrp = pgrp;
    return 0;
}

/*
 * Every process on the machine, into a malloc'd array (the caller frees).
 * Processes that vanish while it reads are skipped.
 */
static proc_info_t *proc_list(size_t *n)
{
    size_t cap = 256;
    proc_info_t *all = malloc(cap * sizeof *all);
    *n = 0;
    DIR *d = opendir("/proc");
    if (d == NULL || all == NULL) {
        if (d)
            closedir(d);
        return all;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (*n == cap) {
            proc_info_t *grown = realloc(all, (cap *= 2) * sizeof *all);
            if (grown == NULL)
                break;
            all = grown;
        }
        if (proc_info((pid_t)pid, &all[*n]) == 0)
            (*n)++;
    }
    closedir(d);
    return all;
}

static bool pid_in(const pid_t *set, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == pid)
            return true;
    return false;
}

static void pid_add(pid_t *set, size_t *n, pid_t pid)
{
    if (!pid_in(set, *n, pid) && *n < MAX_PIDS)
        set[(*n)++] = pid;
}

/* ---- running toolpool ---- */

typedef struct {
    pid_t pid;
    char out_path[4200];
    char err_path[4200];
    uint64_t t0;              /* when it was started, ms */
    uint64_t t_end;           /* when it was seen to exit, ms */
    pid_t children[MAX_PIDS]; /* its children, seen while it ran */
    size_t n_children;
    pid_t workers[MAX_PIDS]; /* those that lead their own process group */
    size_t n_workers;
    pid_t tools[MAX_PIDS]; /* other processes in the workers' groups */
    size_t n_tools;
    int status;     /* exit status; 128 + signal; -1: timed out */
    long maxrss_kb; /* its peak resident set */
    char *out;      /* what it wrote, after proc_wait */
    char *err;
} proc_t;

/*
 * Starts `toolpool ARGS...` with stdout and stderr going to TAG.out and
 * TAG.err in dir. Its store is dir/store (TOOLPOOL_STORE), so no run sees
 * another's results or breakers. env adds NAME=VALUE entries;
 * TOOLPOOL_WORKER and FAKEWORKER_* are only what env says, never inherited.
 */
static int proc_start(proc_t *p, const char *dir, const char *tag, const char *const *args, const char *const *env)
{
    memset(p, 0, sizeof *p);
    p->status = -1;
    snprintf(p->out_path, sizeof p->out_path, "%s/%s.out", dir, tag);
    snprintf(p->err_path, sizeof p->err_path, "%s/%s.err", dir, tag);

    const char *argv[32] = {TOOLPOOL};
    size_t na = 1;
    for (; args && args[na - 1] && na < 31; na++)
        argv[na] = args[na - 1];
    argv[na] = NULL;

    size_t ne = 0, nextra = 0;
    while (environ[ne])
        ne++;
    while (env && env[nextra])
        nextra++;
    const char **envp = calloc(ne + nextra + 2, sizeof *envp);
    char store[4200];
    snprintf(store, sizeof store, "TOOLPOOL_STORE=%s/store", dir);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "TOOLPOOL_", 9) != 0 && strncmp(environ[i], "FAKEWORKER_", 11) != 0)
            envp[k++] = environ[i];
    envp[k++] = store;
    for (size_t i = 0; i < nextra; i++)
        envp[k++] = env[i];
    envp[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, p->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, p->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    p->t0 = now_ms();
    int rc = posix_spawn(&p->pid, TOOLPOOL, &fa, NULL, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn %s: %s\n", TOOLPOOL, strerror(rc));
        p->pid = 0;
        return -1;
    }
    return 0;
}

/*
 * Records the run's children, its workers (the children that lead their own
 * process group: not, say, a sanitizer's helper) and the other members of
 * the workers' groups (the tools they started).
 */
static void proc_scan(proc_t *p)
{
    if (p->pid <= 0)
        return;
    size_t n;
    proc_info_t *all = proc_list(&n);
    for (size_t i = 0; i < n; i++) {
        if (all[i].ppid != p->pid || all[i].state == 'Z')
            continue;
        pid_add(p->children, &p->n_children, all[i].pid);
        if (all[i].pgrp == all[i].pid)
            pid_add(p->workers, &p->n_workers, all[i].pid);
    }
    for (size_t i = 0; i < n; i++)
        if (pid_in(p->workers, p->n_workers, all[i].pgrp) && !pid_in(p->workers, p->n_workers, all[i].pid))
            pid_add(p->tools, &p->n_tools, all[i].pid);
    free(all);
}

/* True once the run has exited; reaps it and notes when. */
static bool proc_done(proc_t *p)
{
    if (p->pid <= 0)
        return true;
    int st;
    struct rusage ru;
    pid_t r = wait4(p->pid, &st, WNOHANG, &ru);
    if (r != p->pid)
        return false;
    p->t_end = now_ms();
    p->maxrss_kb = ru.ru_maxrss;
    p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
}

/* Polls (scanning /proc as it goes) until that many workers and tools were seen. */
static bool proc_await(proc_t *p, size_t workers, size_t tools, unsigned timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        proc_scan(p);
        if (p->n_workers >= workers && p->n_tools >= tools)
            return true;
        sleep_ms(5);
    }
    return false;
}

/*
 * Waits for the run to exit, scanning /proc meanwhile. Past timeout_ms it
 * is killed (with every worker group seen), and status stays -1. Then its
 * output is read into p->out and p->err.
 */
static void proc_wait(proc_t *p, unsigned timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    bool done = false;
    while (!(done = proc_done(p)) && now_ms() < end) {
        proc_scan(p);
        sleep_ms(5);
    }
    if (!done) {
        fprintf(stderr, "\n  toolpool (pid %d) still running after %u ms: killed\n", (int)p->pid, timeout_ms);
        for (size_t i = 0; i < p->n_workers; i++)
            kill(-p->workers[i], SIGKILL);
        for (size_t i = 0; i < p->n_children; i++)
            kill(p->children[i], SIGKILL);
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        /* Its children are ours now; what we killed is no leftover of its own. */
        for (size_t i = 0; i < p->n_children; i++)
            waitpid(p->children[i], NULL, 0);
        p->t_end = now_ms();
        p->status = -1;
    }
    p->out = tp_test_slurp(p->out_path, NULL);
    p->err = tp_test_slurp(p->err_path, NULL);
}

static void proc_free(proc_t *p)
{
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
}

/* Runs toolpool ARGS to the end (or timeout_ms); returns its exit status. */
static int proc_run(proc_t *p, const char *dir, const char *tag, const char *const *args, const char *const *env,
                    unsigned timeout_ms)
{
    if (proc_start(p, dir, tag, args, env) < 0)
        return -1;
    proc_wait(p, timeout_ms);
    return p->status;
}

/* Shows what a run said, when the test that ran it has failed. */
static void proc_dump_if_failed(const proc_t *p, unsigned failures_before)
{
    if (CU_get_number_of_failures() == failures_before)
        return;
    fprintf(stderr, "\n  --- toolpool exit status %d; stdout:\n%s\n  --- stderr:\n%s\n  ---\n", p->status,
            p->out ? p->out : "(none)", p->err ? p->err : "(none)");
}

/*
 * After the run has exited: the processes it left behind. A worker must be
 * gone entirely (the supervisor reaps its own); a tool in a worker's group
 * must be dead (a zombie re-parented to us is dead; it is reaped here).
 * Anything alive after a short grace counts, is reported, and is killed.
 */
static int proc_leftovers(proc_t *p)
{
    int left = 0;
    if (p->pid <= 0)
        return 0; /* never started: nothing to look for (and ppid 0 is the kernel's) */
    uint64_t end = now_ms() + 1000;
    for (;;) {
        left = 0;
        size_t n;
        proc_info_t *all = proc_list(&n);
        for (size_t i = 0; i < n; i++) {
            proc_info_t *pi = &all[i];
            bool worker = pid_in(p->children, p->n_children, pi->pid);
            bool tool = pid_in(p->tools, p->n_tools, pi->pid) || pid_in(p->workers, p->n_workers, pi->pgrp) ||
                        pi->ppid == p->pid;
            if (!worker && !tool)
                continue;
            if (worker || pi->state != 'Z')
                left++;
            else if (pi->ppid == getpid())
                waitpid(pi->pid, NULL, WNOHANG); /* a dead tool, orphaned to us */
        }
        if (left == 0 || now_ms() >= end) {
            for (size_t i = 0; left && i < n; i++) {
                proc_info_t *pi = &all[i];
                if (pid_in(p->children, p->n_children, pi->pid) || pid_in(p->tools, p->n_tools, pi->pid) ||
                    pid_in(p->workers, p->n_workers, pi->pgrp) || pi->ppid == p->pid) {
                    fprintf(stderr, "\n  left behind: pid %d (ppid %d, pgrp %d, state %c)\n", (int)pi->pid,
                            (int)pi->ppid, (int)pi->pgrp, pi->state);
                    kill(pi->pid, SIGKILL);
                    if (pi->ppid == getpid())
                        waitpid(pi->pid, NULL, 0);
                }
            }
            free(all);
            return left;
        }
        free(all);
        sleep_ms(20);
    }
}

/* ---- files and results ---- */

/* nftw's callback: removes each entry, children before their directory. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

/* Removes a test's temp dir when the test passed; keeps it, and says so, when not. */
static void cleanup_dir(const char *dir, unsigned failures_before)
{
    if (CU_get_number_of_failures() != failures_before) {
        fprintf(stderr, "\n  kept %s\n", dir);
        return;
    }
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The usual registry: plugin tools, an exec tool that hangs, short backoffs. */
static char *write_registry(const char *dir)
{
    char text[4096];
    snprintf(text, sizeof text,
             "{\"defaults\": {\"timeout\": \"5s\", \"attempts\": 2,\n"
             "              \"backoff\": {\"base\": \"10ms\", \"jitter\": \"none\"}},\n"
             " \"tools\": [\n"
             "  {\"name\": \"noop\", \"plugin\": {\"path\": \"%1$s\"}},\n"
             "  {\"name\": \"echo\", \"plugin\": {\"path\": \"%1$s\"}},\n"
             "  {\"name\": \"sleep\", \"plugin\": {\"path\": \"%1$s\"}},\n"
             "  {\"name\": \"flaky\", \"plugin\": {\"path\": \"%1$s\"}, \"attempts\": 3},\n"
             "  {\"name\": \"deny\", \"plugin\": {\"path\": \"%1$s\"}},\n"
             "  {\"name\": \"hang\", \"exec\": [\"%2$s/hang.sh\"], \"timeout\": \"30s\", \"attempts\": 1}\n"
             " ]}\n",
             TP_TEST_PLUGIN, TP_TEST_TOOLS);
    return tp_test_write(dir, "tools.json", text);
}

/* n calls of one tool with the same args, ids PREFIX1..PREFIXn, each its own job. */
static char *write_calls(const char *dir, const char *prefix, int n, const char *tool, const char *args)
{
    size_t cap = (size_t)n * (strlen(tool) + strlen(args) + 64) + 1, len = 0;
    char *text = malloc(cap);
    text[0] = 0;
    for (int i = 1; i <= n; i++)
        len += (size_t)snprintf(text + len, cap - len, "{\"id\": \"%s%d\", \"tool\": \"%s\", \"args\": %s}\n", prefix,
                                i, tool, args);
    char *path = tp_test_write(dir, "calls.jsonl", text);
    free(text);
    return path;
}

/*
 * Parses text as JSON lines into a new array. A line that is not a JSON
 * object is a test failure (and is left out).
 */
static json_t *parse_lines(const char *text)
{
    json_t *arr = json_array();
    const char *s = text ? text : "";
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (len > 0) {
            json_error_t err;
            json_t *v = json_loadb(s, len, 0, &err);
            if (v == NULL || !json_is_object(v)) {
                fprintf(stderr, "\n  not a JSON object line: %.*s\n", (int)len, s);
                CU_FAIL("output line is not a JSON object");
                json_decref(v);
            } else {
                json_array_append_new(arr, v);
            }
        }
        s += len + (nl ? 1 : 0);
    }
    return arr;
}

/* The result whose "id" is id, or NULL. */
static json_t *by_id(json_t *arr, const char *id)
{
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) {
        const char *v = json_string_value(json_object_get(r, "id"));
        if (v && strcmp(v, id) == 0)
            return r;
    }
    return NULL;
}

/* The result whose message starts "line N: ", or NULL. */
static json_t *by_line(json_t *arr, int line)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "line %d: ", line);
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) {
        const char *m = json_string_value(json_object_get(r, "message"));
        if (m && strncmp(m, prefix, strlen(prefix)) == 0)
            return r;
    }
    return NULL;
}

static const char *str_of(json_t *r, const char *key)
{
    return json_string_value(json_object_get(r, key));
}

static long long int_of(json_t *r, const char *key)
{
    json_t *v = json_object_get(r, key);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* Checks one rejected line: kind, class malformed, not ok, 0 attempts, its id. */
static void expect_rejected(json_t *r, const char *kind, const char *id)
{
    CU_ASSERT_PTR_NOT_NULL(r);
    if (r == NULL)
        return;
    CU_ASSERT(json_is_false(json_object_get(r, "ok")));
    EXPECT_STR(str_of(r, "error"), kind);
    EXPECT_STR(str_of(r, "class"), "malformed");
    CU_ASSERT(json_is_false(json_object_get(r, "retryable")));
    EXPECT_INT(int_of(r, "attempts"), 0);
    if (id)
        EXPECT_STR(str_of(r, "id"), id);
    else
        CU_ASSERT(json_is_null(json_object_get(r, "id")));
}

/* Counts the results with ok true. */
static size_t count_ok(json_t *arr)
{
    size_t i, n = 0;
    json_t *r;
    json_array_foreach(arr, i, r)
        n += json_is_true(json_object_get(r, "ok"));
    return n;
}

/* ---- 1. malformed input ---- */

static void test_malformed_lines(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-malformed");
    char *reg = write_registry(dir);
    char *calls = tp_test_write(dir, "calls.jsonl",
                                "{\"id\": \"a\", \"tool\": \"echo\", \"args\": {\"x\": 1}}\n" /* 1 */
                                "this is not json\n"                                          /* 2 */
                                "[1, 2, 3]\n"                                                 /* 3 */
                                "{\"tool\": \"echo\", \"args\": {}}\n"                        /* 4 */
                                "{\"id\": \"b\", \"args\": {}}\n"                             /* 5 */
                                "{\"id\": \"c\", \"tool\": \"ech\", \"args\": {}}\n"          /* 6 */
                                "   \n"                                                       /* 7 */
                                "{\"id\": \"d\", \"tool\": \"echo\", \"args\": [1]}\n"        /* 8 */
                                "{\"id\": \"e\", \"tool\": \"noop\"}\n"                       /* 9 */
                                "{\"id\": \"f\", \"tool\": \"echo\", \"args\": {\"y\": 2}}" /* 10, no \n */);
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    int st = proc_run(&p, dir, "run", args, NULL, 20000);
    EXPECT_INT(st, 1);

    json_t *res = parse_lines(p.out);
    EXPECT_INT(json_array_size(res), 9); /* ten lines, one blank */

    json_t *a = by_id(res, "a");
    CU_ASSERT_PTR_NOT_NULL(a);
    if (a) {
        CU_ASSERT(json_is_true(json_object_get(a, "ok")));
        EXPECT_INT(int_of(json_object_get(a, "result"), "x"), 1);
        EXPECT_INT(int_of(a, "attempts"), 1);
    }
    json_t *e = by_id(res, "e");
    CU_ASSERT(e != NULL && json_is_true(json_object_get(e, "ok")));
    json_t *f = by_id(res, "f");
    CU_ASSERT(f != NULL && json_is_true(json_object_get(f, "ok")));
    if (f)
        EXPECT_INT(int_of(json_object_get(f, "result"), "y"), 2);
    EXPECT_INT(count_ok(res), 3);

    json_t *r2 = by_line(res, 2);
    expect_rejected(r2, "InvalidRequest", NULL);
    EXPECT_HAS(str_of(r2, "message"), "not valid JSON");
    expect_rejected(by_line(res, 3), "InvalidRequest", NULL);
    expect_rejected(by_line(res, 4), "InvalidRequest", NULL);
    EXPECT_HAS(str_of(by_line(res, 4), "message"), "\"id\"");
    expect_rejected(by_line(res, 5), "InvalidRequest", "b");
    EXPECT_HAS(str_of(by_line(res, 5), "message"), "\"tool\"");
    json_t *r6 = by_line(res, 6);
    expect_rejected(r6, "UnknownTool", "c");
    EXPECT_PREFIX(str_of(r6, "message"), "line 6: unknown tool \"ech\"");
    EXPECT_HAS(str_of(r6, "message"), "closest: echo");
    CU_ASSERT_PTR_NULL(by_line(res, 7));
    expect_rejected(by_line(res, 8), "InvalidRequest", "d");
    EXPECT_HAS(str_of(by_line(res, 8), "message"), "\"args\"");

    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

static void test_all_ok_exits_zero(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-allok");
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "n", 5, "echo", "{\"k\": \"v\"}");
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    int st = proc_run(&p, dir, "run", args, NULL, 20000);
    EXPECT_INT(st, 0);
    json_t *res = parse_lines(p.out);
    EXPECT_INT(json_array_size(res), 5);
    EXPECT_INT(count_ok(res), 5);
    for (int i = 1; i <= 5; i++) {
        char id[8];
        snprintf(id, sizeof id, "n%d", i);
        json_t *r = by_id(res, id);
        CU_ASSERT(r != NULL && json_equal(json_object_get(r, "result"), json_object_get(r, "args")));
    }
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/*
 * Runs calls against reg, some of which fail their schema (exit 1), and
 * checks that the one with id "ok" ran (echo: its args back). The result
 * lines, n of them.
 */
static json_t *run_schema_calls(proc_t *p, const char *dir, const char *reg, const char *calls, size_t n)
{
    const char *args[] = {"run", "--registry", reg, calls, NULL};
    EXPECT_INT(proc_run(p, dir, "run", args, NULL, 30000), 1);
    json_t *res = parse_lines(p->out);
    EXPECT_INT(json_array_size(res), n);
    json_t *ok = by_id(res, "ok");
    CU_ASSERT(ok != NULL && json_is_true(json_object_get(ok, "ok")));
    CU_ASSERT(ok != NULL && json_equal(json_object_get(ok, "result"), json_object_get(ok, "args")));
    return res;
}

/*
 * A tool whose parameters are written as an MCP server writes inputSchema
 * in 2020-12 ($defs, a $ref into them), one more by a $ref to a document
 * named in "schema_refs", formats asserted: toolpool run checks each call
 * by those rules before any call happens.
 */
static void test_schema_2020_12(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-schema");
    free(tp_test_write(dir, "units.json", "{\"enum\": [\"metric\", \"imperial\"]}"));
    char text[4096];
    snprintf(text, sizeof text,
             "{\"formats\": \"assert\",\n"
             " \"schema_refs\": {\"https://example.com/units.json\": \"units.json\"},\n"
             " \"tools\": [\n"
             "  {\"name\": \"echo\", \"plugin\": {\"path\": \"%s\"},\n"
             "   \"parameters\": {\"$schema\": \"https://json-schema.org/draft/2020-12/schema\",\n"
             "     \"type\": \"object\", \"required\": [\"loc\"], \"unevaluatedProperties\": false,\n"
             "     \"properties\": {\"loc\": {\"$ref\": \"#/$defs/point\"}, \"day\": {\"type\": \"string\", "
             "\"format\": \"date\"},\n"
             "                    \"units\": {\"$ref\": \"https://example.com/units.json\"}},\n"
             "     \"$defs\": {\"point\": {\"type\": \"object\", \"required\": [\"lat\", \"lon\"],\n"
             "       \"properties\": {\"lat\": {\"type\": \"number\"}, \"lon\": {\"type\": \"number\"}}}}}}\n"
             " ]}\n",
             TP_TEST_PLUGIN);
    char *reg = tp_test_write(dir, "tools.json", text);
    char *calls = tp_test_write(
        dir, "calls.jsonl",
        "{\"id\": \"ok\", \"tool\": \"echo\", \"args\": {\"loc\": {\"lat\": 52.5, \"lon\": 13.4}, "
        "\"day\": \"2026-12-01\", \"units\": \"metric\"}}\n"
        "{\"id\": \"bad\", \"tool\": \"echo\", \"args\": {\"loc\": {\"lat\": \"north\"}}}\n"
        "{\"id\": \"date\", \"tool\": \"echo\", \"args\": {\"loc\": {\"lat\": 1, \"lon\": 2}, "
        "\"day\": \"tomorrow\", \"units\": \"si\", \"x\": 1}}\n");
    proc_t p;
    json_t *res = run_schema_calls(&p, dir, reg, calls, 3);
    json_t *bad = by_id(res, "bad");
    expect_rejected(bad, "InvalidArguments", "bad");
    EXPECT_HAS(str_of(bad, "message"), "/loc/lat: expected number, got string \"north\"");
    EXPECT_HAS(str_of(bad, "message"), "/loc: missing required property \"lon\"");
    json_t *date = by_id(res, "date");
    expect_rejected(date, "InvalidArguments", "date");
    EXPECT_HAS(str_of(date, "message"), "/day: expected a valid date, got \"tomorrow\"");
    EXPECT_HAS(str_of(date, "message"), "/units: expected one of [\"metric\",\"imperial\"], got \"si\"");
    EXPECT_HAS(str_of(date, "message"), "/x: unexpected property (unevaluatedProperties is false)");
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/*
 * Appends the doubling chain (each of 30 levels allOf two $refs to the one
 * below, 2^30 ways to its foot) as a tool's parameters: checked once per
 * value it costs 30 steps; under unevaluatedProperties (2020-12), where
 * what the chain evaluated counts too, it would cost 2^30.
 */
static void put_doubling(tp_buf_t *b, bool unevaluated)
{
    tp_buf_printf(b, "{%s\"type\": \"object\", \"$defs\": {\"a0\": {\"properties\": {\"q\": {\"type\": \"string\"}}}",
                  unevaluated ? "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "
                                "\"unevaluatedProperties\": false, "
                              : "");
    for (int i = 1; i <= 30; i++)
        tp_buf_printf(b, ", \"a%d\": {\"allOf\": [{\"$ref\": \"#/$defs/a%d\"}, {\"$ref\": \"#/$defs/a%d\"}]}", i, i - 1,
                      i - 1);
    tp_buf_puts(b, "}, \"allOf\": [{\"$ref\": \"#/$defs/a30\"}]}");
}

/*
 * A schema that costs 2^30 steps to check stops a run no more: the chain
 * the memo collapses checks its calls at once, and the one it cannot ends
 * InvalidArguments (not retried) at the work bound, naming the tool, while
 * the run goes on and finishes in moments.
 */
static void test_schema_work_bound(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-schema-bound");
    tp_buf_t text = {0};
    tp_buf_printf(
        &text, "{\"tools\": [\n {\"name\": \"echo\", \"plugin\": {\"path\": \"%s\"}, \"parameters\": ", TP_TEST_PLUGIN);
    put_doubling(&text, false);
    tp_buf_printf(&text,
                  "},\n {\"name\": \"costly\", \"plugin\": {\"path\": \"%s\"}, \"parameters\": ", TP_TEST_PLUGIN);
    put_doubling(&text, true);
    tp_buf_append(&text, "}]}\n", 5);
    char *reg = tp_test_write(dir, "tools.json", (char *)text.data);
    tp_buf_free(&text);
    char *calls = tp_test_write(dir, "calls.jsonl",
                                "{\"id\": \"ok\", \"tool\": \"echo\", \"args\": {\"q\": \"refund\"}}\n"
                                "{\"id\": \"bad\", \"tool\": \"echo\", \"args\": {\"q\": 5}}\n"
                                "{\"id\": \"costly\", \"tool\": \"costly\", \"args\": {\"q\": \"refund\"}}\n");
    proc_t p;
    json_t *res = run_schema_calls(&p, dir, reg, calls, 3);
    CU_ASSERT(p.t_end - p.t0 < 10000);
    json_t *bad = by_id(res, "bad");
    expect_rejected(bad, "InvalidArguments", "bad");
    EXPECT_PREFIX(str_of(bad, "message"), "echo: invalid arguments: /q: expected string, got number 5; ");
    json_t *costly = by_id(res, "costly");
    expect_rejected(costly, "InvalidArguments", "costly");
    EXPECT_STR(str_of(costly, "message"),
               "costly: arguments not checked: the schema took too much work to check: over 1000064 steps (the "
               "limit: 1000000, and 32 more for each value in the instance)");
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/* ---- 2. usage and registry errors ---- */

static void test_registry_errors(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-regerr");
    char *calls = write_calls(dir, "c", 1, "noop", "{}");
    char text[2048];
    proc_t p;

    /* An unknown key, on line 4. */
    snprintf(text, sizeof text,
             "{\n"
             "  \"defaults\": {\"timeout\": \"2s\"},\n"
             "  \"tools\": [\n"
             "    {\"name\": \"noop\", \"plugin\": {\"path\": \"%s\"}, \"timout\": \"1s\"}\n"
             "  ]\n"
             "}\n",
             TP_TEST_PLUGIN);
    char *bad_key = tp_test_write(dir, "badkey.json", text);
    const char *a1[] = {"run", "--registry", bad_key, calls, NULL};
    EXPECT_INT(proc_run(&p, dir, "badkey", a1, NULL, 10000), 2);
    char want[4400];
    snprintf(want, sizeof want, "%s:4:", bad_key);
    EXPECT_HAS(p.err, want);
    EXPECT_HAS(p.err, "timout");
    EXPECT_HAS(p.err, "unknown key");
    EXPECT_STR(p.out, "");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    /* Invalid JSON: a missing comma on line 3. */
    char *bad_json = tp_test_write(dir, "badjson.json",
                                   "{\n"
                                   "  \"tools\": [\n"
                                   "    {\"name\": \"noop\" \"plugin\": {\"path\": \"x.so\"}}\n"
                                   "  ]\n"
                                   "}\n");
    f0 = CU_get_number_of_failures();
    const char *a2[] = {"run", "--registry", bad_json, calls, NULL};
    EXPECT_INT(proc_run(&p, dir, "badjson", a2, NULL, 10000), 2);
    snprintf(want, sizeof want, "%s:3:", bad_json);
    EXPECT_HAS(p.err, want);
    EXPECT_HAS(p.err, "invalid JSON");
    EXPECT_STR(p.out, "");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    /* A calls file that does not exist. */
    char *reg = write_registry(dir);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no-such-calls.jsonl", dir);
    f0 = CU_get_number_of_failures();
    const char *a3[] = {"run", "--registry", reg, missing, NULL};
    EXPECT_INT(proc_run(&p, dir, "missing", a3, NULL, 10000), 2);
    EXPECT_HAS(p.err, missing);
    EXPECT_STR(p.out, "");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    /* A bad flag. */
    f0 = CU_get_number_of_failures();
    const char *a4[] = {"run", "--registry", reg, "-j", "0", calls, NULL};
    EXPECT_INT(proc_run(&p, dir, "j0", a4, NULL, 10000), 2);
    EXPECT_HAS(p.err, "-j");
    EXPECT_STR(p.out, "");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    free(bad_key);
    free(bad_json);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/* ---- 3-5. signals ---- */

static void test_sigterm_drains(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-drain");
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "s", 20, "sleep", "{\"ms\": 400}");
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    CU_ASSERT_FATAL(proc_start(&p, dir, "run", args, NULL) == 0);
    /* Both workers up (they take a call as soon as they say Hello), then a bit more. */
    CU_ASSERT(proc_await(&p, 2, 0, 3000));
    sleep_ms(200);
    kill(p.pid, SIGTERM);
    uint64_t t_sig = now_ms();
    proc_wait(&p, 15000);

    EXPECT_INT(p.status, 1);
    json_t *res = parse_lines(p.out);
    EXPECT_INT(json_array_size(res), 2);
    EXPECT_INT(count_ok(res), 2);
    size_t i;
    json_t *r;
    json_array_foreach(res, i, r) {
        EXPECT_STR(str_of(r, "tool"), "sleep");
        EXPECT_INT(int_of(json_object_get(r, "result"), "slept"), 400);
        EXPECT_INT(int_of(r, "attempts"), 1);
    }
    EXPECT_HAS(p.err, "interrupted");
    EXPECT_HAS(p.err, "18 calls read but not started");
    /* The running calls were let finish, not cut short, and the run then ended. */
    CU_ASSERT(p.t_end - t_sig < 2000);
    EXPECT_INT(p.n_workers, 2);
    EXPECT_INT(proc_leftovers(&p), 0);

    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/* Checks the results of hung calls stopped by the run's end: Cancelled, class guard. */
static void expect_cancelled(json_t *res, size_t n)
{
    EXPECT_INT(json_array_size(res), n);
    size_t i;
    json_t *r;
    json_array_foreach(res, i, r) {
        CU_ASSERT(json_is_false(json_object_get(r, "ok")));
        EXPECT_STR(str_of(r, "tool"), "hang");
        EXPECT_STR(str_of(r, "error"), "Cancelled");
        EXPECT_STR(str_of(r, "class"), "guard");
        CU_ASSERT(json_is_false(json_object_get(r, "retryable")));
        EXPECT_INT(int_of(r, "attempts"), 1);
    }
}

static void test_sigterm_short_drain_cancels(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-drain-short");
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "h", 4, "hang", "{}");
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-j", "2", "--drain", "100ms", calls, NULL};
    CU_ASSERT_FATAL(proc_start(&p, dir, "run", args, NULL) == 0);
    /* Two workers, each running hang.sh (its `sleep 3600` in the worker's group). */
    CU_ASSERT(proc_await(&p, 2, 2, 5000));
    uint64_t wait = 300 - (now_ms() - p.t0 < 300 ? now_ms() - p.t0 : 300);
    sleep_ms((unsigned)wait);
    kill(p.pid, SIGTERM);
    uint64_t t_sig = now_ms();
    proc_wait(&p, 10000);

    EXPECT_INT(p.status, 1);
    if (p.t_end - t_sig >= 1000)
        fprintf(stderr, "\n  exited %llu ms after SIGTERM\n", (unsigned long long)(p.t_end - t_sig));
    CU_ASSERT(p.t_end - t_sig < 1000);
    json_t *res = parse_lines(p.out);
    expect_cancelled(res, 2);
    EXPECT_HAS(p.err, "interrupted");
    EXPECT_HAS(p.err, "2 calls read but not started");
    EXPECT_INT(p.n_workers, 2);
    CU_ASSERT(p.n_tools >= 2);
    EXPECT_INT(proc_leftovers(&p), 0);

    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

static void test_second_sigint_stops_now(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-sigint2");
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "h", 3, "hang", "{}");
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    CU_ASSERT_FATAL(proc_start(&p, dir, "run", args, NULL) == 0);
    CU_ASSERT(proc_await(&p, 2, 2, 5000));
    sleep_ms(100);
    kill(p.pid, SIGINT);
    uint64_t t_sig = now_ms();
    sleep_ms(100);
    /* Still draining: the default drain is 10 s. */
    CU_ASSERT(!proc_done(&p));
    kill(p.pid, SIGINT);
    proc_wait(&p, 15000);

    EXPECT_INT(p.status, 1);
    if (p.t_end - t_sig >= 1000)
        fprintf(stderr, "\n  exited %llu ms after the first SIGINT\n", (unsigned long long)(p.t_end - t_sig));
    CU_ASSERT(p.t_end - t_sig < 1000);
    json_t *res = parse_lines(p.out);
    expect_cancelled(res, 2);
    EXPECT_HAS(p.err, "second signal");
    EXPECT_HAS(p.err, "1 call read but not started");
    EXPECT_INT(proc_leftovers(&p), 0);

    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/* ---- 6. workers that break the protocol ---- */

/*
 * Starts `n` noop calls (attempts 2) on fake workers in the given mode: one
 * worker, or two for "stuckstart".
 */
static int fake_start(proc_t *p, const char *dir, const char *mode, int n)
{
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "f", n, "noop", "{}");
    char env_worker[4200], env_mode[64], env_flag[4200];
    snprintf(env_worker, sizeof env_worker, "TOOLPOOL_WORKER=%s", TP_TEST_FAKEWORKER);
    snprintf(env_mode, sizeof env_mode, "FAKEWORKER_MODE=%s", mode);
    snprintf(env_flag, sizeof env_flag, "FAKEWORKER_FLAG=%s/started", dir);
    const char *env[] = {env_worker, env_mode, env_flag, NULL};
    const char *args[] = {"run", "--registry", reg, "-j", strcmp(mode, "stuckstart") == 0 ? "2" : "1", calls, NULL};
    int rc = proc_start(p, dir, "run", args, env);
    free(reg);
    free(calls);
    return rc;
}

/* Runs fake_start's calls to the end; returns the results (the caller decrefs). */
static json_t *run_fake(proc_t *p, const char *dir, const char *mode, int n, unsigned timeout_ms)
{
    if (fake_start(p, dir, mode, n) == 0)
        proc_wait(p, timeout_ms);
    return parse_lines(p->out);
}

/* Checks that every result is WorkerCrashed after both attempts, with msg in its message. */
static void expect_crashed(json_t *res, size_t n, const char *msg)
{
    EXPECT_INT(json_array_size(res), n);
    size_t i;
    json_t *r;
    json_array_foreach(res, i, r) {
        CU_ASSERT(json_is_false(json_object_get(r, "ok")));
        EXPECT_STR(str_of(r, "error"), "WorkerCrashed");
        EXPECT_STR(str_of(r, "class"), "transient");
        EXPECT_INT(int_of(r, "attempts"), 2);
        EXPECT_HAS(str_of(r, "message"), msg);
        json_t *trace = json_object_get(r, "trace");
        EXPECT_INT(json_array_size(trace), 2);
        EXPECT_STR(str_of(json_array_get(trace, 0), "outcome"), "WorkerCrashed");
        EXPECT_STR(str_of(json_array_get(trace, 1), "outcome"), "WorkerCrashed");
    }
}

static void test_fake_garbage(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    proc_t p;
    const char *dir = tp_test_tmpdir("cli-fake-garbage");
    json_t *res = run_fake(&p, dir, "garbage", 2, 20000);
    EXPECT_INT(p.status, 1);
    expect_crashed(res, 2, "protocol error");
    expect_crashed(res, 2, "garbage");
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

static void test_fake_oversized(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    proc_t p;
    const char *dir = tp_test_tmpdir("cli-fake-oversized");
    json_t *res = run_fake(&p, dir, "oversized", 2, 20000);
    EXPECT_INT(p.status, 1);
    expect_crashed(res, 2, "oversized");
    /* The 2 GiB the header announced were never allocated and filled. */
    CU_ASSERT(p.maxrss_kb < 256 * 1024);
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

static void test_fake_exit(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    proc_t p;
    const char *dir = tp_test_tmpdir("cli-fake-exit");
    json_t *res = run_fake(&p, dir, "exit", 3, 20000);
    EXPECT_INT(p.status, 1);
    expect_crashed(res, 3, "worker running noop");
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

static void test_fake_badproto(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    proc_t p;
    const char *dir = tp_test_tmpdir("cli-fake-badproto");
    json_t *res = run_fake(&p, dir, "badproto", 1, 10000);
    EXPECT_INT(p.status, 2);
    EXPECT_HAS(p.err, "cannot start");
    EXPECT_HAS(p.err, "protocol 99");
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

/*
 * A worker that never says Hello costs the pool its hello timeout (10 s)
 * for each of its tries, so this run starts with the suite and is judged
 * by the suite's last test; the others run meanwhile.
 */
static proc_t nohello;
static char nohello_dir[4096];
static bool nohello_started;

static int suite_init(void)
{
    snprintf(nohello_dir, sizeof nohello_dir, "%s", tp_test_tmpdir("cli-fake-nohello"));
    nohello_started = fake_start(&nohello, nohello_dir, "nohello", 1) == 0;
    return 0;
}

static void test_fake_nohello(void)
{
    unsigned f0 = CU_get_number_of_failures();
    proc_t *p = &nohello;
    CU_ASSERT_FATAL(nohello_started);
    uint64_t ran = now_ms() - p->t0;
    proc_wait(p, ran < 75000 ? (unsigned)(75000 - ran) : 1);
    EXPECT_INT(p->status, 2);
    EXPECT_HAS(p->err, "cannot start");
    EXPECT_HAS(p->err, "no hello");
    if (p->t_end - p->t0 >= 60000)
        fprintf(stderr, "\n  gave up after %llu ms\n", (unsigned long long)(p->t_end - p->t0));
    CU_ASSERT(p->t_end - p->t0 < 60000);
    EXPECT_INT(proc_leftovers(p), 0);
    proc_dump_if_failed(p, f0);
    cleanup_dir(nohello_dir, f0);
    proc_free(p);
}

/*
 * One slot's worker hangs before its Hello while the other slot's workers
 * die at start: the pool gives up (exit 2) and must not wait for the
 * silent one.
 */
static void test_fake_stuck_start(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    proc_t p;
    const char *dir = tp_test_tmpdir("cli-fake-stuck");
    json_t *res = run_fake(&p, dir, "stuckstart", 1, 10000);
    EXPECT_INT(p.status, 2);
    EXPECT_HAS(p.err, "cannot start");
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

/* ---- 7-9. demo, trace, -o ---- */

static void test_demo(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-demo");
    proc_t p;
    const char *args[] = {"demo", NULL};
    EXPECT_INT(proc_run(&p, dir, "demo", args, NULL, 30000), 0);
    EXPECT_HAS(p.out, "attempt 3 → Timeout after 0.8s");
    EXPECT_HAS(p.out, "PermissionDenied");
    EXPECT_HAS(p.out, "(backoff 1.0s)");
    EXPECT_HAS(p.out, "search_kb(args={\"q\": \"refund window\"})");
    EXPECT_INT(proc_leftovers(&p), 0);
    proc_dump_if_failed(&p, f0);
    proc_free(&p);
    cleanup_dir(dir, f_start);
}

static void test_trace(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-trace");
    char *reg = write_registry(dir);
    char *calls = tp_test_write(dir, "calls.jsonl",
                                "{\"id\": \"t1\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 2}}\n"
                                "{\"id\": \"t2\", \"tool\": \"deny\", \"args\": {}}\n");
    char results[4200];
    snprintf(results, sizeof results, "%s/results.jsonl", dir);
    proc_t p;
    const char *a1[] = {"run", "--registry", reg, "-o", results, calls, NULL};
    EXPECT_INT(proc_run(&p, dir, "run", a1, NULL, 20000), 1);
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    f0 = CU_get_number_of_failures();
    const char *a2[] = {"trace", results, NULL};
    EXPECT_INT(proc_run(&p, dir, "trace", a2, NULL, 10000), 0);
    EXPECT_HAS(p.out, "flaky(args={\"ok_at\": 2})\n  attempt 1 → ServerError after ");
    /* Each attempt line ends with when it started, after the call's turn came. */
    EXPECT_HAS(p.out, "(backoff 0.01s)   [at +0");
    EXPECT_HAS(p.out, "]\n  attempt 2 → ok after ");
    EXPECT_HAS(p.out, "call t1\nflaky(args=");
    EXPECT_HAS(p.out, " from its turn: attempts ");
    EXPECT_HAS(p.out, "  → result: {\"attempt\": 2}");
    EXPECT_HAS(p.out, "deny(args={})\n  attempt 1 → PermissionDenied after ");
    EXPECT_HAS(p.out, "\"error\": \"PermissionDenied\", \"retryable\": false, \"attempts\": 1");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    /* The same story from the store, by call id. */
    f0 = CU_get_number_of_failures();
    const char *a4[] = {"trace", "t1", NULL};
    EXPECT_INT(proc_run(&p, dir, "trace-id", a4, NULL, 10000), 0);
    EXPECT_HAS(p.out, "flaky(args={\"ok_at\": 2})\n  attempt 1 → ServerError after ");
    EXPECT_HAS(p.out, "  attempt 2 → ok after ");
    proc_dump_if_failed(&p, f0);
    proc_free(&p);

    f0 = CU_get_number_of_failures();
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no-such-results.jsonl", dir);
    const char *a3[] = {"trace", missing, NULL};
    EXPECT_INT(proc_run(&p, dir, "trace-missing", a3, NULL, 10000), 2);
    EXPECT_HAS(p.err, missing);
    proc_dump_if_failed(&p, f0);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

static void test_output_file(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("cli-output");
    char *reg = write_registry(dir);
    char *calls = write_calls(dir, "o", 3, "noop", "{}");
    char results[4200];
    snprintf(results, sizeof results, "%s/results.jsonl", dir);
    free(tp_test_write(dir, "results.jsonl", "stale content that -o must replace\n"));
    proc_t p;
    const char *args[] = {"run", "--registry", reg, "-o", results, calls, NULL};
    EXPECT_INT(proc_run(&p, dir, "run", args, NULL, 20000), 0);
    EXPECT_STR(p.out, "");
    char *text = tp_test_slurp(results, NULL);
    json_t *res = parse_lines(text);
    EXPECT_INT(json_array_size(res), 3);
    EXPECT_INT(count_ok(res), 3);
    CU_ASSERT(by_id(res, "o1") && by_id(res, "o2") && by_id(res, "o3"));
    proc_dump_if_failed(&p, f0);
    json_decref(res);
    free(text);
    proc_free(&p);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

int main(void)
{
    /* Orphans of the runs come here, where the tests can see and reap them. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("cli", suite_init, NULL);
    CU_add_test(s, "malformed input lines", test_malformed_lines);
    CU_add_test(s, "all calls ok: exit 0", test_all_ok_exits_zero);
    CU_add_test(s, "2020-12 parameters with $defs, schema_refs, formats", test_schema_2020_12);
    CU_add_test(s, "a schema too costly to check: the work bound", test_schema_work_bound);
    CU_add_test(s, "registry, calls file and flag errors: exit 2", test_registry_errors);
    CU_add_test(s, "SIGTERM drains the running calls", test_sigterm_drains);
    CU_add_test(s, "SIGTERM with --drain 100ms cancels hung calls", test_sigterm_short_drain_cancels);
    CU_add_test(s, "a second SIGINT stops at once", test_second_sigint_stops_now);
    CU_add_test(s, "fake worker: garbage frame", test_fake_garbage);
    CU_add_test(s, "fake worker: oversized frame", test_fake_oversized);
    CU_add_test(s, "fake worker: exits after reading a call", test_fake_exit);
    CU_add_test(s, "fake worker: wrong protocol version", test_fake_badproto);
    CU_add_test(s, "fake worker: stuck before hello while others die", test_fake_stuck_start);
    CU_add_test(s, "demo", test_demo);
    CU_add_test(s, "trace", test_trace);
    CU_add_test(s, "-o writes the results file", test_output_file);
    CU_add_test(s, "fake worker: never says hello (ran beside the others)", test_fake_nohello);
    return tp_test_run();
}
