/*-------------------------------------------------------------------------
 *
 * handoff.c
 *	  Handing a released lease straight to the next waiter of this server.
 *
 * Without it a handoff takes two rounds after the holder's commit: the
 * release, then (once the waiter's latch is set and it is scheduled) the
 * waiter's acquire.  With it, a waiter asleep in the lock table leaves a
 * standing offer in its slot (a fresh lock value and its TTL), and the
 * releasing holder's release round takes the lock for it on every node in
 * the same script that deletes the holder's value (protocol_handoff.c,
 * HANDOFF_SCRIPT).  The waiter then settles that round as if it were its
 * own attempt: the same quorum, fencing-token choice, write-back and
 * validity (counted from the start of the holder's round), so a handoff
 * grants nothing a plain acquire would not.
 *
 * The offer's states (lock_table_internal.h): offered while the waiter
 * sleeps; running once a holder took it up; done with the round's outcome.
 * A waiter that wakes first withdraws an untaken offer.  Whoever leaves a
 * taken offer behind releases the waiter's value: the waiter if it stops
 * waiting after the round (its abort path), and the holder if the waiter
 * was gone when the round ended (on its own connections, so after the
 * handoff command on every node).  A holder whose round is interrupted
 * releases both values and reports the round as failed, and the waiter
 * simply asks the nodes itself.
 *
 * The same offer serves holders on other servers: each attempt of a lock
 * call that waits leaves a fresh value on the nodes that refuse it
 * (rl_handoff_new_offer), and asleep the waiter offers that value here, so
 * that whichever release comes first, local or remote, hands over the same
 * value.  The wake-up worker gathers the word of the nodes on a remote
 * handoff (handoff_remote.c); until it is done no holder here takes the
 * offer up.  A waiter that gives up withdraws its offer from the nodes too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/guc.h"
#include "shared/handoff.h"
#include "shared/lock_table_internal.h"

/* The offer this backend, as a releasing holder, has taken up. */
static struct
{
	bool		active;
	int			slot;
	uint64		wait_seq;
	int			ttl_ms;
	char		owner[RL_OWNER_LEN + 1];	/* the waiter's lock value */
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		ours[RL_OWNER_LEN + 1];	/* the holder's lock value */
} rl_handing;

/* ---------- the waiter ---------- */

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
 * Every offer the current wait of this backend left on the nodes (a
 * backend waits in one lock call at a time), with the nodes it may still
 * be on, so that none is left behind when the wait ends, however it ends:
 * a release there would hand it a lock nobody uses.
 */
static struct
{
	int			n;
	struct
	{
		char		value[RL_OWNER_LEN + 1];
		uint32		nodes;		/* bit i: it may still be on node i */
	}			left[RL_WAIT_OFFERS];
} rl_left;

/* Release value on the nodes in the mask (must-deliver, not awaited). */
static void
withdraw_value(const char *key, const char *value, uint32 nodes, bool nothrow)
{
	RlReleaseItem item = {key, strlen(key), value};
	bool		skip[RL_MAX_NODES];
	RlRequest	req;

	if (nodes == 0)
		return;
	for (int i = 0; i < RL_MAX_NODES; i++)
		skip[i] = (nodes & ((uint32) 1 << i)) == 0;
	rl_proto_release(&item, 1, false, nothrow, 0, skip, &req);
}

/* Forget the offers no node can hold any more. */
static void
prune_left(void)
{
	int			n = 0;

	for (int i = 0; i < rl_left.n; i++)
		if (rl_left.left[i].nodes != 0)
			rl_left.left[n++] = rl_left.left[i];
	rl_left.n = n;
}

/*
 * Before an attempt of a lock call that waits: its value and proposal, and
 * the offer it leaves on the nodes that refuse it (rl_offer_value() of its
 * value), with the list of the wait's earlier offers, which the attempt
 * replaces or takes back.  From here on the wake-up worker gathers what it
 * hears of that offer (handoff_remote.c), and the abort path withdraws it.
 */
void
rl_handoff_new_offer(int slot, const char *key, RlOffer *offer)
{
	RlSlot	   *s = &rl_table->slots[slot];
	int			nnodes = rl_nodes_count();
	char	   *past = offer->past;

	if (offer->since_us == 0)
		rl_left.n = 0;			/* a new wait */
	if (rl_left.n == RL_WAIT_OFFERS)
	{
		/* a node that has not answered for so long gets the oldest now */
		withdraw_value(key, rl_left.left[0].value, rl_left.left[0].nodes, false);
		rl_left.left[0].nodes = 0;
		prune_left();
	}
	past[0] = '\0';
	for (int i = 0; i < rl_left.n; i++)
	{
		if (i > 0)
			*past++ = ' ';
		past += strlcpy(past, rl_left.left[i].value, RL_OWNER_LEN + 1);
	}

	rl_proto_new_owner(offer->value);
	rl_offer_value(offer->owner, offer->value);
	offer->proposal = rl_proto_new_proposal();
	offer->since_us = rl_now_us();
	offer->px_ms = rl_retry_delay_ms + rl_retry_jitter_ms + rl_node_timeout_ms;
	strlcpy(rl_left.left[rl_left.n].value, offer->owner, RL_OWNER_LEN + 1);
	rl_left.left[rl_left.n].nodes = nnodes >= 32 ? ~(uint32) 0 :
		((uint32) 1 << nnodes) - 1;
	rl_left.n++;

	/*
	 * What the worker heard of the previous offer since we last looked is
	 * dropped (the latch it set costs one spurious wake-up): this attempt
	 * takes back a lock handed to it, or replaces it on the nodes.
	 */
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->handoff == RL_HANDOFF_NONE);
	strlcpy(s->remote_owner, offer->owner, sizeof(s->remote_owner));
	s->remote_proposal = offer->proposal;
	s->remote_since_us = offer->since_us;
	s->remote_nodes = rl_nodes_fingerprint();
	s->remote = RL_REMOTE_NONE;
	LWLockRelease(rl_table->lock);
}

/*
 * Before an attempt of a lock call that waits but is not handed the lease
 * by holders on other servers (rl_handoff_remote_possible() said no): its
 * value and proposal, and no offer; it only leaves the marker that makes
 * a release announce the lock free.
 */
void
rl_handoff_mark_only(RlOffer *offer)
{
	memset(offer, 0, sizeof(*offer));
	rl_proto_new_owner(offer->value);
	offer->proposal = rl_proto_new_proposal();
	offer->since_us = rl_now_us();
	offer->px_ms = rl_retry_delay_ms + rl_retry_jitter_ms + rl_node_timeout_ms;
}

/*
 * The attempt of offer ran (req): a node that answered it holds no earlier
 * offer of ours any more, nor a lock handed to one; and this offer only
 * where the node refused the attempt (or did not answer).
 */
void
rl_handoff_attempted(const RlOffer *offer, const RlRequest *req)
{
	for (int n = 0; n < req->nnodes; n++)
	{
		RlVote		v = req->results[n].vote;
		uint32		bit = (uint32) 1 << n;

		for (int i = 0; i < rl_left.n; i++)
		{
			bool		current = strcmp(rl_left.left[i].value, offer->owner) == 0;

			if ((!current && (v == RL_VOTE_YES || v == RL_VOTE_NO)) ||
				(current && (v == RL_VOTE_YES || req->results[n].in_backoff)))
				rl_left.left[i].nodes &= ~bit;
		}
	}
	prune_left();
}

/*
 * The wait ended with the lease owner granted: every other offer the wait
 * left is withdrawn.  The lease's own offer (or, handed over, its value)
 * stays where a release may still hand it over: the lease's release
 * removes both there, in whichever order they come (RELEASE_SCRIPT).
 */
void
rl_handoff_wait_end(const char *key, const char *owner)
{
	char		offer[RL_OWNER_LEN + 1];

	rl_offer_value(offer, owner);
	for (int i = 0; i < rl_left.n; i++)
		if (strcmp(rl_left.left[i].value, offer) != 0)
			withdraw_value(key, rl_left.left[i].value, rl_left.left[i].nodes,
						   false);
	rl_left.n = 0;
}

/*
 * The value owner was handed over (and settled: granted, or failed and
 * withdrawn): the next offer needs a fresh one.  If it was the offer on
 * the nodes, the next attempt still takes back a lock handed to it on a
 * node it did not hear from (ACQUIRE_WAITING_SCRIPT).
 */
void
rl_handoff_used(RlOffer *offer, const char *owner)
{
	if (strcmp(offer->owner, owner) == 0)
		offer->owner[0] = '\0';
	if (strcmp(offer->local, owner) == 0)
		offer->local[0] = '\0';
}

/*
 * About to sleep in slot: offer to be handed the lease at its release, with
 * the value of our last attempt's offer on the nodes (or one of our own).
 */
void
rl_handoff_offer(int slot, int ttl_ms, RlOffer *offer)
{
	RlSlot	   *s;
	const char *value = offer->owner;

	if (rl_table == NULL || slot < 0)
		return;
	if (value[0] == '\0')
	{
		if (offer->local[0] == '\0')
			rl_proto_new_owner(offer->local);
		value = offer->local;
	}
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->handoff == RL_HANDOFF_NONE);
	strlcpy(s->owner, value, sizeof(s->owner));
	s->ttl_ms = ttl_ms;
	s->handoff_nodes = rl_nodes_fingerprint();
	s->handoff = RL_HANDOFF_OFFERED;
	LWLockRelease(rl_table->lock);
}

/*
 * Awake again: withdraw the offer.  A round in progress stays ours to wait
 * for; a finished one is returned in *ho (and is ours to settle).
 */
RlHandoffOutcome
rl_handoff_withdraw(int slot, RlHandoff *ho, char *owner)
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
			strlcpy(owner, s->owner, RL_OWNER_LEN + 1);
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
		rl_remote_done(s);
	if (outcome == RL_HANDED_NOTHING && s->remote == RL_REMOTE_COLLECTING)
		outcome = RL_HANDED_PENDING;
	else if (outcome == RL_HANDED_NOTHING && s->remote == RL_REMOTE_DONE)
	{
		*ho = s->remote_result;
		strlcpy(owner, s->remote_owner, RL_OWNER_LEN + 1);
		outcome = RL_HANDED_OVER;
	}

	/*
	 * The local outcome comes first, and once one is taken, whatever is
	 * heard of the offer is stale: a release of ours on another connection
	 * (rl_handoff_run) may hand the lock to our offer there and take it back
	 * in the same script.
	 */
	if (outcome == RL_HANDED_OVER)
		s->remote = RL_REMOTE_USED;
	LWLockRelease(rl_table->lock);
	return outcome;
}

/*
 * Abort and exit paths, before the waiter's slot is removed: an offer a
 * holder took up may have left our value on the nodes, and our attempts
 * left offers there (their release removes a lock handed to them too).
 * Raises nothing.
 */
void
rl_handoff_abandon(int slot)
{
	RlSlot	   *s;
	RlHandoffState state;
	char		owner[RL_OWNER_LEN + 1];
	char		key[RL_KEY_MAX + 1];

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	state = s->handoff;
	s->handoff = RL_HANDOFF_NONE;
	strlcpy(owner, s->owner, sizeof(owner));
	strlcpy(key, s->key, sizeof(key));
	s->remote_owner[0] = '\0';
	LWLockRelease(rl_table->lock);
	if (state == RL_HANDOFF_RUNNING || state == RL_HANDOFF_DONE)
		withdraw_value(key, owner, ~(uint32) 0, true);
	for (int i = 0; i < rl_left.n; i++)
		if (state == RL_HANDOFF_NONE || state == RL_HANDOFF_OFFERED ||
			strcmp(rl_left.left[i].value, owner) != 0)
			withdraw_value(key, rl_left.left[i].value, rl_left.left[i].nodes,
						   true);
	rl_left.n = 0;
}

/* ---------- the releasing holder ---------- */

/*
 * Releasing the lease in holder_slot: take up the standing offer of the
 * first waiter of this server for it, if that waiter is asleep with one.
 * Raises nothing.
 */
bool
rl_handoff_claim(int holder_slot, const char *resource,
				 const RlReleaseItem *ours)
{
	uint64_t	nodes = rl_nodes_fingerprint();
	int			w;
	RlSlot	   *s = NULL;

	if (rl_table == NULL || holder_slot < 0 || rl_handing.active)
		return false;

	/*
	 * Nobody waits, the usual case: a shared look is enough.  A waiter that
	 * comes after it asks the nodes itself, as one that comes after the
	 * exclusive look below.
	 */
	LWLockAcquire(rl_table->lock, LW_SHARED);
	w = rl_first_waiter(ours->key, holder_slot);
	LWLockRelease(rl_table->lock);
	if (w < 0)
		return false;

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	w = rl_first_waiter(ours->key, holder_slot);
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
		rl_handing.active = true;
		rl_handing.slot = w;
		rl_handing.wait_seq = s->wait_seq;
		rl_handing.ttl_ms = s->ttl_ms;
		strlcpy(rl_handing.owner, s->owner, sizeof(rl_handing.owner));
		strlcpy(rl_handing.key, ours->key, sizeof(rl_handing.key));
		rl_handing.keylen = ours->keylen;
		strlcpy(rl_handing.ours, ours->owner, sizeof(rl_handing.ours));
	}
	LWLockRelease(rl_table->lock);
	return rl_handing.active;
}

/*
 * The round is over (or was interrupted: ho says every node failed): give
 * the outcome to the waiter and wake it, or, if it stopped waiting, release
 * its value here, after the handoff command on every connection.
 */
static void
finish(const RlHandoff *ho, bool release_if_gone)
{
	RlSlot	   *s = &rl_table->slots[rl_handing.slot];
	int			procno = -1;

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	if (s->in_use && s->wait_seq == rl_handing.wait_seq &&
		s->handoff == RL_HANDOFF_RUNNING)
	{
		s->handoff_result = *ho;
		s->handoff = RL_HANDOFF_DONE;
		s->woken = true;
		procno = s->procno;
	}
	LWLockRelease(rl_table->lock);
	rl_handing.active = false;
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	else if (release_if_gone)
		rl_proto_release_one(rl_handing.key, rl_handing.keylen,
							 rl_handing.owner, true);
}

/*
 * Release ours (the lease being released) by handing it to the waiter
 * claimed by rl_handoff_claim.  req is the round, as a release's: a
 * majority answered it or not.
 *
 * The handoff command is not must-deliver, and a node that has not
 * answered may still run it after the waiter has moved on (given up, or
 * released on its own connections, which can overtake ours).  So every
 * node that did not answer gets, on our connections and so after the
 * handoff, a must-deliver release of ours and of the waiter's value: the
 * waiter's grant counts only the nodes that answered yes, so this takes
 * nothing from it, and the lease is exactly what the grant counted (left
 * there, the waiter's value could outlive the lease's release, which may
 * overtake our handoff command).  A node the round did not ask (in
 * backoff) keeps a release of ours.
 */
void
rl_handoff_run(const RlReleaseItem *ours, const char *resource, bool nothrow,
			   int64_t deadline_us, RlRequest *req)
{
	RlHandoff	ho;
	RlReleaseItem both[2];
	bool		skip_both[RL_MAX_NODES];
	bool		skip_ours[RL_MAX_NODES];
	bool		any_both = false;
	bool		any_ours = false;
	RlRequest	rel;

	Assert(rl_handing.active);
	rl_proto_handoff(ours, resource, rl_handing.owner, rl_handing.ttl_ms,
					 nothrow, deadline_us, &ho, req);
	both[0] = *ours;
	both[1].key = ours->key;
	both[1].keylen = ours->keylen;
	both[1].owner = rl_handing.owner;
	finish(&ho, true);

	for (int i = 0; i < RL_MAX_NODES; i++)
	{
		bool		exists = i < req->nnodes;
		bool		asked = exists && !req->results[i].in_backoff;
		RlVote		v = exists ? req->results[i].vote : RL_VOTE_NO;
		bool		open = asked && (v == RL_VOTE_PENDING || v == RL_VOTE_FAILED);
		bool		both_here = open;

		/* a node not asked keeps our release until it can take it */
		skip_both[i] = !both_here;
		skip_ours[i] = !((open && !both_here) || (exists && !asked));
		any_both |= both_here;
		any_ours |= !skip_ours[i];
	}
	if (any_both)
		rl_proto_release(both, 2, false, nothrow, 0, skip_both, &rel);
	if (any_ours)
		rl_proto_release(ours, 1, false, nothrow, 0, skip_ours, &rel);
}

/*
 * Abort and exit paths: a handoff round was interrupted.  Release both
 * values (after the handoff command on every connection) and tell the
 * waiter the round failed.  Raises nothing.
 */
void
rl_handoff_abort(void)
{
	RlReleaseItem items[2];
	RlHandoff	failed;
	RlRequest	req;

	if (!rl_handing.active)
		return;
	items[0].key = items[1].key = rl_handing.key;
	items[0].keylen = items[1].keylen = rl_handing.keylen;
	items[0].owner = rl_handing.ours;
	items[1].owner = rl_handing.owner;
	rl_proto_release(items, 2, false, true, 0, NULL, &req);

	memset(&failed, 0, sizeof(failed));
	failed.nnodes = rl_nodes_count();
	for (int i = 0; i < failed.nnodes; i++)
		failed.votes[i] = RL_VOTE_FAILED;
	finish(&failed, false);		/* the waiter's value is released above */
}
