/*
 * The engine options of run, serve and mcp (engineopts.h): their values
 * parsed and bounded in one place, the start-up they lead to, and the loop
 * serve and mcp run on.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "host.h"
#include "frame.h"
#include "log.h"
#include "registry.h"
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
    case TP_OPT_OTLP:
        c->otlp.url = arg;
        break;
    case TP_OPT_OTLP_PAYLOADS:
        c->otlp.payloads = true;
        break;
    default:
        return 0;
    }
    return 1;
}

int tp_engine_cli_open(tp_engine_cli_t *c)
{
    char err[TP_REGISTRY_ERRLEN];
    tp_registry_t *reg = tp_registry_load_policy(c->registry, c->policy, err, sizeof err);
    if (reg == NULL) {
        tp_log_error("%s", err);
        return -1;
    }
    tp_store_t *store = tp_store_open(c->store_dir, c->relaxed ? TP_STORE_NOSYNC : 0, err, sizeof err);
    if (store == NULL) {
        tp_log_error("%s", err);
        tp_registry_free(reg);
        return -1;
    }
    if (tp_otlp_start(&c->otlp, &c->exporter) < 0) {
        tp_store_close(store);
        tp_registry_free(reg);
        return -1;
    }
    c->engine.reg = reg;
    c->engine.store = store;
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
        tp_log_error("%s: expected an integer in [%llu, %llu], got \"%s\"", opt, min, max, v);
        exit(2);
    }
    return n;
}

uint64_t tp_cli_duration(const char *opt, const char *v, uint64_t min_us)
{
    uint64_t us;
    if (tp_duration_parse(v, &us) < 0 || us < min_us) {
        tp_log_error("%s: expected a duration like \"10s\"%s, got \"%s\"", opt, min_us ? " (more than 0)" : "", v);
        exit(2);
    }
    return us;
}

int tp_host_finish(tp_loop_t *loop, tp_engine_t *e, void (*finish)(void *front, uint64_t timeout_us), void *front)
{
    if (event_base_dispatch(loop->base) < 0)
        tp_log_error("the event loop failed");
    tp_engine_finish(e);
    finish(front, TP_HOST_FINISH_US);
    return tp_engine_failed(e) ? 2 : 0;
}
