/*
 * A client's end of one MCP server over stdio: the server is a child
 * process, JSON-RPC 2.0 messages go one a line on its stdin and come one a
 * line on its stdout, and what it writes on stderr is a log, never an
 * answer.
 *
 * Two users: the worker's mcp adapter (worker/mcp.c), which keeps a session
 * open across calls, and the registry's import of "mcp_servers"
 * (supervisor/registry/import.c), which starts a server, lists its tools and stops it.
 * Every wait has a deadline and may be cut short by a flag the caller's
 * SIGTERM handler sets (SIGTERM is let through only inside the wait, so
 * one that comes just before it is not missed); nothing here installs a
 * handler or reaps any process but the server.
 *
 * A wait ends with 0 (a message), or with TP_ECLOSED (the server closed its
 * stdout, or could not be written to), TP_ETIMEDOUT (the deadline passed),
 * TP_EINTR (the stop flag was set), TP_E2BIG (a line longer than the cap)
 * or TP_ENOMEM.
 */
#ifndef TP_MCPSTDIO_H
#define TP_MCPSTDIO_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "error.h"

/* The protocol version offered, and the older ones accepted in answer. */
#define TP_MCP_PROTOCOL "2025-11-25"

/* Bytes of the end of the server's stderr kept for messages. */
#define TP_MCP_TAIL 600

typedef struct {
    pid_t pid;      /* 0: not running */
    bool own_group; /* started as the leader of a process group of its own */
    int in_fd, out_fd, err_fd;
    tp_buf_t out;           /* stdout not yet read as messages */
    tp_buf_t errline;       /* stderr's unfinished line */
    char tail[TP_MCP_TAIL]; /* the end of its stderr, lines joined by "; " */
    size_t tail_len;
    /* Each line of its stderr, as it comes; NULL: only the tail is kept. */
    void (*log_line)(void *ctx, const char *line);
    void *log_ctx;
    /* Each notification that comes while a request waits for its answer; NULL: dropped. */
    void (*notice)(void *ctx, const json_t *msg);
    void *notice_ctx;
    int64_t next_id;
    bool reaped;
    int status; /* waitpid's, once reaped */
} tp_mcpio_t;

/*
 * Starts argv (found on PATH when argv[0] has no '/') with its stdin,
 * stdout and stderr on pipes, SIGPIPE and SIGTERM at their defaults, the
 * caller's environment plus env ("K=V" entries, NULL-terminated, or NULL;
 * an entry replaces a variable of the same name) and in cwd (NULL: the
 * caller's). With own_group it leads a process group of its own (so a
 * close kills all it started); without, it joins the caller's. 0; or,
 * with a message in err, TP_ENOMEM or the -errno of pipe2's or
 * posix_spawn's error (-ENOENT: no such command).
 */
int tp_mcpio_spawn(tp_mcpio_t *c, char *const argv[], char *const env[], const char *cwd, bool own_group, char *err,
                   size_t errlen);

/* Writes msg and a newline. 0, TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR or TP_ENOMEM. */
int tp_mcpio_send(tp_mcpio_t *c, const json_t *msg, uint64_t deadline_us, volatile sig_atomic_t *stop);

/*
 * Reads the next message (a JSON object) into *msg, the caller's to
 * decref. Blank lines are skipped; a line that is not a JSON object is
 * logged as stderr would be and skipped. deadline_us 0: no deadline. stop
 * (may be NULL) ends the wait when a signal interrupts it with the flag
 * set. 0, TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR or TP_E2BIG (a line longer
 * than max_line).
 */
int tp_mcpio_recv(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop, size_t max_line, json_t **msg);

/*
 * Without waiting: the next whole message already read from the server's
 * stdout into *msg (blank lines skipped). 0; TP_EAGAIN when no whole line
 * is there yet (tp_mcpio_fill reads more); TP_ECLOSED when its stdout has
 * ended; TP_E2BIG when an unfinished line is past max_line; TP_EPROTO for
 * a line that is not a JSON object (logged, consumed, and its start copied
 * into junk): the server does not speak JSON-RPC.
 */
int tp_mcpio_take(tp_mcpio_t *c, size_t max_line, json_t **msg, char *junk, size_t junk_len);

/*
 * Reads once what the server's stdout and stderr hold, without waiting
 * (for a caller that polls out_fd and err_fd itself). 0 when it read
 * something; TP_EAGAIN when nothing was there; TP_ECLOSED at its end.
 */
int tp_mcpio_fill(tp_mcpio_t *c);

/*
 * Answers req, a request the server sent: ping with {}, anything else
 * with -32601, saying that toolpool offers servers no roots, sampling or
 * elicitation.
 */
void tp_mcpio_answer_server(tp_mcpio_t *c, const json_t *req, uint64_t deadline_us, volatile sig_atomic_t *stop);

/*
 * Sends the request method(params) (params stolen; NULL: none) and reads
 * until its answer, which lands in *answer (the whole message: "result" or
 * "error"). Meanwhile the server's requests are answered (ping with {},
 * anything else with -32601) and its notifications go to c->notice (when
 * set). *id is the request's id, set before any wait (for a
 * notifications/cancelled). 0, or any code of tp_mcpio_send and
 * tp_mcpio_recv: TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR, TP_E2BIG, TP_ENOMEM.
 */
int tp_mcpio_request(tp_mcpio_t *c, const char *method, json_t *params, uint64_t deadline_us,
                     volatile sig_atomic_t *stop, size_t max_line, int64_t *id, json_t **answer);

/*
 * The handshake: initialize (offering TP_MCP_PROTOCOL; 2025-06-18 and
 * 2025-03-26 accepted in answer), then notifications/initialized. The
 * version agreed into version. 0; TP_EREFUSED when the server answered
 * with an error or a version toolpool does not speak, with what it said in
 * err; or a code of tp_mcpio_request (TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR,
 * TP_E2BIG: a line over 1 MiB, TP_ENOMEM).
 */
int tp_mcpio_initialize(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop, char *version, size_t vlen,
                        char *err, size_t errlen);

/*
 * Ends the session: closes the server's stdin (the stdio transport's
 * shutdown), waits up to wait_us for it to exit, then kills it and what it
 * started (its group, or its descendants), and reaps it. Reads the rest of
 * its stderr first. c may then be spawned again.
 */
void tp_mcpio_close(tp_mcpio_t *c, uint64_t wait_us);

/*
 * After TP_ECLOSED: waits up to wait_us for the server to exit (killing
 * it then) and describes how it ended, "exited with status 1" or "killed
 * by signal 9 (Killed)", into buf.
 */
const char *tp_mcpio_ended(tp_mcpio_t *c, uint64_t wait_us, char *buf, size_t n);

/* Frees the buffers; the server must have been closed. */
void tp_mcpio_free(tp_mcpio_t *c);

#endif
