/*
 * run --ordered: a calls file read once for each call's (id, job, step),
 * then handed to the run as a copy in which every job's steps come
 * together and in step order (jobs in the order of their first line), so
 * each job runs strictly in step order however the file was written.
 *
 * The copy is an unlinked temporary file (in $TMPDIR, else /tmp); the map
 * it returns gives, for each of its lines, the line of the user's file, so
 * that messages name the line the user wrote.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "array.h"
#include "cli.h"
#include "json.h"
#include "log.h"

typedef struct {
    char *job; /* the job's name (the id when it has none); NULL: not a call */
    unsigned long long step;
    long line;  /* 1-based, in the user's file */
    long first; /* the line on which its job first appears */
    off_t at;
    size_t len;
} entry_t;

static int by_job_step(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* A small open-addressing map from job name to the line it first appears on. */
typedef struct {
    const char **keys;
    long *first;
    size_t mask;
} firsts_t;

static unsigned long long hash(const char *s)
{
    unsigned long long h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static long first_line(firsts_t *m, const char *job, long line)
{
    size_t i = (size_t)hash(job) & m->mask;
    while (m->keys[i] && strcmp(m->keys[i], job) != 0)
        i = (i + 1) & m->mask;
    if (m->keys[i] == NULL) {
        m->keys[i] = job;
        m->first[i] = line;
    }
    return m->first[i];
}

int tp_order_input(int fd, const char *name, int *out_fd, long **line_map, size_t *n_map)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || lseek(fd, 0, SEEK_SET) < 0) {
        tp_log_error("run.ordered_input",
                     "--ordered: %s is not a file that can be read twice (a pipe or standard input cannot)", name);
        return -1;
    }
    int dup_fd = dup(fd);
    FILE *in = dup_fd >= 0 ? fdopen(dup_fd, "r") : NULL;
    if (in == NULL) {
        if (dup_fd >= 0)
            close(dup_fd);
        tp_log_error("cli.open_failed", "%s: %s", name, strerror(errno));
        return -1;
    }
    entry_t *v = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    off_t at = 0;
    int rc = -1;
    while ((len = getline(&line, &lcap, in)) > 0) {
        if (tp_array_fit(&v, &cap, n + 1, sizeof *v, 1024) < 0)
            goto oom;
        entry_t *e = &v[n];
        memset(e, 0, sizeof *e);
        e->line = (long)n + 1;
        e->at = at;
        e->len = (size_t)len;
        at += len;
        n++;
        json_t *c = tp_json_loadb(line, (size_t)len, 0, NULL);
        /* A job defaults to the call's id: a Responses function_call item's is its call_id (request.c). */
        const char *job = json_string_value(json_object_get(c, "job"));
        const char *type = json_string_value(json_object_get(c, "type"));
        if (job == NULL && type && strcmp(type, "function_call") == 0)
            job = json_string_value(json_object_get(c, "call_id"));
        if (job == NULL)
            job = json_string_value(json_object_get(c, "id"));
        if (job && (e->job = strdup(job)) == NULL) {
            json_decref(c);
            goto oom;
        }
        json_int_t step = json_integer_value(json_object_get(c, "step"));
        e->step = step > 0 ? (unsigned long long)step : 0;
        json_decref(c);
    }
    if (ferror(in)) {
        tp_log_error("cli.read_failed", "%s: %s", name, strerror(errno));
        goto out;
    }
    size_t slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    firsts_t m = {calloc(slots, sizeof *m.keys), calloc(slots, sizeof *m.first), slots - 1};
    if (m.keys == NULL || m.first == NULL) {
        free(m.keys);
        free(m.first);
        goto oom;
    }
    /* A line that is not a call keeps its place: a job of its own, first seen there. */
    for (size_t i = 0; i < n; i++)
        v[i].first = v[i].job ? first_line(&m, v[i].job, v[i].line) : v[i].line;
    free(m.keys);
    free(m.first);
    if (n > 1)
        qsort(v, n, sizeof *v, by_job_step);
    const char *dir = getenv("TMPDIR");
    int out = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (out < 0) {
        tp_log_error("run.ordered_tmp_failed", "--ordered: cannot make a temporary file in %s: %s",
                     dir && *dir ? dir : "/tmp", strerror(errno));
        goto out;
    }
    long *map = malloc((n ? n : 1) * sizeof *map);
    if (map == NULL) {
        close(out);
        goto oom;
    }
    for (size_t i = 0; i < n; i++) {
        map[i] = v[i].line;
        if (v[i].len > lcap) {
            char *grown = realloc(line, v[i].len);
            if (grown == NULL) {
                free(map);
                close(out);
                goto oom;
            }
            line = grown;
            lcap = v[i].len;
        }
        ssize_t r = pread(fileno(in), line, v[i].len, v[i].at);
        bool last_unterminated = r > 0 && line[r - 1] != '\n';
        if (r != (ssize_t)v[i].len || write(out, line, (size_t)r) != r ||
            (last_unterminated && write(out, "\n", 1) != 1)) {
            tp_log_error("run.ordered_copy_failed", "--ordered: copying %s: %s", name, strerror(errno ? errno : EIO));
            free(map);
            close(out);
            goto out;
        }
    }
    if (lseek(out, 0, SEEK_SET) < 0) {
        free(map);
        close(out);
        goto out;
    }
    *out_fd = out;
    *line_map = map;
    *n_map = n;
    rc = 0;
    goto out;
oom:
    tp_log_error("cli.out_of_memory", "out of memory ordering %s", name);
out:
    for (size_t i = 0; i < n; i++)
        free(v[i].job);
    free(v);
    free(line);
    fclose(in);
    return rc;
}
