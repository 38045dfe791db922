#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"

/* A message longer than this is cut, in either format. */
#define TP_LOG_LINE 4096

static const char *prog_name = "toolpool";
static tp_log_format_t log_format = TP_LOG_TEXT;
static int log_fd = STDERR_FILENO;
static char log_path[PATH_MAX];

static const char *const level_json[] = {"error", "warning", "info"};
static const char *const level_text[] = {"error: ", "warning: ", ""};

void tp_log_init(const char *prog)
{
    prog_name = prog;
}

tp_log_format_t tp_log_format(void)
{
    return log_format;
}

int tp_log_set_format(const char *name, char *err, size_t errlen)
{
    if (name == NULL)
        return 0;
    if (strcmp(name, "text") == 0)
        log_format = TP_LOG_TEXT;
    else if (strcmp(name, "json") == 0)
        log_format = TP_LOG_JSON;
    else {
        snprintf(err, errlen, "expected text or json, got \"%s\"", name);
        return -1;
    }
    return 0;
}

int tp_log_set_file(const char *path, char *err, size_t errlen)
{
    if (path == NULL || *path == '\0') {
        if (log_fd != STDERR_FILENO)
            close(log_fd);
        log_fd = STDERR_FILENO;
        log_path[0] = '\0';
        return 0;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* Above the descriptors a worker's protocol fixes (3 to 5), which it may open or close after this. */
    if (fd < 10) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
        close(fd);
        if (hi < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        fd = hi;
    }
    /* Absolute, so a worker started in another directory appends to the same file. */
    if (realpath(path, log_path) == NULL)
        snprintf(log_path, sizeof log_path, "%s", path);
    if (log_fd != STDERR_FILENO)
        close(log_fd);
    log_fd = fd;
    return 0;
}

void tp_log_from_env(int unset_after)
{
    char err[PATH_MAX + 128];
    const char *format = getenv("TOOLPOOL_LOG_FORMAT"), *file = getenv("TOOLPOOL_LOG_FILE");
    if (format && *format && tp_log_set_format(format, err, sizeof err) < 0)
        tp_log_warn("log.bad_format", "TOOLPOOL_LOG_FORMAT: %s; ignored", err);
    if (file && *file && tp_log_set_file(file, err, sizeof err) < 0)
        tp_log_warn("log.file_failed", "TOOLPOOL_LOG_FILE: %s; logging on stderr", err);
    if (unset_after) {
        unsetenv("TOOLPOOL_LOG_FORMAT");
        unsetenv("TOOLPOOL_LOG_FILE");
    }
}

void tp_log_export_env(void)
{
    if (log_format == TP_LOG_JSON)
        setenv("TOOLPOOL_LOG_FORMAT", "json", 1);
    else
        unsetenv("TOOLPOOL_LOG_FORMAT");
    if (log_path[0])
        setenv("TOOLPOOL_LOG_FILE", log_path, 1);
    else
        unsetenv("TOOLPOOL_LOG_FILE");
}

/* Where the JSON line is built: bounded, so a line is never an allocation (an out-of-memory message must get out). */
typedef struct {
    char *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *s, size_t n)
{
    if (n > o->cap - o->len)
        n = o->cap - o->len;
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(out_t *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at p (a lead byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/*
 * s as a JSON string, quotes and all; a byte that is not UTF-8 becomes
 * U+FFFD. A string that does not fit, keeping room bytes free after it, or
 * is longer than limit bytes written, is cut between two characters (never
 * inside an escape or a UTF-8 sequence) and still closed, so a cut line is
 * still a JSON object. No room at all: "".
 */
static void put_string(out_t *o, const char *s, size_t room, size_t limit)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    if (o->cap - o->len < room + 2) {
        if (o->cap - o->len >= 2) {
            o->p[o->len++] = '"';
            o->p[o->len++] = '"';
        }
        return;
    }
    size_t end = o->cap - room - 1; /* the closing quote's place */
    if (limit < end - o->len - 1)   /* end - o->len is 1 at least here */
        end = o->len + 1 + limit;
    o->p[o->len++] = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        char e[8];
        const char *piece = e;
        size_t len, used = 1;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            size_t j = i + 1;
            while (j < n && p[j] >= 0x20 && p[j] < 0x7f && p[j] != '"' && p[j] != '\\')
                j++;
            piece = s + i;
            len = used = j - i;
            if (len > end - o->len)
                len = used = end - o->len; /* plain bytes cut anywhere */
            if (len == 0)
                break;
        } else if (c == '"' || c == '\\') {
            e[0] = '\\', e[1] = (char)c, len = 2;
        } else if (c == '\n') {
            memcpy(e, "\\n", 2), len = 2;
        } else if (c == '\t') {
            memcpy(e, "\\t", 2), len = 2;
        } else if (c == '\r') {
            memcpy(e, "\\r", 2), len = 2;
        } else if (c <= 0x7f) {
            memcpy(e, "\\u00", 4), e[4] = hex[c >> 4], e[5] = hex[c & 15], len = 6;
        } else if ((used = utf8_len(p + i, n - i)) != 0) {
            piece = s + i, len = used;
        } else {
            memcpy(e, "\\ufffd", 6), len = 6, used = 1;
        }
        if (len > end - o->len)
            break;
        memcpy(o->p + o->len, piece, len);
        o->len += len;
        i += used;
    }
    o->p[o->len++] = '"';
}

/*
 * Room a string leaves after it: for the call's fields, what the message
 * and the tail need at least; for the message, the tail (",\"prog\":",
 * the program's name, ",\"pid\":N}" and the newline).
 */
#define ROOM_FIELD 160
#define ROOM_MESSAGE 64
#define ROOM_PROG 32
/* The most a call's field or the event takes, so that one long id leaves the others and the message room. */
#define FIELD_MAX 256

static void put_field(out_t *o, const char *name, const char *value)
{
    if (value == NULL || *value == '\0' || o->cap - o->len < ROOM_FIELD + strlen(name) + 8)
        return;
    puts_(o, ",\"");
    puts_(o, name);
    puts_(o, "\":");
    put_string(o, value, ROOM_FIELD, FIELD_MAX);
}

/*
 * The one writer of both formats: the line built on the stack, then one
 * write(2) (a line under PIPE_BUF lands whole on a pipe that other
 * processes write to; O_APPEND keeps a file's lines whole). Safe from any
 * thread: nothing here is shared but what the start-up set.
 */
static void vlog(tp_log_level_t level, const char *event, const tp_log_call_t *call, const char *fmt, va_list ap)
{
    char msg[TP_LOG_LINE];
    int saved = errno;
    if (log_format == TP_LOG_TEXT) {
        int n = snprintf(msg, sizeof msg, "%s: %s", prog_name, level_text[level]);
        if (n < 0 || (size_t)n >= sizeof msg)
            n = 0;
        int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
        if (len > sizeof msg - 2)
            len = sizeof msg - 2;
        msg[len++] = '\n';
        (void)tp_write_all(log_fd, msg, len);
        errno = saved;
        return;
    }
    if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
        msg[0] = '\0';
    char line[PIPE_BUF];                  /* whole on a pipe that the workers share */
    out_t o = {line, 0, sizeof line - 1}; /* the newline's byte kept */
    struct timespec ts;
    struct tm tm;
    char when[48];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);
    puts_(&o, "{\"time\":\"");
    puts_(&o, when);
    puts_(&o, "\",\"level\":\"");
    puts_(&o, level_json[level]);
    puts_(&o, "\",\"event\":");
    put_string(&o, event, ROOM_FIELD, FIELD_MAX);
    if (call) {
        put_field(&o, "call_id", call->call_id);
        put_field(&o, "job", call->job);
        put_field(&o, "tool", call->tool);
        if (call->attempt) {
            char a[24];
            snprintf(a, sizeof a, ",\"attempt\":%u", call->attempt);
            puts_(&o, a);
        }
    }
    puts_(&o, ",\"message\":");
    put_string(&o, msg, ROOM_MESSAGE, SIZE_MAX);
    puts_(&o, ",\"prog\":");
    put_string(&o, prog_name, ROOM_PROG, FIELD_MAX);
    char tail[32];
    snprintf(tail, sizeof tail, ",\"pid\":%ld}", (long)getpid());
    puts_(&o, tail);
    line[o.len++] = '\n';
    (void)tp_write_all(log_fd, line, o.len);
    errno = saved;
}

#define TP_LOG_FN(name, level)                                                                                         \
    void name(const char *event, const char *fmt, ...)                                                                 \
    {                                                                                                                  \
        va_list ap;                                                                                                    \
        va_start(ap, fmt);                                                                                             \
        vlog(level, event, NULL, fmt, ap);                                                                             \
        va_end(ap);                                                                                                    \
    }
TP_LOG_FN(tp_log_error, TP_LOG_ERROR)
TP_LOG_FN(tp_log_warn, TP_LOG_WARN)
TP_LOG_FN(tp_log_info, TP_LOG_INFO)

void tp_log_call_error(const char *event, const tp_log_call_t *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(TP_LOG_ERROR, event, call, fmt, ap);
    va_end(ap);
}

void tp_log_call_warn(const char *event, const tp_log_call_t *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(TP_LOG_WARN, event, call, fmt, ap);
    va_end(ap);
}

void tp_log_call_info(const char *event, const tp_log_call_t *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(TP_LOG_INFO, event, call, fmt, ap);
    va_end(ap);
}

void tp_log_json_event(tp_log_level_t level, const char *event, const tp_log_call_t *call, const char *fmt, ...)
{
    if (log_format != TP_LOG_JSON)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, event, call, fmt, ap);
    va_end(ap);
}
