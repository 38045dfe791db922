/*
 * The store's record checks (supervisor/store/record.h) on any bytes: the first byte
 * picks the database, the second the key's length, then the key, then the
 * value. Unpacking and checking never crash or leak (the results' own
 * reader too, whose records render as one JSON line); a record that passes
 * passes again, and a result line that passes is JSON that jansson reads
 * (but where jansson refuses what JSON allows); a record's name is never
 * raw bytes: printable ASCII, or valid UTF-8.
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "record.h"
#include "results.h"
#include "toolpool.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    tp_db_t db = (tp_db_t)(data[0] % TP_DB__COUNT);
    size_t klen = data[1] % 64 + 1;
    if (size - 2 < klen)
        return 0;
    const uint8_t *key = data + 2, *val = key + klen;
    size_t vlen = size - 2 - klen;

    char name[300];
    tp_record_name(db, key, klen, name, sizeof name);
    TP_FUZZ_CHECK(strlen(name) < sizeof name);
    for (const unsigned char *p = (const unsigned char *)name; *p;) {
        size_t u = *p >= 0x80 ? tp_utf8_len(p, strlen((const char *)p)) : 0;
        TP_FUZZ_CHECK(*p >= 0x80 ? u > 0 : *p >= 0x20 && *p < 0x7f);
        p += u ? u : 1;
    }

    char why[256];
    const ProtobufCMessageDescriptor *desc = tp_record_type(db, key, klen);
    if (desc == NULL) {
        tp_record_check_raw(db, key, klen, vlen, why, sizeof why);
        return 0;
    }
    if (desc == &toolpool__stored_result__descriptor) {
        /*
         * The store's own reading of a results value (one block by hand,
         * else protobuf-c's, then checked; a line of an older format read
         * back): it never crashes or leaks, and what it gives renders as
         * one JSON object on one line.
         */
        Toolpool__StoredResult *sr = NULL;
        if (tp_result_unpack(key, klen, val, vlen, &sr) == 0) {
            tp_buf_t line = {0};
            TP_FUZZ_CHECK(sr->result != NULL && tp_result_line(&line, sr) == 0);
            TP_FUZZ_CHECK(line.len > 0 && line.data[line.len - 1] == '\n');
            TP_FUZZ_CHECK(memchr(line.data, '\n', line.len - 1) == NULL);
            TP_FUZZ_CHECK(tp_json_check(line.data, line.len - 1, NULL) == 0);
            tp_buf_free(&line);
            tp_result_free(sr);
        } else {
            TP_FUZZ_CHECK(sr == NULL);
        }
    }
    ProtobufCMessage *m;
    int rc = tp_record_unpack(db, key, klen, val, vlen, desc, &m, why, sizeof why);
    if (rc != 0) {
        TP_FUZZ_CHECK(rc == TP_EPROTO && m == NULL && why[0] != 0);
        return 0;
    }
    TP_FUZZ_CHECK(tp_record_check(db, key, klen, m, why, sizeof why) == 0);
    if (desc == &toolpool__stored_result__descriptor) {
        /* a sound record renders (or keeps) one JSON object on one line */
        const Toolpool__StoredResult *r = (const Toolpool__StoredResult *)m;
        tp_buf_t line = {0};
        TP_FUZZ_CHECK(tp_result_line(&line, r) == 0 || r->result == NULL);
        if (line.len > 0) {
            TP_FUZZ_CHECK(line.data[line.len - 1] == '\n' && memchr(line.data, '\n', line.len - 1) == NULL);
            json_error_t err;
            json_t *v = json_loadb((const char *)line.data, line.len - 1, JSON_ALLOW_NUL, &err);
            TP_FUZZ_CHECK(v ? json_is_object(v) : tp_fuzz_jansson_only(err.text));
            json_decref(v);
        }
        tp_buf_free(&line);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
