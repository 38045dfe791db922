/*
 * What one message a host sent an MCP front is, as JSON-RPC 2.0 reads it:
 * a request, a notification, a response, or the error it gets. A pure
 * function of the text (no session, no engine), so the session
 * (mcp_session.c) and serve's /mcp share it, and a fuzzer takes it alone
 * (tests/fuzz/mcpmsg_fuzz.c).
 *
 * An id is kept as JSON text, as it goes back in the response and keys the
 * calls in flight: jansson's writing of it, or, for a number jansson cannot
 * hold (an integer past 64 bits is a valid id all the same), the text the
 * host wrote. Such a number stands in the parsed message as 0.
 */
#ifndef TP_MCP_MESSAGE_H
#define TP_MCP_MESSAGE_H

#include <jansson.h>
#include <stddef.h>

#include "buf.h"

typedef enum {
    TP_MCP_MSG_BLANK,        /* nothing but whitespace: let be */
    TP_MCP_MSG_REQUEST,      /* method, params, id */
    TP_MCP_MSG_NOTIFICATION, /* method and params (NULL method: one that could not be read, let be) */
    TP_MCP_MSG_RESPONSE,     /* a result or an error of the host's: to no request (the front sends none) */
    TP_MCP_MSG_BAD,          /* none of them: code and error say what it gets, with id (NULL: null) */
    TP_MCP_MSG_BAD_PARAMS,   /* a request whose params cannot be read: its response is the error (-32602) */
} tp_mcp_msg_kind_t;

typedef struct {
    tp_mcp_msg_kind_t kind;
    json_t *msg;          /* the message parsed, when it could be; else NULL */
    const char *method;   /* into msg */
    const json_t *params; /* into msg, or NULL */
    const char *id;       /* the id as JSON text, NUL-ended; NULL: none (or null, for BAD) */
    /*
     * notifications/cancelled: its params.requestId as JSON text, keyed as
     * an id is; NULL when it is not a string or a number.
     */
    const char *request_id;
    int code;         /* BAD, BAD_PARAMS: the JSON-RPC error code */
    char error[300];  /* BAD, BAD_PARAMS: its message */
    tp_buf_t scratch; /* where id and request_id are */
} tp_mcp_msg_t;

/*
 * Reads the message text (len bytes) into m (zeroed, or cleared since).
 * Text that is not JSON is BAD -32700 with a null id; a batch (a JSON
 * array: MCP has none since 2025-06-18) or a value that is not an object,
 * -32600 with a null id; an object that is no message (jsonrpc not "2.0",
 * method not a string, an id null or not a string or number, params not
 * an object or array), -32600 with its id when it had a usable one. JSON
 * that jansson cannot read whole elsewhere than in an id (a number past 64
 * bits or a double's range, nesting past 2048 levels, \u0000) is BAD_PARAMS
 * when it is in a request's params (and nothing when in a notification's),
 * else -32600. 0, or TP_ENOMEM.
 */
int tp_mcp_msg_read(tp_mcp_msg_t *m, const char *text, size_t len);
/* Lets go of what m holds; m may be read into again. */
void tp_mcp_msg_clear(tp_mcp_msg_t *m);

#endif
