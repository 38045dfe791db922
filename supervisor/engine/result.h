/*
 * Result records: a call's final outcome as the contract's JSON line.
 *
 * The supervisor never re-parses a tool's result or a call's args: both are
 * already compact JSON text and are spliced in as they are.
 */
#ifndef TP_RESULT_H
#define TP_RESULT_H

#include "buf.h"
#include "toolpool.pb-c.h"

/* Appends r as one JSON object and a newline. */
int tp_result_write(tp_buf_t *b, const Toolpool__Result *r);

#endif
