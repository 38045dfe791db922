#include "breaker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "breakerlog.h"
#include "buf.h"
#include "json.h"
#include "toolpool.pb-c.h"

#define BUCKETS 10
#define KEY_MAX 600
/* Room for a transition's cause: a count, a window, the last kind and (cut) its message. */
#define TP_BREAKER_CAUSE_MAX 320

/*
 * Microseconds from then to now on the wall clock, 0 when the clock has
 * stepped back past then: a breaker opened "in the future" stays open
 * (unsigned subtraction would wrap to a huge gap and release it at once).
 */
static uint64_t since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

void tp_breaker_call_digest(const tp_tool_t *t, const tp_digest_t *args, const char *job, tp_digest_t *out)
{
    if (t->policy.same_call_scope == TP_SCOPE_GLOBAL || job == NULL) {
        *out = *args;
        return;
    }
    /* The args' digest, then the job's whole name and a NUL. */
    tp_digest_pair(args->b, TP_DIGEST_LEN, job, strlen(job) + 1, out);
}

size_t tp_breaker_call_key(const char *tool, const tp_digest_t *d, uint8_t *key, size_t cap)
{
    size_t n = strlen(tool);
    if (n + 2 + TP_DIGEST_LEN > cap)
        n = cap - 2 - TP_DIGEST_LEN;
    key[0] = 'c';
    memcpy(key + 1, tool, n);
    key[1 + n] = 0;
    memcpy(key + 2 + n, d->b, TP_DIGEST_LEN);
    return n + 2 + TP_DIGEST_LEN;
}

size_t tp_breaker_tool_key(const char *tool, uint8_t *key, size_t cap)
{
    size_t n = strlen(tool);
    if (n + 1 > cap)
        n = cap - 1;
    key[0] = 't';
    memcpy(key + 1, tool, n);
    return n + 1;
}

/* ---- same call ---- */

/* The cause of an open call circuit's close at the end of its window. */
static void window_passed(char *buf, size_t cap, uint64_t window_us)
{
    snprintf(buf, cap, "its window (%.3gs) passed", (double)window_us / 1e6);
}

static int call_get(tp_store_t *s, MDB_txn *txn, const uint8_t *key, size_t klen, Toolpool__CallBreaker **out)
{
    return tp_store_get_msg(s, txn, TP_DB_BREAKERS, key, klen, &toolpool__call_breaker__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_breaker_call_check(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d, uint64_t now,
                          bool *open, char *escalation, size_t esc_len)
{
    uint8_t key[KEY_MAX];
    size_t klen = tp_breaker_call_key(t->name, d, key, sizeof key);
    Toolpool__CallBreaker *cb;
    *open = false;
    int rc = call_get(s, txn, key, klen, &cb);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (cb->opened_unix_us != 0) {
        if (since(now, cb->opened_unix_us) < t->policy.same_call_window_us) {
            *open = true;
            snprintf(escalation, esc_len, "%s", cb->escalation);
            cb->blocked++;
            rc = tp_store_put_msg(s, txn, TP_DB_BREAKERS, key, klen, &cb->base);
        } else {
            MDB_val k = {klen, key};
            char cause[96];
            window_passed(cause, sizeof cause, t->policy.same_call_window_us);
            rc = tp_breaker_call_close(s, txn, &k, cb, cause, now);
        }
    }
    protobuf_c_message_free_unpacked(&cb->base, NULL);
    return rc;
}

int tp_breaker_call_record(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d, const char *job,
                           const char *call_id, const char *args, bool failed, const char *kind, const char *message,
                           uint64_t now, bool *opened)
{
    uint8_t key[KEY_MAX];
    size_t klen = tp_breaker_call_key(t->name, d, key, sizeof key);
    *opened = false;
    Toolpool__CallBreaker *old = NULL;
    int rc = call_get(s, txn, key, klen, &old);
    if (!failed) {
        /* No record, the common case: one lookup, as a delete would be. */
        MDB_val k = {klen, key};
        if (rc == 0)
            rc = tp_breaker_call_close(s, txn, &k, old, "the call succeeded", now);
        else if (rc == TP_EPROTO)
            rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &k, NULL)); /* a success clears it anyway */
        protobuf_c_message_free_unpacked(old ? &old->base : NULL, NULL);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    /* Keep the failures inside the window but this call's own earlier one, plus this one. */
    uint64_t window = t->policy.same_call_window_us;
    size_t n = 0, cap = (old ? old->n_failures_unix_us : 0) + 1;
    uint64_t *fails = malloc(cap * sizeof *fails);
    char **ids = malloc(cap * sizeof *ids);
    if (fails == NULL || ids == NULL) {
        free(fails);
        free(ids);
        protobuf_c_message_free_unpacked(old ? &old->base : NULL, NULL);
        return TP_ENOMEM;
    }
    bool named = old && old->n_failed_ids == old->n_failures_unix_us; /* records before ids were kept have none */
    for (size_t i = 0; old && i < old->n_failures_unix_us; i++) {
        const char *was = named ? old->failed_ids[i] : "";
        if (since(now, old->failures_unix_us[i]) >= window || (call_id && strcmp(was, call_id) == 0))
            continue;
        ids[n] = (char *)was;
        fails[n++] = old->failures_unix_us[i];
    }
    ids[n] = (char *)(call_id ? call_id : "");
    fails[n++] = now;
    Toolpool__CallBreaker cb = TOOLPOOL__CALL_BREAKER__INIT;
    cb.tool = t->name;
    cb.digest.data = (uint8_t *)d->b;
    cb.digest.len = TP_DIGEST_LEN;
    cb.failures_unix_us = fails;
    cb.n_failures_unix_us = n;
    cb.failed_ids = ids;
    cb.n_failed_ids = n;
    cb.last_kind = (char *)kind;
    cb.last_message = (char *)(message ? message : "");
    cb.args.data = (uint8_t *)args;
    cb.args.len = args ? strlen(args) : 0;
    cb.job = (char *)(job && t->policy.same_call_scope == TP_SCOPE_JOB ? job : "");
    bool was_open = old && old->opened_unix_us != 0 && since(now, old->opened_unix_us) < window;
    tp_breaker_history_t h, h_closed;
    char cause[TP_BREAKER_CAUSE_MAX], closed_cause[96];
    if (old) {
        cb.history = old->history;
        cb.n_history = old->n_history;
    }
    if (old && old->opened_unix_us != 0 && !was_open) {
        /* Open until its window passed, which no check has seen yet: that close first. */
        window_passed(closed_cause, sizeof closed_cause, window);
        tp_breaker_history_add(&h_closed, cb.history, cb.n_history, TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED,
                               closed_cause, old->blocked, old->opened_unix_us + window, &cb.history, &cb.n_history);
    }
    if (was_open) {
        cb.opened_unix_us = old->opened_unix_us;
        cb.escalation = old->escalation;
        cb.blocked = old->blocked;
    } else if (n >= t->policy.same_call_failures) {
        cb.opened_unix_us = now;
        *opened = true;
        snprintf(cause, sizeof cause, "failed %zu times within %.3gs (last: %s: %.200s)", n, (double)window / 1e6,
                 kind ? kind : "", message ? message : "");
        tp_breaker_history_add(&h, cb.history, cb.n_history, TOOLPOOL__BREAKER_STATE__BREAKER_OPEN, cause, 0, now,
                               &cb.history, &cb.n_history);
    }
    rc = tp_store_put_msg(s, txn, TP_DB_BREAKERS, key, klen, &cb.base);
    free(fails);
    free(ids);
    protobuf_c_message_free_unpacked(old ? &old->base : NULL, NULL);
    return rc;
}

int tp_breaker_call_set_escalation(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, const tp_digest_t *d,
                                   const char *escalation)
{
    uint8_t key[KEY_MAX];
    size_t klen = tp_breaker_call_key(t->name, d, key, sizeof key);
    Toolpool__CallBreaker *cb;
    int rc = call_get(s, txn, key, klen, &cb);
    if (rc)
        return rc;
    char *keep = cb->escalation;
    cb->escalation = (char *)escalation;
    rc = tp_store_put_msg(s, txn, TP_DB_BREAKERS, key, klen, &cb->base);
    cb->escalation = keep;
    protobuf_c_message_free_unpacked(&cb->base, NULL);
    return rc;
}

/* ---- tool ---- */

static bool counts_as_failure(tp_kind_t kind)
{
    return kind < TP_KIND__COUNT && tp_kind_class(kind) == TP_CLASS_TRANSIENT;
}

const char *tp_breaker_call_id(const char *tool, const tp_digest_t *d, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "call/%.256s/", tool);
    for (int i = 0; i < 6 && n > 0 && (size_t)n + 3 <= cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%02x", d->b[i]);
    return buf;
}

int tp_breaker_tool_admit(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, uint64_t now, tp_admit_t *out)
{
    uint8_t key[KEY_MAX];
    Toolpool__ToolBreaker *tb;
    *out = TP_ADMIT_YES;
    if (t->policy.tool_off || tp_breakers_none(s, txn))
        return 0;
    size_t klen = tp_breaker_tool_key(t->name, key, sizeof key);
    int rc = tp_store_get_msg(s, txn, TP_DB_BREAKERS, key, klen, &toolpool__tool_breaker__descriptor,
                              (ProtobufCMessage **)&tb);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    const tp_policy_t *p = &t->policy;
    bool dirty = false;
    tp_breaker_history_t h;
    char cause[TP_BREAKER_CAUSE_MAX];
    Toolpool__BreakerEvent **was = tb->history;
    size_t n_was = tb->n_history;
    if (tb->state == TOOLPOOL__BREAKER_STATE__BREAKER_OPEN && since(now, tb->opened_unix_us) >= p->tool_cooldown_us) {
        tb->state = TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN;
        tb->probes_out = 0;
        snprintf(cause, sizeof cause, "its cooldown (%.3gs) passed: probing", (double)p->tool_cooldown_us / 1e6);
        tp_breaker_history_add(&h, was, n_was, tb->state, cause, tb->refused, now, &tb->history, &tb->n_history);
        tb->refused = 0;
        dirty = true;
    }
    if (tb->state == TOOLPOOL__BREAKER_STATE__BREAKER_OPEN) {
        *out = TP_ADMIT_NO;
        tb->refused++;
        dirty = true;
    } else if (tb->state == TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN) {
        /* A probe that never came back (its supervisor died) is given up after a cooldown. */
        if (tb->probes_out >= p->tool_probes && since(now, tb->probe_unix_us) >= p->tool_cooldown_us)
            tb->probes_out = 0;
        if (tb->probes_out < p->tool_probes) {
            tb->probes_out++;
            tb->probe_unix_us = now;
            *out = TP_ADMIT_PROBE;
            dirty = true;
        } else {
            *out = TP_ADMIT_NO;
            tb->refused++;
            dirty = true;
        }
    }
    if (dirty)
        rc = tp_store_put_msg(s, txn, TP_DB_BREAKERS, key, klen, &tb->base);
    tb->history = was; /* the record's own, for its free */
    tb->n_history = n_was;
    protobuf_c_message_free_unpacked(&tb->base, NULL);
    return rc;
}

int tp_breaker_tool_record(tp_store_t *s, MDB_txn *txn, const tp_tool_t *t, tp_kind_t kind, bool probe, uint64_t now)
{
    if (t->policy.tool_off)
        return 0;
    if (kind != TP_KIND_OK &&
        (kind >= TP_KIND__COUNT || tp_kind_class(kind) == TP_CLASS_GUARD || tp_kind_class(kind) == TP_CLASS_MALFORMED))
        return 0; /* neither health nor sickness */
    bool failed = counts_as_failure(kind);
    if (!failed && tp_breakers_none(s, txn))
        return 0; /* a healthy tool with no record needs none */
    uint8_t key[KEY_MAX];
    size_t klen = tp_breaker_tool_key(t->name, key, sizeof key);
    const tp_policy_t *p = &t->policy;
    Toolpool__ToolBreaker *old = NULL;
    int rc = tp_store_get_msg(s, txn, TP_DB_BREAKERS, key, klen, &toolpool__tool_breaker__descriptor,
                              (ProtobufCMessage **)&old);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (old == NULL && !failed)
        return 0; /* a healthy tool with no record needs none */

    Toolpool__ToolBreaker tb = TOOLPOOL__TOOL_BREAKER__INIT;
    Toolpool__BreakerBucket bucket_mem[BUCKETS + 1], *buckets[BUCKETS + 1];
    size_t nb = 0;
    if (old) {
        tb.state = old->state;
        tb.opened_unix_us = old->opened_unix_us;
        tb.probes_out = old->probes_out;
        tb.probe_unix_us = old->probe_unix_us;
        tb.trips = old->trips;
        tb.history = old->history;
        tb.n_history = old->n_history;
        tb.refused = old->refused;
    }
    tp_breaker_history_t h;
    char cause[TP_BREAKER_CAUSE_MAX];
    tb.tool = t->name;
    uint64_t slice = p->tool_window_us / BUCKETS ? p->tool_window_us / BUCKETS : 1;
    uint64_t start = now - now % slice;
    for (size_t i = 0; old && i < old->n_buckets && nb < BUCKETS; i++) {
        Toolpool__BreakerBucket *ob = old->buckets[i];
        if (since(now, ob->start_unix_us) >= p->tool_window_us)
            continue;
        bucket_mem[nb] = *ob;
        buckets[nb] = &bucket_mem[nb];
        nb++;
    }
    if (nb == 0 || buckets[nb - 1]->start_unix_us != start) {
        if (nb == BUCKETS) {
            memmove(bucket_mem, bucket_mem + 1, (BUCKETS - 1) * sizeof bucket_mem[0]);
            nb--;
        }
        toolpool__breaker_bucket__init(&bucket_mem[nb]);
        bucket_mem[nb].start_unix_us = start;
        buckets[nb] = &bucket_mem[nb];
        nb++;
    }
    for (size_t i = 0; i < nb; i++)
        buckets[i] = &bucket_mem[i];
    buckets[nb - 1]->calls++;
    if (failed)
        buckets[nb - 1]->failures++;

    if (probe && tb.state == TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN) {
        if (tb.probes_out > 0)
            tb.probes_out--;
        if (failed) {
            tb.state = TOOLPOOL__BREAKER_STATE__BREAKER_OPEN;
            tb.opened_unix_us = now;
            tb.trips++;
            snprintf(cause, sizeof cause, "a probe failed (%s)", tp_kind_name(kind));
        } else {
            tb.state = TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED;
            tb.probes_out = 0;
            nb = 0; /* a fresh window */
            snprintf(cause, sizeof cause, "a probe answered (%s)", kind == TP_KIND_OK ? "ok" : tp_kind_name(kind));
        }
        tp_breaker_history_add(&h, tb.history, tb.n_history, tb.state, cause, tb.refused, now, &tb.history,
                               &tb.n_history);
        tb.refused = 0;
    } else if (tb.state == TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED) {
        uint64_t calls = 0, fails = 0;
        for (size_t i = 0; i < nb; i++) {
            calls += buckets[i]->calls;
            fails += buckets[i]->failures;
        }
        if (calls >= p->tool_min_calls && (double)fails >= p->tool_failure_rate * (double)calls) {
            tb.state = TOOLPOOL__BREAKER_STATE__BREAKER_OPEN;
            tb.opened_unix_us = now;
            tb.trips++;
            nb = 0;
            snprintf(cause, sizeof cause, "%llu of %llu attempts failed within %.3gs (last: %s)",
                     (unsigned long long)fails, (unsigned long long)calls, (double)p->tool_window_us / 1e6,
                     tp_kind_name(kind));
            tp_breaker_history_add(&h, tb.history, tb.n_history, tb.state, cause, 0, now, &tb.history, &tb.n_history);
            tb.refused = 0;
        }
    }
    tb.buckets = buckets;
    tb.n_buckets = nb;
    rc = tp_store_put_msg(s, txn, TP_DB_BREAKERS, key, klen, &tb.base);
    protobuf_c_message_free_unpacked(old ? &old->base : NULL, NULL);
    return rc;
}
