/*-------------------------------------------------------------------------
 *
 * lease_report.h
 *	  What the nodes said, in a lease call's errors (lease_report.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_REPORT_H
#define REDLOCK_LEASE_REPORT_H

#include "lib/stringinfo.h"

#include "net/nodes.h"

extern void rl_describe_nodes(StringInfo buf, const RlRequest *req);
extern pg_noreturn void rl_report_unavailable(const char *resource,
											  const RlRequest *req,
											  bool extending);

#endif							/* REDLOCK_LEASE_REPORT_H */
