/*
 * The mcp adapter's reading of an answer to tools/call, apart from its
 * sessions and processes: a pure function of the answer, so a fuzzer can
 * take it alone (tests/fuzz/mcpresult_fuzz.c).
 */
#ifndef TP_MCP_RESULT_H
#define TP_MCP_RESULT_H

#include <jansson.h>
#include <stdint.h>

#include "outcome.h"

/*
 * The answer (the whole JSON-RPC message) to a tools/call of tool, read
 * into o: a JSON-RPC error is the kind its code means (-32602
 * BadArguments, -32601 UnknownTool, -32021 ToolError: 2026-07-28's
 * MissingRequiredClientCapability, any other ServerError); a result whose
 * resultType is not "complete" (2026-07-28's input_required: the server
 * asks for input toolpool cannot give) is ToolError naming it; one that
 * is not a CallToolResult is ToolError naming what is wrong; one with
 * isError is the tool's failure, read as an exec tool's stdout is; else
 * the result, {"content", "structuredContent"}, compact, or OutputTooLarge
 * past max_output bytes.
 */
void tp_mcp_result(const char *tool, uint64_t max_output, const json_t *answer, tp_outcome_t *o);

#endif
