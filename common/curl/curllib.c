#include "curllib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct tp_curl tp_curl;

static bool loaded;

/*
 * The library at name, every function resolved into got: true, or false
 * with why. Nothing of a library that fails is kept (it is closed, and
 * got is the caller's to drop).
 */
static bool open_one(const char *name, struct tp_curl *got, char *why, size_t n)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror(); /* names the file itself */
        snprintf(why, n, "cannot load libcurl: %s", e ? e : name);
        return false;
    }
    /* dlsym's object pointer stored through void **: the form POSIX gives for a function's address. */
#define TP_CURL_RESOLVE(f)                                                                                             \
    if ((*(void **)&got->f = dlsym(lib, "curl_" #f)) == NULL) {                                                        \
        snprintf(why, n, "%s is not libcurl, or older than 7.85: it has no curl_%s", name, #f);                        \
        dlclose(lib);                                                                                                  \
        return false;                                                                                                  \
    }
    TP_CURL_FUNCTIONS(TP_CURL_RESOLVE)
#undef TP_CURL_RESOLVE
    const curl_version_info_data *v = got->version_info(CURLVERSION_NOW);
    if (v == NULL || v->version_num < TP_CURL_VERSION_MIN) {
        snprintf(why, n, "%s is libcurl %s; toolpool needs 7.85 or newer", name, v && v->version ? v->version : "?");
        dlclose(lib);
        return false;
    }
    return true;
}

int tp_curl_load(char *err, size_t n)
{
    if (loaded)
        return 0;
    struct tp_curl got;
    char why[512];
    const char *name = getenv("TOOLPOOL_LIBCURL");
    bool ok;
    if (name != NULL && *name != 0) {
        ok = open_one(name, &got, why, sizeof why);
    } else {
        /*
         * The library it was built against, by its path: a soname alone would
         * match any libcurl.so.4 a plugin loaded from a folder of its own.
         * Then the soname, for a program copied to a machine laid out otherwise.
         */
        ok = open_one(TP_CURL_PATH, &got, why, sizeof why) || open_one(TP_CURL_SONAME, &got, why, sizeof why);
    }
    if (!ok) {
        /* Not remembered: a library installed meanwhile, or an fd freed, lets the next call load it. */
        if (n > 0)
            snprintf(err, n, "%s", why);
        return -1;
    }
    tp_curl = got;
    loaded = true;
    return 0;
}
