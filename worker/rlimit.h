/*
 * A tool's resource limits (the registry's "limits"), as setrlimit applies
 * them, and how an attempt that ran into one is recognized.
 *
 *   memory  RLIMIT_AS: bytes of address space; an allocation past it fails
 *   cpu     RLIMIT_CPU: seconds of CPU time; SIGXCPU at the limit, SIGKILL
 *           a second later for a process that ignores it
 *   files   RLIMIT_NOFILE: open descriptors; open() past it fails, EMFILE
 *
 * An exec tool gets them as its own, soft and hard, set in the child
 * between fork and exec (exec.c says why there). A plugin runs in the
 * worker, so the worker lowers its own soft limits around the call and
 * puts them back after: the memory limit then covers the worker itself
 * too, and the cpu limit counts from the call's start.
 */
#ifndef TP_RLIMIT_H
#define TP_RLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include "error.h"
#include "toolpool.pb-c.h"

typedef struct {
    uint64_t memory; /* bytes; 0: none */
    uint32_t cpu;    /* seconds; 0: none */
    uint32_t files;  /* descriptors; 0: none */
} tp_rlimit_t;

typedef struct {
    struct rlimit as, cpu, nofile;
} tp_rlimit_saved_t;

/* The call's limits. */
tp_rlimit_t tp_rlimit_of(const Toolpool__Call *call);
bool tp_rlimit_any(const tp_rlimit_t *l);

/*
 * Sets l as this process's limits, soft and hard, for good: for a child
 * between fork and exec. A tighter limit the process already has (the
 * worker's own, from whoever started toolpool) stays. Async-signal-safe.
 * 0, or setrlimit's -errno (errno set too).
 */
int tp_rlimit_apply(const tp_rlimit_t *l);

/*
 * Lowers the worker's soft limits to l for a plugin call (the cpu limit
 * counted from now; a tighter soft limit stays), saving the old ones;
 * tp_rlimit_leave puts them back.
 */
void tp_rlimit_enter(const tp_rlimit_t *l, tp_rlimit_saved_t *saved);
void tp_rlimit_leave(const tp_rlimit_t *l, const tp_rlimit_saved_t *saved);

/* bytes as the registry writes a size: "64M", "1G", "1536K", "1000". */
const char *tp_rlimit_size(char *buf, size_t cap, uint64_t bytes);

/*
 * Whether a tool's stderr names a failed allocation: Python's MemoryError,
 * strerror(ENOMEM) ("Cannot allocate memory"), "out of memory" (awk, Perl,
 * Go, Node), "cannot allocate" (bash), "failed to allocate" (Ruby),
 * "memory allocation of" (Rust), "allocation failed", C++'s bad_alloc,
 * Java's OutOfMemoryError. Case is ignored.
 */
bool tp_rlimit_says_oom(const char *text, size_t n);
/* Whether it names EMFILE: strerror's "Too many open files". */
bool tp_rlimit_says_emfile(const char *text, size_t n);

#endif
