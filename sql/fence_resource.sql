--
-- redlock_fence(..., 'held', 'resource=COLUMN'): the fence bound to the
-- row's own resource.  Real leases (the runner's Redis nodes); their tokens
-- vary per run, so refusals of a token are shown terse (no detail, which
-- names the token) and accepted writes by what they stored.
--
\set SHOW_CONTEXT never

CREATE TABLE racct (id int PRIMARY KEY, balance int NOT NULL,
	res text GENERATED ALWAYS AS ('acct:' || id) STORED, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON racct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'resource=res');
SELECT redlock_lock('acct:1') AS t1 \gset
SELECT redlock_lock('acct:2') AS t2 \gset

--
-- INSERT: the generated column is computed for the check (a BEFORE trigger
-- sees it NULL); only the token of the lease on 'acct:' || id is accepted.
--
INSERT INTO racct (id, balance, fence_token) VALUES (1, 100, :t1);
INSERT INTO racct (id, balance, fence_token) VALUES (2, 200, :t2);
\set VERBOSITY terse
INSERT INTO racct (id, balance, fence_token) VALUES (3, 300, :t1);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO racct (id, balance, fence_token) VALUES (3, 300, 12345);
\set VERBOSITY default
SELECT id, balance, res, fence_token = :t1 AS t1, fence_token = :t2 AS t2
  FROM racct ORDER BY id;

--
-- UPDATE and DELETE: holding acct:2 does not let a session write acct:1's
-- row, with the column or the setting.
--
\set VERBOSITY terse
UPDATE racct SET balance = 0, fence_token = :t2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT set_config('redlock.fence_token', :'t2', true) IS NOT NULL AS set;
UPDATE racct SET balance = 0 WHERE id = 1;
ROLLBACK;
BEGIN;
SELECT set_config('redlock.fence_token', :'t2', true) IS NOT NULL AS set;
DELETE FROM racct WHERE id = 1;
ROLLBACK;
\set VERBOSITY default
-- 'strict' takes one write per token: the holder of acct:1 wrote the row
-- with its INSERT, and takes the lease again for the next write
SELECT redlock_unlock('acct:1');
SELECT redlock_lock('acct:1') AS t1 \gset
UPDATE racct SET balance = 110, fence_token = :t1 WHERE id = 1;
SELECT id, balance, fence_token = :t1 AS t1 FROM racct WHERE id = 1;

--
-- An UPDATE that changes the resource moves the row: the session must hold
-- valid leases on both; the token offered is the new resource's, and the
-- old resource's lease must be newer than the stored token.
--
SELECT redlock_lock('acct:5') AS t5 \gset
\set VERBOSITY terse
-- the token offered must be the new resource's
UPDATE racct SET id = 5, fence_token = :t1 WHERE id = 1;
-- acct:1's lease wrote the row last, and 'strict' takes one write per
-- token: a move too
UPDATE racct SET id = 5, fence_token = :t5 WHERE id = 1;
\set VERBOSITY default
-- with a newer lease on acct:1, the row moves to acct:5
SELECT redlock_unlock('acct:1');
SELECT redlock_lock('acct:1') AS t1 \gset
UPDATE racct SET id = 5, fence_token = :t5 WHERE id = 1;
SELECT id, res, fence_token = :t5 AS t5 FROM racct ORDER BY id;
-- into a resource the session does not hold: refused
SELECT redlock_unlock('acct:1');
\set VERBOSITY terse
UPDATE racct SET id = 1, fence_token = :t5 WHERE id = 5;
\set VERBOSITY default
-- out of a resource the session does not hold: refused
SELECT redlock_lock('acct:1') AS t1 \gset
SELECT redlock_unlock('acct:5');
UPDATE racct SET id = 1, fence_token = :t1 WHERE id = 5;
\echo :LAST_ERROR_SQLSTATE
SELECT id, res FROM racct ORDER BY id;

--
-- NULL resources: refused with 23502, in a new row and in a stored one.
--
CREATE TABLE rdoc (id int, res varchar(40), fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON rdoc
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'resource=res', 'held');
INSERT INTO rdoc VALUES (1, 'acct:2', :t2);
INSERT INTO rdoc VALUES (2, NULL, :t2);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE rdoc DISABLE TRIGGER fence;
INSERT INTO rdoc VALUES (3, NULL, NULL);
ALTER TABLE rdoc ENABLE TRIGGER fence;
UPDATE rdoc SET res = 'acct:2', fence_token = :t2 WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
SELECT id, res, fence_token = :t2 AS t2 FROM rdoc ORDER BY id;
DROP TABLE rdoc;

--
-- Misuse.  Errors surface at the first write the trigger sees.
--
CREATE TABLE misuse (id int, fence_token bigint, t text, n numeric, "T" text);
INSERT INTO misuse VALUES (1, 1, 'x', 1, 'y');

-- misuse(args): a trigger redlock_fence(args) on misuse, fired by one
-- UPDATE and dropped again; what its error says
CREATE FUNCTION pg_temp.misuse(args text, OUT state text, OUT message text,
							   OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('CREATE TRIGGER bad BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION redlock_fence(%s)', args);
	BEGIN
		UPDATE misuse SET fence_token = 2;
		state := 'ok';
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
			detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	END;
	DROP TRIGGER bad ON misuse;
END $$;
\x on
-- without 'held' a resource column would check nothing
SELECT * FROM pg_temp.misuse($$'fence_token', 'resource=t'$$);
SELECT * FROM pg_temp.misuse($$'fence_token', 'allow_equal', 'resource=t'$$);
-- columns: missing, not text (twice), no name, named twice
SELECT * FROM pg_temp.misuse($$'fence_token', 'held', 'resource=no_such_column'$$);
SELECT * FROM pg_temp.misuse($$'fence_token', 'held', 'resource=id'$$);
SELECT * FROM pg_temp.misuse($$'fence_token', 'held', 'resource=n'$$);
SELECT * FROM pg_temp.misuse($$'fence_token', 'held', 'resource='$$);
SELECT * FROM pg_temp.misuse($$'fence_token', 'resource=t', 'held', 'resource=T'$$);
-- five arguments
SELECT * FROM pg_temp.misuse($$'fence_token', 'strict', 'held', 'resource=t', 'allow_equal'$$);
-- the token column comes first
SELECT * FROM pg_temp.misuse($$'resource=t', 'held'$$);
\x off

-- a dropped resource column is not found
ALTER TABLE misuse ADD COLUMN gone text;
CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'resource=gone');
ALTER TABLE misuse DROP COLUMN gone;
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- all four arguments, well formed: the row's resource 'y' is not held
CREATE TRIGGER fence BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'resource=T', 'allow_equal', 'held');
\set VERBOSITY terse
UPDATE misuse SET fence_token = :t2;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE

SELECT redlock_unlock_all();
DROP TABLE misuse, racct;
