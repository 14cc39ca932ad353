/*-------------------------------------------------------------------------
 *
 * quorum.h
 *	  The Redlock quorum rules and fencing-token choice, as pure functions.
 *
 * Nothing here does I/O or depends on PostgreSQL, so test/unit can check
 * the rules against adversarial orderings directly.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_QUORUM_H
#define REDLOCK_QUORUM_H

#include <stdbool.h>
#include <stdint.h>

/* What one node said in one round. */
typedef enum RlVote
{
	RL_VOTE_PENDING,			/* no answer yet */
	RL_VOTE_YES,				/* granted / done */
	RL_VOTE_NO,					/* answered, but refused (held by another owner) */
	RL_VOTE_FAILED				/* could not answer: down, timed out, error */
} RlVote;

typedef enum RlDecision
{
	RL_UNDECIDED,				/* keep waiting */
	RL_WON,						/* a majority said yes */
	RL_CONTENDED,				/* a majority answered, too few said yes */
	RL_UNAVAILABLE				/* a majority can no longer answer */
} RlDecision;

typedef struct RlTally
{
	int			yes;
	int			no;
	int			failed;
	int			pending;
} RlTally;

/*
 * A round that asks about several items at once (one key each) gets from
 * every node that answers a yes or no per item: bit i is item i's yes.
 */
#define RL_MAX_ITEMS	256		/* items of one multi-item round */
#define RL_ITEM_WORDS	(RL_MAX_ITEMS / 64)

typedef struct RlItemFlags
{
	uint64_t	bits[RL_ITEM_WORDS];
} RlItemFlags;

static inline void
rl_item_flag_set(RlItemFlags *f, int item)
{
	f->bits[item / 64] |= UINT64_C(1) << (item % 64);
}

static inline bool
rl_item_flag(const RlItemFlags *f, int item)
{
	return (f->bits[item / 64] >> (item % 64)) & 1;
}

extern int	rl_majority(int nnodes);
extern RlTally rl_tally(const RlVote *votes, int nvotes);
extern RlDecision rl_decide(int nnodes, RlTally t);
extern RlTally rl_tally_item(const RlVote *votes, const RlItemFlags *flags,
							 int nvotes, int item);
extern int	rl_decide_items(int nnodes, const RlVote *votes,
							const RlItemFlags *flags, int nitems,
							RlTally *tallies, RlDecision *decisions);

extern int64_t rl_drift_us(int64_t ttl_ms, double drift_factor);
extern int64_t rl_validity_us(int64_t ttl_ms, int64_t elapsed_us,
							  double drift_factor);
extern int64_t rl_valid_until_us(int64_t start_us, int64_t ttl_ms,
								 double drift_factor);
extern int64_t rl_gone_from_nodes_us(int64_t valid_until_us, int64_t ttl_ms,
									 double drift_factor);

extern int64_t rl_propose_token(int64_t wall_clock_us, int64_t last_token);
extern bool rl_choose_token(int64_t proposal, const int64_t *counters,
							int ncounters, int64_t *token);
extern bool rl_handoff_fresh(int64_t set_after_us, int64_t now_us,
							 int64_t round_us);

/*
 * A node's epoch: the record, kept on the node itself (the key
 * "<prefix>epoch"), of when its present memory began: the node's own clock
 * (ms since 1970) when a redlock client found it without an epoch (a new
 * node, one restarted without its data, or flushed) or found the epoch
 * written by another server process (restarted from its files, or a replica
 * promoted).  Its value is "SINCE_MS RUN_ID WHY".  Until SINCE_MS plus
 * redlock.restart_quarantine the node may have lost locks that holders
 * still count on, so its vote does not count toward a majority for lock and
 * extend calls (decided on the node, in the same script as the vote; these
 * are the same rules, for what is shown and told).
 */
#define RL_RUN_ID_LEN	40
#define RL_EPOCH_WHY_LEN 15

typedef struct RlEpoch
{
	int64_t		since_ms;		/* the node's clock */
	char		run_id[RL_RUN_ID_LEN + 1];	/* of the process that wrote it */
	char		why[RL_EPOCH_WHY_LEN + 1];	/* "new", "restart", "seeded" */
} RlEpoch;

extern bool rl_parse_epoch(const char *s, size_t len, RlEpoch *epoch);
extern int64_t rl_epoch_quarantine_left_ms(const RlEpoch *epoch,
										   int64_t node_now_ms,
										   int64_t quarantine_ms);
extern const char *rl_epoch_reason(const RlEpoch *epoch);

extern bool rl_parse_counter(const char *s, size_t len, int64_t *value);
extern int	rl_format_counter(int64_t value, char *buf);

#endif							/* REDLOCK_QUORUM_H */
