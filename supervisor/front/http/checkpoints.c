/*
 * /v1/jobs/JOB/checkpoint: an agent loop's own checkpoint of a job, put
 * and got in the engine's turn (tp_engine_store_op).
 */
#include "http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "json.h"
#include "records.h"

/* ---- /v1/jobs/JOB/checkpoint ---- */

typedef struct {
    const char *job;
    uint64_t step;
    const tp_buf_t *text;
} state_put_t;

static int state_put_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    const state_put_t *put = ctx;
    return tp_checkpoint_state_put(s, txn, put->job, put->step, (const char *)put->text->data, put->text->len);
}

typedef struct {
    const char *job;
    json_t *o;
} state_get_t;

static int state_get_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    state_get_t *get = ctx;
    return tp_records_agent_state_json(s, txn, get->job, &get->o);
}

/*
 * PUT: {"step": N, "state": ANY} stores an agent loop's own checkpoint of
 * the job (the latest replaces the last), committed before the reply
 * {"job", "step"}. GET: {"job", "step", "state", "updated_ms"}, or 404.
 */
void http_checkpoint_put(tp_http_t *h, tp_hreq_t *req, const char *job)
{
    size_t len;
    const char *body;
    if (http_body_of(h, req, &body, &len) < 0)
        return;
    json_error_t jerr;
    json_t *doc = body ? tp_json_loadb(body, len, 0, &jerr) : NULL;
    json_t *jstep = json_object_get(doc, "step"), *state = json_object_get(doc, "state");
    if (doc == NULL) {
        if (body)
            http_reply_error(h, req, 400, "InvalidRequest", "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        else
            http_reply_error(h, req, 400, "InvalidRequest", "the body is empty: send {\"step\": N, \"state\": ...}");
        return;
    }
    const char *bad = !json_is_object(doc) ? "a checkpoint must be a JSON object"
                      : !json_is_integer(jstep) || json_integer_value(jstep) < 0
                          ? "\"step\" must be a non-negative integer"
                      : state == NULL ? "\"state\" is missing (any JSON will do)"
                                      : NULL;
    if (bad) {
        http_reply_error(h, req, 400, "InvalidRequest", "%s", bad);
        json_decref(doc);
        return;
    }
    uint64_t step = (uint64_t)json_integer_value(jstep);
    tp_buf_t text = {0};
    if (tp_json_write(&text, state, 0) < 0) {
        tp_buf_free(&text);
        json_decref(doc);
        http_reply_error(h, req, 500, "InternalError", "out of memory");
        return;
    }
    json_decref(doc);
    tp_store_t *store = tp_engine_store(h->e);
    if (store && strlen(job) > tp_store_max_key(store)) {
        tp_buf_free(&text);
        http_reply_error(h, req, 400, "InvalidRequest", "the job's name is %zu bytes; the store takes at most %zu",
                         strlen(job), tp_store_max_key(store));
        return;
    }
    state_put_t put = {.job = job, .step = step, .text = &text};
    int rc = http_store_op(h, req, text.len, state_put_op, &put);
    tp_buf_free(&text);
    if (rc == TP_EAGAIN)
        return; /* no store, or the engine failed (making room, say): it said why */
    if (rc) {
        http_store_error(h, req, rc, "saving a job's checkpoint");
        return;
    }
    http_reply_json_when_durable(h, req, 200, json_pack("{s:s, s:I}", "job", job, "step", (json_int_t)step));
}

void http_checkpoint_get(tp_http_t *h, tp_hreq_t *req, const char *job)
{
    state_get_t get = {.job = job};
    int rc = http_store_op(h, req, 0, state_get_op, &get);
    json_t *o = get.o;
    if (rc == TP_EAGAIN)
        return;
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "job \"%.500s\" has no checkpoint saved", job);
        http_reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else if (rc == TP_ENOMEM) {
        http_reply_error(h, req, 500, "InternalError", "out of memory");
    } else if (rc) {
        http_store_error(h, req, rc, "reading a job's checkpoint");
    } else {
        http_reply_json_when_durable(h, req, 200, o);
    }
}
