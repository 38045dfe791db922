/*
 * Fallback chains, checked once every tool is known: each name in a
 * fallback list is a declared tool, and no chain loops back on itself.
 */
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Where a fallback list was written, the last one read winning. */
enum { FB_NONE = 0, FB_DEFAULTS, FB_PDEFAULTS, FB_OWN, FB_RUN, FB_PRUN };

/*
 * The "fallback" a tool has (tool == NULL: the defaults'), as written, and
 * where: the policy file's "run" entry, the registry's, the tool's own key,
 * then the policy file's "defaults", the registry's.
 */
static json_t *fallback_json(loader_t *ld, const tp_tool_t *tool, int *src)
{
    json_t *v;
    if (tool != NULL) {
        if ((v = json_object_get(json_object_get(ld->prun, tool->name), "fallback")) != NULL)
            return *src = FB_PRUN, v;
        if ((v = json_object_get(json_object_get(ld->run, tool->name), "fallback")) != NULL)
            return *src = FB_RUN, v;
        if (tool->mcp_server == NULL &&
            (v = reg_tool_policy_key(json_array_get(ld->tools_json, tool->pos), "fallback")) != NULL)
            return *src = FB_OWN, v;
    }
    if ((v = json_object_get(json_object_get(ld->proot, "defaults"), "fallback")) != NULL)
        return *src = FB_PDEFAULTS, v;
    if ((v = json_object_get(json_object_get(ld->root, "defaults"), "fallback")) != NULL)
        return *src = FB_DEFAULTS, v;
    *src = FB_NONE;
    return NULL;
}

/*
 * Positions the loader on a fallback list: the tool's own "fallback" key
 * (or its "run" entry's), or "defaults.fallback" when the tool inherits it
 * (tool == NULL: defaults). Returns the list as written.
 */
static json_t *where_fallback(loader_t *ld, const tp_tool_t *tool)
{
    int src;
    json_t *list = fallback_json(ld, tool, &src);
    reg_where_pop(&ld->at, (mark_t){0, 0});
    ld->in_policy = src == FB_PRUN || src == FB_PDEFAULTS;
    if (src == FB_OWN) {
        char note[300];
        if (!ld->tools_at_root)
            reg_where_key(&ld->at, "tools");
        reg_where_index(&ld->at, tool->pos);
        snprintf(note, sizeof note, " (%s)", tool->name);
        reg_where_note(&ld->at, note);
        if (json_object_get(json_array_get(ld->tools_json, tool->pos), "fallback") == NULL)
            reg_where_key(&ld->at, "policy");
    } else if (src == FB_RUN || src == FB_PRUN) {
        reg_where_key(&ld->at, "run");
        reg_where_key(&ld->at, tool->name);
    } else {
        reg_where_key(&ld->at, "defaults");
    }
    reg_where_key(&ld->at, "fallback");
    return list;
}

/* Every name in one fallback list must be a declared tool. */
static int check_names(loader_t *ld, const tp_tool_t *tool, const tp_policy_t *p)
{
    int rc = 0;
    for (size_t j = 0; j < p->n_fallback; j++) {
        if (tp_registry_find(ld->reg, p->fallback[j]) != NULL)
            continue;
        json_t *list = where_fallback(ld, tool);
        if (json_is_array(list))
            reg_where_index(&ld->at, j);
        rc = reg_rc(
            rc, reg_fail(ld, "unknown tool \"%s\" (a fallback must be a tool declared in \"tools\")", p->fallback[j]));
        ld->in_policy = false;
    }
    return rc;
}

enum { WHITE = 0, GREY, BLACK };

/*
 * Depth-first over tool -> fallback edges. Meeting a grey tool means the
 * chain comes back to itself: the error names the tool the loop starts at
 * and the whole loop, "a -> b -> a".
 */
static int visit(loader_t *ld, size_t u, unsigned char *color, size_t *stack, size_t depth)
{
    const tp_registry_t *reg = ld->reg;
    color[u] = GREY;
    stack[depth] = u;
    const tp_policy_t *p = &reg->tools[u].policy;
    for (size_t j = 0; j < p->n_fallback; j++) {
        size_t v = tp_registry_find(reg, p->fallback[j])->index;
        if (color[v] == GREY) {
            char loop[1024];
            size_t len = 0, k = 0;
            while (stack[k] != v)
                k++;
            loop[0] = '\0';
            for (; k <= depth; k++) {
                int w = snprintf(loop + len, sizeof loop - len, "%s -> ", reg->tools[stack[k]].name);
                if (w > 0 && (size_t)w < sizeof loop - len)
                    len += (size_t)w;
            }
            snprintf(loop + len, sizeof loop - len, "%s", reg->tools[v].name);
            where_fallback(ld, &reg->tools[v]);
            int rc = reg_fail(ld, "the fallback chain of \"%s\" loops: %s", reg->tools[v].name, loop);
            ld->in_policy = false;
            return rc;
        }
        int rc = color[v] == WHITE ? visit(ld, v, color, stack, depth + 1) : 0;
        if (rc < 0)
            return rc;
    }
    color[u] = BLACK;
    return 0;
}

/*
 * After every tool is known: fallback names exist (defaults' list once, then
 * each tool's own), and no chain loops, so following one always ends.
 */
int reg_check_fallbacks(loader_t *ld)
{
    tp_registry_t *reg = ld->reg;
    int src, rc = check_names(ld, NULL, &reg->defaults);
    for (size_t i = 0; i < reg->n_tools; i++) {
        fallback_json(ld, &reg->tools[i], &src);
        bool imported = reg->tools[i].mcp_server != NULL; /* its chain may come from its server's blocks */
        if (src >= FB_OWN || imported)
            rc = reg_rc(rc, check_names(ld, &reg->tools[i], &reg->tools[i].policy));
    }
    if (rc < 0 || reg->n_tools == 0)
        return rc;
    unsigned char *color = calloc(reg->n_tools, 1);
    size_t *stack = calloc(reg->n_tools, sizeof *stack);
    if (color == NULL || stack == NULL) {
        free(color);
        free(stack);
        return reg_fail_oom(ld);
    }
    for (size_t i = 0; rc == 0 && i < reg->n_tools; i++)
        if (color[i] == WHITE)
            rc = visit(ld, i, color, stack, 0);
    free(color);
    free(stack);
    return rc;
}
