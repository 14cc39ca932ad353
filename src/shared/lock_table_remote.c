/*-------------------------------------------------------------------------
 *
 * lock_table_remote.c
 *	  The wake-up worker's part in a handoff by a holder on another server:
 *	  gathering the nodes' word on it for the waiter; and the offer each
 *	  attempt of a waiter leaves on the nodes, recorded for it.
 *
 * A release (on another server, or at the end of this server's turn) that
 * finds our waiter's offer first in the waiters' queue on a node takes the
 * lock there for the waiter and publishes "value counter"
 * (protocol_release.c, RELEASE_HANDOVER_SCRIPT; protocol_handoff.c); one
 * that finds no offer publishes that the lock is free, and one that hands
 * it to a waiter ahead of ours names that one.  The worker, subscribed to
 * the key, passes each message here.  The first one naming the offer a
 * waiting slot's last attempt left (asleep or not: the release may come
 * while the waiter still asks) starts collecting: a node that handed the
 * lock to it votes yes, with its fencing counter; one that left the lock
 * free votes no.  A node that handed it to another waiter says nothing of
 * ours (that one was ahead in its queue, and ours comes at a later
 * release there).  A node where the attempt itself set the lock, taken
 * back since (the round was not won), never has the offer: the waiter
 * says so after its attempt, or the node at the withdrawal ("offer -"),
 * and it votes no.  At a majority either way, when every node spoke, or
 * node_timeout after the first message, the outcome goes to the waiter
 * (done, its latch set), which settles it as its own attempt
 * (protocol_handoff.c).
 *
 * The lease's validity counts from when the waiter's attempt that left the
 * offer began, by the waiter's own clock: no release can have set the lock
 * for the offer before the offer was there.  No node's clock is trusted (a
 * node whose clock steps forward would stretch the validity); a handoff
 * heard late is confirmed on the nodes before it is granted
 * (protocol_handoff.c), which also counts its validity afresh.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/latch.h"
#include "storage/lwlock.h"

#include "base/guc.h"
#include "shared/lock_table_internal.h"

#define RL_WAKE_MAX 64			/* waiters woken by one look */

/* a collection may be under way (the worker may have restarted) */
static bool rl_collecting = true;

/*
 * Can the attempts of a lock call that waits leave its offer on the nodes?
 * Only when the wake-up worker listens to the same nodes as the session,
 * in the same order: it gathers their word for us.
 */
bool
rl_handoff_remote_possible(int slot)
{
	uint64_t	nodes;

	if (rl_table == NULL || slot < 0)
		return false;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	nodes = rl_table->wakeup_nodes;
	LWLockRelease(rl_table->lock);
	return nodes != 0 && nodes == rl_nodes_fingerprint();
}

/*
 * Before an attempt of a lock call that waits (rl_handoff_remote_possible
 * said yes): the offer it leaves on the nodes, whose fate the worker
 * gathers from now on.  What it heard of the previous offer since the
 * waiter last looked is dropped (the latch it set costs one spurious
 * wake-up): this attempt takes back a lock handed to it, or replaces it on
 * the nodes.
 */
void
rl_handoff_remote_offer(int slot, const RlOffer *offer)
{
	RlSlot	   *s = &rl_table->slots[slot];

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->handoff == RL_HANDOFF_NONE);
	strlcpy(s->remote_offered, offer->offered, sizeof(s->remote_offered));
	s->remote_proposal = offer->proposal;
	s->remote_since_us = offer->since_us;
	s->remote_nodes = rl_nodes_fingerprint();
	s->remote_absent = 0;
	s->remote = RL_REMOTE_NONE;
	s->queue_ahead = -1;
	LWLockRelease(rl_table->lock);
}

/* The wake-up worker listens to these nodes (0: none). */
void
rl_handoff_remote_nodes(uint64_t nodes)
{
	static uint64_t told = 0;

	if (rl_table == NULL || nodes == told)
		return;
	told = nodes;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	rl_table->wakeup_nodes = nodes;
	LWLockRelease(rl_table->lock);
}

/*
 * Lock held.  The collection ends: its outcome goes to the waiter, whose
 * latch the caller sets (s->procno).  Also by the waiter itself, when the
 * worker is long overdue (rl_lock_table_withdraw_offer).
 */
void
rl_remote_end_collecting(RlSlot *s)
{
	RlHandoff  *ho = &s->remote_result;

	for (int i = 0; i < ho->nnodes; i++)
		if (ho->votes[i] == RL_VOTE_PENDING)
			ho->votes[i] = RL_VOTE_FAILED;
	s->remote = RL_REMOTE_DONE;
	s->woken = true;
}

/* Has the collection of ho enough of the nodes' word to end? */
static bool
collection_decided(const RlHandoff *ho)
{
	RlTally		t = rl_tally(ho->votes, ho->nnodes);

	return t.yes >= rl_majority(ho->nnodes) ||
		t.no > ho->nnodes - rl_majority(ho->nnodes) || t.pending == 0;
}

/*
 * Lock held.  The offer of slot is not on the nodes in absent: they never
 * hand it over, nor say anything more of it, and say no from now on.  Else
 * a collection with a no elsewhere (a node whose "free" came just before
 * our offer got there) waited for them until node_timeout, the waiter
 * asleep in it and the readers its offer refuses meanwhile asleep until
 * their retry delay.  Returns whether that ended the collection (the
 * waiter's wake mark is set; the caller sets its latch if need be).
 */
static bool
mark_absent(RlSlot *s, uint32 absent)
{
	RlHandoff  *ho = &s->remote_result;

	s->remote_absent |= absent;
	if (s->remote != RL_REMOTE_COLLECTING)
		return false;
	for (int n = 0; n < ho->nnodes; n++)
		if ((absent & ((uint32) 1 << n)) != 0 &&
			ho->votes[n] == RL_VOTE_PENDING)
			ho->votes[n] = RL_VOTE_NO;
	if (!collection_decided(ho))
		return false;
	rl_remote_end_collecting(s);
	return true;
}

/*
 * After a refused attempt of the waiter in slot: the nodes (bits of absent)
 * where the offer it left is not, since the attempt won there (and its
 * round, not won, took the lock back: WITHDRAW_SCRIPT), or did not ask
 * them (in backoff).  A node that had not answered when the round ended
 * says so itself, if the lock was the attempt's there
 * (rl_handoff_remote_not_here).  The waiter is about to sleep: a
 * collection this ends wakes it by its wake mark (rl_wait_sleep reads it
 * first).
 */
void
rl_handoff_remote_absent(int slot, uint32 absent)
{
	if (rl_table == NULL || slot < 0 || absent == 0)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	(void) mark_absent(&rl_table->slots[slot], absent);
	LWLockRelease(rl_table->lock);
}

/*
 * Node node says that an attempt whose offer is value was withdrawn where
 * it had set key (WITHDRAW_SCRIPT): the offer is not on the node.
 */
void
rl_handoff_remote_not_here(int node, const char *key, const char *value)
{
	int			procno = -1;
	uint32		hash;

	if (rl_table == NULL || node < 0 || node >= rl_nodes_count())
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	for (int i = rl_key_chain(rl_table, key, &hash); i >= 0;
		 i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (s->granted || !RL_SLOT_OF_KEY(s, hash, key) ||
			s->remote_nodes != rl_table->wakeup_nodes ||
			strcmp(s->remote_offered, value) != 0)
			continue;
		if (mark_absent(s, (uint32) 1 << node))
			procno = s->procno;
		break;					/* an offer value is one waiter's */
	}
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
}

/*
 * Node node says that key was released and handed to value (with the
 * counter before), or left free (value NULL).  free_nodes: the nodes that
 * said the key was left free, since free_since_us (messages from the nodes
 * come in any order, and those before the first word of a handoff to us
 * would be lost).
 */
void
rl_handoff_remote_heard(int node, const char *key, const char *value,
						int64 counter, uint32 free_nodes,
						int64_t free_since_us)
{
	int			wake[RL_WAKE_MAX];
	int			nwake = 0;
	int			nnodes = rl_nodes_count();
	int64_t		now = rl_now_us();
	uint32		hash;

	if (rl_table == NULL || node < 0 || node >= nnodes ||
		(value == NULL && !rl_collecting))
		return;					/* a free lock concerns no collection */
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	for (int i = rl_key_chain(rl_table, key, &hash);
		 i >= 0 && nwake < RL_WAKE_MAX; i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];
		RlHandoff  *ho = &s->remote_result;
		bool		ours;

		if (s->granted || s->remote_offered[0] == '\0' ||
			!RL_SLOT_OF_KEY(s, hash, key) ||
			s->remote_nodes != rl_table->wakeup_nodes)
			continue;
		ours = value != NULL && strcmp(s->remote_offered, value) == 0;
		if (s->remote == RL_REMOTE_NONE && ours)
		{
			/* the first word of a handoff to this offer */
			memset(ho, 0, sizeof(*ho));
			ho->proposal = s->remote_proposal;
			ho->start_us = s->remote_since_us;
			ho->nnodes = nnodes;
			for (int n = 0; n < nnodes; n++)
				ho->votes[n] = RL_VOTE_PENDING;
			/*
			 * Left free after our attempt had left the offer, or never to
			 * have it (rl_handoff_remote_absent): not ours
			 */
			for (int n = 0; n < nnodes; n++)
				if (((free_since_us >= s->remote_since_us ? free_nodes : 0) |
					 s->remote_absent) & ((uint32) 1 << n))
					ho->votes[n] = RL_VOTE_NO;
			s->collect_since_us = now;
			s->remote = RL_REMOTE_COLLECTING;
			rl_collecting = true;
		}
		/*
		 * A node that handed the lock to another waiter says nothing of us:
		 * that waiter was ahead of us in its queue (and the node's message
		 * may be older than the others' word on us: each node's messages
		 * come in order, but not in order with another node's), and the
		 * node still hands it to us at a later release.  Only a lock left
		 * free there says no, and a handoff to us that the node announces
		 * after it turns that into a yes: the lock was left free before
		 * our offer got there.
		 */
		if (s->remote != RL_REMOTE_COLLECTING || (value != NULL && !ours) ||
			(ho->votes[node] != RL_VOTE_PENDING &&
			 (!ours || ho->votes[node] != RL_VOTE_NO)))
			continue;
		if (ours)
		{
			ho->votes[node] = RL_VOTE_YES;
			ho->counters[node] = counter;
		}
		else
			ho->votes[node] = RL_VOTE_NO;
		if (collection_decided(ho))
		{
			rl_remote_end_collecting(s);
			wake[nwake++] = s->procno;
		}
	}
	LWLockRelease(rl_table->lock);
	for (int i = 0; i < nwake; i++)
		SetLatch(rl_latch_of(wake[i]));
}

/*
 * Collections whose nodes have not all spoken node_timeout after the first
 * one did: done with what they have.  Returns the milliseconds until the
 * next is due (at most a second).
 */
long
rl_handoff_remote_due(void)
{
	int			wake[RL_WAKE_MAX];
	int			nwake = 0;
	int64_t		now = rl_now_us();
	int64_t		after = (int64_t) rl_node_timeout_ms * 1000;
	long		next_ms = 1000;
	bool		any = false;

	if (rl_table == NULL || !rl_collecting)
		return next_ms;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < rl_table->nslots && nwake < RL_WAKE_MAX; i++)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (!s->in_use || s->granted || s->remote != RL_REMOTE_COLLECTING)
			continue;
		if (s->collect_since_us + after <= now)
		{
			rl_remote_end_collecting(s);
			wake[nwake++] = s->procno;
		}
		else
		{
			any = true;
			next_ms = Min(next_ms,
						  (long) ((s->collect_since_us + after - now + 999) / 1000));
		}
	}
	LWLockRelease(rl_table->lock);
	rl_collecting = any || nwake == RL_WAKE_MAX;
	for (int i = 0; i < nwake; i++)
		SetLatch(rl_latch_of(wake[i]));
	return nwake == RL_WAKE_MAX ? 0 : next_ms;
}
