/*
 * Digests of a call's input: XXH128 (xxhash's XXH3) of the canonical form of
 * its args, and of pairs built from them. The store keys results, breakers
 * and steps by them, so the bytes hashed never change from one version to
 * the next: a store written by one is read by the other.
 */
#ifndef TP_DIGEST_H
#define TP_DIGEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define TP_DIGEST_LEN 16

typedef struct {
    uint8_t b[TP_DIGEST_LEN];
} tp_digest_t;

/* XXH128 of the canonical form of args (keys sorted, numbers in one form). */
void tp_digest_args(const json_t *args, tp_digest_t *out);
/* The same, of args already written in that form. */
void tp_digest_bytes(const void *canonical, size_t n, tp_digest_t *out);
/* XXH128 of a's n bytes followed by b's m bytes, as if they were one buffer. */
void tp_digest_pair(const void *a, size_t n, const void *b, size_t m, tp_digest_t *out);
/* The identity of a call's input: XXH128 of the tool's name (with its NUL) and the args' digest. */
void tp_identity_digest(const char *tool, const tp_digest_t *args, tp_digest_t *out);
/* 32 hex digits and a NUL. */
void tp_digest_hex(const tp_digest_t *d, char out[2 * TP_DIGEST_LEN + 1]);

#endif
