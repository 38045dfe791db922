#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"

/* An environment variable that holds a whole number, into *v: 1; 0 when it is not set; -1 when it is not a number. */
static int env_number(const char *name, unsigned long long *v)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return 0;
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return errno || *end || *s == '-' ? -1 : 1;
}

/* "K/N" at s: 0, or -1 when it is not two whole numbers with a '/' between. */
static int parse_pair(const char *s, unsigned long long *k, unsigned long long *n)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    *k = strtoull(s, &end, 10);
    if (errno || *end != '/' || end[1] < '0' || end[1] > '9')
        return -1;
    *n = strtoull(end + 1, &end, 10);
    return errno || *end ? -1 : 0;
}

/* Slurm's array task: its index from the array's first, and how many the array has. */
static int parse_slurm(unsigned long long *k, unsigned long long *n, char *err, size_t errlen)
{
    unsigned long long id = 0, min = 0, max = 0, step = 1, count = 0;
    int has_id = env_number("SLURM_ARRAY_TASK_ID", &id), has_min = env_number("SLURM_ARRAY_TASK_MIN", &min);
    int has_max = env_number("SLURM_ARRAY_TASK_MAX", &max), has_step = env_number("SLURM_ARRAY_TASK_STEP", &step);
    int has_count = env_number("SLURM_ARRAY_TASK_COUNT", &count);
    if (has_id < 0 || has_min < 0 || has_max < 0 || has_step < 0 || has_count < 0) {
        snprintf(err, errlen, "--shard slurm: a SLURM_ARRAY_TASK_* variable is not a whole number");
        return -1;
    }
    if (has_id == 0 || (has_count == 0 && has_max == 0)) {
        snprintf(err, errlen,
                 "--shard slurm: SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (or _MIN and _MAX) are not set: "
                 "run it as a task of a job array (sbatch --array=0-N), or give --shard K/N");
        return -1;
    }
    if (step == 0)
        step = 1;
    if (id < min || (id - min) % step != 0 || (has_max && max < min)) {
        snprintf(err, errlen, "--shard slurm: task %llu is not in the array %llu-%llu:%llu", id, min,
                 has_max ? max : min + (count ? count - 1 : 0) * step, step);
        return -1;
    }
    *k = (id - min) / step;
    *n = has_count ? count : (max - min) / step + 1;
    return 0;
}

int tp_shard_parse(const char *spec, tp_shard_t *out, char *err, size_t errlen)
{
    unsigned long long k = 0, n = 0;
    if (strcmp(spec, "slurm") == 0) {
        if (parse_slurm(&k, &n, err, errlen) < 0)
            return -1;
    } else if (strncmp(spec, "k8s/", 4) == 0) {
        char *end;
        errno = 0;
        n = spec[4] >= '0' && spec[4] <= '9' ? strtoull(spec + 4, &end, 10) : 0;
        if (n == 0 || errno || *end) {
            snprintf(err, errlen, "--shard %s: expected k8s/N, N the Job's completions (a whole number above 0)", spec);
            return -1;
        }
        int has = env_number("JOB_COMPLETION_INDEX", &k);
        if (has <= 0) {
            snprintf(err, errlen,
                     "--shard %s: JOB_COMPLETION_INDEX is %s: run it in a pod of an Indexed Job "
                     "(completionMode: Indexed), or give --shard K/N",
                     spec, has == 0 ? "not set" : "not a whole number");
            return -1;
        }
    } else if (parse_pair(spec, &k, &n) < 0) {
        snprintf(err, errlen, "--shard: expected K/N (K from 0), slurm or k8s/N, got \"%s\"", spec);
        return -1;
    }
    if (n == 0 || n > TP_SHARD_MAX) {
        snprintf(err, errlen, "--shard %s: %llu shards; between 1 and %u", spec, n, TP_SHARD_MAX);
        return -1;
    }
    if (k >= n) {
        snprintf(err, errlen, "--shard %s: shard %llu of %llu: shards count from 0, so K must be below N", spec, k, n);
        return -1;
    }
    out->index = (uint32_t)k;
    out->count = (uint32_t)n;
    return 0;
}

uint32_t tp_shard_of(const char *job, size_t len, uint32_t count)
{
    return count <= 1 ? 0 : (uint32_t)(XXH3_64bits(job, len) % count);
}

bool tp_shard_takes(const tp_shard_t *sh, tp_request_kind_t kind, const tp_request_t *rq, const tp_request_bad_t *bad)
{
    if (kind == TP_REQUEST_BLANK)
        return false;
    if (sh == NULL || sh->count <= 1)
        return true;
    const char *job = kind == TP_REQUEST_CALL ? (rq->job ? rq->job : rq->id) : bad->job;
    if (job == NULL)
        return sh->index == 0;
    return tp_shard_of(job, strlen(job), sh->count) == sh->index;
}

/* One line of the file at scan time: counted for every shard, and for sh when it is sh's. */
static void scan_line(tp_request_parser_t *p, const tp_shard_t *sh, const char *line, size_t len, size_t max_line,
                      tp_shard_input_t *out)
{
    if (len > max_line) {
        out->lines++;
        return;
    }
    tp_request_t rq;
    tp_request_bad_t bad;
    tp_request_kind_t kind = tp_request_parse_line(p, line, len, NULL, 0, &rq, &bad);
    if (kind == TP_REQUEST_BLANK)
        return;
    out->lines++;
    out->own += (kind == TP_REQUEST_CALL || bad.id) && tp_shard_takes(sh, kind, &rq, &bad);
}

int tp_shard_scan(int fd, const char *name, const tp_shard_t *sh, size_t max_line, tp_shard_input_t *out)
{
    memset(out, 0, sizeof *out);
    XXH3_state_t *h = XXH3_createState();
    size_t cap = 1 << 20, have = 0;
    char *buf = malloc(cap);
    tp_request_parser_t p = {0};
    int rc = -1;
    if (h == NULL || buf == NULL || XXH3_128bits_reset(h) == XXH_ERROR) {
        tp_log_error("shard.out_of_memory", "out of memory reading %s", name);
        goto out;
    }
    off_t at = 0;
    for (;;) {
        if (have == cap) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                tp_log_error("shard.out_of_memory", "out of memory reading %s", name);
                goto out;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t n = pread(fd, buf + have, cap - have, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            tp_log_error("shard.read_failed", "%s: %s", name, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        XXH3_128bits_update(h, buf + have, (size_t)n);
        at += n;
        have += (size_t)n;
        char *line = buf, *end = buf + have, *nl;
        while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            scan_line(&p, sh, line, (size_t)(nl - line), max_line, out);
            line = nl + 1;
        }
        have = (size_t)(end - line);
        memmove(buf, line, have);
    }
    if (have > 0)
        scan_line(&p, sh, buf, have, max_line, out);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    memcpy(out->digest, c.digest, sizeof out->digest);
    rc = 0;
out:
    tp_request_parser_free(&p);
    free(buf);
    XXH3_freeState(h);
    return rc;
}
