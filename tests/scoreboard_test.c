/*
 * The scoreboard (supervisor/engine/scoreboard.h): a forked writer
 * rewrites a slot record, a tool's summary and the header's counters as
 * fast as it can while this process maps the board read-only through
 * /proc, as `toolpool top` does, and copies them: every copy must be
 * whole (each record's fields all from one write), never torn. Then the
 * slot records' accounting, and boards that are gone or someone else's.
 */
#include <CUnit/Basic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "scoreboard.h"
#include "testutil.h"

#define WRITES 400000

/* Every word of the summary set to v: a copy is whole when they all agree. */
static void fill_summary(tp_summary_t *s, uint64_t v)
{
    uint64_t *w = (uint64_t *)s;
    for (size_t i = 0; i < sizeof *s / sizeof *w; i++)
        w[i] = v;
}

static bool summary_whole(const tp_summary_t *s)
{
    const uint64_t *w = (const uint64_t *)s;
    for (size_t i = 1; i < sizeof *s / sizeof *w; i++)
        if (w[i] != w[0])
            return false;
    return true;
}

static void writer(tp_scoreboard_t *sb)
{
    tp_sb_tool_t *t = &tp_sb_tools(sb)[0];
    tp_sb_header_t *h = tp_sb_header(sb);
    for (uint64_t i = 1; i <= WRITES; i++) {
        char id[TP_SB_NAME];
        memset(id, 'a' + (int)(i % 26), (size_t)(1 + i % (TP_SB_NAME - 1)));
        id[1 + i % (TP_SB_NAME - 1)] = 0;
        int k = tp_sb_slot_take(sb, 0, (uint32_t)i, i, 2 * i, id, id);
        if (k < 0)
            _exit(3);
        tp_sb_write_begin(&t->gen);
        fill_summary(&t->sum, i);
        tp_sb_write_end(&t->gen);
        tp_sb_write_begin(&h->gen);
        h->c.total = h->c.done = h->c.live = h->c.waiting = h->c.commits = i;
        fill_summary(&h->commit_latency, i);
        tp_sb_write_end(&h->gen);
        tp_sb_slot_give(sb, k);
    }
    _exit(0);
}

static void test_no_torn_reads(void)
{
    const char *names[] = {"search"};
    tp_scoreboard_t sb;
    CU_ASSERT_EQUAL_FATAL(tp_sb_create(&sb, 1, names, 1, true), 0);
    CU_ASSERT_NOT_EQUAL_FATAL(sb.path[0], 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0)
        writer(&sb);
    tp_sb_view_t v;
    CU_ASSERT_EQUAL_FATAL(tp_sb_open(&v, sb.path, (int32_t)getpid()), 0);
    uint64_t reads = 0, busy = 0, torn = 0, last = 0, changes = 0;
    int status = 0;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        tp_sb_snap_t s;
        int rc = tp_sb_snapshot(v.base, v.size, &s);
        if (rc == TP_EAGAIN)
            continue;
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        reads++;
        CU_ASSERT_STRING_EQUAL(s.tools[0].name, "search");
        if (!summary_whole(&s.tools[0].sum) || !summary_whole(&s.commit_latency) || s.c.total != s.c.done ||
            s.c.done != s.c.live || s.c.live != s.c.commits || s.c.commits != s.commit_latency.calls)
            torn++;
        if (s.c.total != last)
            changes++;
        last = s.c.total;
        for (uint32_t i = 0; i < s.n_busy; i++) {
            const tp_sb_slot_t *c = &s.slots[i];
            busy++;
            size_t n = strlen(c->call_id);
            bool ok = c->started_us == c->attempt && c->timeout_us == 2 * (uint64_t)c->attempt &&
                      n == 1 + c->attempt % (TP_SB_NAME - 1) && strcmp(c->call_id, c->job) == 0;
            for (size_t k = 0; ok && k < n; k++)
                ok = c->call_id[k] == 'a' + (int)(c->attempt % 26);
            torn += !ok;
        }
        tp_sb_snap_free(&s);
        if (done == pid)
            break;
    }
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_EQUAL(torn, 0);
    /* The reads raced the writes: many copies, of many generations, some of them mid-attempt. */
    CU_ASSERT_TRUE(reads > 20);
    CU_ASSERT_TRUE(changes > 5);
    printf("\n  %llu reads, %llu of a running attempt, %llu values seen change, %llu torn\n", (unsigned long long)reads,
           (unsigned long long)busy, (unsigned long long)changes, (unsigned long long)torn);
    tp_sb_snap_t s;
    CU_ASSERT_EQUAL(tp_sb_snapshot(v.base, v.size, &s), 0);
    CU_ASSERT_EQUAL(s.c.total, WRITES);
    CU_ASSERT_EQUAL(s.n_busy, 0);
    tp_sb_snap_free(&s);
    tp_sb_close(&v);
    tp_sb_destroy(&sb);
}

static void test_slots(void)
{
    const char *names[] = {"a", "b"};
    tp_scoreboard_t sb;
    CU_ASSERT_EQUAL_FATAL(tp_sb_create(&sb, 2, names, 2, true), 0);
    int x = tp_sb_slot_take(&sb, 1, 1, 10, 0, "c1", "j1");
    int y = tp_sb_slot_take(&sb, 0, 2, 20, 5, "c2", "j2");
    int z = tp_sb_slot_take(&sb, 0, 1, 30, 5, "c3", "j3");
    CU_ASSERT_TRUE(x >= 0 && y >= 0 && x != y);
    CU_ASSERT_EQUAL(z, -1); /* every record taken: counted, not shown */
    tp_sb_snap_t s;
    CU_ASSERT_EQUAL_FATAL(tp_sb_snapshot(sb.base, sb.size, &s), 0);
    CU_ASSERT_EQUAL(s.n_busy, 2);
    CU_ASSERT_EQUAL(s.c.unshown, 1);
    CU_ASSERT_STRING_EQUAL(s.tools[1].name, "b");
    tp_sb_snap_free(&s);
    tp_sb_slot_give(&sb, z);
    tp_sb_slot_give(&sb, x);
    CU_ASSERT_EQUAL_FATAL(tp_sb_snapshot(sb.base, sb.size, &s), 0);
    CU_ASSERT_EQUAL(s.n_busy, 1);
    CU_ASSERT_EQUAL(s.c.unshown, 0);
    CU_ASSERT_STRING_EQUAL(s.slots[0].call_id, "c2");
    CU_ASSERT_EQUAL(s.slots[0].attempt, 2);
    tp_sb_snap_free(&s);
    /* A long id is cut, NUL-terminated. */
    char longid[200];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    x = tp_sb_slot_take(&sb, 0, 1, 1, 1, longid, longid);
    CU_ASSERT_EQUAL_FATAL(tp_sb_snapshot(sb.base, sb.size, &s), 0);
    CU_ASSERT_EQUAL(s.n_busy, 2);
    for (uint32_t i = 0; i < s.n_busy; i++)
        if (s.slots[i].attempt == 1)
            CU_ASSERT_EQUAL(strlen(s.slots[i].call_id), TP_SB_NAME - 1);
    tp_sb_snap_free(&s);
    tp_sb_destroy(&sb);
}

static void test_open(void)
{
    const char *names[] = {"a"};
    tp_scoreboard_t sb;
    CU_ASSERT_EQUAL_FATAL(tp_sb_create(&sb, 1, names, 1, true), 0);
    tp_sb_view_t v;
    CU_ASSERT_EQUAL(tp_sb_open(&v, sb.path, (int32_t)getpid() + 1), TP_EPROTO); /* another's */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/999999", (int)getpid());
    CU_ASSERT_EQUAL(tp_sb_open(&v, path, (int32_t)getpid()), TP_ENOENT);
    /* only the owner's own descriptor is opened: nothing else a store's entry may name */
    CU_ASSERT_EQUAL(tp_sb_open(&v, "/proc/self/status", (int32_t)getpid()), TP_EPROTO);
    CU_ASSERT_EQUAL(tp_sb_open(&v, "/etc/passwd", (int32_t)getpid()), TP_EPROTO);
    snprintf(path, sizeof path, "/proc/%d/fd/0x", (int)getpid());
    CU_ASSERT_EQUAL(tp_sb_open(&v, path, (int32_t)getpid()), TP_EPROTO);
    int pfd[2];
    CU_ASSERT_EQUAL_FATAL(pipe(pfd), 0); /* a descriptor of its own that is no file: refused, not blocked on */
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getpid(), pfd[0]);
    CU_ASSERT_EQUAL(tp_sb_open(&v, path, (int32_t)getpid()), TP_EPROTO);
    close(pfd[0]);
    close(pfd[1]);
    /* sealed: its size is fixed for its readers */
    CU_ASSERT_NOT_EQUAL(ftruncate(sb.fd, 4096), 0);
    snprintf(path, sizeof path, "%s", sb.path);
    tp_sb_destroy(&sb);
    CU_ASSERT_EQUAL(tp_sb_open(&v, path, (int32_t)getpid()), TP_ENOENT); /* gone */
    /* Private: the same counters, nowhere to be found. */
    setenv("TOOLPOOL_SCOREBOARD", "0", 1);
    CU_ASSERT_EQUAL_FATAL(tp_sb_create(&sb, 1, names, 1, true), 0);
    unsetenv("TOOLPOOL_SCOREBOARD");
    CU_ASSERT_STRING_EQUAL(sb.path, "");
    CU_ASSERT_EQUAL(sb.fd, -1);
    CU_ASSERT_TRUE(tp_sb_slot_take(&sb, 0, 1, 1, 1, "c", "j") >= 0);
    tp_sb_destroy(&sb);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("scoreboard", NULL, NULL);
    CU_add_test(s, "a forked writer's records are never read torn", test_no_torn_reads);
    CU_add_test(s, "slot records taken and given back", test_slots);
    CU_add_test(s, "boards gone, another's, not one, or private", test_open);
    return tp_test_run();
}
