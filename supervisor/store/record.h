/*
 * The store's records, checked as they are read.
 *
 * LMDB keeps no checksum, and protobuf-c unpacks most byte strings into
 * some message: a record damaged on disk, or by a program that wrote over
 * the store's files, would reach a result line or a decision as it is.
 * So every record read goes through tp_record_unpack: its value must
 * unpack as the message its database holds under that key, and its fields
 * must be sane (what each message must hold is at tp_record_check). A bad
 * one is TP_EPROTO, with what is wrong in words, and nothing of it is used.
 *
 * tp_store_get_msg checks every record it reads this way; `toolpool store
 * check` reads every record of a store with the same checks.
 */
#ifndef TP_RECORD_H
#define TP_RECORD_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

#include "dbs.h"
#include "error.h"

/* The length of every digest the store keeps (XXH128). */
#define TP_RECORD_DIGEST_LEN 16

/*
 * The message db holds under key: StoredResult (results), Checkpoint
 * (jobs), InFlight (inflight), Escalation (escalations), McpTask (tasks), CallBreaker and
 * ToolBreaker (breakers, by the key's first byte 'c' or 't'), StoreFormat
 * (meta/format), Owners (meta/owners), InputRecord (meta/input). NULL for meta/escalation_seq (a raw u64: see
 * tp_record_check_raw), for a meta key this version does not know, and for
 * a breakers key that is neither kind.
 */
const ProtobufCMessageDescriptor *tp_record_type(tp_db_t db, const void *key, size_t klen);

/*
 * Whether m, read from db under key, is sane. For the messages this
 * version writes:
 *   StoredResult  a result whose id is the key, with a 16-byte input
 *                 digest, a kind when not ok, and a result and args that
 *                 are JSON on one line; a line, when it keeps one (and
 *                 in formats 2 and 3, a line and no result), that is one
 *                 JSON object ending in its only '\n', whose "id" is the
 *                 key and whose "ok" is the record's
 *   Checkpoint    its job is the key; no empty call id in its message
 *                 list; stopped empty or a guard's kind; a cost that is a
 *                 finite number >= 0; an agent state, if any, that is JSON
 *   InFlight      its call id is the key; a 16-byte digest; a tool
 *   Escalation    its id is the key; a tool; args empty or JSON
 *   McpTask       its task id is the key; a tool and a job; args empty or JSON
 *   CallBreaker   a key 'c' TOOL \0 DIGEST whose tool and digest are the
 *                 record's; args empty or JSON
 *   ToolBreaker   a key 't' TOOL whose tool is the record's; a known
 *                 state; at most 10 buckets, none with more failures than
 *                 calls
 *   StoreFormat   a version
 *   Owners        each owner a process, joined at a generation already made
 *   InputRecord   16-byte digests; a shard below its count; no more of its
 *                 calls than the input has
 * Any other message passes once it has unpacked. 0, or TP_EPROTO with why.
 */
int tp_record_check(tp_db_t db, const void *key, size_t klen, const ProtobufCMessage *m, char *why, size_t cap);

/*
 * Unpacks val (vlen bytes) as desc and checks it. 0 and *out (free with
 * protobuf_c_message_free_unpacked); TP_EPROTO with why and *out NULL.
 */
int tp_record_unpack(tp_db_t db, const void *key, size_t klen, const void *val, size_t vlen,
                     const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, char *why, size_t cap);

/* A value that is not a message: meta/escalation_seq must be 8 bytes. 0, or TP_EPROTO with why. */
int tp_record_check_raw(tp_db_t db, const void *key, size_t klen, size_t vlen, char *why, size_t cap);

/*
 * A record's name for a person, never raw bytes: the database and the key
 * (`results "c1"`; breakers as `breakers tool/NAME` and
 * `breakers call/NAME/DIGEST`), bytes that are not printable UTF-8
 * written as \xNN. Returns buf.
 */
const char *tp_record_name(tp_db_t db, const void *key, size_t klen, char *buf, size_t cap);

#endif
