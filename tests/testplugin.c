/*
 * A plugin of well-behaved and misbehaving tools for the pool tests.
 *
 *   noop            {}
 *   echo            the args back
 *   pid             {"pid": the worker's pid}
 *   sleep           sleeps args.ms milliseconds, then {"slept": ms}
 *   segv            dies of SIGSEGV
 *   flaky           ServerError until attempt args.ok_at, then {"attempt": n}
 *   rate            RateLimited with retry_after_ms args.after on attempt 1, then ok
 *   deny            PermissionDenied
 *   custom          fails with the kind "QuotaGone" (not in the taxonomy)
 *   big             a string of args.n bytes
 *   costly          {} with a cost of args.cents / 100
 *   logged          appends its call id to the file args.log (one line per
 *                   execution: the proof that a call did or did not run
 *                   twice), sleeps args.ms, then {"i": args.i}
 *   escape          starts `sleep 300` in a session of its own, named
 *                   args.marker in its argv, sleeps args.ms, then {}
 *   hog*            mallocs args.mb megabytes and touches them, then frees
 *                   them: {"mb": n}; when malloc fails, returns 1 (failed),
 *                   as a plugin that gives up on NULL does
 *   spin*           burns CPU until something stops it
 *   leak            mallocs args.mb megabytes (10 by default), touches them
 *                   and keeps them for good: {"pid": the worker's pid}
 */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <toolpool/plugin.h>
#include <unistd.h>

/* The integer after "key": in a flat args object; def when absent. */
static long arg_long(const char *args, const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(args, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : def;
}

extern char **environ;

/* The string value of "key" in a flat args object, into buf ("" when absent). */
static const char *arg_str(const char *args, const char *key, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(args, pat);
    buf[0] = 0;
    if (p) {
        p += strlen(pat);
        size_t n = strcspn(p, "\"");
        snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    }
    return buf;
}

/* leak's memory, kept where a leak checker still sees it: leaked on purpose, not lost. */
char *testplugin_kept[4096];
static int n_kept;

static char *fmt(const char *f, long v)
{
    char *s = malloc(64);
    snprintf(s, 64, f, v);
    return s;
}

int tp_plugin_call_v1(const tp_plugin_call_t *call, tp_plugin_reply_t *reply)
{
    const char *t = call->tool;
    if (strcmp(t, "noop") == 0) {
        reply->result = strdup("{}");
    } else if (strcmp(t, "echo") == 0) {
        reply->result = strndup(call->args, call->args_len);
    } else if (strcmp(t, "pid") == 0) {
        reply->result = fmt("{\"pid\":%ld}", (long)getpid());
    } else if (strcmp(t, "sleep") == 0) {
        long ms = arg_long(call->args, "ms", 100);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
        reply->result = fmt("{\"slept\":%ld}", ms);
    } else if (strcmp(t, "segv") == 0) {
        raise(SIGSEGV);
    } else if (strcmp(t, "flaky") == 0) {
        if ((long)call->attempt < arg_long(call->args, "ok_at", 2)) {
            reply->error = "ServerError";
            reply->message = strdup("503: try again");
        } else {
            reply->result = fmt("{\"attempt\":%ld}", (long)call->attempt);
        }
    } else if (strcmp(t, "rate") == 0) {
        if (call->attempt == 1) {
            reply->error = "RateLimited";
            reply->retry_after_ms = arg_long(call->args, "after", 100);
        } else {
            reply->result = strdup("{\"ok\":true}");
        }
    } else if (strcmp(t, "deny") == 0) {
        reply->error = "PermissionDenied";
        reply->message = strdup("403");
    } else if (strcmp(t, "custom") == 0) {
        reply->error = "QuotaGone";
    } else if (strcmp(t, "big") == 0) {
        long n = arg_long(call->args, "n", 10);
        char *s = malloc((size_t)n + 3);
        s[0] = '"';
        memset(s + 1, 'x', (size_t)n);
        s[n + 1] = '"';
        s[n + 2] = 0;
        reply->result = s;
    } else if (strcmp(t, "logged") == 0) {
        char path[512] = "";
        const char *p = strstr(call->args, "\"log\":\"");
        if (p) {
            p += 7;
            size_t n = strcspn(p, "\"");
            snprintf(path, sizeof path, "%.*s", (int)(n < sizeof path ? n : sizeof path - 1), p);
        }
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd < 0) {
            reply->error = "ToolError";
            reply->message = strdup("logged: cannot open args.log");
            return 0;
        }
        char line[256];
        int n = snprintf(line, sizeof line, "%s\n", call->call_id);
        if (write(fd, line, (size_t)n) != n)
            reply->error = "ToolError";
        close(fd);
        long ms = arg_long(call->args, "ms", 0);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (ms > 0 && nanosleep(&ts, &ts) != 0)
            ;
        if (reply->error == NULL)
            reply->result = fmt("{\"i\":%ld}", arg_long(call->args, "i", 0));
    } else if (strcmp(t, "escape") == 0) {
        char marker[128];
        arg_str(call->args, "marker", marker, sizeof marker);
        char *argv[] = {"bash", "-c", "exec -a \"$0\" sleep 300", marker, NULL};
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
        pid_t pid;
        int rc = posix_spawnp(&pid, "bash", NULL, &attr, argv, environ);
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            reply->error = "ToolError";
            return 0;
        }
        long ms = arg_long(call->args, "ms", 0);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (ms > 0 && nanosleep(&ts, &ts) != 0)
            ;
        reply->result = strdup("{}");
    } else if (strncmp(t, "hog", 3) == 0) {
        size_t n = (size_t)arg_long(call->args, "mb", 1) << 20;
        char *p = malloc(n);
        if (p == NULL)
            return 1;
        memset(p, 1, n);
        __asm__ volatile("" : : "r"(p) : "memory"); /* used: not optimized away */
        free(p);
        reply->result = fmt("{\"mb\":%ld}", arg_long(call->args, "mb", 1));
    } else if (strcmp(t, "leak") == 0) {
        size_t n = (size_t)arg_long(call->args, "mb", 10) << 20;
        char *p = malloc(n);
        if (p == NULL || n_kept == 4096)
            return 1;
        memset(p, 1, n);
        testplugin_kept[n_kept++] = p;
        reply->result = fmt("{\"pid\":%ld}", (long)getpid());
    } else if (strncmp(t, "spin", 4) == 0) {
        volatile unsigned long x = 0;
        for (;;)
            x++;
    } else if (strcmp(t, "costly") == 0) {
        reply->result = strdup("{}");
        reply->cost = (double)arg_long(call->args, "cents", 50) / 100.0;
    } else {
        reply->error = "NotFound";
    }
    return 0;
}
