/*-------------------------------------------------------------------------
 *
 * lease_sql.h
 *	  Argument checks shared by the SQL-callable functions (lease_sql.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_SQL_H
#define REDLOCK_LEASE_SQL_H

#include "fmgr.h"

#include "lease/registry.h"

extern void rl_resource_arg(FunctionCallInfo fcinfo, int argno, char *out);
extern void rl_resource_text(const text *t, char *out);
extern int	rl_ttl_arg(FunctionCallInfo fcinfo, int argno);
extern bool rl_keep_alive_arg(FunctionCallInfo fcinfo, int argno);
extern int	rl_wait_ms_arg(FunctionCallInfo fcinfo, int argno);
extern void rl_refuse_in_parallel_mode(const char *function);
extern void rl_warn_no_transaction_block(const char *function,
										 const char *resource);
extern bool rl_unlock_one(const char *resource, bool shared);

/* redlock_extend, for its form over several resources */
extern RlLease *rl_extend_check(const char *resource);
extern int32 rl_extend_lease(RlLease *lease, const char *resource,
							 int ttl_ms);

#endif							/* REDLOCK_LEASE_SQL_H */
