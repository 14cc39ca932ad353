/*-------------------------------------------------------------------------
 *
 * lease_wait.h
 *	  How a lock call waits for its turn to ask the nodes again.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_WAIT_H
#define REDLOCK_LEASE_WAIT_H

#include "protocol/protocol.h"

/* A lock call that waits. */
typedef struct RlWaiter
{
	const char *resource;
	const char *key;
	int			keylen;
	int			ttl_ms;
	int			slot;			/* its lock table row, or -1 */
	int64_t		started_us;		/* when the call began */
	int			wait_ms;		/* its own limit, or -1 */
	RlOffer		offer;			/* to be handed the lease at release */
} RlWaiter;

extern bool rl_wait_turn(RlWaiter *w, const RlRequest *last,
						 bool *announced, RlGrant *grant);
extern long rl_wait_sleep_ms(int64_t holder_expiry, int64_t started_us,
							 int wait_ms, const RlRequest *last,
							 const char *names, bool several);
extern void rl_wait_sleep(long delay_ms, const int *slots, int nslots);

#endif							/* REDLOCK_LEASE_WAIT_H */
