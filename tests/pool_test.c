/*
 * The pool and the batch runner with real workers, real tools and real
 * kills: every test runs calls through tp_batch_run, reads the result lines
 * back, and checks that nothing was left behind (no child, no extra fd).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "front_jsonl.h"
#include "buf.h"
#include "clock.h"
#include "runutil.h"
#include "testutil.h"


static void test_many_noops(void)
{
    enum { N = 3000 };
    tp_buf_t calls = {0};
    for (int i = 0; i < N; i++)
        tp_buf_printf(&calls, "{\"id\": \"n%d\", \"tool\": \"noop\"}\n", i);
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(NULL, "{\"tools\": [" PLUGIN_TOOL("noop") "]}", (char *)calls.data, 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), N);
    CU_ASSERT_EQUAL(r.rep.summary.ok, N);
    /* exactly one record per id */
    char *seen = calloc(N, 1);
    size_t i;
    json_t *v;
    json_array_foreach(r.rows, i, v) {
        int k = atoi(str(v, "id") + 1);
        CU_ASSERT(k >= 0 && k < N && !seen[k]);
        if (k >= 0 && k < N)
            seen[k] = 1;
        CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    }
    free(seen);
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 2);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/* A hung tool is killed at its timeout and retried after its backoff. */
static void test_hung_killed_and_retried(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"hang\", \"exec\": [\"@T@/hang.sh\"], \"timeout\": \"200ms\","
                        " \"attempts\": 2, \"backoff\": {\"base\": \"50ms\", \"jitter\": \"none\"}}]}",
                        "{\"id\": \"h1\", \"tool\": \"hang\", \"args\": {\"q\": \"refund window\"}}\n", 1, 0);
    CU_ASSERT_EQUAL(r.status, 1);
    json_t *v = row(&r, "h1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "transient");
    CU_ASSERT(json_is_true(json_object_get(v, "retryable")));
    CU_ASSERT_EQUAL(num(v, "attempts"), 2);
    for (size_t i = 0; i < 2; i++) {
        double ms = trace_ms(v, i, "duration_ms");
        CU_ASSERT(ms >= 199 && ms < 350);
    }
    CU_ASSERT_DOUBLE_EQUAL(trace_ms(v, 0, "backoff_ms"), 50, 0.001);
    CU_ASSERT_DOUBLE_EQUAL(trace_ms(v, 1, "backoff_ms"), 0, 0.001);
    CU_ASSERT(r.secs >= 0.45);
    CU_ASSERT_EQUAL(r.rep.pool.timeouts, 2);
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    json_decref(r.rows);
}

/*
 * Deadlines that fall together, with a store: the deadline thread wakes
 * early for each and keeps them all while the loop commits and respawns.
 * No attempt may end before its deadline, and none may wait for long after.
 */
static void test_deadlines_together(void)
{
    enum { N = 12 };
    tp_buf_t calls = {0};
    for (int i = 0; i < N; i++)
        tp_buf_printf(&calls, "{\"id\": \"h%d\", \"tool\": \"hang\"}\n", i);
    tp_buf_append(&calls, "", 1);
    char store[4200];
    snprintf(store, sizeof store, "%s/store", tp_test_tmpdir("together"));
    run_t r = run_calls(store,
                        "{\"tools\": [{\"name\": \"hang\", \"exec\": [\"@T@/hang.sh\"], \"timeout\": \"100ms\","
                        " \"attempts\": 1, \"breaker\": {\"same_call\": {\"failures\": 1000},"
                        " \"tool\": {\"min_calls\": 1000}}}]}",
                        (char *)calls.data, 4, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), N);
    size_t i;
    json_t *v;
    json_array_foreach(r.rows, i, v) {
        CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
        double ms = trace_ms(v, 0, "duration_ms");
        CU_ASSERT(ms >= 100.0 && ms < 200.0);
    }
    CU_ASSERT_EQUAL(r.rep.pool.timeouts, N);
    CU_ASSERT(r.secs < 3.0); /* three rounds of 100 ms, with room for a slow machine */
    json_decref(r.rows);
    tp_buf_free(&calls);
}

static bool process_gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return true;
    bool zombie = false;
    if (fgets(buf, sizeof buf, f)) {
        char *p = strrchr(buf, ')');
        zombie = p && (p[2] == 'Z' || p[2] == 'X');
    }
    fclose(f);
    return zombie;
}

/*
 * Whether pid is gone within a second: a SIGKILL is sent before the
 * attempt's Timeout is reported, but the process dies when it next runs,
 * which on a loaded machine may be a little later.
 */
static bool process_gone_soon(pid_t pid)
{
    for (int i = 0; i < 100; i++) {
        if (process_gone(pid))
            return true;
        usleep(10000);
    }
    return false;
}

/* The state letter of a process (R, S, Z...), or 0 when it is gone. */
static char process_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char st = 0;
    if (fgets(buf, sizeof buf, f)) {
        char *q = strrchr(buf, ')');
        st = q ? q[2] : 0;
    }
    fclose(f);
    return st;
}

/* Our one child process, or 0. */
static pid_t only_child(void)
{
    pid_t found = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(buf, sizeof buf, f)) {
            char *q = strrchr(buf, ')');
            int ppid = 0;
            if (q && sscanf(q + 2, "%*c %d", &ppid) == 1 && ppid == (int)getpid())
                found = (pid_t)atoi(e->d_name);
        }
        fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

typedef struct {
    int idle, done, closed;
} wd_ctx_t;

static void wd_done(void *ctx, tp_attempt_t *a)
{
    (void)a;
    ((wd_ctx_t *)ctx)->done++;
}

static void wd_idle(void *ctx)
{
    ((wd_ctx_t *)ctx)->idle++;
}

static void wd_fatal(void *ctx, int rc, const char *msg)
{
    (void)ctx;
    CU_ASSERT(rc < 0);
    fprintf(stderr, "pool: %s\n", msg);
}

static void wd_closed(void *ctx)
{
    ((wd_ctx_t *)ctx)->closed++;
}

/* One attempt on a one-worker pool whose loop stops for 400 ms right after submitting it. */
typedef struct {
    tp_attempt_t a;
    char state; /* the worker's, at the end of the 400 ms */
    uint64_t timeouts, crashed;
    uint64_t loop_deadline; /* tp_pool_next_deadline once it was submitted */
} blocked_t;

static blocked_t run_with_loop_blocked(const char *registry, const char *args)
{
    blocked_t r = {0};
    const char *dir = tp_test_tmpdir("wd");
    char *reg_path = tp_test_write(dir, "tools.json", registry);
    char err[512];
    tp_registry_t *reg = tp_registry_load(reg_path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    wd_ctx_t c = {0};
    tp_pool_opts_t o = {.workers = 1,
                        .worker_path = TP_TEST_BIN "/toolpool-worker",
                        .max_frame = 1u << 20,
                        .pipeline = 1,
                        .done_cb = wd_done,
                        .idle_cb = wd_idle,
                        .fatal_cb = wd_fatal,
                        .closed_cb = wd_closed,
                        .ctx = &c};
    tp_pool_t *p = tp_pool_new(base, &o);
    CU_ASSERT_EQUAL_FATAL(tp_pool_start(p), 0);
    while (c.idle == 0)
        event_base_loop(base, EVLOOP_ONCE);
    pid_t worker = only_child();
    CU_ASSERT(worker > 0);
    r.a = (tp_attempt_t){.tool = &reg->tools[0],
                         .call_id = "w1",
                         .job = "w1",
                         .number = 1,
                         .args = args,
                         .args_len = strlen(args),
                         .timeout_us = 100000,
                         .depth = 1};
    CU_ASSERT_EQUAL_FATAL(tp_pool_submit(p, &r.a), 0);
    r.loop_deadline = tp_pool_next_deadline(p);
    tp_pool_flush(p);
    /*
     * The loop does not run, as in a long fsync: 400 ms, whatever signal
     * comes meanwhile (the SIGCHLD of the worker stopped at its deadline).
     */
    struct timespec blocked = {0, 400000000};
    while (nanosleep(&blocked, &blocked) < 0 && errno == EINTR)
        ;
    r.state = process_state(worker);
    while (c.done == 0)
        event_base_loop(base, EVLOOP_ONCE);
    r.timeouts = tp_pool_stats(p)->timeouts;
    r.crashed = tp_pool_stats(p)->crashed;
    tp_pool_shutdown(p, true);
    while (c.closed == 0)
        event_base_loop(base, EVLOOP_ONCE);
    tp_pool_free(p);
    event_base_free(base);
    free(r.a.message);
    free(r.a.result);
    r.a.message = r.a.result = NULL;
    free(reg_path);
    tp_registry_free(reg);
    CU_ASSERT_EQUAL(waitpid(-1, NULL, WNOHANG), -1); /* no child left behind */
    return r;
}

/*
 * A deadline is kept while the loop is busy elsewhere: the deadline thread
 * kills the worker's group at the deadline, and the attempt's end is that
 * moment, not when the loop gets back to it.
 */
static void test_deadline_while_loop_blocked(void)
{
    blocked_t r = run_with_loop_blocked("{\"tools\": [{\"name\": \"hang\", \"exec\": [\"" TP_TEST_TOOLS
                                        "/hang.sh\"], \"timeout\": \"100ms\", \"attempts\": 1}]}",
                                        "{}");
    CU_ASSERT_EQUAL(r.state, 'Z'); /* killed at its deadline, not yet reaped */
    CU_ASSERT_EQUAL(r.a.kind, TP_KIND_TIMEOUT);
    double late_ms = ((double)r.a.ended_us - (double)r.a.started_us - 100000.0) / 1000.0;
    CU_ASSERT(late_ms >= 0 && late_ms < 50);
    CU_ASSERT_EQUAL(r.timeouts, 1);
    CU_ASSERT_EQUAL(r.crashed, 0);
    CU_ASSERT_EQUAL(r.loop_deadline, 0); /* the thread's: no commit or respawn waits for it */
}

/*
 * A deadline with a kill_grace (TERM first) is the loop's own to keep: it
 * is the one commits and respawns wait for, and a blocked loop delays it.
 */
static void test_grace_deadline_is_the_loops(void)
{
    blocked_t r = run_with_loop_blocked("{\"tools\": [{\"name\": \"hang\", \"exec\": [\"" TP_TEST_TOOLS
                                        "/hang.sh\"], \"timeout\": \"100ms\", \"kill_grace\": \"50ms\","
                                        " \"attempts\": 1}]}",
                                        "{}");
    CU_ASSERT_EQUAL(r.loop_deadline, r.a.started_us + 100000);
    CU_ASSERT_NOT_EQUAL(r.state, 'Z'); /* nobody signalled it while the loop was away */
    CU_ASSERT_EQUAL(r.a.kind, TP_KIND_TIMEOUT);
    CU_ASSERT_EQUAL(r.timeouts, 1);
}

/* An answer written before the deadline, still unread in the pipe, is not killed: it counts. */
static void test_answer_waiting_at_deadline(void)
{
    blocked_t r = run_with_loop_blocked("{\"tools\": [{\"name\": \"sleep\", \"plugin\": {\"path\": \"" TP_TEST_PLUGIN
                                        "\"}, \"timeout\": \"100ms\", \"attempts\": 1}]}",
                                        "{\"ms\": 20}");
    CU_ASSERT_NOT_EQUAL(r.state, 'Z');
    CU_ASSERT_EQUAL(r.a.kind, TP_KIND_OK);
    CU_ASSERT(r.a.ok);
    CU_ASSERT_EQUAL(r.timeouts, 0);
}

/*
 * The loop's fallback timer behind the thread's deadlines stays armed from
 * attempt to attempt, so it fires during later attempts than the one that
 * armed it: it must look again then, never take the running attempt for
 * late. Quick calls back to back on one worker for three timeouts' worth
 * of time all answer; the hung one after them ends at its own deadline.
 */
static void test_fallback_across_attempts(void)
{
    enum { N = 40 };
    tp_buf_t calls = {0};
    for (int i = 0; i < N; i++)
        tp_buf_printf(&calls, "{\"id\": \"q%d\", \"tool\": \"sleep\", \"args\": {\"ms\": 15}}\n", i);
    tp_buf_printf(&calls, "{\"id\": \"h\", \"tool\": \"sleep\", \"args\": {\"ms\": 5000}}\n");
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"timeout\": \"200ms\", \"attempts\": 1}]}",
                        (char *)calls.data, 1, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), N + 1);
    CU_ASSERT_EQUAL(r.rep.summary.ok, N);
    json_t *h = row(&r, "h");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_STRING_EQUAL(str(h, "error"), "Timeout");
    double ms = trace_ms(h, 0, "duration_ms");
    CU_ASSERT(ms >= 199 && ms < 350);
    CU_ASSERT_EQUAL(r.rep.pool.timeouts, 1);
    CU_ASSERT(r.secs >= 0.6 + 0.2); /* the quick ones took three timeouts' worth, one after another */
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/*
 * A commit that is due waits for a deadline it would otherwise sit across,
 * but never for long: not past the transaction's start plus its window
 * plus 20 ms, not for a deadline beyond twice a commit (capped at 20 ms,
 * however slow commits have been), and not for one long past.
 */
static void test_commit_hold(void)
{
    const uint64_t t = 1000000000u;                                                  /* now */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, 0, t - 3000, 4000, 500), 0);                /* no deadline */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 1000, t - 3000, 4000, 500), 1050);      /* just past it */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 1600, t - 3000, 4000, 500), 0);         /* beyond 2 x 500 + 500 */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t - 200, t - 3000, 4000, 500), 50);         /* due now: its timer fires */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t - 5000, t - 3000, 4000, 500), 0);         /* long past */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 1000, t - 24000, 4000, 500), 0);        /* held long enough */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 1000, t - 23500, 4000, 500), 500);      /* only to the bound */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 300000, t - 3000, 4000, 1000000.0), 0); /* slow disk: span capped */
    CU_ASSERT_EQUAL(tp_commit_hold_us(t, t + 15000, t - 3000, 4000, 1000000.0), 15050);
    srand(5);
    for (int i = 0; i < 100000; i++) {
        uint64_t since = t - (uint64_t)(rand() % 40000), window = 2000 + (uint64_t)(rand() % 18000);
        uint64_t d = rand() % 8 ? t - 5000 + (uint64_t)(rand() % 40000) : 0;
        double commit_us = rand() % 10 ? rand() % 3000 : rand() % 2000000;
        uint64_t h = tp_commit_hold_us(t, d, since, window, commit_us);
        CU_ASSERT(t + h <= since + window + 20000 || h == 0);
        CU_ASSERT(h <= 20050);
        CU_ASSERT(h == 0 || (d != 0 && t + h <= (d > t ? d : t) + 50));
    }
}


/* The timeout kills the worker's whole process group: the grandchild too. */
static void test_grandchild_killed(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("gc"));
    char reg[8192], calls[4096];
    snprintf(reg, sizeof reg,
             "{\"tools\": [{\"name\": \"gc\", \"exec\": [\"@T@/grandchild.sh\", \"%s/pid\"],"
             " \"timeout\": \"300ms\", \"attempts\": 1}]}",
             dir);
    snprintf(calls, sizeof calls, "{\"id\": \"g1\", \"tool\": \"gc\"}\n");
    run_t r = run_calls(NULL, reg, calls, 1, 0);
    json_t *v = row(&r, "g1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    char path[4200];
    snprintf(path, sizeof path, "%s/pid", dir);
    char *pidtext = tp_test_slurp(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pidtext);
    pid_t gc = (pid_t)atoi(pidtext);
    CU_ASSERT(gc > 1);
    bool gone = process_gone_soon(gc);
    CU_ASSERT(gone);
    if (!gone)
        kill(gc, SIGKILL);
    free(pidtext);
    json_decref(r.rows);
}

/* kill_grace: TERM first, so a tool can clean up; KILL for one that will not stop. */
static void test_kill_grace(void)
{
    char dir[1024], reg[8192], path[1100];
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("grace"));
    snprintf(reg, sizeof reg,
             "{\"defaults\": {\"timeout\": \"200ms\", \"attempts\": 1}, \"tools\": ["
             "{\"name\": \"term\", \"exec\": [\"@T@/term.sh\", \"%s/term\"], \"kill_grace\": \"2s\"},"
             "{\"name\": \"term0\", \"exec\": [\"@T@/term.sh\", \"%s/term0\"]},"
             "{\"name\": \"stubborn\", \"exec\": [\"@T@/stubborn.sh\", \"%s/stubborn\"], \"kill_grace\": \"300ms\"}]}",
             dir, dir, dir);
    run_t r = run_calls(NULL, reg,
                        "{\"id\": \"t\", \"tool\": \"term\"}\n"
                        "{\"id\": \"t0\", \"tool\": \"term0\"}\n"
                        "{\"id\": \"st\", \"tool\": \"stubborn\"}\n",
                        3, 0);
    json_t *v = row(&r, "t");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    /* the tool stopped at TERM: no need to wait out the 2s grace */
    CU_ASSERT(trace_ms(v, 0, "duration_ms") < 1000);
    snprintf(path, sizeof path, "%s/term", dir);
    char *text = tp_test_slurp(path, NULL);
    CU_ASSERT(text && strcmp(text, "term\n") == 0);
    free(text);
    /* no grace: KILL at once, the trap never ran */
    CU_ASSERT_STRING_EQUAL(str(row(&r, "t0"), "error"), "Timeout");
    snprintf(path, sizeof path, "%s/term0", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    /* TERM ignored: KILL after the grace */
    v = row(&r, "st");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    double ms = trace_ms(v, 0, "duration_ms");
    CU_ASSERT(ms >= 490 && ms < 900);
    snprintf(path, sizeof path, "%s/stubborn", dir);
    text = tp_test_slurp(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT(process_gone_soon((pid_t)atoi(text)));
    free(text);
    json_decref(r.rows);
}

/* A segfaulting plugin costs its worker, not the run: WorkerCrashed, retried. */
static void test_segv_plugin(void)
{
    run_t r = run_calls(NULL,
                        "{\"defaults\": {\"backoff\": {\"base\": \"1ms\"}}, \"tools\": [" PLUGIN_TOOL(
                            "segv") "," PLUGIN_TOOL("noop") "]}",
                        "{\"id\": \"s1\", \"tool\": \"segv\"}\n"
                        "{\"id\": \"n1\", \"tool\": \"noop\"}\n"
                        "{\"id\": \"n2\", \"tool\": \"noop\"}\n",
                        2, 0);
    CU_ASSERT_EQUAL(r.status, 1);
    json_t *v = row(&r, "s1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "WorkerCrashed");
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "transient");
    CU_ASSERT_EQUAL(num(v, "attempts"), 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(str(v, "message"), "signal 11"));
    CU_ASSERT(json_is_true(json_object_get(row(&r, "n1"), "ok")));
    CU_ASSERT(json_is_true(json_object_get(row(&r, "n2"), "ok")));
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 3);
    json_decref(r.rows);
}

/* After --recycle-after calls a worker is replaced, and that is no crash. */
static void test_recycling(void)
{
    tp_buf_t calls = {0};
    for (int i = 0; i < 50; i++)
        tp_buf_printf(&calls, "{\"id\": \"p%d\", \"tool\": \"pid\"}\n", i);
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(NULL, "{\"tools\": [" PLUGIN_TOOL("pid") "]}", (char *)calls.data, 1, 10);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 50);
    long pids[64];
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(r.rows, i, v) {
        long pid = (long)json_integer_value(json_object_get(json_object_get(v, "result"), "pid"));
        bool known = false;
        for (int k = 0; k < n; k++)
            known |= pids[k] == pid;
        if (!known && n < 64)
            pids[n++] = pid;
    }
    CU_ASSERT_EQUAL(n, 5);
    CU_ASSERT_EQUAL(r.rep.pool.recycled, 5);
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/* The distinct worker pids in the results' {"pid": N}, in order of first sight, with each one's count. */
static int distinct_pids(json_t *rows, const char *prefix, int n, long *pids, int *counts, int cap)
{
    int found = 0;
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        run_t r = {.rows = rows};
        long pid = (long)json_integer_value(json_object_get(json_object_get(row(&r, id), "result"), "pid"));
        int k = 0;
        while (k < found && pids[k] != pid)
            k++;
        if (k == found && found < cap) {
            pids[found] = pid;
            counts[found++] = 0;
        }
        if (k < found)
            counts[k]++;
    }
    return found;
}

/*
 * worker.max_rss: a plugin that leaks 10 MB a call, with max_rss 50M. The
 * supervisor reads the worker's RSS after each reply; past 50M the worker
 * is replaced between calls: its pid changes after about 5 calls, and no
 * call fails.
 */
static void test_recycle_max_rss(void)
{
    enum { N = 12 };
    tp_buf_t calls = {0};
    for (int i = 0; i < N; i++)
        tp_buf_printf(&calls, "{\"id\": \"l%d\", \"job\": \"j\", \"step\": %d, \"tool\": \"leak\"}\n", i, i + 1);
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"leak\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"worker\": {\"max_rss\": \"50M\"}}]}",
                        (char *)calls.data, 1, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.rep.summary.ok, N);
    long pids[N];
    int counts[N];
    int n = distinct_pids(r.rows, "l", N, pids, counts, N);
    CU_ASSERT(n >= 2); /* replaced at least once */
    for (int k = 0; k < n; k++)
        CU_ASSERT(counts[k] <= 5); /* 5 x 10 MB is past 50M, whatever the worker's own RSS */
#ifndef TP_TEST_SANITIZE
    CU_ASSERT(counts[0] >= 4); /* and not before: the worker itself is a few MB (ASan's, more) */
#endif
    /* every worker that reached the limit, the last perhaps not */
    CU_ASSERT(r.rep.pool.recycled >= (uint64_t)n - 1);
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/*
 * worker.max_calls, from "defaults": no worker answers more than 3 calls,
 * even when calls are queued on it (pipelining); none fails.
 */
static void test_recycle_max_calls(void)
{
    enum { N = 40 };
    tp_buf_t calls = {0};
    for (int i = 0; i < N; i++)
        tp_buf_printf(&calls, "{\"id\": \"p%d\", \"tool\": \"pid\"}\n", i);
    tp_buf_append(&calls, "", 1);
    run_t r = run_calls(NULL, "{\"defaults\": {\"worker\": {\"max_calls\": 3}}, \"tools\": [" PLUGIN_TOOL("pid") "]}",
                        (char *)calls.data, 2, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.rep.summary.ok, N);
    long pids[N];
    int counts[N];
    int n = distinct_pids(r.rows, "p", N, pids, counts, N);
    CU_ASSERT(n >= N / 3);
    for (int k = 0; k < n; k++)
        CU_ASSERT(counts[k] <= 3);
    CU_ASSERT_EQUAL(r.rep.pool.crashed, 0);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/* A tool's retry_after_ms stretches the backoff it follows. */
static void test_retry_after(void)
{
    run_t r = run_calls(NULL,
                        "{\"defaults\": {\"backoff\": {\"base\": \"1ms\"}}, \"tools\": [" PLUGIN_TOOL("rate") "]}",
                        "{\"id\": \"r1\", \"tool\": \"rate\", \"args\": {\"after\": 300}}\n", 1, 0);
    json_t *v = row(&r, "r1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT_EQUAL(num(v, "attempts"), 2);
    CU_ASSERT_STRING_EQUAL(str(json_array_get(json_object_get(v, "trace"), 0), "outcome"), "RateLimited");
    CU_ASSERT_DOUBLE_EQUAL(trace_ms(v, 0, "backoff_ms"), 300, 0.001);
    CU_ASSERT(json_number_value(json_object_get(v, "duration_ms")) >= 300);
    json_decref(r.rows);
}

/* Exit statuses and JSON error objects map to the contract's kinds. */
static void test_exec_outcomes(void)
{
    run_t r = run_calls(
        NULL,
        "{\"defaults\": {\"attempts\": 2, \"backoff\": {\"base\": \"1ms\"}}, \"tools\": ["
        "{\"name\": \"exit75\", \"exec\": [\"@T@/exit.sh\", \"75\"]},"
        "{\"name\": \"exit77\", \"exec\": [\"@T@/exit.sh\", \"77\"]},"
        "{\"name\": \"exit64\", \"exec\": [\"@T@/exit.sh\", \"64\"]},"
        "{\"name\": \"exit3\", \"exec\": [\"@T@/exit.sh\", \"3\"]},"
        "{\"name\": \"notfound\", \"exec\": [\"@T@/print.sh\", \"{\\\"error\\\": \\\"NotFound\\\", \\\"message\\\": \\\"gone\\\"}\"]},"
        "{\"name\": \"text\", \"exec\": [\"@T@/print.sh\", \"hello\\n\"]},"
        "{\"name\": \"real\", \"exec\": [\"@T@/print.sh\", \"{\\\"a\\\":\\n 1.08, \\\"b\\\": [1, 2]}\"]},"
        "{\"name\": \"cat\", \"exec\": [\"@T@/cat.sh\"]},"
        "{\"name\": \"missing\", \"exec\": [\"@T@/no-such-tool\"]}," PLUGIN_TOOL("custom") "," PLUGIN_TOOL(
            "flaky") "]}",
        "{\"id\": \"e75\", \"tool\": \"exit75\"}\n"
        "{\"id\": \"e77\", \"tool\": \"exit77\"}\n"
        "{\"id\": \"e64\", \"tool\": \"exit64\"}\n"
        "{\"id\": \"e3\", \"tool\": \"exit3\"}\n"
        "{\"id\": \"nf\", \"tool\": \"notfound\"}\n"
        "{\"id\": \"tx\", \"tool\": \"text\"}\n"
        "{\"id\": \"re\", \"tool\": \"real\"}\n"
        "{\"id\": \"ca\", \"tool\": \"cat\", \"args\": {\"x\": 0.1, \"s\": \"caf\\u00e9\"}}\n"
        "{\"id\": \"mi\", \"tool\": \"missing\"}\n"
        "{\"id\": \"cu\", \"tool\": \"custom\"}\n"
        "{\"id\": \"fl\", \"tool\": \"flaky\", \"args\": {\"ok_at\": 2}}\n",
        3, 0);
    CU_ASSERT_EQUAL(r.status, 1);
    json_t *v = row(&r, "e75");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "ServerError");
    CU_ASSERT_EQUAL(num(v, "attempts"), 2);
    CU_ASSERT(json_is_true(json_object_get(v, "retryable")));
    v = row(&r, "e77");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "PermissionDenied");
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "permanent");
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    CU_ASSERT(json_is_false(json_object_get(v, "retryable")));
    CU_ASSERT_PTR_NOT_NULL(strstr(str(v, "message"), "exiting with 77"));
    CU_ASSERT_STRING_EQUAL(str(row(&r, "e64"), "error"), "BadArguments");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "e3"), "error"), "ToolError");
    v = row(&r, "nf");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "NotFound");
    CU_ASSERT_STRING_EQUAL(str(v, "message"), "gone");
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(row(&r, "tx"), "result")), "hello");
    v = json_object_get(row(&r, "re"), "result");
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(v, "a")), 1.08, 1e-12);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(v, "b")), 2);
    v = json_object_get(row(&r, "ca"), "result");
    CU_ASSERT_STRING_EQUAL(str(v, "s"), "caf\xc3\xa9");
    CU_ASSERT_STRING_EQUAL(str(row(&r, "mi"), "error"), "ToolError");
    v = row(&r, "cu");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "QuotaGone");
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "permanent");
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    v = row(&r, "fl");
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT_EQUAL(num(v, "attempts"), 2);
    json_decref(r.rows);
}

/* stdout past max_output: the tool is stopped and the call fails clearly. */
static void test_output_cap(void)
{
    run_t r = run_calls(
        NULL,
        "{\"tools\": [{\"name\": \"yes\", \"exec\": [\"@T@/yes.sh\"], \"max_output\": 4096}," PLUGIN_TOOL("big") "]}",
        "{\"id\": \"y1\", \"tool\": \"yes\"}\n"
        "{\"id\": \"b1\", \"tool\": \"big\", \"args\": {\"n\": 100000}}\n",
        1, 0);
    json_t *v = row(&r, "y1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "OutputTooLarge");
    CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    v = row(&r, "b1");
    CU_ASSERT_EQUAL(json_string_length(json_object_get(v, "result")), 100000);
    json_decref(r.rows);
}

/* The tool sees the call in its environment, and no descriptor but 0-2. */
static void test_env_and_fds(void)
{
    run_t r = run_calls(NULL, "{\"tools\": [{\"name\": \"env\", \"exec\": [\"@T@/env.sh\"]}]}",
                        "{\"id\": \"c9\", \"job\": \"j7\", \"step\": 4, \"tool\": \"env\"}\n", 1, 0);
    json_t *v = json_object_get(row(&r, "c9"), "result");
    CU_ASSERT_STRING_EQUAL(str(v, "id"), "c9");
    CU_ASSERT_STRING_EQUAL(str(v, "job"), "j7");
    CU_ASSERT_STRING_EQUAL(str(v, "step"), "4");
    CU_ASSERT_STRING_EQUAL(str(v, "attempt"), "1");
    /* ls itself opens one directory fd (3) */
    CU_ASSERT_STRING_EQUAL(str(v, "fds"), "0 1 2 3 ");
    /* Tools run as batch work (SCHED_BATCH, 3): they never preempt the supervisor. */
    CU_ASSERT_STRING_EQUAL(str(v, "policy"), "3");
    json_decref(r.rows);
}

/* The deadline bounds attempts and backoffs together. */
static void test_deadline(void)
{
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"hang\", \"exec\": [\"@T@/hang.sh\"], \"timeout\": \"200ms\","
                        " \"deadline\": \"500ms\", \"attempts\": 10,"
                        " \"backoff\": {\"base\": \"10ms\", \"jitter\": \"none\"}}]}",
                        "{\"id\": \"d1\", \"tool\": \"hang\"}\n", 1, 0);
    json_t *v = row(&r, "d1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    /* 200 + 10 + 200 + 20, and the third cut short at 500: three; two when the machine is slow to start them */
    CU_ASSERT(num(v, "attempts") == 3 || num(v, "attempts") == 2);
    double total = json_number_value(json_object_get(v, "duration_ms"));
    CU_ASSERT(total >= 490 && total < 650);
    json_decref(r.rows);
}

/* concurrency caps a tool's attempts at once, whatever -j says. */
static void test_concurrency_cap(void)
{
    const char *calls = "{\"id\": \"a\", \"tool\": \"sleep\", \"args\": {\"ms\": 150}}\n"
                        "{\"id\": \"b\", \"tool\": \"sleep\", \"args\": {\"ms\": 150}}\n"
                        "{\"id\": \"c\", \"tool\": \"sleep\", \"args\": {\"ms\": 150}}\n";
    run_t r = run_calls(
        NULL, "{\"tools\": [{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"}, \"concurrency\": 1}]}", calls, 3, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.secs >= 0.45);
    json_decref(r.rows);
    r = run_calls(NULL, "{\"tools\": [" PLUGIN_TOOL("sleep") "]}", calls, 3, 0);
    CU_ASSERT(r.secs < 0.4);
    json_decref(r.rows);
}

/* A job's steps run one at a time in step order; a failed step does not stop the next. */
static void test_job_order(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("order"));
    char reg[8192];
    snprintf(reg, sizeof reg,
             "{\"tools\": [{\"name\": \"log\", \"exec\": [\"@T@/log.sh\", \"%s/log\"]}, " PLUGIN_TOOL("deny") "]}",
             dir);
    run_t r = run_calls(NULL, reg,
                        "{\"id\": \"a3\", \"job\": \"A\", \"step\": 3, \"tool\": \"log\"}\n"
                        "{\"id\": \"a1\", \"job\": \"A\", \"step\": 1, \"tool\": \"log\"}\n"
                        "{\"id\": \"b2\", \"job\": \"B\", \"step\": 2, \"tool\": \"log\"}\n"
                        "{\"id\": \"a2\", \"job\": \"A\", \"step\": 2, \"tool\": \"deny\"}\n"
                        "{\"id\": \"b1\", \"job\": \"B\", \"step\": 1, \"tool\": \"log\"}\n",
                        2, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 5);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "a2"), "error"), "PermissionDenied");
    CU_ASSERT(json_is_true(json_object_get(row(&r, "a3"), "ok")));
    char path[4200];
    snprintf(path, sizeof path, "%s/log", dir);
    char *log = tp_test_slurp(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    /* A's logged steps are 1 then 3 (2 is the deny plugin); B's are 1 then 2. */
    char *a1 = strstr(log, "A 1\n"), *a3 = strstr(log, "A 3\n");
    char *b1 = strstr(log, "B 1\n"), *b2 = strstr(log, "B 2\n");
    CU_ASSERT(a1 && a3 && a1 < a3);
    CU_ASSERT(b1 && b2 && b1 < b2);
    /* a3 ran after a2 ended: its result line comes later */
    size_t i, pos_a2 = 99, pos_a3 = 0;
    json_t *v;
    json_array_foreach(r.rows, i, v) {
        if (strcmp(str(v, "id"), "a2") == 0)
            pos_a2 = i;
        if (strcmp(str(v, "id"), "a3") == 0)
            pos_a3 = i;
    }
    CU_ASSERT(pos_a2 < pos_a3);
    free(log);
    json_decref(r.rows);
}

/* Args that fail the tool's schema: no call happens; the message says what to fix. */
static void test_invalid_arguments(void)
{
    run_t r = run_calls(
        NULL,
        "{\"tools\": [{\"name\": \"echo\", \"plugin\": {\"path\": \"@P@\"},"
        " \"parameters\": {\"type\": \"object\", \"required\": [\"q\"],"
        " \"properties\": {\"q\": {\"type\": \"string\"}, \"limit\": {\"type\": \"integer\", \"maximum\": 100}},"
        " \"additionalProperties\": false}}]}",
        "{\"id\": \"bad\", \"tool\": \"echo\", \"args\": {\"q\": 5, \"limit\": 250}}\n"
        "{\"id\": \"none\", \"tool\": \"echo\"}\n"
        "{\"id\": \"good\", \"tool\": \"echo\", \"args\": {\"q\": \"refund window\", \"limit\": 10}}\n",
        1, 0);
    CU_ASSERT_EQUAL(r.status, 1);
    json_t *v = row(&r, "bad");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "InvalidArguments");
    CU_ASSERT_STRING_EQUAL(str(v, "class"), "malformed");
    CU_ASSERT_EQUAL(num(v, "attempts"), 0);
    CU_ASSERT(json_is_false(json_object_get(v, "retryable")));
    CU_ASSERT_PTR_NOT_NULL(strstr(str(v, "message"), "/q: expected string, got number 5"));
    CU_ASSERT_PTR_NOT_NULL(strstr(str(v, "message"), "/limit: expected at most 100, got 250"));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(v, "trace")), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(str(row(&r, "none"), "message"), "missing required property \"q\""));
    CU_ASSERT(json_is_true(json_object_get(row(&r, "good"), "ok")));
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 1);
    json_decref(r.rows);

    /* An invalid schema is a registry error naming the tool and the schema's place. */
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir("schema"));
    char *path = tp_test_write(dir, "tools.json",
                               "{\"tools\": [\n"
                               "  {\"name\": \"t\", \"exec\": [\"true\"],\n"
                               "   \"parameters\": {\"type\": \"object\",\n"
                               "     \"properties\": {\"q\": {\"type\": \"strin\"}}}}]}\n");
    tp_registry_t *reg = tp_registry_load(path, err, sizeof err);
    CU_ASSERT_PTR_NULL(reg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tools.json:4: tools[0] (t).parameters"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/properties/q/type"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "strin"));
    tp_registry_free(reg);
    free(path);
}

/*
 * Pipelining: once a tool has proved fast, its calls queue behind a busy
 * worker. One that hangs is killed at its timeout; the calls queued behind
 * it never started, so they run again, with one attempt each.
 */
static void test_pipeline_requeue(void)
{
    tp_buf_t calls = {0};
    for (int i = 0; i < 140; i++)
        tp_buf_printf(&calls, "{\"id\": \"s%d\", \"tool\": \"sleep\", \"args\": {\"ms\": %d}}\n", i,
                      i == 120 ? 10000 : 0);
    tp_buf_append(&calls, "", 1);
    run_queue_budget_us = 1000000; /* calls queue behind a busy worker however loaded the machine */
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"timeout\": \"300ms\", \"attempts\": 1}]}",
                        (char *)calls.data, 1, 0);
    run_queue_budget_us = 0;
    CU_ASSERT_EQUAL(json_array_size(r.rows), 140);
    size_t i;
    json_t *v;
    int ok = 0;
    json_array_foreach(r.rows, i, v) {
        if (strcmp(str(v, "id"), "s120") == 0) {
            CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
            CU_ASSERT(trace_ms(v, 0, "duration_ms") >= 299 && trace_ms(v, 0, "duration_ms") < 450);
            continue;
        }
        ok += json_is_true(json_object_get(v, "ok"));
        CU_ASSERT_EQUAL(num(v, "attempts"), 1);
    }
    CU_ASSERT_EQUAL(ok, 139);
    CU_ASSERT_EQUAL(r.rep.pool.timeouts, 1);
    CU_ASSERT(r.rep.pool.requeued > 0); /* calls were queued behind the hung one */
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/*
 * A tool whose first call is slow (as a plugin's first call, which loads
 * it) still pipelines once it has proved fast: its queue depth comes from
 * its fastest warm-up answer, not its first. From the first, 50 ms, it
 * would take some forty fast calls before any call queued.
 */
static void test_depth_after_slow_first_call(void)
{
    tp_buf_t calls = {0};
    for (int i = 0; i < 40; i++)
        tp_buf_printf(&calls, "{\"id\": \"w%d\", \"tool\": \"sleep\", \"args\": {\"ms\": %d}}\n", i,
                      i == 0    ? 50
                      : i == 20 ? 10000
                                : 0);
    tp_buf_append(&calls, "", 1);
    /*
     * 40 ms: fast calls queue however loaded the machine (each would have to
     * take 20 ms not to), while an average seeded from the 50 ms first call
     * would still give a depth of 1.
     */
    run_queue_budget_us = 40000;
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"sleep\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"timeout\": \"300ms\", \"attempts\": 1}]}",
                        (char *)calls.data, 1, 0);
    run_queue_budget_us = 0;
    CU_ASSERT_EQUAL(json_array_size(r.rows), 40);
    CU_ASSERT_EQUAL(r.rep.pool.timeouts, 1);
    CU_ASSERT(r.rep.pool.requeued > 0); /* calls were queued behind the hung one */
    json_decref(r.rows);
    tp_buf_free(&calls);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("pool", NULL, NULL);
    CU_add_test(s, "3000 no-op plugin calls, one record each", test_many_noops);
    CU_add_test(s, "hung tool killed at its timeout and retried", test_hung_killed_and_retried);
    CU_add_test(s, "deadlines that fall together are all kept, none early", test_deadlines_together);
    CU_add_test(s, "a commit waits for a near deadline, within bounds", test_commit_hold);
    CU_add_test(s, "a deadline is kept while the loop is busy elsewhere", test_deadline_while_loop_blocked);
    CU_add_test(s, "an answer waiting in the pipe at the deadline counts", test_answer_waiting_at_deadline);
    CU_add_test(s, "a deadline with a kill_grace is the loop's to keep", test_grace_deadline_is_the_loops);
    CU_add_test(s, "the deadline's fallback, left armed across attempts, fires for none early",
                test_fallback_across_attempts);
    CU_add_test(s, "grandchild of a hung tool dies too", test_grandchild_killed);
    CU_add_test(s, "kill_grace: TERM, then KILL", test_kill_grace);
    CU_add_test(s, "segfaulting plugin", test_segv_plugin);
    CU_add_test(s, "worker recycling", test_recycling);
    CU_add_test(s, "worker.max_rss: a leaking plugin's worker is replaced", test_recycle_max_rss);
    CU_add_test(s, "worker.max_calls: no worker answers more, pipelined or not", test_recycle_max_calls);
    CU_add_test(s, "retry_after_ms honoured", test_retry_after);
    CU_add_test(s, "exec outcomes and kinds", test_exec_outcomes);
    CU_add_test(s, "stdout cap", test_output_cap);
    CU_add_test(s, "environment and descriptors", test_env_and_fds);
    CU_add_test(s, "deadline bounds the retries", test_deadline);
    CU_add_test(s, "concurrency cap", test_concurrency_cap);
    CU_add_test(s, "job step order", test_job_order);
    CU_add_test(s, "invalid arguments: no call, a message to act on", test_invalid_arguments);
    CU_add_test(s, "pipelined calls behind a hung one run again", test_pipeline_requeue);
    CU_add_test(s, "a slow first call does not keep a fast tool from pipelining", test_depth_after_slow_first_call);
    return tp_test_run();
}
