/*
 * Killing a process's descendants through /proc (proctree.h). Only system
 * calls, on the caller's scratch: a worker calls this from its SIGTERM
 * handler when its supervisor is gone.
 */
#include "proctree.h"
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Passes before giving up on a tree that keeps growing (each pass kills all it sees). */
#define PASSES_MAX 64

/* getdents64's record. */
struct dent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* "123" -> 123; 0 for anything that is not a positive decimal pid. */
static pid_t parse_pid(const char *s)
{
    long v = 0;
    if (*s == '\0')
        return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 0x3fffffff)
            return 0;
        v = v * 10 + (*s - '0');
    }
    return (pid_t)v;
}

/* A /proc directory read one buffer of entries at a time: /proc itself, or a process's task/. */
typedef struct {
    int fd;
    char *buf;
    size_t cap;
    long len, off;
} pid_dir_t;

/* The next entry of dir that names a pid (a process, or a thread), or 0 at the end. */
static pid_t pid_dir_next(pid_dir_t *dir)
{
    for (;;) {
        while (dir->off < dir->len) {
            const struct dent64 *e = (const struct dent64 *)(const void *)(dir->buf + dir->off);
            dir->off += e->reclen;
            pid_t pid = parse_pid(e->name);
            if (pid > 0)
                return pid;
        }
        dir->len = syscall(SYS_getdents64, dir->fd, dir->buf, dir->cap);
        dir->off = 0;
        if (dir->len <= 0)
            return 0;
    }
}


static tp_proctree_ent_t *find(tp_proctree_t *t, pid_t pid)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->ents[i].pid == pid)
            return &t->ents[i];
    return NULL;
}

/*
 * SIGKILL to pid, which was read as the process started at start. Through
 * a pidfd, opened first and the process checked again after: if pid now
 * names another process, nothing is sent. Without pidfds (before Linux
 * 5.3), a plain kill: the window is a few microseconds, and a pid is only
 * reused after the kernel has handed out every other one.
 */
static void kill_one(int procfd, pid_t pid, uint64_t start)
{
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        tp_proc_stat_t again;
        if (tp_proc_stat(procfd, pid, &again) == 0 && again.start == start)
            syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
        close(pfd);
        return;
    }
    if (errno != ENOSYS)
        return; /* gone already */
#else
    (void)procfd;
    (void)start;
#endif
    kill(pid, SIGKILL);
}

/*
 * The children of every thread of pid, from /proc/PID/task/TID/children
 * (Linux 3.5, CONFIG_PROC_CHILDREN), appended to kids (at most cap in all,
 * *n so far). 0; TP_E2BIG when they did not all fit; the -errno of opening
 * its task/ when pid is gone.
 */
static int read_children(int procfd, pid_t pid, tp_proctree_t *t, pid_t *kids, size_t cap, size_t *n)
{
    char path[48];
    tp_proc_path(path, pid, "/task");
    int tfd = openat(procfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0)
        return tp_errno(errno);
    int rc = 0;
    pid_dir_t dir = {.fd = tfd, .buf = t->dents, .cap = sizeof t->dents};
    for (pid_t tid; (tid = pid_dir_next(&dir)) > 0;) {
        tp_proc_path(path, tid, "/children");
        int cfd = openat(tfd, path, O_RDONLY | O_CLOEXEC);
        if (cfd < 0)
            continue; /* the thread has ended */
        /* "PID PID ... ": numbers split across reads carry over. */
        char buf[512];
        long v = 0;
        bool in = false;
        for (;;) {
            ssize_t r = read(cfd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            for (ssize_t i = 0; i < r; i++) {
                if (buf[i] >= '0' && buf[i] <= '9' && v <= 0x3fffffff) {
                    v = v * 10 + (buf[i] - '0');
                    in = true;
                } else if (in) {
                    if (*n < cap)
                        kids[(*n)++] = (pid_t)v;
                    else
                        rc = TP_E2BIG;
                    in = false;
                    v = 0;
                }
            }
        }
        if (in && *n < cap)
            kids[(*n)++] = (pid_t)v; /* the last, when no space followed it */
        else if (in)
            rc = TP_E2BIG;
        close(cfd);
    }
    close(tfd);
    return rc;
}

#define KIDS_MAX 1024

static bool spared(const pid_t *spare, size_t n, pid_t pid);

/*
 * The walk by children files: from root down, every live descendant is
 * found (its children read while it still lives, so none is lost to a
 * reparenting), and only then are those not yet signalled killed; passes
 * follow until one finds nothing new. It reads only the tree, not every
 * process on the machine: a tool that left nothing costs a few system
 * calls. How many live descendants the last pass saw, or TP_E2BIG when a
 * process has more children than it can hold (then the whole-/proc walk
 * does it).
 */
static int kill_by_children(int procfd, tp_proctree_t *t, pid_t root, const pid_t *spare, size_t n_spare)
{
    pid_t kids[KIDS_MAX];
    t->n = 0;
    int live = 0;
    for (int pass = 1; pass <= PASSES_MAX; pass++) {
        bool news = false;
        live = 0;
        /* root, then each process found, parents before their children */
        for (size_t i = 0; i <= t->n; i++) {
            if (i > 0 && t->ents[i - 1].pass != pass)
                continue; /* not seen alive this pass: its children, if any, went to the root */
            pid_t p = i == 0 ? root : t->ents[i - 1].pid;
            size_t nk = 0;
            int rc = read_children(procfd, p, t, kids, KIDS_MAX, &nk);
            if (rc == TP_E2BIG)
                return TP_E2BIG; /* a process gone meanwhile (its task/ unread) has no children to find */
            for (size_t k = 0; k < nk; k++) {
                pid_t c = kids[k];
                tp_proc_stat_t st;
                if (c <= 0 || c == root || spared(spare, n_spare, c) || tp_proc_stat(procfd, c, &st) < 0)
                    continue; /* a spared one's children are nobody's found: spared too */
                if (st.ppid != p || st.state == 'Z' || st.state == 'X')
                    continue; /* moved on meanwhile, or dead already: its parent reaps it */
                tp_proctree_ent_t *ent = find(t, c);
                if (ent != NULL && ent->start != st.start)
                    *ent = (tp_proctree_ent_t){.pid = c, .start = st.start}; /* the pid names another process now */
                if (ent == NULL && t->n < TP_PROCTREE_MAX) {
                    ent = &t->ents[t->n++];
                    *ent = (tp_proctree_ent_t){.pid = c, .start = st.start};
                }
                live++;
                if (ent == NULL) {
                    kill_one(procfd, c, st.start); /* past what the walk tracks: killed as found */
                    news = true;
                    continue;
                }
                if (!ent->signalled)
                    news = true;
                ent->pass = pass;
            }
        }
        for (size_t i = 0; i < t->n; i++) {
            tp_proctree_ent_t *ent = &t->ents[i];
            if (ent->pass == pass && !ent->signalled) {
                kill_one(procfd, ent->pid, ent->start);
                ent->signalled = true;
            }
        }
        if (!news)
            break;
    }
    return live;
}

int tp_proctree_kill(tp_proctree_t *t, pid_t root)
{
    return tp_proctree_kill_but(t, root, NULL, 0);
}

static bool spared(const pid_t *spare, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (spare[i] == pid)
            return true;
    return false;
}

int tp_proctree_kill_but(tp_proctree_t *t, pid_t root, const pid_t *spare, size_t n_spare)
{
    int procfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (procfd < 0)
        return tp_errno(errno);
    if (!t->whole && faccessat(procfd, "thread-self/children", R_OK, 0) == 0) {
        int live = kill_by_children(procfd, t, root, spare, n_spare);
        if (live != TP_E2BIG) {
            close(procfd);
            return live;
        }
    }
    /* No children files in this kernel, or a process with more children than they list here: every process's stat. */
    t->n = 0;
    int live = 0;
    for (int pass = 0; pass < PASSES_MAX; pass++) {
        bool news = false;
        live = 0;
        if (lseek(procfd, 0, SEEK_SET) < 0)
            break;
        pid_dir_t dir = {.fd = procfd, .buf = t->dents, .cap = sizeof t->dents};
        for (pid_t pid; (pid = pid_dir_next(&dir)) > 0;) {
            tp_proc_stat_t st;
            if (pid == root || spared(spare, n_spare, pid) || tp_proc_stat(procfd, pid, &st) < 0)
                continue; /* a spared one's children are nobody's found: spared too */
            if (st.state == 'Z' || st.state == 'X')
                continue; /* dead already: its parent reaps it */
            tp_proctree_ent_t *ent = find(t, pid);
            if (ent != NULL && ent->start != st.start)
                ent = NULL; /* the pid names another process now */
            if (ent == NULL) {
                /*
                 * A descendant: a child of root or of one found. A
                 * child seen before its parent (pids wrap) is found by
                 * the pass that follows the parent's discovery.
                 */
                if (st.ppid != root && find(t, st.ppid) == NULL)
                    continue;
                if (t->n < TP_PROCTREE_MAX) {
                    ent = &t->ents[t->n++];
                    *ent = (tp_proctree_ent_t){.pid = pid, .start = st.start};
                }
                news = true;
            }
            live++;
            if (ent != NULL && ent->signalled)
                continue;
            kill_one(procfd, pid, st.start);
            if (ent != NULL)
                ent->signalled = true;
            news = true;
        }
        if (!news)
            break;
    }
    close(procfd);
    return live;
}
