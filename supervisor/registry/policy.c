/*
 * Durations and sizes as the registry writes them, and a policy's life:
 * its built-in defaults (from the key tables), a tool's deep copy of
 * "defaults", and its teardown.
 */
#include "registry_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- durations ---- */

/*
 * Digits, an optional fraction, then exactly one unit; or the bare "0".
 * Integer arithmetic throughout (fraction to 9 digits, rounded to the
 * microsecond) so "0.1s" is exactly 100000, and overflow is an error.
 */
int tp_duration_parse(const char *s, uint64_t *us)
{
    static const struct {
        const char *unit;
        uint64_t us;
    } units[] = {{"us", 1}, {"ms", 1000}, {"s", 1000000}, {"m", 60000000}, {"h", 3600000000ull}};
    if (s == NULL || us == NULL)
        return TP_EINVAL;
    if (strcmp(s, "0") == 0) {
        *us = 0;
        return 0;
    }
    const char *p = s;
    uint64_t whole = 0, frac = 0, scale = 1;
    if (*p < '0' || *p > '9')
        return TP_EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            return TP_EINVAL;
        whole = whole * 10 + d;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return TP_EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (scale < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) != 0)
            continue;
        uint64_t u = units[i].us;
        if (whole > UINT64_MAX / u)
            return TP_EINVAL;
        uint64_t part = (frac * u + scale / 2) / scale;
        if (whole * u > UINT64_MAX - part)
            return TP_EINVAL;
        *us = whole * u + part;
        return 0;
    }
    return TP_EINVAL;
}

int tp_size_parse(const char *s, uint64_t *bytes)
{
    if (s == NULL || bytes == NULL || *s < '0' || *s > '9')
        return TP_EINVAL;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return TP_EINVAL;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    if (*s != '\0') {
        const char *units = "KMGT", *u = strchr(units, *s >= 'a' ? *s - 'a' + 'A' : *s);
        if (u == NULL || s[1] != '\0')
            return TP_EINVAL;
        shift = 10 * (unsigned)(u - units + 1);
    }
    if (v > (UINT64_MAX >> shift))
        return TP_EINVAL;
    *bytes = v << shift;
    return 0;
}

/* ---- the policy: defaults, copies, teardown ---- */

/* Writes an unsigned value into a field of 1, 4 or 8 bytes (bool, u32, u64). */
void reg_store_uint(void *field, size_t size, uint64_t v)
{
    if (size == sizeof(bool))
        *(bool *)field = v != 0;
    else if (size == sizeof(uint32_t))
        *(uint32_t *)field = (uint32_t)v;
    else
        *(uint64_t *)field = v;
}

/* Every table row's built-in default into base, nested objects included. */
static void apply_defaults(const key_table_t *tab, void *base)
{
    for (size_t i = 0; i < tab->n; i++) {
        const key_spec_t *s = &tab->keys[i];
        void *field = (char *)base + s->off;
        switch (s->type) {
        case K_DURATION:
        case K_BYTES:
        case K_UINT:
        case K_BOOL:
        case K_KINDS:
        case K_CLASSES:
        case K_SCOPE:
            reg_store_uint(field, s->size, (uint64_t)s->dflt);
            break;
        case K_NUMBER:
            *(double *)field = s->dflt;
            break;
        case K_JITTER:
            *(tp_jitter_t *)field = (tp_jitter_t)s->dflt;
            break;
        case K_OBJECT:
            apply_defaults(s->sub, field);
            break;
        default:
            break;
        }
    }
}

void tp_policy_init(tp_policy_t *p)
{
    memset(p, 0, sizeof *p);
    apply_defaults(&reg_policy_table, p);
    /* The tool breaker is asked for: which calls it refuses depends on how they interleave. */
    p->tool_off = true;
}

void reg_free_strv(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Frees a NULL-terminated vector. */
void reg_free_argv(char **v)
{
    if (v == NULL)
        return;
    for (char **p = v; *p != NULL; p++)
        free(*p);
    free(v);
}

/* Drops a list of hop args maps (n entries, any of them NULL). */
void reg_free_maps(json_t **maps, size_t n)
{
    if (maps == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        json_decref(maps[i]);
    free(maps);
}

void reg_policy_clear(tp_policy_t *p)
{
    reg_free_maps(p->fallback_args, p->n_fallback);
    p->fallback_args = NULL;
    reg_free_strv(p->fallback, p->n_fallback);
    p->fallback = NULL;
    p->n_fallback = 0;
    json_decref(p->degraded);
    p->degraded = NULL;
    free(p->owner);
    p->owner = NULL;
}

/*
 * A tool starts as a deep copy of "defaults": its own fallback list, owner and its
 * own reference to the degraded answer, so overriding or freeing one never
 * touches the other. 0, or TP_ENOMEM with dst safe to clear.
 */
int reg_policy_copy(tp_policy_t *dst, const tp_policy_t *src)
{
    *dst = *src;
    dst->fallback = NULL;
    dst->fallback_args = NULL;
    dst->n_fallback = 0;
    dst->degraded = src->degraded ? json_incref(src->degraded) : NULL;
    dst->owner = NULL;
    if (src->owner && (dst->owner = strdup(src->owner)) == NULL)
        return TP_ENOMEM;
    if (src->n_fallback == 0)
        return 0;
    dst->fallback = calloc(src->n_fallback + 1, sizeof *dst->fallback);
    if (dst->fallback == NULL)
        return TP_ENOMEM;
    if (src->fallback_args && (dst->fallback_args = calloc(src->n_fallback, sizeof *dst->fallback_args)) == NULL)
        return TP_ENOMEM;
    for (size_t i = 0; i < src->n_fallback; i++) {
        dst->fallback[i] = strdup(src->fallback[i]);
        if (dst->fallback[i] == NULL)
            return TP_ENOMEM;
        if (src->fallback_args && src->fallback_args[i])
            dst->fallback_args[i] = json_incref(src->fallback_args[i]);
        dst->n_fallback = i + 1;
    }
    return 0;
}
