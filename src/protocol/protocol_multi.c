/*-------------------------------------------------------------------------
 *
 * protocol_multi.c
 *	  The Redlock protocol for several resources at once, all or none: one
 *	  script per node over every key of the set, so that a node votes for
 *	  the whole set or for nothing, and the settling of such a round (one
 *	  token above every counter of the set, write-back, validity, or the
 *	  withdrawal of a round not won).
 *
 * A node sets the lock of every resource of the set with the same value
 * and TTL, or none of them when any is held (and then leaves the waiters'
 * marker "<prefix>wake:<resource>" beside each held one for a call that
 * waits, so that its release announces it).  The set is granted when a
 * majority of the nodes granted the whole set with validity left, as one
 * lock would be.  The node returns the greatest of the set's fencing
 * counters, read before any of them is raised; the token is chosen
 * strictly above every counter a granting node returned (quorum.c), and
 * raised to on each counter of the set where it was not already, so that it is
 * strictly greater than every earlier grant of each resource of the set:
 * one token, valid for each of its resources.  A round not won is
 * withdrawn on every node that may have set it, as a single attempt's is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

/*
 * KEYS[1..n]: the locks, KEYS[n+1..2n]: their fencing counters (two
 * resources may share one).  ARGV: the value, the TTL, the proposal, n,
 * the markers' lifetime ('' for a call that does not wait), then (with a
 * lifetime) the n markers' names, then the quarantine's two arguments.
 * Returns the greatest counter before the grant, or nil when any lock of
 * the set is held (nothing set then, but markers).
 */
static const char ACQUIRE_MULTI_SCRIPT[] =
RL_LUA_QUARANTINE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local n = tonumber(ARGV[4])\n"
"local life = ARGV[5]\n"
"local held = false\n"
"for i = 1, n do\n"
"  if redis.call('EXISTS', KEYS[i]) == 1 then\n"
"    held = true\n"
"    if life ~= '' then\n"
"      local m = ARGV[5 + i]\n"
"      local t = redis.pcall('PTTL', m)\n"
"      if type(t) ~= 'number' or t < tonumber(life) then\n"
"        redis.pcall('SET', m, '1', 'PX', life)\n"
"      end\n"
"    end\n"
"  end\n"
"end\n"
"if held then return false end\n"
"local c = '0'\n"
"for i = n + 1, 2 * n do\n"
"  local ci = redis.call('GET', KEYS[i]) or '0'\n"
"  if #ci > #c or (#ci == #c and ci > c) then c = ci end\n"
"end\n"
"local p = ARGV[3]\n"
"for i = 1, n do\n"
"  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])\n"
"  local ci = redis.call('GET', KEYS[n + i]) or '0'\n"
"  if #p > #ci or (#p == #ci and p > ci) then redis.call('SET', KEYS[n + i], p) end\n"
"end\n"
"return c\n";

/* The token written back where every lock of the set is still ours. */
static const char WRITEBACK_MULTI_SCRIPT[] =
"local n = tonumber(ARGV[2])\n"
"for i = 1, n do\n"
"  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end\n"
"end\n"
"local t = ARGV[3]\n"
"for i = n + 1, 2 * n do\n"
"  local c = redis.call('GET', KEYS[i]) or '0'\n"
"  if #t > #c or (#t == #c and t > c) then redis.call('SET', KEYS[i], t) end\n"
"end\n"
"return 1\n";

/* A round not won, withdrawn: each lock of the set that holds ARGV[1]. */
static const char WITHDRAW_MULTI_SCRIPT[] =
"local n = 0\n"
"for i = 1, #KEYS do\n"
"  if redis.call('GET', KEYS[i]) == ARGV[1] then\n"
"    n = n + redis.call('DEL', KEYS[i])\n"
"  end\n"
"end\n"
"return n\n";

/*
 * The attempt in flight: if an error interrupts it, the abort path
 * withdraws what it may have set.
 */
static struct
{
	bool		active;
	int			n;
	char		keys[RL_MAX_MULTI][RL_KEY_MAX + 1];
	int			keylens[RL_MAX_MULTI];
	char		owner[RL_OWNER_LEN + 1];
} rl_multi_in_flight;

/* EVAL, the script, 2n, the n locks and the n counters */
static int
multi_call(const char **argv, size_t *argvlen, const char *script,
		   size_t scriptlen, const RlMultiSet *set, char *numkeys,
		   char (*ckeys)[RL_KEY_MAX + 1])
{
	int			n = set->n;

	snprintf(numkeys, 16, "%d", 2 * n);
	rl_proto_eval_header(argv, argvlen, script, scriptlen, numkeys);
	for (int i = 0; i < n; i++)
	{
		argv[3 + i] = set->keys[i];
		argvlen[3 + i] = set->keylens[i];
		argv[3 + n + i] = ckeys[i];
		argvlen[3 + n + i] = rl_counter_key(ckeys[i], set->resources[i]);
	}
	return 3 + 2 * n;
}

/*
 * Withdraw a round not won, without waiting, on every node but those in
 * skip; announced (a release, which wakes the waiters) when the set was
 * held on a majority meanwhile.  Must-deliver.  Raises nothing with
 * nothrow.
 */
static void
withdraw(const RlMultiSet *set, const char *owner, const bool *skip,
		 bool announce, bool nothrow)
{
	RlRequest	req;

	if (announce)
	{
		RlReleaseItem items[RL_MAX_MULTI];

		for (int i = 0; i < set->n; i++)
		{
			items[i].key = set->keys[i];
			items[i].keylen = set->keylens[i];
			items[i].owner = owner;
		}
		rl_proto_release(items, set->n, false, nothrow, 0, skip, &req);
		return;
	}
	else
	{
		const char *argv[4 + RL_MAX_MULTI];
		size_t		argvlen[4 + RL_MAX_MULTI];
		char		numkeys[16];

		snprintf(numkeys, sizeof(numkeys), "%d", set->n);
		rl_proto_eval_header(argv, argvlen, WITHDRAW_MULTI_SCRIPT,
							 sizeof(WITHDRAW_MULTI_SCRIPT) - 1, numkeys);
		for (int i = 0; i < set->n; i++)
		{
			argv[3 + i] = set->keys[i];
			argvlen[3 + i] = set->keylens[i];
		}
		argv[3 + set->n] = owner;
		argvlen[3 + set->n] = strlen(owner);
		rl_proto_request_init(&req, RL_REPLY_COUNT, RL_GOAL_ANSWERS,
							  4 + set->n, argv, argvlen);
		req.must_deliver = true;
		req.nothrow = nothrow;
		if (skip != NULL)
			memcpy(req.skip, skip, sizeof(req.skip));
		rl_nodes_send(&req);
	}
}

/*
 * The end of a round over the set: the token, its write-back where the
 * proposal was not above a granting node's counter, the validity; or the
 * round withdrawn.
 */
static RlAttempt
settle(const RlMultiSet *set, int ttl_ms, int64 proposal, int64_t start_us,
	   RlGrant *grant, RlRequest *req)
{
	int64		token;
	RlAttempt	result;
	bool		unset[RL_MAX_NODES] = {0};
	bool		any_set = false;

	/* where the round was refused or not sent, nothing of ours is set */
	for (int i = 0; i < req->nnodes; i++)
	{
		unset[i] = (req->results[i].vote == RL_VOTE_NO ||
					req->results[i].in_backoff ||
					(req->results[i].vote == RL_VOTE_FAILED &&
					 req->results[i].asked_us == 0));
		any_set |= !unset[i];
	}

	if (req->decision != RL_WON)
	{
		result = (req->decision == RL_CONTENDED) ? RL_ATTEMPT_CONTENDED
			: RL_ATTEMPT_UNAVAILABLE;
		goto failed;
	}

	if (!rl_proto_token_of(req, proposal, &token))
	{
		const char *argv[6 + 2 * RL_MAX_MULTI];
		size_t		argvlen[6 + 2 * RL_MAX_MULTI];
		char		ckeys[RL_MAX_MULTI][RL_KEY_MAX + 1];
		char		numkeys[16];
		char		n_buf[16];
		char		token_buf[24];
		int			argc;

		argc = multi_call(argv, argvlen, WRITEBACK_MULTI_SCRIPT,
						  sizeof(WRITEBACK_MULTI_SCRIPT) - 1, set, numkeys,
						  ckeys);
		argv[argc] = grant->owner;
		argvlen[argc++] = strlen(grant->owner);
		argv[argc] = n_buf;
		argvlen[argc++] = snprintf(n_buf, sizeof(n_buf), "%d", set->n);
		argv[argc] = token_buf;
		argvlen[argc++] = rl_format_counter(token, token_buf);
		result = rl_proto_writeback(req, argc, argv, argvlen);
		if (result != RL_ATTEMPT_GRANTED)
			goto failed;
	}

	result = rl_proto_grant(grant, token, ttl_ms, start_us);
	if (result != RL_ATTEMPT_GRANTED)
		goto failed;
	rl_multi_in_flight.active = false;
	return RL_ATTEMPT_GRANTED;

failed:
	if (any_set)
		withdraw(set, grant->owner, unset,
				 req->decision == RL_WON, false);
	rl_multi_in_flight.active = false;
	return result;
}

/*
 * One all-or-none attempt on the set (its resources distinct, their keys
 * filled in).  mark: a call that waits, whose refusal leaves the waiters'
 * marker beside each lock held, so that its release is announced to the
 * wake-up workers.  Granted: grant has the value (the same on every key)
 * and the token (valid for each resource).  Otherwise everything the
 * attempt may have set is withdrawn, and req_out describes what each node
 * said.
 */
RlAttempt
rl_proto_acquire_multi(const RlMultiSet *set, int ttl_ms, bool mark,
					   RlGrant *grant, RlRequest *req_out)
{
	const char *argv[8 + 3 * RL_MAX_MULTI + RL_EPOCH_ARGS];
	size_t		argvlen[8 + 3 * RL_MAX_MULTI + RL_EPOCH_ARGS];
	char		ckeys[RL_MAX_MULTI][RL_KEY_MAX + 1];
	char		mkeys[RL_MAX_MULTI][RL_KEY_MAX + 1];
	char		numkeys[16];
	char		ttl_buf[16];
	char		proposal_buf[24];
	char		n_buf[16];
	char		life_buf[16];
	int64		proposal;
	int64_t		start_us;
	int			argc;

	Assert(set->n >= 1 && set->n <= RL_MAX_MULTI);
	rl_proto_new_owner(grant->owner);
	proposal = rl_proto_new_proposal();

	argc = multi_call(argv, argvlen, ACQUIRE_MULTI_SCRIPT,
					  sizeof(ACQUIRE_MULTI_SCRIPT) - 1, set, numkeys, ckeys);
	argv[argc] = grant->owner;
	argvlen[argc++] = strlen(grant->owner);
	argv[argc] = ttl_buf;
	argvlen[argc++] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[argc] = proposal_buf;
	argvlen[argc++] = rl_format_counter(proposal, proposal_buf);
	argv[argc] = n_buf;
	argvlen[argc++] = snprintf(n_buf, sizeof(n_buf), "%d", set->n);
	argv[argc] = life_buf;
	argvlen[argc++] = mark ?
		snprintf(life_buf, sizeof(life_buf), "%d", rl_offer_life_ms()) : 0;
	life_buf[argvlen[argc - 1]] = '\0';
	if (mark)
	{
		for (int i = 0; i < set->n; i++)
		{
			argv[argc] = mkeys[i];
			argvlen[argc++] = snprintf(mkeys[i], RL_KEY_MAX + 1, "%swake:%s",
									   rl_key_prefix, set->resources[i]);
		}
	}
	argc += rl_proto_epoch_args(argv + argc, argvlen + argc);
	rl_proto_request_init(req_out, RL_REPLY_COUNTER, RL_GOAL_QUORUM, argc,
						  argv, argvlen);

	/* from here on an error must not leave the set behind */
	for (int i = 0; i < set->n; i++)
	{
		memcpy(rl_multi_in_flight.keys[i], set->keys[i], set->keylens[i] + 1);
		rl_multi_in_flight.keylens[i] = set->keylens[i];
	}
	rl_multi_in_flight.n = set->n;
	memcpy(rl_multi_in_flight.owner, grant->owner, RL_OWNER_LEN + 1);
	rl_multi_in_flight.active = true;

	start_us = rl_now_us();
	rl_nodes_run(req_out);
	req_out->argv = NULL;
	req_out->argvlen = NULL;

	return settle(set, ttl_ms, proposal, start_us, grant, req_out);
}

/* Abort path: withdraw what an interrupted attempt may have set. */
void
rl_proto_abandon_multi_in_flight(void)
{
	RlMultiSet	set;

	if (!rl_multi_in_flight.active)
		return;
	rl_multi_in_flight.active = false;
	set.n = rl_multi_in_flight.n;
	for (int i = 0; i < set.n; i++)
	{
		set.resources[i] = NULL;	/* not needed to withdraw */
		set.keys[i] = rl_multi_in_flight.keys[i];
		set.keylens[i] = rl_multi_in_flight.keylens[i];
	}
	/* announced: its round may have been won meanwhile */
	withdraw(&set, rl_multi_in_flight.owner, NULL, true, true);
}
