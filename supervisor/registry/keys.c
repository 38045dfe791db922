/*
 * The key tables: the keys each JSON object of the registry and of the
 * policy file may have, one row per key saying its type, its bounds, its
 * built-in default (tp_policy_init) and where in the C structs it lands.
 * A new policy knob is one row.
 */
#include "registry_internal.h"

#include "taxonomy.h"

#define POL(m) FIELD(tp_policy_t, m)
#define TOOL(m) FIELD(tp_tool_t, m)
#define GRD(m) FIELD(tp_guards_t, m)
#define SEC 1e6

static const key_spec_t backoff_keys[] = {
    {KEY("base", K_DURATION), POL(backoff_base_us), .dflt = 0.5 * SEC},
    {KEY("factor", K_NUMBER), POL(backoff_factor), .min = 1, .dflt = 2},
    {KEY("max", K_DURATION), POL(backoff_max_us), .dflt = 30 * SEC},
    {KEY("jitter", K_JITTER), POL(jitter), .dflt = TP_JITTER_FULL},
};
static const key_table_t backoff_table = TABLE(backoff_keys);

static const key_spec_t same_call_keys[] = {
    {KEY("scope", K_SCOPE), POL(same_call_scope), .dflt = TP_SCOPE_JOB},
    {KEY("failures", K_UINT), POL(same_call_failures), .min = 1, .dflt = 3},
    {KEY("window", K_DURATION), POL(same_call_window_us), .dflt = 600 * SEC},
};
static const key_table_t same_call_table = TABLE(same_call_keys);

static const key_spec_t tool_breaker_keys[] = {
    {KEY("failure_rate", K_NUMBER), POL(tool_failure_rate), .flags = F_MIN_EXCL, .max = 1, .dflt = 0.5},
    {KEY("min_calls", K_UINT), POL(tool_min_calls), .min = 1, .dflt = 20},
    {KEY("window", K_DURATION), POL(tool_window_us), .dflt = 60 * SEC},
    {KEY("cooldown", K_DURATION), POL(tool_cooldown_us), .dflt = 30 * SEC},
    {KEY("probes", K_UINT), POL(tool_probes), .min = 1, .dflt = 1},
};
static const key_table_t tool_breaker_table = TABLE(tool_breaker_keys);

static const key_spec_t breaker_keys[] = {
    {KEY("same_call", K_OBJECT), .sub = &same_call_table, .flags = F_OFF,
     .off_n = offsetof(tp_policy_t, same_call_off)},
    {KEY("tool", K_OBJECT), .sub = &tool_breaker_table, .flags = F_OFF, .off_n = offsetof(tp_policy_t, tool_off)},
};
static const key_table_t breaker_table = TABLE(breaker_keys);

#define MAX_OUTPUT_DEFAULT 1048576

/*
 * Resource limits, set with setrlimit for the tool (worker/rlimit.h).
 * "output" is max_output under another name: either lands in the same
 * field, and an object may not set both (reg_check_output_once).
 */
static const key_spec_t limits_keys[] = {
    {KEY("memory", K_BYTES), POL(limit_memory), .min = 1048576},
    {KEY("cpu", K_DURATION), POL(limit_cpu_us), .flags = F_MIN_EXCL},
    {KEY("files", K_UINT), POL(limit_files), .min = 3, .max = 1048576},
    {KEY("output", K_BYTES), POL(max_output), .min = 1, .dflt = MAX_OUTPUT_DEFAULT, .flags = F_ALIAS},
};
static const key_table_t limits_table = TABLE(limits_keys);

/*
 * Worker recycling: after a worker answers a call of this tool, it is
 * replaced (between calls) once it has answered max_calls calls or holds
 * max_rss bytes resident (supervisor/pool/pipes.c, slot_served).
 */
static const key_spec_t worker_keys[] = {
    {KEY("max_calls", K_UINT), POL(worker_max_calls), .min = 1},
    {KEY("max_rss", K_BYTES), POL(worker_max_rss), .min = 1048576},
};
static const key_table_t worker_table = TABLE(worker_keys);

/* A token bucket of the tool's attempts: calls per per, burst at once (supervisor/engine/dispatch.c). */
static const key_spec_t rate_keys[] = {
    {KEY("calls", K_UINT), POL(rate_calls), .min = 1, .flags = F_REQUIRED},
    {KEY("per", K_DURATION), POL(rate_per_us), .flags = F_MIN_EXCL, .dflt = SEC},
    {KEY("burst", K_UINT), POL(rate_burst), .min = 1, .dflt = 1},
};
static const key_table_t rate_table = TABLE(rate_keys);

/* Allowed in "defaults" and in every tool; the tool's value wins. */
static const key_spec_t policy_keys[] = {
    {KEY("timeout", K_DURATION), POL(timeout_us), .flags = F_MIN_EXCL, .dflt = 30 * SEC},
    {KEY("deadline", K_DURATION), POL(deadline_us)},
    {KEY("attempts", K_UINT), POL(attempts), .min = 1, .max = 100, .dflt = 3},
    {KEY("backoff", K_OBJECT), .sub = &backoff_table},
    {KEY("kill_grace", K_DURATION), POL(kill_grace_us)},
    {KEY("idempotent", K_BOOL), POL(idempotent), .dflt = 1},
    {KEY("once", K_BOOL), POL(once)},
    {KEY("concurrency", K_UINT), POL(concurrency)},
    {KEY("rate", K_OBJECT), .sub = &rate_table},
    {KEY("max_retry_after", K_DURATION), POL(max_retry_after_us), .flags = F_MIN_EXCL, .dflt = 3600 * SEC},
    {KEY("max_output", K_UINT), POL(max_output), .min = 1, .dflt = MAX_OUTPUT_DEFAULT},
    {KEY("limits", K_OBJECT), .sub = &limits_table},
    {KEY("worker", K_OBJECT), .sub = &worker_table},
    {KEY("retry_on", K_KINDS), POL(retry_on),
     .dflt = (double)(KIND_BIT(TP_KIND_TIMEOUT) | KIND_BIT(TP_KIND_RATE_LIMITED) | KIND_BIT(TP_KIND_SERVER_ERROR) |
                      KIND_BIT(TP_KIND_WORKER_CRASHED))},
    {KEY("fallback", K_NAMES), POL(fallback), .off_n = offsetof(tp_policy_t, n_fallback), .flags = F_HOPS},
    {KEY("fallback_on", K_CLASSES), POL(fallback_on), .dflt = CLASS_BIT(TP_CLASS_TRANSIENT)},
    {KEY("stale", K_BOOL), POL(stale)},
    {KEY("degraded", K_JSON), POL(degraded)},
    {KEY("breaker", K_OBJECT), .sub = &breaker_table},
    {KEY("owner", K_STRING), POL(owner), .flags = F_NONEMPTY},
};
const key_table_t reg_policy_table = TABLE(policy_keys);

static const key_spec_t plugin_keys[] = {
    {KEY("path", K_STRING), TOOL(plugin_path), .flags = F_REQUIRED | F_NONEMPTY | F_PATH},
};
static const key_table_t plugin_table = TABLE(plugin_keys);

static const key_spec_t mcp_keys[] = {
    {KEY("command", K_ARGV), TOOL(mcp_command), .flags = F_REQUIRED | F_PATH},
    {KEY("tool", K_STRING), TOOL(mcp_tool), .flags = F_REQUIRED | F_NONEMPTY},
    {KEY("env", K_ENV), TOOL(mcp_env)},
    {KEY("cwd", K_STRING), TOOL(mcp_cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("instances", K_UINT), TOOL(mcp_instances), .min = 1, .max = TP_MCP_INSTANCES_MAX},
    {KEY("protocol", K_MCP_ERA), TOOL(mcp_protocol)},
};
static const key_table_t mcp_table = TABLE(mcp_keys);

static const key_spec_t http_keys[] = {
    {KEY("url", K_STRING), TOOL(http_url), .flags = F_REQUIRED | F_NONEMPTY | F_URL},
    {KEY("method", K_STRING), TOOL(http_method), .flags = F_NONEMPTY},
    {KEY("query", K_ARGNAMES), TOOL(http_query)},
    {KEY("headers", K_HEADERS), TOOL(http_headers)},
    {KEY("body", K_STRING), TOOL(http_body), .flags = F_NONEMPTY},
    {KEY("ca_file", K_STRING), TOOL(http_ca_file), .flags = F_NONEMPTY | F_PATH},
};
static const key_table_t http_table = TABLE(http_keys);

/*
 * A tool's policy in an object of its own, as toolpool renders a tool
 * (`tools export --format toolpool`, GET /v1/tools), so that the rendering
 * loads again: where "idempotent" came from is said there for people, and
 * let be.
 */
static const key_spec_t own_policy_keys[] = {
    {KEY("idempotent_from", K_SKIP)},
};
static const key_table_t own_policy_table = {own_policy_keys, 1, &reg_policy_table, 0};

/*
 * A tool's own keys; its policy keys chain on, landing in tool->policy.
 * "adapter" names the adapter its adapter key gives (checked in tools.c).
 */
static const key_spec_t tool_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("adapter", K_SKIP)},
    {KEY("policy", K_OBJECT), TOOL(policy), .sub = &own_policy_table},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("parameters", K_SCHEMA), TOOL(parameters)},
    {KEY("schema_dialect", K_DIALECT), TOOL(schema_dialect)},
    {KEY("formats", K_FORMATS), TOOL(formats)},
    {KEY("exec", K_ADAPTER), .adapter = TP_ADAPTER_EXEC, .flags = F_PATH},
    {KEY("plugin", K_ADAPTER), .adapter = TP_ADAPTER_PLUGIN, .sub = &plugin_table},
    {KEY("cwd", K_STRING), TOOL(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("mcp", K_ADAPTER), .adapter = TP_ADAPTER_MCP, .sub = &mcp_table},
    {KEY("http", K_ADAPTER), .adapter = TP_ADAPTER_HTTP, .sub = &http_table},
    {KEY("connect_timeout", K_DURATION), TOOL(connect_timeout_us), .flags = F_MIN_EXCL},
    {KEY("max_in_flight", K_UINT), TOOL(max_in_flight), .min = 1, .max = TP_MAX_IN_FLIGHT_MAX},
    {KEY("version", K_STRING), TOOL(version), .flags = F_NONEMPTY},
};
const key_table_t reg_tool_table = {tool_keys, sizeof tool_keys / sizeof tool_keys[0], &reg_policy_table,
                                    offsetof(tp_tool_t, policy)};

/*
 * A "run" entry: toolpool's settings of a tool declared elsewhere (an
 * OpenAI or MCP declaration, or toolpool's own): its adapter, its schema
 * settings and its policy, never its name, description or parameters.
 */
static const key_spec_t run_keys[] = {
    {KEY("exec", K_ADAPTER), .adapter = TP_ADAPTER_EXEC, .flags = F_PATH},
    {KEY("plugin", K_ADAPTER), .adapter = TP_ADAPTER_PLUGIN, .sub = &plugin_table},
    {KEY("mcp", K_ADAPTER), .adapter = TP_ADAPTER_MCP, .sub = &mcp_table},
    {KEY("http", K_ADAPTER), .adapter = TP_ADAPTER_HTTP, .sub = &http_table},
    {KEY("connect_timeout", K_DURATION), TOOL(connect_timeout_us), .flags = F_MIN_EXCL},
    {KEY("max_in_flight", K_UINT), TOOL(max_in_flight), .min = 1, .max = TP_MAX_IN_FLIGHT_MAX},
    {KEY("cwd", K_STRING), TOOL(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("schema_dialect", K_DIALECT), TOOL(schema_dialect)},
    {KEY("formats", K_FORMATS), TOOL(formats)},
    {KEY("version", K_STRING), TOOL(version), .flags = F_NONEMPTY},
};
const key_table_t reg_run_table = {run_keys, sizeof run_keys / sizeof run_keys[0], &reg_policy_table,
                                   offsetof(tp_tool_t, policy)};

/*
 * The declarations of the other ecosystems, read as they are written:
 * OpenAI's function tool, nested ({"type": "function", "function": {...}})
 * or flat as the Responses API writes it, and an MCP tools/list entry.
 * "type" and "name" are read by hand (K_SKIP); "annotations" too
 * (apply_annotations, in tools.c). MCP's title, outputSchema, icons and _meta mean
 * nothing to a run and are let through.
 */
static const key_spec_t openai_fn_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("parameters", K_SCHEMA), TOOL(parameters)},
    {KEY("strict", K_BOOL), TOOL(strict)},
};
const key_table_t reg_openai_fn_table = TABLE(openai_fn_keys);

static const key_spec_t openai_keys[] = {
    {KEY("type", K_SKIP)},
    {KEY("function", K_OBJECT), .sub = &reg_openai_fn_table},
};
const key_table_t reg_openai_table = TABLE(openai_keys);

static const key_spec_t openai_flat_keys[] = {
    {KEY("type", K_SKIP)},
};
const key_table_t reg_openai_flat_table = {openai_flat_keys, 1, &reg_openai_fn_table, 0};

static const key_spec_t mcp_decl_keys[] = {
    {KEY("name", K_SKIP)},
    {KEY("title", K_SKIP)},
    {KEY("description", K_STRING), TOOL(description)},
    {KEY("inputSchema", K_SCHEMA), TOOL(parameters)},
    {KEY("outputSchema", K_SKIP)},
    {KEY("annotations", K_SKIP)},
    {KEY("icons", K_SKIP)},
    {KEY("_meta", K_SKIP)},
    {KEY("execution", K_SKIP)},
};
const key_table_t reg_mcp_decl_table = TABLE(mcp_decl_keys);

/* Per job; 0 (absent) means no cap. */
static const key_spec_t guard_keys[] = {
    {KEY("max_steps", K_UINT), GRD(max_steps), .min = 1},
    {KEY("max_calls", K_UINT), GRD(max_calls), .min = 1},
    {KEY("max_wall", K_DURATION), GRD(max_wall_us), .flags = F_MIN_EXCL},
    {KEY("max_cost", K_NUMBER), GRD(max_cost), .flags = F_MIN_EXCL},
};
static const key_table_t guard_table = TABLE(guard_keys);

static const key_spec_t top_keys[] = {
    {KEY("defaults", K_OBJECT), FIELD(tp_registry_t, defaults), .sub = &reg_policy_table},
    {KEY("guards", K_OBJECT), FIELD(tp_registry_t, guards), .sub = &guard_table},
    {KEY("retain", K_DURATION), FIELD(tp_registry_t, retain_us), .flags = F_MIN_EXCL},
    {KEY("schema_dialect", K_DIALECT), FIELD(tp_registry_t, schema_dialect)},
    {KEY("formats", K_FORMATS), FIELD(tp_registry_t, formats)},
    {KEY("schema_refs", K_SCHEMA_REFS), FIELD(tp_registry_t, schema_refs)},
    {KEY("tools", K_TOOLS)},
    {KEY("mcp_servers", K_SERVERS)},
    {KEY("run", K_RUN)},
    /* a tools/list result copied whole */
    {KEY("nextCursor", K_SKIP)},
    {KEY("_meta", K_SKIP)},
};
const key_table_t reg_top_table = TABLE(top_keys);

/* The policy file (--policy): toolpool's settings, no tools of its own. */
static const key_spec_t policy_file_keys[] = {
    {KEY("defaults", K_OBJECT), FIELD(tp_registry_t, defaults), .sub = &reg_policy_table},
    {KEY("guards", K_OBJECT), FIELD(tp_registry_t, guards), .sub = &guard_table},
    {KEY("retain", K_DURATION), FIELD(tp_registry_t, retain_us), .flags = F_MIN_EXCL},
    {KEY("schema_dialect", K_DIALECT), FIELD(tp_registry_t, schema_dialect)},
    {KEY("formats", K_FORMATS), FIELD(tp_registry_t, formats)},
    {KEY("schema_refs", K_SCHEMA_REFS), FIELD(tp_registry_t, schema_refs)},
    {KEY("run", K_RUN)},
};
const key_table_t reg_policy_file_table = TABLE(policy_file_keys);

/* The adapters, and which of them this build's worker can run. */
const adapter_info_t reg_adapters[] = {
    [TP_ADAPTER_EXEC] = {"exec", true},
    [TP_ADAPTER_PLUGIN] = {"plugin", true},
    [TP_ADAPTER_MCP] = {"mcp", true},
    [TP_ADAPTER_HTTP] = {"http", true},
};
