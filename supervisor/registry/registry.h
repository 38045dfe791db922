/*
 * The registry: tools.json, loaded once, validated whole, then read-only.
 *
 * {"defaults": {POLICY}, "guards": {...}, "schema_dialect": "draft-07",
 *  "formats": "annotate", "schema_refs": {URI: FILE}, "tools": [TOOL, ...],
 *  "run": {NAME: {ADAPTER and POLICY}}}
 *
 * A TOOL is toolpool's own, an OpenAI function tool or an MCP tools/list
 * entry; a top-level array is an OpenAI list. "run" (or a policy file)
 * gives a tool declared in another form its adapter and policy.
 *
 * Every key comes from one table per object (see keys.c); an unknown
 * key, a wrong type or an out-of-range value is an error that names the
 * file, the line and the key path.
 */
#ifndef TP_REGISTRY_H
#define TP_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/*
 * The longest tool name: MCP allows 128 characters, and a server's prefix
 * comes on top when its tools are imported. The store's keys hold the
 * name (LMDB keys are at most 511 bytes), so it must stay well short.
 */
#define TP_TOOL_NAME_MAX 200

typedef enum {
    TP_ADAPTER_EXEC = 1,
    TP_ADAPTER_PLUGIN = 2,
    TP_ADAPTER_MCP = 3,
    TP_ADAPTER_HTTP = 4,
} tp_adapter_t;

typedef enum {
    TP_JITTER_FULL = 0, /* uniform in [0, delay] (the default) */
    TP_JITTER_EQUAL,    /* delay/2 + uniform in [0, delay/2] */
    TP_JITTER_NONE,     /* exactly delay: the seed's 0.5s, 1s */
} tp_jitter_t;

/*
 * The same-call breaker's scope: a job's own repeats (the default, so one
 * evaluation sample's failures never change another's result), or every
 * job and every process on the store.
 */
typedef enum {
    TP_SCOPE_JOB = 0,
    TP_SCOPE_GLOBAL = 1,
} tp_scope_t;

/* The retry and recovery policy of one tool; "defaults" fills the gaps. */
typedef struct {
    uint64_t timeout_us;  /* per attempt */
    uint64_t deadline_us; /* all attempts and backoffs; 0 = none */
    uint32_t attempts;    /* total tries, counting the first, >= 1 */
    uint64_t backoff_base_us;
    double backoff_factor; /* >= 1 */
    uint64_t backoff_max_us;
    uint64_t max_retry_after_us; /* a tool's Retry-After longer than this ends the call at once */
    tp_jitter_t jitter;
    uint64_t kill_grace_us; /* TERM-to-KILL grace; 0 = KILL at once */
    bool idempotent;
    bool once;            /* a call's result commits at its end, not with its group: once ended, it never runs again */
    uint32_t concurrency; /* most attempts at once; 0 = no cap */
    /* "rate": a token bucket of the tool's attempts, in each supervisor; rate_calls 0 = none */
    uint32_t rate_calls;  /* attempts ... */
    uint64_t rate_per_us; /* ... per this long */
    uint32_t rate_burst;  /* the most that may start at once after a quiet spell */
    uint64_t max_output;  /* bytes of a tool's stdout kept (also "limits.output") */
    /* "limits": setrlimit for the tool; 0 = none */
    uint64_t limit_memory; /* bytes of address space (RLIMIT_AS) */
    uint64_t limit_cpu_us; /* CPU time (RLIMIT_CPU, whole seconds: rounded up) */
    uint32_t limit_files;  /* open descriptors (RLIMIT_NOFILE) */
    /* "worker": when a worker that has just answered this tool is replaced; 0 = never */
    uint64_t worker_max_calls; /* calls the worker has answered, of any tool */
    uint64_t worker_max_rss;   /* bytes resident in the worker (/proc/PID/statm) */
    uint64_t retry_on;         /* bit (1 << tp_kind_t) per kind retried */
    /* fallback chain */
    char **fallback;        /* tool names, n_fallback of them */
    json_t **fallback_args; /* per hop: {KEY: JSON Pointer into the call's args}, or NULL (the args as
                                   they are); NULL when no hop maps its args */
    size_t n_fallback;
    uint32_t fallback_on; /* bit (1 << tp_class_t) per class */
    bool stale;
    json_t *degraded; /* the last honest answer, or NULL */
    /* breakers */
    bool same_call_off;       /* "same_call": false */
    uint32_t same_call_scope; /* tp_scope_t: whose failures count together */
    uint32_t same_call_failures;
    uint64_t same_call_window_us;
    bool tool_off; /* no tool breaker: "tool" not given (the default), or false */
    double tool_failure_rate;
    uint32_t tool_min_calls;
    uint64_t tool_window_us;
    uint64_t tool_cooldown_us;
    uint32_t tool_probes;
    char *owner; /* "owner": who is paged when its calls escalate; NULL: no one named */
} tp_policy_t;

/*
 * Where a tool's "idempotent" came from, the last of these that says it
 * (`tools list` shows it). Without a word from the registry, a tool
 * declared by an MCP server takes its annotations (MCP's defaults when it
 * has none: not idempotent), an http POST or PATCH is not idempotent, and
 * any other tool is.
 */
typedef enum {
    TP_FROM_BUILTIN = 0, /* toolpool's default: idempotent */
    TP_FROM_MCP,         /* the tool's MCP annotations, or MCP's defaults */
    TP_FROM_METHOD,      /* an http tool's method: POST and PATCH are not idempotent */
    TP_FROM_DEFAULTS,    /* "defaults" (the registry's or the policy file's) */
    TP_FROM_SERVER,      /* its server's "defaults" (mcp_servers.NAME.defaults) */
    TP_FROM_SERVER_TOOL, /* its entry in its server's "tools" */
    TP_FROM_TOOL,        /* the tool's own object */
    TP_FROM_RUN,         /* the registry's "run" entry */
    TP_FROM_POLICY_RUN,  /* the policy file's "run" entry */
} tp_from_t;

/* An MCP server's instances: the most a registry may ask for. */
#define TP_MCP_INSTANCES_MAX 64

/* An http or mcp tool's max_in_flight: its default, and the most it may say. */
#define TP_MAX_IN_FLIGHT_DEFAULT 64
#define TP_MAX_IN_FLIGHT_MAX 1024

typedef struct {
    char *name;
    char *description;            /* "" when absent */
    json_t *parameters;           /* JSON Schema, or NULL */
    struct tp_jsonschema *schema; /* parameters, compiled at load; NULL: no check */
    int schema_dialect;           /* "schema_dialect": TP_JSONSCHEMA_*, 0 = the registry's */
    int formats;                  /* "formats": TP_FORMATS_*, 0 = the registry's */
    tp_adapter_t adapter;
    char **argv; /* exec: NULL-terminated; argv[0] resolved */
    size_t argc;
    char *plugin_path;  /* plugin: absolute */
    char *cwd;          /* exec: the working directory (absolute; default the registry's folder) */
    char **mcp_command; /* mcp: the server's argv, NULL-terminated */
    char *mcp_tool;     /* mcp: the server's name for the tool */
    char **mcp_env;     /* mcp: "K=V" added to the server's environment, NULL-terminated, or NULL */
    char *mcp_cwd;      /* mcp: the server's directory (absolute), or NULL */
    char *mcp_server;   /* imported from "mcp_servers": the server's name; else NULL */
    /*
     * mcp: which server it is (one command, env and cwd: 0 to
     * n_mcp_servers-1), and how many copies of that server run, each in a
     * worker of its own, shared by the calls of all its tools (the most
     * any of them says; 1 by default).
     */
    int mcp_server_id;
    uint32_t mcp_instances;
    int mcp_protocol; /* mcp: "protocol", the era its server may be spoken to in: tp_mcp_era_t */
    /* http: the request as declared (secrets unresolved: what may be shown), and as sent */
    char *http_url;              /* the URL template: {NAME} takes the arg NAME, percent-encoded */
    char *http_method;           /* GET (the default), POST, PUT, PATCH or DELETE */
    char **http_query;           /* args sent as the query string, NULL-terminated, or NULL */
    char **http_headers;         /* "Name=value" as declared, NULL-terminated, or NULL */
    char *http_body;             /* "args": GET and DELETE send the args as a body too; NULL: they do not */
    char *http_ca_file;          /* absolute, or NULL: the system's certificates */
    uint64_t connect_timeout_us; /* 0: the transport's own */
    uint32_t max_in_flight;      /* http, mcp: the most calls of it one worker holds at once (set at load: 64) */
    char *http_target;           /* the URL, ${env:NAME} and ${file:PATH} resolved at load; never shown */
    char **http_header_lines;    /* "Name: value", resolved at load; never shown; NULL-terminated, or NULL */
    char **http_secrets;         /* the secrets' values, for the worker to keep out of what it answers */
    bool strict;                 /* OpenAI's "strict", as declared */
    /*
     * An MCP tool's own declaration, as its tools/list entry gave it (a
     * tool declared in MCP's form, or imported from "mcp_servers"): its
     * title, annotations, outputSchema, icons and _meta, passed on to hosts
     * in every tools/list; NULL for other tools.
     */
    json_t *mcp_decl;
    tp_from_t idempotent_from; /* where policy.idempotent came from */
    /*
     * "version" as declared (a string, or "file"), and what each record
     * made now keeps (version_id): the string, for "file" the XXH128 of the
     * exec tool's file read at load, for a tool imported from "mcp_servers"
     * that the registry gives none its server's serverInfo.version (read by
     * the handshake that lists its tools at load; a tool of the mcp adapter
     * is not started at load: it has a version only when given one); NULL:
     * the tool has no version.
     */
    char *version;
    char *version_id;
    tp_policy_t policy;
    size_t index; /* position in tools[] */
    size_t pos;   /* position in the file's tools list, which may hold OpenAI built-in tools tools[] skips */
    int line;     /* where the tool's object starts */
} tp_tool_t;

typedef struct {
    uint64_t max_steps; /* 0 = no cap, for all four */
    uint64_t max_calls;
    uint64_t max_wall_us;
    double max_cost;
} tp_guards_t;

/* "formats": whether "format" in a tool's parameters is checked. */
enum {
    TP_FORMATS_ANNOTATE = 1, /* an annotation only (the default, as JSON Schema says) */
    TP_FORMATS_ASSERT = 2,   /* checked: date-time, date, time, email, uri... (supervisor/jsonschema/jsonformat.h) */
};

typedef struct tp_registry {
    char *path;
    char *dir; /* the directory relative paths start from */
    /*
     * JSON Schema settings for every tool's parameters: the dialect of a
     * schema without "$schema" (0: draft-07), formats, and "schema_refs",
     * the documents a "$ref" may name by URI (URI -> the document, read at
     * load from the file given), never fetched from the network.
     */
    int schema_dialect;
    int formats;
    json_t *schema_refs;
    tp_policy_t defaults;
    tp_guards_t guards;
    uint64_t retain_us; /* "retain": results older than this are pruned by run, serve and mcp (0: kept) */
    tp_tool_t *tools;
    size_t n_tools;
    size_t n_mcp_servers; /* the distinct MCP servers the tools name (tp_tool_t.mcp_server_id) */
    bool versioned;       /* some tool has a version_id: reruns compare records' versions */
    void *index;          /* name -> tool lookup, private */
} tp_registry_t;

/*
 * Loads and validates path: the registry, the caller's to
 * tp_registry_free. On error returns NULL, and the caller learns why from
 * err alone (a failed allocation is its line "out of memory"): every error
 * found, one line each, "FILE:LINE: KEY.PATH: what is wrong"
 * (the first as it always was; at most TP_REGISTRY_ERRORS_SHOWN (20), then
 * "and N more errors"), as many whole lines as errlen holds. Relative exec
 * argv[0] (with a slash) and plugin paths resolve against the directory
 * of the file they are written in.
 *
 * The file is toolpool's own object ({"tools": [...], "run": {...},
 * "defaults": ...}), an OpenAI tool list (a top-level array) or an MCP
 * tools/list result ({"tools": [...]}); "tools" entries may mix the forms
 * (docs/guide.md, "The registry"). policy, when not NULL, is a second
 * file of toolpool's settings ({"run", "defaults", "guards", ...}) read
 * over the first.
 */
#define TP_REGISTRY_ERRLEN 16384 /* an err that holds the 20 errors a load writes at most */
tp_registry_t *tp_registry_load_policy(const char *path, const char *policy, char *err, size_t errlen);
/* tp_registry_load_policy without a policy file. */
tp_registry_t *tp_registry_load(const char *path, char *err, size_t errlen);
/* The tool named name, or NULL when reg has none of that name. */
const tp_tool_t *tp_registry_find(const tp_registry_t *reg, const char *name);
void tp_registry_free(tp_registry_t *reg);

/* The policy a tool gets when neither it nor "defaults" says otherwise. */
void tp_policy_init(tp_policy_t *p);

/*
 * "8s", "250ms", "1.5s", "10m", "1h", "100us", "0". Returns 0 and sets *us,
 * or TP_EINVAL for anything else (a bare number other than 0 included).
 */
int tp_duration_parse(const char *s, uint64_t *us);

/*
 * "512M", "16M", "1G", "64K", "2T" (powers of 1024, the unit in either
 * case) or plain digits of bytes. Returns 0 and sets *bytes, or TP_EINVAL.
 */
int tp_size_parse(const char *s, uint64_t *bytes);

#endif
