/*
 * The engine options of run, serve and mcp (engineopts.h): their values
 * parsed and bounded in one place, the start-up they lead to, and the loop
 * serve and mcp run on.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"
#include "frame.h"
#include "log.h"
#include "prune.h"
#include "registry.h"
#include "results.h"
#include "store.h"

void tp_engine_cli_init(tp_engine_cli_t *c, uint64_t drain_us)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *c = (tp_engine_cli_t){
        .registry = "tools.json",
        .store_dir = tp_store_default_dir(),
        .engine =
            {
                .workers = cores > 0 ? (int)cores : 2,
                .worker_path = tp_pool_default_worker(),
                .max_frame = TP_FRAME_DEFAULT_MAX,
                .pipeline = 64,
                .drain_us = drain_us,
                .max_args = 16u << 20,
            },
    };
}

int tp_engine_cli_take(tp_engine_cli_t *c, int opt, const char *arg)
{
    tp_engine_opts_t *e = &c->engine;
    switch (opt) {
    case 'r':
        c->registry = arg;
        break;
    case TP_OPT_POLICY:
        c->policy = arg;
        break;
    case 's':
        c->store_dir = arg;
        break;
    case 'j':
        e->workers = (int)tp_cli_count("-j", arg, 1, 4096);
        break;
    case 'q':
        c->quiet = true;
        break;
    case TP_OPT_RELAXED:
        c->relaxed = true;
        break;
    case TP_OPT_RECYCLE_AFTER:
        e->recycle_after = tp_cli_count("--recycle-after", arg, 1, UINT64_MAX);
        break;
    case TP_OPT_PIPELINE:
        e->pipeline = (int)tp_cli_count("--pipeline", arg, 1, 64);
        break;
    case TP_OPT_MAX_FRAME:
        e->max_frame = (uint32_t)tp_cli_count("--max-frame", arg, 1024, 1u << 30);
        break;
    case TP_OPT_MAX_ARGS:
        e->max_args = (size_t)tp_cli_count("--max-args", arg, 2, 1u << 30);
        break;
    case TP_OPT_DRAIN:
        e->drain_us = tp_cli_duration("--drain", arg, 0);
        break;
    case TP_OPT_SEED:
        e->seed = tp_cli_count("--seed", arg, 1, UINT64_MAX);
        break;
    case TP_OPT_RETAIN:
        c->retain_us = tp_cli_duration("--retain", arg, 1);
        break;
    case TP_OPT_ON_VERSION_CHANGE:
        if (strcmp(arg, "rerun") == 0) {
            e->on_version_change = TP_VERSION_RERUN;
        } else if (strcmp(arg, "serve") == 0) {
            e->on_version_change = TP_VERSION_SERVE;
        } else if (strcmp(arg, "refuse") == 0) {
            e->on_version_change = TP_VERSION_REFUSE;
        } else {
            tp_log_error("cli.bad_option", "--on-version-change: expected rerun, serve or refuse, got \"%s\"", arg);
            exit(2);
        }
        break;
    case TP_OPT_OTLP:
        c->otlp.url = arg;
        break;
    case TP_OPT_OTLP_PAYLOADS:
        c->otlp.payloads = true;
        break;
    case TP_OPT_LOG_FORMAT:
    case TP_OPT_LOG_FILE: {
        /* Taken at once, so what goes wrong from here on is logged as asked. */
        char err[PATH_MAX + 64];
        if ((opt == TP_OPT_LOG_FORMAT ? tp_log_set_format(arg, err, sizeof err)
                                      : tp_log_set_file(arg, err, sizeof err)) < 0) {
            tp_log_error("cli.bad_option", "--%s: %s", opt == TP_OPT_LOG_FORMAT ? "log-format" : "log-file", err);
            exit(2);
        }
        break;
    }
    case TP_OPT_OTLP_PROTOCOL:
        if (tp_otlp_protocol(arg, "--otlp-protocol", &c->otlp.protocol) < 0) {
            tp_log_error("cli.bad_option", "--otlp-protocol: expected http/protobuf, http/json or grpc, got \"%s\"",
                         arg);
            exit(2);
        }
        c->otlp.protocol_set = true;
        break;
    default:
        return 0;
    }
    return 1;
}

/*
 * --on-version-change=refuse: the tools whose recorded results were made
 * under another version than the registry's now, said one line each
 * ("TOOL: recorded under OLD (N results), now NEW"). 0 when there are
 * none; -1 (said) when there are, or the store cannot be read.
 */
static int refuse_changed(const tp_registry_t *reg, tp_store_t *s, const char *dir)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    json_t *changed = json_object(); /* tool -> {old version: results} */
    int rc = changed ? tp_store_read(s, &txn) : TP_ENOMEM;
    if (rc == 0 && (rc = tp_mdb(mdb_cursor_open(txn, tp_store_dbi(s, TP_DB_RESULTS), &cur))) != 0)
        mdb_txn_abort(txn);
    if (rc) {
        tp_log_error("store.read_failed", "%s: cannot read the results: %s", dir, tp_strerror(rc));
        json_decref(changed);
        return -1;
    }
    for (rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_FIRST)); rc == 0;
         rc = tp_mdb(mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        Toolpool__StoredResult *sr;
        if (tp_result_unpack(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &sr) != 0)
            continue; /* a corrupt record: store check names it, and the run refuses it as it comes */
        const tp_tool_t *t = tp_registry_find(reg, sr->result->tool);
        const char *was = sr->result->version;
        if (t != NULL && strcmp(was, t->version_id ? t->version_id : "") != 0) {
            json_t *olds = json_object_get(changed, t->name);
            if (olds == NULL)
                json_object_set_new(changed, t->name, olds = json_object());
            json_object_set_new(olds, was, json_integer(json_integer_value(json_object_get(olds, was)) + 1));
        }
        tp_result_free(sr);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    const char *name, *was;
    json_t *olds, *n;
    json_object_foreach(changed, name, olds) {
        const char *now = tp_registry_find(reg, name)->version_id;
        tp_log_call_t lc = {.tool = name};
        json_object_foreach(olds, was, n) {
            tp_log_call_error(
                "version.changed", &lc, "%s: %lld result%s recorded under version %s%s%s, the registry's is %s%s%s",
                name, (long long)json_integer_value(n), json_integer_value(n) == 1 ? "" : "s", was[0] ? "\"" : "",
                was[0] ? was : "(none)", was[0] ? "\"" : "", now ? "\"" : "", now ? now : "(none)", now ? "\"" : "");
        }
    }
    size_t tools = json_object_size(changed);
    json_decref(changed);
    if (tools == 0)
        return 0;
    tp_log_error("version.refused",
                 "--on-version-change=refuse: %zu tool%s changed version since %s recorded %s results; "
                 "rerun (the default) runs them again, serve serves them",
                 tools, tools == 1 ? "" : "s", dir, tools == 1 ? "its" : "their");
    return -1;
}

int tp_engine_cli_open(tp_engine_cli_t *c)
{
    char err[TP_REGISTRY_ERRLEN];
    tp_registry_t *reg = tp_registry_load_policy(c->registry, c->policy, err, sizeof err);
    if (reg == NULL) {
        tp_log_error("registry.invalid", "%s", err);
        return -1;
    }
    tp_store_t *store = tp_store_open(c->store_dir, c->relaxed ? TP_STORE_NOSYNC : 0, err, sizeof err);
    if (store == NULL) {
        tp_log_error("store.open_failed", "%s", err);
        tp_registry_free(reg);
        return -1;
    }
    if (c->engine.on_version_change == TP_VERSION_REFUSE && refuse_changed(reg, store, c->store_dir) < 0) {
        tp_store_close(store);
        tp_registry_free(reg);
        return -1;
    }
    /*
     * The workers log as the supervisor does: they read the format and file
     * from their environment. Put there only now, after the MCP servers the
     * registry imports have answered, so no tool inherits them; and before
     * the exporter's thread starts, which reads the environment (libcurl's
     * proxies) while setenv may move it.
     */
    tp_log_export_env();
    if (tp_otlp_start(&c->otlp, &c->exporter) < 0) {
        tp_store_close(store);
        tp_registry_free(reg);
        return -1;
    }
    c->engine.reg = reg;
    c->engine.store = store;
    if (c->retain_us == 0)
        c->retain_us = reg->retain_us;
    if (c->exporter) {
        c->engine.on_begin = tp_otlp_call_begin;
        c->engine.on_end = tp_otlp_call_end;
        c->engine.on_end_ctx = c->exporter;
    }
    return 0;
}

void tp_engine_cli_close(tp_engine_cli_t *c)
{
    if (c->exporter) {
        uint64_t exported, dropped;
        tp_otlp_stop(c->exporter, &exported, &dropped);
        if (!c->quiet || dropped)
            fprintf(stderr, "toolpool: otlp: %llu span%s exported, %llu dropped\n", (unsigned long long)exported,
                    exported == 1 ? "" : "s", (unsigned long long)dropped);
    }
    c->exporter = NULL;
    c->engine.on_begin = NULL;
    c->engine.on_end = NULL;
    tp_store_close(c->engine.store);
    tp_registry_free((tp_registry_t *)c->engine.reg);
    c->engine.store = NULL;
    c->engine.reg = NULL;
}

unsigned long long tp_cli_count(const char *opt, const char *v, unsigned long long min, unsigned long long max)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || end == v || n < min || n > max || v[0] == '-') {
        tp_log_error("cli.bad_option", "%s: expected an integer in [%llu, %llu], got \"%s\"", opt, min, max, v);
        exit(2);
    }
    return n;
}

uint64_t tp_cli_duration(const char *opt, const char *v, uint64_t min_us)
{
    uint64_t us;
    if (tp_duration_parse(v, &us) < 0 || us < min_us) {
        tp_log_error("cli.bad_option", "%s: expected a duration like \"10s\"%s, got \"%s\"", opt,
                     min_us ? " (more than 0)" : "", v);
        exit(2);
    }
    return us;
}

int tp_host_finish(tp_loop_t *loop, tp_engine_t *e, void (*finish)(void *front, uint64_t timeout_us), void *front)
{
    if (event_base_dispatch(loop->base) < 0)
        tp_log_error("loop.failed", "the event loop failed");
    tp_engine_finish(e);
    finish(front, TP_HOST_FINISH_US);
    return tp_engine_failed(e) ? 2 : 0;
}

/* What a retention pass says when it has pruned something. */
static void retain_said(const char *dir, const tp_prune_t *p, bool quiet)
{
    if (!quiet && p->results)
        tp_log_info("store.retention_pruned", "%s: retention pruned %llu result%s and %llu checkpoint%s", dir,
                    (unsigned long long)p->results, p->results == 1 ? "" : "s", (unsigned long long)p->checkpoints,
                    p->checkpoints == 1 ? "" : "s");
}

int tp_host_retain_now(tp_store_t *s, uint64_t retain_us, bool quiet)
{
    if (retain_us == 0)
        return 0;
    tp_prune_sel_t sel = {.before_us = tp_unix_us() - retain_us};
    tp_prune_t p = {0};
    char err[1024];
    if (tp_prune_run(s, &sel, &p, NULL, err, sizeof err) != 0) {
        tp_log_error("store.retention_failed", "retention: %s", err);
        return -1;
    }
    retain_said(tp_store_dir(s), &p, quiet);
    return 0;
}

struct tp_host_retain {
    tp_engine_t *e;
    struct event *ev;
    uint64_t retain_us;
    bool quiet;
    tp_prune_sel_t sel;
    tp_prune_t p;
};

static int retain_batch_op(void *ctx, tp_store_t *s, MDB_txn *txn)
{
    tp_host_retain_t *r = ctx;
    return tp_prune_batch(s, txn, &r->sel, &r->p, TP_PRUNE_BATCH, false, NULL, NULL);
}

/* One batch, then the next at the next loop turn, or, the pass done, the next pass in a day. */
static void retain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tp_host_retain_t *r = arg;
    if (tp_engine_draining(r->e))
        return;
    if (!r->p.started && !r->p.done)
        r->sel.before_us = tp_unix_us() - r->retain_us;
    int rc = tp_engine_store_op(r->e, 1u << 20, retain_batch_op, r);
    struct timeval soon = {0, 0}, day = {(time_t)(TP_HOST_RETAIN_EVERY_US / 1000000u), 0};
    if (rc == TP_EAGAIN)
        return; /* the engine has failed, or has no store: nothing more to do */
    if (rc) {
        tp_engine_store_failed(r->e, rc, "retention: pruning old results");
        return;
    }
    if (!r->p.done) {
        event_add(r->ev, &soon);
        return;
    }
    retain_said(tp_store_dir(tp_engine_store(r->e)), &r->p, r->quiet);
    r->p = (tp_prune_t){0};
    event_add(r->ev, &day);
}

tp_host_retain_t *tp_host_retain_start(tp_engine_t *e, uint64_t retain_us, bool quiet)
{
    if (retain_us == 0)
        return NULL;
    tp_host_retain_t *r = calloc(1, sizeof *r);
    if (r == NULL || (r->ev = evtimer_new(tp_engine_loop(e), retain_cb, r)) == NULL) {
        free(r);
        tp_log_error("store.retention_failed", "retention: out of memory; results are kept");
        return NULL;
    }
    r->e = e;
    r->retain_us = retain_us;
    r->quiet = quiet;
    struct timeval now = {0, 0};
    event_add(r->ev, &now);
    return r;
}

void tp_host_retain_free(tp_host_retain_t *r)
{
    if (r == NULL)
        return;
    event_free(r->ev);
    free(r);
}
