# The chaos soak's workload and history checker, in SQL (used by
# test/t/004_soak.pl).
#
# Workload, one iteration of one session (procedure soak_run loops until a
# deadline, committing between steps):
#   1. take a lease on one of R rows: redlock_xact_lock or redlock_lock (with
#      a lock_timeout), or redlock_try_lock;
#   2. claim and read the row in one statement (UPDATE ... SET fence_token =
#      token RETURNING v), the read-claim-compute-write pattern of the README,
#      with the fence in 'allow_equal' mode;
#   3. maybe misbehave: pause past the TTL between claim and write (the GC
#      pause: the write is then deliberately stale whenever another holder
#      claimed the row meanwhile), abandon the lease without releasing it
#      (a crashed client), or extend it first;
#   4. write v + 1 under the token;
#   5. release (session scope), or commit (transaction scope).
# Every lease call, claim and write goes to soak_history in the same
# transaction as its effect, accepted or not, with its SQLSTATE and duration.
# Each accepted claim or write bumps the row's version (ver), which orders
# all accepted operations on a row exactly, with or without the fence.
package SoakSQL;

use strict;
use warnings;

our $SCHEMA = <<'SQL';
CREATE TABLE soak_rows (
	run text, id int, v bigint NOT NULL DEFAULT 0, ver bigint NOT NULL DEFAULT 0,
	fence_token bigint, PRIMARY KEY (run, id));
CREATE TRIGGER fence BEFORE UPDATE OR DELETE ON soak_rows
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal');
CREATE TABLE soak_history (
	seq bigserial PRIMARY KEY,
	run text NOT NULL, session int NOT NULL, iter int NOT NULL, row_id int NOT NULL,
	kind text NOT NULL,		-- acquire, extend, claim, write
	scope text, misbehave text,
	token bigint, based_on bigint, new_v bigint, new_ver bigint,
	seen_token bigint, seen_ver bigint,
	accepted bool NOT NULL, sqlstate text, ms float8,
	at timestamptz NOT NULL DEFAULT clock_timestamp());

CREATE FUNCTION soak_res(p_run text, p_row int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT p_run || ':r' || p_row $$;

CREATE FUNCTION soak_acquire(p_run text, p_sess int, p_iter int, p_row int,
	p_scope text, p_ttl int, p_mis text, p_lock_timeout_ms int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz;
	tok bigint;
	st text;
BEGIN
	PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
	t0 := clock_timestamp();
	BEGIN
		IF p_scope = 'xact' THEN
			tok := redlock_xact_lock(soak_res(p_run, p_row), p_ttl);
		ELSIF p_scope = 'session' THEN
			tok := redlock_lock(soak_res(p_run, p_row), p_ttl);
		ELSE
			tok := redlock_try_lock(soak_res(p_run, p_row), p_ttl);
			IF tok IS NULL THEN st := 'busy'; END IF;
		END IF;
	EXCEPTION WHEN OTHERS THEN
		st := SQLSTATE;
		tok := NULL;
	END;
	INSERT INTO soak_history (run, session, iter, row_id, kind, scope, misbehave,
		token, accepted, sqlstate, ms)
	VALUES (p_run, p_sess, p_iter, p_row, 'acquire', p_scope, p_mis, tok,
		tok IS NOT NULL, st, extract(epoch FROM clock_timestamp() - t0) * 1000);
	PERFORM set_config('lock_timeout', '0', true);
	IF tok IS NOT NULL THEN
		PERFORM set_config('application_name', 'soak-' || p_sess || '-holder', false);
	END IF;
	RETURN tok;
END $$;

CREATE FUNCTION soak_extend(p_run text, p_sess int, p_iter int, p_row int,
	p_tok bigint) RETURNS bool
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	st text;
BEGIN
	BEGIN
		PERFORM redlock_extend(soak_res(p_run, p_row), 2000);
	EXCEPTION WHEN OTHERS THEN
		st := SQLSTATE;
	END;
	INSERT INTO soak_history (run, session, iter, row_id, kind, scope, misbehave,
		token, accepted, sqlstate, ms)
	VALUES (p_run, p_sess, p_iter, p_row, 'extend', 'session', 'extend', p_tok,
		st IS NULL, st, extract(epoch FROM clock_timestamp() - t0) * 1000);
	RETURN st IS NULL;
END $$;

-- claim and read: returns the value read, NULL when the fence refused
CREATE FUNCTION soak_claim(p_run text, p_sess int, p_iter int, p_row int,
	p_tok bigint, p_scope text, p_mis text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	val bigint;
	nver bigint;
	st text;
BEGIN
	BEGIN
		UPDATE soak_rows SET fence_token = p_tok, ver = ver + 1
		 WHERE run = p_run AND id = p_row RETURNING v, ver INTO val, nver;
	EXCEPTION WHEN OTHERS THEN
		st := SQLSTATE;
		val := NULL;
	END;
	INSERT INTO soak_history (run, session, iter, row_id, kind, scope, misbehave,
		token, based_on, new_v, new_ver, accepted, sqlstate)
	VALUES (p_run, p_sess, p_iter, p_row, 'claim', p_scope, p_mis, p_tok, val, val,
		nver, st IS NULL, st);
	RETURN val;
END $$;

CREATE FUNCTION soak_write(p_run text, p_sess int, p_iter int, p_row int,
	p_tok bigint, p_based bigint, p_scope text, p_mis text) RETURNS bool
LANGUAGE plpgsql AS $$
DECLARE
	sver bigint;
	stok bigint;
	nver bigint;
	st text;
BEGIN
	-- what the row looks like just before the write: a newer token here
	-- makes this write deliberately stale
	SELECT ver, fence_token INTO sver, stok FROM soak_rows
	 WHERE run = p_run AND id = p_row;
	BEGIN
		UPDATE soak_rows SET v = p_based + 1, ver = ver + 1, fence_token = p_tok
		 WHERE run = p_run AND id = p_row RETURNING ver INTO nver;
	EXCEPTION WHEN OTHERS THEN
		st := SQLSTATE;
	END;
	INSERT INTO soak_history (run, session, iter, row_id, kind, scope, misbehave,
		token, based_on, new_v, new_ver, seen_token, seen_ver, accepted, sqlstate)
	VALUES (p_run, p_sess, p_iter, p_row, 'write', p_scope, p_mis, p_tok, p_based,
		p_based + 1, nver, stok, sver, st IS NULL, st);
	RETURN st IS NULL;
END $$;

CREATE FUNCTION soak_unlock(p_run text, p_row int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM redlock_unlock(soak_res(p_run, p_row));
EXCEPTION WHEN OTHERS THEN
	NULL;
END $$;

-- an abandoned lease (never released) is forgotten by its session once it
-- has run out; on Redis it simply expired, as a crashed client's would
CREATE FUNCTION soak_forget_expired() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	l record;
BEGIN
	FOR l IN SELECT resource, holds FROM redlock_leases
	          WHERE validity_ms = 0 AND scope = 'session' LOOP
		FOR i IN 1 .. l.holds LOOP
			PERFORM redlock_unlock(l.resource);
		END LOOP;
	END LOOP;
EXCEPTION WHEN OTHERS THEN
	NULL;
END $$;

CREATE PROCEDURE soak_run(p_run text, p_sess int, p_deadline float8,
	p_rows int, p_seed int, p_lock_timeout_ms int)
LANGUAGE plpgsql AS $$
DECLARE
	it int;
	r int;
	u float8;
	scope text;
	mis text;
	ttl int;
	tok bigint;
	based bigint;
BEGIN
	SELECT coalesce(max(iter), 0) + 1000 INTO it FROM soak_history
	 WHERE run = p_run AND session = p_sess;
	COMMIT;
	LOOP
		EXIT WHEN extract(epoch FROM clock_timestamp()) > p_deadline;
		it := it + 1;
		PERFORM setseed(((p_seed::bigint * 7919 + p_sess * 104729 + it) % 1000003)
		                / 1000003.0);
		PERFORM set_config('application_name', 'soak-' || p_sess, false);
		PERFORM soak_forget_expired();
		r := 1 + floor(random() * p_rows)::int;
		u := random();
		scope := CASE WHEN u < 0.35 THEN 'xact' WHEN u < 0.75 THEN 'session'
		              ELSE 'try' END;
		u := random();
		mis := CASE WHEN u < 0.12 THEN 'pause' WHEN u < 0.17 THEN 'abandon'
		            WHEN u < 0.25 THEN 'extend' ELSE 'none' END;
		IF mis <> 'none' AND scope = 'xact' THEN
			scope := 'session';
		END IF;
		ttl := CASE mis WHEN 'pause' THEN 300 WHEN 'abandon' THEN 600
		                WHEN 'extend' THEN 400 ELSE 2000 END;

		tok := soak_acquire(p_run, p_sess, it, r, scope, ttl, mis, p_lock_timeout_ms);
		IF tok IS NOT NULL AND mis = 'extend' THEN
			IF NOT soak_extend(p_run, p_sess, it, r, tok) THEN
				tok := NULL;
			END IF;
		END IF;
		IF tok IS NOT NULL THEN
			based := soak_claim(p_run, p_sess, it, r, tok, scope, mis);
			IF based IS NOT NULL THEN
				IF mis = 'pause' THEN
					COMMIT;		-- the claim stands; now the holder stalls
					PERFORM pg_sleep(ttl * 2.5 / 1000.0);
				END IF;
				PERFORM soak_write(p_run, p_sess, it, r, tok, based, scope, mis);
			END IF;
		END IF;
		COMMIT;					-- transaction leases end here
		IF scope <> 'xact' AND mis <> 'abandon' THEN
			PERFORM soak_unlock(p_run, r);
			COMMIT;
		END IF;
	END LOOP;
END $$;
SQL

# One row per property for a run: (check, count).  Every count is a
# violation except the ones whose name starts with "info:" (calls slower
# than their bound among them: timing on a shared machine is no safety
# property).
sub checker
{
	my ($run, $single_bound_ms, $lock_timeout_ms) = @_;
	return <<"SQL";
WITH h AS (SELECT * FROM soak_history WHERE run = '$run'),
ops AS (
	SELECT h.*, row_number() OVER w AS n,
	       lag(new_v) OVER w AS chain_prev_v,
	       lag(token) OVER w AS prev_token,
	       lag(session) OVER w AS prev_session
	  FROM h WHERE kind IN ('claim', 'write') AND accepted
	WINDOW w AS (PARTITION BY row_id ORDER BY new_ver)),
last AS (
	SELECT DISTINCT ON (row_id) row_id, new_v, new_ver FROM ops
	 ORDER BY row_id, new_ver DESC)
SELECT 'token_not_increasing', count(*) FROM ops
 WHERE prev_token IS NOT NULL
   AND (token < prev_token OR (token = prev_token AND session <> prev_session))
UNION ALL
SELECT 'lost_update', count(*) FROM ops
 WHERE kind = 'write' AND based_on IS DISTINCT FROM coalesce(chain_prev_v, 0)
UNION ALL
SELECT 'version_gap', count(*) FROM ops WHERE new_ver <> n
UNION ALL
SELECT 'final_row_mismatch', count(*) FROM soak_rows r LEFT JOIN last l ON l.row_id = r.id
 WHERE r.run = '$run' AND (r.v <> coalesce(l.new_v, 0) OR r.ver <> coalesce(l.new_ver, 0))
UNION ALL
SELECT 'stale_write_accepted', count(*) FROM h
 WHERE kind = 'write' AND misbehave = 'pause' AND seen_token > token AND accepted
UNION ALL
SELECT 'stale_write_not_RL001', count(*) FROM h
 WHERE kind = 'write' AND misbehave = 'pause' AND seen_token > token
   AND NOT accepted AND sqlstate <> 'RL001'
UNION ALL
SELECT 'token_granted_twice', count(*) FROM (
	SELECT row_id, token FROM h WHERE kind = 'acquire' AND accepted
	 GROUP BY 1, 2 HAVING count(DISTINCT session) > 1) d
UNION ALL
SELECT 'info:calls over their time bound', count(*) FROM h
 WHERE kind IN ('acquire', 'extend')
   AND ms > $single_bound_ms + CASE WHEN kind = 'acquire' AND scope <> 'try'
                                    THEN $lock_timeout_ms ELSE 0 END
UNION ALL
SELECT 'info:operations', count(DISTINCT (session, iter)) FROM h
UNION ALL
SELECT 'info:grants', count(*) FROM h WHERE kind = 'acquire' AND accepted
UNION ALL
SELECT 'info:busy (try_lock NULL)', count(*) FROM h WHERE kind = 'acquire' AND sqlstate = 'busy'
UNION ALL
SELECT 'info:refused ' || sqlstate, count(*) FROM h
 WHERE kind IN ('acquire', 'extend') AND NOT accepted AND sqlstate <> 'busy'
 GROUP BY sqlstate
UNION ALL
SELECT 'info:writes accepted', count(*) FROM h WHERE kind = 'write' AND accepted
UNION ALL
SELECT 'info:claims+writes rejected RL001', count(*) FROM h
 WHERE kind IN ('claim', 'write') AND NOT accepted AND sqlstate = 'RL001'
UNION ALL
SELECT 'info:claims+writes failed other', count(*) FROM h
 WHERE kind IN ('claim', 'write') AND NOT accepted AND sqlstate <> 'RL001'
UNION ALL
SELECT 'info:deliberately stale writes', count(*) FROM h
 WHERE kind = 'write' AND misbehave = 'pause' AND seen_token > token
UNION ALL
SELECT 'info:abandoned leases', count(*) FROM h
 WHERE kind = 'acquire' AND misbehave = 'abandon' AND accepted
UNION ALL
SELECT 'info:max lock ms (try)', coalesce(round(max(ms))::bigint, 0) FROM h
 WHERE kind = 'acquire' AND scope = 'try'
UNION ALL
SELECT 'info:max lock ms (wait)', coalesce(round(max(ms))::bigint, 0) FROM h
 WHERE kind = 'acquire' AND scope <> 'try'
SQL
}

# Histories that each break one property of the checker on purpose, so
# that each check is shown able to fire: (check, SQL that writes the run
# named like the check into soak_rows and soak_history).  The fence
# trigger is off while they are written.
sub selftest_histories
{
	my $h = 'INSERT INTO soak_history (run, session, iter, row_id, kind, scope, misbehave, '
	  . 'token, based_on, new_v, new_ver, seen_token, accepted, sqlstate, ms) VALUES ';
	my $row = "INSERT INTO soak_rows (run, id, v, ver) VALUES ";
	return (
		[ 'token_not_increasing', "${row}('token_not_increasing', 1, 1, 2);
		  ${h}('token_not_increasing', 1, 1, 1, 'claim', 'xact', 'none', 20, 0, 0, 1, NULL, true, NULL, NULL),
		      ('token_not_increasing', 2, 1, 1, 'claim', 'xact', 'none', 10, 0, 1, 2, NULL, true, NULL, NULL)" ],
		[ 'lost_update', "${row}('lost_update', 1, 6, 2);
		  ${h}('lost_update', 1, 1, 1, 'claim', 'xact', 'none', 10, 0, 0, 1, NULL, true, NULL, NULL),
		      ('lost_update', 1, 1, 1, 'write', 'xact', 'none', 10, 5, 6, 2, NULL, true, NULL, NULL)" ],
		[ 'version_gap', "${row}('version_gap', 1, 0, 3);
		  ${h}('version_gap', 1, 1, 1, 'claim', 'xact', 'none', 10, 0, 0, 1, NULL, true, NULL, NULL),
		      ('version_gap', 2, 1, 1, 'claim', 'xact', 'none', 20, 0, 0, 3, NULL, true, NULL, NULL)" ],
		[ 'final_row_mismatch', "${row}('final_row_mismatch', 1, 7, 1);
		  ${h}('final_row_mismatch', 1, 1, 1, 'claim', 'xact', 'none', 10, 0, 0, 1, NULL, true, NULL, NULL)" ],
		[ 'stale_write_accepted', "${row}('stale_write_accepted', 1, 1, 2);
		  ${h}('stale_write_accepted', 1, 1, 1, 'claim', 'session', 'pause', 10, 0, 0, 1, NULL, true, NULL, NULL),
		      ('stale_write_accepted', 1, 1, 1, 'write', 'session', 'pause', 10, 0, 1, 2, 20, true, NULL, NULL)" ],
		[ 'stale_write_not_RL001', "${row}('stale_write_not_RL001', 1, 0, 1);
		  ${h}('stale_write_not_RL001', 1, 1, 1, 'claim', 'session', 'pause', 10, 0, 0, 1, NULL, true, NULL, NULL),
		      ('stale_write_not_RL001', 1, 1, 1, 'write', 'session', 'pause', 10, NULL, NULL, NULL, 20, false, '23505', NULL)" ],
		[ 'token_granted_twice', "${row}('token_granted_twice', 1, 0, 0);
		  ${h}('token_granted_twice', 1, 1, 1, 'acquire', 'xact', 'none', 10, NULL, NULL, NULL, NULL, true, NULL, 5),
		      ('token_granted_twice', 2, 1, 1, 'acquire', 'xact', 'none', 10, NULL, NULL, NULL, NULL, true, NULL, 5)" ]);
}

1;
