-- Calibration per task type and daily window (METRICS.md §6), for the weekly tuning view.
-- `calibration` holds the task type's full JSON (buckets, flags, recommendation). Recomputing a
-- day (late labels) supersedes the older row; readers use FINAL. ORDER BY serves one task type's
-- history.
CREATE TABLE IF NOT EXISTS routerscope.calibration_windows
(
    task_type LowCardinality(String),
    window_start DateTime64(3, 'UTC'),
    window_end DateTime64(3, 'UTC'),
    labeled UInt64,
    monotonic Bool,
    recommended_threshold Nullable(Float64),
    current_threshold Nullable(Float64),
    target Float64,
    min_n UInt32,
    calibration String,
    computed_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY (task_type, window_start);
