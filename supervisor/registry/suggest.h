/*
 * "Did you mean": the names closest to a mistyped one, by edit distance,
 * for the messages about an unknown tool or registry key.
 */
#ifndef TP_SUGGEST_H
#define TP_SUGGEST_H

#include <stddef.h>

#include "registry.h"

/* The Levenshtein distance of a (na bytes) and b (nb bytes); SIZE_MAX when either is over 64 bytes. */
size_t tp_edit_distance(const char *a, size_t na, const char *b, size_t nb);

/*
 * The (up to three) tool names of reg closest to name, nearest first and
 * comma-separated, in out ("" for a registry with no tool). Only the first
 * 64 bytes of name count, and a tool name longer than that is never offered.
 */
void tp_registry_suggest(const tp_registry_t *reg, const char *name, char *out, size_t cap);

#endif
