/*
 * A call's record and its JSON line (supervisor/store/resultline.h): the
 * line is what every front sends, and a store of format 3 kept only the
 * line, so reading a line back must give the record that renders it byte
 * for byte. Random records (strings that need escaping, bytes that are not
 * UTF-8, numbers past jansson's int64, every optional member on and off)
 * are rendered, checked against jansson, read back and rendered again.
 */
#include <CUnit/Basic.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "resultline.h"
#include "results.h"
#include "testutil.h"

static unsigned rnd(unsigned n)
{
    return (unsigned)random() % n;
}

/*
 * A string with a bit of everything: quotes, escapes, control bytes,
 * UTF-8. (Bytes that are not UTF-8 are written as \ufffd, which reads
 * back as the character itself: test_refused has that case.)
 */
static char *random_string(void)
{
    static const char *parts[] = {
        "a", "Z",     "\"", "\\", "\n", "\t", "\x01", "/", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        " ", "call-", "7"};
    size_t n = rnd(8), count = sizeof parts / sizeof parts[0];
    char *s = calloc(1, n * 5 + 1); /* the longest part is 5 bytes */
    for (size_t i = 0; i < n; i++)
        strcat(s, parts[rnd((unsigned)count)]);
    return s;
}

/* JSON text as a tool's result or a call's args come: compact, and sometimes past what jansson reads. */
static const char *random_json(void)
{
    static const char *texts[] = {"{}",
                                  "{\"a\":1}",
                                  "[1,2,3]",
                                  "\"s\\u00e9\\n\"",
                                  "123456789012345678901234567890",
                                  "{\"x\":{\"y\":[true,false,null]},\"z\":1.5e300}",
                                  "-0.25",
                                  "null",
                                  "\"\""};
    return texts[rnd(sizeof texts / sizeof texts[0])];
}

typedef struct {
    Toolpool__Result r;
    Toolpool__Attempt at[4], *trace[4];
    char *strs[16];
    int n_strs;
} rec_t;

static char *keep(rec_t *x, char *s)
{
    x->strs[x->n_strs++] = s;
    return s;
}

static void random_record(rec_t *x)
{
    memset(x, 0, sizeof *x);
    Toolpool__Result *r = &x->r;
    toolpool__result__init(r);
    r->has_id = rnd(8) != 0;
    r->id = r->has_id ? keep(x, random_string()) : (char *)"";
    r->job = rnd(2) ? keep(x, random_string()) : (char *)"";
    r->step = rnd(4) == 0 ? UINT64_MAX - rnd(3) : rnd(100);
    r->tool = rnd(6) ? keep(x, random_string()) : (char *)"";
    r->ok = rnd(2);
    const char *res = random_json();
    if (r->ok && rnd(5)) {
        r->result.data = (uint8_t *)res;
        r->result.len = strlen(res);
    }
    if (!r->ok) {
        r->kind = (char *)(rnd(2) ? "Timeout" : "ToolError");
        r->klass = (char *)(rnd(2) ? "transient" : "permanent");
        r->message = keep(x, random_string());
        r->retryable = rnd(2);
        r->has_retry_after = rnd(3) == 0;
        r->retry_after_ms = r->has_retry_after ? rnd(100000) : 0;
    }
    r->attempts = rnd(5);
    r->served_by = rnd(2) ? keep(x, random_string()) : (char *)"";
    r->version = rnd(3) == 0 ? keep(x, random_string()) : (char *)"";
    r->degraded = rnd(2);
    r->stale = rnd(2);
    r->escalated = rnd(2);
    r->escalation = r->escalated && rnd(2) ? (char *)"E000012" : (char *)"";
    r->duration_us = rnd(3) ? rnd(100000000) : 0;
    r->cost = rnd(3) == 0 ? 0.1 * rnd(1000) + 1e-7 : 0;
    if (rnd(5)) {
        const char *a = random_json();
        r->args.data = (uint8_t *)a;
        r->args.len = strlen(a);
    }
    r->n_trace = rnd(5);
    for (size_t i = 0; i < r->n_trace; i++) {
        toolpool__attempt__init(&x->at[i]);
        x->at[i].attempt = (uint32_t)i + 1;
        x->at[i].tool = keep(x, random_string());
        x->at[i].outcome = (char *)(rnd(2) ? "ok" : "Timeout");
        x->at[i].duration_us = rnd(10000000);
        x->at[i].backoff_us = rnd(3) ? rnd(2000000) : 0;
        x->at[i].start_us = rnd(50000000);
        x->at[i].spawn_us = rnd(3) ? 0 : rnd(50000000);
        x->trace[i] = &x->at[i];
    }
    r->trace = x->trace;
}

static void rec_free(rec_t *x)
{
    for (int i = 0; i < x->n_strs; i++)
        free(x->strs[i]);
}

/* How long JSON text reads back: null is none at all (both render as null). */
static size_t text_len(ProtobufCBinaryData d)
{
    return d.len == 4 && memcmp(d.data, "null", 4) == 0 ? 0 : d.len;
}

/* The lines of 3,000 random records: one JSON object on one line each, read back to the same record. */
static void test_round_trip(void)
{
    srandom(20261201);
    int differed = 0, unread = 0, not_json = 0;
    for (int i = 0; i < 3000; i++) {
        rec_t x;
        random_record(&x);
        tp_buf_t line = {0}, again = {0};
        CU_ASSERT_EQUAL_FATAL(tp_result_write(&line, &x.r), 0);
        CU_ASSERT_TRUE(line.len > 0 && line.data[line.len - 1] == '\n');
        CU_ASSERT_PTR_NULL(memchr(line.data, '\n', line.len - 1));
        json_error_t err;
        json_t *v = json_loadb((const char *)line.data, line.len - 1, 0, &err);
        if (v == NULL && strstr(err.text, "too big") == NULL)
            not_json++;
        json_decref(v);
        Toolpool__Result *back = NULL;
        bool same = false;
        int rc = tp_result_read_line(line.data, line.len, &back, &same);
        if (rc != 0) {
            if (unread++ == 0)
                fprintf(stderr, "\n  not read back (%s): %.*s", tp_strerror(rc), (int)line.len, line.data);
        } else {
            CU_ASSERT_EQUAL(tp_result_write(&again, back), 0);
            bool eq = same && again.len == line.len && memcmp(again.data, line.data, line.len) == 0;
            if (!eq && differed++ == 0)
                fprintf(stderr, "\n  %.*s  read back as\n  %.*s", (int)line.len, line.data, (int)again.len, again.data);
            /* the fields themselves, where the line holds them as they are */
            CU_ASSERT_EQUAL(back->step, x.r.step);
            CU_ASSERT_EQUAL(back->duration_us, x.r.duration_us);
            CU_ASSERT_EQUAL(back->n_trace, x.r.n_trace);
            CU_ASSERT_EQUAL(back->ok, x.r.ok);
            CU_ASSERT_EQUAL(back->has_id, x.r.has_id);
            CU_ASSERT_EQUAL(back->result.len, text_len(x.r.result));
            CU_ASSERT_EQUAL(back->args.len, text_len(x.r.args));
            if (back->n_trace == x.r.n_trace)
                for (size_t t = 0; t < back->n_trace; t++) {
                    CU_ASSERT_EQUAL(back->trace[t]->start_us, x.r.trace[t]->start_us);
                    CU_ASSERT_EQUAL(back->trace[t]->spawn_us, x.r.trace[t]->spawn_us);
                }
            toolpool__result__free_unpacked(back, NULL);
        }
        tp_buf_free(&line);
        tp_buf_free(&again);
        rec_free(&x);
    }
    CU_ASSERT_EQUAL(not_json, 0);
    CU_ASSERT_EQUAL(unread, 0);
    CU_ASSERT_EQUAL(differed, 0);
}

/*
 * The store's hand packer gives protobuf-c's bytes for the same records,
 * byte for byte; its one-block reader reads them as protobuf-c does.
 */
static void test_pack_as_protobuf(void)
{
    srandom(7);
    int differed = 0;
    for (int i = 0; i < 3000; i++) {
        rec_t x;
        random_record(&x);
        if (rnd(3))
            x.r.input_digest = (ProtobufCBinaryData){16, (uint8_t *)"0123456789abcdef"};
        Toolpool__StoredResult sr = TOOLPOOL__STORED_RESULT__INIT;
        sr.result = &x.r;
        sr.ended_unix_us = rnd(4) ? (uint64_t)random() << 20 : 0;
        size_t want = toolpool__stored_result__get_packed_size(&sr);
        uint8_t *a = malloc(want + 1), *b = malloc(want + 64);
        toolpool__stored_result__pack(&sr, a);
        size_t got = tp_result_pack(&x.r, sr.ended_unix_us, NULL);
        size_t wrote = got == want ? tp_result_pack(&x.r, sr.ended_unix_us, b) : 0;
        if ((got != want || wrote != want || memcmp(a, b, want) != 0) && differed++ == 0)
            fprintf(stderr, "\n  record %d: %zu bytes, protobuf-c %zu", i, got, want);
        /* read back the store's way (one block) and protobuf-c's: the same record, rendered the same */
        if (x.r.has_id && x.r.input_digest.len == 16) {
            Toolpool__StoredResult *mine = NULL, *theirs = toolpool__stored_result__unpack(NULL, want, a);
            CU_ASSERT_EQUAL(tp_result_unpack(x.r.id, strlen(x.r.id), a, want, &mine), 0);
            tp_buf_t l1 = {0}, l2 = {0};
            if (mine && theirs) {
                CU_ASSERT_EQUAL(mine->ended_unix_us, theirs->ended_unix_us);
                CU_ASSERT_EQUAL(tp_result_line(&l1, mine), 0);
                CU_ASSERT_EQUAL(tp_result_line(&l2, theirs), 0);
                CU_ASSERT_TRUE(l1.len == l2.len && memcmp(l1.data, l2.data, l1.len) == 0);
                CU_ASSERT_EQUAL(mine->result->cost, theirs->result->cost);
                CU_ASSERT_EQUAL(mine->result->input_digest.len, 16);
            }
            tp_buf_free(&l1);
            tp_buf_free(&l2);
            tp_result_free(mine);
            tp_result_free(theirs);
        }
        free(a);
        free(b);
        rec_free(&x);
    }
    CU_ASSERT_EQUAL(differed, 0);
}

/* What is not a result line is refused (TP_EPROTO), and nothing is returned. */
static void test_refused(void)
{
    static const char *bad[] = {
        "",
        "\n",
        "[1]\n",
        "{\"id\":\"x\",\"ok\":true\n",
        "{\"id\":\"x\",\"ok\":\"yes\"}\n",
        "{\"id\":7,\"ok\":true}\n",
        "{\"id\":\"x\",\"ok\":true,\"step\":-1}\n",
        "{\"id\":\"x\",\"ok\":true,\"step\":18446744073709551616}\n",
        "{\"id\":\"x\",\"ok\":true,\"duration_ms\":1.2345}\n",
        "{\"id\":\"x\",\"ok\":true,\"trace\":[{\"attempt\":1}]}\n",
        "{\"id\":\"x\",\"ok\":true,\"trace\":{}}\n",
        "{\"id\":\"x\",\"ok\":true,\"cost\":\"free\"}\n",
        "{\"id\":\"x\",\"ok\":false,\"message\":[]}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Toolpool__Result *r = NULL;
        int rc = tp_result_read_line((const uint8_t *)bad[i], strlen(bad[i]), &r, NULL);
        if (rc != TP_EPROTO)
            fprintf(stderr, "\n  read: %s", bad[i]);
        CU_ASSERT_EQUAL(rc, TP_EPROTO);
        CU_ASSERT_PTR_NULL(r);
    }
    /* the least line there is: defaults for the rest, and it renders as today's line (not the same bytes) */
    Toolpool__Result *r = NULL;
    bool same = true;
    CU_ASSERT_EQUAL_FATAL(tp_result_read_line((const uint8_t *)"{\"id\":\"x\",\"ok\":true}\n", 21, &r, &same), 0);
    CU_ASSERT_STRING_EQUAL(r->id, "x");
    CU_ASSERT_TRUE(r->has_id && r->ok);
    CU_ASSERT_FALSE(same);
    toolpool__result__free_unpacked(r, NULL);
    /* a message whose bytes were not UTF-8: read back, but not the same bytes again (its line is kept) */
    static const char repl[] =
        "{\"id\":\"x\",\"job\":null,\"step\":0,\"tool\":null,\"ok\":false,\"error\":\"ToolError\","
        "\"class\":\"permanent\",\"message\":\"a\\ufffdb\",\"retryable\":false,\"attempts\":0,"
        "\"served_by\":null,\"degraded\":false,\"stale\":false,\"escalated\":false,"
        "\"duration_ms\":0.000,\"args\":null,\"trace\":[]}\n";
    same = true;
    CU_ASSERT_EQUAL_FATAL(tp_result_read_line((const uint8_t *)repl, sizeof repl - 1, &r, &same), 0);
    CU_ASSERT_STRING_EQUAL(r->message, "a\xef\xbf\xbd"
                                       "b");
    CU_ASSERT_FALSE(same);
    toolpool__result__free_unpacked(r, NULL);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("resultline", NULL, NULL);
    CU_add_test(s, "random records: rendered, read back, rendered the same", test_round_trip);
    CU_add_test(s, "what is not a result line is refused", test_refused);
    CU_add_test(s, "the store's packer packs as protobuf-c", test_pack_as_protobuf);
    return tp_test_run();
}
