/*-------------------------------------------------------------------------
 *
 * lease_multi_wait.h
 *	  How a multi-resource lock call waits (lease_multi_wait.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_MULTI_WAIT_H
#define REDLOCK_LEASE_MULTI_WAIT_H

#include "protocol/protocol.h"

/* A multi-resource call that waits. */
typedef struct RlMultiWaiter
{
	const RlMultiSet *set;
	const char *names;			/* the set's names, for messages */
	const int  *slots;			/* its lock table rows, -1 each without */
	int64_t		started_us;		/* when the call began */
	int			wait_ms;		/* its own limit, or -1 */
	bool		announced;		/* its rows are marked waiting */
} RlMultiWaiter;

extern bool rl_multi_held_here(const RlMultiWaiter *w);
extern void rl_multi_wait(RlMultiWaiter *w, const RlRequest *last);

#endif							/* REDLOCK_LEASE_MULTI_WAIT_H */
