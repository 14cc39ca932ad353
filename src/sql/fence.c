/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  The fence: a BEFORE ROW trigger that rejects writes carrying a stale
 *	  fencing token.
 *
 * A lease can be outlived (a paused holder wakes after its TTL), so the
 * lease alone never protects the data.  Each protected row stores the token
 * of its last writer; a write must offer a token greater than the stored
 * one ('strict') or at least equal to it ('allow_equal'), otherwise it is
 * rejected with ERRCODE_REDLOCK_STALE_TOKEN (RL001).
 *
 *	CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON t
 *		FOR EACH ROW EXECUTE FUNCTION redlock_fence(['column' [, 'mode' ...]]);
 *
 * Modes: 'strict' (the default) or 'allow_equal', and 'held'; with 'held',
 * 'resource=COLUMN' binds each row to the resource named in that column.
 *
 * What the fence trusts.  A token is a number anyone who may write the
 * table can offer.  By default the fence trusts it to come from a grant, as
 * far as it can tell: grants take their tokens from the clock in
 * microseconds (max(counter) + 1 at most a few increments above it, or the
 * clock of another server sharing the nodes), so a token further ahead of
 * this server's clock than redlock.fence_max_ahead is refused; otherwise
 * one forged write of 9223372036854775807 would lock every real holder out
 * of the row for good.  In 'held' mode a token is accepted only when this
 * session holds a lease with it whose validity has not run out (the
 * backend's registry knows), so a forged or stale token never lands.  With
 * 'resource=COLUMN' that lease must be on the row's own resource, so a
 * session holding acct:2 cannot write the row of acct:1.  An UPDATE that
 * changes the resource moves the row: the session must hold valid leases on
 * both, the old resource's token must beat the stored one, and the offered
 * token, of the new resource's lease, starts the row's history there.
 *
 * Where the offered token comes from:
 *	UPDATE: NEW.col when the UPDATE changes the column; otherwise the setting
 *			redlock.fence_token, stamped into NEW so the row records its
 *			writer; otherwise NEW.col when the statement assigns the column
 *			its current value (only 'allow_equal' accepts that).
 *	DELETE: redlock.fence_token.
 *	INSERT: NEW.col, or redlock.fence_token (stamped) when NEW.col is NULL;
 *			any positive token is accepted, there being no stored one.
 * A stored NULL means the row was never fenced: any positive token wins.
 *
 * The setting is accepted only when the current transaction set it (SET
 * LOCAL, set_config(..., true), a function's SET clause).  A value that
 * outlives its transaction (a session SET, ALTER ROLE/DATABASE SET, the
 * server configuration) would go on fencing writes after its lease is gone,
 * so it is refused rather than ignored: ignoring it could let an
 * 'allow_equal' UPDATE through on the column's own value.
 *
 * This file finds the offered token and judges it; fence_config.c parses
 * the trigger's arguments, fence_resource.c reads the rows' resources, and
 * fence_refuse.c checks the token against the clock or the session's leases
 * and raises every refusal.
 *
 * Concurrency needs nothing here: the trigger manager locks the row before
 * firing BEFORE ROW UPDATE/DELETE triggers, and in READ COMMITTED hands us
 * the newest version it locked (after EvalPlanQual), so OLD is the row the
 * write will actually replace.  At higher isolation levels a concurrently
 * updated row raises a serialization failure before we are called.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "nodes/bitmapset.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "sql/fence_internal.h"
#include "base/guc.h"
#include "base/redlock.h"

PG_FUNCTION_INFO_V1(redlock_fence);

/* Fetch the column as int64; false when NULL. */
static bool
fence_get(HeapTuple tuple, TupleDesc tupdesc, const FenceColumn *col,
		  int64 *value)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, col->attnum, tupdesc, &isnull);

	if (isnull)
		return false;
	switch (col->typid)
	{
		case INT8OID:
			*value = DatumGetInt64(d);
			break;
		case INT4OID:
			*value = (int64) DatumGetInt32(d);
			break;
		default:
			*value = (int64) DatumGetInt16(d);
			break;
	}
	return true;
}

/*
 * redlock.fence_token as int64; false when unset.  The check hook has
 * already made sure it is a positive bigint.  Refuses the write when the
 * token was not set by the current transaction.
 */
static bool
fence_setting(const FenceCall *fc, int64 *value)
{
	RlTokenScope scope = rl_fence_token_scope();

	if (scope == RL_TOKEN_UNSET)
		return false;
	if (scope != RL_TOKEN_TRANSACTION)
		fence_reject_scope(fc, scope);
	*value = strtoi64(rl_fence_token_setting, NULL, 10);
	return true;
}

/* Write the setting's token into NEW, so the row records its writer. */
static HeapTuple
fence_stamp(const FenceCall *fc, HeapTuple tuple, int64 token)
{
	Relation	rel = fc->rel;
	const FenceColumn *col = &fc->col;
	Datum		d;
	bool		isnull = false;
	int			attnum = col->attnum;

	/* a narrow column cannot hold every token (lease tokens need bigint) */
	if ((col->typid == INT4OID && token > PG_INT32_MAX) ||
		(col->typid == INT2OID && token > PG_INT16_MAX))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("fencing token %lld is out of range for column \"%s\" of table \"%s\" (type %s)",
						(long long) token, col->name, fence_relname(rel),
						format_type_be(col->typid)),
				 errhint("Lease tokens need a bigint column."),
				 errtablecol(rel, col->attnum)));

	if (col->typid == INT8OID)
		d = Int64GetDatum(token);
	else if (col->typid == INT4OID)
		d = Int32GetDatum((int32) token);
	else
		d = Int16GetDatum((int16) token);

	return heap_modify_tuple_by_cols(tuple, RelationGetDescr(rel), 1,
									 &attnum, &d, &isnull);
}

/*
 * Judge an offered token against the stored one (have_stored false: the
 * row was never fenced); returns only when the write may go ahead.
 */
static void
fence_judge(const FenceCall *fc, int64 offered, bool have_stored, int64 stored)
{
	if (offered <= 0)
		fence_reject_invalid(fc, offered);

	if (fc->held)
		fence_check_held(fc, offered);
	else
		fence_check_clock(fc, offered);

	/*
	 * A row moving to another resource: the stored token is of the old
	 * resource's leases, so the old resource's lease answers for it; the
	 * offered token starts the row's history under the new one, as an INSERT
	 * would.
	 */
	if (fc->old_resource != NULL)
	{
		fence_check_move(fc, have_stored, stored);
		return;
	}

	if (!have_stored || offered > stored || (fc->allow_equal && offered == stored))
		return;
	fence_reject_stale(fc, offered, stored);
}

Datum
redlock_fence(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata;
	TriggerEvent event;
	Relation	rel;
	TupleDesc	tupdesc;
	FenceCall	fc;
	int64		setting = 0;

	/* trigger protocol: BEFORE ROW INSERT/UPDATE/DELETE only */
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("redlock_fence() was not called by the trigger manager"),
				 errhint("Attach it with CREATE TRIGGER ... BEFORE UPDATE OR DELETE ... FOR EACH ROW EXECUTE FUNCTION redlock_fence().")));

	trigdata = (TriggerData *) fcinfo->context;
	event = trigdata->tg_event;
	rel = trigdata->tg_relation;

	if (TRIGGER_FIRED_BY_TRUNCATE(event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("redlock_fence() cannot be fired by TRUNCATE (trigger \"%s\" on table \"%s\")",
						trigdata->tg_trigger->tgname, fence_relname(rel)),
				 errhint("TRUNCATE carries no fencing token; revoke TRUNCATE on fenced tables instead.")));
	if (!TRIGGER_FIRED_FOR_ROW(event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("redlock_fence() must be fired FOR EACH ROW (trigger \"%s\" on table \"%s\")",
						trigdata->tg_trigger->tgname, fence_relname(rel))));
	if (!TRIGGER_FIRED_BEFORE(event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("redlock_fence() must be fired BEFORE the write (trigger \"%s\" on table \"%s\")",
						trigdata->tg_trigger->tgname, fence_relname(rel)),
				 errdetail("An AFTER or INSTEAD OF trigger cannot stop the write before it is applied.")));

	fc.trigdata = trigdata;
	fc.rel = rel;
	fence_parse_args(&fc);
	fence_read_resources(&fc);
	tupdesc = RelationGetDescr(rel);

	if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		HeapTuple	newtuple = trigdata->tg_newtuple;
		int64		offered = 0,
					stored = 0;
		bool		have_new,
					have_stored;

		have_stored = fence_get(trigdata->tg_trigtuple, tupdesc, &fc.col, &stored);
		have_new = fence_get(newtuple, tupdesc, &fc.col, &offered);

		if (have_new != have_stored || (have_new && offered != stored))
		{
			/* the statement changed the column: that is the offered token */
			if (!have_new)
				fence_reject_missing(&fc, FENCE_UPDATE_SET_NULL);
		}
		else if (fence_setting(&fc, &setting))
		{
			fence_judge(&fc, setting, have_stored, stored);
			if (!have_new || offered != setting)
				newtuple = fence_stamp(&fc, newtuple, setting);
			return PointerGetDatum(newtuple);
		}
		else if (trigdata->tg_updatedcols == NULL ||
				 !bms_is_member(fc.col.attnum - FirstLowInvalidHeapAttributeNumber,
								trigdata->tg_updatedcols))
			fence_reject_missing(&fc, FENCE_UPDATE_UNCHANGED);
		else if (!have_new)
			fence_reject_missing(&fc, FENCE_UPDATE_SET_NULL);

		/*
		 * Reached with the column changed, or assigned its current value
		 * (the same holder writing again, which only 'allow_equal' accepts).
		 */
		fence_judge(&fc, offered, have_stored, stored);
		return PointerGetDatum(newtuple);
	}
	else if (TRIGGER_FIRED_BY_DELETE(event))
	{
		int64		stored = 0;
		bool		have_stored;

		have_stored = fence_get(trigdata->tg_trigtuple, tupdesc, &fc.col, &stored);
		if (!fence_setting(&fc, &setting))
			fence_reject_missing(&fc, FENCE_DELETE_UNSET);
		fence_judge(&fc, setting, have_stored, stored);
		return PointerGetDatum(trigdata->tg_trigtuple);
	}
	else
	{
		/* INSERT: no stored token, so any positive one is accepted */
		HeapTuple	newtuple = trigdata->tg_trigtuple;
		int64		offered = 0;

		if (fence_get(newtuple, tupdesc, &fc.col, &offered))
		{
			fence_judge(&fc, offered, false, 0);
			return PointerGetDatum(newtuple);
		}
		if (!fence_setting(&fc, &setting))
			fence_reject_missing(&fc, FENCE_INSERT_NULL);
		fence_judge(&fc, setting, false, 0);
		return PointerGetDatum(fence_stamp(&fc, newtuple, setting));
	}
}
