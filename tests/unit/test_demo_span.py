"""A re-run of the demo never lays its simulated span on top of the previous one (routerscope/cli/demo.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.cli.demo import next_span, record_span
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


def test_a_rerun_within_the_span_keeps_its_whole_span_beside_the_previous_one(settings, capsys):
    """A re-run 30 minutes after the previous span covered only those 30 minutes: 20,000 requests packed into them
    and one of the three scripted incidents raised. Its span is the one asked for, ending now, beside the first."""
    record_span(settings, datetime(2026, 12, 1, 22, 30, tzinfo=UTC))  # 30 minutes before 23:00
    start, span = next_span(settings, SPAN, NOW)
    assert (start, span) == (datetime(2026, 12, 1, 21, 0, tzinfo=UTC), SPAN)
    assert "covers 21:00 → 23:00 as a second fleet beside it" in capsys.readouterr().err


@pytest.mark.parametrize("minutes_ago", [0, 9, -5])  # just now, under 10 minutes, a clock that stepped back
def test_a_rerun_right_after_the_previous_one_runs_its_whole_span(settings, minutes_ago):
    """`make demo` twice in a row: the second was refused for 10 minutes. It now runs beside the first."""
    record_span(settings, datetime(2026, 12, 1, 23, 0, tzinfo=UTC) - timedelta(minutes=minutes_ago))
    assert next_span(settings, SPAN, NOW) == (datetime(2026, 12, 1, 21, 0, tzinfo=UTC), SPAN)


def test_an_unreadable_record_is_no_earlier_run(settings):
    settings.demo_span_path.write_text("{torn")
    assert next_span(settings, SPAN, NOW)[1] == SPAN


def test_two_runs_with_one_seed_share_no_request_label_or_session_id():
    """A re-run with the demo's fixed seed reused the first run's label ids for other requests: the blocking
    `labels.unique.label_id` check failed and the day's metrics were held back. Each run's ids are its own."""
    from routerscope.cli.demo import run_name
    from routerscope.router.sim.fleet import Fleet

    def ids(start: datetime) -> tuple[set, set, set]:  # each call a run of its own (`run_name`'s token)
        events, labels = [], []
        fleet = Fleet(
            seed=7,
            start=start,
            span=timedelta(minutes=10),
            run=run_name(start),
            on_event=events.append,
            on_label=labels.append,
        )
        fleet.run(300)
        return {e.request_id for e in events}, {x.label_id for x in labels}, {e.session_id for e in events}

    # two runs in the same 5 minutes share a span start: their own tokens keep them apart
    first, second = ids(datetime(2026, 12, 1, 21, 0, tzinfo=UTC)), ids(datetime(2026, 12, 1, 21, 0, tzinfo=UTC))
    assert all(first[k] and second[k] for k in range(3))
    assert not first[0] & second[0] and not first[1] & second[1] and not first[2] & second[2]
