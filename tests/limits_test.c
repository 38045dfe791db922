/*
 * Limits, with the real toolpool binary: an id or job longer than the
 * store's keys is one call's InvalidRequest, not the run's end; args over
 * --max-args likewise; a record larger than half the store's map (over
 * 64 MiB on a new store) is committed, and served to the rerun; a store
 * that fails mid-run says so once.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "runutil.h"
#include "testutil.h"

static char dir[1024];

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* toolpool run on dir's registry, calls and store, with extra options; the exit status. */
static int run(const char *out, const char *err, const char *opt1, const char *opt2, char *const env[])
{
    char reg[1100], store[1100], calls[1100];
    path_in(reg, sizeof reg, "tools.json");
    path_in(store, sizeof store, "store");
    path_in(calls, sizeof calls, "calls.jsonl");
    char *args[] = {"run",
                    "-q",
                    "-j",
                    "2",
                    "--store",
                    store,
                    "-r",
                    reg,
                    "-o",
                    (char *)out,
                    (char *)(opt1 ? opt1 : calls),
                    (char *)(opt1 ? opt2 : NULL),
                    opt1 ? calls : NULL,
                    NULL};
    return wait_exit(spawn_toolpool(args, err, env));
}

static void setup(const char *tag, const char *registry, const char *calls)
{
    snprintf(dir, sizeof dir, "%s", tp_test_tmpdir(tag));
    char *reg = expand(registry);
    free(tp_test_write(dir, "tools.json", reg));
    free(reg);
    free(tp_test_write(dir, "calls.jsonl", calls));
}

static const char *kind_of(json_t *rows, const char *id)
{
    return json_string_value(json_object_get(json_object_get(rows, id), "error"));
}

static void test_long_keys_and_args(void)
{
    tp_buf_t calls = {0};
    char long_id[601], long_job[701];
    memset(long_id, 'i', 600);
    long_id[600] = 0;
    memset(long_job, 'j', 700);
    long_job[700] = 0;
    tp_buf_printf(&calls, "{\"id\": \"%s\", \"tool\": \"noop\"}\n", long_id);
    tp_buf_printf(&calls, "{\"id\": \"k2\", \"job\": \"%s\", \"tool\": \"noop\"}\n", long_job);
    tp_buf_printf(&calls, "{\"id\": \"k3\", \"tool\": \"echo\", \"args\": {\"s\": \"%0*d\"}}\n", 3000, 0);
    tp_buf_printf(&calls, "{\"id\": \"k4\", \"tool\": \"noop\"}\n");
    tp_buf_append(&calls, "", 1);
    setup("limits-keys", "{\"tools\": [" PLUGIN_TOOL("noop") "," PLUGIN_TOOL("echo") "]}", (char *)calls.data);
    tp_buf_free(&calls);
    char out[1100], err[1100];
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    for (int round = 0; round < 2; round++) { /* the rerun too: nothing long was recorded */
        CU_ASSERT_EQUAL(run(out, err, "--max-args", "2000", NULL), 1);
        int lines;
        json_t *rows = load_results(out, &lines);
        CU_ASSERT_EQUAL(lines, 4);
        CU_ASSERT_STRING_EQUAL(kind_of(rows, long_id), "InvalidRequest");
        CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(rows, long_id), "message")),
                                      "\"id\" is 600 bytes; the store takes ids and job names of at most 511"));
        CU_ASSERT_STRING_EQUAL(kind_of(rows, "k2"), "InvalidRequest");
        CU_ASSERT_STRING_EQUAL(kind_of(rows, "k3"), "InvalidRequest");
        CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(rows, "k3"), "message")),
                                      "over the 2000-byte limit (--max-args)"));
        CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(rows, "k4"), "ok")));
        json_decref(rows);
    }
}

static void test_record_larger_than_half_the_map(void)
{
    /* 66 MB of result: more than half of a new store's 64 MiB map. */
    setup("limits-big",
          "{\"tools\": [{\"name\": \"big\", \"plugin\": {\"path\": \"@P@\"}, \"max_output\": 100000000,"
          " \"timeout\": \"60s\"}, " PLUGIN_TOOL("noop") "]}",
          "{\"id\": \"b1\", \"tool\": \"big\", \"args\": {\"n\": 66000000}}\n"
          "{\"id\": \"b2\", \"tool\": \"noop\"}\n");
    char out[1100], err[1100];
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    CU_ASSERT_EQUAL(run(out, err, "--max-frame", "134217728", NULL), 0);
    size_t first_len;
    char *first = tp_test_slurp(out, &first_len);
    CU_ASSERT_TRUE(first_len > 66000000);
    /* The rerun serves both from the store: the same bytes, in whichever order they ended. */
    CU_ASSERT_EQUAL(run(out, err, "--max-frame", "134217728", NULL), 0);
    size_t again_len;
    char *again = tp_test_slurp(out, &again_len);
    CU_ASSERT_EQUAL(again_len, first_len);
    char *msg = tp_test_slurp(err, NULL);
    CU_ASSERT_STRING_EQUAL(msg ? msg : "?", "");
    free(msg);
    free(first);
    free(again);
}

/* A store that fails mid-run (its size limit): one error message, not one per later write. */
static void test_one_failure_one_message(void)
{
    tp_buf_t calls = {0};
    /* Many results a turn, so several writes of one turn meet the full map (ten messages, once). */
    for (int i = 0; i < 3000; i++)
        tp_buf_printf(&calls, "{\"id\": \"f%d\", \"tool\": \"big\", \"args\": {\"n\": 2000, \"i\": %d}}\n", i, i);
    tp_buf_append(&calls, "", 1);
    setup("limits-fail", "{\"tools\": [" PLUGIN_TOOL("big") "]}", (char *)calls.data);
    tp_buf_free(&calls);
    char out[1100], err[1100];
    path_in(out, sizeof out, "out.jsonl");
    path_in(err, sizeof err, "err.txt");
    char *env[] = {"TOOLPOOL_STORE_LIMIT=1048576", NULL};
    CU_ASSERT_EQUAL(run(out, err, NULL, NULL, env), 2);
    char *msg = tp_test_slurp(err, NULL);
    int errors = 0;
    for (char *p = msg; p && (p = strstr(p, "error:")) != NULL; p++)
        errors++;
    CU_ASSERT_EQUAL(errors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg ? msg : "", "size limit"));
    if (errors != 1)
        fprintf(stderr, "limits_test: stderr was:\n%s\n", msg);
    free(msg);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("limits", NULL, NULL);
    CU_add_test(s, "long ids and jobs, long args: one call's InvalidRequest", test_long_keys_and_args);
    CU_add_test(s, "a record larger than half the map is committed and served", test_record_larger_than_half_the_map);
    CU_add_test(s, "a store failure says so once", test_one_failure_one_message);
    return tp_test_run();
}
