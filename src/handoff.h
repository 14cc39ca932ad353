/*-------------------------------------------------------------------------
 *
 * handoff.h
 *	  Handing a released lease straight to the next waiter of this server.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_HANDOFF_H
#define REDLOCK_HANDOFF_H

#include "protocol.h"

/* What a waiter finds when it withdraws its offer. */
typedef enum RlHandoffOutcome
{
	RL_HANDED_NOTHING,			/* nobody took the offer up */
	RL_HANDED_PENDING,			/* a holder is running the round: wait */
	RL_HANDED_OVER				/* the round's outcome is in *ho */
} RlHandoffOutcome;

/* the waiter */
extern void rl_handoff_offer(int slot, int ttl_ms, char *owner);
extern RlHandoffOutcome rl_handoff_withdraw(int slot, RlHandoff *ho);
extern void rl_handoff_abandon(int slot);

/* the releasing holder */
extern bool rl_handoff_claim(int holder_slot, const char *resource,
							 const RlReleaseItem *ours);
extern void rl_handoff_run(const RlReleaseItem *ours, const char *resource,
						   bool nothrow, int64_t deadline_us, RlRequest *req);
extern void rl_handoff_abort(void);

#endif							/* REDLOCK_HANDOFF_H */
