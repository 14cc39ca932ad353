/*-------------------------------------------------------------------------
 *
 * dispatcher_view.c
 *	  redlock_dispatcher(): how many rounds of the server's backends ran on
 *	  the dispatcher worker's shared connections, and how many on their own
 *	  (redlock.shared_connections).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"

#include "shared/shared_rounds_permits.h"
#include "shared/shared_rounds.h"

PG_FUNCTION_INFO_V1(redlock_dispatcher);

Datum
redlock_dispatcher(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {0};
	uint64_t	shared;
	uint64_t	own;
	int			in_use;
	int			max;
	uint64_t	waits;
	uint64_t	waits_failed;

	if (!rl_shared_rounds_counts(&shared, &own))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the redlock dispatcher is not running"),
				 errdetail("The dispatcher worker and its counters live in shared memory, which needs redlock in shared_preload_libraries."),
				 errhint("Add redlock to shared_preload_libraries and restart the server; the lease functions work without it.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int64GetDatum((int64) shared);
	values[1] = Int64GetDatum((int64) own);
	(void) rl_own_permit_counts(&in_use, &max, &waits, &waits_failed);
	values[2] = Int32GetDatum(in_use);
	values[3] = Int32GetDatum(max);
	values[4] = Int64GetDatum((int64) waits);
	values[5] = Int64GetDatum((int64) waits_failed);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
