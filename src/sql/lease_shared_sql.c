/*-------------------------------------------------------------------------
 *
 * lease_shared_sql.c
 *	  The SQL-callable shared lease functions: redlock_lock_shared,
 *	  redlock_try_lock_shared, redlock_xact_lock_shared,
 *	  redlock_try_xact_lock_shared and redlock_unlock_shared, with the
 *	  arguments and checks of the exclusive forms (lease_sql.c).  (The
 *	  acquire loop behind them: lease_shared.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "lease/lease_shared.h"
#include "sql/lease_sql.h"

/* A shared lock call: the resource and TTL arguments, then the lease. */
static int64
acquire(FunctionCallInfo fcinfo, const char *function, bool xact,
		bool try_only, int wait_ms, bool keep_alive)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	int			ttl_ms;
	int64		token;

	rl_resource_arg(fcinfo, 0, resource);
	ttl_ms = rl_ttl_arg(fcinfo, 1);
	token = rl_lease_acquire_shared(resource, ttl_ms, xact, try_only,
									wait_ms, keep_alive);
	if (xact && token >= 0)
		rl_warn_no_transaction_block(function, resource);
	return token;
}

PG_FUNCTION_INFO_V1(redlock_lock_shared);
PG_FUNCTION_INFO_V1(redlock_xact_lock_shared);
PG_FUNCTION_INFO_V1(redlock_try_lock_shared);
PG_FUNCTION_INFO_V1(redlock_try_xact_lock_shared);
PG_FUNCTION_INFO_V1(redlock_unlock_shared);

Datum
redlock_lock_shared(PG_FUNCTION_ARGS)
{
	rl_refuse_in_parallel_mode("redlock_lock_shared");
	PG_RETURN_INT64(acquire(fcinfo, "redlock_lock_shared", false, false,
							rl_wait_ms_arg(fcinfo, 2),
							rl_keep_alive_arg(fcinfo, 3)));
}

Datum
redlock_xact_lock_shared(PG_FUNCTION_ARGS)
{
	rl_refuse_in_parallel_mode("redlock_xact_lock_shared");
	PG_RETURN_INT64(acquire(fcinfo, "redlock_xact_lock_shared", true, false,
							rl_wait_ms_arg(fcinfo, 2),
							rl_keep_alive_arg(fcinfo, 3)));
}

Datum
redlock_try_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	rl_refuse_in_parallel_mode("redlock_try_lock_shared");
	token = acquire(fcinfo, "redlock_try_lock_shared", false, true, -1,
					rl_keep_alive_arg(fcinfo, 2));
	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_try_xact_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	rl_refuse_in_parallel_mode("redlock_try_xact_lock_shared");
	token = acquire(fcinfo, "redlock_try_xact_lock_shared", true, true, -1,
					rl_keep_alive_arg(fcinfo, 2));
	if (token < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
redlock_unlock_shared(PG_FUNCTION_ARGS)
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];

	rl_refuse_in_parallel_mode("redlock_unlock_shared");
	rl_resource_arg(fcinfo, 0, resource);
	PG_RETURN_BOOL(rl_unlock_one(resource, true));
}
