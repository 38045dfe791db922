/*
 * The registry loader's shared parts, internal to supervisor/registry/: the
 * loader and its place in the file, the key tables' types, and the
 * functions the loader's files call in one another (prefix reg_).
 */
#ifndef TP_REGISTRY_INTERNAL_H
#define TP_REGISTRY_INTERNAL_H

#include "registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- where the loader is: a JSON Pointer and the key path users read (loader.c) ---- */

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

void reg_where_add(char *buf, size_t *len, const char *s, size_t n);
mark_t reg_where_key(where_t *w, const char *name);
mark_t reg_where_index(where_t *w, size_t i);
void reg_where_note(where_t *w, const char *s);
void reg_where_pop(where_t *w, mark_t m);

/* ---- the loader and its one way of failing (loader.c) ---- */

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
    json_t *imported_listed; /* for each, its tools/list entry as the server gave it */
    json_t *server_versions; /* server name -> its serverInfo.version, for those whose handshake gave one */
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

void reg_report(char *err, size_t errlen, const char *file, int line, const char *key, const char *msg);
void reg_finish_errors(loader_t *ld);

/*
 * Every step of the loader returns 0, or a negative code (error.h) with
 * its message already added to the loader's errors: TP_EINVAL for what
 * the files say, TP_ENOMEM when memory ran out, and for an MCP server that
 * could not be imported the code of its failure (tp_mcpio_spawn's and
 * tp_mcpio_open's). A step goes on after an error to find the others,
 * and says the first failure's code, out of memory over any other (reg_rc).
 */

/* Adds "FILE:LINE: KEYPATH: message" for where the loader stands. Returns TP_EINVAL. */
int reg_fail(loader_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* reg_fail, returning rc (negative): a failure that is not the file's, such as a server's. */
int reg_fail_code(loader_t *ld, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* reg_fail's "out of memory". Returns TP_ENOMEM. */
int reg_fail_oom(loader_t *ld);
/*
 * Moves the loader onto key where the tool's value of it was written (its
 * policy file's or registry's "run" entry, else the tool itself), so that
 * reg_fail() names the right file and line; reg_fail_then_reset(rc) puts
 * the loader back on the registry file after. FAIL_AT does both.
 */
void reg_where_setting(loader_t *ld, const tp_tool_t *tool, const char *key);
int reg_fail_then_reset(loader_t *ld, int rc);
#define FAIL_AT(ld, tool, key, ...)                                                                                    \
    (reg_where_setting((ld), (tool), (key)), reg_fail_then_reset((ld), reg_fail((ld), __VA_ARGS__)))
/*
 * An http tool read (http.c): its method and body mode checked, its URL's
 * placeholders well formed, its secrets (${env:NAME}, ${file:PATH}) resolved
 * into http_target and http_header_lines. 0, TP_EINVAL or TP_ENOMEM.
 */
int reg_http_finish(loader_t *ld, tp_tool_t *tool);
/* The MCP servers the loaded tools name, numbered (tp_tool_t.mcp_server_id, mcp_instances). */
void reg_number_servers(tp_registry_t *reg);
const char *reg_describe(const json_t *v, char *buf, size_t n);

/*
 * Two steps' codes as one: 0 when both succeeded, else the first failure's,
 * but TP_ENOMEM over any other (a load that ran out of memory says so,
 * whatever else was wrong).
 */
static inline int reg_rc(int rc, int r)
{
    if (r == 0 || rc == TP_ENOMEM)
        return rc;
    if (rc == 0 || r == TP_ENOMEM)
        return r;
    return rc;
}

#define GOT(v) reg_describe((v), got, sizeof got)

/* ---- the key tables (keys.c) ---- */

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
    K_MCP_ERA,     /* "auto" | "2026-07-28" | "2025-11-25" -> int tp_mcp_era_t (an MCP server's "protocol") */
    K_SCHEMA_REFS, /* {URI: FILE}: each file read now, kept as a document by URI */
    K_ENV,         /* an object of strings -> NULL-terminated char ** of "K=V" */
    K_HEADERS,     /* an object of HTTP headers -> NULL-terminated char ** of "Name=value" */
    K_ARGNAMES,    /* an array of argument names (non-empty strings) -> NULL-terminated char ** */
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
    F_ALIAS = 1 << 7,    /* another row's field under a second name: rendered by that row only */
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
#define KIND_BIT(k) (1ull << (k))
#define CLASS_BIT(c) (1u << (c))

extern const key_table_t reg_policy_table, reg_tool_table, reg_run_table, reg_openai_fn_table, reg_openai_table,
    reg_openai_flat_table, reg_mcp_decl_table, reg_top_table, reg_policy_file_table;

/* An adapter's name, and whether this build's worker can run it; reg_adapters is indexed by tp_adapter_t. */
typedef struct {
    const char *name;
    bool available;
} adapter_info_t;
extern const adapter_info_t reg_adapters[TP_ADAPTER_HTTP + 1];

/* ---- reading against the tables (loader.c, values.c) ---- */

/* Each of these: 0, TP_EINVAL or TP_ENOMEM, every error reported. */
int reg_parse_object(loader_t *ld, json_t *obj, const key_table_t *tab, void *base);
int reg_parse_key(loader_t *ld, const key_spec_t *s, json_t *v, void *base);
/* Each 0 or TP_EINVAL. */
int reg_check_output_once(loader_t *ld, json_t *obj);
int reg_check_defaults(loader_t *ld);

/* tp_jitter_t's names, as the registry writes them. */
extern const char *const reg_jitter_names[3];

/* ---- the values written back (render.c) ---- */

/* A duration as the registry writes them: "5s", "250ms", "100us". NULL on ENOMEM. */
json_t *reg_duration_json(uint64_t us);
/*
 * Sets in o each key of tab and its chain whose value at base differs from
 * the one at dflt (dflt NULL: each key that is set), written as the
 * registry's files say it; the keys read by hand (names, adapters, the
 * schema) are left to the caller. 0, or TP_ENOMEM.
 */
int reg_render_object(json_t *o, const key_table_t *tab, const void *base, const void *dflt);
/* The value of the tool's adapter key: exec's argv, or the plugin, mcp or http object. NULL on ENOMEM. */
json_t *reg_render_adapter(const tp_tool_t *t);

/* ---- the policy: defaults, copies, teardown (policy.c) ---- */

void reg_store_uint(void *field, size_t size, uint64_t v);
void reg_free_strv(char **v, size_t n);
void reg_free_argv(char **v);
void reg_free_maps(json_t **maps, size_t n);
void reg_policy_clear(tp_policy_t *p);
/* 0, or TP_ENOMEM with dst safe to clear (nothing reported: the caller says it). */
int reg_policy_copy(tp_policy_t *dst, const tp_policy_t *src);

/* ---- the name index (registry.c) ---- */

typedef struct tp_index tp_index_t;
/* An empty index for n names, or NULL when out of memory. */
tp_index_t *reg_index_new(size_t n);
void reg_index_put(tp_registry_t *reg, size_t i);

/*
 * A policy key of a tool object in toolpool's form: at its top, else in its
 * "policy" object (toolpool's rendering of a tool, loaded again). NULL when
 * neither has it.
 */
static inline json_t *reg_tool_policy_key(json_t *t, const char *key)
{
    json_t *v = json_object_get(t, key);
    return v != NULL ? v : json_object_get(json_object_get(t, "policy"), key);
}

/* ---- tools (tools.c), mcp_servers (import.c), fallback chains (fallback.c) ---- */

bool reg_name_ok(const char *s);
/* 0, TP_EINVAL or TP_ENOMEM, every error reported. */
int reg_parse_tools(loader_t *ld);
int reg_check_fallbacks(loader_t *ld);
/* 0 or TP_EINVAL. */
int reg_check_run_names(loader_t *ld);
int reg_check_some_tools(loader_t *ld);
/*
 * 0, TP_EINVAL, TP_ENOMEM, or the code a server's import failed with
 * (tp_mcpio_spawn's -errno, TP_ECLOSED, TP_ETIMEDOUT, TP_E2BIG, TP_EREFUSED, TP_EBADMSG).
 */
int reg_import_servers(loader_t *ld);

#endif
