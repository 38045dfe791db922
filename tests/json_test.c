/*
 * json_test: the JSON checker that vets every record the store reads
 * (tp_json_check, tp_json_member), held to jansson on random and mutated
 * texts, as callline_test holds the call-line scanner to it; and what
 * passes a tool's JSON on where jansson cannot hold it (tp_json_compact,
 * tp_json_next_member).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "testutil.h"

static void check_text(const char *s, int want)
{
    size_t at = 0;
    int got = tp_json_check(s, strlen(s), &at);
    if (got != want)
        fprintf(stderr, "\n  tp_json_check(%s) is %d, expected %d (at %zu)\n", s, got, want, at);
    CU_ASSERT_EQUAL(got, want);
}

/* What JSON is and is not, one text at a time. */
static void test_table(void)
{
    /* clang-format off */
    static const char *const good[] = {
        "{}", "[]", " {\"a\": 1} \n", "0", "-0", "1.5e-3", "-12E+4", "\"\"", "true", "false", "null",
        "[1, \"x\", {\"y\": [null, false, true]}]", "\"\\u00e9\\n\\t\\\\\\/\\\"\"", "\"é – 😀\"",
        "{\"a\":{\"b\":{\"c\":[[[]]]}}}", "\"\\u0000\"", "\"\\ud800\"", "123456789012345678901234567890",
    };
    /* clang-format on */
    /* clang-format off */
    static const char *const bad[] = {
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a: 1}", "01", "1.", ".5", "1e", "+1", "-",
        "--1", "tru", "nul", "True", "\"abc", "\"\\x\"", "\"\\u12g4\"", "\"a\nb\"", "[1 2]", "{} {}",
        "[\"\xff\"]", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "NaN", "[Infinity]", "{\"a\":}",
        "{,}", "[,1]", "1 2", "\"\t\"",
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        check_text(good[i], 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_text(bad[i], TP_EINVAL);
    /* Nesting: as deep as TP_JSON_DEPTH_MAX, not one more. */
    size_t n = TP_JSON_DEPTH_MAX + 1;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = 0;
    CU_ASSERT_EQUAL(tp_json_check(deep, 2 * n, NULL), TP_EINVAL);
    CU_ASSERT_EQUAL(tp_json_check(deep + 1, 2 * n - 2, NULL), 0);
    free(deep);
    /* Nothing at all (an empty bytes field: no pointer either) is not JSON. */
    CU_ASSERT_EQUAL(tp_json_check(NULL, 0, NULL), TP_EINVAL);
    const char *v;
    size_t vlen;
    CU_ASSERT_EQUAL(tp_json_member(NULL, 0, "id", &v, &vlen), TP_ENOENT);
    /* The offset of what is wrong. */
    size_t at = 0;
    CU_ASSERT_EQUAL(tp_json_check("{\"a\": tru}", 10, &at), TP_EINVAL);
    CU_ASSERT_EQUAL(at, 6);
}

/* ---- random JSON ---- */

static const char *const keys[] = {"id", "a", "b", "tool", "ok", "é", "k\\\"q", ""};

static void random_ws(tp_buf_t *b)
{
    static const char ws[] = " \t\n\r";
    while (rand() % 6 == 0)
        tp_buf_append(b, &ws[rand() % 4], 1);
}

static void random_string(tp_buf_t *b)
{
    /* clang-format off */
    static const char *const pieces[] = {
        "a", "b", "xyz", " ", "\\n", "\\\"", "\\\\", "\\/", "\\u00e9", "\\ud83d\\ude00", "é", "😀", "–", "\\u0000",
        "\\t", "\\b\\f\\r",
    };
    /* clang-format on */
    tp_buf_puts(b, "\"");
    int n = rand() % 6;
    for (int i = 0; i < n; i++)
        tp_buf_puts(b, pieces[rand() % (int)(sizeof pieces / sizeof pieces[0])]);
    tp_buf_puts(b, "\"");
}

static void random_number(tp_buf_t *b)
{
    switch (rand() % 5) {
    case 0:
        tp_buf_printf(b, "%d", rand() % 100 - 50);
        break;
    case 1:
        tp_buf_printf(b, "%d.%d", rand() % 1000, rand() % 1000);
        break;
    case 2:
        tp_buf_printf(b, "%de%c%d", rand() % 10, "+-"[rand() % 2], rand() % 30);
        break;
    case 3:
        tp_buf_printf(b, "-0.%03dE%d", rand() % 1000, rand() % 5);
        break;
    default:
        tp_buf_puts(b, rand() % 2 ? "9223372036854775807" : "-9223372036854775808");
        break;
    }
}

static void random_value(tp_buf_t *b, int depth)
{
    int r = rand() % (depth > 4 ? 6 : 8);
    random_ws(b);
    switch (r) {
    case 0:
        random_string(b);
        break;
    case 1:
        random_number(b);
        break;
    case 2:
        tp_buf_puts(b, "true");
        break;
    case 3:
        tp_buf_puts(b, "false");
        break;
    case 4:
        tp_buf_puts(b, "null");
        break;
    case 5:
        random_string(b);
        break;
    case 6: {
        tp_buf_puts(b, "[");
        int n = rand() % 4;
        for (int i = 0; i < n; i++) {
            if (i)
                tp_buf_puts(b, ",");
            random_value(b, depth + 1);
        }
        random_ws(b);
        tp_buf_puts(b, "]");
        break;
    }
    default: {
        tp_buf_puts(b, "{");
        int n = rand() % 5, used = 0;
        for (int i = 0; i < n; i++) {
            int k = rand() % (int)(sizeof keys / sizeof keys[0]);
            if (used & 1 << k)
                continue; /* keys unique, so jansson's and the first member agree */
            if (used)
                tp_buf_puts(b, ",");
            used |= 1 << k;
            random_ws(b);
            tp_buf_printf(b, "\"%s\"", keys[k]);
            random_ws(b);
            tp_buf_puts(b, ":");
            random_value(b, depth + 1);
        }
        random_ws(b);
        tp_buf_puts(b, "}");
        break;
    }
    }
    random_ws(b);
}

/*
 * What jansson may refuse that is JSON by grammar: escapes of lone
 * surrogates, \u0000 in a key (even with JSON_ALLOW_NUL), integers past
 * int64, reals past double, nesting past its own limit.
 */
static bool jansson_only(const char *why)
{
    return strstr(why, "invalid Unicode") || strstr(why, "NUL byte") || strstr(why, "too big") ||
           strstr(why, "overflow") || strstr(why, "maximum parsing depth");
}

/*
 * tp_json_check and jansson on one text: the same verdict, but for what
 * jansson_only allows; with members, tp_json_member finds what jansson does.
 */
static bool agree(const uint8_t *text, size_t n, bool members, int *accepted)
{
    json_error_t err;
    json_t *v = json_loadb((const char *)text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    int got = tp_json_check(text, n, NULL);
    *accepted = got == 0;
    /* jansson drops a raw NUL byte where it finds one (its reader takes 0 for "refill"): not JSON. */
    bool nul = memchr(text, 0, n) != NULL;
    bool ok = (v != NULL) == (got == 0) || (v == NULL && jansson_only(err.text)) || (v != NULL && nul);
    if (!ok) {
        fprintf(stderr, "\n  tp_json_check says %d, jansson %s: ", got, v ? "valid" : err.text);
        fwrite(text, 1, n, stderr);
        fputc('\n', stderr);
    }
    /* The members it finds are jansson's (in a generated text, whose keys are unique). */
    if (members && ok && v && got == 0 && json_is_object(v)) {
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            if (strchr(keys[k], '\\'))
                continue; /* jansson knows the key unescaped */
            const char *at;
            size_t len;
            json_t *want = json_object_get(v, keys[k]);
            int found = tp_json_member(text, n, keys[k], &at, &len);
            CU_ASSERT_EQUAL(found == 0, want != NULL);
            if (found == 0 && want) {
                json_t *got_v = json_loadb(at, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                CU_ASSERT(got_v != NULL && json_equal(got_v, want));
                if (got_v == NULL || !json_equal(got_v, want))
                    fprintf(stderr, "\n  member %s of %.*s is %.*s\n", keys[k], (int)n, text, (int)len, at);
                json_decref(got_v);
            }
        }
    }
    json_decref(v);
    return ok;
}

/*
 * 20,000 random texts, each then with a byte changed, one cut out, one put
 * in, or the end cut off: tp_json_check says what jansson says.
 */
static void test_against_jansson(void)
{
    srand(17);
    int valid = 0, mutated_valid = 0, mutated_invalid = 0, disagree = 0;
    static const uint8_t junk[] = {'{', '}', '[', ']', ',',  ':',  '"',  '\\', ' ',  '0',
                                   '-', '.', 'e', 'x', 0xff, 0xc3, 0x80, 0x00, '\n', 't'};
    for (int round = 0; round < 20000 && disagree < 10; round++) {
        tp_buf_t b = {0};
        random_value(&b, 0);
        int acc;
        disagree += !agree(b.data, b.len, true, &acc);
        valid += acc;
        for (int m = 0; m < 4; m++) {
            tp_buf_t c = {0};
            tp_buf_append(&c, b.data, b.len);
            size_t at = c.len ? (size_t)rand() % c.len : 0;
            switch (rand() % 4) {
            case 0:
                if (c.len)
                    c.data[at] = junk[rand() % (int)sizeof junk];
                break;
            case 1:
                if (c.len) {
                    memmove(c.data + at, c.data + at + 1, c.len - at - 1);
                    c.len--;
                }
                break;
            case 2:
                tp_buf_reserve(&c, 1);
                memmove(c.data + at + 1, c.data + at, c.len - at);
                c.data[at] = junk[rand() % (int)sizeof junk];
                c.len++;
                break;
            default:
                c.len = at;
                break;
            }
            disagree += !agree(c.data, c.len, false, &acc);
            mutated_valid += acc;
            mutated_invalid += !acc;
            tp_buf_free(&c);
        }
        tp_buf_free(&b);
    }
    CU_ASSERT_EQUAL(disagree, 0);
    CU_ASSERT(valid > 19000);
    CU_ASSERT(mutated_valid > 5000 && mutated_invalid > 20000);
}

/* The first byte from p on a JSON string cannot hold as it is, a byte at a time. */
static const unsigned char *plain_end_slow(const unsigned char *p, const unsigned char *end)
{
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
        p++;
    return p;
}

/*
 * tp_buf_put_u64 and tp_buf_put_i64 write what printf's %llu and %lld
 * write: at every length (10^k - 1 and 10^k, both signs) and both ends.
 */
static void test_decimal(void)
{
    uint64_t us[64];
    int64_t is[64];
    size_t nu = 0, ni = 0;
    for (uint64_t p = 1, k = 0; k < 20; k++, p *= 10) {
        us[nu++] = p - 1;
        us[nu++] = p;
        if (k < 19) {
            is[ni++] = (int64_t)p;
            is[ni++] = -(int64_t)p;
            is[ni++] = -(int64_t)(p - 1);
        }
    }
    us[nu++] = UINT64_MAX;
    is[ni++] = INT64_MAX;
    is[ni++] = INT64_MIN;
    is[ni++] = INT64_MIN + 1;
    char want[32];
    for (size_t i = 0; i < nu; i++) {
        tp_buf_t b = {0};
        CU_ASSERT_EQUAL(tp_buf_puts(&b, "x"), 0);
        CU_ASSERT_EQUAL(tp_buf_put_u64(&b, us[i]), 0);
        snprintf(want, sizeof want, "x%llu", (unsigned long long)us[i]);
        CU_ASSERT(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
        tp_buf_free(&b);
    }
    for (size_t i = 0; i < ni; i++) {
        tp_buf_t b = {0};
        CU_ASSERT_EQUAL(tp_buf_put_i64(&b, is[i]), 0);
        snprintf(want, sizeof want, "%lld", (long long)is[i]);
        CU_ASSERT(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
        tp_buf_free(&b);
    }
    /* through the writer: integers, and integral reals when canonical */
    json_t *v = json_pack("[I,I,f,f]", (json_int_t)INT64_MIN, (json_int_t)-7, -3.0, 1e15);
    tp_buf_t b = {0};
    CU_ASSERT_EQUAL(tp_json_write(&b, v, TP_JSON_CANONICAL), 0);
    CU_ASSERT(b.len == strlen("[-9223372036854775808,-7,-3,1000000000000000]") &&
              memcmp(b.data, "[-9223372036854775808,-7,-3,1000000000000000]", b.len) == 0);
    tp_buf_free(&b);
    json_decref(v);
}

/*
 * The plain-run finders (sixteen and eight bytes a step) against a byte at
 * a time: every byte value at every place of runs up to three steps long,
 * and at every length; then random texts. tp_json_check and
 * tp_json_put_string, which use them, against jansson on long strings with
 * one byte of every kind at every place.
 */
static void test_plain_runs(void)
{
    unsigned char buf[72];
    int wrong = 0;
    for (size_t len = 0; len <= 48; len++)
        for (size_t at = 0; at <= len; at++)
            for (int c = 0; c < 256; c++) {
                memset(buf, 'a' + (int)(len % 26), sizeof buf);
                if (at < len)
                    buf[at] = (unsigned char)c;
                const unsigned char *want = plain_end_slow(buf, buf + len);
                wrong += tp_json_plain_end(buf, buf + len) != want;
                wrong += tp_json_plain_end_word(buf, buf + len) != want;
            }
    srand(23);
    for (int round = 0; round < 100000; round++) {
        size_t len = (size_t)rand() % sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (unsigned char)(rand() % 8 ? 0x20 + rand() % 0x60 : rand() % 256);
        size_t from = len ? (size_t)rand() % len : 0;
        const unsigned char *want = plain_end_slow(buf + from, buf + len);
        wrong += tp_json_plain_end(buf + from, buf + len) != want;
        wrong += tp_json_plain_end_word(buf + from, buf + len) != want;
    }
    CU_ASSERT_EQUAL(wrong, 0);

    static const char *const odd[] = {
        "\"",   "\\",   "\n",          "\x01", "\x1f", "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "\xff", "\xc3", "\xed\xa0\x80"};
    int bad = 0;
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++)
        for (size_t at = 0; at < 40; at++) {
            char text[64];
            memset(text, 'x', sizeof text);
            size_t n = strlen(odd[k]);
            memcpy(text + at, odd[k], n);
            size_t len = at + n + 17;
            json_t *ref = json_stringn_nocheck(text, len);
            tp_buf_t mine = {0};
            CU_ASSERT_EQUAL_FATAL(tp_json_put_string(&mine, text, len), 0);
            json_error_t jerr;
            json_t *back = json_loadb((const char *)mine.data, mine.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
            /* Valid text reads back the same; a byte that is not UTF-8 becomes U+FFFD. */
            json_t *strict = json_stringn(text, len);
            bool valid = strict != NULL;
            json_decref(strict);
            json_t *same = valid ? json_incref(ref) : NULL;
            if (back == NULL || (valid && !json_equal(back, same)) || tp_json_check(mine.data, mine.len, NULL) != 0)
                bad++;
            /* The raw text in quotes is JSON exactly when it has no quote, backslash or control byte and is UTF-8. */
            tp_buf_t raw = {0};
            tp_buf_append(&raw, "\"", 1);
            tp_buf_append(&raw, text, len);
            tp_buf_append(&raw, "\"", 1);
            bool want = valid && strpbrk(odd[k], "\"\\\n\x01\x1f") == NULL;
            if ((tp_json_check(raw.data, raw.len, NULL) == 0) != want)
                bad++;
            json_decref(same);
            json_decref(back);
            json_decref(ref);
            tp_buf_free(&raw);
            tp_buf_free(&mine);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Whether b holds exactly want. */
static bool holds(const tp_buf_t *b, const char *want)
{
    bool eq = b->len == strlen(want) && memcmp(b->data, want, b->len) == 0;
    if (!eq)
        fprintf(stderr, "\n  got:  %.*s\n  want: %s\n", (int)b->len, b->data ? (const char *)b->data : "", want);
    return eq;
}

/*
 * tp_json_compact drops the whitespace between tokens and nothing else:
 * numbers and strings as written. On random texts, what jansson reads of
 * the compact text is what it reads of the text, and compacting again
 * changes nothing.
 */
static void test_compact(void)
{
    tp_buf_t b = {0};
    const char *text =
        " { \"n\" : 18446744073709551616 ,\n\t\"x\": [ 1e400 , -0 , 1.0 ],\r\n \"s\": \" a \\\" \\u00e9 \" } ";
    CU_ASSERT_EQUAL(tp_json_compact(text, strlen(text), &b), 0);
    CU_ASSERT(holds(&b, "{\"n\":18446744073709551616,\"x\":[1e400,-0,1.0],\"s\":\" a \\\" \\u00e9 \"}"));
    /* Appended after what is there. */
    tp_buf_reset(&b);
    tp_buf_puts(&b, "x");
    CU_ASSERT_EQUAL(tp_json_compact(" 12 ", 4, &b), 0);
    CU_ASSERT(holds(&b, "x12"));
    tp_buf_reset(&b);
    CU_ASSERT_EQUAL(tp_json_compact(NULL, 0, &b), 0);
    CU_ASSERT_EQUAL(b.len, 0);

    srand(23);
    int compared = 0;
    for (int round = 0; round < 20000; round++) {
        tp_buf_t t = {0}, again = {0};
        random_value(&t, 0);
        if (tp_json_check(t.data, t.len, NULL) != 0) {
            tp_buf_free(&t);
            continue;
        }
        tp_buf_reset(&b);
        CU_ASSERT_FATAL(tp_json_compact(t.data, t.len, &b) == 0);
        CU_ASSERT_FATAL(tp_json_check(b.data, b.len, NULL) == 0);
        CU_ASSERT_FATAL(tp_json_compact(b.data, b.len, &again) == 0);
        CU_ASSERT(again.len == b.len && memcmp(again.data, b.data, b.len) == 0);
        json_t *x = json_loadb((const char *)t.data, t.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        json_t *y = json_loadb((const char *)b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        CU_ASSERT((x == NULL) == (y == NULL));
        if (x && y) {
            CU_ASSERT(json_equal(x, y));
            compared++;
        }
        json_decref(x);
        json_decref(y);
        tp_buf_free(&t);
        tp_buf_free(&again);
    }
    CU_ASSERT(compared > 19000);
    tp_buf_free(&b);
}

/* tp_json_next_member: each top-level member in order, a repeated key each time. */
static void test_next_member(void)
{
    const char *text = " { \"a\" : 1 , \"a\":[2, {\"b\": 3}],\"k\\\"q\" : \"x, y\" , \"\" : {} } ";
    static const char *const want[][2] = {{"a", "1"}, {"a", "[2, {\"b\": 3}]"}, {"k\\\"q", "\"x, y\""}, {"", "{}"}};
    size_t at = 0, kn, vn, i = 0;
    const char *k, *v;
    while (tp_json_next_member(text, strlen(text), &at, &k, &kn, &v, &vn) == 0) {
        CU_ASSERT_FATAL(i < 4);
        CU_ASSERT(kn == strlen(want[i][0]) && memcmp(k, want[i][0], kn) == 0);
        CU_ASSERT(vn == strlen(want[i][1]) && memcmp(v, want[i][1], vn) == 0);
        i++;
    }
    CU_ASSERT_EQUAL(i, 4);
    /* The first of a repeated key is what tp_json_member finds. */
    CU_ASSERT_EQUAL(tp_json_member(text, strlen(text), "a", &v, &vn), 0);
    CU_ASSERT(vn == 1 && *v == '1');
    static const char *const none[] = {"{}", " { } ", "[1, 2]", "\"a\"", "7"};
    for (size_t j = 0; j < sizeof none / sizeof none[0]; j++) {
        at = 0;
        CU_ASSERT_EQUAL(tp_json_next_member(none[j], strlen(none[j]), &at, &k, &kn, &v, &vn), TP_ENOENT);
    }
    at = 0;
    CU_ASSERT_EQUAL(tp_json_next_member(NULL, 0, &at, &k, &kn, &v, &vn), TP_ENOENT);
}

/* v's compact text, numbers spelled in full; NULL for NULL. */
static char *dump17(const json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)) : NULL;
}

/*
 * tp_json_loadb and its own parser against json_loadb on text: the same
 * value written back byte for byte, or the same error. *fast: whether its
 * own parser took the text. false on a disagreement (printed).
 */
static bool load_agrees(const void *text, size_t n, size_t flags, bool *fast)
{
    json_error_t we, ge;
    json_t *want = json_loadb(text, n, flags, &we), *got = tp_json_loadb(text, n, flags, &ge);
    json_t *f = tp_json_load_fast(text, n, flags);
    char *ws = dump17(want), *gs = dump17(got), *fs = dump17(f);
    bool ok = want ? gs != NULL && strcmp(ws, gs) == 0 && (f == NULL || (fs && strcmp(ws, fs) == 0))
                   : got == NULL && f == NULL && strcmp(we.text, ge.text) == 0;
    ok = ok && we.position == ge.position && we.line == ge.line && we.column == ge.column &&
         strcmp(we.source, ge.source) == 0;
    if (!ok)
        fprintf(stderr, "\n  %.*s (flags %zu): jansson %s, tp_json_loadb %s, fast %s\n", (int)n, (const char *)text,
                flags, ws ? ws : we.text, gs ? gs : ge.text, fs ? fs : "-");
    *fast = f != NULL;
    free(ws);
    free(gs);
    free(fs);
    json_decref(want);
    json_decref(got);
    json_decref(f);
    return ok;
}

/* What its own parser takes, and what it leaves to jansson, one text at a time. */
static void test_load_table(void)
{
    /* clang-format off */
    static const struct { const char *text; size_t flags; bool fast; } cases[] = {
        {"{\"method\":\"tools/call\",\"params\":{\"name\":\"e.echo\",\"arguments\":{\"message\":\"hi\"}},\"jsonrpc\":\"2.0\",\"id\":1}", 0, true},
        {" [1, -0, 2.5, -3e-5, 1E+2, true, false, null, \"\", [], {}] ", 0, true},
        {"{\"a\":1,\"a\":2,\"b\":3}", 0, true},           /* the last a, in the first a's place, as jansson does */
        {"{\"a\":1,\"a\":2}", JSON_REJECT_DUPLICATES, false},
        {"\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", JSON_DECODE_ANY, true},
        {"\"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t x\"", JSON_DECODE_ANY, true},
        {"{\"k\\u00e9y\":{\"k\\n\":\"v\\t\"}}", 0, true},
        {"9223372036854775807", JSON_DECODE_ANY, true},
        {"-9223372036854775808", JSON_DECODE_ANY, true},
        {"12", JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, true},
        {"9223372036854775808", JSON_DECODE_ANY, false},  /* past int64 */
        {"1e400", JSON_DECODE_ANY, false},                 /* past a double */
        {"\"\\u0000\"", JSON_DECODE_ANY | JSON_ALLOW_NUL, false},
        {"\"\\ud83d\"", JSON_DECODE_ANY, false},           /* a lone surrogate */
        {"\"\xed\xa0\x80\"", JSON_DECODE_ANY, false},      /* one in UTF-8 */
        {"\"\xc3\"", JSON_DECODE_ANY, false},
        {"\"a\tb\"", JSON_DECODE_ANY, false},              /* a raw control character */
        {"1", 0, false},                                   /* not an object or array */
        {"{} x", 0, false},
        {"{\"a\":1,}", 0, false},
        {"[01]", 0, false},
        {"[1.]", 0, false},
        {"[-]", 0, false},
        {"", JSON_DECODE_ANY, false},
        {"{}", JSON_DISABLE_EOF_CHECK, false},             /* a flag it leaves to jansson */
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool fast;
        CU_ASSERT(load_agrees(cases[i].text, strlen(cases[i].text), cases[i].flags, &fast));
        if (fast != cases[i].fast)
            fprintf(stderr, "\n  %s: fast %d, expected %d\n", cases[i].text, fast, cases[i].fast);
        CU_ASSERT_EQUAL(fast, cases[i].fast);
    }
    /* nested past its depth: jansson's, whole */
    tp_buf_t deep = {0};
    for (int i = 0; i < 300; i++)
        tp_buf_puts(&deep, "[");
    for (int i = 0; i < 300; i++)
        tp_buf_puts(&deep, "]");
    bool fast;
    CU_ASSERT(load_agrees(deep.data, deep.len, 0, &fast));
    CU_ASSERT(!fast);
    tp_buf_free(&deep);
}

/* On random texts and their mutations, with each flag: the same value or error as jansson; most valid ones its own. */
static void test_load_against_jansson(void)
{
    srand(29);
    static const size_t flags[] = {0, JSON_DECODE_ANY, JSON_REJECT_DUPLICATES, JSON_DECODE_ANY | JSON_ALLOW_NUL,
                                   JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL};
    static const uint8_t junk[] = {'{', '}', '[', ']', ',', ':',  '"',  '\\', ' ',
                                   '0', '-', '.', 'e', 'x', 0xff, 0xc3, 0x80, 0x00};
    int disagree = 0, read = 0, fast_read = 0;
    for (int round = 0; round < 5000 && disagree < 10; round++) {
        tp_buf_t b = {0};
        random_value(&b, 0);
        for (int m = 0; m < 3; m++) {
            tp_buf_t c = {0};
            tp_buf_append(&c, b.data, b.len);
            if (m > 0 && c.len) {
                size_t at = (size_t)rand() % c.len;
                c.data[at] = junk[rand() % (int)sizeof junk];
            }
            for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
                bool fast;
                json_t *v = json_loadb((const char *)c.data, c.len, flags[f], NULL);
                disagree += !load_agrees(c.data, c.len, flags[f], &fast);
                read += v != NULL && m == 0 && f == 1;
                fast_read += v != NULL && m == 0 && f == 1 && fast;
                json_decref(v);
            }
            tp_buf_free(&c);
        }
        tp_buf_free(&b);
    }
    CU_ASSERT_EQUAL(disagree, 0);
    /* what it leaves to jansson among valid texts: \u0000, numbers past int64 (the generator makes a few) */
    CU_ASSERT(read > 1000);
    CU_ASSERT(fast_read * 10 >= read * 7);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("json", NULL, NULL);
    CU_add_test(s, "what JSON is and is not", test_table);
    CU_add_test(s, "tp_json_check and tp_json_member agree with jansson", test_against_jansson);
    CU_add_test(s, "plain runs are found sixteen and eight bytes at a time", test_plain_runs);
    CU_add_test(s, "integers written without printf, as printf writes them", test_decimal);
    CU_add_test(s, "tp_json_compact keeps every token as written", test_compact);
    CU_add_test(s, "tp_json_next_member walks the members in order", test_next_member);
    CU_add_test(s, "tp_json_loadb: what its own parser takes and leaves", test_load_table);
    CU_add_test(s, "tp_json_loadb reads what json_loadb reads", test_load_against_jansson);
    return tp_test_run();
}
