/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Cluster-wide lease statistics in shared memory.
 *
 * Available when redlock is in shared_preload_libraries, as with
 * pg_stat_statements.  One entry per database holds atomic counters and an
 * acquire-latency histogram, and one entry per fenced table counts fence
 * rejections.  Entries are created on first use under an exclusive lock and
 * then updated with atomics only.
 *
 * Both tables have a fixed size (redlock.stats_max_databases and
 * redlock.stats_max_tables, set at server start), so they never take shared
 * memory that other subsystems need.  What finds its table full is counted
 * in the shared struct instead (redlock_stats_info).  A reset zeroes the
 * database entries in place, so a backend may keep a pointer to its
 * database's entry (and a database that found the table full stays out
 * until restart), and empties the table of fenced tables, whose entries
 * nobody keeps: tables dropped since make room for new ones.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/guc.h"
#include "base/redlock.h"
#include "shared/stats.h"

/* upper bounds of the latency buckets, in microseconds; the last is open */
static const int64 rl_latency_bounds_us[RL_LATENCY_BUCKETS - 1] = {
	100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 1000000
};

typedef struct RlDbStats
{
	Oid			dbid;			/* hash key */
	pg_atomic_uint64 counters[RL_STAT_NCOUNTERS];
	pg_atomic_uint64 latency[RL_LATENCY_BUCKETS];
} RlDbStats;

typedef struct RlFenceKey
{
	Oid			dbid;
	Oid			relid;
} RlFenceKey;

typedef struct RlFenceStats
{
	RlFenceKey	key;			/* hash key */
	pg_atomic_uint64 rejections;
} RlFenceStats;

typedef struct RlSharedStats
{
	LWLock	   *lock;			/* guards entry creation and reset */
	TimestampTz stats_reset;
	/* counter increments of databases that found their table full */
	pg_atomic_uint64 db_events_untracked;
	/* fence rejections on tables that found their table full */
	pg_atomic_uint64 table_rejections_untracked;
} RlSharedStats;

static RlSharedStats *rl_shared = NULL;
static HTAB *rl_db_stats = NULL;
static HTAB *rl_fence_stats = NULL;
static RlDbStats *rl_my_db_stats = NULL;
static bool rl_my_db_untracked = false; /* found the table full */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
rl_stats_size(void)
{
	return add_size(MAXALIGN(sizeof(RlSharedStats)),
					add_size(hash_estimate_size(rl_stats_max_databases,
												sizeof(RlDbStats)),
							 hash_estimate_size(rl_stats_max_tables,
												sizeof(RlFenceStats))));
}

static void
rl_stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(rl_stats_size());
	RequestNamedLWLockTranche("redlock", 1);
}

static void
rl_stats_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_shared = ShmemInitStruct("redlock stats", sizeof(RlSharedStats), &found);
	if (!found)
	{
		rl_shared->lock = &(GetNamedLWLockTranche("redlock"))->lock;
		rl_shared->stats_reset = GetCurrentTimestamp();
		pg_atomic_init_u64(&rl_shared->db_events_untracked, 0);
		pg_atomic_init_u64(&rl_shared->table_rejections_untracked, 0);
	}

	/*
	 * HASH_FIXED_SIZE: all entries are allocated here, and an insert into a
	 * full table fails (HASH_ENTER_NULL returns NULL) instead of taking more
	 * shared memory.
	 */
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(RlDbStats);
	rl_db_stats = ShmemInitHash("redlock database stats",
								rl_stats_max_databases, rl_stats_max_databases,
								&info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	info.keysize = sizeof(RlFenceKey);
	info.entrysize = sizeof(RlFenceStats);
	rl_fence_stats = ShmemInitHash("redlock fence stats",
								   rl_stats_max_tables, rl_stats_max_tables,
								   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

void
rl_stats_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rl_stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_stats_shmem_startup;
}

/* Raise the error that says statistics need shared_preload_libraries. */
void
rl_stats_required(void)
{
	if (rl_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redlock statistics are not being collected"),
				 errdetail("Statistics live in shared memory, which needs redlock in shared_preload_libraries."),
				 errhint("Add redlock to shared_preload_libraries and restart the server; the lease functions work without it.")));
}

/*
 * This database's entry, created on first use; NULL if the table is full.
 * Database entries are never removed, so a full table stays full until
 * restart and the answer can be kept either way.
 */
static RlDbStats *
my_db_stats(void)
{
	RlDbStats  *entry;
	bool		found;

	if (rl_my_db_stats != NULL || rl_shared == NULL || rl_my_db_untracked)
		return rl_my_db_stats;

	LWLockAcquire(rl_shared->lock, LW_SHARED);
	entry = hash_search(rl_db_stats, &MyDatabaseId, HASH_FIND, NULL);
	LWLockRelease(rl_shared->lock);
	if (entry == NULL)
	{
		LWLockAcquire(rl_shared->lock, LW_EXCLUSIVE);
		entry = hash_search(rl_db_stats, &MyDatabaseId, HASH_ENTER_NULL, &found);
		if (entry != NULL && !found)
		{
			for (int i = 0; i < RL_STAT_NCOUNTERS; i++)
				pg_atomic_init_u64(&entry->counters[i], 0);
			for (int i = 0; i < RL_LATENCY_BUCKETS; i++)
				pg_atomic_init_u64(&entry->latency[i], 0);
		}
		LWLockRelease(rl_shared->lock);
	}
	rl_my_db_stats = entry;
	rl_my_db_untracked = (entry == NULL);
	return entry;
}

void
rl_stats_count(RlStatCounter counter)
{
	RlDbStats  *entry = my_db_stats();

	if (entry != NULL)
		pg_atomic_fetch_add_u64(&entry->counters[counter], 1);
	else if (rl_shared != NULL)
		pg_atomic_fetch_add_u64(&rl_shared->db_events_untracked, 1);
}

/* Not counted when untracked: the acquire it belongs to is. */
void
rl_stats_acquire_latency(int64 elapsed_us)
{
	RlDbStats  *entry = my_db_stats();
	int			bucket = 0;

	if (entry == NULL)
		return;
	while (bucket < RL_LATENCY_BUCKETS - 1 &&
		   elapsed_us > rl_latency_bounds_us[bucket])
		bucket++;
	pg_atomic_fetch_add_u64(&entry->latency[bucket], 1);
}

void
rl_stats_fence_rejection(Oid relid)
{
	RlFenceKey	key;
	RlFenceStats *entry;
	bool		found;
	bool		full = false;

	rl_stats_count(RL_STAT_FENCE_REJECTIONS);
	if (rl_shared == NULL)
		return;

	memset(&key, 0, sizeof(key));
	key.dbid = MyDatabaseId;
	key.relid = relid;
	LWLockAcquire(rl_shared->lock, LW_SHARED);
	entry = hash_search(rl_fence_stats, &key, HASH_FIND, NULL);
	if (entry != NULL)
		pg_atomic_fetch_add_u64(&entry->rejections, 1);
	else if (hash_get_num_entries(rl_fence_stats) >= rl_stats_max_tables)
	{
		/* full, and only a reset (under the exclusive lock) makes room */
		pg_atomic_fetch_add_u64(&rl_shared->table_rejections_untracked, 1);
		full = true;
	}
	LWLockRelease(rl_shared->lock);
	if (entry != NULL || full)
		return;

	LWLockAcquire(rl_shared->lock, LW_EXCLUSIVE);
	entry = hash_search(rl_fence_stats, &key, HASH_ENTER_NULL, &found);
	if (entry != NULL)
	{
		if (!found)
			pg_atomic_init_u64(&entry->rejections, 0);
		pg_atomic_fetch_add_u64(&entry->rejections, 1);
	}
	else
		pg_atomic_fetch_add_u64(&rl_shared->table_rejections_untracked, 1);
	LWLockRelease(rl_shared->lock);
}

/* ---------- SQL functions ---------- */

PG_FUNCTION_INFO_V1(redlock_stats);
PG_FUNCTION_INFO_V1(redlock_stats_latency);
PG_FUNCTION_INFO_V1(redlock_stats_fence);
PG_FUNCTION_INFO_V1(redlock_stats_reset);
PG_FUNCTION_INFO_V1(redlock_stats_info);

Datum
redlock_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	RlDbStats  *entry;

	rl_stats_required();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(rl_shared->lock, LW_SHARED);
	hash_seq_init(&status, rl_db_stats);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[RL_STAT_NCOUNTERS + 2];
		bool		nulls[RL_STAT_NCOUNTERS + 2] = {0};

		values[0] = ObjectIdGetDatum(entry->dbid);
		for (int i = 0; i < RL_STAT_NCOUNTERS; i++)
			values[i + 1] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->counters[i]));
		values[RL_STAT_NCOUNTERS + 1] = TimestampTzGetDatum(rl_shared->stats_reset);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(rl_shared->lock);
	return (Datum) 0;
}

Datum
redlock_stats_latency(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	RlDbStats  *entry;

	rl_stats_required();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(rl_shared->lock, LW_SHARED);
	hash_seq_init(&status, rl_db_stats);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		for (int b = 0; b < RL_LATENCY_BUCKETS; b++)
		{
			Datum		values[4];
			bool		nulls[4] = {false, false, false, false};

			values[0] = ObjectIdGetDatum(entry->dbid);
			values[1] = Int32GetDatum(b + 1);
			if (b < RL_LATENCY_BUCKETS - 1)
				values[2] = Float8GetDatum(rl_latency_bounds_us[b] / 1000.0);
			else
				nulls[2] = true;	/* +infinity */
			values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->latency[b]));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	LWLockRelease(rl_shared->lock);
	return (Datum) 0;
}

Datum
redlock_stats_fence(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	RlFenceStats *entry;

	rl_stats_required();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(rl_shared->lock, LW_SHARED);
	hash_seq_init(&status, rl_fence_stats);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = ObjectIdGetDatum(entry->key.dbid);
		values[1] = ObjectIdGetDatum(entry->key.relid);
		values[2] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->rejections));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(rl_shared->lock);
	return (Datum) 0;
}

Datum
redlock_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS status;
	RlDbStats  *db;
	RlFenceStats *fence;

	/*
	 * No superuser() check: the script revokes EXECUTE from PUBLIC, so a
	 * superuser can grant the reset to a monitoring role, as with
	 * pg_stat_statements_reset().
	 */
	rl_stats_required();

	LWLockAcquire(rl_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, rl_db_stats);
	while ((db = hash_seq_search(&status)) != NULL)
	{
		for (int i = 0; i < RL_STAT_NCOUNTERS; i++)
			pg_atomic_write_u64(&db->counters[i], 0);
		for (int i = 0; i < RL_LATENCY_BUCKETS; i++)
			pg_atomic_write_u64(&db->latency[i], 0);
	}
	/* removing the entry just returned by hash_seq_search() is allowed */
	hash_seq_init(&status, rl_fence_stats);
	while ((fence = hash_seq_search(&status)) != NULL)
		hash_search(rl_fence_stats, &fence->key, HASH_REMOVE, NULL);
	pg_atomic_write_u64(&rl_shared->db_events_untracked, 0);
	pg_atomic_write_u64(&rl_shared->table_rejections_untracked, 0);
	rl_shared->stats_reset = GetCurrentTimestamp();
	LWLockRelease(rl_shared->lock);
	PG_RETURN_VOID();
}

/*
 * How full the statistics tables are, and what did not fit: one row, as
 * pg_stat_statements_info.
 */
Datum
redlock_stats_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[7];
	bool		nulls[7] = {0};

	rl_stats_required();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	LWLockAcquire(rl_shared->lock, LW_SHARED);
	values[0] = Int32GetDatum((int32) hash_get_num_entries(rl_db_stats));
	values[1] = Int32GetDatum(rl_stats_max_databases);
	values[2] = Int64GetDatum((int64) pg_atomic_read_u64(&rl_shared->db_events_untracked));
	values[3] = Int32GetDatum((int32) hash_get_num_entries(rl_fence_stats));
	values[4] = Int32GetDatum(rl_stats_max_tables);
	values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&rl_shared->table_rejections_untracked));
	values[6] = TimestampTzGetDatum(rl_shared->stats_reset);
	LWLockRelease(rl_shared->lock);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
