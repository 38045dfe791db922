/*
 * The log (common/base/log.h): the text format byte for byte as it always
 * was, and every JSON line one object that jansson reads back, whatever
 * the message holds (quotes, control bytes, bytes that are not UTF-8) and
 * however long it is.
 */
#include <CUnit/Basic.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "testutil.h"

static char path[64];

/* The log file's lines so far, emptied after: a NULL-ended array of malloc'd strings. */
static char **take_lines(void)
{
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char **v = calloc(64, sizeof *v);
    size_t n = 0, cap = 0;
    char *line = NULL;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0 && n < 63) {
        v[n++] = strdup(line);
    }
    free(line);
    fclose(f);
    CU_ASSERT_EQUAL(truncate(path, 0), 0);
    return v;
}

static void free_lines(char **v)
{
    for (size_t i = 0; v[i]; i++)
        free(v[i]);
    free(v);
}

static int setup(void)
{
    char err[256];
    snprintf(path, sizeof path, "/tmp/tp-log-test-%d", (int)getpid());
    tp_log_init("prog");
    return tp_log_set_file(path, err, sizeof err);
}

static int teardown(void)
{
    char err[8];
    tp_log_set_file(NULL, err, sizeof err);
    unlink(path);
    return 0;
}

static json_t *parse(const char *line)
{
    size_t n = strlen(line);
    CU_ASSERT(n > 0 && line[n - 1] == '\n');
    json_error_t e;
    json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &e);
    if (j == NULL)
        fprintf(stderr, "not JSON (%s): %.300s\n", e.text, line);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_FATAL(json_is_object(j));
    return j;
}

static const char *str(json_t *j, const char *key)
{
    return json_string_value(json_object_get(j, key));
}

static void test_text(void)
{
    char err[64];
    CU_ASSERT_EQUAL(tp_log_set_format("text", err, sizeof err), 0);
    tp_log_error("x.failed", "it failed: %d", 7);
    tp_log_warn("x.odd", "odd \"%s\"", "thing");
    tp_log_info("x.said", "a: b");
    tp_log_call_t c = {"id1", "job1", "tool1", 2};
    tp_log_call_warn("x.call", &c, "about a call");
    tp_log_json_event(TP_LOG_WARN, "x.json_only", &c, "not in text");
    char **v = take_lines();
    CU_ASSERT_STRING_EQUAL(v[0], "prog: error: it failed: 7\n");
    CU_ASSERT_STRING_EQUAL(v[1], "prog: warning: odd \"thing\"\n");
    CU_ASSERT_STRING_EQUAL(v[2], "prog: a: b\n");
    CU_ASSERT_STRING_EQUAL(v[3], "prog: warning: about a call\n");
    CU_ASSERT_PTR_NULL(v[4]);
    free_lines(v);
}

static void test_json_fields(void)
{
    char err[64];
    CU_ASSERT_EQUAL(tp_log_set_format("json", err, sizeof err), 0);
    CU_ASSERT_EQUAL(tp_log_format(), TP_LOG_JSON);
    tp_log_error("x.failed", "it failed: %d", 7);
    tp_log_call_t c = {"id1", "", "tool1", 0};
    tp_log_call_warn("x.call", &c, "about a call");
    tp_log_call_t d = {"id2", "job2", "tool2", 3};
    tp_log_json_event(TP_LOG_INFO, "x.json_only", &d, "in JSON");
    char **v = take_lines();
    json_t *j = parse(v[0]);
    CU_ASSERT_STRING_EQUAL(str(j, "level"), "error");
    CU_ASSERT_STRING_EQUAL(str(j, "event"), "x.failed");
    CU_ASSERT_STRING_EQUAL(str(j, "message"), "it failed: 7");
    CU_ASSERT_STRING_EQUAL(str(j, "prog"), "prog");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "pid")), getpid());
    const char *t = str(j, "time");
    CU_ASSERT(t != NULL && strlen(t) == 24 && t[10] == 'T' && t[19] == '.' && t[23] == 'Z');
    CU_ASSERT_PTR_NULL(json_object_get(j, "call_id"));
    json_decref(j);
    j = parse(v[1]);
    CU_ASSERT_STRING_EQUAL(str(j, "level"), "warning");
    CU_ASSERT_STRING_EQUAL(str(j, "call_id"), "id1");
    CU_ASSERT_STRING_EQUAL(str(j, "tool"), "tool1");
    CU_ASSERT_PTR_NULL(json_object_get(j, "job"));     /* empty: left out */
    CU_ASSERT_PTR_NULL(json_object_get(j, "attempt")); /* 0: not known */
    json_decref(j);
    j = parse(v[2]);
    CU_ASSERT_STRING_EQUAL(str(j, "level"), "info");
    CU_ASSERT_STRING_EQUAL(str(j, "job"), "job2");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "attempt")), 3);
    json_decref(j);
    CU_ASSERT_PTR_NULL(v[3]);
    free_lines(v);
}

static void test_json_escapes(void)
{
    char err[64];
    CU_ASSERT_EQUAL(tp_log_set_format("json", err, sizeof err), 0);
    /* quotes, a backslash, controls, DEL, valid UTF-8, then a stray byte, an overlong form, a surrogate, a cut sequence */
    tp_log_warn("x.bytes", "%s",
                "q\"b\\n\nt\tc\x01\x1f\x7f caf\xc3\xa9 \xf0\x9f\x99\x82|\xff|\xc0\xaf|\xed\xa0\x80|\xe2\x82");
    char **v = take_lines();
    json_t *j = parse(v[0]);
    CU_ASSERT_STRING_EQUAL(str(j, "message"), "q\"b\\n\nt\tc\x01\x1f\x7f caf\xc3\xa9 \xf0\x9f\x99\x82|\xef\xbf\xbd|"
                                              "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                                              "\xef\xbf\xbd\xef\xbf\xbd");
    CU_ASSERT_PTR_NULL(strchr(v[0], '\x7f')); /* escaped, not raw */
    json_decref(j);
    free_lines(v);
}

/* A message and fields far past the line's room: cut between characters, and still one object. */
static void test_json_long(void)
{
    char err[64];
    CU_ASSERT_EQUAL(tp_log_set_format("json", err, sizeof err), 0);
    static char id[6000], msg[8000];
    memset(id, 'i', sizeof id - 1);
    for (size_t i = 0; i < sizeof msg - 1; i++)
        msg[i] = "\"\x01\xc3\xa9"[i % 4];
    tp_log_call_t c = {id, id, id, 9};
    for (int k = 0; k < 3; k++)
        tp_log_call_error("x.long", k == 0 ? &c : NULL, "%s", msg + k);
    char **v = take_lines();
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_FATAL(v[k] != NULL);
        CU_ASSERT(strlen(v[k]) + 1 <= PIPE_BUF); /* one write a pipe keeps whole, its newline included */
        json_t *j = parse(v[k]);
        const char *m = str(j, "message");
        CU_ASSERT(m != NULL && strncmp(m, msg + k, strlen(m)) == 0);
        CU_ASSERT(m != NULL && strlen(m) > 1000); /* the long id left the message its room */
        if (k == 0) {
            /* each of the call's fields cut to its share, none squeezed out */
            for (const char *const *f = (const char *const[]){"call_id", "job", "tool", NULL}; *f; f++)
                CU_ASSERT(str(j, *f) != NULL && strlen(str(j, *f)) == 256);
            CU_ASSERT(json_integer_value(json_object_get(j, "attempt")) == 9);
        }
        CU_ASSERT_STRING_EQUAL(str(j, "prog"), "prog");
        CU_ASSERT(json_is_integer(json_object_get(j, "pid")));
        json_decref(j);
    }
    free_lines(v);
}

static void test_options(void)
{
    char err[128];
    CU_ASSERT_EQUAL(tp_log_set_format("xml", err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "expected text or json, got \"xml\"");
    CU_ASSERT_EQUAL(tp_log_set_file("/nonexistent/dir/f", err, sizeof err), -1);
    CU_ASSERT(strstr(err, "/nonexistent/dir/f: ") == err);
    /* What the workers are given: the format, and the file by its absolute path. */
    CU_ASSERT_EQUAL(tp_log_set_format("json", err, sizeof err), 0);
    tp_log_export_env();
    CU_ASSERT_STRING_EQUAL(getenv("TOOLPOOL_LOG_FORMAT"), "json");
    CU_ASSERT_STRING_EQUAL(getenv("TOOLPOOL_LOG_FILE"), path);
    tp_log_from_env(1);
    CU_ASSERT_PTR_NULL(getenv("TOOLPOOL_LOG_FORMAT"));
    CU_ASSERT_PTR_NULL(getenv("TOOLPOOL_LOG_FILE"));
    CU_ASSERT_EQUAL(tp_log_format(), TP_LOG_JSON);
    CU_ASSERT_EQUAL(tp_log_set_format("text", err, sizeof err), 0);
    tp_log_export_env();
    CU_ASSERT_PTR_NULL(getenv("TOOLPOOL_LOG_FORMAT"));
    /* A bad variable is said and ignored. */
    setenv("TOOLPOOL_LOG_FORMAT", "yaml", 1);
    tp_log_from_env(1);
    CU_ASSERT_EQUAL(tp_log_format(), TP_LOG_TEXT);
    char **v = take_lines();
    CU_ASSERT_STRING_EQUAL(v[0], "prog: warning: TOOLPOOL_LOG_FORMAT: expected text or json, got \"yaml\"; ignored\n");
    free_lines(v);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("log", setup, teardown);
    CU_add_test(s, "text as it always was", test_text);
    CU_add_test(s, "json fields", test_json_fields);
    CU_add_test(s, "json escapes and bad UTF-8", test_json_escapes);
    CU_add_test(s, "json lines cut and still whole", test_json_long);
    CU_add_test(s, "formats, files and the environment", test_options);
    return tp_test_run();
}
