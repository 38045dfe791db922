#include "jsonpos.h"

#include "error.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*
 * A cursor over the text. Newlines only occur between tokens in valid JSON,
 * but every step that can cross one counts it, so a slightly odd text still
 * gets a plausible line rather than a wrong one.
 */
typedef struct {
    const char *p;
    const char *end;
    int line;
} scan_t;

static void skip_ws(scan_t *s)
{
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '\n')
            s->line++;
        else if (c != ' ' && c != '\t' && c != '\r')
            return;
        s->p++;
    }
}

/* At an opening quote: moves past the closing one. 0, or TP_EINVAL at the end of the text. */
static int skip_string(scan_t *s)
{
    s->p++;
    while (s->p < s->end) {
        char c = *s->p++;
        if (c == '\\') {
            if (s->p < s->end)
                s->p++;
        } else if (c == '"') {
            return 0;
        } else if (c == '\n') {
            s->line++;
        }
    }
    return TP_EINVAL;
}

/*
 * Skips one whole value. Containers are skipped by counting brackets, with
 * strings stepped over as units so a "}" inside one does not count. 0, or
 * TP_EINVAL when the text ends first.
 */
static int skip_value(scan_t *s)
{
    if (s->p >= s->end)
        return TP_EINVAL;
    char c = *s->p;
    if (c == '"')
        return skip_string(s);
    if (c == '{' || c == '[') {
        int depth = 0;
        while (s->p < s->end) {
            c = *s->p;
            if (c == '"') {
                if (skip_string(s) < 0)
                    return TP_EINVAL;
                continue;
            }
            if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) {
                    s->p++;
                    return 0;
                }
            } else if (c == '\n') {
                s->line++;
            }
            s->p++;
        }
        return TP_EINVAL;
    }
    /* a number, true, false or null: up to the next delimiter */
    for (; s->p < s->end; s->p++) {
        c = *s->p;
        if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n')
            break;
    }
    return 0;
}

/*
 * Past the value at the cursor, the ',' after it and the white space, to
 * the next member or element. 0, or -1 at the end of the object or array
 * (or of a text broken there).
 */
static int skip_to_next(scan_t *s)
{
    if (skip_value(s) < 0)
        return -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ',')
        return -1;
    s->p++;
    skip_ws(s);
    return 0;
}

/* The next byte of a pointer token, "~0" and "~1" decoded; -1 past its end. */
static int token_byte(const char **t, const char *tend)
{
    if (*t >= tend)
        return -1;
    char c = **t;
    if (c == '~') {
        char d = (*t)[1];
        *t += 2;
        return d == '0' ? '~' : '/';
    }
    (*t)++;
    return (unsigned char)c;
}

/* The four hex digits at p as *out: 0, or TP_EINVAL. */
static int hex4(const char *p, const char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return TP_EINVAL;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return TP_EINVAL;
    }
    *out = v;
    return 0;
}

static size_t utf8_encode(unsigned cp, unsigned char *b)
{
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | cp >> 18);
    b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The byte a one-letter escape \e stands for: \b \f \n \r \t, and any other letter (\" \\ \/) itself. */
static unsigned char unescape(char e)
{
    static const char letters[] = "bfnrt", bytes[] = "\b\f\n\r\t";
    const char *at = e ? strchr(letters, e) : NULL;
    return (unsigned char)(at ? bytes[at - letters] : e);
}

/*
 * At the opening quote of a key: decodes it (escapes and \u surrogate pairs
 * to UTF-8, as jansson does) and compares it with the pointer token in
 * [tok, tend), leaving the cursor past the closing quote. Compares as it
 * goes, so no key is ever copied. 0 and *eq set, or TP_EINVAL on a broken string.
 */
static int key_equals(scan_t *s, const char *tok, const char *tend, bool *eq)
{
    bool same = true;
    const char *t = tok;
    s->p++;
    while (s->p < s->end) {
        unsigned char bytes[4];
        size_t nb = 1;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            *eq = same && t == tend;
            return 0;
        }
        if (c != '\\') {
            bytes[0] = c;
            if (c == '\n')
                s->line++;
            s->p++;
        } else {
            if (s->end - s->p < 2)
                return TP_EINVAL;
            char e = s->p[1];
            s->p += 2;
            if (e == 'u') {
                unsigned cp, lo;
                if (hex4(s->p, s->end, &cp) < 0)
                    return TP_EINVAL;
                s->p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && s->end - s->p >= 6 && s->p[0] == '\\' && s->p[1] == 'u' &&
                    hex4(s->p + 2, s->end, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s->p += 6;
                }
                nb = utf8_encode(cp, bytes);
            } else {
                bytes[0] = unescape(e);
            }
        }
        for (size_t i = 0; i < nb && same; i++)
            if (token_byte(&t, tend) != bytes[i])
                same = false;
    }
    return TP_EINVAL;
}

/* An array index token: "0" or digits without a leading zero. */
static bool parse_index(const char *tok, const char *tend, size_t *idx)
{
    size_t v = 0;
    if (tok == tend || (*tok == '0' && tend - tok > 1))
        return false;
    for (const char *q = tok; q < tend; q++) {
        if (*q < '0' || *q > '9')
            return false;
        size_t d = (size_t)(*q - '0');
        if (v > (SIZE_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *idx = v;
    return true;
}

/*
 * At a '{': finds the member named by the token and leaves the cursor on
 * its value. Returns the line of the member's key, or 0 if there is none.
 * The first of duplicate keys wins (the registry rejects duplicates anyway).
 */
static int enter_member(scan_t *s, const char *tok, const char *tend)
{
    s->p++;
    skip_ws(s);
    if (s->p >= s->end || *s->p == '}')
        return 0;
    for (;;) {
        if (s->p >= s->end || *s->p != '"')
            return 0;
        int key_line = s->line;
        bool eq = false;
        if (key_equals(s, tok, tend, &eq) < 0)
            return 0;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return 0;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end)
            return 0;
        if (eq)
            return key_line;
        if (skip_to_next(s) < 0)
            return 0;
    }
}

/* At a '[': leaves the cursor on the element named by the token; its line, or 0. */
static int enter_element(scan_t *s, const char *tok, const char *tend)
{
    size_t idx;
    if (!parse_index(tok, tend, &idx))
        return 0;
    s->p++;
    skip_ws(s);
    if (s->p >= s->end || *s->p == ']')
        return 0;
    for (size_t i = 0;; i++) {
        if (i == idx)
            return s->line;
        if (skip_to_next(s) < 0 || s->p >= s->end)
            return 0;
    }
}

/* RFC 6901: "" or "/"-separated tokens where "~" is always "~0" or "~1". */
static bool pointer_valid(const char *pointer)
{
    if (*pointer != '\0' && *pointer != '/')
        return false;
    for (const char *q = pointer; *q; q++)
        if (*q == '~' && q[1] != '0' && q[1] != '1')
            return false;
    return true;
}

/*
 * Walks the text one pointer token at a time, skipping the members and
 * elements it does not need without building anything. Called on the error
 * path of the registry loader, so it favours being simple over being fast.
 */
static int locate(scan_t *s, const char *pointer);

int tp_json_line(const char *text, size_t len, const char *pointer)
{
    if (text == NULL || pointer == NULL || !pointer_valid(pointer))
        return 0;
    scan_t s = {text, text + len, 1};
    return locate(&s, pointer);
}

/*
 * One walk for every element's line: the registry asks for each tool's,
 * and a walk from the start per tool made loading 4,000 tools take half a
 * second (the scans add up to the square of the file's size).
 */
size_t tp_json_element_lines(const char *text, size_t len, const char *pointer, int *lines, size_t n)
{
    if (text == NULL || pointer == NULL || !pointer_valid(pointer))
        return 0;
    scan_t s = {text, text + len, 1};
    if (locate(&s, pointer) == 0 || s.p >= s.end || *s.p != '[')
        return 0;
    s.p++;
    skip_ws(&s);
    size_t i = 0;
    while (i < n && s.p < s.end && *s.p != ']') {
        lines[i++] = s.line;
        if (skip_value(&s) < 0)
            break;
        skip_ws(&s);
        if (s.p >= s.end || *s.p != ',')
            break;
        s.p++;
        skip_ws(&s);
    }
    return i;
}

/* Moves s onto the value at pointer; the line it starts on (its key's, for a member), or 0. */
static int locate(scan_t *s0, const char *pointer)
{
    scan_t s = *s0;
    skip_ws(&s);
    if (s.p >= s.end)
        return 0;
    const char *tok = pointer;
    int line = s.line;
    while (*tok != '\0') {
        tok++; /* the '/' */
        const char *tend = strchr(tok, '/');
        if (tend == NULL)
            tend = tok + strlen(tok);
        if (*s.p == '{')
            line = enter_member(&s, tok, tend);
        else if (*s.p == '[')
            line = enter_element(&s, tok, tend);
        else
            return 0;
        if (line == 0)
            return 0;
        tok = tend;
    }
    *s0 = s;
    return line;
}
