/*-------------------------------------------------------------------------
 *
 * lease_wait.c
 *	  How a lock call waits for its turn to ask the nodes again, and takes
 *	  a lease handed over to it while it sleeps.
 *
 * With the lock table, a holder on this server that releases the resource
 * hands it over to the first waiter asleep with an offer (lease_handoff.c), or
 * (a waiter ahead of us that gives up, a holder on another server whose
 * release the wake-up worker hears) sets our latch.  A waiter also wakes at
 * a local holder's expiry and, as a backstop, after redlock.retry_delay
 * plus jitter.  It stops with 55P03 at lock_timeout or the call's wait_ms;
 * cancel and statement_timeout interrupt the sleep.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"

#include "lease/lease_handoff.h"
#include "lease/lease_report.h"
#include "lease/lease_wait.h"
#include "shared/lock_table.h"
#include "shared/stats.h"
#include "base/wait_events.h"

/*
 * How long a waiter's sleep may last, or raise 55P03 when its wait is over:
 * the backstop (retry_delay plus jitter), cut short by the expiry of a
 * lease a backend here holds (holder_expiry, 0 for none), and the call's
 * limits (lock_timeout, wait_ms: -1 for none) counted from started_us.
 * last: the last attempt, if any, for the error's detail; names: what the
 * call waits for, for its message (several: a set of resources).  Also
 * the multi-resource wait's (lease_multi_wait.c).
 */
long
rl_wait_sleep_ms(int64_t holder_expiry, int64_t started_us, int wait_ms,
				 const RlRequest *last, const char *names, bool several)
{
	long		delay_ms = rl_retry_delay_ms;
	int64_t		now = rl_now_us();
	int64_t		expiry = holder_expiry;
	int			limit_ms = -1;

	if (rl_retry_jitter_ms > 0)
		delay_ms += (long) pg_prng_uint64_range(&pg_global_prng_state, 0,
												rl_retry_jitter_ms);
	if (expiry > now)
		delay_ms = Min(delay_ms, (expiry - now) / 1000 + 1);
	else if (expiry > 0 && now - expiry < 1000000)
		delay_ms = Min(delay_ms, 20);	/* it should be gone any moment */

	if (LockTimeout > 0)
		limit_ms = LockTimeout;
	if (wait_ms >= 0 && (limit_ms < 0 || wait_ms < limit_ms))
		limit_ms = wait_ms;
	if (limit_ms >= 0)
	{
		int64_t		left_ms = limit_ms - (now - started_us) / 1000;

		if (left_ms <= 0)
		{
			StringInfoData detail;

			initStringInfo(&detail);
			if (last != NULL)
			{
				appendStringInfoString(&detail, "Last attempt:");
				rl_describe_nodes(&detail, last);
			}
			else if (several)
				appendStringInfoString(&detail, "Another session of this server holds one of them.");
			else
				appendStringInfoString(&detail, "Another session of this server holds it, or waits for it first.");
			rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
			rl_stats_acquire_latency(now - started_us);
			if (several)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 limit_ms == wait_ms ?
						 errmsg("could not obtain leases on \"%s\" within wait_ms (%d ms)",
								names, wait_ms) :
						 errmsg("could not obtain leases on \"%s\" within lock_timeout (%d ms)",
								names, LockTimeout),
						 errdetail_internal("%s", detail.data)));
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 limit_ms == wait_ms ?
					 errmsg("could not obtain lease on \"%s\" within wait_ms (%d ms)",
							names, wait_ms) :
					 errmsg("could not obtain lease on \"%s\" within lock_timeout (%d ms)",
							names, LockTimeout),
					 errdetail_internal("%s", detail.data)));
		}
		delay_ms = Min(delay_ms, left_ms);
	}
	return delay_ms;
}

/*
 * Sleep up to delay_ms, until the backstop or a wake-up with a reason for
 * one of the lock table rows slots (nslots of them: a release of their
 * key, their turn); cancel and statement_timeout interrupt it.  Only such
 * a wake-up ends the sleep before the backstop: the latch is also set by
 * PostgreSQL's own timers and signals, which say nothing of the lease.
 * Also the multi-resource and shared waits' (lease_multi_wait.c).
 *
 * The rows' wake marks are read before each sleep, not only after: a
 * wake-up that came while the caller still asked the nodes (a release
 * during its attempt, a handoff heard by the wake-up worker before the
 * attempt's round returned) is in the mark, but its latch may be gone.
 * The waits of a round reset the latch, and one on the dispatcher's
 * shared connections cannot tell a wake-up from the worker's "done" when
 * both came before it looked (shared_rounds_backend.c): sleeping on the
 * latch alone would then last until the backstop.
 */
void
rl_wait_sleep(long delay_ms, const int *slots, int nslots)
{
	int64_t		until_us = rl_now_us() + (int64_t) delay_ms * 1000;
	bool		over = false;

	for (;;)
	{
		int			rc;
		bool		woken = false;

		for (int i = 0; i < nslots; i++)
			woken |= rl_lock_table_take_wake(slots[i]);
		if (woken || over)
			break;

		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   delay_ms, rl_wait_event_lease());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		/* one more look at the marks, then the backstop ends the sleep */
		delay_ms = (long) ((until_us - rl_now_us() + 999) / 1000);
		over = (rc & WL_TIMEOUT) != 0 || delay_ms <= 0;
	}
}

/* How long the sleep may last, or raise 55P03 when the wait is over. */
static long
sleep_ms(const RlWaiter *w, const RlRequest *last)
{
	return rl_wait_sleep_ms(rl_lock_table_holder_expiry(w->key),
							w->started_us, w->wait_ms, last, w->resource,
							false);
}

/*
 * One sleep (woken, our turn, or the backstop), and the withdrawal of the
 * offer it left: true when a releasing holder handed us the lease
 * meanwhile, with the round's outcome in *ho and the value in owner.
 */
static bool
sleep_until_handed(RlWaiter *w, const RlRequest *last, RlHandoff *ho,
				   char *owner)
{
	long		delay_ms = sleep_ms(w, last);
	RlHandoffOutcome outcome;

	rl_handoff_offer(w->slot, w->ttl_ms, &w->offer);
	/* an offer taken up is released by the abort path if the sleep raises */
	rl_wait_sleep(delay_ms, &w->slot, 1);

	/*
	 * A holder is handing us the lease: its round has a deadline, but our
	 * limits (lock_timeout, wait_ms) still apply; an offer given up while
	 * taken is released by the abort path, or by the holder.
	 */
	while ((outcome = rl_lock_table_withdraw_offer(w->slot, ho, owner)) ==
		   RL_HANDED_PENDING)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms(w, last), 100), rl_wait_event_lease());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return outcome == RL_HANDED_OVER;
}

/*
 * Sleep until woken, our turn, or the backstop.  Returns true when a
 * releasing holder handed us the lease meanwhile (*grant is filled); false
 * when we should ask the nodes (again).  last: our last attempt, if any,
 * for the 55P03 detail.  *announced: the wake-up worker knows we wait.
 */
bool
rl_wait_turn(RlWaiter *w, const RlRequest *last, bool *announced,
			 RlGrant *grant)
{
	RlHandoff	ho;
	RlRequest	req;
	RlAttempt	r;
	char		owner[RL_OWNER_LEN + 1];

	if (!*announced)
	{
		rl_lock_table_waiting(w->slot);
		*announced = true;
	}

	/*
	 * Asleep until something happened; again when a local handoff queued
	 * us on the nodes instead: our server's turn is over, a waiter of
	 * another server is served first, and the nodes put us in their queue
	 * behind it (HANDOFF_SCRIPT), as after an attempt of our own.
	 */
	for (;;)
	{
		if (!sleep_until_handed(w, last, &ho, owner))
			return false;
		r = rl_proto_take_handoff(w->resource, w->key, w->keylen, w->ttl_ms,
								  owner, &ho, grant, &req);
		if (r != RL_ATTEMPT_QUEUED || !rl_handoff_remote_possible(w->slot))
			break;
		rl_handoff_requeued(w->slot, w->key, &w->offer, owner, &ho);
	}

	if (r == RL_ATTEMPT_QUEUED)
	{
		/* nobody here would hear of it being handed over: take it back */
		rl_proto_release_one(w->key, w->keylen, owner, false);
		rl_handoff_used(&w->offer, owner);
		return false;
	}
	rl_handoff_used(&w->offer, owner);
	if (r != RL_ATTEMPT_GRANTED)
		return false;
	rl_handoff_wait_end(w->key, owner);
	return true;
}
