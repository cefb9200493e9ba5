"""A re-run of the demo never lays its simulated span on top of the previous one (routerscope/cli/demo.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.cli.demo import next_span, record_span
from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings

NOW = datetime(2026, 12, 1, 23, 1, 30, tzinfo=UTC)  # a span that ends now ends at 23:00, a 5-minute boundary
SPAN = timedelta(minutes=120)


@pytest.fixture
def settings(tmp_path):
    return Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path)})


def test_a_first_run_ends_at_the_latest_five_minute_boundary(settings):
    """The metric windows (5-minute partitions) then cut the scripted timeline the same way on every run: a span
    ending on the minute made an episode near a limit breach three windows in a row in some runs only."""
    assert next_span(settings, SPAN, NOW) == (datetime(2026, 12, 1, 21, 0, tzinfo=UTC), SPAN)


def test_a_run_after_a_whole_span_ends_now_too(settings):
    record_span(settings, datetime(2026, 12, 1, 20, 55, tzinfo=UTC))  # 2 h 5 min before 23:00: no overlap possible
    assert next_span(settings, SPAN, NOW) == (datetime(2026, 12, 1, 21, 0, tzinfo=UTC), SPAN)


def test_a_rerun_within_the_span_covers_only_the_time_since_the_previous_end(settings, capsys):
    record_span(settings, datetime(2026, 12, 1, 22, 30, tzinfo=UTC))  # 30 minutes before 23:00
    start, span = next_span(settings, SPAN, NOW)
    assert (start, span) == (datetime(2026, 12, 1, 22, 30, tzinfo=UTC), timedelta(minutes=30))
    assert "covers 22:30 → 23:00 (30 min) so the two do not overlap" in capsys.readouterr().err


@pytest.mark.parametrize("minutes_ago", [0, 9, -5])  # just now, under the 10-minute least, a clock that stepped back
def test_a_rerun_too_soon_is_refused_with_what_to_do(settings, minutes_ago):
    record_span(settings, datetime(2026, 12, 1, 23, 0, tzinfo=UTC) - timedelta(minutes=minutes_ago))
    with pytest.raises(RouterscopeError, match=r"would lie on top of it .*routerscope demo --fresh"):
        next_span(settings, SPAN, NOW)


def test_an_unreadable_record_is_no_earlier_run(settings):
    settings.demo_span_path.write_text("{torn")
    assert next_span(settings, SPAN, NOW)[1] == SPAN
