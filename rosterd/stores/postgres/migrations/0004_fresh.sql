-- Schema 4: a warm turn's first write checks, in its own transaction, that
-- what its host holds of the session and of the turn's inputs is still
-- current. When it is not, the function fails the transaction and nothing
-- of it is written: the host reads again and compiles the turn anew.
CREATE FUNCTION rosterd_fresh(stale text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF stale IS NOT NULL THEN
        RAISE EXCEPTION 'rosterd: % changed since this host read it', stale
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;
