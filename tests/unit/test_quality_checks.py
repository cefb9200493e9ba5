"""The data-quality check table is data: every row names a frame that exists and a Great Expectations
expectation that accepts its arguments; limits come from `Thresholds`; the `stats` frame's shares and
ratios are the hand-computed ones (skipped without a denominator, freshness on the latest window only)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.warehouse.analytics.quality import CHECKS, FRAMES, Limit, Thresholds
from routerscope.warehouse.analytics.quality.frames import stats_frame
from routerscope.warehouse.analytics.quality.gx import expectation, import_gx
from routerscope.warehouse.sql import QueryWindow

DAY = QueryWindow(datetime(2026, 11, 28, tzinfo=UTC), datetime(2026, 11, 29, tzinfo=UTC))


def test_the_check_table_holds_values_only_with_unique_names_on_known_frames():
    assert len({c.name for c in CHECKS}) == len(CHECKS)
    assert {c.frame for c in CHECKS} == set(FRAMES)
    for check in CHECKS:
        for value in dataclasses.astuple(check):
            assert not callable(value), check.name


def test_every_check_builds_its_expectation_with_the_default_and_other_thresholds():
    _, gxe = import_gx()
    strict = Thresholds(freshness_lag_s=60.0, quarantine_share=0.0, volume_low=0.9, volume_high=1.1, label_coverage=0.5)
    for thresholds in (Thresholds(), strict):
        for check in CHECKS:
            made = expectation(gxe, check, thresholds)
            assert made.meta == {"check": check.name}
    volume = next(c for c in CHECKS if c.name == "pipeline.volume")
    assert volume.arguments(strict) == {"column": "volume_ratio", "min_value": 0.9, "max_value": 1.1}


def test_a_limit_must_name_a_threshold():
    with pytest.raises(ValueError, match="no threshold 'freshness'"):
        Limit("freshness")


def test_arguments_are_copies_so_the_table_stays_as_written():
    check = next(c for c in CHECKS if c.name == "decisions.domain.mode")
    check.arguments(Thresholds())["value_set"].append("canary")
    assert check.kwargs["value_set"] == ["live", "shadow"]


FIGURES = {
    "requests": 99,
    "requests_week_before": 66,
    "quarantined": 1,
    "newest_event": datetime(2026, 11, 28, 23, 50),  # naive, as the embedded engine may return it
    "future_events": 2,
    "judged_fallbacks": 8,
    "labeled_fallbacks": 2,
}


def test_the_stats_frame_on_the_current_window():
    now = datetime(2026, 11, 29, 0, 10, tzinfo=UTC)  # ten minutes after the day: still the latest window
    row = stats_frame(FIGURES, DAY, now).iloc[0].to_dict()
    assert row == {
        "quarantine_share": 1 / 100,  # quarantined / (loaded + quarantined)
        "freshness_lag_s": 20 * 60.0,
        "future_events": 2,
        "volume_ratio": 99 / 66,
        "fallback_label_coverage": 2 / 8,
    }


def test_the_stats_frame_skips_what_it_cannot_compute():
    empty = {**FIGURES, "requests": 0, "quarantined": 0, "requests_week_before": 0, "judged_fallbacks": 0}
    row = stats_frame(empty, DAY, DAY.end + timedelta(days=3)).iloc[0]  # an old window: freshness does not apply
    assert [row[c] for c in ("quarantine_share", "freshness_lag_s", "volume_ratio", "fallback_label_coverage")] == [
        None,
        None,
        None,
        None,
    ]
