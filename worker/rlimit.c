/* Resource limits for tools (rlimit.h). */
#include "rlimit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

tp_rlimit_t tp_rlimit_of(const Toolpool__Call *call)
{
    return (tp_rlimit_t){.memory = call->limit_memory, .cpu = call->limit_cpu, .files = call->limit_files};
}

bool tp_rlimit_any(const tp_rlimit_t *l)
{
    return l->memory || l->cpu || l->files;
}

/*
 * Sets soft and hard to at most soft and hard, keeping a tighter limit the
 * process has already. 0, or setrlimit's -errno.
 */
static int set_at_most(int resource, rlim_t soft, rlim_t hard)
{
    struct rlimit now, r = {.rlim_cur = soft, .rlim_max = hard};
    if (getrlimit(resource, &now) == 0 && now.rlim_max != RLIM_INFINITY && now.rlim_max < r.rlim_max) {
        r.rlim_max = now.rlim_max;
        if (r.rlim_cur > r.rlim_max)
            r.rlim_cur = r.rlim_max;
    }
    return setrlimit(resource, &r) < 0 ? tp_errno(errno) : 0;
}

int tp_rlimit_apply(const tp_rlimit_t *l)
{
    int rc = 0;
    if (l->memory && (rc = set_at_most(RLIMIT_AS, l->memory, l->memory)) < 0)
        return rc;
    /*
     * The hard cpu limit a second past the soft one: SIGXCPU first, which
     * names the cause (at soft == hard the kernel sends SIGKILL alone).
     */
    if (l->cpu && (rc = set_at_most(RLIMIT_CPU, l->cpu, (rlim_t)l->cpu + 1)) < 0)
        return rc;
    if (l->files && (rc = set_at_most(RLIMIT_NOFILE, l->files, l->files)) < 0)
        return rc;
    return 0;
}

/* The soft limit lowered to want, never raised (a tighter one stays); the old one saved. */
static void lower(int resource, rlim_t want, struct rlimit *saved)
{
    if (getrlimit(resource, saved) < 0) {
        saved->rlim_cur = saved->rlim_max = RLIM_INFINITY;
        return;
    }
    if (saved->rlim_cur != RLIM_INFINITY && want >= saved->rlim_cur)
        return;
    struct rlimit r = {.rlim_cur = want, .rlim_max = saved->rlim_max};
    setrlimit(resource, &r);
}

void tp_rlimit_enter(const tp_rlimit_t *l, tp_rlimit_saved_t *saved)
{
    if (l->memory)
        lower(RLIMIT_AS, l->memory, &saved->as);
    if (l->cpu) {
        /*
         * RLIMIT_CPU counts the whole process's time in whole seconds: the
         * call gets its budget on top of what the worker has used, rounded
         * up, so between cpu and cpu + 1 seconds.
         */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        uint64_t used_us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
                           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
        lower(RLIMIT_CPU, (rlim_t)((used_us + 999999u) / 1000000u + l->cpu), &saved->cpu);
    }
    if (l->files)
        lower(RLIMIT_NOFILE, l->files, &saved->nofile);
}

void tp_rlimit_leave(const tp_rlimit_t *l, const tp_rlimit_saved_t *saved)
{
    if (l->memory)
        setrlimit(RLIMIT_AS, &saved->as);
    if (l->cpu)
        setrlimit(RLIMIT_CPU, &saved->cpu);
    if (l->files)
        setrlimit(RLIMIT_NOFILE, &saved->nofile);
}

const char *tp_rlimit_size(char *buf, size_t cap, uint64_t bytes)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        uint64_t u = 1ull << (10 * (4 - i));
        if (bytes >= u && bytes % u == 0) {
            snprintf(buf, cap, "%llu%c", (unsigned long long)(bytes / u), units[i]);
            return buf;
        }
    }
    snprintf(buf, cap, "%llu", (unsigned long long)bytes);
    return buf;
}

/* Whether any of the phrases occurs in text[0..n), case ignored. */
static bool says(const char *text, size_t n, const char *const *phrases)
{
    for (const char *const *p = phrases; *p; p++) {
        size_t k = strlen(*p);
        for (size_t i = 0; i + k <= n; i++)
            if (strncasecmp(text + i, *p, k) == 0)
                return true;
    }
    return false;
}

bool tp_rlimit_says_oom(const char *text, size_t n)
{
    /* clang-format off */
    static const char *const phrases[] = {
        "MemoryError",        "Cannot allocate memory",
        "out of memory",      "cannot allocate",
        "failed to allocate", "memory allocation of",
        "allocation failed",  "bad_alloc",
        "OutOfMemoryError",   NULL,
    };
    /* clang-format on */
    return says(text, n, phrases);
}

bool tp_rlimit_says_emfile(const char *text, size_t n)
{
    static const char *const phrases[] = {"Too many open files", NULL};
    return says(text, n, phrases);
}
