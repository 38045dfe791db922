/*
 * A call's record (Toolpool__Result) as the contract's JSON line: the one
 * rendering every front sends (run's output, serve's bodies and batches)
 * and the inspection commands read. The store keeps the record, never the
 * line; a line is rendered when it is sent.
 *
 * The rendering never re-parses a tool's result or a call's args: both
 * are compact JSON text already, and are spliced in as they are.
 */
#ifndef TP_RESULTLINE_H
#define TP_RESULTLINE_H

#include <stdbool.h>

#include "buf.h"
#include "toolpool.pb-c.h"

/* Appends r as one JSON object and a newline. 0, or TP_ENOMEM (b as it was). */
int tp_result_write(tp_buf_t *b, const Toolpool__Result *r);

/*
 * A line tp_result_write wrote (this toolpool's or an older one's: the
 * records of formats 2 and 3) read back into a record: *out, to free with
 * toolpool__result__free_unpacked. Strings are decoded, the result and
 * args kept as the text they are, durations read to the microsecond.
 * *same (when not NULL) says whether rendering *out gives line back byte
 * for byte. 0, TP_EPROTO when line is not a result line, or TP_ENOMEM.
 */
int tp_result_read_line(const uint8_t *line, size_t len, Toolpool__Result **out, bool *same);

#endif
