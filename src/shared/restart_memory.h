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

#include "base/quorum.h"

extern void rl_restart_memory_init(void);
extern bool rl_restart_memory_get(const char *node, RlRestartMemo *memo);

#endif							/* REDLOCK_RESTART_MEMORY_H */
