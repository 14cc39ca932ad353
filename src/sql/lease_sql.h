/*-------------------------------------------------------------------------
 *
 * lease_sql.h
 *	  Argument checks and error details shared by the SQL-callable
 *	  functions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_SQL_H
#define REDLOCK_LEASE_SQL_H

#include "fmgr.h"
#include "lib/stringinfo.h"

#include "net/nodes.h"

extern void rl_resource_arg(FunctionCallInfo fcinfo, int argno, char *out);
extern void rl_describe_nodes(StringInfo buf, const RlRequest *req);

#endif							/* REDLOCK_LEASE_SQL_H */
