/*-------------------------------------------------------------------------
 *
 * protocol_acquire.c
 *	  The Redlock protocol for taking a lock: an attempt's round, and the
 *	  settling of a round won (ours, or a releasing holder's handoff to
 *	  us): token choice, write-back and validity, with their Lua scripts.
 *	  (Releasing: protocol_release.c; handing over: protocol_handoff.c;
 *	  extending and asking who holds a lock: protocol_extend.c; the values
 *	  and keys the scripts are given: protocol_values.c.)
 *
 * A lease is taken with the Redlock algorithm: one random owner value is
 * set with NX and a TTL on every node at once, and the lease is granted when
 * a majority accepted it with validity left after subtracting the time the
 * round took and the clock drift allowance.  The same round returns each
 * granting node's fencing counter, from which the token is chosen
 * (quorum.c); in the uncommon case that our proposal was not above every
 * counter, a second round writes the chosen token back to a majority.
 *
 * Releases (protocol_release.c) are owner-checked and must-deliver.  A
 * release that finds a waiter of this server asleep hands the lock to it
 * in the same script (lease_handoff.c, protocol_handoff.c).
 *
 * A waiter on another server is handed the lock by the release script
 * itself: the waiter's refused attempt leaves its offer (a fresh lock value
 * W, its TTL and token proposal) in the waiters' queue beside the lock,
 * "<prefix>wait:<resource>" (RL_LUA_QUEUE), and a marker
 * "<prefix>wake:<resource>", on every node that refused it; a release
 * (protocol_release.c) that finds the marker and W first in the queue sets
 * W in the same script, exactly as an acquire would, and publishes "W
 * counter" instead of announcing a free lock.  The waiter's wake-up worker
 * collects those messages (lock_table_remote.c) and the waiter settles them
 * as its own attempt.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

/*
 * The scripts.  Counters are compared as decimal strings (longer is larger,
 * equal lengths compare bytewise) so that Lua's doubles never round them.
 * Every key and value is an argument; nothing is spliced into the text.
 */
static const char ACQUIRE_SCRIPT[] =
RL_LUA_QUARANTINE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
"  return false\n"
"end\n"
"local p = ARGV[3]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

/*
 * ACQUIRE_SCRIPT for a lock call that waits, with the names of its
 * waiters' marker in ARGV[8], of its waiters' queue in ARGV[7] and the
 * prefix of its offers' names in ARGV[9] (RL_LUA_QUEUE): where the lock is
 * held, leave the marker (so that its release looks at the queue,
 * RELEASE_HANDOVER_SCRIPT) and the offer (value ARGV[4], the TTL, the
 * proposal and the counter's name) in the queue, unless ARGV[4] is '' (a
 * waiter that is not handed the lock over); ARGV[6] is their lifetime
 * (the marker's and the queue's are never shortened).  ARGV[5] lists,
 * separated by spaces, the values of every earlier offer of the same wait
 * that may still be on a node (lease_handoff.c, rl_handoff_new_offer): the
 * new offer takes the place in the queue of the first of them there, the
 * others are removed, and a lock a release handed to one of them after we
 * stopped listening is taken back for this attempt.  A refusal that left
 * the offer says "QUEUED n", n the live offers ahead of it, and is
 * otherwise nil.  The first attempt of a wait (none earlier), when
 * granted, costs nothing more than ACQUIRE_SCRIPT.  A node in its
 * quarantine (RL_LUA_QUARANTINE, the two last arguments) refuses before
 * anything is set or offered.
 */
static const char ACQUIRE_WAITING_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_QUEUE
RL_LUA_ENQUEUE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local ours = ' ' .. ARGV[5] .. ' '\n"
"local q, ep = ARGV[7], ARGV[9]\n"
"local function earlier(v) return string.find(ours, ' ' .. v .. ' ', 1, true) end\n"
"if ARGV[5] ~= '' then\n"
"  local cur = redis.call('GET', KEYS[1])\n"
"  if cur and earlier(cur) then redis.call('DEL', KEYS[1]) end\n"
"end\n"
"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
"  local t = redis.pcall('PTTL', ARGV[8])\n"
"  if type(t) ~= 'number' or t < tonumber(ARGV[6]) then\n"
"    redis.pcall('SET', ARGV[8], '1', 'PX', ARGV[6])\n"
"  end\n"
"  if ARGV[4] == '' then return false end\n"
"  local n = rl_enqueue(q, ep, ARGV[8], ARGV[4], ARGV[2], ARGV[3], KEYS[2],\n"
"                       ARGV[6], ours)\n"
"  if not n then return false end\n"
"  return {ok = 'QUEUED ' .. n}\n"
"end\n"
"if ARGV[5] ~= '' then\n"
"  local vs = redis.pcall('LRANGE', q, 0, -1)\n"
"  if type(vs) == 'table' and not vs.err then\n"
"    for _, v in ipairs(vs) do\n"
"      if earlier(v) then rl_drop(q, ep, v) end\n"
"    end\n"
"  end\n"
"end\n"
"local p = ARGV[3]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

/*
 * The token written back where the lease is still ours: the lock holds our
 * value, or (a shared lease's value, 'r' first) the readers' set ARGV[3]
 * has it.
 */
static const char WRITEBACK_SCRIPT[] =
"if string.sub(ARGV[1], 1, 1) == 'r' then\n"
"  if not redis.call('ZSCORE', ARGV[3], ARGV[1]) then return 0 end\n"
"elseif redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
"  return 0\n"
"end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local t = ARGV[2]\n"
"if #t > #c or (#t == #c and t > c) then redis.call('SET', KEYS[2], t) end\n"
"return 1\n";

/*
 * The acquiring state of a lease: an attempt whose outcome is not settled.
 * If an error interrupts it, the abort path releases what it may have set.
 */
static struct
{
	bool		active;
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		owner[RL_OWNER_LEN + 1];
	bool		offered;		/* it leaves an offer where refused */
} rl_in_flight;

/* From here on an error must not leave the lease of owner behind. */
void
rl_proto_set_in_flight(const char *key, int keylen, const char *owner)
{
	memcpy(rl_in_flight.key, key, keylen + 1);
	rl_in_flight.keylen = keylen;
	memcpy(rl_in_flight.owner, owner, RL_OWNER_LEN + 1);
	rl_in_flight.offered = false;
	rl_in_flight.active = true;
}

/*
 * The end of an attempt whose round has run, ours or a releasing holder's
 * handoff (rl_in_flight holds its owner): choose the token, write it back
 * where our proposal was not above a granting node's counter, and check
 * the validity left.  On failure everything the attempt may have set is
 * released.
 */
RlAttempt
rl_proto_settle(const char *resource, const char *key, int keylen, int ttl_ms,
				int64 proposal, int64_t start_us, bool handed,
				RlGrant *grant, RlRequest *req)
{
	int64		token;
	RlAttempt	result;
	bool		unset[RL_MAX_NODES] = {0};
	bool		shared = grant->owner[0] == 'r';

	/*
	 * A shared lease's attempt is withdrawn by the release script, which
	 * also frees the lock where it was the last reader
	 */
	bool		announce = handed || req->decision == RL_WON || shared;

	/*
	 * Where the round was refused or not sent (a node in backoff, one not
	 * asked: asked_us 0), nothing of ours is set.  But
	 * a value handed over was an offer, which may still wait on a node that
	 * said no (a local holder's round leaves it where it fails; a remote
	 * one's no may be older than the offer): it is withdrawn everywhere, or
	 * a later release there would hand it a lock nobody releases.
	 */
	for (int i = 0; i < req->nnodes; i++)
		unset[i] = !handed && (req->results[i].vote == RL_VOTE_NO ||
							   req->results[i].in_backoff ||
							   (req->results[i].vote == RL_VOTE_FAILED &&
								req->results[i].asked_us == 0));

	if (req->decision != RL_WON)
	{
		result = (req->decision == RL_CONTENDED) ? RL_ATTEMPT_CONTENDED
			: RL_ATTEMPT_UNAVAILABLE;
		goto failed;
	}

	if (!rl_proto_token_of(req, proposal, &token))
	{
		const char *argv[8];
		size_t		argvlen[8];
		char		ckey[RL_KEY_MAX + 1];
		char		rkey[RL_KEY_MAX + 1];
		char		token_buf[24];

		/* write the token back where we hold the lock */
		rl_proto_lock_call(argv, argvlen, WRITEBACK_SCRIPT, sizeof(WRITEBACK_SCRIPT) - 1,
						   key, keylen, resource, ckey, grant->owner);
		argv[6] = token_buf;
		argvlen[6] = rl_format_counter(token, token_buf);
		argv[7] = rkey;
		argvlen[7] = shared ? rl_readers_key(rkey, resource) : 0;
		result = rl_proto_writeback(req, 8, argv, argvlen);
		if (result != RL_ATTEMPT_GRANTED)
			goto failed;
	}

	result = rl_proto_grant(grant, token, ttl_ms, start_us);
	if (result != RL_ATTEMPT_GRANTED)
		goto failed;
	rl_in_flight.active = false;
	return RL_ATTEMPT_GRANTED;

failed:
	/* where something of ours may be set: none at all when not sent */
	for (int i = 0; i < req->nnodes; i++)
	{
		if (!unset[i])
		{
			rl_proto_withdraw_attempt(key, keylen, grant->owner, unset,
									  announce, rl_in_flight.offered);
			break;
		}
	}
	rl_in_flight.active = false;
	return result;
}

/*
 * One Redlock attempt on key.  On success fills grant.  On failure
 * everything this attempt may have set is released, and req_out describes
 * what each node said.  offer: NULL, or the standing offer of a lock call
 * that waits (rl_handoff_new_offer: the attempt's value and proposal, and
 * the offer's value, or "" for a waiter that only asks to be woken:
 * rl_handoff_mark_only), which is left where the lock is held
 * (ACQUIRE_WAITING_SCRIPT); a holder on another server then hands the lock
 * over in its release.  A lock held by the offer's value on a node our
 * lease did not need is ours: our release removes it
 * (RELEASE_HANDOVER_SCRIPT).
 */
RlAttempt
rl_proto_acquire(const char *resource, const char *key, int keylen,
				 int ttl_ms, RlOffer *offer, RlGrant *grant,
				 RlRequest *req_out)
{
	const char *argv[14 + RL_EPOCH_ARGS];
	size_t		argvlen[14 + RL_EPOCH_ARGS];
	char		ckey[RL_KEY_MAX + 1];
	char		okey[RL_KEY_MAX + 1];
	char		mkey[RL_KEY_MAX + 1];
	char		epre[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	char		px_buf[16];
	int64		proposal;
	int64_t		start_us;
	int			argc = 8;

	if (offer != NULL)
	{
		memcpy(grant->owner, offer->value, RL_OWNER_LEN + 1);
		proposal = offer->proposal;
	}
	else
	{
		rl_proto_new_owner(grant->owner);
		proposal = rl_proto_new_proposal();
	}

	rl_proto_lock_call(argv, argvlen, ACQUIRE_SCRIPT, sizeof(ACQUIRE_SCRIPT) - 1,
					   key, keylen, resource, ckey, grant->owner);
	argv[6] = ttl_buf;
	argvlen[6] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[7] = proposal_buf;
	argvlen[7] = rl_format_counter(proposal, proposal_buf);
	if (offer != NULL)
	{
		/*
		 * ARGV: ours, TTL, proposal, the offer's value (or ''), earlier,
		 * life, the queue's and the marker's names, the offers' prefix
		 */
		argv[1] = ACQUIRE_WAITING_SCRIPT;
		argvlen[1] = sizeof(ACQUIRE_WAITING_SCRIPT) - 1;
		argv[8] = offer->offered;
		argvlen[8] = strlen(offer->offered);
		argv[9] = offer->past;
		argvlen[9] = strlen(offer->past);
		argv[10] = px_buf;
		argvlen[10] = snprintf(px_buf, sizeof(px_buf), "%d", offer->px_ms);
		argv[11] = okey;
		argvlen[11] = rl_offer_key(okey, resource);
		argv[12] = mkey;
		argvlen[12] = snprintf(mkey, sizeof(mkey), "%swake:%s", rl_key_prefix,
							   resource);
		argv[13] = epre;
		argvlen[13] = rl_offer_prefix(epre);
		argc = 14;
	}
	argc += rl_proto_epoch_args(argv + argc, argvlen + argc);
	rl_proto_request_init(req_out, RL_REPLY_COUNTER, RL_GOAL_QUORUM, argc,
						  argv, argvlen);

	rl_proto_set_in_flight(key, keylen, grant->owner);
	rl_in_flight.offered = offer != NULL && offer->offered[0] != '\0';
	start_us = rl_now_us();
	rl_nodes_run(req_out);
	req_out->argv = NULL;
	req_out->argvlen = NULL;

	return rl_proto_settle(resource, key, keylen, ttl_ms, proposal, start_us,
						   false, grant, req_out);
}

/* Abort path: release what an interrupted attempt may have set. */
void
rl_proto_abandon_in_flight(void)
{
	if (rl_in_flight.active)
	{
		rl_in_flight.active = false;
		rl_proto_release_one(rl_in_flight.key, rl_in_flight.keylen,
					   rl_in_flight.owner, true);
	}
}

