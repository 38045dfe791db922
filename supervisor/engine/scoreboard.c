#include "scoreboard.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "registry.h"
#include "store.h"

_Static_assert(TP_SB_TOOL_NAME > TP_TOOL_NAME_MAX, "a tool's name is whole on the board");

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* src into dst (cap bytes, NUL included), cut where a UTF-8 character begins, so the cut name is still text. */
static void copy_name(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src ? src : "", n);
    dst[n] = 0;
}

/*
 * The segment's layout: the header, then the slot records, then the tool
 * records, each part on a cache line of its own. A board of 64 slots and
 * 10 tools is about 100 kB, most of it the tools' histograms, whose pages
 * the kernel gives only once they are written.
 */
int tp_sb_create(tp_scoreboard_t *sb, uint32_t n_slots, const char *const *names, uint32_t n, bool publish)
{
    memset(sb, 0, sizeof *sb);
    sb->fd = -1;
    size_t slots_off = align_up(sizeof(tp_sb_header_t), 64);
    size_t tools_off = align_up(slots_off + (size_t)n_slots * sizeof(tp_sb_slot_t), 64);
    size_t size = align_up(tools_off + (size_t)n * sizeof(tp_sb_tool_t), 4096);
    const char *env = getenv("TOOLPOOL_SCOREBOARD");
    if (env && strcmp(env, "0") == 0)
        publish = false;
    void *base = MAP_FAILED;
    if (publish) {
        int fd = memfd_create("toolpool-scoreboard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        /* sealed at its size: no process that opens it through /proc can shrink it under its readers */
        if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0 &&
            (base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED) {
            sb->fd = fd;
            snprintf(sb->path, sizeof sb->path, "/proc/%d/fd/%d", (int)getpid(), fd);
        } else {
            tp_log_warn("engine.no_scoreboard", "no scoreboard for toolpool top and metrics: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
        }
    }
    if (base == MAP_FAILED) /* private: the engine counts here all the same */
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return TP_ENOMEM;
    sb->base = base;
    sb->size = size;
    sb->free = malloc((n_slots ? n_slots : 1) * sizeof *sb->free);
    if (sb->free == NULL) {
        tp_sb_destroy(sb);
        return TP_ENOMEM;
    }
    for (uint32_t i = 0; i < n_slots; i++)
        sb->free[i] = n_slots - 1 - i; /* the first record is taken first */
    sb->n_free = n_slots;
    tp_sb_header_t *h = base;
    h->version = TP_SB_VERSION;
    h->n_slots = n_slots;
    h->n_tools = n;
    h->pid = (int32_t)getpid();
    h->size = size;
    h->slots_off = slots_off;
    h->tools_off = tools_off;
    h->started_unix_us = tp_unix_us();
    h->started_mono_us = tp_now_us();
    tp_sb_tool_t *t = tp_sb_tools(sb);
    for (uint32_t i = 0; i < n; i++)
        copy_name(t[i].name, sizeof t[i].name, names[i]);
    /* The magic last: a reader that maps a board still being made takes it for none. */
    atomic_thread_fence(memory_order_release);
    h->magic = TP_SB_MAGIC;
    return 0;
}

void tp_sb_destroy(tp_scoreboard_t *sb)
{
    if (sb->base)
        munmap(sb->base, sb->size);
    if (sb->fd >= 0)
        close(sb->fd);
    free(sb->free);
    memset(sb, 0, sizeof *sb);
    sb->fd = -1;
}

int tp_sb_slot_take(tp_scoreboard_t *sb, uint32_t tool, uint32_t attempt, uint64_t started_us, uint64_t timeout_us,
                    const char *call_id, const char *job)
{
    if (sb->n_free == 0) {
        tp_sb_header_t *h = tp_sb_header(sb);
        tp_sb_write_begin(&h->gen);
        h->c.unshown++;
        tp_sb_write_end(&h->gen);
        return -1;
    }
    uint32_t i = sb->free[--sb->n_free];
    tp_sb_slot_t *s = &tp_sb_slots(sb)[i];
    tp_sb_write_begin(&s->gen);
    s->state = TP_SB_BUSY;
    s->tool = tool;
    s->attempt = attempt;
    s->started_us = started_us;
    s->timeout_us = timeout_us;
    copy_name(s->call_id, sizeof s->call_id, call_id);
    copy_name(s->job, sizeof s->job, job);
    tp_sb_write_end(&s->gen);
    return (int)i;
}

void tp_sb_slot_restart(tp_scoreboard_t *sb, int i, uint64_t started_us, uint64_t timeout_us)
{
    if (i < 0)
        return;
    tp_sb_slot_t *s = &tp_sb_slots(sb)[i];
    tp_sb_write_begin(&s->gen);
    s->started_us = started_us;
    s->timeout_us = timeout_us;
    tp_sb_write_end(&s->gen);
}

void tp_sb_slot_give(tp_scoreboard_t *sb, int i)
{
    if (i < 0) {
        tp_sb_header_t *h = tp_sb_header(sb);
        tp_sb_write_begin(&h->gen);
        h->c.unshown--;
        tp_sb_write_end(&h->gen);
        return;
    }
    tp_sb_slot_t *s = &tp_sb_slots(sb)[i];
    tp_sb_write_begin(&s->gen);
    s->state = TP_SB_IDLE;
    tp_sb_write_end(&s->gen);
    sb->free[sb->n_free++] = (uint32_t)i;
}

/*
 * A seqlock's read, after Boehm ("Can seqlocks get along with programming
 * language memory models?", 2012): the acquire load of gen orders the
 * copy after it, the acquire fence orders the second load after the copy.
 * A writer holds a record for a few stores, so a reader that finds it odd
 * yields and tries again; past 10,000 tries it gives up.
 */
bool tp_sb_read(const _Atomic uint64_t *gen, void *dst, const void *src, size_t len)
{
    for (int tries = 0; tries < 10000; tries++) {
        uint64_t g1 = atomic_load_explicit((_Atomic uint64_t *)gen, memory_order_acquire);
        if (g1 & 1) {
            if (tries > 100)
                sched_yield();
            continue;
        }
        memcpy(dst, src, len);
        atomic_thread_fence(memory_order_acquire);
        uint64_t g2 = atomic_load_explicit((_Atomic uint64_t *)gen, memory_order_relaxed);
        if (g1 == g2)
            return true;
    }
    return false;
}

int tp_sb_open(tp_sb_view_t *v, const char *path, int32_t pid)
{
    memset(v, 0, sizeof *v);
    /* Only the owner's own descriptor, as tp_sb_create names it: nothing else the store may say is opened. */
    char want[TP_SB_PATH];
    int n = snprintf(want, sizeof want, "/proc/%d/fd/", (int)pid);
    if (n < 0 || strncmp(path, want, (size_t)n) != 0 || path[n] == 0 ||
        strspn(path + n, "0123456789") != strlen(path + n))
        return TP_EPROTO;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return errno == ENOENT ? TP_ENOENT : tp_errno(errno);
    struct stat st;
    off_t end = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    if (end < (off_t)sizeof(tp_sb_header_t)) {
        close(fd);
        return TP_EPROTO;
    }
    void *base = mmap(NULL, (size_t)end, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return tp_errno(errno);
    const tp_sb_header_t *h = base;
    if (h->magic != TP_SB_MAGIC || h->version != TP_SB_VERSION || h->pid != pid || h->size != (uint64_t)end) {
        munmap(base, (size_t)end);
        return TP_EPROTO;
    }
    v->base = base;
    v->size = (size_t)end;
    return 0;
}

void tp_sb_close(tp_sb_view_t *v)
{
    if (v->base)
        munmap((void *)v->base, v->size);
    memset(v, 0, sizeof *v);
}

int tp_sb_snapshot(const void *base, size_t size, tp_sb_snap_t *out)
{
    memset(out, 0, sizeof *out);
    const tp_sb_header_t *h = base;
    if (size < sizeof *h || h->magic != TP_SB_MAGIC)
        return TP_EPROTO;
    /* The geometry read once, and checked before any of it is used: the segment is another process's. */
    uint64_t slots_off = h->slots_off, tools_off = h->tools_off;
    uint32_t n_slots = h->n_slots, n_tools = h->n_tools;
    if (slots_off < sizeof *h || slots_off % 64 || slots_off > size ||
        n_slots > (size - slots_off) / sizeof(tp_sb_slot_t) || tools_off < sizeof *h || tools_off % 64 ||
        tools_off > size || n_tools > (size - tools_off) / sizeof(tp_sb_tool_t))
        return TP_EPROTO;
    out->pid = h->pid;
    out->started_unix_us = h->started_unix_us;
    out->started_mono_us = h->started_mono_us;
    out->n_slots = n_slots;
    out->n_tools = n_tools;
    /* The counters and the commit latency: one record. */
    struct {
        tp_sb_counts_t c;
        tp_summary_t commit_latency;
    } hc;
    _Static_assert(offsetof(tp_sb_header_t, commit_latency) - offsetof(tp_sb_header_t, c) ==
                       offsetof(__typeof__(hc), commit_latency),
                   "the header's counters and latency are copied as one");
    if (!tp_sb_read(&h->gen, &hc, &h->c, sizeof hc))
        return TP_EAGAIN;
    out->c = hc.c;
    out->c.command[TP_SB_COMMAND - 1] = 0;
    out->commit_latency = hc.commit_latency;
    out->slots = calloc(n_slots ? n_slots : 1, sizeof *out->slots);
    out->tools = calloc(n_tools ? n_tools : 1, sizeof *out->tools);
    if (out->slots == NULL || out->tools == NULL) {
        tp_sb_snap_free(out);
        return TP_ENOMEM;
    }
    const tp_sb_slot_t *slots = (const tp_sb_slot_t *)((const char *)base + slots_off);
    for (uint32_t i = 0; i < n_slots; i++) {
        tp_sb_slot_t *s = &out->slots[out->n_busy];
        if (!tp_sb_read(&slots[i].gen, s, &slots[i], sizeof *s) || s->state != TP_SB_BUSY || s->tool >= n_tools)
            continue;
        s->call_id[TP_SB_NAME - 1] = 0;
        s->job[TP_SB_NAME - 1] = 0;
        s->slot_pad = i; /* which record it was */
        out->n_busy++;
    }
    const tp_sb_tool_t *tools = (const tp_sb_tool_t *)((const char *)base + tools_off);
    for (uint32_t i = 0; i < n_tools; i++) {
        tp_sb_tool_t *t = &out->tools[i];
        memcpy(t->name, tools[i].name, TP_SB_TOOL_NAME);
        t->name[TP_SB_TOOL_NAME - 1] = 0;
        atomic_store_explicit(&t->in_flight, atomic_load_explicit(&tools[i].in_flight, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&t->held, atomic_load_explicit(&tools[i].held, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&t->timeouts, atomic_load_explicit(&tools[i].timeouts, memory_order_relaxed),
                              memory_order_relaxed);
        if (!tp_sb_read(&tools[i].gen, &t->sum, &tools[i].sum, sizeof t->sum)) {
            /* not zeros (a counter that went back would read as a reset): no snapshot this time */
            tp_sb_snap_free(out);
            return TP_EAGAIN;
        }
    }
    return 0;
}

void tp_sb_snap_free(tp_sb_snap_t *s)
{
    free(s->slots);
    free(s->tools);
    memset(s, 0, sizeof *s);
}
