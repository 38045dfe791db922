#include "dbs.h"

static const char *const db_names[TP_DB__COUNT] = {
    [TP_DB_META] = "meta",       [TP_DB_BREAKERS] = "breakers", [TP_DB_ESCALATIONS] = "escalations",
    [TP_DB_RESULTS] = "results", [TP_DB_JOBS] = "jobs",         [TP_DB_INFLIGHT] = "inflight",
    [TP_DB_STEPS] = "steps",     [TP_DB_TASKS] = "tasks",
};

const char *tp_store_db_name(tp_db_t db)
{
    return db >= 0 && db < TP_DB__COUNT ? db_names[db] : "?";
}
