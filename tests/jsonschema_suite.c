/*
 * Conformance: the official JSON Schema Test Suite (Debian package
 * json-schema-test-suite), draft7, against common/jsonschema.c.
 *
 * Every *.json under the draft7 folder (optional/ included) is run, and
 * every case in it must pass, unless the table below skips it with a
 * reason, which is printed; a file a newer suite adds is run too, not
 * passed over. Prints one line per file, "passed/cases", then every failure
 * in full.
 *
 * Remote references: the suite's schemas that are exactly
 * {"$ref": "http://json-schema.org/draft-07/schema#"} (definitions.json, one
 * group of ref.json) are run against the draft-07 meta-schema read from a
 * local copy (python3-jsonschema's, found at configure time), the way the
 * suite's own harness serves its remotes: the validator resolves only local
 * references, the harness hands it the referenced document. A group that
 * needs more than that is skipped by name, with its reason.
 *
 * Also checked for every case: the count with a message equals the count
 * without one, and a message is written exactly when the case is invalid.
 */
#include "buf.h"
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
#ifndef TP_DRAFT7_METASCHEMA
#define TP_DRAFT7_METASCHEMA ""
#endif

#define METASCHEMA_URI "http://json-schema.org/draft-07/schema#"

/* Files not run, relative to the draft7 folder, and why. */
static const struct {
    const char *file;
    const char *why;
} skipped_files[] = {
    {"refRemote.json", "remote refs: needs the suite's server on localhost:1234"},
    {"format.json", "format is an annotation here, not asserted"},
    {"optional/format/", "format is an annotation here, not asserted"},
    {"optional/ecmascript-regex.json", "tests format \"regex\", not asserted"},
    {"optional/content.json", "contentMediaType/contentEncoding are annotations, not asserted"},
};

/* Groups (file, description) not run, and why. */
static const struct {
    const char *file;
    const char *group;
    const char *why;
} skipped_groups[] = {
    {"ref.json", "Recursive references between schemas",
     "$id-relative refs (\"node\" against $id http://localhost:1234/tree): only local refs are supported"},
};

static json_t *metaschema; /* the draft-07 meta-schema, or NULL */
static int total_run, total_passed, total_skipped_cases;

static const char *file_skip_reason(const char *rel)
{
    for (size_t i = 0; i < sizeof skipped_files / sizeof skipped_files[0]; i++) {
        size_t n = strlen(skipped_files[i].file);
        if (skipped_files[i].file[n - 1] == '/' ? strncmp(rel, skipped_files[i].file, n) == 0
                                                : strcmp(rel, skipped_files[i].file) == 0)
            return skipped_files[i].why;
    }
    return NULL;
}

static const char *group_skip_reason(const char *rel, const char *group)
{
    for (size_t i = 0; i < sizeof skipped_groups / sizeof skipped_groups[0]; i++)
        if (strcmp(rel, skipped_groups[i].file) == 0 && strcmp(group, skipped_groups[i].group) == 0)
            return skipped_groups[i].why;
    return NULL;
}

/*
 * The schema a group runs against: the group's own, or the meta-schema
 * when the group's is only a $ref to it. NULL (and *why) when it cannot run.
 */
static const json_t *group_schema(const json_t *schema, const char **why)
{
    const json_t *ref = json_is_object(schema) ? json_object_get(schema, "$ref") : NULL;
    if (json_object_size(schema) == 1 && json_is_string(ref) &&
        strcmp(json_string_value(ref), METASCHEMA_URI) == 0) {
        if (metaschema == NULL)
            *why = "remote ref to the draft-07 meta-schema, and no local copy was found at configure time";
        return metaschema;
    }
    return schema;
}

/* Runs one suite file; returns the number of failed cases. */
static int run_file(const char *dir, const char *rel)
{
    char path[4096];
    json_error_t jerr;
    const char *note = "";
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    json_t *groups = json_load_file(path, 0, &jerr);
    if (groups == NULL) {
        /* bignum.json: integers past 64 bits, which jansson holds only as reals */
        groups = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
        note = " (integers read as doubles: they do not fit 64 bits)";
    }
    if (!json_is_array(groups)) {
        printf("  %-36s FAIL: cannot read: %s line %d\n", rel, jerr.text, jerr.line);
        json_decref(groups);
        total_run++;
        return 1;
    }
    int run = 0, passed = 0, skipped = 0;
    tp_buf_t fails = {0}, notes = {0};
    size_t gi;
    json_t *g;
    json_array_foreach(groups, gi, g)
    {
        const char *gdesc = json_string_value(json_object_get(g, "description"));
        const json_t *tests = json_object_get(g, "tests");
        const char *why = group_skip_reason(rel, gdesc ? gdesc : "");
        const json_t *schema = why ? NULL : group_schema(json_object_get(g, "schema"), &why);
        if (why != NULL) {
            skipped += (int)json_array_size(tests);
            tp_buf_printf(&notes, "      skipped group \"%s\" (%zu cases): %s\n", gdesc,
                          json_array_size(tests), why);
            continue;
        }
        if (schema == metaschema)
            tp_buf_printf(&notes, "      group \"%s\": $ref %s served from %s\n", gdesc, METASCHEMA_URI,
                          TP_DRAFT7_METASCHEMA);
        char err[512];
        tp_jsonschema_t *s = tp_jsonschema_compile(schema, err, sizeof err);
        size_t ti;
        json_t *t;
        json_array_foreach(tests, ti, t)
        {
            const char *tdesc = json_string_value(json_object_get(t, "description"));
            const json_t *data = json_object_get(t, "data");
            bool want = json_is_true(json_object_get(t, "valid"));
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
    printf("  %-36s %3d/%-3d%s%s\n", rel, passed, run, passed == run ? "" : "  FAIL", note);
    if (skipped)
        printf("      (%d case%s skipped)\n", skipped, skipped == 1 ? "" : "s");
    if (notes.len)
        printf("%.*s", (int)notes.len, (char *)notes.data);
    if (fails.len)
        printf("%.*s", (int)fails.len, (char *)fails.data);
    tp_buf_free(&fails);
    tp_buf_free(&notes);
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

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : TP_SCHEMA_SUITE_DIR;
    struct stat st;
    if (*dir == 0 || strstr(dir, "NOTFOUND") || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "jsonschema_suite: the JSON Schema Test Suite's draft7 folder was not found (\"%s\").\n"
                "Run scripts/install-deps (it installs json-schema-test-suite), then configure again\n"
                "(cmake -B BUILD) so that tests/CMakeLists.txt finds it.\n",
                dir);
        return 1;
    }
    if (*TP_DRAFT7_METASCHEMA && strstr(TP_DRAFT7_METASCHEMA, "NOTFOUND") == NULL)
        metaschema = json_load_file(TP_DRAFT7_METASCHEMA, 0, NULL);
    printf("JSON Schema Test Suite, %s\n", dir);
    char **names = NULL;
    size_t n = 0;
    int failed = 0;
    list_files(dir, "", &names, &n);
    if (n == 0) {
        fprintf(stderr, "jsonschema_suite: no *.json under %s\n", dir);
        return 1;
    }
    /* Run first, then list what was skipped, then the verdict. */
    for (size_t i = 0; i < n; i++)
        if (file_skip_reason(names[i]) == NULL)
            failed += run_file(dir, names[i]);
    printf("skipped files:\n");
    for (size_t i = 0; i < n; i++) {
        const char *why = file_skip_reason(names[i]);
        if (why != NULL)
            printf("  %-36s %s\n", names[i], why);
    }
    printf("%d/%d cases passed (%d skipped in the files run)\n", total_passed, total_run,
           total_skipped_cases);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    json_decref(metaschema);
    return failed ? 1 : 0;
}
