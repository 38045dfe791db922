/*
 * The HTTP server of bench/run's http section: GET /slow?ms=N answers
 * 200 with a small JSON body ({"slept_ms": N}) after N milliseconds, at
 * once for 0, on HTTP/1.1 with keep-alive (libevent's evhttp, one thread).
 * GET /stats answers {"answered": A, "in_flight_peak": P, "in_flight": F}
 * and starts the first two again: the /slow requests answered since the
 * last /stats, the most that were in flight at once (received, not yet
 * answered), and how many are in flight now. A driver checks with them
 * how many calls a client made and really had in flight.
 *
 *   B/slow_server              (built with everything: cmake --build B)
 *
 * It binds 127.0.0.1 on a port the kernel picks, prints that port alone on
 * its first line of standard output, and serves until its standard input
 * closes (a pipe or a terminal; the driver holds the pipe's other end), so
 * it cannot outlive the benchmark that started it.
 *
 * A waiting request costs a timer and nothing else: no thread, no sleep.
 * 256 requests in flight for 20 ms each are 12,800 answers a second; on
 * the benchmarks' machine (2 vCPUs, wrk on them too) it answered 25,000
 * to 60,000 a second at once and 17,000 to 41,000 a second of 20 ms each
 * (wrk, 1,000 connections), as other work came and went: the server is not
 * what the benchmark measures. The listen backlog is large for the same
 * reason: 256 clients that connect at once (xargs starting 256 curls) must
 * not see a SYN dropped and retried a second later.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The longest wait a request may ask for, in ms. */
#define SLOW_MAX_MS 60000
/* The listen backlog (the kernel caps it at net.core.somaxconn). */
#define SLOW_BACKLOG 4096

/* The /slow requests: in flight now, the most at once and answered, since the last /stats. */
static long in_flight, in_flight_peak, answered;

/* One request waiting for its timer; freed when the timer has answered it. */
typedef struct {
    struct evhttp_request *req;
    struct event *timer;
    long ms;
} slow_wait_t;

/*
 * Sends the 200 and its body. The body is built in the request's own
 * output buffer: evhttp sends it with the headers and frees it with the
 * request. A request whose client went away meanwhile is still ours
 * (evhttp detaches it from the connection and leaves it to us); sending
 * it frees it without writing anything.
 */
static void slow_answer(struct evhttp_request *req, long ms)
{
    struct evbuffer *body = evhttp_request_get_output_buffer(req);
    struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
    if (evbuffer_add_printf(body, "{\"slept_ms\": %ld}\n", ms) < 0 ||
        evhttp_add_header(headers, "Content-Type", "application/json") < 0) {
        fprintf(stderr, "slow_server: building an answer: out of memory\n");
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
    } else {
        evhttp_send_reply(req, HTTP_OK, "OK", NULL);
    }
    in_flight--;
    answered++;
}

static void slow_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    slow_wait_t *w = arg;
    slow_answer(w->req, w->ms);
    event_free(w->timer);
    free(w);
}

/*
 * Reads ms from the query. Returns it (0 when the query has none), or -1
 * for a value that is not a whole number of 0 to SLOW_MAX_MS.
 */
static long slow_query_ms(struct evhttp_request *req)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (!query)
        return 0;
    struct evkeyvalq params;
    if (evhttp_parse_query_str(query, &params) < 0)
        return -1;
    long ms = 0;
    const char *v = evhttp_find_header(&params, "ms");
    if (v) {
        char *end;
        errno = 0;
        ms = strtol(v, &end, 10);
        if (end == v || *end || errno || ms < 0 || ms > SLOW_MAX_MS)
            ms = -1;
    }
    evhttp_clear_headers(&params);
    return ms;
}

/* GET /slow?ms=N: at once for 0, else after a timer of N ms. */
static void slow_cb(struct evhttp_request *req, void *arg)
{
    struct event_base *base = arg;
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
        evhttp_send_error(req, HTTP_BADMETHOD, NULL);
        return;
    }
    long ms = slow_query_ms(req);
    if (ms < 0) {
        evhttp_send_error(req, HTTP_BADREQUEST, "ms: a whole number of 0 to 60000");
        return;
    }
    if (++in_flight > in_flight_peak)
        in_flight_peak = in_flight;
    if (ms == 0) {
        slow_answer(req, 0);
        return;
    }
    slow_wait_t *w = malloc(sizeof(*w));
    if (!w) {
        in_flight--;
        evhttp_send_error(req, HTTP_SERVUNAVAIL, NULL);
        return;
    }
    w->req = req;
    w->ms = ms;
    w->timer = evtimer_new(base, slow_timer_cb, w);
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = ms % 1000 * 1000};
    if (!w->timer || evtimer_add(w->timer, &tv) < 0) {
        fprintf(stderr, "slow_server: a timer of %ld ms: cannot add it\n", ms);
        if (w->timer)
            event_free(w->timer);
        free(w);
        in_flight--;
        evhttp_send_error(req, HTTP_SERVUNAVAIL, NULL);
    }
}

/* GET /stats: the counts since the last /stats, which starts them again. */
static void stats_cb(struct evhttp_request *req, void *arg)
{
    struct evbuffer *body = evhttp_request_get_output_buffer(req);
    if (evbuffer_add_printf(body, "{\"answered\": %ld, \"in_flight_peak\": %ld, \"in_flight\": %ld}\n", answered,
                            in_flight_peak, in_flight) < 0 ||
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json") < 0) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evhttp_send_reply(req, HTTP_OK, "OK", NULL);
    answered = 0;
    in_flight_peak = in_flight;
}

static void not_found_cb(struct evhttp_request *req, void *arg)
{
    evhttp_send_error(req, HTTP_NOTFOUND, NULL);
}

/* Standard input: anything read is dropped; its end (or an error) ends the loop. */
static void stdin_cb(evutil_socket_t fd, short what, void *arg)
{
    char buf[512];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN)))
        return;
    event_base_loopbreak(arg);
}

/*
 * A listening socket on 127.0.0.1, port 0 (the kernel's pick), with the
 * backlog above. Returns the socket and sets *port, or -1 (logged).
 */
static int slow_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("slow_server: socket");
        return -1;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, SLOW_BACKLOG) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("slow_server: bind 127.0.0.1:0");
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "usage: slow_server   (prints its port; serves until stdin closes)\n");
        return 2;
    }
    /* A client that leaves mid-answer is an EPIPE on its socket, not the end of the server. */
    signal(SIGPIPE, SIG_IGN);
    int rc = 1, port = 0;
    /*
     * Timers of the monotonic clock's precision (a timerfd), not epoll's
     * milliseconds rounded up: under wrk -c256 at 20 ms, three rounds of
     * each, wrk's p50 was 25.3 to 26.7 ms with epoll's and 21.5 to 22.4 ms
     * with these, 9,000 to 9,500 answers a second against 10,900 to 11,500.
     */
    struct event_config *config = event_config_new();
    if (config && event_config_set_flag(config, EVENT_BASE_FLAG_PRECISE_TIMER) < 0) {
        event_config_free(config);
        config = NULL;
    }
    struct event_base *base = config ? event_base_new_with_config(config) : NULL;
    if (config)
        event_config_free(config);
    struct evhttp *http = base ? evhttp_new(base) : NULL;
    struct event *in = NULL;
    if (!http) {
        fprintf(stderr, "slow_server: event_base_new or evhttp_new failed\n");
        goto out;
    }
    int fd = slow_listen(&port);
    if (fd < 0)
        goto out;
    /* backlog 0: the socket listens already, with ours. */
    struct evconnlistener *listener = evconnlistener_new(base, NULL, NULL,
                                                         LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (!listener) {
        fprintf(stderr, "slow_server: evconnlistener_new failed\n");
        close(fd);
        goto out;
    }
    if (!evhttp_bind_listener(http, listener)) {
        fprintf(stderr, "slow_server: evhttp_bind_listener failed\n");
        evconnlistener_free(listener);
        goto out;
    }
    if (evhttp_set_cb(http, "/slow", slow_cb, base) < 0 || evhttp_set_cb(http, "/stats", stats_cb, NULL) < 0) {
        fprintf(stderr, "slow_server: evhttp_set_cb failed\n");
        goto out;
    }
    evhttp_set_gencb(http, not_found_cb, NULL);
    in = event_new(base, STDIN_FILENO, EV_READ | EV_PERSIST, stdin_cb, base);
    if (!in || event_add(in, NULL) < 0) {
        fprintf(stderr, "slow_server: cannot watch standard input (it must be a pipe or a terminal)\n");
        goto out;
    }
    if (printf("%d\n", port) < 0 || fflush(stdout) == EOF) {
        perror("slow_server: printing the port");
        goto out;
    }
    if (event_base_dispatch(base) < 0) {
        fprintf(stderr, "slow_server: event_base_dispatch failed\n");
        goto out;
    }
    rc = 0;
out:
    if (in)
        event_free(in);
    if (http)
        evhttp_free(http);
    if (base)
        event_base_free(base);
    return rc;
}
