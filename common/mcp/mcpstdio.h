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
 * A wait ends with 0 (a message), TP_EBADMSG (an answer the JSON parser
 * cannot hold, and the request it answers), or with TP_ECLOSED (the server
 * closed its stdout, or could not be written to), TP_ETIMEDOUT (the
 * deadline passed), TP_EINTR (the stop flag was set), TP_E2BIG (a line
 * longer than the cap) or TP_ENOMEM.
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

/* The protocol version offered to initialize, and the older ones accepted in answer. */
#define TP_MCP_PROTOCOL "2025-11-25"
/* The stateless revision: no initialize, the version and capabilities in each request's _meta. */
#define TP_MCP_MODERN "2026-07-28"
/* The per-request _meta keys of 2026-07-28. */
#define TP_META_VERSION "io.modelcontextprotocol/protocolVersion"
#define TP_META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define TP_META_INFO "io.modelcontextprotocol/clientInfo"
#define TP_META_LEVEL "io.modelcontextprotocol/logLevel"
/*
 * How long the server/discover probe is waited for before initialize is
 * sent after it: a legacy server may leave a request before initialize
 * unanswered.
 */
#define TP_MCP_PROBE_US 2000000u

/* The eras a server may be spoken to in (an MCP server's "protocol" key). */
typedef enum {
    TP_MCP_ERA_AUTO,   /* found by the server/discover probe, falling back to initialize */
    TP_MCP_ERA_MODERN, /* 2026-07-28 only: the probe must find it; no initialize */
    TP_MCP_ERA_LEGACY, /* the initialize handshake only (2025-11-25 and older): no probe */
    TP_MCP_ERA_N
} tp_mcp_era_t;
/* Their names as a registry spells them: "auto", "2026-07-28", "2025-11-25". */
extern const char *const tp_mcp_era_names[TP_MCP_ERA_N];

/* Bytes of the end of the server's stderr kept for messages. */
#define TP_MCP_TAIL 600

/* The longest serverInfo.version kept (longer is cut). */
#define TP_MCP_SERVER_VERSION_MAX 128

typedef struct {
    pid_t pid;      /* 0: not running */
    bool own_group; /* started as the leader of a process group of its own */
    int in_fd, out_fd, err_fd;
    tp_buf_t out;           /* stdout not yet read as messages */
    size_t scanned;         /* bytes at out's head known to hold no line end */
    size_t batch_at;        /* in a batch line at out's head: its next element's offset; 0: in none */
    size_t batch_len;       /* that line's length, without its end */
    tp_buf_t errline;       /* stderr's unfinished line */
    tp_buf_t queued;        /* lines for its stdin not yet written (tp_mcpio_queue) */
    bool drained;           /* stdout was read into out while a flush waited: messages may wait there */
    bool pipe_ignored;      /* the caller's process ignores SIGPIPE: its writes need no mask */
    char tail[TP_MCP_TAIL]; /* the end of its stderr, lines joined by "; " */
    size_t tail_len;
    /* Each line of its stderr, as it comes; NULL: only the tail is kept. */
    void (*log_line)(void *ctx, const char *line);
    void *log_ctx;
    /* Each notification that comes while a request waits for its answer; NULL: dropped. */
    void (*notice)(void *ctx, const json_t *msg);
    void *notice_ctx;
    int64_t next_id;
    bool modern; /* speaks 2026-07-28: every request carries the _meta envelope (tp_mcpio_stamp) */
    char server_version[TP_MCP_SERVER_VERSION_MAX]; /* serverInfo.version its handshake gave; "": none */
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

/*
 * Writes msg and a newline, after the lines queued before it. 0,
 * TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR or TP_ENOMEM.
 */
int tp_mcpio_send(tp_mcpio_t *c, const json_t *msg, uint64_t deadline_us, volatile sig_atomic_t *stop);

/*
 * Queues msg and a newline for the server's stdin, unwritten: a worker
 * with many requests to send writes them in one tp_mcpio_flush (one
 * write, and one SIGPIPE mask around it, instead of one of each per
 * request). 0, TP_ECLOSED (not running) or TP_ENOMEM (nothing queued).
 */
int tp_mcpio_queue(tp_mcpio_t *c, const json_t *msg);

/*
 * Writes every queued line, waiting for room up to deadline_us. While it
 * waits, the server's stdout is read into out (up to 16 MiB), so that a
 * server that blocked writing its answers, and so stopped reading its
 * stdin, goes on; drained is then set: messages wait in out for
 * tp_mcpio_take, whatever a poll of out_fd says. 0, or tp_mcpio_send's
 * codes; on a failure the lines not written are dropped (a server that
 * does not read its stdin is done for).
 */
int tp_mcpio_flush(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop);

/*
 * Writes what of the queued lines the server's stdin takes now, without
 * waiting: 0 when all are written; TP_EAGAIN with the rest still queued
 * (poll in_fd for POLLOUT, then call it again); TP_ECLOSED (the lines
 * dropped) when the server closed its stdin or is gone.
 */
int tp_mcpio_write_some(tp_mcpio_t *c);

/*
 * One message's text read: a line of the server's stdout, or one element of
 * a batch on it. 0: *msg is the object (the caller's to decref).
 * TP_EBADMSG: an answer jansson cannot read (a number past 64 bits, nesting
 * past its 2048 levels, bytes that are not UTF-8) whose "id" a lenient scan
 * (jsonscan.h) finds: *msg is that id as jansson reads it (the caller's; an
 * id it cannot hold either, a number past 64 bits, comes as a string of its
 * text: no request of toolpool's has it), and why says what stopped the
 * parser ("too big integer near '18446744073709551616' (column 58)").
 * TP_EPROTO: anything else, which is not JSON-RPC: not an object, or none
 * whose id can be found. Touches nothing but its arguments.
 */
int tp_mcpio_parse(const char *text, size_t n, json_t **msg, char *why, size_t why_len);

/*
 * Without waiting: the next whole message already read from the server's
 * stdout. Blank lines are skipped; a line that is a JSON array is a batch
 * (JSON-RPC 2.0's, which MCP 2025-03-26 allows and later revisions dropped),
 * its elements handed over one a call, each as a line of its own would be.
 * 0 with *msg the message; TP_EBADMSG for an answer that does not read,
 * *msg its id and junk why (tp_mcpio_parse); TP_EAGAIN when no whole line is
 * there yet (tp_mcpio_fill reads more); TP_ECLOSED when its stdout has
 * ended; TP_E2BIG when an unfinished line is past max_line; TP_EPROTO for a
 * line that is not JSON-RPC (logged as stderr would be, consumed, and its
 * start copied into junk).
 */
int tp_mcpio_take(tp_mcpio_t *c, size_t max_line, json_t **msg, char *junk, size_t junk_len);

/*
 * tp_mcpio_take, waiting up to deadline_us (0: no deadline) for a message,
 * and skipping lines that are not JSON-RPC (logged). stop (may be NULL) ends
 * the wait when a signal interrupts it with the flag set. 0 or TP_EBADMSG
 * as tp_mcpio_take gives them (why: junk's), TP_ECLOSED, TP_ETIMEDOUT,
 * TP_EINTR or TP_E2BIG (a line longer than max_line).
 */
int tp_mcpio_recv(tp_mcpio_t *c, uint64_t deadline_us, volatile sig_atomic_t *stop, size_t max_line, json_t **msg,
                  char *why, size_t why_len);

/*
 * Reads what the server's stdout (when out_ready) and stderr (when
 * err_ready) hold, without waiting, for a caller that polls out_fd and
 * err_fd itself and says which were ready: a read that comes back short
 * emptied the pipe, so an idle fd costs no read. 0 when it read
 * something; TP_EAGAIN when nothing was there; TP_ECLOSED at its end;
 * TP_ENOMEM.
 */
int tp_mcpio_fill(tp_mcpio_t *c, bool out_ready, bool err_ready);

/*
 * Answers req, a request the server sent: ping with {}, anything else
 * with -32601, saying that toolpool offers servers no roots, sampling or
 * elicitation. Written now (by deadline_us), or with deadline_us 0 only
 * queued, for the next tp_mcpio_flush.
 */
void tp_mcpio_answer_server(tp_mcpio_t *c, const json_t *req, uint64_t deadline_us, volatile sig_atomic_t *stop);

/*
 * Sends the request method(params) (params stolen; NULL: none; the _meta
 * envelope stamped in when c is modern) and reads until its answer,
 * which lands in *answer (the whole message: "result" or "error"). It is
 * the one request in flight, so an error with a null id
 * (the server could not read a request) is its answer too. Meanwhile the
 * server's requests are answered (ping with {}, anything else with -32601)
 * and its notifications go to c->notice (when set). *id is the request's
 * id, set before any wait (for a notifications/cancelled). 0; TP_EBADMSG
 * when its answer does not read, err saying why ("its answer to tools/list
 * could not be read: too big integer near ..."); or any code of
 * tp_mcpio_send and tp_mcpio_recv: TP_ECLOSED, TP_ETIMEDOUT, TP_EINTR,
 * TP_E2BIG, TP_ENOMEM.
 */
int tp_mcpio_request(tp_mcpio_t *c, const char *method, json_t *params, uint64_t deadline_us,
                     volatile sig_atomic_t *stop, size_t max_line, int64_t *id, json_t **answer, char *err,
                     size_t errlen);

/*
 * The era, found as 2026-07-28's versioning says for stdio (era
 * TP_MCP_ERA_AUTO; TP_MCP_ERA_MODERN takes only a modern answer to the
 * probe, waiting for it to the deadline; TP_MCP_ERA_LEGACY sends
 * initialize alone, no probe): the probe server/discover (with the _meta
 * envelope) first. A result whose
 * supportedVersions names 2026-07-28 makes c modern: no initialize. Any
 * other answer (an error such as -32601, a result without 2026-07-28), or
 * none within TP_MCP_PROBE_US, is a legacy server's: initialize (offering
 * TP_MCP_PROTOCOL; 2025-06-18 and 2025-03-26 accepted in answer), then
 * notifications/initialized. A probe answered late still counts: a server
 * slow to start that refuses initialize after its DiscoverResult is modern.
 * The version agreed into version, serverInfo.version into c->server_version. 0; TP_EREFUSED when the server refused
 * (UnsupportedProtocolVersion to the probe, an error to initialize, a
 * version toolpool does not speak) or answered with a resultType other
 * than "complete", with what it said in err; or a code of tp_mcpio_request
 * (TP_EBADMSG with why in err, TP_ECLOSED and TP_ETIMEDOUT with the method
 * waited for in err, TP_EINTR, TP_E2BIG: a line over 1 MiB, TP_ENOMEM).
 */
int tp_mcpio_open(tp_mcpio_t *c, tp_mcp_era_t era, uint64_t deadline_us, volatile sig_atomic_t *stop, char *version,
                  size_t vlen, char *err, size_t errlen);

/*
 * Puts 2026-07-28's request envelope into params' _meta when c is modern
 * (the version, empty client capabilities, who we are); nothing when it is
 * legacy. 0 or TP_ENOMEM.
 */
int tp_mcpio_stamp(const tp_mcpio_t *c, json_t *params);

/*
 * A result's resultType when it is not "complete" (absent is "complete",
 * as a legacy server's result has none): the string, "(not a string)" when
 * it is not one; else NULL. A result of another type (input_required: the
 * server asks for input toolpool cannot give) is no answer to take.
 */
const char *tp_mcpio_result_type(const json_t *result);

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
