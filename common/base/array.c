#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int tp_array_grow(void *array, size_t *cap, size_t need, size_t size, size_t first)
{
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return TP_ENOMEM;
        c *= 2;
    }
    if (size && c > SIZE_MAX / size)
        return TP_ENOMEM;
    void *old;
    memcpy(&old, array, sizeof old);
    void *p = realloc(old, c * size);
    if (p == NULL)
        return TP_ENOMEM;
    memcpy(array, &p, sizeof p);
    *cap = c;
    return 0;
}
