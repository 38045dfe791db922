/*
 * The mcp adapter: a tool served by an MCP server over stdio.
 *
 * A worker keeps one session per server it has been asked for (the same
 * command, environment and directory: every tool imported from one
 * "mcp_servers" entry shares it), up to SERVERS_MAX, the least recently
 * used closed past that. A session starts at the first call that needs it:
 * the server is spawned in the worker's process group (so the pool's kill
 * at a timeout takes it with the worker), the initialize handshake runs
 * once, then each call is one tools/call. The sweeps that kill what a tool
 * leaves behind spare a live server and what it started (contain.h); a
 * call to an MCP tool is not followed by a sweep.
 *
 * Nothing here keeps time: the supervisor's timer bounds the handshake and
 * the call alike. At a timeout with a kill_grace the worker alone gets
 * SIGTERM (supervisor/pool/reap.c, slot_stop): the call's wait ends, the server is told
 * notifications/cancelled for the request, and the worker waits for it to
 * answer or exit until the KILL at the end of the grace. The next call on
 * the slot finds a fresh worker, so a fresh server and handshake.
 *
 * The server's stderr goes to the log, each line under the name of the
 * tool being called; never into a result.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "adapter.h"
#include "clock.h"
#include "contain.h"
#include "json.h"
#include "log.h"
#include "mcpstdio.h"

#define SERVERS_MAX 8
/*
 * The crash-loop cap: a server that dies before it has answered
 * initialize this many times in a row is not started again by this worker
 * for START_REFUSE_US; calls of its tools fail at once meanwhile, with a
 * message that says so and quotes the server's last words.
 */
#define START_FAILS_MAX 3
#define START_REFUSE_US 10000000u
/* How long a server has to leave after its stdin is closed, before it is killed. */
#define CLOSE_WAIT_US 200000u

volatile sig_atomic_t tp_mcp_interrupt;
static tp_mcp_notice_fn notice_fn;

void tp_mcp_set_notice(tp_mcp_notice_fn fn)
{
    notice_fn = fn;
}

typedef struct {
    char *key; /* argv, env and cwd joined: which server this is */
    size_t key_len;
    tp_mcpio_t conn;
    bool live; /* spawned and past the handshake */
    char version[32];
    unsigned start_fails;
    uint64_t refuse_until;
    char last_failure[640];
    uint64_t used; /* for closing the least recently used */
} server_t;

static server_t servers[SERVERS_MAX];
static uint64_t uses;
static char current_tool[256];

static void log_line(void *ctx, const char *line)
{
    (void)ctx;
    tp_log_info("%s: %s", current_tool, line);
}

/*
 * The server's identity: argv, env and cwd, each string ended by a NUL, the
 * parts by a 0x1f. 0, or TP_ENOMEM (a key with a part left out would name
 * another server).
 */
static int make_key(const Toolpool__Call *call, tp_buf_t *b)
{
    int rc = 0;
    for (size_t i = 0; i < call->n_argv && rc == 0; i++)
        rc = tp_buf_append(b, call->argv[i], strlen(call->argv[i]) + 1);
    if (rc == 0)
        rc = tp_buf_append(b, "\x1f", 1);
    for (size_t i = 0; i < call->n_mcp_env && rc == 0; i++)
        rc = tp_buf_append(b, call->mcp_env[i], strlen(call->mcp_env[i]) + 1);
    if (rc == 0)
        rc = tp_buf_append(b, "\x1f", 1);
    return rc ? rc : tp_buf_append(b, call->mcp_cwd, strlen(call->mcp_cwd) + 1);
}

/* The command for messages: its words, cut at 160 bytes. */
static const char *command_line(const Toolpool__Call *call, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < call->n_argv && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? " " : "", call->argv[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len >= 160 && n > 164)
        memcpy(buf + 157, "...", 4);
    return buf;
}

/* Ends s's session: the server is told by its stdin closing, then killed. */
static void server_drop(server_t *s, uint64_t wait_us)
{
    if (s->conn.pid > 0) {
        tp_contain_spare(s->conn.pid, false);
        tp_mcpio_close(&s->conn, wait_us);
    }
    s->live = false;
}

/* The server for call's command, environment and directory: a slot found, or taken. */
static server_t *server_for(const Toolpool__Call *call)
{
    tp_buf_t key = {0};
    if (make_key(call, &key) < 0) {
        tp_buf_free(&key);
        return NULL;
    }
    server_t *s = NULL, *oldest = NULL;
    for (int i = 0; i < SERVERS_MAX && s == NULL; i++) {
        server_t *t = &servers[i];
        if (t->key != NULL && t->key_len == key.len && memcmp(t->key, key.data, key.len) == 0)
            s = t;
        else if (oldest == NULL || (oldest->key != NULL && (t->key == NULL || t->used < oldest->used)))
            oldest = t;
    }
    if (s == NULL) {
        s = oldest;
        server_drop(s, CLOSE_WAIT_US);
        free(s->key);
        tp_mcpio_free(&s->conn);
        memset(s, 0, sizeof *s);
        s->key = malloc(key.len);
        if (s->key == NULL) {
            tp_buf_free(&key);
            return NULL;
        }
        memcpy(s->key, key.data, key.len);
        s->key_len = key.len;
        s->conn.log_line = log_line;
    }
    tp_buf_free(&key);
    s->used = ++uses;
    return s;
}

/* Whether a live server has exited since its last call (its zombie is left for tp_mcpio_ended). */
static bool server_gone(server_t *s)
{
    siginfo_t si;
    si.si_pid = 0;
    return waitid(P_PID, (id_t)s->conn.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == s->conn.pid;
}

/*
 * A failed start, counted for the crash-loop cap; o gets kind and the
 * message, the cap's note added when this failure reaches it.
 */
static void start_failed(server_t *s, const Toolpool__Call *call, tp_outcome_t *o, const char *kind, const char *what)
{
    char cmd[200];
    snprintf(s->last_failure, sizeof s->last_failure, "MCP server `%s` for %s %s", command_line(call, cmd, sizeof cmd),
             call->tool, what);
    if (++s->start_fails >= START_FAILS_MAX) {
        s->refuse_until = tp_now_us() + START_REFUSE_US;
        tp_outcome_fail(o, kind,
                        "%s (%u failed starts in a row: the crash-loop cap stops this worker starting it for %us)",
                        s->last_failure, s->start_fails, START_REFUSE_US / 1000000u);
    } else {
        tp_outcome_fail(o, kind, "%s", s->last_failure);
    }
}

/*
 * Spawns the server and runs the handshake. 0 when it is live; else o
 * holds the failure, the server is gone, and the code says why: TP_ENOMEM,
 * tp_mcpio_spawn's, or tp_mcpio_initialize's (TP_ECLOSED, TP_EREFUSED,
 * TP_E2BIG, TP_EINTR...).
 */
static int server_start(server_t *s, const Toolpool__Call *call, tp_outcome_t *o)
{
    char err[512], what[TP_MCP_TAIL + 200], how[96];
    char **argv = calloc(call->n_argv + 1, sizeof *argv);
    char **env = calloc(call->n_mcp_env + 1, sizeof *env);
    if (argv == NULL || env == NULL) {
        free(argv);
        free(env);
        tp_outcome_fail(o, "ServerError", "out of memory");
        return TP_ENOMEM;
    }
    memcpy(argv, call->argv, call->n_argv * sizeof *argv);
    if (call->n_mcp_env > 0)
        memcpy(env, call->mcp_env, call->n_mcp_env * sizeof *env);
    int rc = tp_mcpio_spawn(&s->conn, argv, env, call->mcp_cwd[0] ? call->mcp_cwd : NULL, false, err, sizeof err);
    free(argv);
    free(env);
    if (rc < 0) {
        char cmd[200];
        tp_outcome_fail(o, "ToolError", "MCP server for %s: %s (command `%s`)", call->tool, err,
                        command_line(call, cmd, sizeof cmd));
        return rc;
    }
    if (tp_contain_spare(s->conn.pid, true) < 0)
        tp_log_warn("more than %d MCP servers in one worker: the server of %s is killed after each call",
                    TP_CONTAIN_SPARE_MAX, call->tool);
    rc = tp_mcpio_initialize(&s->conn, 0, &tp_mcp_interrupt, s->version, sizeof s->version, err, sizeof err);
    if (rc == 0) {
        s->live = true;
        s->start_fails = 0;
        return 0;
    }
    if (rc == TP_ECLOSED) {
        tp_mcpio_ended(&s->conn, CLOSE_WAIT_US, how, sizeof how);
        snprintf(what, sizeof what, "%s before answering initialize%s%s", how, s->conn.tail_len ? ": " : "",
                 s->conn.tail);
        server_drop(s, 0);
        start_failed(s, call, o, "WorkerCrashed", what);
    } else if (rc == TP_EREFUSED) {
        server_drop(s, 0);
        start_failed(s, call, o, "ToolError", err);
    } else {
        server_drop(s, 0);
        if (rc == TP_E2BIG)
            tp_outcome_fail(o, "ServerError", "MCP server of %s: a line of more than 1 MB before its initialize answer",
                            call->tool);
        else
            tp_outcome_fail(o, "ServerError", "MCP server of %s: its handshake did not finish", call->tool);
    }
    return rc;
}

/*
 * The timeout's polite half: the request is cancelled, then the worker
 * waits for the server's last word on it (or its end) while the grace
 * runs; the KILL at its end cuts the wait short.
 */
static void cancel(server_t *s, int64_t id)
{
    json_t *n = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/cancelled", "params",
                          "requestId", (json_int_t)id, "reason", "the call's timeout passed");
    if (n != NULL && tp_mcpio_send(&s->conn, n, tp_now_us() + 1000000u, NULL) == 0) {
        for (;;) {
            json_t *m = NULL;
            if (tp_mcpio_recv(&s->conn, 0, NULL, 1u << 30, &m) != 0)
                break;
            json_t *mid = json_object_get(m, "id");
            bool done = json_object_get(m, "method") == NULL && json_is_integer(mid) && json_integer_value(mid) == id;
            json_decref(m);
            if (done)
                break;
        }
    }
    json_decref(n);
    server_drop(s, 0);
}

/* The kind a JSON-RPC error code means for the call. */
static const char *kind_of_code(json_int_t code)
{
    if (code == -32602)
        return "BadArguments";
    if (code == -32601)
        return "UnknownTool";
    return "ServerError";
}

/*
 * The text blocks of a result's content, joined by newlines, into b (NUL
 * ended).
 */
static void content_text(json_t *content, tp_buf_t *b)
{
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        json_t *text = json_object_get(block, "text");
        if (type == NULL || strcmp(type, "text") != 0 || !json_is_string(text))
            continue;
        if (b->len)
            tp_buf_append(b, "\n", 1);
        tp_buf_append(b, json_string_value(text), json_string_length(text));
    }
    tp_buf_append(b, "", 1);
}

/*
 * A result with isError: the tool failed. A JSON error object in its text
 * names the failure as an exec tool's stdout would; "MCP error CODE: ..."
 * (how the MCP SDKs report a tool's own protocol errors, arguments that
 * fail the server's schema and unknown tools among them) is read as that
 * JSON-RPC error; anything else is ToolError, the text its message.
 */
static void tool_failed(const Toolpool__Call *call, json_t *result, tp_outcome_t *o)
{
    tp_buf_t text = {0};
    content_text(json_object_get(result, "content"), &text);
    const char *t = (const char *)text.data;
    size_t len = text.len - 1;
    json_t *v = json_loadb(t, len, 0, NULL);
    long code;
    int at = 0;
    if (json_is_string(json_object_get(v, "error"))) {
        tp_outcome_from_text(o, t, len, true);
    } else if (sscanf(t, "MCP error %ld:%n", &code, &at) == 1 && at > 0) {
        tp_outcome_fail(o, kind_of_code(code), "%s: %s", call->tool, t);
    } else {
        tp_outcome_fail(o, "ToolError", "%s: %s", call->tool, len ? t : "the tool reported an error, with no text");
    }
    json_decref(v);
    tp_buf_free(&text);
}

/*
 * What is wrong with result as MCP's CallToolResult, or NULL: content an
 * array of content blocks (objects with a string "type"), isError a
 * boolean when present, structuredContent an object when present. A
 * result that is not one is the server's fault, never a success.
 */
static const char *result_problem(json_t *result, char *buf, size_t cap)
{
    json_t *is_error = json_object_get(result, "isError");
    if (is_error != NULL && !json_is_boolean(is_error))
        return "its isError is not a boolean";
    json_t *content = json_object_get(result, "content");
    if (content == NULL)
        return "it has no content";
    if (!json_is_array(content))
        return "its content is not an array";
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block) {
        if (!json_is_object(block) || !json_is_string(json_object_get(block, "type"))) {
            snprintf(buf, cap, "its content[%zu] is not a content block (an object with a string \"type\")", i);
            return buf;
        }
    }
    json_t *sc = json_object_get(result, "structuredContent");
    if (sc != NULL && !json_is_null(sc) && !json_is_object(sc))
        return "its structuredContent is not an object";
    return NULL;
}

/* The answer to tools/call, read into o. */
static void classify(const Toolpool__Call *call, json_t *answer, tp_outcome_t *o)
{
    json_t *err = json_object_get(answer, "error");
    if (err != NULL) {
        json_int_t code = json_integer_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        tp_outcome_fail(o, kind_of_code(code), "%s: MCP error %lld: %s", call->tool, (long long)code,
                        msg ? msg : "(no message)");
        return;
    }
    json_t *result = json_object_get(answer, "result");
    if (!json_is_object(result)) {
        tp_outcome_fail(o, "ServerError", "%s: the MCP server's answer to tools/call has no result object", call->tool);
        return;
    }
    char why[160];
    const char *problem = result_problem(result, why, sizeof why);
    if (problem != NULL) {
        tp_outcome_fail(o, "ToolError", "%s: the MCP server's answer to tools/call is not a CallToolResult: %s",
                        call->tool, problem);
        return;
    }
    if (json_is_true(json_object_get(result, "isError"))) {
        tool_failed(call, result, o);
        return;
    }
    json_t *content = json_object_get(result, "content");
    json_t *out = json_pack("{s:O}", "content", content);
    json_t *sc = json_object_get(result, "structuredContent");
    if (out != NULL && sc != NULL && !json_is_null(sc))
        json_object_set(out, "structuredContent", sc);
    tp_buf_reset(&o->result);
    if (out == NULL || tp_json_write(&o->result, out, 0) < 0) {
        tp_outcome_fail(o, "ToolError", "cannot encode the tool's result");
    } else if (o->result.len > call->max_output) {
        tp_outcome_fail(o, "OutputTooLarge", "%s returned %zu bytes, more than max_output (%llu bytes)", call->tool,
                        o->result.len, (unsigned long long)call->max_output);
    } else {
        o->ok = true;
    }
    json_decref(out);
}

/*
 * A notification the server sent during a call whose caller listens
 * (Call.notify): its progress on this call, and its log messages, go to
 * the supervisor; anything else (list_changed, others' progress) stays here.
 */
static void notice(void *ctx, const json_t *msg)
{
    const Toolpool__Call *call = ctx;
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *params = json_object_get(msg, "params");
    if (notice_fn == NULL || method == NULL || !json_is_object(params))
        return;
    if (strcmp(method, "notifications/progress") == 0) {
        json_t *token = json_object_get(params, "progressToken");
        if (!json_is_integer(token) || (uint64_t)json_integer_value(token) != call->seq)
            return;
    } else if (strcmp(method, "notifications/message") != 0) {
        return;
    }
    char *text = json_dumps(params, JSON_COMPACT);
    if (text != NULL)
        notice_fn(call->seq, method, text, strlen(text));
    free(text);
}

void tp_mcp_run(const Toolpool__Call *call, tp_outcome_t *o)
{
    char how[96];
    snprintf(current_tool, sizeof current_tool, "%s", call->tool);
    if (call->n_argv == 0 || call->mcp_tool[0] == '\0') {
        tp_outcome_fail(o, "ToolError", "mcp tool %s has no server command or no tool name", call->tool);
        return;
    }
    server_t *s = server_for(call);
    if (s == NULL) {
        tp_outcome_fail(o, "ServerError", "out of memory");
        return;
    }
    if (s->live && server_gone(s)) {
        tp_mcpio_ended(&s->conn, 0, how, sizeof how);
        tp_log_warn("the MCP server of %s %s between calls; starting it again", call->tool, how);
        server_drop(s, 0);
    }
    if (!s->live) {
        if (s->start_fails >= START_FAILS_MAX && tp_now_us() < s->refuse_until) {
            tp_outcome_fail(o, "ToolError",
                            "%s (%u failed starts in a row: the crash-loop cap stops this worker starting it for %us)",
                            s->last_failure, s->start_fails, START_REFUSE_US / 1000000u);
            return;
        }
        if (server_start(s, call, o) < 0)
            return;
    }

    json_t *args = call->args.len ? json_loadb((const char *)call->args.data, call->args.len, 0, NULL) : json_object();
    if (!json_is_object(args)) {
        json_decref(args);
        tp_outcome_fail(o, "BadArguments", "%s: an MCP tool's arguments are a JSON object", call->tool);
        return;
    }
    json_t *params = json_pack("{s:s, s:o}", "name", call->mcp_tool, "arguments", args);
    /* A caller who listens hears the server's progress: the call's seq is its token. */
    if (params != NULL && call->notify &&
        json_object_set_new(params, "_meta", json_pack("{s:I}", "progressToken", (json_int_t)call->seq)) < 0) {
        json_decref(params);
        params = NULL;
    }
    int64_t id = 0;
    json_t *answer = NULL;
    size_t max_line = call->max_output > (1u << 30) ? (size_t)1 << 31 : (size_t)call->max_output * 2 + 65536;
    s->conn.notice = call->notify ? notice : NULL;
    s->conn.notice_ctx = (void *)call;
    int rc = params ? tp_mcpio_request(&s->conn, "tools/call", params, 0, &tp_mcp_interrupt, max_line, &id, &answer)
                    : TP_ENOMEM;
    s->conn.notice = NULL;
    switch (rc) {
    case 0:
        classify(call, answer, o);
        json_decref(answer);
        return;
    case TP_EINTR:
        cancel(s, id);
        tp_outcome_fail(o, "Timeout", "%s: cancelled at its timeout", call->tool);
        return;
    case TP_ECLOSED:
        tp_mcpio_ended(&s->conn, CLOSE_WAIT_US, how, sizeof how);
        server_drop(s, 0);
        tp_outcome_fail(o, "WorkerCrashed", "the MCP server of %s %s during the call (its stderr is in the log)",
                        call->tool, how);
        return;
    case TP_E2BIG:
        server_drop(s, 0);
        tp_outcome_fail(o, "OutputTooLarge",
                        "%s: the MCP server's answer is longer than max_output allows (%llu bytes)", call->tool,
                        (unsigned long long)call->max_output);
        return;
    default:
        server_drop(s, 0);
        tp_outcome_fail(o, "ServerError", "%s: out of memory", call->tool);
        return;
    }
}

void tp_mcp_shutdown(void)
{
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_drop(&servers[i], CLOSE_WAIT_US);
        free(servers[i].key);
        tp_mcpio_free(&servers[i].conn);
        memset(&servers[i], 0, sizeof servers[i]);
    }
}
