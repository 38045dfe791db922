/*
 * The outcome taxonomy: the seed's four classes as data.
 *
 * Every attempt and every call ends in exactly one kind. A kind belongs to
 * one class, and the class decides whether the policy may retry it.
 */
#ifndef TP_TAXONOMY_H
#define TP_TAXONOMY_H

#include <stdbool.h>

typedef enum {
    TP_CLASS_OK = 0,
    TP_CLASS_TRANSIENT,
    TP_CLASS_PERMANENT,
    TP_CLASS_MALFORMED,
    TP_CLASS_GUARD,
} tp_class_t;

typedef enum {
    TP_KIND_OK = 0,
    /* transient */
    TP_KIND_TIMEOUT,
    TP_KIND_RATE_LIMITED,
    TP_KIND_SERVER_ERROR,
    TP_KIND_WORKER_CRASHED,
    /* permanent */
    TP_KIND_PERMISSION_DENIED,
    TP_KIND_NOT_FOUND,
    TP_KIND_BAD_ARGUMENTS,
    TP_KIND_TOOL_ERROR,
    TP_KIND_OUTPUT_TOO_LARGE,
    TP_KIND_OUT_OF_MEMORY,  /* an allocation failed under the tool's memory limit */
    TP_KIND_RESOURCE_LIMIT, /* the tool ran into its cpu or files limit */
    /* malformed */
    TP_KIND_INVALID_ARGUMENTS,
    TP_KIND_UNKNOWN_TOOL,
    TP_KIND_INVALID_REQUEST,
    /* guard */
    TP_KIND_BUDGET_EXCEEDED,
    TP_KIND_STEP_CAP_REACHED,
    TP_KIND_CIRCUIT_OPEN,
    TP_KIND_DEADLINE_EXCEEDED,
    TP_KIND_CANCELLED,
    TP_KIND_INTERRUPTED,
    TP_KIND__COUNT,
    /* A kind a tool named that the taxonomy does not know. */
    TP_KIND_OTHER = TP_KIND__COUNT,
} tp_kind_t;

const char *tp_kind_name(tp_kind_t kind);
/* TP_KIND_OTHER for a name the taxonomy does not know; NULL is OTHER too. */
tp_kind_t tp_kind_from_name(const char *name);
tp_class_t tp_kind_class(tp_kind_t kind);
const char *tp_class_name(tp_class_t klass);
/* Whether the class may ever be retried (transient only). */
bool tp_class_retryable(tp_class_t klass);

/* Maps an exec tool's exit status to a kind, as the contract says. */
tp_kind_t tp_kind_from_exit(int status);

#endif
