/*
 * damage_test: what keeps a store whole, and what a damaged one does.
 *
 * The real `toolpool` binary is run as a child, as a user runs it: with its
 * standard streams closed (the store must not take their numbers), on a
 * store whose records were damaged in place by a small LMDB write here
 * (`store check` must find them; a rerun must name the call, never print
 * the damaged bytes).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <lmdb.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define TOOLPOOL TP_TEST_BIN "/toolpool"

extern char **environ;

#define EXPECT_INT(a, b)                                                                                               \
    do {                                                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                            \
        if (a_ != b_)                                                                                                  \
            fprintf(stderr, "\n  %s:%d: %s is %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_);                 \
        CU_assertImplementation(a_ == b_, __LINE__, #a " == " #b, __FILE__, "", CU_FALSE);                             \
    } while (0)

#define EXPECT_HAS(hay, needle)                                                                                        \
    do {                                                                                                               \
        const char *h_ = (hay), *n_ = (needle);                                                                        \
        bool in_ = h_ != NULL && strstr(h_, n_) != NULL;                                                               \
        if (!in_)                                                                                                      \
            fprintf(stderr, "\n  %s:%d: %s lacks \"%s\": \"%s\"\n", __FILE__, __LINE__, #hay, n_, h_ ? h_ : "(null)"); \
        CU_assertImplementation(in_, __LINE__, #hay " contains " #needle, __FILE__, "", CU_FALSE);                     \
    } while (0)

/* ---- running toolpool ---- */

typedef struct {
    int status; /* exit status; 128 + signal; -1: did not end in time */
    char *out;  /* what it wrote (NULL when stdout was closed) */
    char *err;
} run_t;

static void run_free(run_t *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/*
 * Runs `toolpool ARGS...` in dir, its store dir/store (TOOLPOOL_STORE), with
 * stdout and stderr to dir/TAG.out and dir/TAG.err; closed_std closes
 * stdin and stdout instead of giving it /dev/null and the file. Waits up
 * to timeout_ms (then kills it). Returns the exit status.
 */
static int run_tp(run_t *r, const char *dir, const char *tag, const char *const *args, bool closed_std,
                  unsigned timeout_ms)
{
    memset(r, 0, sizeof *r);
    r->status = -1;
    char out_path[4200], err_path[4200], store[4200];
    snprintf(out_path, sizeof out_path, "%s/%s.out", dir, tag);
    snprintf(err_path, sizeof err_path, "%s/%s.err", dir, tag);
    snprintf(store, sizeof store, "TOOLPOOL_STORE=%s/store", dir);
    const char *argv[32] = {TOOLPOOL};
    size_t na = 1;
    for (; args[na - 1] && na < 31; na++)
        argv[na] = args[na - 1];
    argv[na] = NULL;
    size_t ne = 0;
    while (environ[ne])
        ne++;
    const char **envp = calloc(ne + 2, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "TOOLPOOL_", 9) != 0)
            envp[k++] = environ[i];
    envp[k++] = store;
    envp[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (closed_std) {
        posix_spawn_file_actions_addclose(&fa, 0);
        posix_spawn_file_actions_addclose(&fa, 1);
    } else {
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, TOOLPOOL, &fa, NULL, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn %s: %s\n", TOOLPOOL, strerror(rc));
        return -1;
    }
    int st;
    unsigned waited = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && waited < timeout_ms) {
        sleep_ms(10);
        waited += 10;
    }
    if (w != pid) {
        fprintf(stderr, "\n  toolpool %s still running after %u ms: killed\n", tag, timeout_ms);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    } else {
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    r->out = closed_std ? NULL : tp_test_slurp(out_path, NULL);
    r->err = tp_test_slurp(err_path, NULL);
    return r->status;
}

/* Shows what a run said, when the test that ran it has failed. */
static void run_dump_if_failed(const run_t *r, unsigned failures_before)
{
    if (CU_get_number_of_failures() == failures_before)
        return;
    fprintf(stderr, "\n  --- toolpool exit status %d; stdout:\n%s\n  --- stderr:\n%s\n  ---\n", r->status,
            r->out ? r->out : "(none)", r->err ? r->err : "(none)");
}

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

static char *write_registry(const char *dir)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"tools\": [\n"
             "  {\"name\": \"echo\", \"plugin\": {\"path\": \"%1$s\"}},\n"
             "  {\"name\": \"deny\", \"plugin\": {\"path\": \"%1$s\"},\n"
             "   \"breaker\": {\"same_call\": {\"failures\": 1}}}\n"
             " ]}\n",
             TP_TEST_PLUGIN);
    return tp_test_write(dir, "tools.json", text);
}

/* Calls c1..c5 of echo, each its own job, and j1: two steps of echo, then a denied call. */
static char *write_calls(const char *dir)
{
    return tp_test_write(dir, "calls.jsonl",
                         "{\"id\": \"c1\", \"tool\": \"echo\", \"args\": {\"n\": 1}}\n"
                         "{\"id\": \"c2\", \"tool\": \"echo\", \"args\": {\"n\": 2}}\n"
                         "{\"id\": \"c3\", \"tool\": \"echo\", \"args\": {\"n\": 3}}\n"
                         "{\"id\": \"c4\", \"tool\": \"echo\", \"args\": {\"n\": 4}}\n"
                         "{\"id\": \"c5\", \"tool\": \"echo\", \"args\": {\"n\": 5}}\n"
                         "{\"id\": \"s1\", \"job\": \"j1\", \"step\": 1, \"tool\": \"echo\", \"args\": {\"s\": 1}}\n"
                         "{\"id\": \"s2\", \"job\": \"j1\", \"step\": 2, \"tool\": \"echo\", \"args\": {\"s\": 2}}\n"
                         "{\"id\": \"s3\", \"job\": \"j1\", \"step\": 3, \"tool\": \"deny\", \"args\": {}}\n");
}

/*
 * Every line of text is a JSON object (a test failure for each that is
 * not); returns how many there are, and how many of them are ok.
 */
static size_t json_lines(const char *text, size_t *ok)
{
    size_t n = 0;
    *ok = 0;
    const char *s = text ? text : "";
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        json_t *v = json_loadb(s, len, 0, NULL);
        if (v == NULL || !json_is_object(v)) {
            fprintf(stderr, "\n  not a JSON object line: %.*s\n", (int)len, s);
            CU_FAIL("output line is not a JSON object");
        } else {
            n++;
            *ok += json_is_true(json_object_get(v, "ok"));
        }
        json_decref(v);
        s += len + (nl ? 1 : 0);
    }
    return n;
}

/* ---- closed standard streams ---- */

/*
 * Started with stdin and stdout closed, toolpool must not let the store's
 * files take fds 0 and 1: its result lines would be written over the
 * store (a rerun, which serves recorded results before it writes anything
 * of its own, wrote them over data.mdb's first page). A run and a rerun
 * with the streams closed; then the next run, with its streams open, must
 * find the store whole and serve every recorded result.
 */
static void test_closed_std_streams(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("store-closedfds");
    char *reg = write_registry(dir), *calls = write_calls(dir);
    run_t r;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    EXPECT_INT(run_tp(&r, dir, "closed", args, true, 30000), 1); /* s3 is denied */
    run_dump_if_failed(&r, f0);
    run_free(&r);
    f0 = CU_get_number_of_failures();
    EXPECT_INT(run_tp(&r, dir, "closed-rerun", args, true, 30000), 1);
    run_dump_if_failed(&r, f0);
    run_free(&r);

    f0 = CU_get_number_of_failures();
    EXPECT_INT(run_tp(&r, dir, "rerun", args, false, 30000), 1);
    size_t ok, n = json_lines(r.out, &ok);
    EXPECT_INT(n, 8);
    EXPECT_INT(ok, 7);
    EXPECT_HAS(r.err, "resumed: 8 recorded results");
    run_dump_if_failed(&r, f0);
    run_free(&r);
    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

/* ---- damaged records ---- */

/*
 * Damages the store as a bad disk or a stray write would, with LMDB's own
 * API: the record of results/c2 keeps its framing but has bytes of its
 * result overwritten (so it still unpacks), and jobs/j1 becomes garbage.
 */
static void damage(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/store", dir);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi results, jobs, steps;
    CU_ASSERT_EQUAL_FATAL(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 16);
    CU_ASSERT_EQUAL_FATAL(mdb_env_open(env, path, 0, 0644), 0);
    CU_ASSERT_EQUAL_FATAL(mdb_txn_begin(env, NULL, 0, &txn), 0);
    CU_ASSERT_EQUAL_FATAL(mdb_dbi_open(txn, "results", 0, &results), 0);
    CU_ASSERT_EQUAL_FATAL(mdb_dbi_open(txn, "jobs", 0, &jobs), 0);
    MDB_val k = {2, "c2"}, v;
    CU_ASSERT_EQUAL_FATAL(mdb_get(txn, results, &k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    /* echo's result holds its args: the first {"n":2} is in the result, which is packed first */
    uint8_t *result = memmem(copy, v.mv_size, "{\"n\":2}", 7);
    CU_ASSERT_PTR_NOT_NULL_FATAL(result);
    memcpy(result, "\xff\xfe\x01Z", 4);
    v.mv_data = copy;
    CU_ASSERT_EQUAL(mdb_put(txn, results, &k, &v, 0), 0);
    free(copy);
    MDB_val jk = {2, "j1"}, junk = {6, "\xff\xff\xff\xff\x0a\x01"};
    CU_ASSERT_EQUAL(mdb_put(txn, jobs, &jk, &junk, 0), 0);
    /* a list position of j1's message list: 3 bytes, not 8 */
    CU_ASSERT_EQUAL_FATAL(mdb_dbi_open(txn, "steps", 0, &steps), 0);
    MDB_cursor *cur;
    CU_ASSERT_EQUAL_FATAL(mdb_cursor_open(txn, steps, &cur), 0);
    uint8_t ik[64];
    MDB_val sk = {1, "i"}, sv;
    CU_ASSERT_EQUAL_FATAL(mdb_cursor_get(cur, &sk, &sv, MDB_SET_RANGE), 0);
    CU_ASSERT_FATAL(sk.mv_size <= sizeof ik && ((uint8_t *)sk.mv_data)[0] == 'i');
    memcpy(ik, sk.mv_data, sk.mv_size);
    mdb_cursor_close(cur);
    sk.mv_data = ik;
    MDB_val short_pos = {3, "\x00\x00\x01"};
    CU_ASSERT_EQUAL(mdb_put(txn, steps, &sk, &short_pos, 0), 0);
    CU_ASSERT_EQUAL(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/*
 * A store with damaged records: `store check` finds each of them, by
 * database and key, with what is wrong; a rerun stops with an error that
 * names the call and the store instead of writing the damaged line out;
 * the inspection commands name the record, and print none of its bytes.
 */
static void test_damaged_records(void)
{
    unsigned f0 = CU_get_number_of_failures(), f_start = f0;
    const char *dir = tp_test_tmpdir("store-damaged");
    char *reg = write_registry(dir), *calls = write_calls(dir), store[4200];
    snprintf(store, sizeof store, "%s/store", dir);
    run_t r;
    const char *args[] = {"run", "--registry", reg, "-j", "2", calls, NULL};
    EXPECT_INT(run_tp(&r, dir, "run", args, false, 30000), 1);
    run_dump_if_failed(&r, f0);
    run_free(&r);

    f0 = CU_get_number_of_failures();
    const char *check[] = {"store", "check", "--store", store, NULL};
    EXPECT_INT(run_tp(&r, dir, "check", check, false, 10000), 0);
    EXPECT_HAS(r.out, "all sound (meta 3, results 8, jobs 1, steps 6, inflight 0, breakers 1, escalations 1, tasks 0)");
    run_dump_if_failed(&r, f0);
    run_free(&r);

    damage(dir);

    f0 = CU_get_number_of_failures();
    EXPECT_INT(run_tp(&r, dir, "check-damaged", check, false, 10000), 1);
    EXPECT_HAS(r.out, "store: results \"c2\": its result is not JSON on one line\n");
    EXPECT_HAS(r.out, "store: jobs \"j1\": it does not unpack as a Checkpoint (6 bytes)\n");
    EXPECT_HAS(r.out, "store: steps \"i\\x");
    EXPECT_HAS(r.out, "\": a list position is not 8 bytes of a number above 0\n");
    EXPECT_HAS(r.out, "3 bad records of 20");
    CU_ASSERT(memmem(r.out, strlen(r.out), "\xff\xfe", 2) == NULL);
    run_dump_if_failed(&r, f0);
    run_free(&r);

    /* The rerun: an error naming the call and the store; no line of the damaged record. */
    f0 = CU_get_number_of_failures();
    EXPECT_INT(run_tp(&r, dir, "rerun", args, false, 30000), 2);
    EXPECT_HAS(r.err, "results \"c2\": its result is not JSON on one line");
    EXPECT_HAS(r.err, store);
    size_t ok;
    json_lines(r.out, &ok);
    CU_ASSERT(r.out && memmem(r.out, strlen(r.out), "\xff\xfe", 2) == NULL);
    run_dump_if_failed(&r, f0);
    run_free(&r);

    f0 = CU_get_number_of_failures();
    const char *trace[] = {"trace", "--store", store, "c2", NULL};
    EXPECT_INT(run_tp(&r, dir, "trace", trace, false, 10000), 2);
    EXPECT_HAS(r.err, "call c2: a corrupt record: results \"c2\"");
    CU_ASSERT(r.out && r.out[0] == 0);
    run_dump_if_failed(&r, f0);
    run_free(&r);

    f0 = CU_get_number_of_failures();
    const char *list[] = {"checkpoints", "list", "--store", store, NULL};
    EXPECT_INT(run_tp(&r, dir, "checkpoints", list, false, 10000), 2);
    EXPECT_HAS(r.err, "jobs \"j1\": a corrupt record: it does not unpack as a Checkpoint");
    run_dump_if_failed(&r, f0);
    run_free(&r);

    free(reg);
    free(calls);
    cleanup_dir(dir, f_start);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("damage", NULL, NULL);
    CU_add_test(s, "closed standard streams leave the store whole", test_closed_std_streams);
    CU_add_test(s, "damaged records: store check finds them, a rerun names them", test_damaged_records);
    return tp_test_run();
}
