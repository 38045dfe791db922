/*
 * toolpool tools: the registry's tools, as names or as a tool list.
 *
 *   toolpool tools list [--registry FILE] [--policy FILE]
 *   toolpool tools export --format openai|mcp|toolpool [--registry FILE] [--policy FILE]
 *
 * export prints what serve's GET /v1/tools?format= answers (supervisor/
 * registry/toolsdoc.c renders both), so an export loads again as a
 * registry and gives the same tools: an OpenAI or MCP one with the same
 * policy, toolpool's own as it is.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "registry.h"
#include "toolsdoc.h"

/* clang-format off */
static const char tools_usage[] =
    "usage: toolpool tools list [--registry FILE] [--policy FILE]\n"
    "       toolpool tools export --format openai|mcp|toolpool [--registry FILE] [--policy FILE]\n"
    "list prints the registry's tools, one a line: its name, its adapter, whether\n"
    "it is idempotent (retried after a timeout, run again after a crash) and\n"
    "where that came from (a run entry, defaults, MCP annotations...), tab-separated.\n"
    "export prints its tools as an OpenAI function tool list, an MCP tools/list\n"
    "result, or toolpool's own rendering with each tool's adapter and policy: the\n"
    "JSON that serve's GET /v1/tools?format= answers. An OpenAI or MCP export is a\n"
    "registry file again, given the same settings (\"run\" block or --policy);\n"
    "toolpool's is one as it is, with every setting (paths made absolute).\n"
    "  -r, --registry FILE   the tools (default: tools.json)\n"
    "      --policy FILE     toolpool's settings of those tools, in a file of their own\n"
    "  -f, --format F        export: openai, mcp or toolpool\n"
    "exit status: 0 done, 2 usage or a registry error\n";
/* clang-format on */

static const char *adapter_of(const tp_tool_t *t)
{
    switch (t->adapter) {
    case TP_ADAPTER_EXEC:
        return "exec";
    case TP_ADAPTER_PLUGIN:
        return "plugin";
    case TP_ADAPTER_MCP:
        return "mcp";
    case TP_ADAPTER_HTTP:
        return "http";
    }
    return "?";
}

int tp_cmd_tools(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(tools_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1], *registry = "tools.json", *policy = NULL, *format = NULL;
    bool export = strcmp(sub, "export") == 0;
    if (!export && strcmp(sub, "list") != 0) {
        tp_log_error("cli.usage", "tools: unknown subcommand \"%s\" (expected list or export)", sub);
        return tp_cli_misuse(tools_usage);
    }
    const tp_cli_opt_t opts[] = {
        {"registry", 'r', true, &registry, NULL},
        {"policy", 0, true, &policy, NULL},
        {"format", 'f', true, &format, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc - 1, argv + 1, tools_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc - 1) {
        tp_log_error("cli.usage", "tools %s takes no operand, got \"%s\"", sub, argv[1 + optind]);
        return 2;
    }
    tp_toolsdoc_format_t f = TP_TOOLSDOC_TOOLPOOL;
    if (export && (format == NULL || tp_toolsdoc_format_parse(format, &f) < 0)) {
        tp_log_error("cli.bad_option", "tools export: --format: expected openai, mcp or toolpool, got %s%s%s",
                     format ? "\"" : "", format ? format : "nothing", format ? "\"" : "");
        return 2;
    }
    if (!export && format != NULL) {
        tp_log_error("cli.usage", "tools list takes no --format (tools export does)");
        return 2;
    }
    char err[TP_REGISTRY_ERRLEN];
    tp_registry_t *reg = tp_registry_load_policy(registry, policy, err, sizeof err);
    if (reg == NULL) {
        tp_log_error("registry.invalid", "%s", err);
        return 2;
    }
    int status = 0;
    if (!export) {
        for (size_t i = 0; i < reg->n_tools; i++) {
            const tp_tool_t *t = &reg->tools[i];
            char from[TP_TOOL_NAME_MAX + 64];
            printf("%s\t%s\t%s\t%s\n", t->name, adapter_of(t), t->policy.idempotent ? "idempotent" : "not idempotent",
                   tp_toolsdoc_idempotent_from(t, from, sizeof from));
        }
    } else {
        json_t *doc = tp_toolsdoc_render(reg, f);
        int wrc = doc == NULL ? TP_ENOMEM : tp_cli_put_json(stdout, doc);
        if (wrc == TP_ENOMEM)
            tp_log_error("cli.out_of_memory", "tools export: out of memory");
        status = wrc == 0 ? 0 : 2;
        json_decref(doc);
    }
    if (fflush(stdout) != 0) {
        tp_log_error("cli.write_failed", "tools: writing standard output failed");
        status = 2;
    }
    tp_registry_free(reg);
    return status;
}
