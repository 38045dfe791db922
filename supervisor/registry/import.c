/*
 * "mcp_servers": each server read against its table, started, its tools
 * listed and the server stopped; each listed tool becomes a tool object
 * that reg_parse_tools reads like a declared one.
 */
#include "registry_internal.h"

#include "clock.h"
#include "mcpstdio.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One "mcp_servers" entry, as read. */
typedef struct {
    char **command;
    char **env;
    char *cwd;
    uint64_t start_timeout_us;
    uint32_t instances;     /* copies of the server, shared by its tools' calls; 0: 1 */
    uint32_t max_in_flight; /* calls at once on one copy; 0: the default */
    int protocol;           /* the era it may be spoken to in: tp_mcp_era_t */
    json_t *defaults;
    json_t *tools;
} server_spec_t;

#define SRV(m) FIELD(server_spec_t, m)
static const key_spec_t server_keys[] = {
    {KEY("command", K_ARGV), SRV(command), .flags = F_REQUIRED | F_PATH},
    {KEY("env", K_ENV), SRV(env)},
    {KEY("cwd", K_STRING), SRV(cwd), .flags = F_NONEMPTY | F_PATH},
    {KEY("start_timeout", K_DURATION), SRV(start_timeout_us), .flags = F_MIN_EXCL},
    {KEY("instances", K_UINT), SRV(instances), .min = 1, .max = TP_MCP_INSTANCES_MAX},
    {KEY("max_in_flight", K_UINT), SRV(max_in_flight), .min = 1, .max = TP_MAX_IN_FLIGHT_MAX},
    {KEY("protocol", K_MCP_ERA), SRV(protocol)},
    {KEY("defaults", K_JSON), SRV(defaults)},
    {KEY("tools", K_JSON), SRV(tools)},
};
static const key_table_t server_table = TABLE(server_keys);

/* How long a server has to start and list its tools, unless its start_timeout says otherwise. */
#define IMPORT_TIMEOUT_US (30 * 1000000ull)
/* The most pages of tools/list, and tools, one server's import takes. */
#define IMPORT_PAGES_MAX 1000
#define IMPORT_TOOLS_MAX 10000

static void server_spec_clear(server_spec_t *sp)
{
    reg_free_argv(sp->command);
    reg_free_argv(sp->env);
    free(sp->cwd);
    json_decref(sp->defaults);
    json_decref(sp->tools);
    memset(sp, 0, sizeof *sp);
}

/*
 * A server's "defaults" and each entry of its "tools" hold policy keys
 * only: checked here, where they are written, into a scratch policy.
 */
static int check_server_policy(loader_t *ld, server_spec_t *sp)
{
    char got[96];
    tp_policy_t scratch;
    tp_policy_init(&scratch);
    int rc = 0;
    if (sp->defaults != NULL) {
        mark_t m = reg_where_key(&ld->at, "defaults");
        rc = reg_parse_object(ld, sp->defaults, &reg_policy_table, &scratch);
        if (rc == 0)
            rc = reg_check_output_once(ld, sp->defaults);
        if (rc == 0)
            reg_where_pop(&ld->at, m);
    }
    if (rc == 0 && sp->tools != NULL) {
        mark_t m = reg_where_key(&ld->at, "tools");
        if (!json_is_object(sp->tools)) {
            rc = reg_fail(ld,
                          "expected an object of the server's tool names, each with policy keys like "
                          "{\"read_file\": {\"timeout\": \"5s\"}}, got %s",
                          GOT(sp->tools));
        } else {
            const char *k;
            json_t *v;
            json_object_foreach(sp->tools, k, v) {
                mark_t mk = reg_where_key(&ld->at, k);
                if ((rc = reg_parse_object(ld, v, &reg_policy_table, &scratch)) < 0 ||
                    (rc = reg_check_output_once(ld, v)) < 0)
                    break;
                reg_where_pop(&ld->at, mk);
            }
        }
        if (rc == 0)
            reg_where_pop(&ld->at, m);
    }
    reg_policy_clear(&scratch);
    return rc;
}

/* The command as one line for messages. */
static const char *command_text(char **argv, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; argv[i] != NULL && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? " " : "", argv[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

/* A tool object as the registry would declare it, for one tool the server listed. */
static json_t *imported_tool(const char *server, const server_spec_t *sp, const char *dir, json_t *listed, char *full,
                             size_t n)
{
    const char *name = json_string_value(json_object_get(listed, "name"));
    snprintf(full, n, "%s.%s", server, name);
    json_t *cmd = json_array(), *mcp = json_object(), *t = json_object();
    for (char **a = sp->command; *a; a++)
        json_array_append_new(cmd, json_string(*a));
    json_object_set_new(mcp, "command", cmd);
    json_object_set_new(mcp, "tool", json_string(name));
    if (sp->env != NULL) {
        json_t *env = json_object();
        for (char **e = sp->env; *e; e++) {
            const char *eq = strchr(*e, '=');
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - *e), *e);
            json_object_set_new(env, key, json_string(eq + 1));
        }
        json_object_set_new(mcp, "env", env);
    }
    json_object_set_new(mcp, "cwd", json_string(sp->cwd ? sp->cwd : dir));
    if (sp->instances)
        json_object_set_new(mcp, "instances", json_integer(sp->instances));
    if (sp->protocol != TP_MCP_ERA_AUTO)
        json_object_set_new(mcp, "protocol", json_string(tp_mcp_era_names[sp->protocol]));
    if (sp->max_in_flight)
        json_object_set_new(t, "max_in_flight", json_integer(sp->max_in_flight));
    json_object_set_new(t, "name", json_string(full));
    json_t *desc = json_object_get(listed, "description");
    if (json_is_string(desc))
        json_object_set(t, "description", desc);
    json_t *schema = json_object_get(listed, "inputSchema");
    if (json_is_object(schema))
        json_object_set(t, "parameters", schema);
    json_object_set_new(t, "mcp", mcp);
    return t;
}

/*
 * Starts one server (a process group of its own), finds its era and runs
 * its handshake (tp_mcpio_open),
 * lists its tools (following nextCursor), and stops it. Each tool listed
 * is appended to ld->imported. An error names the server, says what went
 * wrong and quotes the end of the server's stderr. 0; the code the server
 * failed with (tp_mcpio_spawn's -errno, TP_ECLOSED, TP_ETIMEDOUT, TP_E2BIG,
 * TP_EREFUSED: it refused, or listed what toolpool cannot take; TP_EBADMSG:
 * an answer the JSON parser cannot hold, said at once), TP_ENOMEM,
 * or TP_EINVAL when it lists no tools or lacks one the registry names.
 */
static int import_server(loader_t *ld, const char *server, size_t pos, server_spec_t *sp)
{
    char err[512], version[32], cmd[256], how[96], name[TP_TOOL_NAME_MAX + 130];
    tp_mcpio_t c = {0};
    uint64_t timeout = sp->start_timeout_us ? sp->start_timeout_us : IMPORT_TIMEOUT_US;
    uint64_t deadline = tp_now_us() + timeout;
    command_text(sp->command, cmd, sizeof cmd);
    /* a server runs in the registry's folder unless its cwd says otherwise, as an exec tool does */
    int rc = tp_mcpio_spawn(&c, sp->command, sp->env, sp->cwd ? sp->cwd : ld->dir, true, err, sizeof err);
    if (rc < 0) {
        tp_mcpio_free(&c);
        return reg_fail_code(ld, rc, "cannot import the tools of MCP server \"%s\": %s", server, err);
    }
    rc = tp_mcpio_open(&c, (tp_mcp_era_t)sp->protocol, deadline, NULL, version, sizeof version, err, sizeof err);
    /* its tools' version when the registry gives none (settle_version, in tools.c) */
    if (rc == 0 && c.server_version[0] &&
        json_object_set_new(ld->server_versions, server, json_string(c.server_version)) != 0)
        rc = TP_ENOMEM;
    json_t *cursor = NULL, *seen = json_object(); /* the cursors given so far: a repeat never ends */
    size_t listed = 0, pages = 0;
    int list_rc = 0; /* TP_EREFUSED: a tool name toolpool cannot take, pages without end; TP_ENOMEM */
    if (rc == 0 && seen == NULL)
        rc = TP_ENOMEM;
    while (rc == 0) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *answer = NULL;
        int64_t id;
        rc = tp_mcpio_request(&c, "tools/list", params, deadline, NULL, 64u << 20, &id, &answer, err, sizeof err);
        if (rc != 0)
            break;
        json_t *e = json_object_get(answer, "error"), *result = json_object_get(answer, "result");
        json_t *tools = json_object_get(result, "tools");
        const char *type = e ? NULL : tp_mcpio_result_type(result);
        if (e != NULL || type != NULL || !json_is_array(tools)) {
            snprintf(err, sizeof err, "tools/list failed: %s%.60s%s",
                     e      ? (json_string_value(json_object_get(e, "message")) ?: "an error without a message")
                     : type ? "its answer's resultType is \""
                            : "its answer has no tools array",
                     type ? type : "", type ? "\", not \"complete\"" : "");
            json_decref(answer);
            rc = TP_EREFUSED;
            break;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *tn = json_string_value(json_object_get(t, "name"));
            char full[sizeof name];
            snprintf(full, sizeof full, "%s.%s", server, tn ? tn : "");
            if (tn == NULL || !reg_name_ok(full)) {
                snprintf(err, sizeof err,
                         "it lists a tool named %.100s%s%s, which is no toolpool tool name "
                         "(letters, digits, '_', '.', '-', at most %d bytes with the server's prefix)",
                         tn ? "\"" : "", tn ? tn : "(none)", tn ? "\"" : "", TP_TOOL_NAME_MAX);
                list_rc = TP_EREFUSED;
                break;
            }
            json_t *obj = imported_tool(server, sp, ld->dir, t, name, sizeof name);
            size_t *from = realloc(ld->imported_from, (json_array_size(ld->imported) + 1) * sizeof *from);
            if (from != NULL)
                ld->imported_from = from;
            if (obj == NULL || from == NULL || json_array_append(ld->imported_listed, t) != 0) {
                json_decref(obj);
                list_rc = TP_ENOMEM; /* said below */
                break;
            }
            from[json_array_size(ld->imported)] = pos;
            json_array_append_new(ld->imported, obj);
            listed++;
        }
        json_t *next = json_object_get(result, "nextCursor");
        json_decref(cursor);
        cursor = json_is_string(next) && list_rc == 0 ? json_incref(next) : NULL;
        pages++;
        if (cursor != NULL && json_object_get(seen, json_string_value(cursor)) != NULL) {
            snprintf(err, sizeof err,
                     "tools/list gave the cursor \"%.100s\" a second time (page %zu): its pages never end",
                     json_string_value(cursor), pages + 1);
            list_rc = TP_EREFUSED;
        } else if (cursor != NULL && (pages >= IMPORT_PAGES_MAX || listed >= IMPORT_TOOLS_MAX)) {
            snprintf(err, sizeof err, "tools/list goes on past %zu pages and %zu tools: more than an import takes",
                     pages, listed);
            list_rc = TP_EREFUSED;
        } else if (cursor != NULL && json_object_set_new(seen, json_string_value(cursor), json_true()) != 0) {
            list_rc = TP_ENOMEM;
        }
        json_decref(answer);
        if (list_rc != 0) {
            rc = list_rc;
            break;
        }
        if (cursor == NULL)
            break;
    }
    json_decref(cursor);
    json_decref(seen);
    if (rc == TP_ECLOSED)
        snprintf(err, sizeof err, "it %s before it had listed its tools", tp_mcpio_ended(&c, 200000, how, sizeof how));
    else if (rc == TP_ETIMEDOUT)
        snprintf(err, sizeof err,
                 "it did not answer its handshake (server/discover, or initialize) and tools/list within %.3gs "
                 "(start_timeout)",
                 (double)timeout / 1e6);
    else if (rc == TP_E2BIG)
        snprintf(err, sizeof err, "it wrote a line of more than 64 MiB");
    else if (rc == TP_ENOMEM)
        snprintf(err, sizeof err, "out of memory");
    tp_mcpio_close(&c, 200000);
    char tail[TP_MCP_TAIL];
    snprintf(tail, sizeof tail, "%s", c.tail);
    tp_mcpio_free(&c);
    /* A server that failed its import brings none of its tools: the error is its one word. */
    while (rc != 0 && listed > 0) {
        json_array_remove(ld->imported, json_array_size(ld->imported) - 1);
        json_array_remove(ld->imported_listed, json_array_size(ld->imported_listed) - 1);
        listed--;
    }
    if (rc != 0)
        return reg_fail_code(ld, rc, "cannot import the tools of MCP server \"%s\" (`%.120s`): %s%s%.300s%s", server,
                             cmd, err, tail[0] ? "; its stderr: \"" : "", tail, tail[0] ? "\"" : "");
    if (listed == 0)
        return reg_fail(ld, "MCP server \"%s\" (`%.120s`) lists no tools", server, cmd);
    /* Every override names a tool the server has. */
    const char *k;
    json_t *v;
    json_object_foreach(sp->tools, k, v) {
        snprintf(name, sizeof name, "%s.%s", server, k);
        bool found = false;
        for (size_t i = json_array_size(ld->imported) - listed; i < json_array_size(ld->imported) && !found; i++)
            found = strcmp(json_string_value(json_object_get(json_array_get(ld->imported, i), "name")), name) == 0;
        if (!found) {
            reg_where_key(&ld->at, "tools");
            reg_where_key(&ld->at, k);
            return reg_fail(ld, "MCP server \"%s\" has no tool \"%s\"", server, k);
        }
    }
    return 0;
}

/*
 * Every "mcp_servers" entry, in the file's order: read against its table,
 * its policy blocks checked, then its tools imported. All before "tools"
 * is read, so the tool array and the name index are sized once.
 */
int reg_import_servers(loader_t *ld)
{
    if (ld->servers_json == NULL)
        return 0;
    ld->imported = json_array();
    ld->imported_listed = json_array();
    ld->server_versions = json_object();
    if (ld->imported == NULL || ld->imported_listed == NULL || ld->server_versions == NULL)
        return reg_fail_oom(ld);
    mark_t m = reg_where_key(&ld->at, "mcp_servers");
    size_t pos = 0;
    const char *key;
    json_t *v;
    json_object_foreach(ld->servers_json, key, v) {
        mark_t ms = reg_where_key(&ld->at, key);
        server_spec_t sp = {0};
        char prefix[TP_TOOL_NAME_MAX + 2];
        snprintf(prefix, sizeof prefix, "%s.x", key);
        int rc = 0;
        if (!reg_name_ok(prefix) || strlen(key) > 64)
            rc = reg_fail(ld, "expected a server name of letters, digits, '_', '.' or '-', at most 64 bytes: its tools "
                              "are named NAME.TOOL");
        if (rc == 0)
            rc = reg_parse_object(ld, v, &server_table, &sp);
        if (rc == 0)
            rc = check_server_policy(ld, &sp);
        if (rc == 0)
            rc = import_server(ld, key, pos, &sp);
        server_spec_clear(&sp);
        if (rc < 0)
            return rc;
        reg_where_pop(&ld->at, ms);
        pos++;
    }
    reg_where_pop(&ld->at, m);
    return 0;
}
