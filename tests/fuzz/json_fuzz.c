/*
 * The store's JSON check (tp_json_check, tp_json_member in common/json/json.h)
 * against jansson, as tests/json_test.c holds it on random texts: the same
 * verdict, but where jansson refuses what is JSON by grammar
 * (tp_fuzz_jansson_only) or takes what is not (it drops raw NUL bytes);
 * and the member
 * tp_json_member finds is the one jansson reads, when the key is written
 * plain, once, as a key.
 * What passes the check, tp_json_compact makes a text that passes it too,
 * that compacts to itself, and that jansson reads as it reads the text.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t err;
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    size_t at = 0;
    int got = tp_json_check(data, size, &at);
    bool nul = memchr(data, 0, size) != NULL;
    TP_FUZZ_CHECK(got == 0 || got == TP_EINVAL);
    TP_FUZZ_CHECK(got == 0 || at <= size);
    if (v && !nul)
        TP_FUZZ_CHECK(got == 0);
    if (!v && got == 0)
        TP_FUZZ_CHECK(tp_fuzz_jansson_only(err.text));
    if (v && got == 0 && json_is_object(v)) {
        const char *key;
        json_t *member;
        json_object_foreach(v, key, member) {
            /* A key written with no escape, once in the text, is found where jansson found it. */
            size_t klen = strlen(key);
            bool plain = klen < 64 && strpbrk(key, "\"\\") == NULL;
            for (size_t i = 0; plain && i < klen; i++)
                plain = (unsigned char)key[i] >= 0x20;
            char quoted[72];
            snprintf(quoted, sizeof quoted, "\"%s\"", key);
            const char *first = plain ? memmem(data, size, quoted, klen + 2) : NULL;
            if (first == NULL || memmem(first + 1, size - (size_t)(first + 1 - (const char *)data), quoted, klen + 2))
                continue;
            /* and that one is the key, not a value that reads the same ({"\/":"/"}): a colon follows it */
            const char *after = first + klen + 2, *end = (const char *)data + size;
            while (after < end && strchr(" \t\r\n", *after) != NULL && *after != '\0')
                after++;
            if (after == end || *after != ':')
                continue;
            const char *val;
            size_t len;
            TP_FUZZ_CHECK(tp_json_member(data, size, key, &val, &len) == 0);
            json_t *back = json_loadb(val, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            TP_FUZZ_CHECK(back != NULL && json_equal(back, member));
            json_decref(back);
        }
    }
    if (got == 0) {
        tp_buf_t c = {0}, again = {0};
        TP_FUZZ_CHECK(tp_json_compact(data, size, &c) == 0);
        TP_FUZZ_CHECK(tp_json_check(c.data, c.len, NULL) == 0);
        TP_FUZZ_CHECK(tp_json_compact(c.data, c.len, &again) == 0);
        TP_FUZZ_CHECK(again.len == c.len && memcmp(again.data, c.data, c.len) == 0);
        json_t *back = json_loadb((const char *)c.data, c.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        TP_FUZZ_CHECK((v == NULL) == (back == NULL) && (v == NULL || json_equal(v, back)));
        json_decref(back);
        tp_buf_free(&c);
        tp_buf_free(&again);
    }
    json_decref(v);
    return 0;
}
