-- One row per alert evaluation that may have written episodes (the alerts job, `routerscope alerts --evaluate`,
-- the demo): the rules file it judged with, that file's `version` and the SHA-256 of its bytes. A later
-- evaluation that is not told which rules to use takes the newest row's file, and refuses when that file is
-- gone or changed (docs/pipelines.md#alerts): a warehouse's incidents are judged by one set of rules unless
-- someone says otherwise. ORDER BY serves "the newest evaluation".
CREATE TABLE IF NOT EXISTS routerscope.alert_evaluations
(
    evaluated_at DateTime64(3, 'UTC') DEFAULT now64(3),  -- wall clock of the evaluation
    as_of DateTime64(3, 'UTC'),                          -- the time it evaluated as of (past, for a replay)
    rules_path String,                                   -- absolute path of the rules file
    rule_version LowCardinality(String),                 -- the file's `version`
    rules_sha256 String,                                 -- of the file's bytes
    by LowCardinality(String)                            -- alerts_job | cli | demo | …
)
ENGINE = MergeTree
ORDER BY evaluated_at;
