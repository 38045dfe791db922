/*
 * toolpool store prune: drops recorded results a selector names, and the
 * checkpoints of jobs left with none (supervisor/store/prune.h), batch
 * after batch, each batch one write transaction: beside a running
 * supervisor, which waits at most one batch; killed at any moment, it
 * leaves a sound store, and the next prune finishes.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "prune.h"
#include "store.h"

/* clang-format off */
static const char prune_usage[] =
    "usage: toolpool store prune [--store DIR] SELECTOR... [--dry-run]\n"
    "Drops the recorded results that match every selector given, with their\n"
    "places in their jobs' lists, and the checkpoint of a job left with no\n"
    "result (an agent loop's own saved state stays), as `toolpool forget` does:\n"
    "the next run on the store does a pruned call again. Breakers, escalations\n"
    "and in-flight markers stay. Never pruned: a call with an open escalation,\n"
    "and the calls of a job a live run, serve or mcp has a call of in flight.\n"
    "It runs beside them, in batches of a transaction each; interrupted, the\n"
    "next prune finishes. The file keeps its size: `toolpool store compact`\n"
    "gives the space back.\n"
    "  -s, --store DIR       the store (default: $TOOLPOOL_STORE, else .toolpool)\n"
    "      --older-than D    results recorded more than D ago (\"30d\", \"12h\")\n"
    "      --job J           results of job J (again for more jobs)\n"
    "      --jobs-from FILE  results of the jobs named in FILE, one a line\n"
    "      --ok              results that succeeded\n"
    "      --failed          results that failed\n"
    "      --kind K          results that failed with kind K (\"Timeout\")\n"
    "      --tool T          results of tool T\n"
    "      --keep-escalated  keep the calls of open escalations (always so)\n"
    "      --dry-run         list what would go, drop nothing\n"
    "exit status: 0 results pruned (or, --dry-run, listed), 1 none matched,\n"
    "2 usage or store error\n";
/* clang-format on */

typedef struct {
    char **v;
    size_t n, cap;
} names_t;

static names_t jobs;
static bool jobs_named; /* --job or --jobs-from was given (a file may name none) */

static int add_job(const char *name, size_t len)
{
    if (jobs.n == jobs.cap) {
        size_t cap = jobs.cap ? 2 * jobs.cap : 16;
        char **v = realloc(jobs.v, cap * sizeof *v);
        if (v == NULL)
            return -1;
        jobs.v = v;
        jobs.cap = cap;
    }
    if ((jobs.v[jobs.n] = strndup(name, len)) == NULL)
        return -1;
    jobs.n++;
    return 0;
}

static int take_job(const tp_cli_opt_t *o, const char *arg)
{
    (void)o;
    jobs_named = true;
    if (arg[0] == '\0') {
        tp_log_error("cli.bad_option", "--job: expected a job's name, got \"\"");
        return 2;
    }
    if (add_job(arg, strlen(arg)) < 0) {
        tp_log_error("cli.out_of_memory", "out of memory");
        return 2;
    }
    return 0;
}

static int take_jobs_from(const tp_cli_opt_t *o, const char *arg)
{
    (void)o;
    jobs_named = true;
    FILE *f = strcmp(arg, "-") == 0 ? stdin : fopen(arg, "r");
    if (f == NULL) {
        tp_log_error("cli.open_failed", "--jobs-from: cannot open %s: %s", arg, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n > 0 && add_job(line, (size_t)n) < 0) {
            tp_log_error("cli.out_of_memory", "out of memory");
            rc = 2;
        }
    }
    if (rc == 0 && ferror(f)) {
        tp_log_error("cli.read_failed", "--jobs-from: cannot read %s: %s", arg, strerror(errno));
        rc = 2;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

static void say_would(void *ctx, const Toolpool__StoredResult *sr)
{
    (void)ctx;
    const Toolpool__Result *r = sr->result;
    char when[32];
    printf("would prune results \"%s\": job %s, tool %s, %s, recorded %s\n", r->id, r->job[0] ? r->job : r->id, r->tool,
           r->ok ? "ok" : r->kind, tp_cli_when(sr->ended_unix_us, when, sizeof when));
}

/* The dry run: the same batches, in one read transaction, dropping nothing. */
static int dry_run(tp_store_t *s, const tp_prune_sel_t *sel, tp_prune_t *p)
{
    MDB_txn *txn;
    int rc = tp_store_read(s, &txn);
    if (rc)
        return rc;
    while (rc == 0 && !p->done)
        rc = tp_prune_batch(s, txn, sel, p, TP_PRUNE_BATCH, true, say_would, NULL);
    mdb_txn_abort(txn);
    return rc;
}

int tp_cmd_store_prune(int argc, char **argv)
{
    const char *dir = tp_store_default_dir(), *kind = NULL, *tool = NULL;
    uint64_t older_us = 0;
    bool ok = false, failed = false, keep_escalated = false, dry = false;
    const tp_cli_opt_t opts[] = {
        {"store", 's', true, &dir, NULL},
        {"older-than", 0, true, &older_us, tp_cli_take_since},
        {"job", 0, true, NULL, take_job},
        {"jobs-from", 0, true, NULL, take_jobs_from},
        {"ok", 0, false, &ok, NULL},
        {"failed", 0, false, &failed, NULL},
        {"kind", 0, true, &kind, NULL},
        {"tool", 0, true, &tool, NULL},
        {"keep-escalated", 0, false, &keep_escalated, NULL},
        {"dry-run", 0, false, &dry, NULL},
        {NULL, 0, false, NULL, NULL},
    };
    int rc = tp_cli_options(argc, argv, prune_usage, opts);
    if (rc != TP_CLI_GO_ON)
        return rc;
    if (optind < argc)
        return tp_cli_misuse(prune_usage);
    bool jobs_given = jobs_named;
    if (!older_us && !jobs_given && !ok && !failed && !kind && !tool) {
        tp_log_error("cli.usage",
                     "store prune: name what to prune (--older-than, --job, --jobs-from, --ok, --failed, --kind, "
                     "--tool); nothing was pruned");
        return 2;
    }
    if ((ok && (failed || kind))) {
        tp_log_error("cli.usage",
                     "store prune: --ok selects results that succeeded, --%s ones that failed: give one of them",
                     failed ? "failed" : "kind");
        return 2;
    }
    tp_prune_sel_t sel = {
        .before_us = older_us ? tp_unix_us() - older_us : 0,
        .outcome = ok                 ? TP_PRUNE_OK
                   : (failed || kind) ? TP_PRUNE_FAILED
                                      : TP_PRUNE_ANY,
        .kind = kind,
        .tool = tool,
    };
    if (jobs_given) {
        if (jobs.n == 0) {
            tp_log_error("cli.usage", "--jobs-from: no job named; nothing was pruned");
            return 2;
        }
        qsort(jobs.v, jobs.n, sizeof *jobs.v, cmp_name);
        sel.jobs = (const char *const *)jobs.v;
        sel.n_jobs = jobs.n;
    }
    char err[1024];
    tp_store_t *s = tp_store_open(dir, dry ? TP_STORE_RDONLY : 0, err, sizeof err);
    if (s == NULL) {
        tp_log_error("store.open_failed", "%s", err);
        return 2;
    }
    tp_prune_t p = {0};
    if (!dry) {
        signal(SIGINT, on_stop);
        signal(SIGTERM, on_stop);
    }
    rc = dry ? dry_run(s, &sel, &p) : tp_prune_run(s, &sel, &p, &stop, err, sizeof err);
    if (rc && dry)
        snprintf(err, sizeof err, "%s: cannot read: %s", dir, tp_strerror(rc));
    tp_store_close(s);
    for (size_t i = 0; i < jobs.n; i++)
        free(jobs.v[i]);
    free(jobs.v);
    if (rc) {
        tp_log_error("store.prune_failed", "%s%s", err,
                     p.results && !dry ? "; the batches before it are pruned: run it again" : "");
        return 2;
    }
    char size[32];
    printf("%s %llu result%s (%llu ok, %llu failed; %s of records)", dry ? "would prune" : "pruned",
           (unsigned long long)p.results, p.results == 1 ? "" : "s", (unsigned long long)p.ok,
           (unsigned long long)p.failed, tp_cli_size(p.bytes, size, sizeof size));
    if (!dry)
        printf(" and %llu checkpoint%s of jobs left with none", (unsigned long long)p.checkpoints,
               p.checkpoints == 1 ? "" : "s");
    printf(" from %s\n", dir);
    if (p.kept_escalated)
        printf("kept %llu of them: their calls' escalations are open (`toolpool escalations list --store %s`)\n",
               (unsigned long long)p.kept_escalated, dir);
    if (p.kept_live)
        printf("kept %llu of them: their jobs have calls in flight in a live supervisor\n",
               (unsigned long long)p.kept_live);
    if (p.undated)
        printf("kept %llu results of an older toolpool: they carry no record time for --older-than\n",
               (unsigned long long)p.undated);
    if (stop)
        printf("interrupted: `toolpool store prune` with the same selectors finishes it\n");
    if (p.results && !dry)
        printf("the file keeps its size; `toolpool store compact --store %s` gives the space back\n", dir);
    return stop ? 1 : p.results ? 0 : 1;
}
