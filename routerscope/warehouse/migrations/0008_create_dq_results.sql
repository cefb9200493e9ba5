-- Data-quality results: one row per check and window run (warehouse/quality.py). Kept as history
-- (MergeTree, not replacing): the data-quality view shows the latest run per check and window and
-- how results changed. ORDER BY serves "the checks of one window" and "one check over time".
CREATE TABLE IF NOT EXISTS routerscope.dq_results
(
    suite LowCardinality(String),
    check_name LowCardinality(String),
    window_start DateTime64(3, 'UTC'),
    window_end DateTime64(3, 'UTC'),
    success Bool,
    blocking Bool,
    unexpected_count UInt64,
    element_count UInt64,
    sample_ids Array(String),
    observed String,
    run_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY (window_start, check_name, run_at);
