/*
 * record_test: every record the store reads is checked (supervisor/store/record.c).
 *
 * A sound record of each kind passes; the same record with one field
 * wrong, or its bytes garbled, is TP_EPROTO with what is wrong in words. In a
 * real store, a record damaged in place is refused by tp_store_get_msg and
 * by every typed getter built on it (results, checkpoints, in-flight
 * markers, breakers, escalations), and tp_store_strerror names it.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "breaker.h"
#include "checkpoint.h"
#include "escalate.h"
#include "record.h"
#include "store.h"
#include "testutil.h"
#include "toolpool.pb-c.h"

#define EXPECT_HAS(hay, needle)                                                                                        \
    do {                                                                                                               \
        const char *h_ = (hay), *n_ = (needle);                                                                        \
        bool in_ = h_ != NULL && strstr(h_, n_) != NULL;                                                               \
        if (!in_)                                                                                                      \
            fprintf(stderr, "\n  %s:%d: %s lacks \"%s\": \"%s\"\n", __FILE__, __LINE__, #hay, n_, h_ ? h_ : "(null)"); \
        CU_assertImplementation(in_, __LINE__, #hay " contains " #needle, __FILE__, "", CU_FALSE);                     \
    } while (0)

static uint8_t digest[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static char why[512];

/* Packs m, unpacks it back from db under key with the checks; the result, why set. */
static int round_trip(tp_db_t db, const void *key, size_t klen, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    protobuf_c_message_pack(m, buf);
    ProtobufCMessage *out;
    why[0] = 0;
    int rc = tp_record_unpack(db, key, klen, buf, n, m->descriptor, &out, why, sizeof why);
    if (rc == 0)
        protobuf_c_message_free_unpacked(out, NULL);
    else
        CU_ASSERT_PTR_NULL(out);
    free(buf);
    return rc;
}

#define EXPECT_SOUND(db, key, m)                                                                                       \
    do {                                                                                                               \
        int rc_ = round_trip(db, key, strlen(key), &(m).base);                                                         \
        if (rc_ != 0)                                                                                                  \
            fprintf(stderr, "\n  %s:%d: refused: %s\n", __FILE__, __LINE__, why);                                      \
        CU_ASSERT_EQUAL(rc_, 0);                                                                                       \
    } while (0)

#define EXPECT_BAD(db, key, m, words)                                                                                  \
    do {                                                                                                               \
        CU_ASSERT_EQUAL(round_trip(db, key, strlen(key), &(m).base), TP_EPROTO);                                       \
        EXPECT_HAS(why, words);                                                                                        \
    } while (0)

/* Format 4: the record itself, and a line only where it keeps one. */
static void test_stored_result(void)
{
    Toolpool__Result res = TOOLPOOL__RESULT__INIT;
    res.has_id = true;
    res.id = "c1";
    res.tool = "echo";
    res.ok = true;
    res.result.data = (uint8_t *)"{\"a\":[1,2]}";
    res.result.len = strlen((const char *)res.result.data);
    res.args.data = (uint8_t *)"{}";
    res.args.len = 2;
    res.input_digest.data = digest;
    res.input_digest.len = 16;
    Toolpool__StoredResult r = TOOLPOOL__STORED_RESULT__INIT;
    r.result = &res;
    EXPECT_SOUND(TP_DB_RESULTS, "c1", r);
    EXPECT_BAD(TP_DB_RESULTS, "c2", r, "not this call's");
    res.has_id = false;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "not this call's");
    res.has_id = true;
    res.input_digest.len = 8;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "input digest is 8 bytes");
    res.input_digest.len = 16;
    res.result.data = (uint8_t *)"{\"a\":\n1}";
    res.result.len = strlen((const char *)res.result.data);
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "result is not JSON on one line");
    res.result.data = (uint8_t *)"{\"a\":";
    res.result.len = strlen((const char *)res.result.data);
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "result is not JSON on one line");
    res.result.len = 0;
    res.args.data = (uint8_t *)"{x}";
    res.args.len = 3;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "args are not JSON on one line");
    res.args.len = 0;
    EXPECT_SOUND(TP_DB_RESULTS, "c1", r);
    res.ok = false;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "names no kind");
    res.kind = "ToolError";
    EXPECT_SOUND(TP_DB_RESULTS, "c1", r);
    /* a kept line is checked as formats 2 and 3 check theirs, against the record's ok */
    const char *line = "{\"id\":\"c1\",\"ok\":false}\n";
    r.line.data = (uint8_t *)line;
    r.line.len = strlen(line);
    EXPECT_SOUND(TP_DB_RESULTS, "c1", r);
    res.ok = true;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "disagree on \"ok\"");
    r.line.len--;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "does not end in a newline");
}

/* Formats 2 and 3: the rendered line, and the digest, ok and kind beside it. */
static void test_stored_result_line(void)
{
    const char *line = "{\"id\":\"c1\",\"job\":\"c1\",\"step\":0,\"tool\":\"echo\",\"ok\":true,\"result\":{}}\n";
    Toolpool__StoredResult r = TOOLPOOL__STORED_RESULT__INIT;
    r.input_digest.data = digest;
    r.input_digest.len = 16;
    r.line.data = (uint8_t *)line;
    r.line.len = strlen(line);
    r.ok = true;
    EXPECT_SOUND(TP_DB_RESULTS, "c1", r);
    /* the same line is another call's */
    EXPECT_BAD(TP_DB_RESULTS, "c2", r, "not this call's");
    r.input_digest.len = 8;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "input digest is 8 bytes");
    r.input_digest.len = 16;
    r.ok = false;
    r.kind = "ToolError";
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "disagree on \"ok\"");
    r.ok = true;
    r.kind = "";
    r.line.len--; /* no newline */
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "does not end in a newline");
    r.line.len = 0;
    EXPECT_BAD(TP_DB_RESULTS, "c1", r, "empty");
    const char *garbled[] = {
        "\xff\xfe\"id\":\"c1\",\"ok\":true}\n",
        "{\"id\":\"c1\",\"ok\":true}\n{\"id\":\"c1\",\"ok\":true}\n",
        "{\"id\":\"c1\",\"ok\":tru\x01}\n",
        "[\"id\",\"c1\"]\n",
        "{\"id\":\"c1\",\"ok\":true,\"x\":\"\xc3\"}\n",
    };
    const char *words[] = {"not a JSON object (wrong at byte 0)", "more than one line", "not a JSON object",
                           "not a JSON object", "not a JSON object"};
    for (size_t i = 0; i < sizeof garbled / sizeof garbled[0]; i++) {
        r.line.data = (uint8_t *)garbled[i];
        r.line.len = strlen(garbled[i]);
        EXPECT_BAD(TP_DB_RESULTS, "c1", r, words[i]);
    }
    /* An id that needs escaping is written escaped, and still found. */
    const char *esc = "{\"id\":\"a\\\"b\\n\",\"ok\":false,\"error\":\"ToolError\"}\n";
    r.line.data = (uint8_t *)esc;
    r.line.len = strlen(esc);
    r.ok = false;
    r.kind = "ToolError";
    EXPECT_SOUND(TP_DB_RESULTS, "a\"b\n", r);
    r.kind = "";
    EXPECT_BAD(TP_DB_RESULTS, "a\"b\n", r, "names no kind");
}

static void test_checkpoint(void)
{
    char *calls[] = {"c1", "c2"};
    Toolpool__Checkpoint cp = TOOLPOOL__CHECKPOINT__INIT;
    cp.job = "j1";
    cp.calls = calls;
    cp.n_calls = 2;
    cp.cost = 0.5;
    cp.stopped = "BudgetExceeded";
    EXPECT_SOUND(TP_DB_JOBS, "j1", cp);
    EXPECT_BAD(TP_DB_JOBS, "j2", cp, "job is not its key");
    cp.has_state = true;
    cp.state.data = (uint8_t *)"{\"messages\": []}";
    cp.state.len = strlen((const char *)cp.state.data);
    EXPECT_SOUND(TP_DB_JOBS, "j1", cp);
    cp.state.len -= 1;
    EXPECT_BAD(TP_DB_JOBS, "j1", cp, "agent state is not JSON");
    cp.state.data = NULL; /* an empty bytes field, as protobuf-c unpacks one */
    cp.state.len = 0;
    EXPECT_BAD(TP_DB_JOBS, "j1", cp, "agent state is not JSON");
    cp.has_state = false;
    cp.stopped = "Timeout";
    EXPECT_BAD(TP_DB_JOBS, "j1", cp, "no guard's kind");
    cp.stopped = "";
    cp.cost = -1;
    EXPECT_BAD(TP_DB_JOBS, "j1", cp, "cost");
    cp.cost = 0;
    calls[1] = "";
    EXPECT_BAD(TP_DB_JOBS, "j1", cp, "call 2 of its message list has no id");
}

static void test_inflight_and_escalation(void)
{
    Toolpool__InFlight f = TOOLPOOL__IN_FLIGHT__INIT;
    f.call_id = "c1";
    f.input_digest.data = digest;
    f.input_digest.len = 16;
    f.tool = "delete";
    EXPECT_SOUND(TP_DB_INFLIGHT, "c1", f);
    EXPECT_BAD(TP_DB_INFLIGHT, "c9", f, "call id is not its key");
    f.tool = "";
    EXPECT_BAD(TP_DB_INFLIGHT, "c1", f, "no tool");

    Toolpool__Escalation e = TOOLPOOL__ESCALATION__INIT;
    e.id = "E000001";
    e.tool = "delete";
    e.args.data = (uint8_t *)"{\"id\":1}";
    e.args.len = 8;
    EXPECT_SOUND(TP_DB_ESCALATIONS, "E000001", e);
    EXPECT_BAD(TP_DB_ESCALATIONS, "E000002", e, "id is not its key");
    e.args.len = 5;
    EXPECT_BAD(TP_DB_ESCALATIONS, "E000001", e, "args are not JSON");
}

static void test_breakers(void)
{
    uint8_t key[64];
    tp_digest_t d;
    memcpy(d.b, digest, 16);
    size_t klen = tp_breaker_call_key("deny", &d, key, sizeof key);
    Toolpool__CallBreaker cb = TOOLPOOL__CALL_BREAKER__INIT;
    cb.tool = "deny";
    cb.digest.data = digest;
    cb.digest.len = 16;
    cb.args.data = (uint8_t *)"{}";
    cb.args.len = 2;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &cb.base), 0);
    cb.tool = "other";
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &cb.base), TP_EPROTO);
    EXPECT_HAS(why, "tool is not its key's");
    cb.tool = "deny";
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen - 1, &cb.base), TP_EPROTO);
    EXPECT_HAS(why, "its key is not");
    key[klen - 1] ^= 1;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &cb.base), TP_EPROTO);
    EXPECT_HAS(why, "digest is not its key's");

    klen = tp_breaker_tool_key("search", key, sizeof key);
    Toolpool__BreakerBucket b1 = TOOLPOOL__BREAKER_BUCKET__INIT, *buckets[11];
    b1.calls = 3;
    b1.failures = 2;
    for (int i = 0; i < 11; i++)
        buckets[i] = &b1;
    Toolpool__ToolBreaker tb = TOOLPOOL__TOOL_BREAKER__INIT;
    tb.tool = "search";
    tb.state = TOOLPOOL__BREAKER_STATE__BREAKER_OPEN;
    tb.buckets = buckets;
    tb.n_buckets = 10;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &tb.base), 0);
    tb.n_buckets = 11;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &tb.base), TP_EPROTO);
    EXPECT_HAS(why, "at most 10");
    tb.n_buckets = 1;
    tb.state = 7;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &tb.base), TP_EPROTO);
    EXPECT_HAS(why, "none of closed, open and half-open");
    tb.state = TOOLPOOL__BREAKER_STATE__BREAKER_CLOSED;
    b1.failures = 4;
    CU_ASSERT_EQUAL(round_trip(TP_DB_BREAKERS, key, klen, &tb.base), TP_EPROTO);
    EXPECT_HAS(why, "more failures than calls");
}

/* Bytes that do not unpack at all; and names that never print raw bytes. */
static void test_garbage_and_names(void)
{
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0a};
    ProtobufCMessage *out;
    CU_ASSERT_EQUAL(tp_record_unpack(TP_DB_JOBS, "j1", 2, junk, sizeof junk, &toolpool__checkpoint__descriptor, &out,
                                     why, sizeof why),
                    TP_EPROTO);
    CU_ASSERT_PTR_NULL(out);
    EXPECT_HAS(why, "does not unpack as a Checkpoint (5 bytes)");
    CU_ASSERT_EQUAL(tp_record_check_raw(TP_DB_META, "escalation_seq", 14, 7, why, sizeof why), TP_EPROTO);
    CU_ASSERT_EQUAL(tp_record_check_raw(TP_DB_META, "escalation_seq", 14, 8, why, sizeof why), 0);

    char name[128];
    CU_ASSERT_STRING_EQUAL(tp_record_name(TP_DB_RESULTS, "c1", 2, name, sizeof name), "results \"c1\"");
    CU_ASSERT_STRING_EQUAL(tp_record_name(TP_DB_RESULTS,
                                          "a\"\x01\xff"
                                          "é",
                                          6, name, sizeof name),
                           "results \"a\\x22\\x01\\xffé\"");
    uint8_t key[64];
    tp_digest_t d;
    memcpy(d.b, digest, 16);
    size_t klen = tp_breaker_call_key("deny", &d, key, sizeof key);
    CU_ASSERT_STRING_EQUAL(tp_record_name(TP_DB_BREAKERS, key, klen, name, sizeof name),
                           "breakers call/deny/0102030405060708090a0b0c0d0e0f10");
    klen = tp_breaker_tool_key("search", key, sizeof key);
    CU_ASSERT_STRING_EQUAL(tp_record_name(TP_DB_BREAKERS, key, klen, name, sizeof name), "breakers tool/search");
    /* A name cut short stays a string. */
    char tiny[12];
    tp_record_name(TP_DB_RESULTS, "a-long-call-id", 14, tiny, sizeof tiny);
    CU_ASSERT(strlen(tiny) < sizeof tiny);
}

/* ---- in a real store ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

/* Writes raw bytes under db/key, as damage on disk would leave them. */
static void put_raw(tp_store_t *s, tp_db_t db, const void *key, size_t klen, const void *val, size_t vlen)
{
    MDB_txn *txn;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    CU_ASSERT_EQUAL(mdb_put(txn, tp_store_dbi(s, db), &k, &v, 0), 0);
    CU_ASSERT_EQUAL(tp_store_commit(s, txn, err, sizeof err), 0);
}

/*
 * Damaged records in a store: every getter says TP_EPROTO (none hands out
 * what it read) and tp_store_strerror names the record and what is wrong.
 */
static void test_getters_refuse(void)
{
    const char *dir = tp_test_tmpdir("record-store");
    char err[512], words[1024];
    tp_store_t *s = tp_store_open(dir, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* results/c1: a StoredResult whose line is not JSON; jobs/j1 and inflight/c1: garbage. */
    Toolpool__StoredResult r = TOOLPOOL__STORED_RESULT__INIT;
    r.input_digest.data = digest;
    r.input_digest.len = 16;
    r.line.data = (uint8_t *)"\x01\x02 not json\n";
    r.line.len = strlen((const char *)r.line.data);
    uint8_t packed[256];
    size_t n = toolpool__stored_result__pack(&r, packed);
    put_raw(s, TP_DB_RESULTS, "c1", 2, packed, n);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0a};
    put_raw(s, TP_DB_JOBS, "j1", 2, junk, sizeof junk);
    put_raw(s, TP_DB_INFLIGHT, "c1", 2, junk, sizeof junk);
    put_raw(s, TP_DB_ESCALATIONS, "E000001", 7, junk, sizeof junk);
    put_raw(s, TP_DB_META, "escalation_seq", 14, "\x01\x02\x03", 3);
    /* breakers: the call breaker of deny(digest), and the tool breaker of deny */
    tp_tool_t tool = {.name = "deny"};
    tp_policy_init(&tool.policy);
    tp_digest_t d;
    memcpy(d.b, digest, 16);
    uint8_t key[64];
    size_t klen = tp_breaker_call_key("deny", &d, key, sizeof key);
    put_raw(s, TP_DB_BREAKERS, key, klen, junk, sizeof junk);
    klen = tp_breaker_tool_key("deny", key, sizeof key);
    put_raw(s, TP_DB_BREAKERS, key, klen, junk, sizeof junk);

    MDB_txn *txn;
    CU_ASSERT_EQUAL_FATAL(tp_store_begin(s, &txn, err, sizeof err), 0);
    Toolpool__StoredResult *sr = (void *)1;
    CU_ASSERT_EQUAL(tp_result_get(s, txn, "c1", &sr), TP_EPROTO);
    CU_ASSERT_PTR_NULL(sr);
    tp_store_strerror(s, TP_EPROTO, words, sizeof words);
    EXPECT_HAS(words, "results \"c1\": its result line is not a JSON object");
    EXPECT_HAS(words, dir);
    Toolpool__Checkpoint *cp;
    CU_ASSERT_EQUAL(tp_checkpoint_get(s, txn, "j1", &cp), TP_EPROTO);
    EXPECT_HAS(tp_store_strerror(s, TP_EPROTO, words, sizeof words), "jobs \"j1\": it does not unpack");
    tp_job_usage_t u = {0};
    CU_ASSERT_EQUAL(tp_checkpoint_step(s, txn, "j1", "c2", 2, &u, 0, TP_KIND_OK, NULL), TP_EPROTO);
    CU_ASSERT_EQUAL(tp_checkpoint_state_put(s, txn, "j1", 1, "{}", 2), TP_EPROTO);
    Toolpool__InFlight *f;
    CU_ASSERT_EQUAL(tp_inflight_get(s, txn, "c1", &f), TP_EPROTO);
    CU_ASSERT_EQUAL(tp_escalation_blocked(s, txn, "E000001"), TP_EPROTO);
    Toolpool__Escalation e = TOOLPOOL__ESCALATION__INIT;
    e.tool = "deny";
    char id[TP_ESCALATION_ID_MAX];
    CU_ASSERT_EQUAL(tp_escalate(s, txn, &e, id), TP_EPROTO);
    EXPECT_HAS(tp_store_strerror(s, TP_EPROTO, words, sizeof words), "meta \"escalation_seq\": it is 3 bytes");
    bool open = false, opened = false;
    char esc[64];
    CU_ASSERT_EQUAL(tp_breaker_call_check(s, txn, &tool, &d, 1, &open, esc, sizeof esc), TP_EPROTO);
    EXPECT_HAS(tp_store_strerror(s, TP_EPROTO, words, sizeof words), "breakers call/deny/0102");
    CU_ASSERT_EQUAL(tp_breaker_call_record(s, txn, &tool, &d, NULL, NULL, "{}", true, "ToolError", "x", 1, &opened),
                    TP_EPROTO);
    CU_ASSERT_EQUAL(tp_breaker_call_set_escalation(s, txn, &tool, &d, "E000002"), TP_EPROTO);
    tp_admit_t adm;
    tool.policy.tool_off = false; /* a tool breaker asked for */
    CU_ASSERT_EQUAL(tp_breaker_tool_admit(s, txn, &tool, 1, &adm), TP_EPROTO);
    EXPECT_HAS(tp_store_strerror(s, TP_EPROTO, words, sizeof words), "breakers tool/deny");
    CU_ASSERT_EQUAL(tp_breaker_tool_record(s, txn, &tool, TP_KIND_TIMEOUT, false, 1), TP_EPROTO);
    mdb_txn_abort(txn);
    tp_store_close(s);
    if (CU_get_number_of_failures() == 0)
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("record", NULL, NULL);
    CU_add_test(s, "results: the record, its id, its digest, its JSON", test_stored_result);
    CU_add_test(s, "results of formats 2 and 3: the line, its id, its ok", test_stored_result_line);
    CU_add_test(s, "jobs: checkpoints", test_checkpoint);
    CU_add_test(s, "in-flight markers and escalations", test_inflight_and_escalation);
    CU_add_test(s, "breakers: keys and fields", test_breakers);
    CU_add_test(s, "garbage, raw values, names", test_garbage_and_names);
    CU_add_test(s, "in a store, every getter refuses a damaged record", test_getters_refuse);
    return tp_test_run();
}
