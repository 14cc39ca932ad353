/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The keep-alive worker: a background worker that extends leases taken
 *	  with keep_alive => true while the backend that holds them lives.
 *
 * Registered when redlock is in shared_preload_libraries.  Every third of
 * a lease's TTL it extends the lease on a majority of nodes (owner-checked,
 * like redlock_extend), for at most redlock.keep_alive_limit after the
 * grant.  A lease it cannot extend is marked lost in the lock table: the
 * holder sees it in redlock_leases and redlock_locks, and the log says so;
 * the fence still guards the data.
 *
 * The worker only extends leases that are in the lock table, and a backend
 * leaves the table when it releases or exits.  A backend that crashes takes
 * the whole server through crash recovery, which restarts the worker on a
 * fresh table: a crashed holder's lease still ends within one TTL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"

#include "lifecycle.h"
#include "lock_table.h"
#include "protocol.h"
#include "wait_events.h"
#include "worker.h"

#define RL_WORKER_BATCH	64		/* leases extended per look at the table */

PGDLLEXPORT void redlock_worker_main(Datum main_arg);

void
rl_worker_register(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
		return;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "redlock", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "redlock_worker_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "redlock keep-alive worker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "redlock keep-alive", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

static void
worker_exit(int code, Datum arg)
{
	rl_lock_table_set_worker(false);
}

/* Extend one lease; record the outcome in the lock table. */
static void
keep_alive(const RlKeepAlive *k)
{
	RlRequest	req;
	RlDecision	decision;
	RlKeepOutcome outcome;
	int64_t		started_us;

	decision = rl_proto_extend(k->key, strlen(k->key), k->owner, k->ttl_ms,
							   &started_us, &req);
	if (decision == RL_WON &&
		rl_validity_us(k->ttl_ms, rl_now_us() - started_us, rl_drift_factor) > 0)
		outcome = RL_KEEP_EXTENDED;
	else if (decision == RL_UNAVAILABLE)
		outcome = RL_KEEP_RETRY;
	else
		outcome = RL_KEEP_LOST;
	if (rl_lock_table_extended(k, outcome,
							   started_us + (int64_t) k->ttl_ms * 1000 -
							   rl_drift_us(k->ttl_ms, rl_drift_factor)))
		ereport(LOG,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("redlock: keep-alive could not extend the lease on \"%s\" held by process %d; it is lost",
						k->resource, k->pid),
				 errdetail("%d of %d nodes extended it; a majority is %d.",
						   req.tally.yes, req.nnodes, rl_majority(req.nnodes))));
}

void
redlock_worker_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	before_shmem_exit(worker_exit, (Datum) 0);
	rl_lock_table_set_worker(true);

	for (;;)
	{
		RlKeepAlive due[RL_WORKER_BATCH];
		int64_t		next_us;
		int			n;
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		n = rl_lock_table_due(due, RL_WORKER_BATCH, &next_us);
		if (n > 0 && rl_node_list != NULL && rl_node_list->count > 0)
		{
			rl_nodes_ready();
			for (int i = 0; i < n; i++)
				keep_alive(&due[i]);
			continue;			/* more may be due */
		}

		sleep_ms = (long) Max((next_us - rl_now_us() + 999) / 1000, 1);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms, 1000), rl_wait_event_lease());
		ResetLatch(MyLatch);
	}
}
