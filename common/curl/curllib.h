/*
 * libcurl, loaded the first time something needs it.
 *
 * libcurl brings some thirty libraries of its own (TLS, HTTP/2, IDN,
 * Kerberos, LDAP...): linked into the program, a start of toolpool or of a
 * worker paid about 5 ms in the dynamic loader for them, in every run and
 * at every worker's respawn, whether or not a call used HTTP. Only the http
 * adapter (worker/http.c) and the OTLP exporter (supervisor/otlp) use it,
 * so they call tp_curl_load() first and reach libcurl through tp_curl's
 * function pointers: the same functions, with the types curl.h gives them.
 *
 * The library is "libcurl.so.4" (its soname since 2006), or the name or
 * path in TOOLPOOL_LIBCURL. A machine without it runs everything else; an
 * http call or an OTLP export then fails with dlopen's reason.
 */
#ifndef TP_CURLLIB_H
#define TP_CURLLIB_H

#include <stddef.h>

#include <curl/curl.h>

#define TP_CURL_SONAME "libcurl.so.4"

/* Every libcurl function toolpool calls, by its name without "curl_". */
#define TP_CURL_FUNCTIONS(X)                                                                                           \
    X(global_init)                                                                                                     \
    X(global_cleanup)                                                                                                  \
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
 * Loads libcurl once: 0, or -1 with why (the library's name and dlerror's
 * words, or a function it lacks) in err. A failure is remembered and
 * returned again. It stays loaded; curl_global_init and its cleanup are the
 * caller's, as they were. Not thread-safe: call it before starting a
 * thread that uses tp_curl.
 */
int tp_curl_load(char *err, size_t n);

#endif
