/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The background workers: keep-alive (worker.c), wake-up (wakeup.c)
 *	  and the dispatcher of the shared connections (dispatcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_WORKER_H
#define REDLOCK_WORKER_H

#include "shared/lock_table.h"

extern void rl_worker_register(void);

/* shared by the workers */
extern void rl_worker_start_signals(void);
extern void rl_worker_start(RlWorkerRole role);
extern void rl_worker_reload_config(void);
extern bool rl_worker_nodes_configured(void);
extern void rl_worker_nodes_ready(void);

PGDLLEXPORT void redlock_worker_main(Datum main_arg);
PGDLLEXPORT void redlock_wakeup_main(Datum main_arg);
PGDLLEXPORT void redlock_dispatcher_main(Datum main_arg);

#endif							/* REDLOCK_WORKER_H */
