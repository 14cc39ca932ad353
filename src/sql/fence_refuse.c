/*-------------------------------------------------------------------------
 *
 * fence_refuse.c
 *	  The fence's refusals: what it checks of an offered token besides the
 *	  comparison with the stored one (the clock; in 'held' mode, the
 *	  session's own leases, on the row's resource with 'resource=COLUMN'),
 *	  and the message of every refusal.
 *
 * Every refusal is ERRCODE_REDLOCK_STALE_TOKEN (RL001), so that an
 * application can tell a fenced-out write from any other failure; the
 * message says which case it is.  A refusal made with
 * session_replication_role = replica (a logical replication apply worker,
 * a restore) says so in its detail and hint instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "postmaster/bgworker.h"
#include "replication/logicalworker.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "sql/fence_internal.h"
#include "base/guc.h"
#include "base/redlock.h"
#include "lease/registry.h"
#include "shared/stats.h"

/*
 * The write is applied with session_replication_role = replica (a logical
 * replication apply worker, or a session loading data): the trigger fires
 * there only because it is enabled ALWAYS or REPLICA.  Such refusals get
 * their own detail and hint, and are not counted as fence rejections: the
 * apply worker retries the same change every few seconds.
 */
static bool
fence_in_replica(void)
{
	return SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA;
}

static int
fence_replica_errdetail(const FenceCall *fc)
{
	const char *tgname = fc->trigdata->tg_trigger->tgname;

	if (IsLogicalWorker())
		return errdetail("The write is a change applied by \"%s\", which runs with session_replication_role = replica; trigger \"%s\" fires there only because it is enabled ALWAYS or REPLICA, and a replicated change carries no redlock.fence_token.",
						 MyBgworkerEntry ? MyBgworkerEntry->bgw_name : "logical replication worker",
						 tgname);
	return errdetail("session_replication_role is replica, and trigger \"%s\" fires only because it is enabled ALWAYS or REPLICA.",
					 tgname);
}

static int
fence_replica_errhint(const FenceCall *fc)
{
	Relation	rel = fc->rel;
	const char *table = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												   RelationGetRelationName(rel));
	const char *tgname = quote_identifier(fc->trigdata->tg_trigger->tgname);

	if (IsLogicalWorker())
		return errhint("The publisher's fence has judged the change already.  On a subscriber, leave the trigger in its default state (ALTER TABLE %s ENABLE TRIGGER %s): the apply worker skips it and local writes stay fenced.  The worker retries the change until then.",
					   table, tgname);
	return errhint("To load rows past the fence (a data-only restore), leave the trigger in its default state (ALTER TABLE %s ENABLE TRIGGER %s), which session_replication_role = replica skips, or use pg_restore --disable-triggers.",
				   table, tgname);
}

/* Count a refusal, except one in replica mode (see fence_in_replica). */
static void
fence_count_refusal(const FenceCall *fc)
{
	if (!fence_in_replica())
		rl_stats_fence_rejection(RelationGetRelid(fc->rel));
}

/* errdetail() / errhint() of a refusal, or the replica ones */
#define FENCE_DETAIL(fc, ...) \
	(fence_in_replica() ? fence_replica_errdetail(fc) : errdetail(__VA_ARGS__))
#define FENCE_HINT(fc, ...) \
	(fence_in_replica() ? fence_replica_errhint(fc) : errhint(__VA_ARGS__))
#define FENCE_NO_HINT(fc) \
	(fence_in_replica() ? fence_replica_errhint(fc) : 0)

/*
 * The setting holds a token that this transaction did not set.  RL001 like
 * every refusal of the fence: the write offers no token it may use, which is
 * what a fenced-out writer must stop on.
 */
void
fence_reject_scope(const FenceCall *fc, RlTokenScope scope)
{
	Relation	rel = fc->rel;

	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" was not set in this transaction",
					fence_relname(rel)),
			 fence_in_replica() ? fence_replica_errdetail(fc) :
			 scope == RL_TOKEN_PLAIN_SET ?
			 errdetail("The token %s in redlock.fence_token was set for the session (by SET without LOCAL, or set_config() with is_local false), so it would outlive this transaction and its lease.",
					   rl_fence_token_setting) :
			 errdetail("The token %s in redlock.fence_token was set outside this transaction (by a session-level SET, ALTER ROLE or ALTER DATABASE SET, or the server configuration), so its lease may be gone.",
					   rl_fence_token_setting),
			 FENCE_HINT(fc, "Set the token for the transaction only, with SET LOCAL redlock.fence_token or set_config('redlock.fence_token', ..., true), or set column \"%s\" in the statement.",
						fc->col.name),
			 errtablecol(rel, fc->col.attnum)));
}

/*
 * All refusals share RL001, so an application can tell a fenced-out write
 * from any other failure; the message says which case it is.
 */
void
fence_reject_missing(const FenceCall *fc, FenceMissing why)
{
	Relation	rel = fc->rel;
	const FenceColumn *col = &fc->col;
	const char *relname = fence_relname(rel);

	fence_count_refusal(fc);
	switch (why)
	{
		case FENCE_UPDATE_UNCHANGED:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 FENCE_DETAIL(fc, "The UPDATE leaves column \"%s\" unchanged and redlock.fence_token is not set.",
								  col->name),
					 FENCE_HINT(fc, "Set column \"%s\" to the lease's token in the statement, or run SET LOCAL redlock.fence_token first.",
								col->name),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_UPDATE_SET_NULL:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 FENCE_DETAIL(fc, "The UPDATE sets column \"%s\" to NULL.", col->name),
					 FENCE_NO_HINT(fc),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_DELETE_UNSET:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 FENCE_DETAIL(fc, "A DELETE takes its token from redlock.fence_token, which is not set."),
					 FENCE_HINT(fc, "Run SET LOCAL redlock.fence_token first."),
					 errtablecol(rel, col->attnum)));
			break;
		case FENCE_INSERT_NULL:
			ereport(ERROR,
					(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
					 errmsg("missing fencing token for table \"%s\"", relname),
					 FENCE_DETAIL(fc, "The new row's column \"%s\" is NULL and redlock.fence_token is not set.",
								  col->name),
					 FENCE_HINT(fc, "Set column \"%s\" to the lease's token in the statement, or run SET LOCAL redlock.fence_token first.  A data-only restore (pg_restore --data-only) must bypass the fence: use pg_restore --disable-triggers, or session_replication_role = replica.",
								col->name),
					 errtablecol(rel, col->attnum)));
			break;
	}
	pg_unreachable();
}

/* The wall clock in microseconds since 1970, as lease tokens count. */
static int64
fence_clock_us(void)
{
	return GetCurrentTimestamp() +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/* Is a token further ahead of the clock than redlock.fence_max_ahead? */
static bool
fence_too_far_ahead(int64 token, int64 now_us)
{
	return rl_fence_max_ahead_s >= 0 &&
		token > now_us + (int64) rl_fence_max_ahead_s * USECS_PER_SEC;
}

/*
 * Default modes: refuse a token that no grant can have given yet.  Grants
 * propose the clock in microseconds; max(counter) + 1 exceeds it only by
 * the grants of the same microsecond, or by how far the clock of another
 * server sharing the nodes runs ahead of ours.
 */
void
fence_check_clock(const FenceCall *fc, int64 offered)
{
	int64		now_us = fence_clock_us();

	if (!fence_too_far_ahead(offered, now_us))
		return;
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" is ahead of the clock",
					fence_relname(fc->rel)),
			 FENCE_DETAIL(fc, "Offered token %lld is more than redlock.fence_max_ahead (%d s) ahead of this server's clock.",
						  (long long) offered, rl_fence_max_ahead_s),
			 FENCE_HINT(fc, "Lease tokens are the time of their grant in microseconds since 1970, so no lease has given this one: it is forged or corrupt.  If the clocks of the servers sharing the Redis nodes differ by more, fix them, or raise redlock.fence_max_ahead."),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/*
 * This session's lease on a resource, or NULL.  A value longer than any
 * resource name is no lease's (the registry compares names only that far).
 */
static RlLease *
fence_lease_on(const char *resource)
{
	if (strlen(resource) > RL_MAX_RESOURCE_LEN)
		return NULL;
	return rl_registry_held(resource);
}

/* The token is of no lease of this session ('held' mode). */
static pg_noreturn void
fence_reject_not_held(const FenceCall *fc, int64 offered)
{
	const char *tgname = fc->trigdata->tg_trigger->tgname;
	RlLease    *own = fc->resource ? fence_lease_on(fc->resource) : NULL;

	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" is not held by this session",
					fence_relname(fc->rel)),
			 fc->resource == NULL ?
			 FENCE_DETAIL(fc, "Offered token %lld is not the token of a lease this session holds, and trigger \"%s\" accepts only those ('held' mode).",
						  (long long) offered, tgname) :
			 own != NULL ?
			 FENCE_DETAIL(fc, "Offered token %lld is not the token of a lease this session holds; its lease on \"%s\", the row's resource, has token %lld.",
						  (long long) offered, fc->resource, (long long) own->token) :
			 FENCE_DETAIL(fc, "Offered token %lld is not the token of a lease this session holds, nor does it hold one on \"%s\", the row's resource, which trigger \"%s\" requires.",
						  (long long) offered, fc->resource, tgname),
			 TRIGGER_FIRED_BY_INSERT(fc->trigdata->tg_event) ?
			 FENCE_HINT(fc, "Take the lease in this session and write with its token.  A data-only restore (pg_restore --data-only) must bypass the fence: use pg_restore --disable-triggers, or session_replication_role = replica.") :
			 FENCE_HINT(fc, "Take the lease in this session and write with its token."),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/* The token is of this session's lease on another resource than the row's. */
static pg_noreturn void
fence_reject_other_resource(const FenceCall *fc, int64 offered,
							const RlLease *lease)
{
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" belongs to a lease on another resource",
					fence_relname(fc->rel)),
			 FENCE_DETAIL(fc, "Offered token %lld is the token of this session's lease on \"%s\", and the row's resource (column \"%s\") is \"%s\".",
						  (long long) offered, lease->resource, fc->res.name,
						  fc->resource),
			 FENCE_HINT(fc, "Take the lease on \"%s\" and write the row with its token.",
						fc->resource),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/* The lease behind the token has run out. */
static pg_noreturn void
fence_reject_expired(const FenceCall *fc, int64 offered, const RlLease *lease)
{
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" belongs to an expired lease",
					fence_relname(fc->rel)),
			 FENCE_DETAIL(fc, "Offered token %lld is the token of this session's lease on \"%s\", whose validity has run out.",
						  (long long) offered, lease->resource),
			 FENCE_HINT(fc, "Take the lease again, re-read the row, and write with the new token."),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/* The lease behind the token is shared: its holder reads, and does not write. */
static pg_noreturn void
fence_reject_shared(const FenceCall *fc, int64 offered, const RlLease *lease)
{
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("fencing token for table \"%s\" belongs to a shared lease",
					fence_relname(fc->rel)),
			 FENCE_DETAIL(fc, "Offered token %lld is the token of this session's shared lease on \"%s\"; other sessions may hold the resource at the same time, so a write with it is not fenced.",
						  (long long) offered, lease->resource),
			 FENCE_HINT(fc, "Write with the token of an exclusive lease (redlock_lock())."),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/* Has the lease's validity run out? */
static bool
fence_expired(const RlLease *lease)
{
	return rl_registry_valid_until(lease) <= rl_now_us();
}

/*
 * 'held' mode: the token must be that of a lease this session holds, whose
 * validity has not run out; with 'resource=COLUMN', a lease on the row's
 * resource.
 */
void
fence_check_held(const FenceCall *fc, int64 offered)
{
	RlLease    *lease;

	if (fc->resource == NULL)
		lease = rl_registry_held_token(offered);
	else
	{
		/*
		 * By the resource first: leases of two resources may carry the same
		 * token.
		 */
		lease = fence_lease_on(fc->resource);
		if (lease == NULL || lease->token != offered)
		{
			lease = rl_registry_held_token(offered);
			if (lease != NULL)
				fence_reject_other_resource(fc, offered, lease);
		}
	}
	if (lease == NULL)
		fence_reject_not_held(fc, offered);
	if (lease->shared)
		fence_reject_shared(fc, offered, lease);
	if (fence_expired(lease))
		fence_reject_expired(fc, offered, lease);
}

/*
 * An UPDATE moves the row from fc->old_resource to fc->resource (whose
 * lease fence_check_held() has found).  The session must also hold a valid
 * lease on the old resource, newer than the row's stored token, which a
 * holder of the old resource wrote.
 */
void
fence_check_move(const FenceCall *fc, bool have_stored, int64 stored)
{
	const char *from = fc->old_resource;
	RlLease    *lease = fence_lease_on(from);

	if (lease == NULL || fence_expired(lease))
	{
		fence_count_refusal(fc);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
				 errmsg("row of table \"%s\" cannot leave resource \"%s\" without a valid lease on it",
						fence_relname(fc->rel), from),
				 lease == NULL ?
				 FENCE_DETAIL(fc, "The UPDATE moves the row from resource \"%s\" to \"%s\" (column \"%s\"), and this session holds no lease on \"%s\".",
							  from, fc->resource, fc->res.name, from) :
				 FENCE_DETAIL(fc, "The UPDATE moves the row from resource \"%s\" to \"%s\" (column \"%s\"), and this session's lease on \"%s\" has run out.",
							  from, fc->resource, fc->res.name, from),
				 FENCE_HINT(fc, "Hold leases on both resources, and write with the token of the lease on \"%s\".",
							fc->resource),
				 errtablecol(fc->rel, fc->res.attnum)));
	}

	if (!have_stored || lease->token > stored ||
		(fc->allow_equal && lease->token == stored))
		return;
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("stale fencing token for table \"%s\"", fence_relname(fc->rel)),
			 fc->allow_equal ?
			 FENCE_DETAIL(fc, "The UPDATE moves the row from resource \"%s\" to \"%s\"; this session's lease on \"%s\" has token %lld, less than the stored token %lld.",
						  from, fc->resource, from, (long long) lease->token,
						  (long long) stored) :
			 FENCE_DETAIL(fc, "The UPDATE moves the row from resource \"%s\" to \"%s\"; this session's lease on \"%s\" has token %lld, not greater than the stored token %lld.",
						  from, fc->resource, from, (long long) lease->token,
						  (long long) stored),
			 FENCE_HINT(fc, "A newer holder of \"%s\" has written this row; take the lease again and re-read the row.",
						from),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/* The offered token is not positive. */
void
fence_reject_invalid(const FenceCall *fc, int64 offered)
{
	fence_count_refusal(fc);
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
			 errmsg("invalid fencing token for table \"%s\"", fence_relname(fc->rel)),
			 FENCE_DETAIL(fc, "Offered token %lld is not positive.", (long long) offered),
			 FENCE_NO_HINT(fc),
			 errtablecol(fc->rel, fc->col.attnum)));
}

/*
 * The offered token is not newer than the stored one.  The hint tells the
 * cases apart: an equal token (its own holder wrote the row already), a
 * stored token that no grant can have given (a forged write reached the
 * row), and a newer holder.
 */
void
fence_reject_stale(const FenceCall *fc, int64 offered, int64 stored)
{
	Relation	rel = fc->rel;

	fence_count_refusal(fc);
	if (offered == stored)
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
				 errmsg("stale fencing token for table \"%s\"", fence_relname(rel)),
				 FENCE_DETAIL(fc, "Offered token %lld is not greater than the stored token %lld.",
							  (long long) offered, (long long) stored),
				 FENCE_HINT(fc, "The row was last written with this same token, so by this lease's holder (an earlier statement, or one UPDATE that reached the row twice), not by a newer one.  'strict' accepts one write per token; to let a holder write its row again, use the trigger mode 'allow_equal'."),
				 errtablecol(rel, fc->col.attnum)));
	else if (fence_too_far_ahead(stored, fence_clock_us()))
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
				 errmsg("stale fencing token for table \"%s\"", fence_relname(rel)),
				 FENCE_DETAIL(fc, "Offered token %lld is less than the stored token %lld, which is ahead of this server's clock by more than redlock.fence_max_ahead.",
							  (long long) offered, (long long) stored),
				 FENCE_HINT(fc, "No lease gives such a token: the row was probably written with a forged one.  Repair the row with the trigger disabled, and use the trigger mode 'held' to accept only tokens of leases the writer holds."),
				 errtablecol(rel, fc->col.attnum)));
	else
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_STALE_TOKEN),
				 errmsg("stale fencing token for table \"%s\"", fence_relname(rel)),
				 fc->allow_equal ?
				 FENCE_DETAIL(fc, "Offered token %lld is less than the stored token %lld.",
							  (long long) offered, (long long) stored) :
				 FENCE_DETAIL(fc, "Offered token %lld is not greater than the stored token %lld.",
							  (long long) offered, (long long) stored),
				 FENCE_HINT(fc, "A newer lease holder has written this row; take the lease again and re-read the row."),
				 errtablecol(rel, fc->col.attnum)));
	pg_unreachable();
}
