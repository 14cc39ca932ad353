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
 * When a server started, from the uptime_in_seconds it reported and the
 * moment its answer was read (seen_us): its uptime then was at least
 * uptime_s, so it started at seen_us - uptime_s at the latest.  The latest
 * start is taken, which makes a quarantine counted from it longer, never
 * shorter.  An unknown uptime (< 0) counts as a start at seen_us.
 */
int64_t
rl_server_start_us(int64_t seen_us, int64_t uptime_s)
{
	if (uptime_s < 0)
		return seen_us;
	if (uptime_s > INT64_MAX / 2000000)
		uptime_s = INT64_MAX / 2000000;
	return seen_us - uptime_s * 1000000;	/* may be before the clock's 0 */
}

/*
 * A node showed run_id, its server having started at start_us: record it
 * in memo.  A run_id other than the one recorded is a restart (the server
 * lost what it held unless it persists every write), and its start is
 * recorded; the same run_id keeps what was recorded.  The first sighting
 * (nothing recorded) is no restart: a server that never saw the node before
 * cannot tell.  Returns true when this sighting is a restart.
 */
bool
rl_restart_sighting(RlRestartMemo *memo, const char *run_id, int64_t start_us)
{
	bool		restarted;

	if (run_id == NULL || run_id[0] == '\0' ||
		strncmp(memo->run_id, run_id, RL_RUN_ID_LEN) == 0)
		return false;
	restarted = memo->run_id[0] != '\0';
	memo->restarted = restarted;
	memo->start_us = restarted ? start_us : 0;
	strncpy(memo->run_id, run_id, RL_RUN_ID_LEN);
	memo->run_id[RL_RUN_ID_LEN] = '\0';
	return restarted;
}

/*
 * Until when a node seen to restart stays out of every majority:
 * quarantine_ms after its server's start, so that every lock it held
 * before it lost them has expired everywhere (Redlock's delayed restart).
 * Returns that moment while it is still ahead of now_us, else 0 (not
 * quarantined: no restart seen, the quarantine is over, or it is off).
 */
int64_t
rl_quarantined_until(const RlRestartMemo *memo, int64_t quarantine_ms,
					 int64_t now_us)
{
	int64_t		until;

	if (!memo->restarted || quarantine_ms <= 0)
		return 0;
	until = memo->start_us + quarantine_ms * 1000;
	return now_us < until ? until : 0;
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
