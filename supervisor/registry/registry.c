/*
 * The registry loader. tools.json is read once, parsed by jansson, and then
 * walked against the key tables below: one row per key saying its type, its
 * bounds, its built-in default and where in the C structs it lands. Nothing
 * else in this file knows a key's name, so a new policy knob is one row.
 *
 * Every rejection names FILE:LINE and the key path. jansson keeps no
 * positions, so the loader tracks the JSON Pointer of what it is reading and
 * asks tp_json_line for the line only when it has something to report.
 */
#include "registry.h"
#include "suggest.h"

#include "clock.h"
#include "jsonpos.h"
#include "jsonschema.h"
#include "mcpstdio.h"
#include "taxonomy.h"

#include <errno.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- where the loader is: a JSON Pointer and the key path users read ---- */

#define TP_WHERE_MAX 2048

typedef struct {
    char ptr[TP_WHERE_MAX]; /* "/tools/1/backoff/factor", for the line */
    char key[TP_WHERE_MAX]; /* "tools[1] (search_kb).backoff.factor" */
    size_t ptr_len;
    size_t key_len;
} where_t;

typedef struct {
    size_t ptr_len;
    size_t key_len;
} mark_t;

/* Appends, truncating silently: a 2 KiB key path only costs a vaguer line. */
static void where_add(char *buf, size_t *len, const char *s, size_t n)
{
    if (n > TP_WHERE_MAX - 1 - *len)
        n = TP_WHERE_MAX - 1 - *len;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = '\0';
}

/* Descends into the member name; "~" and "/" are escaped in the pointer. */
static mark_t where_key(where_t *w, const char *name)
{
    mark_t m = {w->ptr_len, w->key_len};
    where_add(w->ptr, &w->ptr_len, "/", 1);
    for (const char *c = name; *c != '\0'; c++) {
        if (*c == '~')
            where_add(w->ptr, &w->ptr_len, "~0", 2);
        else if (*c == '/')
            where_add(w->ptr, &w->ptr_len, "~1", 2);
        else
            where_add(w->ptr, &w->ptr_len, c, 1);
    }
    if (w->key_len > 0)
        where_add(w->key, &w->key_len, ".", 1);
    where_add(w->key, &w->key_len, name, strlen(name));
    return m;
}

static mark_t where_index(where_t *w, size_t i)
{
    mark_t m = {w->ptr_len, w->key_len};
    char s[32];
    int n = snprintf(s, sizeof s, "/%zu", i);
    where_add(w->ptr, &w->ptr_len, s, (size_t)n);
    n = snprintf(s, sizeof s, "[%zu]", i);
    where_add(w->key, &w->key_len, s, (size_t)n);
    return m;
}

/* Adds text to the key path only, e.g. the tool's name after "tools[2]". */
static void where_note(where_t *w, const char *s)
{
    where_add(w->key, &w->key_len, s, strlen(s));
}

static void where_pop(where_t *w, mark_t m)
{
    w->ptr_len = m.ptr_len;
    w->ptr[m.ptr_len] = '\0';
    w->key_len = m.key_len;
    w->key[m.key_len] = '\0';
}

/* ---- the loader and its one way of failing ---- */

typedef struct {
    const char *file; /* as the caller named it: the FILE of every message */
    const char *text; /* the file's bytes, for tp_json_line */
    size_t len;
    char *err;
    size_t errlen;
    where_t at;
    tp_registry_t *reg;
    json_t *root;
    json_t *tools_json;      /* the "tools" array, read after "defaults" */
    json_t *servers_json;    /* "mcp_servers", imported after "defaults" */
    json_t *imported;        /* the tools the servers listed, as tool objects, in order */
    size_t *imported_from;   /* for each, its server's position in "mcp_servers" */
    bool tools_at_root;      /* the file is an OpenAI list: "tools" is the root array */
    int *tool_lines;         /* where each declared tool starts, found in one walk (tp_json_element_lines) */
    const char *dir;         /* where the file being read sits: relative paths start here */
    const char *adapter_dir; /* the dir of the file that gave the tool being read its adapter */
    json_t *run;             /* the registry file's "run" block, or NULL */
    /* the policy file (--policy), read after the registry's top level */
    const char *pfile, *ptext;
    size_t plen;
    char *pdir;
    json_t *proot;
    json_t *prun;   /* its "run" block, or NULL */
    bool in_policy; /* reading the policy file: fail() names it */
    /* every error of one load, up to TP_REGISTRY_ERRORS_SHOWN of them in err */
    size_t n_errors;
    size_t err_used;
    bool err_full;
} loader_t;

/* The number of errors written out; the rest are counted, "and N more errors". */
#define TP_REGISTRY_ERRORS_SHOWN 20

/* The one format of every message: "FILE:LINE: KEYPATH: msg", parts left out when unknown. */
static void report(char *err, size_t errlen, const char *file, int line, const char *key, const char *msg)
{
    if (err == NULL || errlen == 0)
        return;
    char at[32] = "";
    if (line > 0)
        snprintf(at, sizeof at, ":%d", line);
    /* A message longer than the caller's buffer is cut to fit: that bound is the point. */
    if (snprintf(err, errlen, "%s%s: %s%s%s", file, at, key, *key != '\0' ? ": " : "", msg) >= (int)errlen)
        err[errlen - 1] = '\0';
    /*
     * One line, whatever the file holds: a key with "\n" in its name, or
     * the text jansson quotes after "near" (raw bytes of the file), can
     * carry control characters. Each is written as '?'.
     */
    for (char *p = err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
}

/*
 * Appends one message to err, a line each: the first as a single error has
 * always been written, the others after a newline. Past
 * TP_REGISTRY_ERRORS_SHOWN, or when err has no room for the whole line, the
 * error is only counted (finish_errors says how many were left out).
 */
static void add_error(loader_t *ld, const char *line)
{
    ld->n_errors++;
    if (ld->err == NULL || ld->errlen == 0 || ld->err_full)
        return;
    size_t n = strlen(line), sep = ld->err_used ? 1 : 0;
    /* keep room for "\nand N more errors" */
    if (ld->n_errors > TP_REGISTRY_ERRORS_SHOWN || ld->err_used + sep + n + 40 >= ld->errlen) {
        if (ld->err_used == 0) /* the first always shows, cut if it must */
            snprintf(ld->err, ld->errlen, "%s", line), ld->err_used = strlen(ld->err);
        ld->err_full = ld->err_used > 0 && ld->n_errors > 1;
        return;
    }
    if (sep)
        ld->err[ld->err_used++] = '\n';
    memcpy(ld->err + ld->err_used, line, n + 1);
    ld->err_used += n;
}

/* After the load: "and N more errors" for those counted but not written. */
static void finish_errors(loader_t *ld)
{
    size_t shown = 0;
    if (ld->err == NULL || ld->errlen == 0 || ld->n_errors == 0)
        return;
    for (const char *p = ld->err; *p; p++)
        shown += *p == '\n';
    shown++;
    if (ld->n_errors > shown)
        snprintf(ld->err + ld->err_used, ld->errlen - ld->err_used, "\nand %zu more error%s", ld->n_errors - shown,
                 ld->n_errors - shown == 1 ? "" : "s");
}

/*
 * Writes "FILE:LINE: KEYPATH: message" for wherever the loader stands and
 * returns -1, so every check reads `return fail(ld, ...)`. The load goes
 * on to find the other errors: parse_object skips to the next key, and
 * parse_tools to the next tool.
 */
static int fail(loader_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader_t *ld, const char *fmt, ...)
{
    char msg[1024], one[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *file = ld->in_policy ? ld->pfile : ld->file, *text = ld->in_policy ? ld->ptext : ld->text;
    size_t len = ld->in_policy ? ld->plen : ld->len;
    int line = tp_json_line(text, len, ld->at.ptr);
    report(one, sizeof one, file, line, ld->at.key, msg);
    add_error(ld, one);
    return -1;
}

static int fail_oom(loader_t *ld)
{
    return fail(ld, "out of memory");
}

/*
 * A short rendering of a value for "got X": scalars as JSON (strings cut
 * at a character boundary when long), containers by their kind. A real
 * always shows a '.' or exponent so "got 2.0" never reads as an integer.
 */
static const char *describe(const json_t *v, char *buf, size_t n)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        snprintf(buf, n, "%s", json_object_size(v) ? "an object" : "{}");
        break;
    case JSON_ARRAY:
        snprintf(buf, n, "%s", json_array_size(v) ? "an array" : "[]");
        break;
    case JSON_STRING: {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        if (s == NULL) {
            snprintf(buf, n, "a string");
            break;
        }
        size_t len = strlen(s);
        if (len < n) {
            memcpy(buf, s, len + 1);
        } else {
            size_t keep = n > 5 ? n - 5 : 0;
            while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
                keep--;
            snprintf(buf, n, "%.*s...\"", (int)keep, s);
        }
        free(s);
        break;
    }
    case JSON_INTEGER:
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL: {
        int k = snprintf(buf, n, "%.15g", json_real_value(v));
        if (k > 0 && (size_t)k + 2 < n && strpbrk(buf, ".en") == NULL)
            memcpy(buf + k, ".0", 3);
        break;
    }
    case JSON_TRUE:
        snprintf(buf, n, "true");
        break;
    case JSON_FALSE:
        snprintf(buf, n, "false");
        break;
    default:
        snprintf(buf, n, "null");
        break;
    }
    return buf;
}

#define GOT(v) describe((v), got, sizeof got)

/* ---- the key tables ---- */

typedef enum {
    K_SKIP,     /* read before the table runs (a tool's name) */
    K_DURATION, /* "8s" -> uint64_t microseconds */
    K_BYTES,    /* "512M" or an integer -> uint64_t bytes */
    K_UINT,     /* integer -> uint32_t or uint64_t, by the field's size */
    K_NUMBER,   /* integer or real -> double */
    K_BOOL,
    K_JITTER,      /* "full" | "equal" | "none" -> tp_jitter_t */
    K_SCOPE,       /* "job" | "global" -> uint32_t tp_scope_t */
    K_KINDS,       /* array of transient kind names -> uint64_t, bit per kind */
    K_CLASSES,     /* array of class names -> uint32_t, bit per class */
    K_NAMES,       /* tool names, an array or one string -> char **, count at off_n */
    K_JSON,        /* any value, kept with a reference; null means none */
    K_SCHEMA,      /* a JSON Schema: an object or a boolean, kept */
    K_STRING,      /* -> char * */
    K_ARGV,        /* non-empty array of strings -> NULL-terminated char ** */
    K_OBJECT,      /* a nested object: sub's keys, fields from base + off */
    K_ADAPTER,     /* a tool's exec / plugin / mcp / http */
    K_TOOLS,       /* the top-level tools array, read after everything else */
    K_DIALECT,     /* "draft-07" | "2020-12" (or a "$schema" URI of one) -> int TP_JSONSCHEMA_* */
    K_FORMATS,     /* "annotate" | "assert" -> int TP_FORMATS_* */
    K_SCHEMA_REFS, /* {URI: FILE}: each file read now, kept as a document by URI */
    K_ENV,         /* an object of strings -> NULL-terminated char ** of "K=V" */
    K_SERVERS,     /* the top-level mcp_servers object, imported after "defaults" */
    K_RUN,         /* the top-level "run" block: {TOOL: settings}, read with each tool */
} key_type_t;

enum {
    F_REQUIRED = 1 << 0,
    F_NONEMPTY = 1 << 1, /* strings: "" rejected */
    F_MIN_EXCL = 1 << 2, /* bound is "> min", not ">= min" */
    F_URL = 1 << 3,      /* strings: http:// or https:// */
    F_PATH = 1 << 4,     /* a relative path resolves against the registry dir */
    F_OFF = 1 << 5,      /* K_OBJECT: false turns it off (the bool at off_n), an object on */
    F_HOPS = 1 << 6,     /* K_NAMES: an entry may be {"tool", "args"} (tp_policy_t.fallback_args) */
};

typedef struct key_table key_table_t;

typedef struct {
    const char *name;
    key_type_t type;
    size_t off;  /* field offset from the table's base */
    size_t size; /* the field's size (K_UINT and the masks) */
    unsigned flags;
    double min, max;        /* K_UINT, K_NUMBER, K_DURATION (us); max 0 = none */
    double dflt;            /* the built-in default, for tp_policy_init */
    size_t off_n;           /* K_NAMES: where the count goes; F_OFF: the "off" bool */
    const key_table_t *sub; /* K_OBJECT, and K_ADAPTER's object shape */
    tp_adapter_t adapter;   /* K_ADAPTER */
} key_spec_t;

/* The keys one JSON object may have; next chains more keys for the same object. */
struct key_table {
    const key_spec_t *keys;
    size_t n;
    const key_table_t *next;
    size_t next_off; /* next's base, from this table's base */
};

/* clang-format off */
#define TABLE(a) {(a), sizeof(a) / sizeof((a)[0]), NULL, 0}
/* clang-format on */
#define KEY(n, t) .name = (n), .type = (t)
#define FIELD(T, m) .off = offsetof(T, m), .size = sizeof(((T *)0)->m)
#define POL(m) FIELD(tp_policy_t, m)
#define TOOL(m) FIELD(tp_tool_t, m)
#define GRD(m) FIELD(tp_guards_t, m)
#define SEC 1e6
#define KIND_BIT(k) (1ull << (k))
#define CLASS_BIT(c) (1u << (c))

static const key_spec_t backoff_keys[] = {
    {KEY("base", K_DURATION), POL(backoff_base_us), .dflt = 0.5 * SEC},
    {KEY("factor", K_NUMBER), POL(backoff_factor), .min = 1, .dflt = 2},
    {KEY("max", K_DURATION), POL(backoff_max_us), .dflt = 30 * SEC},
    {KEY("jitter", K_JITTER), POL(jitter), .dflt = TP_JITTER_FULL},
};
static const key_table_t backoff_table = TABLE(backoff_keys);

static const key_spec_t same_call_keys[] = {
    {KEY("scope", K_SCOPE), POL(same_call_scope), .dflt = TP_SCOPE_JOB},
    {KEY("failures", K_UINT), POL(same_call_failures), .min = 1, .dflt = 3},
    {KEY("window", K_DURATION), POL(same_call_window_us), .dflt = 600 * SEC},
};
static const key_table_t same_call_table = TABLE(same_call_keys);

static const key_spec_t tool_breaker_keys[] = {
    {KEY("failure_rate", K_NUMBER), POL(tool_failure_rate), .flags = F_MIN_EXCL, .max = 1, .dflt = 0.5},
    {KEY("min_calls", K_UINT), POL(tool_min_calls), .min = 1, .dflt = 20},
    {KEY("window", K_DURATION), POL(tool_window_us), .dflt = 60 * SEC},
    {KEY("cooldown", K_DURATION), POL(tool_cooldown_us), .dflt = 30 * SEC},
    {KEY("probes", K_UINT), POL(tool_probes), .min = 1, .dflt = 1},
};
static const key_table_t tool_breaker_table = TABLE(tool_breaker_keys);

static const key_spec_t breaker_keys[] = {
    {KEY("same_call", K_OBJECT), .sub = &same_call_table, .flags = F_OFF,
     .off_n = offsetof(tp_policy_t, same_call_off)},
    {KEY("tool", K_OBJECT), .sub = &tool_breaker_table},
};
static const key_table_t breaker_table = TABLE(breaker_keys);

#define MAX_OUTPUT_DEFAULT 1048576

/*
 * Resource limits, set with setrlimit for the tool (worker/rlimit.h).
 * "output" is max_output under another name: either lands in the same
 * field, and an object may not set both (check_output_once).
 */
static const key_spec_t limits_keys[] = {
    {KEY("memory", K_BYTES), POL(limit_memory), .min = 1048576},
    {KEY("cpu", K_DURATION), POL(limit_cpu_us), .flags = F_MIN_EXCL},
    {KEY("files", K_UINT), POL(limit_files), .min = 3, .max = 1048576},
    {KEY("output", K_BYTES), POL(max_output), .min = 1, .dflt = MAX_OUTPUT_DEFAULT},
};
static const key_table_t limits_table = TABLE(limits_keys);

/*
 * Worker recycling: after a worker answers a call of this tool, it is
 * replaced (between calls) once it has answered max_calls calls or holds
 * max_rss bytes resident (supervisor/pool/pool.c).
 */
static const key_spec_t worker_keys[] = {
    {KEY("max_calls", K_UINT), POL(worker_max_calls), .min = 1},
    {KEY("max_rss", K_BYTES), POL(worker_max_rss), .min = 1048576},
};
static const key_table_t worker_table = TABLE(worker_keys);

/* Allowed in "defaults" and in every tool; the tool's value wins. */
static const key_spec_t policy_keys[] = {
    {KEY("timeout", K_DURATION), POL(timeout_us), .flags = F_MIN_EXCL, .dflt = 30 * SEC},
    {KEY("deadline", K_DURATION), POL(deadline_us)},
    {KEY("attempts", K_UINT), POL(attempts), .min = 1, .max = 100, .dflt = 3},
    {KEY("backoff", K_OBJECT), .sub = &backoff_table},
    {KEY("kill_grace", K_DURATION), POL(kill_grace_us)},
    {KEY("idempotent", K_BOOL), POL(idempotent), .dflt = 1},
    {KEY("concurrency", K_UINT), POL(concurrency)},
    {KEY("max_output", K_UINT), POL(max_output), .min = 1, .dflt = MAX_OUTPUT_DEFAULT},
    {KEY("limits", K_OBJECT), .sub = &limits_table},
    {KEY("worker", K_OBJECT), .sub = &worker_table},
    {KEY("retry_on", K_KINDS), POL(retry_on),
     .dflt = (double)(KIND_BIT(TP_KIND_TIMEOUT) | KIND_BIT(TP_KIND_RATE_LIMITED) | KIND_BIT(TP_KIND_SERVER_ERROR) |
                      KIND_BIT(TP_KIND_WORKER_CRASHED))},
    {KEY("fallback", K_NAMES), POL(fallback), .off_n = offsetof(tp_policy_t, n_fallback), .flags = F_HOPS},
    {KEY("fallback_on", K_CLASSES), POL(fallback_on), .dflt = CLASS_BIT(TP_CLASS_TRANSIENT)},
    {KEY("stale", K_BOOL), POL(stale)},
    {KEY("degraded", K_JSON), POL(degraded)},
    {KEY("breaker", K_OBJECT), .sub = &breaker_table},
};
static const key_table_t policy_table = TABLE(policy_keys);

static const key_spec_t plugin_keys[] = {
    {KEY("path", K_STRING), TOOL(plugin_path), .flags = F_REQUIRED | F_NONEMPTY | F_PATH},
};
static const key_table_t plugin_table = TABLE(plugin_keys);

static const key_spec_t mcp_keys[] = {
    {KEY("command", K_ARGV), TOOL(mcp_command), .flags = F_REQUIRED | F_PATH},
    {KEY("tool", K_STRING), TOOL(mcp_tool), .flags = F_REQUIRED | F_NONEMPTY},
    {KEY("env", K_ENV), TOOL(mcp_env)},
    {KEY("cwd", K_STRING), TOOL(mcp_cwd), .flags = F_NONEMPTY | F_PATH},
};
static const key_table_t mcp_table = TABLE(mcp_keys);

static const key_spec_t http_keys[] = {
    {KEY("url", K_STRING), TOOL(http_url), .flags = F_REQUIRED | F_NONEMPTY | F_URL},
};
static const key_table_t http_table = TABLE(http_keys);

/* A tool's own keys; its policy keys chain on, landing in tool->policy. */
static const key_spec_t tool_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("parameters", K_SCHEMA), TOOL(parameters)},
    {KEY("schema_dialect", K_DIALECT), TOOL(schema_dialect)},
    {KEY("formats", K_FORMATS), TOOL(formats)},
    {KEY("exec", K_ADAPTER), .adapter = TP_ADAPTER_EXEC, .flags = F_PATH},
    {KEY("plugin", K_ADAPTER), .adapter = TP_ADAPTER_PLUGIN, .sub = &plugin_table},
    {KEY("cwd", K_STRING), TOOL(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("mcp", K_ADAPTER), .adapter = TP_ADAPTER_MCP, .sub = &mcp_table},
    {KEY("http", K_ADAPTER), .adapter = TP_ADAPTER_HTTP, .sub = &http_table},
};
static const key_table_t tool_table = {tool_keys, sizeof tool_keys / sizeof tool_keys[0], &policy_table,
                                       offsetof(tp_tool_t, policy)};

/*
 * A "run" entry: toolpool's settings of a tool declared elsewhere (an
 * OpenAI or MCP declaration, or toolpool's own): its adapter, its schema
 * settings and its policy, never its name, description or parameters.
 */
static const key_spec_t run_keys[] = {
    {KEY("exec", K_ADAPTER), .adapter = TP_ADAPTER_EXEC, .flags = F_PATH},
    {KEY("plugin", K_ADAPTER), .adapter = TP_ADAPTER_PLUGIN, .sub = &plugin_table},
    {KEY("mcp", K_ADAPTER), .adapter = TP_ADAPTER_MCP, .sub = &mcp_table},
    {KEY("http", K_ADAPTER), .adapter = TP_ADAPTER_HTTP, .sub = &http_table},
    {KEY("cwd", K_STRING), TOOL(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("schema_dialect", K_DIALECT), TOOL(schema_dialect)},
    {KEY("formats", K_FORMATS), TOOL(formats)},
};
static const key_table_t run_table = {run_keys, sizeof run_keys / sizeof run_keys[0], &policy_table,
                                      offsetof(tp_tool_t, policy)};

/*
 * The declarations of the other ecosystems, read as they are written:
 * OpenAI's function tool, nested ({"type": "function", "function": {...}})
 * or flat as the Responses API writes it, and an MCP tools/list entry.
 * "type" and "name" are read by hand (K_SKIP); "annotations" too
 * (apply_annotations). MCP's title, outputSchema, icons and _meta mean
 * nothing to a run and are let through.
 */
static const key_spec_t openai_fn_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("parameters", K_SCHEMA), TOOL(parameters)},
    {KEY("strict", K_BOOL), TOOL(strict)},
};
static const key_table_t openai_fn_table = TABLE(openai_fn_keys);

static const key_spec_t openai_keys[] = {
    {KEY("type", K_SKIP)},
    {KEY("function", K_OBJECT), .sub = &openai_fn_table},
};
static const key_table_t openai_table = TABLE(openai_keys);

static const key_spec_t openai_flat_keys[] = {
    {KEY("type", K_SKIP)},
};
static const key_table_t openai_flat_table = {openai_flat_keys, 1, &openai_fn_table, 0};

static const key_spec_t mcp_decl_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("title", K_SKIP)},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("inputSchema", K_SCHEMA), TOOL(parameters)},
    {KEY("outputSchema", K_SKIP)},
    {KEY("annotations", K_SKIP)},
    {KEY("icons", K_SKIP)},
    {KEY("_meta", K_SKIP)},
};
static const key_table_t mcp_decl_table = TABLE(mcp_decl_keys);

/* How a "tools" entry is declared (tool_form). */
typedef enum {
    FORM_TOOLPOOL = 0,
    FORM_OPENAI,      /* {"type": "function", "function": {...}} */
    FORM_OPENAI_FLAT, /* {"type": "function", "name": ...} */
    FORM_MCP,         /* {"name", "inputSchema", ...}, with no adapter key */
} form_t;

/* Per job; 0 (absent) means no cap. */
static const key_spec_t guard_keys[] = {
    {KEY("max_steps", K_UINT), GRD(max_steps), .min = 1},
    {KEY("max_calls", K_UINT), GRD(max_calls), .min = 1},
    {KEY("max_wall", K_DURATION), GRD(max_wall_us), .flags = F_MIN_EXCL},
    {KEY("max_cost", K_NUMBER), GRD(max_cost), .flags = F_MIN_EXCL},
};
static const key_table_t guard_table = TABLE(guard_keys);

static const key_spec_t top_keys[] = {
    {KEY("defaults", K_OBJECT), FIELD(tp_registry_t, defaults), .sub = &policy_table},
    {KEY("guards", K_OBJECT), FIELD(tp_registry_t, guards), .sub = &guard_table},
    {KEY("schema_dialect", K_DIALECT), FIELD(tp_registry_t, schema_dialect)},
    {KEY("formats", K_FORMATS), FIELD(tp_registry_t, formats)},
    {KEY("schema_refs", K_SCHEMA_REFS), FIELD(tp_registry_t, schema_refs)},
    {KEY("tools", K_TOOLS)},
    {KEY("mcp_servers", K_SERVERS)},
    {KEY("run", K_RUN)},
    /* a tools/list result copied whole */
    {KEY("nextCursor", K_SKIP)},
    {KEY("_meta", K_SKIP)},
};
static const key_table_t top_table = TABLE(top_keys);

/* The policy file (--policy): toolpool's settings, no tools of its own. */
static const key_spec_t policy_file_keys[] = {
    {KEY("defaults", K_OBJECT), FIELD(tp_registry_t, defaults), .sub = &policy_table},
    {KEY("guards", K_OBJECT), FIELD(tp_registry_t, guards), .sub = &guard_table},
    {KEY("schema_dialect", K_DIALECT), FIELD(tp_registry_t, schema_dialect)},
    {KEY("formats", K_FORMATS), FIELD(tp_registry_t, formats)},
    {KEY("schema_refs", K_SCHEMA_REFS), FIELD(tp_registry_t, schema_refs)},
    {KEY("run", K_RUN)},
};
static const key_table_t policy_file_table = TABLE(policy_file_keys);

/* The adapters, and which of them this build's worker can run. */
static const struct {
    const char *name;
    bool available;
} adapters[] = {
    [TP_ADAPTER_EXEC] = {"exec", true},
    [TP_ADAPTER_PLUGIN] = {"plugin", true},
    [TP_ADAPTER_MCP] = {"mcp", true},
    [TP_ADAPTER_HTTP] = {"http", false},
};

static const char *const jitter_names[] = {
    [TP_JITTER_FULL] = "full",
    [TP_JITTER_EQUAL] = "equal",
    [TP_JITTER_NONE] = "none",
};

/* ---- durations ---- */

/*
 * Digits, an optional fraction, then exactly one unit; or the bare "0".
 * Integer arithmetic throughout (fraction to 9 digits, rounded to the
 * microsecond) so "0.1s" is exactly 100000, and overflow is an error.
 */
int tp_duration_parse(const char *s, uint64_t *us)
{
    static const struct {
        const char *unit;
        uint64_t us;
    } units[] = {{"us", 1}, {"ms", 1000}, {"s", 1000000}, {"m", 60000000}, {"h", 3600000000ull}};
    if (s == NULL || us == NULL)
        return -1;
    if (strcmp(s, "0") == 0) {
        *us = 0;
        return 0;
    }
    const char *p = s;
    uint64_t whole = 0, frac = 0, scale = 1;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            return -1;
        whole = whole * 10 + d;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (scale < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) != 0)
            continue;
        uint64_t u = units[i].us;
        if (whole > UINT64_MAX / u)
            return -1;
        uint64_t part = (frac * u + scale / 2) / scale;
        if (whole * u > UINT64_MAX - part)
            return -1;
        *us = whole * u + part;
        return 0;
    }
    return -1;
}

int tp_size_parse(const char *s, uint64_t *bytes)
{
    if (s == NULL || bytes == NULL || *s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    if (*s != '\0') {
        const char *units = "KMGT", *u = strchr(units, *s >= 'a' ? *s - 'a' + 'A' : *s);
        if (u == NULL || s[1] != '\0')
            return -1;
        shift = 10 * (unsigned)(u - units + 1);
    }
    if (v > (UINT64_MAX >> shift))
        return -1;
    *bytes = v << shift;
    return 0;
}

/* ---- the policy: defaults, copies, teardown ---- */

/* Writes an unsigned value into a field of 1, 4 or 8 bytes (bool, u32, u64). */
static void store_uint(void *field, size_t size, uint64_t v)
{
    if (size == sizeof(bool))
        *(bool *)field = v != 0;
    else if (size == sizeof(uint32_t))
        *(uint32_t *)field = (uint32_t)v;
    else
        *(uint64_t *)field = v;
}

/* Every table row's built-in default into base, nested objects included. */
static void apply_defaults(const key_table_t *tab, void *base)
{
    for (size_t i = 0; i < tab->n; i++) {
        const key_spec_t *s = &tab->keys[i];
        void *field = (char *)base + s->off;
        switch (s->type) {
        case K_DURATION:
        case K_BYTES:
        case K_UINT:
        case K_BOOL:
        case K_KINDS:
        case K_CLASSES:
        case K_SCOPE:
            store_uint(field, s->size, (uint64_t)s->dflt);
            break;
        case K_NUMBER:
            *(double *)field = s->dflt;
            break;
        case K_JITTER:
            *(tp_jitter_t *)field = (tp_jitter_t)s->dflt;
            break;
        case K_OBJECT:
            apply_defaults(s->sub, field);
            break;
        default:
            break;
        }
    }
}

void tp_policy_init(tp_policy_t *p)
{
    memset(p, 0, sizeof *p);
    apply_defaults(&policy_table, p);
}

static void free_strv(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Frees a NULL-terminated vector. */
static void free_argv(char **v)
{
    if (v == NULL)
        return;
    for (char **p = v; *p != NULL; p++)
        free(*p);
    free(v);
}

/* Drops a list of hop args maps (n entries, any of them NULL). */
static void free_maps(json_t **maps, size_t n)
{
    if (maps == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        json_decref(maps[i]);
    free(maps);
}

static void policy_clear(tp_policy_t *p)
{
    free_maps(p->fallback_args, p->n_fallback);
    p->fallback_args = NULL;
    free_strv(p->fallback, p->n_fallback);
    p->fallback = NULL;
    p->n_fallback = 0;
    json_decref(p->degraded);
    p->degraded = NULL;
}

/*
 * A tool starts as a deep copy of "defaults": its own fallback list and its
 * own reference to the degraded answer, so overriding or freeing one never
 * touches the other. -1 on ENOMEM, with dst safe to clear.
 */
static int policy_copy(tp_policy_t *dst, const tp_policy_t *src)
{
    *dst = *src;
    dst->fallback = NULL;
    dst->fallback_args = NULL;
    dst->n_fallback = 0;
    dst->degraded = src->degraded ? json_incref(src->degraded) : NULL;
    if (src->n_fallback == 0)
        return 0;
    dst->fallback = calloc(src->n_fallback + 1, sizeof *dst->fallback);
    if (dst->fallback == NULL)
        return -1;
    if (src->fallback_args && (dst->fallback_args = calloc(src->n_fallback, sizeof *dst->fallback_args)) == NULL)
        return -1;
    for (size_t i = 0; i < src->n_fallback; i++) {
        dst->fallback[i] = strdup(src->fallback[i]);
        if (dst->fallback[i] == NULL)
            return -1;
        if (src->fallback_args && src->fallback_args[i])
            dst->fallback_args[i] = json_incref(src->fallback_args[i]);
        dst->n_fallback = i + 1;
    }
    return 0;
}

/* ---- the name index: open addressing, FNV-1a, slots hold index + 1 ---- */

typedef struct {
    size_t mask;
    size_t *slots;
} tp_index_t;

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* A table of at least twice n slots, so probes stay short; NULL on ENOMEM. */
static tp_index_t *index_new(size_t n)
{
    size_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    tp_index_t *ix = malloc(sizeof *ix);
    if (ix == NULL)
        return NULL;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (ix->slots == NULL) {
        free(ix);
        return NULL;
    }
    ix->mask = cap - 1;
    return ix;
}

/* Called once per tool, after tp_registry_find said the name is new. */
static void index_put(tp_registry_t *reg, size_t i)
{
    tp_index_t *ix = reg->index;
    size_t h = (size_t)name_hash(reg->tools[i].name) & ix->mask;
    while (ix->slots[h] != 0)
        h = (h + 1) & ix->mask;
    ix->slots[h] = i + 1;
}

/* The hot path: one hash and, at half load, about one probe. */
const tp_tool_t *tp_registry_find(const tp_registry_t *reg, const char *name)
{
    if (reg == NULL || name == NULL || reg->index == NULL)
        return NULL;
    const tp_index_t *ix = reg->index;
    for (size_t h = (size_t)name_hash(name) & ix->mask; ix->slots[h] != 0; h = (h + 1) & ix->mask) {
        const tp_tool_t *t = &reg->tools[ix->slots[h] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
    }
    return NULL;
}

/* ---- reading values ---- */

/* dir + "/" + rel for a relative rel (leading "./" dropped); absolute rel as is. */
static char *resolve_path(const char *dir, const char *rel)
{
    if (rel[0] == '/')
        return strdup(rel);
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2;
    const char *sep = strcmp(dir, "/") == 0 ? "" : "/";
    size_t n = strlen(dir) + strlen(sep) + strlen(rel) + 1;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s%s%s", dir, sep, rel);
    return p;
}

/*
 * Checks a bound; the message is about the side that was crossed, in the
 * value's own notation ("must be >= 1, got 0.5", "must be > 0, got \"0s\"").
 */
static int check_bounds(loader_t *ld, const key_spec_t *s, double x, const json_t *v)
{
    char got[96];
    bool excl = (s->flags & F_MIN_EXCL) != 0;
    if (excl ? x <= s->min : x < s->min)
        return fail(ld, "must be %s %.15g, got %s", excl ? ">" : ">=", s->min, GOT(v));
    double max = s->max;
    if (max == 0 && s->type == K_UINT && s->size == sizeof(uint32_t))
        max = UINT32_MAX;
    if (max > 0 && x > max)
        return fail(ld, "must be <= %.15g, got %s", max, GOT(v));
    return 0;
}

/* The transient kinds, "Timeout, RateLimited, ...", read from the taxonomy. */
static const char *transient_kinds(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = TP_KIND_OK + 1; k < TP_KIND__COUNT; k++) {
        if (tp_kind_class((tp_kind_t)k) != TP_CLASS_TRANSIENT)
            continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", tp_kind_name((tp_kind_t)k));
        if (w < 0 || (size_t)w >= n - len)
            break;
        len += (size_t)w;
    }
    return buf;
}

/* retry_on: only what may be retried at all, i.e. transient kinds. */
static int parse_kinds(loader_t *ld, json_t *v, uint64_t *mask)
{
    char got[96], list[128];
    if (!json_is_array(v))
        return fail(ld, "expected an array of kind names like [\"Timeout\"], got %s", GOT(v));
    uint64_t bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        mark_t m = where_index(&ld->at, i);
        if (!json_is_string(e))
            return fail(ld, "expected a kind name, got %s", GOT(e));
        tp_kind_t k = tp_kind_from_name(json_string_value(e));
        if (k == TP_KIND_OTHER)
            return fail(ld, "unknown kind %s (expected one of %s)", GOT(e), transient_kinds(list, sizeof list));
        if (tp_kind_class(k) != TP_CLASS_TRANSIENT)
            return fail(ld, "%s is %s and is never retried (expected one of %s)", GOT(e),
                        tp_class_name(tp_kind_class(k)), transient_kinds(list, sizeof list));
        bits |= KIND_BIT(k);
        where_pop(&ld->at, m);
    }
    *mask = bits;
    return 0;
}

/* fallback_on: the classes of failure that move on to the next hop. */
static int parse_classes(loader_t *ld, json_t *v, uint32_t *mask)
{
    char got[96];
    static const char expect[] = "\"transient\", \"permanent\", \"malformed\", \"guard\"";
    if (!json_is_array(v))
        return fail(ld, "expected an array of classes like [\"transient\"], got %s", GOT(v));
    uint32_t bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        mark_t m = where_index(&ld->at, i);
        const char *name = json_string_value(e);
        int c = TP_CLASS_TRANSIENT;
        for (; name != NULL && c <= TP_CLASS_GUARD; c++)
            if (strcmp(name, tp_class_name((tp_class_t)c)) == 0)
                break;
        if (name == NULL || c > TP_CLASS_GUARD)
            return fail(ld, "expected one of %s, got %s", expect, GOT(e));
        bits |= CLASS_BIT(c);
        where_pop(&ld->at, m);
    }
    *mask = bits;
    return 0;
}

/*
 * A hop's args mapping: {KEY: POINTER, ...}, each value a JSON Pointer
 * (RFC 6901: "" or starting with "/") into the call's args.
 */
static int parse_hop_args(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_object(v))
        return fail(ld, "expected an object of {\"key\": \"/pointer\"} into the call's args, got %s", GOT(v));
    const char *k;
    json_t *p;
    json_object_foreach(v, k, p) {
        mark_t m = where_key(&ld->at, k);
        const char *s = json_string_value(p);
        if (s == NULL || (s[0] != '\0' && s[0] != '/'))
            return fail(ld, "expected a JSON Pointer into the call's args, like \"/q\", got %s", GOT(p));
        where_pop(&ld->at, m);
    }
    return 0;
}

/* One hop as an object: {"tool": NAME, "args": {KEY: POINTER}}; *map gets args (a reference) or NULL. */
static int parse_hop(loader_t *ld, json_t *e, const char **name, json_t **map)
{
    char got[96];
    const char *k;
    json_t *v;
    *name = NULL;
    *map = NULL;
    json_object_foreach(e, k, v) {
        mark_t m = where_key(&ld->at, k);
        if (strcmp(k, "tool") == 0) {
            if (!json_is_string(v) || json_string_length(v) == 0)
                return fail(ld, "expected a tool name, got %s", GOT(v));
            *name = json_string_value(v);
        } else if (strcmp(k, "args") == 0) {
            if (parse_hop_args(ld, v) < 0)
                return -1;
            *map = v;
        } else {
            return fail(ld, "unknown key (a hop is {\"tool\": NAME, \"args\": {KEY: \"/pointer\"}})");
        }
        where_pop(&ld->at, m);
    }
    if (*name == NULL)
        return fail(ld, "missing required key \"tool\"");
    return 0;
}

/*
 * fallback: ["a", "b"] or "a"; with maps (F_HOPS), an entry may also be
 * {"tool": "a", "args": {...}}. Whether the names exist is checked at the end.
 */
static int parse_names(loader_t *ld, json_t *v, char ***names, size_t *count, json_t ***maps)
{
    char got[96];
    json_t *one = json_is_string(v) ? v : NULL;
    if (one == NULL && !json_is_array(v))
        return fail(ld, "expected a tool name or an array of tool names, got %s", GOT(v));
    size_t n = one ? 1 : json_array_size(v);
    char **out = calloc(n + 1, sizeof *out);
    if (out == NULL)
        return fail_oom(ld);
    if (maps) {
        free_maps(*maps, *count);
        *maps = NULL;
    }
    free_strv(*names, *count);
    *names = out;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = one ? one : json_array_get(v, i);
        mark_t m = {0, 0};
        if (one == NULL)
            m = where_index(&ld->at, i);
        const char *name = json_string_value(e);
        json_t *map = NULL;
        if (maps && json_is_object(e)) {
            if (parse_hop(ld, e, &name, &map) < 0)
                return -1;
        } else if (!json_is_string(e) || json_string_length(e) == 0) {
            return fail(ld,
                        maps ? "expected a tool name or {\"tool\": NAME, \"args\": {...}}, got %s"
                             : "expected a tool name, got %s",
                        GOT(e));
        }
        if (map) {
            if (*maps == NULL && (*maps = calloc(n, sizeof **maps)) == NULL)
                return fail_oom(ld);
            (*maps)[i] = json_incref(map);
        }
        out[i] = strdup(name);
        if (out[i] == NULL)
            return fail_oom(ld);
        *count = i + 1;
        if (one == NULL)
            where_pop(&ld->at, m);
    }
    return 0;
}

/*
 * An argv: a non-empty array of strings, argv[0] non-empty. With F_PATH an
 * argv[0] holding a '/' is taken relative to the registry's directory; a
 * bare name is left for PATH. Stores a NULL-terminated vector and its length.
 */
static int parse_argv(loader_t *ld, json_t *v, unsigned flags, char ***out, size_t *argc)
{
    char got[96];
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n == 0)
        return fail(ld, "expected an argv array like [\"./tool\", \"--flag\"], got %s", GOT(v));
    char **av = calloc(n + 1, sizeof *av);
    if (av == NULL)
        return fail_oom(ld);
    free_argv(*out);
    *out = av;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        mark_t m = where_index(&ld->at, i);
        if (!json_is_string(e) || (i == 0 && json_string_length(e) == 0))
            return fail(ld, "expected %s, got %s", i == 0 ? "a program" : "a string", GOT(e));
        const char *s = json_string_value(e);
        if (i == 0 && (flags & F_PATH) && strchr(s, '/') != NULL)
            av[i] = resolve_path(ld->dir, s);
        else
            av[i] = strdup(s);
        if (av[i] == NULL)
            return fail_oom(ld);
        where_pop(&ld->at, m);
    }
    if (argc != NULL)
        *argc = n;
    return 0;
}

/*
 * A string, with the row's flags: non-empty, a URL, or a path that resolves
 * against the registry's directory. Replaces (and frees) what was there.
 */
static int parse_string(loader_t *ld, const key_spec_t *s, json_t *v, char **out)
{
    char got[96];
    const char *str = json_string_value(v);
    if (str == NULL || ((s->flags & F_NONEMPTY) && *str == '\0'))
        return fail(ld, "expected a%s string, got %s", (s->flags & F_NONEMPTY) ? " non-empty" : "", GOT(v));
    if ((s->flags & F_URL) && strncmp(str, "http://", 7) != 0 && strncmp(str, "https://", 8) != 0)
        return fail(ld, "expected an http:// or https:// URL, got %s", GOT(v));
    char *copy = (s->flags & F_PATH) ? resolve_path(ld->dir, str) : strdup(str);
    if (copy == NULL)
        return fail_oom(ld);
    free(*out);
    *out = copy;
    return 0;
}

static int parse_object(loader_t *ld, json_t *obj, const key_table_t *tab, void *base);

/*
 * The adapter keys. A second one is an error at the second key; exec's value
 * is the argv itself, the others are small objects with their own tables.
 * Whether this build can run the adapter is decided after the whole tool
 * has been read, so shape errors come first.
 */
static int parse_adapter(loader_t *ld, const key_spec_t *s, json_t *v, tp_tool_t *tool)
{
    if (tool->adapter != 0)
        return fail(ld, "a tool has exactly one adapter, and this one already has \"%s\"",
                    adapters[tool->adapter].name);
    tool->adapter = s->adapter;
    ld->adapter_dir = ld->dir;
    if (s->sub == NULL)
        return parse_argv(ld, v, s->flags, &tool->argv, &tool->argc);
    return parse_object(ld, v, s->sub, tool);
}

/*
 * "tools" is only checked here; parse_tools reads it once "defaults" is
 * known. It may be empty when "mcp_servers" brings tools (check_some_tools).
 */
static int parse_tools_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_array(v))
        return fail(ld, "expected a non-empty array of tools, got %s", GOT(v));
    ld->tools_json = v;
    return 0;
}

/* "run": {TOOL: {settings}}, each entry read with its tool (parse_tool). */
static int parse_run_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_object(v))
        return fail(ld,
                    "expected an object of tool names, each with its settings like "
                    "{\"search_kb\": {\"exec\": [\"./kb\"], \"timeout\": \"8s\"}}, got %s",
                    GOT(v));
    if (ld->in_policy)
        ld->prun = v;
    else
        ld->run = v;
    return 0;
}

/* "mcp_servers": an object of servers, read by import_servers once "defaults" is known. */
static int parse_servers_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_object(v))
        return fail(ld, "expected an object of MCP servers like {\"fs\": {\"command\": [...]}}, got %s", GOT(v));
    ld->servers_json = v;
    return 0;
}

/* env: {"NAME": "value"} -> "NAME=value" entries, NULL-terminated. */
static int parse_env(loader_t *ld, json_t *v, char ***out)
{
    char got[96];
    if (!json_is_object(v))
        return fail(ld, "expected an object of environment variables like {\"HOME\": \"/tmp\"}, got %s", GOT(v));
    char **env = calloc(json_object_size(v) + 1, sizeof *env);
    if (env == NULL)
        return fail_oom(ld);
    free_argv(*out);
    *out = env;
    size_t i = 0;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) {
        mark_t m = where_key(&ld->at, k);
        if (*k == '\0' || strchr(k, '=') != NULL)
            return fail(ld, "expected a variable name without '='");
        if (!json_is_string(e))
            return fail(ld, "expected a string, got %s", GOT(e));
        size_t n = strlen(k) + json_string_length(e) + 2;
        if ((env[i] = malloc(n)) == NULL)
            return fail_oom(ld);
        snprintf(env[i++], n, "%s=%s", k, json_string_value(e));
        where_pop(&ld->at, m);
    }
    return 0;
}

/* One value, by its row's type, into base + row offset. */
/*
 * "schema_refs": {URI: FILE}. Each file (relative to the registry) is read
 * now, so a missing or broken one is an error here, naming its URI; the
 * documents are kept by URI (a trailing "#" dropped) for schema_load.
 */
static int parse_schema_refs(loader_t *ld, json_t *v, json_t **out)
{
    char got[96];
    if (!json_is_object(v))
        return fail(ld, "expected an object of URI: file, got %s", GOT(v));
    json_t *docs = json_object();
    if (docs == NULL)
        return fail_oom(ld);
    json_decref(*out);
    *out = docs;
    const char *uri;
    json_t *file;
    json_object_foreach(v, uri, file) {
        mark_t m = where_key(&ld->at, uri);
        if (!json_is_string(file) || json_string_length(file) == 0)
            return fail(ld, "expected a file name, got %s", GOT(file));
        char *path = resolve_path(ld->dir, json_string_value(file));
        if (path == NULL)
            return fail_oom(ld);
        json_error_t jerr;
        json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (doc == NULL) {
            int rc = fail(ld, "cannot read the schema %s: %s (line %d)", path, jerr.text, jerr.line);
            free(path);
            return rc;
        }
        free(path);
        size_t n = strcspn(uri, "#");
        if (json_object_setn_new(docs, uri, n, doc) < 0)
            return fail_oom(ld);
        where_pop(&ld->at, m);
    }
    return 0;
}

/* The loader a tool's parameters compile with: the registry's schema_refs, by URI. */
static json_t *schema_load(const char *uri, void *arg)
{
    const tp_registry_t *reg = arg;
    json_t *doc = reg->schema_refs ? json_object_get(reg->schema_refs, uri) : NULL;
    return doc ? json_incref(doc) : NULL;
}

/*
 * A tool's "parameters", compiled with its dialect and formats: its own,
 * else (the dialect) 2020-12 for an MCP server's tool, else the form's
 * (dflt: 2020-12 for a tool declared from an MCP list), else the
 * registry's. The loader stands on the tool; at is the path from there to
 * the schema. An error points at the schema keyword itself,
 * "tools[0] (a).parameters/properties/q/type".
 */
static int compile_parameters(loader_t *ld, tp_tool_t *tool, int dflt, const char *const *at)
{
    if (tool->parameters == NULL)
        return 0;
    tp_registry_t *reg = ld->reg;
    /* MCP reads an inputSchema without "$schema" as 2020-12: so does an MCP server's tool */
    int dialect = tool->schema_dialect              ? tool->schema_dialect
                  : tool->adapter == TP_ADAPTER_MCP ? TP_JSONSCHEMA_2020_12
                  : dflt                            ? dflt
                                                    : reg->schema_dialect;
    int formats = tool->formats ? tool->formats : reg->formats;
    tp_jsonschema_opts_t opts = {
        .dialect = dialect ? (tp_jsonschema_dialect_t)dialect : TP_JSONSCHEMA_DRAFT7,
        .assert_formats = formats == TP_FORMATS_ASSERT,
        .load = schema_load,
        .load_arg = reg,
    };
    char serr[768];
    mark_t mp = {ld->at.ptr_len, ld->at.key_len};
    for (; *at != NULL; at++)
        where_key(&ld->at, *at);
    tp_jsonschema_t *compiled = tp_jsonschema_compile_opts(tool->parameters, &opts, serr, sizeof serr);
    if (compiled == NULL) {
        /* serr is "POINTER: what": point the line at the schema keyword itself. */
        const char *colon = strstr(serr, ": ");
        if (serr[0] == '/' && colon)
            where_add(ld->at.ptr, &ld->at.ptr_len, serr, (size_t)(colon - serr));
        return fail(ld, "invalid JSON Schema at %s", serr);
    }
    tp_jsonschema_free(tool->schema);
    tool->schema = compiled;
    where_pop(&ld->at, mp);
    return 0;
}

static int parse_key(loader_t *ld, const key_spec_t *s, json_t *v, void *base)
{
    char got[96];
    void *field = (char *)base + s->off;
    switch (s->type) {
    case K_SKIP:
        return 0;
    case K_DURATION: {
        uint64_t us;
        if (!json_is_string(v) || tp_duration_parse(json_string_value(v), &us) < 0)
            return fail(ld, "expected a duration like \"8s\", got %s", GOT(v));
        if (check_bounds(ld, s, (double)us, v) < 0)
            return -1;
        store_uint(field, s->size, us);
        return 0;
    }
    case K_BYTES: {
        uint64_t bytes;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            bytes = (uint64_t)json_integer_value(v);
        else if (!json_is_string(v) || tp_size_parse(json_string_value(v), &bytes) < 0)
            return fail(ld,
                        "expected a size like \"512M\" (K, M, G, T: powers of 1024) or a number of "
                        "bytes, got %s",
                        GOT(v));
        if (check_bounds(ld, s, (double)bytes, v) < 0)
            return -1;
        store_uint(field, s->size, bytes);
        return 0;
    }
    case K_UINT:
        if (!json_is_integer(v))
            return fail(ld, "expected an integer, got %s", GOT(v));
        if (check_bounds(ld, s, (double)json_integer_value(v), v) < 0)
            return -1;
        store_uint(field, s->size, (uint64_t)json_integer_value(v));
        return 0;
    case K_NUMBER:
        if (!json_is_number(v))
            return fail(ld, "expected a number, got %s", GOT(v));
        if (check_bounds(ld, s, json_number_value(v), v) < 0)
            return -1;
        *(double *)field = json_number_value(v);
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v))
            return fail(ld, "expected true or false, got %s", GOT(v));
        *(bool *)field = json_is_true(v);
        return 0;
    case K_JITTER:
        for (size_t j = 0; j < sizeof jitter_names / sizeof jitter_names[0]; j++) {
            if (json_is_string(v) && strcmp(json_string_value(v), jitter_names[j]) == 0) {
                *(tp_jitter_t *)field = (tp_jitter_t)j;
                return 0;
            }
        }
        return fail(ld, "expected one of \"full\", \"equal\", \"none\", got %s", GOT(v));
    case K_SCOPE:
        if (json_is_string(v) && strcmp(json_string_value(v), "job") == 0)
            store_uint(field, s->size, TP_SCOPE_JOB);
        else if (json_is_string(v) && strcmp(json_string_value(v), "global") == 0)
            store_uint(field, s->size, TP_SCOPE_GLOBAL);
        else
            return fail(ld, "expected \"job\" (a job's own repeats) or \"global\" (every job on the store), got %s",
                        GOT(v));
        return 0;
    case K_KINDS:
        return parse_kinds(ld, v, (uint64_t *)field);
    case K_CLASSES:
        return parse_classes(ld, v, (uint32_t *)field);
    case K_NAMES:
        return parse_names(ld, v, (char ***)field, (size_t *)((char *)base + s->off_n),
                           (s->flags & F_HOPS) ? &((tp_policy_t *)base)->fallback_args : NULL);
    case K_JSON: {
        json_t **slot = field;
        json_decref(*slot);
        *slot = json_is_null(v) ? NULL : json_incref(v);
        return 0;
    }
    case K_SCHEMA: {
        /* compiled by compile_parameters once the tool's keys are all read */
        json_t **slot = field;
        if (!json_is_object(v) && !json_is_boolean(v))
            return fail(ld, "expected a JSON Schema (an object or a boolean), got %s", GOT(v));
        json_decref(*slot);
        *slot = json_incref(v);
        return 0;
    }
    case K_DIALECT: {
        tp_jsonschema_dialect_t d;
        if (!json_is_string(v) || tp_jsonschema_dialect_parse(json_string_value(v), &d) < 0)
            return fail(ld, "expected \"draft-07\" or \"2020-12\", got %s", GOT(v));
        *(int *)field = (int)d;
        return 0;
    }
    case K_FORMATS:
        if (json_is_string(v) && strcmp(json_string_value(v), "annotate") == 0)
            *(int *)field = TP_FORMATS_ANNOTATE;
        else if (json_is_string(v) && strcmp(json_string_value(v), "assert") == 0)
            *(int *)field = TP_FORMATS_ASSERT;
        else
            return fail(ld, "expected \"annotate\" or \"assert\", got %s", GOT(v));
        return 0;
    case K_SCHEMA_REFS:
        return parse_schema_refs(ld, v, (json_t **)field);
    case K_STRING:
        return parse_string(ld, s, v, (char **)field);
    case K_ARGV:
        return parse_argv(ld, v, s->flags, (char ***)field, NULL);
    case K_OBJECT:
        if (s->flags & F_OFF) {
            /* false turns it off; an object (even {}) turns it back on over "defaults". */
            if (json_is_false(v)) {
                *(bool *)((char *)base + s->off_n) = true;
                return 0;
            }
            if (!json_is_object(v))
                return fail(ld, "expected an object, or false to turn it off, got %s", GOT(v));
            *(bool *)((char *)base + s->off_n) = false;
        }
        return parse_object(ld, v, s->sub, field);
    case K_ADAPTER:
        return parse_adapter(ld, s, v, base);
    case K_TOOLS:
        return parse_tools_value(ld, v);
    case K_SERVERS:
        return parse_servers_value(ld, v);
    case K_RUN:
        return parse_run_value(ld, v);
    case K_ENV:
        return parse_env(ld, v, (char ***)field);
    }
    return fail(ld, "internal error: key type %d", (int)s->type);
}

/* The row for key in tab or its chain; *base moves to that table's base. */
static const key_spec_t *table_find(const key_table_t *tab, const char *key, void **base)
{
    for (; tab != NULL; tab = tab->next) {
        for (size_t i = 0; i < tab->n; i++)
            if (strcmp(tab->keys[i].name, key) == 0)
                return &tab->keys[i];
        *base = (char *)*base + tab->next_off;
    }
    return NULL;
}


/*
 * An unknown key: suggests the closest known one when it is a typo away,
 * lists them all when there are few, and otherwise just says so.
 */
static int fail_unknown(loader_t *ld, const key_table_t *tab, const char *key)
{
    /* keys of the other formats, where they do not belong */
    static const struct {
        const char *key, *hint;
        /* clang-format off */
    } hints[] = {
        {"inputSchema", "toolpool calls it \"parameters\"; an MCP tool list's entry has no adapter key"},
        {"input_schema", "Anthropic's name for it: toolpool calls it \"parameters\""},
        {"retries", "toolpool has \"attempts\", and attempts counts the first try: \"retries\": 2 is \"attempts\": 3"},
        {"max_retries", "toolpool has \"attempts\", and attempts counts the first try: \"max_retries\": 2 is "
                        "\"attempts\": 3"},
        {"function", "the OpenAI wrapper goes with \"type\": \"function\" and nothing else: "
                     "{\"type\": \"function\", \"function\": {...}}, its settings in \"run\"; in toolpool's "
                     "form the name, description and parameters sit in the tool itself"},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
        if (strcmp(key, hints[i].key) == 0)
            return fail(ld, "unknown key (%s)", hints[i].hint);
    if (tab == &policy_file_table && (strcmp(key, "tools") == 0 || strcmp(key, "mcp_servers") == 0))
        return fail(ld, "unknown key (a policy file holds toolpool's settings only: the tools are declared in the "
                        "registry file)");
    if (tab == &openai_table || tab == &openai_fn_table || tab == &openai_flat_table || tab == &mcp_decl_table) {
        void *scratch = NULL;
        if (table_find(&run_table, key, &scratch) != NULL)
            return fail(ld,
                        "unknown key (a toolpool setting: it goes in \"run\": {\"TOOL\": {\"%s\": ...}}, "
                        "beside the tools or in the policy file, so the declaration stays as written)",
                        key);
    }
    const char *best = NULL;
    size_t best_d = strlen(key) >= 5 ? 3 : 2, total = 0; /* a typo or two away */
    for (const key_table_t *t = tab; t != NULL; t = t->next) {
        for (size_t i = 0; i < t->n; i++) {
            if (t == &top_table && t->keys[i].type == K_SKIP)
                continue; /* let through from a tools/list result, never suggested */
            const char *name = t->keys[i].name;
            size_t d = strlen(key) > 63 ? SIZE_MAX : tp_edit_distance(key, strlen(key), name, strlen(name));
            if (d < best_d) {
                best_d = d;
                best = t->keys[i].name;
            }
            total++;
        }
    }
    if (best != NULL)
        return fail(ld, "unknown key (did you mean \"%s\"?)", best);
    if (total > 8)
        return fail(ld, "unknown key");
    char list[256];
    size_t len = 0;
    list[0] = '\0';
    for (const key_table_t *t = tab; t != NULL; t = t->next) {
        for (size_t i = 0; i < t->n; i++) {
            if (t == &top_table && t->keys[i].type == K_SKIP)
                continue;
            int w = snprintf(list + len, sizeof list - len, "%s\"%s\"", len ? ", " : "", t->keys[i].name);
            if (w > 0 && (size_t)w < sizeof list - len)
                len += (size_t)w;
        }
    }
    return fail(ld, "unknown key (expected one of %s)", list);
}

/*
 * Reads an object against a table, in the file's order (jansson keeps
 * insertion order), so the first problem reported is the first in the
 * file. Then checks the required keys are there.
 */
static int parse_object(loader_t *ld, json_t *obj, const key_table_t *tab, void *base)
{
    char got[96];
    if (!json_is_object(obj))
        return fail(ld, "expected an object, got %s", GOT(obj));
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(obj, key, v) {
        void *at = base;
        const key_spec_t *s = table_find(tab, key, &at);
        mark_t m = where_key(&ld->at, key);
        if (s == NULL ? fail_unknown(ld, tab, key) < 0 : parse_key(ld, s, v, at) < 0)
            rc = -1; /* reported; the next key may have an error of its own */
        where_pop(&ld->at, m);
    }
    for (const key_table_t *t = tab; t != NULL; t = t->next)
        for (size_t i = 0; i < t->n; i++)
            if ((t->keys[i].flags & F_REQUIRED) && json_object_get(obj, t->keys[i].name) == NULL)
                rc = fail(ld, "missing required key \"%s\"", t->keys[i].name);
    return rc;
}

/*
 * "max_output" and "limits.output" are one cap under two names: an object
 * may set one of them, not both (which one won would be a guess). The
 * loader stands on obj.
 */
static int check_output_once(loader_t *ld, json_t *obj)
{
    if (json_object_get(obj, "max_output") == NULL || json_object_get(json_object_get(obj, "limits"), "output") == NULL)
        return 0;
    where_key(&ld->at, "limits");
    where_key(&ld->at, "output");
    return fail(ld, "the same cap as \"max_output\", which is set here too: set one of them");
}

/* check_output_once for "defaults", if there is one. */
static int check_defaults(loader_t *ld)
{
    json_t *dflt = json_object_get(ld->root, "defaults");
    if (dflt == NULL)
        return 0;
    mark_t m = where_key(&ld->at, "defaults");
    if (check_output_once(ld, dflt) < 0)
        return -1;
    where_pop(&ld->at, m);
    return 0;
}

/* ---- tools ---- */

/* A name as agents and MCP hosts accept it: [A-Za-z0-9_.-]+. */
static bool name_ok(const char *s)
{
    if (*s == '\0' || strlen(s) > TP_TOOL_NAME_MAX)
        return false;
    for (; *s != '\0'; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

/* "exec and plugin", from the adapter table. */
static const char *available_adapters(char *buf, size_t n)
{
    size_t count = 0, seen = 0, len = 0;
    for (size_t a = 1; a < sizeof adapters / sizeof adapters[0]; a++)
        count += adapters[a].available;
    buf[0] = '\0';
    for (size_t a = 1; a < sizeof adapters / sizeof adapters[0]; a++) {
        if (!adapters[a].available)
            continue;
        const char *sep = seen == 0 ? "" : seen + 1 == count ? " and " : ", ";
        int w = snprintf(buf + len, n - len, "%s%s", sep, adapters[a].name);
        if (w > 0 && (size_t)w < n - len)
            len += (size_t)w;
        seen++;
    }
    return buf;
}

/*
 * How a "tools" entry is declared, from its keys alone: "type" makes it an
 * OpenAI function tool (nested when it has "function", else the flat form
 * of the Responses API); "inputSchema" with no adapter key an MCP
 * tools/list entry; anything else toolpool's own form. An entry with an
 * adapter and "inputSchema" is toolpool's form with a misplaced key.
 */
static form_t tool_form(json_t *t)
{
    static const char *const adapter_keys[] = {"exec", "plugin", "mcp", "http"};
    if (json_object_get(t, "type") != NULL)
        return json_object_get(t, "function") != NULL ? FORM_OPENAI : FORM_OPENAI_FLAT;
    if (json_object_get(t, "inputSchema") == NULL)
        return FORM_TOOLPOOL;
    for (size_t i = 0; i < sizeof adapter_keys / sizeof adapter_keys[0]; i++)
        if (json_object_get(t, adapter_keys[i]) != NULL)
            return FORM_TOOLPOOL;
    return FORM_MCP;
}

/*
 * An MCP tool's "annotations" where they mean something to a run:
 * readOnlyHint or idempotentHint true makes it idempotent (retried after a
 * timeout), else destructiveHint true makes it not idempotent. A "run"
 * entry's own "idempotent" is read later and wins. The other annotations
 * (title, openWorldHint, ones MCP adds later) are let through.
 */
static int apply_annotations(loader_t *ld, json_t *t, tp_tool_t *tool)
{
    char got[96];
    json_t *a = json_object_get(t, "annotations");
    if (a == NULL)
        return 0;
    mark_t m = where_key(&ld->at, "annotations");
    if (!json_is_object(a))
        return fail(ld, "expected an object of MCP tool annotations, got %s", GOT(a));
    static const char *const hints[] = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"};
    int rc = 0;
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
        json_t *v = json_object_get(a, hints[i]);
        if (v == NULL || json_is_boolean(v))
            continue;
        mark_t mh = where_key(&ld->at, hints[i]);
        rc = fail(ld, "expected true or false, got %s", GOT(v));
        where_pop(&ld->at, mh);
    }
    if (json_is_true(json_object_get(a, "readOnlyHint")) || json_is_true(json_object_get(a, "idempotentHint")))
        tool->policy.idempotent = true;
    else if (json_is_true(json_object_get(a, "destructiveHint")))
        tool->policy.idempotent = false;
    where_pop(&ld->at, m);
    return rc;
}

/*
 * The tool's "run" entries, the registry file's and then the policy
 * file's, each read over what the tool has. The loader's place is kept
 * and given back.
 */
static int apply_run(loader_t *ld, tp_tool_t *tool)
{
    int rc = 0;
    for (int f = 0; f < 2; f++) {
        json_t *entry = json_object_get(f == 0 ? ld->run : ld->prun, tool->name);
        if (entry == NULL)
            continue;
        where_t saved = ld->at;
        where_pop(&ld->at, (mark_t){0, 0});
        ld->in_policy = f == 1;
        ld->dir = f == 1 ? ld->pdir : ld->reg->dir;
        where_key(&ld->at, "run");
        where_key(&ld->at, tool->name);
        if (parse_object(ld, entry, &run_table, tool) < 0 || check_output_once(ld, entry) < 0)
            rc = -1;
        ld->in_policy = false;
        ld->dir = ld->reg->dir;
        ld->at = saved;
    }
    return rc;
}

/*
 * Moves the loader onto key where the tool's value of it was written: its
 * policy file "run" entry, else its registry "run" entry, else the tool
 * itself (where the loader stands). fail() then names the right file and line.
 */
static void where_setting(loader_t *ld, const tp_tool_t *tool, const char *key)
{
    for (int f = 1; f >= 0; f--) {
        if (json_object_get(json_object_get(f ? ld->prun : ld->run, tool->name), key) == NULL)
            continue;
        where_pop(&ld->at, (mark_t){0, 0});
        ld->in_policy = f == 1;
        where_key(&ld->at, "run");
        where_key(&ld->at, tool->name);
        break;
    }
    where_key(&ld->at, key);
}

/* fail() at where_setting, the loader back on the registry file. */
#define FAIL_AT(ld, tool, key, ...) (where_setting((ld), (tool), (key)), fail_then_reset((ld), fail((ld), __VA_ARGS__)))

static int fail_then_reset(loader_t *ld, int rc)
{
    ld->in_policy = false;
    return rc;
}

/*
 * One tool: starts from a copy of the defaults, reads the name first (so
 * every later message can say which tool), registers it in the index
 * (a second tool of the same name is an error here), then the rest of its
 * keys by its form (tool_form), MCP annotations, its "run" entries, its
 * parameters, then the adapter rules.
 */
static int parse_tool(loader_t *ld, json_t *t, size_t i, tp_tool_t *tool, bool imported)
{
    char got[96];
    tp_registry_t *reg = ld->reg;
    mark_t m = {ld->at.ptr_len, ld->at.key_len};
    if (!imported)
        where_index(&ld->at, i); /* an imported tool's place is its server's, set by the caller */
    tool->index = i;
    tool->line = !imported && ld->tool_lines ? ld->tool_lines[i] : tp_json_line(ld->text, ld->len, ld->at.ptr);
    ld->adapter_dir = reg->dir;
    if (!json_is_object(t))
        return fail(ld, "expected a tool object, got %s", GOT(t));
    if (policy_copy(&tool->policy, &reg->defaults) < 0)
        return fail_oom(ld);

    form_t form = imported ? FORM_TOOLPOOL : tool_form(t);
    mark_t mt = {ld->at.ptr_len, ld->at.key_len};
    json_t *decl = t; /* the object holding the name */
    if (form == FORM_OPENAI || form == FORM_OPENAI_FLAT) {
        json_t *type = json_object_get(t, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
            where_key(&ld->at, "type");
            return fail(ld, "expected \"function\" (only function tools run in toolpool), got %s", GOT(type));
        }
    }
    if (form == FORM_OPENAI) {
        decl = json_object_get(t, "function");
        where_key(&ld->at, "function");
        if (!json_is_object(decl))
            return fail(ld, "expected an object like {\"name\": ..., \"parameters\": {...}}, got %s", GOT(decl));
    }
    json_t *name = json_object_get(decl, "name");
    if (name == NULL)
        return fail(ld, "missing required key \"name\"");
    where_key(&ld->at, "name");
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return fail(ld, "expected a name of letters, digits, '_', '.' or '-', at most %d bytes, got %s",
                    TP_TOOL_NAME_MAX, GOT(name));
    const tp_tool_t *prev = tp_registry_find(reg, json_string_value(name));
    if (prev != NULL && prev->mcp_server == NULL)
        return fail(ld, "duplicate tool name %s (already declared as tools[%zu] on line %d)", GOT(name), prev->index,
                    prev->line);
    if (prev != NULL)
        return fail(ld, "duplicate tool name %s (already imported from mcp_servers.%s on line %d)", GOT(name),
                    prev->mcp_server, prev->line);
    tool->name = strdup(json_string_value(name));
    if (tool->name == NULL)
        return fail_oom(ld);
    index_put(reg, i);
    where_pop(&ld->at, mt);
    char note[300];
    snprintf(note, sizeof note, " (%s)", tool->name);
    where_note(&ld->at, note);

    const key_table_t *tab = form == FORM_OPENAI        ? &openai_table
                             : form == FORM_OPENAI_FLAT ? &openai_flat_table
                             : form == FORM_MCP         ? &mcp_decl_table
                                                        : &tool_table;
    int rc = 0;
    if (parse_object(ld, t, tab, tool) < 0 || (form == FORM_TOOLPOOL && check_output_once(ld, t) < 0))
        rc = -1;
    if (form == FORM_MCP && apply_annotations(ld, t, tool) < 0)
        rc = -1;
    if (apply_run(ld, tool) < 0)
        rc = -1;
    /* MCP reads an inputSchema without "$schema" as 2020-12 */
    static const char *const at_openai[] = {"function", "parameters", NULL}, *const at_mcp[] = {"inputSchema", NULL},
                             *const at_own[] = {"parameters", NULL};
    if (rc == 0 && compile_parameters(ld, tool, form == FORM_MCP ? TP_JSONSCHEMA_2020_12 : 0,
                                      form == FORM_OPENAI ? at_openai
                                      : form == FORM_MCP  ? at_mcp
                                                          : at_own) < 0)
        rc = -1;
    if (rc < 0)
        return -1;
    if (tool->adapter == 0 && form != FORM_TOOLPOOL)
        return fail(ld,
                    "no adapter: the tool is declared, and its settings are not: add \"run\": {\"%s\": "
                    "{\"exec\": [...]}} (or \"plugin\", \"mcp\", \"http\") beside the tools or in the policy "
                    "file (--policy)",
                    tool->name);
    if (tool->adapter == 0)
        return fail(ld, "no adapter (expected exactly one of \"exec\", \"plugin\", \"mcp\", "
                        "\"http\")");
    if (!adapters[tool->adapter].available) {
        char list[64];
        return FAIL_AT(ld, tool, adapters[tool->adapter].name, "the %s adapter is not available in this build (%s are)",
                       adapters[tool->adapter].name, available_adapters(list, sizeof list));
    }
    if (tool->cwd && tool->adapter != TP_ADAPTER_EXEC)
        return FAIL_AT(ld, tool, "cwd", "only an exec tool has a working directory (this one is %s)",
                       adapters[tool->adapter].name);
    if (tool->cwd) {
        struct stat st;
        int se = stat(tool->cwd, &st) != 0 ? errno : 0;
        if (se || !S_ISDIR(st.st_mode))
            return FAIL_AT(ld, tool, "cwd", "%s is not a directory%s%s", tool->cwd, se ? ": " : "",
                           se ? strerror(se) : "");
    } else if (tool->adapter == TP_ADAPTER_EXEC && (tool->cwd = strdup(ld->adapter_dir)) == NULL) {
        return fail_oom(ld);
    }
    if (tool->description == NULL && (tool->description = strdup("")) == NULL)
        return fail_oom(ld);
    where_pop(&ld->at, m);
    return 0;
}

/*
 * Layers a server's policy blocks on an imported tool: the server's
 * "defaults", then the tool's own entry in the server's "tools", each key
 * by key over what it has (the registry's defaults). Both were checked
 * in place by check_server_policy, so only a second look at
 * max_output can fail here.
 */
static int server_policy(loader_t *ld, tp_tool_t *tool, const char *server, json_t *spec, const char *mcp_name)
{
    json_t *blocks[2] = {json_object_get(spec, "defaults"), json_object_get(json_object_get(spec, "tools"), mcp_name)};
    for (int b = 0; b < 2; b++) {
        if (blocks[b] == NULL)
            continue;
        where_pop(&ld->at, (mark_t){0, 0});
        where_key(&ld->at, "mcp_servers");
        where_key(&ld->at, server);
        where_key(&ld->at, b == 0 ? "defaults" : "tools");
        if (b == 1)
            where_key(&ld->at, mcp_name);
        if (parse_object(ld, blocks[b], &policy_table, &tool->policy) < 0 || check_output_once(ld, blocks[b]) < 0)
            return -1;
    }
    where_pop(&ld->at, (mark_t){0, 0});
    return 0;
}

/*
 * Sizes the tool array and the name index from the declared tools and the
 * imported ones, then reads each in order: the declared first, then each
 * server's, in the order they were listed.
 */
static int parse_tools(loader_t *ld)
{
    tp_registry_t *reg = ld->reg;
    size_t nd = json_array_size(ld->tools_json), n = nd + json_array_size(ld->imported);
    reg->tools = calloc(n ? n : 1, sizeof *reg->tools);
    reg->index = index_new(n);
    if (reg->tools == NULL || reg->index == NULL)
        return fail_oom(ld);
    reg->n_tools = n;
    if (nd > 0 && (ld->tool_lines = calloc(nd, sizeof *ld->tool_lines)) != NULL &&
        tp_json_element_lines(ld->text, ld->len, ld->tools_at_root ? "" : "/tools", ld->tool_lines, nd) < nd) {
        free(ld->tool_lines); /* not the array jansson read: ask for each line */
        ld->tool_lines = NULL;
    }
    int rc = 0;
    mark_t m = {0, 0};
    if (!ld->tools_at_root)
        m = where_key(&ld->at, "tools");
    for (size_t i = 0; i < nd; i++) {
        mark_t mi = {ld->at.ptr_len, ld->at.key_len};
        if (parse_tool(ld, json_array_get(ld->tools_json, i), i, &reg->tools[i], false) < 0)
            rc = -1; /* reported; on to the next tool */
        where_pop(&ld->at, mi);
    }
    where_pop(&ld->at, m);
    for (size_t i = nd; i < n; i++) {
        json_t *t = json_array_get(ld->imported, i - nd);
        const char *server = NULL;
        json_t *spec = NULL;
        size_t k = 0, want = ld->imported_from[i - nd];
        const char *key;
        json_t *v;
        json_object_foreach(ld->servers_json, key, v) {
            if (k++ == want) {
                server = key;
                spec = v;
                break;
            }
        }
        where_pop(&ld->at, (mark_t){0, 0});
        where_key(&ld->at, "mcp_servers");
        where_key(&ld->at, server);
        reg->tools[i].mcp_server = strdup(server);
        if (reg->tools[i].mcp_server == NULL)
            return fail_oom(ld);
        if (parse_tool(ld, t, i, &reg->tools[i], true) < 0) {
            rc = -1;
            continue;
        }
        const char *mcp_name = json_string_value(json_object_get(json_object_get(t, "mcp"), "tool"));
        if (server_policy(ld, &reg->tools[i], server, spec, mcp_name) < 0)
            rc = -1;
    }
    where_pop(&ld->at, (mark_t){0, 0});
    return rc;
}

/*
 * Every "run" entry names a declared tool: one that names none is a typo
 * or a tool left out, and its settings would silently apply to nothing.
 */
static int check_run_names(loader_t *ld)
{
    int rc = 0;
    for (int f = 0; f < 2; f++) {
        json_t *block = f == 0 ? ld->run : ld->prun;
        const char *k;
        json_t *v;
        json_object_foreach(block, k, v) {
            if (tp_registry_find(ld->reg, k) != NULL)
                continue;
            where_pop(&ld->at, (mark_t){0, 0});
            ld->in_policy = f == 1;
            where_key(&ld->at, "run");
            where_key(&ld->at, k);
            rc = fail(ld,
                      "no tool \"%s\" is declared (a \"run\" entry holds the settings of a tool declared in "
                      "%s)",
                      k, ld->tools_at_root ? "the registry's list" : "\"tools\"");
            ld->in_policy = false;
        }
    }
    where_pop(&ld->at, (mark_t){0, 0});
    return rc;
}

/* ---- mcp_servers: importing a server's tools ---- */

/* One "mcp_servers" entry, as read. */
typedef struct {
    char **command;
    char **env;
    char *cwd;
    uint64_t start_timeout_us;
    json_t *defaults;
    json_t *tools;
} server_spec_t;

#define SRV(m) FIELD(server_spec_t, m)
static const key_spec_t server_keys[] = {
    {KEY("command", K_ARGV), SRV(command), .flags = F_REQUIRED | F_PATH},
    {KEY("env", K_ENV), SRV(env)},
    {KEY("cwd", K_STRING), SRV(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("start_timeout", K_DURATION), SRV(start_timeout_us), .flags = F_MIN_EXCL},
    {KEY("defaults", K_JSON), SRV(defaults)},
    {KEY("tools", K_JSON), SRV(tools)},
};
static const key_table_t server_table = TABLE(server_keys);

/* How long a server has to start and list its tools, unless its start_timeout says otherwise. */
#define IMPORT_TIMEOUT_US (30 * 1000000ull)

static void server_spec_clear(server_spec_t *sp)
{
    free_argv(sp->command);
    free_argv(sp->env);
    free(sp->cwd);
    json_decref(sp->defaults);
    json_decref(sp->tools);
    memset(sp, 0, sizeof *sp);
}

/*
 * A server's "defaults" and each entry of its "tools" hold policy keys
 * only: checked here, where they are written, into a scratch policy.
 */
static int check_server_policy(loader_t *ld, server_spec_t *sp)
{
    char got[96];
    tp_policy_t scratch;
    tp_policy_init(&scratch);
    int rc = 0;
    if (sp->defaults != NULL) {
        mark_t m = where_key(&ld->at, "defaults");
        rc = parse_object(ld, sp->defaults, &policy_table, &scratch);
        if (rc == 0)
            rc = check_output_once(ld, sp->defaults);
        if (rc == 0)
            where_pop(&ld->at, m);
    }
    if (rc == 0 && sp->tools != NULL) {
        mark_t m = where_key(&ld->at, "tools");
        if (!json_is_object(sp->tools)) {
            rc = fail(ld,
                      "expected an object of the server's tool names, each with policy keys like "
                      "{\"read_file\": {\"timeout\": \"5s\"}}, got %s",
                      GOT(sp->tools));
        } else {
            const char *k;
            json_t *v;
            json_object_foreach(sp->tools, k, v) {
                mark_t mk = where_key(&ld->at, k);
                if ((rc = parse_object(ld, v, &policy_table, &scratch)) < 0 || (rc = check_output_once(ld, v)) < 0)
                    break;
                where_pop(&ld->at, mk);
            }
        }
        if (rc == 0)
            where_pop(&ld->at, m);
    }
    policy_clear(&scratch);
    return rc;
}

/* The command as one line for messages. */
static const char *command_text(char **argv, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; argv[i] != NULL && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? " " : "", argv[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

/* A tool object as the registry would declare it, for one tool the server listed. */
static json_t *imported_tool(const char *server, const server_spec_t *sp, json_t *listed, char *full, size_t n)
{
    const char *name = json_string_value(json_object_get(listed, "name"));
    snprintf(full, n, "%s.%s", server, name);
    json_t *cmd = json_array(), *mcp = json_object(), *t = json_object();
    for (char **a = sp->command; *a; a++)
        json_array_append_new(cmd, json_string(*a));
    json_object_set_new(mcp, "command", cmd);
    json_object_set_new(mcp, "tool", json_string(name));
    if (sp->env != NULL) {
        json_t *env = json_object();
        for (char **e = sp->env; *e; e++) {
            const char *eq = strchr(*e, '=');
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - *e), *e);
            json_object_set_new(env, key, json_string(eq + 1));
        }
        json_object_set_new(mcp, "env", env);
    }
    if (sp->cwd != NULL)
        json_object_set_new(mcp, "cwd", json_string(sp->cwd));
    json_object_set_new(t, "name", json_string(full));
    json_t *desc = json_object_get(listed, "description");
    if (json_is_string(desc))
        json_object_set(t, "description", desc);
    json_t *schema = json_object_get(listed, "inputSchema");
    if (json_is_object(schema))
        json_object_set(t, "parameters", schema);
    json_object_set_new(t, "mcp", mcp);
    return t;
}

/*
 * Starts one server (a process group of its own), runs the handshake,
 * lists its tools (following nextCursor), and stops it. Each tool listed
 * is appended to ld->imported. An error names the server, says what went
 * wrong and quotes the end of the server's stderr.
 */
static int import_server(loader_t *ld, const char *server, size_t pos, server_spec_t *sp)
{
    char err[512], version[32], cmd[256], how[96], name[TP_TOOL_NAME_MAX + 130];
    tp_mcpio_t c = {0};
    uint64_t timeout = sp->start_timeout_us ? sp->start_timeout_us : IMPORT_TIMEOUT_US;
    uint64_t deadline = tp_now_us() + timeout;
    command_text(sp->command, cmd, sizeof cmd);
    if (tp_mcpio_spawn(&c, sp->command, sp->env, sp->cwd, true, err, sizeof err) < 0) {
        tp_mcpio_free(&c);
        return fail(ld, "cannot import the tools of MCP server \"%s\": %s", server, err);
    }
    int rc = tp_mcpio_initialize(&c, deadline, NULL, version, sizeof version, err, sizeof err);
    json_t *cursor = NULL;
    size_t listed = 0;
    int list_rc = 0; /* TP_EREFUSED: a tool name toolpool cannot take; TP_ENOMEM */
    while (rc == 0) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *answer = NULL;
        int64_t id;
        rc = tp_mcpio_request(&c, "tools/list", params, deadline, NULL, 64u << 20, &id, &answer);
        if (rc != 0)
            break;
        json_t *e = json_object_get(answer, "error"), *result = json_object_get(answer, "result");
        json_t *tools = json_object_get(result, "tools");
        if (e != NULL || !json_is_array(tools)) {
            snprintf(err, sizeof err, "tools/list failed: %s",
                     e ? (json_string_value(json_object_get(e, "message")) ?: "an error without a message")
                       : "its answer has no tools array");
            json_decref(answer);
            rc = TP_EREFUSED;
            break;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *tn = json_string_value(json_object_get(t, "name"));
            char full[sizeof name];
            snprintf(full, sizeof full, "%s.%s", server, tn ? tn : "");
            if (tn == NULL || !name_ok(full)) {
                snprintf(err, sizeof err,
                         "it lists a tool named %.100s%s%s, which is no toolpool tool name "
                         "(letters, digits, '_', '.', '-', at most %d bytes with the server's prefix)",
                         tn ? "\"" : "", tn ? tn : "(none)", tn ? "\"" : "", TP_TOOL_NAME_MAX);
                list_rc = TP_EREFUSED;
                break;
            }
            json_t *obj = imported_tool(server, sp, t, name, sizeof name);
            size_t *from = realloc(ld->imported_from, (json_array_size(ld->imported) + 1) * sizeof *from);
            if (from != NULL)
                ld->imported_from = from;
            if (obj == NULL || from == NULL) {
                json_decref(obj);
                list_rc = TP_ENOMEM; /* said below */
                break;
            }
            from[json_array_size(ld->imported)] = pos;
            json_array_append_new(ld->imported, obj);
            listed++;
        }
        json_t *next = json_object_get(result, "nextCursor");
        json_decref(cursor);
        cursor = json_is_string(next) && list_rc == 0 ? json_incref(next) : NULL;
        json_decref(answer);
        if (list_rc != 0) {
            rc = list_rc;
            break;
        }
        if (cursor == NULL)
            break;
    }
    json_decref(cursor);
    if (rc == TP_ECLOSED)
        snprintf(err, sizeof err, "it %s before it had listed its tools", tp_mcpio_ended(&c, 200000, how, sizeof how));
    else if (rc == TP_ETIMEDOUT)
        snprintf(err, sizeof err, "it did not answer initialize and tools/list within %.3gs (start_timeout)",
                 (double)timeout / 1e6);
    else if (rc == TP_E2BIG)
        snprintf(err, sizeof err, "it wrote a line of more than 64 MiB");
    else if (rc == TP_ENOMEM)
        snprintf(err, sizeof err, "out of memory");
    tp_mcpio_close(&c, 200000);
    char tail[TP_MCP_TAIL];
    snprintf(tail, sizeof tail, "%s", c.tail);
    tp_mcpio_free(&c);
    if (rc != 0)
        return fail(ld, "cannot import the tools of MCP server \"%s\" (`%.120s`): %s%s%.300s%s", server, cmd, err,
                    tail[0] ? "; its stderr: \"" : "", tail, tail[0] ? "\"" : "");
    if (listed == 0)
        return fail(ld, "MCP server \"%s\" (`%.120s`) lists no tools", server, cmd);
    /* Every override names a tool the server has. */
    const char *k;
    json_t *v;
    json_object_foreach(sp->tools, k, v) {
        snprintf(name, sizeof name, "%s.%s", server, k);
        bool found = false;
        for (size_t i = json_array_size(ld->imported) - listed; i < json_array_size(ld->imported) && !found; i++)
            found = strcmp(json_string_value(json_object_get(json_array_get(ld->imported, i), "name")), name) == 0;
        if (!found) {
            where_key(&ld->at, "tools");
            where_key(&ld->at, k);
            return fail(ld, "MCP server \"%s\" has no tool \"%s\"", server, k);
        }
    }
    return 0;
}

/*
 * Every "mcp_servers" entry, in the file's order: read against its table,
 * its policy blocks checked, then its tools imported. All before "tools"
 * is read, so the tool array and the name index are sized once.
 */
static int import_servers(loader_t *ld)
{
    if (ld->servers_json == NULL)
        return 0;
    ld->imported = json_array();
    if (ld->imported == NULL)
        return fail_oom(ld);
    mark_t m = where_key(&ld->at, "mcp_servers");
    size_t pos = 0;
    const char *key;
    json_t *v;
    json_object_foreach(ld->servers_json, key, v) {
        mark_t ms = where_key(&ld->at, key);
        server_spec_t sp = {0};
        char prefix[TP_TOOL_NAME_MAX + 2];
        snprintf(prefix, sizeof prefix, "%s.x", key);
        int rc = 0;
        if (!name_ok(prefix) || strlen(key) > 64)
            rc = fail(ld, "expected a server name of letters, digits, '_', '.' or '-', at most 64 bytes: its tools "
                          "are named NAME.TOOL");
        if (rc == 0)
            rc = parse_object(ld, v, &server_table, &sp);
        if (rc == 0)
            rc = check_server_policy(ld, &sp);
        if (rc == 0)
            rc = import_server(ld, key, pos, &sp);
        server_spec_clear(&sp);
        if (rc < 0)
            return -1;
        where_pop(&ld->at, ms);
        pos++;
    }
    where_pop(&ld->at, m);
    return 0;
}

/* A registry with no tool at all is an error, at "tools" or at the top. */
static int check_some_tools(loader_t *ld)
{
    if (ld->reg->n_tools > 0)
        return 0;
    where_pop(&ld->at, (mark_t){0, 0});
    if (ld->tools_json == NULL && ld->servers_json == NULL)
        return fail(ld, "missing required key \"tools\"");
    if (ld->servers_json == NULL) {
        where_key(&ld->at, "tools");
        return fail(ld, "expected a non-empty array of tools, got []");
    }
    where_key(&ld->at, "mcp_servers");
    return fail(ld, "no tools: \"tools\" declares none and \"mcp_servers\" names no server");
}

/* ---- fallback chains ---- */

/* Where a fallback list was written, the last one read winning. */
enum { FB_NONE = 0, FB_DEFAULTS, FB_PDEFAULTS, FB_OWN, FB_RUN, FB_PRUN };

/*
 * The "fallback" a tool has (tool == NULL: the defaults'), as written, and
 * where: the policy file's "run" entry, the registry's, the tool's own key,
 * then the policy file's "defaults", the registry's.
 */
static json_t *fallback_json(loader_t *ld, const tp_tool_t *tool, int *src)
{
    json_t *v;
    if (tool != NULL) {
        if ((v = json_object_get(json_object_get(ld->prun, tool->name), "fallback")) != NULL)
            return *src = FB_PRUN, v;
        if ((v = json_object_get(json_object_get(ld->run, tool->name), "fallback")) != NULL)
            return *src = FB_RUN, v;
        if (tool->mcp_server == NULL &&
            (v = json_object_get(json_array_get(ld->tools_json, tool->index), "fallback")) != NULL)
            return *src = FB_OWN, v;
    }
    if ((v = json_object_get(json_object_get(ld->proot, "defaults"), "fallback")) != NULL)
        return *src = FB_PDEFAULTS, v;
    if ((v = json_object_get(json_object_get(ld->root, "defaults"), "fallback")) != NULL)
        return *src = FB_DEFAULTS, v;
    *src = FB_NONE;
    return NULL;
}

/*
 * Positions the loader on a fallback list: the tool's own "fallback" key
 * (or its "run" entry's), or "defaults.fallback" when the tool inherits it
 * (tool == NULL: defaults). Returns the list as written.
 */
static json_t *where_fallback(loader_t *ld, const tp_tool_t *tool)
{
    int src;
    json_t *list = fallback_json(ld, tool, &src);
    where_pop(&ld->at, (mark_t){0, 0});
    ld->in_policy = src == FB_PRUN || src == FB_PDEFAULTS;
    if (src == FB_OWN) {
        char note[300];
        if (!ld->tools_at_root)
            where_key(&ld->at, "tools");
        where_index(&ld->at, tool->index);
        snprintf(note, sizeof note, " (%s)", tool->name);
        where_note(&ld->at, note);
    } else if (src == FB_RUN || src == FB_PRUN) {
        where_key(&ld->at, "run");
        where_key(&ld->at, tool->name);
    } else {
        where_key(&ld->at, "defaults");
    }
    where_key(&ld->at, "fallback");
    return list;
}

/* Every name in one fallback list must be a declared tool. */
static int check_names(loader_t *ld, const tp_tool_t *tool, const tp_policy_t *p)
{
    int rc = 0;
    for (size_t j = 0; j < p->n_fallback; j++) {
        if (tp_registry_find(ld->reg, p->fallback[j]) != NULL)
            continue;
        json_t *list = where_fallback(ld, tool);
        if (json_is_array(list))
            where_index(&ld->at, j);
        rc = fail(ld, "unknown tool \"%s\" (a fallback must be a tool declared in \"tools\")", p->fallback[j]);
        ld->in_policy = false;
    }
    return rc;
}

enum { WHITE = 0, GREY, BLACK };

/*
 * Depth-first over tool -> fallback edges. Meeting a grey tool means the
 * chain comes back to itself: the error names the tool the loop starts at
 * and the whole loop, "a -> b -> a".
 */
static int visit(loader_t *ld, size_t u, unsigned char *color, size_t *stack, size_t depth)
{
    const tp_registry_t *reg = ld->reg;
    color[u] = GREY;
    stack[depth] = u;
    const tp_policy_t *p = &reg->tools[u].policy;
    for (size_t j = 0; j < p->n_fallback; j++) {
        size_t v = tp_registry_find(reg, p->fallback[j])->index;
        if (color[v] == GREY) {
            char loop[1024];
            size_t len = 0, k = 0;
            while (stack[k] != v)
                k++;
            loop[0] = '\0';
            for (; k <= depth; k++) {
                int w = snprintf(loop + len, sizeof loop - len, "%s -> ", reg->tools[stack[k]].name);
                if (w > 0 && (size_t)w < sizeof loop - len)
                    len += (size_t)w;
            }
            snprintf(loop + len, sizeof loop - len, "%s", reg->tools[v].name);
            where_fallback(ld, &reg->tools[v]);
            int rc = fail(ld, "the fallback chain of \"%s\" loops: %s", reg->tools[v].name, loop);
            ld->in_policy = false;
            return rc;
        }
        if (color[v] == WHITE && visit(ld, v, color, stack, depth + 1) < 0)
            return -1;
    }
    color[u] = BLACK;
    return 0;
}

/*
 * After every tool is known: fallback names exist (defaults' list once, then
 * each tool's own), and no chain loops, so following one always ends.
 */
static int check_fallbacks(loader_t *ld)
{
    tp_registry_t *reg = ld->reg;
    int src, rc = check_names(ld, NULL, &reg->defaults);
    for (size_t i = 0; i < reg->n_tools; i++) {
        fallback_json(ld, &reg->tools[i], &src);
        bool imported = reg->tools[i].mcp_server != NULL; /* its chain may come from its server's blocks */
        if ((src >= FB_OWN || imported) && check_names(ld, &reg->tools[i], &reg->tools[i].policy) < 0)
            rc = -1;
    }
    if (rc < 0 || reg->n_tools == 0)
        return rc;
    unsigned char *color = calloc(reg->n_tools, 1);
    size_t *stack = calloc(reg->n_tools, sizeof *stack);
    if (color == NULL || stack == NULL) {
        free(color);
        free(stack);
        return fail_oom(ld);
    }
    for (size_t i = 0; rc == 0 && i < reg->n_tools; i++)
        if (color[i] == WHITE)
            rc = visit(ld, i, color, stack, 0);
    free(color);
    free(stack);
    return rc;
}

/* ---- load and free ---- */

/* The whole file, NUL-terminated; NULL with errno set. */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (cap - n < 2) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int e = buf == NULL ? ENOMEM : errno;
    if (buf != NULL && ferror(f)) {
        e = errno ? errno : EIO;
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf == NULL) {
        errno = e;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The absolute directory holding path, symlinks resolved; NULL with errno. */
static char *dir_of(const char *path)
{
    char *abs = realpath(path, NULL);
    if (abs == NULL)
        return NULL;
    char *slash = strrchr(abs, '/');
    if (slash == abs)
        slash[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    return abs;
}

/*
 * Reads the file itself (the text is needed again for line numbers), parses
 * it with duplicate keys rejected, then walks the top level: "defaults"
 * and "guards" first, whatever their place in the file, then the policy
 * file's top level over them, then "tools", then the "run" names and the
 * cross-tool fallback checks. Each step goes on after an error so that
 * one load reports them all. All or nothing: any error frees all.
 */
tp_registry_t *tp_registry_load_policy(const char *path, const char *policy, char *err, size_t errlen)
{
    loader_t ld = {.file = path, .err = err, .errlen = errlen};
    tp_registry_t *reg = NULL;
    json_t *root = NULL;
    json_error_t jerr;
    char got[96];
    char *ptext = NULL;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL) {
        report(err, errlen, "(null)", 0, "", "no registry path");
        return NULL;
    }
    char *text = read_text(path, &ld.len);
    if (text == NULL) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot read: %s", strerror(errno));
        report(err, errlen, path, 0, "", msg);
        return NULL;
    }
    ld.text = text;

    root = json_loadb(text, ld.len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        char msg[256];
        snprintf(msg, sizeof msg, "invalid JSON: %s (column %d)", jerr.text, jerr.column);
        report(err, errlen, path, jerr.line, "", msg);
        goto fail;
    }
    ld.root = root;
    if (policy != NULL) {
        ld.pfile = policy;
        ptext = read_text(policy, &ld.plen);
        if (ptext == NULL) {
            char msg[256];
            snprintf(msg, sizeof msg, "cannot read: %s", strerror(errno));
            report(err, errlen, policy, 0, "", msg);
            goto fail;
        }
        ld.ptext = ptext;
        ld.proot = json_loadb(ptext, ld.plen, JSON_REJECT_DUPLICATES, &jerr);
        if (ld.proot == NULL) {
            char msg[256];
            snprintf(msg, sizeof msg, "invalid JSON: %s (column %d)", jerr.text, jerr.column);
            report(err, errlen, policy, jerr.line, "", msg);
            goto fail;
        }
        if ((ld.pdir = dir_of(policy)) == NULL) {
            char msg[256];
            snprintf(msg, sizeof msg, "cannot resolve its directory: %s", strerror(errno));
            report(err, errlen, policy, 0, "", msg);
            goto fail;
        }
    }
    reg = calloc(1, sizeof *reg);
    if (reg == NULL) {
        report(err, errlen, path, 0, "", "out of memory");
        goto fail;
    }
    ld.reg = reg;
    tp_policy_init(&reg->defaults);
    reg->path = strdup(path);
    reg->dir = dir_of(path);
    if (reg->path == NULL || reg->dir == NULL) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot resolve its directory: %s", strerror(errno));
        report(err, errlen, path, 0, "", msg);
        goto fail;
    }
    ld.dir = reg->dir;
    if (json_is_array(root)) {
        /* an OpenAI tool list, as it is: the tools and nothing else */
        ld.tools_at_root = true;
        ld.tools_json = root;
    } else if (!json_is_object(root)) {
        fail(&ld, "expected an object like {\"tools\": [...]}, or an OpenAI tool list [...], got %s", GOT(root));
        goto fail;
    } else if (json_object_get(root, "jsonrpc") != NULL) {
        where_key(&ld.at, "jsonrpc");
        fail(&ld, "unknown key (a whole JSON-RPC answer: the registry takes its \"result\", {\"tools\": [...]}, "
                  "as it is)");
        finish_errors(&ld);
        goto fail;
    } else {
        parse_object(&ld, root, &top_table, reg);
        check_defaults(&ld);
        where_pop(&ld.at, (mark_t){0, 0});
    }
    if (ld.proot != NULL) {
        ld.in_policy = true;
        ld.dir = ld.pdir;
        if (!json_is_object(ld.proot))
            fail(&ld, "expected an object like {\"run\": {\"TOOL\": {\"exec\": [...]}}}, got %s", GOT(ld.proot));
        else if (parse_object(&ld, ld.proot, &policy_file_table, reg) == 0 &&
                 json_object_get(ld.proot, "defaults") != NULL) {
            where_key(&ld.at, "defaults");
            check_output_once(&ld, json_object_get(ld.proot, "defaults"));
            where_pop(&ld.at, (mark_t){0, 0});
        }
        ld.in_policy = false;
        ld.dir = reg->dir;
    }
    if (ld.n_errors == 0)
        import_servers(&ld); /* starts processes: not for a file known to be wrong */
    where_pop(&ld.at, (mark_t){0, 0});
    parse_tools(&ld);
    bool named = reg->index != NULL;
    for (size_t i = 0; i < reg->n_tools; i++)
        named = named && reg->tools[i].name != NULL;
    if (ld.n_errors == 0)
        check_some_tools(&ld);
    if (named) {
        check_run_names(&ld);
        check_fallbacks(&ld);
    }
    free(ld.tool_lines);
    ld.tool_lines = NULL;
    if (ld.n_errors > 0) {
        finish_errors(&ld);
        goto fail;
    }
    json_decref(ld.imported);
    free(ld.imported_from);
    json_decref(root);
    json_decref(ld.proot);
    free(ld.pdir);
    free(ptext);
    free(text);
    return reg;

fail:
    tp_registry_free(reg);
    json_decref(ld.imported);
    free(ld.imported_from);
    json_decref(root);
    json_decref(ld.proot);
    free(ld.pdir);
    free(ptext);
    free(text);
    return NULL;
}

tp_registry_t *tp_registry_load(const char *path, char *err, size_t errlen)
{
    return tp_registry_load_policy(path, NULL, err, errlen);
}

void tp_registry_free(tp_registry_t *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->n_tools; i++) {
        tp_tool_t *t = &reg->tools[i];
        free(t->name);
        free(t->description);
        json_decref(t->parameters);
        tp_jsonschema_free(t->schema);
        free_argv(t->argv);
        free(t->plugin_path);
        free(t->cwd);
        free_argv(t->mcp_command);
        free(t->mcp_tool);
        free_argv(t->mcp_env);
        free(t->mcp_cwd);
        free(t->mcp_server);
        free(t->http_url);
        policy_clear(&t->policy);
    }
    free(reg->tools);
    policy_clear(&reg->defaults);
    tp_index_t *ix = reg->index;
    if (ix != NULL) {
        free(ix->slots);
        free(ix);
    }
    json_decref(reg->schema_refs);
    free(reg->path);
    free(reg->dir);
    free(reg);
}
