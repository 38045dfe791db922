/*
 * Submitting: a front's request checked (size, keys, tool, args), looked
 * up in the store (answered from its record, done again, or found
 * interrupted), and made a call queued in its job; and a held call
 * cancelled, or asked about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "clock.h"
#include "engine_internal.h"
#include "inflight.h"
#include "json.h"
#include "jsonschema.h"
#include "log.h"
#include "results.h"
#include "suggest.h"

/* Store lookups between two trims while resuming. */
#define TP_TRIM_LOOKUPS 256

/*
 * The check every call's args (and every fallback hop's) get before
 * anything runs: "TOOL: invalid arguments: " and the violations, or, for
 * a schema whose check passed its work bound (TP_JSONSCHEMA_MAX_STEPS: it
 * runs on the event loop), "TOOL: arguments not checked: " and what the
 * validator says of the schema. Either is InvalidArguments: the same args
 * fail the same way every time, so nothing retries them. why.data stays
 * NULL only when memory ran out.
 */
bool eng_args_valid(const tp_tool_t *t, const json_t *args, tp_buf_t *why)
{
    tp_buf_t found = {0};
    int bad = tp_jsonschema_validate(t->schema, args, &found, TP_ARGS_ERRORS_MAX);
    if (bad == 0) {
        tp_buf_free(&found);
        return true;
    }
    tp_buf_reset(why);
    if (bad > 0 || bad == TP_E2BIG)
        tp_buf_printf(why, "%s: %s: %.*s", t->name, bad > 0 ? "invalid arguments" : "arguments not checked",
                      (int)found.len, found.data ? (const char *)found.data : "");
    else
        tp_buf_printf(why, "%s: out of memory validating the arguments", t->name);
    tp_buf_free(&found);
    return false;
}

/*
 * A job seen for the first time takes up its checkpoint: the usage its
 * guards count (wall time included) and what stopped it.
 */
static void job_resume(tp_engine_t *e, tp_job_t *j)
{
    if (!eng_ensure_txn(e))
        return;
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(e->o.store, e->txn, j->name, &cp);
    if (rc == MDB_NOTFOUND)
        return;
    if (rc) {
        tp_engine_store_failed(e, rc, "reading a checkpoint");
        return;
    }
    j->usage.steps = cp->steps;
    j->usage.calls = cp->attempts;
    j->max_step = cp->last_step;
    j->usage.cost = cp->cost;
    if (cp->wall_used_us)
        j->usage.first_us = tp_now_us() - cp->wall_used_us;
    if (cp->stopped[0]) {
        j->stopped = tp_kind_from_name(cp->stopped);
        j->stop_msg = strdup(cp->stop_message);
    }
    toolpool__checkpoint__free_unpacked(cp, NULL);
}

/*
 * Jobs that got calls since the last turn start their first pending step
 * only now, so steps submitted together start in step order, not in the
 * order they came.
 */
void eng_advance_touched(tp_engine_t *e)
{
    tp_job_t *j = e->touched;
    e->touched = NULL;
    e->touched_tail = &e->touched;
    while (j) {
        tp_job_t *nx = j->tnext;
        j->touched = false;
        eng_job_advance(e, j);
        j = nx;
    }
}

bool tp_rerun_match(const tp_rerun_t *f, const char *kind)
{
    if (f == NULL || kind == NULL || kind[0] == '\0')
        return false;
    if (f->all || (f->classes & (1u << tp_kind_class(tp_kind_from_name(kind)))))
        return true;
    for (size_t i = 0; i < f->n_kinds; i++)
        if (strcmp(f->kinds[i], kind) == 0)
            return true;
    return false;
}

/*
 * Whether a recorded result is to be done again rather than served: a
 * refusal (nothing ran, and the registry may have been fixed since), or
 * a failure the run's --retry-failed names.
 */
bool eng_redo_recorded(const tp_engine_t *e, const Toolpool__StoredResult *sr)
{
    const Toolpool__Result *r = sr->result;
    if (r->ok)
        return false;
    if (refusal_kind(r->kind))
        return true;
    /* Only failures earlier runs recorded: this run's own (the same id twice, another
     * supervisor's answer to a call it claimed) are served, so nothing is redone twice. */
    return sr->ended_unix_us < e->started_unix_us && tp_rerun_match(e->o.rerun, r->kind);
}

bool eng_same_input(const Toolpool__StoredResult *sr, const tp_digest_t *identity)
{
    const ProtobufCBinaryData *d = &sr->result->input_digest;
    return d->len == TP_DIGEST_LEN && memcmp(d->data, identity->b, TP_DIGEST_LEN) == 0;
}

/* "WHERE: ", the start of a message about the request, or "". */
static const char *prefix(char *buf, size_t cap, const tp_request_t *rq)
{
    snprintf(buf, cap, "%s%s", rq->where ? rq->where : "", rq->where ? ": " : "");
    return buf;
}

/*
 * A call the store already knows. Its recorded result, when the input is
 * the same, is the answer instead of running it again (returns true); an
 * id recorded for other input is answered InvalidRequest, never served
 * (true as well). An in-flight marker means the call was running when a
 * supervisor died.
 */
/*
 * Whether the record sr of a call to t, made by an earlier run for this
 * input, was made under another version of t than the registry's now, and
 * is to run again (--on-version-change=rerun). A record without a version
 * and a tool without one are the same version: with no version anywhere
 * this is two tests of false.
 */
static bool version_changed(const tp_engine_t *e, const tp_tool_t *t, const Toolpool__StoredResult *sr)
{
    const char *was = sr->result->version;
    if (!e->o.reg->versioned && was[0] == 0)
        return false;
    return e->o.on_version_change == TP_VERSION_RERUN && sr->ended_unix_us < e->started_unix_us &&
           strcmp(was, t->version_id ? t->version_id : "") != 0;
}

static bool resume_lookup(tp_engine_t *e, const tp_request_t *rq, const tp_tool_t *t, const char *job,
                          const tp_digest_t *identity, bool *interrupted, bool *redo, bool *keep_old, tp_answer_fn fn,
                          void *ctx)
{
    Toolpool__StoredResult *r;
    if (!tp_seen_maybe(&e->recorded, rq->id, strlen(rq->id)))
        return false; /* never recorded, and no marker but this engine's own */
    /*
     * Lookups of ids scattered over a large store fault in pages all over
     * its map (and the kernel maps their neighbours too): trim often here,
     * which is safe at any time, since the map is shared and read-only.
     */
    if (++e->lookups % TP_TRIM_LOOKUPS == 0)
        tp_store_trim(e->o.store);
    int rc = tp_result_get(e->o.store, e->txn, rq->id, &r);
    if (rc == 0 && eng_redo_recorded(e, r) && (refusal_kind(r->result->kind) || eng_same_input(r, identity))) {
        /* Done again: its new record replaces this one. */
        tp_result_free(r);
        *redo = true;
        e->stats.rerun++;
        rc = MDB_NOTFOUND;
    } else if (rc == 0 && version_changed(e, t, r) && eng_same_input(r, identity)) {
        /* Done again under its tool's new version: the new record keeps this one as history. */
        tp_result_free(r);
        *redo = *keep_old = true;
        e->stats.version_rerun++;
        rc = MDB_NOTFOUND;
    }
    if (rc == 0) {
        if (eng_same_input(r, identity)) {
            eng_answer_recorded(e, r, fn, ctx);
            return true;
        }
        char msg[512], pre[96];
        snprintf(msg, sizeof msg,
                 "%sid \"%s\" is recorded in the store for other input (tool %.127s, other args); "
                 "give this call a new id, or run with a new store",
                 prefix(pre, sizeof pre, rq), rq->id, r->result->tool[0] ? r->result->tool : "?");
        tp_pending_t *p = eng_reject_as(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, false,
                                        fn, ctx);
        if (p)
            p->conflict = true;
        tp_result_free(r);
        return true;
    }
    if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading a result");
        return true;
    }
    Toolpool__InFlight *f;
    rc = tp_inflight_get(e->o.store, e->txn, rq->id, &f);
    if (rc == 0) {
        *interrupted = eng_marker_orphaned(e, f);
        toolpool__in_flight__free_unpacked(f, NULL);
    } else if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading an in-flight marker");
        return true;
    }
    return false;
}

/* Late steps said one by one on stderr, then only counted (the summary has them all). */
#define TP_LATE_SAID 10

/*
 * A step that came after a later step of its job had started (or ended,
 * in an earlier run): steps run in order only among the calls read so far,
 * so this one runs out of order. Never silent: said on stderr, counted.
 */
static void late_step(tp_engine_t *e, const tp_request_t *rq, const tp_job_t *j)
{
    char pre[96];
    tp_log_call_t lc = {rq->id, j->name, rq->tool, 0};
    if (++e->stats.late <= TP_LATE_SAID)
        tp_log_call_warn("engine.late_step", &lc,
                         "%scall %s (job %s, step %llu) came after step %llu of its job had started: it runs out of "
                         "order%s",
                         prefix(pre, sizeof pre, rq), rq->id, j->name, (unsigned long long)rq->step,
                         (unsigned long long)j->max_step,
                         e->stats.late == TP_LATE_SAID ? " (further late steps are counted in the summary only)" : "");
}

tp_call_t *tp_engine_submit(tp_engine_t *e, const tp_request_t *rq, tp_answer_fn fn, void *ctx)
{
    char msg[512], pre[96];
    const char *job = rq->job ? rq->job : rq->id;
    const char *args = rq->args ? rq->args : "{}";
    char *owned_args = rq->give_args ? rq->args : NULL;
    json_t *owned_json = NULL;
    tp_call_t *c = NULL;
    if (e->failed)
        goto out;
    if (e->draining || e->closing || e->close_asked) {
        tp_pending_t *p = eng_pending_add(e, fn, ctx);
        if (p)
            p->not_started = true;
        kick(e);
        goto out;
    }
    size_t args_len = rq->args ? rq->args_len : 2;
    if (e->o.max_args && args_len > e->o.max_args) {
        snprintf(msg, sizeof msg, "%sargs are %zu bytes, over the %zu-byte limit (--max-args)",
                 prefix(pre, sizeof pre, rq), args_len, e->o.max_args);
        eng_reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx);
        goto out;
    }
    /* The store keys calls by id and jobs by name: LMDB takes keys of at most 511 bytes. */
    size_t max_key = e->o.store ? tp_store_max_key(e->o.store) : SIZE_MAX;
    if (strlen(rq->id) > max_key || strlen(job) > max_key) {
        bool id_long = strlen(rq->id) > max_key;
        snprintf(msg, sizeof msg, "%s\"%s\" is %zu bytes; the store takes ids and job names of at most %zu",
                 prefix(pre, sizeof pre, rq), id_long ? "id" : "job", strlen(id_long ? rq->id : job), max_key);
        eng_reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx); /* not recorded */
        goto out;
    }
    const tp_tool_t *t = tp_registry_find(e->o.reg, rq->tool);
    if (t == NULL) {
        char near[256];
        tp_registry_suggest(e->o.reg, rq->tool, near, sizeof near);
        snprintf(msg, sizeof msg, "%sunknown tool \"%s\"%s%s%s", prefix(pre, sizeof pre, rq), rq->tool,
                 near[0] ? " (closest: " : "", near, near[0] ? ")" : "");
        eng_reject(e, rq->id, job, rq->step, rq->tool, args, TP_KIND_UNKNOWN_TOOL, msg, fn, ctx);
        goto out;
    }
    const json_t *jargs = rq->jargs;
    bool need_tree = t->schema != NULL || (e->o.store && rq->canon == NULL);
    if (need_tree && jargs == NULL && (jargs = owned_json = tp_json_loadb(args, strlen(args), 0, NULL)) == NULL) {
        snprintf(msg, sizeof msg, "%sargs are not a JSON object", prefix(pre, sizeof pre, rq));
        eng_reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, msg, fn, ctx);
        goto out;
    }
    if (t->schema) {
        /* Malformed: the model's to fix, so no call happens and the message says what to change. */
        tp_buf_t why = {0};
        if (!eng_args_valid(t, jargs, &why)) {
            eng_reject(e, rq->id, job, rq->step, rq->tool, args, TP_KIND_INVALID_ARGUMENTS,
                       why.data ? (const char *)why.data : "out of memory validating the arguments", fn, ctx);
            tp_buf_free(&why);
            goto out;
        }
        tp_buf_free(&why);
    }
    tp_digest_t digest = {{0}}, identity = {{0}};
    bool interrupted = false, redo = false, keep_old = false;
    if (e->o.store) {
        if (rq->canon)
            tp_digest_bytes(rq->canon, rq->canon_len, &digest);
        else
            tp_digest_args(jargs, &digest);
        tp_identity_digest(t->name, &digest, &identity);
        if (!eng_ensure_txn(e) || resume_lookup(e, rq, t, job, &identity, &interrupted, &redo, &keep_old, fn, ctx))
            goto out;
    }
    bool created;
    c = eng_call_new(e);
    tp_job_t *j = c ? tp_jobs_get(&e->jobs, job, strlen(job), &created) : NULL;
    if (j && created && strcmp(job, rq->id) != 0)
        job_resume(e, j); /* a job named after its one call has no checkpoint */
    if (c == NULL || j == NULL || (c->id = strdup(rq->id)) == NULL ||
        (rq->breaker_job && (c->breaker_job = strdup(rq->breaker_job)) == NULL) ||
        (c->args = owned_args ? owned_args : strdup(args)) == NULL) {
        eng_reject(e, rq->id, job, rq->step, rq->tool, NULL, TP_KIND_INVALID_REQUEST, "out of memory", fn, ctx);
        if (c) {
            free(c->id);
            free(c->breaker_job);
        }
        free(c);
        c = NULL;
        goto out;
    }
    owned_args = NULL;
    if (!redo && rq->step < j->max_step)
        late_step(e, rq, j);
    c->e = e;
    c->tool = t;
    c->hop_tool = t;
    c->digest = digest;
    c->hop_digest = digest;
    c->identity = identity;
    c->interrupted = interrupted;
    c->keep_old = keep_old;
    c->args_len = args_len;
    c->step = rq->step;
    c->deadline_us = rq->deadline_us;
    c->submitted_gen = e->owners.generation;
    c->submitted_shared = e->owners.others > 0;
    c->answer = fn;
    c->answer_ctx = ctx;
    c->notice = rq->notice;
    c->answer_staged = rq->answer_staged;
    if (e->o.on_end && eng_trace_ctx_keep(c, rq->trace ? rq->trace : &(tp_trace_ctx_t){0}) != NULL && e->o.on_begin)
        e->o.on_begin(e->o.on_end_ctx, c->tctx);
    tp_job_add(j, c);
    e->n_job_waiting++;
    /* Worked out now, while the job is in cache; with no breaker in the store, only if one turns up. */
    if (e->o.store && !t->policy.same_call_off && !(e->txn && tp_breakers_none(e->o.store, e->txn)))
        call_breaker_key(c);
    if (!j->touched) {
        j->touched = true;
        j->tnext = NULL;
        *e->touched_tail = j;
        e->touched_tail = &j->tnext;
    }
    c->lnext = e->all;
    if (e->all)
        e->all->lprev = c;
    e->all = c;
    e->live++;
    e->live_bytes += c->args_len;
    tp_sb_add(&tp_sb_tools(&e->sb)[t->index].held, 1);
    kick(e);
out:
    free(owned_args);
    json_decref(owned_json);
    return c;
}

void tp_engine_cancel(tp_engine_t *e, tp_call_t *c, const char *why)
{
    if (c->cancelled || (c->lprev == NULL && e->all != c))
        return; /* cancelled already, or ended: its answer is on its way */
    c->cancelled = true;
    c->cancel_why = strdup(why ? why : "by its caller");
    bool waiting = !c->current && tp_job_remove(c->job, c);
    if (waiting)
        e->n_job_waiting--;
    waiting = waiting || tp_queue_remove(&e->ready, c);
    if (!waiting && tp_queue_remove(&e->tools[c->hop_tool->index].waiting, c)) {
        e->n_waiting--;
        waiting = true;
    }
    if (!waiting && tp_queue_remove(&e->parked, c)) {
        e->n_parked--;
        waiting = true;
    }
    if (!waiting && c->ev_backoff && evtimer_pending(c->ev_backoff, NULL)) {
        evtimer_del(c->ev_backoff);
        waiting = true;
    }
    if (waiting) {
        eng_finish_cancelled(e, c);
        return;
    }
    /* Running: its worker's group is killed, and the end comes through settle. */
    if (tp_pool_is_running(e->pool, &c->att))
        tp_pool_cancel(e->pool, &c->att);
    kick(e);
}

void tp_call_info(const tp_call_t *c, tp_call_info_t *out)
{
    *out = (tp_call_info_t){.entries = (uint32_t)c->n_trace, .ended = c->ended};
    if (c->n_trace == 0 || c->ended)
        return;
    const Toolpool__Attempt *last = c->trace[c->n_trace - 1];
    out->number = last->attempt;
    out->tool = last->tool;
    out->outcome = last->outcome;
    out->backoff_us = last->backoff_us;
}

size_t tp_engine_live(const tp_engine_t *e)
{
    return e->live;
}

bool tp_engine_takes(tp_engine_t *e, size_t window)
{
    bool takes = e->live < window && (e->live == 0 || e->live_bytes < TP_ENGINE_LIVE_BYTES);
    e->held_back |= !takes; /* a front has calls it could not hand over: more results are coming */
    return takes;
}
