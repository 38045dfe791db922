/*
 * fakeworker: a misbehaving stand-in for toolpool-worker, for cli_test.
 *
 * The supervisor runs it in place of the real worker when TOOLPOOL_WORKER
 * names it; FAKEWORKER_MODE picks what goes wrong:
 *
 *   garbage    Hello, then answers the first Call with a frame whose body
 *              is not a WorkerFrame
 *   oversized  Hello, then answers the first Call with a header announcing
 *              0x7fffffff bytes (and never sends them)
 *   nohello    never says Hello; sleeps until killed
 *   badproto   Hello with protocol 99, then waits
 *   exit       Hello, then exits as soon as it has read a Call
 *   stuckstart the first instance (the one that creates the file
 *              $FAKEWORKER_FLAG) never says Hello; every later one exits 1
 *              at once, so the pool gives up on starting workers while one
 *              slot is still waiting for its Hello
 *
 * Like the real worker it reads Calls on fd 3 and writes frames on fd 4.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "toolpool.pb-c.h"

#define CALL_FD 3
#define REPLY_FD 4
#define MAX_FRAME (64u << 20)

/* Writes n bytes to the supervisor or exits: it is gone. */
static void put(const void *p, size_t n)
{
    if (tp_write_all(REPLY_FD, p, n) < 0) {
        fprintf(stderr, "fakeworker: write: %s\n", strerror(errno));
        exit(3);
    }
}

/* Sends a Hello frame carrying the given protocol number. */
static void send_hello(uint32_t protocol)
{
    Toolpool__Hello hello = TOOLPOOL__HELLO__INIT;
    hello.protocol = protocol;
    hello.pid = (int32_t)getpid();
    Toolpool__WorkerFrame wf = TOOLPOOL__WORKER_FRAME__INIT;
    wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_HELLO;
    wf.hello = &hello;
    tp_buf_t out = {0};
    if (tp_frame_append(&out, &wf.base, MAX_FRAME) < 0) {
        fprintf(stderr, "fakeworker: cannot pack the hello\n");
        exit(3);
    }
    put(tp_buf_head(&out), tp_buf_avail(&out));
    tp_buf_free(&out);
}

/*
 * Blocks until one whole Call frame has arrived and checks it unpacks.
 * Returns 0, or -1 at EOF (the supervisor closed the pipe).
 */
static int read_call(tp_buf_t *in)
{
    const uint8_t *body;
    uint32_t len;
    int rc = tp_frame_recv(CALL_FD, in, MAX_FRAME, &body, &len);
    if (rc == TP_ECLOSED)
        return -1;
    if (rc != 0) {
        fprintf(stderr, "fakeworker: bad frame from the supervisor\n");
        exit(3);
    }
    Toolpool__SupervisorFrame *sf = toolpool__supervisor_frame__unpack(NULL, len, body);
    if (sf == NULL || sf->body_case != TOOLPOOL__SUPERVISOR_FRAME__BODY_CALL) {
        fprintf(stderr, "fakeworker: not a Call\n");
        exit(3);
    }
    toolpool__supervisor_frame__free_unpacked(sf, NULL);
    tp_buf_consume(in, TP_FRAME_HEADER + len);
    return 0;
}

/* Waits for the kill (or for the supervisor to close the call pipe). */
static _Noreturn void linger(tp_buf_t *in)
{
    while (read_call(in) == 0)
        ;
    tp_buf_free(in);
    exit(0);
}

static _Noreturn void sleep_forever(void)
{
    for (;;)
        pause();
}

int main(void)
{
    const char *mode = getenv("FAKEWORKER_MODE");
    tp_buf_t in = {0};
    if (mode == NULL) {
        fprintf(stderr, "fakeworker: FAKEWORKER_MODE is not set\n");
        return 3;
    }
    if (strcmp(mode, "nohello") == 0)
        sleep_forever();
    if (strcmp(mode, "stuckstart") == 0) {
        const char *flag = getenv("FAKEWORKER_FLAG");
        int fd = flag ? open(flag, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
        if (fd < 0)
            return 1;
        close(fd);
        sleep_forever();
    }
    if (strcmp(mode, "badproto") == 0) {
        send_hello(99);
        linger(&in);
    }
    send_hello(TOOLPOOL__PROTOCOL__PROTOCOL_VERSION);
    if (read_call(&in) < 0)
        return 0;
    if (strcmp(mode, "garbage") == 0) {
        /* A varint longer than ten bytes: no protobuf message starts so. */
        uint8_t junk[4 + 16];
        memset(junk, 0xff, sizeof junk);
        junk[0] = 16;
        junk[1] = junk[2] = junk[3] = 0;
        put(junk, sizeof junk);
    } else if (strcmp(mode, "oversized") == 0) {
        static const uint8_t header[4] = {0xff, 0xff, 0xff, 0x7f};
        put(header, sizeof header);
        put("\x12\x00", 2);
    } else if (strcmp(mode, "exit") == 0) {
        tp_buf_free(&in);
        return 0;
    } else {
        fprintf(stderr, "fakeworker: unknown FAKEWORKER_MODE \"%s\"\n", mode);
        return 3;
    }
    linger(&in);
}
