/*
 * results/ID: each call's final record (Toolpool__StoredResult): the
 * call's whole Result, its input digest included, so that a rerun answers
 * from it instead of running the call, but only to the same input. Fronts
 * render what they send from it (resultline.h).
 *
 * Records of formats 2 and 3 held the rendered line instead: they are read
 * back into a Result here, on every read, so no reader above sees the
 * difference (format.c upgrades them once, on a writable open).
 */
#ifndef TP_RESULTS_H
#define TP_RESULTS_H

#include "buf.h"
#include "store.h"
#include "taxonomy.h"
#include "toolpool.pb-c.h"

/* Records r under its id. 0, or what tp_store_put_msg returns. */
int tp_result_put(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r);
/*
 * r as the record of a request refused before it became a call (kind, msg;
 * no attempt made): the engine's refusals and `merge --results`'s lines of
 * calls recorded nowhere are the same record. id NULL: the line named none.
 * The strings stay the caller's.
 */
void tp_result_refusal(Toolpool__Result *r, const char *id, const char *job, uint64_t step, const char *tool,
                       tp_kind_t kind, const char *msg);

/*
 * tp_result_put over a record of the same call made under another version
 * of its tool: the record it replaces goes into the new one's history
 * (StoredResult.history, oldest first, the last TP_RESULT_HISTORY_MAX),
 * with the history it had. With no record there, tp_result_put. Packed by
 * protobuf-c: this runs only for the calls a version change runs again.
 * 0, an LMDB code, TP_ENOMEM.
 */
#define TP_RESULT_HISTORY_MAX 16
int tp_result_put_over(tp_store_t *s, MDB_txn *txn, const Toolpool__Result *r);

/*
 * The StoredResult of r, ended at ended_unix_us, packed into out as
 * protobuf-c would pack it (without its generic packer); out NULL: only
 * its size. Returns the size.
 */
size_t tp_result_pack(const Toolpool__Result *r, uint64_t ended_unix_us, uint8_t *out);

/*
 * 0 and *out (free with tp_result_free), whose result is always set; its
 * line is not empty only for a record of an older toolpool that is to be
 * answered with the line it first reported. MDB_NOTFOUND, TP_EPROTO (the
 * record is corrupt: tp_store_strerror says how), TP_ENOMEM, or an LMDB
 * error.
 */
int tp_result_get(tp_store_t *s, MDB_txn *txn, const char *id, Toolpool__StoredResult **out);

/* Frees what tp_result_get or tp_result_unpack gave (NULL: nothing). */
void tp_result_free(Toolpool__StoredResult *sr);

/* Appends sr's JSON line: the line it keeps, or its result rendered (resultline.h). 0 or TP_ENOMEM. */
int tp_result_line(tp_buf_t *b, const Toolpool__StoredResult *sr);

/*
 * A results value under key, read by a cursor, as tp_result_get gives it
 * and checked as it does. 0, TP_EPROTO or TP_ENOMEM.
 */
int tp_result_unpack(const void *key, size_t klen, const void *data, size_t len, Toolpool__StoredResult **out);

/*
 * A record of format 2 or 3 (sr->result NULL, the line set) read back:
 * sr->result set from its line and digest, and the line let go (its
 * length 0) when rendering the result gives it back byte for byte.
 * 0, TP_EPROTO or TP_ENOMEM.
 */
int tp_result_from_line(Toolpool__StoredResult *sr);

/* Format 3 to 4: every record of the results database rewritten as a Result. 0, or a store error. */
int tp_results_upgrade(tp_store_t *s, MDB_txn *txn);

#endif
