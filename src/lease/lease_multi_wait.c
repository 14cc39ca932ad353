/*-------------------------------------------------------------------------
 *
 * lease_multi_wait.c
 *	  How a multi-resource lock call waits before it asks the nodes for its
 *	  whole set again.
 *
 * A multi-resource call holds nothing while it waits (its attempts are all
 * or none), so waiting cannot deadlock, whatever the order of its
 * resources.  It takes no place in line: it leaves no offer, neither in
 * the lock table nor on the nodes, and is never handed a lease by a
 * releasing holder; its lock table rows are never the first waiter of
 * their keys, so it delays no one-resource waiter.  It sleeps until the
 * release of any of its resources: a holder of this server that leaves
 * the lock table, or (through the waiters' markers its refused attempts
 * leave beside the locks held) a release on another server that the
 * wake-up worker hears; or the expiry of a lease a backend here holds on
 * one of them; or, as a backstop, redlock.retry_delay plus jitter.  It
 * stops with 55P03 at lock_timeout or the call's wait_ms; cancel and
 * statement_timeout interrupt the sleep.  A one-resource waiter may so
 * be served ahead of it: a stream of them on one of its resources can
 * delay it until its wait ends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/lease_multi_wait.h"
#include "lease/lease_wait.h"
#include "shared/lock_table.h"

/* The latest expiry of a lease a backend here holds on one of the keys. */
static int64_t
holders_expiry(const RlMultiWaiter *w)
{
	int64_t		expiry = 0;

	for (int i = 0; i < w->set->n; i++)
		expiry = Max(expiry, rl_lock_table_holder_expiry(w->set->keys[i]));
	return expiry;
}

/*
 * Does a backend of this server hold one of the resources?  Then asking
 * the nodes would only be refused: the call waits for its release.
 */
bool
rl_multi_held_here(const RlMultiWaiter *w)
{
	return holders_expiry(w) > rl_now_us();
}

/* How long the sleep may last, or raise 55P03 when the wait is over. */
static long
sleep_ms(const RlMultiWaiter *w, const RlRequest *last)
{
	return rl_wait_sleep_ms(holders_expiry(w), w->started_us, w->wait_ms,
							last, w->names, w->set->n > 1);
}

/*
 * Sleep until a release of one of the resources, a local holder's expiry
 * or the backstop; raises 55P03 when the call's wait is over.  last: the
 * last attempt, if any, for its detail.
 */
void
rl_multi_wait(RlMultiWaiter *w, const RlRequest *last)
{
	if (!w->announced)
	{
		/* the wake-up worker listens for their keys from now on */
		for (int i = 0; i < w->set->n; i++)
			rl_lock_table_waiting(w->slots[i]);
		w->announced = true;
	}
	rl_wait_sleep(sleep_ms(w, last), w->slots, w->set->n);
}
