#include "prune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "owners.h"
#include "records.h"
#include "tasks.h"
#include "steps.h"

/* Sorted strings, for the live jobs and calls a batch must leave alone. */
typedef struct {
    char **v;
    size_t n, cap;
} strset_t;

static int strset_add(strset_t *set, const char *str)
{
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        char **v = realloc(set->v, cap * sizeof *v);
        if (v == NULL)
            return TP_ENOMEM;
        set->v = v;
        set->cap = cap;
    }
    if ((set->v[set->n] = strdup(str)) == NULL)
        return TP_ENOMEM;
    set->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* qsort of a set that may be empty (its v NULL: qsort's first argument must not be). */
static void strset_sort(strset_t *set)
{
    if (set->n > 1)
        qsort(set->v, set->n, sizeof *set->v, cmp_str);
}

static bool strset_has(const char *const *v, size_t n, const char *str)
{
    return n && bsearch(&str, v, n, sizeof *v, cmp_str) != NULL;
}

static void strset_free(strset_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        free(set->v[i]);
    free(set->v);
    *set = (strset_t){0};
}

typedef struct {
    tp_owner_id_t me;
    strset_t jobs, calls;
    int rc;
} live_t;

static bool note_live(void *ctx, Toolpool__InFlight *f)
{
    live_t *l = ctx;
    if (l->rc == 0 && tp_owner_alive(&l->me, f->owner_pid, f->owner_start, f->owner_boot)) {
        l->rc = strset_add(&l->calls, f->call_id);
        if (l->rc == 0 && f->job[0])
            l->rc = strset_add(&l->jobs, f->job);
    }
    return false;
}

/* The jobs and calls that live supervisors have in flight now, as txn sees them. */
static int live_work(tp_store_t *s, MDB_txn *txn, live_t *l)
{
    tp_owner_self(&l->me);
    int rc = tp_inflight_each(s, txn, note_live, l);
    rc = rc ? rc : l->rc;
    if (rc == 0) {
        strset_sort(&l->jobs);
        strset_sort(&l->calls);
    }
    return rc;
}

static const char *job_of(const Toolpool__Result *r)
{
    return r->job && r->job[0] ? r->job : r->id;
}

static bool selected(const tp_prune_sel_t *sel, const Toolpool__StoredResult *sr, tp_prune_t *p)
{
    const Toolpool__Result *r = sr->result;
    if (sel->before_us && sr->ended_unix_us == 0) {
        p->undated++;
        return false;
    }
    if (sel->before_us && sr->ended_unix_us >= sel->before_us)
        return false;
    if (sel->outcome == TP_PRUNE_OK && !r->ok)
        return false;
    if (sel->outcome == TP_PRUNE_FAILED && r->ok)
        return false;
    if (sel->kind && (r->ok || strcmp(r->kind, sel->kind) != 0))
        return false;
    if (sel->tool && strcmp(r->tool, sel->tool) != 0)
        return false;
    if (sel->jobs && !strset_has(sel->jobs, sel->n_jobs, job_of(r)))
        return false;
    return true;
}

/* Whether r's call has an escalation still open: an escalated result that names none counts as open. */
static int escalation_open(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r, bool *open)
{
    *open = false;
    if (!r->escalated)
        return 0;
    if (r->escalation == NULL || r->escalation[0] == '\0') {
        *open = true;
        return 0;
    }
    Toolpool__Escalation *e;
    int rc = tp_records_escalation_get(s, txn, r->escalation, &e);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    *open = !e->resolved;
    toolpool__escalation__free_unpacked(e, NULL);
    return 0;
}

/* Drops job's checkpoint when no call is left in its list (an agent loop's own state keeps it). */
static int drop_if_empty(tp_store_t *s, MDB_txn *txn, const char *job, tp_prune_t *p)
{
    Toolpool__Checkpoint *cp;
    int rc = tp_checkpoint_get(s, txn, job, &cp);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    bool empty = tp_steps_count(cp) == 0 && !cp->has_state;
    toolpool__checkpoint__free_unpacked(cp, NULL);
    uint64_t n = 0;
    if (empty && (rc = tp_records_forget_job(s, txn, job, &n)) == 0)
        p->checkpoints++;
    return rc;
}

int tp_prune_batch(tp_store_t *s, MDB_txn *txn, const tp_prune_sel_t *sel, tp_prune_t *p, size_t max, bool dry,
                   void (*each)(void *ctx, const Toolpool__StoredResult *sr), void *ctx)
{
    live_t live = {0};
    strset_t ids = {0}, jobs = {0};
    MDB_cursor *cur = NULL;
    int rc = live_work(s, txn, &live);
    if (rc == 0)
        rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_RESULTS), &cur));
    MDB_val k = {p->at_len, p->at}, v;
    if (rc == 0)
        rc = tp_mdb(mdb_cursor_get(cur, &k, &v, p->started ? MDB_SET_RANGE : MDB_FIRST));
    if (rc == 0 && p->started && k.mv_size == p->at_len && memcmp(k.mv_data, p->at, p->at_len) == 0)
        rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT));
    /* A batch looks at no more than this many records, so that it holds the write lock for a moment only. */
    size_t looked = 0, look_max = max * 20;
    for (; rc == 0 && ids.n < max && looked < look_max; rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        looked++;
        p->started = true;
        p->at_len = k.mv_size < sizeof p->at ? k.mv_size : sizeof p->at;
        memcpy(p->at, k.mv_data, p->at_len);
        Toolpool__StoredResult *sr;
        if (tp_result_unpack(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &sr) != 0)
            continue; /* a corrupt record stays for `store check` to name */
        const Toolpool__Result *r = sr->result;
        bool open = false;
        if (selected(sel, sr, p) && (rc = escalation_open(s, txn, r, &open)) == 0) {
            if (open)
                p->kept_escalated++;
            else if (strset_has((const char *const *)live.jobs.v, live.jobs.n, job_of(r)) ||
                     strset_has((const char *const *)live.calls.v, live.calls.n, r->id))
                p->kept_live++;
            else {
                if (each)
                    each(ctx, sr);
                p->results++;
                p->bytes += k.mv_size + v.mv_size;
                r->ok ? p->ok++ : p->failed++;
                rc = strset_add(&ids, r->id);
                if (rc == 0 && strcmp(job_of(r), r->id) != 0)
                    rc = strset_add(&jobs, job_of(r));
            }
        }
        tp_result_free(sr);
        if (rc)
            break;
    }
    if (rc == MDB_NOTFOUND) {
        p->done = true;
        rc = 0;
    }
    if (cur)
        mdb_cursor_close(cur);
    for (size_t i = 0; rc == 0 && !dry && i < ids.n; i++) {
        rc = tp_records_forget(s, txn, ids.v[i]);
        /* An MCP task of the call goes with its result: asked for again, it would run the call again. */
        if (rc == 0 && tp_store_has(s, TP_DB_TASKS))
            rc = tp_task_del(s, txn, ids.v[i]);
    }
    strset_sort(&jobs);
    for (size_t i = 0; rc == 0 && !dry && i < jobs.n; i++)
        if (i == 0 || strcmp(jobs.v[i], jobs.v[i - 1]) != 0)
            rc = drop_if_empty(s, txn, jobs.v[i], p);
    strset_free(&ids);
    strset_free(&jobs);
    strset_free(&live.jobs);
    strset_free(&live.calls);
    return rc;
}

int tp_prune_run(tp_store_t *s, const tp_prune_sel_t *sel, tp_prune_t *p, const volatile sig_atomic_t *stop, char *err,
                 size_t errlen)
{
    while (!p->done && !(stop && *stop)) {
        MDB_txn *txn;
        int rc = tp_store_begin(s, &txn, err, errlen);
        if (rc)
            return rc;
        if ((rc = tp_prune_batch(s, txn, sel, p, TP_PRUNE_BATCH, false, NULL, NULL)) != 0) {
            mdb_txn_abort(txn);
            char why[256];
            snprintf(err, errlen, "%s: cannot prune: %s", tp_store_dir(s), tp_store_strerror(s, rc, why, sizeof why));
            return rc;
        }
        if ((rc = tp_store_commit(s, txn, err, errlen)) != 0)
            return rc;
    }
    return 0;
}
