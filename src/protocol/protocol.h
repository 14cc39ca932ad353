/*-------------------------------------------------------------------------
 *
 * protocol.h
 *	  The Redlock protocol on the nodes, each operation one round of Lua
 *	  scripts sent to every node: acquire and settle (protocol_acquire.c),
 *	  release (protocol_release.c), hand over to a waiter
 *	  (protocol_handoff.c), extend and ask who holds a lock
 *	  (protocol_extend.c); several resources at once, all or none
 *	  (protocol_multi.c); a shared lease (protocol_shared.c); the values
 *	  and keys they are given (protocol_values.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_PROTOCOL_H
#define REDLOCK_PROTOCOL_H

#include "net/nodes.h"

#define RL_RELEASE_CHUNK	256 /* leases released by one command */
#define RL_EXTEND_CHUNK		RL_MAX_ITEMS	/* leases extended by one command */
#define RL_WAIT_OFFERS		16	/* earlier offers of a wait remembered */

typedef enum RlAttempt
{
	RL_ATTEMPT_GRANTED,
	RL_ATTEMPT_CONTENDED,		/* a majority answered, too few granted */
	RL_ATTEMPT_UNAVAILABLE,		/* a majority could not answer */
	RL_ATTEMPT_EXPIRED,			/* granted, but the TTL ran out meanwhile */
	RL_ATTEMPT_QUEUED			/* a handoff refused by a majority that put
								 * the value in the waiters' queue instead:
								 * it is the waiter's offer now */
} RlAttempt;

/* What a granted attempt hands back. */
typedef struct RlGrant
{
	char		owner[RL_OWNER_LEN + 1];
	int64		token;
	int64_t		valid_until_us; /* monotonic clock */
	int			in_row;			/* local handoffs in a row that gave it
								 * (rl_local_turn_over); 0 from the nodes */
} RlGrant;

/* One lease to release: its Redis key and random owner value. */
typedef struct RlReleaseItem
{
	const char *key;
	int			keylen;
	const char *owner;
} RlReleaseItem;

/*
 * A lock call's standing offer to be handed the lock when it is released:
 * the value a releasing holder sets for it.  Its attempts leave it on the
 * nodes that refused them, for holders on other servers; asleep, it also
 * leaves it in the lock table, for holders of this server (lease_handoff.c).
 */
typedef struct RlOffer
{
	char		value[RL_OWNER_LEN + 1];	/* the attempt's own lock value */
	char		offered[RL_OWNER_LEN + 1];	/* the value offered on the
											 * nodes: rl_offer_value() of
											 * value, or "" */
	char		local[RL_OWNER_LEN + 1];	/* offered without: fresh, or "" */
	char		past[RL_WAIT_OFFERS * (RL_OWNER_LEN + 1)];	/* earlier offers
													 * that may still be on a
													 * node, space-separated */
	int64		proposal;		/* the token proposed for both */
	int64_t		since_us;		/* taken before the attempt was sent */
	int			px_ms;			/* how long it stays on a node */
} RlOffer;

/*
 * A release that handed the lock to a waiter: the round's outcome, which
 * the waiter settles as if the attempt were its own.
 */
typedef struct RlHandoff
{
	int64		proposal;		/* the token proposed for the waiter */
	int64_t		start_us;		/* when the round began (monotonic) */
	int			in_row;			/* a local handoff: the local handoffs in a
								 * row, this one included; 0 otherwise */
	int			nnodes;
	RlVote		votes[RL_MAX_NODES];
	int64_t		counters[RL_MAX_NODES];
	uint32		not_asked;		/* bit i: node i was in backoff, not asked */
	int			nqueued;		/* nodes that refused it but queued the
								 * value as an offer (HANDOFF_SCRIPT), with
								 * the offers ahead of it there */
	int32		queued_ahead[RL_MAX_NODES];
} RlHandoff;

/* One lease to extend: its Redis key, random owner value and new TTL. */
typedef struct RlExtendItem
{
	const char *key;
	int			keylen;
	const char *owner;
	int			ttl_ms;
} RlExtendItem;

/*
 * Several resources taken all or none (protocol_multi.c): distinct
 * resources, with their lock keys.
 */
typedef struct RlMultiSet
{
	int			n;				/* 1 .. RL_MAX_MULTI */
	const char *resources[RL_MAX_MULTI];
	const char *keys[RL_MAX_MULTI];
	int			keylens[RL_MAX_MULTI];
} RlMultiSet;

extern int	rl_lock_key(char *buf, const char *resource);
extern int	rl_offer_key(char *buf, const char *resource);
extern RlAttempt rl_proto_acquire(const char *resource, const char *key,
								  int keylen, int ttl_ms, RlOffer *offer,
								  RlGrant *grant, RlRequest *req_out);
extern void rl_proto_abandon_in_flight(void);
extern RlAttempt rl_proto_acquire_multi(const RlMultiSet *set, int ttl_ms,
										bool mark, RlGrant *grant,
										RlRequest *req_out);
extern void rl_proto_abandon_multi_in_flight(void);
extern int	rl_readers_key(char *buf, const char *resource);
extern RlAttempt rl_proto_acquire_shared(const char *resource, const char *key,
										 int keylen, int ttl_ms, bool mark,
										 RlGrant *grant, RlRequest *req_out);
extern void rl_proto_release_one(const char *key, int keylen,
								 const char *owner, bool nothrow);
extern void rl_proto_new_owner(char *owner);
extern void rl_offer_value(char *offer, const char *value);
extern int64 rl_proto_new_proposal(void);
extern void rl_proto_handoff(const RlReleaseItem *ours, const char *resource,
							 const char *waiter_owner, int waiter_ttl_ms,
							 int in_row, bool nothrow, int64_t deadline_us,
							 RlHandoff *out, RlRequest *req);
extern int	rl_offer_life_ms(void);
extern RlAttempt rl_proto_take_handoff(const char *resource, const char *key,
									   int keylen, int ttl_ms,
									   const char *owner, const RlHandoff *ho,
									   RlGrant *grant, RlRequest *req);
extern RlDecision rl_proto_extend(const char *key, int keylen,
								  const char *owner, int ttl_ms,
								  int64_t *started_us, RlRequest *req);
extern void rl_proto_extend_many(const RlExtendItem *items, int nitems,
								 int64_t *started_us, RlDecision *decisions,
								 RlTally *tallies, RlRequest *req);
extern void rl_proto_release(const RlReleaseItem *items, int nitems,
							 bool wait, bool nothrow, int64_t deadline_us,
							 const bool *skip, RlRequest *req);
extern int64_t rl_proto_release_deadline(void);
extern void rl_proto_holder(const char *key, int keylen, RlRequest *req);

#endif							/* REDLOCK_PROTOCOL_H */
