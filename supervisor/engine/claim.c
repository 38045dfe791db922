/*
 * A store shared with other supervisors (owners.h): each engine joins its
 * owners, claims the calls it holds when another arrives, and before a
 * call's first attempt checks in one transaction that nobody else ran it
 * or runs it; a call another live supervisor runs waits, parked, for its
 * record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "clock.h"
#include "engine_internal.h"
#include "escalate.h"
#include "inflight.h"
#include "log.h"
#include "results.h"

/*
 * Whether an in-flight marker found for a call means the call was running
 * when its supervisor died, and must not run again blindly: a marker of a
 * tool that is not idempotent whose owner is gone (or unnamed: an older
 * store), or one of this engine's own (the same id twice in its input).
 * A live owner's is no such thing (the call waits for its record), nor is
 * a bare claim of a call that never started or may run again.
 */
bool eng_marker_orphaned(tp_engine_t *e, const Toolpool__InFlight *f)
{
    if (tp_owner_is(&e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return !f->claim_only;
    if (tp_owner_alive(&e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return false;
    return !f->claim_only;
}

/*
 * Writes c's in-flight marker naming this engine in the open transaction:
 * a bare claim, or (claim_only false) the record that its attempt
 * started, with its args, from which the call is settled if this engine
 * dies under it.
 */
int eng_marker_put(tp_engine_t *e, tp_call_t *c, bool claim_only)
{
    Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
    f.call_id = c->id;
    f.input_digest.data = c->identity.b;
    f.input_digest.len = TP_DIGEST_LEN;
    f.tool = (char *)c->hop_tool->name;
    f.job = c->job->name;
    f.step = c->step;
    f.attempt = c->att.number;
    f.owner_pid = e->me.pid;
    f.owner_start = e->me.start;
    f.owner_boot = e->me.boot;
    f.claim_only = claim_only;
    if (!claim_only) {
        f.started_unix_us = tp_unix_us();
        f.args.data = (uint8_t *)c->args;
        f.args.len = c->args_len;
    }
    int rc = tp_inflight_put(e->o.store, e->txn, &f);
    tp_seen_add(&e->recorded, c->id, strlen(c->id));
    if (rc == 0) {
        c->marked = true;
        c->claim_only = claim_only;
        c->claimed |= claim_only;
    }
    return rc;
}

/*
 * Another supervisor has arrived on the store: every call this engine
 * holds gets its claim, in the transaction that then acknowledges the
 * arrival, so the newcomer, who starts nothing before that, never runs
 * one of them. A running call of a tool that is not idempotent has its
 * marker already. A call whose marker is another's that still stands (a
 * live owner's, or a dead one's record that it started) is left as it
 * is, unclaimed: its first attempt's check (eng_claim) decides, and
 * waits for the live owner's record, or ends it Interrupted. Writing this
 * engine's claim over it would let both run it.
 */
static void claim_live(tp_engine_t *e)
{
    for (tp_call_t *c = e->all; c; c = c->lnext) {
        if (c->marked || c->interrupted)
            continue;
        Toolpool__InFlight *f;
        int rc = tp_inflight_get(e->o.store, e->txn, c->id, &f);
        if (rc == 0) {
            bool mine = tp_owner_is(&e->me, f->owner_pid, f->owner_start, f->owner_boot);
            bool stands = !mine &&
                          (!f->claim_only || tp_owner_alive(&e->me, f->owner_pid, f->owner_start, f->owner_boot));
            toolpool__in_flight__free_unpacked(f, NULL);
            if (stands) {
                c->claimed = false;
                continue;
            }
        } else if (rc != MDB_NOTFOUND) {
            tp_engine_store_failed(e, rc, "reading an in-flight marker");
            return;
        } else {
            /* No marker: it may have been settled from one (eng_settle_orphans); its check answers it. */
            Toolpool__StoredResult *r;
            if ((rc = tp_result_get(e->o.store, e->txn, c->id, &r)) == 0) {
                tp_result_free(r);
                c->claimed = false;
                continue;
            }
            if (rc != MDB_NOTFOUND) {
                tp_engine_store_failed(e, rc, "reading a result");
                return;
            }
        }
        rc = eng_marker_put(e, c, true);
        if (rc) {
            tp_engine_store_failed(e, rc, "claiming a call");
            return;
        }
    }
}

/*
 * Orphans: a started call's marker whose owner is gone waits for its id to
 * be submitted again, which ends it Interrupted. An id nobody submits again
 * (an MCP session's call, a POST without an id) would keep it for ever,
 * its call neither recorded nor escalated. So an engine settles every such
 * marker itself when it joins the store, and again whenever it finds an
 * owner gone: the call is recorded Interrupted and escalated from what the
 * marker holds, as its id submitted again would be; a bare claim of an
 * owner gone is dropped. A call this engine holds (its id came again) is
 * left to its own check, which finds the record.
 */
#define TP_SWEEP_OWNERS 16 /* owners looked up once a sweep; more are looked up again */

typedef struct {
    int32_t pid;
    uint64_t start;
    const char *boot; /* in a marker the sweep holds */
} tp_gone_t;

typedef struct {
    tp_engine_t *e;
    Toolpool__InFlight **v; /* the orphans found */
    size_t n, cap;
    tp_gone_t gone[TP_SWEEP_OWNERS]; /* owners found gone, so far */
    size_t n_gone;
    bool nomem;
} tp_sweep_t;

static bool known_gone(const tp_sweep_t *w, const Toolpool__InFlight *f)
{
    for (size_t i = 0; i < w->n_gone; i++)
        if (w->gone[i].pid == f->owner_pid && w->gone[i].start == f->owner_start &&
            strcmp(w->gone[i].boot, f->owner_boot) == 0)
            return true;
    return false;
}

static bool sweep_one(void *ctx, Toolpool__InFlight *f)
{
    tp_sweep_t *w = ctx;
    if (tp_owner_is(&w->e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return false;
    bool known = known_gone(w, f);
    if (!known && tp_owner_alive(&w->e->me, f->owner_pid, f->owner_start, f->owner_boot))
        return false;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        Toolpool__InFlight **v = realloc(w->v, cap * sizeof *v);
        if (v == NULL) {
            w->nomem = true;
            return false;
        }
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = f;
    if (!known && w->n_gone < TP_SWEEP_OWNERS) /* its boot lives as long as f, held now, does */
        w->gone[w->n_gone++] = (tp_gone_t){f->owner_pid, f->owner_start, f->owner_boot};
    return true;
}

/* Records the orphan f Interrupted, escalated, from its marker alone. 0 or a store code. */
static int settle_orphan(tp_engine_t *e, const Toolpool__InFlight *f)
{
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s was running when its supervisor (pid %d) stopped; it is not idempotent, so it is not run again",
             f->tool, (int)f->owner_pid);
    Toolpool__Escalation x = TOOLPOOL__ESCALATION__INIT;
    x.call_id = f->call_id;
    x.job = f->job;
    x.step = f->step;
    x.tool = f->tool;
    const tp_tool_t *t = tp_registry_find(e->o.reg, f->tool);
    if (t && t->policy.owner)
        x.owner = t->policy.owner;
    x.args = f->args;
    x.kind = (char *)tp_kind_name(TP_KIND_INTERRUPTED);
    x.message = msg;
    x.reason = "a call of a tool that is not idempotent was in flight at a crash";
    char esc[TP_ESCALATION_ID_MAX];
    int rc = tp_escalate(e->o.store, e->txn, &x, esc);
    if (rc)
        return rc;
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.has_id = true;
    r.id = f->call_id;
    r.job = f->job;
    r.step = f->step;
    r.tool = f->tool;
    r.kind = (char *)tp_kind_name(TP_KIND_INTERRUPTED);
    r.klass = (char *)tp_class_name(tp_kind_class(TP_KIND_INTERRUPTED));
    r.message = msg;
    r.attempts = f->attempt;
    r.args = f->args;
    r.escalated = true;
    r.escalation = esc;
    r.input_digest = f->input_digest;
    tp_seen_add(&e->recorded, f->call_id, strlen(f->call_id));
    if ((rc = tp_result_put(e->o.store, e->txn, &r)) == 0 && strcmp(f->job, f->call_id) != 0)
        rc = tp_checkpoint_step(e->o.store, e->txn, f->job, f->call_id, f->step, NULL, 0, TP_KIND_OK, NULL);
    char **v = rc == 0 ? realloc(e->settled, (e->n_settled + 1) * sizeof *v) : NULL;
    if (v) {
        e->settled = v;
        if ((v[e->n_settled] = strdup(f->call_id)) != NULL)
            e->n_settled++;
    }
    tp_log_call_t lc = {f->call_id, f->job, f->tool, 0};
    if (rc == 0)
        tp_log_call_warn("engine.call_interrupted", &lc,
                         "call %s (%s, job %s) was running when supervisor %d stopped: recorded Interrupted, "
                         "escalated as %s",
                         f->call_id, f->tool, f->job, (int)f->owner_pid, esc);
    return rc;
}

/* True when this engine holds a live call of that id (it settles it itself). Orphans are few: a scan serves. */
static bool held_here(const tp_engine_t *e, const char *id)
{
    for (const tp_call_t *c = e->all; c; c = c->lnext)
        if (strcmp(c->id, id) == 0)
            return true;
    return false;
}

bool eng_settled_here(const tp_engine_t *e, const char *id)
{
    for (size_t i = 0; i < e->n_settled; i++)
        if (strcmp(e->settled[i], id) == 0)
            return true;
    return false;
}

void eng_settle_orphans(tp_engine_t *e)
{
    e->sweep_due = false;
    if (!eng_ensure_txn(e))
        return;
    tp_sweep_t w = {.e = e};
    int rc = tp_inflight_each(e->o.store, e->txn, sweep_one, &w);
    for (size_t i = 0; i < w.n; i++) {
        const Toolpool__InFlight *f = w.v[i];
        if (rc == 0 && !e->failed && (f->claim_only || !held_here(e, f->call_id))) {
            Toolpool__StoredResult *r;
            int got = tp_result_get(e->o.store, e->txn, f->call_id, &r);
            if (got == 0)
                tp_result_free(r); /* recorded already: the marker is left over */
            else if (got != MDB_NOTFOUND)
                rc = got;
            if (rc == 0 && got == MDB_NOTFOUND && !f->claim_only) {
                if (eng_txn_fit(e, f->args.len + 4096, false)) /* else the engine failed, and said why */
                    rc = settle_orphan(e, f);
            }
            if (rc == 0 && !e->failed)
                rc = tp_inflight_del(e->o.store, e->txn, f->call_id);
        }
        toolpool__in_flight__free_unpacked(w.v[i], NULL);
    }
    free(w.v);
    if (w.nomem)
        tp_log_warn("engine.out_of_memory",
                    "out of memory settling the calls of supervisors that stopped: some wait for the next sweep");
    if (rc && !e->failed)
        tp_engine_store_failed(e, rc, "settling the calls of a supervisor that stopped");
}

/*
 * At the start of each write transaction: joins the store's owners,
 * learns of arrivals and departures, and claims this engine's calls for
 * an arrival it has not seen yet.
 */
void eng_owners_sync(tp_engine_t *e)
{
    if (!e->owner_known || e->failed)
        return;
    int rc = tp_owners_sync(e->o.store, e->txn, &e->me, &e->owners);
    /* At its arrival, or when an owner is found gone: the turn settles what they left (eng_settle_orphans). */
    if (rc == 0 && (e->seen_gen == 0 || e->owners.dropped > 0))
        e->sweep_due = true;
    if (rc == 0 && e->owners.generation > e->seen_gen) {
        if (e->owners.others > 0)
            claim_live(e);
        if (!e->failed && (rc = tp_owners_ack(e->o.store, e->txn, &e->me, e->owners.generation)) == 0)
            e->seen_gen = e->owners.generation;
    }
    /* What it is doing, for stats on a live store: at most once a second, in the transaction that began. */
    uint64_t now = tp_now_us();
    if (rc == 0 && !e->failed && e->status_cmd && now - e->status_at_us >= TP_OWNER_STATUS_US) {
        e->status_at_us = now;
        int busy = tp_engine_busy(e);
        size_t live = tp_engine_live(e);
        tp_owner_status_t st = {.command = e->status_cmd,
                                .total = e->status_total,
                                .done = e->results + e->stats.rejected,
                                .running = (uint64_t)(busy > 0 ? busy : 0),
                                .waiting = live > (size_t)busy ? live - (size_t)busy : 0};
        rc = tp_owners_status(e->o.store, e->txn, &e->me, &st);
    }
    if (rc)
        tp_engine_store_failed(e, rc, "reading the store's owners");
}

void tp_engine_status(tp_engine_t *e, const char *command, uint64_t total)
{
    e->status_cmd = command;
    e->status_total = total;
    tp_sb_header_t *h = tp_sb_header(&e->sb);
    if (strncmp(h->c.command, command, sizeof h->c.command) != 0) {
        tp_sb_write_begin(&h->gen);
        snprintf(h->c.command, sizeof h->c.command, "%s", command);
        tp_sb_write_end(&h->gen);
    }
}

/*
 * In the open transaction: whether c's id is recorded already (another
 * supervisor ran it, or settled it, since c came), and if so c is
 * answered from the record (or refused, for other input). false on a
 * store failure too (e->failed says).
 */
bool eng_answered_from_record(tp_engine_t *e, tp_call_t *c)
{
    Toolpool__StoredResult *r;
    int rc = tp_result_get(e->o.store, e->txn, c->id, &r);
    if (rc == 0 && eng_redo_recorded(e, r)) {
        tp_result_free(r);
        rc = MDB_NOTFOUND; /* it was to be done again when it came, and still is */
    }
    if (rc == 0) {
        tp_pending_t *p;
        if (eng_same_input(r, &c->identity)) {
            p = eng_answer_recorded(e, r, c->answer, c->answer_ctx);
            r = NULL; /* the answer's now */
        } else {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "id \"%s\" was recorded in the store for other input while it waited; "
                     "give this call a new id, or run with a new store",
                     c->id);
            p = eng_reject_as(e, c->id, c->job->name, c->step, c->tool->name, c->args, TP_KIND_INVALID_REQUEST, msg,
                              false, c->answer, c->answer_ctx);
            if (p)
                p->conflict = true;
        }
        if (r)
            tp_result_free(r);
        eng_hold_until(e, c, p);
        return true;
    }
    if (rc != MDB_NOTFOUND)
        tp_engine_store_failed(e, rc, "reading a result");
    return false;
}

/*
 * On a store shared with other supervisors, before a call's first attempt:
 * in one transaction, its record is looked for (another supervisor may
 * have run it since it was submitted), its marker checked, and its claim
 * written. Until every other live supervisor has acknowledged this one's
 * arrival, nothing is claimed.
 */
tp_claim_t eng_claim(tp_engine_t *e, tp_call_t *c)
{
    if (!e->owners.peers_ready) {
        tp_queue_push(&e->parked, c);
        e->n_parked++;
        return CLAIM_PARKED;
    }
    if (eng_answered_from_record(e, c))
        return CLAIM_ANSWERED;
    if (e->failed)
        return CLAIM_PARKED;
    Toolpool__InFlight *f;
    int rc = tp_inflight_get(e->o.store, e->txn, c->id, &f);
    if (rc == 0) {
        bool mine = tp_owner_is(&e->me, f->owner_pid, f->owner_start, f->owner_boot);
        bool elsewhere = !mine && tp_owner_alive(&e->me, f->owner_pid, f->owner_start, f->owner_boot);
        bool orphaned = eng_marker_orphaned(e, f);
        toolpool__in_flight__free_unpacked(f, NULL);
        if (elsewhere) {
            tp_queue_push(&e->parked, c);
            e->n_parked++;
            return CLAIM_PARKED;
        }
        if (orphaned) {
            c->interrupted = true; /* admit ends it Interrupted, and its marker with it */
            c->claimed = true;
            return CLAIM_OK;
        }
    } else if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading an in-flight marker");
        return CLAIM_PARKED;
    }
    if ((rc = eng_marker_put(e, c, true)) != 0) {
        tp_engine_store_failed(e, rc, "claiming a call");
        return CLAIM_PARKED;
    }
    return CLAIM_OK;
}

void eng_owners_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_engine_t *e = arg;
    if (e->failed || e->closing)
        return;
    if (e->n_parked > 0) {
        tp_call_t *c;
        while ((c = tp_queue_pop(&e->parked)) != NULL)
            tp_queue_push(&e->ready, c);
        e->n_parked = 0;
        kick(e);
    }
    if (e->txn || !e->owner_known)
        return; /* the open transaction looked when it began */
    MDB_txn *rd;
    uint64_t generation = 0;
    if (tp_store_read(e->o.store, &rd) != 0)
        return;
    tp_owners_generation(e->o.store, rd, &generation);
    mdb_txn_abort(rd);
    if (generation != e->seen_gen || (e->owners.others > 0 && !e->owners.peers_ready))
        eng_ensure_txn(e);
}
