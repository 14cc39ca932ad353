/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The Redlock protocol for a lock changing hands: acquire, release and
 *	  the handoff of a released lock to a waiter, with their Lua scripts.
 *	  (Extending and asking who holds a lock: protocol_extend.c.)
 *
 * A lease is taken with the Redlock algorithm: one random owner value is
 * set with NX and a TTL on every node at once, and the lease is granted when
 * a majority accepted it with validity left after subtracting the time the
 * round took and the clock drift allowance.  The same round returns each
 * granting node's fencing counter, from which the token is chosen
 * (quorum.c); in the uncommon case that our proposal was not above every
 * counter, a second round writes the chosen token back to a majority.
 *
 * Releases are owner-checked and must-deliver: a node that cannot take one
 * now gets it when it can.  One release command carries up to
 * RL_RELEASE_CHUNK leases, so a commit that ends hundreds of leases is one
 * round trip.  A release that finds a waiter of this server asleep hands
 * the lock to it in the same script (handoff.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "protocol_internal.h"
#include "stats.h"

#define RL_COUNTER_KEY_SUFFIX "token-counter:"
#define RL_COUNTER_STRIPES	64	/* fixed: never grows with resources */

/*
 * The scripts.  Counters are compared as decimal strings (longer is larger,
 * equal lengths compare bytewise) so that Lua's doubles never round them.
 * Every key and value is an argument; nothing is spliced into the text.
 */
static const char ACQUIRE_SCRIPT[] =
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
"  return false\n"
"end\n"
"local p = ARGV[3]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

/*
 * A release that hands the lock to the next waiter of this server: delete
 * our value (KEYS[1] = ARGV[1]), then take the lock for the waiter exactly
 * as ACQUIRE_SCRIPT does (value ARGV[2], TTL ARGV[3], proposal ARGV[4]).
 * Nothing is published: the lock is not free.
 */
static const char HANDOFF_SCRIPT[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then\n"
"  return false\n"
"end\n"
"local p = ARGV[4]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[2], p) end\n"
"return c\n";

static const char WRITEBACK_SCRIPT[] =
"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local t = ARGV[2]\n"
"if #t > #c or (#t == #c and t > c) then redis.call('SET', KEYS[2], t) end\n"
"return 1\n";

/*
 * KEYS[i] is released when it still holds ARGV[i]; returns how many were.
 * Each release is published on a channel named after the key, so waiters on
 * other servers are woken (their wake-up worker subscribes); pcall, so a
 * Redis user without PUBLISH still releases (its waiters then poll).
 */
static const char RELEASE_SCRIPT[] =
"local n = 0\n"
"for i = 1, #KEYS do\n"
"  if redis.call('GET', KEYS[i]) == ARGV[i] then\n"
"    n = n + redis.call('DEL', KEYS[i])\n"
"    redis.pcall('PUBLISH', KEYS[i], '')\n"
"  end\n"
"end\n"
"return n\n";

/*
 * The withdrawal of an attempt that was refused: RELEASE_SCRIPT for one
 * key, announcing nothing.  The lock was never ours on a majority, so
 * nobody waits for it to go; a publish would wake every waiter, ours
 * included, only to be refused again by the holder.
 */
static const char WITHDRAW_SCRIPT[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('DEL', KEYS[1])\n"
"end\n"
"return 0\n";

static int64 rl_last_token = 0;

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
} rl_in_flight;

static int64
wall_clock_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64) tv.tv_sec * 1000000 + tv.tv_usec;
}

/*
 * A new lock value: 128 random bits, which make it ours alone, followed by
 * who holds it (this server's system identifier, the database and the
 * process), so that redlock_holder() on any server can say who holds a
 * resource without any write beyond the lock itself.
 */
static void
new_owner(char *owner)
{
	uint8		bytes[RL_OWNER_RANDOM_LEN / 2];

	if (!pg_strong_random(bytes, sizeof(bytes)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random lease owner")));
	hex_encode((const char *) bytes, sizeof(bytes), owner);
	snprintf(owner + RL_OWNER_RANDOM_LEN, RL_OWNER_LEN + 1 - RL_OWNER_RANDOM_LEN,
			 ":" UINT64_FORMAT ":%u:%d",
			 GetSystemIdentifier(), MyDatabaseId, MyProcPid);
}

/* The Redis key of a resource's lock. */
int
rl_lock_key(char *buf, const char *resource)
{
	return snprintf(buf, RL_KEY_MAX + 1, "%slock:%s", rl_key_prefix, resource);
}

/*
 * The fencing counter of a resource: one of a fixed set of counters per
 * node, chosen by a stable hash of the name (FNV-1a, the same on every
 * server), so that a resource always uses the same counter while grants of
 * unrelated resources seldom race on one.  Tokens are monotonic per
 * resource; storage stays fixed however many resources are ever locked.
 */
static int
counter_key(char *buf, const char *resource)
{
	uint32		hash = 2166136261u;

	for (const unsigned char *c = (const unsigned char *) resource; *c; c++)
	{
		hash ^= *c;
		hash *= 16777619u;
	}
	return snprintf(buf, RL_KEY_MAX + 1, "%s%s%u", rl_key_prefix,
					RL_COUNTER_KEY_SUFFIX, hash % RL_COUNTER_STRIPES);
}

/* argv[0..2] of a script call: EVAL, the script, the number of keys */
void
rl_proto_eval_header(const char **argv, size_t *argvlen, const char *script,
					 size_t scriptlen, const char *numkeys)
{
	argv[0] = "EVAL";
	argvlen[0] = 4;
	argv[1] = script;
	argvlen[1] = scriptlen;
	argv[2] = numkeys;
	argvlen[2] = strlen(numkeys);
}

void
rl_proto_request_init(RlRequest *req, RlReplyKind kind, RlRoundGoal goal,
					  int argc, const char **argv, const size_t *argvlen)
{
	memset(req, 0, sizeof(*req));
	req->reply_kind = kind;
	req->goal = goal;
	req->argc = argc;
	req->argv = argv;
	req->argvlen = argvlen;
}

/*
 * argv[0..5] of a script on a resource's lock: EVAL, the script, 2 keys
 * (the lock and the resource's fencing counter, which goes in ckey) and
 * the first argument, a lock value.
 */
static void
lock_call(const char **argv, size_t *argvlen, const char *script,
		  size_t scriptlen, const char *key, int keylen, const char *resource,
		  char *ckey, const char *owner)
{
	rl_proto_eval_header(argv, argvlen, script, scriptlen, "2");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = ckey;
	argvlen[4] = counter_key(ckey, resource);
	argv[5] = owner;
	argvlen[5] = strlen(owner);
}

/*
 * When a no-throw bulk release must stop waiting: one connect attempt and
 * one answer per node, whatever the number of leases.
 */
int64_t
rl_proto_release_deadline(void)
{
	return rl_now_us() +
		((int64_t) rl_connect_timeout_ms + rl_node_timeout_ms) * 1000;
}

/*
 * Release up to RL_RELEASE_CHUNK leases with one command per node (skip:
 * NULL, or the nodes not to send it to).  With
 * wait, returns when a majority answered (or cannot); replies come back in
 * order on each connection, so that also confirms every release sent before
 * it.  The command is must-deliver either way.
 */
void
rl_proto_release(const RlReleaseItem *items, int nitems, bool wait,
				 bool nothrow, int64_t deadline_us, const bool *skip,
				 RlRequest *req)
{
	const char *argv[3 + 2 * RL_RELEASE_CHUNK];
	size_t		argvlen[3 + 2 * RL_RELEASE_CHUNK];
	char		numkeys[16];

	Assert(nitems > 0 && nitems <= RL_RELEASE_CHUNK);
	snprintf(numkeys, sizeof(numkeys), "%d", nitems);
	rl_proto_eval_header(argv, argvlen, RELEASE_SCRIPT, sizeof(RELEASE_SCRIPT) - 1, numkeys);
	for (int i = 0; i < nitems; i++)
	{
		argv[3 + i] = items[i].key;
		argvlen[3 + i] = items[i].keylen;
		argv[3 + nitems + i] = items[i].owner;
		argvlen[3 + nitems + i] = strlen(items[i].owner);
	}

	rl_proto_request_init(req, RL_REPLY_COUNT, RL_GOAL_ANSWERS, 3 + 2 * nitems,
						  argv, argvlen);
	req->nothrow = nothrow;
	req->must_deliver = true;
	req->deadline_us = deadline_us;
	if (skip != NULL)
		memcpy(req->skip, skip, sizeof(req->skip));
	if (wait)
		rl_nodes_run(req);
	else
		rl_nodes_send(req);
	req->argv = NULL;			/* argv was on our stack */
	req->argvlen = NULL;
}

/*
 * Release one lock value without waiting (an interrupted attempt, a value
 * set for a waiter that left).  Must-deliver, announced.
 */
void
rl_proto_release_one(const char *key, int keylen, const char *owner,
					 bool nothrow)
{
	RlReleaseItem item = {key, keylen, owner};
	RlRequest	req;

	rl_proto_release(&item, 1, false, nothrow, 0, NULL, &req);
}

/*
 * Withdraw an attempt that was not granted, without waiting: on every node
 * but those that refused it or were not asked (nothing of ours was set
 * there), including the ones that did not answer.  Must-deliver, like a
 * release.  Announced (published) only when the lock was held on a
 * majority meanwhile, or when the attempt was a handoff (whose release of
 * the previous holder announced nothing): then someone may wait for it.
 */
static void
withdraw_attempt(const char *key, int keylen, const char *owner,
				 const bool *skip, bool announce)
{
	const char *argv[5];
	size_t		argvlen[5];
	RlRequest	req;

	if (announce)
		rl_proto_eval_header(argv, argvlen, RELEASE_SCRIPT,
							 sizeof(RELEASE_SCRIPT) - 1, "1");
	else
		rl_proto_eval_header(argv, argvlen, WITHDRAW_SCRIPT,
							 sizeof(WITHDRAW_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = owner;
	argvlen[4] = strlen(owner);
	rl_proto_request_init(&req, RL_REPLY_COUNT, RL_GOAL_ANSWERS, 5, argv, argvlen);
	req.must_deliver = true;
	memcpy(req.skip, skip, sizeof(req.skip));
	rl_nodes_send(&req);
}

/* From here on an error must not leave the lease of owner behind. */
static void
set_in_flight(const char *key, int keylen, const char *owner)
{
	memcpy(rl_in_flight.key, key, keylen + 1);
	rl_in_flight.keylen = keylen;
	memcpy(rl_in_flight.owner, owner, RL_OWNER_LEN + 1);
	rl_in_flight.active = true;
}

/*
 * The end of an attempt whose round has run, ours or a releasing holder's
 * handoff (rl_in_flight holds its owner): choose the token, write it back
 * where our proposal was not above a granting node's counter, and check
 * the validity left.  On failure everything the attempt may have set is
 * released.
 */
static RlAttempt
settle_attempt(const char *resource, const char *key, int keylen, int ttl_ms,
			   int64 proposal, int64_t start_us, bool handed, RlGrant *grant,
			   RlRequest *req)
{
	int64_t		counters[RL_MAX_NODES];
	int			ncounters = 0;
	int64		token;
	RlAttempt	result;
	bool		unset[RL_MAX_NODES] = {0};
	bool		announce = handed || req->decision == RL_WON;

	/* where the round was refused or not sent, nothing of ours is set */
	for (int i = 0; i < req->nnodes; i++)
		unset[i] = req->results[i].vote == RL_VOTE_NO ||
			req->results[i].in_backoff;

	if (req->decision != RL_WON)
	{
		result = (req->decision == RL_CONTENDED) ? RL_ATTEMPT_CONTENDED
			: RL_ATTEMPT_UNAVAILABLE;
		goto failed;
	}

	for (int i = 0; i < req->nnodes; i++)
		if (req->results[i].vote == RL_VOTE_YES)
			counters[ncounters++] = req->results[i].counter;

	if (!rl_choose_token(proposal, counters, ncounters, &token))
	{
		RlRequest	wb;
		const char *argv[7];
		size_t		argvlen[7];
		char		ckey[RL_KEY_MAX + 1];
		char		token_buf[24];

		if (token < 0)
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_PROTOCOL),
					 errmsg("fencing counter on the Redis nodes is exhausted")));

		/* write the token back where we hold the lock */
		lock_call(argv, argvlen, WRITEBACK_SCRIPT, sizeof(WRITEBACK_SCRIPT) - 1,
				  key, keylen, resource, ckey, grant->owner);
		argv[6] = token_buf;
		argvlen[6] = rl_format_counter(token, token_buf);
		rl_proto_request_init(&wb, RL_REPLY_FLAG, RL_GOAL_QUORUM, 7, argv, argvlen);
		for (int i = 0; i < req->nnodes; i++)
			wb.skip[i] = (req->results[i].vote != RL_VOTE_YES);
		rl_nodes_run(&wb);
		if (wb.decision != RL_WON)
		{
			*req = wb;
			result = (wb.decision == RL_CONTENDED) ? RL_ATTEMPT_EXPIRED
				: RL_ATTEMPT_UNAVAILABLE;
			goto failed;
		}
	}

	if (rl_validity_us(ttl_ms, rl_now_us() - start_us, rl_drift_factor) <= 0)
	{
		result = RL_ATTEMPT_EXPIRED;
		goto failed;
	}

	grant->token = token;
	grant->valid_until_us = start_us + (int64_t) ttl_ms * 1000 -
		rl_drift_us(ttl_ms, rl_drift_factor);
	if (token > rl_last_token)
		rl_last_token = token;
	rl_in_flight.active = false;
	return RL_ATTEMPT_GRANTED;

failed:
	withdraw_attempt(key, keylen, grant->owner, unset, announce);
	rl_in_flight.active = false;
	return result;
}

/*
 * One Redlock attempt on key.  On success fills grant.  On failure
 * everything this attempt may have set is released, and req_out describes
 * what each node said.
 */
RlAttempt
rl_proto_acquire(const char *resource, const char *key, int keylen,
				 int ttl_ms, RlGrant *grant, RlRequest *req_out)
{
	const char *argv[8];
	size_t		argvlen[8];
	char		ckey[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	int64		proposal;
	int64_t		start_us;

	new_owner(grant->owner);
	proposal = rl_propose_token(wall_clock_us(), rl_last_token);

	lock_call(argv, argvlen, ACQUIRE_SCRIPT, sizeof(ACQUIRE_SCRIPT) - 1,
			  key, keylen, resource, ckey, grant->owner);
	argv[6] = ttl_buf;
	argvlen[6] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[7] = proposal_buf;
	argvlen[7] = rl_format_counter(proposal, proposal_buf);
	rl_proto_request_init(req_out, RL_REPLY_COUNTER, RL_GOAL_QUORUM, 8, argv, argvlen);

	set_in_flight(key, keylen, grant->owner);
	start_us = rl_now_us();
	rl_stats_count(RL_STAT_ATTEMPTS);
	rl_nodes_run(req_out);
	req_out->argv = NULL;
	req_out->argvlen = NULL;
	return settle_attempt(resource, key, keylen, ttl_ms, proposal, start_us,
						  false, grant, req_out);
}

/* A new lock value for a waiter's standing offer of a handoff. */
void
rl_proto_new_owner(char *owner)
{
	new_owner(owner);
}

/*
 * A holder's release that hands the lock to the next waiter: one round of
 * HANDOFF_SCRIPT, whose outcome goes to the waiter in *out.  Not
 * must-deliver (a replay could grant a waiter that moved on); the caller
 * re-sends a plain release to the nodes that did not answer.
 */
void
rl_proto_handoff(const RlReleaseItem *ours, const char *resource,
				 const char *waiter_owner, int waiter_ttl_ms, bool nothrow,
				 int64_t deadline_us, RlHandoff *out, RlRequest *req)
{
	const char *argv[9];
	size_t		argvlen[9];
	char		ckey[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];

	out->proposal = rl_propose_token(wall_clock_us(), rl_last_token);
	lock_call(argv, argvlen, HANDOFF_SCRIPT, sizeof(HANDOFF_SCRIPT) - 1,
			  ours->key, ours->keylen, resource, ckey, ours->owner);
	argv[6] = waiter_owner;
	argvlen[6] = strlen(waiter_owner);
	argv[7] = ttl_buf;
	argvlen[7] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", waiter_ttl_ms);
	argv[8] = proposal_buf;
	argvlen[8] = rl_format_counter(out->proposal, proposal_buf);
	rl_proto_request_init(req, RL_REPLY_COUNTER, RL_GOAL_QUORUM, 9, argv, argvlen);
	req->nothrow = nothrow;
	req->deadline_us = deadline_us;

	out->start_us = rl_now_us();
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
	out->nnodes = req->nnodes;
	out->not_asked = 0;
	for (int i = 0; i < req->nnodes; i++)
	{
		out->votes[i] = req->results[i].vote;
		out->counters[i] = req->results[i].counter;
		if (req->results[i].in_backoff)
			out->not_asked |= (uint32) 1 << i;
	}
}

/*
 * The waiter's side of a handoff: settle the attempt a releasing holder
 * made for us with owner (see rl_proto_handoff) as if it were our own.
 */
RlAttempt
rl_proto_take_handoff(const char *resource, const char *key, int keylen,
					  int ttl_ms, const char *owner, const RlHandoff *ho,
					  RlGrant *grant, RlRequest *req)
{
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

	memcpy(grant->owner, owner, RL_OWNER_LEN + 1);
	set_in_flight(key, keylen, owner);
	return settle_attempt(resource, key, keylen, ttl_ms, ho->proposal,
						  ho->start_us, true, grant, req);
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
