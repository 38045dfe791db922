/*
 * The ids this engine has recorded, as a filter that may say yes wrongly
 * but never says no wrongly (a blocked Bloom filter: three bits of one
 * 64-byte line an id). While a store held no results and no in-flight
 * markers when the engine began on it, and no other supervisor has joined
 * it since, only this engine writes results there: an id the filter has
 * not seen has no record, and a call needs no lookup in the store (two
 * B-tree searches a call on a fresh store's first run).
 */
#ifndef TP_SEEN_H
#define TP_SEEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *bits; /* NULL: off, every id must be looked up */
    size_t n;       /* ids added */
} tp_seen_t;

/* On, empty. false: out of memory (it stays off). */
bool tp_seen_on(tp_seen_t *s);
/* Off for good: past its capacity, or another writer came. */
void tp_seen_off(tp_seen_t *s);
void tp_seen_add(tp_seen_t *s, const char *id, size_t len);
/* false only for an id never added; true while off. */
bool tp_seen_maybe(const tp_seen_t *s, const char *id, size_t len);

#endif
