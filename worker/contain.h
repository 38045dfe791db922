/*
 * Containment inside the worker: nothing a tool starts outlives its call.
 *
 * The worker is a child subreaper (PR_SET_CHILD_SUBREAPER): a process whose
 * parent dies, a double-forked daemon say, is reparented to the worker
 * rather than to init, so it stays among the worker's descendants, where
 * /proc finds it (common/proc/proctree.h) whatever session or process group it
 * moved to. The worker kills them all after every call that leaves any,
 * when it leaves (EOF, the supervisor's TERM), and, from its signal
 * handler, when its supervisor is gone. At a timeout the supervisor does
 * the same from outside, while the worker is stopped (supervisor/pool/reap.c, slot_kill).
 */
#ifndef TP_CONTAIN_H
#define TP_CONTAIN_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/*
 * A call shorter than this cannot have started a process, so the worker
 * skips the sweep after it: fork copies the worker's page tables (50 us
 * and more), and posix_spawn and system() return only once the child has
 * exec'd (a few hundred us). Only a bare clone(CLONE_VM) could be quicker;
 * what such a plugin starts is still killed after its next longer call,
 * when its worker leaves, or at a timeout. Every exec call takes longer.
 */
#define TP_CONTAIN_QUICK_US 20u

/* Makes this process a child subreaper. 0, or prctl's -errno (errno set too). */
int tp_contain_init(void);

/*
 * Kills every descendant of this process and reaps them, waiting up to
 * 250 ms for the killed to die. Costs one system call when there is no
 * child at all (the common case). Called between calls, never during one.
 */
void tp_contain_sweep(void);

/*
 * Sends SIGKILL to every live descendant of this process, once, without
 * reaping or waiting: an exec tool has exited, and whatever it left
 * holding its pipes must let go of them.
 */
void tp_contain_kill(void);

/*
 * Marks pid (a child of this process) as one the sweeps and kills above
 * leave alone, with everything it starts, or (spare false) no longer: a
 * live MCP server, which serves call after call (worker/mcp.c). At most
 * TP_CONTAIN_SPARE_MAX at once; 0, or TP_ENOSPC when full. The handler's kill
 * spares nobody.
 */
#define TP_CONTAIN_SPARE_MAX 16
int tp_contain_spare(pid_t pid, bool spare);

/*
 * tp_contain_kill for a signal handler: its own scratch, only system
 * calls. The caller then takes its process group down.
 */
void tp_contain_kill_in_handler(void);

#endif
