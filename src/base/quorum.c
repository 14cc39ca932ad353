/*-------------------------------------------------------------------------
 *
 * quorum.c
 *	  The Redlock quorum rules and fencing-token choice, as pure functions.
 *
 * Token safety in short: a grant's token T is present (as a lower bound of
 * the node's counter) on a majority of nodes before the grant is reported.
 * Any later grant needs its own majority, which shares at least one node
 * with T's majority; that node reports a counter >= T, and the new token is
 * chosen strictly greater than every counter reported.  Counters never go
 * down except when a node loses its data; proposals are taken from the
 * wall clock in microseconds so that tokens stay ahead of old ones even then
 * while clocks move forward.
 *
 *-------------------------------------------------------------------------
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/quorum.h"

#define RL_DRIFT_CONSTANT_US	2000	/* Redis expiry precision, 1-2 ms */
#define RL_REACH_NODES_US		5000	/* a little for a key to reach the
										 * nodes (rl_gone_from_nodes_us) */

int
rl_majority(int nnodes)
{
	return nnodes / 2 + 1;
}

RlTally
rl_tally(const RlVote *votes, int nvotes)
{
	RlTally		t = {0, 0, 0, 0};

	for (int i = 0; i < nvotes; i++)
	{
		switch (votes[i])
		{
			case RL_VOTE_YES:
				t.yes++;
				break;
			case RL_VOTE_NO:
				t.no++;
				break;
			case RL_VOTE_FAILED:
				t.failed++;
				break;
			case RL_VOTE_PENDING:
				t.pending++;
				break;
		}
	}
	return t;
}

/*
 * Decide a round as soon as its outcome is certain.  Losing is reported as
 * contention only when a majority did answer, and as unavailability only
 * when a majority can no longer answer, so the two are never confused; in
 * between we keep waiting for the pending nodes.
 */
RlDecision
rl_decide(int nnodes, RlTally t)
{
	int			majority = rl_majority(nnodes);

	if (t.yes >= majority)
		return RL_WON;
	if (t.yes + t.pending >= majority)
		return RL_UNDECIDED;
	if (t.yes + t.no >= majority)
		return RL_CONTENDED;
	if (t.yes + t.no + t.pending < majority)
		return RL_UNAVAILABLE;
	return RL_UNDECIDED;
}

/*
 * One item of a multi-item round: a node that answered the round (voted
 * yes) votes yes or no on the item by its flag; any other vote (pending,
 * failed, or a no to the whole round) stands for every item alike.
 */
RlTally
rl_tally_item(const RlVote *votes, const RlItemFlags *flags, int nvotes,
			  int item)
{
	RlTally		t = rl_tally(votes, nvotes);

	for (int i = 0; i < nvotes; i++)
	{
		if (votes[i] == RL_VOTE_YES && !rl_item_flag(&flags[i], item))
		{
			t.yes--;
			t.no++;
		}
	}
	return t;
}

/*
 * Decide every item of a multi-item round by the rules of a single round,
 * each on its own.  tallies and decisions (nitems each) may be NULL.
 * Returns how many items are still undecided.
 */
int
rl_decide_items(int nnodes, const RlVote *votes, const RlItemFlags *flags,
				int nitems, RlTally *tallies, RlDecision *decisions)
{
	int			undecided = 0;

	for (int item = 0; item < nitems; item++)
	{
		RlTally		t = rl_tally_item(votes, flags, nnodes, item);
		RlDecision	d = rl_decide(nnodes, t);

		if (d == RL_UNDECIDED)
			undecided++;
		if (tallies)
			tallies[item] = t;
		if (decisions)
			decisions[item] = d;
	}
	return undecided;
}

int64_t
rl_drift_us(int64_t ttl_ms, double drift_factor)
{
	return (int64_t) (ttl_ms * 1000.0 * drift_factor) + RL_DRIFT_CONSTANT_US;
}

/* Remaining validity of a lease: TTL - elapsed - drift. */
int64_t
rl_validity_us(int64_t ttl_ms, int64_t elapsed_us, double drift_factor)
{
	return ttl_ms * 1000 - elapsed_us - rl_drift_us(ttl_ms, drift_factor);
}

/*
 * The end of the validity of a lease set (or extended) with TTL ttl_ms by
 * a round that began at start_us, on the same clock: start + TTL - drift.
 */
int64_t
rl_valid_until_us(int64_t start_us, int64_t ttl_ms, double drift_factor)
{
	return start_us + ttl_ms * 1000 - rl_drift_us(ttl_ms, drift_factor);
}

/*
 * When a lease valid until valid_until_us (its TTL ttl_ms) has surely
 * expired on the nodes that set it: its validity, plus the drift allowance
 * taken off it, plus RL_REACH_NODES_US for the time its key took to reach
 * them.
 */
int64_t
rl_gone_from_nodes_us(int64_t valid_until_us, int64_t ttl_ms,
					  double drift_factor)
{
	return valid_until_us + rl_drift_us(ttl_ms, drift_factor) +
		RL_REACH_NODES_US;
}

/*
 * Propose a token: the wall clock in microseconds, or one more than the
 * largest token this backend has seen if that is larger.
 */
int64_t
rl_propose_token(int64_t wall_clock_us, int64_t last_token)
{
	if (last_token < INT64_MAX && last_token + 1 > wall_clock_us)
		return last_token + 1;
	return wall_clock_us;
}

/*
 * May a lock handed over to a waiter be granted on what the releasing
 * round said, with the counters it read?  Only while that is as fresh as a
 * plain acquire's own round: at most round_us (one node_timeout) since the
 * earliest moment the lock can have been set (set_after_us, by the
 * waiter's clock).  Later, the lock may have expired meanwhile on a node
 * whose clock ran ahead, and another grant have raised the counter there
 * above the token the round would give: the waiter must first confirm on
 * the nodes that the lock is still its own, and read their counters now.
 */
bool
rl_handoff_fresh(int64_t set_after_us, int64_t now_us, int64_t round_us)
{
	return now_us - set_after_us <= round_us;
}

/*
 * Given the counters the granting nodes had before this grant, choose the
 * token.  Returns true when the proposal stands: it was strictly greater than
 * every counter, and the acquire script has already raised each granting
 * node's counter to it.  Otherwise *token is one more than the largest
 * counter and must be written back to a majority before it is handed out.
 * Returns false with *token = -1 when no greater token exists.
 */
bool
rl_choose_token(int64_t proposal, const int64_t *counters, int ncounters,
				int64_t *token)
{
	int64_t		max = 0;

	for (int i = 0; i < ncounters; i++)
		if (counters[i] > max)
			max = counters[i];

	if (proposal > max)
	{
		*token = proposal;
		return true;
	}
	*token = (max == INT64_MAX) ? -1 : max + 1;
	return false;
}

/*
 * Parse a node's epoch, "SINCE_MS RUN_ID WHY" (RUN_ID may be empty: "SINCE_MS
 * \ WHY" with two spaces).  False, with *epoch zeroed, when it is not one.
 */
bool
rl_parse_epoch(const char *s, size_t len, RlEpoch *epoch)
{
	int64_t		since;
	size_t		i = 0;
	size_t		start;

	memset(epoch, 0, sizeof(*epoch));
	while (i < len && s[i] != ' ')
		i++;
	if (i == len || !rl_parse_counter(s, i, &since))
		return false;
	start = ++i;
	while (i < len && s[i] != ' ')
		i++;
	if (i == len || i - start > RL_RUN_ID_LEN)
		return false;
	memcpy(epoch->run_id, s + start, i - start);
	start = ++i;
	if (len - start == 0 || len - start > RL_EPOCH_WHY_LEN)
		return false;
	for (size_t k = start; k < len; k++)
		if (s[k] < 'a' || s[k] > 'z')
			return false;
	memcpy(epoch->why, s + start, len - start);
	epoch->since_ms = since;
	return true;
}

/*
 * How long the node stays out of every majority, at node_now_ms on its own
 * clock: until since_ms + quarantine_ms.  0 when that has passed or the
 * quarantine is off.  A clock that went back before since_ms counts as no
 * time passed.
 */
int64_t
rl_epoch_quarantine_left_ms(const RlEpoch *epoch, int64_t node_now_ms,
							int64_t quarantine_ms)
{
	int64_t		passed;

	if (quarantine_ms <= 0)
		return 0;
	passed = node_now_ms - epoch->since_ms;
	if (passed < 0)
		passed = 0;
	return passed < quarantine_ms ? quarantine_ms - passed : 0;
}

/* Why the epoch began, in words for a DETAIL or a view. */
const char *
rl_epoch_reason(const RlEpoch *epoch)
{
	if (strcmp(epoch->why, "new") == 0)
		return "the node had no epoch (it is new, restarted without its data, or was flushed)";
	if (strcmp(epoch->why, "restart") == 0)
		return "another server process answers than the one that wrote the epoch (the node restarted from its files, or a replica took over)";
	if (strcmp(epoch->why, "seeded") == 0)
		return "the epoch was written by an operator";
	return "unknown";
}

/*
 * A waiter's place in the waiters' queue across the nodes (the order of
 * the servers' offers, RL_LUA_QUEUE): ahead[i] offers are ahead of its
 * offer on the i-th of the nqueued nodes that queued it.  It is handed the
 * lock once a majority of the nnodes nodes hand it over, so what counts is
 * the majority-th smallest: on a majority of the nodes at most that many
 * are ahead of it.  -1 when fewer than a majority queued it (it does not
 * know its place).
 */
int
rl_queue_ahead(const int32_t *ahead, int nqueued, int nnodes)
{
	int			k = rl_majority(nnodes);
	int32_t		sorted[64];

	if (nqueued < k || nqueued > 64)
		return -1;
	memcpy(sorted, ahead, sizeof(int32_t) * nqueued);
	for (int i = 1; i < nqueued; i++)
		for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--)
		{
			int32_t		t = sorted[j];

			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	return sorted[k - 1];
}

/*
 * Is a server's turn with a lock over?  in_row local handoffs in a row
 * (releases that handed the lock to a waiter of the same server) gave the
 * lease being released; k is redlock.local_handoffs.  Once it is over, a
 * release hands the lock to a waiter of another server in the waiters'
 * queue, if one waits: so while one waits, at most k local handoffs in a
 * row go before it.
 */
bool
rl_local_turn_over(int in_row, int k)
{
	return in_row >= k;
}

/*
 * Counters travel as decimal strings so that Lua's doubles never touch them.
 * Accept only canonical non-negative decimals that fit in int64.
 */
bool
rl_parse_counter(const char *s, size_t len, int64_t *value)
{
	uint64_t	v = 0;

	if (len == 0 || len > 19 || (len > 1 && s[0] == '0'))
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t) (s[i] - '0');
	}
	if (v > (uint64_t) INT64_MAX)
		return false;
	*value = (int64_t) v;
	return true;
}

/* buf must hold 21 bytes; returns the length written */
int
rl_format_counter(int64_t value, char *buf)
{
	return snprintf(buf, 21, "%lld", (long long) value);
}
