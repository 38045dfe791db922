/*
 * Frames: a little-endian u32 length, then one protobuf message.
 *
 * The length is checked against the caller's maximum before anything is
 * allocated for the body: an oversized or garbage length is a protocol
 * error, never an allocation.
 */
#ifndef TP_FRAME_H
#define TP_FRAME_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "toolpool.pb-c.h"

#define TP_FRAME_HEADER 4u
#define TP_FRAME_DEFAULT_MAX (64u << 20)

/*
 * The MCP sessions one worker holds at most: a call of a ninth server
 * closes the one whose last call came longest ago. The supervisor keeps
 * the same list for each worker, in the same way, to know which servers'
 * calls a busy worker can take.
 */
#define TP_WORKER_MCP_SESSIONS 8

/*
 * Looks for one whole frame at the head of in. 0 when one is there: *body
 * and *len point into the buffer, and the body stays valid until the
 * caller calls tp_buf_consume(in, TP_FRAME_HEADER + *len) or changes the
 * buffer. TP_EAGAIN: not a whole frame yet. TP_E2BIG: the header announced
 * more than max.
 */
int tp_frame_peek(const tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len);

/*
 * Appends header + packed msg to out. 0; TP_E2BIG when msg packs to more
 * than max (out unchanged), TP_ENOMEM, or TP_EPROTO when protobuf-c packs
 * other than the size it gave.
 */
int tp_frame_append(tp_buf_t *out, const ProtobufCMessage *msg, uint32_t max);

/*
 * A Call frame without protobuf-c's generic packer, which walked every
 * field twice (to size, then to pack) for each call. The fields that are
 * the same for every call of a tool (tool, adapter, argv, plugin_path,
 * max_output) are packed by protobuf-c once, into the tool's head; each
 * call then writes only its own fields around it, and the tool's limits
 * (fields 12-14, packed once too, its tail, with an mcp tool's server
 * fields 15-17) after them. The bytes are exactly
 * what protobuf-c would pack for the whole SupervisorFrame (frame_test
 * compares them), so the worker decodes them as any other frame.
 */
typedef struct {
    const tp_buf_t *head; /* the tool's fields: tp_call_head_pack */
    const tp_buf_t *tail; /* the tool's limits (fields 12-14, after the call's own):
                               tp_call_tail_pack; NULL or empty when it has none */
    uint64_t seq;
    const uint8_t *args;
    size_t args_len;
    const char *call_id;
    const char *job;
    uint64_t step;
    uint32_t attempt;
    bool notify;             /* field 19: the caller hears the MCP server's notifications */
    uint32_t mcp_protocol;   /* field 22: an mcp tool's server's era (tp_mcp_era_t; 0: found by probing) */
    uint64_t deadline_us;    /* field 21: when an http attempt's time ends, tp_now_us() (0: none sent) */
    const char *traceparent; /* field 23: the attempt's span (NULL: none sent) */
} tp_call_frame_t;

/*
 * Packs a tool's fields of a Call (the rest left out) into head. 0,
 * TP_ENOMEM, or TP_EPROTO when protobuf-c packs other than the size it gave.
 */
int tp_call_head_pack(tp_buf_t *head, const char *tool, int adapter, char **argv, size_t argc, const char *plugin_path,
                      uint64_t max_output);
/*
 * Packs a tool's limits (0: none) into tail, fields 12-14 of a Call, an mcp
 * tool's server fields after them (15-17; mcp_tool NULL: none, env a
 * NULL-terminated "K=V" list or NULL, cwd NULL: none), and an exec tool's
 * working directory (18; NULL: none). 0, TP_ENOMEM, or TP_EPROTO as
 * tp_call_head_pack.
 */
/*
 * Appends an http tool's request (Call field 20) to its tail. 0, TP_ENOMEM,
 * or TP_EPROTO when protobuf-c packs other than the size it gave.
 */
int tp_call_http_pack(tp_buf_t *tail, const Toolpool__HttpCall *http);
int tp_call_tail_pack(tp_buf_t *tail, uint64_t limit_memory, uint32_t limit_cpu, uint32_t limit_files,
                      const char *mcp_tool, char **mcp_env, const char *mcp_cwd, const char *cwd);
/* Appends header + SupervisorFrame{call} to out. 0, TP_E2BIG (more than max: out unchanged) or TP_ENOMEM. */
int tp_call_frame_append(tp_buf_t *out, const tp_call_frame_t *c, uint32_t max);
/* Appends header + SupervisorFrame{cancel{seq}} to out. 0 or TP_ENOMEM. */
int tp_cancel_frame_append(tp_buf_t *out, uint64_t seq);

/*
 * The common Reply without protobuf-c's generic unpacker: a WorkerFrame
 * holding a Reply with no kind and no message (an ok answer), whose fields
 * each come once, with the schema's wire types. Fills r (result points
 * into body; kind and message are "") and returns true; returns false for
 * anything else, which protobuf-c then unpacks (and words the error for).
 */
bool tp_reply_decode_plain(const uint8_t *body, size_t len, Toolpool__Reply *r);

/*
 * An allocator for unpacking frames (pass &arena.allocator to an _unpack):
 * allocations bump through one block kept from frame to frame, those that
 * do not fit get their own; tp_arena_reset drops them all at once, so an
 * unpacked message is never freed field by field.
 */
typedef struct {
    ProtobufCAllocator allocator;
    uint8_t *block;
    size_t used, cap;
    void *big; /* the allocations that did not fit, linked */
} tp_arena_t;

void tp_arena_init(tp_arena_t *ar, size_t cap);
/* Forgets every allocation: what was unpacked with it is gone. */
void tp_arena_reset(tp_arena_t *ar);
void tp_arena_free(tp_arena_t *ar);

/*
 * Reads fd until one whole frame is buffered (blocking, on a blocking fd).
 * 0 with *body and *len set, as tp_frame_peek; TP_E2BIG as tp_frame_peek;
 * TP_ECLOSED at a clean EOF, between frames; TP_EPIPE at an EOF inside a
 * frame; TP_ENOMEM; or a read error's tp_errno (TP_EAGAIN: a non-blocking
 * fd has nothing now).
 */
int tp_frame_recv(int fd, tp_buf_t *in, uint32_t max, const uint8_t **body, uint32_t *len);

#endif
