#include "digest.h"

#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "buf.h"
#include "json.h"

static void canonical(XXH128_hash_t h, tp_digest_t *out)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out->b, c.digest, TP_DIGEST_LEN);
}

void tp_digest_bytes(const void *bytes, size_t n, tp_digest_t *out)
{
    canonical(XXH3_128bits(bytes, n), out);
}

void tp_digest_args(const json_t *args, tp_digest_t *out)
{
    tp_buf_t b = {0};
    if (args == NULL || tp_json_write(&b, args, TP_JSON_CANONICAL) < 0)
        tp_buf_reset(&b);
    tp_digest_bytes(b.data ? b.data : (const uint8_t *)"", b.len, out);
    tp_buf_free(&b);
}

/*
 * Hashed in one go from a buffer on the stack when both parts fit (a job or
 * tool name does: the store's keys are at most 511 bytes), else streamed:
 * XXH3 gives the same digest either way.
 */
void tp_digest_pair(const void *a, size_t n, const void *b, size_t m, tp_digest_t *out)
{
    uint8_t buf[TP_DIGEST_LEN + 512];
    if (n + m <= sizeof buf) {
        memcpy(buf, a, n);
        memcpy(buf + n, b, m);
        canonical(XXH3_128bits(buf, n + m), out);
        return;
    }
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, a, n);
    XXH3_128bits_update(&st, b, m);
    canonical(XXH3_128bits_digest(&st), out);
}

void tp_identity_digest(const char *tool, const tp_digest_t *args, tp_digest_t *out)
{
    tp_digest_pair(tool, strlen(tool) + 1, args->b, TP_DIGEST_LEN, out);
}

void tp_digest_hex(const tp_digest_t *d, char out[2 * TP_DIGEST_LEN + 1])
{
    tp_hex(out, d->b, TP_DIGEST_LEN);
    out[2 * TP_DIGEST_LEN] = '\0';
}
