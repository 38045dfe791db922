/*
 * The fallback chain: when a hop fails in a way the called tool falls back
 * on, the next tool of its chain runs, with the call's args or an object
 * its fallback entry maps out of them; at the chain's end, the declared
 * degraded answer or an escalation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "json.h"
#include "jsonschema.h"

/*
 * The value at a JSON Pointer (RFC 6901) in doc, or NULL: "" is doc itself;
 * "/a/0/b~1c" steps through keys and array indexes (~1 is "/", ~0 "~").
 */
static json_t *json_at(json_t *doc, const char *ptr)
{
    char tok[512];
    while (doc && *ptr == '/') {
        ptr++;
        size_t n = 0;
        for (; *ptr && *ptr != '/' && n + 1 < sizeof tok; ptr++) {
            if (ptr[0] == '~' && (ptr[1] == '0' || ptr[1] == '1')) {
                tok[n++] = ptr[1] == '0' ? '~' : '/';
                ptr++;
            } else {
                tok[n++] = *ptr;
            }
        }
        tok[n] = 0;
        if (json_is_object(doc)) {
            doc = json_object_get(doc, tok);
        } else if (json_is_array(doc)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            doc = *end || !*tok || (tok[0] == '0' && tok[1]) ? NULL : json_array_get(doc, i);
        } else {
            doc = NULL;
        }
    }
    return *ptr ? NULL : doc;
}

/*
 * The args the current hop gets: the call's, or (its fallback entry maps
 * them) an object built from JSON Pointers into them; then checked
 * against the hop's own parameters. Returns true when the hop may run;
 * false with why (InvalidArguments on this hop) in msg.
 */
static bool hop_args(tp_call_t *c, const json_t *map, char *msg, size_t cap)
{
    free(c->hop_args);
    c->hop_args = NULL;
    c->hop_digest = c->digest;
    const tp_tool_t *t = c->hop_tool;
    if (map == NULL && t->schema == NULL)
        return true;
    json_t *orig = tp_json_loadb(c->args, c->args_len, 0, NULL), *args = NULL;
    if (orig == NULL) {
        snprintf(msg, cap, "%s: invalid arguments: the call's args cannot be read", t->name);
        return false;
    }
    if (map) {
        args = json_object();
        const char *k;
        json_t *p;
        json_object_foreach((json_t *)map, k, p) {
            json_t *v = json_at(orig, json_string_value(p));
            if (v == NULL) {
                snprintf(msg, cap, "%s: invalid arguments: %s: the call's args have nothing at %s (fallback args)",
                         t->name, k, json_string_value(p));
                json_decref(args);
                json_decref(orig);
                return false;
            }
            json_object_set(args, k, v);
        }
    } else {
        args = json_incref(orig);
    }
    json_decref(orig);
    bool ok = true;
    if (t->schema) {
        tp_buf_t why = {0};
        if (!eng_args_valid(t, args, &why)) {
            snprintf(msg, cap, "%s", why.data ? (const char *)why.data : "out of memory validating the arguments");
            ok = false;
        }
        tp_buf_free(&why);
    }
    if (ok && map) {
        c->hop_args = json_dumps(args, JSON_COMPACT);
        c->hop_args_len = c->hop_args ? strlen(c->hop_args) : 0;
        tp_digest_args(args, &c->hop_digest);
        if (c->hop_args == NULL) {
            snprintf(msg, cap, "%s: out of memory building the fallback's args", t->name);
            ok = false;
        }
    }
    json_decref(args);
    return ok;
}

/* The next hop of the call's fallback chain becomes current. */
static void next_hop(tp_engine_t *e, tp_call_t *c)
{
    if (e->draining) {
        eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "run interrupted before the next hop of the fallback chain");
        return;
    }
    const tp_policy_t *p = &c->tool->policy;
    const json_t *map = p->fallback_args ? p->fallback_args[c->hop] : NULL;
    c->hop_tool = tp_registry_find(e->o.reg, p->fallback[c->hop]);
    c->hop++;
    c->hop_attempts = 0;
    c->hop_deadline_us = 0;
    c->hop_key_set = false;
    char msg[1024];
    if (!hop_args(c, map, msg, sizeof msg)) {
        /* Not run: the hop would refuse these args; the chain goes on. */
        if (!eng_trace_add(c, 0, tp_kind_name(TP_KIND_INVALID_ARGUMENTS), 0)) {
            eng_finish(e, c, END_FAIL, TP_KIND_CANCELLED, "out of memory recording the trace");
            return;
        }
        eng_hop_failed(e, c, TP_KIND_INVALID_ARGUMENTS, msg);
        return;
    }
    tp_queue_push(&e->ready, c);
}

/*
 * The current hop is done and did not answer (kind, msg as for eng_finish).
 * The chain goes on to its next hop when the failure's class is one the
 * called tool falls back on (an open circuit always is); at the chain's end
 * comes the declared degraded answer, or the escalation queue.
 */
void eng_hop_failed(tp_engine_t *e, tp_call_t *c, tp_kind_t kind, const char *msg)
{
    const tp_policy_t *p = &c->tool->policy;
    tp_kind_t k = msg ? kind : c->att.kind;
    tp_class_t klass = tp_kind_class(k);
    /* A hop skipped (its circuit open, or args it would refuse) always moves the chain on. */
    bool fall = k == TP_KIND_CIRCUIT_OPEN || (k == TP_KIND_INVALID_ARGUMENTS && c->hop > 0) ||
                (p->fallback_on & (1u << klass));
    if (fall && c->hop < p->n_fallback) {
        next_hop(e, c);
        return;
    }
    if (p->n_fallback > 0 && fall) {
        if (p->degraded) {
            eng_finish(e, c, END_DEGRADED, TP_KIND_OK, NULL);
            return;
        }
        eng_escalate(e, c, msg ? tp_kind_name(kind) : c->att.kind_name, msg ? msg : c->att.message,
                     "every hop of the fallback chain failed");
    }
    eng_finish(e, c, END_FAIL, kind, msg);
}
