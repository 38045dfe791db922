/*
 * Patterns ("pattern", "patternProperties", the "regex" format) as
 * ECMA-262 reads them, rewritten where PCRE2 reads them otherwise.
 */
#include "jsonschema_internal.h"

#include <stdlib.h>
#include <string.h>

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
char *js_ecma_rewrite(const char *src, size_t n, size_t *out_len)
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

/*
 * Compiles pattern src (n bytes) as jsonschema.h describes: rewritten by
 * js_ecma_rewrite, then PCRE2 with the ECMA-262-leaning options, JIT when it
 * can. A syntax error is reported against the pattern as written. 0;
 * TP_EINVAL for an invalid pattern, or TP_ENOMEM, recorded.
 */
int js_regex_compile(cctx_t *cc, re_t *re, const char *src, size_t n, const seg_t *path)
{
    const uint32_t opts = RE_OPTS;
    int code;
    PCRE2_SIZE off;
    size_t len;
    re->src = src;
    char *ecma = js_ecma_rewrite(src, n, &len);
    if (ecma == NULL)
        return js_cfail_oom(cc, path);
    re->code = pcre2_compile((PCRE2_SPTR)ecma, len, opts, &code, &off, cc->pcc);
    free(ecma);
    if (re->code == NULL) {
        /* The offset must point into what the author wrote: ask again. */
        PCRE2_UCHAR why[256];
        int code2;
        PCRE2_SIZE off2;
        pcre2_code *orig = pcre2_compile((PCRE2_SPTR)src, n, opts, &code2, &off2, cc->pcc);
        pcre2_get_error_message(orig ? code : code2, why, sizeof why);
        int rc = orig == NULL ? js_cfail(cc, path, "invalid regex: %s at offset %zu", (char *)why, (size_t)off2)
                              : js_cfail(cc, path, "invalid regex: %s", (char *)why);
        pcre2_code_free(orig);
        return rc;
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}
