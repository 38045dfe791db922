/*
 * serve's HTTP/1.1 server (hserver.h): a connection's bytes read into one
 * buffer, where its request is framed and parsed in place; its replies
 * formatted into another and written at once.
 *
 * Why not evhttp: a POST /v1/calls under wrk cost evhttp ~45,000
 * instructions (39 frees, 22 allocations, four vsnprintf and an sscanf,
 * evhttp_send_reply alone 9,550) against the front's ~10,000 (callgrind of
 * serve -j 2). Here a request is one read and one send, its head parsed
 * where it lies, no allocation once the connection's buffers have grown.
 *
 * One request at a time: while it waits for its reply the connection is
 * not read (its strings never move), as evhttp had it; bytes that came
 * behind it (a pipelined request) are framed once its reply is given, from
 * the loop, never inside the call that gave the reply.
 *
 * A connection ends softly: once its last reply is out, its sending side
 * is shut down and what the client still sends is read and dropped
 * (for a moment, and up to a bound) until it closes, so that a reply
 * followed by unread bytes reaches the client instead of a reset.
 */
#include "hserver.h"

#include <errno.h>
#include <event2/util.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "log.h"

/* A connection's read buffer starts this large; a request larger grows it (not while one waits). */
#define TP_HS_IN_MIN 16384
/* A closing connection reads (and drops) at most this much, for at most TP_HS_LINGER_MS, before it closes. */
#define TP_HS_LINGER_MAX (16u << 20)
#define TP_HS_LINGER_MS 2000
/* Replies a connection holds unsent before it frames no more of its pipelined requests (a client that sends and never reads). */
#define TP_HS_OUT_HIGH (64u << 10)

/* Where a header lies in the read buffer, from its request's first byte (the buffer may move until the request is whole). */
typedef struct {
    size_t name, name_len, value;
} hs_field_t;

struct tp_hreq {
    tp_hs_conn_t *c;
    unsigned method;
    int minor;      /* HTTP/1.minor */
    bool keep;      /* the connection stays open after the reply */
    bool started;   /* tp_hreq_start has sent the head */
    bool chunked;   /* the reply's body is chunked */
    size_t path;    /* offsets from the request's first byte */
    bool path_root; /* an absolute-form target without a path: "/" */
    size_t query;   /* 0: none */
    hs_field_t *hd;
    size_t nh, hd_cap;
    size_t body, body_len;
    tp_buf_t ohd; /* the headers added, "Name: value\r\n" each */
};

typedef enum {
    HS_HEAD,    /* reading a request's head */
    HS_BODY,    /* reading a body of known length */
    HS_CHUNKS,  /* reading a chunked body */
    HS_BUSY,    /* the request is the front's, until its reply is given */
    HS_CLOSING, /* its last reply going out: nothing more is read */
    HS_LINGER,  /* its sending side shut: what comes is dropped until the client closes */
} hs_state_t;

typedef enum {
    CK_SIZE, /* a chunk's size line */
    CK_DATA, /* its bytes */
    CK_CRLF, /* the line end after them */
    CK_TRAILER,
} ck_state_t;

struct tp_hs_conn {
    tp_hs_t *s;
    tp_hs_conn_t *prev, *next;
    int fd;
    struct event *ev_in, *ev_out;
    struct event *ev_wake; /* work left for the loop: a close, a run, a sent callback (never a socket's) */
    bool reading, writing; /* ev_in, ev_out added */
    /* what has been read: the current request from start, the bytes read end at len */
    uint8_t *in;
    size_t start, len, cap;
    size_t scan;     /* HS_HEAD: where the head's end is looked for next */
    size_t head_end; /* the body's first byte */
    size_t need;     /* HS_BODY: the body's length */
    /* HS_CHUNKS: read from ck_read, the body decoded so far ends at ck_write */
    ck_state_t ck;
    size_t ck_read, ck_write, ck_left;
    size_t lingered;
    size_t trailers; /* HS_CHUNKS: bytes of trailer lines */
    bool chunked_in; /* the request's body is chunked */
    hs_state_t st;
    tp_hreq_t req;
    tp_buf_t out;
    bool eof;              /* the client has closed its side */
    bool cut;              /* tp_hreq_shutdown: the reply's end is the connection's, once out */
    bool shut;             /* its sending side is shut down */
    bool in_run;           /* conn_run is on the stack */
    bool run_due;          /* bytes behind a request answered outside on_request: framed from the loop */
    bool sent_due;         /* the sent callback, from the loop */
    uint64_t linger_until; /* HS_LINGER: when it closes, whatever the client sends */
    bool dead;             /* closes from the loop: nothing more is read or sent */
    void (*sent_cb)(void *);
    void *sent_arg;
    void *user;
};

struct tp_hs {
    tp_hs_opts_t o;
    tp_hs_conn_t *conns;
    /* the Date header of replies sent in second date_at */
    time_t date_at;
    char date[64];
};

static void conn_run(tp_hs_conn_t *c);
static void conn_flush(tp_hs_conn_t *c);

/* ---- connections ---- */

static void conn_free(tp_hs_conn_t *c)
{
    tp_hs_t *s = c->s;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    event_free(c->ev_in);
    event_free(c->ev_out);
    event_free(c->ev_wake);
    void *user = c->user;
    free(c->in);
    free(c->req.hd);
    tp_buf_free(&c->req.ohd);
    tp_buf_free(&c->out);
    int fd = c->fd;
    free(c);
    /* before the close: what the owner watches on the socket goes while its number is still this one */
    if (s->o.on_close)
        s->o.on_close(s->o.ctx, user);
    close(fd);
}

/* The connection closes from the loop (its callers may still hold its request): nothing more is read or sent. */
static void conn_kill(tp_hs_conn_t *c)
{
    if (c->dead)
        return;
    c->dead = true;
    if (c->writing)
        event_del(c->ev_out);
    c->writing = false;
    if (c->reading)
        event_del(c->ev_in);
    c->reading = false;
    event_active(c->ev_wake, EV_TIMEOUT, 0);
}

/* Work for the loop, out from under the caller (a reply's giver, a write's). */
static void wake(tp_hs_conn_t *c)
{
    event_active(c->ev_wake, EV_TIMEOUT, 0);
}

static bool out_high(const tp_hs_conn_t *c)
{
    return c->out.len - c->out.off > TP_HS_OUT_HIGH;
}

/* Reading on (its timeout, tv, starts again) or off. */
static void reading_set(tp_hs_conn_t *c, bool on, const struct timeval *tv)
{
    if (c->dead || (!on && !c->reading))
        return;
    if (on ? event_add(c->ev_in, tv) != 0 : event_del(c->ev_in) != 0) {
        tp_log_error("http.event_failed", "http: cannot %s reading a connection", on ? "resume" : "stop");
        conn_kill(c);
        return;
    }
    c->reading = on;
}

/* Room to read into, want bytes if it can (never while a request waits: it is not read then). */
static size_t in_room(tp_hs_conn_t *c, size_t want)
{
    if (c->start > 0 && c->start == c->len) {
        c->start = c->len = c->scan = 0;
    } else if (c->start > 0 && c->cap - c->len < want) {
        size_t n = c->len - c->start, d = c->start;
        memmove(c->in, c->in + d, n);
        c->len = n;
        c->start = 0;
        c->scan = c->scan > d ? c->scan - d : 0;
        c->head_end = c->head_end > d ? c->head_end - d : 0;
        c->ck_read = c->ck_read > d ? c->ck_read - d : 0;
        c->ck_write = c->ck_write > d ? c->ck_write - d : 0;
    }
    if (c->cap - c->len < want) {
        size_t cap = c->cap ? c->cap : TP_HS_IN_MIN;
        while (cap - c->len < want)
            cap *= 2;
        uint8_t *p = realloc(c->in, cap);
        if (p == NULL)
            return c->cap - c->len;
        c->in = p;
        c->cap = cap;
    }
    return c->cap - c->len;
}

static void in_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_hs_conn_t *c = arg;
    if (c->dead) {
        conn_free(c);
        return;
    }
    if ((what & EV_TIMEOUT) && c->st == HS_BUSY)
        return; /* a request waiting for its reply is not idle */
    if (what & EV_TIMEOUT) {
        /*
         * Idle: no request, half of one, or a linger's end. A reply still
         * going out is the write side's to time.
         */
        if (!c->writing || c->st == HS_LINGER)
            conn_free(c);
        return;
    }
    if (c->st == HS_LINGER) {
        char drop[16384];
        ssize_t n = recv(fd, drop, sizeof drop, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        c->lingered += n > 0 ? (size_t)n : 0;
        if (n <= 0 || c->lingered > TP_HS_LINGER_MAX || tp_now_us() >= c->linger_until)
            conn_free(c);
        return;
    }
    if ((c->st != HS_HEAD && c->st != HS_BODY && c->st != HS_CHUNKS) || out_high(c)) {
        reading_set(c, false, NULL); /* read again once it may frame: req_done, conn_flush */
        return;
    }
    /* a body's room grows with what comes of it, not with what its Content-Length says */
    size_t want = 4096;
    if (c->st == HS_BODY && c->head_end + c->need > c->len)
        want = c->head_end + c->need - c->len < 262144 ? c->head_end + c->need - c->len : 262144;
    size_t room = in_room(c, want);
    if (room == 0) {
        tp_log_error("http.out_of_memory", "http: out of memory reading a request");
        conn_free(c);
        return;
    }
    ssize_t n = recv(fd, c->in + c->len, room, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        conn_free(c); /* reset */
        return;
    }
    if (n == 0) {
        /* Every whole request before it has been answered (none is read while one waits): what is left is half of one. */
        c->eof = true;
        reading_set(c, false, NULL);
        if (c->out.len > c->out.off) {
            c->st = HS_CLOSING; /* the last reply goes out first */
            return;
        }
        conn_free(c);
        return;
    }
    c->len += (size_t)n;
    conn_run(c);
}

static void out_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_hs_conn_t *c = arg;
    if (c->dead)
        return; /* in_cb frees it */
    if (what & EV_TIMEOUT) {
        conn_free(c); /* a client that does not read its reply */
        return;
    }
    conn_flush(c);
}

/* What was left for the loop: the close, the sent callback, the framing of requests read behind one answered. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    tp_hs_conn_t *c = arg;
    (void)fd;
    (void)what;
    if (c->dead) {
        conn_free(c);
        return;
    }
    if (c->sent_due) {
        c->sent_due = false;
        if (c->sent_cb && c->out.len == c->out.off) {
            void (*cb)(void *) = c->sent_cb;
            c->sent_cb = NULL;
            cb(c->sent_arg);
            if (c->dead)
                return;
        }
    }
    if (c->run_due) {
        c->run_due = false;
        conn_run(c);
    }
}

/*
 * Writes what the connection has to send. What the socket does not take
 * waits for it to be writable (the idle timeout drops a client that never
 * reads). Once all is out: the close or shutdown asked for.
 */
static void conn_flush(tp_hs_conn_t *c)
{
    while (!c->dead && c->out.len > c->out.off) {
        ssize_t n = send(c->fd, c->out.data + c->out.off, c->out.len - c->out.off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out.off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->writing) {
                if (event_add(c->ev_out, &c->s->o.idle) != 0) {
                    tp_log_error("http.event_failed", "http: cannot wait to write a reply");
                    conn_kill(c);
                    return;
                }
                c->writing = true;
            }
            return;
        }
        conn_kill(c); /* the client has gone */
        return;
    }
    if (c->dead)
        return;
    c->out.off = c->out.len = 0;
    if (c->out.cap > (1u << 20))
        tp_buf_free(&c->out); /* a large reply's room goes back */
    if (c->writing) {
        event_del(c->ev_out);
        c->writing = false;
    }
    if ((c->st == HS_CLOSING || c->cut) && !c->shut) {
        c->shut = true;
        if (c->eof || shutdown(c->fd, SHUT_WR) != 0) {
            conn_kill(c);
            return;
        }
        c->st = HS_LINGER;
        c->lingered = 0;
        struct timeval tv = {TP_HS_LINGER_MS / 1000, (TP_HS_LINGER_MS % 1000) * 1000};
        if (timercmp(&c->s->o.idle, &tv, <))
            tv = c->s->o.idle;
        c->linger_until = tp_now_us() + (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
        reading_set(c, true, &tv);
        return;
    }
    if (c->st == HS_HEAD || c->st == HS_BODY || c->st == HS_CHUNKS) {
        /* the idle time starts once the last reply is out; pipelined requests held back are framed now */
        reading_set(c, true, &c->s->o.idle);
        if (c->len > c->start && !c->in_run) {
            c->run_due = true;
            wake(c);
        }
    }
    /* a sent callback waits for the loop: its caller may be the one whose bytes just went */
    if (c->sent_cb) {
        c->sent_due = true;
        wake(c);
    }
}

int tp_hs_adopt(tp_hs_t *s, int fd, void *user)
{
    tp_hs_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        goto fail;
    c->s = s;
    c->fd = fd;
    c->user = user;
    c->req.c = c;
    c->ev_in = event_new(s->o.base, fd, EV_READ | EV_PERSIST, in_cb, c);
    c->ev_out = event_new(s->o.base, fd, EV_WRITE | EV_PERSIST, out_cb, c);
    c->ev_wake = event_new(s->o.base, -1, 0, wake_cb, c);
    if (c->ev_in == NULL || c->ev_out == NULL || c->ev_wake == NULL || event_add(c->ev_in, &s->o.idle) != 0)
        goto fail;
    c->reading = true;
    c->next = s->conns;
    if (c->next)
        c->next->prev = c;
    s->conns = c;
    return 0;
fail:
    if (c) {
        if (c->ev_in)
            event_free(c->ev_in);
        if (c->ev_out)
            event_free(c->ev_out);
        if (c->ev_wake)
            event_free(c->ev_wake);
        free(c);
    }
    close(fd);
    return -1;
}

/* ---- requests: framing and parsing ---- */

/* RFC 9110's tchar (a header name's and a method's bytes) and a field value's (VCHAR, obs-text, SP, HTAB), as bitmaps. */
static const uint32_t hs_tchar[8] = {0x00000000u, 0x03ff6cfau, 0xc7fffffeu, 0x57ffffffu,
                                     0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u};
static const uint32_t hs_vchar[8] = {0x00000200u, 0xffffffffu, 0xffffffffu, 0x7fffffffu,
                                     0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};

static bool is_tchar(unsigned char ch)
{
    return (hs_tchar[ch >> 5] >> (ch & 31)) & 1u;
}

static bool is_vchar(unsigned char ch)
{
    return (hs_vchar[ch >> 5] >> (ch & 31)) & 1u;
}

/* A string of the current request, by its offset from the request's first byte. */
static char *at(const tp_hs_conn_t *c, size_t off)
{
    return (char *)c->in + c->start + off;
}

static size_t rel(const tp_hs_conn_t *c, const char *p)
{
    return (size_t)(p - ((const char *)c->in + c->start));
}

/* Whether the comma-separated list v holds token tok (any case). */
static bool list_has(const char *v, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = v; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == n && strncasecmp(p, tok, n) == 0)
            return true;
        p = e;
    }
    return false;
}

/*
 * A request the server answers itself, before any route sees it: the
 * error as every route's ({"error", "message"}), the connection closed
 * softly after it (what follows cannot be framed; a body it refused is
 * read out, so that the client, still sending, hears the answer).
 */
static void conn_refuse(tp_hs_conn_t *c, int status, const char *error, const char *message)
{
    tp_hreq_t *r = &c->req;
    if (r->minor < 0)
        r->minor = 1;
    c->st = HS_BUSY;
    r->ohd.len = r->ohd.off = 0;
    r->method = TP_HM_GET;
    r->started = false;
    tp_buf_t b = {0};
    tp_buf_puts(&b, "{\"error\":\"");
    tp_buf_puts(&b, error);
    tp_buf_puts(&b, "\",\"message\":\"");
    for (const char *p = message; *p; p++) {
        if (*p == '"' || *p == '\\')
            tp_buf_append(&b, "\\", 1);
        tp_buf_append(&b, (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f ? p : "?", 1);
    }
    tp_buf_puts(&b, "\"}\n");
    tp_hreq_add_header(r, "Content-Type", "application/json");
    tp_hreq_close_after(r);
    tp_hreq_reply(r, status, b.data, b.len);
    tp_buf_free(&b);
}

/*
 * The head, once its end has been read: the request line and headers
 * parsed in place (each string NUL-terminated where it lies), the body's
 * framing found. 0, or -1 when it has been refused.
 */
static int head_parse(tp_hs_conn_t *c)
{
    tp_hreq_t *r = &c->req;
    r->nh = 0;
    r->query = 0;
    r->minor = -1;
    r->started = r->chunked = false;
    r->ohd.len = r->ohd.off = 0;
    size_t p = c->start, end = c->head_end;
    /* the request line */
    size_t le = (size_t)((uint8_t *)memchr(c->in + p, '\n', end - p) - c->in);
    size_t line_end = le > p && c->in[le - 1] == '\r' ? le - 1 : le;
    char *line = (char *)c->in + p;
    c->in[line_end] = '\0';
    if (memchr(line, '\0', line_end - p) != NULL) {
        conn_refuse(c, 400, "BadRequest", "the request line holds a NUL byte");
        return -1;
    }
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (sp1 == NULL || sp2 == NULL || strchr(sp2 + 1, ' ') != NULL || sp1 == line || sp2 == sp1 + 1) {
        conn_refuse(c, 400, "BadRequest", "the request line is not METHOD TARGET HTTP/1.x");
        return -1;
    }
    *sp1 = *sp2 = '\0';
    const char *ver = sp2 + 1;
    if (strncmp(ver, "HTTP/", 5) != 0 || ver[5] < '0' || ver[5] > '9' || ver[6] != '.' || ver[7] < '0' ||
        ver[7] > '9' || ver[8] != '\0') {
        conn_refuse(c, 400, "BadRequest", "the request line's version is not HTTP/1.x");
        return -1;
    }
    if (ver[5] != '1') {
        conn_refuse(c, 505, "VersionNotSupported", "this service speaks HTTP/1.1 and HTTP/1.0");
        return -1;
    }
    r->minor = ver[7] == '0' ? 0 : 1;
    for (const char *m = line; *m; m++)
        if (!is_tchar((unsigned char)*m)) {
            conn_refuse(c, 400, "BadRequest", "the request's method is not a token");
            return -1;
        }
    static const struct {
        const char *name;
        unsigned bit;
    } methods[] = {{"GET", TP_HM_GET},       {"POST", TP_HM_POST},       {"HEAD", TP_HM_HEAD},  {"PUT", TP_HM_PUT},
                   {"DELETE", TP_HM_DELETE}, {"OPTIONS", TP_HM_OPTIONS}, {"PATCH", TP_HM_PATCH}};
    r->method = TP_HM_OTHER;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(line, methods[i].name) == 0) {
            r->method = methods[i].bit;
            break;
        }
    /* the target: origin-form, or absolute-form (its scheme and authority skipped); a fragment dropped */
    char *t = sp1 + 1;
    for (char *q = t; *q; q++)
        if ((unsigned char)*q < 0x21 || *q == 0x7f) {
            conn_refuse(c, 400, "BadRequest", "the request target holds a control character");
            return -1;
        }
    r->path_root = false;
    if (strncasecmp(t, "http://", 7) == 0 || strncasecmp(t, "https://", 8) == 0) {
        char *auth = strstr(t, "//") + 2;
        char *slash = strpbrk(auth, "/?#");
        r->path_root = slash == NULL || *slash != '/';
        t = slash ? slash : auth + strlen(auth);
    }
    char *hash = strchr(t, '#');
    if (hash)
        *hash = '\0';
    char *q = strchr(t, '?');
    if (q) {
        *q = '\0';
        r->query = rel(c, q + 1);
    }
    r->path = rel(c, t);
    /* the headers */
    p = le + 1;
    const char *cl = NULL, *te = NULL;
    bool conn_close = false, conn_keep = false, expect100 = false;
    int hosts = 0;
    while (p < end) {
        le = (size_t)((uint8_t *)memchr(c->in + p, '\n', end - p) - c->in);
        size_t e = le > p && c->in[le - 1] == '\r' ? le - 1 : le;
        if (e == p)
            break; /* the empty line */
        char *name = (char *)c->in + p, *ve = (char *)c->in + e;
        if (*name == ' ' || *name == '\t') {
            conn_refuse(c, 400, "BadRequest", "a header folded onto a second line");
            return -1;
        }
        char *colon = name;
        while (is_tchar((unsigned char)*colon))
            colon++;
        if (colon == name || colon == ve || *colon != ':') {
            conn_refuse(c, 400, "BadRequest",
                        colon < ve && *colon != ':' ? "a header's name is not a token"
                                                    : "a header line without a name and a colon");
            return -1;
        }
        char *v = colon + 1;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *x = v; x < ve; x++)
            if (!is_vchar((unsigned char)*x)) {
                conn_refuse(c, 400, "BadRequest", "a header's value holds a control character");
                return -1;
            }
        *colon = '\0';
        *ve = '\0';
        if (r->nh == r->hd_cap) {
            size_t cap = r->hd_cap ? r->hd_cap * 2 : 16;
            hs_field_t *hd = realloc(r->hd, cap * sizeof *hd);
            if (hd == NULL) {
                conn_refuse(c, 500, "InternalError", "out of memory reading the headers");
                return -1;
            }
            r->hd = hd;
            r->hd_cap = cap;
        }
        size_t nlen = (size_t)(colon - name);
        r->hd[r->nh++] = (hs_field_t){.name = rel(c, name), .name_len = nlen, .value = rel(c, v)};
        if (nlen == 14 && strcasecmp(name, "Content-Length") == 0) {
            if (cl && strcmp(cl, v) != 0) {
                char msg[160];
                snprintf(msg, sizeof msg, "two Content-Length headers that differ (%.40s and %.40s)", cl, v);
                conn_refuse(c, 400, "BadRequest", msg);
                return -1;
            }
            cl = v;
        } else if (nlen == 17 && strcasecmp(name, "Transfer-Encoding") == 0) {
            if (te) {
                conn_refuse(c, 400, "BadRequest", "two Transfer-Encoding headers");
                return -1;
            }
            te = v;
        } else if (nlen == 10 && strcasecmp(name, "Connection") == 0) {
            conn_close |= list_has(v, "close"); /* any of them: a close is never undone by another */
            conn_keep |= list_has(v, "keep-alive");
        } else if (nlen == 6 && strcasecmp(name, "Expect") == 0) {
            expect100 |= strcasecmp(v, "100-continue") == 0;
        } else if (nlen == 4 && strcasecmp(name, "Host") == 0) {
            hosts++;
        }
        p = le + 1;
    }
    r->keep = !conn_close && (r->minor == 1 || conn_keep);
    /* HTTP/1.0 has no chunked coding: such a message's framing is not to be trusted past it (RFC 9112 6.1) */
    if (te && r->minor == 0)
        r->keep = false;
    r->body = c->head_end - c->start;
    r->body_len = 0;
    c->need = 0;
    c->chunked_in = false;
    if (te) {
        if (cl) {
            conn_refuse(c, 400, "BadRequest", "both Content-Length and Transfer-Encoding");
            return -1;
        }
        if (strcasecmp(te, "chunked") != 0) {
            conn_refuse(c, 501, "NotImplemented", "a Transfer-Encoding other than chunked");
            return -1;
        }
        c->st = HS_CHUNKS;
        c->chunked_in = true;
        c->ck = CK_SIZE;
        c->ck_read = c->ck_write = c->head_end;
        c->ck_left = 0;
        c->trailers = 0;
    } else if (cl) {
        size_t n = 0;
        for (const char *x = cl; *x; x++) {
            if (*x < '0' || *x > '9' || n > (SIZE_MAX - 9) / 10) {
                conn_refuse(c, 400, "BadRequest", "Content-Length is not a number");
                return -1;
            }
            n = n * 10 + (size_t)(*x - '0');
        }
        if (*cl == '\0') {
            conn_refuse(c, 400, "BadRequest", "Content-Length is empty");
            return -1;
        }
        if (n > c->s->o.max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the body (%zu bytes) is over the %zu-byte limit (--max-body)", n,
                     c->s->o.max_body);
            conn_refuse(c, 413, "PayloadTooLarge", msg);
            return -1;
        }
        c->need = n;
        c->st = HS_BODY;
    } else {
        c->st = HS_BODY;
    }
    /* one Host on HTTP/1.1, as RFC 9112 3.2 has it: which of two a proxy in front went by is not known */
    if (r->minor == 1 && hosts != 1) {
        conn_refuse(c, 400, "BadRequest", hosts ? "two Host headers" : "an HTTP/1.1 request without a Host header");
        return -1;
    }
    /* a client that waits to be told to send its body, none of which has come */
    if (expect100 && r->minor == 1 && c->len == c->head_end && (c->st == HS_CHUNKS || c->need > 0)) {
        if (tp_buf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n") != 0) {
            conn_kill(c);
            return -1;
        }
        conn_flush(c);
        if (c->dead)
            return -1;
    }
    return 0;
}

/*
 * Decodes what has come of a chunked body, in place (what is decoded is
 * never longer than what it was read from), and drops the framing it has
 * read (the bytes after it move down), so that a body's memory is its
 * decoded size, whatever its chunks' sizes, extensions and trailers. 1
 * once the body is whole, 0 for more, -1 when it has been refused.
 *
 * Strict, as a proxy in front may not be lenient the same way: a size is
 * 1 to 16 hex digits, then optional blanks, then an extension after ';'
 * or the line's end; each chunk's data ends with CRLF (or LF); each
 * trailer is a header line.
 */
static int chunks_decode(tp_hs_conn_t *c)
{
    size_t max = c->s->o.max_body;
    int rc = 0;
    while (rc == 0 && c->ck_read < c->len) {
        switch (c->ck) {
        case CK_SIZE:
        case CK_TRAILER: {
            uint8_t *nl = memchr(c->in + c->ck_read, '\n', c->len - c->ck_read);
            if (nl == NULL) {
                if (c->len - c->ck_read > 1024) {
                    conn_refuse(c, 400, "BadRequest", "a chunk's size line or a trailer is too long");
                    return -1;
                }
                goto more;
            }
            size_t line = c->ck_read, lend = (size_t)(nl - c->in);
            size_t e = lend > line && c->in[lend - 1] == '\r' ? lend - 1 : lend;
            c->ck_read = lend + 1;
            if (c->ck == CK_TRAILER) {
                if (e == line) {
                    rc = 1; /* the trailers' end */
                    break;
                }
                size_t k = line;
                while (k < e && is_tchar(c->in[k]))
                    k++;
                bool field = k > line && k < e && c->in[k] == ':';
                for (k++; field && k < e; k++)
                    field = is_vchar(c->in[k]);
                c->trailers += lend + 1 - line;
                if (!field || c->trailers > c->s->o.max_head) {
                    conn_refuse(c, 400, "BadRequest",
                                field ? "the trailers are too long" : "a trailer is not a header line");
                    return -1;
                }
                continue; /* dropped */
            }
            size_t n = 0, i = line;
            for (; i < e && i - line < 16; i++) {
                int ch = c->in[i], d = ch >= '0' && ch <= '9'   ? ch - '0'
                                       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                                : -1;
                if (d < 0)
                    break;
                n = n * 16 + (size_t)d;
            }
            bool ok = i > line;
            size_t blank = i;
            while (ok && i < e && (c->in[i] == ' ' || c->in[i] == '\t'))
                i++;
            if (ok && i > blank && (i == e || c->in[i] != ';'))
                ok = false; /* blanks only before an extension (RFC 9112 7.1.1's BWS) */
            if (ok && i < e && c->in[i] == ';') {
                for (i++; ok && i < e; i++)
                    ok = is_vchar(c->in[i]);
            } else if (i < e) {
                ok = false;
            }
            if (!ok) {
                conn_refuse(c, 400, "BadRequest", "a chunk's size line is not HEX[;extension]");
                return -1;
            }
            if (n > max || c->ck_write - c->head_end + n > max) {
                char msg[120];
                snprintf(msg, sizeof msg, "the body is over the %zu-byte limit (--max-body)", max);
                conn_refuse(c, 413, "PayloadTooLarge", msg);
                return -1;
            }
            c->ck_left = n;
            c->ck = n == 0 ? CK_TRAILER : CK_DATA;
            break;
        }
        case CK_DATA: {
            size_t n = c->len - c->ck_read < c->ck_left ? c->len - c->ck_read : c->ck_left;
            memmove(c->in + c->ck_write, c->in + c->ck_read, n);
            c->ck_write += n;
            c->ck_read += n;
            c->ck_left -= n;
            if (c->ck_left == 0)
                c->ck = CK_CRLF;
            break;
        }
        case CK_CRLF:
            if (c->in[c->ck_read] == '\r' && c->ck_read + 1 == c->len)
                goto more;
            if (c->in[c->ck_read] == '\r' && c->in[c->ck_read + 1] == '\n') {
                c->ck_read += 2;
            } else if (c->in[c->ck_read] == '\n') {
                c->ck_read++;
            } else {
                conn_refuse(c, 400, "BadRequest", "a chunk's data does not end with CRLF");
                return -1;
            }
            c->ck = CK_SIZE;
            break;
        }
    }
more:
    /* what was read past the decoded body, less the framing read: moved down to it */
    if (c->ck_read > c->ck_write) {
        memmove(c->in + c->ck_write, c->in + c->ck_read, c->len - c->ck_read);
        c->len -= c->ck_read - c->ck_write;
        c->ck_read = c->ck_write;
    }
    return rc;
}

/* Looks for the head's end (an empty line, "\r\n" or "\n") from c->scan: 1 found (c->head_end set), 0 not yet. */
static int head_find(tp_hs_conn_t *c)
{
    /* empty lines before a request are skipped (RFC 9112 2.2) */
    while (c->start < c->len && (c->in[c->start] == '\r' || c->in[c->start] == '\n'))
        c->start++;
    size_t i = c->scan > c->start ? c->scan : c->start;
    while (i < c->len) {
        uint8_t *nl = memchr(c->in + i, '\n', c->len - i);
        if (nl == NULL)
            break;
        size_t k = (size_t)(nl - c->in);
        if (k + 1 >= c->len || (c->in[k + 1] == '\r' && k + 2 >= c->len)) {
            c->scan = k;
            return 0;
        }
        if (c->in[k + 1] == '\n' || (c->in[k + 1] == '\r' && c->in[k + 2] == '\n')) {
            c->head_end = k + (c->in[k + 1] == '\n' ? 2 : 3);
            return 1;
        }
        i = k + 1;
    }
    c->scan = c->len;
    return 0;
}

/*
 * Frames and hands over every request the buffer holds whole, one at a
 * time: each waits for its reply before the next is looked at (a reply
 * given inside on_request lets the loop go on; one given later wakes the
 * connection from the loop: req_done).
 */
static void conn_run(tp_hs_conn_t *c)
{
    if (c->in_run)
        return;
    c->in_run = true;
    tp_hs_t *s = c->s;
    while (!c->dead && (c->st == HS_HEAD || c->st == HS_BODY || c->st == HS_CHUNKS)) {
        if (c->st == HS_HEAD && out_high(c)) {
            reading_set(c, false, NULL); /* a client that sends and does not read: conn_flush resumes it */
            break;
        }
        if (c->st == HS_HEAD) {
            bool found = head_find(c) == 1;
            if ((found ? c->head_end : c->len) - c->start > s->o.max_head) {
                char msg[120];
                snprintf(msg, sizeof msg, "the request line and headers are over %zu bytes", s->o.max_head);
                c->req.minor = -1;
                conn_refuse(c, 431, "HeadersTooLarge", msg);
                break;
            }
            if (!found || head_parse(c) != 0)
                break;
        }
        if (c->st == HS_BODY) {
            if (c->len - c->head_end < c->need)
                break;
            c->req.body_len = c->need;
        } else if (c->st == HS_CHUNKS) {
            int rc = chunks_decode(c);
            if (rc <= 0)
                break;
            c->req.body_len = c->ck_write - c->head_end;
        }
        /*
         * Not read while it waits: reading goes off only if bytes (or the
         * client's close) come meanwhile (in_cb), so a request answered in
         * a later turn costs no epoll_ctl when its client just waits.
         */
        c->st = HS_BUSY;
        s->o.on_request(s->o.ctx, &c->req);
    }
    c->in_run = false;
}

/*
 * The request has had its reply: its bytes are dropped; the connection
 * closes softly (its reply said so), or reads its next request, its idle
 * timer started again.
 */
static void req_done(tp_hs_conn_t *c)
{
    tp_hreq_t *r = &c->req;
    size_t end = c->chunked_in ? c->ck_read : c->head_end + c->need;
    if (end > c->len || end < c->start)
        end = c->len;
    c->start = c->scan = c->head_end = end;
    c->ck_read = c->ck_write = c->need = 0;
    c->chunked_in = false;
    c->sent_cb = NULL;
    c->sent_due = false;
    c->st = r->keep ? HS_HEAD : HS_CLOSING;
    if (c->st == HS_CLOSING)
        reading_set(c, false, NULL);
    if (c->start == c->len) {
        c->start = c->len = c->scan = c->head_end = 0;
        if (c->cap > (1u << 20)) { /* a large request's room goes back */
            free(c->in);
            c->in = NULL;
            c->cap = 0;
        }
    }
    conn_flush(c);
    if (c->dead || c->st != HS_HEAD || out_high(c))
        return; /* conn_flush resumes it once its replies are out */
    reading_set(c, true, &c->s->o.idle);
    if (!c->in_run && c->len > c->start) {
        c->run_due = true; /* not under the caller that gave the reply */
        wake(c);
    }
}

/* ---- requests: reading ---- */

void *tp_hreq_user(const tp_hreq_t *r)
{
    return r->c->user;
}

unsigned tp_hreq_method(const tp_hreq_t *r)
{
    return r->method;
}

const char *tp_hreq_path(const tp_hreq_t *r)
{
    return r->path_root ? "/" : at(r->c, r->path);
}

const char *tp_hreq_query(const tp_hreq_t *r)
{
    return r->query ? at(r->c, r->query) : NULL;
}

const char *tp_hreq_header(const tp_hreq_t *r, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < r->nh; i++)
        if (r->hd[i].name_len == n && strcasecmp(at(r->c, r->hd[i].name), name) == 0)
            return at(r->c, r->hd[i].value);
    return NULL;
}

size_t tp_hreq_headers(const tp_hreq_t *r)
{
    return r->nh;
}

const char *tp_hreq_header_at(const tp_hreq_t *r, size_t i, size_t *name_len, const char **value)
{
    *name_len = r->hd[i].name_len;
    *value = at(r->c, r->hd[i].value);
    return at(r->c, r->hd[i].name);
}

const char *tp_hreq_body(const tp_hreq_t *r, size_t *len)
{
    *len = r->body_len;
    return r->body_len ? at(r->c, r->body) : NULL;
}

int tp_hreq_fd(const tp_hreq_t *r)
{
    return r->c->fd;
}

/* ---- requests: replying ---- */

const char *tp_hs_reason(int status)
{
    static const struct {
        int status;
        const char *reason;
    } reasons[] = {
        /* clang-format off */
        {100, "Continue"}, {200, "OK"}, {201, "Created"}, {202, "Accepted"}, {204, "No Content"},
        {304, "Not Modified"}, {400, "Bad Request"}, {401, "Unauthorized"}, {403, "Forbidden"},
        {404, "Not Found"}, {405, "Method Not Allowed"}, {406, "Not Acceptable"}, {408, "Request Timeout"},
        {409, "Conflict"}, {410, "Gone"}, {411, "Length Required"}, {413, "Payload Too Large"},
        {415, "Unsupported Media Type"}, {422, "Unprocessable Content"}, {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
        {502, "Bad Gateway"}, {503, "Service Unavailable"}, {504, "Gateway Timeout"},
        {505, "HTTP Version Not Supported"},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            return reasons[i].reason;
    static const char *const classes[] = {"Informational", "Success", "Redirect", "Client Error", "Server Error"};
    return status >= 100 && status < 600 ? classes[status / 100 - 1] : "Unknown";
}

int tp_hreq_add_header(tp_hreq_t *r, const char *name, const char *value)
{
    if (strpbrk(name, "\r\n:") != NULL || strpbrk(value, "\r\n") != NULL)
        return -1;
    tp_buf_t *o = &r->ohd;
    return tp_buf_puts(o, name) == 0 && tp_buf_append(o, ": ", 2) == 0 && tp_buf_puts(o, value) == 0 &&
                   tp_buf_append(o, "\r\n", 2) == 0
               ? 0
               : -1;
}

void tp_hreq_close_after(tp_hreq_t *r)
{
    r->keep = false;
}

static void put_num(tp_buf_t *b, size_t n, unsigned base)
{
    char num[24];
    size_t i = sizeof num;
    do {
        num[--i] = "0123456789abcdef"[n % base];
        n /= base;
    } while (n > 0);
    tp_buf_append(b, num + i, sizeof num - i);
}

static const char *date_now(tp_hs_t *s)
{
    time_t now = time(NULL);
    if (now != s->date_at || s->date[0] == '\0') {
        struct tm tm;
        if (gmtime_r(&now, &tm) == NULL || evutil_date_rfc1123(s->date, sizeof s->date, &tm) == 0)
            return NULL;
        s->date_at = now;
    }
    return s->date;
}

/*
 * The reply's head: the status line, the headers added, then (HTTP/1.1)
 * Date, the body's framing, and Connection: close when the connection
 * closes after it; HTTP/1.0 kept alive says so, and has a Content-Length.
 * len is the body's length, or SIZE_MAX for a body of pieces.
 */
static int head_put(tp_hreq_t *r, int status, size_t len)
{
    tp_hs_conn_t *c = r->c;
    tp_buf_t *o = &c->out;
    bool head = r->method == TP_HM_HEAD, bodyless = status == 204 || status == 304 || status < 200;
    if (len == SIZE_MAX && r->minor == 0)
        r->keep = false; /* its end is the connection's */
    tp_buf_puts(o, r->minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ");
    put_num(o, (size_t)status, 10);
    tp_buf_append(o, " ", 1);
    tp_buf_puts(o, tp_hs_reason(status));
    tp_buf_append(o, "\r\n", 2);
    tp_buf_append(o, r->ohd.data, r->ohd.len);
    r->ohd.len = 0;
    if (r->minor == 1) {
        const char *date = date_now(c->s);
        if (date) {
            tp_buf_puts(o, "Date: ");
            tp_buf_puts(o, date);
            tp_buf_append(o, "\r\n", 2);
        }
        if (len == SIZE_MAX && !head && !bodyless) {
            tp_buf_puts(o, "Transfer-Encoding: chunked\r\n");
            r->chunked = true;
        } else if (!head && !bodyless) {
            tp_buf_puts(o, "Content-Length: ");
            put_num(o, len, 10);
            tp_buf_append(o, "\r\n", 2);
        }
        if (!r->keep)
            tp_buf_puts(o, "Connection: close\r\n");
    } else if (r->keep) {
        tp_buf_puts(o, "Connection: keep-alive\r\n");
        if (!head && !bodyless) {
            tp_buf_puts(o, "Content-Length: ");
            put_num(o, len, 10);
            tp_buf_append(o, "\r\n", 2);
        }
    }
    return tp_buf_append(o, "\r\n", 2);
}

void tp_hreq_reply(tp_hreq_t *r, int status, const void *body, size_t len)
{
    tp_hs_conn_t *c = r->c;
    if (c->dead || c->st != HS_BUSY || r->started)
        return;
    bool with_body = r->method != TP_HM_HEAD && status != 204 && status != 304 && status >= 200;
    if (head_put(r, status, len) != 0 || (with_body && len > 0 && tp_buf_append(&c->out, body, len) != 0)) {
        tp_log_error("http.out_of_memory", "http: out of memory for a %d reply of %zu bytes", status, len);
        conn_kill(c);
        return;
    }
    req_done(c);
}

void tp_hreq_start(tp_hreq_t *r, int status)
{
    tp_hs_conn_t *c = r->c;
    if (c->dead || c->st != HS_BUSY || r->started)
        return;
    r->started = true;
    if (head_put(r, status, SIZE_MAX) != 0) {
        tp_log_error("http.out_of_memory", "http: out of memory for a reply's head");
        conn_kill(c);
        return;
    }
    conn_flush(c);
}

int tp_hreq_chunk(tp_hreq_t *r, const void *p, size_t n)
{
    tp_hs_conn_t *c = r->c;
    if (c->dead || c->st != HS_BUSY || !r->started || n == 0 || r->method == TP_HM_HEAD)
        return 0;
    tp_buf_t *o = &c->out;
    int rc = 0;
    if (r->chunked) {
        put_num(o, n, 16);
        rc = tp_buf_append(o, "\r\n", 2);
    }
    if (rc == 0)
        rc = tp_buf_append(o, p, n);
    if (rc == 0 && r->chunked)
        rc = tp_buf_append(o, "\r\n", 2);
    if (rc != 0) {
        tp_log_error("http.out_of_memory", "http: out of memory for a reply's %zu bytes", n);
        conn_kill(c);
        return -1;
    }
    conn_flush(c);
    return 0;
}

void tp_hreq_end(tp_hreq_t *r)
{
    tp_hs_conn_t *c = r->c;
    if (c->dead || c->st != HS_BUSY || !r->started)
        return;
    if (r->chunked && tp_buf_puts(&c->out, "0\r\n\r\n") != 0) {
        conn_kill(c);
        return;
    }
    req_done(c);
}

size_t tp_hreq_unsent(const tp_hreq_t *r)
{
    return r->c->out.len - r->c->out.off;
}

void tp_hreq_when_sent(tp_hreq_t *r, void (*cb)(void *arg), void *arg)
{
    r->c->sent_cb = cb;
    r->c->sent_arg = arg;
}

void tp_hreq_shutdown(tp_hreq_t *r)
{
    tp_hs_conn_t *c = r->c;
    if (c->dead || c->shut)
        return;
    c->cut = true;
    conn_flush(c);
}

/* ---- the server ---- */

tp_hs_t *tp_hs_new(const tp_hs_opts_t *o)
{
    tp_hs_t *s = calloc(1, sizeof *s);
    if (s)
        s->o = *o;
    return s;
}

void tp_hs_free(tp_hs_t *s)
{
    if (s == NULL)
        return;
    while (s->conns)
        conn_free(s->conns);
    free(s);
}

size_t tp_hs_unsent(const tp_hs_t *s)
{
    size_t n = 0;
    for (const tp_hs_conn_t *c = s->conns; c; c = c->next)
        if (!c->dead)
            n += c->out.len - c->out.off;
    return n;
}
