/*
 * The loader's place in the file and its one way of failing. jansson keeps
 * no positions, so the loader tracks the JSON Pointer of what it is
 * reading, and the key path users read, and asks tp_json_line for the line
 * only when it has something to report: reg_fail() writes "FILE:LINE:
 * KEYPATH: message" for wherever the loader stands. Then an object read
 * against a key table, and the checks that look at a whole policy object.
 */
#include "registry_internal.h"
#include "suggest.h"

#include "jsonpos.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- where the loader is: a JSON Pointer and the key path users read ---- */

/* Appends, truncating silently: a 2 KiB key path only costs a vaguer line. */
void reg_where_add(char *buf, size_t *len, const char *s, size_t n)
{
    if (n > TP_WHERE_MAX - 1 - *len)
        n = TP_WHERE_MAX - 1 - *len;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = '\0';
}

/* Descends into the member name; "~" and "/" are escaped in the pointer. */
mark_t reg_where_key(where_t *w, const char *name)
{
    mark_t m = {w->ptr_len, w->key_len};
    reg_where_add(w->ptr, &w->ptr_len, "/", 1);
    for (const char *c = name; *c != '\0'; c++) {
        if (*c == '~')
            reg_where_add(w->ptr, &w->ptr_len, "~0", 2);
        else if (*c == '/')
            reg_where_add(w->ptr, &w->ptr_len, "~1", 2);
        else
            reg_where_add(w->ptr, &w->ptr_len, c, 1);
    }
    if (w->key_len > 0)
        reg_where_add(w->key, &w->key_len, ".", 1);
    reg_where_add(w->key, &w->key_len, name, strlen(name));
    return m;
}

mark_t reg_where_index(where_t *w, size_t i)
{
    mark_t m = {w->ptr_len, w->key_len};
    char s[32];
    int n = snprintf(s, sizeof s, "/%zu", i);
    reg_where_add(w->ptr, &w->ptr_len, s, (size_t)n);
    n = snprintf(s, sizeof s, "[%zu]", i);
    reg_where_add(w->key, &w->key_len, s, (size_t)n);
    return m;
}

/* Adds text to the key path only, e.g. the tool's name after "tools[2]". */
void reg_where_note(where_t *w, const char *s)
{
    reg_where_add(w->key, &w->key_len, s, strlen(s));
}

void reg_where_pop(where_t *w, mark_t m)
{
    w->ptr_len = m.ptr_len;
    w->ptr[m.ptr_len] = '\0';
    w->key_len = m.key_len;
    w->key[m.key_len] = '\0';
}

/* ---- the loader and its one way of failing ---- */

/* The number of errors written out; the rest are counted, "and N more errors". */
#define TP_REGISTRY_ERRORS_SHOWN 20

/* The one format of every message: "FILE:LINE: KEYPATH: msg", parts left out when unknown. */
void reg_report(char *err, size_t errlen, const char *file, int line, const char *key, const char *msg)
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
 * error is only counted (reg_finish_errors says how many were left out).
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
void reg_finish_errors(loader_t *ld)
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
 * returns rc, so every check reads `return reg_fail(ld, ...)`. The load goes
 * on to find the other errors: reg_parse_object skips to the next key, and
 * reg_parse_tools to the next tool.
 */
static int vfail(loader_t *ld, int rc, const char *fmt, va_list ap)
{
    char msg[1024], one[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const char *file = ld->in_policy ? ld->pfile : ld->file, *text = ld->in_policy ? ld->ptext : ld->text;
    size_t len = ld->in_policy ? ld->plen : ld->len;
    int line = tp_json_line(text, len, ld->at.ptr);
    reg_report(one, sizeof one, file, line, ld->at.key, msg);
    add_error(ld, one);
    return rc;
}

/* A check the file fails: TP_EINVAL. */
int reg_fail(loader_t *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(ld, TP_EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

int reg_fail_code(loader_t *ld, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = vfail(ld, rc, fmt, ap);
    va_end(ap);
    return rc;
}

int reg_fail_oom(loader_t *ld)
{
    return reg_fail_code(ld, TP_ENOMEM, "out of memory");
}

/*
 * A short rendering of a value for "got X": scalars as JSON (strings cut
 * at a character boundary when long), containers by their kind. A real
 * always shows a '.' or exponent so "got 2.0" never reads as an integer.
 */
const char *reg_describe(const json_t *v, char *buf, size_t n)
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

/* ---- an object read against a key table ---- */

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
            return reg_fail(ld, "unknown key (%s)", hints[i].hint);
    if (tab == &reg_policy_file_table && (strcmp(key, "tools") == 0 || strcmp(key, "mcp_servers") == 0))
        return reg_fail(ld, "unknown key (a policy file holds toolpool's settings only: the tools are declared in the "
                            "registry file)");
    if (tab == &reg_openai_table || tab == &reg_openai_fn_table || tab == &reg_openai_flat_table ||
        tab == &reg_mcp_decl_table) {
        void *scratch = NULL;
        if (table_find(&reg_run_table, key, &scratch) != NULL)
            return reg_fail(ld,
                            "unknown key (a toolpool setting: it goes in \"run\": {\"TOOL\": {\"%s\": ...}}, "
                            "beside the tools or in the policy file, so the declaration stays as written)",
                            key);
    }
    const char *best = NULL;
    size_t best_d = strlen(key) >= 5 ? 3 : 2, total = 0; /* a typo or two away */
    for (const key_table_t *t = tab; t != NULL; t = t->next) {
        for (size_t i = 0; i < t->n; i++) {
            if (t == &reg_top_table && t->keys[i].type == K_SKIP)
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
        return reg_fail(ld, "unknown key (did you mean \"%s\"?)", best);
    if (total > 10) /* a list of up to ten keys (the registry's top level) reads at a glance */
        return reg_fail(ld, "unknown key");
    char list[256];
    size_t len = 0;
    list[0] = '\0';
    for (const key_table_t *t = tab; t != NULL; t = t->next) {
        for (size_t i = 0; i < t->n; i++) {
            if (t == &reg_top_table && t->keys[i].type == K_SKIP)
                continue;
            int w = snprintf(list + len, sizeof list - len, "%s\"%s\"", len ? ", " : "", t->keys[i].name);
            if (w > 0 && (size_t)w < sizeof list - len)
                len += (size_t)w;
        }
    }
    return reg_fail(ld, "unknown key (expected one of %s)", list);
}

/*
 * Reads an object against a table, in the file's order (jansson keeps
 * insertion order), so the first problem reported is the first in the
 * file. Then checks the required keys are there.
 */
int reg_parse_object(loader_t *ld, json_t *obj, const key_table_t *tab, void *base)
{
    char got[96];
    if (!json_is_object(obj))
        return reg_fail(ld, "expected an object, got %s", GOT(obj));
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(obj, key, v) {
        void *at = base;
        const key_spec_t *s = table_find(tab, key, &at);
        mark_t m = reg_where_key(&ld->at, key);
        /* reported; the next key may have an error of its own */
        rc = reg_rc(rc, s == NULL ? fail_unknown(ld, tab, key) : reg_parse_key(ld, s, v, at));
        reg_where_pop(&ld->at, m);
    }
    for (const key_table_t *t = tab; t != NULL; t = t->next)
        for (size_t i = 0; i < t->n; i++)
            if ((t->keys[i].flags & F_REQUIRED) && json_object_get(obj, t->keys[i].name) == NULL)
                rc = reg_rc(rc, reg_fail(ld, "missing required key \"%s\"", t->keys[i].name));
    return rc;
}

/*
 * "max_output" and "limits.output" are one cap under two names: an object
 * may set one of them, not both (which one won would be a guess). The
 * loader stands on obj.
 */
int reg_check_output_once(loader_t *ld, json_t *obj)
{
    if (json_object_get(obj, "max_output") == NULL || json_object_get(json_object_get(obj, "limits"), "output") == NULL)
        return 0;
    reg_where_key(&ld->at, "limits");
    reg_where_key(&ld->at, "output");
    return reg_fail(ld, "the same cap as \"max_output\", which is set here too: set one of them");
}

/* reg_check_output_once for "defaults", if there is one. */
int reg_check_defaults(loader_t *ld)
{
    json_t *dflt = json_object_get(ld->root, "defaults");
    if (dflt == NULL)
        return 0;
    mark_t m = reg_where_key(&ld->at, "defaults");
    int rc = reg_check_output_once(ld, dflt);
    if (rc < 0)
        return rc;
    reg_where_pop(&ld->at, m);
    return 0;
}
