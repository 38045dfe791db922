/*
 * Conformance: the official JSON Schema Test Suite (upstream commit
 * 44401e0c, copied into tests/data/json-schema-test-suite), its draft7 and
 * draft2020-12 folders, against supervisor/jsonschema/.
 *
 * Every *.json under each folder (optional/ included) is run, and every
 * case in it must pass, unless a table below skips it with a reason, which
 * is printed; a file a newer suite adds is run too, not passed over. The
 * files of each folder compile in its dialect (the 2020-12 ones also say so
 * with "$schema"). Prints one line per file, "passed/cases", every failure
 * in full, then the totals per dialect and every skip with its reason.
 *
 * Formats: the required format.json runs with formats as annotations (as
 * both drafts say); optional/format/ runs with "formats": "assert" for the
 * formats jsonformat.h checks, and is skipped (saying so) for the others.
 *
 * Remote references are served the way the suite's own harness serves
 * them, in-process: http://localhost:1234/ is the copied remotes/ folder.
 * The draft-07 and 2020-12 meta-schemas some cases reference are not
 * served: they are the validator's built-in ones. Nothing comes from the
 * network.
 *
 * Also checked for every case: the count with a message equals the count
 * without one, and a message is written exactly when the case is invalid.
 */
#include "buf.h"
#include "jsonformat.h"
#include "jsonschema.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef TP_SCHEMA_SUITE_DIR
#define TP_SCHEMA_SUITE_DIR ""
#endif

/* Files not run, relative to a dialect's folder, and why. */
static const struct {
    const char *dialect; /* "draft7", "draft2020-12", or NULL: both */
    const char *file;    /* a trailing '/' names a folder */
    const char *why;
    /* clang-format off */
} skipped_files[] = {
    {NULL, "optional/content.json", "contentMediaType/contentEncoding/contentSchema are annotations, not asserted"},
    {NULL, "optional/cross-draft.json", "a $ref into another dialect (draft 2019-09) is not supported"},
    {"draft2020-12", "optional/format-assertion.json",
     "the format-assertion vocabulary: formats are asserted by the \"formats\" setting instead"},
};
/* clang-format on */

/* Single cases not run (file, group, case), and why. */
static const struct {
    const char *dialect;
    const char *file;
    const char *group; /* NULL: any */
    const char *test;
    const char *why;
    /* clang-format off */
} skipped_cases[] = {
#define IDN "an A-label (\"xn--\"): its Punycode is not decoded, so IDNA 2008 rules are not checked"
    {NULL, "optional/format/hostname.json", NULL, "invalid Punycode", IDN},
    {NULL, "optional/format/hostname.json", NULL, "contains illegal char U+302E Hangul single dot tone mark", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Begins with a Spacing Combining Mark", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Begins with a Nonspacing Mark", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Begins with an Enclosing Mark", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Exceptions that are DISALLOWED, right-to-left chars", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Exceptions that are DISALLOWED, left-to-right chars", IDN},
    {NULL, "optional/format/hostname.json", NULL, "MIDDLE DOT with no preceding 'l'", IDN},
    {NULL, "optional/format/hostname.json", NULL, "MIDDLE DOT with nothing preceding", IDN},
    {NULL, "optional/format/hostname.json", NULL, "MIDDLE DOT with no following 'l'", IDN},
    {NULL, "optional/format/hostname.json", NULL, "MIDDLE DOT with nothing following", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Greek KERAIA not followed by Greek", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Greek KERAIA not followed by anything", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Hebrew GERESH not preceded by Hebrew", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Hebrew GERESH not preceded by anything", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Hebrew GERSHAYIM not preceded by Hebrew", IDN},
    {NULL, "optional/format/hostname.json", NULL, "Hebrew GERSHAYIM not preceded by anything", IDN},
    {NULL, "optional/format/hostname.json", NULL,
     "KATAKANA MIDDLE DOT with no Hiragana, Katakana, or Han", IDN},
    {NULL, "optional/format/hostname.json", NULL, "KATAKANA MIDDLE DOT with no other characters", IDN},
    {NULL, "optional/format/hostname.json", NULL,
     "Arabic-Indic digits mixed with Extended Arabic-Indic digits", IDN},
    {NULL, "optional/format/hostname.json", NULL, "ZERO WIDTH JOINER not preceded by Virama", IDN},
    {NULL, "optional/format/hostname.json", NULL, "ZERO WIDTH JOINER not preceded by anything", IDN},
    {NULL, "optional/format/hostname.json", NULL, "contains \"--\" in the 3rd and 4th position", IDN},
};
/* clang-format on */

static const char *suite_dir;
static const char *cur_dialect;
static int total_run, total_passed, total_skipped_cases;
static tp_buf_t skip_list; /* every skipped case, for the summary */

/* Does a skip row's dialect (NULL: any) cover the folder being run? */
static bool dialect_matches(const char *d)
{
    return d == NULL || strcmp(d, cur_dialect) == 0;
}

static const char *file_skip_reason(const char *rel)
{
    if (strncmp(rel, "optional/format/", 16) == 0) {
        char name[256];
        snprintf(name, sizeof name, "%s", rel + 16);
        char *dot = strrchr(name, '.');
        if (dot)
            *dot = 0;
        if (tp_jsonformat_lookup(name) == TP_FORMAT_NONE && strcmp(name, "regex") != 0)
            return "a format not asserted here (an annotation only)";
    }
    for (size_t i = 0; i < sizeof skipped_files / sizeof skipped_files[0]; i++) {
        if (!dialect_matches(skipped_files[i].dialect))
            continue;
        size_t n = strlen(skipped_files[i].file);
        if (skipped_files[i].file[n - 1] == '/' ? strncmp(rel, skipped_files[i].file, n) == 0
                                                : strcmp(rel, skipped_files[i].file) == 0)
            return skipped_files[i].why;
    }
    return NULL;
}

static const char *case_skip_reason(const char *rel, const char *group, const char *test)
{
    for (size_t i = 0; i < sizeof skipped_cases / sizeof skipped_cases[0]; i++)
        if (dialect_matches(skipped_cases[i].dialect) && strcmp(rel, skipped_cases[i].file) == 0 &&
            (skipped_cases[i].group == NULL || strcmp(group, skipped_cases[i].group) == 0) &&
            strcmp(test, skipped_cases[i].test) == 0)
            return skipped_cases[i].why;
    return NULL;
}

/* The loader every schema compiles with: the suite's remotes, http://localhost:1234/ from remotes/. */
static json_t *load_remote(const char *uri, void *arg)
{
    (void)arg;
    const char *prefix = "http://localhost:1234/";
    size_t n = strlen(prefix);
    if (strncmp(uri, prefix, n) != 0 || strstr(uri + n, "..") != NULL)
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/remotes/%s", suite_dir, uri + n);
    return json_load_file(path, 0, NULL);
}

/* Runs one suite file of the current dialect; returns the number of failed cases. */
static int run_file(const char *dir, const char *rel)
{
    char path[8400];
    json_error_t jerr;
    const char *note = "";
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    json_t *groups = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (groups == NULL) {
        /* bignum.json: integers past 64 bits, which jansson holds only as reals */
        groups = json_load_file(path, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &jerr);
        note = " (integers read as doubles: they do not fit 64 bits)";
    }
    if (!json_is_array(groups)) {
        printf("  %-44s FAIL: cannot read: %s line %d\n", rel, jerr.text, jerr.line);
        json_decref(groups);
        total_run++;
        return 1;
    }
    tp_jsonschema_opts_t opts = {
        .dialect = strcmp(cur_dialect, "draft7") == 0 ? TP_JSONSCHEMA_DRAFT7 : TP_JSONSCHEMA_2020_12,
        .assert_formats = strncmp(rel, "optional/format/", 16) == 0,
        .load = load_remote,
    };
    int run = 0, passed = 0, skipped = 0;
    tp_buf_t fails = {0};
    size_t gi;
    json_t *g;
    json_array_foreach(groups, gi, g) {
        const char *gdesc = json_string_value(json_object_get(g, "description"));
        const json_t *tests = json_object_get(g, "tests");
        const json_t *schema = json_object_get(g, "schema");
        char err[512];
        tp_jsonschema_t *s = tp_jsonschema_compile_opts(schema, &opts, err, sizeof err);
        size_t ti;
        json_t *t;
        json_array_foreach(tests, ti, t) {
            const char *tdesc = json_string_value(json_object_get(t, "description"));
            const json_t *data = json_object_get(t, "data");
            bool want = json_is_true(json_object_get(t, "valid"));
            const char *why = case_skip_reason(rel, gdesc ? gdesc : "", tdesc ? tdesc : "");
            if (why != NULL) {
                skipped++;
                tp_buf_printf(&skip_list, "  %s/%s / %s / %s: %s\n", cur_dialect, rel, gdesc, tdesc, why);
                continue;
            }
            run++;
            if (s == NULL) {
                tp_buf_printf(&fails, "      FAIL %s / %s: schema did not compile: %s\n", gdesc, tdesc, err);
                continue;
            }
            tp_buf_t msg = {0};
            int n = tp_jsonschema_validate(s, data, &msg, 0);
            int n_quiet = tp_jsonschema_validate(s, data, NULL, 0);
            bool ok = n >= 0 && (n == 0) == want && n == n_quiet && (msg.len == 0) == (n == 0);
            if (ok) {
                passed++;
            } else {
                char *d = json_dumps(data, JSON_ENCODE_ANY | JSON_COMPACT);
                tp_buf_printf(&fails,
                              "      FAIL %s / %s\n        data: %.200s\n        want %s, got %d "
                              "violation(s) (%d without a message): %.*s\n",
                              gdesc, tdesc, d ? d : "?", want ? "valid" : "invalid", n, n_quiet, (int)msg.len,
                              msg.data ? (char *)msg.data : "");
                free(d);
            }
            tp_buf_free(&msg);
        }
        tp_jsonschema_free(s);
    }
    printf("  %-44s %3d/%-3d%s%s\n", rel, passed, run, passed == run ? "" : "  FAIL", note);
    if (skipped)
        printf("      (%d case%s skipped, listed below)\n", skipped, skipped == 1 ? "" : "s");
    if (fails.len)
        printf("%.*s", (int)fails.len, (char *)fails.data);
    tp_buf_free(&fails);
    json_decref(groups);
    total_run += run;
    total_passed += passed;
    total_skipped_cases += skipped;
    return run - passed;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.json under dir/sub (recursively), sorted, as paths relative to dir. */
static void list_files(const char *dir, const char *sub, char ***names, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", dir, *sub ? "/" : "", sub);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char rel[4096], full[8200];
        snprintf(rel, sizeof rel, "%s%s%s", sub, *sub ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", dir, rel);
        struct stat st;
        if (stat(full, &st) == 0 && S_ISDIR(st.st_mode)) {
            list_files(dir, rel, names, n);
        } else if (strlen(rel) > 5 && strcmp(rel + strlen(rel) - 5, ".json") == 0) {
            char **grown = realloc(*names, (*n + 1) * sizeof **names);
            if (grown == NULL || (grown[*n] = strdup(rel)) == NULL) {
                perror("jsonschema_suite");
                exit(2);
            }
            *names = grown;
            (*n)++;
        }
    }
    closedir(d);
    if (*n > 1)
        qsort(*names, *n, sizeof **names, cmp_names);
}

/* One dialect's folder: every file run, then what was skipped. Returns the failures. */
static int run_dialect(const char *dialect)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/%s", suite_dir, dialect);
    cur_dialect = dialect;
    total_run = total_passed = total_skipped_cases = 0;
    skip_list.len = 0;
    printf("JSON Schema Test Suite, %s (%s)\n", dialect, dir);
    char **names = NULL;
    size_t n = 0;
    int failed = 0, req_run = 0, req_passed = 0;
    list_files(dir, "", &names, &n);
    if (n == 0) {
        fprintf(stderr, "jsonschema_suite: no *.json under %s\n", dir);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (file_skip_reason(names[i]) != NULL)
            continue;
        int run0 = total_run, passed0 = total_passed;
        failed += run_file(dir, names[i]);
        if (strncmp(names[i], "optional/", 9) != 0) {
            req_run += total_run - run0;
            req_passed += total_passed - passed0;
        }
    }
    printf("skipped files (%s):\n", dialect);
    for (size_t i = 0; i < n; i++) {
        const char *why = file_skip_reason(names[i]);
        if (why != NULL)
            printf("  %-44s %s\n", names[i], why);
    }
    if (skip_list.len)
        printf("skipped cases (%s):\n%.*s", dialect, (int)skip_list.len, (char *)skip_list.data);
    printf("%s: required %d/%d passed; in all %d/%d passed, %d failed, %d cases skipped\n\n", dialect, req_passed,
           req_run, total_passed, total_run, total_run - total_passed, total_skipped_cases);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return failed;
}

int main(int argc, char **argv)
{
    suite_dir = argc > 1 ? argv[1] : TP_SCHEMA_SUITE_DIR;
    struct stat st;
    if (*suite_dir == 0 || stat(suite_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "jsonschema_suite: the suite's copy was not found (\"%s\"): it lives in "
                "tests/data/json-schema-test-suite\n",
                suite_dir);
        return 1;
    }
    int failed = run_dialect("draft7");
    failed += run_dialect("draft2020-12");
    tp_buf_free(&skip_list);
    return failed ? 1 : 0;
}
