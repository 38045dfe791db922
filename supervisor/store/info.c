#include "info.h"

#include <stdio.h>
#include <string.h>

#include "owners.h"
#include "record.h"
#include "results.h"
#include "toolpool.pb-c.h"

static void add(tp_info_count_t *c, const MDB_val *k, const MDB_val *v)
{
    c->n++;
    c->bytes += k->mv_size + v->mv_size;
}

static void count_outcome(tp_store_info_t *in, const char *kind, const MDB_val *k, const MDB_val *v)
{
    size_t i = 0;
    while (i < in->n_outcomes && strcmp(in->outcomes[i].kind, kind) != 0)
        i++;
    if (i == in->n_outcomes && i < TP_INFO_OUTCOMES) {
        snprintf(in->outcomes[i].kind, sizeof in->outcomes[i].kind, "%s", i == TP_INFO_OUTCOMES - 1 ? "other" : kind);
        in->n_outcomes++;
    }
    add(&in->outcomes[i < TP_INFO_OUTCOMES ? i : TP_INFO_OUTCOMES - 1].c, k, v);
}

static void note_time(tp_store_info_t *in, const Toolpool__StoredResult *sr)
{
    uint64_t t = sr->ended_unix_us;
    if (t == 0) {
        in->undated++;
        return;
    }
    if (in->oldest_us == 0 || t < in->oldest_us) {
        in->oldest_us = t;
        snprintf(in->oldest_id, sizeof in->oldest_id, "%s", sr->result->id);
    }
    if (t >= in->newest_us) {
        in->newest_us = t;
        snprintf(in->newest_id, sizeof in->newest_id, "%s", sr->result->id);
    }
}

/* One record of db, counted where it belongs. */
static void count_one(tp_store_info_t *in, const tp_owner_id_t *me, tp_db_t db, const MDB_val *k, const MDB_val *v)
{
    switch (db) {
    case TP_DB_RESULTS: {
        Toolpool__StoredResult *sr;
        add(&in->results, k, v);
        if (tp_result_unpack(k->mv_data, k->mv_size, v->mv_data, v->mv_size, &sr) != 0) {
            in->bad++;
            return;
        }
        count_outcome(in, sr->result->ok ? "ok" : sr->result->kind, k, v);
        note_time(in, sr);
        tp_result_free(sr);
        return;
    }
    case TP_DB_JOBS:
        add(&in->checkpoints, k, v);
        return;
    case TP_DB_STEPS:
        add(&in->steps, k, v);
        return;
    case TP_DB_ESCALATIONS: {
        add(&in->escalations, k, v);
        Toolpool__Escalation *e = toolpool__escalation__unpack(NULL, v->mv_size, v->mv_data);
        if (e == NULL) {
            in->bad++;
            return;
        }
        if (!e->resolved)
            add(&in->escalations_open, k, v);
        toolpool__escalation__free_unpacked(e, NULL);
        return;
    }
    case TP_DB_BREAKERS:
        add(&in->breakers, k, v);
        add(k->mv_size && ((const char *)k->mv_data)[0] == 't' ? &in->tool_breakers : &in->call_breakers, k, v);
        return;
    case TP_DB_INFLIGHT: {
        Toolpool__InFlight *f = toolpool__in_flight__unpack(NULL, v->mv_size, v->mv_data);
        if (f == NULL) {
            add(&in->inflight, k, v);
            in->bad++;
            return;
        }
        add(f->claim_only ? &in->claims : &in->inflight, k, v);
        if (tp_owner_alive(me, f->owner_pid, f->owner_start, f->owner_boot))
            add(&in->inflight_live, k, v);
        toolpool__in_flight__free_unpacked(f, NULL);
        return;
    }
    case TP_DB_TASKS:
        add(&in->tasks, k, v);
        return;
    case TP_DB_META:
        add(&in->meta, k, v);
        if (k->mv_size == 6 && memcmp(k->mv_data, "owners", 6) == 0) {
            Toolpool__Owners *o = toolpool__owners__unpack(NULL, v->mv_size, v->mv_data);
            for (size_t i = 0; o && i < o->n_owners; i++) {
                MDB_val none = {0, NULL};
                add(&in->owners, &none, &none);
                if (tp_owner_alive(me, o->owners[i]->pid, o->owners[i]->start, o->owners[i]->boot))
                    add(&in->owners_live, &none, &none);
            }
            if (o)
                toolpool__owners__free_unpacked(o, NULL);
        } else if (k->mv_size == 6 && memcmp(k->mv_data, "format", 6) == 0) {
            Toolpool__StoreFormat *f = toolpool__store_format__unpack(NULL, v->mv_size, v->mv_data);
            if (f) {
                in->format = f->version;
                in->created_us = f->created_unix_us;
                toolpool__store_format__free_unpacked(f, NULL);
            }
        }
        return;
    default:
        return;
    }
}

int tp_store_info(tp_store_t *s, MDB_txn *txn, tp_store_info_t *in)
{
    memset(in, 0, sizeof *in);
    tp_owner_id_t me;
    tp_owner_self(&me);
    int rc = tp_store_space(s, txn, &in->space);
    for (int db = 0; rc == 0 && db < TP_DB__COUNT; db++) {
        if (!tp_store_has(s, db))
            continue;
        MDB_cursor *cur;
        if ((rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, db), &cur))) != 0)
            break;
        MDB_val k, v;
        for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
             rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT)))
            count_one(in, &me, db, &k, &v);
        mdb_cursor_close(cur);
        rc = rc == MDB_NOTFOUND ? 0 : rc;
    }
    return rc;
}
