-- Which copy of a decision's event_id comes first, decided once for the stored rows instead of by every metric
-- window reading the 7 days before it (docs/metrics.md, "each event_id counts once").
--
-- decision_later_copies: one row per ordered pair of copies of one event_id under different event_times: the
-- later copy's (event_time, event_id) and the earlier copy's time. Sorted by the later copy's event_time for
-- the metric window's read (`warehouse/sql.py: FIRST_COPY`): a window leaves out its rows that
-- have a row here whose earlier_time lies within the 7 days before its start or in it. Re-delivered copies
-- (the same event_time) make no pair: FINAL folds them. Writing a pair again is harmless (ReplacingMergeTree,
-- and the read asks only whether a pair exists).
CREATE TABLE IF NOT EXISTS routerscope.decision_later_copies
(
    event_time DateTime64(3, 'UTC'),
    event_id UUID,
    earlier_time DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (event_time, event_id, earlier_time);

-- How far the pairs are complete: every decision with ingested_at at or before `derived_through` has its
-- pairs written (warehouse/queries/decision_copies.py: derive, which the loader runs at the start and the end
-- of each run). A window over decisions stored after it (a run killed before its end, rows inserted by other
-- means) reads the 7 days before it as it did before this migration, so the counts never depend on it.
CREATE TABLE IF NOT EXISTS routerscope.decision_copies_derived
(
    derived_through DateTime64(3, 'UTC'),
    derived_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY derived_through;

-- What asks "was anything stored after derived_through?" reads only the granules that hold such rows.
ALTER TABLE routerscope.decisions ADD INDEX IF NOT EXISTS ingested_at_minmax ingested_at TYPE minmax GRANULARITY 1;
