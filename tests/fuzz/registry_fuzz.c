/*
 * The registry loader (supervisor/registry/registry.h) on any text: it loads, or it says
 * why in one line that starts with the file's name. The text is handed to
 * it as a file, a memfd under /proc/self/fd, as tp_registry_load reads a
 * path. A registry that loads has every tool findable by its name.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("tools.json", MFD_CLOEXEC);
    TP_FUZZ_CHECK(fd >= 0);
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        TP_FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    char path[64], err[1024];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    err[0] = 0;
    tp_registry_t *reg = tp_registry_load(path, err, sizeof err);
    if (reg == NULL) {
        TP_FUZZ_CHECK(err[0] != 0 && strncmp(err, path, strlen(path)) == 0 && strchr(err, '\n') == NULL);
    } else {
        for (size_t i = 0; i < reg->n_tools; i++)
            TP_FUZZ_CHECK(tp_registry_find(reg, reg->tools[i].name) == &reg->tools[i]);
        tp_registry_free(reg);
    }
    close(fd);
    return 0;
}
