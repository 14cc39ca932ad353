/*-------------------------------------------------------------------------
 *
 * lease_handoff.c
 *	  Handing a released lease straight to the next waiter: this backend's
 *	  part, as a releasing holder (the handoff round) and as a waiter (the
 *	  offers its attempts leave on the nodes).
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
 * The offer's states, in the waiter's lock table slot (lock_table_handoff.c):
 * offered while the waiter sleeps; running once a holder took it up; done
 * with the round's outcome.
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
 * handoff (lock_table_remote.c); until it is done no holder here takes the
 * offer up.  A waiter that gives up withdraws its offer from the nodes too.
 *
 * On the nodes the offers wait in one queue per lock, across servers
 * (protocol_internal.h, RL_LUA_QUEUE).  A holder passes on how many local
 * handoffs in a row gave it the lease (in_row): once that is
 * redlock.local_handoffs, its handoff round goes to the first waiter of
 * another server there, and queues ours instead (rl_handoff_requeued: the
 * value becomes our offer on the nodes, as an attempt's would).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/guc.h"
#include "lease/lease_handoff.h"
#include "shared/lock_table.h"

/* The offer this backend, as a releasing holder, has taken up. */
static struct
{
	bool		active;
	RlClaim		offer;			/* the waiter's slot, TTL and value */
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		ours[RL_OWNER_LEN + 1];	/* the holder's lock value */
	int			in_row;			/* local handoffs in a row that gave it */
} rl_claimed;

/* ---------- the waiter ---------- */

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
 * Room for one more offer of the wait: a node that has not answered for so
 * long gets the oldest withdrawn now.
 */
static void
make_room(const char *key)
{
	if (rl_left.n < RL_WAIT_OFFERS)
		return;
	withdraw_value(key, rl_left.left[0].value, rl_left.left[0].nodes, false);
	rl_left.left[0].nodes = 0;
	prune_left();
}

/* A new offer of the wait, which may be on every node (make_room first). */
static void
remember(const char *value)
{
	int			nnodes = rl_nodes_count();

	strlcpy(rl_left.left[rl_left.n].value, value, RL_OWNER_LEN + 1);
	rl_left.left[rl_left.n].nodes = nnodes >= 32 ? ~(uint32) 0 :
		((uint32) 1 << nnodes) - 1;
	rl_left.n++;
}

/*
 * Before an attempt of a lock call that waits: its value and proposal, and
 * the offer it leaves on the nodes that refuse it (rl_offer_value() of its
 * value), with the list of the wait's earlier offers, which the attempt
 * replaces or takes back.  From here on the wake-up worker gathers what it
 * hears of that offer (lock_table_remote.c), and the abort path withdraws it.
 */
void
rl_handoff_new_offer(int slot, const char *key, RlOffer *offer)
{
	char	   *past = offer->past;

	if (offer->since_us == 0)
		rl_left.n = 0;			/* a new wait */
	make_room(key);
	past[0] = '\0';
	for (int i = 0; i < rl_left.n; i++)
	{
		if (i > 0)
			*past++ = ' ';
		past += strlcpy(past, rl_left.left[i].value, RL_OWNER_LEN + 1);
	}

	rl_proto_new_owner(offer->value);
	rl_offer_value(offer->offered, offer->value);
	offer->proposal = rl_proto_new_proposal();
	offer->since_us = rl_now_us();
	offer->px_ms = rl_offer_life_ms();
	remember(offer->offered);
	rl_handoff_remote_offer(slot, offer);
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
	offer->px_ms = rl_offer_life_ms();
}

/*
 * The attempt of offer ran (req): a node that answered it holds no earlier
 * offer of ours any more, nor a lock handed to one; and this offer only
 * where the node refused the attempt (or did not answer).  The nodes that
 * queued it said how many offers are ahead of it: the slot keeps what a
 * majority said, for redlock_locks.  Not won, the offer is on no node that
 * granted the attempt (its round took the lock back there, announcing
 * nothing) nor on one not asked: the wake-up worker counts their no at
 * once (rl_handoff_remote_absent), as they never speak of it.
 */
void
rl_handoff_attempted(int slot, const RlOffer *offer, const RlRequest *req)
{
	int32_t		ahead[RL_MAX_NODES];
	int			nqueued = 0;
	uint32		absent = 0;

	for (int n = 0; n < req->nnodes; n++)
	{
		RlVote		v = req->results[n].vote;
		uint32		bit = (uint32) 1 << n;

		if (v == RL_VOTE_NO && req->results[n].queued)
			ahead[nqueued++] = req->results[n].queued_ahead;
		if (v == RL_VOTE_YES || req->results[n].in_backoff)
			absent |= bit;

		for (int i = 0; i < rl_left.n; i++)
		{
			bool		current = strcmp(rl_left.left[i].value,
										 offer->offered) == 0;

			if ((!current && (v == RL_VOTE_YES || v == RL_VOTE_NO)) ||
				(current && (v == RL_VOTE_YES || req->results[n].in_backoff)))
				rl_left.left[i].nodes &= ~bit;
		}
	}
	prune_left();
	if (req->decision != RL_WON)
	{
		rl_lock_table_queued(slot, rl_queue_ahead(ahead, nqueued, req->nnodes));
		rl_handoff_remote_absent(slot, absent);
	}
}

/*
 * The wait ended with the lease owner granted: every other offer the wait
 * left is withdrawn.  The lease's own offer (or, handed over, its value,
 * which is the offer itself when a local handoff queued it) stays where a
 * release may still hand it over: the lease's release removes both there,
 * in whichever order they come (RELEASE_HANDOVER_SCRIPT).
 */
void
rl_handoff_wait_end(const char *key, const char *owner)
{
	char		offer[RL_OWNER_LEN + 1];

	rl_offer_value(offer, owner);
	for (int i = 0; i < rl_left.n; i++)
		if (strcmp(rl_left.left[i].value, offer) != 0 &&
			strcmp(rl_left.left[i].value, owner) != 0)
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
	if (strcmp(offer->offered, owner) == 0)
		offer->offered[0] = '\0';
	if (strcmp(offer->local, owner) == 0)
		offer->local[0] = '\0';
}

/*
 * A local handoff of value to us was refused and the value queued instead
 * on a majority of the nodes, as the offer of an attempt of ours made by
 * the releasing holder's round (ho): it is our offer on the nodes now, for
 * holders of any server, and the wake-up worker gathers what it hears of
 * it; the wait withdraws it when it ends.  Its proposal is the round's,
 * its time the round's start, before it was queued.
 */
void
rl_handoff_requeued(int slot, const char *key, RlOffer *offer,
					const char *value, const RlHandoff *ho)
{
	bool		known = false;

	for (int i = 0; i < rl_left.n && !known; i++)
		known = strcmp(rl_left.left[i].value, value) == 0;
	if (!known)
	{
		make_room(key);
		remember(value);
	}
	if (strcmp(offer->local, value) == 0)
		offer->local[0] = '\0';
	strlcpy(offer->offered, value, RL_OWNER_LEN + 1);
	offer->proposal = ho->proposal;
	offer->since_us = ho->start_us;
	rl_handoff_remote_offer(slot, offer);
	rl_lock_table_queued(slot, rl_queue_ahead(ho->queued_ahead, ho->nqueued,
											  ho->nnodes));
}

/*
 * About to sleep in slot: offer to be handed the lease at its release, with
 * the value of our last attempt's offer on the nodes (or one of our own).
 */
void
rl_handoff_offer(int slot, int ttl_ms, RlOffer *offer)
{
	const char *value = offer->offered;

	if (!rl_lock_table_enabled() || slot < 0)
		return;
	if (value[0] == '\0')
	{
		if (offer->local[0] == '\0')
			rl_proto_new_owner(offer->local);
		value = offer->local;
	}
	rl_lock_table_offer(slot, ttl_ms, value);
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
	char		value[RL_OWNER_LEN + 1];
	char		key[RL_KEY_MAX + 1];
	bool		taken;

	if (!rl_lock_table_enabled() || slot < 0)
		return;
	taken = rl_lock_table_abandon_offer(slot, value, key);
	if (taken)
		withdraw_value(key, value, ~(uint32) 0, true);
	for (int i = 0; i < rl_left.n; i++)
		if (!taken || strcmp(rl_left.left[i].value, value) != 0)
			withdraw_value(key, rl_left.left[i].value, rl_left.left[i].nodes,
						   true);
	rl_left.n = 0;
}

/* ---------- the releasing holder ---------- */

/*
 * Releasing the lease in holder_slot, which in_row local handoffs in a row
 * gave us: take up the standing offer of the first waiter of this server
 * for it, if that waiter is asleep with one.  Raises nothing.
 */
bool
rl_handoff_claim(int holder_slot, const char *resource,
				 const RlReleaseItem *ours, int in_row)
{
	if (rl_claimed.active ||
		!rl_lock_table_claim_offer(holder_slot, resource, ours->key,
								   &rl_claimed.offer))
		return false;
	rl_claimed.active = true;
	strlcpy(rl_claimed.key, ours->key, sizeof(rl_claimed.key));
	rl_claimed.keylen = ours->keylen;
	strlcpy(rl_claimed.ours, ours->owner, sizeof(rl_claimed.ours));
	rl_claimed.in_row = in_row;
	return true;
}

/*
 * The round is over (or was interrupted: ho says every node failed): give
 * the outcome to the waiter and wake it, or, if it stopped waiting, release
 * its value here, after the handoff command on every connection.
 */
static void
finish(const RlHandoff *ho, bool release_if_gone)
{
	bool		delivered = rl_lock_table_hand_over(&rl_claimed.offer, ho);

	rl_claimed.active = false;
	if (!delivered && release_if_gone)
		rl_proto_release_one(rl_claimed.key, rl_claimed.keylen,
							 rl_claimed.offer.value, true);
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

	Assert(rl_claimed.active);
	rl_proto_handoff(ours, resource, rl_claimed.offer.value,
					 rl_claimed.offer.ttl_ms, rl_claimed.in_row, nothrow,
					 deadline_us, &ho, req);
	both[0] = *ours;
	both[1].key = ours->key;
	both[1].keylen = ours->keylen;
	both[1].owner = rl_claimed.offer.value;
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

	if (!rl_claimed.active)
		return;
	items[0].key = items[1].key = rl_claimed.key;
	items[0].keylen = items[1].keylen = rl_claimed.keylen;
	items[0].owner = rl_claimed.ours;
	items[1].owner = rl_claimed.offer.value;
	rl_proto_release(items, 2, false, true, 0, NULL, &req);

	memset(&failed, 0, sizeof(failed));
	failed.nnodes = rl_nodes_count();
	for (int i = 0; i < failed.nnodes; i++)
		failed.votes[i] = RL_VOTE_FAILED;
	finish(&failed, false);		/* the waiter's value is released above */
}
