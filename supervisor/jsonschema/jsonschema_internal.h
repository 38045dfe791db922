/*
 * JSON Schema (draft-07 and 2020-12), compiled: every schema object becomes
 * a node_t with its keywords checked, its numbers and sizes decoded, its
 * property names hashed and its regexes compiled, so validating is a walk
 * over nodes that allocates next to nothing on the valid path. See
 * jsonschema.h for what is supported and how messages read.
 *
 * What the files of supervisor/jsonschema/ share, internal to it:
 *   jsonschema.c  locations as JSON Pointers, values cut short, type names
 *   compile.c     a schema into nodes, the keywords of each dialect
 *   refs.c        URIs, resources, dialects, $id, $anchor, $ref, $dynamicRef
 *   regex.c       ECMA-262 patterns as PCRE2 compiles them
 *   metaschemas.c the dialects' meta-schemas, built in
 *   validate.c    an instance against the nodes, and the messages
 * The helpers validating calls on every node are static inline here.
 */
#ifndef TP_JSONSCHEMA_INTERNAL_H
#define TP_JSONSCHEMA_INTERNAL_H

#include "json.h"
#include "jsonformat.h"
#include "jsonschema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/* A type's name and its bit; the table is in jsonschema.c. */
typedef struct {
    const char *name;
    unsigned bit;
} js_type_name_t;

#define N_TYPES 7
extern const js_type_name_t js_type_names[N_TYPES];

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
    bool shared;      /* a reference's target: its results are memoised while validating */
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

static inline uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The longest prefix of s no longer than max bytes that ends on a character. */
static inline size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

static inline bool is_number(const json_t *v)
{
    return json_is_integer(v) || json_is_real(v);
}

static inline double num_value(const json_t *v)
{
    return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

/* A real with no fraction that a json_int_t holds exactly. */
static inline bool real_as_int(double d, json_int_t *out)
{
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != floor(d))
        return false;
    *out = (json_int_t)d;
    return true;
}

static inline const char *type_name(const json_t *v)
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

/* jsonschema.c: what compile errors and validation messages both write. Each 0 or TP_ENOMEM. */
int js_put_pointer(tp_buf_t *b, const seg_t *path);
int js_put_location(tp_buf_t *b, const seg_t *path);
int js_put_short(tp_buf_t *b, const json_t *v, size_t limit);

/*
 * A table keyed by pointer, open addressing, grown at half full: compiling
 * keeps two, schema value -> node (the memo) and schema object -> resource.
 */
typedef struct {
    const void *key;
    void *val;
} ptr_slot_t;

typedef struct {
    ptr_slot_t *v;
    size_t cap, n;
} ptrmap_t;

/* What key maps to, or NULL. */
void *js_ptrmap_get(const ptrmap_t *m, const void *key);
/* Maps key to val (over what it mapped to). 0, or TP_ENOMEM. */
int js_ptrmap_put(ptrmap_t *m, const void *key, void *val);

/* Compiling's state, which compile.c and refs.c both work on. */

typedef struct {
    char *key; /* "URI" or "URI#anchor" */
    const json_t *js;
} name_t;

typedef struct {
    tp_jsonschema_t *s;
    tp_jsonschema_opts_t opts;
    dialect_t dflt; /* for documents without "$schema" */
    res_t *root_res;
    ptrmap_t objs; /* schema object -> its resource (res_t *) */
    name_t *names; /* URIs and anchors -> schemas */
    size_t n_names, cap_names;
    char *err;
    size_t errlen;
    int rc;        /* the first failure's code (its message in err), 0 until one */
    ptrmap_t memo; /* schema value -> its node (node_t *) */
    pcre2_compile_context *pcc;
    int depth;
} cctx_t;


/* The slot of name (hash h) in n's property table: its entry, or the empty slot it would take. */
static inline uint32_t *prop_slot(node_t *n, const char *name, size_t len, uint32_t h)
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

/*
 * compile.c. Compiling's steps return 0 or a negative code: TP_EINVAL for
 * a schema that is wrong, TP_ENOMEM when memory ran out, the first
 * failure's message in cc->err and its code in cc->rc (a step that
 * returns a pointer returns NULL, and js_cerr says why). js_cfail records
 * a TP_EINVAL, js_cfail_oom a TP_ENOMEM ("out of memory"); each returns
 * the code of the first failure recorded.
 */
__attribute__((format(printf, 3, 4))) int js_cfail(cctx_t *cc, const seg_t *path, const char *fmt, ...);
int js_cfail_oom(cctx_t *cc, const seg_t *path);
/* The first failure's code, after a step returned NULL: TP_EINVAL or TP_ENOMEM. */
static inline int js_cerr(const cctx_t *cc)
{
    return cc->rc < 0 ? cc->rc : TP_ENOMEM;
}
/* s (n bytes) as a JSON string cut to fit buf, for messages; returns buf ("\"?\"" when out of memory). */
const char *js_quoted(const char *s, size_t n, char *buf, size_t size);
/* The node key was compiled into, or NULL when it has not been. */
node_t *js_memo_get(cctx_t *cc, const json_t *key);
/* The node of schema value js, compiled now or before; NULL on error (js_cerr). */
node_t *js_compile(cctx_t *cc, const json_t *js, const seg_t *path);

/* metaschemas.c */
/*
 * The built-in meta-schema at uri (absolute, no fragment; http or https),
 * parsed on first use and shared, never to be changed or freed; NULL when
 * uri names none of them (or memory ran out parsing it).
 */
const json_t *js_metaschema(const char *uri);

/* regex.c */
#define RE_OPTS                                                                                                        \
    (PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_MATCH_UNSET_BACKREF | PCRE2_DOLLAR_ENDONLY)
/* The pattern as PCRE2 reads ECMA-262's, malloc'd, *out_len bytes; NULL when out of memory. */
char *js_ecma_rewrite(const char *src, size_t n, size_t *out_len);
/* 0; TP_EINVAL for an invalid pattern, TP_ENOMEM. */
int js_regex_compile(cctx_t *cc, re_t *re, const char *src, size_t n, const seg_t *path);

/* refs.c */
/* The resource schema object js is in, or NULL for one no document walk reached. */
res_t *js_res_of(cctx_t *cc, const json_t *js);
/* doc's root resource, every resource and anchor in it indexed; NULL on error (js_cerr). */
res_t *js_index_doc(cctx_t *cc, const json_t *doc, const char *uri, const char *doc_name, const dialect_t *d);
/* Appends the JSON Pointer of target inside v to ptr; false when it is not there (or out of memory). */
bool js_find_ptr(const json_t *v, const json_t *target, int depth, tp_buf_t *ptr);
/* 0 and *out; TP_EINVAL (not a string, unresolvable, its target broken) or TP_ENOMEM. */
int js_compile_ref(cctx_t *cc, node_t *n, const json_t *from, const char *kw, const json_t *ref, const seg_t *path,
                   node_t **out);
/* 0; TP_EINVAL for a loop of references back to the same value, or TP_ENOMEM. */
int js_finish_refs(cctx_t *cc);

#endif
