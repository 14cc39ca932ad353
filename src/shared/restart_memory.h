/*-------------------------------------------------------------------------
 *
 * restart_memory.h
 *	  The Redis nodes' last run_ids, shared by the whole server
 *	  (src/restart_memory.c), for the restart quarantine.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_RESTART_MEMORY_H
#define REDLOCK_RESTART_MEMORY_H

extern void rl_restart_memory_init(void);

#endif							/* REDLOCK_RESTART_MEMORY_H */
