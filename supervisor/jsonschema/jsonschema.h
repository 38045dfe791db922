/*
 * JSON Schema, draft-07 and 2020-12: a tool's "parameters", compiled once
 * when the registry loads, then checked against the args of every call
 * before any call happens (an invalid call ends InvalidArguments, class
 * malformed, with the message this module writes, for the model to fix on
 * its next turn).
 *
 * Dialects: "$schema" names one (draft-07 or 2020-12, http or https, with
 * or without the final "#"), else the caller's default (draft-07 unless
 * tp_jsonschema_opts_t says 2020-12). A "$schema" naming a meta-schema the
 * loader gives is read for its own "$schema" (the dialect) and its
 * "$vocabulary" (without 2020-12's validation vocabulary, its keywords are
 * not checked; a required vocabulary not known here is an error). Any other
 * "$schema" is a compile error. Embedded resources ("$id" and "$schema" in
 * a subschema) may change the dialect for what is under them.
 *
 * Both dialects: type (integer: any number with no fractional part, so 1.0
 * is one), enum, const, properties, required, additionalProperties,
 * patternProperties, propertyNames, minProperties, maxProperties,
 * dependencies (both forms), minItems, maxItems, uniqueItems, contains,
 * minLength, maxLength (code points), pattern, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (numbers), multipleOf, allOf, anyOf,
 * oneOf, not, if/then/else, boolean schemas, definitions, $ref, $id.
 * draft-07: items (both forms), additionalItems; a $ref's siblings are
 * ignored, "$id": "#name" names a subschema. 2020-12: $defs, prefixItems,
 * items (after prefixItems), minContains, maxContains, dependentRequired,
 * dependentSchemas, unevaluatedProperties, unevaluatedItems (annotations
 * collected in place through allOf, anyOf, oneOf, if/then/else,
 * dependentSchemas, $ref and $dynamicRef; a failed subschema's dropped),
 * $anchor, $dynamicRef/$dynamicAnchor (the outermost resource of the
 * dynamic scope with the anchor wins); $ref applies beside its siblings.
 *
 * References resolve by RFC 3986 against the base URI of the schema they
 * are in, which every "$id" changes for what is under it: JSON Pointers
 * (~0 ~1 and %XX decoded) from the resource the URI names, anchors, other
 * resources of the document, and other documents, which only the caller's
 * loader gives (never the network), but for the dialects' meta-schemas:
 * draft-07's and 2020-12's (with its vocabularies) are built in, by http or
 * https, for when the loader has nothing at their URI (metaschemas.c).
 * Unknown keywords are ignored, and
 * "$id"/anchors inside them or inside enum, const, default and examples
 * name nothing. "format" is an annotation unless formats are asserted
 * (jsonformat.h lists what is checked); "default", "contentMediaType",
 * "contentEncoding" and "contentSchema" are annotations, never asserted.
 * enum, const and uniqueItems compare by JSON equality: 1 == 1.0, and an
 * object's key order does not matter. Numbers are compared as 64-bit
 * integers when both sides are integers, as doubles otherwise.
 *
 * Regular expressions (pattern, patternProperties) are PCRE2 (8-bit, UTF
 * mode, JIT when available), set as close to ECMA-262 as its options go:
 * ALT_BSUX + EXTRA_ALT_BSUX (\uHHHH, \u{H..} and \xHH as in JavaScript;
 * \U is a plain "U"), ALLOW_EMPTY_CLASS ([] matches nothing, [^] any
 * character), MATCH_UNSET_BACKREF (a backreference to an unset group
 * matches empty), DOLLAR_ENDONLY ($ does not match before a final newline),
 * newline ANYCRLF (. matches neither \r nor \n). A pattern is not anchored:
 * it matches anywhere in the string, as the spec says. What still differs
 * from ECMA-262:
 *  - \s matches ASCII white space only; ECMA-262 also counts U+00A0, U+FEFF,
 *    U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
 *  - . matches U+2028 and U+2029 (ECMA-262 treats them as line ends).
 *  - \d, \w and \b are ASCII in both; POSIX classes ([[:alpha:]]), \A, \z,
 *    \Z, \h, \R, \Q..\E, possessive quantifiers, atomic groups, recursion,
 *    conditionals and inline flags ((?i)) are accepted by PCRE2 and would
 *    be syntax errors (or literals) in ECMA-262.
 *  - lookbehind must have a bounded length in PCRE2; ECMA-262 allows any.
 *  - case-insensitive matching never comes up: JSON Schema has no flags.
 *
 * Messages (tp_jsonschema_validate) are written for a model to act on: every
 * violation as "POINTER: expected X, got Y", joined with "; ", capped with
 * "... and N more". POINTER is an RFC 6901 JSON Pointer into the instance;
 * the instance itself is written "(root)". Values are shown as compact JSON
 * cut to about 60 characters. A value of the wrong type is reported once,
 * for its type, not again for the keywords of that type. Examples:
 *   /q: expected string, got number 5
 *   /limit: expected at most 100, got 250
 *   (root): missing required property "q"
 *   /tags/2: expected a value matching ^[a-z]+$, got "Bad!"
 *   /mode: expected one of ["fast","slow"], got "medium"
 *   /extra: unexpected property (additionalProperties is false)
 *   /id: matched none of 2 alternatives: (1) expected string, got number 5
 *        (2) expected null, got number 5
 *   /x: matched 2 alternatives of oneOf, expected exactly 1 (#1, #2)
 *
 * A compiled schema is read-only: one may be validated against from many
 * threads at once. It owns a deep copy of the schema it came from, so the
 * caller may change or free its own.
 */
#ifndef TP_JSONSCHEMA_H
#define TP_JSONSCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "error.h"

typedef struct tp_jsonschema tp_jsonschema_t;

/*
 * Most schema nodes a validation may enter on one path (the instance's
 * depth plus the $ref, allOf... hops at each level). Deeper is reported as
 * a violation, "schema recursion too deep", rather than risking the stack.
 */
#define TP_JSONSCHEMA_MAX_DEPTH 1000

/*
 * The work one validation may do, in steps (a step is one schema node
 * checked against one value): TP_JSONSCHEMA_MAX_STEPS, plus
 * TP_JSONSCHEMA_STEPS_PER_VALUE for each value in the instance (counted
 * only once the first part is spent), so large arguments are never refused
 * for their size alone. Past it the validation stops and says so
 * (TP_E2BIG). Validation runs on the supervisor's event loop: a million
 * steps is about 15-30 ms there, the longest a call's check may hold it
 * (a typical call takes tens of steps; 32 a value is more than any
 * hand-written schema applies to a value, unlike 2^N for a chain of N
 * "allOf": [{"$ref": A}, {"$ref": A}] that the memo below cannot collapse).
 *
 * A schema reached by a reference is checked once per instance value and
 * its result reused, so such a chain costs N steps, not 2^N, except where
 * the result depends on more than the value: under unevaluatedProperties
 * or unevaluatedItems (what it evaluated counts too), in a schema with a
 * $dynamicRef (the dynamic scope counts), and for property names checked
 * by propertyNames. There the budget is what bounds the work.
 */
#define TP_JSONSCHEMA_MAX_STEPS 1000000
#define TP_JSONSCHEMA_STEPS_PER_VALUE 32

/*
 * Compiles schema (an object or a boolean) as draft-07 unless "$schema"
 * says otherwise: checks every keyword it knows, compiles the regexes,
 * resolves every reference (only within the schema: no loader). A
 * recursive schema is fine ({"items": {"$ref": "#"}}); a loop that comes
 * back to the same value without descending into it ({"anyOf": [...,
 * {"$ref": "#"}]}) is an error. Returns NULL on error, and the caller
 * learns why from err alone: one line naming the schema location (for a
 * place in another document, its URI, "#" and the pointer), e.g.
 * "/properties/q/type: unknown type \"strin\"" or
 * "/$ref: unresolvable reference \"#/definitions/x\"" (memory running out
 * is "LOCATION: out of memory"). The caller owns the result:
 * tp_jsonschema_free.
 */
tp_jsonschema_t *tp_jsonschema_compile(const json_t *schema, char *err, size_t errlen);

/* The dialects: what "$schema" may name, and the default without one. */
typedef enum {
    TP_JSONSCHEMA_DRAFT7 = 7,
    TP_JSONSCHEMA_2020_12 = 2020,
} tp_jsonschema_dialect_t;

typedef struct {
    /* the dialect of a schema (or a loaded document) without "$schema"; 0: draft-07 */
    tp_jsonschema_dialect_t dialect;
    /* check "format" (the formats listed above); false: an annotation only */
    bool assert_formats;
    /*
     * Another document a reference names, by its absolute URI without the
     * fragment: a new reference (the compiled schema keeps a copy), or NULL
     * when there is none. Called only while compiling; never the network
     * unless the caller's function goes there. NULL: no other documents
     * than the built-in meta-schemas. Asked before them: what it gives for
     * a meta-schema's URI is used instead.
     */
    json_t *(*load)(const char *uri, void *arg);
    void *load_arg;
} tp_jsonschema_opts_t;

/* tp_jsonschema_compile with options; opts NULL is the same as all zero. */
tp_jsonschema_t *tp_jsonschema_compile_opts(const json_t *schema, const tp_jsonschema_opts_t *opts, char *err,
                                            size_t errlen);

/* The dialect s was compiled in (its root's). */
tp_jsonschema_dialect_t tp_jsonschema_dialect(const tp_jsonschema_t *s);

/*
 * Parses a dialect's name as the registry writes it: "draft-07" or
 * "2020-12", or any "$schema" URI of the two. 0 and *out, or TP_EINVAL.
 */
int tp_jsonschema_dialect_parse(const char *name, tp_jsonschema_dialect_t *out);

/*
 * Checks instance against s. Returns the number of violations (0: valid),
 * TP_EINVAL without a schema or an instance, TP_ENOMEM when memory ran
 * out, or TP_E2BIG when the work passed the limit above. When msg is
 * non-NULL, appends the message described above: at most max_errors
 * violations (max_errors <= 0: all), then "... and N more". Nothing is
 * appended when the instance is valid. For TP_E2BIG, what was appended is
 * replaced by "the schema took too much work to check (stopped after N
 * steps, ...)": the instance may or may not be valid. The valid path
 * allocates only a PCRE2 match block when a regex runs, a string per key
 * when propertyNames is used, and the memo's table past its first 8
 * entries.
 */
int tp_jsonschema_validate(const tp_jsonschema_t *s, const json_t *instance, tp_buf_t *msg, int max_errors);

void tp_jsonschema_free(tp_jsonschema_t *s);

#endif
