-- The labeling design fixed at decision time (docs/metrics.md §3d), two optional fields of decision contract v2:
-- label_pi, the inclusion probability of the request's stratum in the judge's sample, and label_design_id, the
-- design that gave it. Rows loaded before them, and events of routers without a design, read NULL.
ALTER TABLE routerscope.decisions
    ADD COLUMN IF NOT EXISTS label_pi Nullable(Float64) AFTER device_resident_mem_mb,
    ADD COLUMN IF NOT EXISTS label_design_id LowCardinality(Nullable(String)) AFTER label_pi;
