/*-------------------------------------------------------------------------
 *
 * lifecycle.h
 *	  Transaction, subtransaction, DISCARD ALL and exit handling of leases,
 *	  and the node list a call runs against.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LIFECYCLE_H
#define REDLOCK_LIFECYCLE_H

extern void rl_lifecycle_init(void);
extern void rl_nodes_ready(void);

#endif							/* REDLOCK_LIFECYCLE_H */
