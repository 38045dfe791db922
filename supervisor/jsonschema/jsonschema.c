/*
 * JSON Schema (draft-07 and 2020-12), compiled: every schema object becomes
 * a node_t with its keywords checked, its numbers and sizes decoded, its
 * property names hashed and its regexes compiled, so validating is a walk
 * over nodes that allocates next to nothing on the valid path. See
 * jsonschema.h for what is supported and how messages read.
 *
 * Indexing: before compiling, every document (the schema, and each one the
 * loader gives when a reference names it) is walked once to give each
 * schema object its resource (res_t: the base URI an "$id" set, and the
 * dialect) and to name the resources and anchors by URI. A reference then
 * resolves by RFC 3986 against its object's resource: a name, then its
 * fragment.
 *
 * Compiling: compile() turns one schema value into a node, memoised by the
 * json_t it came from, so a value reached twice (by the tree and by a $ref)
 * is compiled once and a $ref back into a schema still being compiled (a
 * recursive schema) just points at the node in progress. A $ref node keeps
 * only its target; once everything is compiled, a loop that comes back to
 * the same value without descending into it is an error, and chains of
 * $ref to $ref are collapsed.
 *
 * Validating: v_node() walks node and instance together. The instance path
 * is a chain of seg_t on the stack, rendered as a JSON Pointer only when a
 * violation is written. Subschemas whose failure is not itself a violation
 * (anyOf, oneOf, not, if, contains, propertyNames) run "quiet": they stop
 * at the first failure and write nothing; only when their verdict is a
 * violation and a message is wanted are they run again to say why.
 * 2020-12's unevaluated* need to know what the other keywords evaluated: a
 * node with one gathers it in an ev_t that each subschema applied in place
 * fills with its own (kept only when it passed); nothing is gathered
 * elsewhere, so schemas without unevaluated* pay nothing. The dynamic
 * scope ($dynamicRef) is a chain of resources on the stack, kept only when
 * some $dynamicRef needs it.
 */
#include "array.h"
#include "jsonschema.h"

#include "json.h"
#include "jsonformat.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Instance type bits; "integer" is a number with no fractional part. */
enum {
    T_NULL = 1 << 0,
    T_BOOLEAN = 1 << 1,
    T_OBJECT = 1 << 2,
    T_ARRAY = 1 << 3,
    T_NUMBER = 1 << 4,
    T_STRING = 1 << 5,
    T_INTEGER = 1 << 6,
};

static const struct {
    const char *name;
    unsigned bit;
    /* clang-format off */
} type_names[] = {
    /* in the order messages list them: "expected string or null" */
    {"string", T_STRING}, {"number", T_NUMBER}, {"integer", T_INTEGER}, {"boolean", T_BOOLEAN},
    {"object", T_OBJECT}, {"array", T_ARRAY},   {"null", T_NULL},
};
/* clang-format on */
#define N_TYPES (sizeof type_names / sizeof type_names[0])

/* Which groups of keywords a node has, so the walk skips the others. */
enum {
    G_OBJECT = 1 << 0,
    G_ARRAY = 1 << 1,
    G_STRING = 1 << 2,
    G_NUMBER = 1 << 3,
    G_COMBINE = 1 << 4, /* allOf anyOf oneOf not if */
};

typedef enum { N_TRUE, N_FALSE, N_REF, N_SCHEMA } node_kind_t;

typedef struct node node_t;

typedef struct {
    pcre2_code *code; /* NULL: no regex */
    const char *src;  /* the pattern, as written in the schema */
    bool jit;
} re_t;

/* A property name the object keywords know: from properties or required. */
typedef struct {
    const char *name;
    size_t len;
    uint32_t hash;
    node_t *schema;    /* its "properties" schema, or NULL (required only) */
    uint64_t req_bits; /* bit i: required[i] names it (i < 64) */
} prop_t;

typedef struct {
    re_t re;
    node_t *schema;
} pattern_prop_t;

typedef struct {
    const char *name;
    size_t len;
    node_t *schema;     /* schema form, or NULL */
    const json_t *need; /* array form: names that must be present too */
} dep_t;

/* A dialect, as "$schema" (or the caller's default) sets it for a resource. */
typedef struct {
    int draft;          /* TP_JSONSCHEMA_DRAFT7 or TP_JSONSCHEMA_2020_12 */
    bool no_validation; /* 2020-12 meta-schema without the validation vocabulary */
} dialect_t;

/* A "$dynamicAnchor" of a resource: its name, its schema, its node once compiled. */
typedef struct {
    const char *name;
    const json_t *js;
    node_t *node;
} dyn_t;

/*
 * A schema resource: a document's root or a subschema with an "$id" that
 * changes the base URI. Every node knows its resource; the dynamic scope
 * ($dynamicRef) is the chain of resources a validation has entered.
 */
typedef struct res {
    char *uri; /* absolute, without fragment; "" for a root without "$id" */
    const json_t *js;
    const json_t *doc;    /* the document it is in */
    const char *doc_name; /* that document's URI, NULL for the schema itself */
    dialect_t d;
    dyn_t *dyn;
    size_t n_dyn;
} res_t;

/* The formats "formats": "assert" checks (jsonformat.h). */
typedef tp_format_t format_t;
#define F_NONE TP_FORMAT_NONE
#define F_REGEX TP_FORMAT_REGEX

struct node {
    node_kind_t kind;
    uint8_t mark;     /* compile time only: the loop search's colour */
    node_t *ref;      /* N_REF: the target (after compile: never a N_REF) */
    char *ref_where;  /* any reference: its schema path and what it says, for errors */
    const res_t *res; /* the resource it is in (NULL: a boolean schema) */
    /* 2020-12 references apply beside the other keywords */
    node_t *apply_ref;    /* $ref */
    node_t *dyn_ref;      /* $dynamicRef: its static target */
    const char *dyn_name; /* $dynamicRef to a $dynamicAnchor: looked up in the dynamic scope */
    node_t *uneval_props, *uneval_items;
    bool collects;            /* has unevaluated*: gathers what its subschemas evaluated */
    const char *add_items_kw; /* "additionalItems" or "items", for messages */
    size_t min_contains, max_contains;
    format_t format;
    unsigned groups;
    bool has_type;
    unsigned types;
    const json_t *enum_; /* borrowed from the schema's copy */
    const json_t *const_;
    /* objects */
    prop_t *props;
    size_t n_props;
    uint32_t *ptab; /* open addressing: index + 1 into props, 0 empty */
    uint32_t pmask;
    uint32_t *req; /* required[i] -> index into props */
    size_t n_req;
    pattern_prop_t *pprops;
    size_t n_pprops;
    node_t *additional; /* additionalProperties, or NULL */
    node_t *prop_names;
    dep_t *deps;
    size_t n_deps;
    size_t min_props, max_props;
    /* arrays */
    node_t *items;  /* the schema form */
    node_t **tuple; /* the array form */
    size_t n_tuple;
    bool tuple_form;
    node_t *add_items; /* only with the array form */
    size_t min_items, max_items;
    bool unique;
    node_t *contains;
    /* strings */
    size_t min_len, max_len;
    re_t pattern;
    /* numbers */
    const json_t *minimum, *maximum, *xminimum, *xmaximum, *multiple_of;
    /* combinators */
    node_t **all_of, **any_of, **one_of;
    size_t n_all, n_any, n_one;
    node_t *not_, *if_, *then_, *else_;
};

struct tp_jsonschema {
    json_t *doc; /* our deep copy; nodes borrow from it */
    node_t *root;
    node_t **nodes; /* every node, for tp_jsonschema_free */
    size_t n_nodes, cap_nodes;
    res_t **res; /* every resource */
    size_t n_res, cap_res;
    json_t **docs; /* documents the loader gave (copies), and meta-schemas read */
    char **doc_names;
    size_t n_docs;
    bool dynamic; /* some $dynamicRef needs the dynamic scope */
};

/*
 * One step of a path, on the stack: an object key, an array index, or (raw)
 * a whole JSON Pointer written as is (where a $ref target starts).
 */
typedef struct seg {
    const struct seg *up;
    const char *key; /* NULL: index */
    size_t n;        /* key length, or the index */
    bool raw;
} seg_t;

/* ---- small helpers ---- */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Code points in a valid UTF-8 string: bytes that do not continue one. */
static size_t utf8_count(const char *s, size_t n)
{
    size_t cp = 0;
    for (size_t i = 0; i < n; i++)
        cp += ((unsigned char)s[i] & 0xC0) != 0x80;
    return cp;
}

/* The longest prefix of s no longer than max bytes that ends on a character. */
static size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* Appends the pointer of path ("" for the root), keys escaped per RFC 6901. */
static int put_pointer(tp_buf_t *b, const seg_t *path)
{
    if (path == NULL)
        return 0;
    if (put_pointer(b, path->up) < 0)
        return -1;
    if (path->raw)
        return tp_buf_append(b, path->key, path->n);
    if (path->key == NULL)
        return tp_buf_printf(b, "/%zu", path->n);
    if (tp_buf_reserve(b, 2 * path->n + 1) < 0)
        return -1;
    char *o = (char *)b->data + b->len;
    *o++ = '/';
    for (size_t i = 0; i < path->n; i++) {
        char ch = path->key[i];
        if (ch == '~' || ch == '/') {
            *o++ = '~';
            *o++ = ch == '~' ? '0' : '1';
        } else {
            *o++ = ch;
        }
    }
    b->len = (size_t)(o - (char *)b->data);
    return 0;
}

/* The pointer as messages write it: "(root)" for the empty one. */
static int put_location(tp_buf_t *b, const seg_t *path)
{
    size_t start = b->len;
    if (put_pointer(b, path) < 0)
        return -1;
    return b->len == start ? tp_buf_puts(b, "(root)") : 0;
}

static bool is_number(const json_t *v)
{
    return json_is_integer(v) || json_is_real(v);
}

static double num_value(const json_t *v)
{
    return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

/* A real with no fraction that a json_int_t holds exactly. */
static bool real_as_int(double d, json_int_t *out)
{
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != floor(d))
        return false;
    *out = (json_int_t)d;
    return true;
}

/*
 * -1, 0 or 1 as a < b, a == b, a > b for two numbers: exactly when both are
 * integers (or whole reals in range), as doubles otherwise.
 */
static int num_cmp(const json_t *a, const json_t *b)
{
    json_int_t ia = 0, ib = 0;
    bool ai = json_is_integer(a), bi = json_is_integer(b);
    if (ai)
        ia = json_integer_value(a);
    if (bi)
        ib = json_integer_value(b);
    if (ai != bi) {
        if (ai ? real_as_int(json_real_value(b), &ib) : real_as_int(json_real_value(a), &ia))
            ai = bi = true;
    }
    if (ai && bi)
        return ia < ib ? -1 : ia > ib;
    double da = num_value(a), db = num_value(b);
    return da < db ? -1 : da > db;
}

/* The type bits an instance answers to. */
static unsigned type_bits(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return T_OBJECT;
    case JSON_ARRAY:
        return T_ARRAY;
    case JSON_STRING:
        return T_STRING;
    case JSON_INTEGER:
        return T_NUMBER | T_INTEGER;
    case JSON_REAL: {
        double d = json_real_value(v);
        return isfinite(d) && d == floor(d) ? T_NUMBER | T_INTEGER : T_NUMBER;
    }
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOLEAN;
    case JSON_NULL:
    default:
        return T_NULL;
    }
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

/*
 * JSON equality, the one enum, const and uniqueItems use: numbers by value
 * (1 == 1.0), strings by bytes, arrays in order, objects whatever the order
 * of their keys.
 */
static bool json_eq(const json_t *a, const json_t *b)
{
    if (a == b)
        return true;
    if (is_number(a) && is_number(b))
        return num_cmp(a, b) == 0;
    if (json_typeof(a) != json_typeof(b))
        return false;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY: {
        size_t n = json_array_size(a);
        if (n != json_array_size(b))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!json_eq(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return false;
        for (void *it = json_object_iter((json_t *)a); it; it = json_object_iter_next((json_t *)a, it)) {
            const json_t *o = json_object_getn(b, json_object_iter_key(it), json_object_iter_key_len(it));
            if (o == NULL || !json_eq(json_object_iter_value(it), o))
                return false;
        }
        return true;
    }
    default:
        return true; /* true, false, null: the type says it all */
    }
}

/* A hash that agrees with json_eq: equal values hash equal. */
static uint64_t json_hash(const json_t *v)
{
    uint64_t h;
    switch (json_typeof(v)) {
    case JSON_INTEGER:
    case JSON_REAL: {
        double d = num_value(v);
        if (d == 0)
            d = 0; /* -0.0 */
        memcpy(&h, &d, sizeof h);
        h ^= 0x4;
        break;
    }
    case JSON_STRING:
        h = hash_bytes(json_string_value(v), json_string_length(v)) ^ ((uint64_t)5 << 32);
        break;
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        h = 6;
        json_array_foreach(v, i, x)
            h = h * 1099511628211u + json_hash(x);
        break;
    }
    case JSON_OBJECT: {
        h = 7; /* a sum: the order of the keys does not matter */
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            uint64_t k = hash_bytes(json_object_iter_key(it), json_object_iter_key_len(it));
            h += (k * 0x9E3779B97F4A7C15u) ^ json_hash(json_object_iter_value(it));
        }
        break;
    }
    case JSON_TRUE:
        h = 1;
        break;
    case JSON_FALSE:
        h = 2;
        break;
    default:
        h = 3;
        break;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9u;
    return h ^ (h >> 32);
}

/*
 * Appends v as compact JSON, stopping soon after the buffer passes end (a
 * container stops between members, a string is written only as far as
 * could show): put_short's draft, which it then cuts.
 */
static int put_bounded(tp_buf_t *b, const json_t *v, size_t end)
{
    switch (json_typeof(v)) {
    case JSON_STRING: {
        size_t room = end > b->len ? end - b->len : 0;
        size_t n = utf8_cut(json_string_value(v), json_string_length(v), room + 4);
        return tp_json_put_string(b, json_string_value(v), n);
    }
    case JSON_ARRAY: {
        if (tp_buf_puts(b, "[") < 0)
            return -1;
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (b->len > end)
                return 0;
            if ((i && tp_buf_puts(b, ",") < 0) || put_bounded(b, json_array_get(v, i), end) < 0)
                return -1;
        }
        return tp_buf_puts(b, "]");
    }
    case JSON_OBJECT: {
        if (tp_buf_puts(b, "{") < 0)
            return -1;
        size_t i = 0;
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (b->len > end)
                return 0;
            size_t klen = json_object_iter_key_len(it);
            size_t room = end > b->len ? end - b->len : 0;
            if ((i++ && tp_buf_puts(b, ",") < 0) ||
                tp_json_put_string(b, json_object_iter_key(it), utf8_cut(json_object_iter_key(it), klen, room + 4)) <
                    0 ||
                tp_buf_puts(b, ":") < 0 || put_bounded(b, json_object_iter_value(it), end) < 0)
                return -1;
        }
        return tp_buf_puts(b, "}");
    }
    default:
        return tp_json_write(b, v, 0);
    }
}

/*
 * Appends v as compact JSON, at most limit bytes: a long string keeps its
 * head and ends "...\"", a container its first bytes then "...", both cut
 * on a character boundary. Used for every value a message shows, so one
 * huge argument cannot flood it.
 */
static int put_short(tp_buf_t *b, const json_t *v, size_t limit)
{
    size_t start = b->len;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n + 2 <= limit)
            return tp_json_put_string(b, s, n);
        if (tp_json_put_string(b, s, utf8_cut(s, n, limit > 6 ? limit - 6 : 1)) < 0)
            return -1;
        b->len--; /* the closing quote */
        return tp_buf_puts(b, "...\"");
    }
    if (put_bounded(b, v, start + limit) < 0)
        return -1;
    if (b->len - start <= limit)
        return 0;
    b->len = start + utf8_cut((const char *)b->data + start, b->len - start, limit - 3);
    return tp_buf_puts(b, "...");
}

#define SHORT 60       /* a value in a message */
#define SHORT_ENUM 100 /* the list of an enum */
#define SHORT_ALT 160  /* what one alternative of anyOf/oneOf says */
#define MAX_ALTS 5     /* alternatives a summary details */

/* ---- compiling ---- */

typedef struct {
    const json_t *key;
    node_t *node;
} memo_slot_t;

typedef struct {
    const json_t *key;
    res_t *res;
} obj_slot_t;

typedef struct {
    char *key; /* "URI" or "URI#anchor" */
    const json_t *js;
} name_t;

typedef struct {
    tp_jsonschema_t *s;
    tp_jsonschema_opts_t opts;
    dialect_t dflt; /* for documents without "$schema" */
    res_t *root_res;
    obj_slot_t *objs; /* schema object -> its resource, open addressing */
    size_t objs_cap, objs_n;
    name_t *names; /* URIs and anchors -> schemas */
    size_t n_names, cap_names;
    char *err;
    size_t errlen;
    bool failed;
    memo_slot_t *memo; /* json_t * -> node, open addressing */
    size_t memo_cap, memo_n;
    pcre2_compile_context *pcc;
    int depth;
} cctx_t;

/*
 * Records the first compile error: "PATH: what", PATH the schema location
 * ("(root)" for the top). Later errors are ignored: the first one is the
 * one to fix.
 */
__attribute__((format(printf, 3, 4))) static void cfail(cctx_t *cc, const seg_t *path, const char *fmt, ...)
{
    if (cc->failed)
        return;
    cc->failed = true;
    if (cc->err == NULL || cc->errlen == 0)
        return;
    tp_buf_t b = {0};
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (put_location(&b, path) < 0 || tp_buf_append(&b, "", 1) < 0)
        snprintf(cc->err, cc->errlen, "%s", what);
    else
        snprintf(cc->err, cc->errlen, "%s: %s", (char *)b.data, what);
    tp_buf_free(&b);
}

/* s quoted as JSON into buf (cut to fit): for names in compile errors. */
static const char *quoted(const char *s, size_t n, char *buf, size_t size)
{
    tp_buf_t b = {0};
    json_t *v = json_stringn_nocheck(s, n);
    if (v == NULL || put_short(&b, v, size > 8 ? size - 8 : 1) < 0 || tp_buf_append(&b, "", 1) < 0)
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

/* The node schema value key became, or NULL: compile()'s memo. */
static node_t *memo_get(cctx_t *cc, const json_t *key)
{
    if (cc->memo_cap == 0)
        return NULL;
    for (size_t i = ptr_hash(key, cc->memo_cap - 1);; i = (i + 1) & (cc->memo_cap - 1)) {
        if (cc->memo[i].key == NULL)
            return NULL;
        if (cc->memo[i].key == key)
            return cc->memo[i].node;
    }
}

/* Remembers key -> node, growing the table at half full. 0, or -1 (ENOMEM). */
static int memo_put(cctx_t *cc, const json_t *key, node_t *node)
{
    if ((cc->memo_n + 1) * 2 > cc->memo_cap) {
        size_t cap = cc->memo_cap ? cc->memo_cap * 2 : 64;
        memo_slot_t *m = calloc(cap, sizeof *m);
        if (m == NULL)
            return -1;
        for (size_t j = 0; j < cc->memo_cap; j++) {
            if (cc->memo[j].key == NULL)
                continue;
            size_t i = ptr_hash(cc->memo[j].key, cap - 1);
            while (m[i].key != NULL)
                i = (i + 1) & (cap - 1);
            m[i] = cc->memo[j];
        }
        free(cc->memo);
        cc->memo = m;
        cc->memo_cap = cap;
    }
    size_t i = ptr_hash(key, cc->memo_cap - 1);
    while (cc->memo[i].key != NULL)
        i = (i + 1) & (cc->memo_cap - 1);
    cc->memo[i].key = key;
    cc->memo[i].node = node;
    cc->memo_n++;
    return 0;
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
    if (memo_put(cc, js, n) < 0)
        goto nomem;
    return n;
nomem:
    cfail(cc, path, "out of memory");
    return NULL;
}

static node_t *compile(cctx_t *cc, const json_t *js, const seg_t *path);

/* A non-negative integer (2.0 counts, per draft-07) for minLength and kin. */
static int get_size(cctx_t *cc, const json_t *v, const seg_t *path, size_t *out)
{
    json_int_t i;
    if (json_is_integer(v))
        i = json_integer_value(v);
    else if (!json_is_real(v) || !real_as_int(json_real_value(v), &i))
        i = -1;
    if (i < 0) {
        cfail(cc, path, "expected a non-negative integer");
        return -1;
    }
    *out = (size_t)i;
    return 0;
}

/*
 * ECMA-262's white space (\s) and line terminators, as PCRE2 class
 * contents, and the complement of \s for a \S inside a class (a class
 * cannot hold a negated one). Written \u{...}: ALT_BSUX takes \x as \xHH.
 */
#define ECMA_SPACE "\\t-\\r \\u{a0}\\u{1680}\\u{2000}-\\u{200a}\\u{2028}\\u{2029}\\u{202f}\\u{205f}\\u{3000}\\u{feff}"
#define ECMA_NONSPACE                                                                                                  \
    "\\u{0}-\\u{8}\\u{e}-\\u{1f}\\u{21}-\\u{9f}\\u{a1}-\\u{167f}\\u{1681}-\\u{1fff}\\u{200b}-\\u{2027}"                \
    "\\u{202a}-\\u{202e}\\u{2030}-\\u{205e}\\u{2060}-\\u{2fff}\\u{3001}-\\u{fefe}\\u{ff00}-\\u{10ffff}"
#define ECMA_DOT "[^\\n\\r\\u{2028}\\u{2029}]"

/*
 * ECMA-262's long names of Unicode properties (\p{Letter},
 * \p{General_Category=Letter}, \p{Script=Greek}) as PCRE2 writes them
 * (\p{L}, \p{Greek}); NULL: leave the name as written.
 */
static const char *ecma_property(const char *s, size_t n)
{
    /* clang-format off */
    static const char *const gc[][2] = {
        {"Letter", "L"},          {"Cased_Letter", "LC"},     {"Uppercase_Letter", "Lu"},
        {"Lowercase_Letter", "Ll"}, {"Titlecase_Letter", "Lt"}, {"Modifier_Letter", "Lm"},
        {"Other_Letter", "Lo"},   {"Mark", "M"},              {"Combining_Mark", "M"},
        {"Nonspacing_Mark", "Mn"}, {"Spacing_Mark", "Mc"},    {"Enclosing_Mark", "Me"},
        {"Number", "N"},          {"Decimal_Number", "Nd"},   {"digit", "Nd"},
        {"Letter_Number", "Nl"},  {"Other_Number", "No"},     {"Punctuation", "P"},
        {"punct", "P"},           {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
        {"Open_Punctuation", "Ps"}, {"Close_Punctuation", "Pe"}, {"Initial_Punctuation", "Pi"},
        {"Final_Punctuation", "Pf"}, {"Other_Punctuation", "Po"}, {"Symbol", "S"},
        {"Math_Symbol", "Sm"},    {"Currency_Symbol", "Sc"},  {"Modifier_Symbol", "Sk"},
        {"Other_Symbol", "So"},   {"Separator", "Z"},         {"Space_Separator", "Zs"},
        {"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"}, {"Other", "C"},
        {"Control", "Cc"},        {"cntrl", "Cc"},            {"Format", "Cf"},
        {"Surrogate", "Cs"},      {"Private_Use", "Co"},      {"Unassigned", "Cn"},
    };
    /* clang-format on */
    const char *eq = memchr(s, '=', n);
    if (eq != NULL) {
        size_t k = (size_t)(eq - s);
        bool script = (k == 6 && memcmp(s, "Script", 6) == 0) || (k == 2 && memcmp(s, "sc", 2) == 0) ||
                      (k == 17 && memcmp(s, "Script_Extensions", 17) == 0) || (k == 3 && memcmp(s, "scx", 3) == 0);
        bool cat = (k == 16 && memcmp(s, "General_Category", 16) == 0) || (k == 2 && memcmp(s, "gc", 2) == 0);
        if (script)
            return eq + 1; /* up to the closing brace: the caller prints the name's length */
        if (!cat)
            return NULL;
        n -= k + 1;
        s = eq + 1;
    }
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++)
        if (strlen(gc[i][0]) == n && memcmp(gc[i][0], s, n) == 0)
            return gc[i][1];
    return NULL;
}

/*
 * Rewrites the three things PCRE2 has no option for, so they mean what
 * ECMA-262 says: \s and \S (Unicode white space, not ASCII) and "." (any
 * character but the four line terminators). Escapes are copied as pairs,
 * so "\\s" stays a backslash and an "s"; inside [...] a \s or \S expands to
 * ranges. Returns the malloc'd pattern (*out_len bytes), or NULL (ENOMEM).
 */
static char *ecma_rewrite(const char *src, size_t n, size_t *out_len)
{
    tp_buf_t b = {0};
    bool in_class = false;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char ch = src[i];
        if (ch == '\\' && i + 1 < n) {
            char e = src[++i];
            if ((e == 'p' || e == 'P') && i + 1 < n && src[i + 1] == '{') {
                const char *close = memchr(src + i + 2, '}', n - i - 2);
                if (close != NULL) {
                    size_t len = (size_t)(close - (src + i + 2));
                    const char *name = ecma_property(src + i + 2, len);
                    size_t nl = name == NULL                          ? len
                                : name >= src + i + 2 && name < close ? (size_t)(close - name)
                                                                      : strlen(name);
                    rc = tp_buf_printf(&b, "\\%c{%.*s}", e, (int)nl, name ? name : src + i + 2);
                    i = (size_t)(close - src);
                    continue;
                }
            }
            if (e == 's')
                rc = tp_buf_puts(&b, in_class ? ECMA_SPACE : "[" ECMA_SPACE "]");
            else if (e == 'S')
                rc = tp_buf_puts(&b, in_class ? ECMA_NONSPACE : "[^" ECMA_SPACE "]");
            else
                rc = tp_buf_append(&b, src + i - 1, 2);
            continue;
        }
        if (!in_class && ch == '[') {
            /* "[]" and "[^]" close at once in ECMA-262 (and with ALLOW_EMPTY_CLASS) */
            in_class = true;
            rc = tp_buf_append(&b, "[", 1);
            if (i + 1 < n && src[i + 1] == '^')
                rc = rc ? rc : tp_buf_append(&b, src + ++i, 1);
            continue;
        }
        if (in_class && ch == '[' && i + 1 < n && (src[i + 1] == ':' || src[i + 1] == '.' || src[i + 1] == '=')) {
            /* a POSIX class, [:alpha:]: PCRE2's, copied whole */
            const char *close = NULL;
            for (size_t k = i + 2; k + 1 < n && close == NULL; k++)
                if (src[k] == src[i + 1] && src[k + 1] == ']')
                    close = src + k + 2;
            if (close != NULL) {
                rc = tp_buf_append(&b, src + i, (size_t)(close - (src + i)));
                i = (size_t)(close - src) - 1;
                continue;
            }
        }
        if (in_class && ch == ']')
            in_class = false;
        if (!in_class && ch == '.')
            rc = tp_buf_puts(&b, ECMA_DOT);
        else
            rc = tp_buf_append(&b, &ch, 1);
    }
    if (rc != 0 || tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        return NULL;
    }
    *out_len = b.len - 1;
    return (char *)b.data;
}

#define RE_OPTS                                                                                                        \
    (PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_MATCH_UNSET_BACKREF | PCRE2_DOLLAR_ENDONLY)

/*
 * Compiles pattern src (n bytes) as jsonschema.h describes: rewritten by
 * ecma_rewrite, then PCRE2 with the ECMA-262-leaning options, JIT when it
 * can. A syntax error is reported against the pattern as written.
 */
static int regex_compile(cctx_t *cc, re_t *re, const char *src, size_t n, const seg_t *path)
{
    const uint32_t opts = RE_OPTS;
    int code;
    PCRE2_SIZE off;
    size_t len;
    re->src = src;
    char *ecma = ecma_rewrite(src, n, &len);
    if (ecma == NULL) {
        cfail(cc, path, "out of memory");
        return -1;
    }
    re->code = pcre2_compile((PCRE2_SPTR)ecma, len, opts, &code, &off, cc->pcc);
    free(ecma);
    if (re->code == NULL) {
        /* The offset must point into what the author wrote: ask again. */
        PCRE2_UCHAR why[256];
        int code2;
        PCRE2_SIZE off2;
        pcre2_code *orig = pcre2_compile((PCRE2_SPTR)src, n, opts, &code2, &off2, cc->pcc);
        pcre2_get_error_message(orig ? code : code2, why, sizeof why);
        if (orig == NULL)
            cfail(cc, path, "invalid regex: %s at offset %zu", (char *)why, (size_t)off2);
        else
            cfail(cc, path, "invalid regex: %s", (char *)why);
        pcre2_code_free(orig);
        return -1;
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

/* An array of schemas (allOf, anyOf, oneOf; items' tuple form). */
static int compile_list(cctx_t *cc, const json_t *v, const seg_t *path, bool nonempty, node_t ***out, size_t *n_out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (nonempty && n == 0)) {
        cfail(cc, path, nonempty ? "expected a non-empty array of schemas" : "expected an array of schemas");
        return -1;
    }
    node_t **list = calloc(n ? n : 1, sizeof *list);
    if (list == NULL) {
        cfail(cc, path, "out of memory");
        return -1;
    }
    *out = list;
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        seg_t at = {path, NULL, i, false};
        if ((list[i] = compile(cc, json_array_get(v, i), &at)) == NULL)
            return -1;
    }
    return 0;
}

/* The slot of name (hash h) in n's property table: its entry, or the empty slot it would take. */
static uint32_t *prop_slot(node_t *n, const char *name, size_t len, uint32_t h)
{
    for (uint32_t i = h & n->pmask;; i = (i + 1) & n->pmask) {
        uint32_t k = n->ptab[i];
        if (k == 0)
            return &n->ptab[i];
        const prop_t *p = &n->props[k - 1];
        if (p->hash == h && p->len == len && memcmp(p->name, name, len) == 0)
            return &n->ptab[i];
    }
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
    if (props != NULL && !json_is_object(props)) {
        cfail(cc, &at_props, "expected an object");
        return -1;
    }
    if (req != NULL && !json_is_array(req)) {
        cfail(cc, &at_req, "expected an array of strings");
        return -1;
    }
    size_t total = json_object_size(props) + json_array_size(req);
    size_t cap = 4;
    while (cap < total * 2)
        cap *= 2;
    n->props = calloc(total ? total : 1, sizeof *n->props);
    n->ptab = calloc(cap, sizeof *n->ptab);
    n->req = calloc(json_array_size(req) + 1, sizeof *n->req);
    if (n->props == NULL || n->ptab == NULL || n->req == NULL) {
        cfail(cc, path, "out of memory");
        return -1;
    }
    n->pmask = (uint32_t)(cap - 1);
    if (props != NULL) {
        for (void *it = json_object_iter((json_t *)props); it; it = json_object_iter_next((json_t *)props, it)) {
            const char *k = json_object_iter_key(it);
            size_t klen = json_object_iter_key_len(it);
            seg_t at = {&at_props, k, klen, false};
            prop_t *p = prop_add(n, k, klen);
            if ((p->schema = compile(cc, json_object_iter_value(it), &at)) == NULL)
                return -1;
        }
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        if (!json_is_string(name)) {
            seg_t at = {&at_req, NULL, i, false};
            cfail(cc, &at, "expected a string");
            return -1;
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
    if (!json_is_object(v)) {
        cfail(cc, path, "expected an object");
        return -1;
    }
    n->pprops = calloc(json_object_size(v) + 1, sizeof *n->pprops);
    if (n->pprops == NULL) {
        cfail(cc, path, "out of memory");
        return -1;
    }
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        const char *k = json_object_iter_key(it);
        seg_t at = {path, k, json_object_iter_key_len(it), false};
        pattern_prop_t *pp = &n->pprops[n->n_pprops++];
        if (regex_compile(cc, &pp->re, k, json_object_iter_key_len(it), &at) < 0 ||
            (pp->schema = compile(cc, json_object_iter_value(it), &at)) == NULL)
            return -1;
    }
    n->groups |= G_OBJECT;
    return 0;
}

/* dependencies: per property, an array of names that must come with it, or a schema. */
/* forms: DEP_NAMES (arrays of names), DEP_SCHEMAS, or both (draft-07's dependencies). */
enum { DEP_NAMES = 1, DEP_SCHEMAS = 2 };

static int compile_deps(cctx_t *cc, node_t *n, const json_t *v, const seg_t *path, unsigned forms)
{
    if (!json_is_object(v)) {
        cfail(cc, path, "expected an object");
        return -1;
    }
    dep_t *grown = realloc(n->deps, (n->n_deps + json_object_size(v) + 1) * sizeof *n->deps);
    if (grown == NULL) {
        cfail(cc, path, "out of memory");
        return -1;
    }
    n->deps = grown;
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        const json_t *d = json_object_iter_value(it);
        seg_t at = {path, json_object_iter_key(it), json_object_iter_key_len(it), false};
        dep_t *dep = &n->deps[n->n_deps++];
        memset(dep, 0, sizeof *dep);
        dep->name = at.key;
        dep->len = at.n;
        if (forms == DEP_NAMES && !json_is_array(d)) {
            cfail(cc, &at, "expected an array of strings");
            return -1;
        }
        if (json_is_array(d) && (forms & DEP_NAMES)) {
            for (size_t i = 0; i < json_array_size(d); i++) {
                if (!json_is_string(json_array_get(d, i))) {
                    seg_t ai = {&at, NULL, i, false};
                    cfail(cc, &ai, "expected a string");
                    return -1;
                }
            }
            dep->need = d;
        } else if ((dep->schema = compile(cc, d, &at)) == NULL) {
            return -1;
        }
    }
    n->groups |= G_OBJECT;
    return 0;
}

/* type: a name or an array of names, into a bit set. */
static int compile_type(cctx_t *cc, node_t *n, const json_t *v, const seg_t *path)
{
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v)) {
        cfail(cc, path, "expected a type name or an array of them");
        return -1;
    }
    n->has_type = true;
    for (size_t i = 0; i < count; i++) {
        const json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
        seg_t at = {path, NULL, i, false};
        const seg_t *where = json_is_array(v) ? &at : path;
        if (!json_is_string(t)) {
            cfail(cc, where, "expected a type name");
            return -1;
        }
        size_t k;
        for (k = 0; k < N_TYPES; k++)
            if (strcmp(json_string_value(t), type_names[k].name) == 0)
                break;
        if (k == N_TYPES) {
            char q[96];
            cfail(cc, where, "unknown type %s", quoted(json_string_value(t), json_string_length(t), q, sizeof q));
            return -1;
        }
        n->types |= type_names[k].bit;
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
    if (!json_is_string(v)) {
        cfail(cc, at, "expected a string");
        return -1;
    }
    if (cc->opts.assert_formats)
        n->format = tp_jsonformat_lookup(json_string_value(v));
    return 0;
}

/* One keyword of a schema object into n. 0, or -1 with the error recorded. */
static int compile_keyword(cctx_t *cc, node_t *n, kw_t kw, const json_t *v, const seg_t *at)
{
    switch (kw) {
    case K_TYPE:
        return compile_type(cc, n, v, at);
    case K_ENUM:
        if (!json_is_array(v)) {
            cfail(cc, at, "expected an array");
            return -1;
        }
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
        return (n->additional = compile(cc, v, at)) ? 0 : -1;
    case K_PROPERTY_NAMES:
        n->groups |= G_OBJECT;
        return (n->prop_names = compile(cc, v, at)) ? 0 : -1;
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
            return (n->add_items = compile(cc, v, at)) ? 0 : -1;
        }
        if (json_is_array(v)) {
            n->tuple_form = true;
            return compile_list(cc, v, at, false, &n->tuple, &n->n_tuple);
        }
        return (n->items = compile(cc, v, at)) ? 0 : -1;
    case K_ADDITIONAL_ITEMS:
        n->groups |= G_ARRAY;
        n->add_items_kw = "additionalItems";
        return (n->add_items = compile(cc, v, at)) ? 0 : -1;
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
        return (n->uneval_props = compile(cc, v, at)) ? 0 : -1;
    case K_UNEVAL_ITEMS:
        n->collects = true;
        return (n->uneval_items = compile(cc, v, at)) ? 0 : -1;
    case K_FORMAT:
        return compile_format(cc, n, v, at);
    case K_MIN_ITEMS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->min_items);
    case K_MAX_ITEMS:
        n->groups |= G_ARRAY;
        return get_size(cc, v, at, &n->max_items);
    case K_UNIQUE:
        if (!json_is_boolean(v)) {
            cfail(cc, at, "expected a boolean");
            return -1;
        }
        n->groups |= G_ARRAY;
        n->unique = json_is_true(v);
        return 0;
    case K_CONTAINS:
        n->groups |= G_ARRAY;
        return (n->contains = compile(cc, v, at)) ? 0 : -1;
    case K_MIN_LEN:
        n->groups |= G_STRING;
        return get_size(cc, v, at, &n->min_len);
    case K_MAX_LEN:
        n->groups |= G_STRING;
        return get_size(cc, v, at, &n->max_len);
    case K_PATTERN:
        if (!json_is_string(v)) {
            cfail(cc, at, "expected a string");
            return -1;
        }
        n->groups |= G_STRING;
        return regex_compile(cc, &n->pattern, json_string_value(v), json_string_length(v), at);
    case K_MINIMUM:
    case K_MAXIMUM:
    case K_XMINIMUM:
    case K_XMAXIMUM:
    case K_MULTIPLE_OF:
        if (!is_number(v) || (kw == K_MULTIPLE_OF && !(num_value(v) > 0))) {
            cfail(cc, at, kw == K_MULTIPLE_OF ? "expected a number greater than 0" : "expected a number");
            return -1;
        }
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
        return (n->not_ = compile(cc, v, at)) ? 0 : -1;
    case K_IF:
        n->groups |= G_COMBINE;
        return (n->if_ = compile(cc, v, at)) ? 0 : -1;
    case K_THEN:
        return (n->then_ = compile(cc, v, at)) ? 0 : -1;
    case K_ELSE:
        return (n->else_ = compile(cc, v, at)) ? 0 : -1;
    case K_DEFINITIONS:
    case K_DEFS:
        /* Compiled now, so a broken definition is an error even unused. */
        if (!json_is_object(v)) {
            cfail(cc, at, "expected an object");
            return -1;
        }
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            seg_t d = {at, json_object_iter_key(it), json_object_iter_key_len(it), false};
            if (compile(cc, json_object_iter_value(it), &d) == NULL)
                return -1;
        }
        return 0;
    }
    return 0;
}

/* ---- URIs, resources, references ---- */

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

/* RFC 3986 5.2.4: appends path p with its "." and ".." segments removed. */
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
                return -1;
            if (i < n && p[i] == '/')
                continue;
        } else if ((n - i >= 4 && memcmp(p + i, "/../", 4) == 0) || (n - i == 3 && memcmp(p + i, "/..", 3) == 0)) {
            i += 3;
            while (b->len > start && b->data[b->len - 1] != '/')
                b->len--;
            if (b->len > start)
                b->len--;
            if (i >= n && tp_buf_append(b, "/", 1) < 0)
                return -1;
        } else if ((n - i == 1 && p[i] == '.') || (n - i == 2 && memcmp(p + i, "..", 2) == 0)) {
            i = n;
        } else {
            size_t j = i + (p[i] == '/');
            while (j < n && p[j] != '/')
                j++;
            if (tp_buf_append(b, p + i, j - i) < 0)
                return -1;
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
        rc = tp_buf_append(&o, scheme->s, scheme->n) || tp_buf_append(&o, ":", 1) ? -1 : 0;
    if (rc == 0 && auth->has)
        rc = tp_buf_append(&o, "//", 2) || tp_buf_append(&o, auth->s, auth->n) ? -1 : 0;
    if (rc == 0)
        rc = tp_buf_append(&o, path.data, path.len);
    if (rc == 0 && query->has)
        rc = tp_buf_append(&o, "?", 1) || tp_buf_append(&o, query->s, query->n) ? -1 : 0;
    if (rc == 0 && r.frag.has)
        rc = tp_buf_append(&o, "#", 1) || tp_buf_append(&o, r.frag.s, r.frag.n) ? -1 : 0;
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
    return put_pointer(b, &one);
}

/* The JSON Pointer of target inside v, into ptr; false when it is not there. */
static bool find_ptr(const json_t *v, const json_t *target, int depth, tp_buf_t *ptr)
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
            if (find_ptr(json_object_iter_value(it), target, depth + 1, ptr))
                return true;
            ptr->len = mark;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (tp_buf_printf(ptr, "/%zu", i) < 0)
                return false;
            if (find_ptr(json_array_get(v, i), target, depth + 1, ptr))
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

/* The pointer-keyed table of objinfo: which resource each schema object is in. */
static res_t *res_of(cctx_t *cc, const json_t *js)
{
    if (cc->objs_cap == 0)
        return NULL;
    for (size_t i = ptr_hash(js, cc->objs_cap - 1);; i = (i + 1) & (cc->objs_cap - 1)) {
        if (cc->objs[i].key == NULL)
            return NULL;
        if (cc->objs[i].key == js)
            return cc->objs[i].res;
    }
}

static int res_put(cctx_t *cc, const json_t *js, res_t *res)
{
    if ((cc->objs_n + 1) * 2 > cc->objs_cap) {
        size_t cap = cc->objs_cap ? cc->objs_cap * 2 : 64;
        obj_slot_t *m = calloc(cap, sizeof *m);
        if (m == NULL)
            return -1;
        for (size_t j = 0; j < cc->objs_cap; j++) {
            if (cc->objs[j].key == NULL)
                continue;
            size_t i = ptr_hash(cc->objs[j].key, cap - 1);
            while (m[i].key != NULL)
                i = (i + 1) & (cap - 1);
            m[i] = cc->objs[j];
        }
        free(cc->objs);
        cc->objs = m;
        cc->objs_cap = cap;
    }
    size_t i = ptr_hash(js, cc->objs_cap - 1);
    while (cc->objs[i].key != NULL && cc->objs[i].key != js)
        i = (i + 1) & (cc->objs_cap - 1);
    if (cc->objs[i].key == NULL)
        cc->objs_n++;
    cc->objs[i].key = js;
    cc->objs[i].res = res;
    return 0;
}

/* The schema a name ("URI" or "URI#anchor") was given to, or NULL. */
static const json_t *name_get(cctx_t *cc, const char *key)
{
    for (size_t i = 0; i < cc->n_names; i++)
        if (strcmp(cc->names[i].key, key) == 0)
            return cc->names[i].js;
    return NULL;
}

/* Gives a name to a schema; the first one given wins. 0, or -1 (ENOMEM). */
static int name_put(cctx_t *cc, const char *key, const json_t *js)
{
    if (name_get(cc, key) != NULL)
        return 0;
    if (tp_array_fit(&cc->names, &cc->cap_names, cc->n_names + 1, sizeof *cc->names, 16) < 0)
        return -1;
    if ((cc->names[cc->n_names].key = strdup(key)) == NULL)
        return -1;
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
 * enum, const, default and examples are data, not searched.
 */
static int index_value(cctx_t *cc, const json_t *v, res_t *res, const seg_t *path, int depth)
{
    if (depth > TP_JSONSCHEMA_MAX_DEPTH)
        return 0; /* compile() says it */
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            seg_t at = {path, NULL, i, false};
            if (index_value(cc, json_array_get(v, i), res, &at, depth + 1) < 0)
                return -1;
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
            if (sk != NULL && dialect_of(cc, sk, &d, &at, 0) < 0) {
                free(abs);
                return -1;
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
            int rc = name ? name_put(cc, name, v) : -1;
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
            int rc = name ? name_put(cc, name, v) : -1;
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
    if (res_put(cc, v, res) < 0)
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
                if (index_value(cc, json_object_iter_value(j), res, &at2, depth + 2) < 0)
                    return -1;
            }
        } else if (where != 2 && index_value(cc, val, res, &at, depth + 1) < 0) {
            return -1;
        }
    }
    return 0;
nomem:
    cfail(cc, path, "out of memory");
    return -1;
}

/*
 * A whole document: its root becomes a resource named uri (and its own
 * "$id", when it has one), of the dialect its "$schema" names or else d.
 */
static res_t *index_doc(cctx_t *cc, const json_t *doc, const char *uri, const char *doc_name, const dialect_t *d)
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
        cfail(cc, NULL, "out of memory");
        return NULL;
    }
    if (*uri && strcmp(r->uri, uri) != 0 && name_put(cc, uri, doc) < 0) {
        free(abs);
        cfail(cc, NULL, "out of memory");
        return NULL;
    }
    /* draft-07: a root "$id" may carry an anchor too, "http://x/s.json#top" */
    size_t base = strcspn(abs, "#");
    if (dd.draft == TP_JSONSCHEMA_DRAFT7 && abs[base] && abs[base + 1]) {
        int rc = name_put(cc, abs, doc);
        if (rc < 0) {
            free(abs);
            cfail(cc, NULL, "out of memory");
            return NULL;
        }
    }
    free(abs);
    return index_value(cc, doc, r, NULL, 0) < 0 ? NULL : r;
}

/* Keeps doc (owned now) and its name (malloc'd or NULL) with the schema. 0, or -1 (both freed). */
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
        return -1;
    }
    s->docs[s->n_docs] = doc;
    s->doc_names[s->n_docs++] = name;
    return 0;
}

/*
 * Another document, by its absolute URI (no fragment): asked of the
 * caller's loader (never the network), copied, indexed. NULL when there is
 * none; an error only when it came but is broken.
 */
static res_t *load_doc(cctx_t *cc, const char *uri, const seg_t *path)
{
    if (cc->opts.load == NULL)
        return NULL;
    json_t *got = cc->opts.load(uri, cc->opts.load_arg);
    if (got == NULL)
        return NULL;
    json_t *doc = json_deep_copy(got);
    json_decref(got);
    char *name = strdup(uri);
    if (doc == NULL || name == NULL || keep_doc(cc->s, doc, name) < 0) {
        if (doc == NULL || name == NULL) {
            json_decref(doc);
            free(name);
        }
        cfail(cc, path, "out of memory");
        return NULL;
    }
    if (!json_is_object(doc) && !json_is_boolean(doc)) {
        cfail(cc, path, "document \"%.200s\" is not a schema (an object or a boolean)", uri);
        return NULL;
    }
    return index_doc(cc, doc, uri, name, &cc->dflt);
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
    if (!json_is_string(sk)) {
        cfail(cc, path, "expected a URI string");
        return -1;
    }
    int known = known_dialect(json_string_value(sk));
    if (known != 0) {
        d->draft = known;
        d->no_validation = false;
        return 0;
    }
    const json_t *meta = NULL;
    if (depth < 4) {
        char *uri = strndup(json_string_value(sk), strcspn(json_string_value(sk), "#"));
        if (uri == NULL) {
            cfail(cc, path, "out of memory");
            return -1;
        }
        meta = name_get(cc, uri);
        if (meta == NULL && cc->opts.load != NULL) {
            json_t *got = cc->opts.load(uri, cc->opts.load_arg);
            if (got != NULL && keep_doc(cc->s, got, NULL) == 0)
                meta = got;
        }
        free(uri);
    }
    if (!json_is_object(meta)) {
        cfail(cc, path, "unsupported dialect %s (supported: draft-07, 2020-12)",
              quoted(json_string_value(sk), json_string_length(sk), q, sizeof q));
        return -1;
    }
    const json_t *own = json_object_get(meta, "$schema");
    if (own == NULL || strcmp(json_string_value(own) ? json_string_value(own) : "", json_string_value(sk)) == 0) {
        cfail(cc, path, "unsupported dialect %s (supported: draft-07, 2020-12)",
              quoted(json_string_value(sk), json_string_length(sk), q, sizeof q));
        return -1;
    }
    if (dialect_of(cc, own, d, path, depth + 1) < 0)
        return -1;
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
            if (!ok && json_is_true(json_object_iter_value(it))) {
                cfail(cc, path, "required vocabulary %s is not supported", quoted(k, strlen(k), q, sizeof q));
                return -1;
            }
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
    res_t *res = res_of(cc, from);
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
        if (cc->failed)
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
    if (target != NULL && memo_get(cc, target) != NULL) {
        /* compiled already: its location is not needed again */
        if ((*where = strdup("")) == NULL)
            target = NULL;
    } else if (target != NULL) {
        res_t *tr = json_is_object(target) ? res_of(cc, target) : res_of(cc, doc);
        tp_buf_t ptr = {0};
        const json_t *tdoc = tr ? tr->doc : cc->s->doc;
        if (tr && tr->doc_name && (tp_buf_puts(&ptr, tr->doc_name) < 0 || tp_buf_puts(&ptr, "#") < 0))
            target = NULL;
        if (target && !find_ptr(tdoc, target, 0, &ptr))
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
static int compile_ref(cctx_t *cc, node_t *n, const json_t *from, const char *kw, const json_t *ref, const seg_t *path,
                       node_t **out)
{
    seg_t at = {path, kw, strlen(kw), false};
    char q[160], *where;
    if (!json_is_string(ref)) {
        cfail(cc, &at, "expected a string");
        return -1;
    }
    quoted(json_string_value(ref), json_string_length(ref), q, sizeof q);
    const json_t *target = resolve(cc, from, json_string_value(ref), &at, &where);
    if (cc->failed)
        return -1;
    if (target == NULL) {
        const char *r = json_string_value(ref);
        if (r[0] == '#')
            cfail(cc, &at, "unresolvable reference %s", q);
        else
            cfail(cc, &at,
                  "unresolvable reference %s (a document that is not this schema must be given in "
                  "\"schema_refs\"; nothing is fetched from the network)",
                  q);
        return -1;
    }
    /* For the cycle check after compiling: where this reference is and what it says. */
    tp_buf_t b = {0};
    if (put_location(&b, &at) < 0 || tp_buf_printf(&b, ": circular reference %s", q) < 0 ||
        tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        free(where);
        cfail(cc, &at, "out of memory");
        return -1;
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
    *out = compile(cc, target, *where ? &tpath : NULL);
    free(where);
    return *out ? 0 : -1;
}

/*
 * Compiles one schema value (object or boolean) into a node, or returns the
 * node it already became. NULL on error (recorded in cc).
 */
static node_t *compile(cctx_t *cc, const json_t *js, const seg_t *path)
{
    node_t *n = memo_get(cc, js);
    if (n != NULL || cc->failed)
        return n;
    if (!json_is_object(js) && !json_is_boolean(js)) {
        cfail(cc, path, "expected a schema (an object or a boolean), got %s", type_name(js));
        return NULL;
    }
    if (cc->depth >= TP_JSONSCHEMA_MAX_DEPTH) {
        cfail(cc, path, "schema nested too deeply");
        return NULL;
    }
    if ((n = node_new(cc, js, path)) == NULL)
        return NULL;
    if (json_is_boolean(js)) {
        n->kind = json_is_true(js) ? N_TRUE : N_FALSE;
        return n;
    }
    n->res = res_of(cc, js);
    if (n->res == NULL)
        n->res = cc->root_res; /* a schema inside data ("#/enum/0"): the document's */
    const dialect_t *d = &n->res->d;
    unsigned mine = d->draft == TP_JSONSCHEMA_DRAFT7 ? D7 : D2020;
    cc->depth++;
    const json_t *ref = json_object_get(js, "$ref");
    if (ref != NULL && mine == D7) {
        n->kind = N_REF; /* draft-07: its siblings are ignored */
        int rc = compile_ref(cc, n, js, "$ref", ref, path, &n->ref);
        cc->depth--;
        return rc == 0 ? n : NULL;
    }
    n->kind = N_SCHEMA;
    n->min_contains = 1;
    n->max_contains = SIZE_MAX;
    if (ref != NULL) {
        n->groups |= G_COMBINE;
        if (compile_ref(cc, n, js, "$ref", ref, path, &n->apply_ref) < 0)
            goto fail;
    }
    const json_t *dref = mine == D2020 ? json_object_get(js, "$dynamicRef") : NULL;
    if (dref != NULL) {
        n->groups |= G_COMBINE;
        if (compile_ref(cc, n, js, "$dynamicRef", dref, path, &n->dyn_ref) < 0)
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
    free(cc->memo);
    free(cc->objs);
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
 * Depth-first over the subschemas that apply to the same value as n ($ref,
 * allOf, anyOf, oneOf, not, if, then, else, dependencies), looking for a
 * way back to a node on the stack: {"$ref": "#"} at the root, or
 * {"anyOf": [{"type": "string"}, {"$ref": "#"}]}. Validating one would
 * come back where it started without descending into the instance, for
 * ever. Such a loop always passes a $ref; the error names the last one.
 */
static int same_value_loop(cctx_t *cc, node_t *n, node_t **stack, size_t depth)
{
    if (n->mark == 2)
        return 0;
    if (n->mark == 1) {
        for (size_t i = depth; i-- > 0;) {
            if (stack[i]->ref_where != NULL) {
                if (cc->err && cc->errlen)
                    snprintf(cc->err, cc->errlen, "%s", stack[i]->ref_where);
                return -1;
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
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i] != NULL && same_value_loop(cc, one[i], stack, depth + 1) < 0)
            return -1;
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < sizes[l]; i++)
            if (same_value_loop(cc, lists[l][i], stack, depth + 1) < 0)
                return -1;
    for (size_t i = 0; i < n->n_deps; i++)
        if (n->deps[i].schema != NULL && same_value_loop(cc, n->deps[i].schema, stack, depth + 1) < 0)
            return -1;
    n->mark = 2;
    return 0;
}

/*
 * After compiling: no same-value loops (above), then every $ref chain
 * collapsed so an N_REF points straight at a node that is not one.
 */
static int finish_refs(cctx_t *cc)
{
    tp_jsonschema_t *s = cc->s;
    node_t **stack = malloc((TP_JSONSCHEMA_MAX_DEPTH + 1) * sizeof *stack);
    if (stack == NULL) {
        cfail(cc, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < s->n_nodes; i++) {
        if (same_value_loop(cc, s->nodes[i], stack, 0) < 0) {
            free(stack);
            return -1;
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
    return 0;
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
        cfail(&cc, NULL, "out of memory");
        goto fail;
    }
    if ((cc.root_res = index_doc(&cc, cc.s->doc, "", NULL, &cc.dflt)) == NULL)
        goto fail;
    cc.s->root = compile(&cc, cc.s->doc, NULL);
    if (cc.s->root == NULL)
        goto fail;
    for (size_t r = 0; r < cc.s->n_res; r++) {
        res_t *res = cc.s->res[r];
        for (size_t i = 0; i < res->n_dyn; i++) {
            tp_buf_t ptr = {0};
            if (res->doc_name && (tp_buf_puts(&ptr, res->doc_name) < 0 || tp_buf_puts(&ptr, "#") < 0))
                ptr.len = 0;
            find_ptr(res->doc, res->dyn[i].js, 0, &ptr);
            seg_t at = {NULL, (const char *)ptr.data, ptr.len, true};
            res->dyn[i].node = compile(&cc, res->dyn[i].js, ptr.len ? &at : NULL);
            tp_buf_free(&ptr);
            if (res->dyn[i].node == NULL)
                goto fail;
        }
    }
    if (finish_refs(&cc) < 0)
        goto fail;
    pcre2_compile_context_free(cc.pcc);
    cctx_free(&cc);
    return cc.s;
fail:
    if (!cc.failed && err && errlen && !err[0])
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
        return -1;
    return 0;
}

/* ---- validating ---- */

typedef struct {
    tp_buf_t *out; /* messages, or NULL */
    int max;       /* most messages written */
    int written;
    int count;  /* violations found */
    bool quiet; /* a verdict only: stop at the first violation */
    bool oom;
    int depth;
    pcre2_match_data *md; /* made on the first regex match, freed at the end */
    bool dynamic;         /* keep the dynamic scope (some $dynamicRef needs it) */
    const struct scope *scope;
} vctx_t;

/* The dynamic scope: the resources a validation has entered, innermost first. */
typedef struct scope {
    const res_t *res;
    const struct scope *up;
} scope_t;

/*
 * What the subschemas applied to one instance evaluated (2020-12
 * annotations, for unevaluatedProperties and unevaluatedItems): a bit per
 * member of the instance, its keys in iteration order or its items.
 * Collected only under a node that has one of the two.
 */
typedef struct {
    uint64_t *bits;
    size_t n;
    uint64_t inl;
} ev_t;

static void ev_init(vctx_t *c, ev_t *e, const json_t *inst)
{
    e->n = json_is_object(inst) ? json_object_size(inst) : json_is_array(inst) ? json_array_size(inst) : 0;
    e->inl = 0;
    e->bits = &e->inl;
    if (e->n > 64) {
        e->bits = calloc((e->n + 63) / 64, sizeof *e->bits);
        if (e->bits == NULL) {
            c->oom = true;
            e->bits = &e->inl;
            e->n = 0;
        }
    }
}

static void ev_free(ev_t *e)
{
    if (e->bits != &e->inl)
        free(e->bits);
}

static void ev_set(ev_t *e, size_t i)
{
    if (e != NULL && i < e->n)
        e->bits[i / 64] |= (uint64_t)1 << (i % 64);
}

static bool ev_get(const ev_t *e, size_t i)
{
    return i < e->n && (e->bits[i / 64] >> (i % 64) & 1);
}

static void ev_merge(ev_t *dst, const ev_t *src)
{
    for (size_t i = 0; i < (src->n + 63) / 64 && i < (dst->n + 63) / 64; i++)
        dst->bits[i] |= src->bits[i];
}

static void v_node(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev);

/*
 * A subschema applied to the same instance (allOf, $ref, if...): with a
 * collector, it gets its own, kept only when it passed (a failed
 * subschema's annotations are dropped).
 */
static void v_in(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    if (ev == NULL) {
        v_node(c, n, inst, path, NULL);
        return;
    }
    ev_t mine;
    ev_init(c, &mine, inst);
    int before = c->count;
    v_node(c, n, inst, path, &mine);
    if (c->count == before)
        ev_merge(ev, &mine);
    ev_free(&mine);
}

/*
 * Counts one violation at path and returns the buffer to write what it is
 * into ("POINTER: " already there), or NULL when nothing is to be written
 * (quiet, no msg, or past the cap).
 */
static tp_buf_t *violation(vctx_t *c, const seg_t *path)
{
    c->count++;
    if (c->quiet || c->out == NULL || c->written >= c->max)
        return NULL;
    if ((c->written++ && tp_buf_puts(c->out, "; ") < 0) || put_location(c->out, path) < 0 ||
        tp_buf_puts(c->out, ": ") < 0) {
        c->oom = true;
        return NULL;
    }
    return c->out;
}

/* Message pieces: each remembers a failed allocation in c->oom. */
static void put(vctx_t *c, tp_buf_t *b, const char *s)
{
    if (tp_buf_puts(b, s) < 0)
        c->oom = true;
}

__attribute__((format(printf, 3, 4))) static void putf(vctx_t *c, tp_buf_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(c, b, tmp);
}

static void put_value(vctx_t *c, tp_buf_t *b, const json_t *v, size_t limit)
{
    if (put_short(b, v, limit) < 0)
        c->oom = true;
}

/* "number 5", "string \"x\"", "null": what a type violation says it got. */
static void put_typed(vctx_t *c, tp_buf_t *b, const json_t *v)
{
    if (!json_is_null(v)) {
        put(c, b, type_name(v));
        put(c, b, " ");
    }
    put_value(c, b, v, SHORT);
}

/* "string", "string or null", "string, number or null". */
static void put_types(vctx_t *c, tp_buf_t *b, unsigned types)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < N_TYPES; i++)
        total += (types & type_names[i].bit) != 0;
    for (size_t i = 0; i < N_TYPES; i++) {
        if (!(types & type_names[i].bit))
            continue;
        if (k > 0)
            put(c, b, k + 1 == total ? " or " : ", ");
        put(c, b, type_names[i].name);
        k++;
    }
    if (total == 0)
        put(c, b, "no type at all (\"type\" is [])");
}

/* Runs n on inst for a verdict only: true when valid. With ev, as v_in. */
static bool v_quiet_ev(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    int count = c->count;
    bool quiet = c->quiet;
    c->count = 0;
    c->quiet = true;
    v_in(c, n, inst, path, ev);
    bool ok = c->count == 0;
    c->count = count;
    c->quiet = quiet;
    return ok;
}

static bool v_quiet(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path)
{
    return v_quiet_ev(c, n, inst, path, NULL);
}

/*
 * Appends what n finds wrong with inst, its first violation only, for a
 * summary (anyOf, oneOf, propertyNames): without the pointer when it is
 * the summary's own (here), with it when deeper; "(+N more)" when there
 * were others.
 */
static void put_first(vctx_t *c, tp_buf_t *b, const node_t *n, const json_t *inst, const seg_t *path, const char *here,
                      size_t here_len)
{
    tp_buf_t tmp = {0};
    tp_buf_t *out = c->out;
    int max = c->max, written = c->written, count = c->count;
    bool quiet = c->quiet;
    c->out = &tmp;
    c->max = 1;
    c->written = c->count = 0;
    c->quiet = false;
    v_node(c, n, inst, path, NULL);
    int found = c->count;
    c->out = out;
    c->max = max;
    c->written = written;
    c->count = count;
    c->quiet = quiet;
    const char *s = (const char *)tmp.data;
    size_t len = tmp.len;
    if (len > here_len + 2 && memcmp(s, here, here_len) == 0 && memcmp(s + here_len, ": ", 2) == 0) {
        s += here_len + 2;
        len -= here_len + 2;
    }
    size_t keep = utf8_cut(s, len, SHORT_ALT);
    if (tp_buf_append(b, s, keep) < 0)
        c->oom = true;
    if (keep < len)
        put(c, b, "...");
    if (found > 1)
        putf(c, b, " (+%d more)", found - 1);
    tp_buf_free(&tmp);
}

/*
 * The summary of alternatives none of which matched:
 * "matched none of 2 alternatives: (1) ... (2) ...".
 */
static void put_alternatives(vctx_t *c, tp_buf_t *b, node_t *const *alts, size_t n, const char *which,
                             const json_t *inst, const seg_t *path)
{
    tp_buf_t here = {0};
    if (put_location(&here, path) < 0)
        c->oom = true;
    putf(c, b, "matched none of %zu alternatives%s:", n, which);
    for (size_t i = 0; i < n && i < MAX_ALTS; i++) {
        putf(c, b, " (%zu) ", i + 1);
        put_first(c, b, alts[i], inst, path, (const char *)here.data, here.len);
    }
    if (n > MAX_ALTS)
        putf(c, b, " (and %zu more)", n - MAX_ALTS);
    tp_buf_free(&here);
}

/* The false schema, directly or through a $ref: said by its keyword's name. */
static bool is_false(const node_t *n)
{
    return (n->kind == N_REF ? n->ref : n)->kind == N_FALSE;
}

/* Does re match anywhere in s? A failure to run it counts as no match. */
static bool v_match(vctx_t *c, const re_t *re, const char *s, size_t n)
{
    if (c->md == NULL && (c->md = pcre2_match_data_create(1, NULL)) == NULL) {
        c->oom = true;
        return false;
    }
    int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, 0, 0, c->md, NULL)
                     : pcre2_match(re->code, (PCRE2_SPTR)s, n, 0, 0, c->md, NULL);
    return rc >= 0; /* 0: matched, the ovector too small to say where */
}

/* propertyNames: the name as a JSON string, checked against the schema. */
static void v_name(vctx_t *c, const node_t *n, const char *key, size_t klen, const seg_t *path)
{
    json_t *name = json_stringn_nocheck(key, klen);
    if (name == NULL) {
        c->oom = true;
        return;
    }
    if (!v_quiet(c, n->prop_names, name, path)) {
        tp_buf_t *b = violation(c, path);
        if (b != NULL) {
            tp_buf_t here = {0};
            if (put_location(&here, path) < 0)
                c->oom = true;
            put(c, b, "invalid property name ");
            put_value(c, b, name, SHORT);
            put(c, b, ": ");
            put_first(c, b, n->prop_names, name, path, (const char *)here.data, here.len);
            tp_buf_free(&here);
        }
    }
    json_decref(name);
}

/*
 * The object keywords, in one pass over the instance's keys (each looked
 * up in the hashed table of properties and required names, matched against
 * the patterns, else given to additionalProperties), then the required
 * names the pass did not see, then dependencies.
 */
static void v_object(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    size_t size = json_object_size(inst);
    tp_buf_t *b;
    if (size < n->min_props && (b = violation(c, path)) != NULL)
        putf(c, b, "expected at least %zu propert%s, got %zu", n->min_props, n->min_props == 1 ? "y" : "ies", size);
    if (size > n->max_props && (b = violation(c, path)) != NULL)
        putf(c, b, "expected at most %zu propert%s, got %zu", n->max_props, n->max_props == 1 ? "y" : "ies", size);
    if (c->quiet && c->count)
        return;
    /* One pass over the instance's keys: properties, patterns, the rest. */
    uint64_t seen = 0;
    size_t pos = 0;
    for (void *it = json_object_iter((json_t *)inst); it; it = json_object_iter_next((json_t *)inst, it), pos++) {
        const char *key = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        const json_t *val = json_object_iter_value(it);
        seg_t at = {path, key, klen, false};
        bool matched = false;
        if (n->n_props > 0) {
            uint32_t k = *prop_slot((node_t *)n, key, klen, hash_bytes(key, klen));
            if (k != 0) {
                const prop_t *p = &n->props[k - 1];
                seen |= p->req_bits;
                if (p->schema != NULL) {
                    matched = true;
                    v_node(c, p->schema, val, &at, NULL);
                }
            }
        }
        for (size_t i = 0; i < n->n_pprops; i++) {
            if (v_match(c, &n->pprops[i].re, key, klen)) {
                matched = true;
                v_node(c, n->pprops[i].schema, val, &at, NULL);
            }
        }
        if (!matched && n->additional != NULL) {
            if (is_false(n->additional)) {
                if ((b = violation(c, &at)) != NULL)
                    put(c, b, "unexpected property (additionalProperties is false)");
            } else {
                v_node(c, n->additional, val, &at, NULL);
            }
            matched = true;
        }
        if (matched)
            ev_set(ev, pos);
        if (n->prop_names != NULL)
            v_name(c, n, key, klen, path);
        if (c->quiet && c->count)
            return;
    }
    for (size_t i = 0; i < n->n_req; i++) {
        const prop_t *p = &n->props[n->req[i]];
        bool present = i < 64 ? (seen >> i & 1) != 0 : json_object_getn(inst, p->name, p->len) != NULL;
        if (!present && (b = violation(c, path)) != NULL) {
            put(c, b, "missing required property ");
            if (tp_json_put_string(b, p->name, p->len) < 0)
                c->oom = true;
        }
        if (c->quiet && c->count)
            return;
    }
    for (size_t i = 0; i < n->n_deps; i++) {
        const dep_t *d = &n->deps[i];
        if (json_object_getn(inst, d->name, d->len) == NULL)
            continue;
        if (d->schema != NULL) {
            v_in(c, d->schema, inst, path, ev);
            if (c->quiet && c->count)
                return;
            continue;
        }
        for (size_t k = 0; k < json_array_size(d->need); k++) {
            const json_t *need = json_array_get(d->need, k);
            if (json_object_getn(inst, json_string_value(need), json_string_length(need)) != NULL)
                continue;
            if ((b = violation(c, path)) != NULL) {
                put(c, b, "missing property ");
                put_value(c, b, need, SHORT);
                put(c, b, " (required when ");
                if (tp_json_put_string(b, d->name, d->len) < 0)
                    c->oom = true;
                put(c, b, " is present)");
            }
            if (c->quiet)
                return;
        }
    }
}

typedef struct {
    uint64_t h;
    size_t i;
} hashed_item_t;

static int hashed_cmp(const void *a, const void *b)
{
    const hashed_item_t *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The first pair of equal items (i < j, smallest j), or false when unique. */
static bool find_duplicate(vctx_t *c, const json_t *arr, size_t *pi, size_t *pj)
{
    size_t n = json_array_size(arr);
    if (n <= 32) {
        for (size_t j = 1; j < n; j++)
            for (size_t i = 0; i < j; i++)
                if (json_eq(json_array_get(arr, i), json_array_get(arr, j))) {
                    *pi = i;
                    *pj = j;
                    return true;
                }
        return false;
    }
    /* Many items: sort by hash, compare only within runs of equal hashes. */
    hashed_item_t *v = malloc(n * sizeof *v);
    if (v == NULL) {
        c->oom = true;
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        v[i].h = json_hash(json_array_get(arr, i));
        v[i].i = i;
    }
    qsort(v, n, sizeof *v, hashed_cmp);
    bool found = false;
    for (size_t a = 0; a < n; a++) {
        for (size_t b = a + 1; b < n && v[b].h == v[a].h; b++) {
            /* within a run indices ascend: v[a].i < v[b].i */
            if ((!found || v[b].i < *pj || (v[b].i == *pj && v[a].i < *pi)) &&
                json_eq(json_array_get(arr, v[a].i), json_array_get(arr, v[b].i))) {
                *pi = v[a].i;
                *pj = v[b].i;
                found = true;
            }
        }
    }
    free(v);
    return found;
}

/* The array keywords: sizes, items (both forms), uniqueItems, contains. */
static void v_array(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    size_t size = json_array_size(inst);
    tp_buf_t *b;
    if (size < n->min_items && (b = violation(c, path)) != NULL)
        putf(c, b, "expected at least %zu item%s, got %zu", n->min_items, n->min_items == 1 ? "" : "s", size);
    if (size > n->max_items && (b = violation(c, path)) != NULL)
        putf(c, b, "expected at most %zu item%s, got %zu", n->max_items, n->max_items == 1 ? "" : "s", size);
    if (c->quiet && c->count)
        return;
    if (n->tuple_form) {
        for (size_t i = 0; i < size && i < n->n_tuple; i++) {
            seg_t at = {path, NULL, i, false};
            v_node(c, n->tuple[i], json_array_get(inst, i), &at, NULL);
            ev_set(ev, i);
            if (c->quiet && c->count)
                return;
        }
        if (size > n->n_tuple && n->add_items != NULL) {
            if (is_false(n->add_items)) {
                if ((b = violation(c, path)) != NULL)
                    putf(c, b, "expected at most %zu item%s (%s is false), got %zu", n->n_tuple,
                         n->n_tuple == 1 ? "" : "s", n->add_items_kw, size);
            } else {
                for (size_t i = n->n_tuple; i < size; i++) {
                    seg_t at = {path, NULL, i, false};
                    v_node(c, n->add_items, json_array_get(inst, i), &at, NULL);
                    ev_set(ev, i);
                    if (c->quiet && c->count)
                        return;
                }
            }
        }
    } else if (n->items != NULL) {
        for (size_t i = 0; i < size; i++) {
            seg_t at = {path, NULL, i, false};
            v_node(c, n->items, json_array_get(inst, i), &at, NULL);
            if (c->quiet && c->count)
                return;
        }
    }
    size_t i, j;
    if (n->unique && size > 1 && find_duplicate(c, inst, &i, &j) && (b = violation(c, path)) != NULL) {
        put(c, b, "expected unique items, got ");
        put_value(c, b, json_array_get(inst, i), SHORT);
        putf(c, b, " at %zu and %zu", i, j);
    }
    if (n->contains != NULL) {
        /* draft-07: one match; 2020-12: minContains to maxContains of them */
        size_t found = 0;
        bool all = ev != NULL || n->max_contains != SIZE_MAX;
        for (size_t k = 0; k < size && (all || found < n->min_contains); k++) {
            seg_t at = {path, NULL, k, false};
            if (v_quiet(c, n->contains, json_array_get(inst, k), &at)) {
                found++;
                ev_set(ev, k);
            }
        }
        if (found < n->min_contains && (b = violation(c, path)) != NULL) {
            if (n->min_contains == 1)
                putf(c, b, "expected at least one item matching the \"contains\" schema, got none of %zu", size);
            else
                putf(c, b, "expected at least %zu items matching the \"contains\" schema, got %zu of %zu",
                     n->min_contains, found, size);
        }
        if (found > n->max_contains && (b = violation(c, path)) != NULL)
            putf(c, b, "expected at most %zu item%s matching the \"contains\" schema, got %zu of %zu", n->max_contains,
                 n->max_contains == 1 ? "" : "s", found, size);
    }
}

/*
 * A string in an asserted format. "regex" is the one jsonformat.c cannot
 * say alone: a pattern is valid when it compiles the way "pattern" does.
 */
static bool v_format(vctx_t *c, format_t f, const char *s, size_t n)
{
    if (f != F_REGEX)
        return tp_jsonformat_check(f, s, n);
    size_t len;
    char *ecma = ecma_rewrite(s, n, &len);
    if (ecma == NULL) {
        c->oom = true;
        return false;
    }
    int code;
    PCRE2_SIZE off;
    pcre2_compile_context *pcc = pcre2_compile_context_create(NULL);
    if (pcc == NULL || pcre2_set_compile_extra_options(pcc, PCRE2_EXTRA_ALT_BSUX) != 0) {
        pcre2_compile_context_free(pcc);
        free(ecma);
        c->oom = true;
        return false;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)ecma, len, RE_OPTS, &code, &off, pcc);
    pcre2_compile_context_free(pcc);
    free(ecma);
    pcre2_code_free(re);
    return re != NULL;
}

/* minLength and maxLength in code points, the format, then pattern. */
static void v_string(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path)
{
    const char *s = json_string_value(inst);
    size_t bytes = json_string_length(inst);
    tp_buf_t *b;
    /* A code point is 1 to 4 bytes: count only when the bytes cannot decide. */
    if ((bytes + 3) / 4 < n->min_len || bytes > n->max_len) {
        size_t cp = utf8_count(s, bytes);
        if ((cp < n->min_len || cp > n->max_len) && (b = violation(c, path)) != NULL) {
            bool under = cp < n->min_len;
            size_t want = under ? n->min_len : n->max_len;
            putf(c, b, "expected at %s %zu character%s, got %zu (", under ? "least" : "most", want,
                 want == 1 ? "" : "s", cp);
            put_value(c, b, inst, SHORT);
            put(c, b, ")");
        }
        if (c->quiet && c->count)
            return;
    }
    if (n->format != F_NONE && !v_format(c, n->format, s, bytes) && (b = violation(c, path)) != NULL) {
        putf(c, b, "expected a valid %s, got ", tp_jsonformat_name(n->format));
        put_value(c, b, inst, SHORT);
        if (c->quiet)
            return;
    }
    if (n->pattern.code != NULL && !v_match(c, &n->pattern, s, bytes) && (b = violation(c, path)) != NULL) {
        const char *src = n->pattern.src;
        size_t len = strlen(src), keep = utf8_cut(src, len, SHORT);
        put(c, b, "expected a value matching ");
        if (tp_buf_append(b, src, keep) < 0)
            c->oom = true;
        put(c, b, keep < len ? "..., got " : ", got ");
        put_value(c, b, inst, SHORT);
    }
}

/* multipleOf: exact for integers, within rounding error for the rest. */
static bool is_multiple(const json_t *v, const json_t *m)
{
    json_int_t iv, im;
    bool vi = json_is_integer(v) ? (iv = json_integer_value(v), true) : real_as_int(json_real_value(v), &iv);
    bool mi = json_is_integer(m) ? (im = json_integer_value(m), true) : real_as_int(json_real_value(m), &im);
    if (vi && mi)
        return iv % im == 0;
    double q = num_value(v) / num_value(m);
    if (!isfinite(q))
        return isfinite(num_value(v)) && fmod(num_value(v), num_value(m)) == 0; /* 1e308 by 0.5 */
    double err = fabs(q - nearbyint(q));
    return err <= 1e-9 || err <= fabs(q) * 1e-15;
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf: one violation each. */
static void v_number(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path)
{
    static const char *const what[] = {"at least", "at most", "greater than", "less than", "a multiple of"};
    const json_t *limit[] = {n->minimum, n->maximum, n->xminimum, n->xmaximum, n->multiple_of};
    for (size_t k = 0; k < 5; k++) {
        if (limit[k] == NULL)
            continue;
        bool ok;
        switch (k) {
        case 0:
            ok = num_cmp(inst, limit[k]) >= 0;
            break;
        case 1:
            ok = num_cmp(inst, limit[k]) <= 0;
            break;
        case 2:
            ok = num_cmp(inst, limit[k]) > 0;
            break;
        case 3:
            ok = num_cmp(inst, limit[k]) < 0;
            break;
        default:
            ok = is_multiple(inst, limit[k]);
            break;
        }
        tp_buf_t *b;
        if (!ok && (b = violation(c, path)) != NULL) {
            put(c, b, "expected ");
            put(c, b, what[k]);
            put(c, b, " ");
            put_value(c, b, limit[k], SHORT);
            put(c, b, ", got ");
            put_value(c, b, inst, SHORT);
        }
        if (c->quiet && c->count)
            return;
    }
}

/*
 * allOf (every violation of every branch counts), then anyOf and oneOf
 * (run quiet; one summary violation when they fail), not, if/then/else.
 */
static void v_combine(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    tp_buf_t *b;
    if (n->apply_ref != NULL) {
        v_in(c, n->apply_ref, inst, path, ev);
        if (c->quiet && c->count)
            return;
    }
    if (n->dyn_ref != NULL) {
        const node_t *t = n->dyn_ref;
        if (n->dyn_name != NULL) {
            /* the outermost resource in the dynamic scope with that $dynamicAnchor */
            for (const scope_t *sc = c->scope; sc != NULL; sc = sc->up)
                for (size_t i = 0; i < sc->res->n_dyn; i++)
                    if (strcmp(sc->res->dyn[i].name, n->dyn_name) == 0)
                        t = sc->res->dyn[i].node;
        }
        v_in(c, t, inst, path, ev);
        if (c->quiet && c->count)
            return;
    }
    for (size_t i = 0; i < n->n_all; i++) {
        v_in(c, n->all_of[i], inst, path, ev);
        if (c->quiet && c->count)
            return;
    }
    if (n->n_any > 0) {
        bool any = false;
        for (size_t i = 0; i < n->n_any && (!any || ev != NULL); i++)
            any |= v_quiet_ev(c, n->any_of[i], inst, path, ev);
        if (!any && (b = violation(c, path)) != NULL)
            put_alternatives(c, b, n->any_of, n->n_any, "", inst, path);
        if (c->quiet && c->count)
            return;
    }
    if (n->n_one > 0) {
        size_t matched = 0, first = 0, second = 0;
        for (size_t i = 0; i < n->n_one; i++) {
            if (!v_quiet_ev(c, n->one_of[i], inst, path, ev))
                continue;
            if (matched == 0)
                first = i;
            else if (matched == 1)
                second = i;
            matched++;
        }
        if (matched != 1 && (b = violation(c, path)) != NULL) {
            if (matched == 0)
                put_alternatives(c, b, n->one_of, n->n_one, " (oneOf)", inst, path);
            else
                putf(c, b, "matched %zu alternatives of oneOf, expected exactly 1 (#%zu, #%zu%s)", matched, first + 1,
                     second + 1, matched > 2 ? ", ..." : "");
        }
        if (c->quiet && c->count)
            return;
    }
    if (n->not_ != NULL && v_quiet(c, n->not_, inst, path) && (b = violation(c, path)) != NULL) {
        put(c, b, "expected a value not matching the \"not\" schema, got ");
        put_value(c, b, inst, SHORT);
    }
    if (c->quiet && c->count)
        return;
    if (n->if_ != NULL) {
        const node_t *branch = v_quiet_ev(c, n->if_, inst, path, ev) ? n->then_ : n->else_;
        if (branch != NULL)
            v_in(c, branch, inst, path, ev);
    }
}

/* unevaluatedProperties / unevaluatedItems: the members ev has not seen, each against sub. */
static void v_unevaluated(vctx_t *c, const node_t *sub, const json_t *inst, const seg_t *path, ev_t *ev)
{
    tp_buf_t *b;
    bool obj = json_is_object(inst);
    size_t pos = 0;
    void *it = obj ? json_object_iter((json_t *)inst) : NULL;
    size_t size = obj ? json_object_size(inst) : json_array_size(inst);
    for (pos = 0; pos < size; pos++, it = obj ? json_object_iter_next((json_t *)inst, it) : NULL) {
        if (ev_get(ev, pos))
            continue;
        const json_t *val = obj ? json_object_iter_value(it) : json_array_get(inst, pos);
        seg_t at = obj ? (seg_t){path, json_object_iter_key(it), json_object_iter_key_len(it), false}
                       : (seg_t){path, NULL, pos, false};
        if (is_false(sub)) {
            if ((b = violation(c, &at)) != NULL)
                put(c, b,
                    obj ? "unexpected property (unevaluatedProperties is false)"
                        : "unexpected item (unevaluatedItems is false)");
        } else {
            v_node(c, sub, val, &at, NULL);
        }
        ev_set(ev, pos);
        if (c->quiet && c->count)
            return;
    }
}

/*
 * One schema node against one value; violations go to c. ev, when not
 * NULL, collects what this node evaluated of the value (see ev_t).
 */
static void v_node(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    tp_buf_t *b;
    if (n->kind == N_REF)
        n = n->ref;
    if (n->kind == N_TRUE)
        return;
    if (n->kind == N_FALSE) {
        if ((b = violation(c, path)) != NULL) {
            put(c, b, "no value is allowed here (the schema is false), got ");
            put_value(c, b, inst, SHORT);
        }
        return;
    }
    if (c->depth >= TP_JSONSCHEMA_MAX_DEPTH) {
        if ((b = violation(c, path)) != NULL)
            put(c, b, "schema recursion too deep");
        return;
    }
    c->depth++;
    scope_t sc;
    const scope_t *outer = c->scope;
    if (c->dynamic && (outer == NULL || outer->res != n->res)) {
        sc.res = n->res;
        sc.up = outer;
        c->scope = &sc;
    }
    ev_t local;
    bool own_ev = false;
    if (n->collects && ev == NULL && (json_is_object(inst) || json_is_array(inst))) {
        ev_init(c, &local, inst);
        ev = &local;
        own_ev = true;
    }
    if (n->has_type && !(n->types & type_bits(inst))) {
        /* The wrong type: said once, not again by every keyword of the node. */
        if ((b = violation(c, path)) != NULL) {
            put(c, b, "expected ");
            put_types(c, b, n->types);
            put(c, b, ", got ");
            put_typed(c, b, inst);
        }
        goto out;
    }
    if (n->enum_ != NULL) {
        size_t i, size = json_array_size(n->enum_);
        for (i = 0; i < size; i++)
            if (json_eq(json_array_get(n->enum_, i), inst))
                break;
        if (i == size && (b = violation(c, path)) != NULL) {
            put(c, b, size == 1 ? "expected " : "expected one of ");
            put_value(c, b, size == 1 ? json_array_get(n->enum_, 0) : n->enum_, SHORT_ENUM);
            put(c, b, ", got ");
            put_value(c, b, inst, SHORT);
        }
        if (c->quiet && c->count)
            goto out;
    }
    if (n->const_ != NULL && !json_eq(n->const_, inst)) {
        if ((b = violation(c, path)) != NULL) {
            put(c, b, "expected ");
            put_value(c, b, n->const_, SHORT);
            put(c, b, ", got ");
            put_value(c, b, inst, SHORT);
        }
        if (c->quiet)
            goto out;
    }
    switch (json_typeof(inst)) {
    case JSON_OBJECT:
        if (n->groups & G_OBJECT)
            v_object(c, n, inst, path, ev);
        break;
    case JSON_ARRAY:
        if (n->groups & G_ARRAY)
            v_array(c, n, inst, path, ev);
        break;
    case JSON_STRING:
        if (n->groups & G_STRING)
            v_string(c, n, inst, path);
        break;
    case JSON_INTEGER:
    case JSON_REAL:
        if (n->groups & G_NUMBER)
            v_number(c, n, inst, path);
        break;
    default:
        break;
    }
    if (c->quiet && c->count)
        goto out;
    if (n->groups & G_COMBINE)
        v_combine(c, n, inst, path, ev);
    if (c->quiet && c->count)
        goto out;
    /* last: what every other keyword here (and below, in place) left unevaluated */
    if (n->uneval_props != NULL && json_is_object(inst))
        v_unevaluated(c, n->uneval_props, inst, path, ev);
    if (n->uneval_items != NULL && json_is_array(inst))
        v_unevaluated(c, n->uneval_items, inst, path, ev);
out:
    if (own_ev)
        ev_free(&local);
    c->scope = outer;
    c->depth--;
}

/*
 * One walk from the root; the match block of the regexes (if one ran) is
 * freed here, and "... and N more" written when the cap cut the list.
 */
int tp_jsonschema_validate(const tp_jsonschema_t *s, const json_t *instance, tp_buf_t *msg, int max_errors)
{
    if (s == NULL || instance == NULL) {
        errno = EINVAL;
        return -1;
    }
    vctx_t c = {.out = msg, .max = max_errors > 0 ? max_errors : INT_MAX, .dynamic = s->dynamic};
    v_node(&c, s->root, instance, NULL, NULL);
    if (c.md != NULL)
        pcre2_match_data_free(c.md);
    if (msg != NULL && c.count > c.written && c.written > 0 && !c.oom &&
        tp_buf_printf(msg, "; ... and %d more", c.count - c.written) < 0)
        c.oom = true;
    if (c.oom) {
        errno = ENOMEM;
        return -1;
    }
    return c.count;
}
