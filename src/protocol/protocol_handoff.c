/*-------------------------------------------------------------------------
 *
 * protocol_handoff.c
 *	  The Redlock protocol for a release that hands the lock to a waiter:
 *	  the holder's round, and the waiter's settling of it as its own.
 *
 * A holder of this server hands the lock to the first local waiter in the
 * script that deletes its value (HANDOFF_SCRIPT), and the waiter finds the
 * round's outcome in the lock table (lock_table_handoff.c).  A holder on
 * another server hands it over in its plain release, to the offer the
 * waiter left on the nodes (RELEASE_HANDOVER_SCRIPT in
 * protocol_release.c), and the waiter's wake-up worker gathers the outcome
 * from the nodes' messages (lock_table_remote.c).
 * Either way the waiter settles it with rl_proto_settle(), like an
 * attempt of its own.  A handoff that reaches its waiter later than a
 * round of its own could have taken (quorum.c, rl_handoff_fresh) is first
 * confirmed on the nodes that handed it over (CONFIRM_SCRIPT): never is a
 * lock granted on counters read longer ago than an acquire's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

/*
 * A release that hands the lock to the next waiter of this server: delete
 * our value (KEYS[1] = ARGV[1], or its offer value, as RELEASE_HANDOVER_SCRIPT
 * does), then take the lock for the waiter exactly as ACQUIRE_SCRIPT does
 * (value ARGV[2], TTL ARGV[3], proposal ARGV[4]); a lock already handed to
 * the waiter's offer on the nodes by a holder on another server counts as
 * taken.  But when our server's turn is over (ARGV[7] = '1': it made its
 * redlock.local_handoffs in a row, rl_local_turn_over) and a waiter of
 * another server waits in the waiters' queue (ARGV[5], offers named
 * ARGV[6] .. value, RL_LUA_QUEUE) ahead of any offer of our waiter, the
 * lock goes to the first such offer instead, as a release on its own
 * server would hand it (published for its wake-up worker).  Our waiter,
 * refused (the lock is someone else's), is queued, as a refused attempt
 * of its own would be: its value is an offer at the end of the queue (or
 * where it already is), with ARGV[8] the offer's lifetime and ARGV[9] the
 * waiters' marker, and the refusal says "QUEUED n", n the live offers
 * ahead of it.  Our offers (our value, or its offer value: a local
 * handoff may have queued our value on a node that refused it) are
 * removed, and the waiter's once it has the lock.  A node in its
 * quarantine (RL_LUA_QUARANTINE) releases ours and refuses the waiter.
 * The turn is the holder's to tell, the same on every
 * node; the first offer of another server is each node's own: nodes whose
 * queues differ (two offers that reached them in different orders) may
 * split the round, which then grants a majority to one waiter or to none,
 * never to two.
 */
static const char HANDOFF_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_QUEUE
RL_LUA_HAND
RL_LUA_ENQUEUE
"local w = 'w' .. string.sub(ARGV[1], 2)\n"
"local q, ep = ARGV[5], ARGV[6]\n"
"local mine = redis.call('GET', KEYS[1])\n"
"if mine == ARGV[1] or mine == w then redis.call('DEL', KEYS[1]) end\n"
"rl_drop(q, ep, w)\n"
"if w ~= ARGV[1] then rl_drop(q, ep, ARGV[1]) end\n"
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local cur = redis.call('GET', KEYS[1])\n"
"if not cur and ARGV[7] == '1' then\n"
"  local srv = rl_srv(ARGV[2])\n"
"  local e = rl_first(q, ep, function(o)\n"
"    return o.v == ARGV[2] or rl_srv(o.v) ~= srv\n"
"  end)\n"
"  if e and e.v ~= ARGV[2] then\n"
"    rl_hand(KEYS[1], q, ep, e)\n"
"    cur = e.v\n"
"  end\n"
"end\n"
"if cur and cur ~= ARGV[2] then\n"
"  local n = rl_enqueue(q, ep, ARGV[9], ARGV[2], ARGV[3], ARGV[4], KEYS[2],\n"
"                       ARGV[8], '')\n"
"  if not n then return false end\n"
"  return {ok = 'QUEUED ' .. n}\n"
"end\n"
"redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
"rl_drop(q, ep, ARGV[2])\n"
"local p = ARGV[4]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

/*
 * A handoff heard late: where KEYS[1] still holds the waiter's value
 * ARGV[1], renew its TTL (ARGV[2]) and read and raise the fencing counter
 * to the proposal ARGV[3], as ACQUIRE_SCRIPT does; elsewhere say no.  The
 * lease's validity then counts from this round, by the waiter's clock.
 */
static const char CONFIRM_SCRIPT[] =
RL_LUA_QUARANTINE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end\n"
"redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local p = ARGV[3]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

/*
 * A holder's release that hands the lock to the next waiter: one round of
 * HANDOFF_SCRIPT, whose outcome goes to the waiter in *out.  Not
 * must-deliver (a replay could grant a waiter that moved on); the caller
 * re-sends a plain release to the nodes that did not answer.  The round
 * waits for every node (or its node_timeout), not just a majority: a node
 * still pending could set the waiter's value after the waiter's own
 * release of the lease (on other connections) has passed it, so the
 * caller withdraws the value there, and the lease is every node that said
 * yes.  in_row: the local handoffs in a row that gave us the lease (0: it
 * came from the nodes, an attempt or a handoff from another server).
 */
void
rl_proto_handoff(const RlReleaseItem *ours, const char *resource,
				 const char *waiter_owner, int waiter_ttl_ms, int in_row,
				 bool nothrow, int64_t deadline_us, RlHandoff *out,
				 RlRequest *req)
{
	const char *argv[14 + RL_EPOCH_ARGS];
	size_t		argvlen[14 + RL_EPOCH_ARGS];
	char		ckey[RL_KEY_MAX + 1];
	char		okey[RL_KEY_MAX + 1];
	char		epre[RL_KEY_MAX + 1];
	char		mkey[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	char		px_buf[16];

	out->proposal = rl_proto_new_proposal();
	out->in_row = in_row + 1;
	rl_proto_lock_call(argv, argvlen, HANDOFF_SCRIPT, sizeof(HANDOFF_SCRIPT) - 1,
					   ours->key, ours->keylen, resource, ckey, ours->owner);
	/*
	 * ARGV: ours, the waiter's, TTL, proposal, the queue's name, the
	 * offers' prefix, whether our server's turn is over, the offer's
	 * lifetime (as a lock call that waits leaves it, rl_offer_life_ms), the
	 * marker
	 */
	argv[6] = waiter_owner;
	argvlen[6] = strlen(waiter_owner);
	argv[7] = ttl_buf;
	argvlen[7] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", waiter_ttl_ms);
	argv[8] = proposal_buf;
	argvlen[8] = rl_format_counter(out->proposal, proposal_buf);
	argv[9] = okey;
	argvlen[9] = rl_offer_key(okey, resource);
	argv[10] = epre;
	argvlen[10] = rl_offer_prefix(epre);
	argv[11] = rl_local_turn_over(in_row, rl_local_handoffs) ? "1" : "0";
	argvlen[11] = 1;
	argv[12] = px_buf;
	argvlen[12] = snprintf(px_buf, sizeof(px_buf), "%d", rl_offer_life_ms());
	argv[13] = mkey;
	argvlen[13] = snprintf(mkey, sizeof(mkey), "%swake:%s", rl_key_prefix,
						   resource);
	rl_proto_request_init(req, RL_REPLY_COUNTER, RL_GOAL_ALL,
						  14 + rl_proto_epoch_args(argv + 14, argvlen + 14),
						  argv, argvlen);
	req->nothrow = nothrow;
	req->deadline_us = deadline_us;

	out->start_us = rl_now_us();
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
	out->nnodes = req->nnodes;
	out->not_asked = 0;
	out->nqueued = 0;
	for (int i = 0; i < req->nnodes; i++)
	{
		out->votes[i] = req->results[i].vote;
		out->counters[i] = req->results[i].counter;
		if (req->results[i].in_backoff)
			out->not_asked |= (uint32) 1 << i;
		if (req->results[i].vote == RL_VOTE_NO && req->results[i].queued)
			out->queued_ahead[out->nqueued++] = req->results[i].queued_ahead;
	}
}

/*
 * Confirm a handoff won on the nodes that said yes (see CONFIRM_SCRIPT);
 * req becomes the confirming round.  Returns when it began.
 */
static int64_t
confirm(const char *resource, const char *key, int keylen, int ttl_ms,
		const char *owner, int64 proposal, RlRequest *req)
{
	const char *argv[8 + RL_EPOCH_ARGS];
	size_t		argvlen[8 + RL_EPOCH_ARGS];
	char		ckey[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	bool		skip[RL_MAX_NODES];
	int64_t		start_us;

	for (int i = 0; i < RL_MAX_NODES; i++)
		skip[i] = i >= req->nnodes || req->results[i].vote != RL_VOTE_YES;
	rl_proto_lock_call(argv, argvlen, CONFIRM_SCRIPT, sizeof(CONFIRM_SCRIPT) - 1,
					   key, keylen, resource, ckey, owner);
	argv[6] = ttl_buf;
	argvlen[6] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[7] = proposal_buf;
	argvlen[7] = rl_format_counter(proposal, proposal_buf);
	rl_proto_request_init(req, RL_REPLY_COUNTER, RL_GOAL_QUORUM,
						  8 + rl_proto_epoch_args(argv + 8, argvlen + 8),
						  argv, argvlen);
	memcpy(req->skip, skip, sizeof(req->skip));
	start_us = rl_now_us();
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
	return start_us;
}

/*
 * The waiter's side of a handoff: settle the attempt a releasing holder
 * made for us with the value owner (see rl_proto_handoff, or a release on
 * another server) as if it were our own.  RL_ATTEMPT_QUEUED: a majority
 * put owner in the waiters' queue instead (nothing is withdrawn).
 */
RlAttempt
rl_proto_take_handoff(const char *resource, const char *key, int keylen,
					  int ttl_ms, const char *owner, const RlHandoff *ho,
					  RlGrant *grant, RlRequest *req)
{
	int64_t		start_us = ho->start_us;
	RlAttempt	result;

	memset(req, 0, sizeof(*req));
	req->reply_kind = RL_REPLY_COUNTER;
	req->nnodes = ho->nnodes;
	for (int i = 0; i < ho->nnodes; i++)
	{
		RlVote		v = ho->votes[i];

		req->results[i].vote = v;
		req->results[i].counter = ho->counters[i];
		req->results[i].in_backoff = (ho->not_asked & ((uint32) 1 << i)) != 0;
		snprintf(req->results[i].detail, sizeof(req->results[i].detail), "%s",
				 v == RL_VOTE_YES ? "granted (handed over at release)" :
				 v == RL_VOTE_NO ? "held by another owner" : "no answer to the releasing holder");
	}
	req->tally = rl_tally(ho->votes, ho->nnodes);
	req->decision = rl_decide(ho->nnodes, req->tally);
	if (req->decision == RL_UNDECIDED)
		req->decision = RL_UNAVAILABLE;

	/*
	 * Refused and queued by a majority (HANDOFF_SCRIPT): the value is an
	 * offer in the waiters' queue, nothing to withdraw; a later release
	 * hands it over.
	 */
	if (req->decision != RL_WON && ho->nqueued >= rl_majority(ho->nnodes))
		return RL_ATTEMPT_QUEUED;

	strlcpy(grant->owner, owner, RL_OWNER_LEN + 1);
	rl_proto_set_in_flight(key, keylen, owner);
	if (req->decision == RL_WON &&
		!rl_handoff_fresh(start_us, rl_now_us(),
						  (int64_t) rl_node_timeout_ms * 1000))
		start_us = confirm(resource, key, keylen, ttl_ms, owner,
						   ho->proposal, req);
	result = rl_proto_settle(resource, key, keylen, ttl_ms, ho->proposal,
							 start_us, true, grant, req);
	grant->in_row = ho->in_row;
	return result;
}

