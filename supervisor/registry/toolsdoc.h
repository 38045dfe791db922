/*
 * The registry's tools as a document, three ways: toolpool's own (with the
 * policy a client may want to know), OpenAI function tools and MCP's
 * tools/list. serve's GET /v1/tools?format= and `toolpool tools export`
 * both print these, so the two never differ.
 */
#ifndef TP_TOOLSDOC_H
#define TP_TOOLSDOC_H

#include "registry.h"

#include <jansson.h>

typedef enum {
    TP_TOOLSDOC_TOOLPOOL = 0, /* {"tools": [{name, description, parameters, adapter, ADAPTER, policy...}],
                                 "guards"}: a registry file */
    TP_TOOLSDOC_OPENAI,       /* [{"type": "function", "function": {name, description, parameters, strict}}] */
    TP_TOOLSDOC_MCP,          /* {"tools": [{name, title, description, inputSchema, outputSchema, annotations...}]} */
} tp_toolsdoc_format_t;

/* "toolpool", "openai", "mcp" -> *f, 0; TP_EINVAL for anything else. */
int tp_toolsdoc_format_parse(const char *s, tp_toolsdoc_format_t *f);

/* A new reference to the document, or NULL on ENOMEM. */
json_t *tp_toolsdoc_render(const tp_registry_t *reg, tp_toolsdoc_format_t f);

/*
 * One tool as MCP's tools/list writes it, the one rendering of every
 * tools/list toolpool makes, in either of two ways:
 *   DECLARED  as the registry declares it, so that an export loads again as
 *             the same registry: name, description, its parameters as they
 *             are (GET /v1/tools?format=mcp, `tools export --format mcp`)
 *   SERVED    as an MCP host reads it from `toolpool mcp` and /mcp: the
 *             description only when there is one, and an inputSchema with
 *             "type": "object" at its root and its dialect named, and
 *             "execution": {"taskSupport": ...} (tp_toolsdoc_task_support)
 * Both carry an MCP tool's own title, outputSchema, annotations, icons and
 * _meta as its declaration gave them. A new reference, or NULL on ENOMEM.
 */
typedef enum {
    TP_TOOLSDOC_DECLARED = 0,
    TP_TOOLSDOC_SERVED,
} tp_toolsdoc_as_t;
json_t *tp_toolsdoc_mcp_tool(const tp_tool_t *t, tp_toolsdoc_as_t as);
/*
 * Whether t runs as an MCP task, as its MCP declaration's "execution":
 * {"taskSupport": ...} says: "forbidden" (never), "required" (only as
 * one); any other tool may, or may not ("optional"): toolpool runs any
 * call either way.
 */
typedef enum {
    TP_TASKS_OPTIONAL = 0,
    TP_TASKS_FORBIDDEN,
    TP_TASKS_REQUIRED,
} tp_task_support_t;
tp_task_support_t tp_toolsdoc_task_support(const tp_tool_t *t);

/*
 * Where the tool's "idempotent" came from, for people: "MCP annotations
 * (readOnlyHint)", "run.write_file", "toolpool's default"... (tp_from_t).
 */
const char *tp_toolsdoc_idempotent_from(const tp_tool_t *t, char *buf, size_t n);

#endif
