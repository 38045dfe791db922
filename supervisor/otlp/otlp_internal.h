/* Internal to supervisor/otlp/: the span rendering the exporter queues. */
#ifndef TP_OTLP_INTERNAL_H
#define TP_OTLP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "otlp.h"

/*
 * Appends r's spans to b as OTLP/JSON span objects, comma-separated (a
 * comma first unless b is empty or ends a list's '['): the call's, then one per attempt and
 * per backoff. end_ns: the call's end, Unix time in nanoseconds. rng: the
 * id generator's state. Returns how many spans it wrote.
 */
size_t tp_otlp_render(tp_buf_t *b, const Toolpool__Result *r, const tp_trace_ctx_t *tc, bool payloads, uint64_t *rng,
                      uint64_t end_ns);

#endif
