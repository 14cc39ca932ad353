/*-------------------------------------------------------------------------
 *
 * lock_table_keep.c
 *	  The keep-alive side of the lock table: which leases the keep-alive
 *	  worker extends, and the validity that extension rounds leave.
 *
 * A lease's validity in the table is what its holder is told (for
 * keep-alive leases, redlock_leases and the lease functions read it here).
 * Two processes may extend one lease: the keep-alive worker, and the holder
 * with redlock_extend.  Their rounds travel on different connections, so a
 * node may apply them in either order, and a shorter TTL may land last.
 * So every round announces itself before it is sent, with the smallest
 * validity it can leave (its start plus its TTL less the drift allowance),
 * and while rounds overlap each records the smallest of theirs: a won round
 * sets the validity to that minimum, one not won can only lower it.  A
 * shorter TTL given by redlock_extend becomes the lease's TTL: the worker
 * goes on extending with it, every third of it (sooner when overlapping
 * rounds left a shorter validity).
 *
 * The worker only extends leases taken on its own node list; a backend
 * whose database or role sets other nodes cannot ask for keep-alive
 * (rl_lock_table_keep_alive_check), and a lease left on nodes the worker no
 * longer uses after a reload is marked lost.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "base/guc.h"
#include "shared/lock_table_internal.h"
#include "base/quorum.h"
#include "base/wait_events.h"

/* How long a keep_alive request waits for a (re)starting worker. */
#define RL_KEEPALIVE_WORKER_WAIT_MS	2000

/* The keep-alive worker announces the node list it extends leases on. */
void
rl_lock_table_keepalive_nodes(uint64_t nodes)
{
	if (rl_table == NULL)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	rl_table->keepalive_nodes = nodes;
	LWLockRelease(rl_table->lock);
}

/*
 * A lock call asks for keep_alive: raise unless a keep-alive worker runs on
 * this server's node list, the one this session uses.  A worker that is
 * (re)starting, or has yet to apply a reload, is waited for a little.
 */
void
rl_lock_table_keep_alive_check(void)
{
	uint64_t	mine = rl_lock_table_nodes();
	uint64_t	theirs = 0;
	bool		running = false;

	for (int waited = 0;; waited += 10)
	{
		LWLockAcquire(rl_table->lock, LW_SHARED);
		running = rl_table->worker_procno[RL_WORKER_KEEPALIVE] >= 0;
		theirs = rl_table->keepalive_nodes;
		LWLockRelease(rl_table->lock);
		if ((running && theirs == mine) || waited >= RL_KEEPALIVE_WORKER_WAIT_MS)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, rl_wait_event_lease());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	if (!running)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("keep_alive is not available: no redlock keep-alive worker is running"),
				 errdetail("Leases taken with keep_alive => true are extended by the redlock keep-alive background worker, which is not running on this server."),
				 errhint("Check the server log for why it did not start (for example, max_worker_processes), or extend the lease with redlock_extend().")));
	if (theirs != mine)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("keep_alive is not available with this session's redlock.nodes"),
				 errdetail("The keep-alive worker extends leases on the Redis nodes of the server configuration, and this session uses other nodes (set for its database, its role or the session)."),
				 errhint("Take keep-alive leases on the server's redlock.nodes, or extend the lease with redlock_extend().")));
}

/* ---------- extension rounds ---------- */

static void
round_begin(RlSlot *s, int ttl_ms, int64_t now)
{
	int64_t		floor_us = rl_valid_until_us(now, ttl_ms, rl_drift_factor);

	if (!s->worker_round && !s->backend_round)
		s->rounds_floor_us = floor_us;
	else
		s->rounds_floor_us = Min(s->rounds_floor_us, floor_us);
}

/* A round ended; lock held.  won: a majority extended it in time. */
static void
round_end(RlSlot *s, bool won)
{
	if (won)
		s->valid_until_us = s->rounds_floor_us;
	else
		s->valid_until_us = Min(s->valid_until_us, s->rounds_floor_us);
}

/*
 * When the worker extends the lease next: a third of its TTL from now, or
 * sooner when overlapping rounds left it a shorter validity.
 */
static int64_t
next_extension(const RlSlot *s, int64_t now)
{
	int64_t		third = (int64_t) s->ttl_ms * 1000 / 3;

	return now + Max(Min(third, (s->valid_until_us - now) / 3), 1000);
}

/* Lock held: mark the slot's lease lost, and wake its first waiter. */
static int
mark_lost(RlSlot *s, int64_t now)
{
	int			next;

	s->lost = true;
	s->valid_until_us = Min(s->valid_until_us, now);
	next = rl_first_waiter_on(s->key, s->nodes, -1);
	if (next < 0)
		return -1;
	rl_table->slots[next].woken = true;
	return rl_table->slots[next].procno;
}

/*
 * The holder extends its lease (redlock_extend): announce the round before
 * it is sent.  rl_lock_table_extend_end must follow, also on error.
 */
void
rl_lock_table_extend_begin(int slot, int ttl_ms)
{
	RlSlot	   *s;

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->in_use && s->pid == MyProcPid && !s->backend_round);
	round_begin(s, ttl_ms, rl_now_us());
	s->backend_round = true;
	LWLockRelease(rl_table->lock);
}

/*
 * The holder's extension round ended.  A won round makes ttl_ms the lease's
 * TTL, with which the worker goes on.  Returns the validity the table now
 * has (0 when the worker lost the lease), or -1 without a slot.
 */
int64_t
rl_lock_table_extend_end(int slot, int ttl_ms, bool won)
{
	RlSlot	   *s;
	int64_t		until;
	bool		keep;

	if (rl_table == NULL || slot < 0)
		return -1;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->in_use && s->pid == MyProcPid && s->backend_round);
	round_end(s, won);
	s->backend_round = false;
	if (won)
	{
		s->ttl_ms = ttl_ms;
		s->next_extend_us = next_extension(s, rl_now_us());
	}
	keep = s->keep_alive && !s->lost;
	until = s->lost ? 0 : s->valid_until_us;
	LWLockRelease(rl_table->lock);
	if (won && keep)
		rl_lock_table_wake_worker(RL_WORKER_KEEPALIVE);	/* sooner, maybe */
	return until;
}

/*
 * A keep-alive lease's validity as the table keeps it: its monotonic end,
 * or 0 when the worker lost it.
 */
int64_t
rl_lock_table_valid_until(int slot)
{
	int64_t		until;

	if (rl_table == NULL || slot < 0)
		return 0;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	until = rl_table->slots[slot].lost ? 0 : rl_table->slots[slot].valid_until_us;
	LWLockRelease(rl_table->lock);
	return until;
}

/* Did the worker stop extending the lease at redlock.keep_alive_limit? */
bool
rl_lock_table_limit_reached(int slot)
{
	bool		reached;

	if (rl_table == NULL || slot < 0)
		return false;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	reached = rl_table->slots[slot].limit_reached;
	LWLockRelease(rl_table->lock);
	return reached;
}

/* ---------- the keep-alive worker ---------- */

/*
 * For the worker: copy up to max keep-alive leases due for extension into
 * due[], with their rounds begun; returns how many, and sets *next_us to
 * when the next one is due.  Leases that reached redlock.keep_alive_limit,
 * or that were taken on other nodes than the worker's, come once with
 * limit or other_nodes set, to be reported, not extended.
 */
int
rl_lock_table_due(RlKeepAlive *due, int max, int64_t *next_us)
{
	int			n = 0;
	int64_t		now = rl_now_us();
	uint64_t	nodes = rl_lock_table_nodes();
	int			wake[RL_EXTEND_CHUNK];
	int			nwake = 0;

	*next_us = now + 1000000;
	if (rl_table == NULL)
		return 0;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < rl_table->nslots && n < max; i++)
	{
		RlSlot	   *s = &rl_table->slots[i];
		RlKeepAlive *k = &due[n];

		if (!s->in_use || !s->granted || !s->keep_alive || s->lost ||
			s->limit_reached || s->worker_round)
			continue;
		k->limit = now >= s->keep_until_us;
		k->other_nodes = !k->limit && s->nodes != nodes;
		if (!k->limit && !k->other_nodes && s->next_extend_us > now)
		{
			*next_us = Min(*next_us, s->next_extend_us);
			continue;
		}
		k->slot = i;
		k->pid = s->pid;
		k->ttl_ms = s->ttl_ms;
		k->limit_s = s->keep_limit_s;
		strlcpy(k->owner, s->value, sizeof(k->owner));
		strlcpy(k->key, s->key, sizeof(k->key));
		strlcpy(k->resource, s->resource, sizeof(k->resource));
		n++;
		if (k->limit)
			s->limit_reached = true;
		else if (k->other_nodes)
		{
			int			procno = mark_lost(s, now);

			if (procno >= 0)
				wake[nwake++] = procno;
		}
		else
		{
			round_begin(s, s->ttl_ms, now);
			s->worker_round = true;
		}
	}
	LWLockRelease(rl_table->lock);
	for (int i = 0; i < nwake; i++)
		SetLatch(rl_latch_of(wake[i]));
	return n;
}

/*
 * For the worker: record the outcome of an extension round, if the slot
 * still holds the same lease.  Returns whether the lease is lost now.
 */
bool
rl_lock_table_extended(const RlKeepAlive *k, RlKeepOutcome outcome)
{
	RlSlot	   *s;
	int64_t		now = rl_now_us();
	bool		lost = false;
	int			procno = -1;

	if (rl_table == NULL)
		return false;
	s = &rl_table->slots[k->slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	if (s->in_use && s->granted && s->pid == k->pid && s->worker_round &&
		strcmp(s->value, k->owner) == 0)
	{
		s->worker_round = false;
		round_end(s, outcome == RL_KEEP_EXTENDED);
		if (outcome == RL_KEEP_EXTENDED)
			s->next_extend_us = next_extension(s, now);
		else if (outcome == RL_KEEP_RETRY &&
				 s->valid_until_us > now + (int64_t) s->ttl_ms * 100)
			s->next_extend_us = now + Max((int64_t) s->ttl_ms * 100, 10000);
		else if (!s->lost)
		{
			lost = true;
			procno = mark_lost(s, now);
		}
	}
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	return lost;
}

/*
 * The keep-alive worker exits: its rounds in flight end as not won (they
 * may still land, with the validity they announced).  Raises nothing.
 */
void
rl_lock_table_worker_gone(void)
{
	if (rl_table == NULL)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < rl_table->nslots; i++)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (s->in_use && s->worker_round)
		{
			s->worker_round = false;
			round_end(s, false);
		}
	}
	LWLockRelease(rl_table->lock);
}
