/*-------------------------------------------------------------------------
 *
 * fence_internal.h
 *	  What the files of the fence share: the trigger call as parsed
 *	  (fence_config.c), the row's resource (fence_resource.c), the judgement
 *	  (fence.c) and the refusals (fence_refuse.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_FENCE_INTERNAL_H
#define REDLOCK_FENCE_INTERNAL_H

#include "commands/trigger.h"
#include "utils/rel.h"

#include "base/guc.h"
#include "base/redlock.h"

/* A column named by the trigger, as found in the tuple descriptor. */
typedef struct FenceColumn
{
	const char *name;
	AttrNumber	attnum;
	Oid			typid;
} FenceColumn;

/*
 * One call of the trigger: the table, its token column, the modes and, with
 * 'resource=COLUMN', the rows' resources.
 */
typedef struct FenceCall
{
	TriggerData *trigdata;
	Relation	rel;
	FenceColumn col;
	bool		allow_equal;	/* 'allow_equal': offered >= stored */
	bool		held;			/* 'held': a lease of this session's */
	FenceColumn res;			/* 'resource=COLUMN'; attnum is
								 * InvalidAttrNumber without it */
	const char *resource;		/* the row's resource: the new row's
								 * (INSERT, UPDATE), the old row's (DELETE) */
	const char *old_resource;	/* an UPDATE that changes it: the old row's;
								 * otherwise NULL */
} FenceCall;

/* Why a write offers no token; each gets its own detail message. */
typedef enum FenceMissing
{
	FENCE_UPDATE_UNCHANGED,		/* column untouched, setting unset */
	FENCE_UPDATE_SET_NULL,		/* the UPDATE sets the column to NULL */
	FENCE_DELETE_UNSET,			/* DELETE, setting unset */
	FENCE_INSERT_NULL			/* INSERT, NULL column, setting unset */
} FenceMissing;

static inline const char *
fence_relname(Relation rel)
{
	return RelationGetRelationName(rel);
}

/* the trigger's arguments (fence_config.c) */
extern void fence_parse_args(FenceCall *fc);

/* the rows' resources, with 'resource=COLUMN' (fence_resource.c) */
extern void fence_read_resources(FenceCall *fc);

/* checks that return only when the token passes them */
extern void fence_check_clock(const FenceCall *fc, int64 offered);
extern void fence_check_held(const FenceCall *fc, int64 offered);
extern void fence_check_move(const FenceCall *fc, bool have_stored,
							 int64 stored);

/* refusals */
extern pg_noreturn void fence_reject_scope(const FenceCall *fc,
										   RlTokenScope scope);
extern pg_noreturn void fence_reject_missing(const FenceCall *fc,
											 FenceMissing why);
extern pg_noreturn void fence_reject_invalid(const FenceCall *fc,
											 int64 offered);
extern pg_noreturn void fence_reject_stale(const FenceCall *fc,
										   int64 offered, int64 stored);

#endif							/* REDLOCK_FENCE_INTERNAL_H */
