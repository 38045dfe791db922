#include "owners.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"

#define OWNERS_KEY "owners"

/* Field 22 of /proc/PID/stat (starttime), or 0 when there is no such process. */
static uint64_t proc_start(int32_t pid)
{
    tp_proc_stat_t st;
    return tp_proc_stat(-1, (pid_t)pid, &st) == 0 ? st.start : 0;
}

int tp_owner_self(tp_owner_id_t *me)
{
    memset(me, 0, sizeof *me);
    me->pid = (int32_t)getpid();
    me->start = proc_start(me->pid);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, me->boot, sizeof me->boot - 1);
        close(fd);
        while (n > 0 && (me->boot[n - 1] == '\n' || me->boot[n - 1] == 0))
            me->boot[--n] = 0;
    }
    return me->start ? 0 : -1;
}

bool tp_owner_is(const tp_owner_id_t *me, int32_t pid, uint64_t start, const char *boot)
{
    return pid == me->pid && start == me->start && strcmp(boot ? boot : "", me->boot) == 0;
}

bool tp_owner_alive(const tp_owner_id_t *me, int32_t pid, uint64_t start, const char *boot)
{
    if (pid <= 0 || strcmp(boot ? boot : "", me->boot) != 0)
        return false; /* no owner named, or one of an earlier boot */
    return proc_start(pid) == start;
}

int tp_owners_read(tp_store_t *s, MDB_txn *txn, Toolpool__Owners **out)
{
    *out = NULL;
    int rc = tp_store_get_msg(s, txn, TP_DB_META, OWNERS_KEY, sizeof OWNERS_KEY - 1, &toolpool__owners__descriptor,
                              (ProtobufCMessage **)out);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/*
 * Writes the owners of o that pass keep (and add, when not NULL) back,
 * with generation. The entries stay o's.
 */
static int put(tp_store_t *s, MDB_txn *txn, const Toolpool__Owners *o, const bool *keep, Toolpool__Owner *add,
               uint64_t generation)
{
    size_t n = o ? o->n_owners : 0, k = 0;
    Toolpool__Owner **v = malloc((n + 1) * sizeof *v);
    if (v == NULL)
        return TP_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (keep[i])
            v[k++] = o->owners[i];
    if (add)
        v[k++] = add;
    Toolpool__Owners w = TOOLPOOL__OWNERS__INIT;
    w.generation = generation;
    w.owners = v;
    w.n_owners = k;
    int rc = tp_store_put_msg(s, txn, TP_DB_META, OWNERS_KEY, sizeof OWNERS_KEY - 1, &w.base);
    free(v);
    return rc;
}

int tp_owners_sync(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, tp_owners_state_t *st)
{
    MDB_val k = {sizeof OWNERS_KEY - 1, (void *)OWNERS_KEY}, raw = {0, NULL};
    int rc = mdb_get(txn, tp_store_dbi(s, TP_DB_META), &k, &raw);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return tp_mdb(rc);
    if (rc == 0 && st->seen_len > 0 && raw.mv_size == st->seen_len &&
        memcmp(raw.mv_data, st->seen, st->seen_len) == 0) {
        st->dropped = 0;
        return 0;
    }
    st->seen_len = 0;
    Toolpool__Owners *o;
    rc = tp_owners_read(s, txn, &o);
    if (rc)
        return rc;
    size_t n = o ? o->n_owners : 0;
    bool *keep = calloc(n + 1, sizeof *keep), changed = false, found = false;
    if (keep == NULL) {
        toolpool__owners__free_unpacked(o, NULL);
        return TP_ENOMEM;
    }
    uint64_t generation = o ? o->generation : 0;
    st->others = 0;
    st->dropped = 0;
    for (size_t i = 0; i < n; i++) {
        const Toolpool__Owner *w = o->owners[i];
        if (tp_owner_is(me, w->pid, w->start, w->boot)) {
            keep[i] = true;
            found = true;
            st->joined = w->joined_generation;
            continue;
        }
        keep[i] = tp_owner_alive(me, w->pid, w->start, w->boot);
        changed |= !keep[i];
        st->others += keep[i];
        st->dropped += !keep[i];
    }
    Toolpool__Owner mine = TOOLPOOL__OWNER__INIT;
    if (!found) {
        mine.pid = me->pid;
        mine.start = me->start;
        mine.boot = (char *)me->boot;
        mine.scoreboard = (char *)me->board;
        mine.joined_generation = mine.seen_generation = ++generation;
        mine.joined_unix_us = tp_unix_us();
        st->joined = generation;
        changed = true;
    }
    st->generation = generation;
    st->peers_ready = true;
    for (size_t i = 0; i < n; i++)
        if (keep[i] && !tp_owner_is(me, o->owners[i]->pid, o->owners[i]->start, o->owners[i]->boot) &&
            o->owners[i]->seen_generation < st->joined)
            st->peers_ready = false;
    if (changed)
        rc = put(s, txn, o, keep, found ? NULL : &mine, generation);
    else if (st->others == 0 && raw.mv_size <= sizeof st->seen) {
        memcpy(st->seen, raw.mv_data, raw.mv_size);
        st->seen_len = raw.mv_size;
    }
    free(keep);
    toolpool__owners__free_unpacked(o, NULL);
    return rc;
}

/* Rewrites my entry (seen = generation; status, when not NULL), or drops it (leave). */
static int update_me(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, uint64_t generation, bool leave,
                     const tp_owner_status_t *status)
{
    Toolpool__Owners *o;
    int rc = tp_owners_read(s, txn, &o);
    if (rc || o == NULL)
        return rc;
    bool *keep = calloc(o->n_owners + 1, sizeof *keep);
    if (keep == NULL) {
        toolpool__owners__free_unpacked(o, NULL);
        return TP_ENOMEM;
    }
    Toolpool__Owner *mine = NULL;
    char *was = NULL;
    for (size_t i = 0; i < o->n_owners; i++) {
        Toolpool__Owner *w = o->owners[i];
        keep[i] = true;
        if (tp_owner_is(me, w->pid, w->start, w->boot)) {
            if (leave)
                keep[i] = false;
            else if (w->seen_generation < generation)
                w->seen_generation = generation;
            if (status) {
                /* The command is the caller's while the record is written; the unpacked one is put back to be freed. */
                mine = w;
                was = w->command;
                w->command = (char *)(status->command ? status->command : "");
                w->total = status->total;
                w->done = status->done;
                w->running = status->running;
                w->waiting = status->waiting;
                w->status_unix_us = tp_unix_us();
            }
        }
    }
    rc = put(s, txn, o, keep, NULL, o->generation);
    if (mine)
        mine->command = was;
    free(keep);
    toolpool__owners__free_unpacked(o, NULL);
    return rc;
}

int tp_owners_ack(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, uint64_t generation)
{
    return update_me(s, txn, me, generation, false, NULL);
}

int tp_owners_status(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me, const tp_owner_status_t *status)
{
    return update_me(s, txn, me, 0, false, status);
}

int tp_owners_leave(tp_store_t *s, MDB_txn *txn, const tp_owner_id_t *me)
{
    return update_me(s, txn, me, 0, true, NULL);
}

int tp_owners_generation(tp_store_t *s, MDB_txn *txn, uint64_t *generation)
{
    Toolpool__Owners *o;
    int rc = tp_owners_read(s, txn, &o);
    *generation = o ? o->generation : 0;
    toolpool__owners__free_unpacked(o, NULL);
    return rc;
}
