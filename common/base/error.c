#include "error.h"

#include <stdio.h>
#include <string.h>

static struct {
    int lo, hi;
    const char *(*fn)(int rc);
} ranges[4];

void tp_strerror_range(int lo, int hi, const char *(*fn)(int rc))
{
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (ranges[i].fn == NULL || (ranges[i].lo == lo && ranges[i].hi == hi)) {
            ranges[i].lo = lo;
            ranges[i].hi = hi;
            ranges[i].fn = fn;
            return;
        }
}

const char *tp_strerror(int rc)
{
    static __thread char buf[48];
    switch (rc) {
    case TP_OK:
        return "success";
    case TP_ECLOSED:
        return "the other end closed";
    case TP_EREFUSED:
        return "refused by the other end";
    case TP_EWORKER:
        return "the workers cannot be kept";
    case TP_EPROTO:
        return "a corrupt frame or record";
    case TP_E2BIG:
        return "longer than the limit";
    default:
        break;
    }
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0] && ranges[i].fn; i++)
        if (rc >= ranges[i].lo && rc <= ranges[i].hi)
            return ranges[i].fn(rc);
    if (rc < 0 && rc > -4096)
        return strerror(-rc);
    if (rc > 0)
        return strerror(rc);
    snprintf(buf, sizeof buf, "error %d", rc);
    return buf;
}
