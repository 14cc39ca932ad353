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
 * Each slot's last ring entry, and whether it was withdrawn from the ring
 * (given up or taken back while queued): its entry stays in the ring, and
 * the worker, reaching it, would take whatever the slot holds then.  So a
 * slot withdrawn is filled again only once the worker has taken past its
 * entry (rl_shared_slot_usable): a later round of it never runs ahead of
 * the rounds queued in between.
 */
static uint64 entry_of[RL_SHARED_SLOTS_PER_BACKEND];
static bool withdrawn[RL_SHARED_SLOTS_PER_BACKEND];

/* entries taken from the ring so far */
static uint64
ring_taken(void)
{
	uint64		taken;

	SpinLockAcquire(&rl_shared->mutex);
	taken = rl_shared->taken;
	SpinLockRelease(&rl_shared->mutex);
	return taken;
}

/* Slot k of ours is FREE or DONE, and no entry of the ring names it. */
bool
rl_shared_slot_usable(int k)
{
	uint32		state = pg_atomic_read_u32(&rl_shared_my_slots()[k].state);

	if (state != RL_SLOT_FREE && state != RL_SLOT_DONE)
		return false;
	if (withdrawn[k] && ring_taken() > entry_of[k])
		withdrawn[k] = false;
	return !withdrawn[k];
}

/*
 * Queue the filled slot and wake the dispatcher.  False when there is no
 * dispatcher, no room in the ring, or the dispatcher does not take rounds
 * of these settings now (it is reloading its own): the slot is FREE again.
 * The settings are checked under the mutex the dispatcher publishes them
 * under, so no round of other settings than its own joins the ring.
 */
bool
rl_shared_queue_slot(RlSharedSlot *s)
{
	int			k = s - rl_shared_my_slots();
	int			procno;
	bool		queued = false;
	uint32		expected = RL_SLOT_QUEUED;

	pg_write_barrier();			/* the request before its state */
	pg_atomic_write_u32(&s->state, RL_SLOT_QUEUED);
	SpinLockAcquire(&rl_shared->mutex);
	procno = rl_shared->dispatcher_procno;
	if (procno >= 0 && rl_shared->count < rl_shared->nslots &&
		pg_atomic_read_u32(&rl_shared->ready) != 0 &&
		pg_atomic_read_u64(&rl_shared->fingerprint) == s->fingerprint)
	{
		rl_shared_ring()[(rl_shared->head + rl_shared->count) % rl_shared->nslots] =
			(int) (s - rl_shared->slots);
		last_entry = entry_of[k] = rl_shared->taken + rl_shared->count;
		rl_shared->count++;
		queued = true;
	}
	SpinLockRelease(&rl_shared->mutex);
	queued_as[k] = ++queue_count;

	/*
	 * Not queued: withdrawn (no entry of the ring names it: a withdrawn slot
	 * is not filled again before the worker passed its entry).
	 */
	if (!queued &&
		pg_atomic_compare_exchange_u32(&s->state, &expected, RL_SLOT_FREE))
		return false;
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	return true;
}

/* QUEUED -> FREE: true if it was still queued (the worker had not taken it) */
static bool
withdraw(RlSharedSlot *s)
{
	uint32		expected = RL_SLOT_QUEUED;

	if (!pg_atomic_compare_exchange_u32(&s->state, &expected, RL_SLOT_FREE))
		return false;
	withdrawn[s - rl_shared_my_slots()] = true;
	return true;
}

/*
 * The round was handed over and is not done: give it up.  A queued one is
 * withdrawn, unless keep (a must-deliver command: the worker sends it when
 * it takes it); a running one is left to a live dispatcher (which
 * completes it), or taken back when no dispatcher runs (under the mutex: a
 * new one that starts fails it, or takes it, only once it has announced
 * itself).  Returns what became of it: FREE (withdrawn, never sent), DONE
 * (it finished after all: the results are in the slot), QUEUED (kept in
 * the queue) or RUNNING (left to the worker, or taken back from a departed
 * one: it may have been sent).
 */
RlSlotState
rl_shared_give_up(RlSharedSlot *s, bool keep)
{
	uint32		state;

	if (!keep && withdraw(s))
		return RL_SLOT_FREE;
	SpinLockAcquire(&rl_shared->mutex);
	state = pg_atomic_read_u32(&s->state);
	if (state == RL_SLOT_RUNNING && rl_shared->dispatcher_procno < 0)
	{
		uint32		expected = RL_SLOT_RUNNING;

		/* ours again (nobody else moves it now); it may have been sent */
		(void) pg_atomic_compare_exchange_u32(&s->state, &expected,
											  RL_SLOT_FREE);
	}
	SpinLockRelease(&rl_shared->mutex);
	return (RlSlotState) state;
}

/*
 * No dispatcher is attached: the rounds of ours it left running are ours
 * again (its connections closed before it detached; a new one would fail
 * them).  Nobody waits for them here.
 */
void
rl_shared_forsake_orphans(void)
{
	RlSharedSlot *mine = rl_shared_my_slots();

	SpinLockAcquire(&rl_shared->mutex);
	if (rl_shared->dispatcher_procno < 0)
	{
		for (int k = 0; k < RL_SHARED_SLOTS_PER_BACKEND; k++)
		{
			uint32		expected = RL_SLOT_RUNNING;

			(void) pg_atomic_compare_exchange_u32(&mine[k].state, &expected,
												  RL_SLOT_FREE);
		}
	}
	SpinLockRelease(&rl_shared->mutex);
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
		/* sent on our connections, it must go where it was meant to */
		if (state == RL_SLOT_QUEUED &&
			mine[k].fingerprint != rl_nodes_settings_fingerprint())
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
		if (!withdraw(&mine[order[got]]))
			break;
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
	if (bypass && ring_taken() > last_entry)
		bypass = false;
	return bypass;
}
