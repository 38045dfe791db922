/*
 * libcurl, loaded the first time something needs it.
 *
 * libcurl brings some thirty libraries of its own (TLS, HTTP/2, IDN,
 * Kerberos, LDAP...): linked into the program, a start of toolpool or of a
 * worker paid about 5 ms in the dynamic loader for them, in every run and
 * at every worker's respawn, whether or not a call used HTTP. Only the http
 * adapter (worker/http.c, as a worker of a registry with http tools starts)
 * and the OTLP exporter (supervisor/otlp) use it, so they call
 * tp_curl_load() first and reach libcurl through tp_curl's function
 * pointers: the same functions, with the types curl.h gives them.
 *
 * The library is the one it was built against, opened by its path, else
 * by its soname ("libcurl.so.4", or "libcurl-gnutls.so.4" for a build on
 * that flavour), or the name or path in TOOLPOOL_LIBCURL; 7.85 or newer.
 * A machine without it runs every other tool: an http call fails ToolError
 * with dlopen's reason, and an OTLP exporter does not start.
 */
#ifndef TP_CURLLIB_H
#define TP_CURLLIB_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

/* The library toolpool was built against (common/CMakeLists.txt reads its soname), else libcurl's own. */
#ifndef TP_CURL_SONAME
#define TP_CURL_SONAME "libcurl.so.4"
#endif
#ifndef TP_CURL_PATH
#define TP_CURL_PATH TP_CURL_SONAME
#endif
/* CURLOPT_PROTOCOLS_STR, which the http adapter sets, came in 7.85.0. */
#define TP_CURL_VERSION_MIN 0x075500

/* Every libcurl function toolpool calls, by its name without "curl_". */
#define TP_CURL_FUNCTIONS(X)                                                                                           \
    X(global_init)                                                                                                     \
    X(global_cleanup)                                                                                                  \
    X(version_info)                                                                                                    \
    X(free)                                                                                                            \
    X(getdate)                                                                                                         \
    X(easy_init)                                                                                                       \
    X(easy_cleanup)                                                                                                    \
    X(easy_reset)                                                                                                      \
    X(easy_setopt)                                                                                                     \
    X(easy_getinfo)                                                                                                    \
    X(easy_perform)                                                                                                    \
    X(easy_strerror)                                                                                                   \
    X(easy_escape)                                                                                                     \
    X(slist_append)                                                                                                    \
    X(slist_free_all)                                                                                                  \
    X(url)                                                                                                             \
    X(url_set)                                                                                                         \
    X(url_get)                                                                                                         \
    X(url_cleanup)                                                                                                     \
    X(multi_init)                                                                                                      \
    X(multi_cleanup)                                                                                                   \
    X(multi_add_handle)                                                                                                \
    X(multi_remove_handle)                                                                                             \
    X(multi_perform)                                                                                                   \
    X(multi_poll)                                                                                                      \
    X(multi_info_read)

#define TP_CURL_POINTER(f) __typeof__(curl_##f) *f;
struct tp_curl {
    TP_CURL_FUNCTIONS(TP_CURL_POINTER)
};
#undef TP_CURL_POINTER

/* Set by the first tp_curl_load that succeeds; not to be used before. */
extern struct tp_curl tp_curl;

/*
 * Loads libcurl, once it works: 0, or -1 with why (dlerror's words, a
 * function it lacks, its version) in err; tp_curl is set only when every
 * function is found, and a failure is tried again at the next call. It
 * stays loaded; curl_global_init and its cleanup are the caller's. Not
 * thread-safe: call it before starting a thread that uses tp_curl.
 */
int tp_curl_load(char *err, size_t n);

#endif
