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
#include "results.h"
#include "suggest.h"
#include "tasks.h"
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
/*
 * Tasks: how long one is kept from its creation when the client asks for
 * no ttl, the most it may ask for, how often it is told to poll, and how
 * many tasks a tasks/list page holds.
 */
#define TP_MCP_TASK_TTL_MS (60 * 60 * 1000ull)
#define TP_MCP_TASK_TTL_MAX_MS (24 * 60 * 60 * 1000ull)
#define TP_MCP_TASK_POLL_MS 1000
#define TP_MCP_TASKS_PAGE 50
#define TP_MCP_TASK_BUCKETS 1024
/* The tasks extension (2026-07-28), and the _meta key that ties a message to its task. */
#define TP_MCP_TASKS_EXT "io.modelcontextprotocol/tasks"
#define TP_META_RELATED_TASK "io.modelcontextprotocol/related-task"
/* The 2025 revision that has tasks (2025-06-18 has none). */
#define TP_MCP_TASKS_VERSION "2025-11-25"

/* What a request in flight waits for. */
typedef enum {
    TP_MCP_REQ_CALL = 0, /* a tools/call: the engine's answer */
    TP_MCP_REQ_DURABLE,  /* a response made already, sent once what it says is committed */
    TP_MCP_REQ_WAIT,     /* tasks/result: its task's end */
} tp_mcp_req_kind_t;

struct tp_mcp_task;

/* A tools/call handed to the engine, by its JSON-RPC id. */
typedef struct tp_mcp_req {
    struct tp_mcp_req *hnext; /* the id table's chain */
    tp_mcp_req_kind_t kind;
    struct tp_mcp_task *task; /* WAIT: the task waited for */
    struct tp_mcp_req *wnext; /* WAIT: the task's other waiters */
    char *reply;              /* DURABLE: the response */
    size_t reply_len;
    const char *related;      /* a task's id: its result's _meta names it (io.modelcontextprotocol/related-task) */
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


/*
 * A task whose call the engine holds (or was handed and has not answered):
 * its id is the call's. Tasks are the front's, not a session's: any
 * session of the front may ask about any task, and a session that ends
 * leaves its tasks running. A task the engine has answered is in the
 * store alone (its record, and its call's result).
 */
typedef struct tp_mcp_task {
    struct tp_mcp_task *next; /* the table's chain */
    struct tp_mcp_tasks *tab;
    tp_call_t *call;       /* the engine's handle, while it may be cancelled */
    tp_mcp_req_t *waiters; /* tasks/result requests waiting for its end */
    const tp_tool_t *tool; /* NULL: a tool the registry no longer has */
    bool cancelled;        /* tasks/cancel: its status is cancelled from now on */
    uint64_t hash;
    uint64_t step, created_ms, updated_ms, ttl_ms;
    char *job;
    char id[];
} tp_mcp_task_t;

/* The live tasks of a front, by id. */
typedef struct tp_mcp_tasks {
    tp_mcp_task_t *bucket[TP_MCP_TASK_BUCKETS];
} tp_mcp_tasks_t;

struct tp_mcp_catalog {
    const tp_registry_t *reg;
    tp_buf_t tools;        /* each tool's entry, one after another */
    size_t *tool_at;       /* n_tools + 1 offsets into tools */
    tp_mcp_tasks_t *tasks; /* shared by every session of the front, as the catalog is */
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
    bool tasks;           /* initialize chose 2025-11-25: the tasks methods, and task-augmented tools/call */
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
    if (tp_buf_put_u64(w->b, v) < 0)
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
    tp_log_error("mcp.message_lost", "mcp: out of memory writing %s; it is lost", what);
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
static void session_id_new(char out[17]);
static void task_free(tp_mcp_task_t *t);

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
    free(r->reply);
    free(r);
}

/* A call's id when the client gave none: "mcp-SESSION-SEQ", without snprintf (it runs every tools/call). */
static void call_id_make(char *out, size_t cap, const char *session, uint64_t seq)
{
    size_t n = strlen(session);
    if (4 + n + 1 + 20 + 1 > cap) {
        snprintf(out, cap, "mcp-%s-%llu", session, (unsigned long long)seq);
        return;
    }
    memcpy(out, "mcp-", 4);
    memcpy(out + 4, session, n);
    out[4 + n] = '-';
    out[5 + n + tp_u64_dec(out + 5 + n, seq)] = 0;
}

/*
 * A request in flight, its text holding id (the request's, as JSON text),
 * then call_id and job. Not in the table yet. NULL when out of memory.
 */
static tp_mcp_req_t *req_new(tp_mcp_session_t *s, const char *id, const char *call_id, const char *job)
{
    size_t id_len = strlen(id), cn = strlen(call_id), job_len = strlen(job);
    tp_mcp_req_t *r = calloc(1, sizeof *r + id_len + 1 + cn + 1 + job_len + 1);
    if (r == NULL)
        return NULL;
    r->s = s;
    r->tag = s->tag;
    r->id_len = id_len;
    memcpy(r->text, id, id_len);
    r->call_id = r->text + id_len + 1;
    memcpy((char *)r->call_id, call_id, cn + 1);
    r->job = r->call_id + cn + 1;
    memcpy((char *)r->job, job, job_len + 1);
    r->hash = hash_bytes(id, id_len);
    r->log_level = -1;
    return r;
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
    if (r->related) {
        w_puts(w, ",\"" TP_META_RELATED_TASK "\":{\"taskId\":");
        w_cstr(w, r->related);
        w_puts(w, "}");
    }
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
    const char *content = NULL, *sc = NULL, *key, *val;
    size_t content_len = 0, sc_len = 0, key_len, val_len, at = 0;
    /* Copied as they lie, compacted (no line break can reach the line), never parsed into values and written back. */
    if (tp_json_check(res, len, NULL) != 0)
        return -1;
    while (tp_json_next_member(res, len, &at, &key, &key_len, &val, &val_len) == 0) {
        /* a repeated key: its last value, as a JSON parser keeps it */
        if (key_len == 7 && memcmp(key, "content", 7) == 0)
            content = val, content_len = val_len;
        else if (key_len == 17 && memcmp(key, "structuredContent", 17) == 0)
            sc = val, sc_len = val_len;
    }
    if (content == NULL || content[0] != '[')
        return -1;
    w_puts(w, "{\"content\":");
    if (tp_json_compact(content, content_len, w->b) < 0)
        w->err = -1;
    if (sc) {
        w_puts(w, ",\"structuredContent\":");
        if (tp_json_compact(sc, sc_len, w->b) < 0)
            w->err = -1;
    }
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
 * A call's record as its CallToolResult; res NULL: a call that never
 * started (the engine was stopping).
 */
static void w_call_result(tp_mcp_session_t *s, tp_msg_t *w, const tp_mcp_req_t *r, const Toolpool__Result *res)
{
    if (res == NULL) {
        w_failure(w, r, tp_kind_name(TP_KIND_CANCELLED), NULL,
                  "toolpool is stopping: the call was not started (send it again once the server is back)", false, 0,
                  NULL, false, NULL, false, false);
    } else if (res->ok) {
        w_success(s, w, r, (const char *)res->result.data, res->result.len, res->served_by);
        w_meta(w, r, res->served_by, res->degraded, res->stale);
        w_puts(w, "}");
    } else {
        w_failure(w, r, res->kind, res->klass, res->message, res->retryable, res->attempts, res->served_by,
                  res->escalated, res->escalation, res->degraded, res->stale);
    }
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
    w_call_result(s, &w, r, a->not_started ? NULL : res);
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
    json_t *p = tp_json_loadb(params, len, 0, NULL);
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
    bool tasks;    /* its client declared the tasks extension */
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
    m->tasks = json_is_object(json_object_get(json_object_get(caps, "extensions"), TP_MCP_TASKS_EXT));
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
               ",\"capabilities\":{\"tools\":{\"listChanged\":false},\"logging\":{},"
               "\"extensions\":{\"" TP_MCP_TASKS_EXT "\":{}}},\"instructions\":");
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
    bool tasks = strcmp(version, TP_MCP_TASKS_VERSION) == 0;
    w_puts(&w, ",\"capabilities\":{\"tools\":{\"listChanged\":false},\"logging\":{}");
    if (tasks)
        w_puts(&w, ",\"tasks\":{\"list\":{},\"cancel\":{},\"requests\":{\"tools\":{\"call\":{}}}}");
    w_puts(&w, "},\"serverInfo\":{\"name\":\"toolpool\",\"version\":");
    w_cstr(&w, s->version ? s->version : "0");
    w_puts(&w, "},\"instructions\":");
    w_cstr(&w, tp_mcp_instructions);
    w_puts(&w, "}}");
    if (msg_end(s, &w, s->tag, true, "the initialize result") == 0) {
        s->initialized = true;
        s->tasks = tasks;
    }
}

/* The tools as tools/list lists them, rendered once: name, description, inputSchema. */

tp_mcp_catalog_t *tp_mcp_catalog_new(const tp_registry_t *reg)
{
    tp_mcp_catalog_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->tool_at = calloc(reg->n_tools + 1, sizeof *c->tool_at)) == NULL ||
        (c->tasks = calloc(1, sizeof *c->tasks)) == NULL) {
        if (c)
            free(c->tool_at);
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
    for (size_t i = 0; c->tasks && i < TP_MCP_TASK_BUCKETS; i++)
        while (c->tasks->bucket[i]) {
            tp_mcp_task_t *t = c->tasks->bucket[i];
            c->tasks->bucket[i] = t->next;
            task_free(t);
        }
    free(c->tasks);
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

/* ---- tasks ---- */

static uint64_t now_unix_ms(void)
{
    return tp_unix_us() / 1000u;
}

/* "createdAt":"2025-11-25T10:30:00.000Z": an ISO 8601 time in UTC, to the millisecond. */
static void w_time(tp_msg_t *w, const char *key, uint64_t unix_ms)
{
    time_t t = (time_t)(unix_ms / 1000u);
    struct tm tm;
    char at[40];
    if (gmtime_r(&t, &tm) == NULL || strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        snprintf(at, sizeof at, "1970-01-01T00:00:00");
    if (tp_buf_printf(w->b, ",\"%s\":\"%s.%03uZ\"", key, at, (unsigned)(unix_ms % 1000u)) < 0)
        w->err = -1;
}

/*
 * A Task's fields (no braces): the revision's names, ttl and pollInterval
 * in 2025-11-25, ttlMs and pollIntervalMs in the 2026-07-28 extension.
 */
static void w_task(tp_msg_t *w, bool modern, const char *id, const char *status, const char *message,
                   uint64_t created_ms, uint64_t updated_ms, uint64_t ttl_ms)
{
    w_puts(w, "\"taskId\":");
    w_cstr(w, id);
    w_puts(w, ",\"status\":");
    w_cstr(w, status);
    if (message) {
        w_puts(w, ",\"statusMessage\":");
        w_cstr(w, message);
    }
    w_time(w, "createdAt", created_ms);
    w_time(w, "lastUpdatedAt", updated_ms > created_ms ? updated_ms : created_ms);
    if (tp_buf_printf(w->b, modern ? ",\"ttlMs\":%llu,\"pollIntervalMs\":%d" : ",\"ttl\":%llu,\"pollInterval\":%d",
                      (unsigned long long)ttl_ms, TP_MCP_TASK_POLL_MS) < 0)
        w->err = -1;
}

/* A 2026-07-28 result's tail: its resultType and who answers. */
static void w_modern_result(tp_msg_t *w, const tp_mcp_session_t *s, const char *type)
{
    w_puts(w, ",\"resultType\":");
    w_cstr(w, type);
    w_puts(w, ",\"_meta\":{");
    w_server_info(w, s);
    w_puts(w, "}");
}

static tp_mcp_tasks_t *tasks_of(const tp_mcp_session_t *s)
{
    return s->cat->tasks;
}

static tp_mcp_task_t *task_find(tp_mcp_tasks_t *tab, const char *id)
{
    uint64_t h = hash_bytes(id, strlen(id));
    for (tp_mcp_task_t *t = tab->bucket[h % TP_MCP_TASK_BUCKETS]; t; t = t->next)
        if (t->hash == h && strcmp(t->id, id) == 0)
            return t;
    return NULL;
}

static void task_free(tp_mcp_task_t *t)
{
    free(t->job);
    free(t);
}

static void task_remove(tp_mcp_task_t *t)
{
    for (tp_mcp_task_t **p = &t->tab->bucket[t->hash % TP_MCP_TASK_BUCKETS]; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
}

/* Takes r off its task's waiters. */
static void waiter_unlink(tp_mcp_req_t *r)
{
    if (r->task == NULL)
        return;
    for (tp_mcp_req_t **p = &r->task->waiters; *p; p = &(*p)->wnext)
        if (*p == r) {
            *p = r->wnext;
            break;
        }
    r->task = NULL;
}

/*
 * A request that ends without its response (the client cancelled it, or
 * the session closed): the transport lets go of it, and it is freed.
 */
static void req_drop(tp_mcp_session_t *s, tp_mcp_req_t *r)
{
    waiter_unlink(r);
    req_remove(s, r);
    s->sink.send(s->sink.ctx, r->tag, NULL, 0, true);
    req_free(r);
}

/*
 * The engine's answer for a task's call: each tasks/result waiting for it
 * gets the call's CallToolResult, tied to the task by its _meta. The task
 * leaves the table: from now on the store answers for it.
 */
static void task_answer_cb(void *ctx, const tp_answer_t *a)
{
    tp_mcp_task_t *t = ctx;
    const Toolpool__Result *res = a->not_started ? NULL : a->result;
    t->call = NULL;
    task_remove(t);
    while (t->waiters) {
        tp_mcp_req_t *r = t->waiters;
        tp_mcp_session_t *s = r->s;
        t->waiters = r->wnext;
        r->task = NULL;
        req_remove(s, r);
        if (s->closed) {
            s->sink.send(s->sink.ctx, r->tag, NULL, 0, true);
        } else {
            tp_msg_t w;
            msg_begin(s, &w);
            w_result_head(&w, r->text, r->id_len);
            w_call_result(s, &w, r, res);
            w_puts(&w, "}");
            msg_end(s, &w, r->tag, true, "a tasks/result result");
        }
        req_free(r);
        if (s->closed && s->table_n == 0)
            session_free(s);
    }
    task_free(t);
}

/*
 * Hands the engine the call of task id, and keeps the task in the table
 * while it runs. Its deadline is the tool's own: a task's client is not
 * waiting on a request that may time out. NULL when out of memory.
 */
static tp_mcp_task_t *task_start(tp_mcp_session_t *s, const Toolpool__McpTask *rec)
{
    tp_mcp_tasks_t *tab = tasks_of(s);
    size_t n = strlen(rec->task_id);
    tp_mcp_task_t *t = calloc(1, sizeof *t + n + 1);
    char *args = malloc(rec->args.len + 1);
    if (t == NULL || args == NULL || (t->job = strdup(rec->job)) == NULL) {
        free(t);
        free(args);
        return NULL;
    }
    memcpy(t->id, rec->task_id, n + 1);
    t->tab = tab;
    t->hash = hash_bytes(t->id, n);
    t->tool = tp_registry_find(s->reg, rec->tool);
    t->step = rec->step;
    t->created_ms = rec->created_unix_ms;
    t->updated_ms = rec->updated_unix_ms;
    t->ttl_ms = rec->ttl_ms;
    t->cancelled = rec->cancelled;
    t->next = tab->bucket[t->hash % TP_MCP_TASK_BUCKETS];
    tab->bucket[t->hash % TP_MCP_TASK_BUCKETS] = t;
    if (rec->args.len)
        memcpy(args, rec->args.data, rec->args.len);
    else
        memcpy(args, "{}", 2);
    args[rec->args.len ? rec->args.len : 2] = 0;
    tp_request_t rq = {
        .id = t->id,
        .job = t->job,
        .breaker_job = strcmp(t->job, t->id) == 0 ? s->session_job : NULL, /* as a call that is its own job */
        .step = t->step,
        .tool = rec->tool,
        .args = args,
        .args_len = rec->args.len ? rec->args.len : 2,
        .give_args = true,
    };
    t->call = tp_engine_submit(s->e, &rq, task_answer_cb, t);
    return t;
}

/* A task's record, and its call's result when it has one, read in the engine's turn. */
typedef struct {
    const char *id;
    Toolpool__McpTask *rec;
    Toolpool__StoredResult *sr;
} tp_task_look_t;

static int task_look_op(void *ctx, tp_store_t *st, MDB_txn *txn)
{
    tp_task_look_t *l = ctx;
    int rc = tp_task_get(st, txn, l->id, &l->rec);
    if (rc == 0) {
        rc = tp_result_get(st, txn, l->id, &l->sr);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    return rc;
}

static int task_put_op(void *ctx, tp_store_t *st, MDB_txn *txn)
{
    return tp_task_put(st, txn, ctx);
}

static int task_del_op(void *ctx, tp_store_t *st, MDB_txn *txn)
{
    return tp_task_del(st, txn, ctx);
}

static void task_look_free(tp_task_look_t *l)
{
    if (l->rec)
        toolpool__mcp_task__free_unpacked(l->rec, NULL);
    tp_result_free(l->sr);
}

/* A store operation of ours: 0, or -1 when it failed (a failure of the store stops the engine, as its own do). */
static int task_store(tp_mcp_session_t *s, size_t room, tp_store_op_fn op, void *ctx, const char *what)
{
    int rc = tp_engine_store_op(s->e, room, op, ctx);
    if (rc == 0 || rc == MDB_NOTFOUND)
        return 0;
    if (rc != TP_EAGAIN)
        tp_engine_store_failed(s->e, rc, what);
    return -1;
}

/*
 * A task's status as the asking revision names it: cancelled once
 * tasks/cancel said so, whatever the call did after; working while its
 * call runs or has no result yet; else by the result: completed, or, for
 * a failure, failed in 2025-11-25 (its isError result; statusMessage the
 * kind and message); in 2026-07-28 completed when the tool answered
 * (its own failure: an isError result), failed, with the error inlined,
 * when it gave no answer of its own (unreached_kind). A call that ended
 * Cancelled is cancelled.
 */
static bool unreached_kind(const char *kind)
{
    return kind &&
           (strcmp(kind, tp_kind_name(TP_KIND_SERVER_ERROR)) == 0 || strcmp(kind, tp_kind_name(TP_KIND_TIMEOUT)) == 0 ||
            strcmp(kind, tp_kind_name(TP_KIND_WORKER_CRASHED)) == 0);
}

static const char *task_status(bool cancelled, bool live, const Toolpool__Result *res, bool modern, char *msg,
                               size_t cap)
{
    msg[0] = 0;
    if (cancelled)
        return "cancelled";
    if (live || res == NULL)
        return "working";
    if (!res->ok && res->kind && strcmp(res->kind, tp_kind_name(TP_KIND_CANCELLED)) == 0) {
        snprintf(msg, cap, "%.600s", res->message ? res->message : "cancelled");
        return "cancelled";
    }
    if (res->ok || (modern && !unreached_kind(res->kind)))
        return "completed";
    snprintf(msg, cap, "%.100s: %.600s", res->kind ? res->kind : "failed", res->message ? res->message : "");
    return "failed";
}

static bool terminal(const char *status)
{
    return strcmp(status, "working") != 0;
}

/* A CallToolResult rendered for task t's record res, as a request r of this session would get it. */
static void w_task_result(tp_mcp_session_t *s, tp_msg_t *w, const char *id, const tp_task_look_t *l, bool modern,
                          const char *related)
{
    tp_mcp_req_t *r = req_new(s, id, l->rec->task_id, l->rec->job);
    if (r == NULL) {
        w->err = -1;
        return;
    }
    r->tool = tp_registry_find(s->reg, l->rec->tool);
    r->step = l->rec->step;
    r->modern = modern;
    r->related = related;
    const Toolpool__Result *res = l->sr ? l->sr->result : NULL;
    if (res && res->job && res->job[0]) {
        r->job = res->job;
        r->step = res->step;
    }
    if (res)
        w_call_result(s, w, r, res);
    else
        w_failure(w, r, tp_kind_name(TP_KIND_CANCELLED), NULL, "the task was cancelled before its call ended", false, 0,
                  NULL, false, NULL, false, false);
    req_free(r);
}

/*
 * A response to send once everything written so far is committed: a task
 * created (its CreateTaskResult), or cancelled. The request stays in the
 * table until then, so the session and the transport's request wait too.
 */
static void durable_cb(void *ctx, bool ok)
{
    tp_mcp_req_t *r = ctx;
    tp_mcp_session_t *s = r->s;
    req_remove(s, r);
    if (r->cancelled || s->closed) {
        s->sink.send(s->sink.ctx, r->tag, NULL, 0, true);
    } else if (ok) {
        if (s->sink.send(s->sink.ctx, r->tag, r->reply, r->reply_len, true) < 0)
            tp_log_error("mcp.message_lost", "mcp: out of memory writing a task's response; it is lost");
    } else {
        void *was = s->tag;
        s->tag = r->tag;
        reply_error(s, r->text, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: the store failed: the task is not kept");
        s->tag = was;
    }
    req_free(r);
    if (s->closed && s->table_n == 0)
        session_free(s);
}

/* Sends the message being written in w as id's response once it is durable. */
static void reply_when_durable(tp_mcp_session_t *s, const char *id, tp_msg_t *w)
{
    tp_mcp_req_t *r = w->err ? NULL : req_new(s, id, "", "");
    if (r == NULL || (r->reply = malloc(s->msg.len + 1)) == NULL) {
        free(r);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        return;
    }
    memcpy(r->reply, s->msg.data, s->msg.len);
    r->reply_len = s->msg.len;
    r->kind = TP_MCP_REQ_DURABLE;
    if (req_insert(s, r) < 0) {
        req_free(r);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        return;
    }
    tp_engine_when_durable(s->e, durable_cb, r);
}

/* 128 random bits: a task's id is all that guards it (no client is told from another), so it must not be guessed. */
static void task_id_new(char out[40])
{
    uint64_t v[2] = {0, 0};
    if (getrandom(v, sizeof v, 0) != (ssize_t)sizeof v) {
        char a[17], b[17];
        session_id_new(a);
        session_id_new(b);
        snprintf(out, 40, "task-%s%s", a, b);
        return;
    }
    snprintf(out, 40, "task-%016llx%016llx", (unsigned long long)v[0], (unsigned long long)v[1]);
}

/*
 * A tools/call run as a task: its record goes into the store (the tool,
 * the args, its job and step, when it was made and for how long it is
 * kept), its call to the engine under the task's id, and the
 * CreateTaskResult to the client once the record is durable, so that a
 * tasks/get of the id it names always finds it, after a crash too. The
 * task is its own job unless the client names one (_meta.job).
 */
static void do_task_create(tp_mcp_session_t *s, const char *id, const char *tool, const char *args, size_t args_len,
                           const char *job, uint64_t ttl_ms, bool modern)
{
    char task_id[40];
    task_id_new(task_id);
    Toolpool__McpTask rec = TOOLPOOL__MCP_TASK__INIT;
    rec.task_id = task_id;
    rec.tool = (char *)tool;
    rec.args.data = (uint8_t *)args;
    rec.args.len = args_len;
    rec.job = (char *)(job ? job : task_id);
    rec.step = job ? job_next_step(s, job) : 1;
    rec.created_unix_ms = rec.updated_unix_ms = now_unix_ms();
    rec.ttl_ms = ttl_ms;
    if (rec.step == 0 || task_store(s, toolpool__mcp_task__get_packed_size(&rec) + strlen(task_id) + 64, task_put_op,
                                    &rec, "writing a task") < 0) {
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: the task could not be kept in the store");
        return;
    }
    if (task_start(s, &rec) == NULL) {
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        return;
    }
    tp_msg_t w;
    msg_begin(s, &w);
    w_result_head(&w, id, strlen(id));
    w_puts(&w, modern ? "{" : "{\"task\":{");
    w_task(&w, modern, task_id, "working", "The call is running under toolpool's recovery policy.", rec.created_unix_ms,
           rec.updated_unix_ms, ttl_ms);
    if (modern)
        w_modern_result(&w, s, "task");
    else
        w_puts(&w, "}");
    w_puts(&w, "}}");
    reply_when_durable(s, id, &w);
}

/* Whether a 2026-07-28 request's client declared the tasks extension; else it is answered -32021. */
static bool modern_tasks_ok(tp_mcp_session_t *s, const char *id, bool tasks)
{
    if (tasks)
        return true;
    reply_error(s, id, TP_RPC_MISSING_CAPABILITY,
                "{\"requiredCapabilities\":{\"extensions\":{\"" TP_MCP_TASKS_EXT "\":{}}}}",
                "Missing required client capability: " TP_MCP_TASKS_EXT
                " (declare it in _meta's clientCapabilities.extensions)");
    return false;
}

typedef enum { TP_TASK_GET, TP_TASK_RESULT, TP_TASK_CANCEL, TP_TASK_UPDATE } tp_task_op_t;

/*
 * tasks/get, tasks/result, tasks/cancel (both revisions' shapes) and
 * 2026-07-28's tasks/update. A task the front runs now is answered from
 * memory; any other from the store: its record (none: Invalid params, as
 * both revisions have it; past its ttl: dropped, and answered expired) and
 * its call's result. A task recorded without a result whose call no
 * supervisor runs (the one that ran it died) is handed to the engine again
 * under its id: a call that did end is answered from its record, an
 * idempotent one that had not runs again, one that is not idempotent ends
 * Interrupted, as after any crash.
 */
static void do_task(tp_mcp_session_t *s, const char *id, const json_t *params, bool modern, tp_task_op_t op)
{
    const char *task_id = json_string_value(json_object_get(params, "taskId"));
    if (task_id == NULL || task_id[0] == 0 || strlen(task_id) > TP_MCP_ID_MAX) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: \"taskId\" must be a task's id (a string)");
        return;
    }
    tp_mcp_task_t *live = task_find(tasks_of(s), task_id);
    tp_task_look_t l = {.id = task_id};
    if (task_store(s, 0, task_look_op, &l, "reading a task") < 0) {
        task_look_free(&l);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: the store could not be read");
        return;
    }
    if (l.rec == NULL) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Failed to retrieve task: Task not found");
        task_look_free(&l);
        return;
    }
    uint64_t now = now_unix_ms();
    if (live == NULL && l.rec->ttl_ms && now - l.rec->created_unix_ms > l.rec->ttl_ms && now > l.rec->created_unix_ms) {
        task_store(s, 64, task_del_op, (void *)task_id, "dropping an expired task");
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Failed to retrieve task: Task has expired");
        task_look_free(&l);
        return;
    }
    const Toolpool__Result *res = l.sr ? l.sr->result : NULL;
    bool cancelled = l.rec->cancelled || (live && live->cancelled);
    char msg[800];
    const char *status = task_status(cancelled, live != NULL, res, modern, msg, sizeof msg);
    if (live == NULL && !terminal(status) && op != TP_TASK_CANCEL && (live = task_start(s, l.rec)) == NULL) {
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        task_look_free(&l);
        return;
    }
    uint64_t updated = l.rec->updated_unix_ms;
    if (terminal(status) && l.sr && l.sr->ended_unix_us / 1000u > updated && !cancelled)
        updated = l.sr->ended_unix_us / 1000u;
    tp_msg_t w;
    if (op == TP_TASK_RESULT && live != NULL) {
        /* 2025-11-25's tasks/result waits for the end */
        tp_mcp_req_t *r = req_new(s, id, task_id, l.rec->job);
        if (r == NULL || req_insert(s, r) < 0) {
            free(r);
            reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        } else {
            r->kind = TP_MCP_REQ_WAIT;
            r->tool = live->tool;
            r->step = live->step;
            r->related = live->id;
            r->task = live;
            r->wnext = live->waiters;
            live->waiters = r;
        }
    } else if (op == TP_TASK_RESULT) {
        msg_begin(s, &w);
        w_result_head(&w, id, strlen(id));
        w_task_result(s, &w, id, &l, false, task_id);
        w_puts(&w, "}");
        msg_end(s, &w, s->tag, true, "a tasks/result result");
    } else if (op == TP_TASK_GET) {
        msg_begin(s, &w);
        w_result_head(&w, id, strlen(id));
        w_puts(&w, "{");
        w_task(&w, modern, task_id, status, msg[0] ? msg : NULL, l.rec->created_unix_ms, updated, l.rec->ttl_ms);
        if (modern && strcmp(status, "completed") == 0) {
            w_puts(&w, ",\"result\":");
            w_task_result(s, &w, id, &l, true, NULL);
        } else if (modern && strcmp(status, "failed") == 0) {
            /* SEP-2663: the error inlined, as a JSON-RPC error object; no result */
            w_puts(&w, ",\"error\":{\"code\":-32603,\"message\":");
            w_cstr(&w, msg);
            w_puts(&w, "}");
        }
        if (modern)
            w_modern_result(&w, s, "complete");
        w_puts(&w, "}}");
        msg_end(s, &w, s->tag, true, "a tasks/get result");
    } else if (op == TP_TASK_UPDATE || (op == TP_TASK_CANCEL && modern && terminal(status))) {
        /* 2026-07-28: an ack; no task of ours waits for input, so its inputResponses are for no request */
        msg_begin(s, &w);
        w_result_head(&w, id, strlen(id));
        w_puts(&w, "{\"resultType\":\"complete\",\"_meta\":{");
        w_server_info(&w, s);
        w_puts(&w, "}}}");
        msg_end(s, &w, s->tag, true, "an acknowledgement");
    } else if (terminal(status)) {
        reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Cannot cancel task: already in terminal status '%s'", status);
    } else {
        /* cancelled from now on, durably, before the answer says so; its call ends Cancelled */
        l.rec->cancelled = true;
        l.rec->updated_unix_ms = now;
        if (task_store(s, toolpool__mcp_task__get_packed_size(l.rec) + 64, task_put_op, l.rec, "cancelling a task") <
            0) {
            reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: the store failed");
        } else {
            if (live) {
                live->cancelled = true;
                live->updated_ms = now;
                if (live->call) {
                    tp_call_t *c = live->call;
                    live->call = NULL; /* one cancel per call */
                    tp_engine_cancel(s->e, c, "cancelled by the MCP client (tasks/cancel)");
                }
            }
            msg_begin(s, &w);
            w_result_head(&w, id, strlen(id));
            w_puts(&w, "{");
            if (modern) {
                w_puts(&w, "\"resultType\":\"complete\",\"_meta\":{");
                w_server_info(&w, s);
                w_puts(&w, "}");
            } else {
                w_task(&w, false, task_id, "cancelled", "The task was cancelled by request.", l.rec->created_unix_ms,
                       now, l.rec->ttl_ms);
            }
            w_puts(&w, "}}");
            reply_when_durable(s, id, &w);
        }
    }
    task_look_free(&l);
}

/* A page of tasks/list, read in the engine's turn, each with its call's result. */
typedef struct {
    const char *after;
    Toolpool__McpTask *rec[TP_MCP_TASKS_PAGE];
    Toolpool__StoredResult *sr[TP_MCP_TASKS_PAGE];
    size_t n;
    bool more;
} tp_task_page_t;

static int task_page_op(void *ctx, tp_store_t *st, MDB_txn *txn)
{
    tp_task_page_t *p = ctx;
    int rc = tp_task_page(st, txn, p->after, p->rec, TP_MCP_TASKS_PAGE, &p->n, &p->more);
    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        rc = tp_result_get(st, txn, p->rec[i]->task_id, &p->sr[i]);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    return rc;
}

/* The cursor of the tasks/list page after task ID: opaque to the client, checked when it comes back. */
#define TP_MCP_TASK_CURSOR_PREFIX "toolpool-tasks-"

/*
 * tasks/list (2025-11-25): every task the store keeps, by id, 50 a page,
 * nextCursor naming where the next starts. A task past its ttl is left out
 * (and dropped). The store's tasks are every client's: toolpool's MCP
 * fronts tell one client from another by nothing but the task id, which
 * is what the specification warns of; serve's token, where it has one,
 * guards them all alike.
 */
static void do_tasks_list(tp_mcp_session_t *s, const char *id, const json_t *params)
{
    tp_task_page_t p = {0};
    json_t *jc = json_object_get(params, "cursor");
    if (jc && !json_is_null(jc)) {
        const char *c = json_string_value(jc);
        size_t pl = strlen(TP_MCP_TASK_CURSOR_PREFIX);
        if (c == NULL || strncmp(c, TP_MCP_TASK_CURSOR_PREFIX, pl) != 0 || c[pl] == 0 ||
            strlen(c + pl) > TP_MCP_ID_MAX) {
            reply_error(s, id, TP_RPC_INVALID_PARAMS, NULL, "Invalid params: not a cursor this server gave");
            return;
        }
        p.after = c + pl;
    }
    if (task_store(s, 0, task_page_op, &p, "listing tasks") < 0) {
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: the store could not be read");
    } else {
        uint64_t now = now_unix_ms();
        tp_msg_t w;
        msg_begin(s, &w);
        w_result_head(&w, id, strlen(id));
        w_puts(&w, "{\"tasks\":[");
        bool first = true;
        for (size_t i = 0; i < p.n; i++) {
            const Toolpool__McpTask *rec = p.rec[i];
            tp_mcp_task_t *live = task_find(tasks_of(s), rec->task_id);
            if (live == NULL && rec->ttl_ms && now > rec->created_unix_ms && now - rec->created_unix_ms > rec->ttl_ms) {
                task_store(s, 64, task_del_op, rec->task_id, "dropping an expired task");
                continue;
            }
            char msg[800];
            const char *status = task_status(rec->cancelled || (live && live->cancelled), live != NULL,
                                             p.sr[i] ? p.sr[i]->result : NULL, false, msg, sizeof msg);
            uint64_t updated = rec->updated_unix_ms;
            if (p.sr[i] && terminal(status) && p.sr[i]->ended_unix_us / 1000u > updated)
                updated = p.sr[i]->ended_unix_us / 1000u;
            w_puts(&w, first ? "{" : ",{");
            first = false;
            w_task(&w, false, rec->task_id, status, msg[0] ? msg : NULL, rec->created_unix_ms, updated, rec->ttl_ms);
            w_puts(&w, "}");
        }
        w_puts(&w, "]");
        if (p.more && p.n > 0) {
            w_puts(&w, ",\"nextCursor\":\"" TP_MCP_TASK_CURSOR_PREFIX);
            w_puts(&w, p.rec[p.n - 1]->task_id); /* our ids: hex digits, nothing to escape */
            w_puts(&w, "\"");
        }
        w_puts(&w, "}}");
        msg_end(s, &w, s->tag, true, "the tasks/list result");
    }
    for (size_t i = 0; i < p.n; i++) {
        toolpool__mcp_task__free_unpacked(p.rec[i], NULL);
        tp_result_free(p.sr[i]);
    }
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
    /*
     * Run as a task: in 2025-11-25 when the request asks (params.task, with
     * its ttl); in 2026-07-28 whenever the client declared the extension,
     * since there the server decides (its params.task is no field of
     * that revision, and is let be).
     */
    json_t *jtask = m->modern || !s->tasks ? NULL : json_object_get(params, "task");
    json_t *jttl = json_object_get(jtask, "ttl");
    bool as_task = jtask != NULL || m->tasks;
    const char *problem = NULL;
    if (jtask && !json_is_object(jtask))
        problem = "\"task\" must be an object";
    else if (jttl && !json_is_null(jttl) && (!json_is_number(jttl) || json_number_value(jttl) < 0))
        problem = "\"task.ttl\" must be a number of milliseconds";
    else if (name == NULL)
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
    tp_task_support_t support = tp_toolsdoc_task_support(tool);
    if (!as_task && support == TP_TASKS_REQUIRED) {
        if (m->modern)
            modern_tasks_ok(s, id, false);
        else
            reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL,
                        "Method not found: %.200s runs only as a task (its execution.taskSupport is required)", name);
        return;
    }
    if (as_task && support == TP_TASKS_FORBIDDEN) {
        if (!m->modern) {
            reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL,
                        "Method not found: %.200s does not run as a task (its execution.taskSupport is forbidden)",
                        name);
            return;
        }
        as_task = false; /* 2026-07-28: the server decides, and answers it as it is */
    }
    if (as_task) {
        tp_buf_t tb = {0};
        if ((args && !json_is_null(args) ? tp_json_write(&tb, args, 0) : tp_buf_puts(&tb, "{}")) < 0 ||
            tp_buf_append(&tb, "", 1) < 0) {
            tp_buf_free(&tb);
            reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
            return;
        }
        uint64_t ttl = TP_MCP_TASK_TTL_MS;
        if (json_is_number(jttl))
            ttl = json_number_value(jttl) >= (double)TP_MCP_TASK_TTL_MAX_MS ? TP_MCP_TASK_TTL_MAX_MS
                  : json_number_value(jttl) < 1000                          ? 1000
                                                                            : (uint64_t)json_number_value(jttl);
        do_task_create(s, id, name, (const char *)tb.data, tb.len - 1, jjob ? json_string_value(jjob) : NULL, ttl,
                       m->modern);
        tp_buf_free(&tb);
        return;
    }
    char call_id[TP_MCP_ID_MAX + 1];
    if (jid)
        snprintf(call_id, sizeof call_id, "%s", json_string_value(jid));
    else
        call_id_make(call_id, sizeof call_id, s->session, ++s->seq);
    /* A 2026-07-28 request is a conversation of its own: no session to be a job; it is its own, unless named. */
    const char *job = jjob ? json_string_value(jjob) : m->modern ? call_id : s->session_job;
    tp_mcp_req_t *r = req_new(s, id_text, call_id, job);
    tp_buf_t ab = {0};
    if (r == NULL || (args && !json_is_null(args) ? tp_json_write(&ab, args, 0) : tp_buf_puts(&ab, "{}")) < 0 ||
        tp_buf_append(&ab, "", 1) < 0) {
        free(r);
        tp_buf_free(&ab);
        reply_error(s, id, TP_RPC_INTERNAL_ERROR, NULL, "Internal error: out of memory");
        return;
    }
    r->tool = tool;
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
        /* a call that is its own job fails alike with the session's others: the same-call circuit counts them */
        .breaker_job = job == call_id ? s->session_job : NULL,
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
    if (r->kind == TP_MCP_REQ_WAIT) {
        req_drop(s, r); /* a tasks/result no longer waited for; its task runs on */
        return;
    }
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

/* 2025-11-25's task methods, and 2026-07-28's (whose extension has no tasks/result and no tasks/list). */
static bool task_method(const char *method, bool modern, tp_task_op_t *op)
{
    if (strcmp(method, "tasks/get") == 0)
        *op = TP_TASK_GET;
    else if (strcmp(method, "tasks/cancel") == 0)
        *op = TP_TASK_CANCEL;
    else if (!modern && strcmp(method, "tasks/result") == 0)
        *op = TP_TASK_RESULT;
    else if (modern && strcmp(method, "tasks/update") == 0)
        *op = TP_TASK_UPDATE;
    else
        return false;
    return true;
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
            reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL,
                        "Method not found: initialize (2026-07-28 has none; send one without "
                        "MCP-Protocol-Version: 2026-07-28 to open a 2025-11-25 session)");
        else
            do_initialize(s, id, params);
        return;
    }
    if (s->stateless && !tp_mcp_method_modern(method)) {
        /* before its _meta is judged: a removed method is -32601, whatever else it gets wrong */
        reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL, "Method not found: %.200s (in 2026-07-28)", method);
        return;
    }
    tp_mcp_reqmeta_t m;
    tp_task_op_t op = TP_TASK_GET;
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
        else if (task_method(method, true, &op)) {
            if (modern_tasks_ok(s, id, m.tasks))
                do_task(s, id, params, true, op);
        } else
            reply_error(s, id, TP_RPC_METHOD_NOT_FOUND, NULL, "Method not found: %.200s (in 2026-07-28)", method);
        return;
    }
    if (strcmp(method, "ping") == 0) {
        reply_empty(s, id);
        return;
    }
    bool task_op = (s->tasks || !s->initialized) &&
                   (task_method(method, false, &op) || strcmp(method, "tasks/list") == 0);
    if (!method_known(method) && !task_op) {
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
    else if (strcmp(method, "tasks/list") == 0)
        do_tasks_list(s, id, params);
    else if (task_op)
        do_task(s, id, params, false, op);
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

bool tp_mcp_method_modern(const char *method)
{
    tp_task_op_t op;
    return strcmp(method, "server/discover") == 0 || strcmp(method, "tools/list") == 0 ||
           strcmp(method, "tools/call") == 0 || task_method(method, true, &op);
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
                if (r->kind == TP_MCP_REQ_WAIT) {
                    req_drop(s, r);
                    return;
                }
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
            waiter_unlink(r);
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
    /* tasks/result requests wait no more: their tasks are the front's, and run on */
    for (size_t i = 0; i < s->table_cap; i++)
        for (tp_mcp_req_t *r = s->table[i], *next; r; r = next) {
            next = r->hnext;
            if (r->kind == TP_MCP_REQ_WAIT)
                req_drop(s, r);
        }
    if (s->table_n == 0)
        session_free(s);
}

void tp_mcp_session_free(tp_mcp_session_t *s)
{
    if (s)
        session_free(s);
}
