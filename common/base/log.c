#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static const char *prog_name = "toolpool";

void tp_log_init(const char *prog)
{
    prog_name = prog;
}

static void vlog(const char *level, const char *fmt, va_list ap)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "%s: %s", prog_name, level);
    if (n < 0 || (size_t)n >= sizeof line)
        n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    fprintf(stderr, "%s\n", line);
}

void tp_log_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("error: ", fmt, ap);
    va_end(ap);
}

void tp_log_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("warning: ", fmt, ap);
    va_end(ap);
}

void tp_log_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}
