#include "boards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "owners.h"

static int by_pid(const void *a, const void *b)
{
    const tp_live_t *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Running calls oldest first. */
static int by_age(const void *a, const void *b)
{
    const tp_sb_slot_t *x = a, *y = b;
    return (x->started_us > y->started_us) - (x->started_us < y->started_us);
}

int tp_cli_lives(tp_store_t *s, MDB_txn *txn, tp_lives_t *out)
{
    memset(out, 0, sizeof *out);
    Toolpool__Owners *o = NULL;
    tp_owner_id_t me;
    int rc = tp_owners_read(s, txn, &o);
    if (rc || o == NULL || o->n_owners == 0 || tp_owner_self(&me) != 0) {
        toolpool__owners__free_unpacked(o, NULL);
        return rc;
    }
    out->v = calloc(o->n_owners, sizeof *out->v);
    if (out->v == NULL) {
        toolpool__owners__free_unpacked(o, NULL);
        return TP_ENOMEM;
    }
    for (size_t i = 0; i < o->n_owners; i++) {
        const Toolpool__Owner *w = o->owners[i];
        if (!tp_owner_alive(&me, w->pid, w->start, w->boot))
            continue;
        tp_live_t *l = &out->v[out->n++];
        l->pid = w->pid;
        l->joined_unix_us = w->joined_unix_us;
        snprintf(l->command, sizeof l->command, "%s", w->command && w->command[0] ? w->command : "supervisor");
        tp_sb_view_t view;
        l->board_rc = w->scoreboard && w->scoreboard[0] ? tp_sb_open(&view, w->scoreboard, w->pid) : TP_ENOENT;
        if (l->board_rc == 0) {
            int got = TP_EAGAIN;
            for (int tries = 0; got == TP_EAGAIN && tries < 3; tries++)
                got = tp_sb_snapshot(view.base, view.size, &l->snap);
            l->board_rc = got;
            if (got == 0) {
                l->board = true;
                qsort(l->snap.slots, l->snap.n_busy, sizeof *l->snap.slots, by_age);
                if (l->snap.c.command[0])
                    snprintf(l->command, sizeof l->command, "%s", l->snap.c.command);
                else
                    snprintf(l->snap.c.command, sizeof l->snap.c.command, "%s", l->command);
            }
            tp_sb_close(&view);
        }
    }
    toolpool__owners__free_unpacked(o, NULL);
    qsort(out->v, out->n, sizeof *out->v, by_pid);
    return 0;
}

void tp_cli_lives_free(tp_lives_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        tp_sb_snap_free(&l->v[i].snap);
    free(l->v);
    memset(l, 0, sizeof *l);
}

void tp_cli_scrub(char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            s[i] = '?';
        else if (ch == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f)
            s[i] = s[i + 1] = '?';
    }
}
