/*
 * The named databases of a store, and the store's format version: the
 * bottom of the store, known to the store's environment (store.h) and to
 * the checks of the records it holds (record.h) alike.
 */
#ifndef TP_DBS_H
#define TP_DBS_H

/*
 * 4: a result is its record (results.h), not its rendered line, as 3 and 2
 * kept it; 3: a job's message list in the steps database (steps.h), where
 * 2 kept it in the checkpoint.
 */
#define TP_STORE_FORMAT 4

typedef enum {
    TP_DB_META = 0,
    TP_DB_BREAKERS,
    TP_DB_ESCALATIONS,
    TP_DB_RESULTS,
    TP_DB_JOBS,
    TP_DB_INFLIGHT,
    TP_DB_STEPS,
    TP_DB_TASKS, /* MCP tasks (tasks.h); created on a store's first writable open, absent from older stores */
    TP_DB__COUNT,
} tp_db_t;

/* The database's name in the environment: "results", "breakers"... ("?" for none). */
const char *tp_store_db_name(tp_db_t db);

#endif
