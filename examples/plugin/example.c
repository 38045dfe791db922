/*
 * An example toolpool plugin: two tools in one shared object.
 *
 *   noop  -> {}                     (the benchmark's no-op call)
 *   echo  -> the call's args back
 *
 * Any other tool name fails with NotFound, so a registry typo is visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <toolpool/plugin.h>

int tp_plugin_call_v1(const tp_plugin_call_t *call, tp_plugin_reply_t *reply)
{
    if (strcmp(call->tool, "noop") == 0) {
        reply->result = strdup("{}");
        return reply->result ? 0 : -1;
    }
    if (strcmp(call->tool, "echo") == 0) {
        reply->result = strndup(call->args, call->args_len);
        return reply->result ? 0 : -1;
    }
    reply->error = "NotFound";
    size_t n = strlen(call->tool) + 64;
    reply->message = malloc(n);
    if (reply->message)
        snprintf(reply->message, n, "example plugin has no tool named %s", call->tool);
    return 0;
}
