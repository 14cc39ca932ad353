/*-------------------------------------------------------------------------
 *
 * lock_table_handoff.c
 *	  A waiter's standing offer in the lock table, and the outcome of the
 *	  round that a releasing holder of this server ran for it.
 *
 * A waiter about to sleep in the lock table leaves a standing offer in its
 * slot: the value it would be handed and the TTL it asked for (offered).
 * A holder of this server releasing the same lock on the same nodes takes
 * up the offer of the first waiter, if it is offered (running), runs the
 * handoff round on its own connections (lease_handoff.c), and leaves the
 * round's outcome in the slot (done), setting the waiter's latch.  A
 * waiter that wakes withdraws an offer nobody took up, waits for a running
 * one, and takes a done one, which it settles as its own attempt.  The
 * same withdrawal hands it what the wake-up worker gathered of a handoff
 * by a holder on another server (lock_table_remote.c).  A waiter that
 * gives up leaves its offer on the abort path; whoever leaves a taken
 * offer behind releases its value (lease_handoff.c).
 *
 * Every function takes the table's LWLock itself and raises nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/latch.h"
#include "storage/lwlock.h"

#include "shared/lock_table_internal.h"

/*
 * About to sleep in slot: offer to be handed the lease at its release, as
 * value, with the TTL ttl_ms.
 */
void
rl_lock_table_offer(int slot, int ttl_ms, const char *value)
{
	RlSlot	   *s;

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->handoff == RL_HANDOFF_NONE);
	strlcpy(s->offered, value, sizeof(s->offered));
	s->ttl_ms = ttl_ms;
	s->handoff_nodes = rl_nodes_fingerprint();
	s->handoff = RL_HANDOFF_OFFERED;
	LWLockRelease(rl_table->lock);
}

/*
 * Awake again: withdraw the offer.  A round in progress stays ours to wait
 * for; a finished one is returned in *ho (and is ours to settle), with the
 * value it handed over in value (RL_OWNER_LEN + 1 bytes).
 */
RlHandoffOutcome
rl_lock_table_withdraw_offer(int slot, RlHandoff *ho, char *value)
{
	RlSlot	   *s;
	RlHandoffOutcome outcome = RL_HANDED_NOTHING;
	int64_t		overdue = rl_now_us() -
		(int64_t) (2 * rl_node_timeout_ms + 1000) * 1000;

	if (rl_table == NULL || slot < 0)
		return RL_HANDED_NOTHING;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	switch (s->handoff)
	{
		case RL_HANDOFF_NONE:
		case RL_HANDOFF_OFFERED:
			s->handoff = RL_HANDOFF_NONE;
			break;
		case RL_HANDOFF_RUNNING:
			outcome = RL_HANDED_PENDING;
			break;
		case RL_HANDOFF_DONE:
			*ho = s->handoff_result;
			strlcpy(value, s->offered, RL_OWNER_LEN + 1);
			s->handoff = RL_HANDOFF_NONE;
			outcome = RL_HANDED_OVER;
			break;
	}

	/*
	 * Or a holder on another server handed over the offer on the nodes.  A
	 * worker that stopped (or restarted) while it gathered the nodes' word
	 * must not keep us waiting: well after its own deadline, we end it.
	 */
	if (outcome == RL_HANDED_NOTHING && s->remote == RL_REMOTE_COLLECTING &&
		s->collect_since_us < overdue)
		rl_remote_end_collecting(s);
	if (outcome == RL_HANDED_NOTHING && s->remote == RL_REMOTE_COLLECTING)
		outcome = RL_HANDED_PENDING;
	else if (outcome == RL_HANDED_NOTHING && s->remote == RL_REMOTE_DONE)
	{
		*ho = s->remote_result;
		strlcpy(value, s->remote_offered, RL_OWNER_LEN + 1);
		outcome = RL_HANDED_OVER;
	}

	/*
	 * The local outcome comes first, and once one is taken, whatever is
	 * heard of the offer is stale: a release of ours on another connection
	 * (lease_handoff.c) may hand the lock to our offer there and take it back
	 * in the same script.
	 */
	if (outcome == RL_HANDED_OVER)
		s->remote = RL_REMOTE_USED;
	LWLockRelease(rl_table->lock);
	return outcome;
}

/*
 * Abort and exit paths, before the waiter's slot is removed: its offer,
 * here and on the nodes, is gone.  Returns whether a holder had taken it
 * up (running or done), whose round may have left the offered value, put
 * in value (RL_OWNER_LEN + 1 bytes), on the nodes; key (RL_KEY_MAX + 1
 * bytes) gets the slot's lock key.
 */
bool
rl_lock_table_abandon_offer(int slot, char *value, char *key)
{
	RlSlot	   *s = &rl_table->slots[slot];
	RlHandoffState state;

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	state = s->handoff;
	s->handoff = RL_HANDOFF_NONE;
	strlcpy(value, s->offered, RL_OWNER_LEN + 1);
	strlcpy(key, s->key, RL_KEY_MAX + 1);
	s->remote_offered[0] = '\0';
	LWLockRelease(rl_table->lock);
	return state == RL_HANDOFF_RUNNING || state == RL_HANDOFF_DONE;
}

/*
 * A holder of this server releases the lease in holder_slot (resource, on
 * key): take up the standing offer of the first waiter for it, if that
 * waiter is asleep with one, into *claim.  rl_lock_table_hand_over() must
 * follow.
 */
bool
rl_lock_table_claim_offer(int holder_slot, const char *resource,
						  const char *key, RlClaim *claim)
{
	uint64_t	nodes = rl_nodes_fingerprint();
	int			w;
	RlSlot	   *s = NULL;
	bool		claimed = false;

	if (rl_table == NULL || holder_slot < 0)
		return false;

	/*
	 * Nobody waits, the usual case: a shared look is enough.  A waiter that
	 * comes after it asks the nodes itself, as one that comes after the
	 * exclusive look below.
	 */
	LWLockAcquire(rl_table->lock, LW_SHARED);
	w = rl_first_waiter(key, holder_slot);
	LWLockRelease(rl_table->lock);
	if (w < 0)
		return false;

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	w = rl_first_waiter(key, holder_slot);
	if (w >= 0)
		s = &rl_table->slots[w];

	/*
	 * The same key and name: the same key prefix and fencing counter; the
	 * same nodes: the waiter settles the votes of ours as its own.
	 */
	if (s != NULL && s->handoff == RL_HANDOFF_OFFERED &&
		(s->remote == RL_REMOTE_NONE || s->remote == RL_REMOTE_USED) &&
		s->handoff_nodes == nodes && strcmp(s->resource, resource) == 0)
	{
		s->handoff = RL_HANDOFF_RUNNING;
		claim->slot = w;
		claim->wait_seq = s->wait_seq;
		claim->ttl_ms = s->ttl_ms;
		strlcpy(claim->value, s->offered, sizeof(claim->value));
		claimed = true;
	}
	LWLockRelease(rl_table->lock);
	return claimed;
}

/*
 * The round for a claimed offer is over (or was interrupted: ho says every
 * node failed): its outcome goes to the waiter, whose latch is set.  False
 * when the waiter stopped waiting meanwhile: then the value the round set
 * for it is the holder's to release.
 */
bool
rl_lock_table_hand_over(const RlClaim *claim, const RlHandoff *ho)
{
	RlSlot	   *s = &rl_table->slots[claim->slot];
	int			procno = -1;

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	if (s->in_use && s->wait_seq == claim->wait_seq &&
		s->handoff == RL_HANDOFF_RUNNING)
	{
		s->handoff_result = *ho;
		s->handoff = RL_HANDOFF_DONE;
		s->woken = true;
		procno = s->procno;
	}
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	return procno >= 0;
}
