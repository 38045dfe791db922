/*
 * Growing an array by doubling: one place for the realloc, the first size
 * and the overflow check that every growable list of the code base needs.
 *
 *     if (tp_array_fit(&v, &cap, n + 1, sizeof *v, 16) < 0)
 *         return TP_ENOMEM;
 *     v[n++] = x;
 */
#ifndef TP_ARRAY_H
#define TP_ARRAY_H

#include <stddef.h>

#include "error.h"

/*
 * Makes *array (of *cap elements of size bytes) hold at least need: the
 * capacity doubles from first until it does, and *array is realloc'd.
 * Nothing is done when it already fits. 0, or TP_ENOMEM when out of memory
 * (or the size overflows), with *array and *cap as they were.
 */
int tp_array_grow(void *array, size_t *cap, size_t need, size_t size, size_t first);

/* tp_array_grow, called only when need is past *cap. 0, or TP_ENOMEM. */
static inline int tp_array_fit(void *array, size_t *cap, size_t need, size_t size, size_t first)
{
    return need <= *cap ? 0 : tp_array_grow(array, cap, need, size, first);
}

#endif
