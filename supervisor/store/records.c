#include "records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "breakerlog.h"
#include "digest.h"
#include "checkpoint.h"
#include "json.h"
#include "steps.h"

/* ---- small JSON helpers: each returns 0, or TP_ENOMEM ---- */

/* obj[key] = v, taking v's reference; a NULL v is out of memory. */
static int put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0 ? 0 : TP_ENOMEM;
}

/* A string from the store: one that is not valid UTF-8 (jansson refuses it) shows as U+FFFD. */
static json_t *str_of(const char *s)
{
    json_t *v = json_string(s ? s : "");
    return v ? v : json_string("\xef\xbf\xbd");
}

static json_t *ms_of_us(uint64_t us)
{
    return json_integer((json_int_t)(us / 1000u));
}

/* A duration in milliseconds, to the microsecond. */
static json_t *ms_real(uint64_t us)
{
    return json_real((double)us / 1e3);
}

/* Stored JSON text as a value; text that does not parse stays a string. */
static json_t *json_of_bytes(const uint8_t *data, size_t len)
{
    if (len == 0)
        return json_null();
    json_t *v = tp_json_loadb((const char *)data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    return v ? v : json_stringn((const char *)data, len);
}

static json_t *trace_json(Toolpool__Attempt *const *trace, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const Toolpool__Attempt *t = trace[i];
        json_t *o = json_object();
        if (o == NULL || put(o, "attempt", json_integer(t->attempt)) || put(o, "tool", str_of(t->tool)) ||
            put(o, "outcome", str_of(t->outcome)) || put(o, "duration_ms", ms_real(t->duration_us)) ||
            put(o, "backoff_ms", ms_real(t->backoff_us)) || json_array_append_new(a, o) != 0) {
            json_decref(o);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---- breakers ---- */

void tp_records_breaker_id(const MDB_val *k, char *id, size_t cap)
{
    const char *p = k->mv_data;
    if (k->mv_size > 0 && p[0] == 't') {
        snprintf(id, cap, "tool/%.*s", (int)(k->mv_size - 1), p + 1);
        return;
    }
    size_t n = k->mv_size > 0 ? strnlen(p + 1, k->mv_size - 1) : 0;
    tp_digest_t d = {{0}};
    if (k->mv_size >= n + 2 + TP_DIGEST_LEN)
        memcpy(d.b, p + 2 + n, TP_DIGEST_LEN);
    char hex[2 * TP_DIGEST_LEN + 1];
    tp_digest_hex(&d, hex);
    snprintf(id, cap, "call/%.*s/%s", (int)n, k->mv_size > 0 ? p + 1 : "", hex);
}

int tp_records_breaker_find(tp_store_t *s, MDB_txn *txn, const char *prefix, MDB_val *key, MDB_val *val)
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_BREAKERS), &cur));
    if (rc)
        return rc;
    MDB_val k, v;
    int found = 0;
    size_t plen = strlen(prefix);
    /* A call breaker's digest may be cut short; a tool breaker's name may not (a tool named "a" is not "ab"). */
    bool partial = strncmp(prefix, "call/", 5) == 0;
    char id[TP_RECORDS_ID_MAX];
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        tp_records_breaker_id(&k, id, sizeof id);
        if (strncmp(id, prefix, plen) == 0 && (partial || strlen(id) == plen)) {
            *key = k;
            *val = v;
            found++;
        }
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND)
        return rc;
    return found == 1 ? 0 : found == 0 ? MDB_NOTFOUND : TP_EEXIST;
}

int tp_records_breaker_reset(tp_store_t *s, MDB_txn *txn, const char *prefix, char *id, size_t cap)
{
    MDB_val key, val;
    int rc = tp_records_breaker_find(s, txn, prefix, &key, &val);
    if (rc)
        return rc;
    tp_records_breaker_id(&key, id, cap);
    MDB_val k = key;
    if (strncmp(id, "tool/", 5) == 0) {
        Toolpool__ToolBreaker *tb = toolpool__tool_breaker__unpack(NULL, val.mv_size, val.mv_data);
        if (tb == NULL) /* a corrupt record: a reset drops it */
            return tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &k, NULL));
        bool idle = tb->state == TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED && tb->n_buckets == 0 && tb->n_history;
        rc = idle ? MDB_NOTFOUND : tp_breaker_tool_close(s, txn, &k, tb, TP_BREAKER_RESET_CAUSE, tp_unix_us());
        toolpool__tool_breaker__free_unpacked(tb, NULL);
        return rc;
    }
    Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, val.mv_size, val.mv_data);
    if (cb == NULL)
        return tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_BREAKERS), &k, NULL));
    bool idle = cb->opened_unix_us == 0 && cb->n_failures_unix_us == 0 && cb->n_history;
    rc = idle ? MDB_NOTFOUND : tp_breaker_call_close(s, txn, &k, cb, TP_BREAKER_RESET_CAUSE, tp_unix_us());
    toolpool__call_breaker__free_unpacked(cb, NULL);
    return rc;
}

const char *tp_records_breaker_state(Toolpool__BreakerState st)
{
    return st == TOOLPOOL__BREAKER_STATE__BREAKER_OPEN        ? "open"
           : st == TOOLPOOL__BREAKER_STATE__BREAKER_HALF_OPEN ? "half-open"
                                                              : "closed";
}

int tp_records_breakers_each(tp_store_t *s, MDB_txn *txn, int (*fn)(void *ctx, const tp_breaker_info_t *b), void *ctx)
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_BREAKERS), &cur));
    if (rc)
        return rc;
    MDB_val k, v;
    char id[TP_RECORDS_ID_MAX];
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        tp_records_breaker_id(&k, id, sizeof id);
        tp_breaker_info_t b = {.id = id, .is_tool = strncmp(id, "tool/", 5) == 0};
        int r;
        if (b.is_tool) {
            Toolpool__ToolBreaker *tb = toolpool__tool_breaker__unpack(NULL, v.mv_size, v.mv_data);
            if (tb == NULL)
                continue; /* a corrupt record counts as nothing; `breakers list` shows it */
            b.tool = tb->tool;
            b.state = tp_records_breaker_state(tb->state);
            r = fn(ctx, &b);
            toolpool__tool_breaker__free_unpacked(tb, NULL);
        } else {
            Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, v.mv_size, v.mv_data);
            if (cb == NULL)
                continue;
            b.tool = cb->tool;
            b.state = cb->opened_unix_us ? "open" : "closed";
            r = fn(ctx, &b);
            toolpool__call_breaker__free_unpacked(cb, NULL);
        }
        if (r) {
            mdb_cursor_close(cur);
            return r;
        }
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* A breaker's transitions, oldest first: [{"at_ms", "state", "cause", "refused"}]. */
static json_t *history_json(Toolpool__BreakerEvent *const *h, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *o = json_object();
        int rc = o ? 0 : TP_ENOMEM;
        rc = rc ? rc : put(o, "at_ms", ms_of_us(h[i]->at_unix_us));
        rc = rc ? rc : put(o, "state", str_of(tp_records_breaker_state(h[i]->state)));
        rc = rc ? rc : put(o, "cause", str_of(h[i]->cause));
        rc = rc ? rc : put(o, "refused", json_integer((json_int_t)h[i]->refused));
        if (rc || json_array_append_new(a, o) != 0) {
            json_decref(o);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *tool_breaker_json(const char *id, const MDB_val *v, bool full)
{
    Toolpool__ToolBreaker *tb = toolpool__tool_breaker__unpack(NULL, v->mv_size, v->mv_data);
    if (tb == NULL)
        return NULL;
    uint64_t calls = 0, fails = 0;
    for (size_t i = 0; i < tb->n_buckets; i++) {
        calls += tb->buckets[i]->calls;
        fails += tb->buckets[i]->failures;
    }
    json_t *o = json_object();
    int rc = o ? 0 : TP_ENOMEM;
    rc = rc ? rc : put(o, "id", str_of(id));
    rc = rc ? rc : put(o, "type", str_of("tool"));
    rc = rc ? rc : put(o, "tool", str_of(tb->tool));
    rc = rc ? rc : put(o, "state", str_of(tp_records_breaker_state(tb->state)));
    rc = rc ? rc : put(o, "calls", json_integer((json_int_t)calls));
    rc = rc ? rc : put(o, "failures", json_integer((json_int_t)fails));
    rc = rc ? rc : put(o, "trips", json_integer((json_int_t)tb->trips));
    if (tb->opened_unix_us && tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED)
        rc = rc ? rc : put(o, "opened_ms", ms_of_us(tb->opened_unix_us));
    if (tb->state != TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED)
        rc = rc ? rc : put(o, "refused", json_integer((json_int_t)tb->refused));
    if (full)
        rc = rc ? rc : put(o, "history", history_json(tb->history, tb->n_history));
    toolpool__tool_breaker__free_unpacked(tb, NULL);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *call_breaker_json(const char *id, const MDB_val *v, bool full)
{
    Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, v->mv_size, v->mv_data);
    if (cb == NULL)
        return NULL;
    const char *digest = strrchr(id, '/');
    json_t *o = json_object();
    int rc = o ? 0 : TP_ENOMEM;
    rc = rc ? rc : put(o, "id", str_of(id));
    rc = rc ? rc : put(o, "type", str_of("call"));
    rc = rc ? rc : put(o, "tool", str_of(cb->tool));
    rc = rc ? rc : put(o, "digest", str_of(digest ? digest + 1 : ""));
    /* scope "job": the job whose repeats it counts; "global": every job's */
    rc = rc ? rc : put(o, "scope", str_of(cb->job[0] ? "job" : "global"));
    if (cb->job[0])
        rc = rc ? rc : put(o, "job", str_of(cb->job));
    rc = rc ? rc : put(o, "state", str_of(cb->opened_unix_us ? "open" : "closed"));
    rc = rc ? rc : put(o, "failures", json_integer((json_int_t)cb->n_failures_unix_us));
    if (cb->opened_unix_us) {
        rc = rc ? rc : put(o, "opened_ms", ms_of_us(cb->opened_unix_us));
        rc = rc ? rc : put(o, "blocked", json_integer((json_int_t)cb->blocked));
        if (cb->escalation[0])
            rc = rc ? rc : put(o, "escalation", str_of(cb->escalation));
    }
    if (full) {
        rc = rc ? rc : put(o, "args", json_of_bytes(cb->args.data, cb->args.len));
        rc = rc ? rc : put(o, "last_error", str_of(cb->last_kind));
        rc = rc ? rc : put(o, "last_message", str_of(cb->last_message));
        json_t *times = json_array();
        for (size_t i = 0; times && i < cb->n_failures_unix_us; i++)
            if (json_array_append_new(times, ms_of_us(cb->failures_unix_us[i])) != 0) {
                json_decref(times);
                times = NULL;
            }
        rc = rc ? rc : put(o, "failures_ms", times);
        rc = rc ? rc : put(o, "history", history_json(cb->history, cb->n_history));
    }
    toolpool__call_breaker__free_unpacked(cb, NULL);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *tp_records_breaker_json(const MDB_val *key, const MDB_val *val, bool full)
{
    char id[TP_RECORDS_ID_MAX];
    tp_records_breaker_id(key, id, sizeof id);
    return strncmp(id, "tool/", 5) == 0 ? tool_breaker_json(id, val, full) : call_breaker_json(id, val, full);
}

/* Walks db in key order, appending render(key, val) to a new array; a record that does not render is skipped. */
static int each_json(tp_store_t *s, MDB_txn *txn, tp_db_t db,
                     json_t *(*render)(const MDB_val *, const MDB_val *, void *), void *ctx, json_t **out)
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, db), &cur));
    if (rc)
        return rc;
    json_t *a = json_array();
    if (a == NULL) {
        mdb_cursor_close(cur);
        return TP_ENOMEM;
    }
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        json_t *o = render(&k, &v, ctx);
        if (o && json_array_append_new(a, o) != 0) {
            rc = TP_ENOMEM;
            break;
        }
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND) {
        json_decref(a);
        return rc;
    }
    *out = a;
    return 0;
}

static json_t *render_breaker(const MDB_val *k, const MDB_val *v, void *ctx)
{
    return tp_records_breaker_json(k, v, false);
}

int tp_records_breakers_json(tp_store_t *s, MDB_txn *txn, json_t **out)
{
    return each_json(s, txn, TP_DB_BREAKERS, render_breaker, NULL, out);
}

/* ---- escalations ---- */

int tp_records_escalation_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__Escalation **out)
{
    return tp_store_get_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &toolpool__escalation__descriptor,
                            (ProtobufCMessage **)out);
}

int tp_records_escalation_resolve(tp_store_t *s, MDB_txn *txn, const char *id, const char *note)
{
    Toolpool__Escalation *e;
    int rc = tp_records_escalation_get(s, txn, id, &e);
    if (rc)
        return rc;
    char *keep = e->note;
    e->resolved = true;
    e->resolved_unix_us = tp_unix_us();
    if (note)
        e->note = (char *)note;
    rc = tp_store_put_msg(s, txn, TP_DB_ESCALATIONS, id, strlen(id), &e->base);
    e->note = keep; /* free_unpacked frees what unpack allocated */
    toolpool__escalation__free_unpacked(e, NULL);
    return rc;
}

/* The job and step of a recorded result, into job (cap bytes; "" when none) and *step. */
static void result_job(const Toolpool__StoredResult *r, char *job, size_t cap, uint64_t *step)
{
    snprintf(job, cap, "%s", r->result->job);
    *step = r->result->step;
}

/*
 * Takes id out of job's checkpoint list, if it is there; the rest of the
 * checkpoint stays, but for its last step, which goes back below the
 * forgotten call's step: done again, that call is not a late step.
 */
static int checkpoint_unlist(tp_store_t *s, MDB_txn *txn, const char *job, const char *id, uint64_t step)
{
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(s, txn, job, &cp);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < cp->n_calls; i++) {
        if (strcmp(cp->calls[i], id) == 0)
            continue;
        /* A swap, not a copy: every string stays in the array for free_unpacked. */
        char *t = cp->calls[n];
        cp->calls[n++] = cp->calls[i];
        cp->calls[i] = t;
    }
    bool removed = false;
    if (n == cp->n_calls && tp_store_has(s, TP_DB_STEPS))
        rc = tp_steps_remove(s, txn, job, id, cp, &removed);
    if (rc == 0 && (n != cp->n_calls || removed)) {
        size_t had = cp->n_calls;
        cp->n_calls = n;
        if (step > 0 && cp->last_step >= step)
            cp->last_step = step - 1;
        rc = tp_store_put_msg(s, txn, TP_DB_JOBS, job, strlen(job), &cp->base);
        cp->n_calls = had; /* free_unpacked frees every string it unpacked */
    }
    toolpool__checkpoint__free_unpacked(cp, NULL);
    return rc;
}

int tp_records_forget(tp_store_t *s, MDB_txn *txn, const char *id)
{
    Toolpool__StoredResult *r;
    int rc = tp_result_get(s, txn, id, &r);
    if (rc)
        return rc;
    char job[600];
    uint64_t step;
    result_job(r, job, sizeof job, &step);
    tp_result_free(r);
    MDB_val k = {strlen(id), (void *)id};
    rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, NULL));
    if (rc == 0 && job[0] && strcmp(job, id) != 0)
        rc = checkpoint_unlist(s, txn, job, id, step);
    return rc;
}

int tp_records_forget_job(tp_store_t *s, MDB_txn *txn, const char *job, uint64_t *n)
{
    *n = 0;
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(s, txn, job, &cp);
    if (rc == MDB_NOTFOUND) {
        /* A job named after its one call has no checkpoint: that call is the job. */
        rc = tp_records_forget(s, txn, job);
        if (rc == 0)
            *n = 1;
        return rc;
    }
    if (rc)
        return rc;
    char **ids;
    size_t n_ids;
    if ((rc = tp_steps_list(s, txn, cp, &ids, &n_ids)) != 0) {
        toolpool__checkpoint__free_unpacked(cp, NULL);
        return rc;
    }
    for (size_t i = 0; i < n_ids && rc == 0; i++) {
        MDB_val k = {strlen(ids[i]), ids[i]};
        rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_RESULTS), &k, NULL));
        if (rc == 0)
            (*n)++;
        else if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    free(ids);
    if (rc == 0)
        rc = tp_steps_clear(s, txn, job);
    if (rc == 0 && cp->has_state) {
        /* The agent loop's own state is the agent's, not a result: it stays. */
        Toolpool__Checkpoint keep = TOOLPOOL__CHECKPOINT__INIT;
        keep.job = cp->job;
        keep.has_state = true;
        keep.state = cp->state;
        keep.state_step = cp->state_step;
        keep.state_unix_us = cp->state_unix_us;
        keep.updated_unix_us = tp_unix_us();
        rc = tp_store_put_msg(s, txn, TP_DB_JOBS, job, strlen(job), &keep.base);
    } else if (rc == 0) {
        MDB_val k = {strlen(job), (void *)job};
        rc = tp_mdb(mdb_del(txn, tp_store_dbi(s, TP_DB_JOBS), &k, NULL));
    }
    toolpool__checkpoint__free_unpacked(cp, NULL);
    return rc;
}

int tp_records_escalation_rerun(tp_store_t *s, MDB_txn *txn, const char *id, const char *note, char *call_id,
                                size_t cap, bool *forgot)
{
    *forgot = false;
    Toolpool__Escalation *e;
    int rc = tp_records_escalation_get(s, txn, id, &e);
    if (rc)
        return rc;
    snprintf(call_id, cap, "%s", e->call_id);
    toolpool__escalation__free_unpacked(e, NULL);
    if ((rc = tp_records_escalation_resolve(s, txn, id, note)) != 0)
        return rc;
    Toolpool__StoredResult *r;
    rc = tp_result_get(s, txn, call_id, &r);
    if (rc == 0) {
        bool ok = r->result->ok;
        tp_result_free(r);
        if (!ok) {
            if ((rc = tp_records_forget(s, txn, call_id)) != 0)
                return rc;
            *forgot = true;
        }
    } else if (rc != MDB_NOTFOUND) {
        return rc;
    }
    /*
     * The same-call circuit this escalation opened would refuse the call
     * again: it closes (its key copied out of the walk first: closing one
     * rewrites the record).
     */
    MDB_cursor *cur;
    MDB_val k, v;
    if ((rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_BREAKERS), &cur))) != 0)
        return rc;
    uint8_t mine[TP_RECORDS_ID_MAX];
    size_t mine_len = 0;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if (k.mv_size == 0 || ((const char *)k.mv_data)[0] != 'c' || k.mv_size > sizeof mine)
            continue;
        Toolpool__CallBreaker *cb = toolpool__call_breaker__unpack(NULL, v.mv_size, v.mv_data);
        bool its = cb && cb->opened_unix_us && strcmp(cb->escalation, id) == 0;
        if (cb)
            toolpool__call_breaker__free_unpacked(cb, NULL);
        if (its) {
            memcpy(mine, k.mv_data, k.mv_size);
            mine_len = k.mv_size;
            break; /* one escalation opened one circuit */
        }
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return rc;
    if (mine_len == 0)
        return 0;
    Toolpool__CallBreaker *cb;
    rc = tp_store_get_msg(s, txn, TP_DB_BREAKERS, mine, mine_len, &toolpool__call_breaker__descriptor,
                          (ProtobufCMessage **)&cb);
    if (rc)
        return rc;
    char cause[160];
    snprintf(cause, sizeof cause, "escalation %.100s resolved: the call runs again", id);
    MDB_val key = {mine_len, mine};
    rc = tp_breaker_call_close(s, txn, &key, cb, cause, tp_unix_us());
    toolpool__call_breaker__free_unpacked(cb, NULL);
    return rc;
}

json_t *tp_records_escalation_json(const Toolpool__Escalation *e, bool full)
{
    json_t *o = json_object();
    int rc = o ? 0 : TP_ENOMEM;
    rc = rc ? rc : put(o, "id", str_of(e->id));
    rc = rc ? rc : put(o, "status", str_of(e->resolved ? "resolved" : "open"));
    rc = rc ? rc : put(o, "created_ms", ms_of_us(e->created_unix_us));
    rc = rc ? rc : put(o, "call_id", str_of(e->call_id));
    rc = rc ? rc : put(o, "job", str_of(e->job));
    rc = rc ? rc : put(o, "step", json_integer((json_int_t)e->step));
    rc = rc ? rc : put(o, "tool", str_of(e->tool));
    rc = rc ? rc : put(o, "owner", e->owner[0] ? str_of(e->owner) : json_null()); /* the tool's "owner" */
    rc = rc ? rc : put(o, "error", str_of(e->kind));
    rc = rc ? rc : put(o, "message", str_of(e->message));
    rc = rc ? rc : put(o, "reason", str_of(e->reason));
    rc = rc ? rc : put(o, "blocked", json_integer((json_int_t)e->blocked));
    if (e->resolved) {
        rc = rc ? rc : put(o, "resolved_ms", ms_of_us(e->resolved_unix_us));
        rc = rc ? rc : put(o, "note", str_of(e->note));
    }
    if (full) {
        rc = rc ? rc : put(o, "args", json_of_bytes(e->args.data, e->args.len));
        rc = rc ? rc : put(o, "trace", trace_json(e->trace, e->n_trace));
    }
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *render_escalation(const MDB_val *k, const MDB_val *v, void *ctx)
{
    bool all = *(bool *)ctx;
    Toolpool__Escalation *e = toolpool__escalation__unpack(NULL, v->mv_size, v->mv_data);
    if (e == NULL)
        return NULL;
    json_t *o = all || !e->resolved ? tp_records_escalation_json(e, false) : NULL;
    toolpool__escalation__free_unpacked(e, NULL);
    return o;
}

int tp_records_escalations_json(tp_store_t *s, MDB_txn *txn, bool all, json_t **out)
{
    return each_json(s, txn, TP_DB_ESCALATIONS, render_escalation, &all, out);
}

int tp_records_escalations_count(tp_store_t *s, MDB_txn *txn, uint64_t *open, uint64_t *total)
{
    MDB_cursor *cur;
    int rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_ESCALATIONS), &cur));
    if (rc)
        return rc;
    *open = *total = 0;
    MDB_val k, v;
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__Escalation *e = toolpool__escalation__unpack(NULL, v.mv_size, v.mv_data);
        if (e == NULL)
            continue;
        ++*total;
        if (!e->resolved)
            ++*open;
        toolpool__escalation__free_unpacked(e, NULL);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* ---- checkpoints ---- */

json_t *tp_records_checkpoint_json(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp)
{
    json_t *o = json_object(), *calls = json_array();
    int rc = o && calls ? 0 : TP_ENOMEM;
    char **ids = NULL;
    size_t n_ids = 0;
    rc = rc ? rc : tp_steps_list(s, txn, cp, &ids, &n_ids);
    for (size_t i = 0; rc == 0 && i < n_ids; i++)
        if (json_array_append_new(calls, str_of(ids[i])) != 0)
            rc = TP_ENOMEM;
    free(ids);
    rc = rc ? rc : put(o, "job", str_of(cp->job));
    rc = rc ? rc : put(o, "step", json_integer((json_int_t)cp->last_step));
    rc = rc ? rc : put(o, "calls", json_incref(calls));
    rc = rc ? rc : put(o, "steps", json_integer((json_int_t)cp->steps));
    rc = rc ? rc : put(o, "attempts", json_integer((json_int_t)cp->attempts));
    rc = rc ? rc : put(o, "cost", json_real(cp->cost));
    rc = rc ? rc : put(o, "wall_ms", ms_real(cp->wall_used_us));
    if (cp->stopped[0]) {
        rc = rc ? rc : put(o, "stopped", str_of(cp->stopped));
        rc = rc ? rc : put(o, "stop_message", str_of(cp->stop_message));
    }
    rc = rc ? rc : put(o, "updated_ms", ms_of_us(cp->updated_unix_us));
    if (cp->has_state) {
        json_t *agent = json_object();
        rc = rc ? rc : put(o, "agent", agent);
        rc = rc ? rc : put(agent, "step", json_integer((json_int_t)cp->state_step));
        rc = rc ? rc : put(agent, "state", json_of_bytes(cp->state.data, cp->state.len));
        rc = rc ? rc : put(agent, "updated_ms", ms_of_us(cp->state_unix_us));
    }
    json_decref(calls);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

typedef struct {
    tp_store_t *s;
    MDB_txn *txn;
} store_at_t;

static json_t *render_checkpoint(const MDB_val *k, const MDB_val *v, void *ctx)
{
    const store_at_t *at = ctx;
    Toolpool__Checkpoint *cp = toolpool__checkpoint__unpack(NULL, v->mv_size, v->mv_data);
    if (cp == NULL)
        return NULL;
    json_t *o = tp_records_checkpoint_json(at->s, at->txn, cp);
    toolpool__checkpoint__free_unpacked(cp, NULL);
    return o;
}

int tp_records_checkpoints_json(tp_store_t *s, MDB_txn *txn, json_t **out)
{
    store_at_t at = {s, txn};
    return each_json(s, txn, TP_DB_JOBS, render_checkpoint, &at, out);
}

int tp_records_checkpoint_results_text(tp_store_t *s, MDB_txn *txn, const Toolpool__Checkpoint *cp, tp_buf_t *out)
{
    char **ids;
    size_t n_ids;
    int rc = tp_steps_list(s, txn, cp, &ids, &n_ids);
    if (rc)
        return rc;
    size_t mark = out->len;
    rc = tp_buf_puts(out, "[");
    for (size_t i = 0; i < n_ids && rc == 0; i++) {
        Toolpool__StoredResult *sr;
        int grc = tp_result_get(s, txn, ids[i], &sr);
        if (i && tp_buf_puts(out, ",") < 0)
            rc = TP_ENOMEM;
        if (grc == 0) {
            /*
             * Each as its result line says it, byte for byte: a tool's
             * JSON that jansson cannot hold (an integer past int64) shows
             * as recorded, where a tree of the line would have none.
             */
            if (rc == 0 && (rc = tp_result_line(out, sr)) == 0 && out->data[out->len - 1] == '\n')
                out->len--;
            tp_result_free(sr);
        } else if (grc == MDB_NOTFOUND || grc == TP_EPROTO) {
            if (rc == 0 && (tp_buf_puts(out, "{\"id\":") < 0 || tp_json_put_string(out, ids[i], strlen(ids[i])) < 0 ||
                            tp_buf_puts(out, ",\"missing\":true}") < 0))
                rc = TP_ENOMEM;
        } else {
            rc = grc;
        }
    }
    if (rc == 0 && tp_buf_puts(out, "]") < 0)
        rc = TP_ENOMEM;
    if (rc)
        out->len = mark;
    free(ids);
    return rc;
}

int tp_records_agent_state_json(tp_store_t *s, MDB_txn *txn, const char *job, json_t **out)
{
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(s, txn, job, &cp);
    if (rc)
        return rc;
    if (!cp->has_state) {
        toolpool__checkpoint__free_unpacked(cp, NULL);
        return MDB_NOTFOUND;
    }
    json_t *o = json_object();
    rc = o ? 0 : TP_ENOMEM;
    rc = rc ? rc : put(o, "job", str_of(job));
    rc = rc ? rc : put(o, "step", json_integer((json_int_t)cp->state_step));
    rc = rc ? rc : put(o, "state", json_of_bytes(cp->state.data, cp->state.len));
    rc = rc ? rc : put(o, "updated_ms", ms_of_us(cp->state_unix_us));
    toolpool__checkpoint__free_unpacked(cp, NULL);
    if (rc) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}
