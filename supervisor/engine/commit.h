/*
 * Group commit: when the engine's write transaction commits.
 *
 * One write transaction stays open across loop turns while attempts run,
 * for at most a window or TP_COMMIT_RESULTS results; one fsync then covers
 * every result in it, and no result is reported before it. Pure functions
 * of the clock and a little state, so the policy is read and tested in one
 * place.
 */
#ifndef TP_COMMIT_H
#define TP_COMMIT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The loop waits out each commit, so the window is TP_COMMIT_SPAN times
 * what commits take (their average), within its bounds: the loop spends a
 * ninth of its time in them at most. A longer window also makes each
 * commit cheaper per result (the same two flushes, and the B-tree's upper
 * pages rewritten once for more results): 100,000 no-op calls took 15-20%
 * less time with 8 and 20 ms than with 4 and 10 ms. The cost is that a
 * result may wait up to 20 ms (up to 20 ms more when a deadline the loop
 * keeps holds the commit back), and a crash of the supervisor may lose (and
 * a rerun redo) up to 20 ms of idempotent calls; a call of a tool that is
 * not idempotent commits at once.
 *
 * The count bounds the memory a window holds (its answers and the store's
 * dirty pages: up to a page a result once the results' tree is larger than
 * a commit), whatever the pace. Since a call's answer is a held line, not
 * the call (staged answers), a commit of 4,096 no-op results costs less per
 * result than one of 1,024, where the count, not the window, ended most
 * commits: 200,000 no-op durable calls at -j 2 ran 0.85x the wall time
 * (bench/compare, nine rounds), for a peak RSS through 1,000,000 calls of
 * 18.9 MiB against 13.8 MiB.
 */
#define TP_COMMIT_WINDOW_MIN_US 2000.0
#define TP_COMMIT_WINDOW_MAX_US 20000.0
#define TP_COMMIT_SPAN 8.0
#define TP_COMMIT_RESULTS 4096u
/*
 * And by bytes: a window whose answers (the result lines, results and all)
 * hold this much commits at once, so large results do not multiply by the
 * count above. 2 MiB, not 4: with 1 KB args the larger window left more of
 * a commit's records and dirty pages out of cache (1.13x the CPU a call,
 * 4,096 results); at 100 KB and 1 MB the smaller one ran no slower and
 * peaked 6-11 MiB lower.
 */
#define TP_COMMIT_BYTES ((size_t)2 << 20)
/* Room left between a commit's expected end and an attempt's deadline. */
#define TP_COMMIT_DEADLINE_MARGIN_US 500u
/* A deadline this far behind has been kept, or its timer is late anyway. */
#define TP_COMMIT_DEADLINE_PAST_US 1000u

typedef struct {
    uint64_t since_us;   /* when the open transaction began */
    uint64_t results_at; /* the results count when it began */
    double took_us;      /* what commits take, on average */
} tp_commit_t;

/* The open transaction begins now, with results counted so far. */
void tp_commit_begin(tp_commit_t *c, uint64_t now, uint64_t results);
/* A commit took us: the average follows. */
void tp_commit_took(tp_commit_t *c, uint64_t us);
/* How long the window stays open. */
uint64_t tp_commit_window_us(const tp_commit_t *c);
/*
 * Whether the open transaction should commit at the end of this turn: it
 * is urgent (an attempt waits for its in-flight marker, a call of a tool
 * that is not idempotent has ended, the engine is stopping), nothing is
 * running that could add to it, results wait and nothing says to hold
 * them (backlog false, tp_commit_backlog: whoever sent the running calls
 * waits on these answers, and the window would only delay them: serve with
 * a 20 ms http tool and 64 clients, p50 about 26 to 22 ms), enough results
 * wait, or the window has closed.
 */
bool tp_commit_due(const tp_commit_t *c, uint64_t now, uint64_t results, int busy, bool backlog, bool urgent);
/*
 * The backlog tp_commit_due asks about: calls queued behind the running
 * ones (queued: waiting for a slot, a tool's cap or rate, the step before
 * them in their job, or a front that could not hand them over yet: more
 * results are coming, and the window gathers them), or a loop kept busy
 * (it spent under half a commit's time, took_us, between the last turn and
 * this one, waited_us: a commit now would take its time from the calls it
 * serves, where the window shares it out).
 */
bool tp_commit_backlog(bool queued, uint64_t waited_us, double took_us);
/*
 * How long a commit that is due may wait for deadline (the soonest one the
 * loop keeps itself, 0: none), so the loop is not in an fsync when it
 * comes; 0: commit now. Urgent commits and full windows never wait.
 */
uint64_t tp_commit_hold(const tp_commit_t *c, uint64_t now, uint64_t results, uint64_t deadline, bool urgent);

/*
 * The rule under tp_commit_hold: until just past a deadline due within
 * twice the average commit (commit_us) plus a margin, but never past the
 * transaction's start (since) plus its window plus 20 ms. deadline 0: none.
 * Times in tp_now_us().
 */
uint64_t tp_commit_hold_us(uint64_t now, uint64_t deadline, uint64_t since, uint64_t window, double commit_us);

#endif
