/*
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
#include "jsonschema_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Code points in a valid UTF-8 string: bytes that do not continue one. */
static size_t utf8_count(const char *s, size_t n)
{
    size_t cp = 0;
    for (size_t i = 0; i < n; i++)
        cp += ((unsigned char)s[i] & 0xC0) != 0x80;
    return cp;
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

#define SHORT 60       /* a value in a message */
#define SHORT_ENUM 100 /* the list of an enum */
#define SHORT_ALT 160  /* what one alternative of anyOf/oneOf says */
#define MAX_ALTS 5     /* alternatives a summary details */

/*
 * What a shared node (a reference's target) found for one value: count,
 * the violations a run that counts them all found (-1: only a quiet run
 * has finished, and it found one). Kept only for runs that finished.
 */
typedef struct {
    const node_t *n; /* NULL: an empty slot */
    const json_t *v;
    int count;
} memo_t;

#define MEMO_INLINE 16 /* slots on the stack, half of them used before the heap: a typical call needs no more */
/*
 * Most entries (3 MiB of table): a recursive schema over huge args would
 * otherwise keep one per value. Past it nothing more is memoised and the
 * work bound is what holds, as where no memo applies.
 */
#define MEMO_MAX 65536

typedef struct {
    tp_buf_t *out; /* messages, or NULL */
    int max;       /* most messages written */
    int written;
    int count;  /* violations found */
    bool quiet; /* a verdict only: stop at the first violation */
    bool oom;
    int depth;
    int too_deep;         /* times the depth guard spoke: a result it touched depends on the depth */
    pcre2_match_data *md; /* made on the first regex match, freed at the end */
    bool dynamic;         /* keep the dynamic scope (some $dynamicRef needs it) */
    const struct scope *scope;
    /* the work bound (TP_JSONSCHEMA_MAX_STEPS) */
    size_t steps, limit;
    bool sized; /* limit grown by the instance's size already */
    bool over;  /* past the limit: every node returns at once */
    const json_t *instance;
    /* the memo, open addressing, grown at half full; inl until it outgrows it */
    memo_t *memo;
    size_t memo_cap, memo_n;
    int temp;      /* > 0: checking a value made for the check (a property name), not memoised */
    bool memo_off; /* out of memory for the table: no more memo, the budget still holds */
    memo_t *inl;   /* MEMO_INLINE slots on the caller's stack, cleared when first used */
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

/* Values in v (itself included), down to the depth a validation can reach. */
static size_t count_values(const json_t *v, int depth)
{
    size_t n = 1;
    if (depth >= TP_JSONSCHEMA_MAX_DEPTH)
        return n;
    if (json_is_object(v)) {
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it))
            n += count_values(json_object_iter_value(it), depth + 1);
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            n += count_values(json_array_get(v, i), depth + 1);
    }
    return n;
}

/*
 * One more step; false once the work is past the limit. The first time
 * TP_JSONSCHEMA_MAX_STEPS is spent, the limit grows by
 * TP_JSONSCHEMA_STEPS_PER_VALUE for each value of the instance: the
 * instance is counted only by validations that get that far.
 */
static bool step(vctx_t *c)
{
    if (c->over)
        return false;
    if (++c->steps <= c->limit)
        return true;
    if (!c->sized) {
        c->sized = true;
        size_t values = count_values(c->instance, 0);
        size_t more = values > (SIZE_MAX - c->limit) / TP_JSONSCHEMA_STEPS_PER_VALUE
                          ? SIZE_MAX - c->limit
                          : values * TP_JSONSCHEMA_STEPS_PER_VALUE;
        c->limit += more;
        if (c->steps <= c->limit)
            return true;
    }
    c->over = true;
    return false;
}

static size_t memo_hash(const node_t *n, const json_t *v, size_t mask)
{
    uint64_t x = (uint64_t)(uintptr_t)n * 0x9E3779B97F4A7C15u ^ (uint64_t)(uintptr_t)v;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9u;
    return (size_t)(x ^ (x >> 32)) & mask;
}

/* The slot of (n, v): its entry, or the empty slot it would take. */
static memo_t *memo_slot(memo_t *tab, size_t cap, const node_t *n, const json_t *v)
{
    for (size_t i = memo_hash(n, v, cap - 1);; i = (i + 1) & (cap - 1))
        if (tab[i].n == NULL || (tab[i].n == n && tab[i].v == v))
            return &tab[i];
}

/* What a finished run of n on v found, or NULL. */
static const memo_t *memo_get(const vctx_t *c, const node_t *n, const json_t *v)
{
    if (c->memo_n == 0)
        return NULL;
    const memo_t *m = memo_slot(c->memo, c->memo_cap, n, v);
    return m->n != NULL ? m : NULL;
}

/* Records count for (n, v) (see memo_t); a table that cannot grow turns the memo off. */
static void memo_put(vctx_t *c, const node_t *n, const json_t *v, int count)
{
    if (c->memo_n >= MEMO_MAX)
        return; /* full: what it holds still answers */
    if (c->memo_cap == 0) {
        memset(c->inl, 0, MEMO_INLINE * sizeof *c->inl);
        c->memo = c->inl;
        c->memo_cap = MEMO_INLINE;
    }
    if ((c->memo_n + 1) * 2 > c->memo_cap) {
        size_t cap = c->memo_cap * 2;
        memo_t *tab = calloc(cap, sizeof *tab);
        if (tab == NULL) {
            c->memo_off = true;
            return;
        }
        for (size_t i = 0; i < c->memo_cap; i++)
            if (c->memo[i].n != NULL)
                *memo_slot(tab, cap, c->memo[i].n, c->memo[i].v) = c->memo[i];
        if (c->memo != c->inl)
            free(c->memo);
        c->memo = tab;
        c->memo_cap = cap;
    }
    memo_t *m = memo_slot(c->memo, c->memo_cap, n, v);
    if (m->n == NULL) {
        c->memo_n++;
        m->n = n;
        m->v = v;
        m->count = count;
    } else if (count >= 0) {
        m->count = count; /* a quiet run's -1 never hides a count */
    }
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
    if (c->count < INT_MAX)
        c->count++;
    if (c->quiet || c->out == NULL || c->written >= c->max)
        return NULL;
    if ((c->written++ && tp_buf_puts(c->out, "; ") < 0) || js_put_location(c->out, path) < 0 ||
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
    if (js_put_short(b, v, limit) < 0)
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
        total += (types & js_type_names[i].bit) != 0;
    for (size_t i = 0; i < N_TYPES; i++) {
        if (!(types & js_type_names[i].bit))
            continue;
        if (k > 0)
            put(c, b, k + 1 == total ? " or " : ", ");
        put(c, b, js_type_names[i].name);
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
    if (js_put_location(&here, path) < 0)
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
    c->temp++; /* name's address may be the next name's: never a memo key */
    if (!v_quiet(c, n->prop_names, name, path)) {
        tp_buf_t *b = violation(c, path);
        if (b != NULL) {
            tp_buf_t here = {0};
            if (js_put_location(&here, path) < 0)
                c->oom = true;
            put(c, b, "invalid property name ");
            put_value(c, b, name, SHORT);
            put(c, b, ": ");
            put_first(c, b, n->prop_names, name, path, (const char *)here.data, here.len);
            tp_buf_free(&here);
        }
    }
    c->temp--;
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
    char *ecma = js_ecma_rewrite(s, n, &len);
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

static void v_node_run(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev);

/*
 * One schema node against one value; violations go to c. ev, when not
 * NULL, collects what this node evaluated of the value (see ev_t). Each
 * call is a step of the work bound; a shared node's result for a value is
 * memoised when it depends on nothing else (see jsonschema.h): a quiet run
 * needs only the verdict, a counting one the count, and one that writes
 * messages runs again (each such run writes one at least, so at most
 * max_errors of them are not answered from the memo).
 */
static void v_node(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    if (!step(c))
        return;
    if (n->kind == N_REF)
        n = n->ref;
    bool memo = n->shared && ev == NULL && !c->dynamic && c->temp == 0 && !c->memo_off && !(c->quiet && c->count);
    if (!memo) {
        v_node_run(c, n, inst, path, ev);
        return;
    }
    const memo_t *m = memo_get(c, n, inst);
    if (m != NULL) {
        if (m->count == 0)
            return;
        if (c->quiet) {
            c->count++;
            return;
        }
        if (m->count > 0 && (c->out == NULL || c->written >= c->max)) {
            /* a count past INT_MAX says "at least": 2^N through a doubling chain */
            c->count = m->count > INT_MAX - c->count ? INT_MAX : c->count + m->count;
            return;
        }
    }
    int before = c->count, deep = c->too_deep;
    v_node_run(c, n, inst, path, NULL);
    if (c->over || c->oom || c->too_deep != deep)
        return;                    /* unfinished, or the depth it ran at counted */
    int found = c->count - before; /* never negative: counts only grow, to INT_MAX */
    memo_put(c, n, inst, c->quiet && found > 0 ? -1 : found);
}

/* v_node's work: n (not a N_REF) against inst. */
static void v_node_run(vctx_t *c, const node_t *n, const json_t *inst, const seg_t *path, ev_t *ev)
{
    tp_buf_t *b;
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
        c->too_deep++;
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
        return TP_EINVAL;
    }
    memo_t inl[MEMO_INLINE];
    vctx_t c = {.out = msg,
                .max = max_errors > 0 ? max_errors : INT_MAX,
                .dynamic = s->dynamic,
                .limit = TP_JSONSCHEMA_MAX_STEPS,
                .instance = instance,
                .inl = inl};
    size_t start = msg ? msg->len : 0;
    v_node(&c, s->root, instance, NULL, NULL);
    if (c.md != NULL)
        pcre2_match_data_free(c.md);
    if (c.memo != c.inl)
        free(c.memo);
    if (c.over) {
        /* what was found so far says nothing of the rest: the limit is the news */
        if (msg != NULL) {
            msg->len = start;
            if (tp_buf_printf(msg,
                              "the schema took too much work to check: over %zu steps (the limit: %d, and %d more "
                              "for each value in the instance)",
                              c.limit, TP_JSONSCHEMA_MAX_STEPS, TP_JSONSCHEMA_STEPS_PER_VALUE) < 0)
                c.oom = true;
        }
        if (!c.oom) {
            errno = E2BIG;
            return TP_E2BIG;
        }
    }
    if (msg != NULL && !c.over && c.count > c.written && c.written > 0 && !c.oom &&
        tp_buf_printf(msg, "; ... and %d more", c.count - c.written) < 0)
        c.oom = true;
    if (c.oom) {
        errno = ENOMEM;
        return TP_ENOMEM;
    }
    return c.count;
}
