/*
 * A tool's settings written back as the registry's files say them: each
 * key of a table, by its row's type, out of the struct reg_parse_key read
 * it into. toolpool's rendering of a tool (toolsdoc.c) is built from it, so
 * the rendering loads again as the same tool, and a new knob, one row in
 * keys.c, is rendered with no more code.
 */
#include "registry_internal.h"

#include "jsonschema.h"
#include "taxonomy.h"

#include <stdio.h>
#include <string.h>

json_t *reg_duration_json(uint64_t us)
{
    char buf[32];
    if (us % 1000000u == 0)
        snprintf(buf, sizeof buf, "%llus", (unsigned long long)(us / 1000000u));
    else if (us % 1000u == 0)
        snprintf(buf, sizeof buf, "%llums", (unsigned long long)(us / 1000u));
    else
        snprintf(buf, sizeof buf, "%lluus", (unsigned long long)us);
    return json_string(buf);
}

static uint64_t load_uint(const void *field, size_t size)
{
    if (size == sizeof(bool))
        return *(const bool *)field;
    if (size == sizeof(uint32_t))
        return *(const uint32_t *)field;
    return *(const uint64_t *)field;
}

/* A NULL-terminated array of strings as a JSON array (NULL: none). */
static json_t *strv_json(char *const *v)
{
    json_t *a = json_array();
    for (; a != NULL && v != NULL && *v != NULL; v++)
        if (json_array_append_new(a, json_string(*v)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* "K=V" entries (K_ENV, K_HEADERS) as {"K": "V"}. */
static json_t *pairs_json(char *const *v)
{
    json_t *o = json_object();
    for (; o != NULL && v != NULL && *v != NULL; v++) {
        const char *eq = strchr(*v, '=');
        if (eq == NULL)
            continue;
        if (json_object_setn_new(o, *v, (size_t)(eq - *v), json_string(eq + 1)) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* The names of the bits set in a kinds (K_KINDS) or classes (K_CLASSES) mask. */
static json_t *mask_json(uint64_t bits, bool kinds)
{
    json_t *a = json_array();
    int last = kinds ? TP_KIND__COUNT - 1 : TP_CLASS_GUARD;
    for (int k = 1; a != NULL && k <= last; k++) {
        if (!(bits & (1ull << k)))
            continue;
        const char *name = kinds ? tp_kind_name((tp_kind_t)k) : tp_class_name((tp_class_t)k);
        if (json_array_append_new(a, json_string(name)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* A fallback list: each hop's name, or {"tool", "args"} for a hop that maps its args. */
static json_t *hops_json(char *const *names, size_t n, json_t *const *maps)
{
    json_t *a = json_array();
    for (size_t k = 0; a != NULL && k < n; k++) {
        json_t *hop = maps != NULL && maps[k] != NULL ? json_pack("{s:s, s:O}", "tool", names[k], "args", maps[k])
                                                      : json_string(names[k]);
        if (json_array_append_new(a, hop) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static bool same_strv(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t k = 0; k < na; k++)
        if (strcmp(a[k], b[k]) != 0)
            return false;
    return true;
}

/*
 * One row's value at base, or NULL when it is the same as at dflt (dflt
 * NULL: when it is not set); *fail when it could not be built.
 */
static json_t *render_key(const key_spec_t *s, const void *base, const void *dflt, bool *fail)
{
    const void *f = (const char *)base + s->off, *d = dflt ? (const char *)dflt + s->off : NULL;
    json_t *v = NULL;
    if (s->flags & F_ALIAS)
        return NULL;
    switch (s->type) {
    case K_DURATION:
    case K_BYTES:
    case K_UINT: {
        uint64_t x = load_uint(f, s->size);
        if (d ? x == load_uint(d, s->size) : x == 0)
            return NULL;
        v = s->type == K_DURATION ? reg_duration_json(x) : json_integer((json_int_t)x);
        break;
    }
    case K_NUMBER:
        if (d ? *(const double *)f == *(const double *)d : *(const double *)f == 0)
            return NULL;
        v = json_real(*(const double *)f);
        break;
    case K_BOOL:
        if (d ? *(const bool *)f == *(const bool *)d : !*(const bool *)f)
            return NULL;
        v = json_boolean(*(const bool *)f);
        break;
    case K_JITTER:
        if (d != NULL && *(const tp_jitter_t *)f == *(const tp_jitter_t *)d)
            return NULL;
        v = json_string(reg_jitter_names[*(const tp_jitter_t *)f]);
        break;
    case K_SCOPE:
        if (d != NULL && load_uint(f, s->size) == load_uint(d, s->size))
            return NULL;
        v = json_string(load_uint(f, s->size) == TP_SCOPE_GLOBAL ? "global" : "job");
        break;
    case K_KINDS:
    case K_CLASSES: {
        uint64_t x = load_uint(f, s->size);
        if (d ? x == load_uint(d, s->size) : x == 0)
            return NULL;
        v = mask_json(x, s->type == K_KINDS);
        break;
    }
    case K_NAMES: {
        char *const *names = *(char *const *const *)f;
        size_t n = *(const size_t *)((const char *)base + s->off_n);
        json_t *const *maps = (s->flags & F_HOPS) ? ((const tp_policy_t *)base)->fallback_args : NULL;
        if (d != NULL && maps == NULL &&
            same_strv(names, n, *(char *const *const *)d, *(const size_t *)((const char *)dflt + s->off_n)))
            return NULL;
        v = hops_json(names, n, maps);
        break;
    }
    case K_JSON: {
        json_t *x = *(json_t *const *)f, *y = d ? *(json_t *const *)d : NULL;
        if (x == NULL || (y != NULL && json_equal(x, y)))
            return NULL;
        v = json_incref(x);
        break;
    }
    case K_STRING:
        if (*(char *const *)f == NULL)
            return NULL;
        v = json_string(*(char *const *)f);
        break;
    case K_ARGV:
    case K_ARGNAMES:
    case K_ENV:
    case K_HEADERS: {
        char *const *strv = *(char *const *const *)f;
        if (strv == NULL)
            return NULL;
        v = s->type == K_ENV || s->type == K_HEADERS ? pairs_json(strv) : strv_json(strv);
        break;
    }
    case K_DIALECT:
        if (*(const int *)f == 0)
            return NULL;
        v = json_string(*(const int *)f == TP_JSONSCHEMA_2020_12 ? "2020-12" : "draft-07");
        break;
    case K_FORMATS:
        if (*(const int *)f == 0)
            return NULL;
        v = json_string(*(const int *)f == TP_FORMATS_ASSERT ? "assert" : "annotate");
        break;
    case K_OBJECT:
        if ((s->flags & F_OFF) && *(const bool *)((const char *)base + s->off_n)) {
            if (d != NULL && *(const bool *)((const char *)dflt + s->off_n))
                return NULL;
            v = json_false();
            break;
        }
        v = json_object();
        if (v != NULL && reg_render_object(v, s->sub, f, d) < 0) {
            json_decref(v);
            v = NULL;
        } else if (v != NULL && json_object_size(v) == 0) {
            json_decref(v);
            return NULL;
        }
        break;
    default:
        /* read by hand (K_SKIP, the adapters, the schema) or not a tool's (the top level) */
        return NULL;
    }
    *fail = v == NULL;
    return v;
}

int reg_render_object(json_t *o, const key_table_t *tab, const void *base, const void *dflt)
{
    for (; tab != NULL; tab = tab->next) {
        for (size_t i = 0; i < tab->n; i++) {
            bool fail = false;
            json_t *v = render_key(&tab->keys[i], base, dflt, &fail);
            if (fail || (v != NULL && json_object_set_new(o, tab->keys[i].name, v) != 0))
                return TP_ENOMEM;
        }
        base = (const char *)base + tab->next_off;
        if (dflt != NULL)
            dflt = (const char *)dflt + tab->next_off;
    }
    return 0;
}

json_t *reg_render_adapter(const tp_tool_t *t)
{
    for (size_t i = 0; i < reg_tool_table.n; i++) {
        const key_spec_t *s = &reg_tool_table.keys[i];
        if (s->type != K_ADAPTER || s->adapter != t->adapter)
            continue;
        if (s->sub == NULL)
            return strv_json(t->argv);
        json_t *o = json_object();
        if (o != NULL && reg_render_object(o, s->sub, t, NULL) < 0) {
            json_decref(o);
            return NULL;
        }
        return o;
    }
    return json_null();
}
