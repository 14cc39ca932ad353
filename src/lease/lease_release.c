/*-------------------------------------------------------------------------
 *
 * lease_release.c
 *	  The release of leases whose last hold is gone: one at a time
 *	  (redlock_unlock), or in bulk (transaction end, exit, DISCARD ALL,
 *	  redlock_unlock_all, a change of the node list).
 *
 * A lease whose last hold goes is marked releasing *before* any network
 * I/O, so an error that interrupts the release (cancel, statement_timeout,
 * a caught exception) can never leave it looking held; its release command
 * belongs to the node layer from then on, which delivers it when the nodes
 * can take it.  One exclusive lease per release may go straight to the
 * first waiter of this server (lease_handoff.c); a shared one never does
 * (other readers may hold it still: the nodes hand it over when the last
 * one leaves, protocol_release.c).
 *
 * Bulk releases send one command per node per RL_RELEASE_CHUNK leases,
 * pipelined, and wait once, for the last.  On the no-throw paths the whole
 * bulk release has one deadline: one connect attempt and one node_timeout
 * per node, whatever the number of leases; what could not be confirmed
 * expires by TTL and is logged once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/lease_handoff.h"
#include "lease/lease_release.h"
#include "shared/stats.h"

static uint64 rl_release_batches = 0;

static int	release_batch(uint64 batch, int total, bool nothrow);

/* Did a majority answer a release round? */
static bool
release_confirmed(const RlRequest *req)
{
	return req->decision != RL_UNAVAILABLE &&
		req->tally.yes + req->tally.no >= rl_majority(req->nnodes);
}

/*
 * Release one lease whose last hold went: marked releasing first, then one
 * round.  Returns whether a majority confirmed the release; the lease is
 * gone from the registry either way.
 */
bool
rl_lease_release_one(RlLease *lease, bool nothrow, RlRequest *req)
{
	RlReleaseItem item;

	Assert(lease->state == RL_LEASE_HELD);
	lease->state = RL_LEASE_RELEASING;
	item.key = lease->key;
	item.keylen = lease->keylen;
	item.owner = lease->owner;
	if (!lease->shared &&
		rl_handoff_claim(lease->shm_slot, lease->resource, &item,
						 lease->in_row))
		rl_handoff_run(&item, lease->resource, nothrow,
					   nothrow ? rl_proto_release_deadline() : 0, req);
	else
		rl_proto_release(&item, 1, true, nothrow,
						 nothrow ? rl_proto_release_deadline() : 0, NULL, req);
	rl_stats_count(RL_STAT_RELEASES);
	rl_registry_forget(lease);
	return release_confirmed(req);
}

/*
 * Drop holds in bulk and release the leases left without any.  Entries
 * already releasing (an earlier release was interrupted; the node layer
 * owns their release) are just forgotten.  Returns the number of leases
 * released, or -1 when a majority did not confirm their release.
 */
int
rl_lease_release(RlDropScope scope, SubTransactionId subid, bool nothrow)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	uint64		batch = ++rl_release_batches;
	int			total = 0;

	/* mark first: from here on none of them is held, whatever happens */
	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state != RL_LEASE_HELD)
			continue;
		if (rl_registry_drop_holds(lease, scope, subid))
		{
			lease->state = RL_LEASE_RELEASING;
			lease->release_batch = batch;
			total++;
		}
		else
			rl_registry_holds_changed(lease);
	}
	return release_batch(batch, total, nothrow);
}

/*
 * Release leases whose last hold went (redlock_unlock(text[])): marked
 * releasing first, then in bulk.  Returns whether a majority confirmed
 * the release; the leases are gone from the registry either way.
 */
bool
rl_lease_release_leases(RlLease **leases, int n, bool nothrow)
{
	uint64		batch = ++rl_release_batches;

	for (int i = 0; i < n; i++)
	{
		Assert(leases[i]->state == RL_LEASE_HELD);
		leases[i]->state = RL_LEASE_RELEASING;
		leases[i]->release_batch = batch;
	}
	return n == 0 || release_batch(batch, n, nothrow) >= 0;
}

/*
 * The release of the total leases marked releasing in batch; then every
 * releasing entry is forgotten.  Returns total, or -1 when a majority did
 * not confirm it.
 */
static int
release_batch(uint64 batch, int total, bool nothrow)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	int			sent = 0;
	int			unconfirmed = 0;
	int64_t		deadline = nothrow ? rl_proto_release_deadline() : 0;
	RlReleaseItem items[RL_RELEASE_CHUNK];
	int			nitems = 0;
	RlLease    *handed = NULL;
	RlReleaseItem handed_item;
	RlRequest	req;

	for (lease = total > 0 ? rl_registry_next(&status, true) : NULL;
		 lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		RlReleaseItem *item = &items[nitems];

		if (lease->state != RL_LEASE_RELEASING || lease->release_batch != batch)
			continue;
		item->key = lease->key;
		item->keylen = lease->keylen;
		item->owner = lease->owner;
		sent++;
		/* one exclusive lease per release may go straight to a waiter here */
		if (handed == NULL && !lease->shared &&
			rl_handoff_claim(lease->shm_slot, lease->resource, item,
							 lease->in_row))
		{
			handed = lease;
			handed_item = *item;
		}
		else
			nitems++;
		if (nitems > 0 && (nitems == RL_RELEASE_CHUNK || sent == total))
		{
			bool		last = (sent == total && handed == NULL);

			rl_proto_release(items, nitems, last, nothrow, deadline, NULL, &req);
			if (last && !release_confirmed(&req))
				unconfirmed = total;
			nitems = 0;
		}
	}
	if (handed != NULL)
	{
		rl_handoff_run(&handed_item, handed->resource, nothrow, deadline, &req);
		if (!release_confirmed(&req))
			unconfirmed = total;
	}

	/* forget every releasing entry: the node layer owns their releases */
	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_RELEASING &&
			lease->session_holds == 0 && lease->xact_holds == 0)
		{
			if (lease->release_batch == batch)
				rl_stats_count(RL_STAT_RELEASES);
			rl_registry_forget(lease);
		}
	}

	if (unconfirmed > 0)
		ereport(nothrow ? LOG : WARNING,
				(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
				 errmsg_plural("release of %d lease was not confirmed by a majority of Redis nodes",
							   "release of %d leases was not confirmed by a majority of Redis nodes",
							   unconfirmed, unconfirmed),
				 errdetail("Leases whose release did not reach a node expire there by their TTL; the release is sent again when the node can be reached.")));
	return unconfirmed > 0 ? -1 : total;
}
