"""The time partitions every windowed asset shares (docs/metrics.md windows are half-open, UTC).

`end_offset=1`: the window in progress is a partition too, so "today so far" can be computed (and
recomputed as the day fills)."""

import dagster as dg

PARTITIONS_START = "2026-01-01"
FIVE_MINUTES = dg.TimeWindowPartitionsDefinition(
    cron_schedule="*/5 * * * *", start=f"{PARTITIONS_START}-00:00", fmt="%Y-%m-%d-%H:%M", timezone="UTC", end_offset=1
)
DAILY = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
