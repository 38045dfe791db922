/*
 * URIs, resources, dialects and references. Before compiling, every
 * document (the schema, and each one the loader gives when a reference
 * names it) is walked once to give each schema object its resource (res_t:
 * the base URI an "$id" set, and the dialect) and to name the resources and
 * anchors by URI. A reference then resolves by RFC 3986 against its
 * object's resource: a name, then its fragment.
 */
#include "array.h"
#include "jsonschema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The five parts of a URI reference (RFC 3986 section 3), as spans of one string. */
typedef struct {
    const char *s;
    size_t n;
    bool has;
} span_t;

typedef struct {
    span_t scheme, auth, path, query, frag;
} uri_t;

static bool is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* Splits s by RFC 3986 appendix B's rules: never fails, every part may be absent. */
static void uri_split(const char *s, uri_t *u)
{
    size_t len = strlen(s), i = 0, k = 0;
    memset(u, 0, sizeof *u);
    if (is_alpha(s[0])) {
        k = 1;
        while (is_alpha(s[k]) || is_digit(s[k]) || s[k] == '+' || s[k] == '-' || s[k] == '.')
            k++;
        if (s[k] == ':') {
            u->scheme = (span_t){s, k, true};
            i = k + 1;
        }
    }
    if (s[i] == '/' && s[i + 1] == '/') {
        size_t j = i + 2;
        while (j < len && s[j] != '/' && s[j] != '?' && s[j] != '#')
            j++;
        u->auth = (span_t){s + i + 2, j - i - 2, true};
        i = j;
    }
    size_t j = i;
    while (j < len && s[j] != '?' && s[j] != '#')
        j++;
    u->path = (span_t){s + i, j - i, true};
    i = j;
    if (s[i] == '?') {
        j = i + 1;
        while (j < len && s[j] != '#')
            j++;
        u->query = (span_t){s + i + 1, j - i - 1, true};
        i = j;
    }
    if (s[i] == '#')
        u->frag = (span_t){s + i + 1, len - i - 1, true};
}

/* RFC 3986 5.2.4: appends path p with its "." and ".." segments removed. 0, or TP_ENOMEM. */
static int put_path(tp_buf_t *b, const char *p, size_t n)
{
    size_t start = b->len;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 3 && memcmp(p + i, "../", 3) == 0) {
            i += 3;
        } else if (n - i >= 2 && memcmp(p + i, "./", 2) == 0) {
            i += 2;
        } else if ((n - i >= 3 && memcmp(p + i, "/./", 3) == 0) || (n - i == 2 && memcmp(p + i, "/.", 2) == 0)) {
            i += 2;
            if (i >= n && tp_buf_append(b, "/", 1) < 0)
                return TP_ENOMEM;
            if (i < n && p[i] == '/')
                continue;
        } else if ((n - i >= 4 && memcmp(p + i, "/../", 4) == 0) || (n - i == 3 && memcmp(p + i, "/..", 3) == 0)) {
            i += 3;
            while (b->len > start && b->data[b->len - 1] != '/')
                b->len--;
            if (b->len > start)
                b->len--;
            if (i >= n && tp_buf_append(b, "/", 1) < 0)
                return TP_ENOMEM;
        } else if ((n - i == 1 && p[i] == '.') || (n - i == 2 && memcmp(p + i, "..", 2) == 0)) {
            i = n;
        } else {
            size_t j = i + (p[i] == '/');
            while (j < n && p[j] != '/')
                j++;
            if (tp_buf_append(b, p + i, j - i) < 0)
                return TP_ENOMEM;
            i = j;
        }
    }
    return 0;
}

/*
 * RFC 3986 5.2.2: ref resolved against base, as a malloc'd string (with
 * ref's fragment, if any), or NULL (ENOMEM). An empty base leaves a
 * relative ref relative: a schema without "$id" has no base to speak of.
 */
static char *uri_resolve(const char *base, const char *ref)
{
    uri_t b, r;
    uri_split(base, &b);
    uri_split(ref, &r);
    tp_buf_t o = {0};
    int rc = 0;
    const span_t *scheme, *auth, *query;
    tp_buf_t path = {0};
    if (r.scheme.has) {
        scheme = &r.scheme;
        auth = &r.auth;
        rc = put_path(&path, r.path.s, r.path.n);
        query = &r.query;
    } else {
        scheme = &b.scheme;
        if (r.auth.has) {
            auth = &r.auth;
            rc = put_path(&path, r.path.s, r.path.n);
            query = &r.query;
        } else {
            auth = &b.auth;
            if (r.path.n == 0) {
                rc = tp_buf_append(&path, b.path.s, b.path.n);
                query = r.query.has ? &r.query : &b.query;
            } else {
                if (r.path.s[0] == '/') {
                    rc = put_path(&path, r.path.s, r.path.n);
                } else {
                    /* merge: the base's path up to its last "/", then ref's */
                    tp_buf_t m = {0};
                    size_t keep = b.path.n;
                    while (keep > 0 && b.path.s[keep - 1] != '/')
                        keep--;
                    if (b.auth.has && b.path.n == 0)
                        rc = tp_buf_append(&m, "/", 1);
                    else
                        rc = tp_buf_append(&m, b.path.s, keep);
                    rc = rc ? rc : tp_buf_append(&m, r.path.s, r.path.n);
                    if (rc == 0)
                        rc = keep > 0 || (b.auth.has && b.path.n == 0) ? put_path(&path, (char *)m.data, m.len)
                                                                       : tp_buf_append(&path, m.data, m.len);
                    tp_buf_free(&m);
                }
                query = &r.query;
            }
        }
    }
    if (rc == 0 && scheme->has)
        rc = tp_buf_append(&o, scheme->s, scheme->n) || tp_buf_append(&o, ":", 1) ? TP_ENOMEM : 0;
    if (rc == 0 && auth->has)
        rc = tp_buf_append(&o, "//", 2) || tp_buf_append(&o, auth->s, auth->n) ? TP_ENOMEM : 0;
    if (rc == 0)
        rc = tp_buf_append(&o, path.data, path.len);
    if (rc == 0 && query->has)
        rc = tp_buf_append(&o, "?", 1) || tp_buf_append(&o, query->s, query->n) ? TP_ENOMEM : 0;
    if (rc == 0 && r.frag.has)
        rc = tp_buf_append(&o, "#", 1) || tp_buf_append(&o, r.frag.s, r.frag.n) ? TP_ENOMEM : 0;
    tp_buf_free(&path);
    if (rc != 0 || tp_buf_append(&o, "", 1) < 0) {
        tp_buf_free(&o);
        return NULL;
    }
    return (char *)o.data;
}

/* Decodes %XX in s into a malloc'd string (*n bytes, NUL-terminated), or NULL. */
static char *percent_decode(const char *s, size_t len, size_t *n)
{
    char *out = malloc(len + 1);
    size_t o = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        unsigned v = 0;
        for (int k = 1; k <= 2; k++) {
            char c = 0;
            if (i + (size_t)k < len)
                c = s[i + (size_t)k];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) {
                free(out);
                return NULL;
            }
            v = v * 16 + (unsigned)d;
        }
        out[o++] = (char)v;
        i += 2;
    }
    out[o] = 0;
    *n = o;
    return out;
}

/*
 * Where a keyword holds schemas: 1, a schema or an array of them (items,
 * allOf...); 2, an object of them (properties, $defs...); 0, nowhere.
 */
static int schema_place(const char *k)
{
    static const char *const one[] = {"items",
                                      "additionalItems",
                                      "additionalProperties",
                                      "propertyNames",
                                      "contains",
                                      "not",
                                      "if",
                                      "then",
                                      "else",
                                      "allOf",
                                      "anyOf",
                                      "oneOf",
                                      "prefixItems",
                                      "unevaluatedProperties",
                                      "unevaluatedItems",
                                      "contentSchema"};
    static const char *const map[] = {"properties", "patternProperties", "definitions",
                                      "$defs",      "dependentSchemas",  "dependencies"};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (strcmp(k, one[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(k, map[i]) == 0)
            return 2;
    return 0;
}

/* Appends "/" and key escaped per RFC 6901. */
static int put_token(tp_buf_t *b, const char *key, size_t n)
{
    seg_t one = {NULL, key, n, false};
    return js_put_pointer(b, &one);
}

/* The JSON Pointer of target inside v, into ptr; false when it is not there. */
bool js_find_ptr(const json_t *v, const json_t *target, int depth, tp_buf_t *ptr)
{
    size_t mark = ptr->len;
    if (v == target)
        return true;
    if (depth > TP_JSONSCHEMA_MAX_DEPTH)
        return false;
    if (json_is_object(v)) {
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (put_token(ptr, json_object_iter_key(it), json_object_iter_key_len(it)) < 0)
                return false;
            if (js_find_ptr(json_object_iter_value(it), target, depth + 1, ptr))
                return true;
            ptr->len = mark;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (tp_buf_printf(ptr, "/%zu", i) < 0)
                return false;
            if (js_find_ptr(json_array_get(v, i), target, depth + 1, ptr))
                return true;
            ptr->len = mark;
        }
    }
    return false;
}

/* Walks JSON Pointer p (n bytes, already percent-decoded) from doc. */
static const json_t *walk_pointer(const json_t *doc, const char *p, size_t n)
{
    const json_t *cur = doc;
    size_t i = 0;
    char *tok = malloc(n + 1);
    if (tok == NULL)
        return NULL;
    while (cur != NULL && i < n) {
        /* p[i] == '/': one reference token up to the next '/' */
        size_t t = 0;
        for (i++; i < n && p[i] != '/'; i++) {
            if (p[i] != '~') {
                tok[t++] = p[i];
            } else if (i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[t++] = p[++i] == '0' ? '~' : '/';
            } else {
                cur = NULL;
                break;
            }
        }
        if (cur == NULL)
            break;
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, tok, t);
        } else if (json_is_array(cur)) {
            size_t idx = 0;
            bool ok = t > 0 && (t == 1 || tok[0] != '0');
            for (size_t k = 0; ok && k < t; k++) {
                ok = tok[k] >= '0' && tok[k] <= '9' && idx < SIZE_MAX / 10;
                idx = idx * 10 + (size_t)(tok[k] - '0');
            }
            cur = ok ? json_array_get(cur, idx) : NULL;
        } else {
            cur = NULL;
        }
    }
    free(tok);
    return cur;
}

/* Which resource schema object js is in, or NULL. */
res_t *js_res_of(cctx_t *cc, const json_t *js)
{
    return js_ptrmap_get(&cc->objs, js);
}

/* The schema a name ("URI" or "URI#anchor") was given to, or NULL. */
static const json_t *name_get(cctx_t *cc, const char *key)
{
    for (size_t i = 0; i < cc->n_names; i++)
        if (strcmp(cc->names[i].key, key) == 0)
            return cc->names[i].js;
    return NULL;
}

/* Gives a name to a schema; the first one given wins. 0, or TP_ENOMEM. */
static int name_put(cctx_t *cc, const char *key, const json_t *js)
{
    if (name_get(cc, key) != NULL)
        return 0;
    if (tp_array_fit(&cc->names, &cc->cap_names, cc->n_names + 1, sizeof *cc->names, 16) < 0)
        return TP_ENOMEM;
    if ((cc->names[cc->n_names].key = strdup(key)) == NULL)
        return TP_ENOMEM;
    cc->names[cc->n_names++].js = js;
    return 0;
}

/* "URI#frag" as a malloc'd string, or NULL. */
static char *uri_with(const char *uri, const char *frag)
{
    size_t a = strlen(uri), f = strlen(frag);
    char *s = malloc(a + f + 2);
    if (s != NULL) {
        memcpy(s, uri, a);
        s[a] = '#';
        memcpy(s + a + 1, frag, f + 1);
    }
    return s;
}

/* A new resource (its URI copied, fragment cut) that js starts. NULL: ENOMEM. */
static res_t *res_new(cctx_t *cc, const char *uri, const json_t *js, const json_t *doc, const char *doc_name,
                      const dialect_t *d)
{
    tp_jsonschema_t *s = cc->s;
    if (tp_array_fit(&s->res, &s->cap_res, s->n_res + 1, sizeof *s->res, 8) < 0)
        return NULL;
    res_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    s->res[s->n_res++] = r;
    r->uri = strndup(uri, strcspn(uri, "#"));
    r->js = js;
    r->doc = doc;
    r->doc_name = doc_name;
    r->d = *d;
    if (r->uri == NULL || name_put(cc, r->uri, js) < 0)
        return NULL;
    return r;
}

static int dialect_of(cctx_t *cc, const json_t *schema_kw, dialect_t *d, const seg_t *path, int depth);

/*
 * Walks one document, giving every schema object its resource: a "$id"
 * (resolved against the resource around it) starts a new one, "$anchor",
 * "$dynamicAnchor" and draft-07's "$id": "#name" name a schema in the
 * resource they are in. draft-07 ignores a "$id" beside "$ref". Values of
 * enum, const, default and examples are data, not searched. 0; TP_EINVAL
 * (a "$schema" it cannot take) or TP_ENOMEM, recorded.
 */
static int index_value(cctx_t *cc, const json_t *v, res_t *res, const seg_t *path, int depth)
{
    if (depth > TP_JSONSCHEMA_MAX_DEPTH)
        return 0; /* js_compile() says it */
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            seg_t at = {path, NULL, i, false};
            int rc = index_value(cc, json_array_get(v, i), res, &at, depth + 1);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    if (!json_is_object(v))
        return 0;
    bool d7 = res->d.draft == TP_JSONSCHEMA_DRAFT7;
    const json_t *id = json_object_get(v, "$id");
    if (json_is_string(id) && !(d7 && json_object_get(v, "$ref") != NULL) && v != res->js) {
        char *abs = uri_resolve(res->uri, json_string_value(id));
        if (abs == NULL)
            goto nomem;
        size_t base = strcspn(abs, "#");
        const char *frag = abs[base] ? abs + base + 1 : "";
        if (json_string_value(id)[0] != '#') {
            dialect_t d = res->d;
            const json_t *sk = json_object_get(v, "$schema");
            seg_t at = {path, "$schema", 7, false};
            int rc = sk != NULL ? dialect_of(cc, sk, &d, &at, 0) : 0;
            if (rc < 0) {
                free(abs);
                return rc;
            }
            abs[base] = 0;
            res = res_new(cc, abs, v, res->doc, res->doc_name, &d);
            if (res == NULL) {
                free(abs);
                goto nomem;
            }
            d7 = res->d.draft == TP_JSONSCHEMA_DRAFT7;
        }
        if (d7 && *frag) {
            char *name = uri_with(res->uri, frag);
            int rc = name ? name_put(cc, name, v) : TP_ENOMEM;
            free(name);
            if (rc < 0) {
                free(abs);
                goto nomem;
            }
        }
        free(abs);
    }
    if (!d7) {
        const char *kws[] = {"$anchor", "$dynamicAnchor"};
        for (int k = 0; k < 2; k++) {
            const json_t *a = json_object_get(v, kws[k]);
            if (!json_is_string(a))
                continue;
            char *name = uri_with(res->uri, json_string_value(a));
            int rc = name ? name_put(cc, name, v) : TP_ENOMEM;
            free(name);
            if (rc < 0)
                goto nomem;
            if (k == 1) {
                dyn_t *p = realloc(res->dyn, (res->n_dyn + 1) * sizeof *p);
                if (p == NULL)
                    goto nomem;
                res->dyn = p;
                p[res->n_dyn++] = (dyn_t){json_string_value(a), v, NULL};
            }
        }
    }
    if (js_ptrmap_put(&cc->objs, v, res) < 0)
        goto nomem;
    /* only where schemas are: "$id" inside an unknown keyword or data names nothing */
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        const char *k = json_object_iter_key(it);
        int where = schema_place(k);
        if (where == 0)
            continue;
        seg_t at = {path, k, json_object_iter_key_len(it), false};
        const json_t *val = json_object_iter_value(it);
        if (where == 2 && json_is_object(val)) {
            for (void *j = json_object_iter((json_t *)val); j; j = json_object_iter_next((json_t *)val, j)) {
                seg_t at2 = {&at, json_object_iter_key(j), json_object_iter_key_len(j), false};
                int rc = index_value(cc, json_object_iter_value(j), res, &at2, depth + 2);
                if (rc < 0)
                    return rc;
            }
        } else if (where != 2) {
            int rc = index_value(cc, val, res, &at, depth + 1);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
nomem:
    return js_cfail_oom(cc, path);
}

/*
 * A whole document: its root becomes a resource named uri (and its own
 * "$id", when it has one), of the dialect its "$schema" names or else d.
 */
res_t *js_index_doc(cctx_t *cc, const json_t *doc, const char *uri, const char *doc_name, const dialect_t *d)
{
    dialect_t dd = *d;
    const json_t *sk = json_is_object(doc) ? json_object_get(doc, "$schema") : NULL;
    seg_t at = {NULL, "$schema", 7, false};
    if (sk != NULL && dialect_of(cc, sk, &dd, &at, 0) < 0)
        return NULL;
    const json_t *id = json_is_object(doc) ? json_object_get(doc, "$id") : NULL;
    bool ignore_id = dd.draft == TP_JSONSCHEMA_DRAFT7 && json_object_get(doc, "$ref") != NULL;
    char *abs = json_is_string(id) && !ignore_id ? uri_resolve(uri, json_string_value(id)) : strdup(uri);
    res_t *r = abs ? res_new(cc, abs, doc, doc, doc_name, &dd) : NULL;
    if (r == NULL) {
        free(abs);
        js_cfail_oom(cc, NULL);
        return NULL;
    }
    if (*uri && strcmp(r->uri, uri) != 0 && name_put(cc, uri, doc) < 0) {
        free(abs);
        js_cfail_oom(cc, NULL);
        return NULL;
    }
    /* draft-07: a root "$id" may carry an anchor too, "http://x/s.json#top" */
    size_t base = strcspn(abs, "#");
    if (dd.draft == TP_JSONSCHEMA_DRAFT7 && abs[base] && abs[base + 1]) {
        int rc = name_put(cc, abs, doc);
        if (rc < 0) {
            free(abs);
            js_cfail_oom(cc, NULL);
            return NULL;
        }
    }
    free(abs);
    return index_value(cc, doc, r, NULL, 0) < 0 ? NULL : r;
}

/* Keeps doc (owned now) and its name (malloc'd or NULL) with the schema. 0, or TP_ENOMEM (both freed). */
static int keep_doc(tp_jsonschema_t *s, json_t *doc, char *name)
{
    json_t **docs = realloc(s->docs, (s->n_docs + 1) * sizeof *docs);
    if (docs != NULL)
        s->docs = docs;
    char **names = realloc(s->doc_names, (s->n_docs + 1) * sizeof *names);
    if (names != NULL)
        s->doc_names = names;
    if (docs == NULL || names == NULL) {
        json_decref(doc);
        free(name);
        return TP_ENOMEM;
    }
    s->docs[s->n_docs] = doc;
    s->doc_names[s->n_docs++] = name;
    return 0;
}

/*
 * Another document, by its absolute URI (no fragment): asked of the
 * caller's loader (never the network), else one of the built-in
 * meta-schemas, copied, indexed. The loader comes first, so a document the
 * caller gives for a meta-schema's URI is the one used. NULL when there is
 * none; an error only when it came but is broken.
 */
static res_t *load_doc(cctx_t *cc, const char *uri, const seg_t *path)
{
    json_t *got = cc->opts.load ? cc->opts.load(uri, cc->opts.load_arg) : NULL;
    const json_t *src = got ? got : js_metaschema(uri);
    if (src == NULL)
        return NULL;
    json_t *doc = json_deep_copy(src);
    json_decref(got);
    char *name = strdup(uri);
    if (doc == NULL || name == NULL || keep_doc(cc->s, doc, name) < 0) {
        if (doc == NULL || name == NULL) {
            json_decref(doc);
            free(name);
        }
        js_cfail_oom(cc, path);
        return NULL;
    }
    if (!json_is_object(doc) && !json_is_boolean(doc)) {
        js_cfail(cc, path, "document \"%.200s\" is not a schema (an object or a boolean)", uri);
        return NULL;
    }
    return js_index_doc(cc, doc, uri, name, &cc->dflt);
}

/* The known dialect a "$schema" URI names: 0 when it names none of them. */
static int known_dialect(const char *s)
{
    static const struct {
        const char *uri;
        int draft;
    } known[] = {
        {"http://json-schema.org/draft-07/schema", TP_JSONSCHEMA_DRAFT7},
        {"https://json-schema.org/draft-07/schema", TP_JSONSCHEMA_DRAFT7},
        {"https://json-schema.org/draft/2020-12/schema", TP_JSONSCHEMA_2020_12},
        {"http://json-schema.org/draft/2020-12/schema", TP_JSONSCHEMA_2020_12},
    };
    size_t n = strlen(s);
    if (n > 0 && s[n - 1] == '#')
        n--;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].uri) == n && memcmp(s, known[i].uri, n) == 0)
            return known[i].draft;
    return 0;
}

/*
 * "$schema": draft-07 or 2020-12 by name, or a meta-schema the loader
 * knows, whose own "$schema" gives the dialect and whose "$vocabulary"
 * says which keywords count (2020-12: without the validation vocabulary,
 * type, enum, minimum... are not checked; a required vocabulary this
 * module does not know is an error).
 */
static int dialect_of(cctx_t *cc, const json_t *sk, dialect_t *d, const seg_t *path, int depth)
{
    char q[160];
    if (!json_is_string(sk))
        return js_cfail(cc, path, "expected a URI string");
    int known = known_dialect(json_string_value(sk));
    if (known != 0) {
        d->draft = known;
        d->no_validation = false;
        return 0;
    }
    const json_t *meta = NULL;
    if (depth < 4) {
        char *uri = strndup(json_string_value(sk), strcspn(json_string_value(sk), "#"));
        if (uri == NULL)
            return js_cfail_oom(cc, path);
        meta = name_get(cc, uri);
        if (meta == NULL && cc->opts.load != NULL) {
            json_t *got = cc->opts.load(uri, cc->opts.load_arg);
            if (got != NULL && keep_doc(cc->s, got, NULL) == 0)
                meta = got;
        }
        free(uri);
    }
    if (!json_is_object(meta))
        return js_cfail(cc, path, "unsupported dialect %s (supported: draft-07, 2020-12)",
                        js_quoted(json_string_value(sk), json_string_length(sk), q, sizeof q));
    const json_t *own = json_object_get(meta, "$schema");
    if (own == NULL || strcmp(json_string_value(own) ? json_string_value(own) : "", json_string_value(sk)) == 0)
        return js_cfail(cc, path, "unsupported dialect %s (supported: draft-07, 2020-12)",
                        js_quoted(json_string_value(sk), json_string_length(sk), q, sizeof q));
    int rc = dialect_of(cc, own, d, path, depth + 1);
    if (rc < 0)
        return rc;
    const json_t *vocab = json_object_get(meta, "$vocabulary");
    if (json_is_object(vocab)) {
        static const char *const known_vocab[] = {"core",      "applicator",        "unevaluated",      "validation",
                                                  "meta-data", "format-annotation", "format-assertion", "content"};
        const char *prefix = "https://json-schema.org/draft/2020-12/vocab/";
        d->no_validation = true;
        for (void *it = json_object_iter((json_t *)vocab); it; it = json_object_iter_next((json_t *)vocab, it)) {
            const char *k = json_object_iter_key(it);
            bool ok = false;
            if (strncmp(k, prefix, strlen(prefix)) == 0)
                for (size_t i = 0; i < sizeof known_vocab / sizeof known_vocab[0]; i++)
                    if (strcmp(k + strlen(prefix), known_vocab[i]) == 0)
                        ok = true;
            if (ok && strcmp(k + strlen(prefix), "validation") == 0)
                d->no_validation = false;
            if (!ok && json_is_true(json_object_iter_value(it)))
                return js_cfail(cc, path, "required vocabulary %s is not supported",
                                js_quoted(k, strlen(k), q, sizeof q));
        }
    }
    return 0;
}

/*
 * The schema a reference names, resolved against the base URI of the
 * schema object it is in: a resource by its URI (this document's, or one
 * the loader gives), then its fragment, empty, a JSON Pointer from the
 * resource, or an anchor. *where gets the target's location for error
 * paths (malloc'd): its JSON Pointer, after its document's URI when it is
 * not this one.
 */
static const json_t *resolve(cctx_t *cc, const json_t *from, const char *ref, const seg_t *path, char **where)
{
    res_t *res = js_res_of(cc, from);
    const json_t *target = NULL;
    char *abs = uri_resolve(res ? res->uri : cc->root_res->uri, ref), *frag = NULL;
    size_t n = 0;
    *where = NULL;
    if (abs == NULL)
        return NULL;
    size_t base = strcspn(abs, "#");
    bool has_frag = abs[base] != 0;
    abs[base] = 0;
    const json_t *doc = name_get(cc, abs);
    if (doc == NULL && *abs) {
        res_t *r = load_doc(cc, abs, path);
        if (cc->rc < 0)
            goto out;
        doc = r ? r->js : NULL;
    }
    if (doc == NULL)
        goto out;
    if ((frag = percent_decode(has_frag ? abs + base + 1 : "", has_frag ? strlen(abs + base + 1) : 0, &n)) == NULL)
        goto out;
    if (n == 0) {
        target = doc;
    } else if (frag[0] == '/') {
        target = walk_pointer(doc, frag, n);
    } else {
        char *name = uri_with(abs, frag);
        target = name ? name_get(cc, name) : NULL;
        free(name);
    }
out:
    if (target != NULL && js_memo_get(cc, target) != NULL) {
        /* compiled already: its location is not needed again */
        if ((*where = strdup("")) == NULL)
            target = NULL;
    } else if (target != NULL) {
        res_t *tr = json_is_object(target) ? js_res_of(cc, target) : js_res_of(cc, doc);
        tp_buf_t ptr = {0};
        const json_t *tdoc = tr ? tr->doc : cc->s->doc;
        if (tr && tr->doc_name && (tp_buf_puts(&ptr, tr->doc_name) < 0 || tp_buf_puts(&ptr, "#") < 0))
            target = NULL;
        if (target && !js_find_ptr(tdoc, target, 0, &ptr))
            ptr.len = tr && tr->doc_name ? ptr.len : 0;
        if (target && tp_buf_append(&ptr, "", 1) == 0)
            *where = (char *)ptr.data;
        else
            tp_buf_free(&ptr);
        if (*where == NULL)
            target = NULL;
    }
    free(frag);
    free(abs);
    return target;
}

/*
 * "$ref" or "$dynamicRef": resolved now, and the target compiled (or
 * found compiled). *out gets its node; a $dynamicRef whose target has a
 * "$dynamicAnchor" of the fragment's name also gets that name (it is
 * looked up again in the dynamic scope when validating).
 */
int js_compile_ref(cctx_t *cc, node_t *n, const json_t *from, const char *kw, const json_t *ref, const seg_t *path,
                   node_t **out)
{
    seg_t at = {path, kw, strlen(kw), false};
    char q[160], *where;
    if (!json_is_string(ref))
        return js_cfail(cc, &at, "expected a string");
    js_quoted(json_string_value(ref), json_string_length(ref), q, sizeof q);
    const json_t *target = resolve(cc, from, json_string_value(ref), &at, &where);
    if (cc->rc < 0)
        return cc->rc;
    if (target == NULL) {
        const char *r = json_string_value(ref);
        if (r[0] == '#')
            return js_cfail(cc, &at, "unresolvable reference %s", q);
        return js_cfail(cc, &at,
                        "unresolvable reference %s (a document that is not this schema must be given in "
                        "\"schema_refs\"; nothing is fetched from the network)",
                        q);
    }
    /* For the cycle check after compiling: where this reference is and what it says. */
    tp_buf_t b = {0};
    if (js_put_location(&b, &at) < 0 || tp_buf_printf(&b, ": circular reference %s", q) < 0 ||
        tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        free(where);
        return js_cfail_oom(cc, &at);
    }
    free(n->ref_where);
    n->ref_where = (char *)b.data;
    if (strcmp(kw, "$dynamicRef") == 0 && json_is_object(target)) {
        const char *hash = strchr(json_string_value(ref), '#');
        const json_t *da = json_object_get(target, "$dynamicAnchor");
        if (hash && hash[1] != '/' && json_is_string(da) && strcmp(json_string_value(da), hash + 1) == 0) {
            n->dyn_name = json_string_value(da);
            cc->s->dynamic = true;
        }
    }
    seg_t tpath = {NULL, where, strlen(where), true};
    *out = js_compile(cc, target, *where ? &tpath : NULL);
    free(where);
    return *out ? 0 : js_cerr(cc);
}

/*
 * Depth-first over the subschemas that apply to the same value as n ($ref,
 * allOf, anyOf, oneOf, not, if, then, else, dependencies), looking for a
 * way back to a node on the stack: {"$ref": "#"} at the root, or
 * {"anyOf": [{"type": "string"}, {"$ref": "#"}]}. Validating one would
 * come back where it started without descending into the instance, for
 * ever. Such a loop always passes a $ref; the error names the last one.
 * 0, or TP_EINVAL with the error recorded.
 */
static int same_value_loop(cctx_t *cc, node_t *n, node_t **stack, size_t depth)
{
    if (n->mark == 2)
        return 0;
    if (n->mark == 1) {
        for (size_t i = depth; i-- > 0;) {
            if (stack[i]->ref_where != NULL) {
                /* the reference's own message, its location in it (js_compile_ref) */
                if (cc->rc == 0) {
                    cc->rc = TP_EINVAL;
                    if (cc->err && cc->errlen)
                        snprintf(cc->err, cc->errlen, "%s", stack[i]->ref_where);
                }
                return cc->rc;
            }
            if (stack[i] == n)
                break;
        }
        return 0; /* not reached: a loop needs a $ref */
    }
    if (depth >= TP_JSONSCHEMA_MAX_DEPTH)
        return 0; /* too long to search; validation's depth guard stays */
    n->mark = 1;
    stack[depth] = n;
    node_t *one[] = {n->ref, n->not_, n->if_, n->then_, n->else_, n->apply_ref, n->dyn_ref};
    node_t **lists[] = {n->all_of, n->any_of, n->one_of};
    size_t sizes[] = {n->n_all, n->n_any, n->n_one};
    int rc;
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i] != NULL && (rc = same_value_loop(cc, one[i], stack, depth + 1)) < 0)
            return rc;
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < sizes[l]; i++)
            if ((rc = same_value_loop(cc, lists[l][i], stack, depth + 1)) < 0)
                return rc;
    for (size_t i = 0; i < n->n_deps; i++)
        if (n->deps[i].schema != NULL && (rc = same_value_loop(cc, n->deps[i].schema, stack, depth + 1)) < 0)
            return rc;
    n->mark = 2;
    return 0;
}

/* The node a reference lands on: through a draft-07 $ref node to its target. */
static node_t *landing(node_t *n)
{
    return n->kind == N_REF ? n->ref : n;
}

/*
 * After compiling: no same-value loops (above), then every $ref chain
 * collapsed so an N_REF points straight at a node that is not one, and
 * every node a reference lands on marked shared (validate.c memoises its
 * results: a schema two references reach is checked once per value).
 */
int js_finish_refs(cctx_t *cc)
{
    tp_jsonschema_t *s = cc->s;
    node_t **stack = malloc((TP_JSONSCHEMA_MAX_DEPTH + 1) * sizeof *stack);
    if (stack == NULL)
        return js_cfail_oom(cc, NULL);
    for (size_t i = 0; i < s->n_nodes; i++) {
        int rc = same_value_loop(cc, s->nodes[i], stack, 0);
        if (rc < 0) {
            free(stack);
            return rc;
        }
    }
    free(stack);
    for (size_t i = 0; i < s->n_nodes; i++) {
        node_t *n = s->nodes[i];
        if (n->kind != N_REF)
            continue;
        while (n->ref->kind == N_REF)
            n->ref = n->ref->ref;
    }
    for (size_t i = 0; i < s->n_nodes; i++) {
        node_t *n = s->nodes[i];
        if (n->kind == N_REF)
            n->ref->shared = true;
        if (n->apply_ref != NULL)
            landing(n->apply_ref)->shared = true;
        if (n->dyn_ref != NULL)
            landing(n->dyn_ref)->shared = true;
    }
    return 0;
}

tp_jsonschema_dialect_t tp_jsonschema_dialect(const tp_jsonschema_t *s)
{
    return s->root->res != NULL ? (tp_jsonschema_dialect_t)s->root->res->d.draft
           : s->n_res > 0       ? (tp_jsonschema_dialect_t)s->res[0]->d.draft
                                : TP_JSONSCHEMA_DRAFT7;
}

int tp_jsonschema_dialect_parse(const char *name, tp_jsonschema_dialect_t *out)
{
    if (strcmp(name, "draft-07") == 0 || strcmp(name, "draft7") == 0)
        *out = TP_JSONSCHEMA_DRAFT7;
    else if (strcmp(name, "2020-12") == 0)
        *out = TP_JSONSCHEMA_2020_12;
    else if (known_dialect(name) != 0)
        *out = (tp_jsonschema_dialect_t)known_dialect(name);
    else
        return TP_EINVAL;
    return 0;
}
