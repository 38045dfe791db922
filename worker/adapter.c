/*
 * The adapter table: each kind of tool the registry declares whose calls
 * run one at a time, and the function that runs them. The http and mcp
 * adapters' calls run many at once, on the worker's loop: adapter.h.
 */
#include "adapter.h"

#include <stddef.h>

/* clang-format off */
static const tp_worker_adapter_t adapters[] = {
    {TOOLPOOL__ADAPTER__ADAPTER_EXEC, "exec", tp_exec_run},
    {TOOLPOOL__ADAPTER__ADAPTER_PLUGIN, "plugin", tp_plugin_run},
};
/* clang-format on */

const tp_worker_adapter_t *tp_adapter_find(Toolpool__Adapter kind)
{
    for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++)
        if (adapters[i].kind == kind)
            return &adapters[i];
    return NULL;
}
