/*-------------------------------------------------------------------------
 *
 * lock_table_place.c
 *	  A waiter's place in line for a resource, across the servers that
 *	  share the nodes, as redlock_locks shows it.
 *
 * Waiters of this server queue in the lock table by arrival (wait_seq);
 * only the first asks the nodes, and its refused attempt leaves an offer in
 * the waiters' queue beside the lock on each node, which says how many
 * offers (of other servers, as a rule) are ahead of it there
 * (ACQUIRE_WAITING_SCRIPT).  The slot keeps what a majority said
 * (rl_queue_ahead): offers only leave the queue ahead of it, so the number
 * can only have gone down since.  A waiter's place is then its rank among
 * this server's waiters of the same lock, after those offers: 1 is next.
 * A release hands the lock to the first offer of the queue, and a holder
 * of this server to the first waiter here, at most redlock.local_handoffs
 * times in a row while an offer of another server waits (protocol
 * files), so the place is the order of the grants, but for those local
 * handoffs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/lwlock.h"

#include "shared/lock_table_internal.h"

/* The attempt of the waiter in slot left its offer behind ahead others. */
void
rl_lock_table_queued(int slot, int ahead)
{
	if (rl_table == NULL || slot < 0)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	rl_table->slots[slot].queue_ahead = ahead;
	LWLockRelease(rl_table->lock);
}

/* Rows of one lock (key and nodes) together, each in order of arrival. */
static int
row_order(const void *a, const void *b)
{
	const RlLockRow *x = *(RlLockRow *const *) a;
	const RlLockRow *y = *(RlLockRow *const *) b;
	int			c = strcmp(x->key, y->key);

	if (c != 0)
		return c;
	if (x->nodes != y->nodes)
		return x->nodes < y->nodes ? -1 : 1;
	if (x->wait_seq != y->wait_seq)
		return x->wait_seq < y->wait_seq ? -1 : 1;
	return 0;
}

/*
 * The place of every waiting row (granted rows get 0), from a copy of the
 * table: no work under its lock.
 */
void
rl_lock_table_places(RlLockRow *rows, int nrows)
{
	RlLockRow **order;
	int			rank = 0;
	int			ahead = 0;

	if (nrows == 0)
		return;
	order = palloc_extended(sizeof(RlLockRow *) * nrows, MCXT_ALLOC_HUGE);
	for (int i = 0; i < nrows; i++)
		order[i] = &rows[i];
	qsort(order, nrows, sizeof(RlLockRow *), row_order);
	for (int i = 0; i < nrows; i++)
	{
		RlLockRow  *r = order[i];

		if (i == 0 || strcmp(r->key, order[i - 1]->key) != 0 ||
			r->nodes != order[i - 1]->nodes)
			rank = ahead = 0;
		r->place = 0;
		if (r->granted || r->multi)
			continue;			/* a multi-resource waiter has no place */
		if (rank++ == 0)
			ahead = Max(r->queue_ahead, 0);	/* this server's first waiter */
		r->place = ahead + rank;
	}
	pfree(order);
}
