/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  SQL-callable lease functions and the per-backend lease registry.
 *
 * A lease is taken with the Redlock algorithm: one random owner value is
 * set with NX and a TTL on every node at once, and the lease is granted when
 * a majority accepted it with validity left after subtracting the time the
 * round took and the clock drift allowance.  The same round returns each
 * granting node's fencing counter, from which the token is chosen
 * (quorum.c); in the uncommon case that our proposal was not above every
 * counter, a second round writes the chosen token back to a majority.
 *
 * Leases are re-entrant per session, like advisory locks: taking a lease the
 * session already holds (at either scope) returns the same token and adds a
 * hold; Redis is released when the last hold goes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "access/xact.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "lease.h"
#include "node_io.h"
#include "quorum.h"
#include "redlock.h"
#include "stats.h"

#define RL_KEY_MAX	(RL_MAX_KEY_PREFIX_LEN + 5 + RL_MAX_RESOURCE_LEN)
#define RL_COUNTER_KEY_SUFFIX "token-counter:"
#define RL_COUNTER_STRIPES	64	/* fixed: never grows with resources */
#define RL_RELEASE_BATCH	16	/* pipelined releases per round trip; well below
								 * the replies a connection may owe */

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

static const char WRITEBACK_SCRIPT[] =
"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
"local c = redis.call('GET', KEYS[2]) or '0'\n"
"local t = ARGV[2]\n"
"if #t > #c or (#t == #c and t > c) then redis.call('SET', KEYS[2], t) end\n"
"return 1\n";

static const char RELEASE_SCRIPT[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('DEL', KEYS[1])\n"
"end\n"
"return 0\n";

static const char EXTEND_SCRIPT[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
"end\n"
"return 0\n";

typedef struct RlLease
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];	/* hash key */
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		owner[RL_OWNER_LEN + 1];
	int64		token;
	int			ttl_ms;
	int64_t		valid_until_us; /* monotonic clock */
	int			session_holds;
	int			xact_holds;
	SubTransactionId xact_subid;	/* subtransaction that took the first
									 * transaction hold */
} RlLease;

typedef enum RlAttempt
{
	RL_ATTEMPT_GRANTED,
	RL_ATTEMPT_CONTENDED,
	RL_ATTEMPT_UNAVAILABLE,
	RL_ATTEMPT_EXPIRED
} RlAttempt;

static HTAB *rl_leases = NULL;
static int64 rl_last_token = 0;
static bool rl_exit_hook_registered = false;

/* An acquire whose outcome is not settled yet; released if we error out. */
static struct
{
	bool		active;
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		owner[RL_OWNER_LEN + 1];
} rl_in_flight;

static void rl_backend_exit(int code, Datum arg);

/* ---------- helpers ---------- */

static void
registry_init(void)
{
	HASHCTL		ctl;

	if (rl_leases != NULL)
		return;
	ctl.keysize = RL_MAX_RESOURCE_LEN + 1;
	ctl.entrysize = sizeof(RlLease);
	ctl.hcxt = TopMemoryContext;
	rl_leases = hash_create("redlock leases", 16, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

static int64
wall_clock_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64) tv.tv_sec * 1000000 + tv.tv_usec;
}

static void
new_owner(char *owner)
{
	uint8		bytes[RL_OWNER_LEN / 2];

	if (!pg_strong_random(bytes, sizeof(bytes)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random lease owner")));
	hex_encode((const char *) bytes, sizeof(bytes), owner);
	owner[RL_OWNER_LEN] = '\0';
}

/*
 * The fencing counter of a resource: one of a fixed set of counters per
 * node, chosen by a stable hash of the name (FNV-1a, the same on every
 * server), so that a resource always uses the same counter while grants of
 * unrelated resources seldom race on one.  Tokens are monotonic per
 * resource; storage stays fixed however many resources are ever locked.
 */
static int
make_counter_key(char *buf, const char *resource)
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

static void
request_init(RlRequest *req, RlReplyKind kind, RlRoundGoal goal)
{
	memset(req, 0, sizeof(*req));
	req->reply_kind = kind;
	req->goal = goal;
}

/* Append "node: outcome" lines for errdetail. */
static void
describe_nodes(StringInfo buf, const RlRequest *req)
{
	for (int i = 0; i < req->nnodes; i++)
	{
		const RlNodeResult *res = &req->results[i];

		appendStringInfo(buf, "\n%s: %s", rl_node_name(i),
						 res->vote == RL_VOTE_PENDING ?
						 "not waited for (outcome already decided)" : res->detail);
	}
}

static bool
any_protocol_error(const RlRequest *req)
{
	for (int i = 0; i < req->nnodes; i++)
		if (req->results[i].protocol_error)
			return true;
	return false;
}

/* ---------- argument checks ---------- */

static void
resource_arg(FunctionCallInfo fcinfo, int argno, char *out)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("resource name must not be NULL")));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("resource name must not be empty")));
	if (len > RL_MAX_RESOURCE_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("resource name is too long"),
				 errdetail("The name is %d bytes; the limit is %d bytes.",
						   len, RL_MAX_RESOURCE_LEN)));
	memcpy(out, VARDATA_ANY(t), len);
	out[len] = '\0';
}

static int
ttl_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		ttl;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ttl_ms must not be NULL")));
	ttl = PG_GETARG_INT32(argno);
	if (ttl < RL_MIN_TTL_MS || ttl > RL_MAX_TTL_MS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl_ms must be between %d and %d, not %d",
						RL_MIN_TTL_MS, RL_MAX_TTL_MS, ttl)));
	return ttl;
}

/*
 * Make sure the node list in force is the one we are connected to.  A new
 * node list first releases this session's leases on the old nodes: they
 * cannot be tracked across lists.
 */
void
rl_nodes_ready(void)
{
	registry_init();
	if (!rl_exit_hook_registered)
	{
		before_shmem_exit(rl_backend_exit, (Datum) 0);
		rl_exit_hook_registered = true;
	}

	if (rl_nodes_config_changed())
	{
		if (hash_get_num_entries(rl_leases) > 0)
		{
			ereport(WARNING,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg("redlock.nodes or the Redis credentials changed: releasing %ld lease(s) held on the previous connections",
							hash_get_num_entries(rl_leases))));
			rl_release_all(true, true, true);
		}
		rl_nodes_apply_config();
	}

	if (rl_nodes_count() == 0)
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_CONFIG),
				 errmsg("redlock.nodes is not set"),
				 errhint("A superuser sets it to the Redis masters to use, e.g. ALTER SYSTEM SET redlock.nodes = '127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381'; SELECT pg_reload_conf();")));
}

/* ---------- the protocol ---------- */

static void
send_release(const char *key, int keylen, const char *owner, bool wait,
			 bool nothrow)
{
	RlRequest	req;
	const char *argv[5];
	size_t		argvlen[5];

	request_init(&req, RL_REPLY_FLAG, RL_GOAL_ANSWERS);
	req.nothrow = nothrow;
	req.replay = true;
	argv[0] = "EVAL";
	argvlen[0] = 4;
	argv[1] = RELEASE_SCRIPT;
	argvlen[1] = sizeof(RELEASE_SCRIPT) - 1;
	argv[2] = "1";
	argvlen[2] = 1;
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = owner;
	argvlen[4] = RL_OWNER_LEN;
	req.argc = 5;
	req.argv = argv;
	req.argvlen = argvlen;

	if (wait)
		rl_nodes_run(&req);
	else
		rl_nodes_send(&req);
}

/*
 * One Redlock attempt.  On success fills lease->owner, token and
 * valid_until_us.  On failure everything this attempt may have set is
 * released, and req_out (if given) describes what each node said.
 */
static RlAttempt
attempt_acquire(RlLease *lease, int ttl_ms, RlRequest *req_out)
{
	RlRequest	req;
	const char *argv[8];
	size_t		argvlen[8];
	char		counter_key[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	int64		proposal;
	int64		token;
	int64_t		start_us;
	int64_t		validity_us;
	RlAttempt	result;

	new_owner(lease->owner);
	proposal = rl_propose_token(wall_clock_us(), rl_last_token);

	argv[0] = "EVAL";
	argvlen[0] = 4;
	argv[1] = ACQUIRE_SCRIPT;
	argvlen[1] = sizeof(ACQUIRE_SCRIPT) - 1;
	argv[2] = "2";
	argvlen[2] = 1;
	argv[3] = lease->key;
	argvlen[3] = lease->keylen;
	argv[4] = counter_key;
	argvlen[4] = make_counter_key(counter_key, lease->resource);
	argv[5] = lease->owner;
	argvlen[5] = RL_OWNER_LEN;
	argv[6] = ttl_buf;
	argvlen[6] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[7] = proposal_buf;
	argvlen[7] = rl_format_counter(proposal, proposal_buf);

	request_init(&req, RL_REPLY_COUNTER, RL_GOAL_QUORUM);
	req.argc = 8;
	req.argv = argv;
	req.argvlen = argvlen;

	/* from here on an error must not leave the lease behind */
	memcpy(rl_in_flight.key, lease->key, lease->keylen + 1);
	rl_in_flight.keylen = lease->keylen;
	memcpy(rl_in_flight.owner, lease->owner, RL_OWNER_LEN + 1);
	rl_in_flight.active = true;

	start_us = rl_now_us();
	rl_stats_count(RL_STAT_ATTEMPTS);
	rl_nodes_run(&req);

	if (req.decision != RL_WON)
	{
		result = (req.decision == RL_CONTENDED) ? RL_ATTEMPT_CONTENDED
			: RL_ATTEMPT_UNAVAILABLE;
		goto failed;
	}

	{
		int64_t		counters[RL_MAX_NODES];
		int			ncounters = 0;

		for (int i = 0; i < req.nnodes; i++)
			if (req.results[i].vote == RL_VOTE_YES)
				counters[ncounters++] = req.results[i].counter;

		if (!rl_choose_token(proposal, counters, ncounters, &token))
		{
			RlRequest	wb;
			char		token_buf[24];

			if (token < 0)
				ereport(ERROR,
						(errcode(ERRCODE_REDLOCK_PROTOCOL),
						 errmsg("fencing counter on the Redis nodes is exhausted")));

			/* write the token back where we hold the lock */
			request_init(&wb, RL_REPLY_FLAG, RL_GOAL_QUORUM);
			for (int i = 0; i < req.nnodes; i++)
				wb.skip[i] = (req.results[i].vote != RL_VOTE_YES);
			argv[1] = WRITEBACK_SCRIPT;
			argvlen[1] = sizeof(WRITEBACK_SCRIPT) - 1;
			argv[6] = token_buf;
			argvlen[6] = rl_format_counter(token, token_buf);
			wb.argc = 7;
			wb.argv = argv;
			wb.argvlen = argvlen;
			rl_nodes_run(&wb);
			if (wb.decision != RL_WON)
			{
				req = wb;
				result = (wb.decision == RL_CONTENDED) ? RL_ATTEMPT_EXPIRED
					: RL_ATTEMPT_UNAVAILABLE;
				goto failed;
			}
		}
	}

	validity_us = rl_validity_us(ttl_ms, rl_now_us() - start_us, rl_drift_factor);
	if (validity_us <= 0)
	{
		result = RL_ATTEMPT_EXPIRED;
		goto failed;
	}

	lease->token = token;
	lease->ttl_ms = ttl_ms;
	lease->valid_until_us = start_us + (int64_t) ttl_ms * 1000 -
		rl_drift_us(ttl_ms, rl_drift_factor);
	if (token > rl_last_token)
		rl_last_token = token;
	rl_in_flight.active = false;
	if (req_out)
		*req_out = req;
	return RL_ATTEMPT_GRANTED;

failed:
	/* release everywhere, also where no reply came; do not wait */
	send_release(lease->key, lease->keylen, lease->owner, false, false);
	rl_in_flight.active = false;
	if (req_out)
		*req_out = req;
	return result;
}

static void
report_unavailable(const char *resource, const RlRequest *req)
{
	StringInfoData detail;

	initStringInfo(&detail);
	appendStringInfo(&detail, "%d of %d nodes gave a valid answer; a majority is %d.",
					 req->tally.yes + req->tally.no, req->nnodes,
					 rl_majority(req->nnodes));
	describe_nodes(&detail, req);

	if (any_protocol_error(req))
	{
		rl_stats_count(RL_STAT_REFUSED_ERROR);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_PROTOCOL),
				 errmsg("could not acquire lease on \"%s\": Redis nodes answered with errors",
						resource),
				 errdetail_internal("%s", detail.data),
				 errhint("Check the nodes' logs, redlock.username and redlock.password.")));
	}
	rl_stats_count(RL_STAT_REFUSED_NO_QUORUM);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
			 errmsg("could not acquire lease on \"%s\": fewer than a majority of Redis nodes could answer",
					resource),
			 errdetail_internal("%s", detail.data),
			 errhint("Check that the nodes in redlock.nodes are running and reachable.")));
}

/* Wait before the next attempt, honouring lock_timeout and interrupts. */
static void
retry_sleep(const char *resource, int64_t started_us, const RlRequest *last)
{
	long		delay_ms = rl_retry_delay_ms;

	if (rl_retry_jitter_ms > 0)
		delay_ms += (long) pg_prng_uint64_range(&pg_global_prng_state, 0,
												rl_retry_jitter_ms);
	if (LockTimeout > 0)
	{
		int64_t		left_ms = LockTimeout - (rl_now_us() - started_us) / 1000;

		if (left_ms <= 0)
		{
			StringInfoData detail;

			initStringInfo(&detail);
			appendStringInfoString(&detail, "Last attempt:");
			describe_nodes(&detail, last);
			rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
			rl_stats_acquire_latency(rl_now_us() - started_us);
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not obtain lease on \"%s\" within lock_timeout (%d ms)",
							resource, LockTimeout),
					 errdetail_internal("%s", detail.data)));
		}
		delay_ms = Min(delay_ms, left_ms);
	}

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 delay_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Take (or re-enter) a lease.  Returns the token, or -1 when try_only and
 * the resource is held elsewhere.
 */
static int64
acquire(FunctionCallInfo fcinfo, bool xact, bool try_only)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;
	RlLease    *lease;
	RlLease		fresh;
	bool		found;
	int64_t		started_us;

	resource_arg(fcinfo, 0, resource);
	ttl_ms = ttl_arg(fcinfo, 1);
	rl_nodes_ready();

	lease = hash_search(rl_leases, resource, HASH_FIND, &found);
	if (found && lease->valid_until_us > rl_now_us())
	{
		if (xact && lease->xact_holds++ == 0)
			lease->xact_subid = GetCurrentSubTransactionId();
		else if (!xact)
			lease->session_holds++;
		return lease->token;
	}

	memset(&fresh, 0, sizeof(fresh));
	strlcpy(fresh.resource, resource, sizeof(fresh.resource));
	fresh.keylen = snprintf(fresh.key, sizeof(fresh.key), "%slock:%s",
							rl_key_prefix, resource);

	/* our own expired lease may still sit on some nodes: clear it first */
	if (found)
		send_release(lease->key, lease->keylen, lease->owner, true, false);

	started_us = rl_now_us();
	rl_stats_count(RL_STAT_ACQUIRES);
	for (;;)
	{
		RlRequest	req;
		RlAttempt	r = attempt_acquire(&fresh, ttl_ms, &req);

		if (r == RL_ATTEMPT_GRANTED)
			break;
		if (r == RL_ATTEMPT_UNAVAILABLE)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			report_unavailable(resource, &req);
		}
		if (try_only)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			if (r == RL_ATTEMPT_EXPIRED)
				rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
			else
				rl_stats_count(RL_STAT_REFUSED_HELD);
			if (r == RL_ATTEMPT_EXPIRED)
				ereport(ERROR,
						(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
						 errmsg("lease on \"%s\" expired before it was granted", resource),
						 errdetail("Acquiring took longer than the TTL of %d ms less the drift allowance.",
								   ttl_ms),
						 errhint("Use a longer TTL.")));
			if (found)
				hash_search(rl_leases, resource, HASH_REMOVE, NULL);
			return -1;
		}
		retry_sleep(resource, started_us, &req);
	}

	rl_stats_count(RL_STAT_GRANTS);
	rl_stats_acquire_latency(rl_now_us() - started_us);

	/* an expired lease being renewed keeps its holds */
	if (found)
	{
		fresh.session_holds = lease->session_holds;
		fresh.xact_holds = lease->xact_holds;
	}
	else
		lease = hash_search(rl_leases, resource, HASH_ENTER, NULL);
	if (xact && fresh.xact_holds++ == 0)
		fresh.xact_subid = GetCurrentSubTransactionId();
	else if (!xact)
		fresh.session_holds++;
	memcpy(lease, &fresh, sizeof(RlLease));
	return lease->token;
}

/* Release a lease on the nodes and forget it. */
static void
lease_drop(RlLease *lease, bool nothrow)
{
	send_release(lease->key, lease->keylen, lease->owner, true, nothrow);
	rl_stats_count(RL_STAT_RELEASES);
	hash_search(rl_leases, lease->resource, HASH_REMOVE, NULL);
}

/*
 * Drop holds in bulk: xact holds (transaction end), session holds
 * (redlock_unlock_all), or everything (exit, node list change).
 *
 * The releases go out pipelined and only every RL_RELEASE_BATCH-th and the
 * last one are waited for: replies come back in order on each connection,
 * so once a majority has answered the awaited release, the ones sent
 * before it have been applied there too.  One round trip for a typical
 * commit, whatever the number of leases.
 */
void
rl_release_all(bool session, bool xact, bool nothrow)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	int			to_release = 0;
	int			released = 0;

	if (rl_leases == NULL)
		return;

	hash_seq_init(&status, rl_leases);
	while ((lease = hash_seq_search(&status)) != NULL)
	{
		if (session)
			lease->session_holds = 0;
		if (xact)
			lease->xact_holds = 0;
		if (lease->session_holds == 0 && lease->xact_holds == 0)
			to_release++;
	}
	if (to_release == 0)
		return;

	hash_seq_init(&status, rl_leases);
	while ((lease = hash_seq_search(&status)) != NULL)
	{
		bool		wait;

		if (lease->session_holds != 0 || lease->xact_holds != 0)
			continue;
		released++;
		wait = (released == to_release || released % RL_RELEASE_BATCH == 0);
		send_release(lease->key, lease->keylen, lease->owner, wait, nothrow);
		rl_stats_count(RL_STAT_RELEASES);
		hash_search(rl_leases, lease->resource, HASH_REMOVE, NULL);
	}
}

/* ---------- callbacks ---------- */

static void
abandon_in_flight(void)
{
	if (rl_in_flight.active)
	{
		rl_in_flight.active = false;
		send_release(rl_in_flight.key, rl_in_flight.keylen, rl_in_flight.owner,
					 false, true);
	}
}

static bool
holds_xact_leases(void)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	if (rl_leases == NULL)
		return false;
	hash_seq_init(&status, rl_leases);
	while ((lease = hash_seq_search(&status)) != NULL)
	{
		if (lease->xact_holds > 0)
		{
			hash_seq_term(&status);
			return true;
		}
	}
	return false;
}

void
rl_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (holds_xact_leases())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds redlock transaction leases")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			rl_release_all(false, true, true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			abandon_in_flight();
			rl_release_all(false, true, true);
			break;
		default:
			break;
	}
}

/*
 * A transaction lease first taken in a subtransaction that rolls back goes
 * with it, as advisory transaction locks do; on commit it moves to the
 * parent.
 */
void
rl_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	if (event == SUBXACT_EVENT_ABORT_SUB)
		abandon_in_flight();
	if (rl_leases == NULL ||
		(event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB))
		return;

	hash_seq_init(&status, rl_leases);
	while ((lease = hash_seq_search(&status)) != NULL)
	{
		if (lease->xact_holds == 0 || lease->xact_subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			lease->xact_subid = parentSubid;
		else
		{
			lease->xact_holds = 0;
			if (lease->session_holds == 0)
				lease_drop(lease, true);
		}
	}
}

static void
rl_backend_exit(int code, Datum arg)
{
	abandon_in_flight();
	rl_release_all(true, true, true);
	rl_nodes_disconnect_all();
}

/* ---------- SQL functions ---------- */

PG_FUNCTION_INFO_V1(redlock_lock);
PG_FUNCTION_INFO_V1(redlock_try_lock);
PG_FUNCTION_INFO_V1(redlock_xact_lock);
PG_FUNCTION_INFO_V1(redlock_try_xact_lock);
PG_FUNCTION_INFO_V1(redlock_unlock);
PG_FUNCTION_INFO_V1(redlock_unlock_all);
PG_FUNCTION_INFO_V1(redlock_extend);
PG_FUNCTION_INFO_V1(redlock_leases);

Datum
redlock_lock(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(acquire(fcinfo, false, false));
}

Datum
redlock_xact_lock(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(acquire(fcinfo, true, false));
}

Datum
redlock_try_lock(PG_FUNCTION_ARGS)
{
	int64		token = acquire(fcinfo, false, true);

	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_try_xact_lock(PG_FUNCTION_ARGS)
{
	int64		token = acquire(fcinfo, true, true);

	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_unlock(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	RlLease    *lease;

	resource_arg(fcinfo, 0, resource);
	rl_nodes_ready();

	lease = hash_search(rl_leases, resource, HASH_FIND, NULL);
	if (lease == NULL || lease->session_holds == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session holds no session lease on \"%s\"", resource)));
		PG_RETURN_BOOL(false);
	}

	if (--lease->session_holds == 0 && lease->xact_holds == 0)
	{
		if (lease->valid_until_us <= rl_now_us())
			ereport(WARNING,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg("lease on \"%s\" had expired before it was released", resource),
					 errdetail("Its fencing token %lld may since have been superseded.",
							   (long long) lease->token)));
		lease_drop(lease, false);
	}
	PG_RETURN_BOOL(true);
}

Datum
redlock_unlock_all(PG_FUNCTION_ARGS)
{
	registry_init();
	if (rl_nodes_config_changed())
		rl_nodes_ready();
	rl_release_all(true, false, false);
	PG_RETURN_VOID();
}

Datum
redlock_extend(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;
	RlLease    *lease;
	RlRequest	req;
	const char *argv[6];
	size_t		argvlen[6];
	char		ttl_buf[16];
	int64_t		start_us;
	int64_t		validity_us;

	resource_arg(fcinfo, 0, resource);
	ttl_ms = ttl_arg(fcinfo, 1);
	rl_nodes_ready();

	lease = hash_search(rl_leases, resource, HASH_FIND, NULL);
	if (lease == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session holds no lease on \"%s\"", resource)));

	if (lease->valid_until_us <= rl_now_us())
	{
		int64		token = lease->token;

		rl_stats_count(RL_STAT_EXTEND_FAILURES);
		lease->session_holds = lease->xact_holds = 0;
		lease_drop(lease, false);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("lease on \"%s\" was lost: it expired before it was extended",
						resource),
				 errdetail("Its fencing token %lld may have been superseded.",
						   (long long) token),
				 errhint("Extend leases well before their TTL runs out.")));
	}

	argv[0] = "EVAL";
	argvlen[0] = 4;
	argv[1] = EXTEND_SCRIPT;
	argvlen[1] = sizeof(EXTEND_SCRIPT) - 1;
	argv[2] = "1";
	argvlen[2] = 1;
	argv[3] = lease->key;
	argvlen[3] = lease->keylen;
	argv[4] = lease->owner;
	argvlen[4] = RL_OWNER_LEN;
	argv[5] = ttl_buf;
	argvlen[5] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);

	request_init(&req, RL_REPLY_FLAG, RL_GOAL_QUORUM);
	req.argc = 6;
	req.argv = argv;
	req.argvlen = argvlen;
	start_us = rl_now_us();
	rl_nodes_run(&req);

	if (req.decision == RL_UNAVAILABLE)
	{
		rl_stats_count(RL_STAT_EXTEND_FAILURES);
		report_unavailable(resource, &req);
	}

	validity_us = rl_validity_us(ttl_ms, rl_now_us() - start_us, rl_drift_factor);
	if (req.decision != RL_WON || validity_us <= 0)
	{
		StringInfoData detail;
		int64		token = lease->token;

		initStringInfo(&detail);
		appendStringInfo(&detail, "Fencing token %lld may have been superseded.",
						 (long long) token);
		describe_nodes(&detail, &req);
		rl_stats_count(RL_STAT_EXTEND_FAILURES);
		ereport(LOG,
				(errmsg("redlock: lease on \"%s\" was lost on extend", resource)));
		lease->session_holds = lease->xact_holds = 0;
		lease_drop(lease, false);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("lease on \"%s\" was lost", resource),
				 errdetail_internal("%s", detail.data)));
	}

	rl_stats_count(RL_STAT_EXTENDS);
	lease->ttl_ms = ttl_ms;
	lease->valid_until_us = start_us + (int64_t) ttl_ms * 1000 -
		rl_drift_us(ttl_ms, rl_drift_factor);
	PG_RETURN_INT32((int32) (validity_us / 1000));
}

Datum
redlock_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	int64_t		now = rl_now_us();

	InitMaterializedSRF(fcinfo, 0);
	if (rl_leases == NULL)
		return (Datum) 0;

	hash_seq_init(&status, rl_leases);
	while ((lease = hash_seq_search(&status)) != NULL)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		const char *scope;

		if (lease->session_holds > 0 && lease->xact_holds > 0)
			scope = "session+transaction";
		else if (lease->session_holds > 0)
			scope = "session";
		else
			scope = "transaction";

		values[0] = CStringGetTextDatum(lease->resource);
		values[1] = Int64GetDatum(lease->token);
		values[2] = CStringGetTextDatum(scope);
		values[3] = Int32GetDatum(lease->session_holds + lease->xact_holds);
		values[4] = Int32GetDatum((int32) Max((lease->valid_until_us - now) / 1000, 0));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
