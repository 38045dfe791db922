/*
 * One MCP server over stdio (mcpstdio.h): the process, its three pipes,
 * and newline-delimited JSON-RPC on them.
 *
 * Reads and writes go through poll(2) on all three pipes at once, so a
 * server that fills its stderr while we wait for its stdout, or stops
 * reading its stdin while it writes a long answer, cannot deadlock us.
 */
#include "mcpstdio.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "json.h"
#include "jsonscan.h"
#include "proctree.h"

extern char **environ;

/*
 * The environment: the caller's, less what env replaces, then env. The
 * strings stay the caller's and env's. NULL on ENOMEM.
 */
static char **make_env(char *const env[])
{
    size_t n = 0, k = 0, m = 0;
    while (environ[n])
        n++;
    while (env && env[m])
        m++;
    char **e = malloc((n + m + 1) * sizeof *e);
    if (e == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t klen = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
        bool replaced = false;
        for (size_t j = 0; j < m && !replaced; j++)
            replaced = strncmp(env[j], environ[i], klen) == 0;
        if (!replaced)
            e[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        e[k++] = env[j];
    e[k] = NULL;
    return e;
}

int tp_mcpio_spawn(tp_mcpio_t *c, char *const argv[], char *const env[], const char *cwd, bool own_group, char *err,
                   size_t errlen)
{
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, rc;
    c->pid = 0;
    c->in_fd = c->out_fd = c->err_fd = -1;
    c->own_group = own_group;
    c->reaped = false;
    c->status = 0;
    c->tail_len = 0;
    c->tail[0] = '\0';
    c->next_id = 1;
    c->scanned = c->batch_at = 0;
    tp_buf_reset(&c->out);
    tp_buf_reset(&c->errline);
    tp_buf_reset(&c->queued);
    if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0) {
        rc = tp_errno(errno);
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    char **envp = make_env(env);
    if (envp == NULL) {
        rc = TP_ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t def, none;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGTERM);
    sigemptyset(&none);
    rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0 && (rc = posix_spawnattr_init(&attr)) != 0)
        posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        free(envp);
        snprintf(err, errlen, "posix_spawn setup: %s", strerror(rc));
        rc = tp_errno(rc);
        goto fail;
    }
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | (own_group ? POSIX_SPAWN_SETPGROUP : 0);
    const char *what = "posix_spawn settings";
    if ((rc = posix_spawn_file_actions_adddup2(&fa, in_p[0], 0)) == 0 &&
        (rc = posix_spawn_file_actions_adddup2(&fa, out_p[1], 1)) == 0 &&
        (rc = posix_spawn_file_actions_adddup2(&fa, err_p[1], 2)) == 0 &&
        (cwd == NULL || (rc = posix_spawn_file_actions_addchdir_np(&fa, cwd)) == 0) &&
        (rc = posix_spawnattr_setflags(&attr, flags)) == 0 && (rc = posix_spawnattr_setsigdefault(&attr, &def)) == 0 &&
        (rc = posix_spawnattr_setsigmask(&attr, &none)) == 0 && (rc = posix_spawnattr_setpgroup(&attr, 0)) == 0) {
        what = "cannot start";
        rc = posix_spawnp(&c->pid, argv[0], &fa, &attr, argv, envp);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(envp);
    if (rc != 0) {
        c->pid = 0;
        if (cwd != NULL && rc == ENOENT && access(cwd, X_OK) != 0)
            snprintf(err, errlen, "cannot start %s in %s: %s", argv[0], cwd, strerror(rc));
        else
            snprintf(err, errlen, "%s %s: %s", what, argv[0], strerror(rc));
        rc = tp_errno(rc);
        goto fail;
    }
    close(in_p[0]);
    close(out_p[1]);
    close(err_p[1]);
    c->in_fd = in_p[1];
    c->out_fd = out_p[0];
    c->err_fd = err_p[0];
    fcntl(c->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
    return 0;
fail:
    tp_close_pipe(in_p);
    tp_close_pipe(out_p);
    tp_close_pipe(err_p);
    return rc;
}

/* One line of stderr: to the log, and onto the tail kept for messages. */
static void stderr_line(tp_mcpio_t *c, char *line, size_t n)
{
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (n == 0)
        return;
    line[n] = '\0';
    if (c->log_line)
        c->log_line(c->log_ctx, line);
    size_t add = n + (c->tail_len ? 2 : 0);
    if (add >= sizeof c->tail) {
        snprintf(c->tail, sizeof c->tail, "%s", line + n - (sizeof c->tail - 1));
        c->tail_len = strlen(c->tail);
        return;
    }
    if (c->tail_len + add >= sizeof c->tail) {
        size_t drop = c->tail_len + add - (sizeof c->tail - 1);
        memmove(c->tail, c->tail + drop, c->tail_len - drop + 1);
        c->tail_len -= drop;
    }
    c->tail_len += (size_t)snprintf(c->tail + c->tail_len, sizeof c->tail - c->tail_len, "%s%s",
                                    c->tail_len ? "; " : "", line);
}

/* Reads what stderr holds; a line longer than 4 KiB is cut there. At EOF, the last line too. */
static void read_stderr(tp_mcpio_t *c)
{
    char chunk[4096];
    ssize_t r;
    while ((r = read(c->err_fd, chunk, sizeof chunk)) > 0) {
        tp_buf_append(&c->errline, chunk, (size_t)r);
        for (;;) {
            const char *start = (const char *)tp_buf_head(&c->errline);
            size_t avail = tp_buf_avail(&c->errline);
            const char *nl = memchr(start, '\n', avail);
            if (nl == NULL && avail < 4096)
                break;
            char line[4097];
            size_t n = nl ? (size_t)(nl - start) : 4096;
            if (n > 4096)
                n = 4096;
            memcpy(line, start, n);
            stderr_line(c, line, n);
            tp_buf_consume(&c->errline, nl && (size_t)(nl - start) == n ? n + 1 : n);
            if (tp_buf_avail(&c->errline) == 0)
                tp_buf_reset(&c->errline);
        }
    }
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        size_t avail = tp_buf_avail(&c->errline);
        if (avail > 0) {
            char line[4097];
            size_t n = avail > 4096 ? 4096 : avail;
            memcpy(line, tp_buf_head(&c->errline), n);
            stderr_line(c, line, n);
        }
        tp_buf_reset(&c->errline);
        tp_close_fd(&c->err_fd);
    }
}

/* Milliseconds poll may wait for deadline_us (0: for ever), rounded up. */
static int wait_ms(uint64_t deadline_us)
{
    if (deadline_us == 0)
        return -1;
    uint64_t now = tp_now_us();
    if (now >= deadline_us)
        return 0;
    uint64_t ms = (deadline_us - now + 999) / 1000;
    return ms > 60000 ? 60000 : (int)ms;
}

/* The most of a server's stdout a flush reads into out while it waits to write (a flood is not held for ever). */
#define DRAIN_MAX (16u << 20)

/*
 * Waits until fd is ready for events (stderr read meanwhile; with drain,
 * stdout too, into out, so that a server blocked writing its answers
 * takes its stdin again). 0 when it is; TP_EINTR, TP_ETIMEDOUT, or
 * TP_ECLOSED when ppoll fails.
 */
static int wait_fd(tp_mcpio_t *c, int fd, short events, uint64_t deadline_us, volatile sig_atomic_t *stop, bool drain)
{
    /*
     * SIGTERM (what sets stop) is blocked but inside ppoll, so one that
     * comes between the flag's check and the wait still ends the wait.
     */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    for (;;) {
        bool draining = drain && c->out_fd >= 0 && tp_buf_avail(&c->out) < DRAIN_MAX;
        struct pollfd pf[3] = {{.fd = fd, .events = events},
                               {.fd = c->err_fd, .events = POLLIN},
                               {.fd = draining ? c->out_fd : -1, .events = POLLIN}};
        int ms = wait_ms(deadline_us);
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        if (stop)
            pthread_sigmask(SIG_BLOCK, &term, &old);
        if (stop && *stop) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            return TP_EINTR;
        }
        int n = ppoll(pf, 3, ms < 0 ? NULL : &ts, stop ? &old : NULL);
        if (stop)
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue; /* the flag is checked at the top */
            return TP_ECLOSED;
        }
        if (pf[1].revents)
            read_stderr(c);
        if (pf[2].revents) {
            int fr = tp_mcpio_fill(c, true, false);
            c->drained = true;
            if (fr != 0 && fr != TP_EAGAIN)
                drain = false; /* its end (the write that follows fails), or no memory: read no more of it here */
        }
        if (pf[0].revents)
            return 0;
        if (deadline_us &&
            tp_now_us() >= deadline_us) /* each pass: a busy stderr or stdout keeps ppoll from timing out */
            return TP_ETIMEDOUT;
    }
}

int tp_mcpio_queue(tp_mcpio_t *c, const json_t *msg)
{
    if (c->in_fd < 0)
        return TP_ECLOSED;
    size_t was = c->queued.len;
    if (tp_json_write(&c->queued, msg, 0) < 0 || tp_buf_append(&c->queued, "\n", 1) < 0) {
        c->queued.len = was; /* the lines queued before stay whole */
        return TP_ENOMEM;
    }
    return 0;
}

/*
 * Writes what is queued, waiting for room up to deadline_us when wait
 * (else TP_EAGAIN with the rest left queued).
 */
static int write_queued(tp_mcpio_t *c, bool wait, uint64_t deadline_us, volatile sig_atomic_t *stop)
{
    if (tp_buf_avail(&c->queued) == 0)
        return 0;
    if (c->in_fd < 0) {
        tp_buf_reset(&c->queued);
        return TP_ECLOSED;
    }
    /*
     * A server gone is EPIPE, never our death: the supervisor imports
     * before it ignores SIGPIPE. The signal is blocked around the writes,
     * and one they raised is taken off again, unless one was pending
     * already; a worker, which ignores it, skips the three system calls.
     */
    sigset_t pipe_set, old, pending;
    bool was_pending = true; /* nothing to take off */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    if (!c->pipe_ignored) {
        pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
        sigpending(&pending);
        was_pending = sigismember(&pending, SIGPIPE) == 1;
    }
    int rc = 0;
    tp_buf_t *q = &c->queued;
    while (tp_buf_avail(q) > 0) {
        ssize_t w = write(c->in_fd, tp_buf_head(q), tp_buf_avail(q));
        if (w > 0) {
            tp_buf_consume(q, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            if (!wait) {
                rc = TP_EAGAIN;
                break;
            }
            if ((rc = wait_fd(c, c->in_fd, POLLOUT, deadline_us, stop, true)) != 0)
                break;
            continue;
        }
        rc = TP_ECLOSED; /* EPIPE: it closed its stdin, or is gone */
        break;
    }
    if (rc == TP_ECLOSED && !was_pending) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    if (!c->pipe_ignored)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0 && rc != TP_EAGAIN)
        tp_buf_reset(q); /* a server that does not read them is done for: they are not sent */
    else if (tp_buf_avail(q) == 0)
        tp_buf_reset(q);
    return rc;
}

int tp_mcpio_flush(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop)
{
    return write_queued(c, true, deadline_us, stop);
}

int tp_mcpio_write_some(tp_mcpio_t *c)
{
    return write_queued(c, false, 0, NULL);
}

int tp_mcpio_send(tp_mcpio_t *c, const json_t *msg, uint64_t deadline_us, volatile sig_atomic_t *stop)
{
    int rc = tp_mcpio_queue(c, msg);
    return rc ? rc : tp_mcpio_flush(c, deadline_us, stop);
}

/* Logs a line of stdout that is not a message, as stderr is logged. */
static void not_a_message(tp_mcpio_t *c, const char *p, size_t n)
{
    char line[512];
    snprintf(line, sizeof line, "(not a JSON-RPC message on stdout) %.*s", (int)(n > 400 ? 400 : n), p);
    for (char *q = line; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = ' ';
    if (c->log_line)
        c->log_line(c->log_ctx, line);
}

int tp_mcpio_parse(const char *text, size_t n, json_t **msg, char *why, size_t why_len)
{
    json_error_t jerr;
    json_t *v = tp_json_loadb(text, n, 0, &jerr);
    if (json_is_object(v)) {
        *msg = v;
        return 0;
    }
    if (v != NULL) {
        json_decref(v);
        return TP_EPROTO;
    }
    /*
     * jansson refused it. An id that reads as one JSON value says which
     * request it answers, and that request can end now, saying why, rather
     * than wait for an answer that has come.
     */
    const char *id;
    size_t len;
    if (tp_scan_member(text, n, "id", &id, &len) != 0 || tp_json_check(id, len, NULL) != 0)
        return TP_EPROTO;
    v = tp_json_loadb(id, len, JSON_DECODE_ANY, NULL);
    if (v == NULL)
        v = json_stringn(id, len > 64 ? 64 : len);
    if (v == NULL)
        return TP_EPROTO;
    snprintf(why, why_len, "%s (column %d)", jerr.text, jerr.column);
    *msg = v;
    return TP_EBADMSG;
}

/* A line's length without the whitespace at its end. */
static size_t trim_end(const char *p, size_t n)
{
    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    return n;
}

static size_t skip_ws(const char *p, size_t at, size_t n)
{
    while (at < n && (p[at] == ' ' || p[at] == '\t' || p[at] == '\r'))
        at++;
    return at;
}

/* One message's text handed over, or logged as junk (see tp_mcpio_take). */
static int take_text(tp_mcpio_t *c, const char *p, size_t n, json_t **msg, char *junk, size_t junk_len)
{
    int rc = tp_mcpio_parse(p, n, msg, junk, junk_len);
    if (rc == TP_EPROTO) {
        not_a_message(c, p, n);
        snprintf(junk, junk_len, "%.*s", (int)(n > 120 ? 120 : n), p);
        for (char *q = junk; *q; q++)
            if ((unsigned char)*q < 0x20)
                *q = ' ';
    }
    return rc;
}

/* Lets go of the line at out's head, n bytes and its end. */
static void consume_line(tp_mcpio_t *c, size_t n)
{
    tp_buf_consume(&c->out, n + 1);
    if (tp_buf_avail(&c->out) == 0)
        tp_buf_reset(&c->out);
    c->batch_at = 0;
}

/*
 * The next element of the batch line at out's head, as a message of its
 * own. Its elements are found leniently, so one that jansson refuses is
 * still told from the others; past the last, or at what is no element
 * (the rest is junk then), the line is let go.
 */
static int batch_next(tp_mcpio_t *c, json_t **msg, char *junk, size_t junk_len)
{
    const char *line = (const char *)tp_buf_head(&c->out);
    size_t n = c->batch_len, at = c->batch_at;
    const char *q = tp_scan_skip(line + at, line + n);
    if (q == NULL) {
        /* the rest is no element: one cut short (its id may still say whose), or the ']' missing */
        int rc = at < n ? take_text(c, line + at, n - at, msg, junk, junk_len)
                        : take_text(c, line, n, msg, junk, junk_len);
        consume_line(c, n);
        return rc;
    }
    size_t end = (size_t)(q - line), next = skip_ws(line, end, n);
    int rc = take_text(c, line + at, end - at, msg, junk, junk_len);
    if (next < n && line[next] == ',')
        c->batch_at = skip_ws(line, next + 1, n);
    else if (next < n && line[next] == ']' && skip_ws(line, next + 1, n) == n)
        consume_line(c, n);
    else
        c->batch_at = next; /* what follows is no element: junk, at the next take */
    return rc;
}

int tp_mcpio_take(tp_mcpio_t *c, size_t max_line, json_t **msg, char *junk, size_t junk_len)
{
    for (;;) {
        if (c->batch_at != 0)
            return batch_next(c, msg, junk, junk_len);
        size_t avail = tp_buf_avail(&c->out);
        const char *start = avail ? (const char *)tp_buf_head(&c->out) : NULL;
        const char *nl = avail > c->scanned ? memchr(start + c->scanned, '\n', avail - c->scanned) : NULL;
        if (nl == NULL) {
            c->scanned = avail;
            if (avail > max_line)
                return TP_E2BIG;
            return c->out_fd < 0 ? TP_ECLOSED : TP_EAGAIN;
        }
        c->scanned = 0;
        size_t n = (size_t)(nl - start), k = trim_end(start, n), first = skip_ws(start, 0, k);
        if (first == k) {
            consume_line(c, n);
            continue;
        }
        size_t at = start[first] == '[' ? skip_ws(start, first + 1, k) : k;
        if (at < k && start[at] != ']') {
            /* a batch: its elements one by one, the line kept at the head until the last */
            c->batch_len = k;
            c->batch_at = at;
            continue;
        }
        int rc = take_text(c, start + first, k - first, msg, junk, junk_len);
        consume_line(c, n);
        return rc;
    }
}

int tp_mcpio_fill(tp_mcpio_t *c, bool out_ready, bool err_ready)
{
    if (err_ready && c->err_fd >= 0)
        read_stderr(c);
    if (c->out_fd < 0)
        return TP_ECLOSED;
    if (!out_ready)
        return TP_EAGAIN;
    for (;;) {
        if (tp_buf_reserve(&c->out, 65536) < 0)
            return TP_ENOMEM;
        size_t room = c->out.cap - c->out.len;
        ssize_t r = tp_buf_read_fd(&c->out, c->out_fd);
        if (r > 0 && (size_t)r == room)
            continue; /* the pipe may hold more */
        if (r > 0)
            return 0; /* a short read: a pipe gives all it holds */
        if (r == TP_EAGAIN || r == TP_EINTR)
            return TP_EAGAIN;
        tp_close_fd(&c->out_fd);
        return TP_ECLOSED;
    }
}

int tp_mcpio_recv(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop, size_t max_line, json_t **msg,
                  char *why, size_t why_len)
{
    for (;;) {
        int rc = tp_mcpio_take(c, max_line, msg, why, why_len);
        if (rc == TP_EPROTO)
            continue; /* logged; a banner on stdout before the handshake is let be */
        if (rc != TP_EAGAIN)
            return rc;
        ssize_t r = tp_buf_read_fd(&c->out, c->out_fd);
        if (r > 0)
            continue;
        if (r == 0 || (r != TP_EAGAIN && r != TP_EINTR)) {
            tp_close_fd(&c->out_fd);
            return TP_ECLOSED;
        }
        if ((rc = wait_fd(c, c->out_fd, POLLIN, deadline_us, stop, false)) != 0)
            return rc;
    }
}

void tp_mcpio_answer_server(tp_mcpio_t *c, const json_t *req, uint64_t deadline_us, volatile sig_atomic_t *stop)
{
    const char *method = json_string_value(json_object_get(req, "method"));
    json_t *a;
    if (method && strcmp(method, "ping") == 0)
        a = json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", json_object_get(req, "id"), "result");
    else
        a = json_pack("{s:s, s:O, s:{s:i, s:s+++}}", "jsonrpc", "2.0", "id", json_object_get(req, "id"), "error",
                      "code", -32601, "message", "Method not found: toolpool does not offer ", method ? method : "that",
                      " to the servers it calls", " (it declares no roots, sampling or elicitation capability)");
    if (a != NULL && deadline_us)
        tp_mcpio_send(c, a, deadline_us, stop);
    else if (a != NULL)
        tp_mcpio_queue(c, a);
    json_decref(a);
}

/* Who we are, in initialize's clientInfo and 2026-07-28's _meta. */
static json_t *client_info(void)
{
    return json_pack("{s:s, s:s}", "name", "toolpool", "version", "1");
}

int tp_mcpio_stamp(const tp_mcpio_t *c, json_t *params)
{
    if (!c->modern)
        return 0;
    json_t *meta = json_object_get(params, "_meta");
    if (!json_is_object(meta) && ((meta = json_object()) == NULL || json_object_set_new(params, "_meta", meta) < 0))
        return TP_ENOMEM;
    return json_object_set_new(meta, TP_META_VERSION, json_string(TP_MCP_MODERN)) < 0 ||
                   json_object_set_new(meta, TP_META_CAPS, json_object()) < 0 ||
                   json_object_set_new(meta, TP_META_INFO, client_info()) < 0
               ? TP_ENOMEM
               : 0;
}

const char *tp_mcpio_result_type(const json_t *result)
{
    json_t *t = json_object_get(result, "resultType");
    if (t == NULL)
        return NULL;
    if (!json_is_string(t))
        return "(not a string)";
    return strcmp(json_string_value(t), "complete") == 0 ? NULL : json_string_value(t);
}

/* Sends method(params) (stolen; NULL: none), stamped, under a fresh id, *id. 0 or tp_mcpio_send's code. */
static int send_request(tp_mcpio_t *c, const char *method, json_t *params, uint64_t deadline_us,
                        volatile sig_atomic_t *stop, int64_t *id)
{
    int64_t my = c->next_id++;
    *id = my;
    json_t *req = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", (json_int_t)my, "method", method);
    if (params == NULL && c->modern)
        params = json_object();
    int rc = req == NULL || (params == NULL && c->modern) ? TP_ENOMEM : 0;
    if (rc == 0 && params != NULL && (rc = tp_mcpio_stamp(c, params)) == 0 &&
        json_object_set(req, "params", params) < 0)
        rc = TP_ENOMEM;
    json_decref(params);
    if (rc == 0)
        rc = tp_mcpio_send(c, req, deadline_us, stop);
    json_decref(req);
    return rc;
}

/*
 * Reads until the answer to request my (of method) comes, into *answer;
 * one to request also (0: none) that comes first is kept in *also_answer
 * (when that is still NULL). See tp_mcpio_request.
 */
static int await_answer(tp_mcpio_t *c, const char *method, int64_t my, int64_t also, json_t **also_answer,
                        uint64_t deadline_us, volatile sig_atomic_t *stop, size_t max_line, json_t **answer, char *err,
                        size_t errlen)
{
    for (;;) {
        json_t *m = NULL;
        char why[200];
        int rc = tp_mcpio_recv(c, deadline_us, stop, max_line, &m, why, sizeof why);
        if (rc == TP_EBADMSG) {
            bool mine = json_is_null(m) || (json_is_integer(m) && json_integer_value(m) == my);
            json_decref(m);
            if (!mine)
                continue; /* to something long gone */
            snprintf(err, errlen, "its answer to %s could not be read: %s", method, why);
            return rc;
        }
        if (rc != 0)
            return rc;
        json_t *mid = json_object_get(m, "id");
        if (json_object_get(m, "method") != NULL) {
            if (mid != NULL && !json_is_null(mid))
                tp_mcpio_answer_server(c, m, deadline_us, stop);
            else if (c->notice)
                c->notice(c->notice_ctx, m); /* a notification: progress, a log message, list_changed */
            json_decref(m);
            continue;
        }
        if ((json_is_integer(mid) && json_integer_value(mid) == my) ||
            (json_is_null(mid) && json_object_get(m, "error") != NULL)) {
            *answer = m;
            return 0;
        }
        if (also != 0 && json_is_integer(mid) && json_integer_value(mid) == also && *also_answer == NULL) {
            *also_answer = m;
            continue;
        }
        json_decref(m); /* an answer to something long gone */
    }
}

int tp_mcpio_request(tp_mcpio_t *c, const char *method, json_t *params, uint64_t deadline_us,
                     volatile sig_atomic_t *stop, size_t max_line, int64_t *id, json_t **answer, char *err,
                     size_t errlen)
{
    int rc = send_request(c, method, params, deadline_us, stop, id);
    return rc ? rc : await_answer(c, method, *id, 0, NULL, deadline_us, stop, max_line, answer, err, errlen);
}

/* 2026-07-28's UnsupportedProtocolVersionError: a modern server that speaks none of the versions asked for. */
#define RPC_UNSUPPORTED_VERSION (-32022)

/* The legacy versions initialize takes in answer, the one offered first. */
static const char *const accepted[] = {TP_MCP_PROTOCOL, "2025-06-18", "2025-03-26"};

static bool accepted_version(const char *v)
{
    for (size_t i = 0; v != NULL && i < sizeof accepted / sizeof accepted[0]; i++)
        if (strcmp(v, accepted[i]) == 0)
            return true;
    return false;
}

/*
 * What an answer to the probe says: 1, a modern server (a DiscoverResult
 * naming 2026-07-28); 0, a legacy one (any other answer); TP_EREFUSED, a
 * modern server that speaks neither 2026-07-28 nor a legacy version we do
 * (UnsupportedProtocolVersion, which must not be answered by falling back),
 * err saying what it speaks.
 */
static int probe_era(const json_t *a, char *err, size_t errlen)
{
    json_t *e = json_object_get(a, "error"), *r = json_object_get(a, "result");
    json_t *versions = e ? json_object_get(json_object_get(e, "data"), "supported")
                         : json_object_get(r, "supportedVersions");
    bool modern = false, legacy = false;
    size_t i;
    json_t *v;
    json_array_foreach(versions, i, v) {
        modern = modern || (json_is_string(v) && strcmp(json_string_value(v), TP_MCP_MODERN) == 0);
        legacy = legacy || accepted_version(json_string_value(v));
    }
    if (e == NULL && modern && tp_mcpio_result_type(r) == NULL)
        return 1;
    if (e == NULL || json_integer_value(json_object_get(e, "code")) != RPC_UNSUPPORTED_VERSION || legacy)
        return 0;
    char *list = json_dumps(versions, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(err, errlen,
             "the server speaks MCP %.120s (its UnsupportedProtocolVersion answer to server/discover); toolpool speaks "
             "%s, and %s, 2025-06-18 and 2025-03-26 through initialize",
             list ? list : "(no supported list)", TP_MCP_MODERN, TP_MCP_PROTOCOL);
    free(list);
    return TP_EREFUSED;
}

/*
 * Keeps serverInfo.version of a handshake's result, if it has one: an
 * InitializeResult's serverInfo, a DiscoverResult's (or the serverInfo of
 * its _meta, as 2026-07-28 servers put it).
 */
static void keep_server_version(tp_mcpio_t *c, const json_t *answer)
{
    const json_t *r = json_object_get(answer, "result");
    const json_t *info = json_object_get(r, "serverInfo");
    if (info == NULL)
        info = json_object_get(json_object_get(r, "_meta"), "io.modelcontextprotocol/serverInfo");
    const char *v = json_string_value(json_object_get(info, "version"));
    snprintf(c->server_version, sizeof c->server_version, "%s", v ? v : "");
}

/*
 * The legacy handshake: initialize, then notifications/initialized. A late
 * answer to the probe (request probe, 0: none) that comes meanwhile lands
 * in *late. Codes as tp_mcpio_open's.
 */
static int initialize(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop, int64_t probe, json_t **late,
                      char *version, size_t vlen, char *err, size_t errlen)
{
    json_t *params = json_pack("{s:s, s:{}, s:o}", "protocolVersion", TP_MCP_PROTOCOL, "capabilities", "clientInfo",
                               client_info());
    if (params == NULL)
        return TP_ENOMEM;
    int64_t id;
    json_t *a = NULL;
    int rc = send_request(c, "initialize", params, deadline_us, stop, &id);
    if (rc == 0)
        rc = await_answer(c, "initialize", id, probe, late, deadline_us, stop, 1 << 20, &a, err, errlen);
    if (rc == TP_ECLOSED || rc == TP_ETIMEDOUT)
        snprintf(err, errlen, "initialize");
    if (rc != 0)
        return rc;
    json_t *e = json_object_get(a, "error");
    const char *v = json_string_value(json_object_get(json_object_get(a, "result"), "protocolVersion"));
    if (e != NULL) {
        snprintf(err, errlen, "initialize failed: %s (%lld)",
                 json_string_value(json_object_get(e, "message")) ?: "no message",
                 (long long)json_integer_value(json_object_get(e, "code")));
        rc = TP_EREFUSED;
    } else if (!accepted_version(v)) {
        snprintf(err, errlen, "the server speaks MCP %s; toolpool speaks %s, %s, 2025-06-18 and 2025-03-26",
                 v ? v : "(no protocolVersion in its answer)", TP_MCP_MODERN, TP_MCP_PROTOCOL);
        rc = TP_EREFUSED;
    } else {
        snprintf(version, vlen, "%s", v);
        keep_server_version(c, a);
        json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
        rc = n ? tp_mcpio_send(c, n, deadline_us, stop) : TP_ENOMEM;
        json_decref(n);
    }
    json_decref(a);
    return rc;
}

const char *const tp_mcp_era_names[TP_MCP_ERA_N] = {"auto", TP_MCP_MODERN, TP_MCP_PROTOCOL};

int tp_mcpio_open(tp_mcpio_t *c, tp_mcp_era_t era, uint64_t deadline_us, volatile sig_atomic_t *stop, char *version,
                  size_t vlen, char *err, size_t errlen)
{
    c->modern = false;
    if (era == TP_MCP_ERA_LEGACY)
        return initialize(c, deadline_us, stop, 0, NULL, version, vlen, err, errlen);
    int64_t probe;
    json_t *found = NULL;
    c->modern = true; /* the probe carries the envelope */
    int rc = send_request(c, "server/discover", NULL, deadline_us, stop, &probe);
    c->modern = false;
    uint64_t wait = era == TP_MCP_ERA_AUTO ? tp_now_us() + TP_MCP_PROBE_US : deadline_us;
    if (rc == 0)
        rc = await_answer(c, "server/discover", probe, 0, NULL, deadline_us && deadline_us < wait ? deadline_us : wait,
                          stop, 1 << 20, &found, err, errlen);
    int is = 0; /* 1: modern; 0: legacy; < 0: refused */
    if (rc == 0) {
        is = probe_era(found, err, errlen);
        if (is == 0 && era == TP_MCP_ERA_MODERN) {
            char *said = json_dumps(found, JSON_COMPACT);
            snprintf(err, errlen,
                     "its protocol is \"%s\", but its answer to server/discover is not a 2026-07-28 "
                     "server's (no supportedVersions naming it): %.200s",
                     TP_MCP_MODERN, said ? said : "(unprintable)");
            free(said);
            is = TP_EREFUSED;
        }
        if (is == 1)
            keep_server_version(c, found);
        json_decref(found);
        found = NULL;
        probe = 0; /* answered: initialize looks for no late answer */
    } else if (rc == TP_EBADMSG && era == TP_MCP_ERA_AUTO) {
        probe = 0; /* an answer that does not read is no DiscoverResult */
    } else if (rc != TP_ETIMEDOUT || era == TP_MCP_ERA_MODERN || (deadline_us && tp_now_us() >= deadline_us)) {
        if (rc == TP_ECLOSED || rc == TP_ETIMEDOUT)
            snprintf(err, errlen, "server/discover");
        return rc;
    } /* else no answer yet: a legacy server's silence, or a slow start whose answer may still come */
    if (is == 0) {
        rc = initialize(c, deadline_us, stop, probe, &found, version, vlen, err, errlen);
        /* a modern-only server refuses initialize: its late DiscoverResult said what it is */
        if (rc == TP_EREFUSED && found != NULL && probe_era(found, err, errlen) == 1) {
            is = 1;
            keep_server_version(c, found);
        }
        json_decref(found);
    }
    if (is == 1) {
        c->modern = true;
        snprintf(version, vlen, "%s", TP_MCP_MODERN);
        rc = 0;
    }
    return is < 0 ? is : rc;
}

/* Reaps the server if it has exited, waiting up to wait_us. Whether it has. */
static bool reap(tp_mcpio_t *c, uint64_t wait_us)
{
    if (c->pid <= 0 || c->reaped)
        return true;
    uint64_t until = tp_now_us() + wait_us;
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid || (r < 0 && errno == ECHILD)) {
            c->reaped = true;
            if (r < 0)
                c->status = 0; /* reaped by someone else: how it ended is lost */
            return true;
        }
        if (tp_now_us() >= until)
            return false;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

/* Kills the server and what it started: its group, or its descendants and it. */
static void kill_server(tp_mcpio_t *c)
{
    static tp_proctree_t tree;
    if (c->pid <= 0 || c->reaped)
        return;
    if (c->own_group) {
        kill(-c->pid, SIGKILL);
    } else {
        tp_proctree_kill(&tree, c->pid);
        kill(c->pid, SIGKILL);
    }
}

const char *tp_mcpio_ended(tp_mcpio_t *c, uint64_t wait_us, char *buf, size_t n)
{
    if (!reap(c, wait_us)) {
        kill_server(c);
        reap(c, 1000000);
    }
    if (c->err_fd >= 0)
        read_stderr(c);
    if (!c->reaped)
        snprintf(buf, n, "would not die");
    else if (WIFSIGNALED(c->status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
    else
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(c->status));
    return buf;
}

void tp_mcpio_close(tp_mcpio_t *c, uint64_t wait_us)
{
    tp_close_fd(&c->in_fd);
    if (c->pid > 0) {
        if (!reap(c, wait_us))
            kill_server(c);
        else if (c->own_group)
            kill(-c->pid, SIGKILL); /* what it left in its group */
        reap(c, 1000000);
    }
    if (c->err_fd >= 0) {
        /* Its stderr, up to the end when nothing else holds it open. */
        struct pollfd pf = {.fd = c->err_fd, .events = POLLIN};
        while (c->err_fd >= 0 && poll(&pf, 1, 100) > 0)
            read_stderr(c);
    }
    tp_close_fd(&c->out_fd);
    tp_close_fd(&c->err_fd);
    c->pid = 0;
    c->scanned = c->batch_at = 0;
    tp_buf_reset(&c->out);
    tp_buf_reset(&c->errline);
    tp_buf_reset(&c->queued);
}

void tp_mcpio_free(tp_mcpio_t *c)
{
    tp_buf_free(&c->out);
    tp_buf_free(&c->errline);
    tp_buf_free(&c->queued);
}
