/*-------------------------------------------------------------------------
 *
 * protocol_values.c
 *	  What the protocol's scripts are given: lock values and offer values,
 *	  token proposals, the Redis keys of a resource, and the argument
 *	  vectors of a script call.
 *
 * A lock value is random, so that it is ours alone, and names its holder
 * (redlock_holder() reads it back); an offer's value is derived from its
 * attempt's, so that one release removes both.  Keys and values are always
 * arguments of a script, never spliced into its text.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "protocol/protocol_internal.h"

#define RL_COUNTER_KEY_SUFFIX "token-counter:"
#define RL_COUNTER_STRIPES	64	/* fixed: never grows with resources */

int64		rl_last_token = 0;

int64_t
rl_proto_wall_clock_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64) tv.tv_sec * 1000000 + tv.tv_usec;
}

/*
 * The random part of lock values is drawn in blocks: one pg_strong_random()
 * call for RL_RANDOM_BLOCK / 16 values (OpenSSL's generator costs a few
 * microseconds a call, a noticeable part of an uncontended acquire).  A
 * block belongs to the process that drew it: a child forked after the draw
 * (random_pid differs) draws its own, so no two processes share bytes.
 * Bytes handed out are wiped from the block.
 */
#define RL_RANDOM_BLOCK		512
static uint8 random_block[RL_RANDOM_BLOCK];
static int	random_used = RL_RANDOM_BLOCK;
static int	random_pid = 0;

/* The holder part of this process's lock values, made once. */
static char owner_suffix[RL_OWNER_LEN + 1 - RL_OWNER_RANDOM_LEN];
static int	suffix_pid = 0;
static Oid	suffix_db = InvalidOid;

/*
 * A new lock value: 128 random bits, which make it ours alone, followed by
 * who holds it (this server's system identifier and the time it started,
 * the database and the process), so that redlock_holder() on any server can
 * say who holds a resource without any write beyond the lock itself.  The
 * start time tells apart servers that share a system identifier: a standby
 * made with pg_basebackup and its primary, or two runs of one server.
 */
void
rl_proto_new_owner(char *owner)
{
	const int	n = RL_OWNER_RANDOM_LEN / 2;

	StaticAssertStmt(RL_RANDOM_BLOCK % (RL_OWNER_RANDOM_LEN / 2) == 0,
					 "a block holds whole random parts");
	if (random_pid != MyProcPid || random_used + n > RL_RANDOM_BLOCK)
	{
		random_pid = 0;
		if (!pg_strong_random(random_block, sizeof(random_block)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random lease owner")));
		random_used = 0;
		random_pid = MyProcPid;
	}
	hex_encode((const char *) random_block + random_used, n, owner);
	explicit_bzero(random_block + random_used, n);
	random_used += n;

	if (suffix_pid != MyProcPid || suffix_db != MyDatabaseId)
	{
		snprintf(owner_suffix, sizeof(owner_suffix),
				 ":" UINT64_FORMAT ":" INT64_FORMAT ":%u:%d",
				 GetSystemIdentifier(), (int64) PgStartTime, MyDatabaseId,
				 MyProcPid);
		suffix_pid = MyProcPid;
		suffix_db = MyDatabaseId;
	}
	strlcpy(owner + RL_OWNER_RANDOM_LEN, owner_suffix,
			RL_OWNER_LEN + 1 - RL_OWNER_RANDOM_LEN);
}

/*
 * The value an attempt's offer is handed: the attempt's own with 'w' for
 * its first (hexadecimal) character, so that it is never an attempt's, and
 * the release of the lease the attempt took removes it too
 * (RELEASE_HANDOVER_SCRIPT derives it the same way).  The holder it names is the same.
 */
void
rl_offer_value(char *offer, const char *value)
{
	strlcpy(offer, value, RL_OWNER_LEN + 1);
	offer[0] = 'w';
}

/* A token proposal: above every token this backend has seen. */
int64
rl_proto_new_proposal(void)
{
	return rl_propose_token(rl_proto_wall_clock_us(), rl_last_token);
}

/* The Redis key of a resource's lock. */
int
rl_lock_key(char *buf, const char *resource)
{
	return snprintf(buf, RL_KEY_MAX + 1, "%slock:%s", rl_key_prefix, resource);
}

/* ... of its readers, when held shared (RL_LUA_READERS) */
int
rl_readers_key(char *buf, const char *resource)
{
	return snprintf(buf, RL_KEY_MAX + 1, "%sread:%s", rl_key_prefix, resource);
}

/* ... of its waiters' queue, the offers in order (RL_LUA_QUEUE) */
int
rl_offer_key(char *buf, const char *resource)
{
	return snprintf(buf, RL_KEY_MAX + 1, "%swait:%s", rl_key_prefix, resource);
}

/*
 * How long an offer stays on a node (and the waiters' marker, and queue):
 * until the waiter's next attempt renews it, whose backstop is
 * redlock.retry_delay plus jitter, and one node_timeout for that attempt
 * to arrive.  A waiter that dies keeps its place no longer.
 */
int
rl_offer_life_ms(void)
{
	return rl_retry_delay_ms + rl_retry_jitter_ms + rl_node_timeout_ms;
}

/* The start of the name of every offer: "<prefix>offer:", then its value. */
int
rl_offer_prefix(char *buf)
{
	return snprintf(buf, RL_KEY_MAX + 1, "%soffer:", rl_key_prefix);
}

/*
 * The fencing counter of a resource: one of a fixed set of counters per
 * node, chosen by a stable hash of the name (FNV-1a, the same on every
 * server), so that a resource always uses the same counter while grants of
 * unrelated resources seldom race on one.  Tokens are monotonic per
 * resource; storage stays fixed however many resources are ever locked.
 */
int
rl_counter_key(char *buf, const char *resource)
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

/*
 * The two last arguments of a script that checks the quarantine
 * (RL_LUA_QUARANTINE): the epoch's key and the quarantine in ms.  Returns
 * how many it set.
 */
int
rl_proto_epoch_args(const char **argv, size_t *argvlen)
{
	static char key[RL_KEY_MAX + 1];
	static char quarantine[16];

	argv[0] = key;
	argvlen[0] = snprintf(key, sizeof(key), "%sepoch", rl_key_prefix);
	argv[1] = quarantine;
	argvlen[1] = snprintf(quarantine, sizeof(quarantine), "%d",
						  rl_restart_quarantine_ms);
	return RL_EPOCH_ARGS;
}

void
rl_proto_request_init(RlRequest *req, RlReplyKind kind, RlRoundGoal goal,
					  int argc, const char **argv, const size_t *argvlen)
{
	rl_request_clear(req);		/* its round sets the results it uses */
	req->reply_kind = kind;
	req->goal = goal;
	req->argc = argc;
	req->argv = argv;
	req->argvlen = argvlen;
	/* every script of ours is a static literal (rl_proto_eval_header) */
	req->static_script = argc >= 2 && strcmp(argv[0], "EVAL") == 0;
}

/*
 * argv[0..5] of a script on a resource's lock: EVAL, the script, 2 keys
 * (the lock and the resource's fencing counter, which goes in ckey) and
 * the first argument, a lock value.
 */
void
rl_proto_lock_call(const char **argv, size_t *argvlen, const char *script,
		  size_t scriptlen, const char *key, int keylen, const char *resource,
		  char *ckey, const char *owner)
{
	rl_proto_eval_header(argv, argvlen, script, scriptlen, "2");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = ckey;
	argvlen[4] = rl_counter_key(ckey, resource);
	argv[5] = owner;
	argvlen[5] = strlen(owner);
}

/*
 * The token of a won round (req): true when its proposal stands; false when
 * a greater one was chosen, which must be written back where we hold the
 * lock (rl_proto_writeback).  Raises when the counters are exhausted.
 */
bool
rl_proto_token_of(const RlRequest *req, int64 proposal, int64 *token)
{
	int64_t		counters[RL_MAX_NODES];
	int			ncounters = 0;

	for (int i = 0; i < req->nnodes; i++)
		if (req->results[i].vote == RL_VOTE_YES)
			counters[ncounters++] = req->results[i].counter;
	if (rl_choose_token(proposal, counters, ncounters, token))
		return true;
	if (*token < 0)
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_PROTOCOL),
				 errmsg("fencing counter on the Redis nodes is exhausted")));
	return false;
}

/*
 * The write-back of a chosen token (argv: its script and arguments), on
 * the nodes that granted req.  Granted when a majority took it; otherwise
 * expired (a lock no longer ours) or unavailable, and *req describes the
 * write-back's nodes.
 */
RlAttempt
rl_proto_writeback(RlRequest *req, int argc, const char **argv,
				   size_t *argvlen)
{
	RlRequest	wb;

	rl_proto_request_init(&wb, RL_REPLY_FLAG, RL_GOAL_QUORUM, argc, argv,
						  argvlen);
	for (int i = 0; i < req->nnodes; i++)
		wb.skip[i] = (req->results[i].vote != RL_VOTE_YES);
	rl_nodes_run(&wb);
	wb.argv = NULL;				/* the caller's arrays, gone on return */
	wb.argvlen = NULL;
	if (wb.decision == RL_WON)
		return RL_ATTEMPT_GRANTED;
	*req = wb;
	return (wb.decision == RL_CONTENDED) ? RL_ATTEMPT_EXPIRED
		: RL_ATTEMPT_UNAVAILABLE;
}

/*
 * A won round's grant, started at start_us: expired when its validity ran
 * out meanwhile; otherwise grant gets the token and the end of its
 * validity, and the token is remembered as the greatest seen.
 */
RlAttempt
rl_proto_grant(RlGrant *grant, int64 token, int ttl_ms, int64_t start_us)
{
	if (rl_validity_us(ttl_ms, rl_now_us() - start_us, rl_drift_factor) <= 0)
		return RL_ATTEMPT_EXPIRED;
	grant->token = token;
	grant->valid_until_us = rl_valid_until_us(start_us, ttl_ms,
											  rl_drift_factor);
	grant->in_row = 0;			/* a handoff of this server's: its caller's */
	if (token > rl_last_token)
		rl_last_token = token;
	return RL_ATTEMPT_GRANTED;
}
