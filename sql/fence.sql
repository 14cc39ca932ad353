--
-- redlock_fence(): the fence trigger, exercised with literal tokens.
-- After each refusal, \echo :LAST_ERROR_SQLSTATE shows the SQLSTATE
-- (RL001 for every fence refusal).
--
\set SHOW_CONTEXT never

CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
-- a row written before the trigger existed: never fenced (NULL token)
INSERT INTO acct VALUES (0, 0, NULL);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();

--
-- INSERT: a positive token from the column, or from redlock.fence_token
-- when the column is NULL (stamped into the row); no stored token to beat.
--
INSERT INTO acct VALUES (1, 100, 5);
INSERT INTO acct VALUES (2, 100, NULL);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO acct VALUES (2, 100, 0);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO acct VALUES (2, 100, -3);
BEGIN;
SET LOCAL redlock.fence_token = 7;
INSERT INTO acct (id, balance) VALUES (2, 100);
-- the column, when given, wins over the setting
INSERT INTO acct VALUES (3, 100, 9);
COMMIT;
SELECT * FROM acct ORDER BY id;

--
-- UPDATE setting the column: the new value is the offered token.
--
UPDATE acct SET balance = 110, fence_token = 6 WHERE id = 1;	-- 6 > 5
UPDATE acct SET balance = 120, fence_token = 6 WHERE id = 1;	-- equal
\echo :LAST_ERROR_SQLSTATE
UPDATE acct SET balance = 120, fence_token = 4 WHERE id = 1;	-- older
UPDATE acct SET balance = 120, fence_token = NULL WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE acct SET balance = 120, fence_token = fence_token WHERE id = 1;
-- one stale row fails the whole statement
UPDATE acct SET balance = balance + 1, fence_token = 8;
SELECT * FROM acct ORDER BY id;

--
-- UPDATE leaving the column unchanged: the token comes from
-- redlock.fence_token and is stamped into the row.
--
UPDATE acct SET balance = 130 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL redlock.fence_token = 10;
UPDATE acct SET balance = 130 WHERE id = 1;
SELECT * FROM acct WHERE id = 1;
-- same token again: rejected under 'strict'
UPDATE acct SET balance = 140 WHERE id = 1;
ROLLBACK;
BEGIN;
SET LOCAL redlock.fence_token = 3;
UPDATE acct SET balance = 140 WHERE id = 1;
ROLLBACK;
-- an UPDATE writing every column back (as some ORMs do) uses the setting
BEGIN;
SET LOCAL redlock.fence_token = 11;
UPDATE acct SET balance = 150, fence_token = fence_token WHERE id = 1;
-- a column value that changes the token wins over the setting
UPDATE acct SET balance = 160, fence_token = 12 WHERE id = 1;
COMMIT;
SELECT * FROM acct WHERE id = 1;
-- the setting is transaction-local when set with SET LOCAL
SELECT current_setting('redlock.fence_token') = '' AS unset_after_commit;
-- and must be a positive bigint
SET redlock.fence_token = 'abc';
SET redlock.fence_token = 0;
SET redlock.fence_token = -1;
SET redlock.fence_token = 9223372036854775808;

--
-- A row never fenced (NULL token) accepts any positive token.
--
UPDATE acct SET balance = 1, fence_token = 0 WHERE id = 0;
\echo :LAST_ERROR_SQLSTATE
UPDATE acct SET balance = 1, fence_token = 1 WHERE id = 0;
SELECT * FROM acct WHERE id = 0;

--
-- DELETE: the token comes from redlock.fence_token only.
--
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL redlock.fence_token = 12;
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL redlock.fence_token = 13;
DELETE FROM acct WHERE id = 1 RETURNING *;
COMMIT;
INSERT INTO acct VALUES (4, 0, 1);
ALTER TABLE acct DISABLE TRIGGER fence;
UPDATE acct SET fence_token = NULL WHERE id = 4;
ALTER TABLE acct ENABLE TRIGGER fence;
BEGIN;
SET LOCAL redlock.fence_token = 1;
DELETE FROM acct WHERE id = 4 RETURNING *;
COMMIT;

--
-- INSERT ... ON CONFLICT DO UPDATE is fenced on its update path.
--
INSERT INTO acct VALUES (2, 999, 7)
	ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, fence_token = EXCLUDED.fence_token;
INSERT INTO acct VALUES (2, 200, 8)
	ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, fence_token = EXCLUDED.fence_token;
SELECT * FROM acct ORDER BY id;

--
-- integer and smallint token columns, named by the first argument
-- (case-sensitive, as stored); compared as bigint.
--
CREATE TABLE acct4 (id int PRIMARY KEY, balance int, "Tok" integer);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct4
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('Tok');
INSERT INTO acct4 VALUES (1, 0, 2147483646);
UPDATE acct4 SET balance = 1, "Tok" = 2147483647;
UPDATE acct4 SET balance = 2, "Tok" = 2147483646;
BEGIN;
SET LOCAL redlock.fence_token = 2147483648;
UPDATE acct4 SET balance = 2;
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM acct4;
CREATE TABLE acct2 (id int PRIMARY KEY, balance int, tok smallint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct2
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('tok', 'strict');
INSERT INTO acct2 VALUES (1, 0, 300);
UPDATE acct2 SET balance = 1, tok = 299;
BEGIN;
SET LOCAL redlock.fence_token = 301;
UPDATE acct2 SET balance = 1;
COMMIT;
BEGIN;
SET LOCAL redlock.fence_token = 40000;
UPDATE acct2 SET balance = 2;
ROLLBACK;
SELECT * FROM acct2;

--
-- 'allow_equal': greater or equal, so the same holder can write again.
--
CREATE TABLE ledger (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON ledger
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal');
INSERT INTO ledger VALUES (1, 100, 10);
UPDATE ledger SET balance = 101, fence_token = 10;	-- equal: accepted
BEGIN;
SET LOCAL redlock.fence_token = 10;
UPDATE ledger SET balance = 102;					-- equal: accepted
COMMIT;
UPDATE ledger SET balance = 103, fence_token = 9;	-- older: rejected
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM ledger;

-- Read-claim-compute-write.  Holder A (token 11) claims the row and reads
-- it in one statement, computes outside any transaction, then writes under
-- the same token.
UPDATE ledger SET fence_token = 11 WHERE id = 1 RETURNING balance;
UPDATE ledger SET balance = 102 + 5, fence_token = 11 WHERE id = 1;
SELECT * FROM ledger;

-- Outcome 1: the stale holder is rejected at its claim.  B (12) claims;
-- A, still believing it holds the lease with 11, then tries to claim.
UPDATE ledger SET fence_token = 12 WHERE id = 1 RETURNING balance;
UPDATE ledger SET fence_token = 11 WHERE id = 1 RETURNING balance;
\echo :LAST_ERROR_SQLSTATE
UPDATE ledger SET balance = 107 + 20, fence_token = 12 WHERE id = 1;
SELECT * FROM ledger;

-- Outcome 2: the stale holder is rejected at its write.  A (13) claims and
-- reads 127, pauses; B (14) claims, reads 127 and writes 127 + 50; A wakes
-- and writes 127 + 5 with 13.  B's update stands, A must retry.
UPDATE ledger SET fence_token = 13 WHERE id = 1 RETURNING balance;
UPDATE ledger SET fence_token = 14 WHERE id = 1 RETURNING balance;
UPDATE ledger SET balance = 127 + 50, fence_token = 14 WHERE id = 1;
UPDATE ledger SET balance = 127 + 5, fence_token = 13 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- the write may also take the token from the setting
BEGIN;
SET LOCAL redlock.fence_token = 13;
UPDATE ledger SET balance = 127 + 5 WHERE id = 1;
ROLLBACK;
SELECT * FROM ledger;

-- Why the claim matters: a plain read followed by a fenced write still
-- loses an update.  The fence orders writes, not reads: B (16) reads before
-- the older A's (15) write lands, so both writes pass the fence and A's +5
-- is lost (the balance ends at 227, not 232).
SELECT balance FROM ledger WHERE id = 1;						-- A reads 177
SELECT balance FROM ledger WHERE id = 1;						-- B reads 177
UPDATE ledger SET balance = 177 + 5, fence_token = 15 WHERE id = 1;	-- A
UPDATE ledger SET balance = 177 + 50, fence_token = 16 WHERE id = 1;	-- B
SELECT * FROM ledger;

--
-- Partitions: the trigger on the parent is cloned to every partition, and
-- the column is found per partition (different column positions here).
--
CREATE TABLE parted (region int, id int, fence_token bigint, v text)
	PARTITION BY LIST (region);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
CREATE TABLE parted_2 (v text, fence_token bigint, id int, region int);
ALTER TABLE parted ATTACH PARTITION parted_2 FOR VALUES IN (2);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON parted
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO parted VALUES (1, 1, 5, 'a'), (2, 1, 5, 'b');
UPDATE parted SET v = 'c', fence_token = 6 WHERE region = 2;
UPDATE parted SET v = 'd', fence_token = 5 WHERE region = 2;
BEGIN;
SET LOCAL redlock.fence_token = 7;
UPDATE parted SET v = v || '!';
COMMIT;
SELECT tableoid::regclass, * FROM parted ORDER BY region;
-- An UPDATE moving a row to another partition is a DELETE from the old
-- partition (whose trigger takes the token from redlock.fence_token) and an
-- INSERT into the new one, so it needs the setting.
UPDATE parted SET region = 2, id = 2, fence_token = 8 WHERE region = 1;
BEGIN;
SET LOCAL redlock.fence_token = 8;
UPDATE parted SET region = 2, id = 2 WHERE region = 1;
COMMIT;
SELECT tableoid::regclass, * FROM parted ORDER BY region, id;

--
-- Only a token set by the current transaction fences a write: SET LOCAL,
-- set_config(..., true) or a function's SET clause.  A token that outlives
-- its transaction would go on fencing writes after its lease is gone, so
-- the trigger refuses it (RL001, like every refusal) instead of using it.
--
CREATE TABLE scoped (id int PRIMARY KEY, v int, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON scoped
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO scoped VALUES (1, 0, 10), (2, 0, 10);
-- a session-level SET is refused by every write that would read it
SET redlock.fence_token = 20;
UPDATE scoped SET v = 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM scoped WHERE id = 2;
INSERT INTO scoped (id, v) VALUES (3, 0);
-- refused, not ignored: otherwise the write would be judged without it
UPDATE scoped SET v = 1, fence_token = fence_token WHERE id = 1;
-- it does not fence the next transaction either
BEGIN;
UPDATE scoped SET v = 1 WHERE id = 1;
ROLLBACK;
-- a token given in the statement does not read the setting
UPDATE scoped SET v = 1, fence_token = 11 WHERE id = 1;
-- SET LOCAL over the session value is accepted; the session value is back
-- (and refused) after COMMIT
BEGIN;
SET LOCAL redlock.fence_token = 12;
UPDATE scoped SET v = 2 WHERE id = 1;
COMMIT;
SHOW redlock.fence_token;
UPDATE scoped SET v = 3 WHERE id = 1;
RESET redlock.fence_token;
-- SET without LOCAL inside a transaction block: refused, it would outlive
-- the transaction; so is set_config(..., false)
BEGIN;
SET redlock.fence_token = 13;
UPDATE scoped SET v = 3 WHERE id = 1;
ROLLBACK;
BEGIN;
SELECT set_config('redlock.fence_token', '13', false);
UPDATE scoped SET v = 3 WHERE id = 1;
ROLLBACK;
-- set_config(..., true): accepted, in a transaction block or in the
-- implicit transaction of one query string
BEGIN;
SELECT set_config('redlock.fence_token', '13', true);
UPDATE scoped SET v = 3 WHERE id = 1;
COMMIT;
SELECT set_config('redlock.fence_token', '14', true) \; UPDATE scoped SET v = 4 WHERE id = 1;
SELECT v, fence_token FROM scoped WHERE id = 1;
-- SET then SET LOCAL: the LOCAL value is accepted, the SET value stays for
-- the session and is refused after COMMIT
BEGIN;
SET redlock.fence_token = 15;
SET LOCAL redlock.fence_token = 16;
UPDATE scoped SET v = 5 WHERE id = 1;
COMMIT;
SHOW redlock.fence_token;
UPDATE scoped SET v = 6 WHERE id = 1;
RESET redlock.fence_token;

-- Savepoints.  A SET LOCAL in a subtransaction stays transaction-local
-- after RELEASE, and is gone after ROLLBACK TO.
BEGIN;
SAVEPOINT a;
SET LOCAL redlock.fence_token = 17;
RELEASE SAVEPOINT a;
UPDATE scoped SET v = 7 WHERE id = 1;
SAVEPOINT b;
SET LOCAL redlock.fence_token = 18;
ROLLBACK TO SAVEPOINT b;
SHOW redlock.fence_token;
COMMIT;
BEGIN;
SAVEPOINT a;
SET LOCAL redlock.fence_token = 18;
ROLLBACK TO SAVEPOINT a;
UPDATE scoped SET v = 8 WHERE id = 1;
ROLLBACK;
-- a plain SET in a subtransaction is refused, and still is after RELEASE;
-- ROLLBACK TO brings back the transaction-local value
BEGIN;
SET LOCAL redlock.fence_token = 18;
SAVEPOINT a;
SET redlock.fence_token = 19;
UPDATE scoped SET v = 8 WHERE id = 1;
ROLLBACK TO SAVEPOINT a;
UPDATE scoped SET v = 8 WHERE id = 1;
SAVEPOINT b;
SET redlock.fence_token = 19;
RELEASE SAVEPOINT b;
UPDATE scoped SET v = 9 WHERE id = 1;
ROLLBACK;
-- a session value, then SET LOCAL in a savepoint: accepted after RELEASE;
-- after ROLLBACK TO the session value is back, and refused
SET redlock.fence_token = 20;
BEGIN;
SAVEPOINT a;
SET LOCAL redlock.fence_token = 19;
RELEASE SAVEPOINT a;
UPDATE scoped SET v = 9 WHERE id = 1;
COMMIT;
BEGIN;
SAVEPOINT a;
SET LOCAL redlock.fence_token = 21;
ROLLBACK TO SAVEPOINT a;
UPDATE scoped SET v = 10 WHERE id = 1;
ROLLBACK;
RESET redlock.fence_token;
SELECT v, fence_token FROM scoped WHERE id = 1;

-- A function's SET clause is scoped to the call: accepted.  A plain SET in
-- the body overrides it and outlives the call: refused.
CREATE FUNCTION scoped_write(new_v int) RETURNS void LANGUAGE sql
	SET redlock.fence_token = 30
	AS $$ UPDATE scoped SET v = new_v WHERE id = 1 $$;
CREATE FUNCTION scoped_leak() RETURNS void LANGUAGE plpgsql
	SET redlock.fence_token = 31
	AS $$
BEGIN
	PERFORM set_config('redlock.fence_token', '32', false);
	UPDATE scoped SET v = 12 WHERE id = 1;
END $$;
SELECT scoped_write(11);
SHOW redlock.fence_token;
SELECT scoped_leak();
SELECT v, fence_token FROM scoped WHERE id = 1;

-- ALTER DATABASE (or ROLE) SET: refused, and so is SET LOCAL ... TO
-- DEFAULT, which only brings the configured value back
SELECT current_database() AS db \gset
ALTER DATABASE :"db" SET redlock.fence_token = 40;
\c
\set SHOW_CONTEXT never
SHOW redlock.fence_token;
UPDATE scoped SET v = 13 WHERE id = 1;
BEGIN;
SET LOCAL redlock.fence_token TO DEFAULT;
UPDATE scoped SET v = 13 WHERE id = 1;
ROLLBACK;
BEGIN;
SET LOCAL redlock.fence_token = 41;
UPDATE scoped SET v = 13 WHERE id = 1;
COMMIT;
ALTER DATABASE :"db" RESET redlock.fence_token;
\c
\set SHOW_CONTEXT never
SHOW redlock.fence_token;
SELECT * FROM scoped ORDER BY id;
DROP FUNCTION scoped_write(int), scoped_leak();

--
-- Misuse.  Errors surface at the first write the trigger sees.
--
CREATE TABLE misuse (id int, fence_token bigint, t text, n numeric);
INSERT INTO misuse VALUES (1, 1, 'x', 1);
CREATE VIEW misuse_v AS SELECT * FROM misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'strict', 'x');
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'lenient');
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('no_such_column');
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('t');
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('n');
UPDATE misuse SET fence_token = 2;
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad AFTER UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH STATEMENT EXECUTE FUNCTION redlock_fence();
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad BEFORE TRUNCATE ON misuse
	FOR EACH STATEMENT EXECUTE FUNCTION redlock_fence();
TRUNCATE misuse;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

CREATE TRIGGER bad INSTEAD OF UPDATE ON misuse_v
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
UPDATE misuse_v SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse_v;

-- a dropped token column is not found
CREATE TABLE dropped (id int, fence_token bigint);
INSERT INTO dropped VALUES (1, 1);
CREATE TRIGGER fence BEFORE UPDATE ON dropped
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
ALTER TABLE dropped DROP COLUMN fence_token;
UPDATE dropped SET id = 2;
\echo :LAST_ERROR_SQLSTATE

-- not a trigger call
SELECT redlock_fence();
\echo :LAST_ERROR_SQLSTATE

--
-- What an application sees: the SQLSTATE and the error fields.
--
DO $$
DECLARE
	state text;
	msg text;
	detail text;
	sch text;
	tab text;
	col text;
BEGIN
	UPDATE acct SET balance = 0, fence_token = 2 WHERE id = 2;
EXCEPTION WHEN SQLSTATE 'RL001' THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, sch = SCHEMA_NAME, tab = TABLE_NAME,
		col = COLUMN_NAME;
	RAISE NOTICE 'fenced out: % / % / % / %.%.%', state, msg, detail, sch, tab, col;
END $$;

--
-- Tokens no grant can have given yet.  A grant's token is the clock in
-- microseconds (or a few increments above it), so one further ahead than
-- redlock.fence_max_ahead (default 5 min) is forged: refused, or one write
-- would lock every real holder out of the row for good.
--
CREATE TABLE docs (id int PRIMARY KEY, body text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON docs
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
SHOW redlock.fence_max_ahead;
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us \gset
INSERT INTO docs VALUES (1, 'a', :now_us);
UPDATE docs SET body = 'forged', fence_token = 9223372036854775807;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO docs VALUES (2, 'forged', 9223372036854775807);
BEGIN;
SET LOCAL redlock.fence_token = 9223372036854775807;
DELETE FROM docs WHERE id = 1;
ROLLBACK;
-- an hour ahead: refused; a minute ahead (another server's clock): accepted
\set VERBOSITY terse
UPDATE docs SET body = 'b', fence_token = :now_us + 3600000000;
\set VERBOSITY default
UPDATE docs SET body = 'b', fence_token = :now_us + 60000000;
SELECT id, body, fence_token - :now_us AS ahead_us FROM docs;
-- only superusers set the allowance; -1 turns the check off
CREATE ROLE fence_writer;
GRANT ALL ON docs TO fence_writer;
SET ROLE fence_writer;
SET redlock.fence_max_ahead = -1;
UPDATE docs SET body = 'forged', fence_token = 9223372036854775807;
RESET ROLE;
SET redlock.fence_max_ahead = -1;
UPDATE docs SET body = 'unchecked', fence_token = 9223372036854775807;
RESET redlock.fence_max_ahead;
-- a row a forged token reached says so when the next holder is refused
\set VERBOSITY terse
UPDATE docs SET body = 'c', fence_token = :now_us + 120000000;
\set VERBOSITY default
BEGIN;
SET LOCAL redlock.fence_token = 5;
UPDATE docs SET body = 'c';
ROLLBACK;
DROP TABLE docs;
DROP ROLE fence_writer;

--
-- An equal token under 'strict': the holder of that token wrote the row
-- already (here an earlier statement of the same transaction).
--
CREATE TABLE twice (id int PRIMARY KEY, v int, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON twice
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO twice VALUES (1, 0, 5);
BEGIN;
SET LOCAL redlock.fence_token = 6;
UPDATE twice SET v = v + 1 WHERE id = 1;
UPDATE twice SET v = v + 1 WHERE id = 1;
ROLLBACK;
DROP TABLE twice;

--
-- Modes: 'strict' or 'allow_equal', and 'held', each at most once.
--
CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal', 'held');
UPDATE misuse SET fence_token = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;
CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'strict', 'allow_equal');
UPDATE misuse SET fence_token = 3;
DROP TRIGGER bad ON misuse;
CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'held');
UPDATE misuse SET fence_token = 3;
DROP TRIGGER bad ON misuse;
CREATE TRIGGER bad BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'strict', 'resource=t', 'x');
UPDATE misuse SET fence_token = 3;
DROP TRIGGER bad ON misuse;

DROP VIEW misuse_v;
DROP TABLE acct, acct4, acct2, ledger, parted, scoped, misuse, dropped;
