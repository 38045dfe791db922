#include "summary.h"

#include <string.h>

static unsigned bucket_of(uint64_t v)
{
    if (v < TP_HIST_SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 4 */
    unsigned sub = (unsigned)(v >> (e - 4)) & (TP_HIST_SUB - 1);
    unsigned idx = TP_HIST_SUB + (e - 4) * TP_HIST_SUB + sub;
    return idx < TP_HIST_BUCKETS ? idx : TP_HIST_BUCKETS - 1;
}

/* The middle of a bucket's range. */
static uint64_t bucket_value(unsigned idx)
{
    if (idx < TP_HIST_SUB)
        return idx;
    unsigned e = (idx - TP_HIST_SUB) / TP_HIST_SUB + 4;
    unsigned sub = (idx - TP_HIST_SUB) % TP_HIST_SUB;
    uint64_t lo = (1ull << e) | ((uint64_t)sub << (e - 4));
    return lo + (1ull << (e - 4)) / 2;
}

void tp_summary_add_latency(tp_summary_t *s, uint64_t us)
{
    s->hist[bucket_of(us)]++;
    s->sum_us += us;
    s->timed++;
    if (us > s->max_us)
        s->max_us = us;
}

static void count_outcome(tp_summary_t *s, tp_kind_t kind)
{
    s->calls++;
    s->ok += kind == TP_KIND_OK;
    s->by_kind[kind]++;
}

void tp_summary_add_served(tp_summary_t *s, const Toolpool__Result *r)
{
    count_outcome(s, tp_summary_call_of(r).kind);
}

void tp_summary_add(tp_summary_t *s, const Toolpool__Result *r)
{
    tp_summary_add_call(s, tp_summary_call_of(r));
}

tp_summary_call_t tp_summary_call_of(const Toolpool__Result *r)
{
    return (tp_summary_call_t){.kind = r->ok ? TP_KIND_OK : tp_kind_from_name(r->kind),
                               .attempts = r->attempts,
                               .duration_us = r->duration_us};
}

void tp_summary_add_call(tp_summary_t *s, tp_summary_call_t c)
{
    count_outcome(s, c.kind);
    s->attempts += c.attempts;
    if (c.attempts > 1)
        s->retries += c.attempts - 1;
    tp_summary_add_latency(s, c.duration_us);
}

uint64_t tp_summary_quantile_us(const tp_summary_t *s, double q)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < TP_HIST_BUCKETS; i++)
        total += s->hist[i];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(total - 1)) + 1, seen = 0;
    for (unsigned i = 0; i < TP_HIST_BUCKETS; i++) {
        seen += s->hist[i];
        if (seen >= rank) {
            uint64_t v = bucket_value(i);
            return v > s->max_us ? s->max_us : v;
        }
    }
    return s->max_us;
}

static void print_us(FILE *f, uint64_t us)
{
    if (us < 1000)
        fprintf(f, "%lluus", (unsigned long long)us);
    else if (us < 1000000)
        fprintf(f, "%.3gms", (double)us / 1e3);
    else
        fprintf(f, "%.3gs", (double)us / 1e6);
}

void tp_summary_print(FILE *f, const tp_summary_t *s, double elapsed_s)
{
    fprintf(f, "toolpool: %llu calls, %llu ok, %llu failed, %llu retries in %.2fs", (unsigned long long)s->calls,
            (unsigned long long)s->ok, (unsigned long long)(s->calls - s->ok), (unsigned long long)s->retries,
            elapsed_s);
    if (elapsed_s > 0)
        fprintf(f, " (%.0f calls/s)", (double)s->calls / elapsed_s);
    fputc('\n', f);
    if (s->calls > s->ok) {
        fputs("  by kind:", f);
        for (int k = TP_KIND_TIMEOUT; k <= TP_KIND_OTHER; k++)
            if (s->by_kind[k])
                fprintf(f, " %s %llu", k == TP_KIND_OTHER ? "other" : tp_kind_name((tp_kind_t)k),
                        (unsigned long long)s->by_kind[k]);
        fputc('\n', f);
    }
    if (s->timed > 0) {
        fputs("  latency: p50 ", f);
        print_us(f, tp_summary_quantile_us(s, 0.5));
        fputs(", p99 ", f);
        print_us(f, tp_summary_quantile_us(s, 0.99));
        fputs(", max ", f);
        print_us(f, s->max_us);
        fputc('\n', f);
    }
}

/* A duration for the ETA: "42s", "3m05s", "2h10m". */
static void eta_text(char *buf, size_t cap, double secs)
{
    unsigned long long t = (unsigned long long)(secs + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%llus", t);
    else if (t < 3600)
        snprintf(buf, cap, "%llum%02llus", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lluh%02llum", t / 3600, t / 60 % 60);
}

/* The progress line into buf (what tp_progress_draw prints after its "\r"). */
static void progress_format(char *buf, size_t cap, const tp_summary_t *s, double total, double elapsed_s, int running)
{
    char bar[31], eta[32] = "";
    int width = 30;
    double done = (double)s->calls, rate = elapsed_s > 0 ? done / elapsed_s : 0.0;
    if (total >= 0 && total < done)
        total = done;
    double fraction = total > 0 ? done / total : total == 0 ? 1 : 0;
    int full = (int)(fraction * width);
    memset(bar, '=', (size_t)full);
    memset(bar + full, ' ', (size_t)(width - full));
    if (full < width)
        bar[full] = '>';
    bar[width] = 0;
    if (total >= 0 && rate > 0 && total > done)
        eta_text(eta, sizeof eta, (total - done) / rate);
    else if (total >= 0 && total <= done)
        snprintf(eta, sizeof eta, "0s");
    if (total >= 0)
        snprintf(buf, cap, "[%s] %llu/%.0f  %llu failed, %d running, %.0f calls/s, ETA %s   ", bar,
                 (unsigned long long)s->calls, total, (unsigned long long)(s->calls - s->ok), running, rate,
                 eta[0] ? eta : "?");
    else
        snprintf(buf, cap, "%llu done, %llu failed, %d running, %.0f calls/s   ", (unsigned long long)s->calls,
                 (unsigned long long)(s->calls - s->ok), running, rate);
}

void tp_progress_draw(FILE *f, const tp_summary_t *s, double total, double elapsed_s, int running)
{
    char line[256];
    progress_format(line, sizeof line, s, total, elapsed_s, running);
    fprintf(f, "\r%s", line);
    fflush(f);
}

void tp_progress_line(FILE *f, const tp_summary_t *s, double total, double elapsed_s, int running)
{
    char line[256];
    progress_format(line, sizeof line, s, total, elapsed_s, running);
    /* the bar's figures without the bar, and without the padding that wipes a longer line */
    const char *at = line[0] == '[' && strchr(line, ']') ? strchr(line, ']') + 2 : line;
    size_t n = strlen(at);
    while (n > 0 && at[n - 1] == ' ')
        n--;
    fprintf(f, "toolpool: progress: %.*s (%.0fs)\n", (int)n, at, elapsed_s);
    fflush(f);
}

void tp_summary_bucket_range(unsigned idx, uint64_t *lo, uint64_t *hi)
{
    if (idx < TP_HIST_SUB) {
        *lo = idx;
        *hi = idx + 1u;
        return;
    }
    unsigned e = (idx - TP_HIST_SUB) / TP_HIST_SUB + 4;
    unsigned sub = (idx - TP_HIST_SUB) % TP_HIST_SUB;
    *lo = (1ull << e) | ((uint64_t)sub << (e - 4));
    /* The last bucket also holds everything past it (bucket_of). */
    *hi = idx == TP_HIST_BUCKETS - 1 ? UINT64_MAX : *lo + (1ull << (e - 4));
}
