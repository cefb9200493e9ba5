-- Metric snapshots per window, written by the Dagster metric assets (5-minute windows for the
-- on-call view, daily for tuning) so that dashboards and alerts read a small table, not the facts.
-- One row per (grain, task_type, window); task_type '' is the overall row. The headline numbers are
-- columns (for charts and alert rules); `metrics` holds the group's full METRICS.md JSON.
-- ReplacingMergeTree(computed_at): recomputing a window (late labels) supersedes the older row;
-- readers use FINAL. ORDER BY serves "one grain, one task type, a time range" (a trend chart).
CREATE TABLE IF NOT EXISTS routerscope.metric_windows
(
    grain LowCardinality(String),
    task_type LowCardinality(String),
    window_start DateTime64(3, 'UTC'),
    window_end DateTime64(3, 'UTC'),
    -- volumes (METRICS.md §1)
    requests UInt64,
    device_entered UInt64,
    sessions UInt64,
    -- rates, NULL when their denominator is empty (§2, §3, §5, §7)
    fallback_rate Nullable(Float64),
    naive_fallback_rate Nullable(Float64),
    capability_reject_rate Nullable(Float64),
    device_bypass_rate Nullable(Float64),
    false_fallback_rate Nullable(Float64),
    false_fallback_labeled UInt64,
    missed_fallback_rate Nullable(Float64),
    missed_fallback_labeled UInt64,
    route_accuracy Nullable(Float64),
    l2_l3_share Nullable(Float64),
    l2_l3_delta_pp Nullable(Float64),
    l2_l3_z Nullable(Float64),
    l2_l3_psi Nullable(Float64),
    l2_l3_drifting Bool,
    shadow_agreement_rate Nullable(Float64),
    -- the whole group, METRICS.md shape
    metrics String,
    computed_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY (grain, task_type, window_start);
