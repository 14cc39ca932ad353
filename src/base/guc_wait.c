/*-------------------------------------------------------------------------
 *
 * guc_wait.c
 *	  The setting of waiting in line across servers:
 *	  redlock.local_handoffs, how many times in a row a release hands the
 *	  lease to a waiter of its own server while a waiter of another server
 *	  waits ahead of it in the waiters' queue on the nodes.
 *
 * A local handoff is one round and a latch; a handoff to another server
 * also goes through that server's wake-up worker.  So a server may keep a
 * hot lease for a few handoffs, and each of them may make a waiter of
 * another server wait one more hold: the bound on a wait (doc/reference.md,
 * "Waiting") grows with it, and a large value would let two busy servers
 * starve the others again.  Hence a small ceiling, with its reason told.
 * 0 is strict arrival order across servers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "base/guc.h"

#define RL_LOCAL_HANDOFFS_MAX	16

int			rl_local_handoffs = 3;

static bool
check_local_handoffs(int *newval, void **extra, GucSource source)
{
	if (*newval > RL_LOCAL_HANDOFFS_MAX)
	{
		GUC_check_errdetail("Each local handoff in a row may make a waiter of another server wait one more hold: the longest wait grows with it.");
		GUC_check_errhint("Use 0 for arrival order across servers, or at most %d.",
						  RL_LOCAL_HANDOFFS_MAX);
		return false;
	}
	return true;
}

void
rl_define_wait_gucs(void)
{
	DefineCustomIntVariable("redlock.local_handoffs",
							"Handoffs in a row to waiters of this server while a waiter of another server waits ahead.",
							"After that many, the release hands the lease to the first waiter of another server in the queue on the nodes (0: arrival order across servers).",
							&rl_local_handoffs,
							3, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							check_local_handoffs, NULL, NULL);
}
