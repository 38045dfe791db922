#include "suggest.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 64

size_t tp_edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    if (na > NAME_MAX_LEN || nb > NAME_MAX_LEN)
        return SIZE_MAX;
    size_t row[NAME_MAX_LEN + 1];
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

void tp_registry_suggest(const tp_registry_t *reg, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name), best[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    const char *who[3] = {NULL, NULL, NULL};
    if (n > NAME_MAX_LEN)
        n = NAME_MAX_LEN;
    for (size_t t = 0; t < reg->n_tools; t++) {
        const char *cand = reg->tools[t].name;
        size_t d = tp_edit_distance(name, n, cand, strlen(cand));
        if (d == SIZE_MAX)
            continue;
        for (int k = 0; k < 3; k++)
            if (d < best[k]) {
                for (int s = 2; s > k; s--) {
                    best[s] = best[s - 1];
                    who[s] = who[s - 1];
                }
                best[k] = d;
                who[k] = cand;
                break;
            }
    }
    out[0] = 0;
    size_t len = 0;
    for (int k = 0; k < 3 && who[k]; k++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", k ? ", " : "", who[k]);
}
