/*
 * An exec tool for the limits tests, built without sanitizers (an ASan
 * runtime cannot start under a small RLIMIT_AS). It reads its args from
 * stdin, then:
 *   hog mem MB     allocates MB megabytes and touches them; when malloc
 *                  fails, says so as a C program would (perror) and exits 1
 *   hog spin       burns CPU until something stops it
 *   hog files N    opens /dev/null N times; when open fails, perror, exit 1
 * and answers {"ok": true}.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char buf[4096];
    while (read(0, buf, sizeof buf) > 0)
        ;
    if (argc >= 3 && strcmp(argv[1], "mem") == 0) {
        size_t n = (size_t)atol(argv[2]) << 20;
        char *p = malloc(n);
        if (p == NULL) {
            perror("hog: malloc");
            return 1;
        }
        memset(p, 1, n);
        __asm__ volatile("" : : "r"(p) : "memory"); /* used: not optimized away */
        free(p);
    } else if (argc >= 2 && strcmp(argv[1], "spin") == 0) {
        volatile unsigned long x = 0;
        for (;;)
            x++;
    } else if (argc >= 3 && strcmp(argv[1], "files") == 0) {
        for (long i = 0; i < atol(argv[2]); i++) {
            if (open("/dev/null", O_RDONLY) < 0) {
                perror("hog: open");
                return 1;
            }
        }
    } else {
        fprintf(stderr, "usage: hog mem MB | spin | files N\n");
        return 64;
    }
    printf("{\"ok\": true}\n");
    return 0;
}
