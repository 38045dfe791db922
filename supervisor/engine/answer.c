/*
 * Answers: each one made in order, with its record, and held until the
 * commit that makes it durable; then delivered to its front, and what is
 * left of the call that made it (its handle) freed. A request refused before it became a call is
 * answered here too, and recorded when it can be. The engine renders no
 * answer: each front renders what it sends from the record. A front that
 * takes its answers staged (engine.h) has a call's answer when it is made,
 * and hears of its commit here, in the same order.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
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

/* A payload longer than this is handed over to the answer's block, not copied into it. */
#define TP_RECORD_COPY_MAX 4096

/* Arena chunks: a commit's records, one after another in the order they are delivered. */
#define TP_ARENA_CHUNK ((size_t)64 << 10)

/*
 * n bytes (8-aligned) of a's arena, valid until a's answers are freed;
 * NULL for a block too large for a chunk (the caller mallocs it) or out of
 * memory.
 */
static void *arena_alloc(tp_answers_t *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > TP_ARENA_CHUNK / 4)
        return NULL;
    tp_arena_chunk_t *k = a->arena;
    if (k == NULL || k->used + n > TP_ARENA_CHUNK) {
        if ((k = a->arena_free) != NULL)
            a->arena_free = k->next;
        else if ((k = malloc(sizeof *k + TP_ARENA_CHUNK)) == NULL)
            return NULL;
        k->next = a->arena;
        k->used = 0;
        a->arena = k;
    }
    void *m = k->data + k->used;
    k->used += n;
    return m;
}

/*
 * Chunks an arena keeps for the next commit's records: 1,024 no-op records fill six. run's answers
 * are staged (no record copied), so its arenas stay empty; serve's and MCP's commits are small.
 */
#define TP_ARENA_KEEP 16

/*
 * Every block of a's arena is let go; keep: up to TP_ARENA_KEEP chunks
 * stay, emptied, so the next commit's records go where this one's were,
 * not into memory the heap must give again.
 */
void eng_arena_reset(tp_answers_t *a, bool keep)
{
    size_t kept = 0;
    for (tp_arena_chunk_t *k = a->arena_free; k; k = k->next)
        kept++;
    for (tp_arena_chunk_t *k = a->arena, *nx; k; k = nx) {
        nx = k->next;
        if (kept < TP_ARENA_KEEP) {
            k->used = 0;
            k->next = a->arena_free;
            a->arena_free = k;
            kept++;
        } else {
            free(k);
        }
    }
    a->arena = NULL;
    if (keep)
        return;
    for (tp_arena_chunk_t *k = a->arena_free, *nx; k; k = nx) {
        nx = k->next;
        free(k);
    }
    a->arena_free = NULL;
}

/*
 * Makes r the pending answer p's own (p is the newest of a): r with every
 * string, byte field and trace entry it points to, copied into one block
 * of a's arena, so that what made r (a call, a request on the stack) can
 * go at once, while it is in cache, and the answer's front later reads
 * compact blocks in order. Args and a result longer than
 * TP_RECORD_COPY_MAX are not copied: r's buffers of them, malloc'd, become
 * the answer's (args_buf, result_buf; NULL when r's are not to be taken
 * over, and then they are copied whatever their size). false: out of
 * memory (nothing taken over). An empty or NULL string becomes a static
 * "" (five of a no-op call's nine are empty).
 */
bool eng_pending_own(tp_answers_t *a, tp_pending_t *p, const Toolpool__Result *r, char *args_buf, char *result_buf)
{
    bool take_args = args_buf && r->args.len > TP_RECORD_COPY_MAX;
    bool take_result = result_buf && r->result.len > TP_RECORD_COPY_MAX;
    enum { N_STR = 9 };
    const char *s[N_STR] = {r->id,      r->job,       r->tool,       r->kind,   r->klass,
                            r->message, r->served_by, r->escalation, r->version};
    size_t n[N_STR];
    size_t total = sizeof *r + r->n_trace * (sizeof(Toolpool__Attempt *) + sizeof(Toolpool__Attempt));
    for (size_t i = 0; i < N_STR; i++)
        total += n[i] = s[i] && s[i][0] ? strlen(s[i]) + 1 : 0; /* an empty one is not copied */
    for (size_t i = 0; i < r->n_trace; i++)
        total += strlen(r->trace[i]->tool) + strlen(r->trace[i]->outcome) + 2;
    total += (take_args ? 0 : r->args.len) + (take_result ? 0 : r->result.len) + r->input_digest.len;
    Toolpool__Result *c = arena_alloc(a, total);
    if (c == NULL && (c = p->own = malloc(total)) == NULL)
        return false;
    *c = *r;
    Toolpool__Attempt **tv = (Toolpool__Attempt **)(c + 1);
    Toolpool__Attempt *ta = (Toolpool__Attempt *)(tv + r->n_trace);
    char *o = (char *)(ta + r->n_trace);
    c->trace = r->n_trace ? tv : NULL;
    for (size_t i = 0; i < r->n_trace; i++) {
        ta[i] = *r->trace[i];
        size_t lt = strlen(ta[i].tool) + 1, lo = strlen(ta[i].outcome) + 1;
        ta[i].tool = memcpy(o, ta[i].tool, lt);
        ta[i].outcome = memcpy(o + lt, ta[i].outcome, lo);
        o += lt + lo;
        tv[i] = &ta[i];
    }
    char **d[N_STR] = {&c->id,      &c->job,       &c->tool,       &c->kind,   &c->klass,
                       &c->message, &c->served_by, &c->escalation, &c->version};
    for (size_t i = 0; i < N_STR; i++) {
        *d[i] = n[i] ? memcpy(o, s[i], n[i]) : (char *)"";
        o += n[i];
    }
    const ProtobufCBinaryData *src[3] = {&r->args, &r->result, &r->input_digest};
    ProtobufCBinaryData *dst[3] = {&c->args, &c->result, &c->input_digest};
    bool take[3] = {take_args, take_result, false};
    for (int i = 0; i < 3; i++) {
        if (take[i])
            continue;
        dst[i]->data = src[i]->len ? memcpy(o, src[i]->data, src[i]->len) : NULL;
        o += src[i]->len;
    }
    if (take_args)
        p->args_buf = args_buf;
    if (take_result)
        p->result_buf = result_buf;
    p->r = c;
    p->bytes = total + (take_args ? r->args.len : 0) + (take_result ? r->result.len : 0);
    return true;
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
    tp_seen_add(&e->recorded, r->id, strlen(r->id));
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
    Toolpool__Result r;
    tp_result_refusal(&r, id, job, step, tool, kind, msg);
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
    eng_pending_own(e->add, p, &r, NULL, NULL); /* out of memory: the front is told the record is lost */
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

void tp_trace_span_id(const tp_trace_ctx_t *tc, size_t i, bool backoff, uint8_t out[8])
{
    /* splitmix64's finaliser over the call's span id and the entry */
    uint64_t x;
    memcpy(&x, tc->span_id, 8);
    x += 0x9E3779B97F4A7C15ull * (2 * (uint64_t)i + 1 + backoff);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    if (x == 0)
        x = 1; /* all zeros is no span id */
    memcpy(out, &x, 8);
}

/*
 * tc->attempt_tp: the traceparent of the span of entry i of tc's call (an
 * attempt starting now), which its tool is given as its parent.
 */
void eng_trace_attempt_tp(tp_trace_ctx_t *tc, size_t i)
{
    uint8_t id[8];
    char *o = tc->attempt_tp;
    tp_trace_span_id(tc, i, false, id);
    memcpy(o, "00-", 3);
    tp_hex(o + 3, tc->trace_id, 16);
    o[35] = '-';
    tp_hex(o + 36, id, 8);
    o[52] = '-';
    tp_hex(o + 53, &tc->flags, 1);
    o[55] = 0;
}

/*
 * c->tctx: a copy of tc for c to keep until its end, in c itself when tc
 * has no strings, else in one block with them (free() frees it all); NULL
 * when out of memory (the call then has no span).
 */
tp_trace_ctx_t *eng_trace_ctx_keep(tp_call_t *c, const tp_trace_ctx_t *tc)
{
    const char *s[3] = {tc->traceparent, tc->tracestate, tc->rpc_id};
    if (s[0] == NULL && s[1] == NULL && s[2] == NULL) {
        c->tctx_own = (tp_trace_ctx_t){.flags = 1};
        return c->tctx = &c->tctx_own;
    }
    size_t n[3], total = sizeof(tp_trace_ctx_t);
    for (int i = 0; i < 3; i++)
        total += n[i] = s[i] ? strlen(s[i]) + 1 : 0;
    tp_trace_ctx_t *t = malloc(total);
    if (t == NULL)
        return c->tctx = NULL;
    *t = (tp_trace_ctx_t){.flags = 1};
    char *at = (char *)(t + 1);
    const char **to[3] = {&t->traceparent, &t->tracestate, &t->rpc_id};
    for (int i = 0; i < 3; i++) {
        *to[i] = s[i] ? memcpy(at, s[i], n[i]) : NULL;
        at += n[i];
    }
    return c->tctx = t;
}

/* Frees everything c owns but c itself; c has ended (tp_call_info says so). */
void eng_call_teardown(tp_call_t *c)
{
    for (size_t i = 1; i < c->n_trace; i++)
        free(c->trace[i]);
    if (c->trace != &c->trace0_at)
        free(c->trace);
    c->trace = NULL;
    free(c->att.message);
    free(c->att.result);
    c->att = (tp_attempt_t){.kind = TP_KIND_OK}; /* in cache now; the next call on c starts with it clear */
    if (c->ev_backoff)
        event_free(c->ev_backoff);
    c->ev_backoff = NULL;
    free(c->end_msg);
    free(c->cancel_why);
    c->end_msg = c->cancel_why = NULL;
    tp_buf_free(&c->degraded);
    free(c->id);
    free(c->args);
    free(c->hop_args);
    free(c->breaker_job);
    c->id = c->args = c->hop_args = c->breaker_job = NULL;
    if (c->tctx != &c->tctx_own)
        free(c->tctx);
    c->tctx = NULL;
    c->ended = true;
}

void eng_call_free(tp_call_t *c)
{
    if (!c->ended)
        eng_call_teardown(c);
    free(c);
}

/*
 * Calls kept for reuse: a commit's worth of them is let go at each
 * delivery (up to TP_COMMIT_RESULTS, of which this many stay: keeping
 * 4,096 ran no faster) and as many come in after it; the last one kept,
 * still in cache, is the first one taken.
 */
#define TP_SPARE_CALLS 2048

/*
 * A call, all clear: one kept is cleared only up to att, which its
 * teardown cleared (call_internal.h says why).
 */
tp_call_t *eng_call_new(tp_engine_t *e)
{
    tp_call_t *c = e->spare;
    if (c == NULL)
        return calloc(1, sizeof *c);
    e->spare = c->next;
    e->n_spare--;
    memset(c, 0, offsetof(tp_call_t, att));
    return c;
}

/* c, torn down, kept for the next call (or freed when enough are kept). */
void eng_call_recycle(tp_engine_t *e, tp_call_t *c)
{
    if (e->n_spare >= TP_SPARE_CALLS) {
        free(c);
        return;
    }
    c->next = e->spare;
    e->spare = c;
    e->n_spare++;
}

/* What a pending answer holds: its record, the handle it keeps, what it took over. */
void eng_pending_free(tp_engine_t *e, tp_pending_t *p)
{
    if (p->hold)
        eng_call_recycle(e, p->hold);
    free(p->own);
    free(p->args_buf);
    free(p->result_buf);
    if (p->stored)
        tp_result_free(p->stored);
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
    if (d->n == 0) {
        e->made_durable = 0;
        goto late;
    }
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
        if (p->staged) {
            p->fn(p->ctx, &(tp_answer_t){.call = p->hold, .stage = i < upto ? TP_ANSWER_DURABLE : TP_ANSWER_LOST});
            continue;
        }
        if (i < upto && p->fn) {
            /* The record's copy could not be had (out of memory): the front still gets an answer. */
            Toolpool__Result bare = TOOLPOOL__RESULT__INIT;
            bare.kind = (char *)tp_kind_name(TP_KIND_CANCELLED);
            bare.message = (char *)"out of memory: the call's record is lost";
            const Toolpool__StoredResult *sr = p->stored;
            tp_answer_t a = {
                .result = sr               ? sr->result
                          : p->r           ? p->r
                          : p->not_started ? NULL
                                           : &bare,
                .call = p->hold,
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
    for (size_t i = 0; i < d->n; i++)
        eng_pending_free(e, &d->v[i]);
    eng_arena_reset(d, true);
    d->n = 0;
    d->bytes = 0;
late:
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
    /* A call this engine settled itself, from its dead owner's marker, ends in this run: not a resumed one. */
    p->recorded = !eng_settled_here(e, r->result->id);
    p->bytes = eng_record_bytes(r->result) + r->line.len;
    e->add->bytes += p->bytes;
    e->results++;
    e->stats.answered_recorded += p->recorded;
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
