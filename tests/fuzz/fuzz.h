/*
 * What the libFuzzer targets share: each is one LLVMFuzzerTestOneInput that
 * must never crash, leak or hit undefined behaviour (ASan and UBSan say),
 * and that holds a fast path to its slow twin, calling TP_FUZZ_CHECK on
 * every point where they must agree: a mismatch aborts, as a crash does.
 */
#ifndef TP_FUZZ_H
#define TP_FUZZ_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * What jansson refuses that JSON's grammar allows: escapes of lone
 * surrogates, \u0000 in a key (even with JSON_ALLOW_NUL), numbers past
 * int64 or double, nesting past its limit. err is jansson's error text.
 */
static inline bool tp_fuzz_jansson_only(const char *err)
{
    return strstr(err, "invalid Unicode") || strstr(err, "NUL byte") || strstr(err, "too big") ||
           strstr(err, "overflow") || strstr(err, "maximum parsing depth");
}

#define TP_FUZZ_CHECK(cond)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: mismatch: %s\n", __FILE__, __LINE__, #cond);                                       \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

#endif
