"""UTC instants as text (`routerscope.core.timeutil`): one writer, one reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from routerscope.core.timeutil import parse_utc, utc, utc_iso


def test_utc_takes_naive_times_as_utc_and_converts_aware_ones():
    assert utc(datetime(2026, 11, 30, 12)) == datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert utc(datetime(2026, 11, 30, 13, tzinfo=timezone(timedelta(hours=1)))).hour == 12


def test_utc_iso_writes_z_and_milliseconds_and_parse_utc_reads_it_back():
    t = datetime(2026, 11, 30, 13, 4, 5, 678901, tzinfo=timezone(timedelta(hours=1)))
    assert utc_iso(t) == "2026-11-30T12:04:05.678Z"
    assert utc_iso(t, "seconds") == "2026-11-30T12:04:05Z"
    assert parse_utc(utc_iso(t)) == datetime(2026, 11, 30, 12, 4, 5, 678000, tzinfo=UTC)
    assert parse_utc("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_utc(" 2026-11-30T14:00:00+02:00 ") == datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01", "2026-11-30T25:00Z"])
def test_parse_utc_refuses_what_is_not_an_instant(text):
    with pytest.raises(ValueError):
        parse_utc(text)
