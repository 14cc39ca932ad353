/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  When leases end without being unlocked: transaction and subtransaction
 *	  end, DISCARD ALL and backend exit.  (A change of the node list:
 *	  session_nodes.c.)
 *
 * Commit, abort and exit run with interrupts held and must never raise
 * (an ERROR after the commit record is a PANIC): their releases are
 * no-throw rounds with one overall deadline (see lease_release.c).
 *
 * DISCARD ALL releases session leases, as it releases advisory locks, so
 * that a connection pooler resetting a server connection does not hand a
 * leaked lease (re-entrantly, with its old token) to its next client.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "tcop/utility.h"

#include "base/guc.h"
#include "lease/lease_handoff.h"
#include "lease/lease_release.h"
#include "lease/lifecycle.h"
#include "lease/registry.h"

static bool rl_exit_hook_registered = false;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/*
 * Abort and exit paths: what an error interrupted, in this order: an
 * attempt in flight, of one resource or several (its value may be on the
 * nodes), a release handing a
 * lease to a waiter, the offers a wait left (lease_handoff.c), and the lock
 * table rows of the leases being acquired.  Raises nothing.
 */
static void
abort_acquire(void)
{
	rl_proto_abandon_in_flight();
	rl_proto_abandon_multi_in_flight();
	rl_handoff_abort();
	rl_handoff_abandon(rl_registry_acquiring_slot());
	rl_registry_abort_acquire();
}

/*
 * Backend exit: release everything, then let the nodes take what is still
 * in flight before the connections close (bounded: one connect_timeout and
 * two node_timeouts in all, and one more node_timeout when the idle timer
 * had ended the connections, whose owed replies the release reads first).
 */
static void
rl_backend_exit(int code, Datum arg)
{
	abort_acquire();
	(void) rl_lease_release(RL_DROP_ALL, InvalidSubTransactionId, true);
	rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
	rl_nodes_disconnect_all();
}

/*
 * This backend is about to use the nodes: from now on its exit releases
 * its leases first (registered once, in the backend itself).
 */
void
rl_lifecycle_arm_exit(void)
{
	if (!rl_exit_hook_registered)
	{
		before_shmem_exit(rl_backend_exit, (Datum) 0);
		rl_exit_hook_registered = true;
	}
}

/*
 * COMMIT of a transaction whose transaction lease ran out (or was lost)
 * before it: a WARNING for each, naming the resource and the token, since
 * another holder may have been granted the resource meanwhile.  What the
 * transaction wrote through the fence was checked there; nothing else told
 * the session.  Never an ERROR: the commit is recorded already.
 */
static void
warn_expired_at_commit(void)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	int64_t		now = rl_now_us();

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state != RL_LEASE_HELD || lease->xact_holds == 0 ||
			rl_registry_valid_until(lease) > now)
			continue;
		ereport(WARNING,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("transaction lease on \"%s\" had expired before COMMIT",
						lease->resource),
				 errdetail("Its fencing token %lld may have been superseded while the transaction ran: another session may have been granted the lease.",
						   (long long) lease->token),
				 errhint("Use a TTL longer than the transaction takes, or extend the lease with redlock_extend() while it runs.")));
	}
}

static void
rl_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (rl_registry_has_xact_holds())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds redlock transaction leases")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			warn_expired_at_commit();
			(void) rl_lease_release(RL_DROP_XACT, InvalidSubTransactionId, true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			abort_acquire();
			(void) rl_lease_release(RL_DROP_XACT, InvalidSubTransactionId, true);
			break;
		default:
			break;
	}
}

/*
 * A transaction lease first taken in a subtransaction that rolls back goes
 * with it, as advisory transaction locks do; on commit it moves to the
 * parent.
 */
static void
rl_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		abort_acquire();
		(void) rl_lease_release(RL_DROP_SUBXACT, mySubid, true);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		rl_registry_subxact_commit(mySubid, parentSubid);
}

static void
rl_process_utility(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		discard_all = IsA(parsetree, DiscardStmt) &&
		((DiscardStmt *) parsetree)->target == DISCARD_ALL;

	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
							params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/* like advisory locks: DISCARD ALL (never in a transaction block) */
	if (discard_all)
		(void) rl_lease_release(RL_DROP_ALL, InvalidSubTransactionId, false);
}

void
rl_lifecycle_init(void)
{
	RegisterXactCallback(rl_xact_callback, NULL);
	RegisterSubXactCallback(rl_subxact_callback, NULL);
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = rl_process_utility;
}
