/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The registration of the background workers, and the keep-alive worker
 *	  (extends leases taken with keep_alive => true while the backend that
 *	  holds them lives).
 *
 * Registered when redlock is in shared_preload_libraries.  Every third of
 * a lease's TTL it extends the lease on a majority of nodes (owner-checked,
 * like redlock_extend), for at most redlock.keep_alive_limit after the
 * grant.  The leases due at one look at the table are extended together,
 * one command per node (up to RL_EXTEND_CHUNK of them), so a slow node
 * costs one wait per round, not one per lease.  A lease it cannot extend is
 * marked lost in the lock table: the holder sees it in redlock_leases and
 * redlock_locks, and the log says so; the fence still guards the data.
 *
 * The worker only extends leases that are in the lock table, and a backend
 * leaves the table when it releases or exits.  A backend that crashes takes
 * the whole server through crash recovery, which restarts the worker on a
 * fresh table: a crashed holder's lease still ends within one TTL.
 *
 * The wake-up worker is in wakeup.c.
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
#include "utils/memutils.h"

#include "lifecycle.h"
#include "lock_table.h"
#include "protocol.h"
#include "wait_events.h"
#include "worker.h"

static void
register_one(const char *function, const char *name, const char *type)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "redlock", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker.bgw_name, name, BGW_MAXLEN);
	strlcpy(worker.bgw_type, type, BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

void
rl_worker_register(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	register_one("redlock_worker_main", "redlock keep-alive worker",
				 "redlock keep-alive");
	register_one("redlock_wakeup_main", "redlock wake-up worker",
				 "redlock wake-up");
}

static void
worker_exit(int code, Datum arg)
{
	rl_lock_table_set_worker((RlWorkerRole) DatumGetInt32(arg), false);
}

/* Both workers: signals, no database, announced in the lock table. */
void
rl_worker_start(RlWorkerRole role)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	before_shmem_exit(worker_exit, Int32GetDatum(role));
	rl_lock_table_set_worker(role, true);
}

void
rl_worker_reload_config(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

bool
rl_worker_nodes_configured(void)
{
	return rl_node_list != NULL && rl_node_list->count > 0;
}

/*
 * Extend the due leases with one command per node; record each outcome in
 * the lock table.  Each lease is decided on its own, as if extended alone.
 */
static void
keep_alive(const RlKeepAlive *due, int n)
{
	RlExtendItem items[RL_EXTEND_CHUNK];
	RlDecision	decisions[RL_EXTEND_CHUNK];
	RlTally		tallies[RL_EXTEND_CHUNK];
	RlRequest	req;
	int64_t		started_us;
	int64_t		now;

	if (n <= 0)
		return;
	Assert(n <= RL_EXTEND_CHUNK);
	for (int i = 0; i < n; i++)
	{
		items[i].key = due[i].key;
		items[i].keylen = strlen(due[i].key);
		items[i].owner = due[i].owner;
		items[i].ttl_ms = due[i].ttl_ms;
	}
	rl_proto_extend_many(items, n, &started_us, decisions, tallies, &req);
	now = rl_now_us();

	for (int i = 0; i < n; i++)
	{
		const RlKeepAlive *k = &due[i];
		RlKeepOutcome outcome;

		if (decisions[i] == RL_WON &&
			rl_validity_us(k->ttl_ms, now - started_us, rl_drift_factor) > 0)
			outcome = RL_KEEP_EXTENDED;
		else if (decisions[i] == RL_UNAVAILABLE)
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
							   tallies[i].yes, req.nnodes, rl_majority(req.nnodes))));
	}
}

void
redlock_worker_main(Datum main_arg)
{
	RlKeepAlive *due;

	rl_worker_start(RL_WORKER_KEEPALIVE);
	due = MemoryContextAlloc(TopMemoryContext,
							 sizeof(RlKeepAlive) * RL_EXTEND_CHUNK);

	for (;;)
	{
		int64_t		next_us;
		int			n;
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		rl_worker_reload_config();

		n = rl_lock_table_due(due, RL_EXTEND_CHUNK, &next_us);
		if (n > 0 && rl_worker_nodes_configured())
		{
			rl_nodes_ready();
			keep_alive(due, n);
			continue;			/* more may be due */
		}

		sleep_ms = (long) Max((next_us - rl_now_us() + 999) / 1000, 1);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms, 1000), rl_wait_event_lease());
		ResetLatch(MyLatch);
	}
}
