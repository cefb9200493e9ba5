-- Alerts with their lifecycle (routerscope/alerts.py): one row per alert episode — a rule on a scope
-- from the first breaching window (first_seen) until it resolves. Each evaluation that changes an
-- episode (fired, still firing, resolved, notified) writes a newer version; readers use FINAL.
-- ORDER BY serves "the open episode of this rule and scope" and the history of one rule.
CREATE TABLE IF NOT EXISTS routerscope.alerts
(
    alert_key String,                        -- rule|task_type ('' = overall)
    first_seen DateTime64(3, 'UTC'),         -- start of the first breaching window of the episode
    rule LowCardinality(String),
    task_type LowCardinality(String),
    severity LowCardinality(String),         -- page | ticket | info
    action LowCardinality(String),           -- '' or rollback
    summary String,
    status LowCardinality(String),           -- firing | resolved
    last_seen DateTime64(3, 'UTC'),          -- end of the latest breaching window
    resolved_at Nullable(DateTime64(3, 'UTC')),
    trip_values String,                      -- JSON: the windows and values that tripped it
    rule_version LowCardinality(String),
    notify_state LowCardinality(String),     -- pending | sent | no_webhook
    updated_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (alert_key, first_seen);

-- Every webhook delivery attempt, successful or not (a failed delivery leaves the alert pending and
-- is retried at the next evaluation).
CREATE TABLE IF NOT EXISTS routerscope.alert_deliveries
(
    alert_key String,
    first_seen DateTime64(3, 'UTC'),
    event LowCardinality(String),            -- firing | resolved
    attempt UInt8,
    status_code Nullable(UInt16),
    error String,
    attempted_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY (alert_key, first_seen, attempted_at);
