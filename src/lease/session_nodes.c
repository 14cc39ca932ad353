/*-------------------------------------------------------------------------
 *
 * session_nodes.c
 *	  The node list a session's calls run against, and the switch to a new
 *	  one, which releases the leases taken on the old one.
 *
 * redlock.nodes, the credentials and the TLS and DNS settings may change
 * on a reload, a SET, or a function's SET clause (guc.c, guc_net.c bump
 * the generation).  A session's leases cannot be tracked across node
 * lists: before its next call uses the nodes, the leases held on the old
 * ones are released (with a warning) and the connections renewed.  The
 * background workers hold no leases of their own and switch on their own
 * (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "base/guc.h"
#include "lease/lease_release.h"
#include "lease/lifecycle.h"
#include "lease/session_nodes.h"

/* PostgreSQL 18 replaced the flag with a test of MyBackendType */
#if PG_VERSION_NUM >= 180000
#define RL_IN_BGWORKER() AmBackgroundWorkerProcess()
#else
#define RL_IN_BGWORKER() IsBackgroundWorker
#endif

/*
 * Before a session's call uses the nodes: make sure the node list in force
 * is the one we are connected to.  A new node list first releases this
 * session's leases on the old nodes: they cannot be tracked across lists.
 * Raises when no usable node list is set.
 */
void
rl_session_nodes_ready(void)
{
	rl_lifecycle_arm_exit();

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
			(void) rl_lease_release(RL_DROP_ALL, InvalidSubTransactionId, true);
			rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
		}
		rl_nodes_apply_config();
	}

	/*
	 * verify-ca with no CA file of its own would trust any publicly issued
	 * certificate (no name is checked): refused at connect (node_tls.c),
	 * and here with the whole story.  A background worker only sees the
	 * nodes fail (ours switch nodes in worker.c; another extension's may
	 * make lock calls).
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
