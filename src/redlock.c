/*-------------------------------------------------------------------------
 *
 * redlock.c
 *	  Module entry point: settings and transaction callbacks.
 *
 * Nothing connects to Redis here: connections are opened lazily by the
 * backend that first needs them, so they are never shared across fork.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "guc.h"
#include "lifecycle.h"
#include "lock_table.h"
#include "redlock.h"
#include "stats.h"
#include "worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	rl_define_gucs();
	rl_stats_init();
	rl_lock_table_init();
	rl_worker_register();
	rl_lifecycle_init();
}
