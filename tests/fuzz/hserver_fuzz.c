/*
 * serve's HTTP/1.1 server (supervisor/front/http/hserver.h) fed bytes as a
 * client would send them: the input goes down a real socket in two writes
 * (split where its first byte says), the loop runs until the server has
 * read it, and every request it frames is answered (whole, or in pieces
 * for every other one). It must never crash, leak or hit undefined
 * behaviour; what it hands over must hold together: a body within
 * --max-body, every header found by its own name, a path.
 */
#include <event2/event.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "hserver.h"

#define MAX_BODY 2048

static int served, closed;

static void on_request(void *ctx, tp_hreq_t *r)
{
    (void)ctx;
    size_t len;
    const char *body = tp_hreq_body(r, &len);
    TP_FUZZ_CHECK(len <= MAX_BODY && (len == 0) == (body == NULL));
    TP_FUZZ_CHECK(tp_hreq_path(r) != NULL);
    for (size_t i = 0; i < tp_hreq_headers(r); i++) {
        size_t n;
        const char *v;
        const char *name = tp_hreq_header_at(r, i, &n, &v);
        TP_FUZZ_CHECK(strlen(name) == n && n > 0);
        const char *first = tp_hreq_header(r, name);
        TP_FUZZ_CHECK(first != NULL);
        for (size_t j = 0; j < i; j++) {
            size_t m;
            const char *w;
            if (strcasecmp(tp_hreq_header_at(r, j, &m, &w), name) == 0) {
                v = w;
                break;
            }
        }
        TP_FUZZ_CHECK(first == v);
    }
    TP_FUZZ_CHECK(tp_hreq_add_header(r, "X-Bad", "a\r\nb") != 0);
    if (tp_hreq_add_header(r, "Content-Type", "text/plain") != 0)
        abort();
    if (served++ % 2 == 0) {
        tp_hreq_reply(r, 200, body, len);
    } else {
        tp_hreq_start(r, 200);
        tp_hreq_chunk(r, "ab", 2);
        tp_hreq_chunk(r, body, len);
        tp_hreq_end(r);
    }
}

static void on_close(void *ctx, void *user)
{
    (void)ctx;
    (void)user;
    closed++;
}

static void drain(int fd)
{
    char buf[65536];
    while (read(fd, buf, sizeof buf) > 0)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct event_base *base;
    if (base == NULL && (base = event_base_new()) == NULL)
        abort();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    tp_hs_opts_t o = {.base = base,
                      .max_body = MAX_BODY,
                      .max_head = 1024,
                      .idle = {5, 0},
                      .on_request = on_request,
                      .on_close = on_close};
    tp_hs_t *s = tp_hs_new(&o);
    if (s == NULL || tp_hs_adopt(s, sv[0], NULL) != 0)
        abort();
    closed = 0;
    size_t cut = size ? data[0] % (size + 1) : 0;
    const uint8_t *parts[2] = {data, data + cut};
    size_t lens[2] = {cut, size - cut};
    for (int i = 0; i < 2; i++) {
        if (lens[i] > 0 && send(sv[1], parts[i], lens[i], MSG_NOSIGNAL) < 0) {
            /* the server closed its end: what it read was enough */
        }
        for (int k = 0; k < 4; k++) {
            event_base_loop(base, EVLOOP_NONBLOCK);
            drain(sv[1]);
        }
    }
    shutdown(sv[1], SHUT_WR);
    for (int k = 0; k < 4; k++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        drain(sv[1]);
    }
    tp_hs_free(s);
    TP_FUZZ_CHECK(closed == 1);
    close(sv[1]);
    return 0;
}
