/*
 * toolpool: the command-line front door. Each subcommand lives in a file
 * of its own (cmd_*.c); this one makes the standard descriptors safe and
 * dispatches by the command table.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"

/* clang-format off */
static const char usage_text[] =
    "usage: toolpool COMMAND [OPTIONS]\n"
    "\n"
    "Runs AI-agent tool calls in a pool of worker processes with hard timeouts,\n"
    "classified failures, retries with backoff, and one result record per call.\n"
    "\n"
    "commands:\n"
    "  run          run a file of calls (JSON lines), one result line per call\n"
    "  serve        the same pool as an HTTP/JSON service, on a Unix socket or\n"
    "               a loopback port: calls, batches, checkpoints, breakers,\n"
    "               escalations, metrics\n"
    "  mcp          the same pool as an MCP server on stdio, for an agent host:\n"
    "               tools/list, and tools/call with every recovery rule\n"
    "  demo         the bundled example: a hung search and its fallback, a\n"
    "               forbidden delete whose circuit opens, a rate-limited retry\n"
    "  trace        print a results file (or calls recorded in the store) as\n"
    "               each call's story of attempts\n"
    "  breakers     list, show or reset circuit breakers in a store\n"
    "  escalations  list, show or resolve calls handed to a person\n"
    "  checkpoints  list jobs, or show one job's steps so far\n"
    "  store check  read and check every record of a store; report the bad ones\n"
    "  store info   how big a store is: file, map, free pages, records by kind\n"
    "  store prune  drop recorded results by age, job, outcome or tool\n"
    "  store compact\n"
    "               give the space of dropped records back to the file system\n"
    "  stats        per tool, from the store's results: calls, failures by class\n"
    "               and kind, retries, fallback hops, timeouts, latency, queue wait\n"
    "  top          a live view of every supervisor on the store: running calls\n"
    "               with their age and attempt (stuck ones marked), per-tool\n"
    "               rates and failures, queues, a run's progress and ETA\n"
    "  metrics      the Prometheus text of every supervisor on the store\n"
    "  failures     failed calls grouped by tool, kind and message, with counts,\n"
    "               first and last seen and example ids (a store or a results file)\n"
    "  forget       drop recorded results (calls, or whole jobs), so that the\n"
    "               next run does them again\n"
    "  tools        list the registry's tools, or export them as an OpenAI or\n"
    "               MCP tool list\n"
    "  merge        join the stores of a batch run in shards (run --shard K/N,\n"
    "               one store a machine) into one store, and one results file\n"
    "               in the calls file's order\n"
    "  shard-status for each shard's store: its calls done, failed and left\n"
    "  help         this text; `toolpool COMMAND --help` for a command's options\n"
    "\n"
    "exit status: 0 every call ok, 1 some call failed, 2 usage, registry or store error\n";
/* clang-format on */

/*
 * Makes sure fds 0, 1 and 2 are open before anything else opens a file, as
 * daemons do. Started with one of them closed (`toolpool run <&- >&-`), the
 * next file opened would take its number: LMDB's data file as fd 1, say,
 * and the result lines meant for standard output would be written over the
 * store. A closed one gets /dev/null. Exits 2 when even that fails.
 */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        /* The lower ones are open, so this takes fd itself. */
        int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got != fd) {
            int err = errno;
            if (got >= 0)
                close(got);
            dprintf(2, "toolpool: fd %d is closed and /dev/null cannot take its place: %s\n", fd,
                    strerror(got >= 0 ? EBADF : err));
            exit(2);
        }
    }
}

/* The subcommands, each a tp_cmd_* of cli.h taking its own argv. */
static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"run", tp_cmd_run},
    {"serve", tp_cmd_serve},
    {"mcp", tp_cmd_mcp},
    {"demo", tp_cmd_demo},
    {"trace", tp_cmd_trace},
    {"breakers", tp_cmd_breakers},
    {"escalations", tp_cmd_escalations},
    {"checkpoints", tp_cmd_checkpoints},
    {"store", tp_cmd_store},
    {"stats", tp_cmd_stats},
    {"failures", tp_cmd_failures},
    {"top", tp_cmd_top},
    {"metrics", tp_cmd_metrics},
    {"forget", tp_cmd_forget},
    {"tools", tp_cmd_tools},
    {"merge", tp_cmd_merge},
    {"shard-status", tp_cmd_shard_status},
};

int main(int argc, char **argv)
{
    std_fds_open();
    tp_log_init("toolpool");
    /* Out of the environment once read: what a command starts gets them only when it means to (the workers). */
    tp_log_from_env(1);
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        puts("toolpool " TP_VERSION);
        return 0;
    }
    tp_log_error("cli.usage", "unknown command \"%s\"", cmd);
    fputs(usage_text, stderr);
    return 2;
}
