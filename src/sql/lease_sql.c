/*-------------------------------------------------------------------------
 *
 * lease_sql.c
 *	  The SQL-callable lease functions: lock, try-lock, unlock, extend and
 *	  the redlock_leases view, with their argument checks and errors.  (The
 *	  acquire loop behind the lock calls: lease_acquire.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "lease/lease_acquire.h"
#include "lease/lease_release.h"
#include "lease/lease_report.h"
#include "lease/registry.h"
#include "lease/session_nodes.h"
#include "shared/lock_table.h"
#include "shared/stats.h"
#include "sql/lease_sql.h"

/* ---------- argument checks ---------- */

void
rl_resource_arg(FunctionCallInfo fcinfo, int argno, char *out)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("resource name must not be NULL")));
	rl_resource_text(PG_GETARG_TEXT_PP(argno), out);
}

/* A resource name's checks, into out (RL_MAX_RESOURCE_LEN + 1 bytes). */
void
rl_resource_text(const text *t, char *out)
{
	int			len;

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

int
rl_ttl_arg(FunctionCallInfo fcinfo, int argno)
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
void
rl_refuse_in_parallel_mode(const char *function)
{
	if (IsInParallelMode())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot call %s() during a parallel operation", function),
				 errdetail("A lease taken or released in a parallel worker belongs to that worker and ends with it."),
				 errhint("Mark the function that calls %s() PARALLEL UNSAFE.", function)));
}

/* ---------- lock calls ---------- */

/* keep_alive argument: absent (the 1.0 signatures) means false. */
bool
rl_keep_alive_arg(FunctionCallInfo fcinfo, int argno)
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
int
rl_wait_ms_arg(FunctionCallInfo fcinfo, int argno)
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

/*
 * A lock call: the resource and TTL arguments, then the lease
 * (lease_acquire.c).  wait_ms: -1 for no limit of its own.
 */
static int64
acquire(FunctionCallInfo fcinfo, bool xact, bool try_only, int wait_ms,
		bool keep_alive)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;

	rl_resource_arg(fcinfo, 0, resource);
	ttl_ms = rl_ttl_arg(fcinfo, 1);
	return rl_lease_acquire(resource, ttl_ms, xact, try_only, wait_ms,
							keep_alive);
}

/*
 * A transaction lease taken by a statement that is a transaction of its
 * own, sent outside a transaction block, is released when that statement
 * ends: warned, as PostgreSQL warns for SET LOCAL there
 * (WarnNoTransactionBlock), and only for a call at the top level of the
 * client's statement.  A function, procedure or DO block that takes one
 * uses it in the same transaction; those run with an error context of
 * their language's on the stack, which a top-level statement has not (but
 * for the one that names the parameters of an extended-protocol query).
 */
void
rl_warn_no_transaction_block(const char *function, const char *resource)
{
	if (IsTransactionBlock())
		return;
	for (ErrorContextCallback *c = error_context_stack; c != NULL; c = c->previous)
		if (c->callback != ParamsErrorCallback)
			return;
	ereport(WARNING,
			(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
			 errmsg("%s() can only be used in transaction blocks", function),
			 errdetail("The transaction lease on \"%s\" is released when this statement ends.",
					   resource),
			 errhint("Call it after BEGIN, in the transaction that uses its token, or take a session lease with redlock_lock().")));
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
	rl_refuse_in_parallel_mode("redlock_lock");
	PG_RETURN_INT64(acquire(fcinfo, false, false, rl_wait_ms_arg(fcinfo, 2),
							rl_keep_alive_arg(fcinfo, 3)));
}

Datum
redlock_xact_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	rl_refuse_in_parallel_mode("redlock_xact_lock");
	token = acquire(fcinfo, true, false, rl_wait_ms_arg(fcinfo, 2),
					rl_keep_alive_arg(fcinfo, 3));
	rl_warn_no_transaction_block("redlock_xact_lock",
							  text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_INT64(token);
}

Datum
redlock_try_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	rl_refuse_in_parallel_mode("redlock_try_lock");
	token = acquire(fcinfo, false, true, -1, rl_keep_alive_arg(fcinfo, 2));

	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_try_xact_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	rl_refuse_in_parallel_mode("redlock_try_xact_lock");
	token = acquire(fcinfo, true, true, -1, rl_keep_alive_arg(fcinfo, 2));

	if (token < 0)
		PG_RETURN_NULL();
	rl_warn_no_transaction_block("redlock_try_xact_lock",
							  text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_INT64(token);
}

/*
 * Drop one session hold of this session's lease on resource, of the given
 * mode, releasing it when that was the last hold.  False (with a WARNING,
 * as pg_advisory_unlock) when the session holds no session lease of that
 * mode on it.
 */
bool
rl_unlock_one(const char *resource, bool shared)
{
	RlLease    *lease;
	RlRequest	req;
	int64_t		left_ms;

	rl_session_nodes_ready();
	lease = rl_registry_held(resource);
	if (lease == NULL || lease->session_holds == 0 || lease->shared != shared)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 shared ?
				 errmsg("this session holds no shared session lease on \"%s\"", resource) :
				 errmsg("this session holds no session lease on \"%s\"", resource),
				 lease == NULL || lease->session_holds == 0 ? 0 :
				 shared ?
				 errdetail("Its lease on it is exclusive: redlock_unlock() releases that.") :
				 errdetail("Its lease on it is shared: redlock_unlock_shared() releases that.")));
		return false;
	}

	if (--lease->session_holds > 0 || lease->xact_holds > 0)
		return true;

	left_ms = (rl_registry_valid_until(lease) - rl_now_us()) / 1000;
	if (left_ms <= 0)
		ereport(WARNING,
				(errcode(ERRCODE_REDLOCK_LEASE_LOST),
				 errmsg("lease on \"%s\" had expired before it was released", resource),
				 errdetail("Its fencing token %lld may since have been superseded.",
						   (long long) lease->token)));
	if (!rl_lease_release_one(lease, false, &req) && left_ms > 0)
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
	return true;
}

Datum
redlock_unlock(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];

	rl_refuse_in_parallel_mode("redlock_unlock");
	rl_resource_arg(fcinfo, 0, resource);
	PG_RETURN_BOOL(rl_unlock_one(resource, false));
}

Datum
redlock_unlock_all(PG_FUNCTION_ARGS)
{
	rl_refuse_in_parallel_mode("redlock_unlock_all");
	if (rl_registry_count() > 0)
	{
		rl_session_nodes_ready();
		(void) rl_lease_release(RL_DROP_SESSION, InvalidSubTransactionId,
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

/*
 * The lease this session holds on resource, still valid, to be extended:
 * 55000 when it holds none, RL003 (the lease then counts as lost) when it
 * ran out.  rl_session_nodes_ready() first.
 */
RlLease *
rl_extend_check(const char *resource)
{
	RlLease    *lease = rl_registry_held(resource);

	if (lease == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session holds no lease on \"%s\"", resource)));

	if (rl_registry_valid_until(lease) <= rl_now_us())
		lease_lost(lease, resource, "it expired before it was extended", NULL);
	return lease;
}

Datum
redlock_extend(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;

	rl_refuse_in_parallel_mode("redlock_extend");
	rl_resource_arg(fcinfo, 0, resource);
	ttl_ms = rl_ttl_arg(fcinfo, 1);
	rl_session_nodes_ready();
	PG_RETURN_INT32(rl_extend_lease(rl_extend_check(resource), resource, ttl_ms));
}

/*
 * Extend lease (checked by rl_extend_check()) on a majority, with ttl_ms
 * as its TTL from now on: its new validity in ms, or RL003 when it was
 * lost (it then counts as lost).
 */
int32
rl_extend_lease(RlLease *lease, const char *resource, int ttl_ms)
{
	RlRequest	req;
	RlDecision	decision;
	int64_t		start_us;
	int64_t		validity_us;
	int64_t		until;

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
		rl_report_unavailable(resource, &req, true);
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
	return (int32) (validity_us / 1000);
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
		Datum		values[9];
		bool		nulls[9] = {0};
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
		values[8] = CStringGetTextDatum(lease->shared ? "shared" : "exclusive");
		/* (a 1.1 catalog's function has no mode column: only natts are read) */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
