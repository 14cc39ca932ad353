/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The registration of the background workers, and the keep-alive worker
 *	  (extends leases taken with keep_alive => true while the backend that
 *	  holds them lives).
 *
 * Registered when redlock is in shared_preload_libraries; both workers run
 * on a hot standby too (from a consistent state on), since leases and
 * waiting work there.  Every third of a lease's TTL it extends the lease on
 * a majority of nodes (owner-checked, like redlock_extend), for at most
 * redlock.keep_alive_limit after the grant; reaching the limit is logged
 * once.  The leases due at one look at the table are extended together,
 * one command per node (up to RL_EXTEND_CHUNK of them), so a slow node
 * costs one wait per round, not one per lease.  A lease it cannot extend is
 * marked lost in the lock table: the holder sees it in redlock_leases and
 * redlock_locks, and the log says so; the fence still guards the data.
 *
 * It extends leases on the node list of the server configuration, and
 * announces it in the lock table: a session whose database or role sets
 * other nodes is refused keep_alive (lock_table_keep.c).
 *
 * The worker only extends leases that are in the lock table, and a backend
 * leaves the table when it releases or exits.  A backend that crashes takes
 * the whole server through crash recovery, which restarts the worker on a
 * fresh table: a crashed holder's lease still ends within one TTL.
 *
 * The wake-up worker is in wakeup.c, the dispatcher in dispatcher.c.
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

#include "shared/lock_table.h"
#include "protocol/protocol.h"
#include "base/wait_events.h"
#include "workers/worker.h"

static void
register_one(const char *function, const char *name, const char *type)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
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
	register_one("redlock_dispatcher_main", "redlock dispatcher",
				 "redlock dispatcher");
}

static void
worker_exit(int code, Datum arg)
{
	rl_lock_table_set_worker((RlWorkerRole) DatumGetInt32(arg), false);
}

/* Every worker: signals, no database. */
void
rl_worker_start_signals(void)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
}

/* The keep-alive and wake-up workers: announced in the lock table too. */
void
rl_worker_start(RlWorkerRole role)
{
	rl_worker_start_signals();
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
 * Worker exit: let the nodes take what is still in flight before the
 * connections close (bounded by node_timeout).
 */
static void
worker_nodes_exit(int code, Datum arg)
{
	rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
	rl_nodes_disconnect_all();
}

/*
 * Both workers, when rl_worker_nodes_configured(): connect to the node
 * list of the server configuration, renewed when it changed.  A worker
 * holds no lease of its own, so unlike a session (session_nodes.c) it has
 * nothing to release at the switch.
 */
void
rl_worker_nodes_ready(void)
{
	static bool exit_registered = false;

	if (!exit_registered)
	{
		before_shmem_exit(worker_nodes_exit, (Datum) 0);
		exit_registered = true;
	}
	if (rl_nodes_config_changed())
		rl_nodes_apply_config();
}

/*
 * Leases the worker stops keeping without a round: the keep-alive limit, or
 * nodes it no longer uses.  Moves the others to the front of due[];
 * returns how many.
 */
static int
report_ended(RlKeepAlive *due, int n)
{
	int			kept = 0;

	for (int i = 0; i < n; i++)
	{
		const RlKeepAlive *k = &due[i];

		if (k->limit)
			ereport(LOG,
					(errmsg("keep-alive of the lease on \"%s\" held by process %d ended at redlock.keep_alive_limit (%d s)",
							k->resource, k->pid, k->limit_s),
					 errdetail("The lease is no longer extended and expires by its TTL of %d ms unless its holder extends it with redlock_extend().",
							   k->ttl_ms)));
		else if (k->other_nodes)
			ereport(LOG,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg("keep-alive could not extend the lease on \"%s\" held by process %d; it is lost",
							k->resource, k->pid),
					 errdetail("The lease was taken on other Redis nodes than the keep-alive worker now uses (redlock.nodes changed).")));
		else
			due[kept++] = *k;
	}
	return kept;
}

/*
 * Extend the due leases with one command per node; record each outcome in
 * the lock table.  Each lease is decided on its own, as if extended alone.
 */
static void
keep_alive(RlKeepAlive *due, int n)
{
	RlExtendItem items[RL_EXTEND_CHUNK];
	RlDecision	decisions[RL_EXTEND_CHUNK];
	RlTally		tallies[RL_EXTEND_CHUNK];
	RlRequest	req;
	int64_t		started_us;
	int64_t		now;

	n = report_ended(due, n);
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
	/* an error here ends the worker, and its rounds (worker_exit) */
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
		if (rl_lock_table_extended(k, outcome))
			ereport(LOG,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg("keep-alive could not extend the lease on \"%s\" held by process %d; it is lost",
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

		/* the node list this worker keeps leases on, for the backends */
		if (rl_worker_nodes_configured())
			rl_worker_nodes_ready();
		rl_lock_table_keepalive_nodes(rl_worker_nodes_configured() ?
									  rl_lock_table_nodes() : 0);

		n = rl_lock_table_due(due, RL_EXTEND_CHUNK, &next_us);
		if (n > 0)
		{
			keep_alive(due, n);
			continue;			/* more may be due */
		}

		sleep_ms = (long) Max((next_us - rl_now_us() + 999) / 1000, 1);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms, 1000), rl_wait_event_lease());
		ResetLatch(MyLatch);
	}
}
