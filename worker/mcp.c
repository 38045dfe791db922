/*
 * The mcp adapter: a tool served by an MCP server over stdio.
 *
 * A worker keeps one session per server it has been asked for (the same
 * command, environment and directory: every tool imported from one
 * "mcp_servers" entry shares it), up to SERVERS_MAX, the least recently
 * used closed past that. The pool gives each server's calls to the
 * workers that hold its session (its instances), so one session serves
 * every call of its tools and whatever state the server keeps lives on.
 * A session starts at the first call that needs it: the server is spawned
 * in the worker's process group (so the pool's kill of the worker takes it
 * too), and its era is found once, within that call's deadline
 * (tp_mcpio_open): a server that answers the server/discover probe as
 * 2026-07-28 is spoken to statelessly, every request carrying the _meta
 * envelope; any other gets the initialize handshake of 2025-11-25.
 * The sweeps that kill what a tool leaves behind spare a live server and
 * what it started (contain.h).
 *
 * Each call is one tools/call, and many are in flight at once on one
 * session, told apart by their JSON-RPC ids; the worker's loop waits on
 * the servers' output and its call pipe together (tp_mcp_wait) and answers
 * each call as its answer comes. At a call's deadline (the supervisor's,
 * Call.deadline_us) the request gets notifications/cancelled and the call
 * ends Timeout at once; the server is then pinged (a 2026-07-28 server,
 * which has no ping, is sent server/discover), and only one that does
 * not answer within PING_GRACE_US, that ends, or that writes what is not
 * JSON-RPC is killed: the calls it held end WorkerCrashed (retried when
 * their tool is idempotent, Interrupted when not), and those that came
 * while it was suspect, which it never saw, go to a fresh server.
 * Requests the server makes of us are answered: ping, and a clear -32601
 * for roots, sampling and elicitation, which toolpool does not offer (a
 * 2026-07-28 server asks for them with an input_required result instead,
 * which ends the call: mcp_result.h).
 *
 * An answer the JSON parser cannot hold (a number past 64 bits, nesting
 * past its depth) ends the call whose id a lenient scan finds in it, at
 * once, ToolError; an error with a null id (a request the server could
 * not read) ends the call it must answer (settle). Neither is a broken
 * session: the server lives on. A batch's elements are messages each.
 *
 * The server's stderr goes to the log, each line under the name of the
 * tool being called; never into a result.
 */
#include <errno.h>
#include <poll.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "adapter.h"
#include "clock.h"
#include "contain.h"
#include "frame.h"
#include "json.h"
#include "log.h"
#include "mcp_result.h"
#include "mcpstdio.h"

#define SERVERS_MAX TP_WORKER_MCP_SESSIONS
_Static_assert(3 * SERVERS_MAX <= TP_MCP_POLL_MAX, "each server's stdout, stderr and stdin in the poll set");
/*
 * The crash-loop cap: a server that dies before it has answered
 * server/discover or initialize this many times in a row is not started
 * again by this worker for START_REFUSE_US; calls of its tools fail at once meanwhile, with a
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
    uint64_t used;        /* for closing the least recently used */
    int64_t ping_id;      /* a ping sent after a call's timeout, not yet answered; 0: none */
    uint64_t ping_due_us; /* when its answer is due */
    /*
     * Errors with a null id not yet put down to a call (each answers a
     * request the server could not read, one of the suspects in flight
     * when it came), and what the last one said.
     */
    unsigned owed;
    char owed_what[240];
    bool out_ready, err_ready; /* the last poll found its stdout, its stderr readable */
    unsigned calls;            /* flights on it */
    uint64_t stuck_us;         /* since when its stdin is full with lines still queued for it; 0: it is not */
    bool stuck_late;           /* and a call on it passed its deadline meanwhile */
} server_t;

static server_t servers[SERVERS_MAX];
static uint64_t uses;
static char current_tool[256];

static void log_line(void *ctx, const char *line)
{
    (void)ctx;
    tp_log_call_t lc = {.tool = current_tool};
    tp_log_call_info("worker.mcp_server_stderr", &lc, "%s: %s", current_tool, line);
}

/*
 * The server's identity: argv, env and cwd, each string ended by a NUL, the
 * parts by a 0x1f, and the era it may be spoken to in. 0, or TP_ENOMEM (a
 * key with a part left out would name another server).
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
    if (rc == 0)
        rc = tp_buf_append(b, call->mcp_cwd, strlen(call->mcp_cwd) + 1);
    char era = (char)('0' + call->mcp_protocol % 10);
    return rc ? rc : tp_buf_append(b, &era, 1);
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
    s->stuck_us = 0;
    s->stuck_late = false;
}

static void server_fail(server_t *s, const char *why);
static void server_evict(server_t *s);

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
        server_evict(s); /* its calls in flight end first, those held for it too */
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
 * tp_mcpio_spawn's, or tp_mcpio_open's (TP_ECLOSED, TP_EREFUSED,
 * TP_E2BIG, TP_EINTR...).
 */
static int server_start(server_t *s, const Toolpool__Call *call, tp_outcome_t *o, uint64_t deadline_us)
{
    char err[512], what[TP_MCP_TAIL + 720], how[96];
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
    s->conn.pipe_ignored = true; /* main.c ignores SIGPIPE */
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
        tp_log_warn("worker.mcp_servers_max",
                    "more than %d MCP servers in one worker: the server of %s is killed after each call",
                    TP_CONTAIN_SPARE_MAX, call->tool);
    tp_mcp_era_t era = call->mcp_protocol < TP_MCP_ERA_N ? (tp_mcp_era_t)call->mcp_protocol : TP_MCP_ERA_AUTO;
    rc = tp_mcpio_open(&s->conn, era, deadline_us, &tp_mcp_interrupt, s->version, sizeof s->version, err, sizeof err);
    if (rc == 0) {
        s->live = true;
        s->start_fails = 0;
        return 0;
    }
    if (rc == TP_ECLOSED) {
        tp_mcpio_ended(&s->conn, CLOSE_WAIT_US, how, sizeof how);
        snprintf(what, sizeof what, "%s before answering %s%s%s", how, err, s->conn.tail_len ? ": " : "", s->conn.tail);
        server_drop(s, 0);
        start_failed(s, call, o, "WorkerCrashed", what);
    } else if (rc == TP_EREFUSED || rc == TP_EBADMSG) {
        server_drop(s, 0);
        start_failed(s, call, o, "ToolError", err);
    } else {
        server_drop(s, 0);
        if (rc == TP_E2BIG)
            tp_outcome_fail(o, "ServerError",
                            "MCP server of %s: a line of more than 1 MB before its handshake's answer", call->tool);
        else
            tp_outcome_fail(o, "ServerError", "MCP server of %s: its handshake did not finish", call->tool);
    }
    return rc;
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

/* ---- calls in flight: many at once on one session ---- */

/* How long a server has to answer the ping that follows a call's timeout before it is taken for hung. */
#define PING_GRACE_US 5000000u
#define FLUSH_GRACE_US 1000000u /* the least a server's full stdin is waited on */

/* One tools/call waiting for its answer. */
typedef struct flight {
    struct flight *next;
    Toolpool__SupervisorFrame *frame; /* owns the call */
    const Toolpool__Call *call;
    server_t *server;
    int64_t rpc_id;
    uint64_t deadline_us; /* the supervisor's; 0: none */
    size_t max_line;
    json_t *held; /* its tools/call, not yet sent: its server has a ping to answer first; else NULL */
    bool suspect; /* in flight when an error with a null id came: it may be what that error answers */
} flight_t;

static flight_t *flights;
static int n_flights;
static tp_mcp_done_fn done_fn;

void tp_mcp_set_done(tp_mcp_done_fn fn)
{
    done_fn = fn;
}

int tp_mcp_in_flight(void)
{
    return n_flights;
}

/* Answers f's call with o (ready), and lets f go. */
static void flight_end(flight_t *f, tp_outcome_t *o)
{
    for (flight_t **p = &flights; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            n_flights--;
            f->server->calls--;
            break;
        }
    if (done_fn)
        done_fn(f->call, o);
    json_decref(f->held);
    toolpool__supervisor_frame__free_unpacked(f->frame, NULL);
    free(f);
}

/*
 * A tools/call's params made ready for s: the _meta envelope when s
 * speaks 2026-07-28, with the lowest log level when the caller listens
 * (that revision sends no log messages unless a request asks), and the
 * attempt's traceparent when it is traced. 0 or TP_ENOMEM.
 */
static int stamp_call(const server_t *s, const Toolpool__Call *call, json_t *params)
{
    int rc = tp_mcpio_stamp(&s->conn, params);
    if (rc == 0 && s->conn.modern && call->notify &&
        json_object_set_new(json_object_get(params, "_meta"), TP_META_LEVEL, json_string("debug")) < 0)
        rc = TP_ENOMEM;
    /* A traced attempt: its span, the parent of the server's (the MCP semantic conventions' _meta.traceparent). */
    json_t *meta = json_object_get(params, "_meta");
    if (rc == 0 && *call->traceparent && meta == NULL && json_object_set_new(params, "_meta", meta = json_object()) < 0)
        rc = TP_ENOMEM;
    if (rc == 0 && *call->traceparent && json_object_set_new(meta, "traceparent", json_string(call->traceparent)) < 0)
        rc = TP_ENOMEM;
    return rc;
}

/* Queues f's held tools/call, stamped for the server it goes to. 0, or tp_mcpio_queue's or stamp_call's code. */
static int send_held(flight_t *f)
{
    const Toolpool__Call *call = f->call;
    int stamped = stamp_call(f->server, call, json_object_get(f->held, "params"));
    int rc = stamped ? stamped : tp_mcpio_queue(&f->server->conn, f->held); /* written in the turn's flush */
    json_decref(f->held);
    f->held = NULL;
    return rc;
}

/* Whether a call waits to be sent to s. */
static flight_t *first_held(const server_t *s)
{
    for (flight_t *f = flights; f; f = f->next)
        if (f->server == s && f->held != NULL)
            return f;
    return NULL;
}

/* Tells the server to stop working on f's request (no answer is read for it). */
static void send_cancelled(server_t *s, int64_t id, const char *reason)
{
    json_t *n = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/cancelled", "params",
                          "requestId", (json_int_t)id, "reason", reason);
    if (n != NULL)
        tp_mcpio_queue(&s->conn, n); /* after its request, in the turn's flush (tp_mcp_flush) */
    json_decref(n);
}

/*
 * s is done for: it crashed, hung or wrote what is not JSON-RPC. It is
 * killed, and every call it held ends as its worker's death would end it
 * (WorkerCrashed: retried if its tool is idempotent, else Interrupted);
 * the next call starts it again.
 */
static void server_fail(server_t *s, const char *why)
{
    char how[96];
    tp_mcpio_ended(&s->conn, 0, how, sizeof how);
    server_drop(s, 0);
    s->ping_id = 0;
    s->owed = 0;
    tp_outcome_t o = {0};
    for (flight_t *f = flights, *nx; f; f = nx) {
        nx = f->next;
        if (f->server != s || f->held != NULL)
            continue;
        tp_outcome_reset(&o);
        tp_outcome_fail(&o, "WorkerCrashed", "the MCP server of %s %s (%s) while the call ran", f->call->tool, why,
                        how);
        flight_end(f, &o);
    }
    /* The calls it never got go to a fresh one, started now for them. */
    flight_t *h = first_held(s);
    tp_outcome_reset(&o);
    if (h != NULL && server_start(s, h->call, &o, h->deadline_us) == 0) {
        for (flight_t *f = flights; f; f = f->next)
            if (f->server == s && f->held != NULL) {
                f->rpc_id = s->conn.next_id++;
                json_object_set_new(f->held, "id", json_integer(f->rpc_id));
                send_held(f);
            }
    } else if (h != NULL) {
        for (flight_t *f = flights, *nx; f; f = nx) {
            nx = f->next;
            if (f->server == s && f->held != NULL) {
                tp_outcome_t e = {0};
                tp_outcome_reset(&e);
                tp_outcome_fail(&e, o.kind, "%.*s", (int)o.message.len, (const char *)o.message.data);
                flight_end(f, &e);
                tp_outcome_free(&e);
            }
        }
    }
    tp_outcome_free(&o);
}

/*
 * s is closed for another server: every call of it ends, those held for
 * it (waiting on a ping) too, which server_fail alone would start it
 * again for.
 */
static void server_evict(server_t *s)
{
    for (flight_t *f = flights, *nx; f; f = nx) {
        nx = f->next;
        if (f->server == s && f->held != NULL) {
            tp_outcome_t o = {0};
            tp_outcome_reset(&o);
            tp_outcome_fail(&o, "WorkerCrashed", "the MCP server of %s was closed for another server", f->call->tool);
            flight_end(f, &o);
            tp_outcome_free(&o);
        }
    }
    server_fail(s, "was closed for another server");
}

/* The ping after a timeout is answered: the server lives, and gets the calls held for it. */
static void ping_answered(server_t *s)
{
    s->ping_id = 0;
    for (flight_t *f = flights; f; f = f->next)
        if (f->server == s && f->held != NULL && send_held(f) != 0)
            break; /* not written: the ended server is found at the next read */
}

/*
 * f's call ends ToolError, permanent, as a result that is not a
 * CallToolResult does: the server's answer, or its reading of the request,
 * is what it is, and the same request sent again meets it again.
 */
static void flight_unreadable(flight_t *f, const char *why)
{
    tp_outcome_t o = {0};
    tp_outcome_reset(&o);
    tp_outcome_fail(&o, "ToolError", "%s: %s", f->call->tool, why);
    flight_end(f, &o);
    tp_outcome_free(&o);
}

/* Why a call ends when an error with a null id (what) is put down to it. */
static const char *null_why(char *buf, size_t n, const char *what, const char *because)
{
    snprintf(buf, n, "the MCP server could not read its request: it answered an error with a null id (%s), and %s",
             what, because);
    return buf;
}

/*
 * Puts s's errors with a null id down to its calls where that is sure. A
 * suspect answered since is not what one answers; one that ended without
 * an answer (its timeout, a cancel) may have been, and takes a debt with it
 * (suspect_gone). So once no more suspects are left than errors owed, each
 * of them is one's: it ends now, instead of at its timeout. A guess would
 * fail a call the server is still working on; this never does.
 */
static void settle(server_t *s)
{
    if (s->owed == 0)
        return;
    unsigned n = 0;
    for (flight_t *f = flights; f; f = f->next)
        n += f->server == s && f->suspect;
    char why[400];
    if (n > 0 && n <= s->owed)
        for (flight_t *f = flights, *nx; f; f = nx) {
            nx = f->next;
            if (f->server == s && f->suspect)
                flight_unreadable(f, null_why(why, sizeof why, s->owed_what,
                                              "every other request in flight then has been answered since"));
        }
    if (n <= s->owed)
        s->owed = 0;
}

/* A suspect ended without an answer: it may have been what an error owed answered. */
static void suspect_gone(flight_t *f)
{
    if (f->suspect && f->server->owed > 0)
        f->server->owed--;
}

/*
 * An error with a null id (what): the server could not read a request, so
 * could not say which. It is the call's when one alone is in flight; else
 * every call in flight is a suspect, and settle finds it as the others are
 * answered.
 */
static void null_error(server_t *s, const char *what)
{
    flight_t *only = NULL;
    unsigned n = 0;
    for (flight_t *f = flights; f; f = f->next)
        if (f->server == s && f->held == NULL) {
            only = f;
            n++;
        }
    if (n == 0) {
        tp_log_warn("worker.mcp_stray_error",
                    "the MCP server of %s answered an error with a null id (%s) with no call in flight; ignored",
                    current_tool, what);
        return;
    }
    if (n == 1 && s->owed == 0) {
        char why[400];
        flight_unreadable(only, null_why(why, sizeof why, what, "this was the one request in flight"));
        return;
    }
    tp_log_warn("worker.mcp_stray_error",
                "the MCP server of %s answered an error with a null id (%s) with %u calls in flight: the call it "
                "answers ends once the others are answered",
                current_tool, what, n);
    for (flight_t *f = flights; f; f = f->next)
        if (f->server == s && f->held == NULL)
            f->suspect = true;
    s->owed++;
    snprintf(s->owed_what, sizeof s->owed_what, "%s", what);
    settle(s);
}

/* The server's message m: an answer to a call or a ping, a notification, or a request of its own. */
static void server_message(server_t *s, json_t *m)
{
    json_t *mid = json_object_get(m, "id");
    const char *method = json_string_value(json_object_get(m, "method"));
    if (method != NULL) {
        if (mid != NULL && !json_is_null(mid)) {
            tp_mcpio_answer_server(&s->conn, m, 0, NULL); /* written with the turn's requests */
            return;
        }
        /* a notification: progress on a call is matched by its token (the call's seq) */
        json_t *params = json_object_get(m, "params");
        json_t *token = json_object_get(params, "progressToken");
        for (flight_t *f = flights; f; f = f->next) {
            if (f->server != s || !f->call->notify)
                continue;
            bool progress = strcmp(method, "notifications/progress") == 0;
            if (progress && !(json_is_integer(token) && (uint64_t)json_integer_value(token) == f->call->seq))
                continue;
            notice((void *)f->call, m);
            if (progress)
                break;
            break; /* a log message goes once, with the call that listens */
        }
        return;
    }
    json_t *err = json_object_get(m, "error");
    if (json_is_null(mid) && err != NULL) {
        const char *text = json_string_value(json_object_get(err, "message"));
        char what[200];
        snprintf(what, sizeof what, "MCP error %lld: %.150s",
                 (long long)json_integer_value(json_object_get(err, "code")), text ? text : "(no message)");
        null_error(s, what);
        return;
    }
    if (!json_is_integer(mid)) {
        tp_log_warn("worker.mcp_stray_answer", "the MCP server of %s answered a request id it was never sent; ignored",
                    current_tool);
        return;
    }
    int64_t id = json_integer_value(mid);
    if (s->ping_id != 0 && id == s->ping_id) {
        ping_answered(s);
        return;
    }
    for (flight_t *f = flights; f; f = f->next) {
        if (f->server == s && f->rpc_id == id) {
            tp_outcome_t o = {0};
            tp_outcome_reset(&o);
            tp_mcp_result(f->call->tool, f->call->max_output, m, &o);
            flight_end(f, &o);
            tp_outcome_free(&o);
            return;
        }
    }
    /* an answer to a call that has ended (at its timeout, cancelled): nobody waits for it */
}

/*
 * An answer the JSON parser cannot hold (a number past 64 bits, nesting
 * past its depth), id the id found in it, why what stopped the parser: the
 * call it answers ends ToolError at once, saying why (the same answer comes
 * again if it is sent again: no retry). The server speaks JSON-RPC, so it
 * lives on.
 */
static void server_unreadable(server_t *s, const json_t *id, const char *why)
{
    if (json_is_null(id)) {
        char what[240];
        snprintf(what, sizeof what, "an answer toolpool could not read: %.180s", why);
        null_error(s, what);
        return;
    }
    if (json_is_integer(id) && s->ping_id != 0 && json_integer_value(id) == s->ping_id) {
        ping_answered(s);
        return;
    }
    for (flight_t *f = flights; f && json_is_integer(id); f = f->next)
        if (f->server == s && f->held == NULL && f->rpc_id == json_integer_value(id)) {
            char msg[300];
            snprintf(msg, sizeof msg, "the MCP server's answer to tools/call could not be read: %s", why);
            flight_unreadable(f, msg);
            return;
        }
    tp_log_warn("worker.mcp_stray_answer",
                "the MCP server of %s wrote an answer toolpool could not read (%s) to a request it was never sent or "
                "that has ended; ignored",
                current_tool, why);
}

/*
 * After a call's timeout on s: a request any server that still reads its
 * stdin answers at once: ping, or server/discover for a 2026-07-28 server,
 * whose revision has no ping.
 */
static void server_ping(server_t *s)
{
    if (s->ping_id != 0 || !s->live)
        return;
    int64_t id = s->conn.next_id++;
    json_t *req = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", (json_int_t)id, "method",
                            s->conn.modern ? "server/discover" : "ping");
    json_t *params = s->conn.modern ? json_object() : NULL;
    if (params != NULL && (tp_mcpio_stamp(&s->conn, params) < 0 || json_object_set(req, "params", params) < 0)) {
        json_decref(req);
        req = NULL;
    }
    json_decref(params);
    if (req != NULL && tp_mcpio_queue(&s->conn, req) == 0) { /* written in the turn's flush */
        s->ping_id = id;
        s->ping_due_us = tp_now_us() + PING_GRACE_US;
    }
    json_decref(req);
}

void tp_mcp_start(Toolpool__SupervisorFrame *frame)
{
    const Toolpool__Call *call = frame->call;
    tp_outcome_t o = {0};
    tp_outcome_reset(&o);
    flight_t *f = calloc(1, sizeof *f);
    char how[96];
    snprintf(current_tool, sizeof current_tool, "%s", call->tool);
    server_t *s = NULL;
    if (f == NULL) {
        tp_outcome_fail(&o, "ServerError", "out of memory");
    } else if (call->n_argv == 0 || call->mcp_tool[0] == '\0') {
        tp_outcome_fail(&o, "ToolError", "mcp tool %s has no server command or no tool name", call->tool);
    } else if ((s = server_for(call)) == NULL) {
        tp_outcome_fail(&o, "ServerError", "out of memory");
    }
    /*
     * A server with calls in flight is polled: its end is read there. One
     * idle may have ended unseen (a waitid, which 20,000 calls at once
     * made once each).
     */
    if (s != NULL && s->live && s->calls == 0 && server_gone(s)) {
        tp_mcpio_ended(&s->conn, 0, how, sizeof how);
        tp_log_call_t lc = {call->call_id, call->job, call->tool, call->attempt};
        tp_log_call_warn("worker.mcp_server_restarted", &lc, "the MCP server of %s %s between calls; starting it again",
                         call->tool, how);
        server_fail(s, "ended");
    }
    if (s != NULL && !s->live) {
        if (s->start_fails >= START_FAILS_MAX && tp_now_us() < s->refuse_until) {
            tp_outcome_fail(&o, "ToolError",
                            "%s (%u failed starts in a row: the crash-loop cap stops this worker starting it for %us)",
                            s->last_failure, s->start_fails, START_REFUSE_US / 1000000u);
            s = NULL;
        } else {
            tp_mcp_flush(); /* the turn's requests to the other servers go out before this one's start */
            if (server_start(s, call, &o, call->deadline_us) < 0)
                s = NULL;
        }
    }
    json_t *params = NULL;
    if (s != NULL) {
        json_t *args = call->args.len ? tp_json_loadb((const char *)call->args.data, call->args.len, 0, NULL)
                                      : json_object();
        if (!json_is_object(args)) {
            json_decref(args);
            tp_outcome_fail(&o, "BadArguments", "%s: an MCP tool's arguments are a JSON object", call->tool);
            s = NULL;
        } else {
            params = json_pack("{s:s, s:o}", "name", call->mcp_tool, "arguments", args);
            /* A caller who listens hears the server's progress: the call's seq is its token. */
            if (params != NULL && ((call->notify && json_object_set_new(params, "_meta",
                                                                        json_pack("{s:I}", "progressToken",
                                                                                  (json_int_t)call->seq)) < 0) ||
                                   stamp_call(s, call, params) < 0)) {
                json_decref(params);
                params = NULL;
            }
            if (params == NULL) {
                tp_outcome_fail(&o, "ServerError", "out of memory");
                s = NULL;
            }
        }
    }
    if (s != NULL) {
        f->rpc_id = s->conn.next_id++;
        json_t *req = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)f->rpc_id, "method",
                                "tools/call", "params", params);
        int rc = 0;
        if (req != NULL && s->ping_id != 0) {
            f->held = req; /* its server may be hung: the call waits for the ping's answer, or a fresh server */
            req = NULL;
        } else {
            rc = req ? tp_mcpio_queue(&s->conn, req) : TP_ENOMEM; /* written at the turn's end: tp_mcp_flush */
        }
        json_decref(req);
        if (rc != 0) {
            tp_outcome_fail(&o, rc == TP_ENOMEM ? "ServerError" : "WorkerCrashed",
                            rc == TP_ENOMEM ? "%s: out of memory" : "%s: the MCP server does not read its stdin",
                            call->tool);
            if (rc != TP_ENOMEM)
                server_fail(s, "stopped reading its stdin");
            s = NULL;
        }
    }
    if (s == NULL) {
        if (done_fn)
            done_fn(call, &o);
        tp_outcome_free(&o);
        toolpool__supervisor_frame__free_unpacked(frame, NULL);
        free(f);
        return;
    }
    tp_outcome_free(&o);
    f->frame = frame;
    f->call = call;
    f->server = s;
    s->calls++;
    f->deadline_us = call->deadline_us;
    f->max_line = call->max_output > (1u << 30) ? (size_t)1 << 31 : (size_t)call->max_output * 2 + 65536;
    f->next = flights;
    flights = f;
    n_flights++;
}

bool tp_mcp_cancel(uint64_t seq)
{
    for (flight_t *f = flights; f; f = f->next) {
        if (f->call->seq != seq)
            continue;
        if (f->held == NULL)
            send_cancelled(f->server, f->rpc_id, "the caller cancelled the call");
        server_t *s = f->server;
        suspect_gone(f);
        tp_outcome_t o = {0};
        tp_outcome_reset(&o);
        tp_outcome_fail(&o, "Cancelled", "%s: cancelled", f->call->tool);
        flight_end(f, &o);
        tp_outcome_free(&o);
        settle(s);
        return true;
    }
    return false;
}

/* The longest a server's full stdin is waited on while none of its calls is past its deadline. */
#define STUCK_MAX_US 10000000u

/*
 * When a server whose stdin stays full (nothing of it taken since
 * stuck_us) is done for: FLUSH_GRACE_US on, once a call on it has passed
 * its deadline meanwhile; else STUCK_MAX_US on.
 */
static uint64_t stuck_limit(const server_t *s)
{
    return s->stuck_us + (s->stuck_late ? FLUSH_GRACE_US : STUCK_MAX_US);
}

/* Calls past their deadline end Timeout (the server told to stop), and a hung server is found. */
static void check_times(void)
{
    uint64_t now = tp_now_us();
    for (flight_t *f = flights, *nx; f; f = nx) {
        nx = f->next;
        if (f->deadline_us == 0 || now < f->deadline_us)
            continue;
        server_t *s = f->server;
        if (s->stuck_us)
            s->stuck_late = true;
        bool sent = f->held == NULL;
        if (sent)
            send_cancelled(s, f->rpc_id, "the call's timeout passed");
        tp_outcome_t o = {0};
        tp_outcome_reset(&o);
        if (f->suspect)
            tp_outcome_fail(&o, "Timeout",
                            "%s: no answer within its timeout (the MCP server was told to cancel it); meanwhile it "
                            "answered an error with a null id (%s), which may have been this request's",
                            f->call->tool, s->owed_what);
        else
            tp_outcome_fail(&o, "Timeout", "%s: no answer within its timeout (the MCP server was told to cancel it)",
                            f->call->tool);
        suspect_gone(f);
        flight_end(f, &o);
        tp_outcome_free(&o);
        if (sent)
            server_ping(s);
        nx = flights; /* the list may have changed */
    }
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_t *s = &servers[i];
        if (s->live && s->ping_id != 0 && now >= s->ping_due_us) {
            char why[96];
            snprintf(why, sizeof why, "did not answer %s within %us",
                     s->conn.modern ? "server/discover (its liveness check after a timeout)" : "a ping",
                     PING_GRACE_US / 1000000u);
            tp_log_call_t lc = {.tool = current_tool};
            tp_log_call_warn("worker.mcp_server_restarted", &lc, "the MCP server of %s %s: it is restarted",
                             current_tool, why);
            server_fail(s, why);
        }
        if (s->live && s->stuck_us && now >= stuck_limit(s)) {
            /* said here too: the calls that were on it may all have ended at their deadlines already */
            tp_log_call_t lc = {.tool = current_tool};
            tp_log_call_warn("worker.mcp_server_restarted", &lc,
                             "the MCP server of %s stopped reading its stdin: it is restarted", current_tool);
            server_fail(s, "stopped reading its stdin");
        }
        settle(s);
    }
}

/*
 * Reads the output of each server the poll found ready, and acts on every
 * whole message in it (a server's stdout and stderr are read only when
 * ready, and stdout until a read comes back short: some 4 reads a turn
 * were 1).
 */
static void read_servers(void)
{
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_t *s = &servers[i];
        bool out_ready = s->out_ready, err_ready = s->err_ready;
        s->out_ready = s->err_ready = false;
        s->conn.drained = false; /* what a flush read is taken below */
        if (!s->live)
            continue;
        int rc = tp_mcpio_fill(&s->conn, out_ready, err_ready);
        size_t max_line = 1u << 20;
        for (flight_t *f = flights; f; f = f->next)
            if (f->server == s && f->max_line > max_line)
                max_line = f->max_line;
        bool closed = rc == TP_ECLOSED;
        for (;;) {
            json_t *m = NULL;
            char junk[128];
            int t = tp_mcpio_take(&s->conn, max_line, &m, junk, sizeof junk);
            if (t == 0 || t == TP_EBADMSG) {
                if (t == 0)
                    server_message(s, m);
                else
                    server_unreadable(s, m, junk);
                json_decref(m);
                if (!s->live)
                    break;
                continue;
            }
            if (t == TP_EPROTO) {
                char why[200];
                snprintf(why, sizeof why, "wrote what is not JSON-RPC (\"%s\")", junk);
                server_fail(s, why);
            } else if (t == TP_E2BIG) {
                server_fail(s, "wrote a line longer than the calls' max_output allows");
            } else if (t == TP_ECLOSED || closed) {
                server_fail(s, "ended");
            } else if (rc == TP_ENOMEM) {
                server_fail(s, "wrote more than the worker could hold (out of memory)");
            }
            break;
        }
    }
}

/* Where each server's stdout and stderr are in the poll set tp_mcp_poll_set made last (-1: not there). */
static int poll_out_at[SERVERS_MAX], poll_err_at[SERVERS_MAX];

int tp_mcp_poll_set(struct pollfd *pf, int *timeout_ms)
{
    tp_mcp_flush();
    int n = 0;
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_t *s = &servers[i];
        poll_out_at[i] = poll_err_at[i] = -1;
        if (!s->live)
            continue;
        if (s->conn.out_fd >= 0) {
            poll_out_at[i] = n;
            pf[n++] = (struct pollfd){.fd = s->conn.out_fd, .events = POLLIN};
        }
        if (s->conn.err_fd >= 0) {
            poll_err_at[i] = n;
            pf[n++] = (struct pollfd){.fd = s->conn.err_fd, .events = POLLIN};
        }
        if (s->stuck_us && s->conn.in_fd >= 0) /* room in its stdin wakes the loop, whose next turn writes */
            pf[n++] = (struct pollfd){.fd = s->conn.in_fd, .events = POLLOUT};
    }
    uint64_t now = tp_now_us(), soon = now + (uint64_t)*timeout_ms * 1000u;
    for (flight_t *f = flights; f; f = f->next)
        if (f->deadline_us && f->deadline_us < soon)
            soon = f->deadline_us;
    for (int i = 0; i < SERVERS_MAX; i++) {
        if (servers[i].live && servers[i].ping_id != 0 && servers[i].ping_due_us < soon)
            soon = servers[i].ping_due_us;
        if (servers[i].live && servers[i].stuck_us && stuck_limit(&servers[i]) < soon)
            soon = stuck_limit(&servers[i]);
    }
    int ms = soon > now ? (int)((soon - now + 999) / 1000) : 0;
    for (int i = 0; i < SERVERS_MAX; i++)
        if (servers[i].live && servers[i].conn.drained)
            ms = 0; /* a flush read its stdout: the messages it holds are not waited on */
    *timeout_ms = ms;
    return n;
}

void tp_mcp_poll_done(const struct pollfd *pf)
{
    for (int i = 0; i < SERVERS_MAX; i++) {
        servers[i].out_ready = poll_out_at[i] >= 0 && pf[poll_out_at[i]].revents != 0;
        servers[i].err_ready = poll_err_at[i] >= 0 && pf[poll_err_at[i]].revents != 0;
    }
    read_servers();
    check_times();
}

int tp_mcp_wait(int fd, int timeout_ms, bool *fd_ready)
{
    struct pollfd pf[1 + TP_MCP_POLL_MAX]; /* the call pipe, then the servers' */
    int n = 0;
    if (fd >= 0)
        pf[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    int ms = timeout_ms;
    int m = tp_mcp_poll_set(pf + n, &ms);
    int r = poll(pf, (nfds_t)(n + m), ms);
    *fd_ready = fd >= 0 && r > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    if (r < 0 && errno != EINTR)
        return TP_EIO;
    if (r <= 0)
        for (int k = n; k < n + m; k++)
            pf[k].revents = 0;
    tp_mcp_poll_done(pf + n);
    return 0;
}

/*
 * Writes the tools/call requests queued for each server this turn, in one
 * write a server. 20,000 calls at once through one session made 132,497
 * system calls in the worker with a write (and its SIGPIPE mask) per
 * request and per reply, a waitid per call and four reads a turn; 30,866
 * with the turn's writes batched and only ready pipes read (and the
 * server, fed in bursts, 29,003 instead of 57,966). Nothing here waits:
 * what a server's stdin does not take stays queued, its stdin is polled
 * for room with its stdout (which is read meanwhile, so a server blocked
 * writing its answers goes on), and the next turn writes more. A server
 * whose stdin takes nothing for FLUSH_GRACE_US once one of its calls has
 * passed its deadline (STUCK_MAX_US with none) is done for (check_times);
 * one that closed it is at once. So one server that stopped reading holds up no other's calls.
 */
void tp_mcp_flush(void)
{
    uint64_t now = 0;
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_t *s = &servers[i];
        if (!s->live || tp_buf_avail(&s->conn.queued) == 0)
            continue;
        size_t was = tp_buf_avail(&s->conn.queued);
        int rc = tp_mcpio_write_some(&s->conn);
        if (rc == TP_EAGAIN) {
            /* full since now, or since it last took something: one that reads, however slowly, is not stuck */
            if (s->stuck_us == 0 || tp_buf_avail(&s->conn.queued) < was) {
                s->stuck_us = now ? now : (now = tp_now_us());
                s->stuck_late = false;
            }
            continue;
        }
        s->stuck_us = 0;
        s->stuck_late = false;
        if (rc != 0)
            server_fail(s, "closed its stdin");
    }
}

void tp_mcp_shutdown(void)
{
    while (flights != NULL) { /* unanswered: nobody waits for them any more */
        flight_t *f = flights;
        flights = f->next;
        json_decref(f->held);
        toolpool__supervisor_frame__free_unpacked(f->frame, NULL);
        free(f);
    }
    n_flights = 0;
    for (int i = 0; i < SERVERS_MAX; i++) {
        server_drop(&servers[i], CLOSE_WAIT_US);
        free(servers[i].key);
        tp_mcpio_free(&servers[i].conn);
        memset(&servers[i], 0, sizeof servers[i]);
    }
}
