/*
 * One shard of a batch (supervisor/front/shard.h): --shard's values and
 * the schedulers' variables as a table, the hash pinned (a job's shard is
 * part of the contract: it must not move between versions), which lines a
 * shard takes, and the scan of a calls file against a plain count.
 */
#include <CUnit/Basic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "shard.h"
#include "testutil.h"

static const char *const vars[] = {"SLURM_ARRAY_TASK_ID",    "SLURM_ARRAY_TASK_MIN",  "SLURM_ARRAY_TASK_MAX",
                                   "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP", "JOB_COMPLETION_INDEX"};

/* The environment as "NAME=value" pairs (NULL-ended), every other variable of vars unset. */
static void set_env(const char *const *pairs)
{
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    for (; pairs && *pairs; pairs++) {
        char name[64];
        const char *eq = strchr(*pairs, '=');
        memcpy(name, *pairs, (size_t)(eq - *pairs));
        name[eq - *pairs] = 0;
        setenv(name, eq + 1, 1);
    }
}

static void test_parse(void)
{
    static const struct {
        const char *spec;
        const char *env[5];
        int rc;
        unsigned k, n;
        const char *words; /* in the message of a refusal */
    } cases[] = {
        {"0/1", {NULL}, 0, 0, 1, NULL},
        {"3/4", {NULL}, 0, 3, 4, NULL},
        {"999999/1000000", {NULL}, 0, 999999, 1000000, NULL},
        {"4/4", {NULL}, -1, 0, 0, "K must be below N"},
        {"1/0", {NULL}, -1, 0, 0, "between 1 and"},
        {"0/1000001", {NULL}, -1, 0, 0, "between 1 and"},
        {"-1/4", {NULL}, -1, 0, 0, "expected K/N"},
        {"1/4x", {NULL}, -1, 0, 0, "expected K/N"},
        {"1/", {NULL}, -1, 0, 0, "expected K/N"},
        {"", {NULL}, -1, 0, 0, "expected K/N"},
        {"slurm", {"SLURM_ARRAY_TASK_ID=2", "SLURM_ARRAY_TASK_COUNT=4"}, 0, 2, 4, NULL},
        {"slurm", {"SLURM_ARRAY_TASK_ID=4", "SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_MAX=4"}, 0, 3, 4, NULL},
        {"slurm",
         {"SLURM_ARRAY_TASK_ID=6", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=6", "SLURM_ARRAY_TASK_STEP=2"},
         0,
         3,
         4,
         NULL},
        {"slurm", {"SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_COUNT=3"}, 0, 0, 3, NULL},
        {"slurm", {NULL}, -1, 0, 0, "SLURM_ARRAY_TASK_ID"},
        {"slurm", {"SLURM_ARRAY_TASK_ID=1"}, -1, 0, 0, "SLURM_ARRAY_TASK_COUNT"},
        {"slurm", {"SLURM_ARRAY_TASK_ID=x", "SLURM_ARRAY_TASK_COUNT=3"}, -1, 0, 0, "not a whole number"},
        {"slurm", {"SLURM_ARRAY_TASK_ID=3", "SLURM_ARRAY_TASK_COUNT=3"}, -1, 0, 0, "K must be below N"},
        {"slurm",
         {"SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_MAX=4"},
         -1,
         0,
         0,
         "not in the array"},
        {"k8s/4", {"JOB_COMPLETION_INDEX=3"}, 0, 3, 4, NULL},
        {"k8s/4", {NULL}, -1, 0, 0, "JOB_COMPLETION_INDEX is not set"},
        {"k8s/4", {"JOB_COMPLETION_INDEX=4"}, -1, 0, 0, "K must be below N"},
        {"k8s/4", {"JOB_COMPLETION_INDEX=-1"}, -1, 0, 0, "not a whole number"},
        {"k8s", {"JOB_COMPLETION_INDEX=0"}, -1, 0, 0, "expected K/N"},
        {"k8s/0", {"JOB_COMPLETION_INDEX=0"}, -1, 0, 0, "expected k8s/N"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        set_env(cases[i].env);
        tp_shard_t sh = {7, 7};
        char err[256] = "";
        int rc = tp_shard_parse(cases[i].spec, &sh, err, sizeof err);
        CU_ASSERT_EQUAL(rc, cases[i].rc);
        if (rc != cases[i].rc)
            fprintf(stderr, "case %zu (%s): %d, %s\n", i, cases[i].spec, rc, err);
        if (rc == 0) {
            CU_ASSERT_EQUAL(sh.index, cases[i].k);
            CU_ASSERT_EQUAL(sh.count, cases[i].n);
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].words));
            CU_ASSERT(sh.index == 7 && sh.count == 7); /* left alone */
        }
    }
    set_env(NULL);
}

/* The values a store's shard depends on: changing them moves every job of a sharded store. */
static void test_hash_pinned(void)
{
    CU_ASSERT_EQUAL(tp_shard_of("j0", 2, 16), 2);
    CU_ASSERT_EQUAL(tp_shard_of("j1", 2, 16), 15);
    CU_ASSERT_EQUAL(tp_shard_of("agent-7", 7, 16), 7);
    CU_ASSERT_EQUAL(tp_shard_of("c41", 3, 16), 6);
    CU_ASSERT_EQUAL(tp_shard_of("j0", 2, 1000), 234);
    CU_ASSERT_EQUAL(tp_shard_of("j0", 2, 1), 0);
}

static void test_takes(void)
{
    tp_shard_t s0 = {0, 16}, s2 = {2, 16};
    tp_request_t rq = {.id = "c1", .job = "j0"};
    CU_ASSERT_TRUE(tp_shard_takes(&s2, TP_REQUEST_CALL, &rq, NULL));
    CU_ASSERT_FALSE(tp_shard_takes(&s0, TP_REQUEST_CALL, &rq, NULL));
    tp_request_t solo = {.id = "j0"}; /* no job: its id is its job */
    CU_ASSERT_TRUE(tp_shard_takes(&s2, TP_REQUEST_CALL, &solo, NULL));
    tp_request_bad_t named = {.id = "x", .job = "j0"}, nameless = {0};
    CU_ASSERT_TRUE(tp_shard_takes(&s2, TP_REQUEST_BAD, NULL, &named));
    CU_ASSERT_TRUE(tp_shard_takes(&s0, TP_REQUEST_BAD, NULL, &nameless));
    CU_ASSERT_FALSE(tp_shard_takes(&s2, TP_REQUEST_BAD, NULL, &nameless));
    CU_ASSERT_FALSE(tp_shard_takes(&s0, TP_REQUEST_BLANK, NULL, NULL));
    CU_ASSERT_TRUE(tp_shard_takes(NULL, TP_REQUEST_CALL, &rq, NULL));
}

static void test_scan(void)
{
    const char *dir = tp_test_tmpdir("shardspec");
    /* 2000 calls of 200 jobs, a refusal with an id, one without, blank lines, a last line with no newline. */
    tp_buf_t text = {0};
    unsigned want[4] = {0};
    for (int i = 0; i < 2000; i++) {
        char line[128], job[16];
        snprintf(job, sizeof job, "j%d", i % 200);
        snprintf(line, sizeof line, "{\"id\": \"c%d\", \"job\": \"%s\", \"step\": %d, \"tool\": \"echo\"}\n", i, job,
                 i / 200 + 1);
        tp_buf_puts(&text, line);
        want[tp_shard_of(job, strlen(job), 4)]++;
    }
    tp_buf_puts(&text, "\n   \n{\"id\": \"bad\", \"tool\": 7}\nnot json\n{\"id\": \"last\", \"tool\": \"echo\"}");
    want[tp_shard_of("bad", 3, 4)]++;
    want[tp_shard_of("last", 4, 4)]++;
    tp_buf_puts(&text, "");
    char *path = tp_test_write(dir, "calls.jsonl", "");
    int fd = open(path, O_RDWR | O_TRUNC);
    CU_ASSERT_EQUAL(write(fd, text.data, text.len), (ssize_t)text.len);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text.data, text.len));
    unsigned sum = 0;
    for (uint32_t k = 0; k < 4; k++) {
        tp_shard_t sh = {k, 4};
        tp_shard_input_t in;
        CU_ASSERT_EQUAL(tp_shard_scan(fd, path, &sh, 1 << 20, &in), 0);
        CU_ASSERT_EQUAL(in.lines, 2003);
        CU_ASSERT_EQUAL(in.own, want[k]);
        CU_ASSERT_EQUAL(memcmp(in.digest, c.digest, 16), 0);
        sum += (unsigned)in.own;
    }
    CU_ASSERT_EQUAL(sum, 2002); /* every line with an id in one shard; "not json" in none */
    /* A line longer than the limit is one no shard records. */
    tp_shard_input_t in;
    tp_shard_t s0 = {0, 4};
    CU_ASSERT_EQUAL(tp_shard_scan(fd, path, &s0, 40, &in), 0);
    CU_ASSERT_EQUAL(in.lines, 2003);
    CU_ASSERT(in.own < want[0]);
    close(fd);
    free(path);
    tp_buf_free(&text);
    tp_test_rmtree(dir);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("shard", NULL, NULL);
    CU_add_test(s, "--shard's values and the schedulers' variables", test_parse);
    CU_add_test(s, "a job's shard is pinned", test_hash_pinned);
    CU_add_test(s, "which lines a shard takes", test_takes);
    CU_add_test(s, "the scan of a calls file", test_scan);
    return tp_test_run();
}
