/*-------------------------------------------------------------------------
 *
 * lock_table.h
 *	  The server-wide table of leases held or awaited by every backend, in
 *	  shared memory (needs redlock in shared_preload_libraries).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LOCK_TABLE_H
#define REDLOCK_LOCK_TABLE_H

#include "datatype/timestamp.h"

#include "base/redlock.h"
#include "protocol/protocol.h"

#define RL_SCOPE_SESSION	0x01
#define RL_SCOPE_XACT		0x02

/* What the holder records when its lease is granted. */
typedef struct RlTableGrant
{
	int64		token;
	int			scopes;
	int64_t		valid_until_us;
	int			ttl_ms;
	bool		keep_alive;
	bool		shared;			/* a shared lease */
	const char *owner;
	const char *key;
} RlTableGrant;

/* A keep-alive lease due for extension, as the worker sees it. */
typedef struct RlKeepAlive
{
	int			slot;
	int			pid;
	int			ttl_ms;
	char		owner[RL_OWNER_LEN + 1];
	char		key[RL_KEY_MAX + 1];
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	bool		other_nodes;	/* taken on nodes the worker no longer uses:
								 * marked lost, not extended */
	bool		limit;			/* redlock.keep_alive_limit reached: not
								 * extended, only reported */
	int			limit_s;		/* the holder's redlock.keep_alive_limit */
} RlKeepAlive;

extern void rl_lock_table_init(void);
typedef enum RlWorkerRole
{
	RL_WORKER_KEEPALIVE,
	RL_WORKER_WAKEUP,
	RL_NWORKERS
} RlWorkerRole;

extern void rl_lock_table_wake_worker(RlWorkerRole role);
extern bool rl_lock_table_take_wake(int slot);
extern bool rl_lock_table_enabled(void);
extern uint64_t rl_lock_table_nodes(void);
extern char *rl_node_list_id(uint64_t nodes);
extern int	rl_lock_table_enter(const char *resource, const char *key,
								bool multi, bool shared);
extern void rl_lock_table_granted(int slot, const RlTableGrant *g);
extern void rl_lock_table_update(int slot, int scopes, bool keep_alive);

/* keep-alive and extension rounds: lock_table_keep.c */
extern void rl_lock_table_keep_alive_check(void);
extern void rl_lock_table_keepalive_nodes(uint64_t nodes);
extern void rl_lock_table_worker_gone(void);
extern int64_t rl_lock_table_valid_until(int slot);
extern bool rl_lock_table_limit_reached(int slot);
extern void rl_lock_table_extend_begin(int slot, int ttl_ms);
extern int64_t rl_lock_table_extend_end(int slot, int ttl_ms, bool won);
extern int	rl_lock_table_due(RlKeepAlive *due, int max, int64_t *next_us);
typedef enum RlKeepOutcome
{
	RL_KEEP_EXTENDED,
	RL_KEEP_RETRY,				/* a majority could not answer: try again soon */
	RL_KEEP_LOST				/* a majority answered that it is not ours */
} RlKeepOutcome;

extern bool rl_lock_table_extended(const RlKeepAlive *k, RlKeepOutcome outcome);
extern void rl_lock_table_remove(int slot);
extern bool rl_lock_table_first_waiter(int slot);
extern int64_t rl_lock_table_holder_expiry(const char *key);
extern void rl_lock_table_waiting(int slot);

/* A row of redlock_locks: a slot in use, as copied under the lock. */
typedef struct RlLockRow
{
	int			pid;
	Oid			dbid;
	Oid			userid;			/* the session user */
	bool		granted;
	int64		token;			/* granted: */
	int			scopes;
	TimestampTz granted_at;
	int64_t		valid_until_us;
	bool		keep_alive;
	bool		lost;
	bool		limit_reached;
	TimestampTz waitstart;		/* not granted */
	int			place;			/* not granted: its place in line, 1 next
								 * (rl_lock_table_places) */
	bool		multi;			/* not granted: a multi-resource or
								 * shared call's, which has no place (0) */
	bool		shared;			/* a shared lease's */
	uint64		wait_seq;		/* for the place: */
	uint64_t	nodes;
	int32		queue_ahead;
	char		key[RL_KEY_MAX + 1];
	char		resource[RL_MAX_RESOURCE_LEN + 1];
} RlLockRow;

extern int	rl_lock_table_rows(RlLockRow **rows);

/* a waiter's place in line: lock_table_place.c */
extern void rl_lock_table_queued(int slot, int ahead);
extern void rl_lock_table_places(RlLockRow *rows, int nrows);

/* a waiter's standing offer, and a local handoff: lock_table_handoff.c */

/* What a waiter finds when it withdraws its offer. */
typedef enum RlHandoffOutcome
{
	RL_HANDED_NOTHING,			/* nobody took the offer up */
	RL_HANDED_PENDING,			/* a holder is running the round: wait */
	RL_HANDED_OVER				/* the round's outcome is in *ho */
} RlHandoffOutcome;

/* The offer a releasing holder took up (rl_lock_table_claim_offer). */
typedef struct RlClaim
{
	int			slot;			/* the waiter's */
	uint64		wait_seq;		/* its wait, should the slot be reused */
	int			ttl_ms;			/* the TTL it asked for */
	char		value[RL_OWNER_LEN + 1];	/* the value it offered */
} RlClaim;

extern void rl_lock_table_offer(int slot, int ttl_ms, const char *value);
extern RlHandoffOutcome rl_lock_table_withdraw_offer(int slot, RlHandoff *ho,
													 char *value);
extern bool rl_lock_table_abandon_offer(int slot, char *value, char *key);
extern bool rl_lock_table_claim_offer(int holder_slot, const char *resource,
									  const char *key, RlClaim *claim);
extern bool rl_lock_table_hand_over(const RlClaim *claim, const RlHandoff *ho);

/* a handoff by a holder on another server: lock_table_remote.c */
extern bool rl_handoff_remote_possible(int slot);
extern void rl_handoff_remote_offer(int slot, const RlOffer *offer);
extern void rl_handoff_remote_absent(int slot, uint32 absent);
extern void rl_handoff_remote_not_here(int node, const char *key,
									   const char *value);
extern void rl_handoff_remote_nodes(uint64_t nodes);
extern void rl_handoff_remote_heard(int node, const char *key,
									const char *value, int64 counter,
									uint32 free_nodes,
									int64_t free_since_us);
extern long rl_handoff_remote_due(void);

/* the background workers: lock_table_workers.c */
extern void rl_lock_table_set_worker(RlWorkerRole role, bool running);
extern int	rl_lock_table_awaited_keys(char (*keys)[RL_KEY_MAX + 1], int max);
extern void rl_lock_table_wake_key(const char *key, size_t keylen);

#endif							/* REDLOCK_LOCK_TABLE_H */
