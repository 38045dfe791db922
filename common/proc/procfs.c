#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* "PID" and then suffix into buf (at least 16 bytes more than the suffix). */
void tp_proc_path(char *buf, pid_t pid, const char *suffix)
{
    char digits[16];
    int n = 0;
    unsigned v = (unsigned)pid;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    int k = 0;
    while (n > 0)
        buf[k++] = digits[--n];
    memcpy(buf + k, suffix, strlen(suffix) + 1);
}

/*
 * Reads /proc/PID/SUFFIX into buf (cap bytes, NUL-terminated): relative to
 * procfd, an open /proc, or with procfd < 0 from the path itself. The
 * bytes read, or the -errno of opening or reading it (TP_ENOENT, -ESRCH:
 * the process is gone), or TP_EINVAL for a suffix too long.
 */
static ssize_t proc_read(int procfd, pid_t pid, const char *suffix, char *buf, size_t cap)
{
    char path[64] = "/proc/";
    size_t at = procfd < 0 ? 6 : 0;
    if (strlen(suffix) + 16 + at > sizeof path)
        return TP_EINVAL;
    tp_proc_path(path + at, pid, suffix);
    int fd = openat(procfd < 0 ? AT_FDCWD : procfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tp_errno(errno);
    ssize_t n;
    do {
        n = read(fd, buf, cap - 1);
    } while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (n < 0)
        return tp_errno(e);
    buf[n] = '\0';
    return n;
}

int tp_proc_stat(int procfd, pid_t pid, tp_proc_stat_t *st)
{
    char buf[1024];
    ssize_t n = proc_read(procfd, pid, "/stat", buf, sizeof buf);
    if (n < 0)
        return (int)n;
    if (n == 0)
        return TP_EIO;
    char *p = NULL;
    for (ssize_t i = n - 1; i >= 0; i--) {
        if (buf[i] == ')') {
            p = buf + i + 1;
            break;
        }
    }
    if (p == NULL)
        return TP_EIO;
    /* p: " S PPID PGRP SID TTY TPGID FLAGS MINFLT CMINFLT MAJFLT CMAJFLT UTIME STIME ... START ..." */
    int field = 2;
    uint64_t v = 0;
    bool in_num = false;
    st->state = 0;
    for (; *p; p++) {
        if (*p == ' ') {
            if (in_num) {
                if (field == 4)
                    st->ppid = (pid_t)v;
                if (field == 22) {
                    st->start = v;
                    return st->state ? 0 : TP_EIO;
                }
            }
            in_num = false;
            field++;
            v = 0;
            continue;
        }
        if (field == 3) {
            st->state = *p;
        } else if (*p >= '0' && *p <= '9') {
            v = v * 10 + (uint64_t)(*p - '0');
            in_num = true;
        }
    }
    return TP_EIO;
}

uint64_t tp_proc_rss(pid_t pid)
{
    char buf[256];
    if (proc_read(-1, pid, "/statm", buf, sizeof buf) <= 0)
        return 0;
    /* "SIZE RESIDENT ...": the second number, in pages. */
    const char *p = buf;
    while (*p && *p != ' ')
        p++;
    if (*p == '\0')
        return 0;
    uint64_t pages = 0;
    for (p++; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (uint64_t)(*p - '0');
    return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}
