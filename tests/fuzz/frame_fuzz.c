/*
 * Frames and the plain Reply decoder (common/wire/frame.h) against protobuf-c.
 *
 * The input is read twice: as one frame body, and as a byte stream of
 * length-prefixed frames cut up by tp_frame_peek (maximum 64 KiB). Every
 * body goes to tp_reply_decode_plain and to protobuf-c's WorkerFrame and
 * SupervisorFrame unpackers (into the arena the pool and the worker use):
 * whatever the plain decoder takes, protobuf-c must take, with the same
 * fields.
 */
#include <string.h>

#include "frame.h"
#include "fuzz.h"

static tp_arena_t arena;
static bool arena_ready;

static void check_body(const uint8_t *body, size_t len)
{
    Toolpool__Reply plain;
    bool fast = tp_reply_decode_plain(body, len, &plain);
    Toolpool__WorkerFrame *wf = toolpool__worker_frame__unpack(&arena.allocator, len, body);
    if (fast) {
        TP_FUZZ_CHECK(wf != NULL);
        TP_FUZZ_CHECK(wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY);
        const Toolpool__Reply *r = wf->reply;
        TP_FUZZ_CHECK(plain.seq == r->seq);
        TP_FUZZ_CHECK(!plain.ok == !r->ok);
        TP_FUZZ_CHECK(plain.result.len == r->result.len &&
                      (r->result.len == 0 || memcmp(plain.result.data, r->result.data, r->result.len) == 0));
        TP_FUZZ_CHECK(strcmp(plain.kind, r->kind) == 0 && strcmp(plain.message, r->message) == 0);
        TP_FUZZ_CHECK(plain.retry_after_ms == r->retry_after_ms);
        TP_FUZZ_CHECK(memcmp(&plain.cost, &r->cost, sizeof r->cost) == 0);
    }
    /* What the worker unpacks: only that it never crashes or leaks. */
    Toolpool__SupervisorFrame *sf = toolpool__supervisor_frame__unpack(&arena.allocator, len, body);
    (void)sf;
    tp_arena_reset(&arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!arena_ready) {
        tp_arena_init(&arena, 4096);
        arena_ready = true;
    }
    check_body(data, size);
    tp_buf_t in = {0};
    tp_buf_append(&in, data, size);
    const uint8_t *body;
    uint32_t len;
    int rc;
    while ((rc = tp_frame_peek(&in, 1u << 16, &body, &len)) == 0) {
        TP_FUZZ_CHECK(len <= tp_buf_avail(&in) - TP_FRAME_HEADER);
        check_body(body, len);
        tp_buf_consume(&in, TP_FRAME_HEADER + len);
    }
    TP_FUZZ_CHECK(rc == TP_EAGAIN || rc == TP_E2BIG);
    tp_buf_free(&in);
    return 0;
}
