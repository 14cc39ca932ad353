-- The functions the pg_regress suites share (\i'd by them, not a suite of
-- its own): the SQLSTATE and error text of a statement, or 'ok'.
CREATE FUNCTION pg_temp.outcome(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
