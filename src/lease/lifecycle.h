/*-------------------------------------------------------------------------
 *
 * lifecycle.h
 *	  Transaction, subtransaction, DISCARD ALL and exit handling of leases.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LIFECYCLE_H
#define REDLOCK_LIFECYCLE_H

extern void rl_lifecycle_init(void);
extern void rl_lifecycle_arm_exit(void);

#endif							/* REDLOCK_LIFECYCLE_H */
