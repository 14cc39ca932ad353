/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  The per-backend lease registry, as seen by the rest of the extension.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_H
#define REDLOCK_LEASE_H

#include "access/xact.h"

extern void rl_nodes_ready(void);
extern void rl_release_all(bool session, bool xact, bool nothrow);
extern void rl_xact_callback(XactEvent event, void *arg);
extern void rl_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

#endif							/* REDLOCK_LEASE_H */
