/*-------------------------------------------------------------------------
 *
 * lease_sql.h
 *	  Argument checks shared by the SQL-callable functions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_SQL_H
#define REDLOCK_LEASE_SQL_H

#include "fmgr.h"

extern void rl_resource_arg(FunctionCallInfo fcinfo, int argno, char *out);

#endif							/* REDLOCK_LEASE_SQL_H */
