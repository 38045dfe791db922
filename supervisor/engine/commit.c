#include "commit.h"

void tp_commit_begin(tp_commit_t *c, uint64_t now, uint64_t results)
{
    c->since_us = now;
    c->results_at = results;
}

void tp_commit_took(tp_commit_t *c, uint64_t us)
{
    c->took_us = c->took_us * 0.8 + (double)us * 0.2;
}

uint64_t tp_commit_window_us(const tp_commit_t *c)
{
    double w = c->took_us * TP_COMMIT_SPAN;
    return (uint64_t)(w < TP_COMMIT_WINDOW_MIN_US   ? TP_COMMIT_WINDOW_MIN_US
                      : w > TP_COMMIT_WINDOW_MAX_US ? TP_COMMIT_WINDOW_MAX_US
                                                    : w);
}

bool tp_commit_backlog(bool queued, uint64_t waited_us, double took_us)
{
    return queued || (double)waited_us * 2 < took_us;
}

bool tp_commit_due(const tp_commit_t *c, uint64_t now, uint64_t results, int busy, bool backlog, bool urgent)
{
    return urgent || busy == 0 || (!backlog && results > c->results_at) ||
           results - c->results_at >= TP_COMMIT_RESULTS || now - c->since_us >= tp_commit_window_us(c);
}

/*
 * The loop sits in a commit's fsync for a while; a deadline the loop keeps
 * itself (tp_pool_next_deadline: a kill_grace's TERM) that falls in it
 * would be kept late. A commit that is due but not urgent waits for such
 * a deadline (for at most TP_COMMIT_WINDOW_MAX_US beyond its window).
 */
uint64_t tp_commit_hold_us(uint64_t now, uint64_t deadline, uint64_t since, uint64_t window, double commit_us)
{
    double span = 2 * commit_us + TP_COMMIT_DEADLINE_MARGIN_US;
    if (span > TP_COMMIT_WINDOW_MAX_US)
        span = TP_COMMIT_WINDOW_MAX_US;
    uint64_t limit = since + window + (uint64_t)TP_COMMIT_WINDOW_MAX_US;
    /* No deadline near; or one long past (its timer is about to fire); or held long enough. */
    if (deadline == 0 || (double)deadline > (double)now + span || deadline + TP_COMMIT_DEADLINE_PAST_US < now ||
        now >= limit)
        return 0;
    uint64_t hold = (deadline > now ? deadline - now : 0) + 50;
    return hold < limit - now ? hold : limit - now;
}

uint64_t tp_commit_hold(const tp_commit_t *c, uint64_t now, uint64_t results, uint64_t deadline, bool urgent)
{
    if (urgent || results - c->results_at >= TP_COMMIT_RESULTS)
        return 0;
    return tp_commit_hold_us(now, deadline, c->since_us, tp_commit_window_us(c), c->took_us);
}
