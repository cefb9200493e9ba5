"""The frames the checks run on, for one window, and the default window (the day of the newest event)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from routerscope.core.timeutil import UTC
from routerscope.warehouse.analytics.stats import ratio
from routerscope.warehouse.queries import decisions
from routerscope.warehouse.queries import quality as queries
from routerscope.warehouse.sql import QueryWindow, utc_or_none

if TYPE_CHECKING:
    import pandas as pd

# An event_time later than now plus this allowance (clock skew between devices and the loader) is
# from the future: freshness and the default data-quality day ignore it, and `pipeline.future_events`
# counts it. Without this, one event dated 2100 would hide stale ingest for good.
FUTURE_ALLOWANCE = timedelta(minutes=5)
# Volume is compared with the same window this long before.
VOLUME_LOOKBACK = timedelta(days=7)


def frames(client, window: QueryWindow, now: datetime | None = None) -> dict[str, pd.DataFrame]:
    """The data frames the checks run on, for one window, by `checks.FRAMES` name."""
    now = now or datetime.now(UTC)
    week_before = QueryWindow(window.start - VOLUME_LOOKBACK, window.end - VOLUME_LOOKBACK)
    out = {
        "decisions": queries.decisions_frame(client, window),
        "labels": queries.labels_frame(client, window),
        "breakers": queries.breakers_frame(client, window),
        "offsets": queries.offsets_frame(client, window),
    }
    out["stats"] = stats_frame(queries.window_stats(client, window, week_before, now + FUTURE_ALLOWANCE), window, now)
    return out


def stats_frame(stats: dict[str, Any], window: QueryWindow, now: datetime) -> pd.DataFrame:
    """The one-row `stats` frame from the window's figures (`queries.quality.window_stats`): shares and
    ratios are None (skipped) without a denominator; freshness applies to the latest window only."""
    import pandas as pd  # deferred: pandas, a third of a second; only a data-quality run builds frames

    current = window.start <= now < window.end + (window.end - window.start)
    newest = utc_or_none(stats["newest_event"])
    return pd.DataFrame(
        [
            {
                "quarantine_share": ratio(stats["quarantined"], stats["requests"] + stats["quarantined"]),
                "freshness_lag_s": (now - newest).total_seconds() if current and newest is not None else None,
                "future_events": int(stats["future_events"]),
                "volume_ratio": ratio(stats["requests"], stats["requests_week_before"]),
                "fallback_label_coverage": ratio(stats["labeled_fallbacks"], stats["judged_fallbacks"]),
            }
        ]
    )


def latest_window(client, now: datetime | None = None) -> QueryWindow:
    """The UTC day of the newest decision event not from the future (today when there is none)."""
    now = now or datetime.now(UTC)
    newest = decisions.newest_event(client, now + FUTURE_ALLOWANCE)
    if newest is None:
        newest = now
    day = datetime(newest.year, newest.month, newest.day, tzinfo=UTC)
    return QueryWindow(day, day + timedelta(days=1))
