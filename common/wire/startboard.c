#include "startboard.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int tp_startboard_create(int n, tp_start_line_t **lines, int *fd)
{
    size_t size = (size_t)(n > 0 ? n : 1) * sizeof(tp_start_line_t);
    int f = memfd_create("toolpool-starts", MFD_CLOEXEC);
    if (f < 0)
        return -errno;
    /* Above the worker's fixed fds (3 to 5), so the spawn's dup2 to 5 always makes a new one. */
    int hi = fcntl(f, F_DUPFD_CLOEXEC, 6);
    int rc = hi < 0 ? -errno : 0;
    close(f);
    if (rc == 0 && ftruncate(hi, (off_t)size) < 0)
        rc = -errno;
    void *m = rc == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, hi, 0) : MAP_FAILED;
    if (rc == 0 && m == MAP_FAILED)
        rc = -errno;
    if (rc != 0) {
        if (hi >= 0)
            close(hi);
        return rc;
    }
    *lines = m;
    *fd = hi;
    return 0;
}

void tp_startboard_free(tp_start_line_t *lines, int n, int fd)
{
    if (lines != NULL)
        munmap(lines, (size_t)(n > 0 ? n : 1) * sizeof *lines);
    if (fd >= 0)
        close(fd);
}

tp_start_line_t *tp_startboard_map(int fd, int slot)
{
    struct stat st;
    void *m = MAP_FAILED;
    if (slot >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= (size_t)(slot + 1) * sizeof(tp_start_line_t))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* whatever came of it: the mapping stays, and no tool inherits the fd */
    return m == MAP_FAILED ? NULL : (tp_start_line_t *)m + slot;
}
