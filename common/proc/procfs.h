/*
 * Reading a process's files under /proc: its stat (state, parent, start
 * time), its resident memory. Only system calls and no allocation, so a
 * worker's SIGTERM handler may use them (proctree.c does).
 */
#ifndef TP_PROCFS_H
#define TP_PROCFS_H

#include <stdint.h>
#include <sys/types.h>

#include "error.h"

typedef struct {
    pid_t ppid;
    char state;     /* R, S, D, T, Z... */
    uint64_t start; /* clock ticks after boot: with the pid, the process's identity */
} tp_proc_stat_t;

/* "PID" and then suffix ("/stat") into buf, which holds at least 16 bytes more than the suffix. */
void tp_proc_path(char *buf, pid_t pid, const char *suffix);


/*
 * /proc/PID/stat's state, parent and start time (fields 3, 4 and 22; the
 * name, field 2, may hold spaces and parentheses, so counting starts after
 * its last ')'). 0; the -errno of opening or reading it (TP_ENOENT or
 * -ESRCH: the process is gone), or TP_EIO when it does not read as a stat
 * file.
 */
int tp_proc_stat(int procfd, pid_t pid, tp_proc_stat_t *st);

/* The process's resident memory in bytes (/proc/PID/statm, field 2), or 0 when unreadable. */
uint64_t tp_proc_rss(pid_t pid);

#endif
