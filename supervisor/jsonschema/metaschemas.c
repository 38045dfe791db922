/*
 * The meta-schemas of the two dialects, built in: draft-07's, and
 * 2020-12's with the vocabulary meta-schemas it is made of (core,
 * applicator, unevaluated, validation, meta-data, format-annotation,
 * content), so a "$ref" to one resolves without the caller giving it. The
 * texts are the official ones, unchanged, in metaschemas/ (README.md there
 * says where from and under what licence), made C strings by the build.
 *
 * Each is parsed the first time a reference names it, once per process,
 * and kept for the process's life: a registry that names none pays
 * nothing. The caller's loader is asked first (refs.c), so a document
 * given for the same URI wins.
 */
#include "jsonschema_internal.h"

#include <pthread.h>
#include <string.h>

#include "metaschema_texts.h"

/* URIs without their scheme: either of http and https names the same one. */
static const struct {
    const char *uri;
    const char *text;
    /* clang-format off */
} builtins[] = {
    {"json-schema.org/draft-07/schema", ms_draft_07_json},
    {"json-schema.org/draft/2020-12/schema", ms_draft2020_12_schema_json},
    {"json-schema.org/draft/2020-12/meta/core", ms_draft2020_12_meta_core_json},
    {"json-schema.org/draft/2020-12/meta/applicator", ms_draft2020_12_meta_applicator_json},
    {"json-schema.org/draft/2020-12/meta/unevaluated", ms_draft2020_12_meta_unevaluated_json},
    {"json-schema.org/draft/2020-12/meta/validation", ms_draft2020_12_meta_validation_json},
    {"json-schema.org/draft/2020-12/meta/meta-data", ms_draft2020_12_meta_meta_data_json},
    {"json-schema.org/draft/2020-12/meta/format-annotation", ms_draft2020_12_meta_format_annotation_json},
    {"json-schema.org/draft/2020-12/meta/content", ms_draft2020_12_meta_content_json},
};
/* clang-format on */

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *parsed[N_BUILTINS]; /* never freed: read-only, shared by every compile */

const json_t *js_metaschema(const char *uri)
{
    const char *rest = strncmp(uri, "https://", 8) == 0 ? uri + 8 : strncmp(uri, "http://", 7) == 0 ? uri + 7 : NULL;
    if (rest == NULL)
        return NULL;
    for (size_t i = 0; i < N_BUILTINS; i++) {
        if (strcmp(rest, builtins[i].uri) != 0)
            continue;
        pthread_mutex_lock(&parse_lock);
        if (parsed[i] == NULL)
            parsed[i] = json_loads(builtins[i].text, 0, NULL);
        const json_t *doc = parsed[i];
        pthread_mutex_unlock(&parse_lock);
        return doc;
    }
    return NULL;
}
