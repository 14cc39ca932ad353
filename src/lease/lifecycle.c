/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  When leases end without being unlocked: transaction and subtransaction
 *	  end, DISCARD ALL, backend exit, and a change of the node list.
 *
 * Commit, abort and exit run with interrupts held and must never raise
 * (an ERROR after the commit record is a PANIC): their releases are
 * no-throw rounds with one overall deadline (see registry.c).
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
#include "lease/lifecycle.h"
#include "lease/registry.h"

/* PostgreSQL 18 replaced the flag with a test of MyBackendType */
#if PG_VERSION_NUM >= 180000
#define RL_IN_BGWORKER() AmBackgroundWorkerProcess()
#else
#define RL_IN_BGWORKER() IsBackgroundWorker
#endif

static bool rl_exit_hook_registered = false;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/*
 * Backend exit: release everything, then let the nodes take what is still
 * in flight before the connections close (bounded: one connect_timeout and
 * two node_timeouts in all).
 */
static void
rl_backend_exit(int code, Datum arg)
{
	rl_proto_abandon_in_flight();
	rl_registry_abort_acquire();
	(void) rl_registry_release(RL_DROP_ALL, InvalidSubTransactionId, true);
	rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
	rl_nodes_disconnect_all();
}

/*
 * Make sure the node list in force is the one we are connected to.  A new
 * node list first releases this session's leases on the old nodes: they
 * cannot be tracked across lists.
 */
void
rl_nodes_ready(void)
{
	if (!rl_exit_hook_registered)
	{
		before_shmem_exit(rl_backend_exit, (Datum) 0);
		rl_exit_hook_registered = true;
	}

	if (rl_nodes_config_changed())
	{
		long		n = rl_registry_count();

		if (n > 0)
		{
			ereport(WARNING,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg_plural("releasing %ld lease held on the previous Redis nodes",
								   "releasing %ld leases held on the previous Redis nodes",
								   n, n),
					 errdetail("redlock.nodes, the Redis credentials, or the TLS or DNS settings changed; leases cannot be kept across such a change.")));
			(void) rl_registry_release(RL_DROP_ALL, InvalidSubTransactionId, true);
			rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
		}
		rl_nodes_apply_config();
	}

	/*
	 * verify-ca with no CA file of its own would trust any publicly issued
	 * certificate (no name is checked): refused at connect (node_tls.c),
	 * and here with the whole story.  The background workers only see the
	 * nodes fail.
	 */
	if (rl_tls_mode == RL_TLS_VERIFY_CA &&
		(rl_tls_ca_file == NULL || rl_tls_ca_file[0] == '\0') &&
		!RL_IN_BGWORKER())
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_CONFIG),
				 errmsg("redlock.tls_mode \"verify-ca\" needs redlock.tls_ca_file"),
				 errdetail("verify-ca checks that a trusted CA signed a node's certificate, not the name in it; with the system's CA store, any publicly issued certificate would pass."),
				 errhint("Set redlock.tls_ca_file to the CA that signs the nodes' certificates, or use redlock.tls_mode = 'verify-full'.")));

	if (rl_nodes_count() == 0 && rl_nodes_rejected_reason() != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_CONFIG),
				 errmsg("invalid value for parameter \"redlock.nodes\" in the server configuration"),
				 errdetail("%s", rl_nodes_rejected_reason()),
				 errhint("Correct redlock.nodes in the server configuration and reload it.")));
	if (rl_nodes_count() == 0)
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_CONFIG),
				 errmsg("redlock.nodes is not set"),
				 errhint("A superuser sets it to the Redis masters to use, e.g. ALTER SYSTEM SET redlock.nodes = '127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381'; SELECT pg_reload_conf();")));
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
			(void) rl_registry_release(RL_DROP_XACT, InvalidSubTransactionId, true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			rl_proto_abandon_in_flight();
			rl_registry_abort_acquire();
			(void) rl_registry_release(RL_DROP_XACT, InvalidSubTransactionId, true);
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
		rl_proto_abandon_in_flight();
		rl_registry_abort_acquire();
		(void) rl_registry_release(RL_DROP_SUBXACT, mySubid, true);
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
		(void) rl_registry_release(RL_DROP_ALL, InvalidSubTransactionId, false);
}

void
rl_lifecycle_init(void)
{
	RegisterXactCallback(rl_xact_callback, NULL);
	RegisterSubXactCallback(rl_subxact_callback, NULL);
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = rl_process_utility;
}
