/*
 * One call as a front reads it: a JSON object (a line of `toolpool run`'s
 * input, or the body of serve's POST /v1/calls) made into a tp_request_t
 * for tp_engine_submit, or, for a bad one, the InvalidRequest message that
 * tp_engine_reject (or an HTTP 400) reports.
 *
 * Every front parses calls here, so a call reads the same, and a bad one is
 * worded the same, whichever way it came in. Plain lines take the one-pass
 * scanner (callline.h); anything else is parsed by jansson, which also words
 * the messages. Both give byte-identical args and canonical forms.
 */
#ifndef TP_REQUEST_H
#define TP_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "engine.h"

/* Room for a message about a bad call: "line 7: not valid JSON: ..." and the like. */
#define TP_REQUEST_MSG_MAX 512

/*
 * Scratch one front reuses from call to call. What a parse gives (the
 * request's strings, its args) points into it, and stays valid until the
 * next parse or tp_request_parser_free. Zero it to start.
 */
typedef struct {
    tp_buf_t strs, canon; /* the scanner's strings and canonical args */
    json_t *doc;          /* jansson's parse of the last call */
    json_t *owned_args;   /* an empty args object made for it */
    char *args;           /* the last call's args, compact, NUL-terminated */
    tp_trace_ctx_t trace; /* the last call's trace context (TP_REQUEST_TRACE) */
} tp_request_parser_t;

enum {
    /* A call without "id" is no error: req->id is NULL (serve makes one up). */
    TP_REQUEST_ID_OPTIONAL = 1,
    /* Read "deadline", a duration string ("30s"): req->deadline_us = now + it. */
    TP_REQUEST_DEADLINE = 2,
    /*
     * Read "traceparent" and "tracestate" strings (W3C Trace Context) into
     * req->trace: a front asks for them only when traces are exported, so
     * that without export no line is searched for them.
     */
    TP_REQUEST_TRACE = 4,
};

typedef enum {
    TP_REQUEST_BLANK = 0, /* only whitespace: not a call, no answer */
    TP_REQUEST_CALL,      /* *req is filled */
    TP_REQUEST_BAD,       /* *bad is filled: answer it InvalidRequest */
} tp_request_kind_t;

/* A call that could not be made: what could be read of it, and why. */
typedef struct {
    const char *id;  /* NULL when it had no usable id */
    const char *job; /* NULL with no id; else the job (or the id) */
    uint64_t step;
    const char *tool; /* NULL when absent or not a string */
    /* where's prefix and the reason, as `run` words it: "line 7: \"tool\" must be a non-empty string" */
    char message[TP_REQUEST_MSG_MAX];
} tp_request_bad_t;

/*
 * Parses one call of len bytes (no newline needed; leading and trailing
 * whitespace allowed). where ("line 7"), when not NULL, prefixes the
 * messages of a bad call and is passed on in req->where, so the engine's
 * own messages about the call (an unknown tool) carry it too. flags: the
 * TP_REQUEST_* above. Returns what the text was; req or bad is filled
 * accordingly (the other is left alone). Never fails otherwise: running
 * out of memory is a bad call that says so.
 */
tp_request_kind_t tp_request_parse_line(tp_request_parser_t *p, const char *text, size_t len, const char *where,
                                        unsigned flags, tp_request_t *req, tp_request_bad_t *bad);

/*
 * Hands the args of the call just parsed to the engine with the request
 * (req->give_args): the engine keeps them without a copy, and the parser
 * lets go of them. For a front that submits each request once, at once.
 */
void tp_request_give_args(tp_request_parser_t *p, tp_request_t *req);

/* The message for a line past the limit, as `run` words it ("line 7: longer than the 1024-byte limit"). */
void tp_request_too_long(char *msg, size_t cap, const char *where, uint64_t limit);

void tp_request_parser_free(tp_request_parser_t *p);

#endif
