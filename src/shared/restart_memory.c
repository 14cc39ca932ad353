/*-------------------------------------------------------------------------
 *
 * restart_memory.c
 *	  The last run_id of every Redis node seen by any process of this
 *	  server, in shared memory, for the restart quarantine.
 *
 * A node whose run_id is not the one last seen under its name restarted
 * and is quarantined (node_server.c).  Kept per backend only, a restart
 * would go unnoticed by every backend that connects to the node for the
 * first time after it: the one that matters most, since a new session is
 * what asks for a contended lease.  So with shared_preload_libraries the
 * sightings of all backends and workers go into one small table here, and
 * whichever process sees a restart first quarantines the node for all.
 *
 * The table has RL_SIGHTINGS entries (several node lists, of up to 15
 * nodes each); a new name takes the entry seen longest ago.  It is guarded
 * by an LWLock, held only to compare a few names; recording raises
 * nothing, so commit, abort and exit paths may reconnect and record.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "net/nodes.h"
#include "shared/restart_memory.h"

typedef struct RlRestartMemory
{
	LWLock	   *lock;
	RlSighting	sightings[RL_SIGHTINGS];
} RlRestartMemory;

static RlRestartMemory *restart_memory = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static bool
shared_sighting(const char *node, const char *run_id, int64_t start_us,
				RlRestartMemo *memo)
{
	bool		restarted;

	LWLockAcquire(restart_memory->lock, LW_EXCLUSIVE);
	restarted = rl_sightings_record(restart_memory->sightings, node, run_id,
									start_us, memo);
	LWLockRelease(restart_memory->lock);
	return restarted;
}

/*
 * What this server recorded for the node under its name, into *memo;
 * false when it has no record (or keeps none: not preloaded).
 */
bool
rl_restart_memory_get(const char *node, RlRestartMemo *memo)
{
	bool		found = false;

	if (restart_memory == NULL)
		return false;
	LWLockAcquire(restart_memory->lock, LW_SHARED);
	for (int i = 0; i < RL_SIGHTINGS && !found; i++)
	{
		if (strcmp(restart_memory->sightings[i].node, node) != 0)
			continue;
		*memo = restart_memory->sightings[i].memo;
		found = true;
	}
	LWLockRelease(restart_memory->lock);
	return found;
}

static void
restart_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(RlRestartMemory));
	RequestNamedLWLockTranche("redlock restarts", 1);
}

static void
restart_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	restart_memory = ShmemInitStruct("redlock restarts", sizeof(RlRestartMemory),
									 &found);
	if (!found)
	{
		memset(restart_memory, 0, sizeof(RlRestartMemory));
		restart_memory->lock = &(GetNamedLWLockTranche("redlock restarts"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
	rl_nodes_set_sighting_hook(shared_sighting);
}

/* _PG_init: with shared_preload_libraries, keep the sightings server-wide */
void
rl_restart_memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = restart_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = restart_shmem_startup;
}
