/* Shared by the CUnit suites: running the suites, temp dirs, files. */
#ifndef TP_TESTUTIL_H
#define TP_TESTUTIL_H

#include <CUnit/Basic.h>
#include <stddef.h>

/* Runs every registered suite; returns the process exit status. */
int tp_test_run(void);
/* A fresh directory under $TMPDIR (or /tmp); the path is static storage. */
const char *tp_test_tmpdir(const char *tag);
/* Writes s to dir/name; returns the malloc'd path. */
char *tp_test_write(const char *dir, const char *name, const char *s);
/* Reads a whole file, NUL-terminated (malloc'd), or NULL. */
char *tp_test_slurp(const char *path, size_t *len);
/* Removes dir and everything under it (symlinks not followed); 0 or -1. */
int tp_test_rmtree(const char *dir);

#endif
