/*
 * The processes descended from one process, found in /proc and killed:
 * everything a tool started, whatever session or process group it moved to
 * (setsid, a double-forked daemon).
 *
 * A process group kill misses a process that has left the group; a walk of
 * parent links finds it, as long as its ancestors are alive or it has been
 * reparented to the root (a child subreaper, PR_SET_CHILD_SUBREAPER). So
 * the root must be alive during the walk: a stopped worker or the worker
 * itself. Once the root has exited, its orphans belong to init and no walk
 * can tell them from anyone else's.
 *
 * Where the kernel lists each thread's children (/proc/PID/task/TID/children,
 * CONFIG_PROC_CHILDREN), the walk reads only the tree: root's children, then
 * theirs. Elsewhere it reads /proc/PID/stat of every process (its parent and
 * its start time), about 8 us per process on the machine: 1-2 ms with 150
 * processes, at every timeout. It kills in passes: a pass SIGKILLs every live descendant it
 * has not signalled yet, and another pass follows until one finds nothing
 * new, so a child forked between the read and the kill is found by the next
 * pass (a killed process forks no more; its children reparent to the root).
 *
 * Async-signal-safe: no allocation, no stdio, only system calls on the
 * caller's scratch, so a worker's signal handler may call it too. One
 * scratch per thread of use.
 */
#ifndef TP_PROCTREE_H
#define TP_PROCTREE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Descendants tracked per walk; past this, the others are still killed, pass by pass. */
#define TP_PROCTREE_MAX 4096

typedef struct {
    pid_t pid;
    uint64_t start; /* clock ticks after boot: with pid, the process's identity */
    bool signalled;
    int pass; /* the last pass of a walk by children files that saw it alive */
} tp_proctree_ent_t;

typedef struct {
    tp_proctree_ent_t ents[TP_PROCTREE_MAX];
    size_t n;
    char dents[8192]; /* getdents64 buffer */
    bool whole;       /* read every process's stat even where children files exist (a test's choice) */
} tp_proctree_t;

/*
 * SIGKILLs every descendant of root (not root itself), in passes until a
 * pass finds no live descendant it has not signalled. A kill goes through
 * a pidfd opened after the process was recognized and checked again, so
 * a pid reused in between is never signalled. Returns how many live
 * descendants the last pass saw (0: none is left alive; the others were
 * signalled and are dying), or the -errno of opening /proc when it cannot
 * be read (errno is set too).
 */
int tp_proctree_kill(tp_proctree_t *t, pid_t root);

/*
 * tp_proctree_kill, sparing the n processes in spare (children of root)
 * and everything descended from them: a worker's MCP servers, which live
 * from call to call. Returns as tp_proctree_kill.
 */
int tp_proctree_kill_but(tp_proctree_t *t, pid_t root, const pid_t *spare, size_t n);

#endif
