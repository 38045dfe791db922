/*
 * Frames on real pipes: round trips, frames split at every byte, many
 * frames in one read, oversized lengths refused before any allocation,
 * garbage bodies refused by unpack, EOF inside a frame, the unpacking arena.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

static Toolpool__WorkerFrame *make_reply(uint64_t seq, const char *kind, Toolpool__Reply *r)
{
    static Toolpool__WorkerFrame wf;
    toolpool__reply__init(r);
    toolpool__worker_frame__init(&wf);
    r->seq = seq;
    r->kind = (char *)kind;
    r->message = "a message";
    r->retry_after_ms = 250;
    wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_REPLY;
    wf.reply = r;
    return &wf;
}

static void test_round_trip(void)
{
    tp_buf_t out = {0};
    Toolpool__Reply r;
    Toolpool__WorkerFrame *wf = make_reply(42, "RateLimited", &r);
    CU_ASSERT_EQUAL_FATAL(tp_frame_append(&out, &wf->base, TP_FRAME_DEFAULT_MAX), 0);
    size_t packed = protobuf_c_message_get_packed_size(&wf->base);
    CU_ASSERT_EQUAL(out.len, packed + TP_FRAME_HEADER);
    CU_ASSERT_EQUAL(out.data[0], (uint8_t)packed); /* little-endian length */
    const uint8_t *body;
    uint32_t len;
    CU_ASSERT_EQUAL_FATAL(tp_frame_peek(&out, TP_FRAME_DEFAULT_MAX, &body, &len), 0);
    CU_ASSERT_EQUAL(len, packed);
    Toolpool__WorkerFrame *back = toolpool__worker_frame__unpack(NULL, len, body);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    CU_ASSERT_EQUAL(back->body_case, TOOLPOOL__WORKER_FRAME__BODY_REPLY);
    CU_ASSERT_EQUAL(back->reply->seq, 42);
    CU_ASSERT_STRING_EQUAL(back->reply->kind, "RateLimited");
    CU_ASSERT_EQUAL(back->reply->retry_after_ms, 250);
    toolpool__worker_frame__free_unpacked(back, NULL);
    tp_buf_free(&out);
}

/* A writer child sends `frames` frames one byte per write(2); the reader must reassemble. */
static void test_partial_reads(void)
{
    enum { FRAMES = 50 };
    int p[2];
    CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        tp_buf_t out = {0};
        Toolpool__Reply r;
        for (int i = 0; i < FRAMES; i++) {
            tp_frame_append(&out, &make_reply((uint64_t)i, "Timeout", &r)->base, TP_FRAME_DEFAULT_MAX);
            for (size_t k = 0; k < out.len; k++)
                if (write(p[1], out.data + k, 1) != 1)
                    _exit(1);
            tp_buf_reset(&out);
        }
        _exit(0);
    }
    close(p[1]);
    tp_buf_t in = {0};
    int got = 0;
    for (;;) {
        const uint8_t *body;
        uint32_t len;
        int rc = tp_frame_recv(p[0], &in, TP_FRAME_DEFAULT_MAX, &body, &len);
        if (rc == TP_ECLOSED)
            break;
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        Toolpool__WorkerFrame *wf = toolpool__worker_frame__unpack(NULL, len, body);
        CU_ASSERT_PTR_NOT_NULL_FATAL(wf);
        CU_ASSERT_EQUAL(wf->reply->seq, (uint64_t)got);
        toolpool__worker_frame__free_unpacked(wf, NULL);
        tp_buf_consume(&in, TP_FRAME_HEADER + len);
        got++;
    }
    CU_ASSERT_EQUAL(got, FRAMES);
    int status;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(p[0]);
    tp_buf_free(&in);
}

/* Several frames in one buffer come out one at a time, in order. */
static void test_many_in_one_read(void)
{
    tp_buf_t b = {0};
    Toolpool__Reply r;
    for (int i = 0; i < 5; i++)
        tp_frame_append(&b, &make_reply((uint64_t)i + 7, "ok", &r)->base, TP_FRAME_DEFAULT_MAX);
    for (int i = 0; i < 5; i++) {
        const uint8_t *body;
        uint32_t len;
        CU_ASSERT_EQUAL_FATAL(tp_frame_peek(&b, TP_FRAME_DEFAULT_MAX, &body, &len), 0);
        Toolpool__WorkerFrame *wf = toolpool__worker_frame__unpack(NULL, len, body);
        CU_ASSERT_EQUAL(wf->reply->seq, (uint64_t)i + 7);
        toolpool__worker_frame__free_unpacked(wf, NULL);
        tp_buf_consume(&b, TP_FRAME_HEADER + len);
    }
    CU_ASSERT_EQUAL(tp_buf_avail(&b), 0);
    tp_buf_free(&b);
}

/* A header announcing more than the maximum is refused before its body arrives. */
static void test_oversized(void)
{
    tp_buf_t b = {0};
    uint8_t hdr[4] = {0xff, 0xff, 0xff, 0x7f};
    tp_buf_append(&b, hdr, 4);
    const uint8_t *body;
    uint32_t len;
    CU_ASSERT_EQUAL(tp_frame_peek(&b, 1u << 20, &body, &len), TP_E2BIG);
    CU_ASSERT(b.cap < 1u << 20); /* nothing was allocated for the body */
    /* Exactly the maximum is fine, one more is not. */
    tp_buf_reset(&b);
    uint8_t at[4] = {0x00, 0x01, 0x00, 0x00}; /* 256 */
    tp_buf_append(&b, at, 4);
    CU_ASSERT_EQUAL(tp_frame_peek(&b, 256, &body, &len), TP_EAGAIN);
    CU_ASSERT_EQUAL(tp_frame_peek(&b, 255, &body, &len), TP_E2BIG);
    /* The writer refuses to build one too. */
    Toolpool__Reply r;
    tp_buf_reset(&b);
    CU_ASSERT_EQUAL(tp_frame_append(&b, &make_reply(1, "Timeout", &r)->base, 4), TP_E2BIG);
    tp_buf_free(&b);
}

/* Bytes that are not a message fail to unpack; they never crash the reader. */
static void test_garbage(void)
{
    const uint8_t junk[][8] = {
        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        {0x0a, 0x7f, 0x01, 0x02, 0x03, 0x00, 0x00, 0x00}, /* hello claims 127 bytes */
        {0x12, 0x05, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80}, /* truncated varint */
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        Toolpool__WorkerFrame *wf = toolpool__worker_frame__unpack(NULL, sizeof junk[i], junk[i]);
        CU_ASSERT_PTR_NULL(wf);
        toolpool__worker_frame__free_unpacked(wf, NULL);
    }
}

/*
 * Unpacking into an arena: small messages share its block, a large one
 * gets its own allocation, garbage fails cleanly; a reset frees it all
 * (ASan and valgrind say whether it did).
 */
static void test_arena(void)
{
    tp_arena_t ar;
    tp_arena_init(&ar, 512);
    tp_buf_t out = {0};
    static uint8_t big[100000];
    memset(big, 'x', sizeof big);
    for (int i = 0; i < 100; i++) {
        Toolpool__Reply r;
        Toolpool__WorkerFrame *wf = make_reply((uint64_t)i, i % 2 ? "Timeout" : "ToolError", &r);
        if (i % 10 == 0) {
            r.result.data = big;
            r.result.len = sizeof big;
        }
        tp_buf_reset(&out);
        CU_ASSERT_EQUAL_FATAL(tp_frame_append(&out, &wf->base, TP_FRAME_DEFAULT_MAX), 0);
        Toolpool__WorkerFrame *back = toolpool__worker_frame__unpack(&ar.allocator, out.len - TP_FRAME_HEADER,
                                                                     out.data + TP_FRAME_HEADER);
        CU_ASSERT_PTR_NOT_NULL_FATAL(back);
        CU_ASSERT_EQUAL(back->reply->seq, (uint64_t)i);
        CU_ASSERT_STRING_EQUAL(back->reply->kind, i % 2 ? "Timeout" : "ToolError");
        CU_ASSERT_STRING_EQUAL(back->reply->message, "a message");
        CU_ASSERT_EQUAL(back->reply->result.len, i % 10 == 0 ? sizeof big : 0);
        if (i % 10 == 0)
            CU_ASSERT(ar.big != NULL && memcmp(back->reply->result.data, big, sizeof big) == 0);
        /* A truncated copy of the same frame fails, and leaves nothing behind the reset. */
        CU_ASSERT_PTR_NULL(
            toolpool__worker_frame__unpack(&ar.allocator, out.len - TP_FRAME_HEADER - 1, out.data + TP_FRAME_HEADER));
        tp_arena_reset(&ar);
        CU_ASSERT_PTR_NULL(ar.big);
        CU_ASSERT_EQUAL(ar.used, 0);
    }
    tp_buf_free(&out);
    tp_arena_free(&ar);
}

/* EOF between frames is clean; EOF inside one is an error. */
/* A random string of 0 to max bytes (letters, and now and then a multibyte character). */
static char *random_text(size_t max)
{
    size_t n = (size_t)rand() % (max + 1);
    char *t = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        t[i] = rand() % 16 ? (char)('a' + rand() % 26) : (char)0xc3;
    t[n] = 0;
    return t;
}

static uint64_t random_varint(void)
{
    switch (rand() % 4) {
    case 0:
        return 0;
    case 1:
        return (uint64_t)(rand() % 200);
    case 2:
        return (uint64_t)rand() << 20 | (uint64_t)rand();
    default:
        return UINT64_MAX - (uint64_t)(rand() % 3);
    }
}

/*
 * The hand-built Call frame is byte for byte what protobuf-c packs for the
 * same SupervisorFrame, over random fields: zero and empty ones (left out),
 * large varints, long args, exec and plugin tools.
 */
static void test_call_frame(void)
{
    srand(7);
    for (int round = 0; round < 2000; round++) {
        char *tool = random_text(20), *plugin = random_text(40), *id = random_text(30), *job = random_text(30);
        char *args = random_text(round % 50 == 0 ? 300 : 60);
        if (!tool[0]) {
            free(tool);
            tool = strdup("t");
        }
        char *argv[4];
        size_t argc = (size_t)rand() % 4;
        for (size_t i = 0; i < argc; i++)
            argv[i] = random_text(12);
        int adapter = rand() % 3 == 0 ? TOOLPOOL__ADAPTER__ADAPTER_MCP
                      : rand() % 2    ? TOOLPOOL__ADAPTER__ADAPTER_PLUGIN
                                      : TOOLPOOL__ADAPTER__ADAPTER_EXEC;
        /* an mcp tool's server fields (in the tail, after the limits) */
        char *mcp_tool = adapter == TOOLPOOL__ADAPTER__ADAPTER_MCP ? random_text(16) : NULL;
        char *mcp_cwd = mcp_tool && rand() % 2 ? random_text(20) : NULL;
        char *env[3] = {NULL, NULL, NULL};
        size_t n_env = mcp_tool ? (size_t)rand() % 3 : 0;
        for (size_t i = 0; i < n_env; i++)
            env[i] = random_text(10);
        uint64_t max_output = random_varint(), seq = random_varint(), step = random_varint();
        uint32_t attempt = (uint32_t)random_varint();
        /* limits: none (an empty tail), some, or all */
        uint64_t limit_memory = rand() % 2 ? random_varint() : 0;
        uint32_t limit_cpu = rand() % 2 ? (uint32_t)random_varint() : 0;
        uint32_t limit_files = rand() % 2 ? (uint32_t)random_varint() : 0;

        Toolpool__Call call = TOOLPOOL__CALL__INIT;
        call.seq = seq;
        call.tool = tool;
        call.adapter = adapter;
        call.argv = argv;
        call.n_argv = argc;
        call.plugin_path = plugin;
        call.max_output = max_output;
        call.args.data = (uint8_t *)args;
        call.args.len = strlen(args);
        call.call_id = id;
        call.job = job;
        call.step = step;
        call.attempt = attempt;
        call.limit_memory = limit_memory;
        call.limit_cpu = limit_cpu;
        call.limit_files = limit_files;
        call.mcp_tool = mcp_tool ? mcp_tool : "";
        call.mcp_env = env;
        call.n_mcp_env = n_env;
        call.mcp_cwd = mcp_cwd ? mcp_cwd : "";
        call.notify = mcp_tool && rand() % 2;
        call.deadline_us = rand() % 2 ? random_varint() : 0;       /* an http attempt's end */
        call.mcp_protocol = mcp_tool ? (uint32_t)(rand() % 3) : 0; /* an mcp server's era */
        /* a traced attempt's span */
        call.traceparent = rand() % 2 ? "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" : "";
        Toolpool__SupervisorFrame sf = TOOLPOOL__SUPERVISOR_FRAME__INIT;
        sf.body_case = TOOLPOOL__SUPERVISOR_FRAME__BODY_CALL;
        sf.call = &call;
        tp_buf_t want = {0}, got = {0}, head = {0}, tail = {0};
        CU_ASSERT_EQUAL_FATAL(tp_frame_append(&want, &sf.base, 1u << 20), 0);

        CU_ASSERT_EQUAL_FATAL(tp_call_head_pack(&head, tool, adapter, argv, argc, plugin, max_output), 0);
        const char *cwd = round % 5 == 0 ? "/tmp/some dir" : NULL;
        call.cwd = (char *)(cwd ? cwd : "");
        tp_buf_reset(&want);
        CU_ASSERT_EQUAL_FATAL(tp_frame_append(&want, &sf.base, 1u << 20), 0);
        CU_ASSERT_EQUAL_FATAL(
            tp_call_tail_pack(&tail, limit_memory, limit_cpu, limit_files, mcp_tool, n_env ? env : NULL, mcp_cwd, cwd),
            0);
        CU_ASSERT_EQUAL(tail.len == 0, !limit_memory && !limit_cpu && !limit_files && !(mcp_tool && *mcp_tool) &&
                                           !n_env && !(mcp_cwd && *mcp_cwd) && !cwd);
        tp_call_frame_t cf = {.head = &head,
                              .tail = round % 3 || tail.len ? &tail : NULL,
                              .seq = seq,
                              .args = (const uint8_t *)args,
                              .args_len = strlen(args),
                              .call_id = id,
                              .job = job,
                              .step = step,
                              .attempt = attempt,
                              .notify = call.notify,
                              .deadline_us = call.deadline_us,
                              .mcp_protocol = call.mcp_protocol,
                              .traceparent = *call.traceparent ? call.traceparent : NULL};
        CU_ASSERT_EQUAL_FATAL(tp_call_frame_append(&got, &cf, 1u << 20), 0);
        CU_ASSERT_EQUAL(got.len, want.len);
        CU_ASSERT(got.len == want.len && memcmp(got.data, want.data, got.len) == 0);
        /* and too big for a smaller maximum, as tp_frame_append says */
        tp_buf_t small = {0};
        CU_ASSERT_EQUAL(tp_call_frame_append(&small, &cf, (uint32_t)(want.len - TP_FRAME_HEADER - 1)), TP_E2BIG);
        CU_ASSERT_EQUAL(small.len, 0);

        tp_buf_free(&want);
        tp_buf_free(&got);
        tp_buf_free(&head);
        tp_buf_free(&tail);
        tp_buf_free(&small);
        for (size_t i = 0; i < argc; i++)
            free(argv[i]);
        for (size_t i = 0; i < n_env; i++)
            free(env[i]);
        free(mcp_tool);
        free(mcp_cwd);
        free(tool);
        free(plugin);
        free(id);
        free(job);
        free(args);
    }
}

static void check_same_reply(const Toolpool__Reply *a, const Toolpool__Reply *b)
{
    CU_ASSERT_EQUAL(a->seq, b->seq);
    CU_ASSERT_EQUAL(!!a->ok, !!b->ok);
    CU_ASSERT_EQUAL(a->result.len, b->result.len);
    CU_ASSERT(a->result.len == b->result.len &&
              (a->result.len == 0 || memcmp(a->result.data, b->result.data, a->result.len) == 0));
    CU_ASSERT_STRING_EQUAL(a->kind, b->kind);
    CU_ASSERT_STRING_EQUAL(a->message, b->message);
    CU_ASSERT_EQUAL(a->retry_after_ms, b->retry_after_ms);
    CU_ASSERT_EQUAL(a->started_us, b->started_us);
    CU_ASSERT(memcmp(&a->cost, &b->cost, sizeof a->cost) == 0);
}

/*
 * The plain Reply decoder agrees with protobuf-c: every ok Reply protobuf-c
 * packs, it decodes to the same fields; a Reply with a kind or a message it
 * leaves to protobuf-c; and on those frames with a byte changed or cut
 * short, whenever it says yes, protobuf-c unpacks the very same fields.
 */
static void test_plain_reply(void)
{
    srand(11);
    int plain = 0, mutated_plain = 0;
    for (int round = 0; round < 3000; round++) {
        char *result = random_text(round % 100 == 0 ? 500 : 40), *kind = random_text(10), *msg = random_text(30);
        Toolpool__Reply r = TOOLPOOL__REPLY__INIT;
        r.seq = random_varint();
        r.ok = rand() % 4 != 0;
        r.result.data = (uint8_t *)result;
        r.result.len = strlen(result);
        if (!r.ok) {
            r.kind = kind;
            r.message = msg;
        }
        r.retry_after_ms = rand() % 3 == 0 ? -1 : (int64_t)random_varint();
        r.cost = rand() % 3 == 0 ? 0.0 : (double)rand() / 7.0 - 100.0;
        r.started_us = rand() % 2 ? random_varint() : 0; /* an exec tool's start */
        Toolpool__WorkerFrame wf = TOOLPOOL__WORKER_FRAME__INIT;
        wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_REPLY;
        wf.reply = &r;
        size_t n = protobuf_c_message_get_packed_size(&wf.base);
        uint8_t *buf = malloc(n + 1);
        protobuf_c_message_pack(&wf.base, buf);

        Toolpool__Reply got;
        bool fast = tp_reply_decode_plain(buf, n, &got);
        bool has_text = r.kind[0] || r.message[0];
        CU_ASSERT_EQUAL(fast, !has_text);
        if (fast) {
            plain++;
            Toolpool__WorkerFrame *u = toolpool__worker_frame__unpack(NULL, n, buf);
            CU_ASSERT_PTR_NOT_NULL_FATAL(u);
            check_same_reply(&got, u->reply);
            toolpool__worker_frame__free_unpacked(u, NULL);
        }
        for (int m = 0; m < 8; m++) {
            uint8_t *b2 = malloc(n + 1);
            memcpy(b2, buf, n);
            size_t n2 = n;
            if (m == 0)
                n2 = (size_t)rand() % (n + 1);
            else
                b2[(size_t)rand() % n] ^= (uint8_t)(1u << (rand() % 8));
            if (tp_reply_decode_plain(b2, n2, &got)) {
                mutated_plain++;
                Toolpool__WorkerFrame *u = toolpool__worker_frame__unpack(NULL, n2, b2);
                CU_ASSERT_PTR_NOT_NULL(u);
                if (u) {
                    CU_ASSERT_EQUAL(u->body_case, TOOLPOOL__WORKER_FRAME__BODY_REPLY);
                    if (u->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY)
                        check_same_reply(&got, u->reply);
                    toolpool__worker_frame__free_unpacked(u, NULL);
                }
            }
            free(b2);
        }
        free(buf);
        free(result);
        free(kind);
        free(msg);
    }
    CU_ASSERT(plain > 1000);
    CU_ASSERT(mutated_plain > 1000);
}

/*
 * Appends v as a varint written with pad more bytes than it needs (an
 * overlong, non-canonical form protobuf's decoders may or may not take):
 * the last byte of its short form gets the continuation bit, then pad - 1
 * bytes 0x80 and a 0x00 follow. top, when not 0, is the last byte instead
 * of 0x00 (bits past 64 when it lands in the tenth byte).
 */
static size_t put_varint_pad(uint8_t *p, uint64_t v, unsigned pad, uint8_t top)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        p[n++] = (uint8_t)(v | 0x80);
    p[n++] = (uint8_t)v;
    if (pad == 0)
        return n;
    p[n - 1] |= 0x80;
    for (unsigned i = 1; i < pad; i++)
        p[n++] = 0x80;
    p[n++] = top;
    return n;
}

/* Mostly no padding; now and then a byte or two; rarely enough to pass 5 or 10 bytes. */
static unsigned random_pad(void)
{
    int r = rand() % 16;
    return r < 9 ? 0 : r < 13 ? (unsigned)(1 + rand() % 2) : (unsigned)(3 + rand() % 8);
}

/*
 * A random WorkerFrame body, built by hand: a Reply with some of seq, ok,
 * result, retry_after_ms and cost (now and then one twice, a kind, a wrong
 * wire type or an unknown field), in any order, every tag, length and
 * value written with random overlong padding. Returns its length.
 */
static size_t random_reply_body(uint8_t *out)
{
    uint8_t body[512];
    size_t n = 0;
    int fields = rand() % 6;
    for (int f = 0; f < fields; f++) {
        static const unsigned choices[] = {1, 2, 3, 6, 7, 1, 2, 3, 6, 7, 4, 9};
        unsigned field = choices[rand() % (int)(sizeof choices / sizeof choices[0])];
        unsigned type = field == 3 || field == 4 ? 2 : field == 7 ? 1 : 0;
        if (rand() % 40 == 0)
            type = (unsigned)(rand() % 6);
        n += put_varint_pad(body + n, field << 3 | type, rand() % 6 == 0 ? random_pad() : 0, 0);
        switch (type) {
        case 0: {
            uint64_t v = rand() % 2 ? (uint64_t)(rand() % 3) : random_varint();
            uint8_t top = rand() % 8 == 0 ? (uint8_t)(1 + rand() % 3) : 0;
            n += put_varint_pad(body + n, v, random_pad(), top);
            break;
        }
        case 1:
            for (int i = 0; i < 8; i++)
                body[n++] = (uint8_t)rand();
            break;
        case 2: {
            size_t len = (size_t)rand() % 12;
            n += put_varint_pad(body + n, len, random_pad(), 0);
            for (size_t i = 0; i < len; i++)
                body[n++] = (uint8_t)('a' + rand() % 26);
            break;
        }
        case 5:
            for (int i = 0; i < 4; i++)
                body[n++] = (uint8_t)rand();
            break;
        default:
            break;
        }
    }
    size_t m = put_varint_pad(out, 2 << 3 | 2, rand() % 8 == 0 ? random_pad() : 0, 0);
    m += put_varint_pad(out + m, n, random_pad(), 0);
    memcpy(out + m, body, n);
    return m + n;
}

/*
 * Overlong and non-canonical varints: tags, lengths and values written
 * with more bytes than they need. protobuf-c takes a tag or a length of at
 * most 5 bytes (a length no more than INT_MAX) and a value of at most 10;
 * whenever the plain decoder says yes to such a frame, protobuf-c must
 * unpack the same fields from it.
 */
static void test_plain_reply_overlong(void)
{
    /* A length written as a 9-byte varint 0: protobuf-c refuses it. */
    static const uint8_t nine[] = {0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    Toolpool__Reply got;
    CU_ASSERT_PTR_NULL(toolpool__worker_frame__unpack(NULL, sizeof nine, nine));
    CU_ASSERT_FALSE(tp_reply_decode_plain(nine, sizeof nine, &got));
    /* The same 0 in 5 bytes is one it takes, and so may the plain decoder. */
    static const uint8_t five[] = {0x12, 0x80, 0x80, 0x80, 0x80, 0x00};
    Toolpool__WorkerFrame *u = toolpool__worker_frame__unpack(NULL, sizeof five, five);
    CU_ASSERT_PTR_NOT_NULL(u);
    toolpool__worker_frame__free_unpacked(u, NULL);
    /* A 6-byte tag, and a result length of 6 bytes: both refused by protobuf-c. */
    static const uint8_t tag6[] = {0x92, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00};
    CU_ASSERT_PTR_NULL(toolpool__worker_frame__unpack(NULL, sizeof tag6, tag6));
    CU_ASSERT_FALSE(tp_reply_decode_plain(tag6, sizeof tag6, &got));
    static const uint8_t res6[] = {0x12, 0x07, 0x1a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00};
    CU_ASSERT_PTR_NULL(toolpool__worker_frame__unpack(NULL, sizeof res6, res6));
    CU_ASSERT_FALSE(tp_reply_decode_plain(res6, sizeof res6, &got));

    srand(13);
    int fast = 0, refused = 0, overlong_fast = 0;
    for (int round = 0; round < 30000; round++) {
        uint8_t buf[1024];
        size_t n = random_reply_body(buf);
        Toolpool__WorkerFrame *wf = toolpool__worker_frame__unpack(NULL, n, buf);
        refused += wf == NULL;
        if (tp_reply_decode_plain(buf, n, &got)) {
            fast++;
            CU_ASSERT_PTR_NOT_NULL(wf);
            if (wf == NULL) {
                fprintf(stderr, "\n  plain decoder took a frame protobuf-c refuses:");
                for (size_t i = 0; i < n; i++)
                    fprintf(stderr, " %02x", buf[i]);
                fputc('\n', stderr);
            } else {
                CU_ASSERT_EQUAL(wf->body_case, TOOLPOOL__WORKER_FRAME__BODY_REPLY);
                if (wf->body_case == TOOLPOOL__WORKER_FRAME__BODY_REPLY)
                    check_same_reply(&got, wf->reply);
                /* protobuf-c's own packing is shorter: this one was overlong */
                overlong_fast += protobuf_c_message_get_packed_size(&wf->base) < n;
            }
        }
        toolpool__worker_frame__free_unpacked(wf, NULL);
    }
    CU_ASSERT(fast > 1000);
    CU_ASSERT(refused > 1000);
    CU_ASSERT(overlong_fast > 500);
}

static void test_eof(void)
{
    int p[2];
    CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
    uint8_t half[] = {10, 0, 0, 0, 1, 2, 3};
    CU_ASSERT_EQUAL(write(p[1], half, sizeof half), (ssize_t)sizeof half);
    close(p[1]);
    tp_buf_t in = {0};
    const uint8_t *body;
    uint32_t len;
    CU_ASSERT_EQUAL(tp_frame_recv(p[0], &in, 1024, &body, &len), TP_EPIPE);
    close(p[0]);
    CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
    close(p[1]);
    tp_buf_reset(&in);
    CU_ASSERT_EQUAL(tp_frame_recv(p[0], &in, 1024, &body, &len), TP_ECLOSED);
    close(p[0]);
    tp_buf_free(&in);
}

/*
 * tp_pipe_fit: a pipe grows to take a large frame in one write (up to
 * TP_PIPE_MAX), never for a small one, and is not asked twice.
 */
static void test_pipe_fit(void)
{
    int p[2];
    CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
    int before = fcntl(p[1], F_GETPIPE_SZ);
    size_t asked = 0;
    tp_pipe_fit(p[1], 65536, &asked);
    CU_ASSERT_EQUAL(asked, 0);
    CU_ASSERT_EQUAL(fcntl(p[1], F_GETPIPE_SZ), before);
    tp_pipe_fit(p[1], 300000, &asked);
    CU_ASSERT_EQUAL(asked, 524288);
    int now = fcntl(p[1], F_GETPIPE_SZ);
    CU_ASSERT(now >= 300000);
    tp_pipe_fit(p[1], 200000, &asked); /* fits already: nothing asked */
    CU_ASSERT_EQUAL(asked, 524288);
    tp_pipe_fit(p[1], (size_t)8 << 20, &asked); /* past the cap: the cap */
    CU_ASSERT_EQUAL(asked, TP_PIPE_MAX);
    /* Root may go past /proc/sys/fs/pipe-max-size, others not: either way, a 1 MiB frame fits now. */
    now = fcntl(p[0], F_GETPIPE_SZ);
    CU_ASSERT(now == (int)TP_PIPE_MAX);
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    char *big = calloc(1, TP_PIPE_MAX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    CU_ASSERT_EQUAL(write(p[1], big, TP_PIPE_MAX), (ssize_t)TP_PIPE_MAX);
    free(big);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("frame", NULL, NULL);
    CU_add_test(s, "round trip", test_round_trip);
    CU_add_test(s, "partial reads over a real pipe", test_partial_reads);
    CU_add_test(s, "a pipe grows to fit a large frame", test_pipe_fit);
    CU_add_test(s, "many frames in one read", test_many_in_one_read);
    CU_add_test(s, "oversized length", test_oversized);
    CU_add_test(s, "garbage body", test_garbage);
    CU_add_test(s, "eof", test_eof);
    CU_add_test(s, "unpacking into an arena", test_arena);
    CU_add_test(s, "a hand-built Call frame is protobuf-c's, byte for byte", test_call_frame);
    CU_add_test(s, "the plain Reply decoder agrees with protobuf-c", test_plain_reply);
    CU_add_test(s, "... on overlong and non-canonical varints too", test_plain_reply_overlong);
    return tp_test_run();
}
