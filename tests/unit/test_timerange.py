"""The shared time range of the dashboard pages: what a URL's parameters resolve to (no Streamlit)."""

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.dashboards.timerange import resolve

ANCHOR = datetime(2026, 12, 1, 21, 20, tzinfo=UTC)


@pytest.mark.parametrize(("preset", "hours"), [("1h", 1), ("6h", 6), ("24h", 24), ("7d", 168)])
def test_a_preset_ends_at_the_newest_data(preset, hours):
    rng = resolve({"range": preset}, ANCHOR)
    assert (rng.preset, rng.start, rng.end, rng.problem) == (preset, ANCHOR - timedelta(hours=hours), ANCHOR, "")
    assert rng.params() == {"range": preset}


def test_no_range_in_the_url_is_the_pages_default():
    assert resolve({}, ANCHOR, "24h").start == ANCHOR - timedelta(hours=24)
    with pytest.raises(ValueError, match="default range"):
        resolve({}, ANCHOR, "custom")


def test_a_custom_range_round_trips_through_the_url():
    rng = resolve({"range": "custom", "start": "2026-11-29T01:00:00Z", "end": "2026-11-29T02:30:00+00:00"}, ANCHOR)
    assert (rng.start, rng.end) == (datetime(2026, 11, 29, 1, tzinfo=UTC), datetime(2026, 11, 29, 2, 30, tzinfo=UTC))
    assert rng.params() == {"range": "custom", "start": "2026-11-29T01:00:00Z", "end": "2026-11-29T02:30:00Z"}
    assert resolve(rng.params(), ANCHOR) == rng
    assert rng.hours == 1.5
    # a time without a zone is UTC, as everywhere in routerscope
    assert (
        resolve({"range": "custom", "start": "2026-11-29 01:00", "end": "2026-11-29 02:00"}, ANCHOR).start == rng.start
    )


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"range": "12h"}, "unknown range '12h'"),
        ({"range": "custom", "start": "yesterday", "end": "2026-11-29T02:00:00Z"}, "not understood"),
        ({"range": "custom", "end": "2026-11-29T02:00:00Z"}, "not understood"),
        ({"range": "custom", "start": "2026-11-29T02:00:00Z", "end": "2026-11-29T01:00:00Z"}, "before it starts"),
        ({"range": "custom", "start": "2026-11-29T02:00:00Z", "end": "2026-11-29T02:00:00Z"}, "before it starts"),
    ],
)
def test_a_range_spelled_wrongly_falls_back_to_the_default_and_says_why(params, why):
    rng = resolve(params, ANCHOR, "6h")
    assert (rng.preset, rng.start, rng.end) == ("6h", ANCHOR - timedelta(hours=6), ANCHOR)
    assert why in rng.problem


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"range": "custom", "start": "0001-01-01T00:00:00+01:00", "end": "2026-11-29T02:00:00Z"}, "not understood"),
        ({"range": "custom", "start": "2026-11-29T02:00:00Z", "end": "9999-12-31T23:59:59-01:00"}, "not understood"),
        ({"range": "custom", "start": "1066-10-14T00:00:00Z", "end": "2026-11-29T02:00:00Z"}, "years 1900 to 2299"),
        ({"range": "x" * 10_000}, "x…' (use one of"),
    ],
)
def test_a_range_past_the_calendar_or_the_warehouse_falls_back_and_says_why_briefly(params, why):
    """Issue 40: a year-1 time with an offset raised OverflowError, a traceback on the page."""
    rng = resolve(params, ANCHOR, "6h")
    assert rng.preset == "6h" and why in rng.problem and len(rng.problem) < 200


def test_a_message_shown_as_text_escapes_every_markdown_mark():
    from routerscope.dashboards.timerange import as_text

    shown = as_text("range '[a](https://x.example) ![i](https://x.example/i.png) :red[big] <b>'\nnext")
    assert shown == (
        "range \\'\\[a\\]\\(https\u2060\\:\\/\\/x\\.example\\) "
        "\\!\\[i\\]\\(https\u2060\\:\\/\\/x\\.example\\/i\\.png\\) "
        "\\:red\\[big\\] \\<b\\>\\' next"
    )


def test_a_range_value_holding_a_url_or_an_address_is_never_autolinked_in_the_warning():
    """The warning box's own text autolinked `?range=` values (`www.`, `https://`, an e-mail): the Markdown
    renderer finds them after escapes are read. A word joiner after each trigger leaves none that the
    renderer's autolink patterns (GitHub-flavoured Markdown, as remark-gfm writes them) can match."""
    import re

    from routerscope.dashboards.timerange import as_text, resolve

    gfm_www = re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.IGNORECASE)
    gfm_email = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)", re.ASCII)
    for value in (
        "www.evil.example",
        "https://evil.example/x",
        "HTTP://EVIL.EXAMPLE",
        "jo@evil.example",
        "mailto:jo@x.io",
    ):
        rng = resolve({"range": value}, datetime(2026, 12, 1, tzinfo=UTC))
        assert rng.problem
        shown = as_text(f"The link's time range was not used: {rng.problem}.").replace("\\", "")
        assert not gfm_www.search(shown) and not gfm_email.search(shown), shown
        assert shown.replace("\u2060", "").count(value) == 1  # the value still reads as written


def test_presets_end_where_another_session_left_them_while_no_data_arrives():
    """Issue 55 (fast warm pages): a new tab, a reload or a second reader a minute later gets the same preset end as
    the first session, so every result cached over the range is found (held per session, a new tab missed them all
    and recomputed the Weekly tuning page: 4-5 s instead of 0.3 s)."""
    from routerscope.dashboards.timerange import AnchorHold

    hold = AnchorHold(timedelta(minutes=5))
    t0 = datetime(2026, 12, 7, 15, 0, tzinfo=UTC)
    assert hold.get(t0, "v1") == t0  # the first session: the present
    assert hold.get(t0 + timedelta(minutes=1), "v1") == t0  # a new tab a minute later: the same end
    assert hold.get(t0 + timedelta(minutes=4, seconds=59), "v1") == t0
    # new data moves it to the present at once: nothing newer may lie outside a preset
    assert hold.get(t0 + timedelta(minutes=2), "v2") == t0 + timedelta(minutes=2)
    # held for five minutes at most
    t1 = t0 + timedelta(minutes=2)
    assert hold.get(t1 + timedelta(minutes=5), "v2") == t1 + timedelta(minutes=5)
    # a clock stepped back is not held over
    t2 = t1 + timedelta(minutes=5)
    assert hold.get(t2 - timedelta(minutes=1), "v2") == t2 - timedelta(minutes=1)
