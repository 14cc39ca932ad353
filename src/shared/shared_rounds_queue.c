/*-------------------------------------------------------------------------
 *
 * shared_rounds_queue.c
 *	  A backend's rounds in the dispatcher's queue: queued, given up, and
 *	  taken back from a worker that does not take them (see shared_rounds.c
 *	  for the design; the round hook is shared_rounds_backend.c).
 *
 * Every change of a slot's state here is a compare-and-exchange, or made
 * under the ring's spinlock; nothing here waits or raises.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/latch.h"

#include "shared/shared_rounds_internal.h"

bool		rl_shared_resending = false;

/* rl_shared_reclaim and rl_shared_bypassing */
static bool bypass = false;		/* took rounds back: own connections until
								 * the worker takes past last_entry */
static uint64 last_entry = 0;	/* the ring's number of our last entry */
static uint64 queue_count = 0;	/* rounds queued so far */
static uint64 queued_as[RL_SHARED_SLOTS_PER_BACKEND];	/* each slot's */

/*
 * Queue the filled slot and wake the dispatcher.  False when there is no
 * dispatcher or no room in the ring: the slot is FREE again.
 */
bool
rl_shared_queue_slot(RlSharedSlot *s)
{
	int			procno;
	bool		queued = false;
	uint32		expected = RL_SLOT_QUEUED;

	pg_write_barrier();			/* the request before its state */
	pg_atomic_write_u32(&s->state, RL_SLOT_QUEUED);
	SpinLockAcquire(&rl_shared->mutex);
	procno = rl_shared->dispatcher_procno;
	if (procno >= 0 && rl_shared->count < rl_shared->nslots)
	{
		rl_shared_ring()[(rl_shared->head + rl_shared->count) % rl_shared->nslots] =
			(int) (s - rl_shared->slots);
		last_entry = rl_shared->taken + rl_shared->count;
		rl_shared->count++;
		queued = true;
	}
	SpinLockRelease(&rl_shared->mutex);
	queued_as[s - rl_shared_my_slots()] = ++queue_count;

	/*
	 * Not queued: withdrawn, unless the worker took it already through an
	 * entry of the ring left by an earlier round given up while queued (it
	 * runs what we just filled in).
	 */
	if (!queued &&
		pg_atomic_compare_exchange_u32(&s->state, &expected, RL_SLOT_FREE))
		return false;
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	return true;
}

/*
 * The round was handed over and is not done: give it up.  A queued one is
 * withdrawn; a running one is left to a live dispatcher (which completes
 * it), or taken back when no dispatcher runs (under the mutex: a new one
 * that starts fails it, or takes it, only once it has announced itself).
 * Returns true if it finished after all (the results are in the slot).
 */
bool
rl_shared_give_up(RlSharedSlot *s)
{
	uint32		expected = RL_SLOT_QUEUED;
	bool		done;

	if (pg_atomic_compare_exchange_u32(&s->state, &expected, RL_SLOT_FREE))
		return false;
	if (expected != RL_SLOT_RUNNING)
		return expected == RL_SLOT_DONE;
	SpinLockAcquire(&rl_shared->mutex);
	if (rl_shared->dispatcher_procno < 0)
		(void) pg_atomic_compare_exchange_u32(&s->state, &expected,
											  RL_SLOT_FREE);
	else
		expected = pg_atomic_read_u32(&s->state);
	SpinLockRelease(&rl_shared->mutex);
	done = expected == RL_SLOT_DONE;
	return done;
}

/*
 * The worker does not take our rounds (stopped, or stuck): take back every
 * round of ours it has not taken, and run them on our own connections.
 * Nothing of a round still queued reached a node, so this keeps our
 * commands in the order sent on every node, provided nothing else of ours
 * is in the worker's hands: none of our rounds is running there, and none
 * is owed a reply on its connections.  Otherwise nothing is taken back
 * (false), and the caller waits for the worker, bounded, as ever.
 *
 * A round is taken back by the compare-and-exchange the worker takes it
 * with (QUEUED -> FREE against QUEUED -> RUNNING), so it is either ours or
 * the worker's, newest first: the worker takes in the order queued, so if
 * it takes one meanwhile (it lives after all), the older ones are its too,
 * and the newer ones taken back go into the queue again behind it.  Of the
 * rounds taken back, current is the caller's to run; the others, older,
 * are sent first, in the order queued, unless nobody waits for them and
 * they need not be delivered (an attempt given up).  Then our rounds stay
 * on our own connections until the worker has taken every ring entry we
 * left (it lives again, and none of those entries can make it run a later
 * round of that slot out of turn).  Nothing here waits or raises.
 */
bool
rl_shared_reclaim(RlSharedSlot *current)
{
	RlSharedSlot *mine = rl_shared_my_slots();
	int			order[RL_SHARED_SLOTS_PER_BACKEND];
	int			n = 0;
	int			got;

	for (int k = 0; k < RL_SHARED_SLOTS_PER_BACKEND; k++)
	{
		uint32		state = pg_atomic_read_u32(&mine[k].state);

		if (state == RL_SLOT_RUNNING)
			return false;
		if (state == RL_SLOT_QUEUED)
		{
			int			j = n++;

			/* newest first */
			while (j > 0 && queued_as[order[j - 1]] < queued_as[k])
			{
				order[j] = order[j - 1];
				j--;
			}
			order[j] = k;
		}
	}
	if (n == 0)
		return false;
	if (!rl_shared_my_tags_answered())
		return false;

	for (got = 0; got < n; got++)
	{
		uint32		expected = RL_SLOT_QUEUED;

		if (!pg_atomic_compare_exchange_u32(&mine[order[got]].state,
											&expected, RL_SLOT_FREE))
			break;
	}
	if (got < n)
	{
		/* the worker took one: the newer ones go back behind it */
		for (int j = got - 1; j >= 0; j--)
			(void) rl_shared_queue_slot(&mine[order[j]]);
		return false;
	}
	pg_read_barrier();

	rl_shared_resending = true;
	for (int j = n - 1; j >= 0; j--)
	{
		RlSharedSlot *s = &mine[order[j]];
		RlRequest	r;

		if (s == current || (s->wait && !s->req.must_deliver))
			continue;
		memcpy(&r, &s->req, sizeof(RlRequest));
		r.argv = s->argv;
		r.argvlen = s->argvlen;
		r.static_script = false;	/* its text is the slot's, not static */
		r.batch_next = NULL;
		r.tag = 0;
		rl_nodes_send(&r);
		pg_atomic_fetch_add_u64(&rl_shared->own_rounds, 1);
	}
	rl_shared_resending = false;
	bypass = true;
	return true;
}

/*
 * Rounds were taken back, and the worker has not yet taken every ring
 * entry we left: our rounds stay on our own connections.
 */
bool
rl_shared_bypassing(void)
{
	if (bypass)
	{
		uint64		taken;

		SpinLockAcquire(&rl_shared->mutex);
		taken = rl_shared->taken;
		SpinLockRelease(&rl_shared->mutex);
		if (taken > last_entry)
			bypass = false;
	}
	return bypass;
}
