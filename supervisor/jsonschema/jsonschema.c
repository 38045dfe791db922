/*
 * What compile errors and validation messages both write: a location as a
 * JSON Pointer, a value cut short, the names of types.
 */
#include "jsonschema_internal.h"

/* clang-format off */
const js_type_name_t js_type_names[N_TYPES] = {
    /* in the order messages list them: "expected string or null" */
    {"string", T_STRING}, {"number", T_NUMBER}, {"integer", T_INTEGER}, {"boolean", T_BOOLEAN},
    {"object", T_OBJECT}, {"array", T_ARRAY},   {"null", T_NULL},
};
/* clang-format on */

/* Appends the pointer of path ("" for the root), keys escaped per RFC 6901. 0, or TP_ENOMEM. */
int js_put_pointer(tp_buf_t *b, const seg_t *path)
{
    if (path == NULL)
        return 0;
    if (js_put_pointer(b, path->up) < 0)
        return TP_ENOMEM;
    if (path->raw)
        return tp_buf_append(b, path->key, path->n);
    if (path->key == NULL)
        return tp_buf_printf(b, "/%zu", path->n);
    if (tp_buf_reserve(b, 2 * path->n + 1) < 0)
        return TP_ENOMEM;
    char *o = (char *)b->data + b->len;
    *o++ = '/';
    for (size_t i = 0; i < path->n; i++) {
        char ch = path->key[i];
        if (ch == '~' || ch == '/') {
            *o++ = '~';
            *o++ = ch == '~' ? '0' : '1';
        } else {
            *o++ = ch;
        }
    }
    b->len = (size_t)(o - (char *)b->data);
    return 0;
}

/* The pointer as messages write it: "(root)" for the empty one. 0, or TP_ENOMEM. */
int js_put_location(tp_buf_t *b, const seg_t *path)
{
    size_t start = b->len;
    if (js_put_pointer(b, path) < 0)
        return TP_ENOMEM;
    return b->len == start ? tp_buf_puts(b, "(root)") : 0;
}

/*
 * Appends v as compact JSON, stopping soon after the buffer passes end (a
 * container stops between members, a string is written only as far as
 * could show): js_put_short's draft, which it then cuts. 0, or TP_ENOMEM.
 */
static int put_bounded(tp_buf_t *b, const json_t *v, size_t end)
{
    switch (json_typeof(v)) {
    case JSON_STRING: {
        size_t room = end > b->len ? end - b->len : 0;
        size_t n = utf8_cut(json_string_value(v), json_string_length(v), room + 4);
        return tp_json_put_string(b, json_string_value(v), n);
    }
    case JSON_ARRAY: {
        if (tp_buf_puts(b, "[") < 0)
            return TP_ENOMEM;
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (b->len > end)
                return 0;
            if ((i && tp_buf_puts(b, ",") < 0) || put_bounded(b, json_array_get(v, i), end) < 0)
                return TP_ENOMEM;
        }
        return tp_buf_puts(b, "]");
    }
    case JSON_OBJECT: {
        if (tp_buf_puts(b, "{") < 0)
            return TP_ENOMEM;
        size_t i = 0;
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (b->len > end)
                return 0;
            size_t klen = json_object_iter_key_len(it);
            size_t room = end > b->len ? end - b->len : 0;
            if ((i++ && tp_buf_puts(b, ",") < 0) ||
                tp_json_put_string(b, json_object_iter_key(it), utf8_cut(json_object_iter_key(it), klen, room + 4)) <
                    0 ||
                tp_buf_puts(b, ":") < 0 || put_bounded(b, json_object_iter_value(it), end) < 0)
                return TP_ENOMEM;
        }
        return tp_buf_puts(b, "}");
    }
    default:
        return tp_json_write(b, v, 0);
    }
}

/*
 * Appends v as compact JSON, at most limit bytes: a long string keeps its
 * head and ends "...\"", a container its first bytes then "...", both cut
 * on a character boundary. Used for every value a message shows, so one
 * huge argument cannot flood it. 0, or TP_ENOMEM.
 */
int js_put_short(tp_buf_t *b, const json_t *v, size_t limit)
{
    size_t start = b->len;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n + 2 <= limit)
            return tp_json_put_string(b, s, n);
        if (tp_json_put_string(b, s, utf8_cut(s, n, limit > 6 ? limit - 6 : 1)) < 0)
            return TP_ENOMEM;
        b->len--; /* the closing quote */
        return tp_buf_puts(b, "...\"");
    }
    if (put_bounded(b, v, start + limit) < 0)
        return TP_ENOMEM;
    if (b->len - start <= limit)
        return 0;
    b->len = start + utf8_cut((const char *)b->data + start, b->len - start, limit - 3);
    return tp_buf_puts(b, "...");
}
