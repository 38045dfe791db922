/*
 * What an operator asks the service: /v1/breakers and /v1/escalations
 * (what `toolpool breakers` and `escalations` do, on the running
 * service's store), /v1/tools (the registry's tools three ways), and
 * /healthz, /readyz.
 */
#include "http_internal.h"
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "records.h"
#include "toolsdoc.h"

/* ---- /v1/breakers, /v1/escalations: what `toolpool breakers` and `escalations` do ---- */

/* What a request asks of the store's breakers or escalations, done in the engine's turn; and what it got. */
typedef struct {
    const char *key; /* a breaker's key or an escalation's id; NULL: all of them */
    bool everything; /* escalations: the resolved ones too */
    const char *note;
    bool rerun;
    char id[TP_RECORDS_ID_MAX];
    char call_id[600];
    bool forgot;
    json_t *o;
    Toolpool__Escalation *e;
} admin_op_t;

static int breakers_get_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    admin_op_t *op = ctx;
    int rc;
    if (op->key == NULL) {
        json_t *all = NULL;
        rc = tp_records_breakers_json(s, txn, &all);
        if (rc == 0 && (op->o = json_pack("{s:o}", "breakers", all)) == NULL)
            rc = TP_ENOMEM;
    } else {
        MDB_val k, v;
        rc = tp_records_breaker_find(s, txn, op->key, &k, &v);
        if (rc == 0 && (op->o = tp_records_breaker_json(&k, &v, true)) == NULL)
            rc = TP_EPROTO;
    }
    return rc;
}

static int breakers_reset_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    admin_op_t *op = ctx;
    return tp_records_breaker_reset(s, txn, op->key, op->id, sizeof op->id);
}

static int escalations_get_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    admin_op_t *op = ctx;
    if (op->key == NULL) {
        json_t *list = NULL;
        int rc = tp_records_escalations_json(s, txn, op->everything, &list);
        if (rc == 0 && (op->o = json_pack("{s:o}", "escalations", list)) == NULL)
            rc = TP_ENOMEM;
        return rc;
    }
    Toolpool__Escalation *e;
    int rc = tp_records_escalation_get(s, txn, op->key, &e);
    if (rc == 0) {
        op->o = tp_records_escalation_json(e, true);
        toolpool__escalation__free_unpacked(e, NULL);
        rc = op->o ? 0 : TP_ENOMEM;
    }
    return rc;
}

static int escalations_resolve_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    admin_op_t *op = ctx;
    int rc = op->rerun
                 ? tp_records_escalation_rerun(s, txn, op->key, op->note, op->call_id, sizeof op->call_id, &op->forgot)
                 : tp_records_escalation_resolve(s, txn, op->key, op->note);
    return rc ? rc : tp_records_escalation_get(s, txn, op->key, &op->e);
}

/*
 * A lookup's reply: 404 with msg when there is none (409 when more than
 * one breaker matches), 500 out of memory, the store's failure, or o.
 */
static void reply_lookup(tp_http_t *h, tp_hreq_t *req, int rc, const char *msg, const char *what, json_t *o)
{
    if (rc == MDB_NOTFOUND || rc == TP_EEXIST)
        http_reply_error_when_durable(h, req, rc == TP_EEXIST ? 409 : 404, rc == TP_EEXIST ? "Conflict" : "NotFound",
                                      msg);
    else if (rc == TP_ENOMEM)
        http_reply_error(h, req, 500, "InternalError", "out of memory");
    else if (rc)
        http_store_error(h, req, rc, what);
    else
        http_reply_json_when_durable(h, req, 200, o);
}

void http_breakers_get(tp_http_t *h, tp_hreq_t *req, const char *key)
{
    admin_op_t op = {.key = key};
    int rc = http_store_op(h, req, 0, breakers_get_op, &op);
    json_t *o = op.o;
    if (rc == TP_EAGAIN)
        return;
    char msg[800];
    snprintf(msg, sizeof msg, "%s breaker %.600s", rc == TP_EEXIST ? "more than one" : "no", key ? key : "");
    reply_lookup(h, req, rc, msg, "reading the breakers", o);
}

/* POST /v1/breakers/ID/reset: closes the breaker and forgets its failures, committed before the reply. */
void http_breakers_reset(tp_http_t *h, tp_hreq_t *req, const char *key)
{
    admin_op_t op = {.key = key};
    char msg[800];
    int rc = http_store_op(h, req, 0, breakers_reset_op, &op);
    if (rc == TP_EAGAIN)
        return;
    if (rc == MDB_NOTFOUND || rc == TP_EEXIST) {
        snprintf(msg, sizeof msg, "%s breaker %.600s", rc == TP_EEXIST ? "more than one" : "no", key);
        http_reply_error_when_durable(h, req, rc == TP_EEXIST ? 409 : 404, rc == TP_EEXIST ? "Conflict" : "NotFound",
                                      msg);
    } else if (rc) {
        http_store_error(h, req, rc, "resetting a breaker");
    } else {
        http_reply_json_when_durable(h, req, 200, json_pack("{s:s, s:b}", "id", op.id, "reset", 1));
    }
}

void http_escalations_get(tp_http_t *h, tp_hreq_t *req, const char *id)
{
    char all[8];
    admin_op_t op = {.key = id};
    op.everything = id == NULL && http_query_get(req, "all", all, sizeof all) && strcmp(all, "0") != 0 &&
                    strcmp(all, "false") != 0;
    int rc = http_store_op(h, req, 0, escalations_get_op, &op);
    json_t *o = op.o;
    if (rc == TP_EAGAIN)
        return;
    char msg[600];
    snprintf(msg, sizeof msg, "no escalation %.500s", id ? id : "");
    reply_lookup(h, req, rc, msg, "reading the escalations", o);
}

/* POST /v1/escalations/ID/resolve, body optional {"note": "..."}: the escalation as it is now resolved. */
void http_escalations_resolve(tp_http_t *h, tp_hreq_t *req, const char *id)
{
    size_t len;
    const char *body;
    if (http_body_of(h, req, &body, &len) < 0)
        return;
    json_t *doc = NULL;
    const char *note = NULL;
    bool rerun = false;
    if (body) {
        json_error_t jerr;
        doc = tp_json_loadb(body, len, 0, &jerr);
        if (doc == NULL) {
            http_reply_error(h, req, 400, "InvalidRequest", "not valid JSON: %s (column %d)", jerr.text, jerr.column);
            return;
        }
        json_t *jnote = json_object_get(doc, "note"), *jrerun = json_object_get(doc, "rerun");
        json_t *jaccept = json_object_get(doc, "accept");
        if (!json_is_object(doc) || (jnote && !json_is_string(jnote)) || (jrerun && !json_is_boolean(jrerun)) ||
            (jaccept && !json_is_boolean(jaccept)) || (json_is_true(jrerun) && json_is_true(jaccept))) {
            json_decref(doc);
            http_reply_error(h, req, 400, "InvalidRequest",
                             "the body must be {\"note\": \"...\", \"rerun\": true | \"accept\": true} (or nothing)");
            return;
        }
        note = json_string_value(jnote);
        rerun = json_is_true(jrerun);
    }
    admin_op_t op = {.key = id, .note = note, .rerun = rerun};
    int rc = http_store_op(h, req, 0, escalations_resolve_op, &op);
    json_decref(doc);
    Toolpool__Escalation *e = op.e;
    bool forgot = op.forgot;
    if (rc == TP_EAGAIN)
        return;
    if (rc == MDB_NOTFOUND) {
        char msg[600];
        snprintf(msg, sizeof msg, "no escalation %.500s", id);
        http_reply_error_when_durable(h, req, 404, "NotFound", msg);
    } else if (rc) {
        http_store_error(h, req, rc, "resolving an escalation");
    } else {
        json_t *o = tp_records_escalation_json(e, true);
        toolpool__escalation__free_unpacked(e, NULL);
        if (o && (json_object_set_new(o, "decision", json_string(rerun ? "rerun" : "accept")) != 0 ||
                  json_object_set_new(o, "forgot", json_boolean(forgot)) != 0)) {
            json_decref(o);
            o = NULL;
        }
        http_reply_json_when_durable(h, req, 200, o);
    }
}

/* ---- /v1/tools ---- */

/*
 * The registry's tools three ways, rendered once (the registry does not
 * change while serve runs) by supervisor/registry/toolsdoc.c, as `toolpool tools
 * export` prints them.
 */
/*
 * The values of o's object key that a registry wrote as they are (an http
 * tool's headers, an mcp tool's env), not as a ${env:NAME} or ${file:PATH}
 * reference: they may be secrets, and the service's clients are not the
 * registry's readers. Shown as hidden.
 */
static void hide_literals(json_t *o, const char *key)
{
    json_t *m = json_object_get(o, key), *v;
    const char *name;
    json_object_foreach(m, name, v)
        if (json_is_string(v) && strncmp(json_string_value(v), "${", 2) != 0)
            json_object_set_new(m, name, json_string("(hidden: written in the registry)"));
}

int http_tools_render(tp_http_t *h)
{
    const tp_registry_t *reg = tp_engine_registry(h->e);
    tp_buf_t *bufs[] = {&h->tools_own, &h->tools_openai, &h->tools_mcp};
    tp_toolsdoc_format_t fmts[] = {TP_TOOLSDOC_TOOLPOOL, TP_TOOLSDOC_OPENAI, TP_TOOLSDOC_MCP};
    for (size_t i = 0; i < 3; i++) {
        json_t *doc = tp_toolsdoc_render(reg, fmts[i]), *t;
        size_t k;
        json_array_foreach(json_object_get(doc, "tools"), k, t) {
            hide_literals(json_object_get(t, "http"), "headers");
            hide_literals(json_object_get(t, "mcp"), "env");
        }
        if (doc == NULL || http_json_body(bufs[i], doc) < 0)
            return -1;
    }
    return 0;
}

void http_tools_get(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    char format[32];
    const char *f = http_query_get(req, "format", format, sizeof format);
    const tp_buf_t *b = f == NULL || strcmp(f, "toolpool") == 0 ? &h->tools_own
                        : strcmp(f, "openai") == 0              ? &h->tools_openai
                        : strcmp(f, "mcp") == 0                 ? &h->tools_mcp
                                                                : NULL;
    if (b == NULL) {
        http_reply_error(h, req, 400, "InvalidRequest", "format \"%.100s\": expected openai, mcp or toolpool", f);
        return;
    }
    http_reply(h, req, 200, "application/json", b->data, b->len);
}

/* ---- /healthz, /readyz ---- */

/* Why the service cannot take calls now, or NULL when it can: workers up, store usable, not draining. */
static const char *not_ready(tp_http_t *h)
{
    if (h->draining || tp_engine_draining(h->e))
        return "draining";
    if (tp_engine_failed(h->e))
        return "the engine stopped on an error (see the service's log)";
    if (tp_engine_store(h->e) == NULL)
        return "no store";
    if (tp_engine_busy(h->e) + tp_engine_idle(h->e) == 0)
        return "no worker is up yet";
    return NULL;
}

/* GET /healthz: the process answers. */
void http_healthz(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    http_reply(h, req, 200, "text/plain", "ok\n", 3);
}

/* GET /readyz: 200 when the service can take calls, 503 saying why not. */
void http_readyz(tp_http_t *h, tp_hreq_t *req, const char *name)
{
    const char *why = not_ready(h);
    if (why)
        http_reply_error(h, req, 503, "NotReady", "%s", why);
    else
        http_reply(h, req, 200, "text/plain", "ok\n", 3);
}
