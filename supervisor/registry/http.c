/*
 * The http tool form, once read: its method and body mode checked, its
 * URL's placeholders well formed, and its secrets resolved.
 *
 * A secret is written ${env:NAME} (the variable's value) or ${file:PATH}
 * (the file's content, one trailing line break dropped; PATH relative to
 * the file that declared the tool), in the URL or a header's value. It is
 * resolved now, at load, so a missing one is a registry error that names
 * it; the resolved text goes only into http_target and http_header_lines,
 * which reach the worker's Call and nothing that is shown (results, logs,
 * the tools' exports keep the declared text).
 */
#include "registry_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

/* The five methods a tool may use. */
static bool known_method(const char *m)
{
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(m, methods[i]) == 0)
            return true;
    return false;
}

/* Whether the URL's {NAME} placeholders are well formed (a secret's ${...} is none); *bad the first that is not. */
static bool placeholders_ok(const char *url, const char **bad)
{
    for (const char *p = url; (p = strpbrk(p, "{}")) != NULL;) {
        *bad = p;
        if (*p == '{' && p > url && p[-1] == '$') {
            const char *end = strchr(p, '}');
            if (end == NULL)
                return false;
            p = end + 1;
            continue;
        }
        if (*p == '}')
            return false;
        const char *end = strchr(p + 1, '}');
        if (end == NULL || end == p + 1)
            return false;
        for (const char *q = p + 1; q < end; q++)
            if (*q == '{' || *q == '$' || *q == '/')
                return false;
        p = end + 1;
    }
    return true;
}

/* A file's content for ${file:PATH}, one trailing line break dropped; NULL with errno. */
static char *read_secret_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    tp_buf_t b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (tp_buf_append(&b, chunk, n) < 0) {
            fclose(f);
            tp_buf_free(&b);
            errno = ENOMEM;
            return NULL;
        }
    int err = ferror(f) ? EIO : 0;
    fclose(f);
    if (err || tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        errno = err ? err : ENOMEM;
        return NULL;
    }
    *len = b.len - 1;
    if (*len > 0 && b.data[*len - 1] == '\n')
        b.data[--*len] = 0;
    if (*len > 0 && b.data[*len - 1] == '\r')
        b.data[--*len] = 0;
    return (char *)b.data;
}

/*
 * text with every ${env:NAME} and ${file:PATH} replaced, into *out
 * (malloc'd); a line break in a resolved value is refused where one
 * cannot go (a header). The loader stands where text was written.
 */
/* Keeps a secret's value, for the worker to redact from what it answers. */
static int keep_secret(tp_tool_t *tool, const char *val, size_t len)
{
    size_t n = 0;
    while (tool->http_secrets && tool->http_secrets[n])
        n++;
    char **v = realloc(tool->http_secrets, (n + 2) * sizeof *v);
    if (v == NULL)
        return TP_ENOMEM;
    tool->http_secrets = v;
    if ((v[n] = strndup(val, len)) == NULL)
        return TP_ENOMEM;
    v[n + 1] = NULL;
    return 0;
}

static int resolve(loader_t *ld, tp_tool_t *tool, const char *text, bool in_url, char **out)
{
    tp_buf_t b = {0};
    const char *p = text;
    int rc = 0;
    for (const char *s; rc == 0 && (s = strstr(p, "${")) != NULL;) {
        const char *end = strchr(s, '}');
        bool env = strncmp(s, "${env:", 6) == 0, file = strncmp(s, "${file:", 7) == 0;
        if (end == NULL || !(env || file)) {
            rc = reg_fail(ld, "\"${\" starts a secret: ${env:NAME} or ${file:PATH}, closed by \"}\"");
            break;
        }
        const char *name = s + (env ? 6 : 7);
        size_t nlen = (size_t)(end - name);
        char ref[300];
        snprintf(ref, sizeof ref, "%.*s", (int)(end + 1 - s > 290 ? 290 : end + 1 - s), s);
        char *key = strndup(name, nlen);
        if (key == NULL || tp_buf_append(&b, p, (size_t)(s - p)) < 0) {
            free(key);
            rc = reg_fail_oom(ld);
            break;
        }
        const char *val = NULL;
        char *owned = NULL;
        size_t vlen = 0;
        if (nlen == 0) {
            rc = reg_fail(ld, "%s names nothing", ref);
        } else if (env) {
            if ((val = getenv(key)) == NULL)
                rc = reg_fail(ld, "%s: the environment variable %s is not set", ref, key);
            else
                vlen = strlen(val);
        } else {
            char path[4200];
            if (key[0] == '/')
                snprintf(path, sizeof path, "%s", key);
            else
                snprintf(path, sizeof path, "%s/%s", ld->reg->dir, key);
            if ((val = owned = read_secret_file(path, &vlen)) == NULL)
                rc = errno == ENOMEM ? reg_fail_oom(ld)
                                     : reg_fail(ld, "%s: cannot read %s: %s", ref, path, strerror(errno));
        }
        if (rc == 0 && !in_url && (memchr(val, '\n', vlen) != NULL || memchr(val, '\r', vlen) != NULL))
            rc = reg_fail(ld, "%s holds a line break, which a header cannot", ref);
        if (rc == 0 && in_url && (memchr(val, '{', vlen) != NULL || memchr(val, '}', vlen) != NULL))
            rc = reg_fail(ld, "%s holds a brace, which the URL would take for a placeholder", ref);
        if (rc == 0 && (tp_buf_append(&b, val, vlen) < 0 || keep_secret(tool, val, vlen) < 0))
            rc = reg_fail_oom(ld);
        if (owned) {
            explicit_bzero(owned, vlen);
            free(owned);
        }
        free(key);
        p = end + 1;
    }
    if (rc == 0 && (tp_buf_append(&b, p, strlen(p) + 1) < 0))
        rc = reg_fail_oom(ld);
    if (rc < 0) {
        if (b.data)
            explicit_bzero(b.data, b.cap);
        tp_buf_free(&b);
        return rc;
    }
    *out = (char *)b.data;
    return 0;
}

int reg_http_finish(loader_t *ld, tp_tool_t *tool)
{
    if (tool->http_method == NULL && (tool->http_method = strdup("GET")) == NULL)
        return reg_fail_oom(ld);
    if (!known_method(tool->http_method))
        return FAIL_AT(ld, tool, "http", "\"method\" %.40s: expected GET, POST, PUT, PATCH or DELETE",
                       tool->http_method);
    if (tool->http_body && strcmp(tool->http_body, "args") != 0)
        return FAIL_AT(ld, tool, "http",
                       "\"body\" %.40s: expected \"args\" (GET and DELETE then send the args as a body too)",
                       tool->http_body);
    const char *bad;
    if (!placeholders_ok(tool->http_url, &bad))
        return FAIL_AT(ld, tool, "http", "\"url\": a placeholder is {NAME}, the name of an arg (wrong at \"%.20s\")",
                       bad);
    where_t saved = ld->at;
    reg_where_setting(ld, tool, "http");
    mark_t m = reg_where_key(&ld->at, "url");
    int rc = resolve(ld, tool, tool->http_url, true, &tool->http_target);
    reg_where_pop(&ld->at, m);
    size_t n = 0;
    while (tool->http_headers && tool->http_headers[n])
        n++;
    if (rc == 0 && n > 0 && (tool->http_header_lines = calloc(n + 1, sizeof *tool->http_header_lines)) == NULL)
        rc = reg_fail_oom(ld);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *h = tool->http_headers[i], *eq = strchr(h, '=');
        char name[256], *value = NULL;
        snprintf(name, sizeof name, "%.*s", (int)(eq - h), h);
        m = reg_where_key(&ld->at, "headers");
        mark_t k = reg_where_key(&ld->at, name);
        rc = eq - h >= (ptrdiff_t)sizeof name ? reg_fail(ld, "a header's name is longer than 255 bytes")
                                              : resolve(ld, tool, eq + 1, false, &value);
        reg_where_pop(&ld->at, k);
        reg_where_pop(&ld->at, m);
        if (rc == 0) {
            size_t len = strlen(name) + strlen(value) + 3;
            if ((tool->http_header_lines[i] = malloc(len)) == NULL)
                rc = reg_fail_oom(ld);
            else
                snprintf(tool->http_header_lines[i], len, "%s: %s", name, value);
            explicit_bzero(value, strlen(value));
            free(value);
        }
    }
    ld->at = saved;
    return reg_fail_then_reset(ld, rc);
}
