/*
 * Answers: each one made in order, with its record, and held until the
 * commit that makes it durable; then delivered to its front, and the call
 * that made it freed. A request refused before it became a call is
 * answered here too, and recorded when it can be. The engine renders no
 * answer: each front renders what it sends from the record.
 */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "engine_internal.h"
#include "resultline.h"
#include "results.h"

tp_pending_t *eng_pending_add(tp_engine_t *e, tp_answer_fn fn, void *ctx)
{
    tp_answers_t *a = e->add;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        tp_pending_t *v = realloc(a->v, cap * sizeof *v);
        if (v == NULL)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    tp_pending_t *p = &a->v[a->n++];
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->ctx = ctx;
    return p;
}

void tp_engine_when_durable(tp_engine_t *e, void (*cb)(void *ctx, bool ok), void *ctx)
{
    tp_pending_t *p = eng_pending_add(e, NULL, ctx);
    if (p == NULL) {
        cb(ctx, false);
        return;
    }
    p->durable_fn = cb;
    kick(e);
}

/*
 * Copies the strings of r and its args into one block the pending answer
 * owns (r is a rejected answer's, built on the stack; it has no result
 * and no trace).
 */
static void pending_own(tp_pending_t *p, const Toolpool__Result *r)
{
    const char *s[7] = {r->id,
                        r->job,
                        r->tool,
                        r->message ? r->message : "",
                        r->kind ? r->kind : "",
                        r->klass ? r->klass : "",
                        (const char *)r->args.data};
    size_t n[7], total = sizeof *p->r;
    for (int i = 0; i < 7; i++)
        total += (n[i] = i == 6 ? r->args.len : strlen(s[i]) + 1);
    if ((p->r = malloc(total)) == NULL)
        return;
    *p->r = *r;
    char *o = (char *)(p->r + 1);
    char **d[6] = {&p->r->id, &p->r->job, &p->r->tool, &p->r->message, &p->r->kind, &p->r->klass};
    for (int i = 0; i < 7; i++) {
        if (n[i])
            memcpy(o, s[i], n[i]);
        if (i < 6)
            *d[i] = o;
        else
            p->r->args.data = n[i] ? (uint8_t *)o : NULL;
        o += n[i];
    }
    p->bytes = total;
}

/*
 * Records a refusal r under its id, so trace, the job's checkpoint and
 * the next run see every call: unless the id holds a record of another
 * kind (a result that ran is never overwritten by a refusal of other
 * input), or the id or job is too long for a key.
 */
static void record_refusal(tp_engine_t *e, Toolpool__Result *r)
{
    size_t max_key = tp_store_max_key(e->o.store);
    if (strlen(r->id) > max_key || strlen(r->job) > max_key || !eng_ensure_txn(e))
        return;
    Toolpool__StoredResult *old;
    int rc = tp_result_get(e->o.store, e->txn, r->id, &old);
    if (rc == 0) {
        bool refusal = !old->result->ok && refusal_kind(old->result->kind);
        tp_result_free(old);
        if (!refusal)
            return;
    } else if (rc != MDB_NOTFOUND) {
        return; /* a corrupt record stays as it is, for store check to name */
    }
    if (!eng_txn_fit(e, eng_record_bytes(r), true))
        return;
    tp_digest_t args_digest, identity;
    tp_digest_bytes(r->args.data ? r->args.data : (const uint8_t *)"{}", r->args.data ? r->args.len : 2, &args_digest);
    tp_identity_digest(r->tool, &args_digest, &identity);
    r->input_digest.data = identity.b;
    r->input_digest.len = TP_DIGEST_LEN;
    rc = tp_result_put(e->o.store, e->txn, r);
    if (rc == 0 && r->job[0] && strcmp(r->job, r->id) != 0)
        rc = tp_checkpoint_step(e->o.store, e->txn, r->job, r->id, r->step, NULL, 0, TP_KIND_OK, NULL);
    r->input_digest.data = NULL;
    r->input_digest.len = 0;
    if (rc)
        tp_engine_store_failed(e, rc, "recording a refused call");
}

/*
 * Answers a request that never became a call, in order with the rest.
 * keep: record it (a refusal of the call itself; not an id conflict,
 * whose record is another call's).
 */
tp_pending_t *eng_reject_as(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                            const char *args, tp_kind_t kind, const char *msg, bool keep, tp_answer_fn fn, void *ctx)
{
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = id != NULL;
    r.id = (char *)(id ? id : "");
    r.job = (char *)(job ? job : "");
    r.step = step;
    r.tool = (char *)(tool ? tool : "");
    r.ok = false;
    r.kind = (char *)tp_kind_name(kind);
    r.klass = (char *)tp_class_name(tp_kind_class(kind));
    r.message = (char *)msg;
    r.retryable = false;
    r.attempts = 0;
    if (args) {
        r.args.data = (uint8_t *)args;
        r.args.len = strlen(args);
    }
    e->stats.rejected++;
    e->results++;
    tp_pending_t *p = eng_pending_add(e, fn, ctx);
    if (p == NULL)
        return NULL;
    if (keep && id && e->o.store)
        record_refusal(e, &r);
    pending_own(p, &r);
    e->add->bytes += p->bytes;
    kick(e);
    return p;
}

tp_pending_t *eng_reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool,
                         const char *args, tp_kind_t kind, const char *msg, tp_answer_fn fn, void *ctx)
{
    return eng_reject_as(e, id, job, step, tool, args, kind, msg, true, fn, ctx);
}

void tp_engine_reject(tp_engine_t *e, const char *id, const char *job, uint64_t step, const char *tool, const char *msg,
                      tp_answer_fn answer, void *ctx)
{
    eng_reject(e, id, job, step, tool, NULL, TP_KIND_INVALID_REQUEST, msg, answer, ctx);
}

void eng_call_free(tp_call_t *c)
{
    for (size_t i = 1; i < c->n_trace; i++)
        free(c->trace[i]);
    if (c->trace != &c->trace0_at)
        free(c->trace);
    free(c->att.message);
    free(c->att.result);
    if (c->ev_backoff)
        event_free(c->ev_backoff);
    free(c->end_msg);
    free(c->cancel_why);
    tp_buf_free(&c->degraded);
    free(c->id);
    free(c->args);
    free(c->hop_args);
    free(c);
}

/* A delivered call lets go of its job: an idle job leaves the table. */
void eng_call_release(tp_engine_t *e, tp_call_t *c)
{
    tp_job_t *j = c->job;
    j->held--;
    if (tp_job_idle(j) && !e->keep_jobs && !e->draining)
        tp_jobs_drop(&e->jobs, j);
    eng_call_free(c);
}

/*
 * Delivers the answers made so far (ok: their commit succeeded) to their
 * fronts, in order, then lets each front flush. Answers made while this
 * runs (a front that submits from its callback) wait for the next commit.
 * When the commit failed, answers are dropped: nothing is reported that is
 * not durable; but those an earlier commit in the turn covered (eng_txn_fit)
 * are delivered all the same.
 */
void eng_deliver(tp_engine_t *e, bool ok)
{
    tp_answers_t *d = &e->made;
    if (d->n == 0)
        return;
    /* Answers made meanwhile go aside: these records stay where they are until the fronts have flushed. */
    e->add = &e->late;
    size_t upto = ok ? d->n : e->made_durable;
    e->made_durable = 0;
    for (size_t i = 0; i < d->n; i++) {
        tp_pending_t *p = &d->v[i];
        if (p->durable_fn) {
            p->durable_fn(p->ctx, i < upto);
            continue;
        }
        if (i < upto && p->fn) {
            /* The record's copy could not be had (out of memory): the front still gets an answer. */
            Toolpool__Result bare = TOOLPOOL__RESULT__INIT;
            bare.kind = (char *)tp_kind_name(TP_KIND_CANCELLED);
            bare.message = (char *)"out of memory: the call's record is lost";
            tp_call_t *c = p->call;
            const Toolpool__StoredResult *sr = p->stored;
            tp_answer_t a = {
                .result = c                ? &c->res
                          : sr             ? sr->result
                          : p->r           ? p->r
                          : p->not_started ? NULL
                                           : &bare,
                .call = c ? c : p->hold,
                .kept_line = sr && sr->line.len ? sr->line.data : NULL,
                .kept_len = sr ? sr->line.len : 0,
                .recorded = p->recorded,
                .not_started = p->not_started,
                .conflict = p->conflict,
            };
            p->fn(p->ctx, &a);
        }
    }
    if (upto > 0)
        for (int i = 0; i < e->n_fronts; i++)
            if (e->fronts[i].flush)
                e->fronts[i].flush(e->fronts[i].ctx);
    for (size_t i = 0; i < d->n; i++) {
        if (d->v[i].call)
            eng_call_release(e, d->v[i].call);
        if (d->v[i].hold)
            eng_call_release(e, d->v[i].hold);
        free(d->v[i].r);
        if (d->v[i].stored)
            tp_result_free(d->v[i].stored);
    }
    d->n = 0;
    d->bytes = 0;
    e->add = &e->made;
    if (e->late.n > 0) {
        /* They wait for the next commit, first in line. */
        tp_answers_t t = e->made;
        e->made = e->late;
        e->late = t;
    }
}

/*
 * An answer served from the store: its record as it was reported (the
 * pending answer owns r from now on, freed after delivery, or at once
 * when there is no room for the answer).
 */
tp_pending_t *eng_answer_recorded(tp_engine_t *e, Toolpool__StoredResult *r, tp_answer_fn fn, void *ctx)
{
    tp_pending_t *p = eng_pending_add(e, fn, ctx);
    if (p == NULL) {
        tp_result_free(r);
        return NULL;
    }
    p->stored = r;
    p->recorded = true;
    p->bytes = eng_record_bytes(r->result) + r->line.len;
    e->add->bytes += p->bytes;
    e->results++;
    e->stats.answered_recorded++;
    kick(e);
    return p;
}

size_t eng_record_bytes(const Toolpool__Result *r)
{
    return sizeof *r + r->result.len + r->args.len + r->n_trace * 64 + strlen(r->id) + strlen(r->job) +
           (r->message ? strlen(r->message) : 0) + 64;
}

int tp_answer_write(tp_buf_t *b, const tp_answer_t *a)
{
    if (a->kept_line)
        return tp_buf_append(b, a->kept_line, a->kept_len);
    return a->result ? tp_result_write(b, a->result) : TP_EINVAL;
}
