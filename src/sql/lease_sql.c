/*-------------------------------------------------------------------------
 *
 * lease_sql.c
 *	  The SQL-callable lease functions: lock, try-lock, unlock, extend and
 *	  the redlock_leases view, with their argument checks and errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "shared/handoff.h"
#include "sql/lease_sql.h"
#include "lease/lease_wait.h"
#include "lease/lifecycle.h"
#include "shared/lock_table.h"
#include "lease/registry.h"
#include "shared/stats.h"

/* ---------- argument checks ---------- */

void
rl_resource_arg(FunctionCallInfo fcinfo, int argno, char *out)
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
 * Leases belong to the backend that takes them: one taken in a parallel
 * worker (through a function wrongly marked PARALLEL SAFE) would be
 * released when the worker exits, behind its caller's back.  The lease
 * functions are PARALLEL UNSAFE, so they only run in parallel mode through
 * such a function: refused there, in the leader too, so that the outcome
 * does not depend on which process ran the call.
 */
static void
refuse_in_parallel_mode(const char *function)
{
	if (IsInParallelMode())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot call %s() during a parallel operation", function),
				 errdetail("A lease taken or released in a parallel worker belongs to that worker and ends with it."),
				 errhint("Mark the function that calls %s() PARALLEL UNSAFE.", function)));
}

/* ---------- error reports ---------- */

/* Append "node: outcome" lines for errdetail. */
void
rl_describe_nodes(StringInfo buf, const RlRequest *req)
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

/* A majority could not answer an acquire (or an extend): raise. */
static void
report_unavailable(const char *resource, const RlRequest *req, bool extending)
{
	StringInfoData nodes;

	initStringInfo(&nodes);
	rl_describe_nodes(&nodes, req);

	if (any_protocol_error(req))
	{
		rl_stats_count(RL_STAT_REFUSED_ERROR);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_PROTOCOL),
				 extending ?
				 errmsg("could not extend lease on \"%s\": Redis nodes answered with errors",
						resource) :
				 errmsg("could not acquire lease on \"%s\": Redis nodes answered with errors",
						resource),
				 errdetail_internal("%s", nodes.data + 1),
				 errhint("%s", rl_nodes_error_hint(req, "Check the nodes' logs, redlock.username and redlock.password."))));
	}
	rl_stats_count(RL_STAT_REFUSED_NO_QUORUM);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
			 extending ?
			 errmsg("could not extend lease on \"%s\": fewer than a majority of Redis nodes could answer",
					resource) :
			 errmsg("could not acquire lease on \"%s\": fewer than a majority of Redis nodes could answer",
					resource),
			 errdetail_plural("%d of %d nodes failed; a majority is %d.%s",
							  "%d of %d nodes failed; a majority is %d.%s",
							  req->tally.failed,
							  req->tally.failed, req->nnodes,
							  rl_majority(req->nnodes), nodes.data),
			 errhint("%s", rl_nodes_error_hint(req, "Check that the nodes in redlock.nodes are running and reachable."))));
}

/* ---------- acquire ---------- */

static void
add_hold(RlLease *lease, bool xact)
{
	if (xact && lease->xact_holds++ == 0)
		lease->xact_subid = GetCurrentSubTransactionId();
	else if (!xact)
		lease->session_holds++;
	rl_registry_holds_changed(lease);
}

/* keep_alive argument: absent (the 1.0 signatures) means false. */
static bool
keep_alive_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno)
		return false;
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("keep_alive must not be NULL")));
	return PG_GETARG_BOOL(argno);
}

/* wait_ms argument: NULL or absent means no limit of its own (-1). */
static int
wait_ms_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		wait_ms;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return -1;
	wait_ms = PG_GETARG_INT32(argno);
	if (wait_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait_ms must not be negative, not %d", wait_ms),
				 errhint("Use NULL to wait without a limit of its own (lock_timeout still applies), or redlock_try_lock() not to wait.")));
	return wait_ms;
}

/* One Redlock round: counted in redlock_stats as an attempt. */
static RlAttempt
attempt(const char *resource, const char *key, int keylen, int ttl_ms,
		RlOffer *offer, RlGrant *grant, RlRequest *req)
{
	rl_stats_count(RL_STAT_ATTEMPTS);
	return rl_proto_acquire(resource, key, keylen, ttl_ms, offer, grant, req);
}

/*
 * Take (or re-enter) a lease.  Returns the token, or -1 when try_only and
 * the resource is held elsewhere.  wait_ms: -1 for no limit of its own.
 * keep_alive: the keep-alive worker extends it while this backend lives.
 */
static int64
acquire(FunctionCallInfo fcinfo, bool xact, bool try_only, int wait_ms,
		bool keep_alive)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	int			ttl_ms;
	RlLease    *lease;
	RlGrant		grant;
	int64_t		started_us;
	int			slot;
	RlRequest	req;
	bool		asked = false;
	bool		announced = false;
	RlWaiter	waiter;

	rl_resource_arg(fcinfo, 0, resource);
	ttl_ms = ttl_arg(fcinfo, 1);
	if (keep_alive && !rl_lock_table_enabled())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("keep_alive needs redlock in shared_preload_libraries"),
				 errdetail("Leases are kept alive by a background worker, which only runs when redlock is preloaded."),
				 errhint("Add redlock to shared_preload_libraries and restart the server, or extend the lease with redlock_extend().")));
	rl_nodes_ready();
	if (keep_alive)
		rl_lock_table_keep_alive_check();

	lease = rl_registry_find(resource);
	if (lease != NULL && lease->state == RL_LEASE_RELEASING)
	{
		/* its release belongs to the node layer: never held again */
		rl_registry_forget(lease);
		lease = NULL;
	}
	if (lease != NULL && rl_registry_valid_until(lease) > rl_now_us())
	{
		lease->keep_alive |= keep_alive;
		add_hold(lease, xact);
		return lease->token;
	}

	/*
	 * Our own expired lease may still sit on some nodes: release it ahead
	 * of the new attempt, on the same connections, so it is applied first.
	 */
	if (lease != NULL)
	{
		RlReleaseItem item = {lease->key, lease->keylen, lease->owner};

		/* from now on it can never count as valid again, holds aside */
		rl_registry_expired(lease);
		rl_proto_release(&item, 1, false, false, 0, NULL, &req);
	}

	keylen = rl_lock_key(key, resource);
	started_us = rl_now_us();
	rl_stats_count(RL_STAT_ACQUIRES);
	slot = rl_registry_begin_acquire(resource, key);
	waiter.resource = resource;
	waiter.key = key;
	waiter.keylen = keylen;
	waiter.ttl_ms = ttl_ms;
	waiter.slot = slot;
	waiter.started_us = started_us;
	waiter.wait_ms = wait_ms;
	memset(&waiter.offer, 0, sizeof(waiter.offer));
	for (;;)
	{
		RlAttempt	r;

		/*
		 * First come, first served among the waiters of this server; and
		 * while a backend of this server holds the lease, asking the nodes
		 * would only be refused: wait for its release (or expiry) instead.
		 */
		if (!try_only && (!rl_lock_table_first_waiter(slot) ||
						  rl_lock_table_holder_expiry(key) > rl_now_us()))
		{
			if (rl_wait_turn(&waiter, asked ? &req : NULL, &announced, &grant))
				break;			/* handed over by the releasing holder */
			continue;
		}

		/* a lock call that waits leaves its offer where it is refused */
		if (!try_only && wait_ms != 0 && rl_handoff_remote_possible(slot))
		{
			rl_handoff_new_offer(slot, key, &waiter.offer);
			r = attempt(resource, key, keylen, ttl_ms, &waiter.offer,
						&grant, &req);
			rl_handoff_attempted(&waiter.offer, &req);
			if (r == RL_ATTEMPT_GRANTED)
				rl_handoff_wait_end(key, grant.owner);
		}
		else if (!try_only && wait_ms != 0 && slot >= 0)
		{
			/* still asks a release to announce the lock free */
			RlOffer		mark;

			rl_handoff_mark_only(&mark);
			r = attempt(resource, key, keylen, ttl_ms, &mark,
						&grant, &req);
		}
		else
			r = attempt(resource, key, keylen, ttl_ms, NULL,
						&grant, &req);
		asked = true;
		if (r == RL_ATTEMPT_GRANTED)
			break;
		if (r == RL_ATTEMPT_UNAVAILABLE)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			report_unavailable(resource, &req, false);
		}
		if (try_only)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			if (r == RL_ATTEMPT_EXPIRED)
			{
				rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
				ereport(ERROR,
						(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
						 errmsg("lease on \"%s\" expired before it was granted", resource),
						 errdetail("Acquiring took longer than the TTL of %d ms less the drift allowance.",
								   ttl_ms),
						 errhint("Use a longer TTL.")));
			}
			rl_stats_count(RL_STAT_REFUSED_HELD);
			/* an expired lease we could not renew keeps its holds */
			rl_registry_end_acquire(NULL);
			return -1;
		}
		if (rl_wait_turn(&waiter, &req, &announced, &grant))
			break;
	}

	rl_stats_count(RL_STAT_GRANTS);
	rl_stats_acquire_latency(rl_now_us() - started_us);

	/* an expired lease being renewed keeps its holds */
	lease = rl_registry_find(resource);
	if (lease == NULL)
		lease = rl_registry_enter(resource);
	lease->state = RL_LEASE_HELD;
	memcpy(lease->key, key, keylen + 1);
	lease->keylen = keylen;
	memcpy(lease->owner, grant.owner, RL_OWNER_LEN + 1);
	lease->token = grant.token;
	lease->ttl_ms = ttl_ms;
	lease->valid_until_us = grant.valid_until_us;
	lease->keep_alive |= keep_alive;
	if (xact && lease->xact_holds++ == 0)
		lease->xact_subid = GetCurrentSubTransactionId();
	else if (!xact)
		lease->session_holds++;
	rl_registry_end_acquire(lease);
	return lease->token;
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
	refuse_in_parallel_mode("redlock_lock");
	PG_RETURN_INT64(acquire(fcinfo, false, false, wait_ms_arg(fcinfo, 2),
							keep_alive_arg(fcinfo, 3)));
}

Datum
redlock_xact_lock(PG_FUNCTION_ARGS)
{
	refuse_in_parallel_mode("redlock_xact_lock");
	PG_RETURN_INT64(acquire(fcinfo, true, false, wait_ms_arg(fcinfo, 2),
							keep_alive_arg(fcinfo, 3)));
}

Datum
redlock_try_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	refuse_in_parallel_mode("redlock_try_lock");
	token = acquire(fcinfo, false, true, -1, keep_alive_arg(fcinfo, 2));

	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_try_xact_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	refuse_in_parallel_mode("redlock_try_xact_lock");
	token = acquire(fcinfo, true, true, -1, keep_alive_arg(fcinfo, 2));

	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_unlock(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	RlLease    *lease;
	RlRequest	req;
	int64_t		left_ms;

	refuse_in_parallel_mode("redlock_unlock");
	rl_resource_arg(fcinfo, 0, resource);
	rl_nodes_ready();

	lease = rl_registry_held(resource);
	if (lease == NULL || lease->session_holds == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session holds no session lease on \"%s\"", resource)));
		PG_RETURN_BOOL(false);
	}

	if (--lease->session_holds > 0 || lease->xact_holds > 0)
		PG_RETURN_BOOL(true);

	left_ms = (rl_registry_valid_until(lease) - rl_now_us()) / 1000;
	if (left_ms <= 0)
		ereport(WARNING,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("lease on \"%s\" had expired before it was released", resource),
				 errdetail("Its fencing token %lld may since have been superseded.",
						   (long long) lease->token)));
	if (!rl_registry_release_one(lease, false, &req) && left_ms > 0)
	{
		StringInfoData nodes;

		initStringInfo(&nodes);
		rl_describe_nodes(&nodes, &req);
		ereport(WARNING,
				(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
				 errmsg("release of lease on \"%s\" was not confirmed by a majority of Redis nodes",
						resource),
				 errdetail_internal("%s", nodes.data + 1),
				 errhint("The lease stays held on nodes the release did not reach until its TTL runs out, at most %lld ms; the release is sent again when they can be reached.",
						 (long long) left_ms)));
	}
	PG_RETURN_BOOL(true);
}

Datum
redlock_unlock_all(PG_FUNCTION_ARGS)
{
	refuse_in_parallel_mode("redlock_unlock_all");
	if (rl_registry_count() > 0)
	{
		rl_nodes_ready();
		(void) rl_registry_release(RL_DROP_SESSION, InvalidSubTransactionId,
								   false);
	}
	PG_RETURN_VOID();
}

/*
 * The lease is lost: it never counts as valid again and its value is taken
 * off the nodes, but its holds stay, as for a lease that ran out, until
 * they are dropped (redlock_unlock then warns that it had expired) or a
 * lock call takes it again.  Raises RL003.
 */
static void
lease_lost(RlLease *lease, const char *resource, const char *why,
		   const RlRequest *extend_req)
{
	StringInfoData detail;
	RlRequest	req;
	RlReleaseItem item = {lease->key, lease->keylen, lease->owner};

	initStringInfo(&detail);
	appendStringInfo(&detail, "Its fencing token %lld may have been superseded.",
					 (long long) lease->token);
	if (extend_req != NULL)
		rl_describe_nodes(&detail, extend_req);
	rl_stats_count(RL_STAT_EXTEND_FAILURES);
	rl_registry_expired(lease);
	rl_proto_release(&item, 1, false, false, 0, NULL, &req);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_LEASE_LOST),
			 errmsg("lease on \"%s\" was lost: %s", resource, why),
			 errdetail_internal("%s", detail.data),
			 errhint("Extend leases well before their TTL runs out.")));
}

Datum
redlock_extend(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;
	RlLease    *lease;
	RlRequest	req;
	RlDecision	decision;
	int64_t		start_us;
	int64_t		validity_us;
	int64_t		until;

	refuse_in_parallel_mode("redlock_extend");
	rl_resource_arg(fcinfo, 0, resource);
	ttl_ms = ttl_arg(fcinfo, 1);
	rl_nodes_ready();

	lease = rl_registry_held(resource);
	if (lease == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session holds no lease on \"%s\"", resource)));

	if (rl_registry_valid_until(lease) <= rl_now_us())
		lease_lost(lease, resource, "it expired before it was extended", NULL);

	/*
	 * The keep-alive worker may extend the same lease meanwhile: the lock
	 * table merges the two rounds (lock_table_keep.c).
	 */
	rl_lock_table_extend_begin(lease->shm_slot, ttl_ms);
	PG_TRY();
	{
		decision = rl_proto_extend(lease->key, lease->keylen, lease->owner,
								   ttl_ms, &start_us, &req);
	}
	PG_CATCH();
	{
		(void) rl_lock_table_extend_end(lease->shm_slot, ttl_ms, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	validity_us = rl_validity_us(ttl_ms, rl_now_us() - start_us, rl_drift_factor);
	until = rl_lock_table_extend_end(lease->shm_slot, ttl_ms,
									 decision == RL_WON && validity_us > 0);
	if (until < 0)				/* no lock table: this round alone */
		until = rl_valid_until_us(start_us, ttl_ms, rl_drift_factor);

	if (decision == RL_UNAVAILABLE)
	{
		rl_stats_count(RL_STAT_EXTEND_FAILURES);
		report_unavailable(resource, &req, true);
	}
	if (decision != RL_WON)
		lease_lost(lease, resource, "a majority of nodes no longer has it", &req);
	if (validity_us <= 0)
		lease_lost(lease, resource, "extending took longer than the new TTL", &req);
	validity_us = until - rl_now_us();
	if (validity_us <= 0)
		lease_lost(lease, resource, "the keep-alive worker lost it meanwhile", &req);

	rl_stats_count(RL_STAT_EXTENDS);
	lease->ttl_ms = ttl_ms;
	lease->valid_until_us = until;
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
	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		Datum		values[8];
		bool		nulls[8] = {0};
		const char *scope;

		if (lease->state != RL_LEASE_HELD)
			continue;			/* being released: no longer held */
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
		values[4] = Int32GetDatum((int32) Max((rl_registry_valid_until(lease) - now) / 1000, 0));
		values[5] = BoolGetDatum(lease->keep_alive);
		values[6] = BoolGetDatum(lease->keep_alive && rl_registry_valid_until(lease) == 0);
		values[7] = BoolGetDatum(lease->keep_alive &&
								 rl_lock_table_limit_reached(lease->shm_slot));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
