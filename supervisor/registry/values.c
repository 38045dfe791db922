/*
 * One value, read by its key table row's type into the field the row
 * names: durations, sizes, bounded numbers, kind and class masks, fallback
 * lists and their hops, argv and environment vectors, strings and paths,
 * "schema_refs", the adapter keys, and the top-level blocks read later.
 */
#include "registry_internal.h"

#include "jsonschema.h"
#include "mcpstdio.h"
#include "taxonomy.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return reg_fail(ld, "must be %s %.15g, got %s", excl ? ">" : ">=", s->min, GOT(v));
    double max = s->max;
    if (max == 0 && s->type == K_UINT && s->size == sizeof(uint32_t))
        max = UINT32_MAX;
    if (max > 0 && x > max)
        return reg_fail(ld, "must be <= %.15g, got %s", max, GOT(v));
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
        return reg_fail(ld, "expected an array of kind names like [\"Timeout\"], got %s", GOT(v));
    uint64_t bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        mark_t m = reg_where_index(&ld->at, i);
        if (!json_is_string(e))
            return reg_fail(ld, "expected a kind name, got %s", GOT(e));
        tp_kind_t k = tp_kind_from_name(json_string_value(e));
        if (k == TP_KIND_OTHER)
            return reg_fail(ld, "unknown kind %s (expected one of %s)", GOT(e), transient_kinds(list, sizeof list));
        if (tp_kind_class(k) != TP_CLASS_TRANSIENT)
            return reg_fail(ld, "%s is %s and is never retried (expected one of %s)", GOT(e),
                            tp_class_name(tp_kind_class(k)), transient_kinds(list, sizeof list));
        bits |= KIND_BIT(k);
        reg_where_pop(&ld->at, m);
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
        return reg_fail(ld, "expected an array of classes like [\"transient\"], got %s", GOT(v));
    uint32_t bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        mark_t m = reg_where_index(&ld->at, i);
        const char *name = json_string_value(e);
        int c = TP_CLASS_TRANSIENT;
        for (; name != NULL && c <= TP_CLASS_GUARD; c++)
            if (strcmp(name, tp_class_name((tp_class_t)c)) == 0)
                break;
        if (name == NULL || c > TP_CLASS_GUARD)
            return reg_fail(ld, "expected one of %s, got %s", expect, GOT(e));
        bits |= CLASS_BIT(c);
        reg_where_pop(&ld->at, m);
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
        return reg_fail(ld, "expected an object of {\"key\": \"/pointer\"} into the call's args, got %s", GOT(v));
    const char *k;
    json_t *p;
    json_object_foreach(v, k, p) {
        mark_t m = reg_where_key(&ld->at, k);
        const char *s = json_string_value(p);
        if (s == NULL || (s[0] != '\0' && s[0] != '/'))
            return reg_fail(ld, "expected a JSON Pointer into the call's args, like \"/q\", got %s", GOT(p));
        reg_where_pop(&ld->at, m);
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
        mark_t m = reg_where_key(&ld->at, k);
        if (strcmp(k, "tool") == 0) {
            if (!json_is_string(v) || json_string_length(v) == 0)
                return reg_fail(ld, "expected a tool name, got %s", GOT(v));
            *name = json_string_value(v);
        } else if (strcmp(k, "args") == 0) {
            int rc = parse_hop_args(ld, v);
            if (rc < 0)
                return rc;
            *map = v;
        } else {
            return reg_fail(ld, "unknown key (a hop is {\"tool\": NAME, \"args\": {KEY: \"/pointer\"}})");
        }
        reg_where_pop(&ld->at, m);
    }
    if (*name == NULL)
        return reg_fail(ld, "missing required key \"tool\"");
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
        return reg_fail(ld, "expected a tool name or an array of tool names, got %s", GOT(v));
    size_t n = one ? 1 : json_array_size(v);
    char **out = calloc(n + 1, sizeof *out);
    if (out == NULL)
        return reg_fail_oom(ld);
    if (maps) {
        reg_free_maps(*maps, *count);
        *maps = NULL;
    }
    reg_free_strv(*names, *count);
    *names = out;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = one ? one : json_array_get(v, i);
        mark_t m = {0, 0};
        if (one == NULL)
            m = reg_where_index(&ld->at, i);
        const char *name = json_string_value(e);
        json_t *map = NULL;
        if (maps && json_is_object(e)) {
            int rc = parse_hop(ld, e, &name, &map);
            if (rc < 0)
                return rc;
        } else if (!json_is_string(e) || json_string_length(e) == 0) {
            return reg_fail(ld,
                            maps ? "expected a tool name or {\"tool\": NAME, \"args\": {...}}, got %s"
                                 : "expected a tool name, got %s",
                            GOT(e));
        }
        if (map) {
            if (*maps == NULL && (*maps = calloc(n, sizeof **maps)) == NULL)
                return reg_fail_oom(ld);
            (*maps)[i] = json_incref(map);
        }
        out[i] = strdup(name);
        if (out[i] == NULL)
            return reg_fail_oom(ld);
        *count = i + 1;
        if (one == NULL)
            reg_where_pop(&ld->at, m);
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
        return reg_fail(ld, "expected an argv array like [\"./tool\", \"--flag\"], got %s", GOT(v));
    char **av = calloc(n + 1, sizeof *av);
    if (av == NULL)
        return reg_fail_oom(ld);
    reg_free_argv(*out);
    *out = av;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        mark_t m = reg_where_index(&ld->at, i);
        if (!json_is_string(e) || (i == 0 && json_string_length(e) == 0))
            return reg_fail(ld, "expected %s, got %s", i == 0 ? "a program" : "a string", GOT(e));
        const char *s = json_string_value(e);
        if (i == 0 && (flags & F_PATH) && strchr(s, '/') != NULL)
            av[i] = resolve_path(ld->dir, s);
        else
            av[i] = strdup(s);
        if (av[i] == NULL)
            return reg_fail_oom(ld);
        reg_where_pop(&ld->at, m);
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
        return reg_fail(ld, "expected a%s string, got %s", (s->flags & F_NONEMPTY) ? " non-empty" : "", GOT(v));
    if ((s->flags & F_URL) && strncmp(str, "http://", 7) != 0 && strncmp(str, "https://", 8) != 0)
        return reg_fail(ld, "expected an http:// or https:// URL, got %s", GOT(v));
    char *copy = (s->flags & F_PATH) ? resolve_path(ld->dir, str) : strdup(str);
    if (copy == NULL)
        return reg_fail_oom(ld);
    free(*out);
    *out = copy;
    return 0;
}

/*
 * The adapter keys. A second one is an error at the second key; exec's value
 * is the argv itself, the others are small objects with their own tables.
 * Whether this build can run the adapter is decided after the whole tool
 * has been read, so shape errors come first.
 */
static int parse_adapter(loader_t *ld, const key_spec_t *s, json_t *v, tp_tool_t *tool)
{
    if (tool->adapter != 0)
        return reg_fail(ld, "a tool has exactly one adapter, and this one already has \"%s\"",
                        reg_adapters[tool->adapter].name);
    tool->adapter = s->adapter;
    ld->adapter_dir = ld->dir;
    if (s->sub == NULL)
        return parse_argv(ld, v, s->flags, &tool->argv, &tool->argc);
    return reg_parse_object(ld, v, s->sub, tool);
}

/*
 * "tools" is only checked here; reg_parse_tools reads it once "defaults" is
 * known. It may be empty when "mcp_servers" brings tools (reg_check_some_tools).
 */
static int parse_tools_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_array(v))
        return reg_fail(ld, "expected a non-empty array of tools, got %s", GOT(v));
    ld->tools_json = v;
    return 0;
}

/* "run": {TOOL: {settings}}, each entry read with its tool (parse_tool). */
static int parse_run_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_object(v))
        return reg_fail(ld,
                        "expected an object of tool names, each with its settings like "
                        "{\"search_kb\": {\"exec\": [\"./kb\"], \"timeout\": \"8s\"}}, got %s",
                        GOT(v));
    if (ld->in_policy)
        ld->prun = v;
    else
        ld->run = v;
    return 0;
}

/* "mcp_servers": an object of servers, read by reg_import_servers once "defaults" is known. */
static int parse_servers_value(loader_t *ld, json_t *v)
{
    char got[96];
    if (!json_is_object(v))
        return reg_fail(ld, "expected an object of MCP servers like {\"fs\": {\"command\": [...]}}, got %s", GOT(v));
    ld->servers_json = v;
    return 0;
}

/* A variable's name: anything but empty or holding '='. */
static bool env_name(const char *k)
{
    return *k != '\0' && strchr(k, '=') == NULL;
}

/* A header's name: a token of RFC 9110 (letters, digits and !#$%&'*+-.^_`|~). */
static bool header_name(const char *k)
{
    if (*k == '\0')
        return false;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || strchr("!#$%&'*+-.^_`|~", *k) != NULL))
            return false;
    return true;
}

/* The two objects of string pairs: an mcp server's "env", an http tool's "headers". */
typedef struct {
    const char *object; /* what the object is, with an example */
    bool (*name_ok)(const char *k);
    const char *bad_name;
    bool one_line; /* a value cannot hold a line break */
} pairs_t;

static const pairs_t env_pairs = {"environment variables like {\"HOME\": \"/tmp\"}", env_name,
                                  "a variable name without '='", false};
static const pairs_t header_pairs = {"headers like {\"Authorization\": \"Bearer ${env:TOKEN}\"}", header_name,
                                     "a header name (letters, digits and !#$%&'*+-.^_`|~)", true};

/* {"NAME": "value"} -> "NAME=value" entries, NULL-terminated. */
static int parse_pairs(loader_t *ld, json_t *v, const pairs_t *kind, char ***out)
{
    char got[96];
    if (!json_is_object(v))
        return reg_fail(ld, "expected an object of %s, got %s", kind->object, GOT(v));
    char **pairs = calloc(json_object_size(v) + 1, sizeof *pairs);
    if (pairs == NULL)
        return reg_fail_oom(ld);
    reg_free_argv(*out);
    *out = pairs;
    size_t i = 0;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) {
        mark_t m = reg_where_key(&ld->at, k);
        if (!kind->name_ok(k))
            return reg_fail(ld, "expected %s", kind->bad_name);
        const char *val = json_string_value(e);
        if (val == NULL)
            return reg_fail(ld, "expected a string, got %s", GOT(e));
        if (kind->one_line && strpbrk(val, "\r\n") != NULL)
            return reg_fail(ld, "a header's value cannot hold a line break");
        size_t n = strlen(k) + json_string_length(e) + 2;
        if ((pairs[i] = malloc(n)) == NULL)
            return reg_fail_oom(ld);
        snprintf(pairs[i++], n, "%s=%s", k, val);
        reg_where_pop(&ld->at, m);
    }
    return 0;
}

/* An array of names (non-empty strings): an http tool's "query". */
static int parse_argnames(loader_t *ld, json_t *v, char ***out)
{
    char got[96];
    if (!json_is_array(v))
        return reg_fail(ld, "expected an array of argument names like [\"q\", \"limit\"], got %s", GOT(v));
    size_t n = json_array_size(v);
    char **names = calloc(n + 1, sizeof *names);
    if (names == NULL)
        return reg_fail_oom(ld);
    reg_free_argv(*out);
    *out = names;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        mark_t m = reg_where_index(&ld->at, i);
        if (!json_is_string(e) || json_string_length(e) == 0)
            return reg_fail(ld, "expected an argument's name, got %s", GOT(e));
        if ((names[i] = strdup(json_string_value(e))) == NULL)
            return reg_fail_oom(ld);
        reg_where_pop(&ld->at, m);
    }
    return 0;
}

/*
 * "schema_refs": {URI: FILE}. Each file (relative to the registry) is read
 * now, so a missing or broken one is an error here, naming its URI; the
 * documents are kept by URI (a trailing "#" dropped) for schema_load.
 */
static int parse_schema_refs(loader_t *ld, json_t *v, json_t **out)
{
    char got[96];
    if (!json_is_object(v))
        return reg_fail(ld, "expected an object of URI: file, got %s", GOT(v));
    json_t *docs = json_object();
    if (docs == NULL)
        return reg_fail_oom(ld);
    json_decref(*out);
    *out = docs;
    const char *uri;
    json_t *file;
    json_object_foreach(v, uri, file) {
        mark_t m = reg_where_key(&ld->at, uri);
        if (!json_is_string(file) || json_string_length(file) == 0)
            return reg_fail(ld, "expected a file name, got %s", GOT(file));
        char *path = resolve_path(ld->dir, json_string_value(file));
        if (path == NULL)
            return reg_fail_oom(ld);
        json_error_t jerr;
        json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (doc == NULL) {
            int rc = reg_fail(ld, "cannot read the schema %s: %s (line %d)", path, jerr.text, jerr.line);
            free(path);
            return rc;
        }
        free(path);
        size_t n = strcspn(uri, "#");
        if (json_object_setn_new(docs, uri, n, doc) < 0)
            return reg_fail_oom(ld);
        reg_where_pop(&ld->at, m);
    }
    return 0;
}

const char *const reg_jitter_names[3] = {
    [TP_JITTER_FULL] = "full",
    [TP_JITTER_EQUAL] = "equal",
    [TP_JITTER_NONE] = "none",
};

/* One value, by its row's type, into base + row offset. */
int reg_parse_key(loader_t *ld, const key_spec_t *s, json_t *v, void *base)
{
    char got[96];
    int rc;
    void *field = (char *)base + s->off;
    switch (s->type) {
    case K_SKIP:
        return 0;
    case K_DURATION: {
        uint64_t us;
        if (!json_is_string(v) || tp_duration_parse(json_string_value(v), &us) < 0)
            return reg_fail(ld, "expected a duration like \"8s\", got %s", GOT(v));
        if ((rc = check_bounds(ld, s, (double)us, v)) < 0)
            return rc;
        reg_store_uint(field, s->size, us);
        return 0;
    }
    case K_BYTES: {
        uint64_t bytes;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            bytes = (uint64_t)json_integer_value(v);
        else if (!json_is_string(v) || tp_size_parse(json_string_value(v), &bytes) < 0)
            return reg_fail(ld,
                            "expected a size like \"512M\" (K, M, G, T: powers of 1024) or a number of "
                            "bytes, got %s",
                            GOT(v));
        if ((rc = check_bounds(ld, s, (double)bytes, v)) < 0)
            return rc;
        reg_store_uint(field, s->size, bytes);
        return 0;
    }
    case K_UINT:
        if (!json_is_integer(v))
            return reg_fail(ld, "expected an integer, got %s", GOT(v));
        if ((rc = check_bounds(ld, s, (double)json_integer_value(v), v)) < 0)
            return rc;
        reg_store_uint(field, s->size, (uint64_t)json_integer_value(v));
        return 0;
    case K_NUMBER:
        if (!json_is_number(v))
            return reg_fail(ld, "expected a number, got %s", GOT(v));
        if ((rc = check_bounds(ld, s, json_number_value(v), v)) < 0)
            return rc;
        *(double *)field = json_number_value(v);
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v))
            return reg_fail(ld, "expected true or false, got %s", GOT(v));
        *(bool *)field = json_is_true(v);
        return 0;
    case K_JITTER:
        for (size_t j = 0; j < sizeof reg_jitter_names / sizeof reg_jitter_names[0]; j++) {
            if (json_is_string(v) && strcmp(json_string_value(v), reg_jitter_names[j]) == 0) {
                *(tp_jitter_t *)field = (tp_jitter_t)j;
                return 0;
            }
        }
        return reg_fail(ld, "expected one of \"full\", \"equal\", \"none\", got %s", GOT(v));
    case K_SCOPE:
        if (json_is_string(v) && strcmp(json_string_value(v), "job") == 0)
            reg_store_uint(field, s->size, TP_SCOPE_JOB);
        else if (json_is_string(v) && strcmp(json_string_value(v), "global") == 0)
            reg_store_uint(field, s->size, TP_SCOPE_GLOBAL);
        else
            return reg_fail(ld, "expected \"job\" (a job's own repeats) or \"global\" (every job on the store), got %s",
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
            return reg_fail(ld, "expected a JSON Schema (an object or a boolean), got %s", GOT(v));
        json_decref(*slot);
        *slot = json_incref(v);
        return 0;
    }
    case K_DIALECT: {
        tp_jsonschema_dialect_t d;
        if (!json_is_string(v) || tp_jsonschema_dialect_parse(json_string_value(v), &d) < 0)
            return reg_fail(ld, "expected \"draft-07\" or \"2020-12\", got %s", GOT(v));
        *(int *)field = (int)d;
        return 0;
    }
    case K_FORMATS:
        if (json_is_string(v) && strcmp(json_string_value(v), "annotate") == 0)
            *(int *)field = TP_FORMATS_ANNOTATE;
        else if (json_is_string(v) && strcmp(json_string_value(v), "assert") == 0)
            *(int *)field = TP_FORMATS_ASSERT;
        else
            return reg_fail(ld, "expected \"annotate\" or \"assert\", got %s", GOT(v));
        return 0;
    case K_MCP_ERA:
        for (int e = 0; e < TP_MCP_ERA_N; e++)
            if (json_is_string(v) && strcmp(json_string_value(v), tp_mcp_era_names[e]) == 0) {
                *(int *)field = e;
                return 0;
            }
        return reg_fail(ld,
                        "expected \"auto\" (found by a server/discover probe), \"2026-07-28\" or \"2025-11-25\" (the "
                        "initialize handshake), got %s",
                        GOT(v));
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
                return reg_fail(ld, "expected an object, or false to turn it off, got %s", GOT(v));
            *(bool *)((char *)base + s->off_n) = false;
        }
        return reg_parse_object(ld, v, s->sub, field);
    case K_ADAPTER:
        return parse_adapter(ld, s, v, base);
    case K_TOOLS:
        return parse_tools_value(ld, v);
    case K_SERVERS:
        return parse_servers_value(ld, v);
    case K_RUN:
        return parse_run_value(ld, v);
    case K_ENV:
        return parse_pairs(ld, v, &env_pairs, (char ***)field);
    case K_HEADERS:
        return parse_pairs(ld, v, &header_pairs, (char ***)field);
    case K_ARGNAMES:
        return parse_argnames(ld, v, (char ***)field);
    }
    return reg_fail(ld, "internal error: key type %d", (int)s->type);
}
