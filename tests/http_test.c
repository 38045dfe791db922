/*
 * The http adapter against a real server: tests/http_server.py, a scripted
 * HTTP/1.1 server started once for the suite (and a second one over TLS
 * when the openssl command is there). Registries declare http tools that
 * point at it; the calls run through the engine in-process (run_calls), or
 * through the toolpool binary where the exit status, stderr, traces and
 * exports are what is checked.
 *
 * Covered: every row of the status mapping (kind, class, attempts, and the
 * status and body start in the message), a body in the tool error
 * convention, Retry-After in both forms, a wait past the deadline, JSON,
 * text and empty bodies, URL templates, query strings and JSON bodies as
 * the server received them, secrets from the environment and from files
 * (never in results, traces, stderr, the store or exports; a missing one
 * refused at load), hangs and slow bodies, refused and hanging connects, a
 * reset mid-body, the output limit, redirects, keep-alive, and a steady
 * load.
 *
 * The server is a grandchild, reparented at once: run_calls checks that a
 * run left no child of this process, and the server must not count. It
 * exits when its stdin closes, so it never outlives this process.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "runutil.h"
#include "testutil.h"

extern char **environ;

typedef struct {
    pid_t pid;
    int in;  /* the server's stdin: closing it ends the server */
    int out; /* its stdout: the port, then one line per control command */
    int port;
    char buf[65536];
    size_t len;
} server_t;

static server_t plain = {.pid = -1, .in = -1, .out = -1};
static server_t tls = {.pid = -1, .in = -1, .out = -1};
static char work[1024];     /* this run's folder: secrets, certificates, registries */
static char base_url[64];   /* http://127.0.0.1:PORT */
static char tls_url[64];    /* https://127.0.0.1:PORT, or "" without openssl */
static char closed_url[64]; /* a port nobody listens on */
static char hole_url[64];   /* a port whose connects hang */
static char cert_path[1100];

/* The secrets, random each run: the server is told to write them as [redacted:I]. */
static char env_secret[64], file_secret[64], url_secret[64];

#define ENV_TOKEN "TP_HTTP_TEST_TOKEN"
#define ENV_URL_KEY "TP_HTTP_TEST_URL_KEY"
#define ENV_MISSING "TP_HTTP_TEST_MISSING_VAR"

/* Reads one line from the server's stdout, waiting up to ms; NULL at EOF or timeout. */
static char *srv_line(server_t *s, int ms)
{
    for (;;) {
        char *nl = memchr(s->buf, '\n', s->len);
        if (nl) {
            size_t n = (size_t)(nl - s->buf);
            char *line = strndup(s->buf, n);
            memmove(s->buf, nl + 1, s->len - n - 1);
            s->len -= n + 1;
            return line;
        }
        if (s->len == sizeof s->buf)
            return NULL;
        struct pollfd p = {.fd = s->out, .events = POLLIN};
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return NULL;
        ssize_t r = read(s->out, s->buf + s->len, sizeof s->buf - s->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        s->len += (size_t)r;
    }
}

/*
 * Starts tests/http_server.py with extra (NULL-terminated) options: fork,
 * fork again, and the middle process exits, so the server is nobody's child
 * here. Its pid comes back over a pipe, its port as its first line. 0 or -1.
 */
static int srv_start(server_t *s, const char *const extra[])
{
    int in[2], out[2], pidp[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(pidp, O_CLOEXEC) < 0) {
        perror("http_test: pipe2");
        return -1;
    }
    pid_t mid = fork();
    if (mid < 0) {
        perror("http_test: fork");
        return -1;
    }
    if (mid == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            close_range(3, ~0U, 0);
            char *argv[32];
            int n = 0;
            argv[n++] = "python3";
            argv[n++] = TP_TEST_HTTP_SERVER;
            for (int i = 0; extra && extra[i] && n < 31; i++)
                argv[n++] = (char *)extra[i];
            argv[n] = NULL;
            execvp(argv[0], argv);
            perror("http_test: exec python3");
            _exit(127);
        }
        ssize_t w = write(pidp[1], &pid, sizeof pid);
        _exit(w == (ssize_t)sizeof pid ? 0 : 1);
    }
    close(in[0]);
    close(out[1]);
    close(pidp[1]);
    int st;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
        ;
    pid_t pid = -1;
    if (read(pidp[0], &pid, sizeof pid) != (ssize_t)sizeof pid)
        pid = -1;
    close(pidp[0]);
    s->pid = pid;
    s->in = in[1];
    s->out = out[0];
    s->len = 0;
    char *line = srv_line(s, 10000);
    s->port = line ? atoi(line) : 0;
    free(line);
    if (pid <= 0 || s->port <= 0) {
        fprintf(stderr, "http_test: the server did not start\n");
        return -1;
    }
    return 0;
}

/* Closes the server's stdin and waits for its stdout to end; kills it after 5 s. */
static void srv_stop(server_t *s)
{
    if (s->in >= 0)
        close(s->in);
    s->in = -1;
    if (s->out >= 0) {
        char *line;
        while ((line = srv_line(s, 5000)) != NULL)
            free(line);
        struct pollfd p = {.fd = s->out, .events = POLLIN};
        if (poll(&p, 1, 0) == 0 && s->pid > 0)
            kill(s->pid, SIGKILL);
        close(s->out);
    }
    s->out = -1;
    s->pid = -1;
}

/* One control command; its answer line (malloc'd), or NULL. */
static char *srv_cmd(server_t *s, const char *cmd)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (write(s->in, line, (size_t)n) != n)
        return NULL;
    return srv_line(s, 10000);
}

/* The server's counts: {"requests", "connections", "paths": {path: n}}. */
static json_t *srv_stats(server_t *s)
{
    char *line = srv_cmd(s, "stats");
    json_t *v = line ? json_loads(line, 0, NULL) : NULL;
    free(line);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    return v;
}

static long path_count(json_t *stats, const char *path)
{
    return (long)json_integer_value(json_object_get(json_object_get(stats, "paths"), path));
}

/*
 * Replaces @U@ (the server), @S@ (the TLS server), @C@ (a closed port), @H@
 * (a port whose connects hang), @W@ (this run's folder) and @K@ (the TLS
 * certificate). Malloc'd.
 */
static char *subst(const char *tmpl)
{
    static const struct {
        const char *mark;
        const char *value;
    } marks[] = {{"@U@", base_url}, {"@S@", tls_url}, {"@C@", closed_url},
                 {"@H@", hole_url}, {"@W@", work},    {"@K@", cert_path}};
    tp_buf_t b = {0};
    for (const char *p = tmpl; *p; p++) {
        size_t i;
        for (i = 0; i < sizeof marks / sizeof marks[0]; i++)
            if (strncmp(p, marks[i].mark, 3) == 0)
                break;
        if (i < sizeof marks / sizeof marks[0]) {
            tp_buf_puts(&b, marks[i].value);
            p += 2;
        } else {
            tp_buf_append(&b, p, 1);
        }
    }
    tp_buf_append(&b, "", 1);
    return (char *)b.data;
}

/* run_calls with no store, after subst on both texts. */
static run_t run_http(const char *reg, const char *calls, int workers)
{
    char *r = subst(reg), *c = subst(calls);
    run_t out = run_calls(NULL, r, c, workers, 0);
    free(r);
    free(c);
    return out;
}

static int has(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* A failure's kind, class, retryable flag and attempts; the message must hold each of subs (NULL-ended). */
static void expect_fail(json_t *v, const char *id, const char *kind, const char *cls, long attempts,
                        const char *const subs[])
{
    if (v == NULL) {
        fprintf(stderr, "%s: no result\n", id);
        CU_FAIL("no result");
        return;
    }
    int good = json_is_false(json_object_get(v, "ok")) && strcmp(str(v, "error"), kind) == 0 &&
               strcmp(str(v, "class"), cls) == 0 && (attempts < 0 || num(v, "attempts") == attempts) &&
               json_is_boolean(json_object_get(v, "retryable")) &&
               json_is_true(json_object_get(v, "retryable")) == (strcmp(cls, "transient") == 0);
    for (int i = 0; subs && subs[i]; i++)
        good = good && has(str(v, "message"), subs[i]);
    if (!good) {
        char *text = json_dumps(v, JSON_COMPACT);
        fprintf(stderr, "%s: expected %s (%s, %ld attempts)", id, kind, cls, attempts);
        for (int i = 0; subs && subs[i]; i++)
            fprintf(stderr, ", message with \"%s\"", subs[i]);
        fprintf(stderr, "; got %s\n", text);
        free(text);
    }
    CU_ASSERT(good);
}

static void expect_ok(json_t *v, const char *id)
{
    int good = v && json_is_true(json_object_get(v, "ok")) && num(v, "attempts") >= 1;
    if (!good) {
        char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
        fprintf(stderr, "%s: expected ok, got %s\n", id, text ? text : "no result");
        free(text);
    }
    CU_ASSERT(good);
}

static json_t *result_of(const run_t *r, const char *id)
{
    return json_object_get(row(r, id), "result");
}

/* A JSON string's value, or "" for anything else. */
static const char *sval(json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : "";
}

/* Whether the file at path holds needle. */
static int file_has(const char *path, const char *needle)
{
    char *text = tp_test_slurp(path, NULL);
    int found = has(text, needle);
    free(text);
    return found;
}

/* The retry policy of the transient cases: two attempts, 1 ms apart, no jitter. */
#define RETRY2 "\"attempts\": 2, \"backoff\": {\"base\": \"1ms\", \"jitter\": \"none\"}"
#define STR_PARAMS(...) "\"parameters\": {\"type\": \"object\", \"properties\": {" __VA_ARGS__ "}"
#define S(name) "\"" name "\": {\"type\": \"string\"}"

/* 2xx: a JSON body is the result, other text a string, an empty body null. */
static void test_bodies(void)
{
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"json\", \"http\": {\"url\": \"@U@/json\", \"method\": \"GET\"}},"
        "{\"name\": \"text\", \"http\": {\"url\": \"@U@/text\", \"method\": \"GET\"}},"
        "{\"name\": \"empty\", \"http\": {\"url\": \"@U@/empty\", \"method\": \"GET\"}},"
        "{\"name\": \"empty200\", \"http\": {\"url\": \"@U@/empty\", \"method\": \"GET\","
        " \"query\": [\"status\"]}, " STR_PARAMS(
            S("status")) "}},"
                         "{\"name\": \"st\", \"http\": {\"url\": \"@U@/status/{code}\", \"method\": \"GET\"},"
                         " " STR_PARAMS(S("code")) ", \"required\": [\"code\"]}}]}",
        "{\"id\": \"j\", \"tool\": \"json\"}\n"
        "{\"id\": \"t\", \"tool\": \"text\"}\n"
        "{\"id\": \"e204\", \"tool\": \"empty\"}\n"
        "{\"id\": \"e200\", \"tool\": \"empty200\", \"args\": {\"status\": \"200\"}}\n"
        "{\"id\": \"s201\", \"tool\": \"st\", \"args\": {\"code\": \"201\"}}\n",
        2);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 5);
    CU_ASSERT_EQUAL(r.status, 0);
    const char *ids[] = {"j", "t", "e204", "e200", "s201"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        expect_ok(row(&r, ids[i]), ids[i]);
        CU_ASSERT_EQUAL(num(row(&r, ids[i]), "attempts"), 1);
    }
    json_t *want = json_loads("{\"rates\": {\"EUR\": 0.9, \"JPY\": 151.2}, \"n\": 2}", 0, NULL);
    CU_ASSERT(json_equal(result_of(&r, "j"), want));
    json_decref(want);
    CU_ASSERT_STRING_EQUAL(str(row(&r, "j"), "served_by"), "json");
    CU_ASSERT(json_is_string(result_of(&r, "t")));
    CU_ASSERT_STRING_EQUAL(sval(result_of(&r, "t")), "plain text body");
    /* null, present: not a missing key */
    CU_ASSERT_PTR_NOT_NULL(result_of(&r, "e204"));
    CU_ASSERT(json_is_null(result_of(&r, "e204")));
    CU_ASSERT_PTR_NOT_NULL(result_of(&r, "e200"));
    CU_ASSERT(json_is_null(result_of(&r, "e200")));
    CU_ASSERT_STRING_EQUAL(sval(result_of(&r, "s201")), "status 201 body");
    json_decref(r.rows);
}

/*
 * Every status of the mapping, its kind and class, the attempts the server
 * saw (transient kinds are retried: 2 attempts; the rest 1), and the status
 * and the body's start in the message.
 */
static void test_status_mapping(void)
{
    static const struct {
        int code;
        const char *kind;
        const char *cls;
    } rows[] = {
        {400, "BadArguments", "permanent"},     {422, "BadArguments", "permanent"},
        {401, "PermissionDenied", "permanent"}, {403, "PermissionDenied", "permanent"},
        {404, "NotFound", "permanent"},         {410, "NotFound", "permanent"},
        {409, "ToolError", "permanent"},        {418, "ToolError", "permanent"},
        {501, "ToolError", "permanent"},        {505, "ToolError", "permanent"},
        {429, "RateLimited", "transient"},      {408, "Timeout", "transient"},
        {500, "ServerError", "transient"},      {502, "ServerError", "transient"},
        {503, "ServerError", "transient"},      {504, "ServerError", "transient"},
    };
    size_t n = sizeof rows / sizeof rows[0];
    tp_buf_t calls = {0};
    for (size_t i = 0; i < n; i++)
        tp_buf_printf(&calls, "{\"id\": \"s%d\", \"tool\": \"st\", \"args\": {\"code\": \"%d\"}}\n", rows[i].code,
                      rows[i].code);
    tp_buf_puts(&calls, "{\"id\": \"eb\", \"tool\": \"errbody\"}\n{\"id\": \"ebbig\", \"tool\": \"errbig\"}\n");
    tp_buf_append(&calls, "", 1);
    json_t *before = srv_stats(&plain);
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"st\", \"http\": {\"url\": \"@U@/status/{code}\", \"method\": \"GET\"}, " RETRY2 ","
        " " STR_PARAMS(
            S("code")) ", \"required\": [\"code\"]}},"
                       "{\"name\": \"errbody\", \"http\": {\"url\": \"@U@/error-body\", \"method\": \"GET\"}, " RETRY2
                       "},"
                       "{\"name\": \"errbig\", \"http\": {\"url\": \"@U@/error-body?order=18446744073709551615\","
                       " \"method\": \"GET\"}, " RETRY2 "}]}",
        (char *)calls.data, 4);
    json_t *after = srv_stats(&plain);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_EQUAL(json_array_size(r.rows), n + 2);
    for (size_t i = 0; i < n; i++) {
        char id[16], code[8], body[32], path[32];
        snprintf(id, sizeof id, "s%d", rows[i].code);
        snprintf(code, sizeof code, "%d", rows[i].code);
        snprintf(body, sizeof body, "status %d body", rows[i].code);
        snprintf(path, sizeof path, "/status/%d", rows[i].code);
        long attempts = strcmp(rows[i].cls, "transient") == 0 ? 2 : 1;
        const char *subs[] = {code, body, NULL};
        expect_fail(row(&r, id), id, rows[i].kind, rows[i].cls, attempts, subs);
        long seen = path_count(after, path) - path_count(before, path);
        if (seen != attempts)
            fprintf(stderr, "%s: the server saw %ld requests, expected %ld\n", id, seen, attempts);
        CU_ASSERT_EQUAL(seen, attempts);
        /* one trace entry per attempt, each with the attempt's own kind */
        json_t *trace = json_object_get(row(&r, id), "trace");
        CU_ASSERT_EQUAL((long)json_array_size(trace), attempts);
        CU_ASSERT_STRING_EQUAL(str(json_array_get(trace, 0), "outcome"), rows[i].kind);
    }
    /* A 400 whose body is in the tool error convention: the body's kind wins, and it is transient. */
    const char *slow[] = {"slow down", NULL};
    expect_fail(row(&r, "eb"), "eb", "RateLimited", "transient", 2, slow);
    /* ...and so does one holding a number past int64, which jansson cannot read. */
    expect_fail(row(&r, "ebbig"), "ebbig", "RateLimited", "transient", 2, slow);
    CU_ASSERT_EQUAL(path_count(after, "/error-body") - path_count(before, "/error-body"), 4);
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

#define FLAKY_TOOL(extra)                                                                                              \
    "{\"name\": \"flaky\", \"http\": {\"url\": \"@U@/flaky/{key}\", \"method\": \"GET\","                              \
    " \"query\": [\"fail\", \"status\", \"retry_after\", \"retry_after_date\"]},"                                      \
    " \"attempts\": 3, \"backoff\": {\"base\": \"1ms\", \"jitter\": \"none\"}" extra ","                               \
    " " STR_PARAMS(S("key") "," S("fail") "," S("status") "," S("retry_after") "," S(                                  \
        "retry_after_date")) ", \"required\": [\"key\"]}}"

/* Transient failures are retried per the tool's policy, then the success is the answer. */
static void test_retried_until_ok(void)
{
    run_t r = run_http("{\"tools\": [" FLAKY_TOOL("") "]}",
                       "{\"id\": \"f1\", \"tool\": \"flaky\", \"args\": {\"key\": \"f1\", \"fail\": \"2\"}}\n"
                       "{\"id\": \"f2\", \"tool\": \"flaky\","
                       " \"args\": {\"key\": \"f2\", \"fail\": \"5\", \"status\": \"502\"}}\n"
                       "{\"id\": \"f3\", \"tool\": \"flaky\","
                       " \"args\": {\"key\": \"f3\", \"fail\": \"1\", \"status\": \"404\"}}\n",
                       2);
    json_t *v = row(&r, "f1");
    expect_ok(v, "f1");
    CU_ASSERT_EQUAL(num(v, "attempts"), 3);
    CU_ASSERT_STRING_EQUAL(str(json_array_get(json_object_get(v, "trace"), 0), "outcome"), "ServerError");
    CU_ASSERT_STRING_EQUAL(str(json_array_get(json_object_get(v, "trace"), 1), "outcome"), "ServerError");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(result_of(&r, "f1"), "tries")), 3);
    const char *s502[] = {"502", "flaky f2 try 3", NULL};
    expect_fail(row(&r, "f2"), "f2", "ServerError", "transient", 3, s502);
    /* permanent: never retried, though the next try would have succeeded */
    const char *s404[] = {"404", NULL};
    expect_fail(row(&r, "f3"), "f3", "NotFound", "permanent", 1, s404);
    json_decref(r.rows);
}

/*
 * Retry-After, in delta-seconds and as an HTTP-date: the wait after that
 * attempt (its trace's backoff_ms, and the next attempt's start) is at
 * least what the server asked, though the backoff alone is 1 ms.
 */
static void test_retry_after(void)
{
    run_t r = run_http(
        "{\"tools\": [" FLAKY_TOOL("") "]}",
        "{\"id\": \"delta\", \"tool\": \"flaky\","
        " \"args\": {\"key\": \"ra-delta\", \"fail\": \"1\", \"status\": \"429\", \"retry_after\": \"1\"}}\n"
        "{\"id\": \"date\", \"tool\": \"flaky\", \"args\": {\"key\": \"ra-date\", \"fail\": \"1\","
        " \"status\": \"503\", \"retry_after_date\": \"2\"}}\n",
        2);
    struct {
        const char *id, *kind;
        double wait_ms;
    } cases[] = {{"delta", "RateLimited", 1000}, {"date", "ServerError", 2000}};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = row(&r, cases[i].id);
        expect_ok(v, cases[i].id);
        CU_ASSERT_EQUAL(num(v, "attempts"), 2);
        CU_ASSERT_STRING_EQUAL(str(json_array_get(json_object_get(v, "trace"), 0), "outcome"), cases[i].kind);
        double backoff = trace_ms(v, 0, "backoff_ms");
        double gap = trace_ms(v, 1, "start_ms") - trace_ms(v, 0, "start_ms");
        if (backoff < cases[i].wait_ms || backoff > cases[i].wait_ms + 3000 || gap < cases[i].wait_ms)
            fprintf(stderr, "%s: Retry-After %.0f ms: backoff_ms %.1f, next attempt %.1f ms later\n", cases[i].id,
                    cases[i].wait_ms, backoff, gap);
        CU_ASSERT(backoff >= cases[i].wait_ms);
        CU_ASSERT(backoff <= cases[i].wait_ms + 3000); /* the server's wait, not a long backoff of its own */
        CU_ASSERT(gap >= cases[i].wait_ms);
    }
    json_decref(r.rows);
}

/*
 * A Retry-After that would pass the call's deadline ends the call at once
 * with that failure, the wait asked for in the result (retry_after_ms).
 */
static void test_retry_after_past_deadline(void)
{
    run_t r = run_http(
        "{\"tools\": [{\"name\": \"st\", \"http\": {\"url\": \"@U@/status/{code}\", \"method\": \"GET\","
        " \"query\": [\"retry_after\", \"retry_after_date\"]}, \"deadline\": \"3s\", \"attempts\": 3,"
        " \"backoff\": {\"base\": \"1ms\", \"jitter\": \"none\"},"
        " " STR_PARAMS(S("code") "," S("retry_after") "," S("retry_after_date")) ", \"required\": [\"code\"]}}]}",
        "{\"id\": \"d429\", \"tool\": \"st\", \"args\": {\"code\": \"429\", \"retry_after\": \"30\"}}\n"
        "{\"id\": \"d503\", \"tool\": \"st\", \"args\": {\"code\": \"503\", \"retry_after_date\": \"30\"}}\n"
        "{\"id\": \"within\", \"tool\": \"st\", \"args\": {\"code\": \"503\", \"retry_after\": \"1\"}}\n",
        3);
    const char *s429[] = {"429", "status 429 body", NULL};
    const char *s503[] = {"503", "status 503 body", NULL};
    expect_fail(row(&r, "d429"), "d429", "RateLimited", "transient", 1, s429);
    expect_fail(row(&r, "d503"), "d503", "ServerError", "transient", 1, s503);
    for (int i = 0; i < 2; i++) {
        json_t *v = row(&r, i == 0 ? "d429" : "d503");
        double took = json_number_value(json_object_get(v, "duration_ms"));
        if (took >= 1000)
            fprintf(stderr, "%s: took %.1f ms: it waited\n", str(v, "id"), took);
        CU_ASSERT(took < 1000);
        CU_ASSERT_EQUAL(trace_ms(v, 0, "backoff_ms"), 0); /* the last attempt: no wait after it */
        /* the wait asked for is in the result, for a caller that tries again later */
        long ra = num(v, "retry_after_ms");
        CU_ASSERT(i == 0 ? ra == 30000 : ra >= 29000 && ra <= 31000);
    }
    /* the control: a wait that fits is waited, and the call retried */
    json_t *v = row(&r, "within");
    expect_fail(v, "within", "ServerError", "transient", -1, s503);
    CU_ASSERT(num(v, "attempts") >= 2);
    CU_ASSERT(trace_ms(v, 0, "backoff_ms") >= 1000);
    CU_ASSERT(r.secs < 10);
    json_decref(r.rows);
}

/*
 * What the server received (/echo): {name} filled in and percent-encoded
 * ("/" and "?" included, so the path keeps its segments), the query
 * arguments in the query string, the rest as a JSON object body for POST,
 * PUT and PATCH, no body for GET and DELETE unless "body": "args"; a
 * missing placeholder refused before any request.
 */
static void test_echo_request(void)
{
#define ECHO_PARAMS                                                                                                    \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"q\": {\"type\": "     \
    "\"string\"}, \"n\": {\"type\": \"integer\"}, \"flag\": {\"type\": \"boolean\"}, \"v\": {\"type\": "               \
    "\"integer\"}}, \"required\": [\"name\"]}"
#define ECHO_GET_PARAMS STR_PARAMS(S("q") ", \"n\": {\"type\": \"integer\"}") "}"
    json_t *before = srv_stats(&plain);
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"post\", \"http\": {\"url\": \"@U@/echo/{name}/x\", \"method\": \"POST\", \"query\": [\"q\"]}, " ECHO_PARAMS
        "},"
        "{\"name\": \"put\", \"http\": {\"url\": \"@U@/echo/{name}\", \"method\": \"PUT\"}, " ECHO_PARAMS "},"
        "{\"name\": \"patch\", \"http\": {\"url\": \"@U@/echo/{name}\", \"method\": \"PATCH\"}, " ECHO_PARAMS "},"
        "{\"name\": \"delete\", \"http\": {\"url\": \"@U@/echo/{name}\", \"method\": \"DELETE\"}, " ECHO_PARAMS "},"
        "{\"name\": \"get\", \"http\": {\"url\": \"@U@/echo/get\", \"method\": \"GET\", \"query\": [\"q\"]}, " ECHO_GET_PARAMS
        "},"
        "{\"name\": \"getbody\", \"http\": {\"url\": \"@U@/echo/getbody\", \"method\": \"GET\", \"query\": [\"q\"],"
        " \"body\": \"args\"}, " ECHO_GET_PARAMS "}]}",
        "{\"id\": \"post\", \"tool\": \"post\","
        " \"args\": {\"name\": \"a b/c?d&e%\\u00e9\", \"q\": \"x y&z=1\", \"n\": 5, \"flag\": true}}\n"
        "{\"id\": \"put\", \"tool\": \"put\", \"args\": {\"name\": \"r1\", \"v\": 2}}\n"
        "{\"id\": \"patch\", \"tool\": \"patch\", \"args\": {\"name\": \"r1\", \"v\": 3}}\n"
        "{\"id\": \"delete\", \"tool\": \"delete\", \"args\": {\"name\": \"r1\", \"v\": 4}}\n"
        "{\"id\": \"get\", \"tool\": \"get\", \"args\": {\"q\": \"hello\", \"n\": 5}}\n"
        "{\"id\": \"getbody\", \"tool\": \"getbody\", \"args\": {\"q\": \"hello\", \"n\": 5}}\n"
        "{\"id\": \"noname\", \"tool\": \"post\", \"args\": {\"q\": \"x\"}}\n",
        2);
    json_t *after = srv_stats(&plain);
    static const struct {
        const char *id, *method, *segments, *query, *json;
    } want[] = {
        {"post", "POST", "[\"echo\", \"a b/c?d&e%\\u00e9\", \"x\"]", "{\"q\": [\"x y&z=1\"]}",
         "{\"n\": 5, \"flag\": true}"},
        {"put", "PUT", "[\"echo\", \"r1\"]", "{}", "{\"v\": 2}"},
        {"patch", "PATCH", "[\"echo\", \"r1\"]", "{}", "{\"v\": 3}"},
        {"delete", "DELETE", "[\"echo\", \"r1\"]", "{}", NULL},
        {"get", "GET", "[\"echo\", \"get\"]", "{\"q\": [\"hello\"]}", NULL},
        {"getbody", "GET", "[\"echo\", \"getbody\"]", "{\"q\": [\"hello\"]}", "{\"n\": 5}"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *id = want[i].id;
        json_t *got = result_of(&r, id);
        expect_ok(row(&r, id), id);
        json_t *seg = json_loads(want[i].segments, 0, NULL), *q = json_loads(want[i].query, 0, NULL);
        json_t *body = want[i].json ? json_loads(want[i].json, 0, NULL) : NULL;
        int good = strcmp(str(got, "method"), want[i].method) == 0 &&
                   json_equal(json_object_get(got, "segments"), seg) && json_equal(json_object_get(got, "query"), q);
        if (body)
            good = good && json_equal(json_object_get(got, "json"), body) &&
                   strncmp(str(json_object_get(got, "headers"), "content-type"), "application/json", 16) == 0;
        else
            good = good && strcmp(str(got, "body"), "") == 0;
        if (!good) {
            char *text = got ? json_dumps(got, JSON_COMPACT) : NULL;
            fprintf(stderr, "%s: expected %s %s ?%s body %s; the server got %s\n", id, want[i].method, want[i].segments,
                    want[i].query, want[i].json ? want[i].json : "none", text ? text : "nothing");
            free(text);
        }
        CU_ASSERT(good);
        json_decref(seg);
        json_decref(q);
        json_decref(body);
    }
    /* percent-encoded on the wire: no raw space, '?' or '&' in the path */
    const char *path = str(result_of(&r, "post"), "path");
    CU_ASSERT(!has(path, " ") && !has(path, "?") && !has(path, "&"));
    CU_ASSERT(has(path, "%2F") || has(path, "%2f"));
    /* the placeholder is required: refused before any request */
    json_t *v = row(&r, "noname");
    expect_fail(v, "noname", "InvalidArguments", "malformed", 0, NULL);
    CU_ASSERT(has(str(v, "message"), "name"));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(after, "requests")) -
                        json_integer_value(json_object_get(before, "requests")),
                    6);
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
}

/* Spawns the toolpool binary with args; stdout and stderr to files; extra_env added. Its exit status. */
static int tp_run(char *const args[], const char *out_path, const char *err_path, char *const extra_env[])
{
    char *argv[32], *envp[256];
    int n = 0, m = 0;
    argv[n++] = TP_TEST_BIN "/toolpool";
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    for (char **e = environ; *e && m < 200; e++) {
        /* a variable extra_env sets is its, not the inherited one (getenv finds the first) */
        bool over = false;
        for (int i = 0; extra_env && extra_env[i] && !over; i++) {
            const char *eq = strchr(extra_env[i], '=');
            size_t k = eq ? (size_t)(eq - extra_env[i]) + 1 : strlen(extra_env[i]);
            over = strncmp(*e, extra_env[i], k) == 0;
        }
        if (!over)
            envp[m++] = *e;
    }
    for (int i = 0; extra_env && extra_env[i] && m < 255; i++)
        envp[m++] = extra_env[i];
    envp[m] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return wait_exit(pid);
}

/* Whether the file at path holds any of the three secrets (binary-safe); says which. */
static int leaks(const char *path)
{
    size_t len = 0;
    char *text = tp_test_slurp(path, &len);
    if (text == NULL)
        return 0;
    const char *secrets[] = {env_secret, file_secret, url_secret};
    int found = 0;
    for (int i = 0; i < 3; i++)
        if (memmem(text, len, secrets[i], strlen(secrets[i])) != NULL) {
            fprintf(stderr, "%s: holds the secret %s\n", path, secrets[i]);
            found = 1;
        }
    free(text);
    return found;
}

static void in_work(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", work, name);
}

/*
 * Secrets from the environment and a file, in headers and in the URL: they
 * reach the server (it writes them back as [redacted:I]), and appear in no
 * result, no trace, no stderr, no record of the store, and no export.
 */
static void test_secrets(void)
{
    char reg[1100], calls[1100], out[1100], err[1100], store[1100], tout[1100], terr[1100];
    in_work(reg, sizeof reg, "secrets.json");
    in_work(calls, sizeof calls, "secrets.jsonl");
    in_work(out, sizeof out, "secrets.out");
    in_work(err, sizeof err, "secrets.err");
    in_work(store, sizeof store, "secrets-store");
    in_work(tout, sizeof tout, "secrets.tout");
    in_work(terr, sizeof terr, "secrets.terr");
#define AUTH                                                                                                           \
    "\"headers\": {\"Authorization\": \"Bearer ${env:" ENV_TOKEN "}\", \"X-File-Token\": \"${file:@W@/token}\"}"
    char *text = subst("{\"tools\": ["
                       "{\"name\": \"sec_echo\", \"http\": {\"url\": \"@U@/echo/k/${env:" ENV_URL_KEY
                       "}\", \"method\": \"GET\", " AUTH "}},"
                       "{\"name\": \"sec_fail\", \"http\": {\"url\": \"@U@/status/500\", \"method\": \"GET\", " AUTH
                       "}, " RETRY2 "},"
                       "{\"name\": \"sec_notfound\", \"http\": {\"url\": \"@U@/nope/${env:" ENV_URL_KEY
                       "}\", \"method\": \"GET\", " AUTH "}},"
                       "{\"name\": \"sec_refused\", \"http\": {\"url\": \"@C@/k/${env:" ENV_URL_KEY
                       "}\", \"method\": \"GET\", " AUTH "},"
                       " \"attempts\": 1}]}");
    free(tp_test_write(work, "secrets.json", text));
    free(text);
    free(tp_test_write(work, "secrets.jsonl",
                       "{\"id\": \"s1\", \"tool\": \"sec_echo\"}\n"
                       "{\"id\": \"s2\", \"tool\": \"sec_fail\"}\n"
                       "{\"id\": \"s3\", \"tool\": \"sec_notfound\"}\n"
                       "{\"id\": \"s4\", \"tool\": \"sec_refused\"}\n"));
    char env_tok[128], env_key[128];
    snprintf(env_tok, sizeof env_tok, ENV_TOKEN "=%s", env_secret);
    snprintf(env_key, sizeof env_key, ENV_URL_KEY "=%s", url_secret);
    char *env[] = {env_tok, env_key, NULL};

    char *run_args[] = {"run", "-j", "1", "--store", store, "-r", reg, "-o", out, calls, NULL};
    int rc = tp_run(run_args, tout, err, env);
    if (rc != 1) {
        char *e = tp_test_slurp(err, NULL);
        fprintf(stderr, "secrets: toolpool run exited %d, expected 1; stderr:\n%s\n", rc, e ? e : "");
        free(e);
    }
    CU_ASSERT_EQUAL(rc, 1);
    int lines = 0;
    json_t *res = load_results(out, &lines);
    CU_ASSERT_EQUAL(lines, 4);
    json_t *s1 = json_object_get(res, "s1");
    expect_ok(s1, "s1");
    json_t *got = json_object_get(s1, "result");
    json_t *hdrs = json_object_get(got, "headers");
    CU_ASSERT_STRING_EQUAL(str(hdrs, "authorization"), "Bearer [redacted:0]");
    CU_ASSERT_STRING_EQUAL(str(hdrs, "x-file-token"), "[redacted:1]");
    json_t *seg = json_loads("[\"echo\", \"k\", \"[redacted:2]\"]", 0, NULL);
    CU_ASSERT(json_equal(json_object_get(got, "segments"), seg));
    json_decref(seg);
    const char *s500[] = {"500", "status 500 body", NULL};
    expect_fail(json_object_get(res, "s2"), "s2", "ServerError", "transient", 2, s500);
    const char *s404[] = {"404", "no such path", NULL};
    expect_fail(json_object_get(res, "s3"), "s3", "NotFound", "permanent", 1, s404);
    expect_fail(json_object_get(res, "s4"), "s4", "ServerError", "transient", 1, NULL);
    json_decref(res);
    CU_ASSERT(!leaks(out));
    CU_ASSERT(!leaks(err));
    CU_ASSERT(!leaks(tout));

    /* The store's records (the map file, every byte of it). */
    char mdb[1200];
    snprintf(mdb, sizeof mdb, "%s/data.mdb", store);
    struct stat st;
    CU_ASSERT(stat(mdb, &st) == 0 && st.st_size > 0);
    CU_ASSERT(!leaks(mdb));

    /* Traces: of the results file, and of the store's records. */
    char *trace_file[] = {"trace", out, NULL};
    CU_ASSERT_EQUAL(tp_run(trace_file, tout, terr, env), 0);
    CU_ASSERT(file_has(tout, "sec_fail")); /* it printed something */
    CU_ASSERT(!leaks(tout));
    CU_ASSERT(!leaks(terr));
    char *trace_json[] = {"trace", "--json", "--store", store, "s1", "s2", "s3", "s4", NULL};
    CU_ASSERT_EQUAL(tp_run(trace_json, tout, terr, env), 0);
    CU_ASSERT(file_has(tout, "\"s4\""));
    CU_ASSERT(!leaks(tout));
    CU_ASSERT(!leaks(terr));

    /* Exports in every format, and the list. */
    const char *formats[] = {"toolpool", "openai", "mcp"};
    for (int i = 0; i < 3; i++) {
        char *exp[] = {"tools", "export", "--format", (char *)formats[i], "-r", reg, NULL};
        rc = tp_run(exp, tout, terr, env);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(file_has(tout, "sec_echo"));
        if (leaks(tout) || leaks(terr))
            fprintf(stderr, "secrets: tools export --format %s leaks\n", formats[i]);
        CU_ASSERT(!leaks(tout));
        CU_ASSERT(!leaks(terr));
    }
    char *list[] = {"tools", "list", "-r", reg, NULL};
    CU_ASSERT_EQUAL(tp_run(list, tout, terr, env), 0);
    CU_ASSERT(file_has(tout, "http"));
    CU_ASSERT(!leaks(tout));
    CU_ASSERT(!leaks(terr));
}

/* A secret that is not there is a registry error (exit 2) that names it; with it there, the load succeeds. */
static void test_missing_secret(void)
{
    char reg_env[1100], reg_file[1100], out[1100], err[1100];
    in_work(reg_env, sizeof reg_env, "missing-env.json");
    in_work(reg_file, sizeof reg_file, "missing-file.json");
    in_work(out, sizeof out, "missing.out");
    in_work(err, sizeof err, "missing.err");
    char *text = subst("{\"tools\": [{\"name\": \"m\", \"http\": {\"url\": \"@U@/json\", \"method\": \"GET\","
                       " \"headers\": {\"Authorization\": \"Bearer ${env:" ENV_MISSING "}\"}}}]}");
    free(tp_test_write(work, "missing-env.json", text));
    free(text);
    text = subst("{\"tools\": [{\"name\": \"m\", \"http\": {\"url\": \"@U@/json\", \"method\": \"GET\","
                 " \"headers\": {\"X-Token\": \"${file:@W@/no-such-token-file}\"}}}]}");
    free(tp_test_write(work, "missing-file.json", text));
    free(text);
    unsetenv(ENV_MISSING);

    char *list_env[] = {"tools", "list", "-r", reg_env, NULL};
    CU_ASSERT_EQUAL(tp_run(list_env, out, err, NULL), 2);
    char *e = tp_test_slurp(err, NULL);
    if (!has(e, ENV_MISSING) || !has(e, "missing-env.json"))
        fprintf(stderr, "missing env secret: stderr was: %s\n", e ? e : "");
    CU_ASSERT(has(e, ENV_MISSING));
    CU_ASSERT(has(e, "missing-env.json"));
    free(e);
    /* run refuses it before any call */
    char calls[1100];
    in_work(calls, sizeof calls, "missing.jsonl");
    free(tp_test_write(work, "missing.jsonl", "{\"id\": \"m1\", \"tool\": \"m\"}\n"));
    char store[1100];
    in_work(store, sizeof store, "missing-store");
    char *run_args[] = {"run", "-q", "--store", store, "-r", reg_env, calls, NULL};
    CU_ASSERT_EQUAL(tp_run(run_args, out, err, NULL), 2);
    e = tp_test_slurp(err, NULL);
    CU_ASSERT(has(e, ENV_MISSING));
    free(e);

    char *list_file[] = {"tools", "list", "-r", reg_file, NULL};
    CU_ASSERT_EQUAL(tp_run(list_file, out, err, NULL), 2);
    e = tp_test_slurp(err, NULL);
    if (!has(e, "no-such-token-file"))
        fprintf(stderr, "missing file secret: stderr was: %s\n", e ? e : "");
    CU_ASSERT(has(e, "no-such-token-file"));
    free(e);

    /* the control: with the variable set, the same registry loads */
    char *env[] = {ENV_MISSING "=now-it-is-here", NULL};
    int rc = tp_run(list_env, out, err, env);
    if (rc != 0) {
        e = tp_test_slurp(err, NULL);
        fprintf(stderr, "missing env secret, now set: exit %d: %s\n", rc, e ? e : "");
        free(e);
    }
    CU_ASSERT_EQUAL(rc, 0);
}

/*
 * libcurl is opened where it is needed, not linked: a run of an exec tool
 * alone maps it in neither the worker nor the supervisor (the tool counts
 * it in /proc of both), and with an http tool in the registry, in the
 * worker alone, from its start; with TOOLPOOL_LIBCURL naming a library that
 * is not there, an exec tool's call still runs, the http call fails
 * ToolError with dlopen's reason, and an OTLP export refuses to start
 * (exit 2) saying why. The control: the same run with the real library
 * calls the server.
 */
static void test_without_libcurl(void)
{
    char reg[1100], calls[1100], out[1100], err[1100], store[1100], results[1100];
    in_work(reg, sizeof reg, "nocurl.json");
    in_work(calls, sizeof calls, "nocurl.jsonl");
    in_work(out, sizeof out, "nocurl.out");
    in_work(err, sizeof err, "nocurl.err");
    in_work(results, sizeof results, "nocurl-results.jsonl");
/* An exec tool that answers [W, S]: how many of its worker's (W) and supervisor's (S) mappings are libcurl's. */
#define MAPS_TOOL                                                                                                      \
    "{\"name\": \"maps\", \"exec\": [\"/bin/sh\", \"-c\", \"s=$(awk '/^PPid:/ {print $2}' /proc/$PPID/status);"        \
    " w=$(grep -c libcurl /proc/$PPID/maps); v=$(grep -c libcurl /proc/$s/maps); echo [$w,$v]\"]}"
    char *text = subst("{\"tools\": [{\"name\": \"h\", \"http\": {\"url\": \"@U@/json\", \"method\": \"GET\"}},"
                       " {\"name\": \"t\", \"exec\": [\"/bin/true\"]}, " MAPS_TOOL "]}");
    free(tp_test_write(work, "nocurl.json", text));
    free(text);
    free(tp_test_write(work, "nocurl-exec.json", "{\"tools\": [" MAPS_TOOL "]}"));
    free(tp_test_write(work, "nocurl.jsonl", "{\"id\": \"h1\", \"tool\": \"h\"}\n{\"id\": \"t1\", \"tool\": \"t\"}\n"));
    char *gone[] = {"TOOLPOOL_LIBCURL=/nonexistent/libcurl.so.4", NULL};
    /*
     * Not loaded where no tool needs it: with exec tools alone, neither the
     * worker nor its supervisor maps libcurl; with an http tool in the
     * registry, the worker has it before its first call, the supervisor
     * still not.
     */
    free(tp_test_write(work, "maps.jsonl", "{\"id\": \"m1\", \"tool\": \"maps\"}\n"));
    char maps_calls[1100], exec_reg[1100];
    in_work(maps_calls, sizeof maps_calls, "maps.jsonl");
    in_work(exec_reg, sizeof exec_reg, "nocurl-exec.json");
    int rc;
    for (int http = 0; http < 2; http++) {
        in_work(store, sizeof store, http ? "nocurl-store-maps-http" : "nocurl-store-maps");
        char *maps_args[] = {"run", "-q",    "--store",  store, "-r", http ? reg : exec_reg,
                             "-o",  results, maps_calls, NULL};
        rc = tp_run(maps_args, out, err, NULL);
        char *mapped = tp_test_slurp(results, NULL);
        json_error_t mje;
        json_t *mrow = mapped ? json_loads(mapped, JSON_DISABLE_EOF_CHECK, &mje) : NULL;
        json_t *counts = json_object_get(mrow, "result");
        json_int_t w = json_integer_value(json_array_get(counts, 0)), v = json_integer_value(json_array_get(counts, 1));
        bool good = rc == 0 && json_array_size(counts) == 2 && v == 0 && (http ? w > 0 : w == 0);
        if (!good)
            fprintf(stderr, "libcurl maps (%s): exit %d: %s\n", http ? "http registry" : "exec alone", rc,
                    mapped ? mapped : "");
        CU_ASSERT(good);
        json_decref(mrow);
        free(mapped);
    }
    for (int with = 0; with < 2; with++) {
        in_work(store, sizeof store, with ? "nocurl-store-with" : "nocurl-store-without");
        char *args[] = {"run", "-q", "--store", store, "-r", reg, "-o", results, calls, NULL};
        rc = tp_run(args, out, err, with ? NULL : gone);
        CU_ASSERT_EQUAL(rc, with ? 0 : 1);
        char *body = tp_test_slurp(results, NULL);
        json_error_t je;
        json_t *h = NULL, *t = NULL;
        for (char *line = body ? strtok(body, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            json_t *v = json_loads(line, 0, &je);
            const char *id = json_string_value(json_object_get(v, "id"));
            if (id && strcmp(id, "h1") == 0 && h == NULL)
                h = json_incref(v);
            else if (id && strcmp(id, "t1") == 0 && t == NULL)
                t = json_incref(v);
            json_decref(v);
        }
        free(body);
        CU_ASSERT(json_is_true(json_object_get(t, "ok")));
        if (with) {
            CU_ASSERT(json_is_true(json_object_get(h, "ok")));
        } else {
            CU_ASSERT(json_is_false(json_object_get(h, "ok")));
            CU_ASSERT_STRING_EQUAL(sval(json_object_get(h, "error")), "ToolError");
            const char *msg = sval(json_object_get(h, "message"));
            if (!has(msg, "cannot load libcurl") || !has(msg, "/nonexistent/libcurl.so.4"))
                fprintf(stderr, "without libcurl: h1 says: %s\n", msg ? msg : "");
            CU_ASSERT(has(msg, "cannot load libcurl"));
            CU_ASSERT(has(msg, "/nonexistent/libcurl.so.4"));
        }
        json_decref(h);
        json_decref(t);
    }
    /* the exporter needs it at its start: refused, with the reason, before any call */
    in_work(store, sizeof store, "nocurl-store-otlp");
    char *otlp[] = {"run", "-q", "--store", store, "-r", reg, "-o", results, "--otlp", "http://127.0.0.1:9/",
                    calls, NULL};
    CU_ASSERT_EQUAL(tp_run(otlp, out, err, gone), 2);
    CU_ASSERT(file_has(err, "cannot load libcurl"));
    CU_ASSERT(file_has(err, "/nonexistent/libcurl.so.4"));
}

/*
 * Transport: a server that hangs past the timeout (Timeout, transient, so
 * retried), a body sent slowly (in time: the whole body; past the timeout:
 * Timeout), a connection reset mid-body, a refused connect and one that
 * hangs past connect_timeout (ServerError, transient).
 */
static void test_transport(void)
{
    char *hole = srv_cmd(&plain, "blackhole");
    CU_ASSERT_PTR_NOT_NULL_FATAL(hole);
    snprintf(hole_url, sizeof hole_url, "http://127.0.0.1:%s", hole);
    free(hole);
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"hang\", \"http\": {\"url\": \"@U@/hang\", \"method\": \"GET\"}, \"timeout\": \"300ms\", " RETRY2
        "},"
        "{\"name\": \"trickle\", \"http\": {\"url\": \"@U@/trickle\", \"method\": \"GET\", \"query\": [\"n\", \"ms\"]},"
        " \"timeout\": \"5s\", \"attempts\": 1, " STR_PARAMS(S("n") "," S(
            "ms")) "}},"
                   "{\"name\": \"trickle_slow\", \"http\": {\"url\": \"@U@/trickle\", \"method\": \"GET\", \"query\": [\"n\", \"ms\"]},"
                   " \"timeout\": \"400ms\", \"attempts\": 1, " STR_PARAMS(S("n") "," S(
                       "ms")) "}},"
                              "{\"name\": \"reset\", \"http\": {\"url\": \"@U@/reset\", \"method\": \"GET\"}, " RETRY2
                              "},"
                              "{\"name\": \"refused\", \"http\": {\"url\": \"@C@/json\", \"method\": \"GET\"}, " RETRY2
                              "},"
                              "{\"name\": \"hole\", \"http\": {\"url\": \"@H@/json\", \"method\": \"GET\"}, \"timeout\": \"10s\","
                              " \"connect_timeout\": \"300ms\", \"attempts\": 1}]}",
        "{\"id\": \"hang\", \"tool\": \"hang\"}\n"
        "{\"id\": \"trickle\", \"tool\": \"trickle\", \"args\": {\"n\": \"8\", \"ms\": \"100\"}}\n"
        "{\"id\": \"trickle_slow\", \"tool\": \"trickle_slow\", \"args\": {\"n\": \"10\", \"ms\": \"200\"}}\n"
        "{\"id\": \"reset\", \"tool\": \"reset\"}\n"
        "{\"id\": \"refused\", \"tool\": \"refused\"}\n"
        "{\"id\": \"hole\", \"tool\": \"hole\"}\n",
        3);
    json_t *v = row(&r, "hang");
    expect_fail(v, "hang", "Timeout", "transient", 2, NULL);
    double took = json_number_value(json_object_get(v, "duration_ms"));
    CU_ASSERT(took >= 550 && took < 5000);
    CU_ASSERT(trace_ms(v, 0, "duration_ms") >= 290 && trace_ms(v, 0, "duration_ms") < 2000);

    expect_ok(row(&r, "trickle"), "trickle");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(result_of(&r, "trickle"), "pieces")), 8);
    v = row(&r, "trickle_slow");
    expect_fail(v, "trickle_slow", "Timeout", "transient", 1, NULL);
    took = json_number_value(json_object_get(v, "duration_ms"));
    CU_ASSERT(took >= 390 && took < 1500); /* the body would have taken 2 s */

    expect_fail(row(&r, "reset"), "reset", "ServerError", "transient", 2, NULL);
    expect_fail(row(&r, "refused"), "refused", "ServerError", "transient", 2, NULL);
    v = row(&r, "hole");
    expect_fail(v, "hole", "ServerError", "transient", 1, NULL);
    took = json_number_value(json_object_get(v, "duration_ms"));
    if (took >= 3000)
        fprintf(stderr, "hole: took %.1f ms: connect_timeout 300ms not applied\n", took);
    CU_ASSERT(took < 3000);
    json_decref(r.rows);
}

/* A body past limits.output fails the attempt (permanent, not retried); one within it is the result. */
static void test_output_limit(void)
{
    run_t r = run_http(
        "{\"tools\": [{\"name\": \"huge\", \"http\": {\"url\": \"@U@/huge\", \"method\": \"GET\", \"query\": [\"bytes\"]},"
        " \"limits\": {\"output\": \"1K\"}, " RETRY2 ", " STR_PARAMS(
            S("bytes")) "}},"
                        "{\"name\": \"huge_default\", \"http\": {\"url\": \"@U@/huge\", \"method\": \"GET\"}, " RETRY2
                        "}]}",
        "{\"id\": \"small\", \"tool\": \"huge\", \"args\": {\"bytes\": \"512\"}}\n"
        "{\"id\": \"over\", \"tool\": \"huge\", \"args\": {\"bytes\": \"2048\"}}\n"
        "{\"id\": \"5m\", \"tool\": \"huge\"}\n"
        "{\"id\": \"5m_default\", \"tool\": \"huge_default\"}\n",
        2);
    expect_ok(row(&r, "small"), "small");
    CU_ASSERT_EQUAL(json_string_length(result_of(&r, "small")), 512);
    /*
     * The spec of the adapter names ResourceLimit; the guide names the output
     * limit's failure OutputTooLarge for every other adapter. Either is a
     * permanent failure of one attempt with no result.
     */
    const char *ids[] = {"over", "5m", "5m_default"};
    for (int i = 0; i < 3; i++) {
        json_t *v = row(&r, ids[i]);
        const char *kind = str(v, "error");
        int good = v && (strcmp(kind, "ResourceLimit") == 0 || strcmp(kind, "OutputTooLarge") == 0);
        if (!good)
            fprintf(stderr, "%s: expected ResourceLimit or OutputTooLarge, got \"%s\"\n", ids[i], kind);
        CU_ASSERT(good);
        expect_fail(v, ids[i], kind, "permanent", 1, NULL);
        CU_ASSERT_PTR_NULL(json_object_get(v, "result"));
    }
    json_decref(r.rows);
}

/* Up to 5 redirects are followed; a sixth, or a loop, is ToolError after at most 6 requests. */
static void test_redirects(void)
{
    json_t *before = srv_stats(&plain);
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"redir\", \"http\": {\"url\": \"@U@/redirect/{n}\", \"method\": \"GET\"}, " RETRY2 ","
        " " STR_PARAMS(S(
            "n")) ", \"required\": [\"n\"]}},"
                  "{\"name\": \"loop\", \"http\": {\"url\": \"@U@/redirect-loop\", \"method\": \"GET\"}, " RETRY2 "},"
                  "{\"name\": \"to\", \"http\": {\"url\": \"@U@/redirect-to\", \"method\": \"GET\", \"query\": [\"url\"]},"
                  " " STR_PARAMS(S("url")) "}}]}",
        "{\"id\": \"r5\", \"tool\": \"redir\", \"args\": {\"n\": \"5\"}}\n"
        "{\"id\": \"r6\", \"tool\": \"redir\", \"args\": {\"n\": \"6\"}}\n"
        "{\"id\": \"loop\", \"tool\": \"loop\"}\n"
        "{\"id\": \"to\", \"tool\": \"to\", \"args\": {\"url\": \"@U@/text\"}}\n",
        1);
    json_t *after = srv_stats(&plain);
    expect_ok(row(&r, "r5"), "r5");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(result_of(&r, "r5"), "n")), 2); /* /json's body */
    expect_fail(row(&r, "r6"), "r6", "ToolError", "permanent", 1, NULL);
    expect_fail(row(&r, "loop"), "loop", "ToolError", "permanent", 1, NULL);
    long loops = path_count(after, "/redirect-loop") - path_count(before, "/redirect-loop");
    if (loops < 2 || loops > 6)
        fprintf(stderr, "loop: the server saw %ld requests\n", loops);
    CU_ASSERT(loops >= 2 && loops <= 6);
    expect_ok(row(&r, "to"), "to");
    CU_ASSERT_STRING_EQUAL(sval(result_of(&r, "to")), "plain text body");
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
}

/* 20 calls at -j 1, one in flight at a time, over at most 2 TCP connections. */
static void test_keepalive(void)
{
    tp_buf_t calls = {0};
    for (int i = 0; i < 20; i++)
        tp_buf_printf(&calls, "{\"id\": \"k%d\", \"tool\": \"json\", \"args\": {\"i\": %d}}\n", i, i);
    tp_buf_append(&calls, "", 1);
    json_t *before = srv_stats(&plain);
    run_t r = run_http("{\"tools\": [{\"name\": \"json\", \"http\": {\"url\": \"@U@/json\", \"method\": \"GET\"},"
                       " \"max_in_flight\": 1}]}",
                       (char *)calls.data, 1);
    json_t *after = srv_stats(&plain);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.rep.summary.ok, 20);
    CU_ASSERT_EQUAL(path_count(after, "/json") - path_count(before, "/json"), 20);
    long conns = (long)(json_integer_value(json_object_get(after, "connections")) -
                        json_integer_value(json_object_get(before, "connections")));
    if (conns > 2)
        fprintf(stderr, "keep-alive: 20 calls took %ld connections\n", conns);
    CU_ASSERT(conns >= 1 && conns <= 2);
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/*
 * 200 calls of a 50 ms endpoint at -j 2, 64 in flight a worker: all ok, in
 * a generous bound, over no more connections than calls at once.
 */
static void test_load(void)
{
    tp_buf_t calls = {0};
    for (int i = 0; i < 200; i++)
        tp_buf_printf(&calls, "{\"id\": \"l%d\", \"tool\": \"slow\", \"args\": {\"ms\": 50, \"i\": %d}}\n", i, i);
    tp_buf_append(&calls, "", 1);
    json_t *before = srv_stats(&plain);
    run_t r = run_http("{\"tools\": [{\"name\": \"slow\", \"http\": {\"url\": \"@U@/slow\", \"method\": \"GET\","
                       " \"query\": [\"ms\"]}, \"timeout\": \"5s\", \"parameters\": {\"type\": \"object\","
                       " \"properties\": {\"ms\": {\"type\": \"integer\"}, \"i\": {\"type\": \"integer\"}}}}]}",
                       (char *)calls.data, 2);
    json_t *after = srv_stats(&plain);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(json_array_size(r.rows), 200);
    CU_ASSERT_EQUAL(r.rep.summary.ok, 200);
    CU_ASSERT_EQUAL(path_count(after, "/slow") - path_count(before, "/slow"), 200);
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(result_of(&r, "l7"), "slept_ms")), 50, 1e-9);
    long conns = (long)(json_integer_value(json_object_get(after, "connections")) -
                        json_integer_value(json_object_get(before, "connections")));
    if (r.secs >= 60 || conns > 128)
        fprintf(stderr, "load: %.1f s, %ld connections\n", r.secs, conns);
    CU_ASSERT(r.secs < 60);
    CU_ASSERT(conns <= 128);
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
    tp_buf_free(&calls);
}

/*
 * https with the test's own certificate as ca_file; without it the
 * certificate is refused; a redirect from https to http is never followed.
 */
static void test_https(void)
{
    if (tls_url[0] == 0) {
        fprintf(stderr, "https: skipped, no openssl command to make a certificate\n");
        return;
    }
    json_t *before = srv_stats(&plain);
    run_t r = run_http(
        "{\"tools\": ["
        "{\"name\": \"tls_json\", \"http\": {\"url\": \"@S@/json\", \"method\": \"GET\", \"ca_file\": \"@K@\"}},"
        "{\"name\": \"tls_noca\", \"http\": {\"url\": \"@S@/json\", \"method\": \"GET\"}, \"attempts\": 1},"
        "{\"name\": \"tls_to\", \"http\": {\"url\": \"@S@/redirect-to\", \"method\": \"GET\", \"query\": [\"url\"],"
        " \"ca_file\": \"@K@\"}, " RETRY2 ", " STR_PARAMS(S("url")) "}}]}",
        "{\"id\": \"ok\", \"tool\": \"tls_json\"}\n"
        "{\"id\": \"noca\", \"tool\": \"tls_noca\"}\n"
        "{\"id\": \"tls_tls\", \"tool\": \"tls_to\", \"args\": {\"url\": \"@S@/text\"}}\n"
        "{\"id\": \"down\", \"tool\": \"tls_to\", \"args\": {\"url\": \"@U@/json\"}}\n",
        2);
    json_t *after = srv_stats(&plain);
    expect_ok(row(&r, "ok"), "ok");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(result_of(&r, "ok"), "n")), 2);
    CU_ASSERT(json_is_false(json_object_get(row(&r, "noca"), "ok")));
    expect_ok(row(&r, "tls_tls"), "tls_tls");
    CU_ASSERT_STRING_EQUAL(sval(result_of(&r, "tls_tls")), "plain text body");
    expect_fail(row(&r, "down"), "down", "ToolError", "permanent", 1, NULL);
    CU_ASSERT_EQUAL(path_count(after, "/json"), path_count(before, "/json")); /* never reached over http */
    json_decref(before);
    json_decref(after);
    json_decref(r.rows);
}

/* A port that was just free: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return 1;
    close(fd);
    return ntohs(a.sin_port);
}

/* Makes a self-signed certificate for 127.0.0.1 in work/; 0, or -1 without openssl. */
static int make_cert(char *key_path, size_t cap)
{
    snprintf(cert_path, sizeof cert_path, "%s/cert.pem", work);
    snprintf(key_path, cap, "%s/key.pem", work);
    char *argv[] = {
        "openssl", "req",     "-x509", "-newkey", "rsa:2048", "-nodes",        "-keyout", key_path,
        "-out",    cert_path, "-days", "2",       "-subj",    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "openssl", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    return wait_exit(pid) == 0 ? 0 : -1;
}

static void random_hex(char *out, size_t cap, const char *tag)
{
    unsigned char r[12];
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(r, 1, sizeof r, f) != sizeof r) {
        perror("http_test: /dev/urandom");
        exit(2);
    }
    fclose(f);
    int n = snprintf(out, cap, "%s-", tag);
    for (size_t i = 0; i < sizeof r && (size_t)n + 2 < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", r[i]);
}

static int suite_init(void)
{
    snprintf(work, sizeof work, "%s", tp_test_tmpdir("http"));
    random_hex(env_secret, sizeof env_secret, "envsecret");
    random_hex(file_secret, sizeof file_secret, "filesecret");
    random_hex(url_secret, sizeof url_secret, "urlsecret");
    free(tp_test_write(work, "token", file_secret)); /* no newline: the value is the file's bytes */
    const char *redact[] = {"--redact", env_secret, "--redact", file_secret, "--redact", url_secret, NULL};
    if (srv_start(&plain, redact) < 0)
        return 1;
    snprintf(base_url, sizeof base_url, "http://127.0.0.1:%d", plain.port);
    snprintf(closed_url, sizeof closed_url, "http://127.0.0.1:%d", closed_port());
    char key[1100];
    if (make_cert(key, sizeof key) == 0) {
        const char *opts[] = {"--tls", cert_path, key, NULL};
        if (srv_start(&tls, opts) < 0)
            return 1;
        snprintf(tls_url, sizeof tls_url, "https://127.0.0.1:%d", tls.port);
    } else {
        fprintf(stderr, "http_test: no openssl command: the https cases are skipped\n");
    }
    return 0;
}

static int suite_cleanup(void)
{
    srv_stop(&plain);
    srv_stop(&tls);
    tp_test_rmtree(work);
    return 0;
}

/*
 * Nothing takes a call elsewhere than its tool says: an arg that is a dot
 * segment is refused, and a redirect to another host is not followed by a
 * tool with headers of its own (they may hold its secrets), while one
 * without follows it.
 */
static void test_stays_home(void)
{
    char other[128], calls[1024];
    snprintf(other, sizeof other, "http://localhost:%s/json", strrchr(base_url, ':') + 1);
    snprintf(calls, sizeof calls,
             "{\"id\": \"dot\", \"tool\": \"rec\", \"args\": {\"id\": \"..\"}}\n"
             "{\"id\": \"hdr\", \"tool\": \"away_h\", \"args\": {\"url\": \"%s\"}}\n"
             "{\"id\": \"bare\", \"tool\": \"away\", \"args\": {\"url\": \"%s\"}}\n",
             other, other);
    run_t r = run_http(
        "{\"tools\": [{\"name\": \"rec\", \"http\": {\"url\": \"@U@/echo/records/{id}\","
        " \"method\": \"DELETE\"}, " STR_PARAMS(S(
            "id")) ", \"required\": [\"id\"]}},"
                   "{\"name\": \"away_h\", \"http\": {\"url\": \"@U@/redirect-to\", \"query\": [\"url\"],"
                   " \"headers\": {\"X-Key\": \"k\"}}, " STR_PARAMS(S(
                       "url")) "}},"
                               "{\"name\": \"away\", \"http\": {\"url\": \"@U@/redirect-to\", \"query\": [\"url\"]}, " STR_PARAMS(
                                   S("url")) "}}]}",
        calls, 1);
    const char *dot[] = {"cannot be", NULL}, *away[] = {"another host", NULL};
    expect_fail(row(&r, "dot"), "dot", "BadArguments", "permanent", 1, dot);
    expect_fail(row(&r, "hdr"), "hdr", "ToolError", "permanent", 1, away);
    json_t *v = row(&r, "bare");
    CU_ASSERT_TRUE(v && json_is_true(json_object_get(v, "ok")));
    json_decref(r.rows);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("http", suite_init, suite_cleanup);
    CU_add_test(s, "2xx: JSON, text and empty bodies", test_bodies);
    CU_add_test(s, "status mapping: every status, kind and class", test_status_mapping);
    CU_add_test(s, "transient statuses retried until ok", test_retried_until_ok);
    CU_add_test(s, "Retry-After: delta-seconds and HTTP-date", test_retry_after);
    CU_add_test(s, "Retry-After past the deadline ends the call", test_retry_after_past_deadline);
    CU_add_test(s, "no dot segments, no headers taken to another host", test_stays_home);
    CU_add_test(s, "URL template, query and body as received", test_echo_request);
    CU_add_test(s, "secrets reach the server and nothing else", test_secrets);
    CU_add_test(s, "a missing secret is a registry error", test_missing_secret);
    CU_add_test(s, "transport: hang, trickle, reset, refused, connect timeout", test_transport);
    CU_add_test(s, "libcurl opened where it is needed: a machine without it", test_without_libcurl);
    CU_add_test(s, "the output limit", test_output_limit);
    CU_add_test(s, "redirects: 5 followed, a loop refused", test_redirects);
    CU_add_test(s, "keep-alive: 20 calls over at most 2 connections", test_keepalive);
    CU_add_test(s, "200 calls at -j 2", test_load);
    CU_add_test(s, "https: ca_file, no downgrade on redirect", test_https);
    return tp_test_run();
}
