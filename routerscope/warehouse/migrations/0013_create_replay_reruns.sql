-- The weekly replay's determinism groups (seed 004 §2 "同一输入重跑多次看结论是否落在同一枚举内";
-- METRICS.md §12 determinism): one row per sampled request re-run N times through the device model,
-- whether every run's answer agreed after normalisation, and the answers' hashes (never the texts).
-- ReplacingMergeTree by replayed_at: a request replayed again keeps its latest group. ORDER BY serves
-- the grading report: a task type over a window of decision times.
CREATE TABLE IF NOT EXISTS routerscope.replay_reruns
(
    request_id String,
    task_type LowCardinality(String),
    event_time DateTime64(3, 'UTC'),  -- the replayed decision's time (the review window filters on it)
    runs UInt8,
    agree Bool,
    answer_hashes Array(String),
    device_model LowCardinality(String),
    replayed_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(replayed_at)
ORDER BY (task_type, event_time, request_id);
