/*
 * What a model reads back: a call's answer as the message an agent loop
 * appends to its conversation, in the form its provider takes, and the
 * tool message of a failure (the seed's payload), which the MCP front
 * sends as its isError text too. One renderer for the model-facing text,
 * whichever way the call came in.
 *
 * The forms (`run --output-format`, serve's `?format=`):
 *   toolpool          the contract's result line (tp_answer_write)
 *   openai            a Chat Completions tool message:
 *                     {"role":"tool","tool_call_id":ID,"content":TEXT}
 *   openai-responses  a Responses API input item:
 *                     {"type":"function_call_output","call_id":ID,"output":TEXT}
 *   anthropic         a Messages API content block:
 *                     {"type":"tool_result","tool_use_id":ID,"content":TEXT,"is_error":B}
 * TEXT is the result's JSON when the call succeeded, the tool message when
 * it failed; ID the call's id (null for a line that had none).
 */
#ifndef TP_AGENT_H
#define TP_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "engine.h"
#include "toolpool.pb-c.h"

typedef enum {
    TP_FORMAT_TOOLPOOL = 0,
    TP_FORMAT_OPENAI,
    TP_FORMAT_OPENAI_RESPONSES,
    TP_FORMAT_ANTHROPIC,
} tp_format_t;

/* The names a user gives, in a message: "toolpool, openai, openai-responses or anthropic". */
#define TP_FORMAT_NAMES "toolpool, openai, openai-responses or anthropic"

/* *out for a format's name. 0, or -1 for a name that is none of TP_FORMAT_NAMES. */
int tp_format_from_name(const char *name, tp_format_t *out);

/*
 * The seed's tool message, {"error","message","retryable","attempts"},
 * then what toolpool adds: "class", "served_by" (when a hop served),
 * "escalated", "escalation" (when there is one). klass NULL or "": the
 * kind's. 0, or TP_ENOMEM (b may hold part of it).
 */
int tp_tool_message_write(tp_buf_t *b, const char *kind, const char *klass, const char *message, bool retryable,
                          uint64_t attempts, const char *served_by, bool escalated, const char *escalation);

/*
 * Appends r rendered in format f, as one line ('\n' included). 0, or
 * TP_ENOMEM (b as it was).
 */
int tp_format_write_result(tp_buf_t *b, tp_format_t f, const Toolpool__Result *r);

/*
 * Appends a's line in format f: for toolpool, tp_answer_write's (a kept
 * line byte for byte); for the others, its record rendered. 0, TP_ENOMEM,
 * or TP_EINVAL for a call that never started (it has no line).
 */
int tp_format_write(tp_buf_t *b, tp_format_t f, const tp_answer_t *a);

#endif
