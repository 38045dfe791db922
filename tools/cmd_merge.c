/*
 * toolpool merge and toolpool shard-status: the stores of a batch run in
 * shards (`run --shard K/N`, one store a machine) joined into what one
 * machine would have made, and watched while they run.
 *
 *   toolpool merge --store OUT SHARD_STORE...
 *   toolpool merge --results OUT.jsonl --input CALLS.jsonl STORE...
 *   toolpool shard-status [--json] STORE...
 *
 * Every shard's store records what it was made from (meta/"input",
 * inputrec.h): the calls file's digest, the registry's, and its shard.
 * Merge refuses stores that disagree, a shard given twice or missing.
 * Records are copied as they are: a job never leaves its shard, so its
 * results, checkpoint, message list and same-call breakers are in one
 * store only. Escalations are numbered again (each shard counted its own
 * from E000001), in shard order, and every result and breaker that names
 * one names its new number. A key found in two stores (a breaker of scope
 * "global", a tool breaker: those are per machine) keeps the first
 * shard's record, and is counted.
 *
 * The results file is rendered from the stores in the calls file's order,
 * each line from the store of its job's shard: the same records a run of
 * the whole file on one machine writes, one line per input line.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "cli.h"
#include "inputrec.h"
#include "log.h"
#include "request.h"
#include "resultline.h"
#include "results.h"
#include "shard.h"
#include "store.h"
#include "taxonomy.h"

/* clang-format off */
static const char merge_usage[] =
    "usage: toolpool merge --store OUT SHARD_STORE...\n"
    "       toolpool merge --results OUT.jsonl --input CALLS.jsonl STORE...\n"
    "Joins the stores of one batch run in shards (`toolpool run --shard K/N`,\n"
    "each on a store of its own) into one: results, checkpoints, message lists,\n"
    "escalations (numbered again) and breakers. The stores must be of the same\n"
    "calls file and registry, one for each shard 0 to N-1.\n"
    "  -s, --store OUT       the store to write (new, or an earlier merge of the\n"
    "                        same shards)\n"
    "  -o, --results FILE    write one result line per line of --input, in its\n"
    "                        order, from the stores given (the shards', or a\n"
    "                        merged one): what one machine's run would write\n"
    "      --input FILE      the calls file the shards ran\n"
    "  -q, --quiet           no summary on stderr\n"
    "exit status: 0 merged, 2 stores that do not make one batch, or an error\n";

static const char status_usage[] =
    "usage: toolpool shard-status [--json] STORE...\n"
    "For each shard's store of a batch run with `toolpool run --shard K/N`: its\n"
    "calls, how many are done (ok and failed) and how many are left; shards of\n"
    "N that no store given holds are listed as missing.\n"
    "      --json     one JSON object a line, one per shard, then the total\n"
    "exit status: 0 every shard done, 1 some left, 2 a store unreadable\n";
/* clang-format on */

/* One store given, open for reading, with its input record (NULL: it has none). */
typedef struct {
    const char *dir;
    tp_store_t *s;
    MDB_txn *txn;
    Toolpool__InputRecord *in;
} shard_store_t;

static void shards_close(shard_store_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].in)
            protobuf_c_message_free_unpacked(&v[i].in->base, NULL);
        if (v[i].txn)
            mdb_txn_abort(v[i].txn);
        tp_store_close(v[i].s);
    }
    free(v);
}

/* Opens each of dirs read-only, with its input record. NULL (logged) when one cannot be read. */
static shard_store_t *shards_open(char **dirs, size_t n)
{
    shard_store_t *v = calloc(n ? n : 1, sizeof *v);
    if (v == NULL) {
        tp_log_error("merge.out_of_memory", "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        v[i].dir = dirs[i];
        if ((v[i].s = tp_cli_store_read(dirs[i], &v[i].txn)) == NULL) {
            shards_close(v, n);
            return NULL;
        }
        int rc = tp_input_record_get(v[i].s, v[i].txn, &v[i].in);
        if (rc && rc != MDB_NOTFOUND) {
            char why[256];
            tp_log_error("merge.read_failed", "%s: cannot read its input record: %s", dirs[i],
                         tp_store_strerror(v[i].s, rc, why, sizeof why));
            shards_close(v, n);
            return NULL;
        }
    }
    return v;
}

/*
 * Whether the stores are one batch: each with an input record, all of the
 * same calls file, registry and N, no shard twice, and (complete) every
 * shard of N there. 0, or -1 with each disagreement logged.
 */
static int shards_agree(const shard_store_t *v, size_t n, bool complete)
{
    int rc = 0;
    const Toolpool__InputRecord *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const Toolpool__InputRecord *in = v[i].in;
        if (in == NULL) {
            tp_log_error("merge.not_a_shard",
                         "%s: no record of the calls file it ran (a store of a run without --shard, or of an older "
                         "toolpool): run its shard with `toolpool run --shard K/N` on it",
                         v[i].dir);
            rc = -1;
            continue;
        }
        if (first == NULL) {
            first = in;
            continue;
        }
        if (memcmp(in->input_digest.data, first->input_digest.data, 16) != 0) {
            tp_log_error("merge.shard_mismatch", "%s: a shard of another calls file than %s's (%s, not %s)", v[i].dir,
                         v[0].dir, in->input_name, first->input_name);
            rc = -1;
        } else if (memcmp(in->registry_digest.data, first->registry_digest.data, 16) != 0) {
            tp_log_error("merge.shard_mismatch", "%s: run with another registry (or policy) than %s", v[i].dir,
                         v[0].dir);
            rc = -1;
        } else if (in->shard_count != first->shard_count) {
            tp_log_error("merge.shard_mismatch", "%s: shard %u of %u, where %s is of %u shards", v[i].dir,
                         in->shard_index, in->shard_count, v[0].dir, first->shard_count);
            rc = -1;
        }
        for (size_t j = 0; j < i; j++)
            if (v[j].in && v[j].in->shard_index == in->shard_index && v[j].in->shard_count == in->shard_count) {
                tp_log_error("merge.shard_mismatch", "%s and %s are both shard %u/%u", v[j].dir, v[i].dir,
                             in->shard_index, in->shard_count);
                rc = -1;
            }
    }
    if (rc == 0 && complete && first)
        for (uint32_t k = 0; k < first->shard_count; k++) {
            size_t i = 0;
            while (i < n && v[i].in->shard_index != k)
                i++;
            if (i == n) {
                tp_log_error("merge.shard_missing", "no store given is shard %u/%u", k, first->shard_count);
                rc = -1;
            }
        }
    return rc;
}

/* The store of shard k among v, NULL when none is. */
static shard_store_t *shard_store(shard_store_t *v, size_t n, uint32_t k)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].in && v[i].in->shard_index == k)
            return &v[i];
    return NULL;
}

/* ---- merge --store ---- */

/* One shard's escalations, old id to new, in the order of the old (which a cursor gives). */
typedef struct {
    char (*from)[16];
    char (*to)[16];
    size_t n;
} renames_t;

static const char *renamed(const renames_t *r, const char *id)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->from[mid], id);
        if (c == 0)
            return r->to[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Writes text with each escalation id of r in it as its new one: a malloc'd copy, or NULL when none is there. */
static char *renamed_text(const renames_t *r, const char *text)
{
    if (text == NULL || strchr(text, 'E') == NULL)
        return NULL;
    tp_buf_t b = {0};
    bool changed = false;
    const char *p = text;
    while (*p) {
        const char *to = NULL;
        size_t len = 1;
        if (*p == 'E' && p[1] >= '0' && p[1] <= '9') {
            len = 1;
            while (p[len] >= '0' && p[len] <= '9' && len < 15)
                len++;
            char id[16];
            memcpy(id, p, len);
            id[len] = 0;
            to = renamed(r, id);
        }
        if (to) {
            changed = true;
            tp_buf_puts(&b, to);
        } else {
            tp_buf_append(&b, p, len);
        }
        p += len;
    }
    if (!changed || tp_buf_append(&b, "", 1) < 0) {
        tp_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

typedef struct {
    tp_store_t *out;
    MDB_txn *txn;
    size_t batch; /* bytes put in this transaction */
    uint64_t copied[TP_DB__COUNT], twice[TP_DB__COUNT];
    uint64_t escalations, inflight;
    char err[1024];
} merger_t;

/*
 * Commits the transaction under way once it holds 8 MiB of records, and
 * begins the next with 64 MiB of room: the pages those records take (B-tree
 * pages half full, each copied on write) fit in it; 32 MiB a transaction
 * met MDB_MAP_FULL on 1,000,000 results. 0, or an LMDB error (m->err).
 */
static int merger_turn(merger_t *m, bool last)
{
    if (m->txn && !last && m->batch < (8u << 20))
        return 0;
    int rc = 0;
    if (m->txn) {
        rc = tp_store_commit(m->out, m->txn, m->err, sizeof m->err);
        m->txn = NULL;
        m->batch = 0;
    }
    if (rc == 0 && !last)
        rc = tp_store_begin_room(m->out, &m->txn, 64u << 20, m->err, sizeof m->err);
    return rc;
}

/* Puts key and value into db of the merged store, unless a shard before put the key there (counted). */
static int merger_put(merger_t *m, tp_db_t db, const MDB_val *k, const void *data, size_t len)
{
    int rc = merger_turn(m, false);
    if (rc)
        return rc;
    MDB_val key = *k, val = {len, (void *)data};
    rc = tp_mdb(mdb_put(m->txn, tp_store_dbi(m->out, db), &key, &val, MDB_NOOVERWRITE));
    if (rc == MDB_KEYEXIST) {
        m->twice[db]++;
        return 0;
    }
    if (rc == 0) {
        m->copied[db]++;
        m->batch += k->mv_size + len;
    } else {
        snprintf(m->err, sizeof m->err, "%s: writing %s: %s", tp_store_dir(m->out), tp_store_db_name(db),
                 tp_strerror(rc));
    }
    return rc;
}

/* Packs msg and puts it as merger_put does. */
static int merger_put_msg(merger_t *m, tp_db_t db, const MDB_val *k, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        snprintf(m->err, sizeof m->err, "out of memory");
        return TP_ENOMEM;
    }
    protobuf_c_message_pack(msg, buf);
    int rc = merger_put(m, db, k, buf, n);
    free(buf);
    return rc;
}

/* A shard's escalations numbered on from m's count, into r; each put under its new id. */
static int merge_escalations(merger_t *m, shard_store_t *sh, renames_t *r)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = tp_mdb(mdb_cursor_open(sh->txn, tp_store_dbi(sh->s, TP_DB_ESCALATIONS), &cur));
    for (rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__Escalation *e = toolpool__escalation__unpack(NULL, v.mv_size, v.mv_data);
        if (e == NULL || k.mv_size >= 16) {
            if (e)
                toolpool__escalation__free_unpacked(e, NULL);
            snprintf(m->err, sizeof m->err, "%s: escalations \"%.*s\": a corrupt record (`toolpool store check`)",
                     sh->dir, (int)k.mv_size, (const char *)k.mv_data);
            rc = TP_EPROTO;
            break;
        }
        char(*from)[16] = realloc(r->from, (r->n + 1) * sizeof *r->from);
        if (from)
            r->from = from;
        char(*to)[16] = from ? realloc(r->to, (r->n + 1) * sizeof *r->to) : NULL;
        if (to == NULL) {
            toolpool__escalation__free_unpacked(e, NULL);
            snprintf(m->err, sizeof m->err, "out of memory");
            rc = TP_ENOMEM;
            break;
        }
        r->to = to;
        memcpy(r->from[r->n], k.mv_data, k.mv_size);
        r->from[r->n][k.mv_size] = 0;
        snprintf(r->to[r->n], sizeof r->to[r->n], "E%06llu", (unsigned long long)++m->escalations);
        char *old_id = e->id;
        e->id = r->to[r->n];
        MDB_val nk = {strlen(e->id), e->id};
        rc = merger_put_msg(m, TP_DB_ESCALATIONS, &nk, &e->base);
        e->id = old_id;
        r->n++;
        toolpool__escalation__free_unpacked(e, NULL);
        if (rc)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* A result as it is, or, when it names an escalation, rewritten to name its new number. */
static int merge_result(merger_t *m, shard_store_t *sh, const renames_t *r, const MDB_val *k, const MDB_val *v)
{
    Toolpool__StoredResult *sr = toolpool__stored_result__unpack(NULL, v->mv_size, v->mv_data);
    if (sr == NULL) {
        snprintf(m->err, sizeof m->err, "%s: results \"%.*s\": a corrupt record (`toolpool store check`)", sh->dir,
                 (int)k->mv_size, (const char *)k->mv_data);
        return TP_EPROTO;
    }
    int rc;
    Toolpool__Result *res = sr->result;
    const char *to = res && res->escalation && *res->escalation ? renamed(r, res->escalation) : NULL;
    if (to == NULL) {
        rc = merger_put(m, TP_DB_RESULTS, k, v->mv_data, v->mv_size);
    } else {
        char *old_esc = res->escalation, *old_msg = res->message, *msg = renamed_text(r, res->message);
        res->escalation = (char *)to;
        if (msg)
            res->message = msg;
        rc = merger_put_msg(m, TP_DB_RESULTS, k, &sr->base);
        res->escalation = old_esc;
        res->message = old_msg;
        free(msg);
    }
    toolpool__stored_result__free_unpacked(sr, NULL);
    return rc;
}

/* A breaker: a same-call breaker that names an escalation names its new number. */
static int merge_breaker(merger_t *m, const renames_t *r, const MDB_val *k, const MDB_val *v)
{
    const char *key = k->mv_data;
    Toolpool__CallBreaker *cb = k->mv_size > 0 && key[0] == 'c'
                                    ? toolpool__call_breaker__unpack(NULL, v->mv_size, v->mv_data)
                                    : NULL;
    const char *to = cb && cb->escalation && *cb->escalation ? renamed(r, cb->escalation) : NULL;
    int rc;
    if (to == NULL) {
        rc = merger_put(m, TP_DB_BREAKERS, k, v->mv_data, v->mv_size);
    } else {
        char *old = cb->escalation;
        cb->escalation = (char *)to;
        rc = merger_put_msg(m, TP_DB_BREAKERS, k, &cb->base);
        cb->escalation = old;
    }
    if (cb)
        toolpool__call_breaker__free_unpacked(cb, NULL);
    return rc;
}

/* Every record of db in one shard's store, through merge_result, merge_breaker, or as it is. */
static int merge_db(merger_t *m, shard_store_t *sh, const renames_t *r, tp_db_t db)
{
    if (!tp_store_has(sh->s, db))
        return 0;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = tp_mdb(mdb_cursor_open(sh->txn, tp_store_dbi(sh->s, db), &cur));
    for (rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if (db == TP_DB_RESULTS)
            rc = merge_result(m, sh, r, &k, &v);
        else if (db == TP_DB_BREAKERS)
            rc = merge_breaker(m, r, &k, &v);
        else
            rc = merger_put(m, db, &k, v.mv_data, v.mv_size);
        if (rc)
            break;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND && m->err[0] == 0)
        snprintf(m->err, sizeof m->err, "%s: reading %s: %s", sh->dir, tp_store_db_name(db), tp_strerror(rc));
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Calls a shard has in flight: it did not finish (a kill -9, a node that died), and was not run again. */
static uint64_t in_flight(shard_store_t *sh)
{
    MDB_stat st;
    return mdb_stat(sh->txn, tp_store_dbi(sh->s, TP_DB_INFLIGHT), &st) == 0 ? st.ms_entries : 0;
}

/*
 * The merged store's own input record, first: the whole file as one
 * shard (0/1), so that a merge stopped half-way is taken up again on the
 * same store, and a `run --shard 0/1` of the same file on it resumes
 * every recorded call. A store that holds anything else is refused.
 */
static int merge_begin(merger_t *m, const Toolpool__InputRecord *first)
{
    Toolpool__InputRecord *old = NULL;
    int rc = tp_input_record_get(m->out, m->txn, &old);
    if (rc == 0) {
        bool same = old->shard_count == 1 && memcmp(old->input_digest.data, first->input_digest.data, 16) == 0 &&
                    memcmp(old->registry_digest.data, first->registry_digest.data, 16) == 0;
        protobuf_c_message_free_unpacked(&old->base, NULL);
        if (!same) {
            snprintf(m->err, sizeof m->err,
                     "%s already holds a run of another calls file, registry or shard: merge into a new store",
                     tp_store_dir(m->out));
            return TP_EINVAL;
        }
    } else if (rc == MDB_NOTFOUND) {
        MDB_stat st;
        if (mdb_stat(m->txn, tp_store_dbi(m->out, TP_DB_RESULTS), &st) == 0 && st.ms_entries > 0) {
            snprintf(m->err, sizeof m->err, "%s already holds %zu results of its own: merge into a new store",
                     tp_store_dir(m->out), st.ms_entries);
            return TP_EINVAL;
        }
    } else {
        snprintf(m->err, sizeof m->err, "%s: cannot read its input record: %s", tp_store_dir(m->out), tp_strerror(rc));
        return rc;
    }
    Toolpool__InputRecord rec = *first;
    rec.shard_index = 0;
    rec.shard_count = 1;
    rec.shard_calls = first->input_calls;
    rec.written_unix_us = tp_unix_us();
    return tp_input_record_put(m->out, m->txn, &rec);
}

static const tp_db_t merged_dbs[] = {TP_DB_RESULTS, TP_DB_JOBS, TP_DB_STEPS, TP_DB_BREAKERS};

static int merge_stores(const char *out_dir, shard_store_t *v, size_t n, bool quiet)
{
    merger_t m = {0};
    renames_t *r = calloc(n, sizeof *r);
    int rc = TP_ENOMEM;
    if (r == NULL || (m.out = tp_store_open(out_dir, 0, m.err, sizeof m.err)) == NULL)
        goto out;
    if ((rc = merger_turn(&m, false)) || (rc = merge_begin(&m, v[0].in)))
        goto out;
    uint32_t count = v[0].in->shard_count;
    for (uint32_t k = 0; k < count && rc == 0; k++) {
        shard_store_t *sh = shard_store(v, n, k);
        size_t i = (size_t)(sh - v);
        uint64_t left = in_flight(sh);
        if (left)
            tp_log_warn("merge.calls_in_flight",
                        "%s: shard %u/%u has %llu call%s in flight: it was stopped and not run again; those calls "
                        "have no result (rerun the shard on its store, then merge again)",
                        sh->dir, k, count, (unsigned long long)left, left == 1 ? "" : "s");
        m.inflight += left;
        rc = merge_escalations(&m, sh, &r[i]);
        for (size_t d = 0; rc == 0 && d < sizeof merged_dbs / sizeof *merged_dbs; d++)
            rc = merge_db(&m, sh, &r[i], merged_dbs[d]);
    }
    if (rc == 0 && m.escalations) {
        MDB_val k = {14, "escalation_seq"}, val = {sizeof m.escalations, &m.escalations};
        rc = tp_mdb(mdb_put(m.txn, tp_store_dbi(m.out, TP_DB_META), &k, &val, 0));
    }
    if (rc == 0)
        rc = merger_turn(&m, true);
    if (rc == 0 && !quiet) {
        fprintf(stderr, "merged %zu shard%s into %s: %llu results, %llu checkpoints, %llu escalations, %llu breakers\n",
                n, n == 1 ? "" : "s", out_dir, (unsigned long long)m.copied[TP_DB_RESULTS],
                (unsigned long long)m.copied[TP_DB_JOBS], (unsigned long long)m.escalations,
                (unsigned long long)m.copied[TP_DB_BREAKERS]);
        if (m.twice[TP_DB_BREAKERS])
            fprintf(stderr,
                    "  %llu breaker%s found in more than one shard (tool breakers, and same-call breakers of scope "
                    "\"global\": each machine keeps its own); the lowest shard's kept\n",
                    (unsigned long long)m.twice[TP_DB_BREAKERS], m.twice[TP_DB_BREAKERS] == 1 ? "" : "s");
    }
    for (size_t d = 0; rc == 0 && d < sizeof merged_dbs / sizeof *merged_dbs; d++)
        if (merged_dbs[d] != TP_DB_BREAKERS && m.twice[merged_dbs[d]])
            tp_log_warn("merge.duplicates",
                        "%llu %s record%s found in more than one shard: the lowest shard's kept (a job or call id in "
                        "two shards? a store given twice after a copy?)",
                        (unsigned long long)m.twice[merged_dbs[d]], tp_store_db_name(merged_dbs[d]),
                        m.twice[merged_dbs[d]] == 1 ? "" : "s");
out:
    if (m.txn)
        mdb_txn_abort(m.txn);
    if (rc)
        tp_log_error("merge.failed", "%s", m.err[0] ? m.err : "out of memory");
    for (size_t i = 0; r && i < n; i++) {
        free(r[i].from);
        free(r[i].to);
    }
    free(r);
    tp_store_close(m.out);
    return rc ? 2 : 0;
}

/* ---- merge --results ---- */

/*
 * A line that is not a call and names no id (or one too long for the
 * store's keys) is recorded nowhere: its refusal is made here as run makes
 * it (the engine's reject), from the parser's words.
 */
static int write_unrecorded(tp_buf_t *b, const char *id, const char *job, uint64_t step, const char *tool,
                            const char *msg)
{
    Toolpool__Result r;
    tp_result_refusal(&r, id, job, step, tool, TP_KIND_INVALID_REQUEST, msg);
    return tp_result_write(b, &r);
}

typedef struct {
    shard_store_t *v;
    size_t n;
    uint32_t count;
    tp_request_parser_t parser;
    tp_buf_t out;
    uint64_t lines, missing;
    int fd;
} results_t;

/* The result line of input line no (text, len) onto the output; a call with no result is counted. */
static int result_of_line(results_t *w, long no, const char *text, size_t len, size_t max_line)
{
    char where[32], msg[TP_REQUEST_MSG_MAX];
    snprintf(where, sizeof where, "line %ld", no);
    if (len > max_line) {
        tp_request_too_long(msg, sizeof msg, where, max_line);
        w->lines++;
        return write_unrecorded(&w->out, NULL, NULL, 0, NULL, msg);
    }
    tp_request_t rq;
    tp_request_bad_t bad;
    tp_request_kind_t kind = tp_request_parse_line(&w->parser, text, len, where, 0, &rq, &bad);
    if (kind == TP_REQUEST_BLANK)
        return 0;
    w->lines++;
    const char *id = kind == TP_REQUEST_CALL ? rq.id : bad.id;
    const char *job = kind == TP_REQUEST_CALL ? (rq.job ? rq.job : rq.id) : bad.job;
    if (id == NULL)
        return write_unrecorded(&w->out, NULL, bad.job, bad.step, bad.tool, bad.message);
    shard_store_t *sh = shard_store(w->v, w->n, w->count == 1 ? 0 : tp_shard_of(job, strlen(job), w->count));
    Toolpool__StoredResult *sr = NULL;
    int rc = sh ? tp_result_get(sh->s, sh->txn, id, &sr) : MDB_NOTFOUND;
    if (rc == MDB_NOTFOUND && kind == TP_REQUEST_BAD && sh && strlen(id) > tp_store_max_key(sh->s))
        return write_unrecorded(&w->out, id, bad.job, bad.step, bad.tool, bad.message);
    if (rc == MDB_NOTFOUND) {
        if (w->missing++ < 5)
            tp_log_error("merge.result_missing",
                         "%s: call \"%s\" has no result in the store of its shard (%s): rerun that shard, then "
                         "merge again",
                         where, id, sh ? sh->dir : "not given");
        return 0;
    }
    if (rc) {
        char why[256];
        tp_log_error("merge.read_failed", "%s: call \"%s\": %s", where, id,
                     tp_store_strerror(sh->s, rc, why, sizeof why));
        return rc;
    }
    rc = tp_result_line(&w->out, sr);
    tp_result_free(sr);
    return rc;
}

static int write_results(const char *out_path, const char *input, shard_store_t *v, size_t n, bool quiet)
{
    int in_fd = open(input, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) {
        tp_log_error("merge.open_failed", "%s: %s", input, strerror(errno));
        return 2;
    }
    const size_t max_line = 67108864; /* run's --max-frame default */
    tp_shard_input_t scan;
    int status = 2;
    results_t w = {.v = v, .n = n, .count = v[0].in->shard_count, .fd = -1};
    char *buf = NULL;
    if (tp_shard_scan(in_fd, input, NULL, max_line, &scan) < 0)
        goto out;
    if (memcmp(scan.digest, v[0].in->input_digest.data, 16) != 0) {
        tp_log_error("merge.input_mismatch", "%s is not the calls file the shards ran (%s)", input,
                     v[0].in->input_name);
        goto out;
    }
    w.fd = strcmp(out_path, "-") == 0 ? 1 : open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) {
        tp_log_error("merge.open_failed", "%s: %s", out_path, strerror(errno));
        goto out;
    }
    size_t cap = 1 << 20, have = 0;
    long no = 0;
    off_t at = 0;
    if ((buf = malloc(cap)) == NULL)
        goto oom;
    int rc = 0;
    for (;;) {
        if (have == cap) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL)
                goto oom;
            buf = grown;
            cap *= 2;
        }
        ssize_t got = pread(in_fd, buf + have, cap - have, at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            tp_log_error("merge.read_failed", "%s: %s", input, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        at += got;
        have += (size_t)got;
        char *line = buf, *end = buf + have, *nl;
        while (rc == 0 && (nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            rc = result_of_line(&w, ++no, line, (size_t)(nl - line), max_line);
            line = nl + 1;
        }
        have = (size_t)(end - line);
        memmove(buf, line, have);
        if (rc == 0 && w.out.len > (1u << 20)) {
            rc = tp_write_all(w.fd, w.out.data, w.out.len);
            tp_buf_reset(&w.out);
        }
        if (rc)
            break;
    }
    if (rc == 0 && have > 0)
        rc = result_of_line(&w, ++no, buf, have, max_line);
    if (rc == 0 && w.out.len)
        rc = tp_write_all(w.fd, w.out.data, w.out.len);
    if (rc == TP_ENOMEM)
        goto oom;
    if (rc) {
        tp_log_error("merge.write_failed", "%s: %s", out_path, tp_strerror(rc));
        goto out;
    }
    if (w.missing) {
        tp_log_error("merge.result_missing", "%llu call%s of %s have no result: the results file lacks them",
                     (unsigned long long)w.missing, w.missing == 1 ? "" : "s", input);
        goto out;
    }
    if (!quiet)
        fprintf(stderr, "wrote %llu result lines to %s, in the order of %s\n", (unsigned long long)w.lines, out_path,
                input);
    status = 0;
    goto out;
oom:
    tp_log_error("merge.out_of_memory", "out of memory");
out:
    if (w.fd > 1 && close(w.fd) < 0) {
        tp_log_error("merge.write_failed", "%s: %s", out_path, strerror(errno));
        status = 2;
    }
    free(buf);
    tp_buf_free(&w.out);
    tp_request_parser_free(&w.parser);
    close(in_fd);
    return status;
}

int tp_cmd_merge(int argc, char **argv)
{
    const char *out_store = NULL, *results = NULL, *input = NULL;
    bool quiet = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &out_store, NULL}, {"results", 'o', true, &results, NULL},
        {"input", 0, true, &input, NULL},       {"quiet", 'q', false, &quiet, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, merge_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind >= argc || (out_store == NULL && results == NULL)) {
        tp_log_error("cli.usage", "merge: give --store OUT or --results FILE, and the stores to merge");
        return tp_cli_misuse(merge_usage);
    }
    if (results && input == NULL) {
        tp_log_error("cli.usage",
                     "merge --results: give --input CALLS.jsonl, the calls file the shards ran (its order is the "
                     "results file's)");
        return 2;
    }
    size_t n = (size_t)(argc - optind);
    struct stat out_st, st;
    for (int i = optind; out_store && stat(out_store, &out_st) == 0 && i < argc; i++)
        if (stat(argv[i], &st) == 0 && st.st_dev == out_st.st_dev && st.st_ino == out_st.st_ino) {
            tp_log_error("cli.usage",
                         "merge: %s is both the store to write and a store to merge: merge into a new store", argv[i]);
            return 2;
        }
    shard_store_t *v = shards_open(argv + optind, n);
    if (v == NULL)
        return 2;
    /* A merged store (shard 0/1) serves --results alone; to merge into a store, every shard must be there. */
    int status = shards_agree(v, n, true) < 0 ? 2 : 0;
    if (status == 0 && out_store)
        status = merge_stores(out_store, v, n, quiet);
    if (status == 0 && results)
        status = write_results(results, input, v, n, quiet);
    shards_close(v, n);
    return status;
}

/* ---- shard-status ---- */

typedef struct {
    uint64_t done, ok;
} tally_t;

/* Counts a store's results, ok and not. 0, or an LMDB error. */
static int tally(shard_store_t *sh, tally_t *t)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = tp_mdb(mdb_cursor_open(sh->txn, tp_store_dbi(sh->s, TP_DB_RESULTS), &cur));
    for (rc = rc ? rc : tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__StoredResult *sr;
        if (tp_result_unpack(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &sr) != 0)
            continue;
        t->done++;
        t->ok += sr->result && sr->result->ok;
        tp_result_free(sr);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int tp_cmd_shard_status(int argc, char **argv)
{
    bool as_json = false;
    const tp_cli_opt_t opts[] = {{"json", 0, false, &as_json, NULL}, {NULL, 0, false, NULL, NULL}};
    int rc = tp_cli_options(argc, argv, status_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind >= argc)
        return tp_cli_misuse(status_usage);
    size_t n = (size_t)(argc - optind);
    shard_store_t *v = shards_open(argv + optind, n);
    if (v == NULL)
        return 2;
    int status = shards_agree(v, n, false) < 0 ? 2 : 0;
    uint64_t calls = 0, done = 0, ok = 0, left = 0, running = 0;
    if (!as_json && status == 0)
        printf("%-9s %10s %10s %10s %10s %10s %9s  %s\n", "shard", "calls", "done", "ok", "failed", "left", "in flight",
               "store");
    for (size_t i = 0; i < n && status == 0; i++) {
        tally_t t = {0};
        if (tally(&v[i], &t) != 0) {
            tp_log_error("merge.read_failed", "%s: cannot read its results", v[i].dir);
            status = 2;
            break;
        }
        const Toolpool__InputRecord *in = v[i].in;
        uint64_t l = in->shard_calls > t.done ? in->shard_calls - t.done : 0, fl = in_flight(&v[i]);
        calls += in->shard_calls;
        done += t.done;
        ok += t.ok;
        left += l;
        running += fl;
        char name[32];
        snprintf(name, sizeof name, "%u/%u", in->shard_index, in->shard_count);
        if (as_json) {
            json_t *o = json_pack("{s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "shard", (int)in->shard_index, "of",
                                  (int)in->shard_count, "store", v[i].dir, "calls", (json_int_t)in->shard_calls, "done",
                                  (json_int_t)t.done, "ok", (json_int_t)t.ok, "failed", (json_int_t)(t.done - t.ok),
                                  "left", (json_int_t)l, "in_flight", (json_int_t)fl);
            if (o == NULL || tp_cli_put_json(stdout, o) < 0)
                status = 2;
            json_decref(o);
        } else {
            printf("%-9s %10llu %10llu %10llu %10llu %10llu %9llu  %s\n", name, (unsigned long long)in->shard_calls,
                   (unsigned long long)t.done, (unsigned long long)t.ok, (unsigned long long)(t.done - t.ok),
                   (unsigned long long)l, (unsigned long long)fl, v[i].dir);
        }
    }
    uint32_t count = status == 0 ? v[0].in->shard_count : 0;
    json_t *missing = json_array();
    for (uint32_t k = 0; k < count && missing; k++)
        if (shard_store(v, n, k) == NULL)
            json_array_append_new(missing, json_integer(k));
    size_t n_missing = json_array_size(missing);
    if (status == 0 && as_json) {
        json_t *o = json_pack("{s:b, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:O}", "total", 1, "of", (int)count, "calls",
                              (json_int_t)calls, "done", (json_int_t)done, "ok", (json_int_t)ok, "failed",
                              (json_int_t)(done - ok), "left", (json_int_t)left, "in_flight", (json_int_t)running,
                              "missing", missing);
        if (o == NULL || tp_cli_put_json(stdout, o) < 0)
            status = 2;
        json_decref(o);
    } else if (status == 0) {
        printf("%-9s %10llu %10llu %10llu %10llu %10llu %9llu\n", "total", (unsigned long long)calls,
               (unsigned long long)done, (unsigned long long)ok, (unsigned long long)(done - ok),
               (unsigned long long)left, (unsigned long long)running);
        for (size_t i = 0; i < n_missing; i++)
            printf("shard %lld/%u: no store given\n", (long long)json_integer_value(json_array_get(missing, i)), count);
    }
    json_decref(missing);
    shards_close(v, n);
    if (status == 0 && (left || n_missing))
        status = 1;
    return status;
}
