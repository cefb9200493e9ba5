-- Two additive, optional contract fields; rows loaded before them read NULL.
-- breaker_events.seq: a breaker's transitions numbered 1, 2, … per (instance_id, boundary) by the router,
-- so the timeline and the data-quality chain check order them as they happened, not by event_time (a
-- router's clock may step back) or by arrival.
ALTER TABLE routerscope.breaker_events
    ADD COLUMN IF NOT EXISTS seq Nullable(UInt32) AFTER trigger;
-- decisions.device_resident_mem_mb: device_stats.resident_mem_mb (contract v2), the runtime's resident
-- memory with the model loaded and idle, read by the readiness memory gate (seed 003: at most 25 %).
ALTER TABLE routerscope.decisions
    ADD COLUMN IF NOT EXISTS device_resident_mem_mb Nullable(Float64) AFTER rollout_stage;
