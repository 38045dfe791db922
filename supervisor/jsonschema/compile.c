/*
 * Compiling: js_compile() turns one schema value into a node, memoised by the
 * json_t it came from, so a value reached twice (by the tree and by a $ref)
 * is compiled once and a $ref back into a schema still being compiled (a
 * recursive schema) just points at the node in progress. A $ref node keeps
 * only its target; once everything is compiled, a loop that comes back to
 * the same value without descending into it is an error, and chains of
 * $ref to $ref are collapsed (refs.c).
 */
#include "array.h"
#include "jsonschema_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Records the first compile error, "PATH: what" (PATH the schema location,
 * "(root)" for the top), and its code rc. Later errors are ignored: the
 * first one is the one to fix. Returns the first error's code.
 */
static int record(cctx_t *cc, int rc, const seg_t *path, const char *what)
{
    if (cc->rc < 0)
        return cc->rc;
    cc->rc = rc;
    if (cc->err == NULL || cc->errlen == 0)
        return rc;
    tp_buf_t b = {0};
    if (js_put_location(&b, path) < 0 || tp_buf_append(&b, "", 1) < 0)
        snprintf(cc->err, cc->errlen, "%s", what);
    else
        snprintf(cc->err, cc->errlen, "%s: %s", (char *)b.data, what);
    tp_buf_free(&b);
    return rc;
}

int js_cfail(cctx_t *cc, const seg_t *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return record(cc, TP_EINVAL, path, what);
}

int js_cfail_oom(cctx_t *cc, const seg_t *path)
{
    return record(cc, TP_ENOMEM, path, "out of memory");
}

/* s quoted as JSON into buf (cut to fit): for names in compile errors. */
const char *js_quoted(const char *s, size_t n, char *buf, size_t size)
{
    tp_buf_t b = {0};
    json_t *v = json_stringn_nocheck(s, n);
    if (v == NULL || js_put_short(&b, v, size > 8 ? size - 8 : 1) < 0 || tp_buf_append(&b, "", 1) < 0)
        snprintf(buf, size, "\"?\"");
    else
        snprintf(buf, size, "%s", (char *)b.data);
    json_decref(v);
    tp_buf_free(&b);
    return buf;
}

static size_t ptr_hash(const void *p, size_t mask)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0xed5ad4bbu;
    x ^= x >> 11;
    return (size_t)x & mask;
}

void *js_ptrmap_get(const ptrmap_t *m, const void *key)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = ptr_hash(key, m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->v[i].key == NULL)
            return NULL;
        if (m->v[i].key == key)
            return m->v[i].val;
    }
}

int js_ptrmap_put(ptrmap_t *m, const void *key, void *val)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        ptr_slot_t *v = calloc(cap, sizeof *v);
        if (v == NULL)
            return TP_ENOMEM;
        for (size_t j = 0; j < m->cap; j++) {
            if (m->v[j].key == NULL)
                continue;
            size_t i = ptr_hash(m->v[j].key, cap - 1);
            while (v[i].key != NULL)
                i = (i + 1) & (cap - 1);
            v[i] = m->v[j];
        }
        free(m->v);
        m->v = v;
        m->cap = cap;
    }
    size_t i = ptr_hash(key, m->cap - 1);
    while (m->v[i].key != NULL && m->v[i].key != key)
        i = (i + 1) & (m->cap - 1);
    if (m->v[i].key == NULL)
        m->n++;
    m->v[i].key = key;
    m->v[i].val = val;
    return 0;
}

/* The node schema value key became, or NULL: js_compile()'s memo. */
node_t *js_memo_get(cctx_t *cc, const json_t *key)
{
    return js_ptrmap_get(&cc->memo, key);
}

/*
 * A fresh node for schema value js: owned by the schema (freed with it),
 * memoised before its keywords are read so a $ref back to it finds it.
 */
static node_t *node_new(cctx_t *cc, const json_t *js, const seg_t *path)
{
    tp_jsonschema_t *s = cc->s;
    if (tp_array_fit(&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes, 16) < 0)
        goto nomem;
    node_t *n = calloc(1, sizeof *n);
    if (n == NULL)
        goto nomem;
    s->nodes[s->n_nodes++] = n;
    n->max_props = n->max_items = n->max_len = SIZE_MAX;
    if (js_ptrmap_put(&cc->memo, js, n) < 0)
        goto nomem;
    return n;
nomem:
    js_cfail_oom(cc, path);
    return NULL;
}

/* A non-negative integer (2.0 counts, per draft-07) for minLength and kin. */
static int get_size(cctx_t *cc, const json_t *v, const seg_t *path, size_t *out)
{
    json_int_t i;
    if (json_is_integer(v))
        i = json_integer_value(v);
    else if (!json_is_real(v) || !real_as_int(json_real_value(v), &i))
        i = -1;
    if (i < 0)
        return js_cfail(cc, path, "expected a non-negative integer");
    *out = (size_t)i;
    return 0;
}

/* An array of schemas (allOf, anyOf, oneOf; items' tuple form). */
static int compile_list(cctx_t *cc, const json_t *v, const seg_t *path, bool nonempty, node_t ***out, size_t *n_out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (nonempty && n == 0))
        return js_cfail(cc, path, nonempty ? "expected a non-empty array of schemas" : "expected an array of schemas");
    node_t **list = calloc(n ? n : 1, sizeof *list);
    if (list == NULL)
        return js_cfail_oom(cc, path);
    *out = list;
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        seg_t at = {path, NULL, i, false};
        if ((list[i] = js_compile(cc, json_array_get(v, i), &at)) == NULL)
            return js_cerr(cc);
    }
    return 0;
}

/* The entry for name, adding it when new. The table is sized up front. */
static prop_t *prop_add(node_t *n, const char *name, size_t len)
{
    uint32_t h = hash_bytes(name, len);
    uint32_t *slot = prop_slot(n, name, len, h);
    if (*slot == 0) {
        prop_t *p = &n->props[n->n_props++];
        p->name = name;
        p->len = len;
        p->hash = h;
        *slot = (uint32_t)n->n_props;
    }
    return &n->props[*slot - 1];
}

/*
 * properties and required, together: one hashed table of every name either
 * one mentions, so that one pass over an instance's keys answers both.
 */
static int compile_props(cctx_t *cc, node_t *n, const json_t *props, const json_t *req, const seg_t *path)
{
    seg_t at_props = {path, "properties", 10, false}, at_req = {path, "required", 8, false};
    if (props != NULL && !json_is_object(props))
        return js_cfail(cc, &at_props, "expected an object");
    if (req != NULL && !json_is_array(req))
        return js_cfail(cc, &at_req, "expected an array of strings");
    size_t total = json_object_size(props) + json_array_size(req);
    size_t cap = 4;
    while (cap < total * 2)
        cap *= 2;
    n->props = calloc(total ? total : 1, sizeof *n->props);
    n->ptab = calloc(cap, sizeof *n->ptab);
    n->req = calloc(json_array_size(req) + 1, sizeof *n->req);
    if (n->props == NULL || n->ptab == NULL || n->req == NULL)
        return js_cfail_oom(cc, path);
    n->pmask = (uint32_t)(cap - 1);
    if (props != NULL) {
        for (void *it = json_object_iter((json_t *)props); it; it = json_object_iter_next((json_t *)props, it)) {
            const char *k = json_object_iter_key(it);
            size_t klen = json_object_iter_key_len(it);
            seg_t at = {&at_props, k, klen, false};
            prop_t *p = prop_add(n, k, klen);
            if ((p->schema = js_compile(cc, json_object_iter_value(it), &at)) == NULL)
                return js_cerr(cc);
        }
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        if (!json_is_string(name)) {
            seg_t at = {&at_req, NULL, i, false};
            return js_cfail(cc, &at, "expected a string");
        }
        prop_t *p = prop_add(n, json_string_value(name), json_string_length(name));
        if (i < 64)
            p->req_bits |= (uint64_t)1 << i;
        n->req[n->n_req++] = (uint32_t)(p - n->props);
    }
    if (n->n_props > 0)
        n->groups |= G_OBJECT;
    return 0;
}

/* patternProperties: each key a regex, each value a schema. */
static int compile_pattern_props(cctx_t *cc, node_t *n, const json_t *v, const seg_t *path)
{
    if (!json_is_object(v))
        return js_cfail(cc, path, "expected an object");
    n->pprops = calloc(json_object_size(v) + 1, sizeof *n->pprops);
    if (n->pprops == NULL)
        return js_cfail_oom(cc, path);
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        const char *k = json_object_iter_key(it);
        seg_t at = {path, k, json_object_iter_key_len(it), false};
        pattern_prop_t *pp = &n->pprops[n->n_pprops++];
        int rc = js_regex_compile(cc, &pp->re, k, json_object_iter_key_len(it), &at);
        if (rc < 0)
            return rc;
        if ((pp->schema = js_compile(cc, json_object_iter_value(it), &at)) == NULL)
            return js_cerr(cc);
    }
    n->groups |= G_OBJECT;
    return 0;
}

/* dependencies: per property, an array of names that must come with it, or a schema. */
/* forms: DEP_NAMES (arrays of names), DEP_SCHEMAS, or both (draft-07's dependencies). */
enum { DEP_NAMES = 1, DEP_SCHEMAS = 2 };

static int compile_deps(cctx_t *cc, node_t *n, const json_t *v, const seg_t *path, unsigned forms)
{
    if (!json_is_object(v))
        return js_cfail(cc, path, "expected an object");
    dep_t *grown = realloc(n->deps, (n->n_deps + json_object_size(v) + 1) * sizeof *n->deps);
    if (grown == NULL)
        return js_cfail_oom(cc, path);
    n->deps = grown;
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        const json_t *d = json_object_iter_value(it);
        seg_t at = {path, json_object_iter_key(it), json_object_iter_key_len(it), false};
        dep_t *dep = &n->deps[n->n_deps++];
        memset(dep, 0, sizeof *dep);
        dep->name = at.key;
        dep->len = at.n;
        if (forms == DEP_NAMES && !json_is_array(d))
            return js_cfail(cc, &at, "expected an array of strings");
        if (json_is_array(d) && (forms & DEP_NAMES)) {
            for (size_t i = 0; i < json_array_size(d); i++) {
                if (!json_is_string(json_array_get(d, i))) {
                    seg_t ai = {&at, NULL, i, false};
                    return js_cfail(cc, &ai, "expected a string");
                }
            }
            dep->need = d;
        } else if ((dep->schema = js_compile(cc, d, &at)) == NULL) {
            return js_cerr(cc);
        }
    }
    n->groups |= G_OBJECT;
    return 0;
}

/* type: a name or an array of names, into a bit set. */
static int compile_type(cctx_t *cc, node_t *n, const json_t *v, const seg_t *path)
{
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return js_cfail(cc, path, "expected a type name or an array of them");
    n->has_type = true;
    for (size_t i = 0; i < count; i++) {
        const json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
        seg_t at = {path, NULL, i, false};
        const seg_t *where = json_is_array(v) ? &at : path;
        if (!json_is_string(t))
            return js_cfail(cc, where, "expected a type name");
        size_t k;
        for (k = 0; k < N_TYPES; k++)
            if (strcmp(json_string_value(t), js_type_names[k].name) == 0)
                break;
        if (k == N_TYPES) {
            char q[96];
            return js_cfail(cc, where, "unknown type %s",
                            js_quoted(json_string_value(t), json_string_length(t), q, sizeof q));
        }
        n->types |= js_type_names[k].bit;
    }
    return 0;
}

/* The keywords of one schema object, each with how it is read. */
typedef enum {
    K_TYPE,
    K_ENUM,
    K_CONST,
    K_PROPERTIES,
    K_REQUIRED,
    K_PATTERN_PROPS,
    K_ADDITIONAL_PROPS,
    K_PROPERTY_NAMES,
    K_MIN_PROPS,
    K_MAX_PROPS,
    K_DEPENDENCIES,
    K_ITEMS,
    K_ADDITIONAL_ITEMS,
    K_MIN_ITEMS,
    K_MAX_ITEMS,
    K_UNIQUE,
    K_CONTAINS,
    K_MIN_LEN,
    K_MAX_LEN,
    K_PATTERN,
    K_MINIMUM,
    K_MAXIMUM,
    K_XMINIMUM,
    K_XMAXIMUM,
    K_MULTIPLE_OF,
    K_ALL_OF,
    K_ANY_OF,
    K_ONE_OF,
    K_NOT,
    K_IF,
    K_THEN,
    K_ELSE,
    K_DEFINITIONS,
    K_DEFS,
    K_PREFIX_ITEMS,
    K_MIN_CONTAINS,
    K_MAX_CONTAINS,
    K_DEP_REQUIRED,
    K_DEP_SCHEMAS,
    K_UNEVAL_PROPS,
    K_UNEVAL_ITEMS,
    K_FORMAT,
} kw_t;

enum {
    D7 = 1,    /* draft-07 keyword */
    D2020 = 2, /* 2020-12 keyword */
    DBOTH = 3,
};

static const struct {
    const char *name;
    kw_t kw;
    unsigned dialects;
    bool validation; /* in 2020-12's validation vocabulary */
} keywords[] = {
    {"type", K_TYPE, DBOTH, true},
    {"enum", K_ENUM, DBOTH, true},
    {"const", K_CONST, DBOTH, true},
    {"properties", K_PROPERTIES, DBOTH, false},
    {"required", K_REQUIRED, DBOTH, true},
    {"patternProperties", K_PATTERN_PROPS, DBOTH, false},
    {"additionalProperties", K_ADDITIONAL_PROPS, DBOTH, false},
    {"propertyNames", K_PROPERTY_NAMES, DBOTH, false},
    {"minProperties", K_MIN_PROPS, DBOTH, true},
    {"maxProperties", K_MAX_PROPS, DBOTH, true},
    {"dependencies", K_DEPENDENCIES, DBOTH, false}, /* 2020-12: kept for compatibility */
    {"items", K_ITEMS, DBOTH, false},
    {"additionalItems", K_ADDITIONAL_ITEMS, D7, false},
    {"minItems", K_MIN_ITEMS, DBOTH, true},
    {"maxItems", K_MAX_ITEMS, DBOTH, true},
    {"uniqueItems", K_UNIQUE, DBOTH, true},
    {"contains", K_CONTAINS, DBOTH, false},
    {"minLength", K_MIN_LEN, DBOTH, true},
    {"maxLength", K_MAX_LEN, DBOTH, true},
    {"pattern", K_PATTERN, DBOTH, true},
    {"minimum", K_MINIMUM, DBOTH, true},
    {"maximum", K_MAXIMUM, DBOTH, true},
    {"exclusiveMinimum", K_XMINIMUM, DBOTH, true},
    {"exclusiveMaximum", K_XMAXIMUM, DBOTH, true},
    {"multipleOf", K_MULTIPLE_OF, DBOTH, true},
    {"allOf", K_ALL_OF, DBOTH, false},
    {"anyOf", K_ANY_OF, DBOTH, false},
    {"oneOf", K_ONE_OF, DBOTH, false},
    {"not", K_NOT, DBOTH, false},
    {"if", K_IF, DBOTH, false},
    {"then", K_THEN, DBOTH, false},
    {"else", K_ELSE, DBOTH, false},
    {"definitions", K_DEFINITIONS, DBOTH, false},
    {"$defs", K_DEFS, D2020, false},
    {"prefixItems", K_PREFIX_ITEMS, D2020, false},
    {"minContains", K_MIN_CONTAINS, D2020, true},
    {"maxContains", K_MAX_CONTAINS, D2020, true},
    {"dependentRequired", K_DEP_REQUIRED, D2020, true},
    {"dependentSchemas", K_DEP_SCHEMAS, D2020, false},
    {"unevaluatedProperties", K_UNEVAL_PROPS, D2020, false},
    {"unevaluatedItems", K_UNEVAL_ITEMS, D2020, false},
    {"format", K_FORMAT, DBOTH, false},
};

/* "format": its name, checked only when formats are asserted; unknown names stay annotations. */
static int compile_format(cctx_t *cc, node_t *n, const json_t *v, const seg_t *at)
{
    if (!json_is_string(v))
        return js_cfail(cc, at, "expected a string");
    if (cc->opts.assert_formats)
        n->format = tp_jsonformat_lookup(json_string_value(v));
    return 0;
}

/* One keyword of a schema object into n. 0, or TP_EINVAL or TP_ENOMEM with the error recorded. */
static int compile_keyword(cctx_t *cc, node_t *n, kw_t kw, const json_t *v, const seg_t *at)
{
    switch (kw) {
    case K_TYPE:
        return compile_type(cc, n, v, at);
    case K_ENUM:
        if (!json_is_array(v))
            return js_cfail(cc, at, "expected an array");
        n->enum_ = v;
        return 0;
    case K_CONST:
        n->const_ = v;
        return 0;
    case K_PROPERTIES:
    case K_REQUIRED:
        return 0; /* compile_props, once both are known */
    case K_PATTERN_PROPS:
        return compile_pattern_props(cc, n, v, at);
    case K_ADDITIONAL_PROPS:
        n->groups |= G_OBJECT;
        return (n->additional = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_PROPERTY_NAMES:
        n->groups |= G_OBJECT;
        return (n->prop_names = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_MIN_PROPS:
        n->groups |= G_OBJECT;
        return get_size(cc, v, at, &n->min_props);
    case K_MAX_PROPS:
        n->groups |= G_OBJECT;
        return get_size(cc, v, at, &n->max_props);
    case K_DEPENDENCIES:
    case K_DEP_REQUIRED:
    case K_DEP_SCHEMAS:
        return compile_deps(cc, n, v, at,
                            kw == K_DEP_REQUIRED  ? DEP_NAMES
                            : kw == K_DEP_SCHEMAS ? DEP_SCHEMAS
                                                  : DEP_NAMES | DEP_SCHEMAS);
    case K_ITEMS:
        n->groups |= G_ARRAY;
        if (n->res != NULL && n->res->d.draft == TP_JSONSCHEMA_2020_12) {
            /* 2020-12: the schema for every item after prefixItems */
            n->tuple_form = true;
            n->add_items_kw = "items";
            return (n->add_items = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
        }
        if (json_is_array(v)) {
            n->tuple_form = true;
            return compile_list(cc, v, at, false, &n->tuple, &n->n_tuple);
        }
        return (n->items = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_ADDITIONAL_ITEMS:
        n->groups |= G_ARRAY;
        n->add_items_kw = "additionalItems";
        return (n->add_items = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_PREFIX_ITEMS:
        n->groups |= G_ARRAY;
        n->tuple_form = true;
        return compile_list(cc, v, at, true, &n->tuple, &n->n_tuple);
    case K_MIN_CONTAINS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->min_contains);
    case K_MAX_CONTAINS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->max_contains);
    case K_UNEVAL_PROPS:
        n->collects = true;
        return (n->uneval_props = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_UNEVAL_ITEMS:
        n->collects = true;
        return (n->uneval_items = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_FORMAT:
        return compile_format(cc, n, v, at);
    case K_MIN_ITEMS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->min_items);
    case K_MAX_ITEMS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->max_items);
    case K_UNIQUE:
        if (!json_is_boolean(v))
            return js_cfail(cc, at, "expected a boolean");
        n->groups |= G_ARRAY;
        n->unique = json_is_true(v);
        return 0;
    case K_CONTAINS:
        n->groups |= G_ARRAY;
        return (n->contains = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_MIN_LEN:
        n->groups |= G_STRING;
        return get_size(cc, v, at, &n->min_len);
    case K_MAX_LEN:
        n->groups |= G_STRING;
        return get_size(cc, v, at, &n->max_len);
    case K_PATTERN:
        if (!json_is_string(v))
            return js_cfail(cc, at, "expected a string");
        n->groups |= G_STRING;
        return js_regex_compile(cc, &n->pattern, json_string_value(v), json_string_length(v), at);
    case K_MINIMUM:
    case K_MAXIMUM:
    case K_XMINIMUM:
    case K_XMAXIMUM:
    case K_MULTIPLE_OF:
        if (!is_number(v) || (kw == K_MULTIPLE_OF && !(num_value(v) > 0)))
            return js_cfail(cc, at, kw == K_MULTIPLE_OF ? "expected a number greater than 0" : "expected a number");
        n->groups |= G_NUMBER;
        *(kw == K_MINIMUM    ? &n->minimum
          : kw == K_MAXIMUM  ? &n->maximum
          : kw == K_XMINIMUM ? &n->xminimum
          : kw == K_XMAXIMUM ? &n->xmaximum
                             : &n->multiple_of) = v;
        return 0;
    case K_ALL_OF:
        n->groups |= G_COMBINE;
        return compile_list(cc, v, at, true, &n->all_of, &n->n_all);
    case K_ANY_OF:
        n->groups |= G_COMBINE;
        return compile_list(cc, v, at, true, &n->any_of, &n->n_any);
    case K_ONE_OF:
        n->groups |= G_COMBINE;
        return compile_list(cc, v, at, true, &n->one_of, &n->n_one);
    case K_NOT:
        n->groups |= G_COMBINE;
        return (n->not_ = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_IF:
        n->groups |= G_COMBINE;
        return (n->if_ = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_THEN:
        return (n->then_ = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_ELSE:
        return (n->else_ = js_compile(cc, v, at)) ? 0 : js_cerr(cc);
    case K_DEFINITIONS:
    case K_DEFS:
        /* Compiled now, so a broken definition is an error even unused. */
        if (!json_is_object(v))
            return js_cfail(cc, at, "expected an object");
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            seg_t d = {at, json_object_iter_key(it), json_object_iter_key_len(it), false};
            if (js_compile(cc, json_object_iter_value(it), &d) == NULL)
                return js_cerr(cc);
        }
        return 0;
    }
    return 0;
}

/*
 * Compiles one schema value (object or boolean) into a node, or returns the
 * node it already became. NULL on error (recorded in cc).
 */
node_t *js_compile(cctx_t *cc, const json_t *js, const seg_t *path)
{
    node_t *n = js_memo_get(cc, js);
    if (n != NULL || cc->rc < 0)
        return n;
    if (!json_is_object(js) && !json_is_boolean(js)) {
        js_cfail(cc, path, "expected a schema (an object or a boolean), got %s", type_name(js));
        return NULL;
    }
    if (cc->depth >= TP_JSONSCHEMA_MAX_DEPTH) {
        js_cfail(cc, path, "schema nested too deeply");
        return NULL;
    }
    if ((n = node_new(cc, js, path)) == NULL)
        return NULL;
    if (json_is_boolean(js)) {
        n->kind = json_is_true(js) ? N_TRUE : N_FALSE;
        return n;
    }
    n->res = js_res_of(cc, js);
    if (n->res == NULL)
        n->res = cc->root_res; /* a schema inside data ("#/enum/0"): the document's */
    const dialect_t *d = &n->res->d;
    unsigned mine = d->draft == TP_JSONSCHEMA_DRAFT7 ? D7 : D2020;
    cc->depth++;
    const json_t *ref = json_object_get(js, "$ref");
    if (ref != NULL && mine == D7) {
        n->kind = N_REF; /* draft-07: its siblings are ignored */
        int rc = js_compile_ref(cc, n, js, "$ref", ref, path, &n->ref);
        cc->depth--;
        return rc == 0 ? n : NULL;
    }
    n->kind = N_SCHEMA;
    n->min_contains = 1;
    n->max_contains = SIZE_MAX;
    if (ref != NULL) {
        n->groups |= G_COMBINE;
        if (js_compile_ref(cc, n, js, "$ref", ref, path, &n->apply_ref) < 0)
            goto fail;
    }
    const json_t *dref = mine == D2020 ? json_object_get(js, "$dynamicRef") : NULL;
    if (dref != NULL) {
        n->groups |= G_COMBINE;
        if (js_compile_ref(cc, n, js, "$dynamicRef", dref, path, &n->dyn_ref) < 0)
            goto fail;
    }
    const json_t *props = NULL, *req = NULL;
    for (void *it = json_object_iter((json_t *)js); it; it = json_object_iter_next((json_t *)js, it)) {
        const char *k = json_object_iter_key(it);
        size_t i;
        for (i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
            if (strcmp(k, keywords[i].name) == 0)
                break;
        if (i == sizeof keywords / sizeof keywords[0] || !(keywords[i].dialects & mine) ||
            (keywords[i].validation && d->no_validation))
            continue; /* unknown keywords are ignored, and those of another dialect */
        seg_t at = {path, k, json_object_iter_key_len(it), false};
        const json_t *v = json_object_iter_value(it);
        if (keywords[i].kw == K_PROPERTIES)
            props = v;
        else if (keywords[i].kw == K_REQUIRED)
            req = v;
        if (compile_keyword(cc, n, keywords[i].kw, v, &at) < 0)
            goto fail;
    }
    if ((props || req) && compile_props(cc, n, props, req, path) < 0)
        goto fail;
    if (n->n_deps > 0 || n->additional || n->prop_names || n->min_props || n->max_props != SIZE_MAX)
        n->groups |= G_OBJECT;
    if (n->uneval_items != NULL || n->min_contains != 1 || n->max_contains != SIZE_MAX)
        n->groups |= G_ARRAY;
    if (n->uneval_props != NULL)
        n->groups |= G_OBJECT;
    if (n->format != F_NONE)
        n->groups |= G_STRING;
    if (n->add_items_kw == NULL)
        n->add_items_kw = "additionalItems";
    cc->depth--;
    return n;
fail:
    cc->depth--;
    return NULL;
}

/* What only compiling needed. */
static void cctx_free(cctx_t *cc)
{
    free(cc->memo.v);
    free(cc->objs.v);
    for (size_t i = 0; i < cc->n_names; i++)
        free(cc->names[i].key);
    free(cc->names);
}

/* A node and what it owns; what it borrows (from the document) stays. */
static void node_free(node_t *n)
{
    free(n->ref_where);
    free(n->props);
    free(n->ptab);
    free(n->req);
    for (size_t i = 0; i < n->n_pprops; i++)
        pcre2_code_free(n->pprops[i].re.code);
    free(n->pprops);
    free(n->deps);
    free(n->tuple);
    pcre2_code_free(n->pattern.code);
    free(n->all_of);
    free(n->any_of);
    free(n->one_of);
    free(n);
}

/* Every node, then the document copy they borrowed from. NULL is fine. */
void tp_jsonschema_free(tp_jsonschema_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_nodes; i++)
        node_free(s->nodes[i]);
    free(s->nodes);
    for (size_t i = 0; i < s->n_res; i++) {
        if (s->res[i] == NULL)
            continue;
        free(s->res[i]->uri);
        free(s->res[i]->dyn);
        free(s->res[i]);
    }
    free(s->res);
    for (size_t i = 0; i < s->n_docs; i++) {
        json_decref(s->docs[i]);
        if (s->doc_names != NULL && i < s->n_docs)
            free(s->doc_names[i]);
    }
    free(s->docs);
    free(s->doc_names);
    json_decref(s->doc);
    free(s);
}

/*
 * Deep-copies schema, indexes its resources and anchors, compiles from the
 * root (loading what the references name), then the $dynamicAnchors of
 * every resource (a $dynamicRef may land on any of them), then checks and
 * collapses the references. See jsonschema.h.
 */
tp_jsonschema_t *tp_jsonschema_compile_opts(const json_t *schema, const tp_jsonschema_opts_t *opts, char *err,
                                            size_t errlen)
{
    cctx_t cc = {.err = err, .errlen = errlen};
    if (opts != NULL)
        cc.opts = *opts;
    cc.dflt.draft = cc.opts.dialect == TP_JSONSCHEMA_2020_12 ? TP_JSONSCHEMA_2020_12 : TP_JSONSCHEMA_DRAFT7;
    if (err && errlen)
        err[0] = 0;
    if (schema == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "(root): no schema");
        return NULL;
    }
    cc.s = calloc(1, sizeof *cc.s);
    if (cc.s == NULL || (cc.s->doc = json_deep_copy(schema)) == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "(root): out of memory");
        goto fail;
    }
    cc.pcc = pcre2_compile_context_create(NULL);
    if (cc.pcc == NULL || pcre2_set_compile_extra_options(cc.pcc, PCRE2_EXTRA_ALT_BSUX) != 0) {
        js_cfail_oom(&cc, NULL);
        goto fail;
    }
    if ((cc.root_res = js_index_doc(&cc, cc.s->doc, "", NULL, &cc.dflt)) == NULL)
        goto fail;
    cc.s->root = js_compile(&cc, cc.s->doc, NULL);
    if (cc.s->root == NULL)
        goto fail;
    for (size_t r = 0; r < cc.s->n_res; r++) {
        res_t *res = cc.s->res[r];
        for (size_t i = 0; i < res->n_dyn; i++) {
            tp_buf_t ptr = {0};
            if (res->doc_name && (tp_buf_puts(&ptr, res->doc_name) < 0 || tp_buf_puts(&ptr, "#") < 0))
                ptr.len = 0;
            js_find_ptr(res->doc, res->dyn[i].js, 0, &ptr);
            seg_t at = {NULL, (const char *)ptr.data, ptr.len, true};
            res->dyn[i].node = js_compile(&cc, res->dyn[i].js, ptr.len ? &at : NULL);
            tp_buf_free(&ptr);
            if (res->dyn[i].node == NULL)
                goto fail;
        }
    }
    if (js_finish_refs(&cc) < 0)
        goto fail;
    pcre2_compile_context_free(cc.pcc);
    cctx_free(&cc);
    return cc.s;
fail:
    if (cc.rc == 0 && err && errlen && !err[0])
        snprintf(err, errlen, "(root): out of memory");
    pcre2_compile_context_free(cc.pcc);
    cctx_free(&cc);
    tp_jsonschema_free(cc.s);
    return NULL;
}

tp_jsonschema_t *tp_jsonschema_compile(const json_t *schema, char *err, size_t errlen)
{
    return tp_jsonschema_compile_opts(schema, NULL, err, errlen);
}
