/*
 * faults_test: the calls that fail only on a machine in trouble (out of
 * memory, out of epoll watches), made to fail on purpose, one at a time,
 * through the linker's --wrap (tests/CMakeLists.txt lists the wrapped
 * names). Each must be checked where it is made:
 *
 * - a posix_spawn setting that cannot be made is a failed start, logged
 *   with what failed: the supervisor never starts a worker without its
 *   own group or with fds it should have closed, and an exec tool never
 *   starts without its pipes;
 * - a worker whose reply pipe cannot be watched is not started;
 * - a slot timer that cannot be armed stops the pool (its deadlines could
 *   not be kept);
 * - an LMDB cursor that cannot be opened is an error, not a crash;
 * - what trace allocates, it frees.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <lmdb.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapter.h"
#include "cli.h"
#include "outcome.h"
#include "runutil.h"
#include "store.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

/* ---- the faults ---- */

/*
 * One fault at a time: the wrapped call named `name` succeeds `skip` times,
 * then fails `count` times with err, then succeeds again. fired counts the
 * failures made.
 */
static struct {
    const char *name;
    int skip, count, err, fired;
} fault;

static void fault_set(const char *name, int skip, int count, int err)
{
    fault.name = name;
    fault.skip = skip;
    fault.count = count;
    fault.err = err;
    fault.fired = 0;
}

static bool fault_now(const char *name)
{
    if (fault.name == NULL || strcmp(fault.name, name) != 0 || fault.count == 0)
        return false;
    if (fault.skip > 0) {
        fault.skip--;
        return false;
    }
    fault.count--;
    fault.fired++;
    return true;
}

#define WRAP_SPAWN(fn, params, args)                                                                                   \
    int __real_##fn params;                                                                                            \
    int __wrap_##fn params;                                                                                            \
    int __wrap_##fn params                                                                                             \
    {                                                                                                                  \
        return fault_now(#fn) ? fault.err : __real_##fn args;                                                          \
    }

WRAP_SPAWN(posix_spawn_file_actions_init, (posix_spawn_file_actions_t * fa), (fa))
WRAP_SPAWN(posix_spawn_file_actions_adddup2, (posix_spawn_file_actions_t * fa, int fd, int to), (fa, fd, to))
WRAP_SPAWN(posix_spawn_file_actions_addopen,
           (posix_spawn_file_actions_t * fa, int fd, const char *path, int flags, mode_t mode),
           (fa, fd, path, flags, mode))
WRAP_SPAWN(posix_spawn_file_actions_addclosefrom_np, (posix_spawn_file_actions_t * fa, int from), (fa, from))
WRAP_SPAWN(posix_spawnattr_init, (posix_spawnattr_t * a), (a))
WRAP_SPAWN(posix_spawnattr_setflags, (posix_spawnattr_t * a, short flags), (a, flags))
WRAP_SPAWN(posix_spawnattr_setpgroup, (posix_spawnattr_t * a, pid_t pg), (a, pg))
WRAP_SPAWN(posix_spawnattr_setsigdefault, (posix_spawnattr_t * a, const sigset_t *set), (a, set))
WRAP_SPAWN(posix_spawnattr_setsigmask, (posix_spawnattr_t * a, const sigset_t *set), (a, set))
WRAP_SPAWN(mdb_cursor_open, (MDB_txn * txn, MDB_dbi dbi, MDB_cursor **cur), (txn, dbi, cur))

/*
 * event_add fails, when asked, for the read event of a pipe (a worker's
 * reply pipe), for a 10-second timer (a slot's hello timeout, the first
 * timer a slot arms), for a 777 ms timer (a backoff the test declares), for
 * a 1-second timer (the drain's, run_calls' --drain), or for an eventfd
 * (the deadline thread's).
 */
int __real_event_add(struct event *ev, const struct timeval *tv);
int __wrap_event_add(struct event *ev, const struct timeval *tv);
int __wrap_event_add(struct event *ev, const struct timeval *tv)
{
    evutil_socket_t fd = event_get_fd(ev);
    struct stat st;
    if ((event_get_events(ev) & EV_READ) && fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) &&
        fault_now("event_add:pipe-read"))
        return -1;
    if (fd < 0 && tv && tv->tv_sec == 10 && tv->tv_usec == 0 && fault_now("event_add:10s-timer"))
        return -1;
    if (fd < 0 && tv && tv->tv_sec == 0 && tv->tv_usec == 777000 && fault_now("event_add:777ms-timer"))
        return -1;
    if (fd < 0 && tv && tv->tv_sec == 1 && tv->tv_usec == 0 && fault_now("event_add:1s-timer"))
        return -1;
    char link[64], target[64] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", (int)fd);
    if (fd >= 0 && readlink(link, target, sizeof target - 1) > 0 && strstr(target, "eventfd") &&
        fault_now("event_add:eventfd"))
        return -1;
    return __real_event_add(ev, tv);
}

/* The JSON objects made by json_object() and not yet deleted, while tracked. */
static json_t *made[64];
static size_t n_made;
static bool tracking;

json_t *__real_json_object(void);
json_t *__wrap_json_object(void);
json_t *__wrap_json_object(void)
{
    json_t *v = __real_json_object();
    if (tracking && v && n_made < 64)
        made[n_made++] = v;
    return v;
}

/*
 * v is deleted, and with it every value it alone holds: jansson deletes
 * those inside itself, past the wrap.
 */
static void untrack(json_t *v)
{
    for (size_t i = 0; i < n_made; i++)
        if (made[i] == v)
            made[i] = made[--n_made];
    const char *key;
    json_t *child;
    size_t at;
    if (json_is_object(v)) {
        json_object_foreach(v, key, child) {
            if (child->refcount == 1)
                untrack(child);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, at, child) {
            if (child->refcount == 1)
                untrack(child);
        }
    }
}

void __real_json_delete(json_t *v);
void __wrap_json_delete(json_t *v);
void __wrap_json_delete(json_t *v)
{
    untrack(v);
    __real_json_delete(v);
}

/* ---- scratch directories, removed at the end when every test passed ---- */

static char *scratch_dirs[64];
static size_t n_scratch;

static const char *scratch(const char *tag)
{
    const char *dir = tp_test_tmpdir(tag);
    if (n_scratch < 64)
        scratch_dirs[n_scratch++] = strdup(dir);
    return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void scratch_clean(bool remove_them)
{
    for (size_t i = 0; i < n_scratch; i++) {
        if (remove_them)
            nftw(scratch_dirs[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(scratch_dirs[i]);
    }
    n_scratch = 0;
}

/* ---- stderr, captured ---- */

static int saved_err = -1;
static char err_path[4200];

static void stderr_capture(const char *dir)
{
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    fflush(stderr);
    saved_err = dup(2);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}

/* Puts stderr back; returns what was written meanwhile (malloc'd). */
static char *stderr_restore(void)
{
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    char *text = tp_test_slurp(err_path, NULL);
    return text ? text : strdup("");
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

#define EXPECT_COUNT(hay, needle, want)                                                                                \
    do {                                                                                                               \
        int n_ = count_of(hay, needle);                                                                                \
        if (n_ != (want))                                                                                              \
            fprintf(stderr, "\n  %s:%d: \"%s\" %d times, expected %d, in:\n%s\n", __FILE__, __LINE__, needle, n_,      \
                    (int)(want), hay);                                                                                 \
        CU_ASSERT_EQUAL(n_, want);                                                                                     \
    } while (0)

static const char *const noop_registry = "{\"tools\": [" PLUGIN_TOOL("noop") "]}";
static const char *const three_noops = "{\"id\": \"n1\", \"tool\": \"noop\"}\n"
                                       "{\"id\": \"n2\", \"tool\": \"noop\"}\n"
                                       "{\"id\": \"n3\", \"tool\": \"noop\"}\n";

/* ---- the supervisor's spawn of a worker ---- */

/*
 * closefrom fails for the first two starts of the only worker: two failed
 * starts, each logged, then a worker and every call ok.
 */
static void test_worker_closefrom_fails_twice(void)
{
    stderr_capture(scratch("faults-closefrom"));
    fault_set("posix_spawn_file_actions_addclosefrom_np", 0, 2, ENOMEM);
    run_t r = run_calls(NULL, noop_registry, three_noops, 1, 0);
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.rep.summary.ok, 3);
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 1);
    EXPECT_COUNT(err, "posix_spawn_file_actions_addclosefrom_np failed while starting worker slot 0", 2);
    json_decref(r.rows);
    free(err);
}

/* A worker that can never get a process group of its own is never started: the run stops, saying why. */
static void test_worker_setpgroup_fails(void)
{
    stderr_capture(scratch("faults-setpgroup"));
    fault_set("posix_spawnattr_setpgroup", 0, -1, ENOMEM);
    run_t r = run_calls(NULL, noop_registry, three_noops, 1, 0);
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 0);
    EXPECT_COUNT(err, "posix_spawnattr_setpgroup failed while starting worker slot 0", 5);
    EXPECT_COUNT(err, "cannot start worker", 1);
    json_decref(r.rows);
    free(err);
}

/* Each other setting, failing once: logged by name, and the run goes on. */
static void test_worker_each_setting_fails_once(void)
{
    /* clang-format off */
    static const char *const names[] = {
        "posix_spawn_file_actions_init", "posix_spawn_file_actions_adddup2", "posix_spawn_file_actions_addopen",
        "posix_spawnattr_init",          "posix_spawnattr_setflags",         "posix_spawnattr_setsigdefault",
        "posix_spawnattr_setsigmask",
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        stderr_capture(scratch("faults-setting"));
        fault_set(names[i], 0, 1, ENOMEM);
        run_t r = run_calls(NULL, noop_registry, three_noops, 1, 0);
        int fired = fault.fired;
        fault_set(NULL, 0, 0, 0);
        char *err = stderr_restore();
        char want[160];
        snprintf(want, sizeof want, "%s failed while starting worker slot 0", names[i]);
        CU_ASSERT_EQUAL(fired, 1);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_EQUAL(r.rep.pool.spawned, 1);
        EXPECT_COUNT(err, want, 1);
        json_decref(r.rows);
        free(err);
    }
}

/* A worker whose reply pipe cannot be watched would never be heard: it is not started. */
static void test_worker_read_event_fails(void)
{
    stderr_capture(scratch("faults-readev"));
    fault_set("event_add:pipe-read", 0, 1, 0);
    run_t r = run_calls(NULL, noop_registry, three_noops, 1, 0);
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.rep.summary.ok, 3);
    CU_ASSERT_EQUAL(r.rep.pool.spawned, 1);
    CU_ASSERT(r.secs < 5); /* not a hello timeout's 10 s */
    EXPECT_COUNT(err, "event_add failed while starting worker slot 0", 1);
    json_decref(r.rows);
    free(err);
}

/* A slot timer that cannot be armed: the pool stops, saying why, and leaves nothing behind. */
static void test_slot_timer_fails(void)
{
    stderr_capture(scratch("faults-timer"));
    fault_set("event_add:10s-timer", 0, 1, 0);
    run_t r = run_calls(NULL, noop_registry, three_noops, 1, 0);
    int fired = fault.fired;
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(fired, 1);
    CU_ASSERT_EQUAL(r.status, 2);
    EXPECT_COUNT(err, "cannot arm worker slot 0's timer", 1);
    json_decref(r.rows);
    free(err);
}

/*
 * The deadline thread's eventfd cannot be watched: no thread (said, with
 * why), and the loop's own timers keep the deadlines.
 */
static void test_deadline_event_fails(void)
{
    stderr_capture(scratch("faults-deadline"));
    fault_set("event_add:eventfd", 0, 1, 0);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"hang\", \"exec\": [\"@T@/hang.sh\"], \"timeout\": \"200ms\","
                        " \"attempts\": 1}]}",
                        "{\"id\": \"h1\", \"tool\": \"hang\"}\n", 1, 0);
    int fired = fault.fired;
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(fired, 1);
    EXPECT_COUNT(err, "no deadline thread (event_add", 1);
    json_t *v = row(&r, "h1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    double ms = trace_ms(v, 0, "duration_ms");
    CU_ASSERT(ms >= 199 && ms < 400);
    json_decref(r.rows);
    free(err);
}

/*
 * A backoff timer that cannot be armed: the call is not left asleep on a
 * timer that never fires; it retries at once, saying so, and its trace
 * shows no wait.
 */
static void test_backoff_timer_fails(void)
{
    stderr_capture(scratch("faults-backoff"));
    fault_set("event_add:777ms-timer", 0, 1, 0);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"busy\", \"exec\": [\"@T@/exit.sh\", \"75\"], \"attempts\": 2,"
                        " \"backoff\": {\"base\": \"777ms\", \"jitter\": \"none\"}}]}",
                        "{\"id\": \"b1\", \"tool\": \"busy\"}\n", 1, 0);
    int fired = fault.fired;
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(fired, 1);
    EXPECT_COUNT(err, "call b1: cannot arm its backoff timer; retrying at once", 1);
    json_t *v = row(&r, "b1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "ServerError");
    CU_ASSERT_EQUAL(num(v, "attempts"), 2);
    CU_ASSERT(trace_ms(v, 0, "backoff_ms") == 0);
    CU_ASSERT(r.secs < 0.7); /* it did not wait out the 777 ms */
    json_decref(r.rows);
    free(err);
}

/*
 * A drain whose timer cannot be armed: the running call is not left to run
 * on unbounded (here it would hang for its 20 s timeout); it is stopped
 * now, saying so, and ends Cancelled.
 */
static void test_drain_timer_fails(void)
{
    stderr_capture(scratch("faults-drain"));
    fault_set("event_add:1s-timer", 0, 1, 0);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"term\", \"exec\": [\"@T@/term_run.sh\"], \"timeout\": \"20s\","
                        " \"attempts\": 1}]}",
                        "{\"id\": \"d1\", \"tool\": \"term\"}\n", 1, 0);
    int fired = fault.fired;
    fault_set(NULL, 0, 0, 0);
    char *err = stderr_restore();
    CU_ASSERT_EQUAL(fired, 1);
    EXPECT_COUNT(err, "cannot arm the drain's timer; stopping running calls now", 1);
    json_t *v = row(&r, "d1");
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Cancelled");
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT(r.secs < 5); /* not the call's 20 s */
    json_decref(r.rows);
    free(err);
}

/* ---- the exec adapter's spawn of a tool ---- */

/*
 * A tool whose stdin, stdout or stderr cannot be set up, or whose signals
 * cannot be reset, is not run: the attempt is a transient ServerError
 * naming what failed, logged with the tool and the call.
 */
static void test_tool_settings_fail(void)
{
    /* clang-format off */
    static const char *const names[] = {
        "posix_spawn_file_actions_init", "posix_spawn_file_actions_adddup2", "posix_spawnattr_init",
        "posix_spawnattr_setflags",      "posix_spawnattr_setsigdefault",
    };
    /* clang-format on */
    const char *dir = scratch("faults-tool");
    char marker[4200], script[4300];
    snprintf(marker, sizeof marker, "%s/ran", dir);
    snprintf(script, sizeof script, "touch '%s'; echo '{}'", marker);
    char *argv[] = {"/bin/sh", "-c", script};
    Toolpool__Call call = TOOLPOOL__CALL__INIT;
    call.tool = "touch";
    call.argv = argv;
    call.n_argv = 3;
    call.max_output = 1 << 20;
    call.call_id = "c7";
    call.attempt = 2;
    tp_outcome_t o = {0};
    /* As it runs with nothing failing. */
    tp_outcome_reset(&o);
    tp_exec_run(&call, &o);
    CU_ASSERT(o.ok);
    CU_ASSERT_EQUAL(access(marker, F_OK), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        unlink(marker);
        stderr_capture(dir);
        fault_set(names[i], 0, 1, ENOMEM);
        tp_outcome_reset(&o);
        tp_exec_run(&call, &o);
        fault_set(NULL, 0, 0, 0);
        char *err = stderr_restore();
        CU_ASSERT_FALSE(o.ok);
        CU_ASSERT_STRING_EQUAL(o.kind, "ServerError");
        tp_buf_append(&o.message, "", 1);
        EXPECT_COUNT((const char *)o.message.data, names[i], 1);
        CU_ASSERT_NOT_EQUAL(access(marker, F_OK), 0); /* the tool never ran */
        char want[200];
        snprintf(want, sizeof want, "%s failed while starting tool touch (call c7, attempt 2)", names[i]);
        EXPECT_COUNT(err, want, 1);
        free(err);
    }
    tp_outcome_free(&o);
}

/* ---- the inspection commands ---- */

/* Runs a command with stdout to dir/out; returns its status, *out what it printed. */
static int run_cmd(int (*cmd)(int, char **), int argc, char **argv, const char *dir, char **out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/out", dir);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    int rc = cmd(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    *out = tp_test_slurp(path, NULL);
    return rc;
}

/* A cursor that cannot be opened: each list says so and exits 2; it reads nothing through it. */
static void test_cursor_fails(void)
{
    const char *dir = scratch("faults-cursor");
    char store[4200], err[512];
    snprintf(store, sizeof store, "%s/store", dir);
    tp_store_t *s = tp_store_open(store, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    tp_store_close(s);
    struct {
        int (*cmd)(int, char **);
        const char *name, *db;
        /* clang-format off */
    } cmds[] = {
        {tp_cmd_breakers, "breakers", "breakers"},
        {tp_cmd_escalations, "escalations", "escalations"},
        {tp_cmd_checkpoints, "checkpoints", "jobs"},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = {(char *)cmds[i].name, "list", "--store", store, NULL};
        char *out;
        stderr_capture(dir);
        fault_set("mdb_cursor_open", 0, 1, ENOMEM);
        int rc = run_cmd(cmds[i].cmd, 4, argv, dir, &out);
        int fired = fault.fired;
        fault_set(NULL, 0, 0, 0);
        char *e = stderr_restore();
        char want[200];
        snprintf(want, sizeof want, "cannot read %s: Cannot allocate memory", cmds[i].db);
        CU_ASSERT_EQUAL(fired, 1);
        CU_ASSERT_EQUAL(rc, 2);
        EXPECT_COUNT(e, want, 1);
        CU_ASSERT(out && out[0] == 0);
        free(out);
        free(e);
    }
}

/* ---- trace ---- */

/* A result line with a tool and no args: trace prints "{}" and keeps nothing it made. */
static void test_trace_frees(void)
{
    const char *dir = scratch("faults-trace");
    char *path = tp_test_write(dir, "results.jsonl",
                               "{\"id\":\"c1\",\"tool\":\"echo\",\"ok\":true,\"result\":{},\"trace\":[]}\n");
    char outp[4200];
    snprintf(outp, sizeof outp, "%s/trace.out", dir);
    FILE *in = fopen(path, "r"), *out = fopen(outp, "w");
    n_made = 0;
    tracking = true;
    CU_ASSERT_EQUAL(tp_trace_print(in, path, out), 0);
    tracking = false;
    fclose(in);
    fclose(out);
    CU_ASSERT_EQUAL(n_made, 0);
    char *text = tp_test_slurp(outp, NULL);
    CU_ASSERT(text && strstr(text, "echo(args={})\n") != NULL);
    free(text);
    free(path);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("faults", NULL, NULL);
    CU_add_test(s, "worker: closefrom fails twice, then it starts", test_worker_closefrom_fails_twice);
    CU_add_test(s, "worker: no process group of its own, no worker", test_worker_setpgroup_fails);
    CU_add_test(s, "worker: each other spawn setting failing once", test_worker_each_setting_fails_once);
    CU_add_test(s, "worker: its reply pipe cannot be watched", test_worker_read_event_fails);
    CU_add_test(s, "a slot's timer cannot be armed: the pool stops", test_slot_timer_fails);
    CU_add_test(s, "the deadline thread's eventfd cannot be watched", test_deadline_event_fails);
    CU_add_test(s, "a backoff timer cannot be armed: the call retries at once", test_backoff_timer_fails);
    CU_add_test(s, "a drain timer cannot be armed: running calls stop now", test_drain_timer_fails);
    CU_add_test(s, "exec tool: a spawn setting fails, the tool does not run", test_tool_settings_fail);
    CU_add_test(s, "inspection: a cursor that cannot be opened", test_cursor_fails);
    CU_add_test(s, "trace frees what it makes", test_trace_frees);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    scratch_clean(failed == 0);
    return failed ? 1 : 0;
}
