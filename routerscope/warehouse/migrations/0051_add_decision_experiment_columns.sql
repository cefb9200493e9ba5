-- The closed loop's canary on the decision event (contract v2, optional; docs/loop.md): the candidate policy, the
-- experiment, the session's arm and its assignment bucket. NULL for events outside an experiment and for v1.
ALTER TABLE routerscope.decisions
    ADD COLUMN IF NOT EXISTS policy_id Nullable(String) AFTER label_design_id,
    ADD COLUMN IF NOT EXISTS experiment_id Nullable(String) AFTER policy_id,
    ADD COLUMN IF NOT EXISTS arm LowCardinality(Nullable(String)) AFTER experiment_id,
    ADD COLUMN IF NOT EXISTS assignment_bucket Nullable(UInt16) AFTER arm;
