#include "steps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "digest.h"

#define HASH_LEN TP_DIGEST_LEN
#define KEY_LEN (1 + 2 * HASH_LEN) /* the longer of the two: 'i' JOBHASH IDHASH */

static void hash(const char *s, uint8_t out[HASH_LEN])
{
    tp_digest_t d;
    tp_digest_bytes(s, strlen(s), &d);
    memcpy(out, d.b, HASH_LEN);
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* 'o' JOBHASH SEQ: 25 bytes. */
static MDB_val order_key(uint8_t key[KEY_LEN], const uint8_t job[HASH_LEN], uint64_t seq)
{
    key[0] = 'o';
    memcpy(key + 1, job, HASH_LEN);
    put_be64(key + 1 + HASH_LEN, seq);
    return (MDB_val){1 + HASH_LEN + 8, key};
}

/* 'i' JOBHASH IDHASH: 33 bytes. */
static MDB_val id_key(uint8_t key[KEY_LEN], const uint8_t job[HASH_LEN], const char *id)
{
    key[0] = 'i';
    memcpy(key + 1, job, HASH_LEN);
    hash(id, key + 1 + HASH_LEN);
    return (MDB_val){KEY_LEN, key};
}

int tp_steps_add(tp_store_t *s, MDB_txn *txn, const char *job, const char *id, Toolpool__Checkpoint *cp, bool *added)
{
    *added = false;
    for (size_t i = 0; i < cp->n_calls; i++)
        if (strcmp(cp->calls[i], id) == 0)
            return 0;
    MDB_dbi dbi = tp_store_dbi(s, TP_DB_STEPS);
    uint8_t jh[HASH_LEN], ik[KEY_LEN], ok[KEY_LEN], seqb[8];
    hash(job, jh);
    MDB_val k = id_key(ik, jh, id), v;
    int rc = tp_mdb(mdb_get(txn, dbi, &k, &v));
    if (rc == 0)
        return 0;
    if (rc != MDB_NOTFOUND)
        return rc;
    uint64_t seq = cp->calls_next + 1;
    put_be64(seqb, seq);
    v = (MDB_val){8, seqb};
    if ((rc = tp_mdb(mdb_put(txn, dbi, &k, &v, 0))) != 0)
        return rc;
    k = order_key(ok, jh, seq);
    v = (MDB_val){strlen(id), (void *)id};
    if ((rc = tp_mdb(mdb_put(txn, dbi, &k, &v, 0))) != 0)
        return rc;
    cp->calls_next = seq;
    cp->calls_listed++;
    *added = true;
    return 0;
}

int tp_steps_remove(tp_store_t *s, MDB_txn *txn, const char *job, const char *id, Toolpool__Checkpoint *cp,
                    bool *removed)
{
    *removed = false;
    MDB_dbi dbi = tp_store_dbi(s, TP_DB_STEPS);
    uint8_t jh[HASH_LEN], ik[KEY_LEN], ok[KEY_LEN];
    hash(job, jh);
    MDB_val k = id_key(ik, jh, id), v;
    int rc = tp_mdb(mdb_get(txn, dbi, &k, &v));
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (v.mv_size != 8)
        return TP_EPROTO;
    MDB_val o = order_key(ok, jh, get_be64(v.mv_data));
    if ((rc = tp_mdb(mdb_del(txn, dbi, &k, NULL))) != 0 ||
        ((rc = tp_mdb(mdb_del(txn, dbi, &o, NULL))) != 0 && rc != MDB_NOTFOUND))
        return rc;
    if (cp->calls_listed > 0)
        cp->calls_listed--;
    *removed = true;
    return 0;
}

/* Deletes every record whose key starts with tag JOBHASH. */
static int clear_range(MDB_txn *txn, MDB_dbi dbi, char tag, const uint8_t jh[HASH_LEN])
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, dbi, &cur));
    if (rc)
        return rc;
    uint8_t prefix[1 + HASH_LEN];
    prefix[0] = (uint8_t)tag;
    memcpy(prefix + 1, jh, HASH_LEN);
    for (;;) {
        /* Found again each time: where a cursor stands after a delete is LMDB's to say. */
        MDB_val k = {sizeof prefix, prefix}, v;
        rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE));
        if (rc || k.mv_size <= sizeof prefix || memcmp(k.mv_data, prefix, sizeof prefix) != 0)
            break;
        if ((rc = tp_mdb(mdb_cursor_del(cur, 0))) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == 0 ? 0 : rc;
}

int tp_steps_clear(tp_store_t *s, MDB_txn *txn, const char *job)
{
    if (!tp_store_has(s, TP_DB_STEPS))
        return 0;
    uint8_t jh[HASH_LEN];
    hash(job, jh);
    int rc = clear_range(txn, tp_store_dbi(s, TP_DB_STEPS), 'o', jh);
    return rc ? rc : clear_range(txn, tp_store_dbi(s, TP_DB_STEPS), 'i', jh);
}

int tp_steps_list(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp, char ***ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    /* Two passes: the sizes, then the copies, into one block. */
    size_t count = cp->n_calls, bytes = 0;
    for (size_t i = 0; i < cp->n_calls; i++)
        bytes += strlen(cp->calls[i]) + 1;
    bool steps = tp_store_has(s, TP_DB_STEPS) && cp->calls_listed > 0;
    MDB_cursor *cur = NULL;
    uint8_t jh[HASH_LEN], ok[KEY_LEN];
    hash(cp->job, jh);
    MDB_val k, v;
    int rc = 0;
    if (steps && (rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_STEPS), &cur))) != 0)
        return rc;
    for (int pass = 0; pass < 2; pass++) {
        char **out = NULL;
        char *text = NULL;
        if (pass == 1) {
            out = malloc(count * sizeof *out + bytes + 1);
            if (out == NULL) {
                rc = TP_ENOMEM;
                break;
            }
            text = (char *)(out + count);
            count = 0;
            for (size_t i = 0; i < cp->n_calls; i++) {
                size_t len = strlen(cp->calls[i]) + 1;
                memcpy(text, cp->calls[i], len);
                out[count++] = text;
                text += len;
            }
        }
        if (steps) {
            k = order_key(ok, jh, 0);
            for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE));
                 rc == 0 && k.mv_size == 1 + HASH_LEN + 8 && memcmp(k.mv_data, ok, 1 + HASH_LEN) == 0;
                 rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
                if (v.mv_size == 0 || memchr(v.mv_data, 0, v.mv_size) != NULL) {
                    tp_store_note_bad(s, TP_DB_STEPS, k.mv_data, k.mv_size, "a listed call id is empty or holds a NUL");
                    rc = TP_EPROTO;
                    break;
                }
                if (pass == 0) {
                    count++;
                    bytes += v.mv_size + 1;
                } else {
                    memcpy(text, v.mv_data, v.mv_size);
                    text[v.mv_size] = '\0';
                    out[count++] = text;
                    text += v.mv_size + 1;
                }
            }
            if (rc == MDB_NOTFOUND || rc == 0)
                rc = 0;
        }
        if (rc) {
            free(out);
            break;
        }
        if (pass == 1) {
            *ids = out;
            *n = count;
        }
    }
    if (cur)
        mdb_cursor_close(cur);
    return rc;
}

int tp_steps_migrate(tp_store_t *s, MDB_txn *txn)
{
    /* The jobs with a list, first: a record is rewritten while no cursor walks them. */
    MDB_dbi jobs = tp_store_dbi(s, TP_DB_JOBS);
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, jobs, &cur));
    if (rc)
        return rc;
    char **names = NULL;
    size_t n = 0, cap = 0;
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if (tp_array_fit(&names, &cap, n + 1, sizeof *names, 64) < 0) {
            rc = TP_ENOMEM;
            break;
        }
        if ((names[n] = strndup(k.mv_data, k.mv_size)) == NULL) {
            rc = TP_ENOMEM;
            break;
        }
        n++;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    for (size_t j = 0; j < n && rc == 0; j++) {
        Toolpool__Checkpoint *old;
        rc = tp_store_get_msg(s, txn, TP_DB_JOBS, names[j], strlen(names[j]), &toolpool__checkpoint__descriptor,
                              (ProtobufCMessage **)&old);
        if (rc)
            break;
        if (old->n_calls > 0) {
            Toolpool__Checkpoint cp = *old;
            cp.n_calls = 0;
            cp.calls = NULL;
            for (size_t i = 0; i < old->n_calls && rc == 0; i++) {
                bool added;
                rc = tp_steps_add(s, txn, names[j], old->calls[i], &cp, &added);
            }
            if (rc == 0)
                rc = tp_store_put_msg(s, txn, TP_DB_JOBS, names[j], strlen(names[j]), &cp.base);
        }
        toolpool__checkpoint__free_unpacked(old, NULL);
    }
    for (size_t j = 0; j < n; j++)
        free(names[j]);
    free(names);
    return rc;
}

bool tp_steps_record_ok(const void *key, size_t klen, const void *val, size_t vlen, char *why, size_t cap)
{
    const uint8_t *k = key;
    if (klen == 1 + HASH_LEN + 8 && k[0] == 'o') {
        if (vlen == 0 || memchr(val, 0, vlen) != NULL) {
            snprintf(why, cap, "a listed call id is empty or holds a NUL");
            return false;
        }
        return true;
    }
    if (klen == KEY_LEN && k[0] == 'i') {
        if (vlen != 8 || get_be64(val) == 0) {
            snprintf(why, cap, "a list position is not 8 bytes of a number above 0");
            return false;
        }
        return true;
    }
    snprintf(why, cap, "not a key of the steps database");
    return false;
}
