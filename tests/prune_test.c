/*
 * Keeping a store (supervisor/store/prune.c, info.c, env.c): a prune drops
 * what its selector names, in batches, and leaves alone the job of a call a
 * live supervisor has in flight, but not one whose marker's owner is gone;
 * a job left with no result loses its checkpoint; the compacted copy holds
 * every record; an exclusive open is refused while another open holds the
 * store, and taken once it is closed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "info.h"
#include "owners.h"
#include "prune.h"
#include "store.h"
#include "testutil.h"

static char dir[4096];

static tp_store_t *open_store(const char *d, unsigned flags)
{
    char err[1024];
    tp_store_t *s = tp_store_open(d, flags, err, sizeof err);
    if (s == NULL)
        fprintf(stderr, "\n  open %s: %s\n", d, err);
    return s;
}

/* Records call id of job (step) as ok or failed, and lists it in the job's checkpoint. */
static void put_result(tp_store_t *s, MDB_txn *txn, const char *id, const char *job, uint64_t step, bool ok)
{
    uint8_t digest[16] = {1, 2, 3};
    Toolpool__Result r = TOOLPOOL__RESULT__INIT;
    r.id = (char *)id;
    r.has_id = true;
    r.job = (char *)job;
    r.step = step;
    r.tool = "t";
    r.ok = ok;
    r.kind = ok ? "" : "ToolError";
    r.klass = ok ? "" : "permanent";
    r.result.data = (uint8_t *)"{}";
    r.result.len = ok ? 2 : 0;
    r.args.data = (uint8_t *)"{}";
    r.args.len = 2;
    r.input_digest.data = digest;
    r.input_digest.len = sizeof digest;
    CU_ASSERT_EQUAL(tp_result_put(s, txn, &r), 0);
    tp_job_usage_t u = {.steps = step};
    CU_ASSERT_EQUAL(tp_checkpoint_step(s, txn, job, id, step, &u, 0, TP_KIND_OK, NULL), 0);
}

static void put_marker(tp_store_t *s, MDB_txn *txn, const char *id, const char *job, const tp_owner_id_t *owner)
{
    uint8_t digest[16] = {1};
    Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
    f.call_id = (char *)id;
    f.job = (char *)job;
    f.tool = "t";
    f.input_digest.data = digest;
    f.input_digest.len = sizeof digest;
    f.owner_pid = owner->pid;
    f.owner_start = owner->start;
    f.owner_boot = (char *)owner->boot;
    CU_ASSERT_EQUAL(tp_inflight_put(s, txn, &f), 0);
}

/* 3 jobs of 4 calls, the last of each failed; job "live" has a call in flight here, job "dead" one of a gone owner. */
static tp_store_t *make_store(void)
{
    snprintf(dir, sizeof dir, "%s/store", tp_test_tmpdir("prune-unit"));
    tp_store_t *s = open_store(dir, TP_STORE_NOSYNC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    MDB_txn *txn;
    char err[512], id[64];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    const char *jobs[] = {"live", "dead", "other"};
    for (int j = 0; j < 3; j++)
        for (int i = 1; i <= 4; i++) {
            snprintf(id, sizeof id, "%s-%d", jobs[j], i);
            put_result(s, txn, id, jobs[j], (uint64_t)i, i != 4);
        }
    tp_owner_id_t me, gone;
    tp_owner_self(&me);
    gone = me;
    gone.start = me.start + 12345; /* a process of my pid that started at another time: not alive */
    put_marker(s, txn, "live-5", "live", &me);
    put_marker(s, txn, "dead-5", "dead", &gone);
    CU_ASSERT_EQUAL_FATAL(tp_store_commit(s, txn, err, sizeof err), 0);
    return s;
}

static tp_store_info_t info_of(tp_store_t *s)
{
    tp_store_info_t in;
    MDB_txn *txn;
    CU_ASSERT_EQUAL(tp_store_read(s, &txn), 0);
    CU_ASSERT_EQUAL(tp_store_info(s, txn, &in), 0);
    mdb_txn_abort(txn);
    return in;
}

static void test_prune_live_and_gone(void)
{
    tp_store_t *s = make_store();
    tp_store_info_t in = info_of(s);
    CU_ASSERT_EQUAL(in.results.n, 12);
    CU_ASSERT_EQUAL(in.checkpoints.n, 3);
    CU_ASSERT_EQUAL(in.inflight.n, 2);
    CU_ASSERT_EQUAL(in.inflight_live.n, 1);
    CU_ASSERT_EQUAL(in.n_outcomes, 2);

    /* the failed ones: a batch of 1 at a time, so that the walk goes on from where it was */
    tp_prune_sel_t sel = {.outcome = TP_PRUNE_FAILED};
    tp_prune_t p = {0};
    MDB_txn *txn;
    char err[512];
    int batches = 0;
    while (!p.done) {
        CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
        CU_ASSERT_EQUAL_FATAL(tp_prune_batch(s, txn, &sel, &p, 1, false, NULL, NULL), 0);
        CU_ASSERT_EQUAL_FATAL(tp_store_commit(s, txn, err, sizeof err), 0);
        batches++;
    }
    CU_ASSERT_EQUAL(p.results, 2); /* dead-4, other-4 */
    CU_ASSERT_EQUAL(p.kept_live, 1);
    CU_ASSERT(batches >= 2);
    in = info_of(s);
    CU_ASSERT_EQUAL(in.results.n, 10);
    CU_ASSERT_EQUAL(in.steps.n, 20); /* two records for each call listed */

    /* everything recorded before now: the live job stays whole, the others go with their checkpoints */
    sel = (tp_prune_sel_t){.before_us = tp_unix_us() + 1};
    p = (tp_prune_t){0};
    CU_ASSERT_EQUAL(tp_prune_run(s, &sel, &p, NULL, err, sizeof err), 0);
    CU_ASSERT_EQUAL(p.results, 6);
    CU_ASSERT_EQUAL(p.checkpoints, 2);
    CU_ASSERT_EQUAL(p.kept_live, 4);
    in = info_of(s);
    CU_ASSERT_EQUAL(in.results.n, 4);
    CU_ASSERT_EQUAL(in.checkpoints.n, 1);
    CU_ASSERT_EQUAL(in.inflight.n, 2); /* markers are never touched */
    tp_store_close(s);
    tp_test_rmtree(tp_test_tmpdir("prune-unit"));
}

static void test_compact_copy_and_exclusive(void)
{
    tp_store_t *s = make_store();
    /* another open holds the store: no exclusive open */
    errno = 0;
    tp_store_t *x = tp_store_open(dir, TP_STORE_EXCLUSIVE, (char[256]){0}, 256);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_EQUAL(errno, EAGAIN);
    tp_store_info_t before = info_of(s);
    tp_store_close(s);
    x = open_store(dir, TP_STORE_EXCLUSIVE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    char copy[4200], err[1024];
    snprintf(copy, sizeof copy, "%s/copy", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(copy, 0755), 0);
    CU_ASSERT_EQUAL(tp_store_copy_compact(x, copy, err, sizeof err), 0);
    tp_store_close(x);
    tp_store_t *c = open_store(copy, TP_STORE_RDONLY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    tp_store_info_t after = info_of(c);
    for (int db = 0; db < TP_DB__COUNT; db++)
        CU_ASSERT_EQUAL(after.space.entries[db], before.space.entries[db]);
    CU_ASSERT_EQUAL(after.results.bytes, before.results.bytes);
    CU_ASSERT(after.space.free_pages < 16); /* a few pages of the copy's own commits, one a database */
    tp_store_close(c);
    tp_test_rmtree(tp_test_tmpdir("prune-unit"));
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("prune", NULL, NULL);
    CU_add_test(s, "live jobs kept, a gone owner's not, batches resume", test_prune_live_and_gone);
    CU_add_test(s, "the compacted copy, and the exclusive open", test_compact_copy_and_exclusive);
    return tp_test_run();
}
