/*
 * toolpool store compact: gives back the space that pruned results left.
 *
 * LMDB never shrinks its file: pages freed go to its freelist, for later
 * writes. A compacted copy (store.h's tp_store_copy_compact: every record
 * rewritten in key order into full pages) holds only what is in use. The
 * copy is written beside the store (DIR/compact.new),
 * opened and read through by the checks of `store check`, its record
 * counts compared with the store's, and only then renamed over the
 * store's data file: the old file stays whole until the new one has
 * passed, and the rename is atomic, so a compact killed at any moment
 * leaves the old store or the new one.
 *
 * A process that has the store open maps its data file, and would go on
 * writing to the old one: so compact runs only while it is the only
 * process with the store open (env.c's flock of DIR/toolpool.lock, taken
 * exclusively; LMDB's own lock file asked too, for another program). A
 * toolpool that opens the store meanwhile waits until the swap is done.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "owners.h"
#include "store.h"

/* clang-format off */
static const char compact_usage[] =
    "usage: toolpool store compact [--store DIR]\n"
    "Gives back the space of dropped records (`toolpool store prune`, `forget`):\n"
    "writes a compacted copy of the store beside it (DIR/compact.new), checks it\n"
    "as `toolpool store check` does, and renames it over the store's data file.\n"
    "The old file stays until the copy has passed; killed at any moment, the\n"
    "store is the old one or the new one. Only while no other process has the\n"
    "store open: with a run, serve or mcp on it, compact refuses and names\n"
    "them. A toolpool started meanwhile waits for it.\n"
    "  -s, --store DIR   the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "exit status: 0 compacted, 2 refused (the store is in use), usage or store error\n";
/* clang-format on */

#define COMPACT_DIR "compact.new"

/* Appends " pid N" for each process /proc/locks shows holding a lock on path, but this one. */
static void lock_holders(const char *path, char *out, size_t cap)
{
    struct stat st;
    FILE *f = fopen("/proc/locks", "r");
    if (f == NULL || stat(path, &st) < 0) {
        if (f)
            fclose(f);
        return;
    }
    size_t len = strlen(out);
    char line[256];
    while (fgets(line, sizeof line, f) && len < cap - 32) {
        char type[16];
        int pid;
        (void)type;
        unsigned maj, min;
        unsigned long ino;
        if (strstr(line, "->") != NULL ||
            sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", type, &pid, &maj, &min, &ino) != 5)
            continue;
        if (ino == st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev) && pid != getpid()) {
            char one[32];
            snprintf(one, sizeof one, " %d", pid);
            if (strstr(out, one) == NULL)
                len += (size_t)snprintf(out + len, cap - len, "%s", one);
        }
    }
    fclose(f);
}

/* The live supervisors the store's owners record names, as " pid N (since T)", into out. */
static void live_owners(const char *dir, char *out, size_t cap)
{
    MDB_txn *txn;
    char err[1024];
    tp_store_t *s = tp_store_open(dir, TP_STORE_RDONLY, err, sizeof err);
    if (s == NULL || tp_store_read(s, &txn) != 0) {
        tp_store_close(s);
        return;
    }
    MDB_val k = {6, "owners"}, v;
    Toolpool__Owners *o = NULL;
    if (mdb_get(txn, tp_store_dbi(s, TP_DB_META), &k, &v) == 0)
        o = toolpool__owners__unpack(NULL, v.mv_size, v.mv_data);
    tp_owner_id_t me;
    tp_owner_self(&me);
    size_t len = strlen(out);
    for (size_t i = 0; o && i < o->n_owners && len < cap - 64; i++) {
        const Toolpool__Owner *w = o->owners[i];
        char when[32];
        if (tp_owner_alive(&me, w->pid, w->start, w->boot))
            len += (size_t)snprintf(out + len, cap - len, "%s%d (since %s)", len ? ", " : "", w->pid,
                                    tp_cli_when(w->joined_unix_us, when, sizeof when));
    }
    if (o)
        toolpool__owners__free_unpacked(o, NULL);
    mdb_txn_abort(txn);
    tp_store_close(s);
}

/* Says why the store cannot be compacted now, naming whom it can. */
static int refuse(const char *dir)
{
    char owners[1024] = "", pids[512] = "", path[4200];
    live_owners(dir, owners, sizeof owners);
    snprintf(path, sizeof path, "%s/%s", dir, TP_STORE_LOCK_FILE);
    lock_holders(path, pids, sizeof pids);
    if (owners[0])
        tp_log_error("store.compact_refused",
                     "%s: not compacted: live supervisors (run, serve or mcp) hold the store: pid %s; stop them, then "
                     "compact",
                     dir, owners);
    else
        tp_log_error("store.compact_refused",
                     "%s: not compacted: the store is open in another process (pid%s); try again when it has "
                     "closed it",
                     dir, pids[0] ? pids : " unknown");
    return 2;
}

/* Another program (not toolpool) with LMDB's lock file of the store locked: its pid, or 0. */
static pid_t lmdb_holder(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    pid_t pid = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK ? fl.l_pid : 0;
    close(fd);
    return pid;
}

/* Empties and removes DIR/compact.new (a copy a killed compact left, or this one's leftovers). 0, or -1 logged. */
static int clear_copy(const char *copy)
{
    DIR *d = opendir(copy);
    if (d == NULL)
        return errno == ENOENT ? 0 : (tp_log_error("store.compact_failed", "%s: %s", copy, strerror(errno)), -1);
    struct dirent *de;
    char path[4400];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", copy, de->d_name);
        if (unlink(path) < 0 && errno != ENOENT) {
            tp_log_error("store.compact_failed", "%s: cannot remove: %s", path, strerror(errno));
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    if (rmdir(copy) < 0 && errno != ENOENT) {
        tp_log_error("store.compact_failed", "%s: cannot remove: %s", copy, strerror(errno));
        return -1;
    }
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Syncs directory dir, so that a rename in it is on disk. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

static int compact(const char *dir)
{
    char err[1024], copy[4200], data[4200], copied[4400];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    if (access(data, F_OK) < 0) {
        tp_log_error("store.open_failed", "%s: no store here (%s: %s)", dir, data, strerror(errno));
        return 2;
    }
    tp_store_t *s = tp_store_open(dir, TP_STORE_EXCLUSIVE, err, sizeof err);
    if (s == NULL && errno == EAGAIN)
        return refuse(dir);
    if (s == NULL) {
        tp_log_error("store.open_failed", "%s", err);
        return 2;
    }
    pid_t other = lmdb_holder(dir);
    if (other) {
        tp_store_close(s);
        tp_log_error("store.compact_refused",
                     "%s: not compacted: pid %d has the store's LMDB environment open; try again when it has closed it",
                     dir, (int)other);
        return 2;
    }
    snprintf(copy, sizeof copy, "%s/%s", dir, COMPACT_DIR);
    snprintf(copied, sizeof copied, "%s/data.mdb", copy);
    uint64_t before = file_size(data);
    MDB_txn *txn;
    tp_store_space_t sp;
    int rc = clear_copy(copy) == 0 && mkdir(copy, 0755) == 0 ? 0 : -1;
    if (rc)
        tp_log_error("store.compact_failed", "%s: cannot make %s: %s", dir, copy, strerror(errno));
    if (rc == 0 && (rc = tp_store_read(s, &txn)) == 0) {
        rc = tp_store_space(s, txn, &sp);
        mdb_txn_abort(txn);
        if (rc)
            tp_log_error("store.read_failed", "%s: cannot read the store: %s", dir, tp_strerror(rc));
    }
    if (rc == 0 && (rc = tp_store_copy_compact(s, copy, err, sizeof err)) != 0)
        tp_log_error("store.compact_failed", "%s", err);
    /* The copy is checked whole, and must hold every record the store does, before it replaces it. */
    unsigned long long counts[TP_DB__COUNT] = {0};
    if (rc == 0 && (rc = tp_cli_store_check(copy, counts)) != 0)
        tp_log_error("store.compact_failed",
                     "%s: not compacted: the copy in %s did not pass its check; the store is as it was", dir, copy);
    for (int db = 0; rc == 0 && db < TP_DB__COUNT; db++)
        if (counts[db] != sp.entries[db]) {
            tp_log_error("store.compact_failed",
                         "%s: not compacted: the copy holds %llu %s records, the store %llu; the store is as it was",
                         dir, counts[db], tp_store_db_name(db), (unsigned long long)sp.entries[db]);
            rc = -1;
        }
    uint64_t after = file_size(copied);
    if (rc == 0 && (rename(copied, data) < 0 || sync_dir(dir) < 0)) {
        tp_log_error("store.compact_failed", "%s: cannot put the compacted copy in place: %s; the store is as it was",
                     dir, strerror(errno));
        rc = -1;
    }
    tp_store_close(s); /* after the swap: no process has mapped the old file in between */
    if (clear_copy(copy) != 0 && rc == 0)
        tp_log_error("store.compact_leftover", "%s: compacted, but %s is left; remove it", dir, copy);
    if (rc)
        return 2;
    char b[32], a[32];
    printf("compacted %s: %s -> %s (%llu results, %llu checkpoints; every record checked)\n", dir,
           tp_cli_size(before, b, sizeof b), tp_cli_size(after, a, sizeof a), counts[TP_DB_RESULTS],
           counts[TP_DB_JOBS]);
    return 0;
}

int tp_cmd_store_compact(int argc, char **argv)
{
    const char *dir = tp_store_default_dir();
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, compact_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(compact_usage);
    return compact(dir);
}
