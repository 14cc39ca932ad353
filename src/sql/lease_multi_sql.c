/*-------------------------------------------------------------------------
 *
 * lease_multi_sql.c
 *	  The SQL-callable forms of the lease functions over several resources
 *	  at once, all or none: redlock_lock(text[], ...), redlock_try_lock,
 *	  redlock_xact_lock, redlock_try_xact_lock, redlock_unlock(text[]) and
 *	  redlock_extend(text[], ...), with their argument checks.  (The acquire behind them:
 *	  lease/lease_multi.c.)
 *
 * The array: one to RL_MAX_MULTI distinct resource names, none NULL, each
 * with the checks of a one-resource call.  The lock calls return one token
 * per resource, in the order given.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "lease/lease_multi.h"
#include "lease/session_nodes.h"
#include "sql/lease_sql.h"

/* The names of the call's resources; they and the array are palloc'd. */
typedef struct RlNames
{
	int			n;
	char	   *names[RL_MAX_MULTI];
} RlNames;

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * The resources argument (argno): 22004 for a NULL array or element, 22023
 * for an empty one or a resource named twice, 54000 for more than
 * RL_MAX_MULTI; each name as in a one-resource call.
 */
static void
resources_arg(FunctionCallInfo fcinfo, int argno, RlNames *out)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	   *sorted[RL_MAX_MULTI];

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("resources must not be NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("resources must not be empty")));
	if (n > RL_MAX_MULTI)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many resources in one call"),
				 errdetail("The array has %d resources; the limit is %d.",
						   n, RL_MAX_MULTI)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	out->n = n;
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("resource name must not be NULL"),
					 errdetail("Element %d of the array is NULL.", i + 1)));
		out->names[i] = palloc(RL_MAX_RESOURCE_LEN + 1);
		rl_resource_text(DatumGetTextPP(elems[i]), out->names[i]);
		sorted[i] = out->names[i];
	}
	qsort(sorted, n, sizeof(char *), name_cmp);
	for (int i = 1; i < n; i++)
		if (strcmp(sorted[i - 1], sorted[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("resource \"%s\" appears more than once", sorted[i]),
					 errhint("Name each resource once: a call takes each of them once.")));
}

/* The tokens, as bigint[] in the order of the resources. */
static Datum
tokens_array(const int64 *tokens, int n)
{
	Datum		d[RL_MAX_MULTI];

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(tokens[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* the names for a message: a", "b (quoted by it) */
static char *
names_text(const RlNames *r)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < r->n; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "\", \"" : "", r->names[i]);
	return buf.data;
}

/*
 * A lock call over the array: false when a try-lock was refused (nothing
 * taken).  wait_ms: -1 for no limit of its own.
 */
static bool
acquire(FunctionCallInfo fcinfo, bool xact, bool try_only, int wait_ms,
		bool keep_alive, RlNames *r, int64 *tokens)
{
	int			ttl_ms;

	resources_arg(fcinfo, 0, r);
	ttl_ms = rl_ttl_arg(fcinfo, 1);
	return rl_lease_acquire_multi((const char *const *) r->names, r->n,
								  ttl_ms, xact, try_only, wait_ms,
								  keep_alive, tokens);
}

PG_FUNCTION_INFO_V1(redlock_lock_multi);
PG_FUNCTION_INFO_V1(redlock_try_lock_multi);
PG_FUNCTION_INFO_V1(redlock_xact_lock_multi);
PG_FUNCTION_INFO_V1(redlock_try_xact_lock_multi);
PG_FUNCTION_INFO_V1(redlock_unlock_multi);
PG_FUNCTION_INFO_V1(redlock_extend_multi);

Datum
redlock_lock_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;
	int64		tokens[RL_MAX_MULTI];

	rl_refuse_in_parallel_mode("redlock_lock");
	(void) acquire(fcinfo, false, false, rl_wait_ms_arg(fcinfo, 2),
				   rl_keep_alive_arg(fcinfo, 3), &r, tokens);
	PG_RETURN_DATUM(tokens_array(tokens, r.n));
}

Datum
redlock_xact_lock_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;
	int64		tokens[RL_MAX_MULTI];

	rl_refuse_in_parallel_mode("redlock_xact_lock");
	(void) acquire(fcinfo, true, false, rl_wait_ms_arg(fcinfo, 2),
				   rl_keep_alive_arg(fcinfo, 3), &r, tokens);
	rl_warn_no_transaction_block("redlock_xact_lock", names_text(&r));
	PG_RETURN_DATUM(tokens_array(tokens, r.n));
}

Datum
redlock_try_lock_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;
	int64		tokens[RL_MAX_MULTI];

	rl_refuse_in_parallel_mode("redlock_try_lock");
	if (!acquire(fcinfo, false, true, -1, rl_keep_alive_arg(fcinfo, 2),
				 &r, tokens))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(tokens_array(tokens, r.n));
}

Datum
redlock_try_xact_lock_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;
	int64		tokens[RL_MAX_MULTI];

	rl_refuse_in_parallel_mode("redlock_try_xact_lock");
	if (!acquire(fcinfo, true, true, -1, rl_keep_alive_arg(fcinfo, 2),
				 &r, tokens))
		PG_RETURN_NULL();
	rl_warn_no_transaction_block("redlock_try_xact_lock", names_text(&r));
	PG_RETURN_DATUM(tokens_array(tokens, r.n));
}

/*
 * One session hold of each resource dropped; true when the session held a
 * session lease on every one (as pg_advisory_unlock's boolean), with a
 * WARNING for each it did not.
 */
Datum
redlock_unlock_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;

	rl_refuse_in_parallel_mode("redlock_unlock");
	resources_arg(fcinfo, 0, &r);
	PG_RETURN_BOOL(rl_lease_unlock_multi((const char *const *) r.names, r.n));
}

/*
 * redlock_extend(resources text[], ttl_ms): each lease extended as by
 * redlock_extend(text, ttl_ms), one round per resource in the order given;
 * the new validities, in that order.  Every resource is checked (held,
 * still valid) before any is extended; a lease found lost on the way
 * raises RL003 for it, and those extended before it keep their new
 * validity.
 */
Datum
redlock_extend_multi(PG_FUNCTION_ARGS)
{
	RlNames		r;
	int			ttl_ms;
	RlLease    *leases[RL_MAX_MULTI];
	Datum		d[RL_MAX_MULTI];

	rl_refuse_in_parallel_mode("redlock_extend");
	resources_arg(fcinfo, 0, &r);
	ttl_ms = rl_ttl_arg(fcinfo, 1);
	rl_session_nodes_ready();
	for (int i = 0; i < r.n; i++)
		leases[i] = rl_extend_check(r.names[i]);
	for (int i = 0; i < r.n; i++)
		d[i] = Int32GetDatum(rl_extend_lease(leases[i], r.names[i], ttl_ms));
	PG_RETURN_ARRAYTYPE_P(construct_array(d, r.n, INT4OID, sizeof(int32),
										  true, TYPALIGN_INT));
}
