/*-------------------------------------------------------------------------
 *
 * fence_config.c
 *	  The fence's trigger arguments: the token column, the modes, and the
 *	  row's resource column, resolved against the table.
 *
 *	redlock_fence(['column' [, 'strict' | 'allow_equal'] [, 'held']
 *				   [, 'resource=COLUMN']])
 *
 * The token column comes first; the others follow it in any order, each at
 * most once.  'resource=COLUMN' names a text column holding each row's
 * resource, and needs 'held': only the session's own leases tell which
 * resource a token belongs to.  Every misuse is an error at the first write
 * the trigger sees (22023 for the arguments, 42703 and 42804 for the
 * columns).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "sql/fence_internal.h"

#define RL_FENCE_DEFAULT_COLUMN "fence_token"
#define RL_FENCE_RESOURCE_ARG "resource="
#define RL_FENCE_MAX_ARGS 4

#define FENCE_MODES_HINT \
	"Use 'strict' (the offered token must be greater than the stored one) or 'allow_equal' (greater or equal), 'held' (the token must be of a valid lease this session holds), and 'resource=COLUMN' (with 'held': of a lease on the row's resource), each at most once."

/* The live column of the table named exactly so; InvalidAttrNumber if none. */
static void
fence_find_column(TupleDesc tupdesc, FenceColumn *col)
{
	col->attnum = InvalidAttrNumber;
	col->typid = InvalidOid;
	for (int i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), col->name) == 0)
		{
			col->attnum = attr->attnum;
			col->typid = attr->atttypid;
			return;
		}
	}
}

/* A mode argument was given wrong: an unknown one, or one twice. */
static pg_noreturn void
fence_bad_mode(const FenceCall *fc, const char *mode, const char *detail)
{
	Trigger    *trigger = fc->trigdata->tg_trigger;

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid mode \"%s\" for redlock_fence() in trigger \"%s\" on table \"%s\"",
					mode, trigger->tgname, fence_relname(fc->rel)),
			 detail ? errdetail_internal("%s", detail) : 0,
			 errhint(FENCE_MODES_HINT)));
}

/* The modes and 'resource=COLUMN', which follow the token column. */
static void
fence_parse_modes(FenceCall *fc)
{
	Trigger    *trigger = fc->trigdata->tg_trigger;
	bool		have_comparison = false;
	size_t		reslen = strlen(RL_FENCE_RESOURCE_ARG);

	fc->allow_equal = false;
	fc->held = false;
	fc->res.name = NULL;
	for (int i = 1; i < trigger->tgnargs; i++)
	{
		const char *mode = trigger->tgargs[i];

		if (strncmp(mode, RL_FENCE_RESOURCE_ARG, reslen) == 0)
		{
			if (fc->res.name != NULL)
				fence_bad_mode(fc, mode, "The trigger gives 'resource=' more than once.");
			fc->res.name = mode + reslen;
			if (fc->res.name[0] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("empty resource column name for redlock_fence() in trigger \"%s\" on table \"%s\"",
								trigger->tgname, fence_relname(fc->rel)),
						 errhint("Name the column after the equals sign, as in 'resource=acct_key'.")));
		}
		else if (strcmp(mode, "held") == 0)
		{
			if (fc->held)
				fence_bad_mode(fc, mode, NULL);
			fc->held = true;
		}
		else if (strcmp(mode, "allow_equal") == 0 || strcmp(mode, "strict") == 0)
		{
			if (have_comparison)
				fence_bad_mode(fc, mode, "The trigger gives more than one of 'strict' and 'allow_equal'.");
			have_comparison = true;
			fc->allow_equal = (mode[0] == 'a');
		}
		else
			fence_bad_mode(fc, mode, NULL);
	}

	/*
	 * Without 'held' the fence knows nothing of the leases behind a token, so
	 * it could not tell which resource a token is of: a resource column would
	 * be silently ignored, and look like a protection it is not.
	 */
	if (fc->res.name != NULL && !fc->held)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("'resource=%s' for redlock_fence() needs the mode 'held' (trigger \"%s\" on table \"%s\")",
						fc->res.name, trigger->tgname, fence_relname(fc->rel)),
				 errdetail("Only in 'held' mode does the fence know the lease behind a token, and so its resource."),
				 errhint("Add the argument 'held'.")));
}

/* The token column: present, and of an integer type. */
static void
fence_resolve_token_column(FenceCall *fc)
{
	Trigger    *trigger = fc->trigdata->tg_trigger;
	FenceColumn *col = &fc->col;

	col->name = trigger->tgnargs >= 1 ? trigger->tgargs[0] : RL_FENCE_DEFAULT_COLUMN;
	fence_find_column(RelationGetDescr(fc->rel), col);

	if (col->attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("fencing token column \"%s\" of table \"%s\" does not exist",
						col->name, fence_relname(fc->rel)),
				 errdetail("Trigger \"%s\" uses redlock_fence() with token column \"%s\".",
						   trigger->tgname, col->name),
				 strncmp(col->name, RL_FENCE_RESOURCE_ARG, strlen(RL_FENCE_RESOURCE_ARG)) == 0 ?
				 errhint("The first argument is always the token column: name it before '%s', as in redlock_fence('%s', '%s', 'held').",
						 col->name, RL_FENCE_DEFAULT_COLUMN, col->name) :
				 errhint("Add a bigint column \"%s\", or name the token column in the trigger's first argument (case-sensitive).",
						 col->name)));

	if (col->typid != INT8OID && col->typid != INT4OID && col->typid != INT2OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("fencing token column \"%s\" of table \"%s\" has type %s",
						col->name, fence_relname(fc->rel), format_type_be(col->typid)),
				 errdetail("The token column must be of type bigint, integer or smallint."),
				 errhint("Lease tokens need bigint.")));
}

/* The resource column, when named: present, and text or varchar. */
static void
fence_resolve_resource_column(FenceCall *fc)
{
	Trigger    *trigger = fc->trigdata->tg_trigger;
	FenceColumn *res = &fc->res;
	Oid			base;

	if (res->name == NULL)
	{
		res->attnum = InvalidAttrNumber;
		return;
	}
	fence_find_column(RelationGetDescr(fc->rel), res);

	if (res->attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("resource column \"%s\" of table \"%s\" does not exist",
						res->name, fence_relname(fc->rel)),
				 errdetail("Trigger \"%s\" uses redlock_fence() with 'resource=%s'.",
						   trigger->tgname, res->name),
				 errhint("Name a text column holding each row's resource (case-sensitive), e.g. a generated column such as 'acct:' || id.")));

	base = getBaseType(res->typid);
	if (base != TEXTOID && base != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("resource column \"%s\" of table \"%s\" has type %s",
						res->name, fence_relname(fc->rel), format_type_be(res->typid)),
				 errdetail("The resource column must be of type text or varchar."),
				 errhint("Resources are lease names; a generated column can make one, e.g. GENERATED ALWAYS AS ('acct:' || id) STORED.")));
}

/*
 * Resolve the trigger arguments against the table.  Done on every call: it
 * is a scan of the tuple descriptor, far cheaper than the trigger call
 * itself, and needs no cache that ALTER TABLE or partitions could outdate.
 */
void
fence_parse_args(FenceCall *fc)
{
	Trigger    *trigger = fc->trigdata->tg_trigger;

	if (trigger->tgnargs > RL_FENCE_MAX_ARGS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("too many arguments for redlock_fence() in trigger \"%s\" on table \"%s\"",
						trigger->tgname, fence_relname(fc->rel)),
				 errdetail_plural("The trigger gives %d argument; redlock_fence() takes at most %d.",
								  "The trigger gives %d arguments; redlock_fence() takes at most %d.",
								  trigger->tgnargs, trigger->tgnargs, RL_FENCE_MAX_ARGS),
				 errhint("Arguments are the token column (default '%s'), then the modes: 'strict' or 'allow_equal', 'held', and 'resource=COLUMN'.",
						 RL_FENCE_DEFAULT_COLUMN)));

	fence_parse_modes(fc);
	fence_resolve_token_column(fc);
	fence_resolve_resource_column(fc);
}
