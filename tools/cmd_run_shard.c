/*
 * run --shard: before the first call runs, the calls file is read through
 * once for what the shard's store records of it (meta/"input",
 * inputrec.h): the file's and the registry's digests, which `toolpool
 * merge` checks every shard's store against, and how many of the file's
 * lines are this shard's, which `toolpool shard-status` counts what is
 * left from.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "inputrec.h"
#include "log.h"
#include "shard.h"

/* Feeds the file at path into h. 0, or -1 logged. */
static int digest_file(XXH3_state_t *h, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tp_log_error("shard.open_failed", "%s: %s", path, strerror(errno));
        return -1;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            tp_log_error("shard.open_failed", "%s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        XXH3_128bits_update(h, buf, (size_t)n);
    }
    close(fd);
    return 0;
}

/* XXH128 of the registry file's bytes, a NUL, then the policy file's (when there is one). 0, or -1 logged. */
static int registry_digest(const char *registry, const char *policy, uint8_t out[16])
{
    XXH3_state_t *h = XXH3_createState();
    int rc = h && XXH3_128bits_reset(h) != XXH_ERROR ? 0 : -1;
    if (rc)
        tp_log_error("shard.out_of_memory", "out of memory");
    rc = rc ? rc : digest_file(h, registry);
    if (rc == 0 && policy) {
        XXH3_128bits_update(h, "", 1);
        rc = digest_file(h, policy);
    }
    if (rc == 0) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
        memcpy(out, c.digest, 16);
    }
    XXH3_freeState(h);
    return rc;
}

typedef struct {
    tp_store_t *s;
    Toolpool__InputRecord *rec;
    char msg[512];
} prepare_t;

/* In one write transaction: the record there must be of the same shard (or none); then this run's goes in. */
static int prepare_apply(MDB_txn *txn, void *ctx)
{
    prepare_t *p = ctx;
    Toolpool__InputRecord *old = NULL;
    int rc = tp_input_record_get(p->s, txn, &old);
    if (rc == MDB_NOTFOUND)
        return tp_input_record_put(p->s, txn, p->rec);
    if (rc)
        return rc;
    if (old->shard_index != p->rec->shard_index || old->shard_count != p->rec->shard_count) {
        snprintf(p->msg, sizeof p->msg,
                 "%s holds shard %u/%u of a batch, not %u/%u: give each shard a store of its own "
                 "(rerun shard %u/%u on this one)",
                 tp_store_dir(p->s), old->shard_index, old->shard_count, p->rec->shard_index, p->rec->shard_count,
                 old->shard_index, old->shard_count);
        rc = TP_EINVAL;
    } else if (memcmp(old->input_digest.data, p->rec->input_digest.data, 16) != 0 ||
               memcmp(old->registry_digest.data, p->rec->registry_digest.data, 16) != 0) {
        tp_log_warn("shard.rerun_elsewhere",
                    "%s: its shard was run on another %s before; recording this one's (every shard merged with it "
                    "must be run on the same calls file and registry)",
                    tp_store_dir(p->s),
                    memcmp(old->input_digest.data, p->rec->input_digest.data, 16) != 0 ? "calls file" : "registry");
    }
    protobuf_c_message_free_unpacked(&old->base, NULL);
    return rc ? rc : tp_input_record_put(p->s, txn, p->rec);
}

int tp_run_shard_prepare(tp_store_t *s, const char *registry, const char *policy, int input_fd, const char *input_name,
                         const tp_shard_t *sh, size_t max_line)
{
    struct stat st;
    if (fstat(input_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        tp_log_error("shard.bad_input",
                     "--shard: %s is not a file: every shard reads the same calls file, which its store records "
                     "the digest of (a pipe or standard input cannot be checked)",
                     input_name);
        return -1;
    }
    tp_shard_input_t in;
    uint8_t reg[16];
    if (tp_shard_scan(input_fd, input_name, sh, max_line, &in) < 0 || registry_digest(registry, policy, reg) < 0)
        return -1;
    Toolpool__InputRecord rec = TOOLPOOL__INPUT_RECORD__INIT;
    rec.input_digest = (ProtobufCBinaryData){16, in.digest};
    rec.registry_digest = (ProtobufCBinaryData){16, reg};
    rec.shard_index = sh->index;
    rec.shard_count = sh->count;
    rec.shard_calls = in.own;
    rec.input_calls = in.lines;
    rec.input_name = (char *)input_name;
    rec.written_unix_us = tp_unix_us();
    prepare_t p = {.s = s, .rec = &rec};
    char err[512];
    int rc = tp_store_write(s, prepare_apply, &p, err, sizeof err);
    if (rc) {
        tp_log_error("shard.record_failed", "%s", p.msg[0] ? p.msg : err);
        return -1;
    }
    return 0;
}
