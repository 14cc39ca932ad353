/*-------------------------------------------------------------------------
 *
 * module.c
 *	  Module entry point: settings and transaction callbacks.
 *
 * Nothing connects to Redis here: connections are opened lazily by the
 * backend that first needs them, so they are never shared across fork.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "base/guc.h"
#include "lease/lifecycle.h"
#include "shared/lock_table.h"
#include "base/redlock.h"
#include "shared/health_memory.h"
#include "shared/shared_rounds.h"
#include "shared/stats.h"
#include "workers/worker.h"

#ifdef PG_MODULE_MAGIC_EXT
/*
 * 18+: name and version show in pg_get_loaded_modules().  Keep the version
 * equal to default_version in redlock.control.
 */
PG_MODULE_MAGIC_EXT(.name = "redlock", .version = "1.1");
#else
PG_MODULE_MAGIC;
#endif

void		_PG_init(void);

void
_PG_init(void)
{
	rl_define_gucs();
	rl_stats_init();
	rl_lock_table_init();
	rl_health_memory_init();
	rl_shared_rounds_init();
	rl_worker_register();
	rl_lifecycle_init();
}
