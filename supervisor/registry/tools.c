/*
 * The "tools" entries, each read in the form it is declared in (toolpool's
 * own, OpenAI's function tool nested or flat, an MCP tools/list entry),
 * then the tools imported from "mcp_servers"; each with its "run" entries,
 * its parameters compiled and its adapter checked. Then the checks over
 * the whole list: every "run" entry names a tool, and there is a tool.
 */
#include "registry_internal.h"

#include "jsonpos.h"
#include "jsonschema.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a "tools" entry is declared (tool_form). */
typedef enum {
    FORM_TOOLPOOL = 0,
    FORM_OPENAI,      /* {"type": "function", "function": {...}} */
    FORM_OPENAI_FLAT, /* {"type": "function", "name": ...} */
    FORM_MCP,         /* {"name", "inputSchema", ...}, with no adapter key */
} form_t;

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
        reg_where_key(&ld->at, *at);
    tp_jsonschema_t *compiled = tp_jsonschema_compile_opts(tool->parameters, &opts, serr, sizeof serr);
    if (compiled == NULL) {
        /* serr is "POINTER: what": point the line at the schema keyword itself. */
        const char *colon = strstr(serr, ": ");
        if (serr[0] == '/' && colon)
            reg_where_add(ld->at.ptr, &ld->at.ptr_len, serr, (size_t)(colon - serr));
        return reg_fail(ld, "invalid JSON Schema at %s", serr);
    }
    tp_jsonschema_free(tool->schema);
    tool->schema = compiled;
    reg_where_pop(&ld->at, mp);
    return 0;
}

/* A name as agents and MCP hosts accept it: [A-Za-z0-9_.-]+. */
bool reg_name_ok(const char *s)
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
    for (size_t a = 1; a < sizeof reg_adapters / sizeof reg_adapters[0]; a++)
        count += reg_adapters[a].available;
    buf[0] = '\0';
    for (size_t a = 1; a < sizeof reg_adapters / sizeof reg_adapters[0]; a++) {
        if (!reg_adapters[a].available)
            continue;
        const char *sep = seen == 0 ? "" : seen + 1 == count ? " and " : ", ";
        int w = snprintf(buf + len, n - len, "%s%s", sep, reg_adapters[a].name);
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
 * An MCP tool's declaration (a "tools" entry in MCP's form, or a tool its
 * server listed at import): its annotations' word on idempotency, and the
 * keys hosts are given back in every tools/list (tool->mcp_decl). In the
 * registry's own file a key of the wrong type is an error; from a server,
 * which the registry's author cannot mend, it is left out (a hint that is
 * not a boolean says nothing, so the tool is not idempotent).
 */
static const struct {
    const char *key;
    json_type type;
} mcp_passed[] = {
    {"title", JSON_STRING}, {"annotations", JSON_OBJECT}, {"outputSchema", JSON_OBJECT},
    {"icons", JSON_ARRAY},  {"_meta", JSON_OBJECT},       {"execution", JSON_OBJECT},
};
static const char *const mcp_hints[] = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"};

static int read_mcp_decl(loader_t *ld, json_t *decl, tp_tool_t *tool, bool from_server)
{
    char got[96];
    static const char *const type_names[] = {
        [JSON_STRING] = "a string", [JSON_OBJECT] = "an object", [JSON_ARRAY] = "an array"};
    json_t *keep = json_object();
    if (keep == NULL)
        return reg_fail_oom(ld);
    int rc = 0;
    for (size_t i = 0; i < sizeof mcp_passed / sizeof mcp_passed[0]; i++) {
        json_t *v = json_object_get(decl, mcp_passed[i].key);
        if (v == NULL)
            continue;
        if (json_typeof(v) != mcp_passed[i].type) {
            if (!from_server) {
                mark_t mk = reg_where_key(&ld->at, mcp_passed[i].key);
                rc = reg_rc(rc, reg_fail(ld, "expected %s, got %s", type_names[mcp_passed[i].type], GOT(v)));
                reg_where_pop(&ld->at, mk);
            }
            continue;
        }
        if (strcmp(mcp_passed[i].key, "annotations") == 0) {
            json_t *a = json_deep_copy(v);
            if (a == NULL)
                break;
            for (size_t h = 0; h < sizeof mcp_hints / sizeof mcp_hints[0]; h++) {
                json_t *hv = json_object_get(a, mcp_hints[h]);
                if (hv == NULL || json_is_boolean(hv))
                    continue;
                if (from_server) {
                    json_object_del(a, mcp_hints[h]);
                    continue;
                }
                mark_t mk = reg_where_key(&ld->at, "annotations");
                reg_where_key(&ld->at, mcp_hints[h]);
                rc = reg_rc(rc, reg_fail(ld, "expected true or false, got %s", GOT(hv)));
                reg_where_pop(&ld->at, mk);
            }
            if (json_object_set_new(keep, "annotations", a) != 0)
                rc = reg_rc(rc, TP_ENOMEM);
        } else if (json_object_set(keep, mcp_passed[i].key, v) != 0) {
            rc = reg_rc(rc, TP_ENOMEM);
        }
    }
    json_t *ts = json_object_get(json_object_get(keep, "execution"), "taskSupport");
    const char *tv = json_string_value(ts);
    if (ts && !from_server &&
        (tv == NULL || (strcmp(tv, "forbidden") != 0 && strcmp(tv, "optional") != 0 && strcmp(tv, "required") != 0))) {
        mark_t mk = reg_where_key(&ld->at, "execution");
        reg_where_key(&ld->at, "taskSupport");
        rc = reg_rc(rc, reg_fail(ld, "expected \"forbidden\", \"optional\" or \"required\", got %s", GOT(ts)));
        reg_where_pop(&ld->at, mk);
    }
    json_decref(tool->mcp_decl);
    tool->mcp_decl = keep;
    return rc == TP_ENOMEM ? reg_fail_oom(ld) : rc;
}

/* MCP's rule: idempotent only when readOnlyHint or idempotentHint is true (its defaults are false). */
static bool mcp_idempotent(const tp_tool_t *tool)
{
    json_t *a = json_object_get(tool->mcp_decl, "annotations");
    return json_is_true(json_object_get(a, "readOnlyHint")) || json_is_true(json_object_get(a, "idempotentHint"));
}

/*
 * Where the tool's "idempotent" comes from (tool->idempotent_from): the
 * last layer that says it, read in the order they apply. The registry's
 * own word wins; without one, an MCP tool takes MCP's rule, an http POST
 * or PATCH is not idempotent (HTTP's semantics), and any other tool is.
 */
/*
 * The file an exec tool runs: argv[0] as the registry resolved it, or a
 * bare name found on PATH as the worker's exec finds it. Into buf; false
 * when no executable of that name is found.
 */
static bool exec_file(const char *name, char *buf, size_t cap)
{
    if (strchr(name, '/') != NULL) {
        snprintf(buf, cap, "%s", name);
        return true;
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, cap, "%.*s%s%s", (int)n, n ? p : ".", "/", name);
        if (access(buf, X_OK) == 0)
            return true;
        p += n + (p[n] == ':');
    }
    return false;
}

/*
 * XXH128 of the file at path, as 32 hex digits, into out. 0, or -errno
 * (the file cannot be opened or read).
 */
static int file_digest(const char *path, char out[33])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        XXH3_128bits_update(&st, buf, (size_t)n);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err)
        return err;
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
    return 0;
}

/*
 * What the tool's records keep as its version (tool->version_id): its
 * "version" string; for "file", the digest of the file an exec tool runs,
 * read once here (a file that cannot be read fails the load, naming it:
 * a version that cannot be known is never left blank); with neither, an
 * imported MCP tool's server's serverInfo.version. NULL when none.
 */
static int settle_version(loader_t *ld, tp_tool_t *tool, const char *server)
{
    const char *v = tool->version;
    char hex[33], file[4096];
    if (v != NULL && strcmp(v, "file") == 0) {
        if (tool->adapter != TP_ADAPTER_EXEC)
            return FAIL_AT(ld, tool, "version",
                           "\"file\" is the digest of the file an exec tool runs (this one is %s): give a version "
                           "string",
                           reg_adapters[tool->adapter].name);
        if (!exec_file(tool->argv[0], file, sizeof file))
            return FAIL_AT(ld, tool, "version", "\"file\": %s is not found on PATH", tool->argv[0]);
        int rc = file_digest(file, hex);
        if (rc < 0)
            return FAIL_AT(ld, tool, "version", "\"file\": cannot read %s: %s", file, strerror(-rc));
        v = hex;
    } else if (v == NULL && server != NULL) {
        v = json_string_value(json_object_get(ld->server_versions, server));
    }
    if (v == NULL)
        return 0;
    if ((tool->version_id = strdup(v)) == NULL)
        return reg_fail_oom(ld);
    ld->reg->versioned = true;
    return 0;
}

static void settle_idempotent(loader_t *ld, json_t *t, tp_tool_t *tool, json_t *server_spec, const char *mcp_name)
{
    static const char key[] = "idempotent";
    tp_from_t from = TP_FROM_BUILTIN;
    if (json_object_get(json_object_get(ld->root, "defaults"), key) != NULL ||
        json_object_get(json_object_get(ld->proot, "defaults"), key) != NULL)
        from = TP_FROM_DEFAULTS;
    if (json_object_get(json_object_get(server_spec, "defaults"), key) != NULL)
        from = TP_FROM_SERVER;
    if (json_object_get(json_object_get(json_object_get(server_spec, "tools"), mcp_name), key) != NULL)
        from = TP_FROM_SERVER_TOOL;
    if (server_spec == NULL && tool->mcp_decl == NULL && reg_tool_policy_key(t, key) != NULL)
        from = TP_FROM_TOOL;
    if (json_object_get(json_object_get(ld->run, tool->name), key) != NULL)
        from = TP_FROM_RUN;
    if (json_object_get(json_object_get(ld->prun, tool->name), key) != NULL)
        from = TP_FROM_POLICY_RUN;
    if (from == TP_FROM_BUILTIN && tool->mcp_decl != NULL) {
        from = TP_FROM_MCP;
        tool->policy.idempotent = mcp_idempotent(tool);
    } else if (from == TP_FROM_BUILTIN && tool->adapter == TP_ADAPTER_HTTP && tool->http_method != NULL &&
               (strcmp(tool->http_method, "POST") == 0 || strcmp(tool->http_method, "PATCH") == 0)) {
        from = TP_FROM_METHOD;
        tool->policy.idempotent = false;
    }
    tool->idempotent_from = from;
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
        reg_where_pop(&ld->at, (mark_t){0, 0});
        ld->in_policy = f == 1;
        ld->dir = f == 1 ? ld->pdir : ld->reg->dir;
        reg_where_key(&ld->at, "run");
        reg_where_key(&ld->at, tool->name);
        int r = reg_parse_object(ld, entry, &reg_run_table, tool);
        rc = reg_rc(rc, r < 0 ? r : reg_check_output_once(ld, entry));
        ld->in_policy = false;
        ld->dir = ld->reg->dir;
        ld->at = saved;
    }
    return rc;
}

/*
 * Moves the loader onto key where the tool's value of it was written: its
 * policy file "run" entry, else its registry "run" entry, else the tool
 * itself (where the loader stands). reg_fail() then names the right file and line.
 */
void reg_where_setting(loader_t *ld, const tp_tool_t *tool, const char *key)
{
    for (int f = 1; f >= 0; f--) {
        if (json_object_get(json_object_get(f ? ld->prun : ld->run, tool->name), key) == NULL)
            continue;
        reg_where_pop(&ld->at, (mark_t){0, 0});
        ld->in_policy = f == 1;
        reg_where_key(&ld->at, "run");
        reg_where_key(&ld->at, tool->name);
        break;
    }
    reg_where_key(&ld->at, key);
}

int reg_fail_then_reset(loader_t *ld, int rc)
{
    ld->in_policy = false;
    return rc;
}

/*
 * The checks of a tool in toolpool's form, once its keys are read: the
 * output cap set once, at its top and in its "policy" object (toolpool's
 * rendering), no key set in both, and "adapter", when there, naming the
 * adapter its adapter key gives.
 */
static int check_own_form(loader_t *ld, json_t *t, const tp_tool_t *tool)
{
    char got[96];
    json_t *policy = json_object_get(t, "policy"), *named = json_object_get(t, "adapter");
    int rc = reg_check_output_once(ld, t);
    mark_t m = reg_where_key(&ld->at, "policy");
    rc = reg_rc(rc, reg_check_output_once(ld, policy));
    const char *key;
    json_t *v;
    json_object_foreach(policy, key, v) {
        if (json_object_get(t, key) == NULL)
            continue;
        mark_t mk = reg_where_key(&ld->at, key);
        rc = reg_rc(rc, reg_fail(ld, "set twice: in the tool and in its \"policy\" (keep one)"));
        reg_where_pop(&ld->at, mk);
    }
    reg_where_pop(&ld->at, m);
    if (named == NULL)
        return rc;
    m = reg_where_key(&ld->at, "adapter");
    const char *want = tool->adapter ? reg_adapters[tool->adapter].name : NULL;
    if (!json_is_string(named) || want == NULL || strcmp(json_string_value(named), want) != 0)
        rc = reg_rc(rc, reg_fail(ld, "expected the name of the tool's adapter key (%s%s%s), got %s", want ? "\"" : "",
                                 want ? want : "it has none", want ? "\"" : "", GOT(named)));
    reg_where_pop(&ld->at, m);
    return rc;
}

/*
 * One tool: starts from a copy of the defaults, reads the name first (so
 * every later message can say which tool), registers it in the index
 * (a second tool of the same name is an error here), then the rest of its
 * keys by its form (tool_form), MCP annotations, its "run" entries, its
 * parameters, then the adapter rules.
 */
static int server_policy(loader_t *ld, tp_tool_t *tool, const char *server, json_t *spec, const char *mcp_name);

static int parse_tool(loader_t *ld, json_t *t, size_t i, size_t pos, tp_tool_t *tool, const char *server, json_t *spec,
                      json_t *listed)
{
    bool imported = server != NULL;
    char got[96];
    tp_registry_t *reg = ld->reg;
    mark_t m = {ld->at.ptr_len, ld->at.key_len};
    if (!imported)
        reg_where_index(&ld->at, pos); /* an imported tool's place is its server's, set by the caller */
    tool->index = i;
    tool->pos = pos;
    tool->line = !imported && ld->tool_lines ? ld->tool_lines[pos] : tp_json_line(ld->text, ld->len, ld->at.ptr);
    ld->adapter_dir = reg->dir;
    if (!json_is_object(t))
        return reg_fail(ld, "expected a tool object, got %s", GOT(t));
    if (reg_policy_copy(&tool->policy, &reg->defaults) < 0)
        return reg_fail_oom(ld);

    form_t form = imported ? FORM_TOOLPOOL : tool_form(t);
    mark_t mt = {ld->at.ptr_len, ld->at.key_len};
    json_t *decl = t; /* the object holding the name */
    if (form == FORM_OPENAI || form == FORM_OPENAI_FLAT) {
        json_t *type = json_object_get(t, "type");
        if (!json_is_string(type)) { /* a string other than "function" is a built-in tool, skipped before */
            reg_where_key(&ld->at, "type");
            return reg_fail(ld, "expected \"function\" (only function tools run in toolpool), got %s", GOT(type));
        }
    }
    if (form == FORM_OPENAI) {
        decl = json_object_get(t, "function");
        reg_where_key(&ld->at, "function");
        if (!json_is_object(decl))
            return reg_fail(ld, "expected an object like {\"name\": ..., \"parameters\": {...}}, got %s", GOT(decl));
    }
    json_t *name = json_object_get(decl, "name");
    if (name == NULL)
        return reg_fail(ld, "missing required key \"name\"");
    reg_where_key(&ld->at, "name");
    if (!json_is_string(name) || !reg_name_ok(json_string_value(name)))
        return reg_fail(ld, "expected a name of letters, digits, '_', '.' or '-', at most %d bytes, got %s",
                        TP_TOOL_NAME_MAX, GOT(name));
    const tp_tool_t *prev = tp_registry_find(reg, json_string_value(name));
    if (prev != NULL && prev->mcp_server == NULL)
        return reg_fail(ld, "duplicate tool name %s (already declared as tools[%zu] on line %d)", GOT(name), prev->pos,
                        prev->line);
    if (prev != NULL)
        return reg_fail(ld, "duplicate tool name %s (already imported from mcp_servers.%s on line %d)", GOT(name),
                        prev->mcp_server, prev->line);
    tool->name = strdup(json_string_value(name));
    if (tool->name == NULL)
        return reg_fail_oom(ld);
    reg_index_put(reg, i);
    reg_where_pop(&ld->at, mt);
    char note[300];
    snprintf(note, sizeof note, " (%s)", tool->name);
    reg_where_note(&ld->at, note);

    const key_table_t *tab = form == FORM_OPENAI        ? &reg_openai_table
                             : form == FORM_OPENAI_FLAT ? &reg_openai_flat_table
                             : form == FORM_MCP         ? &reg_mcp_decl_table
                                                        : &reg_tool_table;
    int rc = reg_parse_object(ld, t, tab, tool);
    if (rc == 0 && form == FORM_TOOLPOOL)
        rc = check_own_form(ld, t, tool);
    if (form == FORM_MCP || listed != NULL)
        rc = reg_rc(rc, read_mcp_decl(ld, form == FORM_MCP ? t : listed, tool, listed != NULL));
    const char *mcp_name = json_string_value(json_object_get(json_object_get(t, "mcp"), "tool"));
    if (imported && rc == 0) {
        /* the server's blocks before the "run" entries, which win */
        where_t here = ld->at;
        rc = server_policy(ld, tool, server, spec, mcp_name);
        ld->at = here;
    }
    rc = reg_rc(rc, apply_run(ld, tool));
    /* MCP reads an inputSchema without "$schema" as 2020-12 */
    static const char *const at_openai[] = {"function", "parameters", NULL}, *const at_mcp[] = {"inputSchema", NULL},
                             *const at_own[] = {"parameters", NULL};
    if (rc == 0)
        rc = compile_parameters(ld, tool, form == FORM_MCP ? TP_JSONSCHEMA_2020_12 : 0,
                                form == FORM_OPENAI ? at_openai
                                : form == FORM_MCP  ? at_mcp
                                                    : at_own);
    if (rc < 0)
        return rc;
    if (tool->adapter == 0 && form != FORM_TOOLPOOL)
        return reg_fail(ld,
                        "no adapter: the tool is declared, and its settings are not: add \"run\": {\"%s\": "
                        "{\"exec\": [...]}} (or \"plugin\", \"mcp\", \"http\") beside the tools or in the policy "
                        "file (--policy)",
                        tool->name);
    if (tool->adapter == 0)
        return reg_fail(ld, "no adapter (expected exactly one of \"exec\", \"plugin\", \"mcp\", "
                            "\"http\")");
    if (!reg_adapters[tool->adapter].available) {
        char list[64];
        return FAIL_AT(ld, tool, reg_adapters[tool->adapter].name,
                       "the %s adapter is not available in this build (%s are)", reg_adapters[tool->adapter].name,
                       available_adapters(list, sizeof list));
    }
    if (tool->connect_timeout_us && tool->adapter != TP_ADAPTER_HTTP)
        return FAIL_AT(ld, tool, "connect_timeout", "only an http tool has a connect timeout (this one is %s)",
                       reg_adapters[tool->adapter].name);
    bool flies = tool->adapter == TP_ADAPTER_HTTP || tool->adapter == TP_ADAPTER_MCP;
    if (tool->max_in_flight && !flies)
        return FAIL_AT(ld, tool, "max_in_flight",
                       "only an http or mcp tool's calls share a worker (this one is %s: one call a worker)",
                       reg_adapters[tool->adapter].name);
    if (flies && tool->max_in_flight == 0)
        tool->max_in_flight = TP_MAX_IN_FLIGHT_DEFAULT;
    if (tool->adapter == TP_ADAPTER_HTTP && (rc = reg_http_finish(ld, tool)) < 0)
        return rc;
    settle_idempotent(ld, t, tool, spec, mcp_name);
    if ((rc = settle_version(ld, tool, server)) < 0)
        return rc;
    /* an MCP server runs in the registry's folder unless its cwd says otherwise, as an exec tool does */
    if (tool->adapter == TP_ADAPTER_MCP && tool->mcp_cwd == NULL && (tool->mcp_cwd = strdup(ld->adapter_dir)) == NULL)
        return reg_fail_oom(ld);
    if (tool->cwd && tool->adapter != TP_ADAPTER_EXEC)
        return FAIL_AT(ld, tool, "cwd", "only an exec tool has a working directory (this one is %s)",
                       reg_adapters[tool->adapter].name);
    if (tool->cwd) {
        struct stat st;
        int se = stat(tool->cwd, &st) != 0 ? errno : 0;
        if (se || !S_ISDIR(st.st_mode))
            return FAIL_AT(ld, tool, "cwd", "%s is not a directory%s%s", tool->cwd, se ? ": " : "",
                           se ? strerror(se) : "");
    } else if (tool->adapter == TP_ADAPTER_EXEC && (tool->cwd = strdup(ld->adapter_dir)) == NULL) {
        return reg_fail_oom(ld);
    }
    if (tool->description == NULL && (tool->description = strdup("")) == NULL)
        return reg_fail_oom(ld);
    reg_where_pop(&ld->at, m);
    return 0;
}

/*
 * Layers a server's policy blocks on an imported tool: the server's
 * "defaults", then the tool's own entry in the server's "tools", each key
 * by key over what it has (the registry's defaults). Both were checked
 * in place by check_server_policy (import.c), so only a second look at
 * max_output can fail here.
 */
static int server_policy(loader_t *ld, tp_tool_t *tool, const char *server, json_t *spec, const char *mcp_name)
{
    json_t *blocks[2] = {json_object_get(spec, "defaults"), json_object_get(json_object_get(spec, "tools"), mcp_name)};
    for (int b = 0; b < 2; b++) {
        if (blocks[b] == NULL)
            continue;
        reg_where_pop(&ld->at, (mark_t){0, 0});
        reg_where_key(&ld->at, "mcp_servers");
        reg_where_key(&ld->at, server);
        reg_where_key(&ld->at, b == 0 ? "defaults" : "tools");
        if (b == 1)
            reg_where_key(&ld->at, mcp_name);
        int rc = reg_parse_object(ld, blocks[b], &reg_policy_table, &tool->policy);
        if (rc == 0)
            rc = reg_check_output_once(ld, blocks[b]);
        if (rc < 0)
            return rc;
    }
    reg_where_pop(&ld->at, (mark_t){0, 0});
    return 0;
}

/*
 * Whether a "tools" entry is one of OpenAI's built-in tools
 * ({"type": "web_search_preview"}, "file_search", "code_interpreter"...):
 * the model's provider runs those, not toolpool. An OpenAI tool list
 * copied as it is may hold them beside its function tools.
 */
static bool openai_builtin(json_t *t)
{
    json_t *type = json_object_get(t, "type");
    return json_is_string(type) && strcmp(json_string_value(type), "function") != 0;
}

/*
 * Says on stderr that the entry at pos, a built-in tool, is left out,
 * naming its type and its place: "FILE:LINE: tools[2]: ...".
 */
static void warn_builtin(loader_t *ld, json_t *t, size_t pos)
{
    mark_t m = reg_where_index(&ld->at, pos);
    int line = ld->tool_lines ? ld->tool_lines[pos] : tp_json_line(ld->text, ld->len, ld->at.ptr);
    char msg[400], one[TP_WHERE_MAX + 512];
    snprintf(msg, sizeof msg,
             "skipped: an OpenAI built-in tool of type \"%.200s\", which its provider runs (only function tools "
             "run in toolpool)",
             json_string_value(json_object_get(t, "type")));
    reg_report(one, sizeof one, ld->file, line, ld->at.key, msg);
    tp_log_warn("registry.builtin_skipped", "%s", one);
    reg_where_pop(&ld->at, m);
}

/*
 * Sizes the tool array and the name index from the declared tools (less
 * OpenAI's built-in tools, each skipped with a warning) and the imported
 * ones, then reads each in order: the declared first, then each server's,
 * in the order they were listed.
 */
int reg_parse_tools(loader_t *ld)
{
    tp_registry_t *reg = ld->reg;
    size_t listed = json_array_size(ld->tools_json), nd = listed;
    for (size_t i = 0; i < listed; i++)
        nd -= openai_builtin(json_array_get(ld->tools_json, i));
    size_t n = nd + json_array_size(ld->imported);
    reg->tools = calloc(n ? n : 1, sizeof *reg->tools);
    reg->index = reg_index_new(n);
    if (reg->tools == NULL || reg->index == NULL)
        return reg_fail_oom(ld);
    reg->n_tools = n;
    if (listed > 0 && (ld->tool_lines = calloc(listed, sizeof *ld->tool_lines)) != NULL &&
        tp_json_element_lines(ld->text, ld->len, ld->tools_at_root ? "" : "/tools", ld->tool_lines, listed) < listed) {
        free(ld->tool_lines); /* not the array jansson read: ask for each line */
        ld->tool_lines = NULL;
    }
    int rc = 0;
    mark_t m = {0, 0};
    if (!ld->tools_at_root)
        m = reg_where_key(&ld->at, "tools");
    for (size_t pos = 0, i = 0; pos < listed; pos++) {
        json_t *t = json_array_get(ld->tools_json, pos);
        if (openai_builtin(t)) {
            warn_builtin(ld, t, pos);
            continue;
        }
        mark_t mi = {ld->at.ptr_len, ld->at.key_len};
        /* reported; on to the next tool */
        rc = reg_rc(rc, parse_tool(ld, t, i, pos, &reg->tools[i], NULL, NULL, NULL));
        reg_where_pop(&ld->at, mi);
        i++;
    }
    reg_where_pop(&ld->at, m);
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
        reg_where_pop(&ld->at, (mark_t){0, 0});
        reg_where_key(&ld->at, "mcp_servers");
        reg_where_key(&ld->at, server);
        reg->tools[i].mcp_server = strdup(server);
        if (reg->tools[i].mcp_server == NULL)
            return reg_fail_oom(ld);
        rc = reg_rc(rc,
                    parse_tool(ld, t, i, i, &reg->tools[i], server, spec, json_array_get(ld->imported_listed, i - nd)));
    }
    reg_where_pop(&ld->at, (mark_t){0, 0});
    return rc;
}

/*
 * Every "run" entry names a declared tool: one that names none is a typo
 * or a tool left out, and its settings would silently apply to nothing.
 */
int reg_check_run_names(loader_t *ld)
{
    int rc = 0;
    for (int f = 0; f < 2; f++) {
        json_t *block = f == 0 ? ld->run : ld->prun;
        const char *k;
        json_t *v;
        json_object_foreach(block, k, v) {
            if (tp_registry_find(ld->reg, k) != NULL)
                continue;
            reg_where_pop(&ld->at, (mark_t){0, 0});
            ld->in_policy = f == 1;
            reg_where_key(&ld->at, "run");
            reg_where_key(&ld->at, k);
            rc = reg_rc(rc, reg_fail(ld,
                                     "no tool \"%s\" is declared (a \"run\" entry holds the settings of a tool "
                                     "declared in %s)",
                                     k, ld->tools_at_root ? "the registry's list" : "\"tools\""));
            ld->in_policy = false;
        }
    }
    reg_where_pop(&ld->at, (mark_t){0, 0});
    return rc;
}

/* Whether two string arrays (NULL-terminated, or NULL: none) say the same. */
static bool same_strings(char **a, char **b)
{
    for (; a && b && *a && *b; a++, b++)
        if (strcmp(*a, *b) != 0)
            return false;
    return (a == NULL || *a == NULL) && (b == NULL || *b == NULL);
}

/*
 * Numbers the MCP servers the tools name: tools with one command, env and
 * cwd share a server (mcp_server_id), and its instances are the most any
 * of them asks for (1 when none does).
 */
void reg_number_servers(tp_registry_t *reg)
{
    reg->n_mcp_servers = 0;
    for (size_t i = 0; i < reg->n_tools; i++) {
        tp_tool_t *t = &reg->tools[i];
        if (t->adapter != TP_ADAPTER_MCP)
            continue;
        t->mcp_server_id = -1;
        for (size_t k = 0; k < i && t->mcp_server_id < 0; k++) {
            const tp_tool_t *o = &reg->tools[k];
            if (o->adapter == TP_ADAPTER_MCP && same_strings(o->mcp_command, t->mcp_command) &&
                same_strings(o->mcp_env, t->mcp_env) && strcmp(o->mcp_cwd, t->mcp_cwd) == 0 &&
                o->mcp_protocol == t->mcp_protocol)
                t->mcp_server_id = o->mcp_server_id;
        }
        if (t->mcp_server_id < 0)
            t->mcp_server_id = (int)reg->n_mcp_servers++;
    }
    /* instances: the most any tool of the server says, given to each (a pass to find it, one to give it) */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < reg->n_tools; i++) {
            tp_tool_t *t = &reg->tools[i], *first = NULL;
            if (t->adapter != TP_ADAPTER_MCP)
                continue;
            for (size_t k = 0; k <= i && first == NULL; k++)
                if (reg->tools[k].adapter == TP_ADAPTER_MCP && reg->tools[k].mcp_server_id == t->mcp_server_id)
                    first = &reg->tools[k];
            if (pass == 0 && t->mcp_instances > first->mcp_instances)
                first->mcp_instances = t->mcp_instances;
            else if (pass == 1)
                t->mcp_instances = first->mcp_instances ? first->mcp_instances : 1;
        }
}

/* A registry with no tool at all is an error, at "tools" or at the top. */
int reg_check_some_tools(loader_t *ld)
{
    if (ld->reg->n_tools > 0)
        return 0;
    reg_where_pop(&ld->at, (mark_t){0, 0});
    if (ld->tools_json == NULL && ld->servers_json == NULL)
        return reg_fail(ld, "missing required key \"tools\"");
    if (ld->servers_json == NULL && json_array_size(ld->tools_json) > 0) {
        if (!ld->tools_at_root)
            reg_where_key(&ld->at, "tools");
        return reg_fail(ld, "no function tool: the list holds only OpenAI built-in tools, each skipped");
    }
    if (ld->servers_json == NULL) {
        reg_where_key(&ld->at, "tools");
        return reg_fail(ld, "expected a non-empty array of tools, got []");
    }
    reg_where_key(&ld->at, "mcp_servers");
    return reg_fail(ld, "no tools: \"tools\" declares none and \"mcp_servers\" names no server");
}
