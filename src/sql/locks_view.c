/*-------------------------------------------------------------------------
 *
 * locks_view.c
 *	  redlock_locks(): the server-wide lease table as rows, like pg_locks.
 *
 * usesysid is the session user, as in pg_stat_activity (not a SECURITY
 * DEFINER function's owner); key is the whole Redis key, so that two
 * databases with different redlock.key_prefix values do not look like two
 * holders of one lock.  valid_until is the end of the validity its holder
 * was told, also once it has passed; for a lost lease, when the keep-alive
 * worker found it lost.  place is a waiter's place in line across the
 * servers sharing the nodes, 1 being next (lock_table_place.c).  node_list
 * names the node list the lease is on (rl_node_list_id()): a database or
 * role may set redlock.nodes of its own, and the same key on other nodes
 * is another lock; redlock_nodes shows a session's own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "shared/lock_table.h"

PG_FUNCTION_INFO_V1(redlock_locks);

Datum
redlock_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64_t		now_us = rl_now_us();
	TimestampTz now = GetCurrentTimestamp();
	RlLockRow  *rows;
	int			nrows;

	if (!rl_lock_table_enabled())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the redlock lease table is not available"),
				 errdetail("The lease table lives in shared memory, which needs redlock in shared_preload_libraries."),
				 errhint("Add redlock to shared_preload_libraries and restart the server; redlock_leases shows this session's leases without it.")));

	InitMaterializedSRF(fcinfo, 0);

	/* a copy of the rows: no output work under the table's lock */
	nrows = rl_lock_table_rows(&rows);
	rl_lock_table_places(rows, nrows);

	for (int i = 0; i < nrows; i++)
	{
		const RlLockRow *s = &rows[i];
		Datum		values[17];
		bool		nulls[17] = {0};

		values[0] = Int32GetDatum(s->pid);
		values[1] = ObjectIdGetDatum(s->dbid);
		values[2] = ObjectIdGetDatum(s->userid);
		values[3] = CStringGetTextDatum(s->resource);
		values[4] = BoolGetDatum(s->granted);
		values[12] = CStringGetTextDatum(s->key);
		values[15] = CStringGetTextDatum(rl_node_list_id(s->nodes));
		values[16] = CStringGetTextDatum(s->shared ? "shared" : "exclusive");
		if (s->granted)
		{

			values[5] = Int64GetDatum(s->token);
			values[6] = CStringGetTextDatum(
											(s->scopes & RL_SCOPE_SESSION) && (s->scopes & RL_SCOPE_XACT) ?
											"session+transaction" :
											(s->scopes & RL_SCOPE_SESSION) ? "session" : "transaction");
			nulls[7] = true;
			values[8] = TimestampTzGetDatum(s->granted_at);
			values[9] = TimestampTzGetDatum(now + (s->valid_until_us - now_us));
			values[10] = BoolGetDatum(s->keep_alive);
			values[11] = BoolGetDatum(s->lost);
			values[13] = BoolGetDatum(s->limit_reached);
			nulls[14] = true;
		}
		else
		{
			nulls[5] = nulls[6] = nulls[8] = nulls[9] = nulls[10] = nulls[11] = true;
			nulls[13] = true;
			values[7] = TimestampTzGetDatum(s->waitstart);
			values[14] = Int32GetDatum(s->place);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(rows);
	return (Datum) 0;
}
