/*-------------------------------------------------------------------------
 *
 * procs.h
 *	  A process's PGPROC number and another process's latch, on every
 *	  supported PostgreSQL version: for the files of src/shared/ that keep
 *	  per-process state in shared memory (the lock table, the dispatcher's
 *	  slots).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_PROCS_H
#define REDLOCK_PROCS_H

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"

static inline int
rl_my_procno(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyProc->pgprocno;
#endif
}

static inline Latch *
rl_latch_of(int procno)
{
#if PG_VERSION_NUM >= 170000
	return &GetPGProcByNumber(procno)->procLatch;
#else
	return &ProcGlobal->allProcs[procno].procLatch;
#endif
}

#endif							/* REDLOCK_PROCS_H */
