/*
 * One MCP session (mcp_session.h): the methods, the calls in flight by
 * their JSON-RPC id, the jobs' steps, and every message rendered as the
 * protocol has it. Transports (front_mcp.c over stdio, front/http/mcp_http.c
 * at /mcp) carry the messages.
 *
 * The protocol is the handshake era of MCP, revisions 2025-11-25 and
 * 2025-06-18: initialize negotiates the version and must come first; a
 * client asking for any other version is offered the newest we speak, as
 * the lifecycle's version negotiation says. A 2026-07-28 (stateless)
 * client probes with server/discover first; that is an unknown method
 * here (-32601), which is how such a client learns to fall back to
 * initialize.
 */
#include "mcp_session.h"
#include <event2/event.h>

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "buf.h"
#include "checkpoint.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "mcp_message.h"
#include "registry.h"
#include "suggest.h"
#include "taxonomy.h"
#include "toolsdoc.h"

/* The revisions spoken, newest first: a client asking for another is offered the first. */
/*
 * The revisions spoken: a legacy one is chosen by initialize, for the
 * session; the modern one (2026-07-28, stateless) is named by each
 * request in its _meta. Both eras are served at once, as MCP's versioning
 * lets a dual-era server.
 */
static const char *const tp_mcp_versions[] = {"2025-11-25", "2025-06-18"};
#define TP_MCP_N_VERSIONS (sizeof tp_mcp_versions / sizeof tp_mcp_versions[0])
/* How long a client may keep our tools/list (and server/discover): the registry is fixed for our life. */
#define TP_MCP_LIST_TTL_MS 300000

/* Tools a tools/list page holds; more come with nextCursor. */
#define TP_MCP_PAGE 100
/* MCP's log levels (RFC 5424's, least severe first), for logging/setLevel. */
static const char *const tp_mcp_levels[] = {"debug", "info",     "notice", "warning",
                                            "error", "critical", "alert",  "emergency"};
#define TP_MCP_LEVEL_WARNING 3
/*
 * A call whose client asked for progress hears from us at least this
 * often while it runs or waits, so that a host which resets its request
 * timeout on progress keeps waiting through long attempts and backoffs.
 */
#define TP_MCP_KEEPALIVE_US (10 * 1000000ull)
/* The longest _meta.id a client may give its call. */
#define TP_MCP_ID_MAX 256

/* A tools/call handed to the engine, by its JSON-RPC id. */
typedef struct tp_mcp_req {
    struct tp_mcp_req *hnext; /* the id table's chain */
    struct tp_mcp_req *pnext; /* the calls whose client asked for progress */
    struct tp_mcp_req *pprev;
    struct tp_mcp_session *s;
    void *tag;             /* the transport's, from the take of its tools/call */
    const tp_tool_t *tool; /* the tool called */
    tp_call_t *call;       /* the engine's handle, while it may be cancelled */
    json_t *progress;      /* the client's progressToken, or NULL */
    uint32_t told;         /* trace entries already told in progress notifications */
    double sent;           /* the last progress value sent: each must be greater */
    bool progressed;       /* a progress notification has gone out (sent is its value) */
    uint64_t told_us;      /* when the client last heard of it (tp_now_us), for the keepalive */
    bool cancelled;        /* the client cancelled it: no response goes out */
    bool modern;           /* a 2026-07-28 request: its result carries resultType and serverInfo */
    int log_level;         /* modern: the _meta logLevel it asked for (-1: none, no log messages) */
    uint64_t hash;
    uint64_t step;
    const char *job;     /* into text[] */
    const char *call_id; /* into text[] */
    size_t id_len;
    char text[]; /* the request's id as JSON text (the key), then the call id, then the job */
} tp_mcp_req_t;

/* A job's last step given in this session. */
typedef struct tp_mcp_job {
    struct tp_mcp_job *next;
    uint64_t hash;
    uint64_t step;
    char name[];
} tp_mcp_job_t;


struct tp_mcp_catalog {
    const tp_registry_t *reg;
    tp_buf_t tools;  /* each tool's entry, one after another */
    size_t *tool_at; /* n_tools + 1 offsets into tools */
};

struct tp_mcp_session {
    tp_engine_t *e;
    const tp_registry_t *reg;
    const tp_mcp_catalog_t *cat;
    tp_mcp_sink_t sink;
    const char *version;  /* serverInfo.version */
    char session[17];     /* 16 hex digits, random */
    char session_job[24]; /* "mcp-" SESSION */
    uint64_t seq;         /* calls made */
    tp_buf_t msg;         /* the message being written */
    void *tag;            /* the transport's tag of the message being taken */
    bool initialized;     /* initialize was answered */
    bool stateless;       /* serves 2026-07-28 requests only (serve's /mcp without a session) */
    bool closed;          /* the transport is done with it: nothing is sent */
    int last_code;        /* the error code of the response the last take sent at once; 0: none */
    int log_level;        /* from logging/setLevel; -1: never set, nothing is sent */
    /* requests in flight, by id */
    tp_mcp_req_t **table;
    size_t table_cap, table_n;
    tp_mcp_req_t *progress;  /* those whose client asked for progress */
    struct event *keepalive; /* while any of them is live: tells those that have been quiet */
    uint64_t deadline_us;    /* each call's whole time (its deadline from its start); 0: none */
    tp_mcp_job_t **jobs;
    size_t jobs_cap, jobs_n;
    uint64_t calls, ok;
};

/* ---- writing messages ---- */

/*
 * One message built into the session's scratch buffer. Running out of
 * memory midway would leave a broken message, so every append notes its
 * failure, and msg_end drops a message that did not come out whole.
 */
typedef struct {
    tp_buf_t *b;
    int err;
} tp_msg_t;

static void w_raw(tp_msg_t *w, const void *p, size_t n)
{
    if (tp_buf_append(w->b, p, n) < 0)
        w->err = -1;
}

static void w_puts(tp_msg_t *w, const char *s)
{
    w_raw(w, s, strlen(s));
}

static void w_str(tp_msg_t *w, const char *s, size_t n)
{
    if (tp_json_put_string(w->b, s, n) < 0)
        w->err = -1;
}

static void w_cstr(tp_msg_t *w, const char *s)
{
    w_str(w, s, strlen(s));
}

static void w_json(tp_msg_t *w, const json_t *v)
{
    if (v == NULL)
        w_puts(w, "null");
    else if (tp_json_write(w->b, v, 0) < 0)
        w->err = -1;
}

static void w_u64(tp_msg_t *w, uint64_t v)
{
    if (tp_buf_printf(w->b, "%llu", (unsigned long long)v) < 0)
        w->err = -1;
}

static void msg_begin(tp_mcp_session_t *s, tp_msg_t *w)
{
    tp_buf_reset(&s->msg);
    *w = (tp_msg_t){.b = &s->msg};
}

/*
 * Sends the message, tagged as the message that caused it was (tag) and
 * final when it is that request's response. One that could not be made
 * whole is dropped, and said. 0 or -1.
 */
static int msg_end(tp_mcp_session_t *s, tp_msg_t *w, void *tag, bool final, const char *what)
{
    if (s->closed)
        return -1;
    if (w->err == 0 && s->sink.send(s->sink.ctx, tag, (const char *)s->msg.data, s->msg.len, final) == 0)
        return 0;
    tp_log_error("mcp: out of memory writing %s; it is lost", what);
    return -1;
}
/* {"jsonrpc":"2.0","id":ID,"result": — the head of a response; its id is written back as the client sent it. */
static void w_result_head(tp_msg_t *w, const char *id, size_t id_len)
{
    w_puts(w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_raw(w, id, id_len);
    w_puts(w, ",\"result\":");
}

/*
 * A JSON-RPC error response. id: the request's as JSON text
 * (mcp_message.h), or NULL when it could not be read (null). data: JSON
 * text of the error's data, or NULL.
 */
static void reply_error(tp_mcp_session_t *s, const char *id, int code, const char *data, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reply_error(tp_mcp_session_t *s, const char *id, int code, const char *data, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_puts(&w, id ? id : "null");
    if (tp_buf_printf(w.b, ",\"error\":{\"code\":%d,\"message\":", code) < 0)
        w.err = -1;
    w_cstr(&w, message);
    if (data) {
        w_puts(&w, ",\"data\":");
        w_puts(&w, data);
    }
    w_puts(&w, "}}");
    s->last_code = code;
    msg_end(s, &w, s->tag, true, "an error response");
}

/* An empty result, {}: ping, logging/setLevel. */
static void reply_empty(tp_mcp_session_t *s, const char *id)
{
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_puts(&w, id);
    w_puts(&w, ",\"result\":{}}");
    msg_end(s, &w, s->tag, true, "a response");
}

static void session_free(tp_mcp_session_t *s);

/* ---- requests in flight, by id ---- */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/*
 * The request in flight with this id. A stateless session's requests come
 * from any number of clients, each POST on its own (tag): ids are theirs,
 * so one is found only from the POST that sent it.
 */
static tp_mcp_req_t *req_find(const tp_mcp_session_t *s, const char *id, size_t len, const void *tag)
{
    if (s->table_cap == 0)
        return NULL;
    uint64_t h = hash_bytes(id, len);
    for (tp_mcp_req_t *r = s->table[h & (s->table_cap - 1)]; r; r = r->hnext)
        if (r->hash == h && r->id_len == len && memcmp(r->text, id, len) == 0 && (!s->stateless || r->tag == tag))
            return r;
    return NULL;
}

static void keepalive_arm(tp_mcp_session_t *s);

static int req_insert(tp_mcp_session_t *s, tp_mcp_req_t *r)
{
    if (s->table_n + 1 > s->table_cap / 2) {
        size_t cap = s->table_cap ? s->table_cap * 2 : 64;
        tp_mcp_req_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return -1;
        for (size_t i = 0; i < s->table_cap; i++)
            while (s->table[i]) {
                tp_mcp_req_t *x = s->table[i];
                s->table[i] = x->hnext;
                x->hnext = t[x->hash & (cap - 1)];
                t[x->hash & (cap - 1)] = x;
            }
        free(s->table);
        s->table = t;
        s->table_cap = cap;
    }
    tp_mcp_req_t **slot = &s->table[r->hash & (s->table_cap - 1)];
    r->hnext = *slot;
    *slot = r;
    s->table_n++;
    if (r->progress) {
        r->pnext = s->progress;
        if (s->progress)
            s->progress->pprev = r;
        s->progress = r;
        if (s->sink.progress_count)
            (*s->sink.progress_count)++;
        r->told_us = tp_now_us();
        keepalive_arm(s);
    }
    return 0;
}

static void req_remove(tp_mcp_session_t *s, tp_mcp_req_t *r)
{
    for (tp_mcp_req_t **p = &s->table[r->hash & (s->table_cap - 1)]; *p; p = &(*p)->hnext)
        if (*p == r) {
            *p = r->hnext;
            s->table_n--;
            break;
        }
    if (r->progress) {
        if (s->sink.progress_count)
            (*s->sink.progress_count)--;
        if (r->pprev)
            r->pprev->pnext = r->pnext;
        else
            s->progress = r->pnext;
        if (r->pnext)
            r->pnext->pprev = r->pprev;
        r->pnext = r->pprev = NULL;
    }
}

static void req_free(tp_mcp_req_t *r)
{
    json_decref(r->progress);
    free(r);
}

/* ---- jobs and steps ---- */

/* The last step of job j's checkpoint, if the store has one, in the engine's turn. */
static int last_step_op(void *ctx, tp_store_t *store, MDB_txn *txn)
{
    tp_mcp_job_t *j = ctx;
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(store, txn, j->name, &cp);
    if (rc == 0) {
        j->step = cp->last_step;
        toolpool__checkpoint__free_unpacked(cp, NULL);
    }
    return rc;
}

/*
 * The next step of job: one more than the last this session gave it. A job
 * the client names (_meta.job) may have run in an earlier session on the
 * same store: its steps go on from its checkpoint's last one, so they keep
 * counting up across sessions. 0 when the store failed (the engine stops).
 */
static uint64_t job_next_step(tp_mcp_session_t *s, const char *name)
{
    size_t len = strlen(name);
    uint64_t h = hash_bytes(name, len);
    if (s->jobs_cap) {
        for (tp_mcp_job_t *j = s->jobs[h & (s->jobs_cap - 1)]; j; j = j->next)
            if (j->hash == h && strcmp(j->name, name) == 0)
                return ++j->step;
    }
    if (s->jobs_n + 1 > s->jobs_cap / 2) {
        size_t cap = s->jobs_cap ? s->jobs_cap * 2 : 16;
        tp_mcp_job_t **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return 0;
        for (size_t i = 0; i < s->jobs_cap; i++)
            while (s->jobs[i]) {
                tp_mcp_job_t *x = s->jobs[i];
                s->jobs[i] = x->next;
                x->next = t[x->hash & (cap - 1)];
                t[x->hash & (cap - 1)] = x;
            }
        free(s->jobs);
        s->jobs = t;
        s->jobs_cap = cap;
    }
    tp_mcp_job_t *j = malloc(sizeof *j + len + 1);
    if (j == NULL)
        return 0;
    memcpy(j->name, name, len + 1);
    j->hash = h;
    j->step = 0;
    if (strcmp(name, s->session_job) != 0) {
        int rc = tp_engine_store_op(s->e, 0, last_step_op, j);
        if (rc && rc != MDB_NOTFOUND && rc != TP_EAGAIN)
            tp_engine_store_failed(s->e, rc, "reading a job's checkpoint");
    }
    j->next = s->jobs[h & (s->jobs_cap - 1)];
    s->jobs[h & (s->jobs_cap - 1)] = j;
    s->jobs_n++;
    return ++j->step;
}

/* ---- answers ---- */

/* "io.modelcontextprotocol/serverInfo":{...}: who answers, in a 2026-07-28 result's _meta. */
static void w_server_info(tp_msg_t *w, const tp_mcp_session_t *s)
{
    w_puts(w, "\"io.modelcontextprotocol/serverInfo\":{\"name\":\"toolpool\",\"version\":");
    w_cstr(w, s->version ? s->version : "0");
    w_puts(w, "}");
}

/*
 * What a cacheable 2026-07-28 result ends with: resultType, how long it
 * stays fresh (the registry is fixed while we run) for anyone (the same
 * for every client), and who we are.
 */
static void w_modern_tail(tp_msg_t *w, const tp_mcp_session_t *s)
{
    if (tp_buf_printf(w->b, ",\"resultType\":\"complete\",\"ttlMs\":%d,\"cacheScope\":\"public\",\"_meta\":{",
                      TP_MCP_LIST_TTL_MS) < 0)
        w->err = -1;
    w_server_info(w, s);
    w_puts(w, "}");
}

/*
 * What the host may want beside the model's view: the call as toolpool
 * recorded it (its id, for `toolpool trace`), and whether the answer came
 * from elsewhere than the tool called (a fallback hop, a stale one, the
 * declared degraded answer).
 */
static void w_meta(tp_msg_t *w, const tp_mcp_req_t *r, const char *served_by, bool degraded, bool stale)
{
    w_puts(w, ",\"_meta\":{\"toolpool\":{\"id\":");
    w_cstr(w, r->call_id);
    w_puts(w, ",\"job\":");
    w_cstr(w, r->job);
    w_puts(w, ",\"step\":");
    w_u64(w, r->step);
    w_puts(w, ",\"served_by\":");
    if (served_by && served_by[0])
        w_cstr(w, served_by);
    else
        w_puts(w, "null");
    w_puts(w, degraded ? ",\"degraded\":true" : ",\"degraded\":false");
    w_puts(w, stale ? ",\"stale\":true}" : ",\"stale\":false}");
    if (r->modern) {
        w_puts(w, ",");
        w_server_info(w, r->s);
    }
    w_puts(w, "}");
    if (r->modern)
        w_puts(w, ",\"resultType\":\"complete\"");
}

/*
 * The result of a tool that is itself an MCP server's tool (the mcp
 * adapter), as that server gave it: its content blocks (text, image,
 * audio, resources) and structuredContent, unchanged. 0, or -1 when the
 * result is not one (a fallback hop of another kind served it).
 */
static int w_passthrough(tp_msg_t *w, const char *res, size_t len)
{
    json_t *v = json_loadb(res, len, 0, NULL);
    json_t *content = json_object_get(v, "content"), *sc = json_object_get(v, "structuredContent");
    if (!json_is_array(content)) {
        json_decref(v);
        return -1;
    }
    w_puts(w, "{\"content\":");
    w_json(w, content);
    if (sc) {
        w_puts(w, ",\"structuredContent\":");
        w_json(w, sc);
    }
    json_decref(v);
    return 0;
}

/*
 * A tool's JSON result, as the text block and, when it is an object, as
 * structuredContent; an MCP tool's own result as it came.
 */
static void w_success(tp_mcp_session_t *s, tp_msg_t *w, const tp_mcp_req_t *r, const char *res, size_t len,
                      const char *served_by)
{
    if (len == 0) {
        res = "null";
        len = 4;
    }
    const tp_tool_t *t = served_by && served_by[0] ? tp_registry_find(s->reg, served_by) : r->tool;
    if (t && t->adapter == TP_ADAPTER_MCP && res[0] == '{' && w_passthrough(w, res, len) == 0) {
        w_puts(w, ",\"isError\":false");
        return;
    }
    w_puts(w, "{\"content\":[{\"type\":\"text\",\"text\":");
    w_str(w, res, len);
    w_puts(w, "}]");
    if (res[0] == '{') {
        w_puts(w, ",\"structuredContent\":");
        size_t at = w->b->len;
        w_raw(w, res, len);
        /*
         * Results are compact JSON, so a line break cannot be in one; were
         * one there, it could only be whitespace between tokens, and a
         * line must not hold one.
         */
        if (w->err == 0)
            for (size_t i = at; i < w->b->len; i++)
                if (w->b->data[i] == '\n' || w->b->data[i] == '\r')
                    w->b->data[i] = ' ';
    }
    w_puts(w, ",\"isError\":false");
}

/*
 * A failure's CallToolResult: the tool message as the one text block, and
 * the same object as structuredContent, with isError.
 */
static void w_failure(tp_msg_t *w, const tp_mcp_req_t *r, const char *kind, const char *klass, const char *message,
                      bool retryable, uint64_t attempts, const char *served_by, bool escalated, const char *escalation,
                      bool degraded, bool stale)
{
    tp_buf_t tm = {0};
    if (tp_tool_message_write(&tm, kind, klass, message, retryable, attempts, served_by, escalated, escalation) < 0) {
        w->err = -1;
        tp_buf_free(&tm);
        return;
    }
    w_puts(w, "{\"content\":[{\"type\":\"text\",\"text\":");
    w_str(w, (const char *)tm.data, tm.len);
    w_puts(w, "}],\"structuredContent\":");
    w_raw(w, tm.data, tm.len);
    w_puts(w, ",\"isError\":true");
    w_meta(w, r, served_by, degraded, stale);
    w_puts(w, "}");
    tp_buf_free(&tm);
}

/* The lowest level a call's client hears (-1: none): its own request's in 2026-07-28, else the session's. */
static int want_level(const tp_mcp_req_t *r)
{
    return r->modern ? r->log_level : r->s->log_level;
}

/* notifications/message to a client that set a level at or below this one. */
static void log_to_client(tp_mcp_session_t *s, const tp_mcp_req_t *r, int level, const char *text,
                          const char *escalation)
{
    int want = want_level(r);
    if (want < 0 || level < want)
        return;
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":");
    w_cstr(&w, tp_mcp_levels[level]);
    w_puts(&w, ",\"logger\":\"toolpool\",\"data\":{\"message\":");
    w_cstr(&w, text);
    w_puts(&w, ",\"call\":");
    w_cstr(&w, r->call_id);
    if (escalation && escalation[0]) {
        w_puts(&w, ",\"escalation\":");
        w_cstr(&w, escalation);
    }
    w_puts(&w, "}}}");
    msg_end(s, &w, r->tag, false, "a log message");
}

/*
 * The engine's answer for a tools/call: a CallToolResult, unless the client
 * cancelled the request (then nothing is sent, as the cancellation rules
 * have it). Every failure is a result with isError, for the model to read.
 */
static void answer_cb(void *ctx, const tp_answer_t *a)
{
    tp_mcp_req_t *r = ctx;
    tp_mcp_session_t *s = r->s;
    req_remove(s, r);
    if (r->cancelled || s->closed) {
        /* No response goes out; the transport lets go of the request all the same. */
        s->sink.send(s->sink.ctx, r->tag, NULL, 0, true);
        req_free(r);
        if (s->closed && s->table_n == 0)
            session_free(s);
        return;
    }
    const Toolpool__Result *res = a->result;
    if (res && a->recorded && res->job && res->job[0]) {
        /* answered from the store: the call as recorded, its job and step, not this request's */
        r->job = res->job;
        r->step = res->step;
    }
    s->calls++;
    /* A log message about the call goes before its response: over HTTP, the response ends the stream. */
    if (res && !a->recorded && res->escalated && res->escalation && res->escalation[0]) {
        char text[700];
        snprintf(text, sizeof text, "%s: %s; escalated as %s", res->kind && res->kind[0] ? res->kind : "escalated",
                 res->message ? res->message : "", res->escalation);
        log_to_client(s, r, TP_MCP_LEVEL_WARNING, text, res->escalation);
    }
    tp_msg_t w;
    msg_begin(s, &w);
    w_result_head(&w, r->text, r->id_len);
    if (a->not_started || res == NULL) {
        w_failure(&w, r, tp_kind_name(TP_KIND_CANCELLED), NULL,
                  "toolpool is stopping: the call was not started (send it again once the server is back)", false, 0,
                  NULL, false, NULL, false, false);
    } else if (res->ok) {
        w_success(s, &w, r, (const char *)res->result.data, res->result.len, res->served_by);
        w_meta(&w, r, res->served_by, res->degraded, res->stale);
        w_puts(&w, "}");
    } else {
        w_failure(&w, r, res->kind, res->klass, res->message, res->retryable, res->attempts, res->served_by,
                  res->escalated, res->escalation, res->degraded, res->stale);
    }
    w_puts(&w, "}");
    if (msg_end(s, &w, r->tag, true, "a tools/call result") == 0 && res && res->ok)
        s->ok++;
    req_free(r);
    if (s->closed && s->table_n == 0)
        session_free(s);
}

/* A progress value: a whole number as an integer, as a client counting attempts expects. */
static void w_progress(tp_msg_t *w, double v)
{
    if (v == (double)(int64_t)v && v >= 0 && v < 9007199254740992.0)
        w_u64(w, (uint64_t)v);
    else if (tp_buf_printf(w->b, "%.17g", v) < 0)
        w->err = -1;
}

/*
 * notifications/progress for r at r->sent, with the server's total when
 * given and a message when there is one.
 */
static void tell_progress(tp_mcp_session_t *s, tp_mcp_req_t *r, const json_t *total, const char *text, size_t len)
{
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":");
    w_json(&w, r->progress);
    w_puts(&w, ",\"progress\":");
    w_progress(&w, r->sent);
    if (json_is_number(total)) {
        w_puts(&w, ",\"total\":");
        w_progress(&w, json_number_value(total));
    }
    if (text != NULL) {
        w_puts(&w, ",\"message\":");
        w_str(&w, text, len);
    }
    w_puts(&w, "}}");
    msg_end(s, &w, r->tag, false, "a progress notification");
    r->told_us = tp_now_us();
    r->progressed = true;
}

/*
 * What the MCP server of a running mcp tool said about the call (the
 * engine's notice, engine.h). Its progress goes to a client that asked for
 * progress, under the client's token; values must grow, and those of a
 * retry start again, so one not above the last sent is sent as that plus
 * one, without its total. Its log messages go to a client that set a
 * level, at that level and above, under the tool's name when the server
 * gave none.
 */
static void notice_cb(void *ctx, const char *method, const char *params, size_t len)
{
    tp_mcp_req_t *r = ctx;
    tp_mcp_session_t *s = r->s;
    if (r->cancelled || s->closed)
        return;
    json_t *p = json_loadb(params, len, 0, NULL);
    tp_msg_t w;
    if (strcmp(method, "notifications/progress") == 0 && r->progress && json_is_object(p)) {
        json_t *v = json_object_get(p, "progress"), *total = json_object_get(p, "total");
        json_t *text = json_object_get(p, "message");
        if (json_is_number(v)) {
            double x = json_number_value(v);
            bool fresh = r->progressed ? x > r->sent : x >= 0; /* a server's first 0 goes out as 0 */
            r->sent = fresh ? x : r->sent + 1;
            tell_progress(s, r, fresh ? total : NULL, json_string_value(text), json_string_length(text));
        }
    } else if (strcmp(method, "notifications/message") == 0 && json_is_object(p)) {
        const char *level = json_string_value(json_object_get(p, "level"));
        int at = -1;
        for (int i = 0; level && i < (int)(sizeof tp_mcp_levels / sizeof tp_mcp_levels[0]); i++)
            if (strcmp(level, tp_mcp_levels[i]) == 0)
                at = i;
        if (at >= 0 && want_level(r) >= 0 && at >= want_level(r) &&
            (json_object_get(p, "logger") || json_object_set_new(p, "logger", json_string(r->tool->name)) == 0)) {
            msg_begin(s, &w);
            w_puts(&w, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":");
            w_json(&w, p);
            w_puts(&w, "}");
            msg_end(s, &w, r->tag, false, "a log message");
        }
    }
    json_decref(p);
}

/*
 * notifications/progress for the calls whose client asked for it: one each
 * time an attempt has failed and a retry or the next hop of the chain
 * follows (progress: the trace's entries so far). Read at each of the
 * engine's turns, right after it has settled the attempts that ended.
 */
void tp_mcp_session_progress(tp_mcp_session_t *s)
{
    for (tp_mcp_req_t *r = s->progress; r; r = r->pnext) {
        if (r->call == NULL || r->cancelled)
            continue;
        tp_call_info_t ci;
        tp_call_info(r->call, &ci);
        if (ci.entries <= r->told)
            continue;
        r->told = ci.entries;
        if (ci.ended)
            continue; /* no retry follows: the answer does, and says it all */
        r->sent = ci.entries > r->sent ? (double)ci.entries : r->sent + 1;
        char text[256];
        if (ci.number == 0)
            snprintf(text, sizeof text, "%s: %s, not run", ci.tool, ci.outcome);
        else if (ci.backoff_us >= 1000000u)
            snprintf(text, sizeof text, "%s attempt %u: %s; next in %.1fs", ci.tool, ci.number, ci.outcome,
                     (double)ci.backoff_us / 1e6);
        else if (ci.backoff_us > 0)
            snprintf(text, sizeof text, "%s attempt %u: %s; next in %llums", ci.tool, ci.number, ci.outcome,
                     (unsigned long long)(ci.backoff_us + 500) / 1000u);
        else
            snprintf(text, sizeof text, "%s attempt %u: %s", ci.tool, ci.number, ci.outcome);
        tell_progress(s, r, NULL, text, strlen(text));
    }
}

/*
 * The keepalive: each call whose client asked for progress and has heard
 * nothing for TP_MCP_KEEPALIVE_US (a long attempt, a long backoff, a wait
 * for a slot) is told it is still going, its progress one more. The timer
 * runs while such a call is live.
 */
static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tp_mcp_session_t *s = arg;
    uint64_t now = tp_now_us();
    for (tp_mcp_req_t *r = s->progress; r && !s->closed; r = r->pnext) {
        if (r->call == NULL || r->cancelled || now - r->told_us < TP_MCP_KEEPALIVE_US)
            continue;
        tp_call_info_t ci;
        tp_call_info(r->call, &ci);
        if (ci.ended)
            continue;
        char text[300];
        snprintf(text, sizeof text, "%s: no answer yet, still %s", r->tool->name,
                 ci.entries == 0 ? "on its first attempt"
                 : ci.backoff_us ? "retrying"
                                 : "working");
        r->sent += 1;
        tell_progress(s, r, NULL, text, strlen(text));
    }
    keepalive_arm(s);
}

static void keepalive_arm(tp_mcp_session_t *s)
{
    if (s->progress == NULL || s->closed) {
        if (s->keepalive)
            evtimer_del(s->keepalive);
        return;
    }
    if (s->keepalive == NULL && (s->keepalive = evtimer_new(tp_engine_loop(s->e), keepalive_cb, s)) == NULL)
        return; /* progress at each retry still goes out */
    if (evtimer_pending(s->keepalive, NULL))
        return;
    struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
    evtimer_add(s->keepalive, &tv);
}

/* ---- the methods ---- */

static const char *version_pick(const char *asked)
{
    for (size_t i = 0; i < TP_MCP_N_VERSIONS; i++)
        if (strcmp(asked, tp_mcp_versions[i]) == 0)
            return tp_mcp_versions[i];
    return tp_mcp_versions[0];
}

/*
 * The contract a model needs to read our failures well, said once (in
 * initialize, or server/discover): the retries are done, and repeating a
 * call that cannot recover only opens its circuit.
 */
static const char tp_mcp_instructions[] =
    "Each tool runs under toolpool's recovery policy: timeouts, retries with backoff for transient "
    "failures, fallbacks. A failed call comes back with isError true and a JSON tool message "
    "{\"error\", \"message\", \"retryable\", \"attempts\"}: its retries are already done. When "
    "retryable is false, do not repeat the same call with the same arguments: change them, use "
    "another tool, or tell the user (repeating it opens its circuit and hands it to a person).";

/* What a 2026-07-28 request says of itself in its _meta. */
typedef struct {
    bool modern;   /* it names 2026-07-28: served statelessly, by that revision */
    int log_level; /* the logLevel it asked for; -1: none */
} tp_mcp_reqmeta_t;

/*
 * A request of the modern era names its revision in _meta, with the
 * client's capabilities (both required, else Invalid params) and maybe
 * its identity and a log level; one that names a revision we do not speak
 * is UnsupportedProtocolVersion, listing ours. A request without it, or
 * naming a legacy revision, belongs to the session initialize opened.
 * false when it has been answered (an error).
 */
static bool read_request_meta(tp_mcp_session_t *s, const char *id, const char *method, const json_t *params,
                              tp_mcp_reqmeta_t *m)
{
    *m = (tp_mcp_reqmeta_t){.log_level = -1};
    json_t *meta = json_object_get(params, "_meta"), *pv = json_object_get(meta, TP_META_VERSION);
    bool discover = strcmp(method, "server/discover") == 0;
    if (pv == NULL && !discover && !s->stateless)
        return true;
    if (pv == NULL || !json_is_string(pv)) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL,
                    "Invalid params: a 2026-07-28 request carries its revision in \"_meta\" (\"" TP_META_VERSION
                    "\", a string) and the client's capabilities (\"" TP_META_CAPS "\")");
        return false;
    }
    const char *version = json_string_value(pv);
    if (strcmp(version, TP_MCP_MODERN) != 0) {
        if (tp_mcp_version_known(version) && !discover && !s->stateless)
            return true; /* a legacy revision: the initialize session's */
        tp_buf_t data = {0};
        bool ok = tp_buf_puts(&data, "{\"supported\":" TP_MCP_SUPPORTED ",\"requested\":") == 0 &&
                  tp_json_put_string(&data, version, strlen(version)) == 0 && tp_buf_append(&data, "}", 2) == 0;
        reply_error(s, id, TP_RPC_UNSUPPORTED_VERSION, ok ? (const char *)data.data : NULL,
                    "Unsupported protocol version: %.60s (this server speaks 2026-07-28 in each request's _meta, "
                    "and 2025-11-25 and 2025-06-18 through initialize)",
                    version);
        tp_buf_free(&data);
        return false;
    }
    json_t *caps = json_object_get(meta, TP_META_CAPS), *info = json_object_get(meta, TP_META_INFO);
    json_t *level = json_object_get(meta, TP_META_LEVEL);
    if (!json_is_object(caps) || (info && !json_is_object(info))) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL,
                    "Invalid params: \"_meta\" must carry \"" TP_META_CAPS "\" (an object)%s",
                    info && !json_is_object(info) ? ", and \"" TP_META_INFO "\" must be an object" : "");
        return false;
    }
    if (level) {
        const char *l = json_string_value(level);
        for (int i = 0; l && i < (int)(sizeof tp_mcp_levels / sizeof tp_mcp_levels[0]); i++)
            if (strcmp(l, tp_mcp_levels[i]) == 0)
                m->log_level = i;
        if (m->log_level < 0) {
            reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL,
                        "Invalid params: \"" TP_META_LEVEL "\" must be one of debug, info, notice, warning, "
                        "error, critical, alert, emergency");
            return false;
        }
    }
    m->modern = true;
    return true;
}

/*
 * server/discover (2026-07-28): every revision we speak, our capabilities,
 * who we are and the contract, cacheable as tools/list is.
 */
static void do_discover(tp_mcp_session_t *s, const char *id)
{
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_puts(&w, id);
    w_puts(&w, ",\"result\":{\"supportedVersions\":" TP_MCP_SUPPORTED
               ",\"capabilities\":{\"tools\":{\"listChanged\":false},\"logging\":{}},\"instructions\":");
    w_cstr(&w, tp_mcp_instructions);
    w_modern_tail(&w, s);
    w_puts(&w, "}}");
    msg_end(s, &w, s->tag, true, "the server/discover result");
}

/*
 * initialize: the version the client asked for when we speak it, else our
 * newest (the client then speaks it or disconnects, as the lifecycle's
 * version negotiation has it), our capabilities and who we are. Requests
 * are taken from this answer on; notifications/initialized is not waited
 * for, since nothing we do depends on it.
 */
static void do_initialize(tp_mcp_session_t *s, const char *id, const json_t *params)
{
    if (s->initialized) {
        reply_error(s, id, TP_RPC_INVALID_REQUEST, NULL,
                    "Invalid Request: initialize was answered already (one initialize a session)");
        return;
    }
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    json_t *caps = json_object_get(params, "capabilities"), *info = json_object_get(params, "clientInfo");
    if (asked == NULL) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: \"protocolVersion\" must be a string");
        return;
    }
    if ((caps && !json_is_object(caps)) || (info && !json_is_object(info))) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL,
                    "Invalid params: \"capabilities\" and \"clientInfo\" must be objects");
        return;
    }
    const char *version = version_pick(asked);
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_puts(&w, id);
    w_puts(&w, ",\"result\":{\"protocolVersion\":");
    w_cstr(&w, version);
    w_puts(&w, ",\"capabilities\":{\"tools\":{\"listChanged\":false},\"logging\":{}}"
               ",\"serverInfo\":{\"name\":\"toolpool\",\"version\":");
    w_cstr(&w, s->version ? s->version : "0");
    w_puts(&w, "},\"instructions\":");
    w_cstr(&w, tp_mcp_instructions);
    w_puts(&w, "}}");
    if (msg_end(s, &w, s->tag, true, "the initialize result") == 0)
        s->initialized = true;
}

/* The tools as tools/list lists them, rendered once: name, description, inputSchema. */

tp_mcp_catalog_t *tp_mcp_catalog_new(const tp_registry_t *reg)
{
    tp_mcp_catalog_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->tool_at = calloc(reg->n_tools + 1, sizeof *c->tool_at)) == NULL) {
        free(c);
        return NULL;
    }
    c->reg = reg;
    tp_msg_t w = {.b = &c->tools};
    for (size_t i = 0; i < reg->n_tools && w.err == 0; i++) {
        const tp_tool_t *t = &reg->tools[i];
        c->tool_at[i] = c->tools.len;
        json_t *tool = tp_toolsdoc_mcp_tool(t, TP_TOOLSDOC_SERVED);
        if (tool == NULL) {
            w.err = -1;
            break;
        }
        w_json(&w, tool);
        json_decref(tool);
    }
    c->tool_at[reg->n_tools] = c->tools.len;
    if (w.err) {
        tp_mcp_catalog_free(c);
        return NULL;
    }
    return c;
}

void tp_mcp_catalog_free(tp_mcp_catalog_t *c)
{
    if (c == NULL)
        return;
    tp_buf_free(&c->tools);
    free(c->tool_at);
    free(c);
}

/* The cursor of the page that starts at tool `at`: opaque to the client, checked when it comes back. */
#define TP_MCP_CURSOR_PREFIX "toolpool-tools-"

/*
 * tools/list: a page of the tools rendered at start. The cursor names where
 * the next page starts; a cursor we did not give (edited, or from another
 * registry) is Invalid params, as the pagination section asks, never a
 * page that starts somewhere else.
 */
static void do_tools_list(tp_mcp_session_t *s, const char *id, const json_t *params, bool modern)
{
    size_t from = 0, n = s->reg->n_tools;
    json_t *jc = json_object_get(params, "cursor");
    if (jc && !json_is_null(jc)) {
        const char *c = json_string_value(jc);
        size_t pl = strlen(TP_MCP_CURSOR_PREFIX);
        char *end = NULL;
        unsigned long long v = 0;
        if (c && strncmp(c, TP_MCP_CURSOR_PREFIX, pl) == 0 && c[pl] >= '1' && c[pl] <= '9') {
            errno = 0;
            v = strtoull(c + pl, &end, 10);
        }
        if (c == NULL || end == NULL || *end || errno || v == 0 || v >= n) {
            reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: not a cursor this server gave");
            return;
        }
        from = (size_t)v;
    }
    size_t to = n - from > TP_MCP_PAGE ? from + TP_MCP_PAGE : n;
    tp_msg_t w;
    msg_begin(s, &w);
    w_puts(&w, "{\"jsonrpc\":\"2.0\",\"id\":");
    w_puts(&w, id);
    w_puts(&w, ",\"result\":{\"tools\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from)
            w_puts(&w, ",");
        w_raw(&w, s->cat->tools.data + s->cat->tool_at[i], s->cat->tool_at[i + 1] - s->cat->tool_at[i]);
    }
    w_puts(&w, "]");
    if (to < n) {
        char cursor[64];
        snprintf(cursor, sizeof cursor, TP_MCP_CURSOR_PREFIX "%zu", to);
        w_puts(&w, ",\"nextCursor\":");
        w_cstr(&w, cursor);
    }
    if (modern)
        w_modern_tail(&w, s);
    w_puts(&w, "}}");
    msg_end(s, &w, s->tag, true, "the tools/list result");
}

/*
 * logging/setLevel: from now on, log messages at this level and above go
 * to the client (escalations, at warning). Before it, none do: a client
 * that never asked is not sent any.
 */
static void do_set_level(tp_mcp_session_t *s, const char *id, const json_t *params)
{
    const char *level = json_string_value(json_object_get(params, "level"));
    for (int i = 0; level && i < (int)(sizeof tp_mcp_levels / sizeof tp_mcp_levels[0]); i++)
        if (strcmp(level, tp_mcp_levels[i]) == 0) {
            s->log_level = i;
            reply_empty(s, id);
            return;
        }
    reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL,
                "Invalid params: \"level\" must be one of debug, info, notice, warning, error, critical, alert, "
                "emergency");
}

/*
 * tools/call: a call for the engine. Its id is the client's _meta.id (the
 * request's identity: the same one sent again is answered from the store),
 * else ours (mcp-SESSION-N, never one another session recorded); its job
 * the session or the client's _meta.job, its step the job's next. A tool the registry does not have is
 * a protocol error, as MCP has it (-32602), with toolpool's tool message
 * (and its did-you-mean) as the error's data; everything after that,
 * arguments that fail the schema included, is the call's result.
 */
static void do_tools_call(tp_mcp_session_t *s, const char *id, const json_t *params, const tp_mcp_reqmeta_t *m)
{
    const char *id_text = id;
    size_t id_len = strlen(id);
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments"), *meta = json_object_get(params, "_meta");
    json_t *token = json_object_get(meta, "progressToken"), *jjob = json_object_get(meta, "job");
    json_t *jid = json_object_get(meta, "id");
    const char *problem = NULL;
    if (name == NULL)
        problem = "\"name\" must be a string: the tool to call";
    else if (args && !json_is_object(args) && !json_is_null(args))
        problem = "\"arguments\" must be an object";
    else if (meta && !json_is_object(meta))
        problem = "\"_meta\" must be an object";
    else if (token && !json_is_string(token) && !json_is_integer(token))
        problem = "\"_meta.progressToken\" must be a string or an integer";
    else if (jjob && (!json_is_string(jjob) || json_string_length(jjob) == 0))
        problem = "\"_meta.job\" must be a non-empty string";
    else if (jid && (!json_is_string(jid) || json_string_length(jid) == 0 || json_string_length(jid) > TP_MCP_ID_MAX ||
                     strlen(json_string_value(jid)) != json_string_length(jid)))
        problem = "\"_meta.id\" must be a non-empty string of at most 256 bytes";
    if (problem) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: %s", problem);
        return;
    }
    const tp_tool_t *tool = tp_registry_find(s->reg, name);
    if (tool == NULL) {
        char near[256], msg[600];
        tp_registry_suggest(s->reg, name, near, sizeof near);
        snprintf(msg, sizeof msg, "unknown tool \"%.200s\"%s%s%s", name, near[0] ? " (closest: " : "", near,
                 near[0] ? ")" : "");
        tp_buf_t data = {0};
        bool whole = tp_tool_message_write(&data, tp_kind_name(TP_KIND_UNKNOWN_TOOL), NULL, msg, false, 0, NULL, false,
                                           NULL) == 0 &&
                     tp_buf_append(&data, "", 1) == 0;
        reply_error(s, id, TP_RPC_INVALID_PARAMS, whole ? (const char *)data.data : NULL, "Unknown tool: %.200s%s%s%s",
                    name, near[0] ? " (closest: " : "", near, near[0] ? ")" : "");
        tp_buf_free(&data);
        return;
    }
    if (req_find(s, id_text, id_len, s->tag)) {
        reply_error(s, id, TP_RPC_INVALID_REQUEST, NULL,
                    "Invalid Request: id %.200s is in use by a tools/call still running", id_text);
        return;
    }
    char call_id[TP_MCP_ID_MAX + 1];
    int cn = jid ? snprintf(call_id, sizeof call_id, "%s", json_string_value(jid))
                 : snprintf(call_id, sizeof call_id, "mcp-%s-%llu", s->session, (unsigned long long)++s->seq);
    /* A 2026-07-28 request is a conversation of its own: no session to be a job; it is its own, unless named. */
    const char *job = jjob ? json_string_value(jjob) : m->modern ? call_id : s->session_job;
    size_t job_len = strlen(job);
    tp_mcp_req_t *r = calloc(1, sizeof *r + id_len + 1 + (size_t)cn + 1 + job_len + 1);
    tp_buf_t ab = {0};
    if (r == NULL || (args && !json_is_null(args) ? tp_json_write(&ab, args, 0) : tp_buf_puts(&ab, "{}")) < 0 ||
        tp_buf_append(&ab, "", 1) < 0) {
        free(r);
        tp_buf_free(&ab);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        return;
    }
    r->s = s;
    r->tag = s->tag;
    r->tool = tool;
    r->id_len = id_len;
    memcpy(r->text, id_text, id_len);
    r->call_id = r->text + id_len + 1;
    memcpy((char *)r->call_id, call_id, (size_t)cn + 1);
    r->job = r->call_id + cn + 1;
    memcpy((char *)r->job, job, job_len + 1);
    r->hash = hash_bytes(id_text, id_len);
    r->progress = json_incref(token);
    r->modern = m->modern;
    r->log_level = m->log_level;
    /* a call that is its own job is that job's only step: nothing to keep */
    r->step = job == call_id ? 1 : job_next_step(s, job);
    if (r->step == 0 || req_insert(s, r) < 0) {
        req_free(r);
        tp_buf_free(&ab);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory (or the store failed)");
        return;
    }
    json_t *empty = args && !json_is_null(args) ? NULL : json_object();
    /* Traced: the span of a tools/call, its parent the client's _meta.traceparent (MCP semantic conventions). */
    tp_trace_ctx_t tc;
    char rpc_id[TP_MCP_ID_MAX + 1];
    if (tp_engine_traced(s->e)) {
        bool quoted = id_len >= 2 && id_text[0] == '"';
        snprintf(rpc_id, sizeof rpc_id, "%.*s", (int)(quoted ? id_len - 2 : id_len), id_text + quoted);
        tc = (tp_trace_ctx_t){.traceparent = json_string_value(json_object_get(meta, "traceparent")),
                              .tracestate = json_string_value(json_object_get(meta, "tracestate")),
                              .rpc_id = rpc_id};
    }
    tp_request_t rq = {
        .id = r->call_id,
        .job = r->job,
        .step = r->step,
        .tool = name,
        .args = (char *)ab.data,
        .args_len = ab.len - 1,
        .give_args = true,
        .jargs = empty ? empty : args,
        .notice = r->progress || want_level(r) >= 0 ? notice_cb : NULL,
        .deadline_us = s->deadline_us ? tp_now_us() + s->deadline_us : 0,
        .trace = tp_engine_traced(s->e) ? &tc : NULL,
    };
    r->call = tp_engine_submit(s->e, &rq, answer_cb, r);
    json_decref(empty);
}

/*
 * notifications/cancelled: the request is cancelled in the engine (a
 * waiting call ends at once, a running attempt's worker group is killed)
 * and gets no response. One that has ended already, or that we never
 * saw, is let be: the notice may cross the answer on its way.
 */
static void do_cancelled(tp_mcp_session_t *s, const char *request_id, const json_t *params)
{
    tp_mcp_req_t *r = request_id ? req_find(s, request_id, strlen(request_id), s->tag) : NULL;
    if (r == NULL || r->cancelled)
        return;
    const char *reason = json_string_value(json_object_get(params, "reason"));
    char why[600];
    snprintf(why, sizeof why, "cancelled by the MCP client%s%.500s", reason ? ": " : "", reason ? reason : "");
    r->cancelled = true;
    if (r->call) {
        tp_call_t *c = r->call;
        r->call = NULL; /* one cancel per call */
        tp_engine_cancel(s->e, c, why);
    }
}

static bool method_known(const char *method)
{
    return strcmp(method, "tools/list") == 0 || strcmp(method, "tools/call") == 0 ||
           strcmp(method, "logging/setLevel") == 0;
}

/* A request (it has an id): answered now, or by the engine for a tools/call. */
static void take_request(tp_mcp_session_t *s, const char *id, const char *method, const json_t *params)
{
    if (params && !json_is_object(params)) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: MCP's params are an object");
        return;
    }
    if (strcmp(method, "initialize") == 0) {
        if (s->stateless)
            reply_error(s, id, TP_RPC_INVALID_REQUEST, NULL,
                        "Invalid Request: this exchange is 2026-07-28's, which has no initialize (send one "
                        "without MCP-Protocol-Version: 2026-07-28 to open a 2025-11-25 session)");
        else
            do_initialize(s, id, params);
        return;
    }
    tp_mcp_reqmeta_t m;
    if (!read_request_meta(s, id, method, params, &m))
        return;
    if (m.modern) {
        /* 2026-07-28: stateless, and without ping or logging/setLevel (a request's _meta sets its log level). */
        if (strcmp(method, "server/discover") == 0)
            do_discover(s, id);
        else if (strcmp(method, "tools/list") == 0)
            do_tools_list(s, id, params, true);
        else if (strcmp(method, "tools/call") == 0)
            do_tools_call(s, id, params, &m);
        else
            reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL, "Method not found: %.200s (in 2026-07-28)", method);
        return;
    }
    if (strcmp(method, "ping") == 0) {
        reply_empty(s, id);
        return;
    }
    if (!method_known(method)) {
        reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL, "Method not found: %.200s", method);
        return;
    }
    /* The lifecycle: nothing but ping before initialize. */
    if (!s->initialized) {
        reply_error(s, id, TP_RPC_INVALID_REQUEST, NULL,
                    "Invalid Request: the session is not initialized: send initialize first");
        return;
    }
    if (strcmp(method, "tools/list") == 0)
        do_tools_list(s, id, params, false);
    else if (strcmp(method, "logging/setLevel") == 0)
        do_set_level(s, id, params);
    else
        do_tools_call(s, id, params, &m);
}

/* A notification (no id): never answered, whatever it says. */
static void take_notification(tp_mcp_session_t *s, const char *method, const json_t *params, const char *request_id)
{
    /*
     * notifications/initialized needs nothing: requests are taken from the
     * initialize response on. Others (progress, roots/list_changed, ones to
     * come) need nothing from us either.
     */
    if (strcmp(method, "notifications/cancelled") == 0 && json_is_object(params))
        do_cancelled(s, request_id, params);
}

/*
 * One message (mcp_message.h): a request (an id), a notification (none),
 * or a response (we send no requests: it is dropped). A message that is
 * none of them gets its error, with its id when it had a usable one, else
 * null. A blank one is let be.
 */
tp_mcp_took_t tp_mcp_session_take(tp_mcp_session_t *s, const char *text, size_t len, void *tag)
{
    tp_mcp_msg_t m = {0};
    tp_mcp_took_t took = TP_MCP_TOOK_NOTIFICATION;
    s->tag = tag;
    s->last_code = 0;
    if (tp_mcp_msg_read(&m, text, len) < 0) {
        reply_error(s, NULL, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory reading the message");
        took = TP_MCP_TOOK_BAD;
    } else if (m.kind == TP_MCP_MSG_BAD) {
        reply_error(s, m.id, m.code, NULL, "%s", m.error);
        took = TP_MCP_TOOK_BAD;
    } else if (m.kind == TP_MCP_MSG_BAD_PARAMS) {
        reply_error(s, m.id, m.code, NULL, "%s", m.error);
        took = TP_MCP_TOOK_REQUEST;
    } else if (m.kind == TP_MCP_MSG_REQUEST) {
        take_request(s, m.id, m.method, m.params);
        took = TP_MCP_TOOK_REQUEST;
    } else if (m.kind == TP_MCP_MSG_NOTIFICATION && m.method != NULL) {
        take_notification(s, m.method, m.params, m.request_id);
    }
    tp_mcp_msg_clear(&m);
    s->tag = NULL;
    return took;
}

void tp_mcp_session_error(tp_mcp_session_t *s, void *tag, int code, const char *message)
{
    s->tag = tag;
    reply_error(s, NULL, code, NULL, "%s", message);
    s->tag = NULL;
}

/* 64 random bits as 16 hex digits: call ids of two sessions never meet. */
static void session_id_new(char out[17])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40) ^ tp_now_us();
    }
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* ---- the session ---- */

bool tp_mcp_version_modern(const char *version)
{
    return strcmp(version, TP_MCP_MODERN) == 0;
}

bool tp_mcp_version_known(const char *version)
{
    if (tp_mcp_version_modern(version))
        return true;
    for (size_t i = 0; i < TP_MCP_N_VERSIONS; i++)
        if (strcmp(version, tp_mcp_versions[i]) == 0)
            return true;
    return false;
}

tp_mcp_session_t *tp_mcp_session_new(tp_engine_t *e, const tp_mcp_catalog_t *tools, const char *version,
                                     uint64_t deadline_us, const tp_mcp_sink_t *sink)
{
    tp_mcp_session_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->e = e;
    s->reg = tp_engine_registry(e);
    s->cat = tools;
    s->sink = *sink;
    s->version = version;
    s->log_level = -1;
    s->deadline_us = deadline_us;
    session_id_new(s->session);
    snprintf(s->session_job, sizeof s->session_job, "mcp-%s", s->session);
    return s;
}

void tp_mcp_session_stateless(tp_mcp_session_t *s)
{
    s->stateless = true;
}

void tp_mcp_session_cancel_tag(tp_mcp_session_t *s, void *tag, const char *why)
{
    for (size_t i = 0; i < s->table_cap; i++)
        for (tp_mcp_req_t *r = s->table[i]; r; r = r->hnext)
            if (r->tag == tag && !r->cancelled) {
                r->cancelled = true;
                if (r->call) {
                    tp_call_t *c = r->call;
                    r->call = NULL; /* one cancel per call */
                    tp_engine_cancel(s->e, c, why);
                }
                return;
            }
}

int tp_mcp_session_last_error(const tp_mcp_session_t *s)
{
    return s->last_code;
}

const char *tp_mcp_session_id(const tp_mcp_session_t *s)
{
    return s->session;
}

bool tp_mcp_session_initialized(const tp_mcp_session_t *s)
{
    return s->initialized;
}

size_t tp_mcp_session_live(const tp_mcp_session_t *s)
{
    return s->table_n;
}

void tp_mcp_session_counts(const tp_mcp_session_t *s, uint64_t *calls, uint64_t *ok)
{
    *calls = s->calls;
    *ok = s->ok;
}

static void session_free(tp_mcp_session_t *s)
{
    for (size_t i = 0; i < s->table_cap; i++)
        while (s->table[i]) {
            tp_mcp_req_t *r = s->table[i];
            s->table[i] = r->hnext;
            if (r->progress && s->sink.progress_count)
                (*s->sink.progress_count)--;
            req_free(r);
        }
    free(s->table);
    if (s->keepalive)
        event_free(s->keepalive);
    for (size_t i = 0; i < s->jobs_cap; i++)
        while (s->jobs[i]) {
            tp_mcp_job_t *j = s->jobs[i];
            s->jobs[i] = j->next;
            free(j);
        }
    free(s->jobs);
    tp_buf_free(&s->msg);
    free(s);
}

void tp_mcp_session_close(tp_mcp_session_t *s)
{
    if (s == NULL)
        return;
    s->closed = true;
    if (s->table_n == 0)
        session_free(s);
}

void tp_mcp_session_free(tp_mcp_session_t *s)
{
    if (s)
        session_free(s);
}
