/*
 * Containment, with real processes: nothing a tool starts outlives its
 * call, even a process that left the worker's process group (setsid) or
 * was double-forked into a daemon. Each test leaves a `sleep 300` named
 * by a marker of its own in its argv, then looks for it in /proc.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proctree.h"
#include "runutil.h"
#include "testutil.h"

extern char **environ;

/* A marker no other process on the machine carries: this test's pid and a tag. */
static const char *marker(const char *tag)
{
    static char buf[8][96];
    static int next;
    char *m = buf[next++ % 8];
    snprintf(m, sizeof buf[0], "tp-contain-%d-%s", (int)getpid(), tag);
    return m;
}

/* The pids of live processes (not zombies) whose argv[0] is m, up to cap. */
static int find_marked(const char *m, pid_t *pids, int cap)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k <= 0)
            continue;
        buf[k] = 0;
        if (strcmp(buf, m) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        char st = 0;
        if (f && fgets(buf, sizeof buf, f)) {
            char *q = strrchr(buf, ')');
            st = q ? q[2] : 0;
        }
        if (f)
            fclose(f);
        if (st != 0 && st != 'Z' && st != 'X' && n < cap)
            pids[n++] = (pid_t)atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

static int count_marked(const char *m)
{
    pid_t pids[16];
    return find_marked(m, pids, 16);
}

/*
 * Whether no process carries m within wait_ms (a SIGKILLed process is
 * gone a moment after the signal). Kills what it finds at the end, so a
 * failing test leaves nothing behind either.
 */
static bool gone(const char *m, int wait_ms)
{
    for (int waited = 0;; waited += 10) {
        if (count_marked(m) == 0)
            return true;
        if (waited >= wait_ms)
            break;
        usleep(10000);
    }
    pid_t pids[16];
    int n = find_marked(m, pids, 16);
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    return false;
}

/* Waits until a process carries m (the tool has started it); false after wait_ms. */
static bool appears(const char *m, int wait_ms)
{
    for (int waited = 0; waited < wait_ms; waited += 10) {
        if (count_marked(m) > 0)
            return true;
        usleep(10000);
    }
    return false;
}

/* One call of escape.sh (how, then) with the given policy; returns the result row (caller decrefs r.rows). */
static run_t run_escape(const char *m, const char *how, const char *then, const char *policy)
{
    char reg[2048];
    snprintf(reg, sizeof reg,
             "{\"tools\": [{\"name\": \"esc\", \"exec\": [\"@T@/escape.sh\", \"%s\", \"%s\", \"%s\"],"
             " \"attempts\": 1, %s}]}",
             m, how, then, policy);
    return run_calls(NULL, reg, "{\"id\": \"e1\", \"tool\": \"esc\"}\n", 1, 0);
}

/* A tool that setsid()s a child out of the worker's group and hangs: the timeout kills both. */
static void test_setsid_child_killed_at_timeout(void)
{
    const char *m = marker("setsid");
    run_t r = run_escape(m, "setsid", "hang", "\"timeout\": \"500ms\"");
    json_t *v = row(&r, "e1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    CU_ASSERT(trace_ms(v, 0, "duration_ms") < 600); /* the attempt ends at the deadline, as before */
    CU_ASSERT(gone(m, 500));
    json_decref(r.rows);
}

/* A double-forked daemon (reparented, in its own session) of a hung tool dies at the timeout too. */
static void test_daemon_killed_at_timeout(void)
{
    const char *m = marker("daemon");
    run_t r = run_escape(m, "daemon", "hang", "\"timeout\": \"500ms\"");
    json_t *v = row(&r, "e1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    CU_ASSERT(gone(m, 500));
    json_decref(r.rows);
}

/* A tool that answers at once but leaves a daemon: after the call the daemon is gone. */
static void test_daemon_of_finished_call_killed(void)
{
    const char *m1 = marker("exit-setsid"), *m2 = marker("exit-daemon");
    run_t r = run_escape(m1, "setsid", "exit", "\"timeout\": \"10s\"");
    CU_ASSERT(json_is_true(json_object_get(row(&r, "e1"), "ok")));
    /* No waiting: the worker kills what the tool left before it answers. */
    CU_ASSERT(gone(m1, 0));
    json_decref(r.rows);
    r = run_escape(m2, "daemon", "exit", "\"timeout\": \"10s\"");
    CU_ASSERT(json_is_true(json_object_get(row(&r, "e1"), "ok")));
    CU_ASSERT(gone(m2, 0));
    json_decref(r.rows);
}

/*
 * A daemon that keeps the tool's stdout open does not hold the call until
 * its timeout: when the tool exits, what it left is killed, the pipe
 * closes, and the answer it wrote counts.
 */
static void test_daemon_holding_stdout(void)
{
    const char *m = marker("hold");
    run_t r = run_escape(m, "daemon", "hold", "\"timeout\": \"20s\"");
    json_t *v = row(&r, "e1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(json_is_true(json_object_get(v, "ok")));
    CU_ASSERT(json_is_object(json_object_get(v, "result")));
    CU_ASSERT(r.secs < 10.0);
    CU_ASSERT(gone(m, 0));
    json_decref(r.rows);
}

/*
 * With a kill_grace the worker gets TERM with its tool: it kills what the
 * tool left once the tool is gone, and leaves before the grace is out.
 */
static void test_grace_kills_escaped(void)
{
    const char *m = marker("grace");
    run_t r = run_escape(m, "setsid", "hang", "\"timeout\": \"300ms\", \"kill_grace\": \"5s\"");
    json_t *v = row(&r, "e1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(str(v, "error"), "Timeout");
    CU_ASSERT(r.secs < 4.0);
    CU_ASSERT(gone(m, 500));
    json_decref(r.rows);
}

/* A plugin runs in the worker: a process it setsid()s dies with the worker at the timeout. */
static void test_plugin_escape_killed(void)
{
    const char *m = marker("plugin");
    char calls[512];
    snprintf(calls, sizeof calls,
             "{\"id\": \"p1\", \"tool\": \"escape\", \"args\": {\"marker\": \"%s\", \"ms\": 100000}}\n", m);
    run_t r = run_calls(NULL,
                        "{\"tools\": [{\"name\": \"escape\", \"plugin\": {\"path\": \"@P@\"},"
                        " \"timeout\": \"500ms\", \"attempts\": 1}]}",
                        calls, 1, 0);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "p1"), "error"), "Timeout");
    CU_ASSERT(gone(m, 500));
    json_decref(r.rows);
    /* and one that returns at once leaves nothing either */
    m = marker("plugin-ok");
    snprintf(calls, sizeof calls, "{\"id\": \"p2\", \"tool\": \"escape\", \"args\": {\"marker\": \"%s\"}}\n", m);
    r = run_calls(NULL, "{\"tools\": [" PLUGIN_TOOL("escape") "]}", calls, 1, 0);
    CU_ASSERT(json_is_true(json_object_get(row(&r, "p2"), "ok")));
    CU_ASSERT(gone(m, 0));
    json_decref(r.rows);
}

/*
 * A supervisor SIGKILLed mid-call: its workers get TERM as their parent
 * dies, kill what their tools started outside their groups, then their
 * groups. Run through the toolpool program, killed for real.
 */
static void test_supervisor_killed(void)
{
    const char *m = marker("orphan");
    const char *dir = tp_test_tmpdir("orphan");
    char reg[1024];
    snprintf(reg, sizeof reg,
             "{\"tools\": [{\"name\": \"esc\", \"exec\": [\"%s/escape.sh\", \"%s\", \"daemon\", \"hang\"],"
             " \"timeout\": \"60s\"}]}",
             TP_TEST_TOOLS, m);
    char *reg_path = tp_test_write(dir, "tools.json", reg);
    char *calls_path = tp_test_write(dir, "calls.jsonl", "{\"id\": \"o1\", \"tool\": \"esc\"}\n");
    char store[1200], out[1200];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    char *argv[] = {
        TP_TEST_BIN "/toolpool", "run", "-q", "-j", "1", "--store", store, "-r", reg_path, "-o", out, calls_path, NULL};
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    CU_ASSERT(appears(m, 10000));
    kill(pid, SIGKILL);
    wait_exit(pid);
    CU_ASSERT(gone(m, 2000));
    free(reg_path);
    free(calls_path);
}

/*
 * tp_proctree_kill on a tree of our own: a child, a grandchild in a
 * session of its own and a double-forked great-grandchild, all found and
 * killed; a process that is not a descendant is left alone.
 */
static pid_t spawn_marked(const char *m, bool session)
{
    pid_t p = fork();
    if (p == 0) {
        if (session)
            setsid();
        execlp("bash", "bash", "-c", "exec -a \"$0\" sleep 300", m, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* whole: the walk through every process's stat, as where the kernel lists no children. */
static void proctree_kill(bool whole)
{
    const char *mg = marker(whole ? "wtree-g" : "tree-g"), *md = marker(whole ? "wtree-d" : "tree-d"),
               *mu = marker(whole ? "wtree-u" : "tree-u");
    pid_t c = fork();
    if (c == 0) {
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        spawn_marked(mg, true);
        pid_t mid = fork();
        if (mid == 0) {
            setsid();
            spawn_marked(md, false);
            _exit(0);
        }
        waitpid(mid, NULL, 0);
        for (;;)
            pause();
    }
    pid_t u = spawn_marked(mu, false);
    CU_ASSERT(appears(mg, 5000) && appears(md, 5000) && appears(mu, 5000));
    tp_proctree_t *t = calloc(1, sizeof *t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    t->whole = whole;
    CU_ASSERT(tp_proctree_kill(t, c) >= 0);
    CU_ASSERT(gone(mg, 1000));
    CU_ASSERT(gone(md, 1000));
    CU_ASSERT_EQUAL(count_marked(mu), 1); /* not a descendant */
    CU_ASSERT_EQUAL(kill(c, 0), 0);       /* nor the root itself */
    /*
     * Only zombies are left: nothing alive. A process killed reads as gone
     * above once its memory is freed (its cmdline empty), a moment before
     * it is a zombie, so the count may take that moment to reach 0.
     */
    int live = -1;
    for (int waited = 0; waited <= 1000 && (live = tp_proctree_kill(t, c)) != 0; waited += 10)
        usleep(10000);
    CU_ASSERT_EQUAL(live, 0);
    free(t);
    kill(c, SIGKILL);
    kill(u, SIGKILL);
    wait_exit(c);
    wait_exit(u);
}

static void test_proctree_kill(void)
{
    proctree_kill(false);
}

static void test_proctree_kill_whole(void)
{
    proctree_kill(true);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("contain", NULL, NULL);
    CU_add_test(s, "a setsid child of a hung tool dies at the timeout", test_setsid_child_killed_at_timeout);
    CU_add_test(s, "a double-forked daemon of a hung tool dies at the timeout", test_daemon_killed_at_timeout);
    CU_add_test(s, "a daemon left by a finished call is gone when it answers", test_daemon_of_finished_call_killed);
    CU_add_test(s, "a daemon holding stdout does not hold the call", test_daemon_holding_stdout);
    CU_add_test(s, "with a kill_grace the worker kills what escaped", test_grace_kills_escaped);
    CU_add_test(s, "a plugin's setsid child dies with its worker", test_plugin_escape_killed);
    CU_add_test(s, "a SIGKILLed supervisor leaves no daemon running", test_supervisor_killed);
    CU_add_test(s, "tp_proctree_kill finds every descendant and no other", test_proctree_kill);
    CU_add_test(s, "the same, reading every process's stat", test_proctree_kill_whole);
    return tp_test_run();
}
