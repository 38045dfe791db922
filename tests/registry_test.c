/*
 * The registry: durations, JSON line positions, a full valid tools.json
 * (defaults inherited, tools overriding), and every kind of rejection with
 * its exact FILE:LINE: KEYPATH prefix. The fixtures number their lines in
 * comments; the line numbers asserted below are those.
 */
#include "jsonpos.h"
#include "jsonschema.h"
#include "registry.h"
#include "taxonomy.h"
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *tmpdir; /* one directory for every fixture of the run */

static int suite_init(void)
{
    tmpdir = strdup(tp_test_tmpdir("registry"));
    return tmpdir == NULL;
}

static int suite_clean(void)
{
    free(tmpdir);
    return 0;
}

/* Writes json to tmpdir/name and loads it; *path gets the malloc'd path. */
static tp_registry_t *load(const char *name, const char *json, char **path, char *err, size_t errlen)
{
    *path = tp_test_write(tmpdir, name, json);
    return tp_registry_load(*path, err, errlen);
}

/*
 * Loads json expecting a rejection that starts "PATH:LINE: KEYPATH: " (no
 * "KEYPATH: " when keypath is NULL) and whose rest contains needle. On a
 * mismatch prints the caller's line, what came and what was wanted.
 */
static void expect_error_at(const char *src, int srcline, const char *json, int line, const char *keypath,
                            const char *needle)
{
    char err[1024], want[1024], *path;
    static int seq;
    char name[64];
    snprintf(name, sizeof name, "bad%d.json", ++seq);
    tp_registry_t *reg = load(name, json, &path, err, sizeof err);
    CU_ASSERT_PTR_NULL(reg);
    tp_registry_free(reg);
    if (keypath != NULL)
        snprintf(want, sizeof want, "%s:%d: %s: ", path, line, keypath);
    else
        snprintf(want, sizeof want, "%s:%d: ", path, line);
    bool prefix = strncmp(err, want, strlen(want)) == 0;
    bool rest = prefix && strstr(err + strlen(want), needle) != NULL;
    CU_ASSERT(prefix);
    CU_ASSERT(rest);
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    if (!prefix || !rest || strchr(err, '\n') != NULL)
        fprintf(stderr, "\n%s:%d:\n  got:  %s\n  want: %s...%s...\n", src, srcline, err, want, needle);
    free(path);
}
#define EXPECT_ERROR(json, line, keypath, needle)                                                                      \
    expect_error_at(__FILE__, __LINE__, (json), (line), (keypath), (needle))

/* The whole message after "PATH:", exactly. */
static void expect_exact_at(const char *src, int srcline, const char *json, const char *tail)
{
    char err[1024], want[1024], *path;
    tp_registry_t *reg = load("exact.json", json, &path, err, sizeof err);
    CU_ASSERT_PTR_NULL(reg);
    tp_registry_free(reg);
    snprintf(want, sizeof want, "%s:%s", path, tail);
    CU_ASSERT_STRING_EQUAL(err, want);
    if (strcmp(err, want) != 0)
        fprintf(stderr, "\n%s:%d:\n  got:  %s\n  want: %s\n", src, srcline, err, want);
    free(path);
}
#define EXPECT_EXACT(json, tail) expect_exact_at(__FILE__, __LINE__, (json), (tail))

/* ---- durations ---- */

static void test_duration_valid(void)
{
    static const struct {
        const char *s;
        uint64_t us;
        /* clang-format off */
    } ok[] = {
        {"8s", 8000000},     {"250ms", 250000}, {"1.5s", 1500000},   {"10m", 600000000},
        {"1h", 3600000000u}, {"100us", 100},    {"0s", 0},           {"0", 0},
        {"0.1s", 100000},    {"2.5ms", 2500},   {"0.5s", 500000},    {"1.25h", 4500000000u},
        {"08s", 8000000},    {"0ms", 0},        {"30s", 30000000},   {"1.0000001s", 1000000},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t us = 12345;
        int rc = tp_duration_parse(ok[i].s, &us);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(us, ok[i].us);
        if (rc != 0 || us != ok[i].us)
            fprintf(stderr, "\n  %s -> rc %d, %llu us\n", ok[i].s, rc, (unsigned long long)us);
    }
}

static void test_duration_invalid(void)
{
    /* clang-format off */
    static const char *const bad[] = {
        "",    "8",     "1.5",  "s",    "8 s",  " 8s",  "8s ", "-1s", "+1s",
        "1.s", ".5s",   "8sec", "8S",   "1d",   "00",   "1e3s", "ms", "0.0",
        "1ns", "5 m",   "1h30m", "0x10s", "99999999999999999999h", "18446744073709551616us",
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t us = 777;
        int rc = tp_duration_parse(bad[i], &us);
        CU_ASSERT_EQUAL(rc, TP_EINVAL);
        CU_ASSERT_EQUAL(us, 777);
        if (rc != TP_EINVAL)
            fprintf(stderr, "\n  \"%s\" accepted as %llu us\n", bad[i], (unsigned long long)us);
    }
    uint64_t us;
    CU_ASSERT_EQUAL(tp_duration_parse(NULL, &us), TP_EINVAL);
}

/* ---- JSON line positions ---- */

/* clang-format off */
static const char POS_TEXT[] =
    "{\n"                                   /* 1 */
    "  \"a\": 1,\n"                         /* 2 */
    "  \"b\": {\n"                          /* 3 */
    "    \"c\": [10,\n"                     /* 4 */
    "      {\"d\": \"x}]\\\"y\"},\n"        /* 5 */
    "      [1, 2]\n"                        /* 6 */
    "    ]\n"                               /* 7 */
    "  },\n"                                /* 8 */
    "  \"e/f\": {\"g~h\": true},\n"         /* 9 */
    "  \"esc\\u00e9\\n\": null,\n"          /* 10 */
    "  \"\": 5,\n"                          /* 11 */
    "  \"\\ud83d\\ude00\": \"smile\",\n"    /* 12 */
    "  \"s\": \"\\\"t\\\": {[\",\n"         /* 13 */
    "  \"t\":\n"                            /* 14 */
    "    [\n"                               /* 15 */
    "      {}, [], \"\", -1.5e3,\n"         /* 16 */
    "      false\n"                         /* 17 */
    "    ]\n"                               /* 18 */
    "}\n";                                  /* 19 */
/* clang-format on */

static int pos(const char *pointer)
{
    return tp_json_line(POS_TEXT, sizeof POS_TEXT - 1, pointer);
}

static void test_jsonpos_found(void)
{
    CU_ASSERT_EQUAL(pos(""), 1);
    CU_ASSERT_EQUAL(pos("/a"), 2);
    CU_ASSERT_EQUAL(pos("/b"), 3);
    CU_ASSERT_EQUAL(pos("/b/c"), 4);
    CU_ASSERT_EQUAL(pos("/b/c/0"), 4);
    CU_ASSERT_EQUAL(pos("/b/c/1"), 5);
    CU_ASSERT_EQUAL(pos("/b/c/1/d"), 5);
    CU_ASSERT_EQUAL(pos("/b/c/2"), 6);
    CU_ASSERT_EQUAL(pos("/b/c/2/1"), 6);
    CU_ASSERT_EQUAL(pos("/e~1f"), 9);
    CU_ASSERT_EQUAL(pos("/e~1f/g~0h"), 9);
    CU_ASSERT_EQUAL(pos("/esc\xc3\xa9\n"), 10);
    CU_ASSERT_EQUAL(pos("/"), 11);
    CU_ASSERT_EQUAL(pos("/\xf0\x9f\x98\x80"), 12);
    CU_ASSERT_EQUAL(pos("/s"), 13);
    /* a key's line, not its value's */
    CU_ASSERT_EQUAL(pos("/t"), 14);
    CU_ASSERT_EQUAL(pos("/t/0"), 16);
    CU_ASSERT_EQUAL(pos("/t/3"), 16);
    CU_ASSERT_EQUAL(pos("/t/4"), 17);
}

static void test_jsonpos_missing(void)
{
    CU_ASSERT_EQUAL(pos("/zz"), 0);
    CU_ASSERT_EQUAL(pos("/d"), 0);      /* only nested */
    CU_ASSERT_EQUAL(pos("/a/x"), 0);    /* into a scalar */
    CU_ASSERT_EQUAL(pos("/b/c/3"), 0);  /* past the end */
    CU_ASSERT_EQUAL(pos("/b/c/01"), 0); /* leading zero */
    CU_ASSERT_EQUAL(pos("/b/c/-"), 0);  /* "-" names nothing yet */
    CU_ASSERT_EQUAL(pos("/b/c/x"), 0);
    CU_ASSERT_EQUAL(pos("/b/c/99999999999999999999999"), 0);
    CU_ASSERT_EQUAL(pos("/e/f"), 0);      /* "e/f" needs ~1 */
    CU_ASSERT_EQUAL(pos("/e~1f/g~h"), 0); /* bad escape */
    CU_ASSERT_EQUAL(pos("/e~2f"), 0);
    CU_ASSERT_EQUAL(pos("/esc\xc3\xa9"), 0); /* a prefix of a key */
    CU_ASSERT_EQUAL(pos("/es"), 0);
    CU_ASSERT_EQUAL(pos("/\"t\": {["), 0); /* text inside a string value */
    CU_ASSERT_EQUAL(pos("/t/0/x"), 0);     /* into an empty object */
    CU_ASSERT_EQUAL(pos("/t/1/0"), 0);     /* into an empty array */
    CU_ASSERT_EQUAL(pos("a"), 0);          /* not a pointer */
    CU_ASSERT_EQUAL(tp_json_line(POS_TEXT, sizeof POS_TEXT - 1, NULL), 0);
    CU_ASSERT_EQUAL(tp_json_line(NULL, 0, ""), 0);
    CU_ASSERT_EQUAL(tp_json_line("  \n ", 4, ""), 0);
}

/* Every element's line in one walk: the same lines tp_json_line gives one at a time. */
static void test_jsonpos_element_lines(void)
{
    int lines[8] = {0};
    const char *arrays[] = {"/t", "/b/c"};
    for (size_t a = 0; a < 2; a++) {
        size_t n = tp_json_element_lines(POS_TEXT, sizeof POS_TEXT - 1, arrays[a], lines, 8);
        CU_ASSERT_EQUAL(n, a == 0 ? 5u : 3u);
        for (size_t i = 0; i < n; i++) {
            char ptr[32];
            snprintf(ptr, sizeof ptr, "%s/%zu", arrays[a], i);
            CU_ASSERT_EQUAL(lines[i], pos(ptr));
        }
    }
    CU_ASSERT_EQUAL(tp_json_element_lines(POS_TEXT, sizeof POS_TEXT - 1, "/t", lines, 2), 2);   /* n caps it */
    CU_ASSERT_EQUAL(tp_json_element_lines(POS_TEXT, sizeof POS_TEXT - 1, "/a", lines, 8), 0);   /* no array */
    CU_ASSERT_EQUAL(tp_json_element_lines(POS_TEXT, sizeof POS_TEXT - 1, "/t/1", lines, 8), 0); /* empty */
    CU_ASSERT_EQUAL(tp_json_element_lines(POS_TEXT, sizeof POS_TEXT - 1, "/zz", lines, 8), 0);
    static const char t[] = "\n[\n 1,\n [2,\n  3],\r\n \"x\"\n]";
    CU_ASSERT_EQUAL(tp_json_element_lines(t, sizeof t - 1, "", lines, 8), 3);
    CU_ASSERT(lines[0] == 3 && lines[1] == 4 && lines[2] == 6);
}

static void test_jsonpos_array_root(void)
{
    static const char t[] = "\n[\n 1,\n [2,\n  3],\r\n \"x\"\n]";
    size_t n = sizeof t - 1;
    CU_ASSERT_EQUAL(tp_json_line(t, n, ""), 2);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/0"), 3);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/1"), 4);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/1/0"), 4);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/1/1"), 5);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/2"), 6);
    CU_ASSERT_EQUAL(tp_json_line(t, n, "/3"), 0);
    /* len bounds the scan: the text is not read past it */
    CU_ASSERT_EQUAL(tp_json_line(t, 8, "/1"), 0);
}

/* ---- a full valid registry ---- */

/* clang-format off */
static const char FULL[] =
    "{\n"                                                                                /* 1 */
    "  \"defaults\": {\n"                                                                /* 2 */
    "    \"timeout\": \"8s\",\n"                                                         /* 3 */
    "    \"attempts\": 4,\n"                                                             /* 4 */
    "    \"backoff\": {\"base\": \"250ms\", \"factor\": 3,"
    " \"max\": \"10s\", \"jitter\": \"none\"},\n" /* 5 */
    "    \"retry_on\": [\"Timeout\", \"ServerError\"],\n"                                /* 6 */
    "    \"breaker\": {\"same_call\": {\"failures\": 5},\n"                              /* 7 */
    "                \"tool\": {\"failure_rate\": 0.25, \"cooldown\": \"1m\"}},\n"       /* 8 */
    "    \"degraded\": {\"answer\": \"unknown\"}\n"                                      /* 9 */
    "  },\n"                                                                             /* 10 */
    "  \"guards\": {\"max_steps\": 50, \"max_calls\": 200,"
    " \"max_wall\": \"1h\", \"max_cost\": 2.5},\n" /* 11 */
    "  \"tools\": [\n"                                                                   /* 12 */
    "    {\n"                                                                            /* 13 */
    "      \"name\": \"search_kb\",\n"                                                   /* 14 */
    "      \"description\": \"Search the knowledge base\",\n"                            /* 15 */
    "      \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"q\": {\"type\": \"string\"}}},\n" /* 16 */
    "      \"exec\": [\"./bin/search\", \"--fast\"],\n"                                  /* 17 */
    "      \"timeout\": \"1.5s\",\n"                                                     /* 18 */
    "      \"backoff\": {\"factor\": 1.5},\n"                                            /* 19 */
    "      \"fallback\": [\"kb_cache\", \"web.search\"],\n"                              /* 20 */
    "      \"fallback_on\": [\"transient\", \"permanent\"],\n"                           /* 21 */
    "      \"idempotent\": false,\n"                                                     /* 22 */
    "      \"concurrency\": 4,\n"                                                        /* 23 */
    "      \"max_output\": 4096,\n"                                                      /* 24 */
    "      \"kill_grace\": \"100ms\",\n"                                                 /* 25 */
    "      \"deadline\": \"30s\",\n"                                                     /* 26 */
    "      \"breaker\": {\"same_call\": {\"window\": \"5m\"}}\n"                         /* 27 */
    "    },\n"                                                                           /* 28 */
    "    {\"name\": \"kb_cache\", \"plugin\": {\"path\": \"lib/kb.so\"},"
    " \"stale\": true,\n" /* 29 */
    "     \"fallback\": \"web.search\", \"retry_on\": [], \"degraded\": null},\n"        /* 30 */
    "    {\"name\": \"web.search\", \"exec\": [\"python3\", \"web.py\"],"
    " \"parameters\": true,\n" /* 31 */
    "     \"attempts\": 1, \"backoff\": {\"jitter\": \"equal\"}, \"fallback\": []}\n"    /* 32 */
    "  ]\n"                                                                              /* 33 */
    "}\n";                                                                               /* 34 */
/* clang-format on */

#define BIT(k) (1ull << (k))

static void test_full_registry(void)
{
    char err[1024] = "untouched", *path;
    tp_registry_t *reg = load("full.json", FULL, &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_STRING_EQUAL(err, "");
    char *dir = realpath(tmpdir, NULL);
    CU_ASSERT_STRING_EQUAL(reg->path, path);
    CU_ASSERT_STRING_EQUAL(reg->dir, dir);

    /* defaults: given keys set, the rest built in */
    const tp_policy_t *d = &reg->defaults;
    CU_ASSERT_EQUAL(d->timeout_us, 8000000);
    CU_ASSERT_EQUAL(d->attempts, 4);
    CU_ASSERT_EQUAL(d->backoff_base_us, 250000);
    CU_ASSERT_DOUBLE_EQUAL(d->backoff_factor, 3.0, 1e-12);
    CU_ASSERT_EQUAL(d->backoff_max_us, 10000000);
    CU_ASSERT_EQUAL(d->jitter, TP_JITTER_NONE);
    CU_ASSERT_EQUAL(d->retry_on, BIT(TP_KIND_TIMEOUT) | BIT(TP_KIND_SERVER_ERROR));
    CU_ASSERT_EQUAL(d->same_call_failures, 5);
    CU_ASSERT_EQUAL(d->same_call_window_us, 600000000);
    CU_ASSERT_DOUBLE_EQUAL(d->tool_failure_rate, 0.25, 1e-12);
    CU_ASSERT_EQUAL(d->tool_min_calls, 20);
    CU_ASSERT_EQUAL(d->tool_window_us, 60000000);
    CU_ASSERT_EQUAL(d->tool_cooldown_us, 60000000);
    CU_ASSERT_EQUAL(d->tool_probes, 1);
    CU_ASSERT_PTR_NOT_NULL(d->degraded);
    CU_ASSERT_EQUAL(d->n_fallback, 0);

    CU_ASSERT_EQUAL(reg->guards.max_steps, 50);
    CU_ASSERT_EQUAL(reg->guards.max_calls, 200);
    CU_ASSERT_EQUAL(reg->guards.max_wall_us, 3600000000u);
    CU_ASSERT_DOUBLE_EQUAL(reg->guards.max_cost, 2.5, 1e-12);

    CU_ASSERT_EQUAL_FATAL(reg->n_tools, 3);

    /* search_kb: overrides, partial backoff, relative argv[0] resolved */
    const tp_tool_t *t = tp_registry_find(reg, "search_kb");
    CU_ASSERT_PTR_EQUAL_FATAL(t, &reg->tools[0]);
    CU_ASSERT_EQUAL(t->index, 0);
    CU_ASSERT_EQUAL(t->line, 13);
    CU_ASSERT_STRING_EQUAL(t->description, "Search the knowledge base");
    CU_ASSERT(json_is_object(t->parameters));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t->parameters, "type")), "object");
    CU_ASSERT_EQUAL(t->adapter, TP_ADAPTER_EXEC);
    CU_ASSERT_EQUAL_FATAL(t->argc, 2);
    char want[4096];
    snprintf(want, sizeof want, "%s/bin/search", dir);
    CU_ASSERT_STRING_EQUAL(t->argv[0], want);
    CU_ASSERT_STRING_EQUAL(t->argv[1], "--fast");
    CU_ASSERT_PTR_NULL(t->argv[2]);
    const tp_policy_t *p = &t->policy;
    CU_ASSERT_EQUAL(p->timeout_us, 1500000);
    CU_ASSERT_EQUAL(p->attempts, 4);
    CU_ASSERT_EQUAL(p->backoff_base_us, 250000);
    CU_ASSERT_DOUBLE_EQUAL(p->backoff_factor, 1.5, 1e-12);
    CU_ASSERT_EQUAL(p->backoff_max_us, 10000000);
    CU_ASSERT_EQUAL(p->jitter, TP_JITTER_NONE);
    CU_ASSERT_EQUAL(p->retry_on, BIT(TP_KIND_TIMEOUT) | BIT(TP_KIND_SERVER_ERROR));
    CU_ASSERT_EQUAL_FATAL(p->n_fallback, 2);
    CU_ASSERT_STRING_EQUAL(p->fallback[0], "kb_cache");
    CU_ASSERT_STRING_EQUAL(p->fallback[1], "web.search");
    CU_ASSERT_EQUAL(p->fallback_on, (1u << TP_CLASS_TRANSIENT) | (1u << TP_CLASS_PERMANENT));
    CU_ASSERT_FALSE(p->idempotent);
    CU_ASSERT_EQUAL(p->concurrency, 4);
    CU_ASSERT_EQUAL(p->max_output, 4096);
    CU_ASSERT_EQUAL(p->kill_grace_us, 100000);
    CU_ASSERT_EQUAL(p->deadline_us, 30000000);
    CU_ASSERT_EQUAL(p->same_call_failures, 5);
    CU_ASSERT_EQUAL(p->same_call_window_us, 300000000);
    CU_ASSERT_DOUBLE_EQUAL(p->tool_failure_rate, 0.25, 1e-12);
    CU_ASSERT_EQUAL(p->tool_cooldown_us, 60000000);
    CU_ASSERT_FALSE(p->stale);
    CU_ASSERT(json_equal(p->degraded, d->degraded));

    /* kb_cache: plugin path resolved, a single-string fallback, degraded cancelled */
    t = tp_registry_find(reg, "kb_cache");
    CU_ASSERT_PTR_EQUAL_FATAL(t, &reg->tools[1]);
    CU_ASSERT_EQUAL(t->line, 29);
    CU_ASSERT_EQUAL(t->adapter, TP_ADAPTER_PLUGIN);
    snprintf(want, sizeof want, "%s/lib/kb.so", dir);
    CU_ASSERT_STRING_EQUAL(t->plugin_path, want);
    CU_ASSERT_PTR_NULL(t->argv);
    CU_ASSERT_STRING_EQUAL(t->description, "");
    CU_ASSERT_PTR_NULL(t->parameters);
    CU_ASSERT(t->policy.stale);
    CU_ASSERT_EQUAL_FATAL(t->policy.n_fallback, 1);
    CU_ASSERT_STRING_EQUAL(t->policy.fallback[0], "web.search");
    CU_ASSERT_EQUAL(t->policy.retry_on, 0);
    CU_ASSERT_PTR_NULL(t->policy.degraded);
    CU_ASSERT_EQUAL(t->policy.timeout_us, 8000000);

    /* web.search: bare argv[0] left for PATH, boolean schema */
    t = tp_registry_find(reg, "web.search");
    CU_ASSERT_PTR_EQUAL_FATAL(t, &reg->tools[2]);
    CU_ASSERT_EQUAL(t->line, 31);
    CU_ASSERT_STRING_EQUAL(t->argv[0], "python3");
    CU_ASSERT_STRING_EQUAL(t->argv[1], "web.py");
    CU_ASSERT_EQUAL(t->argc, 2);
    CU_ASSERT(json_is_true(t->parameters));
    CU_ASSERT_EQUAL(t->policy.attempts, 1);
    CU_ASSERT_EQUAL(t->policy.jitter, TP_JITTER_EQUAL);
    CU_ASSERT_DOUBLE_EQUAL(t->policy.backoff_factor, 3.0, 1e-12);
    CU_ASSERT_EQUAL(t->policy.n_fallback, 0);

    CU_ASSERT_PTR_NULL(tp_registry_find(reg, "nope"));
    CU_ASSERT_PTR_NULL(tp_registry_find(reg, "search_k"));
    CU_ASSERT_PTR_NULL(tp_registry_find(reg, ""));
    CU_ASSERT_PTR_NULL(tp_registry_find(reg, NULL));
    CU_ASSERT_PTR_NULL(tp_registry_find(NULL, "search_kb"));

    free(dir);
    free(path);
    tp_registry_free(reg);
}

/* A registry that says nothing gets exactly tp_policy_init's values. */
static void test_builtin_defaults(void)
{
    char err[1024], *path;
    tp_registry_t *reg = load("min.json", "{\"tools\": [{\"name\": \"a\", \"exec\": [\"/bin/true\"]}]}", &path, err,
                              sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    const tp_policy_t *p = &reg->tools[0].policy;
    CU_ASSERT_EQUAL(p->timeout_us, 30000000);
    CU_ASSERT_EQUAL(p->deadline_us, 0);
    CU_ASSERT_EQUAL(p->attempts, 3);
    CU_ASSERT_EQUAL(p->backoff_base_us, 500000);
    CU_ASSERT_DOUBLE_EQUAL(p->backoff_factor, 2.0, 1e-12);
    CU_ASSERT_EQUAL(p->backoff_max_us, 30000000);
    CU_ASSERT_EQUAL(p->jitter, TP_JITTER_FULL);
    CU_ASSERT_EQUAL(p->kill_grace_us, 0);
    CU_ASSERT(p->idempotent);
    CU_ASSERT_EQUAL(p->concurrency, 0);
    CU_ASSERT_EQUAL(p->max_output, 1048576);
    CU_ASSERT_EQUAL(p->retry_on, BIT(TP_KIND_TIMEOUT) | BIT(TP_KIND_RATE_LIMITED) | BIT(TP_KIND_SERVER_ERROR) |
                                     BIT(TP_KIND_WORKER_CRASHED));
    CU_ASSERT_PTR_NULL(p->fallback);
    CU_ASSERT_EQUAL(p->n_fallback, 0);
    CU_ASSERT_EQUAL(p->fallback_on, 1u << TP_CLASS_TRANSIENT);
    CU_ASSERT_FALSE(p->stale);
    CU_ASSERT_PTR_NULL(p->degraded);
    CU_ASSERT_EQUAL(p->same_call_failures, 3);
    CU_ASSERT_EQUAL(p->same_call_window_us, 600000000);
    CU_ASSERT_DOUBLE_EQUAL(p->tool_failure_rate, 0.5, 1e-12);
    CU_ASSERT_EQUAL(p->tool_min_calls, 20);
    CU_ASSERT_EQUAL(p->tool_window_us, 60000000);
    CU_ASSERT_EQUAL(p->tool_cooldown_us, 30000000);
    CU_ASSERT_EQUAL(p->tool_probes, 1);
    CU_ASSERT_STRING_EQUAL(reg->tools[0].argv[0], "/bin/true");
    CU_ASSERT_EQUAL(reg->tools[0].line, 1);
    CU_ASSERT_EQUAL(reg->guards.max_steps, 0);
    CU_ASSERT_EQUAL(reg->guards.max_calls, 0);
    CU_ASSERT_EQUAL(reg->guards.max_wall_us, 0);
    CU_ASSERT_DOUBLE_EQUAL(reg->guards.max_cost, 0.0, 1e-12);

    tp_policy_t init;
    tp_policy_init(&init);
    CU_ASSERT_EQUAL(init.timeout_us, p->timeout_us);
    CU_ASSERT_EQUAL(init.retry_on, p->retry_on);
    CU_ASSERT_EQUAL(init.max_output, p->max_output);
    CU_ASSERT_EQUAL(init.tool_probes, p->tool_probes);
    free(path);
    tp_registry_free(reg);
}

/* Sizes: a unit (powers of 1024, either case) or plain bytes; nothing else. */
static void test_size_parse(void)
{
    static const struct {
        const char *s;
        uint64_t bytes;
        /* clang-format off */
    } ok[] = {
        {"0", 0},
        {"1048576", 1048576},
        {"64K", 65536},
        {"64k", 65536},
        {"512M", 536870912},
        {"16m", 16777216},
        {"1G", 1073741824ull},
        {"2T", 2199023255552ull},
        {"16777215T", 16777215ull << 40},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t b = 1;
        CU_ASSERT_EQUAL(tp_size_parse(ok[i].s, &b), 0);
        CU_ASSERT_EQUAL(b, ok[i].bytes);
    }
    static const char *const bad[] = {
        "", "M", "1.5G", "512MB", "512 M", "-1", "12X", "0x10", "16777216T", "99999999999999999999", "1Ki"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t b = 7;
        CU_ASSERT_EQUAL(tp_size_parse(bad[i], &b), TP_EINVAL);
        CU_ASSERT_EQUAL(b, 7);
    }
}

/*
 * limits: from "defaults", overridden key by key by a tool; "output" is
 * max_output; none by default; the CPU time kept as given (the pool rounds
 * it up to whole seconds for RLIMIT_CPU).
 */
static void test_limits(void)
{
    char err[1024], *path;
    tp_registry_t *reg = load("limits.json",
                              "{\"defaults\": {\"limits\": {\"memory\": \"512M\", \"cpu\": \"30s\","
                              " \"files\": 256, \"output\": \"16M\"}},\n"
                              " \"tools\": [{\"name\": \"a\", \"exec\": [\"/bin/true\"]},\n"
                              "   {\"name\": \"b\", \"exec\": [\"/bin/true\"],"
                              " \"limits\": {\"cpu\": \"1.5s\"}},\n"
                              "   {\"name\": \"c\", \"exec\": [\"/bin/true\"], \"max_output\": 100,"
                              " \"limits\": {\"memory\": 2097152}}]}\n",
                              &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    const tp_policy_t *a = &reg->tools[0].policy, *b = &reg->tools[1].policy, *c = &reg->tools[2].policy;
    CU_ASSERT_EQUAL(a->limit_memory, 512ull << 20);
    CU_ASSERT_EQUAL(a->limit_cpu_us, 30000000);
    CU_ASSERT_EQUAL(a->limit_files, 256);
    CU_ASSERT_EQUAL(a->max_output, 16u << 20);
    CU_ASSERT_EQUAL(b->limit_memory, 512ull << 20);
    CU_ASSERT_EQUAL(b->limit_cpu_us, 1500000);
    CU_ASSERT_EQUAL(b->limit_files, 256);
    CU_ASSERT_EQUAL(c->limit_memory, 2097152);
    CU_ASSERT_EQUAL(c->max_output, 100);
    free(path);
    tp_registry_free(reg);

    reg = load("nolimits.json", "{\"tools\": [{\"name\": \"a\", \"exec\": [\"/bin/true\"]}]}", &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->tools[0].policy.limit_memory, 0);
    CU_ASSERT_EQUAL(reg->tools[0].policy.limit_cpu_us, 0);
    CU_ASSERT_EQUAL(reg->tools[0].policy.limit_files, 0);
    CU_ASSERT_EQUAL(reg->tools[0].policy.max_output, 1048576);
    free(path);
    tp_registry_free(reg);
}

/* Every bad limit is refused where it stands. */
static void test_err_limits(void)
{
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"memory\": \"12X\"}}]}\n",          /* 2 */
                 "2: tools[0] (a).limits.memory: expected a size like \"512M\" (K, M, G, T: powers of "
                 "1024) or a number of bytes, got \"12X\"");
    EXPECT_ERROR("{\"defaults\": {\"limits\": {\n"                      /* 1 */
                 "   \"memory\": \"64K\"}},\n"                          /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 2, "defaults.limits.memory", "must be >= 1048576, got \"64K\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"memory\": -1}}]}\n",               /* 2 */
                 2, "tools[0] (a).limits.memory", "expected a size like \"512M\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"memory\": 1.5}}]}\n",              /* 2 */
                 2, "tools[0] (a).limits.memory", "got 1.5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"cpu\": \"fast\"}}]}\n",            /* 2 */
                 2, "tools[0] (a).limits.cpu", "expected a duration like \"8s\", got \"fast\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"cpu\": \"0s\"}}]}\n",              /* 2 */
                 2, "tools[0] (a).limits.cpu", "must be > 0, got \"0s\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"cpu\": 30}}]}\n",                  /* 2 */
                 2, "tools[0] (a).limits.cpu", "expected a duration like \"8s\", got 30");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"files\": 2}}]}\n",                 /* 2 */
                 2, "tools[0] (a).limits.files", "must be >= 3, got 2");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"files\": \"many\"}}]}\n",          /* 2 */
                 2, "tools[0] (a).limits.files", "expected an integer, got \"many\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"files\": 2000000}}]}\n",           /* 2 */
                 2, "tools[0] (a).limits.files", "must be <= 1048576, got 2000000");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"output\": 0}}]}\n",                /* 2 */
                 2, "tools[0] (a).limits.output", "must be >= 1, got 0");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": \"512M\"}]}\n",                       /* 2 */
                 2, "tools[0] (a).limits", "expected an object, got \"512M\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"mem\": \"512M\"}}]}\n",            /* 2 */
                 2, "tools[0] (a).limits.mem",
                 "unknown key (expected one of \"memory\", \"cpu\", \"files\", \"output\")");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"limits\": {\"memroy\": \"512M\"}}]}\n",         /* 2 */
                 2, "tools[0] (a).limits.memroy", "unknown key (did you mean \"memory\"?)");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"], \"max_output\": 10,\n" /* 1 */
                 "   \"limits\": {\"output\": \"1M\"}}]}\n",                               /* 2 */
                 2, "tools[0] (a).limits.output", "the same cap as \"max_output\"");
    EXPECT_ERROR("{\"defaults\": {\"limits\": {\"output\": 5},\n"       /* 1 */
                 "   \"max_output\": 10},\n"                            /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 1, "defaults.limits.output", "the same cap as \"max_output\"");
}

/* worker: recycling, from "defaults", a tool overriding one key. */
static void test_worker_recycling(void)
{
    char err[1024], *path;
    tp_registry_t *reg = load(
        "worker.json",
        "{\"defaults\": {\"worker\": {\"max_calls\": 1000, \"max_rss\": \"512M\"}},\n"
        " \"tools\": [{\"name\": \"a\", \"exec\": [\"/bin/true\"]},\n"
        "   {\"name\": \"b\", \"exec\": [\"/bin/true\"], \"worker\": {\"max_rss\": 52428800}}]}\n",
        &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->tools[0].policy.worker_max_calls, 1000);
    CU_ASSERT_EQUAL(reg->tools[0].policy.worker_max_rss, 512ull << 20);
    CU_ASSERT_EQUAL(reg->tools[1].policy.worker_max_calls, 1000);
    CU_ASSERT_EQUAL(reg->tools[1].policy.worker_max_rss, 50ull << 20);
    free(path);
    tp_registry_free(reg);
    reg = load("noworker.json", "{\"tools\": [{\"name\": \"a\", \"exec\": [\"/bin/true\"]}]}", &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->tools[0].policy.worker_max_calls, 0);
    CU_ASSERT_EQUAL(reg->tools[0].policy.worker_max_rss, 0);
    free(path);
    tp_registry_free(reg);
}

static void test_err_worker(void)
{
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": {\"max_calls\": 0}}]}\n",             /* 2 */
                 "2: tools[0] (a).worker.max_calls: must be >= 1, got 0");
    EXPECT_ERROR("{\"defaults\": {\"worker\": {\n"                      /* 1 */
                 "   \"max_calls\": \"100\"}},\n"                       /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 2, "defaults.worker.max_calls", "expected an integer, got \"100\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": {\"max_calls\": -5}}]}\n",            /* 2 */
                 2, "tools[0] (a).worker.max_calls", "must be >= 1, got -5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": {\"max_rss\": \"lots\"}}]}\n",        /* 2 */
                 2, "tools[0] (a).worker.max_rss", "expected a size like \"512M\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": {\"max_rss\": \"512K\"}}]}\n",        /* 2 */
                 2, "tools[0] (a).worker.max_rss", "must be >= 1048576, got \"512K\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": {\"max_call\": 5}}]}\n",              /* 2 */
                 2, "tools[0] (a).worker.max_call", "unknown key (did you mean \"max_calls\"?)");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"worker\": 5}]}\n",                              /* 2 */
                 2, "tools[0] (a).worker", "expected an object, got 5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"max_calls\": 5}]}\n",                           /* 2 */
                 2, "tools[0] (a).max_calls", "unknown key");
}

/* Many tools: every one found through the index, absolute paths untouched. */
static void test_many_tools(void)
{
    size_t n = 1000, cap = n * 96 + 64, len = 0;
    char *json = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    len += (size_t)snprintf(json + len, cap - len, "{\"tools\": [\n");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "{\"name\": \"tool_%zu\","
                                " \"plugin\": {\"path\": \"/abs/p%zu.so\"}}%s\n",
                                i, i, i + 1 < n ? "," : "");
    snprintf(json + len, cap - len, "]}\n");
    char err[1024], *path;
    tp_registry_t *reg = load("many.json", json, &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->n_tools, n);
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        char name[32], want[32];
        snprintf(name, sizeof name, "tool_%zu", i);
        snprintf(want, sizeof want, "/abs/p%zu.so", i);
        const tp_tool_t *t = tp_registry_find(reg, name);
        if (t != NULL && t->index == i && t->line == (int)i + 2 && strcmp(t->plugin_path, want) == 0)
            found++;
    }
    CU_ASSERT_EQUAL(found, n);
    CU_ASSERT_PTR_NULL(tp_registry_find(reg, "tool_1000"));
    free(json);
    free(path);
    tp_registry_free(reg);
}

/* A diamond (a -> b, c; b -> c) is not a loop. */
static void test_fallback_diamond(void)
{
    char err[1024], *path;
    tp_registry_t *reg = load("diamond.json",
                              "{\"tools\": [\n"
                              " {\"name\": \"a\", \"exec\": [\"x\"],"
                              " \"fallback\": [\"b\", \"c\"]},\n"
                              " {\"name\": \"b\", \"exec\": [\"x\"], \"fallback\": [\"c\"]},\n"
                              " {\"name\": \"c\", \"exec\": [\"x\"]}\n"
                              "]}\n",
                              &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(reg);
    if (reg == NULL)
        fprintf(stderr, "\n  %s\n", err);
    free(path);
    tp_registry_free(reg);
    tp_registry_free(NULL);
}

/* ---- rejections ---- */

static void test_err_missing_file(void)
{
    char err[1024], path[4096];
    snprintf(path, sizeof path, "%s/does-not-exist.json", tmpdir);
    CU_ASSERT_PTR_NULL(tp_registry_load(path, err, sizeof err));
    char want[4200];
    snprintf(want, sizeof want, "%s: cannot read: No such file or directory", path);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_PTR_NULL(tp_registry_load(path, NULL, 0));
}

static void test_err_syntax(void)
{
    EXPECT_ERROR("{\n"                                         /* 1 */
                 "  \"tools\": [\n"                            /* 2 */
                 "    {\"name\": \"a\", \"exec\": [\"x\"],}\n" /* 3 */
                 "  ]\n"                                       /* 4 */
                 "}\n",                                        /* 5 */
                 3, NULL, "invalid JSON: string or '}' expected near '}'");
    EXPECT_ERROR("{\"tools\": [\n"         /* 1 */
                 "  {\"name\": \"a\",\n"   /* 2 */
                 "   \"exec\": [\"x\"],\n" /* 3 */
                 "   \"exec\": [\"y\"]}\n" /* 4 */
                 "]}\n",                   /* 5 */
                 4, NULL, "duplicate object key");
    EXPECT_ERROR("", 1, NULL, "invalid JSON");
    /* What jansson quotes of the file after "near" is raw: its newline does not end the message. */
    EXPECT_ERROR("{\"tools\"\"}}]\\\n", 2, NULL, "invalid JSON: invalid escape near '\"}}]\\?'");
}

/* schema_dialect, formats, schema_refs: registry-wide, per tool, and their errors */
static void test_schema_settings(void)
{
    char err[1024], *path;
    char *units = tp_test_write(tmpdir, "units.json", "{\"type\": \"string\"}");
    tp_registry_t *reg = load(
        "schema.json",
        "{\"schema_dialect\": \"2020-12\", \"formats\": \"assert\",\n"
        " \"schema_refs\": {\"https://example.com/units.json#\": \"units.json\"},\n"
        " \"tools\": [\n"
        "  {\"name\": \"a\", \"exec\": [\"x\"], \"parameters\": {\"prefixItems\": [{\"format\": \"date\"}],"
        " \"items\": {\"$ref\": \"https://example.com/units.json\"}}},\n"
        "  {\"name\": \"b\", \"exec\": [\"x\"], \"schema_dialect\": \"draft-07\", \"formats\": \"annotate\",\n"
        "   \"parameters\": {\"prefixItems\": [{\"format\": \"date\"}]}}]}\n",
        &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    json_t *args = json_loads("[\"tomorrow\", 5]", 0, NULL);
    /* a: 2020-12 by the registry's default, formats asserted, the $ref served from units.json */
    CU_ASSERT_EQUAL(tp_jsonschema_validate(tp_registry_find(reg, "a")->schema, args, NULL, 0), 2);
    /* b: draft-07 (prefixItems means nothing there), formats annotations */
    CU_ASSERT_EQUAL(tp_jsonschema_validate(tp_registry_find(reg, "b")->schema, args, NULL, 0), 0);
    json_decref(args);
    tp_registry_free(reg);
    free(path);
    free(units);
    /* the dialects' meta-schemas are built in: no schema_refs entry needed */
    reg = load("meta.json",
               "{\"tools\": [{\"name\": \"m\", \"exec\": [\"x\"], \"parameters\": {\"properties\": {"
               "\"a\": {\"$ref\": \"http://json-schema.org/draft-07/schema#\"},"
               " \"b\": {\"$ref\": \"https://json-schema.org/draft/2020-12/schema\"}}}}]}\n",
               &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    args = json_loads("{\"a\": {\"type\": 5}, \"b\": {\"minItems\": -1}}", 0, NULL);
    CU_ASSERT_EQUAL(tp_jsonschema_validate(tp_registry_find(reg, "m")->schema, args, NULL, 0), 2);
    json_decref(args);
    tp_registry_free(reg);
    free(path);
    EXPECT_ERROR("{\"schema_dialect\": \"draft-04\",\n" /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}\n",
                 1, "schema_dialect", "expected \"draft-07\" or \"2020-12\", got \"draft-04\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"formats\": true}]}\n",                          /* 2 */
                 2, "tools[0] (a).formats", "expected \"annotate\" or \"assert\", got true");
    EXPECT_ERROR("{\"schema_refs\": {\"https://x/a.json\": \"missing.json\"},\n" /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}\n",
                 1, "schema_refs.https://x/a.json", "cannot read the schema");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n"                                  /* 1 */
                 "   \"parameters\": {\"properties\": {\"q\": {\"$ref\": \"https://x/b.json\"}}}}]}\n", /* 2 */
                 2, "tools[0] (a).parameters", "/properties/q/$ref: unresolvable reference \"https://x/b.json\"");
}

static void test_err_top_level(void)
{
    EXPECT_EXACT("{\n"                                                    /* 1 */
                 "  \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}],\n" /* 2 */
                 "  \"tool\": []\n"                                       /* 3 */
                 "}\n",                                                   /* 4 */
                 "3: tool: unknown key (did you mean \"tools\"?)");
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}],\n" /* 1 */
                 " \"version\": 2}\n",                                   /* 2 */
                 "2: version: unknown key (expected one of \"defaults\", \"guards\", \"retain\", "
                 "\"schema_dialect\", \"formats\", \"schema_refs\", \"tools\", \"mcp_servers\", \"run\")");
    EXPECT_EXACT("{\"defaults\": {}}", "1: missing required key \"tools\"");
    EXPECT_EXACT("{\n \"tools\": []\n}", "2: tools: expected a non-empty array of tools, got []");
    EXPECT_EXACT("{\"tools\": {\"a\": 1}}", "1: tools: expected a non-empty array of tools, got an object");
    /* a top-level array is an OpenAI tool list */
    EXPECT_EXACT("[1]", "1: [0]: expected a tool object, got 1");
    EXPECT_EXACT("{\"defaults\": [], \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}",
                 "1: defaults: expected an object, got []");
}

static void test_err_unknown_tool_key(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                           /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 2 */
                 "  {\"name\": \"b\",\n"                     /* 3 */
                 "   \"exec\": [\"y\"],\n"                   /* 4 */
                 "   \"timout\": \"5s\"}\n"                  /* 5 */
                 "]}\n",                                     /* 6 */
                 "5: tools[1] (b).timout: unknown key (did you mean \"timeout\"?)");
    EXPECT_EXACT("{\"tools\": [\n"                          /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"],\n" /* 2 */
                 "   \"color\": \"blue\"}\n"                /* 3 */
                 "]}\n",                                    /* 4 */
                 "3: tools[0] (a).color: unknown key");
    /* "/" and "~" in a key: escaped in the pointer, so the line is still found */
    EXPECT_EXACT("{\"tools\": [\n"                          /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"],\n" /* 2 */
                 "   \"a/b~c\": 1}\n"                       /* 3 */
                 "]}\n",                                    /* 4 */
                 "3: tools[0] (a).a/b~c: unknown key");
    /* a control character in a key: the message stays one line */
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"], \"a\\nb\\u0001\": 1}]}",
                 "1: tools[0] (a).a?b?: unknown key");
}

static void test_err_unknown_policy_key(void)
{
    EXPECT_EXACT("{\n"                                                   /* 1 */
                 "  \"defaults\": {\n"                                   /* 2 */
                 "    \"timeout\": \"5s\",\n"                            /* 3 */
                 "    \"retries\": 3\n"                                  /* 4 */
                 "  },\n"                                                /* 5 */
                 "  \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]\n" /* 6 */
                 "}\n",                                                  /* 7 */
                 "4: defaults.retries: unknown key (toolpool has \"attempts\", and attempts counts the first try: "
                 "\"retries\": 2 is \"attempts\": 3)");
    EXPECT_EXACT("{\n"                                                   /* 1 */
                 "  \"defaults\": {\"backoff\": {\n"                     /* 2 */
                 "    \"base\": \"1s\",\n"                               /* 3 */
                 "    \"jiter\": \"none\"}},\n"                          /* 4 */
                 "  \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]\n" /* 5 */
                 "}\n",                                                  /* 6 */
                 "4: defaults.backoff.jiter: unknown key (did you mean \"jitter\"?)");
    EXPECT_ERROR("{\"defaults\": {\"breaker\": {\"tool\": {\n"            /* 1 */
                 "   \"probes\": 2,\n"                                    /* 2 */
                 "   \"half_open\": 1}}},\n"                              /* 3 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}\n", /* 4 */
                 3, "defaults.breaker.tool.half_open", "unknown key (expected one of \"failure_rate\"");
    /* a tool's own keys are not policy keys */
    EXPECT_ERROR("{\"defaults\": {\n"                                     /* 1 */
                 "   \"exec\": [\"x\"]},\n"                               /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}\n", /* 3 */
                 2, "defaults.exec", "unknown key");
    EXPECT_ERROR("{\"guards\": {\"max_steps\": 5,\n"                      /* 1 */
                 "   \"max_tokens\": 9},\n"                               /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}\n", /* 3 */
                 2, "guards.max_tokens", "unknown key");
}

static void test_err_wrong_type(void)
{
    /* the contract's own example */
    EXPECT_EXACT("{\n"                                  /* 1 */
                 "  \"defaults\": {\n"                  /* 2 */
                 "    \"attempts\": 3\n"                /* 3 */
                 "  },\n"                               /* 4 */
                 "  \"tools\": [\n"                     /* 5 */
                 "    {\n"                              /* 6 */
                 "      \"name\": \"search_kb\",\n"     /* 7 */
                 "      \"exec\": [\"./search.sh\"],\n" /* 8 */
                 "      \"timeout\": 8\n"               /* 9 */
                 "    }\n"                              /* 10 */
                 "  ]\n"                                /* 11 */
                 "}\n",                                 /* 12 */
                 "9: tools[0] (search_kb).timeout: expected a duration like \"8s\", got 8");
    EXPECT_EXACT("{\"tools\": [\n"                          /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"],\n" /* 2 */
                 "   \"attempts\": \"3\"}]}\n",             /* 3 */
                 "3: tools[0] (a).attempts: expected an integer, got \"3\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"attempts\": 2.0}]}\n",                          /* 2 */
                 2, "tools[0] (a).attempts", "expected an integer, got 2.0");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"idempotent\": \"yes\"}]}\n",                    /* 2 */
                 2, "tools[0] (a).idempotent", "expected true or false, got \"yes\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"backoff\": \"fast\"}]}\n",                      /* 2 */
                 2, "tools[0] (a).backoff", "expected an object, got \"fast\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"backoff\": {\"factor\": \"2\"}}]}\n",           /* 2 */
                 2, "tools[0] (a).backoff.factor", "expected a number, got \"2\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"parameters\": \"object\"}]}\n",                 /* 2 */
                 2, "tools[0] (a).parameters", "expected a JSON Schema");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"description\": 5}]}\n",                         /* 2 */
                 2, "tools[0] (a).description", "expected a string, got 5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\",\n"       /* 1 */
                 "   \"exec\": \"python3 tool.py\"}]}\n", /* 2 */
                 2, "tools[0] (a).exec", "expected an argv array");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\",\n" /* 1 */
                 "   \"exec\": [\"x\",\n"           /* 2 */
                 "            3]}]}\n",             /* 3 */
                 3, "tools[0] (a).exec[1]", "expected a string, got 3");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": []}]}", 1, "tools[0] (a).exec", "got []");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"\"]}]}", 1, "tools[0] (a).exec[0]",
                 "expected a program, got \"\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"backoff\": {\"jitter\": \"half\"}}]}\n",        /* 2 */
                 2, "tools[0] (a).backoff.jitter", "expected one of \"full\", \"equal\", \"none\", got \"half\"");
    EXPECT_ERROR("{\"tools\": [\n"      /* 1 */
                 "  \"search_kb\"]}\n", /* 2 */
                 2, "tools[0]", "expected a tool object, got \"search_kb\"");
    EXPECT_ERROR("{\"guards\": {\"max_cost\": \"1\"},\n"                /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 2 */
                 1, "guards.max_cost", "expected a number, got \"1\"");
}

static void test_err_range(void)
{
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"attempts\": 0}]}\n",                            /* 2 */
                 "2: tools[0] (a).attempts: must be >= 1, got 0");
    EXPECT_ERROR("{\"defaults\": {\n"                                   /* 1 */
                 "   \"attempts\": 101},\n"                             /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 2, "defaults.attempts", "must be <= 100, got 101");
    /* the contract's own example, tools[1] */
    EXPECT_EXACT("{\n"                                         /* 1 */
                 "  \"tools\": [\n"                            /* 2 */
                 "    {\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 3 */
                 "    {\n"                                     /* 4 */
                 "      \"name\": \"b\",\n"                    /* 5 */
                 "      \"exec\": [\"y\"],\n"                  /* 6 */
                 "      \"backoff\": {\n"                      /* 7 */
                 "        \"base\": \"1s\",\n"                 /* 8 */
                 "        \"factor\": 0.5\n"                   /* 9 */
                 "      }\n"                                   /* 10 */
                 "    }\n"                                     /* 11 */
                 "  ]\n"                                       /* 12 */
                 "}\n",                                        /* 13 */
                 "9: tools[1] (b).backoff.factor: must be >= 1, got 0.5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"breaker\": {\n"                                 /* 2 */
                 "     \"tool\": {\"failure_rate\": 1.5}}}]}\n",       /* 3 */
                 3, "tools[0] (a).breaker.tool.failure_rate", "must be <= 1, got 1.5");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n"     /* 1 */
                 "   \"breaker\": {\"tool\": {\"failure_rate\": 0}}}]}\n", /* 2 */
                 2, "tools[0] (a).breaker.tool.failure_rate", "must be > 0, got 0");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n"      /* 1 */
                 "   \"breaker\": {\"same_call\": {\"failures\": 0}}}]}\n", /* 2 */
                 2, "tools[0] (a).breaker.same_call.failures", "must be >= 1, got 0");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"timeout\": \"0s\"}]}\n",                        /* 2 */
                 2, "tools[0] (a).timeout", "must be > 0, got \"0s\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"concurrency\": -1}]}\n",                        /* 2 */
                 2, "tools[0] (a).concurrency", "must be >= 0, got -1");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"concurrency\": 4294967296}]}\n",                /* 2 */
                 2, "tools[0] (a).concurrency", "must be <= 4294967295, got 4294967296");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"max_output\": 0}]}\n",                          /* 2 */
                 2, "tools[0] (a).max_output", "must be >= 1, got 0");
    EXPECT_ERROR("{\"guards\": {\n"                                     /* 1 */
                 "   \"max_steps\": 0},\n"                              /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 2, "guards.max_steps", "must be >= 1, got 0");
    EXPECT_ERROR("{\"guards\": {\"max_cost\": 0},\n"                    /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 2 */
                 1, "guards.max_cost", "must be > 0, got 0");
}

static void test_err_duration(void)
{
    EXPECT_EXACT("{\"defaults\": {\n"                                   /* 1 */
                 "   \"deadline\": \"30 seconds\"},\n"                  /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 "2: defaults.deadline: expected a duration like \"8s\", got \"30 seconds\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"backoff\": {\"max\": \"1.5\"}}]}\n",            /* 2 */
                 2, "tools[0] (a).backoff.max", "expected a duration like \"8s\", got \"1.5\"");
    EXPECT_ERROR("{\"guards\": {\"max_wall\": 3600},\n"                 /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 2 */
                 1, "guards.max_wall", "expected a duration like \"8s\", got 3600");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"kill_grace\": 0}]}\n",                          /* 2 */
                 2, "tools[0] (a).kill_grace", "expected a duration like \"8s\", got 0");
}

static void test_err_duplicate_name(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                           /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 2 */
                 "  {\"name\": \"b\", \"exec\": [\"y\"]},\n" /* 3 */
                 "  {\"exec\": [\"z\"],\n"                   /* 4 */
                 "   \"name\": \"a\"}\n"                     /* 5 */
                 "]}\n",                                     /* 6 */
                 "5: tools[2].name: duplicate tool name \"a\" (already declared as tools[0] on "
                 "line 2)");
}

static void test_err_no_adapter(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                           /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 2 */
                 "  {\n"                                     /* 3 */
                 "    \"name\": \"b\",\n"                    /* 4 */
                 "    \"timeout\": \"5s\"\n"                 /* 5 */
                 "  }\n"                                     /* 6 */
                 "]}\n",                                     /* 7 */
                 "3: tools[1] (b): no adapter (expected exactly one of \"exec\", \"plugin\", "
                 "\"mcp\", \"http\")");
}

static void test_err_two_adapters(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                        /* 1 */
                 "  {\"name\": \"a\",\n"                  /* 2 */
                 "   \"exec\": [\"x\"],\n"                /* 3 */
                 "   \"plugin\": {\"path\": \"a.so\"}}\n" /* 4 */
                 "]}\n",                                  /* 5 */
                 "4: tools[0] (a).plugin: a tool has exactly one adapter, and this one already "
                 "has \"exec\"");
}

static void test_err_name(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                           /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 2 */
                 "  {\"exec\": [\"y\"]}\n"                   /* 3 */
                 "]}\n",                                     /* 4 */
                 "3: tools[1]: missing required key \"name\"");
    EXPECT_ERROR("{\"tools\": [\n"                                /* 1 */
                 "  {\"name\": \"my tool\", \"exec\": [\"y\"]}\n" /* 2 */
                 "]}\n",                                          /* 3 */
                 2, "tools[0].name", "got \"my tool\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"\", \"exec\": [\"y\"]}]}", 1, "tools[0].name", "got \"\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": 7, \"exec\": [\"y\"]}]}", 1, "tools[0].name", "got 7");
}

static void test_err_adapter_shapes(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                                                             /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"]},\n"                                   /* 2 */
                 "  {\"name\": \"b\", \"plugin\": {\"path\": \"b.so\"}},\n"                    /* 3 */
                 "  {\"name\": \"c\",\n"                                                       /* 4 */
                 "   \"http\": {\"url\": \"https://example.com/c\", \"method\": \"FETCH\"}}\n" /* 5 */
                 "]}\n",                                                                       /* 6 */
                 "5: tools[2] (c).http: \"method\" FETCH: expected GET, POST, PUT, PATCH or DELETE");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\",\n"                         /* 1 */
                 "   \"http\": {\"url\": \"https://example.com/{a\"}}]}\n", /* 2 */
                 2, "tools[0] (c).http", "a placeholder is {NAME}");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\",\n"                                          /* 1 */
                 "   \"http\": {\"url\": \"https://example.com/\", \"body\": \"all\"}}]}\n", /* 2 */
                 2, "tools[0] (c).http", "expected \"args\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\", \"http\": {\"url\": \"https://example.com/\",\n" /* 1 */
                 "   \"headers\": {\"X-Key\": \"${env:TP_TEST_NO_SUCH_SECRET}\"}}}]}\n",          /* 2 */
                 2, "tools[0] (c).http.headers.X-Key", "TP_TEST_NO_SUCH_SECRET is not set");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\", \"http\": {\"url\": \"https://example.com/\",\n" /* 1 */
                 "   \"headers\": {\"Bad Name\": \"x\"}}}]}\n",                                   /* 2 */
                 2, "tools[0] (c).http.headers.Bad Name", "expected a header name");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"e\", \"exec\": [\"x\"], \"rate\": {\"per\": \"1s\"}}]}", 1,
                 "tools[0] (e).rate", "missing required key \"calls\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"e\", \"exec\": [\"x\"], \"rate\": {\"calls\": 5, \"per\": \"0s\"}}]}", 1,
                 "tools[0] (e).rate.per", "");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"e\", \"exec\": [\"x\"], \"connect_timeout\": \"1s\"}]}", 1,
                 "tools[0] (e).connect_timeout", "only an http tool has a connect timeout");
    /* their shape is checked first */
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\",\n"                    /* 1 */
                 "   \"http\": {\"url\": \"ftp://example.com\"}}]}\n", /* 2 */
                 2, "tools[0] (c).http.url", "expected an http:// or https:// URL");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"c\",\n" /* 1 */
                 "   \"http\": {}}]}\n",            /* 2 */
                 2, "tools[0] (c).http", "missing required key \"url\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"m\",\n"             /* 1 */
                 "   \"mcp\": {\"command\": [\"./srv\"]}}]}\n", /* 2 */
                 2, "tools[0] (m).mcp", "missing required key \"tool\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"m\",\n"                            /* 1 */
                 "   \"mcp\": {\"command\": \"./srv\", \"tool\": \"t\"}}]}\n", /* 2 */
                 2, "tools[0] (m).mcp.command", "expected an argv array");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"p\",\n"                            /* 1 */
                 "   \"plugin\": {\"path\": \"p.so\", \"entry\": \"x\"}}]}\n", /* 2 */
                 2, "tools[0] (p).plugin.entry", "unknown key (expected one of \"path\")");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"p\",\n" /* 1 */
                 "   \"plugin\": \"p.so\"}]}\n",    /* 2 */
                 2, "tools[0] (p).plugin", "expected an object, got \"p.so\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"p\",\n"      /* 1 */
                 "   \"plugin\": {\"path\": \"\"}}]}\n", /* 2 */
                 2, "tools[0] (p).plugin.path", "expected a non-empty string, got \"\"");
}

static void test_err_kinds_and_classes(void)
{
    EXPECT_EXACT("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"retry_on\": [\"Timeout\",\n"                    /* 2 */
                 "                \"NotFound\"]}]}\n",                 /* 3 */
                 "3: tools[0] (a).retry_on[1]: \"NotFound\" is permanent and is never retried "
                 "(expected one of Timeout, RateLimited, ServerError, WorkerCrashed)");
    EXPECT_ERROR("{\"defaults\": {\"retry_on\": [\"Timout\"]},\n"       /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 2 */
                 1, "defaults.retry_on[0]", "unknown kind \"Timout\"");
    EXPECT_ERROR("{\"defaults\": {\"retry_on\": \"Timeout\"},\n"        /* 1 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 2 */
                 1, "defaults.retry_on", "expected an array of kind names");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"retry_on\": [\"CircuitOpen\"]}]}\n",            /* 2 */
                 2, "tools[0] (a).retry_on[0]", "\"CircuitOpen\" is guard and is never retried");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n"  /* 1 */
                 "   \"fallback_on\": [\"transient\", \"fatal\"]}]}\n", /* 2 */
                 2, "tools[0] (a).fallback_on[1]", "got \"fatal\"");
}


/* ---- the mcp adapter and mcp_servers ---- */

static void test_mcp_tool(void)
{
    char err[1024], *path;
    tp_registry_t *reg = load("mcp.json",
                              "{\"tools\": [{\"name\": \"m\", \"mcp\": {\"command\": [\"./srv.py\", \"--x\"], "
                              "\"tool\": \"search\", \"env\": {\"A\": \"1\", \"B\": \"x=y\"}, \"cwd\": \"data\"}}]}",
                              &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    const tp_tool_t *t = tp_registry_find(reg, "m");
    CU_ASSERT_EQUAL(t->adapter, TP_ADAPTER_MCP);
    char want[PATH_MAX + 16];
    snprintf(want, sizeof want, "%s/srv.py", reg->dir);
    CU_ASSERT_STRING_EQUAL(t->mcp_command[0], want);
    CU_ASSERT_STRING_EQUAL(t->mcp_command[1], "--x");
    CU_ASSERT_PTR_NULL(t->mcp_command[2]);
    CU_ASSERT_STRING_EQUAL(t->mcp_tool, "search");
    CU_ASSERT_STRING_EQUAL(t->mcp_env[0], "A=1");
    CU_ASSERT_STRING_EQUAL(t->mcp_env[1], "B=x=y");
    CU_ASSERT_PTR_NULL(t->mcp_env[2]);
    snprintf(want, sizeof want, "%s/data", reg->dir);
    CU_ASSERT_STRING_EQUAL(t->mcp_cwd, want);
    CU_ASSERT_PTR_NULL(t->mcp_server);
    tp_registry_free(reg);
    free(path);
}

static void test_err_mcp(void)
{
    EXPECT_ERROR("{\"tools\": [{\"name\": \"m\",\n"
                 "  \"mcp\": {\"command\": [\"s\"], \"tool\": \"t\", \"env\": {\"A\": 1}}}]}",
                 2, "tools[0] (m).mcp.env.A", "expected a string, got 1");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"m\",\n"
                 "  \"mcp\": {\"command\": [\"s\"], \"tool\": \"t\", \"env\": {\"A=B\": \"1\"}}}]}",
                 2, "tools[0] (m).mcp.env.A=B", "without '='");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"m\",\n"
                 "  \"mcp\": {\"command\": [\"s\"], \"tool\": \"t\", \"cwd\": \"\"}}]}",
                 2, "tools[0] (m).mcp.cwd", "expected a non-empty string");
    EXPECT_ERROR("{\"tools\": [],\n \"mcp_servers\": [1]}", 2, "mcp_servers", "expected an object of MCP servers");
    EXPECT_ERROR("{\"tools\": [],\n \"mcp_servers\": {\"a/b\": {\"command\": [\"s\"]}}}", 2, "mcp_servers.a/b",
                 "expected a server name");
    EXPECT_ERROR("{\"tools\": [],\n \"mcp_servers\": {\"fs\": {\"cmd\": [\"s\"], \"command\": [\"s\"]}}}", 2,
                 "mcp_servers.fs.cmd", "unknown key");
    EXPECT_ERROR("{\"tools\": [],\n \"mcp_servers\": {\"fs\": {}}}", 2, "mcp_servers.fs",
                 "missing required key \"command\"");
    /* the policy blocks are checked where they are written, before the server starts */
    EXPECT_ERROR("{\"tools\": [], \"mcp_servers\": {\"fs\": {\"command\": [\"/nonexistent\"],\n"
                 "  \"defaults\": {\"timeout\": 5}}}}",
                 2, "mcp_servers.fs.defaults.timeout", "expected a duration");
    EXPECT_ERROR("{\"tools\": [], \"mcp_servers\": {\"fs\": {\"command\": [\"/nonexistent\"],\n"
                 "  \"tools\": {\"read\": {\"mcp\": {}}}}}}",
                 2, "mcp_servers.fs.tools.read.mcp", "unknown key");
    EXPECT_ERROR("{\"tools\": [], \"mcp_servers\": {\"fs\": {\"command\": [\"/nonexistent\"]}}}", 1, "mcp_servers.fs",
                 "cannot import the tools of MCP server \"fs\": cannot start /nonexistent: No such file");
    EXPECT_EXACT("{\"tools\": [],\n \"mcp_servers\": {}}",
                 "2: mcp_servers: no tools: \"tools\" declares none and \"mcp_servers\" names no server");
}

/* ---- the other ecosystems' tool lists, as written ---- */

/* An OpenAI list, nested and flat, with its settings in a policy file. */
static void test_openai_list(void)
{
    char err[TP_REGISTRY_ERRLEN], *path;
    char *pol = tp_test_write(tmpdir, "openai-policy.json",
                              "{\"defaults\": {\"timeout\": \"5s\"},\n"
                              " \"run\": {\"search_kb\": {\"exec\": [\"./kb\", \"--q\"], \"timeout\": \"8s\"},\n"
                              "         \"flat\": {\"plugin\": {\"path\": \"p.so\"}, \"attempts\": 1}}}\n");
    path = tp_test_write(
        tmpdir, "openai.json",
        "[{\"type\": \"function\", \"function\": {\"name\": \"search_kb\", \"description\": \"Search\",\n"
        "   \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}},\n"
        "                  \"required\": [\"q\"], \"additionalProperties\": false},\n"
        "   \"strict\": true}},\n"
        " {\"type\": \"function\", \"name\": \"flat\", \"description\": \"Flat\", \"strict\": false,\n"
        "  \"parameters\": {\"type\": \"object\", \"prefixItems\": 1}}]\n");
    tp_registry_t *reg = tp_registry_load_policy(path, pol, err, sizeof err);
    if (reg == NULL)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->n_tools, 2);
    const tp_tool_t *a = tp_registry_find(reg, "search_kb"), *b = tp_registry_find(reg, "flat");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(a->adapter, TP_ADAPTER_EXEC);
    CU_ASSERT_STRING_EQUAL(a->description, "Search");
    CU_ASSERT(a->strict);
    CU_ASSERT_EQUAL(a->policy.timeout_us, 8000000u);
    CU_ASSERT_EQUAL(b->policy.timeout_us, 5000000u); /* the policy file's defaults */
    CU_ASSERT_EQUAL(b->policy.attempts, 1);
    CU_ASSERT_EQUAL(b->adapter, TP_ADAPTER_PLUGIN);
    /* paths and the exec tool's folder: the policy file's, which wrote the adapter */
    char want[PATH_MAX + 16];
    snprintf(want, sizeof want, "%s/kb", reg->dir);
    CU_ASSERT_STRING_EQUAL(a->argv[0], want);
    CU_ASSERT_STRING_EQUAL(a->cwd, reg->dir);
    /* OpenAI's schemas: draft-07 unless they say otherwise (prefixItems: no 2020-12 keyword there) */
    CU_ASSERT_EQUAL(tp_jsonschema_dialect(a->schema), TP_JSONSCHEMA_DRAFT7);
    CU_ASSERT_EQUAL(tp_jsonschema_dialect(b->schema), TP_JSONSCHEMA_DRAFT7);
    json_t *args = json_loads("{\"q\": 1}", 0, NULL);
    CU_ASSERT_NOT_EQUAL(tp_jsonschema_validate(a->schema, args, NULL, 0), 0);
    json_decref(args);
    tp_registry_free(reg);
    free(path);
    free(pol);
}

/* An MCP tools/list result, whole, with a "run" block beside it; annotations feed idempotent. */
static void test_mcp_list(void)
{
    char err[TP_REGISTRY_ERRLEN], *path;
    tp_registry_t *reg = load(
        "mcplist.json",
        "{\"tools\": [\n"
        "  {\"name\": \"read\", \"title\": \"Read\", \"description\": \"Reads\",\n"
        "   \"inputSchema\": {\"type\": \"object\", \"properties\": {\"p\": {\"type\": \"string\"}}},\n"
        "   \"outputSchema\": {\"type\": \"object\"}, \"_meta\": {\"x\": 1}, \"icons\": [],\n"
        "   \"annotations\": {\"title\": \"R\", \"readOnlyHint\": true, \"openWorldHint\": false}},\n"
        "  {\"name\": \"rm\", \"inputSchema\": {\"type\": \"object\"}, \"annotations\": {\"destructiveHint\": true}},\n"
        "  {\"name\": \"put\", \"inputSchema\": {\"type\": \"object\"},\n"
        "   \"annotations\": {\"destructiveHint\": true, \"idempotentHint\": true}},\n"
        "  {\"name\": \"rm2\", \"inputSchema\": {\"type\": \"object\"}, \"annotations\": {\"destructiveHint\": true}},\n"
        "  {\"name\": \"own\", \"exec\": [\"x\"], \"idempotent\": false},\n"
        "  {\"type\": \"function\", \"function\": {\"name\": \"oa\", \"parameters\": {\"type\": \"object\"}}},\n"
        "  {\"type\": \"function\", \"name\": \"of\"}\n"
        " ],\n"
        " \"nextCursor\": \"abc\",\n"
        " \"defaults\": {\"attempts\": 2},\n"
        " \"run\": {\"read\": {\"exec\": [\"cat\"]}, \"rm\": {\"exec\": [\"rm\"]}, \"put\": {\"exec\": [\"put\"]},\n"
        "         \"rm2\": {\"exec\": [\"rm\"], \"idempotent\": true}, \"own\": {\"timeout\": \"3s\"},\n"
        "         \"oa\": {\"plugin\": {\"path\": \"p.so\"}}, \"of\": {\"exec\": [\"x\"]}}}\n",
        &path, err, sizeof err);
    if (reg == NULL)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    const tp_tool_t *rd = tp_registry_find(reg, "read"), *rm = tp_registry_find(reg, "rm"),
                    *put = tp_registry_find(reg, "put"), *rm2 = tp_registry_find(reg, "rm2"),
                    *own = tp_registry_find(reg, "own");
    CU_ASSERT_FATAL(rd && rm && put && rm2 && own);
    CU_ASSERT_STRING_EQUAL(rd->description, "Reads");
    CU_ASSERT(rd->policy.idempotent);
    CU_ASSERT(!rm->policy.idempotent);
    CU_ASSERT(put->policy.idempotent);  /* idempotentHint: repeating it changes nothing more */
    CU_ASSERT(rm2->policy.idempotent);  /* the run entry's own setting wins */
    CU_ASSERT(!own->policy.idempotent); /* toolpool's form, mixed in, with a run entry too */
    CU_ASSERT_EQUAL(own->policy.timeout_us, 3000000u);
    CU_ASSERT_EQUAL(rd->policy.attempts, 2);
    /* OpenAI entries mixed in, nested and flat */
    CU_ASSERT_EQUAL(reg->n_tools, 7);
    CU_ASSERT_EQUAL(tp_registry_find(reg, "oa")->adapter, TP_ADAPTER_PLUGIN);
    CU_ASSERT_EQUAL(tp_jsonschema_dialect(tp_registry_find(reg, "oa")->schema), TP_JSONSCHEMA_DRAFT7);
    CU_ASSERT_EQUAL(tp_registry_find(reg, "of")->adapter, TP_ADAPTER_EXEC);
    /* an MCP inputSchema is 2020-12 unless it says otherwise */
    CU_ASSERT_EQUAL(tp_jsonschema_dialect(rd->schema), TP_JSONSCHEMA_2020_12);
    tp_registry_free(reg);
    free(path);
}

/* The errors of the new forms, each with its line and key, and all of one file together. */
static void test_err_formats(void)
{
    /* no adapter: the tool is named, and where it is declared */
    EXPECT_ERROR("[\n {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]", 2, "[0] (a)",
                 "no adapter: the tool is declared, and its settings are not: add \"run\": {\"a\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"inputSchema\": {}}],\n"
                 " \"run\": {\"a\": {\"exec\": [\"x\"]},\n"
                 "   \"b\": {\"exec\": [\"x\"]}}}",
                 3, "run.b", "no tool \"b\" is declared");
    /* a built-in tool is skipped (with a warning); a list of nothing else has no tool */
    EXPECT_ERROR("[{\"type\": \"custom\",\n \"name\": \"a\"}]", 1, NULL,
                 "no function tool: the list holds only OpenAI built-in tools, each skipped");
    /* toolpool's rendering of a tool: its policy in "policy", its adapter named */
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"adapter\": \"plugin\"}]}", 2,
                 "tools[0] (a).adapter", "expected the name of the tool's adapter key (\"exec\"), got \"plugin\"");
    EXPECT_ERROR(
        "{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"], \"timeout\": \"1s\",\n \"policy\": {\"timeout\": \"2s\"}}]}",
        2, "tools[0] (a).policy.timeout", "set twice: in the tool and in its \"policy\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"policy\": {\"fallback\": [\"nope\"]}}]}", 2,
                 "tools[0] (a).policy.fallback[0]", "unknown tool \"nope\"");
    EXPECT_ERROR("[{\"type\": 5,\n \"name\": \"a\"}]", 1, "[0].type",
                 "expected \"function\" (only function tools run in toolpool), got 5");
    EXPECT_ERROR("[{\"type\": \"function\",\n \"function\": 3}]", 2, "[0].function", "expected an object");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"inputSchema\": {},\n \"annotations\": 1}], "
                 "\"run\": {\"a\": {\"exec\": [\"x\"]}}}",
                 2, "tools[0] (a).annotations", "expected an object");
    /* the hints */
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"inputSchema\": {}}]}", 2,
                 "tools[0] (a).inputSchema", "toolpool calls it \"parameters\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"input_schema\": {}}]}", 2,
                 "tools[0] (a).input_schema", "Anthropic's name for it: toolpool calls it \"parameters\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"retries\": 2}]}", 2, "tools[0] (a).retries",
                 "attempts counts the first try");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n \"function\": {}}]}", 2, "tools[0] (a).function",
                 "the OpenAI wrapper goes with \"type\": \"function\"");
    EXPECT_ERROR("[{\"type\": \"function\", \"function\": {\"name\": \"a\"},\n \"timeout\": \"5s\"}]", 2,
                 "[0] (a).timeout", "a toolpool setting: it goes in \"run\"");

    EXPECT_ERROR("{\"jsonrpc\": \"2.0\", \"id\": 1,\n \"result\": {\"tools\": []}}", 1, "jsonrpc",
                 "a whole JSON-RPC answer: the registry takes its \"result\"");

    /* several errors in one file: every one, on its own line, in the file's order */
    char err[TP_REGISTRY_ERRLEN], *path, want[PATH_MAX + 512];
    tp_registry_t *reg = load("several.json",
                              "{\"tools\": [\n"                                               /* 1 */
                              "  {\"name\": \"a\", \"exec\": [\"x\"], \"timout\": \"5s\"},\n" /* 2 */
                              "  {\"name\": \"b\", \"exec\": [\"x\"],\n"                      /* 3 */
                              "   \"retries\": 1},\n"                                         /* 4 */
                              "  {\"name\": \"c\", \"inputSchema\": {}}\n"                    /* 5 */
                              " ],\n"                                                         /* 6 */
                              " \"run\": {\"zz\": {}}}\n",                                    /* 7 */
                              &path, err, sizeof err);
    CU_ASSERT_PTR_NULL(reg);
    snprintf(want, sizeof want,
             "%1$s:2: tools[0] (a).timout: unknown key (did you mean \"timeout\"?)\n"
             "%1$s:4: tools[1] (b).retries: unknown key (toolpool has \"attempts\", and attempts counts the first "
             "try: \"retries\": 2 is \"attempts\": 3)\n"
             "%1$s:5: tools[2] (c): no adapter: the tool is declared, and its settings are not: add \"run\": "
             "{\"c\": {\"exec\": [...]}} (or \"plugin\", \"mcp\", \"http\") beside the tools or in the policy file "
             "(--policy)\n"
             "%1$s:7: run.zz: no tool \"zz\" is declared (a \"run\" entry holds the settings of a tool declared in "
             "\"tools\")",
             path);
    CU_ASSERT_STRING_EQUAL(err, want);
    if (strcmp(err, want) != 0)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    free(path);

    /* past 20, "and N more errors" */
    char text[8192];
    size_t len = (size_t)snprintf(text, sizeof text, "{\"tools\": [\n");
    for (int i = 0; i < 25; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "  {\"name\": \"t%d\", \"exec\": [\"x\"], \"timeout\": 1}%s\n", i, i < 24 ? "," : "");
    snprintf(text + len, sizeof text - len, "]}\n");
    reg = load("many.json", text, &path, err, sizeof err);
    CU_ASSERT_PTR_NULL(reg);
    size_t lines = 1;
    for (const char *p = err; *p; p++)
        lines += *p == '\n';
    CU_ASSERT_EQUAL(lines, 21);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\nand 5 more errors"));
    snprintf(want, sizeof want, "%s:2: tools[0] (t0).timeout: expected a duration", path);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    free(path);
    /* a buffer too small for them all still holds the first, whole */
    char small[200];
    reg = load("many.json", text, &path, small, sizeof small);
    CU_ASSERT_PTR_NULL(reg);
    CU_ASSERT_PTR_NOT_NULL(strstr(small, "(t0).timeout: expected a duration like \"8s\", got 1\nand 24 more errors"));
    free(path);
}

/* A policy file's errors name the policy file, its line and its key. */
static void test_err_policy_file(void)
{
    char err[TP_REGISTRY_ERRLEN], want[PATH_MAX + 256];
    char *reg_path = tp_test_write(tmpdir, "pf-tools.json", "[{\"type\": \"function\", \"name\": \"a\"}]");
    char *pol = tp_test_write(tmpdir, "pf-policy.json",
                              "{\"run\": {\"a\": {\"exec\": [\"x\"],\n"
                              "   \"timeout\": 5}},\n"
                              " \"tools\": []}\n");
    CU_ASSERT_PTR_NULL(tp_registry_load_policy(reg_path, pol, err, sizeof err));
    snprintf(want, sizeof want,
             "%s:3: tools: unknown key (a policy file holds toolpool's settings only: the tools are declared in the "
             "registry file)\n%s:2: run.a.timeout: expected a duration like \"8s\", got 5",
             pol, pol);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    if (strncmp(err, want, strlen(want)) != 0)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    /* a check made once the whole tool is read names the policy file's line too */
    char *pol2 = tp_test_write(tmpdir, "pf-policy2.json",
                               "{\"run\": {\"a\": {\"exec\": [\"x\"],\n \"cwd\": \"nope\"}}}\n");
    CU_ASSERT_PTR_NULL(tp_registry_load_policy(reg_path, pol2, err, sizeof err));
    snprintf(want, sizeof want, "%s:2: run.a.cwd: %s/nope is not a directory", pol2, tmpdir);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    if (strncmp(err, want, strlen(want)) != 0)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    free(pol2);
    /* a policy file that does not exist */
    CU_ASSERT_PTR_NULL(tp_registry_load_policy(reg_path, "/nonexistent/p.json", err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/p.json: cannot read: No such file"));
    free(reg_path);
    free(pol);
}

/* A real import: the small MCP server of the tests, its tools/list in pages of 2. */
static void test_mcp_import(void)
{
    char err[1024], *path, json[2048];
    snprintf(json, sizeof json,
             "{\"defaults\": {\"attempts\": 5},\n"
             " \"tools\": [{\"name\": \"first\", \"exec\": [\"x\"], \"fallback\": \"tiny.echo\"}],\n"
             " \"mcp_servers\": {\"tiny\": {\"command\": [\"python3\", \"%s\"], \"env\": {\"TINY_PAGE\": \"2\"},\n"
             "   \"cwd\": \"/tmp\", \"defaults\": {\"attempts\": 2, \"backoff\": {\"base\": \"1s\"}},\n"
             "   \"tools\": {\"sleep\": {\"timeout\": \"250ms\", \"backoff\": {\"max\": \"2s\"}},\n"
             "              \"counter\": {\"idempotent\": true}}}},\n"
             " \"run\": {\"tiny.pid\": {\"idempotent\": false}}}",
             TP_TEST_TINY_SERVER);
    tp_registry_t *reg = load("import.json", json, &path, err, sizeof err);
    if (reg == NULL)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(reg->n_tools, 22); /* first, and the twenty-one tools of eleven pages */
    const tp_tool_t *echo = tp_registry_find(reg, "tiny.echo"), *sleep = tp_registry_find(reg, "tiny.sleep");
    CU_ASSERT_PTR_NOT_NULL_FATAL(echo);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sleep);
    CU_ASSERT_PTR_NOT_NULL(tp_registry_find(reg, "tiny.odd")); /* the last page's */
    /* the annotations as MCP defines them; the registry's own word wins */
    static const struct {
        const char *tool;
        bool idempotent;
        tp_from_t from;
    } idem[] = {
        {"tiny.echo", true, TP_FROM_MCP},            /* readOnlyHint */
        {"tiny.crash_once", true, TP_FROM_MCP},      /* idempotentHint */
        {"tiny.write", false, TP_FROM_MCP},          /* destructiveHint, idempotentHint false */
        {"tiny.odd", false, TP_FROM_MCP},            /* readOnlyHint "yes": no hint */
        {"tiny.counter", true, TP_FROM_SERVER_TOOL}, /* none: MCP says no; the server's block says yes */
        {"tiny.pid", false, TP_FROM_RUN},            /* readOnlyHint; the run entry says no */
        {"first", true, TP_FROM_BUILTIN},
    };
    for (size_t i = 0; i < sizeof idem / sizeof idem[0]; i++) {
        const tp_tool_t *t = tp_registry_find(reg, idem[i].tool);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        if (t->policy.idempotent != idem[i].idempotent || t->idempotent_from != idem[i].from)
            fprintf(stderr, "\n%s: idempotent %d from %d\n", idem[i].tool, t->policy.idempotent, t->idempotent_from);
        CU_ASSERT_EQUAL(t->policy.idempotent, idem[i].idempotent);
        CU_ASSERT_EQUAL(t->idempotent_from, idem[i].from);
    }
    /* what hosts are given back: the declaration's own keys; a hint that is not a boolean is left out */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(echo->mcp_decl, "title")), "Echo");
    CU_ASSERT(json_is_object(json_object_get(echo->mcp_decl, "outputSchema")));
    CU_ASSERT(json_is_true(json_object_get(json_object_get(echo->mcp_decl, "annotations"), "readOnlyHint")));
    CU_ASSERT(json_is_string(json_object_get(json_object_get(echo->mcp_decl, "_meta"), "tiny/kind")));
    json_t *odd = json_object_get(tp_registry_find(reg, "tiny.odd")->mcp_decl, "annotations");
    CU_ASSERT_PTR_NULL(json_object_get(odd, "readOnlyHint"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(odd, "title"));
    CU_ASSERT_PTR_NULL(tp_registry_find(reg, "first")->mcp_decl);
    CU_ASSERT_EQUAL(echo->adapter, TP_ADAPTER_MCP);
    CU_ASSERT_STRING_EQUAL(echo->mcp_tool, "echo");
    CU_ASSERT_STRING_EQUAL(echo->mcp_server, "tiny");
    CU_ASSERT_STRING_EQUAL(echo->description, "Echoes text back.");
    CU_ASSERT_PTR_NOT_NULL(echo->schema);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(echo->parameters, "type")), "object");
    CU_ASSERT_STRING_EQUAL(echo->mcp_command[0], "python3");
    CU_ASSERT_STRING_EQUAL(echo->mcp_env[0], "TINY_PAGE=2");
    CU_ASSERT_STRING_EQUAL(echo->mcp_cwd, "/tmp");
    /* registry defaults, then the server's, then the tool's, key by key */
    CU_ASSERT_EQUAL(echo->policy.attempts, 2);
    CU_ASSERT_EQUAL(echo->policy.backoff_base_us, 1000000);
    CU_ASSERT_EQUAL(echo->policy.timeout_us, 30000000);
    CU_ASSERT_EQUAL(sleep->policy.timeout_us, 250000);
    CU_ASSERT_EQUAL(sleep->policy.attempts, 2);
    CU_ASSERT_EQUAL(sleep->policy.backoff_base_us, 1000000);
    CU_ASSERT_EQUAL(sleep->policy.backoff_max_us, 2000000);
    CU_ASSERT_EQUAL(tp_registry_find(reg, "first")->policy.attempts, 5);
    tp_registry_free(reg);
    free(path);

    /* without a cwd the server runs in the registry's folder, as an exec tool does */
    snprintf(json, sizeof json, "{\"mcp_servers\": {\"tiny\": {\"command\": [\"python3\", \"%s\"]}}}",
             TP_TEST_TINY_SERVER);
    reg = load("import-cwd.json", json, &path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_STRING_EQUAL(tp_registry_find(reg, "tiny.echo")->mcp_cwd, reg->dir);
    tp_registry_free(reg);
    free(path);
}

static void test_err_fallback(void)
{
    EXPECT_EXACT("{\"tools\": [\n"                          /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"],\n" /* 2 */
                 "   \"fallback\": [\"b\",\n"               /* 3 */
                 "                \"nope\"]},\n"            /* 4 */
                 "  {\"name\": \"b\", \"exec\": [\"y\"]}\n" /* 5 */
                 "]}\n",                                    /* 6 */
                 "4: tools[0] (a).fallback[1]: unknown tool \"nope\" (a fallback must be a tool "
                 "declared in \"tools\")");
    EXPECT_ERROR("{\"defaults\": {\n"                                   /* 1 */
                 "   \"fallback\": \"cache\"},\n"                       /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]}]}", /* 3 */
                 2, "defaults.fallback", "unknown tool \"cache\"");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"fallback\": 3}]}\n",                            /* 2 */
                 2, "tools[0] (a).fallback", "expected a tool name or an array of tool names");
    EXPECT_EXACT("{\"tools\": [\n"                                                 /* 1 */
                 "  {\"name\": \"a\", \"exec\": [\"x\"],\n"                        /* 2 */
                 "   \"fallback\": [\"b\"]},\n"                                    /* 3 */
                 "  {\"name\": \"b\", \"exec\": [\"y\"],\n"                        /* 4 */
                 "   \"fallback\": \"c\"},\n"                                      /* 5 */
                 "  {\"name\": \"c\", \"exec\": [\"z\"], \"fallback\": [\"a\"]}\n" /* 6 */
                 "]}\n",                                                           /* 7 */
                 "3: tools[0] (a).fallback: the fallback chain of \"a\" loops: a -> b -> c -> a");
    /* the loop is reported where it starts, not where the walk began */
    EXPECT_ERROR("{\"tools\": [\n"                                                 /* 1 */
                 "  {\"name\": \"d\", \"exec\": [\"x\"], \"fallback\": \"b\"},\n"  /* 2 */
                 "  {\"name\": \"b\", \"exec\": [\"y\"],\n"                        /* 3 */
                 "   \"fallback\": \"c\"},\n"                                      /* 4 */
                 "  {\"name\": \"c\", \"exec\": [\"z\"], \"fallback\": [\"b\"]}\n" /* 5 */
                 "]}\n",                                                           /* 6 */
                 4, "tools[1] (b).fallback", "loops: b -> c -> b");
    EXPECT_ERROR("{\"tools\": [{\"name\": \"a\", \"exec\": [\"x\"],\n" /* 1 */
                 "   \"fallback\": \"a\"}]}\n",                        /* 2 */
                 2, "tools[0] (a).fallback", "loops: a -> a");
    /* inherited from defaults: a tool that names itself through them */
    EXPECT_ERROR("{\"defaults\": {\n"                                   /* 1 */
                 "   \"fallback\": [\"c\"]},\n"                         /* 2 */
                 " \"tools\": [{\"name\": \"a\", \"exec\": [\"x\"]},\n" /* 3 */
                 "            {\"name\": \"c\", \"exec\": [\"x\"]}]}",  /* 4 */
                 2, "defaults.fallback", "the fallback chain of \"c\" loops: c -> c");
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("registry", suite_init, suite_clean);
    if (s == NULL)
        return 2;
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"duration valid", test_duration_valid},
        {"duration invalid", test_duration_invalid},
        {"jsonpos found", test_jsonpos_found},
        {"jsonpos missing", test_jsonpos_missing},
        {"jsonpos array root", test_jsonpos_array_root},
        {"full registry", test_full_registry},
        {"built-in defaults", test_builtin_defaults},
        {"many tools", test_many_tools},
        {"fallback diamond", test_fallback_diamond},
        {"sizes", test_size_parse},
        {"limits", test_limits},
        {"error: limits", test_err_limits},
        {"worker recycling", test_worker_recycling},
        {"error: worker", test_err_worker},
        {"error: missing file", test_err_missing_file},
        {"error: JSON syntax", test_err_syntax},
        {"error: top level", test_err_top_level},
        {"schema_dialect, formats, schema_refs", test_schema_settings},
        {"error: unknown tool key", test_err_unknown_tool_key},
        {"error: unknown policy key", test_err_unknown_policy_key},
        {"error: wrong type", test_err_wrong_type},
        {"error: out of range", test_err_range},
        {"error: bad duration", test_err_duration},
        {"error: duplicate name", test_err_duplicate_name},
        {"error: no adapter", test_err_no_adapter},
        {"jsonpos: every element's line in one walk", test_jsonpos_element_lines},
        {"an OpenAI list with a policy file", test_openai_list},
        {"an MCP tools/list result with a run block; annotations", test_mcp_list},
        {"error: the other forms, hints, all errors in one pass", test_err_formats},
        {"error: the policy file", test_err_policy_file},
        {"error: two adapters", test_err_two_adapters},
        {"error: name", test_err_name},
        {"error: adapter shapes", test_err_adapter_shapes},
        {"error: kinds and classes", test_err_kinds_and_classes},
        {"error: fallback", test_err_fallback},
        {"mcp tool", test_mcp_tool},
        {"error: mcp", test_err_mcp},
        {"mcp import", test_mcp_import},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (CU_add_test(s, tests[i].name, tests[i].fn) == NULL)
            return 2;
    return tp_test_run();
}
