/*
 * toolpool-worker: one slot of the pool.
 *
 * The supervisor forks, makes the child the leader of its own process group,
 * points fd 3 at the call pipe, fd 4 at the reply pipe and fd 5 at the start board, and execs this
 * program. The worker says Hello, then loops: read a Call frame, run the
 * tool, write a Reply frame. An http tool's calls do not run one at a
 * time: the worker holds many in flight (worker/http.c) while it reads
 * more, and answers each when it ends, matched by its seq; a Cancel frame
 * ends one of them. It holds no policy: timeouts, retries and
 * everything else live in the supervisor, which kills this whole process
 * group when an attempt runs past its deadline.
 *
 * The worker is a child subreaper (contain.h): what a tool leaves running,
 * in its process group or out of it (setsid, a double-forked daemon), is
 * killed when the call ends, before the reply goes out.
 *
 * A worker that serves MCP tools keeps their servers running from call to
 * call (worker/mcp.c); they end with it.
 *
 * Exit status: 0 when the supervisor closes the call pipe (recycling or the
 * end of a run), 3 on a protocol error (a garbage or oversized frame).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "adapter.h"
#include "clock.h"
#include "contain.h"
#include "frame.h"
#include "log.h"

#define TP_CALL_FD 3
#define TP_REPLY_FD 4

/*
 * SIGTERM comes from the supervisor at a timeout with a kill_grace, to the
 * whole process group: the tool gets it too. The worker outlives it just
 * long enough to reap its tool, then exits; SIGKILL follows at the grace's
 * end for anything still there.
 */
static volatile sig_atomic_t terminating;
static pid_t supervisor_pid;

/*
 * The same signal arrives as the parent-death signal when the supervisor
 * dies (SIGKILL included): then nobody will ever time this group out, so
 * the worker kills what its tool started outside the group (a walk of
 * /proc, async-signal-safe) and takes its whole group down, tool and all.
 */
static void term_handler(int sig)
{
    (void)sig;
    if (getppid() != supervisor_pid) {
        tp_contain_kill_in_handler();
        kill(0, SIGKILL);
    }
    terminating = 1;
    tp_mcp_interrupt = 1;
}

/*
 * SIGXCPU: a plugin ran past its cpu limit (the worker's soft RLIMIT_CPU,
 * lowered around the call). The worker dies of it, as the default action
 * says, so the supervisor sees why, but without the core dump that action
 * also asks for.
 */
static void xcpu_handler(int sig)
{
    struct rlimit no_core = {0, 0};
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    setrlimit(RLIMIT_CORE, &no_core);
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

/*
 * The frames packed and not yet written. The replies and notices of the
 * calls that run many at once (http, mcp) wait here until the loop's turn
 * ends (flush_frames), so a burst of answers read from a server goes to
 * the supervisor in one write; a call that runs alone is answered at once.
 */
static tp_buf_t frames_out;
/* Written at once past this much, and its room given back: a turn's burst of large results is not held whole. */
#define FRAMES_OUT_MAX ((size_t)1 << 20)

/* Writes the frames packed; a failed write means the supervisor is gone. */
static void flush_frames(void)
{
    if (frames_out.len == 0)
        return;
    static size_t reply_pipe;
    tp_pipe_fit(TP_REPLY_FD, frames_out.len, &reply_pipe);
    if (tp_write_all(TP_REPLY_FD, frames_out.data, frames_out.len) < 0)
        exit(errno == EPIPE ? 0 : 3);
    if (frames_out.cap > 4 * FRAMES_OUT_MAX)
        tp_buf_free(&frames_out);
    else
        tp_buf_reset(&frames_out);
}

/* Packs one WorkerFrame after those waiting to be written (flush_frames). */
static void queue_frame(Toolpool__WorkerFrame *wf, uint32_t max)
{
    int rc = tp_frame_append(&frames_out, &wf->base, max);
    if (rc != 0) {
        /* strerror's words for the errno this once set: EMSGSIZE when too big */
        tp_log_error("worker.pack_failed", "cannot pack a reply: %s", strerror(rc == TP_E2BIG ? EMSGSIZE : -rc));
        flush_frames(); /* the answers queued before it are still wanted */
        exit(3);
    }
    if (frames_out.len >= FRAMES_OUT_MAX)
        flush_frames();
}

static uint32_t frame_max = TP_FRAME_DEFAULT_MAX;

/* Forwards an MCP server's notification to the supervisor; one too large for a frame is dropped. */
static void send_notice(uint64_t seq, const char *method, const char *params, size_t len)
{
    Toolpool__Notice n = TOOLPOOL__NOTICE__INIT;
    n.seq = seq;
    n.method = (char *)method;
    n.params.data = (uint8_t *)params;
    n.params.len = len;
    Toolpool__WorkerFrame wf = TOOLPOOL__WORKER_FRAME__INIT;
    wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_NOTICE;
    wf.notice = &n;
    if (len + 1024 <= frame_max)
        queue_frame(&wf, frame_max);
}

static void run_call(const Toolpool__Call *call, tp_outcome_t *o)
{
    tp_outcome_reset(o);
    const tp_worker_adapter_t *a = tp_adapter_find(call->adapter);
    if (a != NULL)
        a->run(call, o);
    else
        tp_outcome_fail(o, "ToolError", "worker cannot run adapter %d", (int)call->adapter);
}

/* The Reply to call: its outcome o, queued (flush_frames). */
static void send_reply(const Toolpool__Call *call, tp_outcome_t *o)
{
    uint32_t max = frame_max;
    Toolpool__Reply reply = TOOLPOOL__REPLY__INIT;
    reply.seq = call->seq;
    reply.retry_after_ms = o->retry_after_ms;
    reply.cost = o->cost;
    reply.started_us = o->started_us;
    if (o->ok && o->result.len + 1024 > max) {
        /* A result the frame cannot carry is the tool's failure, not the worker's. */
        tp_outcome_fail(o, "OutputTooLarge", "%s returned %zu bytes, more than a frame carries (%u)", call->tool,
                        o->result.len, max);
    }
    reply.ok = o->ok; /* after the check: a result too large for the frame is no success */
    if (o->ok) {
        reply.result.data = o->result.data;
        reply.result.len = o->result.len;
    } else {
        reply.kind = o->kind;
        tp_buf_append(&o->message, "", 1);
        reply.message = (char *)o->message.data;
    }
    Toolpool__WorkerFrame wf = TOOLPOOL__WORKER_FRAME__INIT;
    wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_REPLY;
    wf.reply = &reply;
    queue_frame(&wf, max);
}

/* Runs one call of an adapter that runs one at a time, and answers it. */
static void run_one(const Toolpool__Call *call, tp_outcome_t *o)
{
    /* what the turn queued goes out before a call that runs to its end here: the MCP servers work meanwhile */
    if (tp_mcp_in_flight() > 0)
        tp_mcp_flush();
    flush_frames();
    uint64_t started = tp_now_us();
    run_call(call, o);
    /*
     * Nothing the tool started outlives its call. The check costs a
     * system call (about 0.5 us: some 5% of a no-op plugin call), so a
     * call too short to have started a process skips it: every exec
     * call, and any plugin call that forked or spawned, takes longer
     * (contain.h).
     */
    /*
     * An MCP tool's call is not swept: its server lives on, and what
     * it starts is its own (contain.h spares them).
     */
    if (call->adapter != TOOLPOOL__ADAPTER__ADAPTER_MCP && tp_now_us() - started >= TP_CONTAIN_QUICK_US)
        tp_contain_sweep();
    if (terminating) {
        flush_frames(); /* the answers of calls that ended before this one are still wanted */
        tp_mcp_shutdown();
        tp_contain_sweep();
        _exit(0); /* timed out: nobody wants this reply */
    }
    send_reply(call, o);
    flush_frames(); /* the supervisor waits for it: the next call may run long */
}

/*
 * Handles one whole frame from the supervisor: a Call runs (an http one
 * starts, and answers when it ends), a Cancel ends its http call. false
 * on a garbage frame.
 */
static bool handle_frame(const uint8_t *body, uint32_t len, tp_outcome_t *o)
{
    Toolpool__SupervisorFrame *sf = toolpool__supervisor_frame__unpack(NULL, len, body);
    if (sf != NULL && sf->body_case == TOOLPOOL__SUPERVISOR_FRAME__BODY_CALL &&
        sf->call->adapter == TOOLPOOL__ADAPTER__ADAPTER_HTTP) {
        tp_http_start(sf); /* it owns sf now */
        return true;
    }
    if (sf != NULL && sf->body_case == TOOLPOOL__SUPERVISOR_FRAME__BODY_CALL &&
        sf->call->adapter == TOOLPOOL__ADAPTER__ADAPTER_MCP) {
        tp_mcp_start(sf); /* it owns sf now */
        return true;
    }
    bool ok = sf != NULL;
    if (ok && sf->body_case == TOOLPOOL__SUPERVISOR_FRAME__BODY_CALL)
        run_one(sf->call, o);
    else if (ok && sf->body_case == TOOLPOOL__SUPERVISOR_FRAME__BODY_CANCEL)
        (void)(tp_http_cancel(sf->cancel->seq) || tp_mcp_cancel(sf->cancel->seq)); /* one that answered: too late */
    else
        ok = false;
    toolpool__supervisor_frame__free_unpacked(sf, NULL);
    return ok;
}

int main(int argc, char **argv)
{
    tp_log_init("toolpool-worker");
    /* The supervisor's log format and file; then gone, so the tools this worker runs do not inherit them. */
    tp_log_from_env(1);
    int slot = -1;
    bool http = false; /* the registry has http tools: libcurl is loaded before the first call */
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--max-frame") == 0)
            frame_max = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--slot") == 0)
            slot = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--http") == 0)
            http = strcmp(argv[i + 1], "1") == 0;
    uint32_t max = frame_max;

    /* A tool that exits before reading its stdin must not kill the worker. */
    signal(SIGPIPE, SIG_IGN);
    supervisor_pid = getppid();
    struct sigaction sa = {.sa_handler = term_handler}; /* no SA_RESTART: poll sees EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction xa = {.sa_handler = xcpu_handler};
    sigemptyset(&xa.sa_mask);
    sigaction(SIGXCPU, &xa, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != supervisor_pid)
        return 0; /* the supervisor is already gone */
    /* Orphans of a tool's processes reparent to us, not to init: we can still find them. */
    if (tp_contain_init() < 0)
        tp_log_error("worker.no_subreaper",
                     "cannot become a child subreaper: %s; a tool's double-forked daemon may outlive "
                     "its call",
                     strerror(errno));
    /*
     * The worker and the tools it starts run as batch work (SCHED_BATCH:
     * the same share of the CPU, the same nice value): waking, they never
     * preempt the supervisor, so its kill at a deadline and its writes to
     * the other workers go on undisturbed. Without it, the processes a
     * deadline's SIGKILL wakes ran on the supervisor's CPU before it could
     * go on: 0.2 ms in the median.
     */
    struct sched_param sp = {.sched_priority = 0};
    sched_setscheduler(0, SCHED_BATCH, &sp);
    /* The start board (fd 5): where the exec adapter marks its tools' starts. Mapped, its fd closed. */
    if ((tp_exec_start_line = tp_startboard_map(TP_START_FD, slot)) == NULL && slot >= 0)
        tp_log_error("worker.no_start_board",
                     "no start board for slot %d: its exec tools' time counts from their calls' send", slot);
    /* Nothing the worker starts may inherit the pipes to the supervisor. */
    if (fcntl(TP_CALL_FD, F_SETFD, FD_CLOEXEC) < 0 || fcntl(TP_REPLY_FD, F_SETFD, FD_CLOEXEC) < 0) {
        tp_log_error("worker.bad_fds", "fds 3 and 4 must be the supervisor's pipes: %s", strerror(errno));
        return 3;
    }

    /*
     * A call of large args allocates several buffers of their size (the
     * frame, the args, the tool's result, the reply), and frees them when
     * it ends. glibc would give the top of the heap back at each free past
     * twice its largest mmap()ed chunk, and the next such call would fault
     * every page in again: a fifth of a 1 MB echo's time. The worker keeps
     * up to 8 MiB of freed heap instead; a buffer of 2 MiB or more still
     * comes from mmap() and goes back whole.
     */
    /* Hints: an allocator other than glibc's (ASan's, say) refuses them, and the calls run as they would. */
    (void)mallopt(M_MMAP_THRESHOLD, 2 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 8 << 20);

    tp_mcp_set_notice(send_notice);
    tp_http_set_done(send_reply);
    tp_mcp_set_done(send_reply);
    if (http)
        tp_http_preload(); /* before the hello: the supervisor sends calls to a worker ready for them */
    tp_buf_t in = {0};
    Toolpool__Hello hello = TOOLPOOL__HELLO__INIT;
    hello.protocol = TOOLPOOL__PROTOCOL__PROTOCOL_VERSION;
    hello.pid = getpid();
    Toolpool__WorkerFrame wf = TOOLPOOL__WORKER_FRAME__INIT;
    wf.body_case = TOOLPOOL__WORKER_FRAME__BODY_HELLO;
    wf.hello = &hello;
    queue_frame(&wf, max);
    flush_frames();

    /*
     * The loop: every whole frame read is handled, then more is read. With
     * no http call in flight the read blocks, as a call runs to its end
     * before the next is read; with some, the worker waits on its
     * transfers and its call pipe together. At EOF the calls in flight
     * still finish (a worker retiring), then the worker exits.
     */
    tp_outcome_t o = {0};
    int status = 0;
    bool eof = false;
    while (!terminating) {
        const uint8_t *body;
        uint32_t len;
        int rc;
        while ((rc = tp_frame_peek(&in, max, &body, &len)) == 0 && !terminating) {
            bool ok = handle_frame(body, len, &o);
            tp_buf_consume(&in, TP_FRAME_HEADER + len);
            if (!ok) {
                tp_log_error("worker.bad_frame", "garbage frame from the supervisor");
                flush_frames();
                return 3;
            }
        }
        if (rc == TP_E2BIG) {
            tp_log_error("worker.bad_frame", "bad frame from the supervisor (oversized)");
            flush_frames();
            return 3;
        }
        if (terminating) {
            flush_frames(); /* what ended this turn is answered: a SIGTERM is for one call, not its siblings */
            break;
        }
        /* The turn's writes, once each: the servers' requests, then the supervisor's answers. */
        tp_mcp_flush();
        flush_frames();
        bool readable = !eof;
        if (tp_http_in_flight() > 0) {
            /* MCP calls in flight beside: their servers' pipes in the same wait */
            struct pollfd mcp_pf[TP_MCP_POLL_MAX];
            int ms = 1000, m = tp_mcp_in_flight() > 0 ? tp_mcp_poll_set(mcp_pf, &ms) : -1;
            if (tp_http_wait(eof ? -1 : TP_CALL_FD, ms, &readable, mcp_pf, m < 0 ? 0 : m) < 0) {
                tp_log_error("worker.http_failed", "the HTTP client failed; its calls cannot go on");
                status = 3;
                break;
            }
            if (m >= 0)
                tp_mcp_poll_done(mcp_pf);
        } else if (tp_mcp_in_flight() > 0) {
            if (tp_mcp_wait(eof ? -1 : TP_CALL_FD, 1000, &readable) < 0) {
                tp_log_error("worker.mcp_wait_failed", "waiting on the MCP servers failed; their calls cannot go on");
                status = 3;
                break;
            }
        } else if (eof) {
            break;
        }
        if (!readable)
            continue;
        ssize_t n = tp_buf_read_fd(&in, TP_CALL_FD);
        if (n == 0 && tp_buf_avail(&in) > 0) {
            tp_log_error("worker.bad_frame", "bad frame from the supervisor (%s)", tp_strerror(TP_EPIPE));
            flush_frames();
            return 3;
        }
        if (n == 0)
            eof = true;
        else if (n < 0 && n != TP_EINTR && n != TP_EAGAIN) {
            tp_log_error("worker.bad_frame", "bad frame from the supervisor (%s)", tp_strerror((int)n));
            flush_frames();
            return 3;
        }
    }
    flush_frames();
    tp_http_shutdown();
    tp_mcp_shutdown();
    tp_contain_sweep();
    tp_outcome_free(&o);
    tp_buf_free(&in);
    tp_buf_free(&frames_out);
    return status;
}
