/*
 * A store shared with other supervisors (owners.h): each engine joins its
 * owners, claims the calls it holds when another arrives, and before a
 * call's first attempt checks in one transaction that nobody else ran it
 * or runs it; a call another live supervisor runs waits, parked, for its
 * record.
 */
#include <string.h>

#include "engine_internal.h"
#include "inflight.h"
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

/* Writes this engine's claim of c (an in-flight marker that names it) in the open transaction. */
static int claim_put(tp_engine_t *e, tp_call_t *c, bool claim_only)
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
    int rc = tp_inflight_put(e->o.store, e->txn, &f);
    if (rc == 0) {
        c->marked = true;
        c->claim_only = claim_only;
        c->claimed = true;
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
        }
        rc = claim_put(e, c, true);
        if (rc) {
            tp_engine_store_failed(e, rc, "claiming a call");
            return;
        }
    }
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
    if (rc == 0 && e->owners.generation > e->seen_gen) {
        if (e->owners.others > 0)
            claim_live(e);
        if (!e->failed && (rc = tp_owners_ack(e->o.store, e->txn, &e->me, e->owners.generation)) == 0)
            e->seen_gen = e->owners.generation;
    }
    if (rc)
        tp_engine_store_failed(e, rc, "reading the store's owners");
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
        return CLAIM_ANSWERED;
    }
    if (rc != MDB_NOTFOUND) {
        tp_engine_store_failed(e, rc, "reading a result");
        return CLAIM_PARKED;
    }
    Toolpool__InFlight *f;
    rc = tp_inflight_get(e->o.store, e->txn, c->id, &f);
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
    if ((rc = claim_put(e, c, true)) != 0) {
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
