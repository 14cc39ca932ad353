/*-------------------------------------------------------------------------
 *
 * lease_handoff.h
 *	  Handing a released lease straight to a waiter: this backend's part,
 *	  as a waiter and as a releasing holder (lease_handoff.c).  The offers'
 *	  states in the lock table: lock_table.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_HANDOFF_H
#define REDLOCK_LEASE_HANDOFF_H

#include "protocol/protocol.h"

/* the waiter */
extern void rl_handoff_new_offer(int slot, const char *key, RlOffer *offer);
extern void rl_handoff_mark_only(RlOffer *offer);
extern void rl_handoff_attempted(int slot, const RlOffer *offer,
								 const RlRequest *req);
extern void rl_handoff_wait_end(const char *key, const char *owner);
extern void rl_handoff_used(RlOffer *offer, const char *owner);
extern void rl_handoff_requeued(int slot, const char *key, RlOffer *offer,
								const char *value, const RlHandoff *ho);
extern void rl_handoff_offer(int slot, int ttl_ms, RlOffer *offer);
extern void rl_handoff_abandon(int slot);

/* the releasing holder */
extern bool rl_handoff_claim(int holder_slot, const char *resource,
							 const RlReleaseItem *ours, int in_row);
extern void rl_handoff_run(const RlReleaseItem *ours, const char *resource,
						   bool nothrow, int64_t deadline_us, RlRequest *req);
extern void rl_handoff_abort(void);

#endif							/* REDLOCK_LEASE_HANDOFF_H */
