#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tp_test_run(void)
{
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

const char *tp_test_tmpdir(const char *tag)
{
    static char path[4096];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/tp-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (mkdtemp(path) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    return path;
}

char *tp_test_write(const char *dir, const char *name, const char *s)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    fputs(s, f);
    fclose(f);
    return path;
}

char *tp_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t r;
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0)
            s = realloc(s, cap *= 2);
    }
    fclose(f);
    s[n] = 0;
    if (len)
        *len = n;
    return s;
}

/* nftw's callback: removes each entry, children before their directory. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tp_test_rmtree(const char *dir)
{
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
