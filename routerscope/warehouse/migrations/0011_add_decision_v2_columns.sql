-- Contract version 2 of the decision event (decision_event.v2.schema.json): the device ledger
-- (seed 003), the all-cloud counterfactual cost and the rollout stage (seed 004). Version-1 rows
-- have NULL here. device_stats is flattened into device_* columns (one value each, read by the
-- device-health and memory-gate metrics; no query needs the object whole).
ALTER TABLE routerscope.decisions
    ADD COLUMN IF NOT EXISTS device_peak_mem_mb Nullable(Float64) AFTER span_id,
    ADD COLUMN IF NOT EXISTS device_thermal_state LowCardinality(Nullable(String)) AFTER device_peak_mem_mb,
    ADD COLUMN IF NOT EXISTS device_decode_tps Nullable(Float64) AFTER device_thermal_state,
    ADD COLUMN IF NOT EXISTS device_prefill_tps Nullable(Float64) AFTER device_decode_tps,
    ADD COLUMN IF NOT EXISTS device_cold_start Nullable(Bool) AFTER device_prefill_tps,
    ADD COLUMN IF NOT EXISTS device_load_ms Nullable(Float64) AFTER device_cold_start,
    ADD COLUMN IF NOT EXISTS all_cloud_cost_usd Nullable(Float64) AFTER device_load_ms,
    ADD COLUMN IF NOT EXISTS rollout_stage LowCardinality(Nullable(String)) AFTER all_cloud_cost_usd;
