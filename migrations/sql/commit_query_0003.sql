-- FROZEN: dpgate_commit_query as migration 0003 created it (0004 set enable_seqscan = off
-- on it; 0009 replaced it by commit_query.sql, which takes the budget window). Never edit:
-- a database migrated from scratch must pass through exactly this function.
CREATE FUNCTION dpgate_commit_query(
    p_dataset integer, p_epoch integer, p_grid integer, p_grid_version integer,
    p_fingerprint varchar, p_users integer[], p_epsilon numeric, p_cap numeric,
    p_key integer, p_key_has_quota boolean, p_public_id varchar, p_statistic varchar, p_mechanism varchar,
    p_options json, p_answer json
) RETURNS TABLE (status text, stored json)
LANGUAGE plpgsql AS $$
-- Outcomes: 'ok' (charged and stored), 'stale' (the epoch moved on), 'missing'
-- (some budget accounts do not exist yet), 'exhausted' (a user would pass the
-- cap), 'quota' (the key would pass its quota), 'twin' (the same query was
-- stored meanwhile; ``stored`` is its answer). Nothing is written unless 'ok'.
-- Lock order, as everywhere: dataset row, accounts by ascending user id, key row.
DECLARE
    v_epoch integer;
    v_locked integer := 0;
    v_over integer := 0;
    v_quota numeric;
    v_spent numeric;
    v_answer integer;
    v_n integer := coalesce(cardinality(p_users), 0);
BEGIN
    SELECT d.epoch INTO v_epoch FROM datasets d WHERE d.id = p_dataset FOR KEY SHARE;
    IF v_epoch IS DISTINCT FROM p_epoch THEN
        RETURN QUERY SELECT 'stale'::text, NULL::json; RETURN;
    END IF;
    IF v_n > 0 THEN
        SELECT count(*), count(*) FILTER (WHERE s.spent + p_epsilon > p_cap)
          INTO v_locked, v_over
          FROM (SELECT b.spent FROM budget_accounts b
                 WHERE b.dataset_id = p_dataset AND b.epoch = p_epoch
                   AND b.user_id = ANY (p_users)
                 ORDER BY b.user_id FOR UPDATE) s;
        IF v_locked < v_n THEN
            RETURN QUERY SELECT 'missing'::text, NULL::json; RETURN;
        END IF;
    END IF;
    -- after the locks: an identical query that committed meanwhile is served, not charged
    RETURN QUERY SELECT 'twin'::text, q.answer FROM query_answers q
     WHERE q.grid_id = p_grid AND q.epoch = p_epoch AND q.grid_version = p_grid_version
       AND q.fingerprint = p_fingerprint;
    IF FOUND THEN RETURN; END IF;
    IF v_over > 0 THEN
        RETURN QUERY SELECT 'exhausted'::text, NULL::json; RETURN;
    END IF;
    IF p_key_has_quota THEN  -- keys without a quota are not locked (no contention)
        SELECT k.epsilon_quota, k.epsilon_spent INTO v_quota, v_spent
          FROM api_keys k WHERE k.id = p_key FOR UPDATE;
        IF v_quota IS NOT NULL AND v_spent + p_epsilon > v_quota THEN
            RETURN QUERY SELECT 'quota'::text, NULL::json; RETURN;
        END IF;
    END IF;
    INSERT INTO query_answers (public_id, dataset_id, grid_id, epoch, grid_version,
                               fingerprint, statistic, mechanism, epsilon, options,
                               answer, key_id, created_at)
    VALUES (p_public_id, p_dataset, p_grid, p_epoch, p_grid_version, p_fingerprint,
            p_statistic, p_mechanism, p_epsilon, p_options, p_answer, p_key, now())
    ON CONFLICT ON CONSTRAINT uq_query_answers_grid_id DO NOTHING
    RETURNING id INTO v_answer;
    IF v_answer IS NULL THEN  -- a twin that charged nobody committed meanwhile
        RETURN QUERY SELECT 'twin'::text, q.answer FROM query_answers q
         WHERE q.grid_id = p_grid AND q.epoch = p_epoch
           AND q.grid_version = p_grid_version AND q.fingerprint = p_fingerprint;
        RETURN;
    END IF;
    IF v_quota IS NOT NULL THEN
        UPDATE api_keys SET epsilon_spent = epsilon_spent + p_epsilon WHERE id = p_key;
    END IF;
    IF v_n > 0 THEN
        UPDATE budget_accounts SET spent = spent + p_epsilon
         WHERE dataset_id = p_dataset AND epoch = p_epoch AND user_id = ANY (p_users);
        INSERT INTO ledger_entries (dataset_id, epoch, key_id, kind, reference_id, grid_id,
                                    epsilon, n_users, users, created_at)
        VALUES (p_dataset, p_epoch, p_key, 'query', v_answer, p_grid, p_epsilon, v_n,
                to_json(p_users), now());
    END IF;
    RETURN QUERY SELECT 'ok'::text, NULL::json;
END $$;
