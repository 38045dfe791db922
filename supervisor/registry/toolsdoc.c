/*
 * The registry's tools rendered for clients (toolsdoc.h): serve's GET
 * /v1/tools and `toolpool tools export` print the same JSON byte for byte,
 * and an export loads again as a registry: an OpenAI list or an MCP
 * tools/list result with the same names, descriptions and schemas,
 * toolpool's own rendering with every setting too (render.c); the
 * tools/list of `toolpool mcp` and /mcp is the same tool rendered as a host
 * reads it.
 */
#include "toolsdoc.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jsonschema.h"
#include "registry_internal.h"

int tp_toolsdoc_format_parse(const char *s, tp_toolsdoc_format_t *f)
{
    if (s == NULL)
        return TP_EINVAL;
    if (strcmp(s, "toolpool") == 0)
        *f = TP_TOOLSDOC_TOOLPOOL;
    else if (strcmp(s, "openai") == 0)
        *f = TP_TOOLSDOC_OPENAI;
    else if (strcmp(s, "mcp") == 0)
        *f = TP_TOOLSDOC_MCP;
    else
        return TP_EINVAL;
    return 0;
}

/*
 * A tool's parameters as an inputSchema. MCP wants an object schema with
 * "type": "object" at its root (the TypeScript SDK refuses a tools/list
 * without it), and reads a schema that names no dialect as 2020-12, while
 * toolpool checks arguments in the dialect the registry gives the tool
 * (draft-07 unless "schema_dialect" says 2020-12): so the dialect is named, and
 * a root without "type": "object" gets it. Arguments are always objects,
 * so for them the schema says what it said. A tool without parameters
 * takes any object.
 */
static json_t *served_schema(const tp_tool_t *t)
{
    const json_t *p = t->parameters;
    json_t *s = json_object();
    if (s == NULL)
        return NULL;
    int rc = 0;
    if (p == NULL || !json_is_object(p) || json_object_get(p, "$schema") == NULL) {
        /* the dialect the arguments are checked in: the tool's, else draft-07 */
        bool d2020 = t->schema != NULL && tp_jsonschema_dialect(t->schema) == TP_JSONSCHEMA_2020_12;
        rc |= json_object_set_new(s, "$schema",
                                  json_string(d2020 ? "https://json-schema.org/draft/2020-12/schema"
                                                    : "http://json-schema.org/draft-07/schema#"));
    }
    rc |= json_object_set_new(s, "type", json_string("object"));
    if (json_is_false(p))
        rc |= json_object_set_new(s, "not", json_object()); /* accepts nothing, as false does */
    if (json_is_object(p)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)p, key, v) {
            if (strcmp(key, "type") != 0)
                rc |= json_object_set(s, key, v);
        }
    }
    if (rc != 0) {
        json_decref(s);
        return NULL;
    }
    return s;
}

/* A tool's parameters, or the schema of a tool that declares none: any object. */
static json_t *params_json(const tp_tool_t *t)
{
    return t->parameters ? json_incref(t->parameters) : json_pack("{s:s, s:{}}", "type", "object", "properties");
}

/*
 * A tool's policy: its timeout, attempts, idempotent (and where that came
 * from) and fallback always, then every other key whose value is not
 * toolpool's default, as the registry writes it.
 */
static json_t *policy_json(const tp_tool_t *t)
{
    char from[TP_TOOL_NAME_MAX + 64];
    tp_policy_t builtin;
    tp_policy_init(&builtin);
    json_t *policy = json_pack("{s:o, s:I, s:b, s:s, s:[]}", "timeout", reg_duration_json(t->policy.timeout_us),
                               "attempts", (json_int_t)t->policy.attempts, "idempotent", t->policy.idempotent,
                               "idempotent_from", tp_toolsdoc_idempotent_from(t, from, sizeof from), "fallback");
    if (policy != NULL && reg_render_object(policy, &reg_policy_table, &t->policy, &builtin) < 0) {
        json_decref(policy);
        return NULL;
    }
    return policy;
}

/*
 * One tool in toolpool's own rendering, a tool of a registry file: its
 * adapter named, its adapter key and its own settings as the registry
 * holds them (paths resolved), and its policy in an object of its own.
 */
static json_t *own_json(const tp_registry_t *reg, const tp_tool_t *t)
{
    key_table_t own = reg_tool_table; /* the tool's own keys, not the policy chained on */
    own.next = NULL;
    /*
     * The schema settings it has from the registry's top level said in the
     * tool: its parameters' dialect where a tool of its adapter would read
     * them in another, and formats asserted.
     */
    tp_tool_t as = *t;
    int reread = t->adapter == TP_ADAPTER_MCP ? TP_JSONSCHEMA_2020_12 : TP_JSONSCHEMA_DRAFT7;
    if (as.schema_dialect == 0 && t->schema != NULL && (int)tp_jsonschema_dialect(t->schema) != reread)
        as.schema_dialect = (int)tp_jsonschema_dialect(t->schema);
    if (as.formats == 0 && reg->formats == TP_FORMATS_ASSERT)
        as.formats = TP_FORMATS_ASSERT;
    json_t *tool = json_pack("{s:s, s:s, s:o, s:s, s:o}", "name", t->name, "description", t->description, "parameters",
                             params_json(t), "adapter", reg_adapters[t->adapter].name, reg_adapters[t->adapter].name,
                             reg_render_adapter(t));
    if (tool == NULL || reg_render_object(tool, &own, &as, NULL) < 0 ||
        json_object_set_new(tool, "policy", policy_json(t)) != 0) {
        json_decref(tool);
        return NULL;
    }
    return tool;
}

/*
 * The keys of an MCP tool's own declaration (tool->mcp_decl) after the
 * name: title before the description, the rest after the inputSchema.
 */
static int put_decl(json_t *tool, const tp_tool_t *t, bool head)
{
    static const char *const head_keys[] = {"title"}, *const tail_keys[] = {"outputSchema", "annotations", "icons",
                                                                            "_meta"};
    const char *const *keys = head ? head_keys : tail_keys;
    size_t n = head ? 1 : 4;
    for (size_t i = 0; t->mcp_decl != NULL && i < n; i++) {
        json_t *v = json_object_get(t->mcp_decl, keys[i]);
        if (v != NULL && json_object_set(tool, keys[i], v) != 0)
            return -1;
    }
    return 0;
}

tp_task_support_t tp_toolsdoc_task_support(const tp_tool_t *t)
{
    const char *v = json_string_value(json_object_get(json_object_get(t->mcp_decl, "execution"), "taskSupport"));
    return v == NULL                     ? TP_TASKS_OPTIONAL
           : strcmp(v, "forbidden") == 0 ? TP_TASKS_FORBIDDEN
           : strcmp(v, "required") == 0  ? TP_TASKS_REQUIRED
                                         : TP_TASKS_OPTIONAL;
}

json_t *tp_toolsdoc_mcp_tool(const tp_tool_t *t, tp_toolsdoc_as_t as)
{
    static const char *const support[] = {
        [TP_TASKS_OPTIONAL] = "optional", [TP_TASKS_FORBIDDEN] = "forbidden", [TP_TASKS_REQUIRED] = "required"};
    tp_task_support_t support_of = tp_toolsdoc_task_support(t);
    json_t *exec;
    bool served = as == TP_TOOLSDOC_SERVED;
    json_t *schema = served ? served_schema(t) : params_json(t);
    json_t *tool = schema ? json_pack("{s:s}", "name", t->name) : NULL;
    if (tool == NULL || put_decl(tool, t, true) < 0 ||
        ((!served || (t->description && t->description[0])) &&
         json_object_set_new(tool, "description", json_string(t->description ? t->description : "")) != 0)) {
        json_decref(tool);
        json_decref(schema);
        return NULL;
    }
    if (json_object_set_new(tool, "inputSchema", schema) != 0 || put_decl(tool, t, false) < 0 ||
        (served &&
         json_object_set_new(tool, "execution", json_pack("{s:s}", "taskSupport", support[support_of])) != 0) ||
        (!served && (exec = json_object_get(t->mcp_decl, "execution")) != NULL &&
         json_object_set(tool, "execution", exec) != 0)) {
        json_decref(tool); /* the set took schema, failing too */
        return NULL;
    }
    return tool;
}

const char *tp_toolsdoc_idempotent_from(const tp_tool_t *t, char *buf, size_t n)
{
    const char *server = t->mcp_server ? t->mcp_server : "?";
    const char *mcp_name = t->mcp_tool ? t->mcp_tool : t->name;
    json_t *a = json_object_get(t->mcp_decl, "annotations");
    switch (t->idempotent_from) {
    case TP_FROM_BUILTIN:
        snprintf(buf, n, "toolpool's default");
        break;
    case TP_FROM_MCP:
        if (json_is_true(json_object_get(a, "readOnlyHint")))
            snprintf(buf, n, "MCP annotations (readOnlyHint)");
        else if (json_is_true(json_object_get(a, "idempotentHint")))
            snprintf(buf, n, "MCP annotations (idempotentHint)");
        else if (json_is_true(json_object_get(a, "destructiveHint")))
            snprintf(buf, n, "MCP annotations (destructiveHint)");
        else
            snprintf(buf, n, "MCP's defaults (no readOnlyHint or idempotentHint)");
        break;
    case TP_FROM_METHOD:
        snprintf(buf, n, "its method (%s)", t->http_method ? t->http_method : "?");
        break;
    case TP_FROM_DEFAULTS:
        snprintf(buf, n, "defaults");
        break;
    case TP_FROM_SERVER:
        snprintf(buf, n, "mcp_servers.%s.defaults", server);
        break;
    case TP_FROM_SERVER_TOOL:
        snprintf(buf, n, "mcp_servers.%s.tools.%s", server, mcp_name);
        break;
    case TP_FROM_TOOL:
        snprintf(buf, n, "the tool");
        break;
    case TP_FROM_RUN:
        snprintf(buf, n, "run.%s", t->name);
        break;
    case TP_FROM_POLICY_RUN:
        snprintf(buf, n, "the policy file's run.%s", t->name);
        break;
    }
    return buf;
}

/*
 * One tool as an OpenAI function tool (Chat Completions' nested form), with
 * its "strict" when the registry has it: false, OpenAI's default, is left out.
 */
static json_t *openai_json(const tp_tool_t *t)
{
    json_t *fn = json_pack("{s:s, s:s, s:o}", "name", t->name, "description", t->description, "parameters",
                           params_json(t));
    if (fn != NULL && t->strict && json_object_set_new(fn, "strict", json_true()) != 0) {
        json_decref(fn);
        return NULL;
    }
    return json_pack("{s:s, s:o}", "type", "function", "function", fn);
}

/* The registry's "guards", in toolpool's rendering beside its tools, when it sets any. */
static int render_guards(json_t *doc, const tp_registry_t *reg)
{
    key_table_t top = reg_top_table;
    for (size_t i = 0; i < top.n; i++)
        if (strcmp(top.keys[i].name, "guards") == 0) {
            top.keys += i;
            top.n = 1;
            return reg_render_object(doc, &top, reg, NULL);
        }
    return 0;
}

json_t *tp_toolsdoc_render(const tp_registry_t *reg, tp_toolsdoc_format_t f)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < reg->n_tools; i++) {
        const tp_tool_t *t = &reg->tools[i];
        json_t *one = f == TP_TOOLSDOC_TOOLPOOL ? own_json(reg, t)
                      : f == TP_TOOLSDOC_OPENAI ? openai_json(t)
                                                : tp_toolsdoc_mcp_tool(t, TP_TOOLSDOC_DECLARED);
        if (json_array_append_new(list, one) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    if (list == NULL || f == TP_TOOLSDOC_OPENAI)
        return list;
    json_t *doc = json_pack("{s:o}", "tools", list);
    if (doc != NULL && f == TP_TOOLSDOC_TOOLPOOL && render_guards(doc, reg) < 0) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}
