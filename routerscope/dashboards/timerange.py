"""The one time range every page reads: chosen at the top of a page, kept in the URL (`st.query_params`)
and in the session, so a link, a reload or a switch of page keeps it.

URL form: `?range=6h` (a preset: the last 1 h / 6 h / 24 h / 7 d, ending now) or
`?range=custom&start=2026-12-01T20:00:00Z&end=2026-12-01T21:00:00Z` (UTC). Presets end at the present (the next
minute; the newest data when a clock puts it later), so what fires now is always inside them; a chart then starts
where its data starts, not at an empty left edge. `resolve` is the pure part (tested without Streamlit)."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from routerscope.core.timeutil import UTC, parse_utc

PRESETS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
LABELS = {"1h": "last 1 h", "6h": "last 6 h", "24h": "last 24 h", "7d": "last 7 d", "custom": "custom"}
CHOICES = tuple(LABELS)
STATE_KEY = "routerscope_time_range"  # the range in st.session_state (survives a switch of page)
PARAMS = ("range", "start", "end")  # the URL's keys for the range; other keys are a page's own filters
# The app's pages, in the sidebar's order (the first is the default): `streamlit_app.py` registers them and `pick`
# draws their links with the range.
PAGES = (
    ("app_pages/oncall.py", "On-call"),
    ("app_pages/tuning.py", "Weekly tuning"),
    ("app_pages/review.py", "Offload review"),
    ("app_pages/quality.py", "Data quality"),
    ("app_pages/explorer.py", "Explorer"),
    ("app_pages/labels_review.py", "Human review"),
    ("app_pages/loop.py", "Closed loop"),
)


def iso(t: datetime) -> str:
    """UTC as the URL carries it: to the second, or the millisecond when there is one (a four-digit year
    always, so that it reads back)."""
    spec = "milliseconds" if t.microsecond else "seconds"
    return t.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


@dataclass(frozen=True)
class TimeRange:
    """[start, end) in UTC; `preset` is one of CHOICES."""

    preset: str
    start: datetime
    end: datetime
    problem: str = ""  # why the URL's range was not used as written ('' when it was)

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    def params(self) -> dict[str, str]:
        """The URL's parameters for this range (what a link must carry)."""
        if self.preset == "custom":
            return {"range": "custom", "start": iso(self.start), "end": iso(self.end)}
        return {"range": self.preset}

    def caption(self) -> str:
        span = f"{self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC"
        return f"{LABELS[self.preset]}: {span}" if self.preset != "custom" else span


def resolve(params: Mapping[str, str], anchor: datetime, default: str = "6h") -> TimeRange:
    """The range the URL parameters name, with presets ending at `anchor` (the present). A range the
    URL spells wrongly falls back to `default` and says why in `problem`, instead of failing the page."""
    if default not in PRESETS:
        raise ValueError(f"default range {default!r} is not one of {', '.join(PRESETS)}")
    preset = params.get("range") or default
    if preset in PRESETS:
        return TimeRange(preset, anchor - PRESETS[preset], anchor)
    fallback = TimeRange(default, anchor - PRESETS[default], anchor)
    if preset != "custom":
        return _with_problem(fallback, f"unknown range {_shown(preset)} (use one of {', '.join(CHOICES)})")
    try:
        start, end = parse_utc(params.get("start", "")), parse_utc(params.get("end", ""))
    except (ValueError, OverflowError) as exc:  # OverflowError: year 1 or 9999 shifted past the calendar by its offset
        why = _shown(str(exc))
        return _with_problem(fallback, f"custom range not understood ({why}); use ISO times, e.g. {iso(anchor)}")
    if not (YEARS[0] <= start.year and end.year <= YEARS[1]):
        return _with_problem(
            fallback, f"custom range outside the times the warehouse stores (years {YEARS[0]} to {YEARS[1]})"
        )
    if end <= start:
        return _with_problem(fallback, f"custom range ends ({iso(end)}) before it starts ({iso(start)})")
    return TimeRange("custom", start, end)


def back_params(text: str) -> dict[str, str] | None:
    """The range a `back` URL value names (the On-call range an incident's link was opened from, URL-encoded),
    or None when it does not read as a range: the way back to where the person was, not to the incident's own
    windows."""
    values = {k: v for k, v in parse_qsl(text or "") if k in PARAMS}
    if not values:
        return None
    rng = resolve(values, datetime.now(UTC))
    return None if rng.problem else rng.params()


YEARS = (1900, 2299)  # the times the warehouse's DateTime64 columns store (as the command line checks)
# Every ASCII punctuation mark Markdown (and Streamlit's `:color[…]`, `:emoji:`) could read as syntax.
_MARKDOWN = re.compile(r"([!-/:-@\[-`{-~])")


def _shown(value: str, limit: int = 60) -> str:
    """A value from the URL as a message quotes it: cut to `limit` characters, on one line."""
    value = " ".join(str(value).split())
    return repr(value if len(value) <= limit else value[:limit] + "…")


# What GitHub-flavoured Markdown turns into a link by itself, escapes or not (the renderer finds them in the
# text after escapes are read): `http://` and `https://`, `www.`, an e-mail's `@`, `mailto:` and `xmpp:`.
_AUTOLINK = re.compile(r"https?(?=:)|www(?=\.)|@|mailto(?=:)|xmpp(?=:)", re.IGNORECASE)
_WORD_JOINER = "\u2060"  # invisible, and no link starts across it


def as_text(message: str) -> str:
    """`message` for `st.warning` & co., which render Markdown: every punctuation mark escaped, so a value
    from the URL shows as the characters it is (never a link, an image or a colour), on one line; a word
    joiner after each autolink trigger (`https`, `www`, `@`), so no URL or address in it becomes a link."""
    message = _AUTOLINK.sub(lambda m: m.group() + _WORD_JOINER, " ".join(message.split()))
    return _MARKDOWN.sub(r"\\\1", message)


def _with_problem(rng: TimeRange, problem: str) -> TimeRange:
    return TimeRange(rng.preset, rng.start, rng.end, problem)


def url_key(name: str, seed) -> str:
    """The session-state key of the widget that edits URL parameter `name`. The widget is set to `seed`
    (the value the URL, or the session's range, asks for) when it is new, when the URL's text changed since
    the page last wrote it (a link, a reload), when the value was another page's (every page has a range
    selector under the same key: a new page's widget would otherwise read the last page's state as no choice
    and fall back to its own usual span), and on the Back and Forward buttons (the URL they return to is where
    the person was); otherwise it keeps what the person chose."""
    import streamlit as st  # deferred: streamlit; the range's pure part (`resolve`) runs without it
    from streamlit.runtime.scriptrunner import get_script_run_ctx  # deferred: streamlit

    key, written, owner = f"url_{name}", f"url_{name}__written", f"url_{name}__page"
    ctx = get_script_run_ctx()
    page = ctx.page_script_hash if ctx is not None else ""
    back = bool(ctx is not None and ctx.is_history_navigation)
    url_text = st.query_params.get(name, "")
    if (
        key not in st.session_state
        or st.session_state.get(written) != url_text
        or st.session_state.get(owner) != page
        or back
    ):
        st.session_state[key] = seed
        st.session_state[written] = url_text
        st.session_state[owner] = page
    return key


def write_url(values: dict[str, str], keep: tuple[str, ...] = ()) -> None:
    """Make the URL's parameters `values` (empty ones removed), keeping the keys in `keep` as they are, and
    remember what was written so that `url_key` leaves the widgets alone on the next run.

    One write, and none when the URL already reads so: the browser adds a history entry for every change of the
    URL a run makes, so a page that wrote key by key (or rewrote what was there) cost the Back button a press per
    write, and a Back press landed on a half-written URL."""
    import streamlit as st  # deferred: streamlit; the range's pure part (`resolve`) runs without it

    wanted = {k: v for k, v in values.items() if v not in ("", None)}
    current = {k: st.query_params[k] for k in st.query_params}
    final = {**{k: v for k, v in current.items() if k in keep or k in wanted}, **wanted}
    if final != current:
        st.query_params.from_dict(final)
    for name in values:
        st.session_state[f"url_{name}__written"] = wanted.get(name, "")


def nav(rng: TimeRange) -> None:
    """The sidebar's links to every page, each carrying `rng`: a change of page is one history entry that holds the
    range (the page then finds its URL as it would write it, and writes nothing). A page's own filters stay
    behind. A page run on its own (a test) has no other pages registered: no links."""
    import streamlit as st  # deferred: streamlit; the range's pure part (`resolve`) runs without it
    from streamlit.errors import StreamlitPageNotFoundError  # deferred: streamlit

    for path, title in PAGES:
        try:
            st.sidebar.page_link(path, label=title, query_params=rng.params())
        except StreamlitPageNotFoundError:
            return


ANCHOR_HOLD = timedelta(minutes=5)


class AnchorHold:
    """Where presets end, shared by every session of the dashboard's process: the present, held for up to
    ANCHOR_HOLD while no data arrives, so a person reading a page (a slider moved after a minute), a reload, a new
    tab or a second person finds the same range and every cached result over it. New data, five minutes, or a
    clock stepped back moves it to the present; nothing can lie between the held end and the present while the data
    version is unchanged. (Held per session before 2026-12-07: a new tab a minute later missed every cache, and the
    Weekly tuning page took 4-5 s where 0.3 s would do.) The firing-now strip reads the wall clock either way."""

    def __init__(self, hold: timedelta = ANCHOR_HOLD):
        self.hold = hold
        self._kept: tuple[datetime, object] | None = None
        self._lock = threading.Lock()

    def get(self, present: datetime, version) -> datetime:
        with self._lock:
            kept = self._kept
            if kept is not None and kept[1] == version and timedelta(0) <= present - kept[0] < self.hold:
                return kept[0]
            self._kept = (present, version)
            return present


_ANCHOR = AnchorHold()


def pick(default: str = "6h") -> TimeRange:
    """Render the range selector at the top of the page and return the chosen range. The URL wins, then
    the session's range (a switch of page), then `default`; the choice is written back to both."""
    import streamlit as st  # deferred: streamlit; the range's pure part (`resolve`) runs without it

    from routerscope.dashboards import data  # deferred: pulls streamlit and pandas

    params = {k: st.query_params[k] for k in PARAMS if k in st.query_params}
    if not params and STATE_KEY in st.session_state:
        params = dict(st.session_state[STATE_KEY])
    anchor = _ANCHOR.get(data.presets_end(), data.data_version())
    rng = resolve(params, anchor, default)
    if rng.problem:
        st.warning(as_text(f"The link's time range was not used: {rng.problem}. Showing {LABELS[rng.preset]}."))
    cols = st.columns([3, 2, 2])
    choice = cols[0].segmented_control(
        "Time range",
        CHOICES,
        format_func=LABELS.__getitem__,
        key=url_key("range", rng.preset),
        required=True,
        help="Shared by every page and kept in the URL. Presets end now.",
    )
    choice = choice or rng.preset  # (a widget that lost its state reads as no choice: the URL's, not a default)
    if choice == "custom":
        custom = {
            "start": cols[1].text_input("From (UTC)", key=url_key("start", iso(rng.start))),
            "end": cols[2].text_input("To (UTC)", key=url_key("end", iso(rng.end))),
        }
        picked = resolve({"range": "custom", **custom}, anchor, default)
        if picked.problem:
            st.warning(as_text(f"{picked.problem}; showing {LABELS[picked.preset]}."))
    else:
        picked = resolve({"range": choice}, anchor, default)
    others = tuple(k for k in st.query_params if k not in PARAMS)
    write_url({"range": "", "start": "", "end": "", **picked.params()}, keep=others)
    st.session_state[STATE_KEY] = picked.params()
    st.caption(picked.caption())
    nav(picked)
    from routerscope.dashboards import now  # deferred: the strip pulls streamlit; `resolve` runs without it

    now.strip(picked.params(), link)  # what fires now, whatever the range: on every page that picks a range
    return picked


def link(container, page: str, label: str, query_params: dict[str, str], help: str | None = None) -> None:
    """A link to another page of the app with `query_params` (the range and a page's filters). A page run
    on its own (`streamlit run routerscope/dashboards/app_pages/x.py`, or a test) has no other pages registered: it
    gets a plain link to the same address instead."""
    from streamlit.errors import StreamlitPageNotFoundError  # deferred: streamlit

    try:
        container.page_link(page, label=label, query_params=query_params, help=help)
    except StreamlitPageNotFoundError:
        container.markdown(f"[{label}]({Path(page).stem}?{urlencode(query_params)})", help=help)


# A signal alert (ingest freshness, data quality) is one moment (first seen == last seen): its link opens this much
# before it, where the decisions that explain it are. An incident over metric windows spans at least one (5 min).
INCIDENT_MIN_SPAN = timedelta(minutes=30)
ONE_WINDOW = timedelta(minutes=5)


def incident_window(first_seen: datetime, last_seen: datetime | None, firing: bool, now: datetime) -> TimeRange:
    """The Explorer's range for an incident: its windows, [first seen, last seen]; a firing one's ends at `now`
    (it is not over); one shorter than a 5-minute window (a moment) opens INCIDENT_MIN_SPAN before its end. Never
    start == end (which the Explorer would refuse, falling back to its usual 24 h under the incident's banner)."""
    end = last_seen if last_seen is not None else now
    if firing:
        end = max(end, now)
    start = first_seen if end - first_seen >= ONE_WINDOW else min(first_seen, end - INCIDENT_MIN_SPAN)
    return TimeRange("custom", start, end)
