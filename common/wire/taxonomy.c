#include "taxonomy.h"

#include <string.h>

/* One row per kind, in enum order: the single table the rest reads. */
static const struct {
    const char *name;
    tp_class_t klass;
} kinds[TP_KIND__COUNT] = {
    [TP_KIND_OK] = {"ok", TP_CLASS_OK},
    [TP_KIND_TIMEOUT] = {"Timeout", TP_CLASS_TRANSIENT},
    [TP_KIND_RATE_LIMITED] = {"RateLimited", TP_CLASS_TRANSIENT},
    [TP_KIND_SERVER_ERROR] = {"ServerError", TP_CLASS_TRANSIENT},
    [TP_KIND_WORKER_CRASHED] = {"WorkerCrashed", TP_CLASS_TRANSIENT},
    [TP_KIND_PERMISSION_DENIED] = {"PermissionDenied", TP_CLASS_PERMANENT},
    [TP_KIND_NOT_FOUND] = {"NotFound", TP_CLASS_PERMANENT},
    [TP_KIND_BAD_ARGUMENTS] = {"BadArguments", TP_CLASS_PERMANENT},
    [TP_KIND_TOOL_ERROR] = {"ToolError", TP_CLASS_PERMANENT},
    [TP_KIND_OUTPUT_TOO_LARGE] = {"OutputTooLarge", TP_CLASS_PERMANENT},
    [TP_KIND_OUT_OF_MEMORY] = {"OutOfMemory", TP_CLASS_PERMANENT},
    [TP_KIND_RESOURCE_LIMIT] = {"ResourceLimit", TP_CLASS_PERMANENT},
    [TP_KIND_INVALID_ARGUMENTS] = {"InvalidArguments", TP_CLASS_MALFORMED},
    [TP_KIND_UNKNOWN_TOOL] = {"UnknownTool", TP_CLASS_MALFORMED},
    [TP_KIND_INVALID_REQUEST] = {"InvalidRequest", TP_CLASS_MALFORMED},
    [TP_KIND_BUDGET_EXCEEDED] = {"BudgetExceeded", TP_CLASS_GUARD},
    [TP_KIND_STEP_CAP_REACHED] = {"StepCapReached", TP_CLASS_GUARD},
    [TP_KIND_CIRCUIT_OPEN] = {"CircuitOpen", TP_CLASS_GUARD},
    [TP_KIND_DEADLINE_EXCEEDED] = {"DeadlineExceeded", TP_CLASS_GUARD},
    [TP_KIND_CANCELLED] = {"Cancelled", TP_CLASS_GUARD},
    [TP_KIND_INTERRUPTED] = {"Interrupted", TP_CLASS_GUARD},
};

static const char *const class_names[] = {
    [TP_CLASS_OK] = "ok",
    [TP_CLASS_TRANSIENT] = "transient",
    [TP_CLASS_PERMANENT] = "permanent",
    [TP_CLASS_MALFORMED] = "malformed",
    [TP_CLASS_GUARD] = "guard",
};

const char *tp_kind_name(tp_kind_t kind)
{
    if (kind < 0 || kind >= TP_KIND__COUNT)
        return "ToolError";
    return kinds[kind].name;
}

tp_kind_t tp_kind_from_name(const char *name)
{
    if (name == NULL)
        return TP_KIND_OTHER;
    for (int k = TP_KIND_TIMEOUT; k < TP_KIND__COUNT; k++)
        if (strcmp(kinds[k].name, name) == 0)
            return (tp_kind_t)k;
    return TP_KIND_OTHER;
}

/*
 * A kind a tool invents is treated as permanent: retrying an error nobody
 * declared retryable is the seed's first way a run goes wrong.
 */
tp_class_t tp_kind_class(tp_kind_t kind)
{
    if (kind < 0 || kind >= TP_KIND__COUNT)
        return TP_CLASS_PERMANENT;
    return kinds[kind].klass;
}

const char *tp_class_name(tp_class_t klass)
{
    if (klass < TP_CLASS_OK || klass > TP_CLASS_GUARD)
        return "permanent";
    return class_names[klass];
}

bool tp_class_retryable(tp_class_t klass)
{
    return klass == TP_CLASS_TRANSIENT;
}

/* sysexits: EX_TEMPFAIL 75, EX_NOPERM 77, EX_USAGE 64, EX_DATAERR 65. */
tp_kind_t tp_kind_from_exit(int status)
{
    switch (status) {
    case 0:
        return TP_KIND_OK;
    case 75:
        return TP_KIND_SERVER_ERROR;
    case 77:
        return TP_KIND_PERMISSION_DENIED;
    case 64:
    case 65:
        return TP_KIND_BAD_ARGUMENTS;
    default:
        return TP_KIND_TOOL_ERROR;
    }
}
