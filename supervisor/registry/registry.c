/*
 * The registry: tools.json loaded, a tool found by name, the registry
 * freed. The file is read once, parsed by jansson, and then walked against
 * the key tables (keys.c): one row per key saying its type, its bounds,
 * its built-in default and where in the C structs it lands, so a new
 * policy knob is one row.
 *
 * Every rejection names FILE:LINE and the key path (loader.c). The rest of
 * the loader: values.c reads one value by its row's type, policy.c holds
 * durations and a policy's defaults, copies and teardown, tools.c reads
 * the tools in their forms, import.c imports "mcp_servers", fallback.c
 * checks the fallback chains.
 */
#include "registry_internal.h"

#include "jsonschema.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the name index: open addressing, FNV-1a, slots hold index + 1 ---- */

struct tp_index {
    size_t mask;
    size_t *slots;
};

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
tp_index_t *reg_index_new(size_t n)
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
void reg_index_put(tp_registry_t *reg, size_t i)
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
 * path's text (*text, *len; the caller frees it, and keeps it for line
 * numbers) and its JSON, parsed with duplicate keys rejected (*root): the
 * registry file and the policy file alike. 0, or -1 with the error
 * reported against path.
 */
static int load_json(const char *path, char **text, size_t *len, json_t **root, char *err, size_t errlen)
{
    json_error_t jerr;
    char msg[256];
    if ((*text = read_text(path, len)) == NULL) {
        snprintf(msg, sizeof msg, "cannot read: %s", strerror(errno));
        reg_report(err, errlen, path, 0, "", msg);
        return -1;
    }
    if ((*root = json_loadb(*text, *len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
        snprintf(msg, sizeof msg, "invalid JSON: %s (column %d)", jerr.text, jerr.column);
        reg_report(err, errlen, path, jerr.line, "", msg);
        return -1;
    }
    return 0;
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
    char got[96];
    char *ptext = NULL;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL) {
        reg_report(err, errlen, "(null)", 0, "", "no registry path");
        return NULL;
    }
    char *text = NULL;
    if (load_json(path, &text, &ld.len, &root, err, errlen) < 0)
        goto fail;
    ld.text = text;
    ld.root = root;
    if (policy != NULL) {
        ld.pfile = policy;
        if (load_json(policy, &ptext, &ld.plen, &ld.proot, err, errlen) < 0)
            goto fail;
        ld.ptext = ptext;
        if ((ld.pdir = dir_of(policy)) == NULL) {
            char msg[256];
            snprintf(msg, sizeof msg, "cannot resolve its directory: %s", strerror(errno));
            reg_report(err, errlen, policy, 0, "", msg);
            goto fail;
        }
    }
    reg = calloc(1, sizeof *reg);
    if (reg == NULL) {
        reg_report(err, errlen, path, 0, "", "out of memory");
        goto fail;
    }
    ld.reg = reg;
    tp_policy_init(&reg->defaults);
    reg->path = strdup(path);
    reg->dir = dir_of(path);
    if (reg->path == NULL || reg->dir == NULL) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot resolve its directory: %s", strerror(errno));
        reg_report(err, errlen, path, 0, "", msg);
        goto fail;
    }
    ld.dir = reg->dir;
    if (json_is_array(root)) {
        /* an OpenAI tool list, as it is: the tools and nothing else */
        ld.tools_at_root = true;
        ld.tools_json = root;
    } else if (!json_is_object(root)) {
        reg_fail(&ld, "expected an object like {\"tools\": [...]}, or an OpenAI tool list [...], got %s", GOT(root));
        goto fail;
    } else if (json_object_get(root, "jsonrpc") != NULL) {
        reg_where_key(&ld.at, "jsonrpc");
        reg_fail(&ld, "unknown key (a whole JSON-RPC answer: the registry takes its \"result\", {\"tools\": [...]}, "
                      "as it is)");
        reg_finish_errors(&ld);
        goto fail;
    } else {
        reg_parse_object(&ld, root, &reg_top_table, reg);
        reg_check_defaults(&ld);
        reg_where_pop(&ld.at, (mark_t){0, 0});
    }
    if (ld.proot != NULL) {
        ld.in_policy = true;
        ld.dir = ld.pdir;
        if (!json_is_object(ld.proot))
            reg_fail(&ld, "expected an object like {\"run\": {\"TOOL\": {\"exec\": [...]}}}, got %s", GOT(ld.proot));
        else if (reg_parse_object(&ld, ld.proot, &reg_policy_file_table, reg) == 0 &&
                 json_object_get(ld.proot, "defaults") != NULL) {
            reg_where_key(&ld.at, "defaults");
            reg_check_output_once(&ld, json_object_get(ld.proot, "defaults"));
            reg_where_pop(&ld.at, (mark_t){0, 0});
        }
        ld.in_policy = false;
        ld.dir = reg->dir;
    }
    if (ld.n_errors == 0)
        reg_import_servers(&ld); /* starts processes: not for a file known to be wrong */
    reg_where_pop(&ld.at, (mark_t){0, 0});
    reg_parse_tools(&ld);
    bool named = reg->index != NULL;
    for (size_t i = 0; i < reg->n_tools; i++)
        named = named && reg->tools[i].name != NULL;
    if (ld.n_errors == 0)
        reg_check_some_tools(&ld);
    if (named) {
        reg_check_run_names(&ld);
        reg_check_fallbacks(&ld);
    }
    free(ld.tool_lines);
    ld.tool_lines = NULL;
    if (ld.n_errors == 0) {
        reg_number_servers(reg);
        goto out;
    }
    reg_finish_errors(&ld);
fail:
    tp_registry_free(reg);
    reg = NULL;
out:
    json_decref(ld.imported);
    json_decref(ld.imported_listed);
    json_decref(ld.server_versions);
    free(ld.imported_from);
    json_decref(root);
    json_decref(ld.proot);
    free(ld.pdir);
    free(ptext);
    free(text);
    return reg;
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
        free(t->version);
        free(t->version_id);
        json_decref(t->parameters);
        json_decref(t->mcp_decl);
        tp_jsonschema_free(t->schema);
        reg_free_argv(t->argv);
        free(t->plugin_path);
        free(t->cwd);
        reg_free_argv(t->mcp_command);
        free(t->mcp_tool);
        reg_free_argv(t->mcp_env);
        free(t->mcp_cwd);
        free(t->mcp_server);
        free(t->http_url);
        free(t->http_method);
        reg_free_argv(t->http_query);
        reg_free_argv(t->http_headers);
        free(t->http_body);
        free(t->http_ca_file);
        if (t->http_target) /* it may hold a secret */
            explicit_bzero(t->http_target, strlen(t->http_target));
        free(t->http_target);
        for (size_t h = 0; t->http_header_lines && t->http_header_lines[h]; h++)
            explicit_bzero(t->http_header_lines[h], strlen(t->http_header_lines[h]));
        reg_free_argv(t->http_header_lines);
        for (size_t h = 0; t->http_secrets && t->http_secrets[h]; h++)
            explicit_bzero(t->http_secrets[h], strlen(t->http_secrets[h]));
        reg_free_argv(t->http_secrets);
        reg_policy_clear(&t->policy);
    }
    free(reg->tools);
    reg_policy_clear(&reg->defaults);
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
