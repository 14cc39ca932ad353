# The README's job queue and leader election under concurrency: the objects
# are created from README.md itself (test/perl/ReadmeSQL.pm), so the README
# cannot drift from what is tested here.
#
#   jobs    README_WORKERS sessions (default 6) claim README_JOBS jobs
#           (default 40) at once; each loops claim -> work (20 ms) and
#           record the run in a side table -> mark done under the token ->
#           unlock, until no job is left.  Every job must have run exactly
#           once, and more than one worker must have run jobs.
#   leader  the same number of sessions ask to lead the same run, again and
#           again (README_LEADER_CALLS times each, default 25).  Exactly one
#           call must have led it.
use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use ReadmeSQL;
use RedlockTest;
use Test::More;

my $workers = $ENV{README_WORKERS} // 6;
my $njobs = $ENV{README_JOBS} // 40;
my $leader_calls = $ENV{README_LEADER_CALLS} // 25;

my @redis = redis_nodes(3);
# preloaded: redlock_locks shows every backend's leases
my $pg = redlock_cluster('readme', nodes => \@redis, preload => 1,
	conf => "max_connections = " . (2 * $workers + 10) . "\n");

# no lease of $prefix left: no backend of the server holds one, and no node
# has its lock key (a fresh session's redlock_leases would show only its own)
sub no_lease_left
{
	my ($prefix, $what) = @_;
	is($pg->safe_psql('postgres',
			"SELECT count(*) FROM redlock_locks WHERE resource LIKE '$prefix%'"),
		'0', "$what: no backend holds a lease (redlock_locks)");
	ok(no_keys("$prefix*", @redis), "$what: no lock key is left on any node");
}

# Run one psql per SQL statement at once; returns when all are done, dies
# when one failed.  The statements start together: each first waits at a
# barrier (an advisory lock held here) that opens once all of them wait.
sub run_concurrently
{
	my (@sql) = @_;
	my $barrier = $pg->background_psql('postgres');
	$barrier->query_safe('SELECT pg_advisory_lock(4242)');
	my @runs;
	for my $sql (@sql)
	{
		my %r = (sql => $sql, out => '', err => '');
		my $wait = 'SELECT pg_advisory_lock_shared(4242), pg_advisory_unlock_shared(4242)';
		$r{h} = IPC::Run::start(
			[ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
				'-d', $pg->connstr('postgres'), '-c', $wait, '-c', $sql ],
			'<', \'', '>', \$r{out}, '2>', \$r{err},
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
		push @runs, \%r;
	}
	$pg->poll_query_until('postgres',
		"SELECT count(*) = " . scalar(@sql)
		  . " FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted")
	  or die 'the sessions did not reach the barrier';
	$barrier->query_safe('SELECT pg_advisory_unlock(4242)');
	$barrier->quit;
	for my $r (@runs)
	{
		$r->{h}->finish;
		die "\"$r->{sql}\" failed: $r->{err}" if $r->{h}->result;
	}
	return map { $_->{out} } @runs;
}

# ---------- jobs: README "Claiming jobs"

my ($jobs_sql) = ReadmeSQL::blocks('Claiming jobs');
like($jobs_sql, qr/CREATE FUNCTION claim_job\b/,
	'the first block of "Claiming jobs" defines claim_job');
$pg->safe_psql('postgres', $jobs_sql);
$pg->safe_psql('postgres', <<"SQL");
INSERT INTO jobs (id) SELECT g FROM generate_series(1, $njobs) g ON CONFLICT DO NOTHING;
CREATE TABLE job_runs (job int NOT NULL, worker int NOT NULL, token bigint NOT NULL);

-- a worker as the README describes it, one transaction per step
CREATE PROCEDURE job_worker(me int) LANGUAGE plpgsql AS \$\$
DECLARE
    j int;
    t bigint;
BEGIN
    LOOP
        SELECT job, token INTO j, t FROM claim_job();
        COMMIT;
        IF j IS NULL THEN
            -- every queued job is held by another worker, or none is left
            EXIT WHEN NOT EXISTS (SELECT FROM jobs WHERE state = 'queued');
            PERFORM pg_sleep(0.01);
            CONTINUE;
        END IF;
        -- the work: 20 ms, so that one worker alone would need 800 ms for
        -- 40 jobs, far longer than the others need to claim their first
        PERFORM pg_sleep(0.02);
        INSERT INTO job_runs VALUES (j, me, t);
        COMMIT;
        UPDATE jobs SET state = 'done', result = 'ok', fence_token = t WHERE id = j;
        COMMIT;
        PERFORM redlock_unlock('job:' || j);
    END LOOP;
END
\$\$;
SQL

run_concurrently(map { "CALL job_worker($_)" } 1 .. $workers);

is($pg->safe_psql('postgres', "SELECT count(*) FROM jobs WHERE state <> 'done'"),
	'0', "all $njobs jobs are done");
is( $pg->safe_psql(
		'postgres', q{SELECT string_agg(format('job %s ran %s times (workers %s)', job, n, w), '; ')
  FROM (SELECT job, count(*) AS n, string_agg(worker::text, ',') AS w
          FROM job_runs GROUP BY job HAVING count(*) <> 1) twice}),
	'', 'no job ran twice');
is($pg->safe_psql('postgres', 'SELECT count(DISTINCT job) FROM job_runs'),
	$pg->safe_psql('postgres', 'SELECT count(*) FROM jobs'),
	'every job ran');
cmp_ok($pg->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM job_runs'),
	'>', 1, 'the jobs were shared among the workers')
  or diag('jobs run per worker: ',
	$pg->safe_psql('postgres',
		q{SELECT string_agg(format('%s: %s', worker, n), ', ' ORDER BY worker)
  FROM (SELECT worker, count(*) AS n FROM job_runs GROUP BY worker) w}));
no_lease_left('job:', 'jobs');

# ---------- leader: README "Leader election for a periodic task"

my ($leader_sql) = ReadmeSQL::blocks('Leader election for a periodic task');
like($leader_sql, qr/CREATE FUNCTION run_nightly_report\b/,
	'the first block of "Leader election" defines run_nightly_report');
$pg->safe_psql('postgres', $leader_sql);
$pg->safe_psql('postgres', <<"SQL");
-- start from a run that no call has led yet
TRUNCATE nightly_report;
INSERT INTO nightly_report (id) VALUES (1);
CREATE TABLE leader_log (session int NOT NULL, run date NOT NULL, led boolean NOT NULL);

-- a server's schedule firing again and again for the current run
CREATE PROCEDURE contender(me int, calls int) LANGUAGE plpgsql AS \$\$
BEGIN
    FOR i IN 1 .. calls LOOP
        INSERT INTO leader_log SELECT me, current_date, run_nightly_report();
        COMMIT;
    END LOOP;
END
\$\$;
SQL

run_concurrently(map { "CALL contender($_, $leader_calls)" } 1 .. $workers);

# the run is the day: a test that spans midnight legitimately sees two runs
my $per_run = $pg->safe_psql('postgres',
	"SELECT string_agg(format('%s: %s', run, n), ', ' ORDER BY run)
	   FROM (SELECT run, count(*) FILTER (WHERE led) AS n FROM leader_log GROUP BY run) r");
like($per_run, qr/^\d{4}-\d\d-\d\d: 1(, \d{4}-\d\d-\d\d: 1)?$/,
	'each run was led exactly once');
note "leaders per run: $per_run";
is($pg->safe_psql('postgres', 'SELECT count(*) FROM leader_log'),
	$workers * $leader_calls, 'every call answered');
is($pg->safe_psql('postgres', 'SELECT last_run = current_date, body FROM nightly_report'),
	't|all good', 'the row records the run it completed');
no_lease_left('leader:', 'leader');

$pg->stop;
done_testing();
