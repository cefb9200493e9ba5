-- The §5 baseline's degrade-level counts (docs/metrics.md §5), counted once per hour and task type and kept, so
-- that a metric window adds up 168 kept hours instead of reading the 7 days before it FINAL again
-- (warehouse/queries/level_hours.py). The counts are those of the decisions FINAL folds (the baseline has no
-- look-back), live events only; an exact re-delivery has the same event_time, so it folds within its hour and
-- the hours add up to the week's count.
--
-- One row per task type of each counting, and one with task_type '' that marks the hour counted (even when
-- it held no decision). `counted_through`: the loader's derived_through when the hour was counted; a kept hour
-- is used only while no stored decision of it has a later ingested_at (a late event, a row not derived yet),
-- otherwise it is counted again. Each counting writes new rows; the newest (counted_at) of an hour is read.
CREATE TABLE IF NOT EXISTS routerscope.decision_level_hours
(
    hour DateTime('UTC'),
    task_type LowCardinality(String),
    requests UInt64,
    l0 UInt64,
    l1 UInt64,
    l2 UInt64,
    l3 UInt64,
    l4 UInt64,
    counted_through DateTime64(3, 'UTC'),
    counted_at DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (hour, counted_at, task_type);
