#include "jobs.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "call_internal.h"

int tp_jobs_init(tp_jobs_t *t)
{
    t->cap = 1024;
    t->n = 0;
    t->slots = calloc(t->cap, sizeof *t->slots);
    return t->slots ? 0 : -1;
}

void tp_jobs_free(tp_jobs_t *t)
{
    for (size_t k = 0; t->slots && k < t->cap; k++)
        for (tp_job_t *j = t->slots[k], *nx; j; j = nx) {
            nx = j->hnext;
            free(j->stop_msg);
            free(j);
        }
    free(t->slots);
    t->slots = NULL;
}

static tp_job_t *find(const tp_jobs_t *t, const char *name, size_t len, uint64_t h)
{
    for (tp_job_t *j = t->slots[h & (t->cap - 1)]; j; j = j->hnext)
        if (j->hash == h && strncmp(j->name, name, len) == 0 && j->name[len] == 0)
            return j;
    return NULL;
}

/* Doubles the table (load factor 1). -1 out of memory. */
static int grow(tp_jobs_t *t)
{
    size_t cap = t->cap * 2;
    tp_job_t **s = calloc(cap, sizeof *s);
    if (s == NULL)
        return -1;
    for (size_t k = 0; k < t->cap; k++)
        for (tp_job_t *j = t->slots[k], *nx; j; j = nx) {
            nx = j->hnext;
            j->hnext = s[j->hash & (cap - 1)];
            s[j->hash & (cap - 1)] = j;
        }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

tp_job_t *tp_jobs_get(tp_jobs_t *t, const char *name, size_t len, bool *created)
{
    uint64_t h = XXH3_64bits(name, len);
    *created = false;
    tp_job_t *j = find(t, name, len, h);
    if (j)
        return j;
    if (t->n + 1 > t->cap && grow(t) < 0)
        return NULL;
    /* malloc, not calloc: glibc's calloc skips the thread cache, and a job comes and goes with nearly every call */
    j = malloc(sizeof *j + len + 1);
    if (j == NULL)
        return NULL;
    memset(j, 0, sizeof *j);
    memcpy(j->name, name, len);
    j->name[len] = 0;
    j->hash = h;
    size_t i = h & (t->cap - 1);
    j->hnext = t->slots[i];
    t->slots[i] = j;
    t->n++;
    *created = true;
    return j;
}

void tp_jobs_drop(tp_jobs_t *t, tp_job_t *j)
{
    tp_job_t **pp = &t->slots[j->hash & (t->cap - 1)];
    while (*pp != j)
        pp = &(*pp)->hnext;
    *pp = j->hnext;
    t->n--;
    free(j->stop_msg);
    free(j);
}

bool tp_job_idle(const tp_job_t *j)
{
    return !j->running && j->pending.head == NULL;
}

void tp_job_add(tp_job_t *j, tp_call_t *c)
{
    tp_queue_t *q = &j->pending;
    c->job = j;
    if (q->tail == NULL || q->tail->step <= c->step) {
        tp_queue_push(q, c);
        return;
    }
    tp_call_t **pp = &q->head;
    while ((*pp)->step <= c->step)
        pp = &(*pp)->next;
    c->next = *pp;
    *pp = c;
}

bool tp_job_remove(tp_job_t *j, tp_call_t *c)
{
    return tp_queue_remove(&j->pending, c);
}

tp_call_t *tp_job_next(tp_job_t *j)
{
    if (j->running || j->pending.head == NULL)
        return NULL;
    tp_call_t *c = tp_queue_pop(&j->pending);
    if (c->step > j->max_step)
        j->max_step = c->step;
    j->running = true;
    c->current = true;
    return c;
}
