/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The keep-alive background worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_WORKER_H
#define REDLOCK_WORKER_H

extern void rl_worker_register(void);

#endif							/* REDLOCK_WORKER_H */
