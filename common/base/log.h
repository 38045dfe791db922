/* Diagnostics on stderr, prefixed with the program's name. */
#ifndef TP_LOG_H
#define TP_LOG_H

void tp_log_init(const char *prog);
void tp_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tp_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A line of someone else's (an MCP server's stderr), under the program's name, no level. */
void tp_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
