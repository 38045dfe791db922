/*
 * Diagnostics, in one of two formats. Text (the default): a line on stderr
 * prefixed with the program's name and the level, "toolpool: warning: ...".
 * JSON (--log-format json, TOOLPOOL_LOG_FORMAT=json): one object a line,
 * {"time", "level", "event", "message", "prog", "pid"} and, for a message
 * about one call, "call_id", "job", "tool" and "attempt", for journald and
 * log shippers. Either goes to stderr or to a file opened for appending
 * (--log-file, TOOLPOOL_LOG_FILE), a line in one write(2).
 *
 * Every message has an event name, a dotted lowercase name that says what
 * happened ("store.commit_failed"); the text format does not print it.
 * docs/logs.md lists every event (tests/logs_test.py checks the list
 * against the sources).
 */
#ifndef TP_LOG_H
#define TP_LOG_H

#include <stddef.h>

typedef enum { TP_LOG_TEXT, TP_LOG_JSON } tp_log_format_t;

typedef enum { TP_LOG_ERROR, TP_LOG_WARN, TP_LOG_INFO } tp_log_level_t;

/* The call a message is about; a NULL or empty string, or attempt 0, is left out. */
typedef struct {
    const char *call_id;
    const char *job;
    const char *tool;
    unsigned attempt;
} tp_log_call_t;

void tp_log_init(const char *prog);

/*
 * Sets the format from its name ("text" or "json"); NULL keeps it.
 * 0, or -1 with err filled for an unknown name.
 */
int tp_log_set_format(const char *name, char *err, size_t errlen);

/*
 * Sends the lines to path, opened for appending (created 0644); NULL or ""
 * sends them back to stderr. 0, or -1 with err filled.
 */
int tp_log_set_file(const char *path, char *err, size_t errlen);

/*
 * TOOLPOOL_LOG_FORMAT and TOOLPOOL_LOG_FILE, when set, as the two calls
 * above; a bad value is logged and ignored. Then, when unset_after, both
 * are removed from the environment, so what the process starts (a worker's
 * tools) does not inherit them.
 */
void tp_log_from_env(int unset_after);

/*
 * Puts the format and file in effect into TOOLPOOL_LOG_FORMAT and
 * TOOLPOOL_LOG_FILE (the file's absolute path), for the workers the
 * supervisor starts; removes them when they are the defaults.
 */
void tp_log_export_env(void);

tp_log_format_t tp_log_format(void);

void tp_log_error(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tp_log_warn(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line with no level in text (a notice; an MCP server's stderr), "info" in JSON. */
void tp_log_info(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same, about one call: its id, job, tool and attempt are fields of the JSON line. */
void tp_log_call_error(const char *event, const tp_log_call_t *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tp_log_call_warn(const char *event, const tp_log_call_t *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tp_log_call_info(const char *event, const tp_log_call_t *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * An event only the JSON format writes (text prints nothing, so the text
 * output stays what it was): a worker killed at a timeout, one that
 * crashed. call may be NULL.
 */
void tp_log_json_event(tp_log_level_t level, const char *event, const tp_log_call_t *call, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
