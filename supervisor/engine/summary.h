/*
 * What a run did, for the summary on stderr and the progress bar: counts by
 * kind, retries, and a latency histogram (log-linear, about 6% precision,
 * fixed size: memory stays flat however many calls pass).
 */
#ifndef TP_SUMMARY_H
#define TP_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "taxonomy.h"
#include "toolpool.pb-c.h"

#define TP_HIST_SUB 16
#define TP_HIST_BUCKETS (TP_HIST_SUB + 60 * TP_HIST_SUB)

typedef struct {
    uint64_t calls;
    uint64_t ok;
    uint64_t attempts;
    uint64_t retries;
    uint64_t by_kind[TP_KIND__COUNT + 1]; /* TP_KIND_OTHER last */
    uint64_t hist[TP_HIST_BUCKETS];
    uint64_t max_us;
    uint64_t sum_us; /* every latency added, summed: a histogram's exact _sum */
    uint64_t timed;  /* latencies added (calls served from their records add none) */
} tp_summary_t;

void tp_summary_add(tp_summary_t *s, const Toolpool__Result *r);
/* What tp_summary_add counts of a call that ran, kept apart from its record (a staged answer's). */
typedef struct {
    tp_kind_t kind; /* TP_KIND_OK for an answer */
    uint32_t attempts;
    uint64_t duration_us;
} tp_summary_call_t;
tp_summary_call_t tp_summary_call_of(const Toolpool__Result *r);
void tp_summary_add_call(tp_summary_t *s, tp_summary_call_t c);
/*
 * A call answered from its record: counted with its outcome, but not its
 * attempts, retries or latency, which an earlier run spent.
 */
void tp_summary_add_served(tp_summary_t *s, const Toolpool__Result *r);
void tp_summary_add_latency(tp_summary_t *s, uint64_t us);
/* The q-quantile (0..1) of call durations, in microseconds. */
uint64_t tp_summary_quantile_us(const tp_summary_t *s, double q);
void tp_summary_print(FILE *f, const tp_summary_t *s, double elapsed_s);
/*
 * One progress line, drawn over the last ("\r"): done/total, failures,
 * calls running, calls/s and an ETA. total is the calls expected (exact
 * once the input is read, else estimated from the bytes read; < 0:
 * unknown, and then neither share nor ETA is shown).
 */
void tp_progress_draw(FILE *f, const tp_summary_t *s, double total, double elapsed_s, int running);
/* The same as a line of its own, "toolpool: progress: ...", for a log rather than a terminal. */
void tp_progress_line(FILE *f, const tp_summary_t *s, double total, double elapsed_s, int running);
/* The values (us) bucket idx of hist holds: [*lo, *hi). For a report in fixed bounds (/metrics). */
void tp_summary_bucket_range(unsigned idx, uint64_t *lo, uint64_t *hi);

#endif
