/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The background workers: keep-alive (extends leases taken with
 *	  keep_alive => true while the backend that holds them lives) and
 *	  wake-up (wakes local waiters when a lease is released on another
 *	  server).
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
 * The wake-up worker subscribes, on every node, to the channels of the lock
 * keys that backends of this server wait for; every release publishes on
 * its key's channel (protocol.c), so a release on any server sharing the
 * nodes wakes the first local waiter as soon as a majority of the nodes
 * have announced it (a failed attempt withdraws itself silently: nobody
 * waits for a lock that was never held).  A missed message (a node
 * down, the worker restarting) costs latency only: waiters still wake at
 * redlock.retry_delay.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lifecycle.h"
#include "lock_table.h"
#include "protocol.h"
#include "wait_events.h"
#include "worker.h"

#define RL_WAKEUP_MAX_KEYS	4096	/* keys listened for; waiters for more
									 * keys poll */

PGDLLEXPORT void redlock_worker_main(Datum main_arg);
PGDLLEXPORT void redlock_wakeup_main(Datum main_arg);

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
static void
worker_start(RlWorkerRole role)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	before_shmem_exit(worker_exit, Int32GetDatum(role));
	rl_lock_table_set_worker(role, true);
}

static void
worker_reload_config(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

static bool
nodes_configured(void)
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

	worker_start(RL_WORKER_KEEPALIVE);
	due = MemoryContextAlloc(TopMemoryContext,
							 sizeof(RlKeepAlive) * RL_EXTEND_CHUNK);

	for (;;)
	{
		int64_t		next_us;
		int			n;
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		worker_reload_config();

		n = rl_lock_table_due(due, RL_EXTEND_CHUNK, &next_us);
		if (n > 0 && nodes_configured())
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

/* ---------- the wake-up worker ---------- */

/*
 * Releases heard, per lock key.  A release publishes on every node it
 * reaches, so one release is heard up to once per node: the first waiter
 * here is woken once a majority of the nodes have published (before that
 * the lock is not free where it counts, and asking would only be refused),
 * or node_timeout after the first one at the latest (a node that never
 * says so must not hold the waiter up).
 */
typedef struct RlHeard
{
	char		key[RL_KEY_MAX + 1];	/* hash key */
	uint32		nodes;			/* bit i: node i published */
	int64_t		first_us;
} RlHeard;

static HTAB *rl_heard = NULL;

static void
on_release(int node, const char *channel, size_t len)
{
	char		key[RL_KEY_MAX + 1];
	RlHeard    *h;
	bool		found;

	if (len > RL_KEY_MAX)
		return;
	memcpy(key, channel, len);
	key[len] = '\0';
	h = hash_search(rl_heard, key, HASH_ENTER, &found);
	if (!found)
	{
		h->nodes = 0;
		h->first_us = rl_now_us();
	}
	h->nodes |= (uint32) 1 << node;
	if (pg_popcount32(h->nodes) >= rl_majority(rl_nodes_count()))
	{
		rl_lock_table_wake_key(key, len);
		hash_search(rl_heard, key, HASH_REMOVE, NULL);
	}
}

/*
 * Wake the waiters of releases heard from fewer than a majority for
 * node_timeout; returns the milliseconds until the next such deadline (at
 * most a second).
 */
static long
wake_overdue(void)
{
	HASH_SEQ_STATUS status;
	RlHeard    *h;
	int64_t		now = rl_now_us();
	long		next_ms = 1000;

	hash_seq_init(&status, rl_heard);
	while ((h = hash_seq_search(&status)) != NULL)
	{
		int64_t		due = h->first_us + (int64_t) rl_node_timeout_ms * 1000;

		if (due <= now)
		{
			rl_lock_table_wake_key(h->key, strlen(h->key));
			hash_search(rl_heard, h->key, HASH_REMOVE, NULL);
		}
		else
			next_ms = Min(next_ms, (long) ((due - now + 999) / 1000));
	}
	return next_ms;
}

/* (UN)SUBSCRIBE the keys on the nodes not skipped; no reply is owed. */
static void
send_subscription(const char *verb, char (*keys)[RL_KEY_MAX + 1], int nkeys,
				  const bool *skip)
{
	RlRequest	req;
	const char **argv = palloc(sizeof(char *) * (nkeys + 1));
	size_t	   *argvlen = palloc(sizeof(size_t) * (nkeys + 1));

	argv[0] = verb;
	argvlen[0] = strlen(verb);
	for (int i = 0; i < nkeys; i++)
	{
		argv[i + 1] = keys[i];
		argvlen[i + 1] = strlen(keys[i]);
	}
	memset(&req, 0, sizeof(req));
	req.reply_kind = RL_REPLY_STATUS;
	req.goal = RL_GOAL_ALL;
	req.no_reply = true;
	req.argc = nkeys + 1;
	req.argv = argv;
	req.argvlen = argvlen;
	memcpy(req.skip, skip, sizeof(req.skip));
	rl_nodes_send(&req);
	pfree(argv);
	pfree(argvlen);
}

/* keys in a[] that are not in b[], into out[] */
static int
keys_minus(char (*a)[RL_KEY_MAX + 1], int na, char (*b)[RL_KEY_MAX + 1], int nb,
		   char (*out)[RL_KEY_MAX + 1])
{
	int			n = 0;

	for (int i = 0; i < na; i++)
	{
		bool		found = false;

		for (int k = 0; k < nb && !found; k++)
			found = strcmp(a[i], b[k]) == 0;
		if (!found)
			strlcpy(out[n++], a[i], RL_KEY_MAX + 1);
	}
	return n;
}

void
redlock_wakeup_main(Datum main_arg)
{
	char		(*wanted)[RL_KEY_MAX + 1];
	char		(*subscribed)[RL_KEY_MAX + 1];
	char		(*diff)[RL_KEY_MAX + 1];
	int			nsubscribed = 0;
	uint64_t	serials[RL_MAX_NODES] = {0};

	worker_start(RL_WORKER_WAKEUP);
	wanted = MemoryContextAlloc(TopMemoryContext, RL_WAKEUP_MAX_KEYS * (RL_KEY_MAX + 1));
	subscribed = MemoryContextAlloc(TopMemoryContext, RL_WAKEUP_MAX_KEYS * (RL_KEY_MAX + 1));
	diff = MemoryContextAlloc(TopMemoryContext, RL_WAKEUP_MAX_KEYS * (RL_KEY_MAX + 1));
	{
		HASHCTL		ctl;

		ctl.keysize = RL_KEY_MAX + 1;
		ctl.entrysize = sizeof(RlHeard);
		ctl.hcxt = TopMemoryContext;
		rl_heard = hash_create("redlock releases heard", 64, &ctl,
							   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	rl_nodes_set_push_handler(on_release);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		worker_reload_config();

		if (nodes_configured())
		{
			int			nwanted;
			int			n;
			uint64_t	snap[RL_MAX_NODES];
			bool		whole[RL_MAX_NODES];	/* skip lists: not these */
			bool		part[RL_MAX_NODES];
			bool		none[RL_MAX_NODES];

			if (rl_nodes_config_changed())
				nsubscribed = 0;	/* new connections: subscribe anew */
			rl_nodes_ready();
			nwanted = rl_lock_table_awaited_keys(wanted, RL_WAKEUP_MAX_KEYS);

			/*
			 * A node that reconnected lost its subscriptions, and one without
			 * a connection (down, restarted) gets one by being sent them, once
			 * out of backoff: both get the whole set.  The others get what
			 * changed.  A node that connects while we send shows a new serial
			 * next time, and gets the whole set then.
			 */
			for (int i = 0; i < rl_nodes_count(); i++)
			{
				snap[i] = rl_node_connection_serial(i);
				whole[i] = snap[i] != serials[i] || !rl_node_connected(i);
				part[i] = !whole[i];
			}
			if (nwanted > 0)
				send_subscription("SUBSCRIBE", wanted, nwanted, part);
			n = keys_minus(wanted, nwanted, subscribed, nsubscribed, diff);
			if (n > 0)
				send_subscription("SUBSCRIBE", diff, n, whole);
			memset(none, 0, sizeof(none));
			n = keys_minus(subscribed, nsubscribed, wanted, nwanted, diff);
			if (n > 0)
				send_subscription("UNSUBSCRIBE", diff, n, none);
			memcpy(subscribed, wanted, (Size) nwanted * (RL_KEY_MAX + 1));
			nsubscribed = nwanted;
			memcpy(serials, snap, sizeof(serials));
		}

		/*
		 * messages, a new waiter (the latch), a release heard from too few
		 * nodes for too long, or a look every second
		 */
		rl_nodes_wait_pushes(wake_overdue());
	}
}
