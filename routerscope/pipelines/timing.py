"""When the deployed pipeline runs things: ingest cadence, settle delays, and which window a tick computes.

Production defaults (docs/architecture.md §4, docs/operations.md "Running under the Dagster daemon"):

* ingest every minute (`INGEST_INTERVAL_S`), one run at a time;
* a 5-minute window is computed `SETTLE_5M` (2 minutes) after it ends, so events that were still
  in flight or waiting for the next ingest run are in it; events or labels that arrive later still
  (ingested after `end + SETTLE_5M`) make the late-data sensor recompute it, up to `LATE_HORIZON`
  (2 hours) back;
* a day is computed (data-quality suites, then its metrics) at 00:15 UTC the next day (`SETTLE_DAILY`);
  when that run was missed (the daemon down or started later), from 01:00 on the late-labels sensor
  runs it once;
* the sensors look every 60 s (the late-labels sensor of days every 5 minutes).

`ROUTERSCOPE_SENSOR_INTERVAL_S` (seconds, read when the definitions load) shortens every sensor's
interval, for a test or a demo of the daemon; the schedules' times do not change.

Windows are half-open and UTC; partition keys use the formats of `routerscope.pipelines.partitions`."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from routerscope.core.errors import ConfigError
from routerscope.core.timeutil import utc

FIVE_MINUTES = timedelta(minutes=5)
ONE_DAY = timedelta(days=1)
SETTLE_5M = timedelta(minutes=2)
SETTLE_DAILY = timedelta(minutes=15)
LATE_HORIZON = timedelta(hours=2)
# Yesterday not computed by 01:00 (00:15 + this): its scheduled run was missed; the late-labels sensor runs it.
DAILY_CATCH_UP_GRACE = timedelta(minutes=45)

INGEST_INTERVAL_S = 60
LATE_EVENTS_INTERVAL_S = 60
ALERTS_INTERVAL_S = 60
LATE_LABELS_INTERVAL_S = 300
EXPORTER_INTERVAL_S = 30  # the exporter's lease is renewed this often (routerscope.pipelines.exporter)

FIVE_MINUTE_KEY = "%Y-%m-%d-%H:%M"  # routerscope.pipelines.partitions.FIVE_MINUTES
DAY_KEY = "%Y-%m-%d"  # routerscope.pipelines.partitions.DAILY

# The schedules tick once the settle delay has passed: hh:02, hh:07, … and 00:15.
_settle_min = int(SETTLE_5M.total_seconds() // 60)
METRICS_5M_CRON = f"{_settle_min % 5}-59/5 * * * *"
METRICS_DAILY_CRON = f"{int(SETTLE_DAILY.total_seconds() // 60)} 0 * * *"

INTERVAL_ENV = "ROUTERSCOPE_SENSOR_INTERVAL_S"


def sensor_interval(default_s: int, env: dict | None = None) -> int:
    """`default_s`, or every sensor's interval shortened by ROUTERSCOPE_SENSOR_INTERVAL_S."""
    raw = (os.environ if env is None else env).get(INTERVAL_ENV)
    if not raw:
        return default_s
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{INTERVAL_ENV}={raw!r} is not a whole number of seconds") from None
    if value < 1:
        raise ConfigError(f"{INTERVAL_ENV}={raw!r} must be at least 1")
    return value


def floor_5m(t: datetime) -> datetime:
    t = utc(t)
    return t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0)


def finished_5m_window(tick: datetime, settle: timedelta = SETTLE_5M) -> tuple[datetime, datetime]:
    """The 5-minute window a tick at `tick` computes: the last one that ended at least `settle` ago."""
    end = floor_5m(utc(tick) - settle)
    return end - FIVE_MINUTES, end


def finished_day(tick: datetime, settle: timedelta = SETTLE_DAILY) -> tuple[datetime, datetime]:
    """The day a tick at `tick` computes: the last one that ended at least `settle` ago (at 00:15, yesterday)."""
    end = (utc(tick) - settle).replace(hour=0, minute=0, second=0, microsecond=0)
    return end - ONE_DAY, end


def five_minute_key(start: datetime) -> str:
    return utc(start).strftime(FIVE_MINUTE_KEY)


def day_key(start: datetime) -> str:
    return utc(start).strftime(DAY_KEY)
