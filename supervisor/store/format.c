/*
 * The store's format record (meta/format) and the upgrades from older
 * formats: tp_store_open is the store's environment (store.c) opened with
 * this check, so that the environment knows nothing of what its records
 * hold, and the upgrades may use every module that reads them (steps.c).
 */
#include "store.h"

#include <errno.h>
#include <stdio.h>

#include "results.h"
#include "steps.h"
#include "toolpool.pb-c.h"

/*
 * Checks (or, on a new store, writes) the format record, in the
 * transaction that opened the databases. A store of format 2 or 3 is
 * upgraded to 4 when opened for writing, in the same transaction: format
 * 2's job lists move to the steps database, and every result line becomes
 * its record. Opened read-only, it is read as it is (results.c reads the
 * lines back).
 */
static bool upgradable(unsigned version)
{
    return version == 2 || version == 3;
}

static int check_format(tp_store_t *s, MDB_txn *txn, char *err, size_t errlen)
{
    bool rdonly = tp_store_rdonly(s);
    bool no_steps = !tp_store_has(s, TP_DB_STEPS);
    const char *dir = tp_store_dir(s);
    Toolpool__StoreFormat *fmt = NULL;
    int rc = tp_store_get_msg(s, txn, TP_DB_META, "format", 6, &toolpool__store_format__descriptor,
                              (ProtobufCMessage **)&fmt);
    if (rc == MDB_NOTFOUND && !rdonly) {
        Toolpool__StoreFormat nf = TOOLPOOL__STORE_FORMAT__INIT;
        nf.version = TP_STORE_FORMAT;
        nf.created_unix_us = tp_unix_us();
        rc = tp_store_put_msg(s, txn, TP_DB_META, "format", 6, &nf.base);
    } else if (rc == 0 && upgradable(fmt->version) && !rdonly) {
        unsigned from = fmt->version;
        rc = from == 2 ? tp_steps_migrate(s, txn) : 0;
        rc = rc ? rc : tp_results_upgrade(s, txn);
        fmt->version = TP_STORE_FORMAT;
        rc = rc ? rc : tp_store_put_msg(s, txn, TP_DB_META, "format", 6, &fmt->base);
        if (rc)
            snprintf(err, errlen, "%s: cannot upgrade the store from format %u to %u: %s", dir, from, TP_STORE_FORMAT,
                     rc == TP_EPROTO ? tp_store_bad(s) : tp_strerror(rc));
    } else if (rc == 0 && !(fmt->version == TP_STORE_FORMAT || (upgradable(fmt->version) && rdonly))) {
        snprintf(err, errlen,
                 "%s: the store has format %u; this toolpool reads format %u. Use a toolpool of that "
                 "version to read it, or start a new store with --store NEWDIR",
                 dir, fmt->version, TP_STORE_FORMAT);
        rc = TP_EPROTO;
    } else if (rc == 0 && no_steps && fmt->version != 2) {
        snprintf(err, errlen, "%s: cannot open database %s: %s", dir, tp_store_db_name(TP_DB_STEPS),
                 tp_strerror(MDB_NOTFOUND));
        rc = MDB_NOTFOUND;
    } else if (rc == MDB_NOTFOUND) {
        snprintf(err, errlen, "%s: not a toolpool store (no format record)", dir);
    } else if (rc) {
        snprintf(err, errlen, "%s: cannot read the format record: %s", dir,
                 rc == TP_EPROTO ? tp_store_bad(s) : tp_strerror(rc));
    }
    if (fmt)
        protobuf_c_message_free_unpacked(&fmt->base, NULL);
    return rc;
}

tp_store_t *tp_store_open(const char *dir, unsigned flags, char *err, size_t errlen)
{
    return tp_store_open_with(dir, flags, check_format, err, errlen);
}
