/*-------------------------------------------------------------------------
 *
 * wait_events.c
 *	  The wait events redlock reports in pg_stat_activity.
 *
 * PostgreSQL 17 and later register named extension wait events, so a
 * backend waiting for a lease shows as RedlockLease, one waiting for the
 * Redis nodes as RedlockNodes, and one waiting for a round that the
 * dispatcher worker runs for it as RedlockSharedRound.  Before 17, all are
 * the generic "Extension" event.  Registering takes a lock in shared memory, so this is
 * never called on the no-throw paths.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#if PG_VERSION_NUM >= 170000
#include "utils/wait_event.h"
#endif

#include "base/wait_events.h"

uint32
rl_wait_event_lease(void)
{
#if PG_VERSION_NUM >= 170000
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("RedlockLease");
	return event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

uint32
rl_wait_event_nodes(void)
{
#if PG_VERSION_NUM >= 170000
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("RedlockNodes");
	return event;
#else
	return PG_WAIT_EXTENSION;
#endif
}


/* A backend waiting for a round the dispatcher worker runs for it. */
uint32
rl_wait_event_shared(void)
{
#if PG_VERSION_NUM >= 170000
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("RedlockSharedRound");
	return event;
#else
	return PG_WAIT_EXTENSION;
#endif
}
