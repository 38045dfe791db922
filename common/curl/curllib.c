#include "curllib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct tp_curl tp_curl;

static int state; /* 0 not tried, 1 loaded, -1 failed (why in failure) */
static char failure[512];

static int load(void)
{
    const char *name = getenv("TOOLPOOL_LIBCURL");
    if (name == NULL || *name == 0)
        name = TP_CURL_SONAME;
    /* RTLD_LOCAL: its symbols serve only these pointers, never a plugin's lookups. */
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "cannot load libcurl (%s): %s", name, why ? why : "dlopen failed");
        return -1;
    }
#define TP_CURL_RESOLVE(f)                                                                                             \
    if ((*(void **)&tp_curl.f = dlsym(lib, "curl_" #f)) == NULL) {                                                     \
        snprintf(failure, sizeof failure, "%s has no curl_%s: older than the libcurl toolpool was built with", name,   \
                 #f);                                                                                                  \
        dlclose(lib);                                                                                                  \
        return -1;                                                                                                     \
    }
    TP_CURL_FUNCTIONS(TP_CURL_RESOLVE)
#undef TP_CURL_RESOLVE
    return 1;
}

int tp_curl_load(char *err, size_t n)
{
    if (state == 0)
        state = load();
    if (state < 0 && n > 0)
        snprintf(err, n, "%s", failure);
    return state > 0 ? 0 : -1;
}
