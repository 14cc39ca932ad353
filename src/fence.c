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
 *		FOR EACH ROW EXECUTE FUNCTION redlock_fence(['column' [, 'mode']]);
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

#include "guc.h"
#include "redlock.h"
#include "stats.h"

#define RL_FENCE_DEFAULT_COLUMN "fence_token"

PG_FUNCTION_INFO_V1(redlock_fence);

/* The token column as found in the tuple descriptor. */
typedef struct FenceColumn
{
	const char *name;
	AttrNumber	attnum;
	Oid			typid;
} FenceColumn;

static const char *
fence_relname(Relation rel)
{
	return RelationGetRelationName(rel);
}

/*
 * Resolve the trigger arguments against the table.  Done on every call: it
 * is a scan of the tuple descriptor, far cheaper than the trigger call
 * itself, and needs no cache that ALTER TABLE or partitions could outdate.
 */
static void
fence_parse_args(TriggerData *trigdata, FenceColumn *col, bool *allow_equal)
{
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);

	if (trigger->tgnargs > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("too many arguments for redlock_fence() in trigger \"%s\" on table \"%s\"",
						trigger->tgname, fence_relname(rel)),
				 errdetail_plural("The trigger gives %d argument; redlock_fence() takes at most 2.",
								  "The trigger gives %d arguments; redlock_fence() takes at most 2.",
								  trigger->tgnargs, trigger->tgnargs),
				 errhint("Arguments are the token column (default '%s') and the comparison mode ('strict' or 'allow_equal').",
						 RL_FENCE_DEFAULT_COLUMN)));

	*allow_equal = false;
	if (trigger->tgnargs == 2)
	{
		const char *mode = trigger->tgargs[1];

		if (strcmp(mode, "allow_equal") == 0)
			*allow_equal = true;
		else if (strcmp(mode, "strict") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid comparison mode \"%s\" for redlock_fence() in trigger \"%s\" on table \"%s\"",
							mode, trigger->tgname, fence_relname(rel)),
					 errhint("Use 'strict' (the offered token must be greater than the stored one) or 'allow_equal' (greater or equal).")));
	}

	col->name = trigger->tgnargs >= 1 ? trigger->tgargs[0] : RL_FENCE_DEFAULT_COLUMN;
	col->attnum = InvalidAttrNumber;
	for (int i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), col->name) == 0)
		{
			col->attnum = attr->attnum;
			col->typid = attr->atttypid;
			break;
		}
	}

	if (col->attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("fencing token column \"%s\" of table \"%s\" does not exist",
						col->name, fence_relname(rel)),
				 errdetail("Trigger \"%s\" uses redlock_fence() with token column \"%s\".",
						   trigger->tgname, col->name),
				 errhint("Add a bigint column \"%s\", or name the token column in the trigger's first argument (case-sensitive).",
						 col->name)));

	if (col->typid != INT8OID && col->typid != INT4OID && col->typid != INT2OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("fencing token column \"%s\" of table \"%s\" has type %s",
						col->name, fence_relname(rel), format_type_be(col->typid)),
				 errdetail("The token column must be of type bigint, integer or smallint."),
				 errhint("Lease tokens need bigint.")));
}

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
 * The setting holds a token that this transaction did not set.  RL001 like
 * every refusal of the fence: the write offers no token it may use, which is
 * what a fenced-out writer must stop on.
 */
static void
fence_reject_scope(Relation rel, const FenceColumn *col, RlTokenScope scope)
{
	rl_stats_fence_rejection(RelationGetRelid(rel));
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" was not set in this transaction",
					fence_relname(rel)),
			 scope == RL_TOKEN_PLAIN_SET ?
			 errdetail("The token %s in redlock.fence_token was set for the session (by SET without LOCAL, or set_config() with is_local false), so it would outlive this transaction and its lease.",
					   rl_fence_token_setting) :
			 errdetail("The token %s in redlock.fence_token was set outside this transaction (by a session-level SET, ALTER ROLE or ALTER DATABASE SET, or the server configuration), so its lease may be gone.",
					   rl_fence_token_setting),
			 errhint("Set the token for the transaction only, with SET LOCAL redlock.fence_token or set_config('redlock.fence_token', ..., true), or set column \"%s\" in the statement.",
					 col->name),
			 errtablecol(rel, col->attnum)));
}

/*
 * redlock.fence_token as int64; false when unset.  The check hook has
 * already made sure it is a positive bigint.  Refuses the write when the
 * token was not set by the current transaction.
 */
static bool
fence_setting(Relation rel, const FenceColumn *col, int64 *value)
{
	RlTokenScope scope = rl_fence_token_scope();

	if (scope == RL_TOKEN_UNSET)
		return false;
	if (scope != RL_TOKEN_TRANSACTION)
		fence_reject_scope(rel, col, scope);
	*value = strtoi64(rl_fence_token_setting, NULL, 10);
	return true;
}

/* Write the setting's token into NEW, so the row records its writer. */
static HeapTuple
fence_stamp(Relation rel, HeapTuple tuple, const FenceColumn *col, int64 token)
{
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

/* Why a write offers no token; each gets its own detail message. */
typedef enum FenceMissing
{
	FENCE_UPDATE_UNCHANGED,		/* column untouched, setting unset */
	FENCE_UPDATE_SET_NULL,		/* the UPDATE sets the column to NULL */
	FENCE_DELETE_UNSET,			/* DELETE, setting unset */
	FENCE_INSERT_NULL			/* INSERT, NULL column, setting unset */
} FenceMissing;

static void fence_reject_missing(Relation rel, const FenceColumn *col,
								 FenceMissing why) pg_attribute_noreturn();

/*
 * All refusals share RL001, so an application can tell a fenced-out write
 * from any other failure; the message says which case it is.
 */
static void
fence_reject_missing(Relation rel, const FenceColumn *col, FenceMissing why)
{
	const char *relname = fence_relname(rel);

	rl_stats_fence_rejection(RelationGetRelid(rel));
	switch (why)
	{
		case FENCE_UPDATE_UNCHANGED:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 errdetail("The UPDATE leaves column \"%s\" unchanged and redlock.fence_token is not set.",
							   col->name),
					 errhint("Set column \"%s\" to the lease's token in the statement, or run SET LOCAL redlock.fence_token first.",
							 col->name),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_UPDATE_SET_NULL:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 errdetail("The UPDATE sets column \"%s\" to NULL.", col->name),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_DELETE_UNSET:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 errdetail("A DELETE takes its token from redlock.fence_token, which is not set."),
					 errhint("Run SET LOCAL redlock.fence_token first."),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_INSERT_NULL:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 errdetail("The new row's column \"%s\" is NULL and redlock.fence_token is not set.",
							   col->name),
					 errhint("Set column \"%s\" to the lease's token in the statement, or run SET LOCAL redlock.fence_token first.",
							 col->name),
					 errtablecol(rel, col->attnum)));
			break;
	}
	pg_unreachable();
}

/*
 * Judge an offered token against the stored one (have_stored false: the
 * row was never fenced); returns only when the write may go ahead.
 */
static void
fence_judge(Relation rel, const FenceColumn *col, bool allow_equal,
			int64 offered, bool have_stored, int64 stored)
{
	if (offered <= 0)
	{
		rl_stats_fence_rejection(RelationGetRelid(rel));
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
				 errmsg("invalid fencing token for table \"%s\"", fence_relname(rel)),
				 errdetail("Offered token %lld is not positive.", (long long) offered),
				 errtablecol(rel, col->attnum)));
	}

	if (!have_stored || offered > stored || (allow_equal && offered == stored))
		return;

	rl_stats_fence_rejection(RelationGetRelid(rel));
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("stale fencing token for table \"%s\"", fence_relname(rel)),
			 allow_equal ?
			 errdetail("Offered token %lld is less than the stored token %lld.",
					   (long long) offered, (long long) stored) :
			 errdetail("Offered token %lld is not greater than the stored token %lld.",
					   (long long) offered, (long long) stored),
			 errhint("A newer lease holder has written this row; take the lease again and re-read the row."),
			 errtablecol(rel, col->attnum)));
}

Datum
redlock_fence(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata;
	TriggerEvent event;
	Relation	rel;
	TupleDesc	tupdesc;
	FenceColumn col;
	bool		allow_equal;
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

	fence_parse_args(trigdata, &col, &allow_equal);
	tupdesc = RelationGetDescr(rel);

	if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		HeapTuple	newtuple = trigdata->tg_newtuple;
		int64		offered = 0,
					stored = 0;
		bool		have_new,
					have_stored;

		have_stored = fence_get(trigdata->tg_trigtuple, tupdesc, &col, &stored);
		have_new = fence_get(newtuple, tupdesc, &col, &offered);

		if (have_new != have_stored || (have_new && offered != stored))
		{
			/* the statement changed the column: that is the offered token */
			if (!have_new)
				fence_reject_missing(rel, &col, FENCE_UPDATE_SET_NULL);
		}
		else if (fence_setting(rel, &col, &setting))
		{
			fence_judge(rel, &col, allow_equal, setting, have_stored, stored);
			if (!have_new || offered != setting)
				newtuple = fence_stamp(rel, newtuple, &col, setting);
			return PointerGetDatum(newtuple);
		}
		else if (trigdata->tg_updatedcols == NULL ||
				 !bms_is_member(col.attnum - FirstLowInvalidHeapAttributeNumber,
								trigdata->tg_updatedcols))
			fence_reject_missing(rel, &col, FENCE_UPDATE_UNCHANGED);
		else if (!have_new)
			fence_reject_missing(rel, &col, FENCE_UPDATE_SET_NULL);

		/*
		 * Reached with the column changed, or assigned its current value
		 * (the same holder writing again, which only 'allow_equal' accepts).
		 */
		fence_judge(rel, &col, allow_equal, offered, have_stored, stored);
		return PointerGetDatum(newtuple);
	}
	else if (TRIGGER_FIRED_BY_DELETE(event))
	{
		int64		stored = 0;
		bool		have_stored;

		have_stored = fence_get(trigdata->tg_trigtuple, tupdesc, &col, &stored);
		if (!fence_setting(rel, &col, &setting))
			fence_reject_missing(rel, &col, FENCE_DELETE_UNSET);
		fence_judge(rel, &col, allow_equal, setting, have_stored, stored);
		return PointerGetDatum(trigdata->tg_trigtuple);
	}
	else
	{
		/* INSERT: no stored token, so any positive one is accepted */
		HeapTuple	newtuple = trigdata->tg_trigtuple;
		int64		offered = 0;

		if (fence_get(newtuple, tupdesc, &col, &offered))
		{
			fence_judge(rel, &col, allow_equal, offered, false, 0);
			return PointerGetDatum(newtuple);
		}
		if (!fence_setting(rel, &col, &setting))
			fence_reject_missing(rel, &col, FENCE_INSERT_NULL);
		fence_judge(rel, &col, allow_equal, setting, false, 0);
		return PointerGetDatum(fence_stamp(rel, newtuple, &col, setting));
	}
}
