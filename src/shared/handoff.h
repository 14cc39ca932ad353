/*-------------------------------------------------------------------------
 *
 * handoff.h
 *	  Handing a released lease straight to a waiter of this server, by a
 *	  holder here (handoff.c) or on another server (handoff_remote.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_HANDOFF_H
#define REDLOCK_HANDOFF_H

#include "protocol/protocol.h"

/* What a waiter finds when it withdraws its offer. */
typedef enum RlHandoffOutcome
{
	RL_HANDED_NOTHING,			/* nobody took the offer up */
	RL_HANDED_PENDING,			/* a holder is running the round: wait */
	RL_HANDED_OVER				/* the round's outcome is in *ho */
} RlHandoffOutcome;

/* the waiter */
extern bool rl_handoff_remote_possible(int slot);
extern void rl_handoff_new_offer(int slot, const char *key, RlOffer *offer);
extern void rl_handoff_mark_only(RlOffer *offer);
extern void rl_handoff_attempted(const RlOffer *offer, const RlRequest *req);
extern void rl_handoff_wait_end(const char *key, const char *owner);
extern void rl_handoff_used(RlOffer *offer, const char *owner);
extern void rl_handoff_offer(int slot, int ttl_ms, RlOffer *offer);
extern RlHandoffOutcome rl_handoff_withdraw(int slot, RlHandoff *ho,
											char *owner);
extern void rl_handoff_abandon(int slot);

/* the releasing holder */
extern bool rl_handoff_claim(int holder_slot, const char *resource,
							 const RlReleaseItem *ours);
extern void rl_handoff_run(const RlReleaseItem *ours, const char *resource,
						   bool nothrow, int64_t deadline_us, RlRequest *req);
extern void rl_handoff_abort(void);

/* the wake-up worker, for a holder on another server (handoff_remote.c) */
extern void rl_handoff_remote_nodes(uint64_t nodes);
extern void rl_handoff_remote_heard(int node, const char *key,
									const char *owner, int64 counter,
									uint32 free_nodes,
									int64_t free_since_us);
extern long rl_handoff_remote_due(void);

#endif							/* REDLOCK_HANDOFF_H */
