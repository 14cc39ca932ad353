/*-------------------------------------------------------------------------
 *
 * shared_rounds_permits.c
 *	  The bound on a server's connections to each Redis node: which
 *	  backends may hold connections of their own.
 *
 * Every backend that runs a round on its own connections has one to each
 * node, kept for its next call; with hundreds of backends, a node would
 * see hundreds of clients from one server (and refuse some at its
 * maxclients).  So a backend holds connections of its own only with a
 * permit, and a server gives out at most redlock.max_connections_per_node
 * less RL_WORKER_CONNECTIONS of them (the dispatcher, wake-up and
 * keep-alive workers have one connection to each node each): its
 * connections to each node are at most redlock.max_connections_per_node.
 *
 * A backend without a permit sends its rounds through the dispatcher's
 * shared connections (shared_rounds_backend.c decides).  A round the
 * dispatcher cannot run (a probe, a node list of the session's own, the
 * dispatcher not running) waits for a permit, bounded, and fails with
 * SQLSTATE 53300 if none came free; a round on a commit, abort or exit
 * path, or one that must be delivered, never waits: it takes a permit
 * beyond the bound, which a holder gives back like any other.
 *
 * A holder gives its permit back when its connections have been unused for
 * redlock.idle_connection_timeout, or at once when another backend waits
 * for one; it can only do so while it runs none of our code, often while
 * it is idle, waiting for its client.  So a timer ticks while it holds a
 * permit (at most every second), and its handler, in signal context, ends
 * the connections with shutdown(2) (rl_nodes_shut_idle: only when every
 * one of them has sent all it was given) and gives the permit back; the next round lets
 * the sockets go (rl_nodes_close_shut).  The handler does nothing while a
 * round of the backend is under way (in_round).  Exit gives the permit
 * back, after the exit's own releases (on_shmem_exit).  Without shared_preload_libraries there are no permits and no
 * bound, as there is no dispatcher.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "base/guc.h"
#include "base/guc_net.h"
#include "base/wait_events.h"
#include "shared/shared_rounds_permits.h"
#include "shared/shared_rounds_internal.h"

#define RL_PERMIT_TICK_MS	1000	/* the idle timer's longest period */
#define RL_PERMIT_WAIT_MS	3000	/* a round's longest wait for a permit,
									 * beyond its connect and node timeouts */

static volatile sig_atomic_t permit_held = false;
static volatile sig_atomic_t in_round = false;
static volatile int64_t last_used_us = 0;
static bool waiter_counted = false;
static bool exit_registered = false;
static TimeoutId idle_timer = MAX_TIMEOUTS;
static bool timer_on = false;

static int
permits_max(void)
{
	return Max(rl_max_connections_per_node - RL_WORKER_CONNECTIONS, 1);
}

/* The idle timer's handler: signal context, nothing but what is safe there. */
static void
idle_timer_fired(void)
{
	int64_t		idle_us;

	if (in_round || !permit_held || rl_shared == NULL)
		return;
	idle_us = rl_now_us() - last_used_us;
	if (idle_us < (int64_t) rl_idle_connection_timeout_ms * 1000 &&
		pg_atomic_read_u32(&rl_shared->permit_waiters) == 0)
		return;
	if (!rl_nodes_shut_idle())
		return;
	permit_held = false;
	pg_atomic_fetch_sub_u32(&rl_shared->own_permits, 1);
}

static void
timer_start(void)
{
	int			tick = Min(rl_idle_connection_timeout_ms, RL_PERMIT_TICK_MS);

	if (idle_timer == MAX_TIMEOUTS)
		idle_timer = RegisterTimeout(USER_TIMEOUT, idle_timer_fired);
	enable_timeout_every(idle_timer,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), tick),
						 tick);
	timer_on = true;
}

static void
timer_stop(void)
{
	if (timer_on)
		disable_timeout(idle_timer, false);
	timer_on = false;
}

static void
unwait(void)
{
	if (waiter_counted)
	{
		pg_atomic_fetch_sub_u32(&rl_shared->permit_waiters, 1);
		waiter_counted = false;
	}
}

static void
permits_exit(int code, Datum arg)
{
	in_round = true;			/* the timer has nothing more to do */
	timer_stop();
	unwait();
	if (permit_held)
	{
		permit_held = false;
		pg_atomic_fetch_sub_u32(&rl_shared->own_permits, 1);
	}
}

/* A permit if one is free (or, with force, in any case). */
static bool
take_permit(bool force)
{
	uint32		n = pg_atomic_read_u32(&rl_shared->own_permits);

	if (proc_exit_inprogress && !exit_registered)
	{
		/* the exit's last rounds: nothing would give it back */
		permit_held = true;
		return true;
	}
	for (;;)
	{
		if (!force && n >= (uint32) permits_max())
			return false;
		if (pg_atomic_compare_exchange_u32(&rl_shared->own_permits, &n, n + 1))
			break;
	}
	if (!exit_registered)
	{
		/* after the releases of the exit (before_shmem_exit) */
		on_shmem_exit(permits_exit, (Datum) 0);
		exit_registered = true;
	}
	last_used_us = rl_now_us();
	permit_held = true;
	if (!timer_on)
		timer_start();
	return true;
}

void
rl_own_round_begin(int64_t drain_deadline_us, bool interruptible)
{
	in_round = true;
	pg_compiler_barrier();
	/* connections the timer ended */
	rl_nodes_close_shut(drain_deadline_us, interruptible);
	if (!permit_held)
		timer_stop();
}

void
rl_own_round_end(void)
{
	last_used_us = rl_now_us();
	pg_compiler_barrier();
	in_round = false;
}

bool
rl_own_permit_held(void)
{
	return rl_shared == NULL || permit_held;
}

bool
rl_own_permit_try(void)
{
	return rl_shared == NULL || permit_held || take_permit(false);
}

/*
 * A permit for a round that must run on this backend's own connections:
 * at once if one is free, beyond the bound for a round that may not wait
 * (commit, abort, exit, must-deliver), else waited for; raises 53300 when
 * none came free in time.  Wakes on cancel; a wake-up that was not ours is
 * set again for the caller.
 */
void
rl_own_permit_wait(bool nothrow, bool must_deliver)
{
	int64_t		deadline;
	bool		woken = false;

	if (rl_own_permit_try())
		return;
	if (nothrow || must_deliver)
	{
		(void) take_permit(true);
		return;
	}

	deadline = rl_now_us() +
		(int64_t) (rl_connect_timeout_ms + rl_node_timeout_ms + RL_PERMIT_WAIT_MS) * 1000;
	pg_atomic_fetch_add_u64(&rl_shared->permit_waits, 1);
	pg_atomic_fetch_add_u32(&rl_shared->permit_waiters, 1);
	waiter_counted = true;
	while (!take_permit(false))
	{
		int			rc;

		if (rl_now_us() >= deadline)
		{
			unwait();
			pg_atomic_fetch_add_u64(&rl_shared->permit_waits_failed, 1);
			if (woken)
				SetLatch(MyLatch);
			ereport(ERROR,
					(errcode(ERRCODE_TOO_MANY_CONNECTIONS),
					 errmsg("no connection to the Redis nodes came free"),
					 errdetail("This server opens at most %d connections to each node (redlock.max_connections_per_node), %d of them for backends, and all were in use for %d ms.",
							   rl_max_connections_per_node, permits_max(),
							   rl_connect_timeout_ms + rl_node_timeout_ms + RL_PERMIT_WAIT_MS),
					 errhint("Raise redlock.max_connections_per_node (and the nodes' maxclients), or run this call where the dispatcher can take it: the same redlock.nodes as the server's, with redlock in shared_preload_libraries.")));
		}
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   10, rl_wait_event_shared());
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			woken = true;
		}
		CHECK_FOR_INTERRUPTS();
	}
	unwait();
	if (woken)
		SetLatch(MyLatch);
}

/* An error ended a wait for a permit: its count goes with the abort. */
void
rl_own_permit_abort(void)
{
	if (rl_shared != NULL)
		unwait();
}

bool
rl_own_permit_counts(int *in_use, int *max, uint64_t *waits,
					 uint64_t *waits_failed)
{
	if (rl_shared == NULL)
		return false;
	*in_use = (int) pg_atomic_read_u32(&rl_shared->own_permits);
	*max = permits_max();
	*waits = pg_atomic_read_u64(&rl_shared->permit_waits);
	*waits_failed = pg_atomic_read_u64(&rl_shared->permit_waits_failed);
	return true;
}
