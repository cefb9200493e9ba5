"""Charts (Altair): every rate with its denominator nearby; every time axis in 24-hour UTC; alert
episodes as shaded bands behind a time series (`with_incidents`), as Grafana draws annotations."""

from __future__ import annotations

import copy
from collections.abc import Callable

import altair as alt
import pandas as pd
from altair.utils.core import sanitize_pandas_dataframe

from routerscope.dashboards import words

UTC_TIME = "%Y-%m-%d %H:%M UTC"
LABELS = {
    "fallback_rate": "fallback rate (of device-entered)",
    "naive_fallback_rate": "naive fallback rate (of all requests)",
    "quality_fallback_rate": "quality",
    "timeout_fallback_rate": "timeout",
    "error_fallback_rate": "error",
    "l4_share": "L4 (canned answer) share",
    "l2_l3_share": "L2+L3 share",
}
SEVERITY_COLOURS = alt.Scale(domain=["page", "ticket", "info"], range=["#d62728", "#ff7f0e", "#7f7f7f"])
# Every chart of a stack reserves the same width for its y axis, has no y title (the heading above it says what it
# shows) and puts its legends on top, never at the side: the plots then have one width and one left edge, and an
# incident's band sits at the same place on each of them.
Y_AXIS_WIDTH = 64
SMALL = "#9e9e9e"  # a value on fewer events than the alert rules' minimum sample: grey and hollow, never a solid mark


def y_axis(**kwargs) -> alt.Axis:
    """A y axis of the reserved width (labels, title and ticks fit in it; a stack's plots line up)."""
    return alt.Axis(minExtent=Y_AXIS_WIDTH, maxExtent=Y_AXIS_WIDTH, **kwargs)


def top_legend(**kwargs) -> alt.Legend:
    return alt.Legend(orient="top", labelLimit=320, titleLimit=320, **kwargs)


def _domain(since, until) -> list[str] | None:
    """An x scale's domain: exactly the chosen range (what is outside it is clipped, never widens the axis)."""
    if since is None or until is None:
        return None
    return [pd.Timestamp(since).isoformat(), pd.Timestamp(until).isoformat()]


def spec(chart: alt.TopLevelMixin) -> dict:
    """The chart as the Vega-Lite spec the browser draws, its data inline. Not validated against the Vega-Lite
    schema here: validation is most of the time a page spends on its charts (9 small multiples: 4.9 s validated,
    1.1 s not, on 2 busy cores); the tests validate every chart (`tests/unit/test_charts.py`)."""
    with alt.data_transformers.enable("default", max_rows=None):
        return chart.to_dict(validate=False)


def show(build, *args, where=None, width: str = "stretch", **kwargs) -> None:
    """Draw the chart `build(*args, **kwargs)` returns (a function of this module) on the page, or in `where` (a
    column), from its unvalidated spec, built once per set of arguments: a page's rerun (a slider move) redraws
    its charts from the cache instead of building them again."""
    import streamlit as st  # deferred: streamlit; the chart builders run without it

    (where or st).vega_lite_chart(_cached_spec(build.__name__, args, kwargs), width=width)


def _cached_spec(name: str, args: tuple, kwargs: dict) -> dict:
    import streamlit as st  # deferred: streamlit; the chart builders run without it

    global _cached_spec_impl
    if _cached_spec_impl is None:

        @st.cache_data(ttl=300, max_entries=500, show_spinner=False)
        def cached(name: str, args: tuple, kwargs: dict) -> dict:
            return spec(globals()[name](*args, **kwargs))

        _cached_spec_impl = cached
    return _cached_spec_impl(name, args, kwargs)


# made on first use: this module is imported by code that runs without Streamlit
_cached_spec_impl: Callable[[str, tuple, dict], dict] | None = None


def pct(value, digits: int = 1) -> str:
    """A share as a percentage; '—' where there is none (no denominator)."""
    return "—" if value is None or value != value else f"{100 * value:.{digits}f}%"


def utc_x(field: str, title: str | None = "time (UTC)", fmt: str = "%H:%M", since=None, until=None) -> alt.X:
    """A time axis read in UTC with 24-hour labels, whatever the viewer's time zone; [since, until] when given is
    its domain, the chosen range."""
    domain = _domain(since, until)
    return alt.X(
        f"{field}:T",
        title=title,
        scale=alt.Scale(type="utc", domain=domain) if domain else alt.Scale(type="utc"),
        # labelExpr rather than format/formatType: the latter reach the browser as 12-hour local labels
        axis=alt.Axis(labelExpr=f"utcFormat(datum.value, '{fmt}')", labelOverlap=True)
        if fmt != "%Y-%m-%d"
        # a day axis ticks once a day: six ticks between two days all read "2026-12-06"
        else alt.Axis(
            labelExpr=f"utcFormat(datum.value, '{fmt}')",
            labelOverlap=True,
            tickCount={"interval": "day", "step": 1},  # (on a utc scale: UTC days)
        ),
    )


def utc_tooltip(field: str, title: str | None = None) -> alt.Tooltip:
    return alt.Tooltip(f"{field}:T", title=title or field, format=UTC_TIME, formatType="utc")


def _episodes(incidents: pd.DataFrame) -> pd.DataFrame:
    """The columns a band or a lane draws, and no more: each chart carries its data to the browser, and the trip
    values (dicts) made every chart's serialization fail over to a slow fix-up."""
    return pd.DataFrame(
        {
            "rule": incidents["rule"],
            "scope": [t or "overall" for t in incidents["task_type"]],
            "severity": incidents["severity"],
            "status": incidents["status"],
            "summary": incidents["summary"],
            "start": pd.to_datetime(incidents["first_seen"], utc=True),
            "end": pd.to_datetime(incidents["last_seen"], utc=True),
        }
    )


def _clipped(incidents: pd.DataFrame, since, until) -> pd.DataFrame:
    """The episodes cut to [since, until] (a firing one runs to `until`): shading never widens the axis."""
    df = _episodes(incidents)
    if until is not None:
        df["end"] = df["end"].fillna(pd.Timestamp(until))
        df.loc[df["status"] == "firing", "end"] = pd.Timestamp(until)
        df["end"] = df["end"].clip(upper=pd.Timestamp(until))
    if since is not None:
        df["start"] = df["start"].clip(lower=pd.Timestamp(since))
    return df[df["end"] >= df["start"]]


def incident_bands(incidents: pd.DataFrame, legend: bool = True, since=None, until=None) -> alt.Chart | None:
    """Each alert episode as a shaded band from its first breaching window to the end of its last, coloured
    by severity, within [since, until]; None when there is none to draw."""
    if incidents is None or incidents.empty:
        return None
    df = _clipped(incidents, since, until)
    if df.empty:
        return None
    return (
        alt.Chart(df)
        .mark_rect(opacity=0.12, clip=True)
        .encode(
            x=utc_x("start", since=since, until=until),
            x2="end:T",
            color=alt.Color(
                "severity:N", scale=SEVERITY_COLOURS, title="alert", legend=top_legend() if legend else None
            ),
            tooltip=["rule:N", "scope:N", "severity:N", "status:N", utc_tooltip("start"), utc_tooltip("end")],
        )
    )


def with_incidents(
    chart: alt.Chart, incidents: pd.DataFrame | None, legend: bool = True, since=None, until=None
) -> alt.Chart:
    """`chart` with the alert episodes shaded behind it (independent colour scales, the chart's height), the bands
    cut to [since, until]."""
    bands = incident_bands(incidents, legend, since, until)
    if bands is None:
        return chart
    return alt.layer(bands, chart).resolve_scale(color="independent").properties(height=chart.height)


LANE_STEP = 36  # px per incident lane: its label above, its bar below


def incident_timeline(incidents: pd.DataFrame, since, until) -> alt.Chart | None:
    """The episodes of the range as bars on one time axis, a row per rule and scope: what broke, since when,
    for how long, at a glance (a firing one runs to `until`). Each lane is named above its bar, inside the plot,
    so the plot has the width of the charts below it and its bars line up with their shading."""
    df = _clipped(incidents, since, until)
    if df.empty:  # firing episodes that began after the range: listed below, nothing of them to draw in it
        return None
    df["lane"] = [f"{words.rule_name(rule)} · {scope}" for rule, scope in zip(df["rule"], df["scope"])]  # for people
    df["label_at"] = pd.Timestamp(since)
    order = list(df.sort_values("start").drop_duplicates("lane")["lane"])
    y = alt.Y(
        "lane:N",
        title=None,
        sort=order,
        axis=alt.Axis(labels=False, ticks=False, domain=False, minExtent=Y_AXIS_WIDTH, maxExtent=Y_AXIS_WIDTH),
        scale=alt.Scale(paddingInner=0.1),
    )
    bars = (
        alt.Chart(df)
        .mark_bar(height=12, yOffset=8, clip=True)
        .encode(
            x=utc_x("start", since=since, until=until),
            x2="end:T",
            y=y,
            color=alt.Color("severity:N", scale=SEVERITY_COLOURS, title="severity", legend=top_legend()),
            opacity=alt.condition("datum.status == 'firing'", alt.value(1.0), alt.value(0.6)),
            tooltip=[
                "rule:N",
                "scope:N",
                "severity:N",
                "status:N",
                utc_tooltip("start"),
                utc_tooltip("end"),
                "summary:N",
            ],
        )
    )
    names = (
        alt.Chart(df.drop_duplicates("lane"))
        .mark_text(align="left", baseline="middle", dx=2, dy=-8, fontSize=12)
        .encode(x=alt.X("label_at:T"), y=y, text="lane:N")
    )
    return alt.layer(bars, names).properties(height=alt.Step(LANE_STEP))


def fallback_by_type(df: pd.DataFrame, height: int = 220, since=None, until=None) -> alt.Chart:
    """Fallbacks per window split by type (quality / timeout / error, stacked, of device-entered) with the
    share of requests that got the canned L4 answer as a dashed line, named in the legend: what users actually
    received."""
    long = df.melt(
        id_vars=["window_start", "device_entered", "requests"],
        value_vars=["quality_fallback_rate", "timeout_fallback_rate", "error_fallback_rate"],
        var_name="type",
        value_name="value",
    ).assign(type=lambda f: f["type"].map(LABELS))
    x = utc_x("window_start", since=since, until=until)
    stacked = (
        alt.Chart(long)
        .mark_area(opacity=0.7, clip=True)
        .encode(
            x=x,
            y=alt.Y("value:Q", stack=True, title=None, axis=y_axis(format=".0%")),
            color=alt.Color(
                "type:N",
                title="fallback type (of device-entered)",
                scale=alt.Scale(domain=["quality", "timeout", "error"], range=["#1f77b4", "#ff7f0e", "#d62728"]),
                legend=top_legend(),
            ),
            tooltip=[
                utc_tooltip("window_start", "window"),
                "type:N",
                alt.Tooltip("value:Q", format=".1%"),
                alt.Tooltip("device_entered:Q", title="device-entered"),
            ],
        )
    )
    l4 = (
        alt.Chart(df.assign(series=LABELS["l4_share"]))
        .mark_line(strokeDash=[4, 2], point=True, clip=True)
        .encode(
            x=x,
            y=alt.Y("l4_share:Q"),
            color=alt.Color("series:N", title="of all requests", scale=alt.Scale(range=["black"]), legend=top_legend()),
            tooltip=[
                utc_tooltip("window_start", "window"),
                alt.Tooltip("l4_share:Q", title="L4 share of requests", format=".1%"),
                alt.Tooltip("requests:Q"),
            ],
        )
    )
    return alt.layer(stacked, l4).resolve_scale(color="independent").properties(height=height)


def fallback_rates(df: pd.DataFrame, since=None, until=None) -> alt.Chart:
    """The fallback rate over device-entered requests next to the naive one, per window."""
    long = df.melt(
        id_vars=["window_start"],
        value_vars=["fallback_rate", "naive_fallback_rate"],
        var_name="rate",
        value_name="value",
    ).assign(rate=lambda f: f["rate"].map(LABELS))
    return (
        alt.Chart(long)
        .mark_line(point=True, clip=True)
        .encode(
            x=utc_x("window_start", since=since, until=until),
            y=alt.Y("value:Q", title=None, axis=y_axis(format=".0%")),
            color=alt.Color("rate:N", title="fallback rate", legend=top_legend()),
            tooltip=[utc_tooltip("window_start", "window"), "rate:N", alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(height=260)
    )


PANEL_HEIGHT = 185  # a small multiple's whole height (Streamlit fits title, subtitle and axis inside it)


def _panel_data(df: pd.DataFrame, min_n: int) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """A task type's panel data: (the windows the rules judge, the line breaking at the others; the windows below
    `min_n`, as points; the subtitle's lines)."""
    long = df.melt(
        id_vars=["window_start", "device_entered", "requests"],
        value_vars=["fallback_rate", "l4_share"],
        var_name="series",
        value_name="value",
    ).assign(series=lambda f: f["series"].map({"fallback_rate": "fallback rate", "l4_share": "L4 share"}))
    n = long["device_entered"].where(long["series"] == "fallback rate", long["requests"]).fillna(0)
    long = long.assign(n=n.astype(int), small=n < min_n)
    entered = int(df["device_entered"].fillna(0).sum())
    few = int((df["device_entered"].fillna(0) < min_n).sum()) if min_n else 0
    # the marks named in the title: which line is which, and what a hollow point is
    subtitle = [
        f"{entered} device-entered in the range" + (f" · hollow: n < {min_n}" if few else ""),
        "solid: fallback rate · dashed: L4 share",
    ]
    judged = long.assign(value=long["value"].where(~long["small"]))
    return judged, long[long["small"] & long["value"].notna()], subtitle


def _panel_layers(judged, small, since, until) -> tuple[alt.Chart, alt.Chart]:
    """The panel's line (solid: fallback rate, dashed: L4 share) and its hollow points, over `judged` and `small`
    (frames, or named datasets the spec is filled with later)."""
    x = utc_x("window_start", title=None, since=since, until=until)
    y = alt.Y("value:Q", title=None, axis=y_axis(format=".0%"), scale=alt.Scale(domain=[0, 1]))
    tooltip = [
        utc_tooltip("window_start", "window"),
        "series:N",
        alt.Tooltip("value:Q", format=".1%"),
        alt.Tooltip("n:Q", title="n (denominator)"),
    ]
    dash = alt.StrokeDash(
        "series:N",
        title=None,
        legend=None,
        scale=alt.Scale(domain=["fallback rate", "L4 share"], range=[[1, 0], [4, 2]]),
    )
    # a line through the windows the rules would judge; a window below the minimum breaks it (value None)
    lines = alt.Chart(judged).mark_line(clip=True).encode(x=x, y=y, strokeDash=dash, tooltip=tooltip)
    points = (
        alt.Chart(small).mark_point(filled=False, color=SMALL, size=30, clip=True).encode(x=x, y=y, tooltip=tooltip)
    )
    return lines, points


def task_type_panel(df: pd.DataFrame, task_type: str, since=None, until=None, min_n: int = 0) -> alt.Chart:
    """One task type's small multiple: its fallback rate (of device-entered) and its L4 share per window. A window
    with fewer device-entered requests than `min_n` (the alert rules' minimum sample) is a hollow grey point with its
    n, off the line: 100 % of 3 requests is not a spike."""
    judged, small, subtitle = _panel_data(df, min_n)
    lines, points = _panel_layers(judged, small, since, until)
    return alt.layer(lines, points, title=alt.Title(task_type, subtitle=subtitle)).properties(height=PANEL_HEIGHT)


def task_panels(series: pd.DataFrame, incidents: pd.DataFrame, since, until, min_n: int) -> dict[str, dict]:
    """Every task type's panel (`task_type_panel` with its incidents and the overall ones shaded) as specs. The
    chart is built once with named datasets and each task type's spec is that one with its own data and title:
    building nine Altair charts was most of a cold On-call's time."""
    bands = (
        alt.Chart(alt.NamedData("bands"))
        .mark_rect(opacity=0.12, clip=True)
        .encode(
            x=utc_x("start", since=since, until=until),
            x2="end:T",
            color=alt.Color("severity:N", scale=SEVERITY_COLOURS, legend=None),
            tooltip=["rule:N", "scope:N", "severity:N", "status:N", utc_tooltip("start"), utc_tooltip("end")],
        )
    )
    lines, points = _panel_layers(alt.NamedData("judged"), alt.NamedData("small"), since, until)
    template = spec(
        alt.layer(bands, alt.layer(lines, points), title=alt.Title("", subtitle=""))
        .resolve_scale(color="independent")
        .properties(height=PANEL_HEIGHT)
    )
    out = {}
    for task_type in sorted(t for t in series["task_type"].unique() if t):
        judged, small, subtitle = _panel_data(series[series["task_type"] == task_type], min_n)
        mine = incidents[incidents["task_type"].isin([task_type, ""])] if not incidents.empty else incidents
        shaded = _clipped(mine, since, until) if not mine.empty else pd.DataFrame()
        one = copy.deepcopy(template)
        one["title"] = {"text": task_type, "subtitle": subtitle}
        one["datasets"] = {"bands": _records(shaded), "judged": _records(judged), "small": _records(small)}
        out[task_type] = one
    return out


def _records(frame: pd.DataFrame) -> list[dict]:
    """A frame as the JSON rows a spec's dataset holds (times as ISO text, missing values as null)."""
    return [] if frame.empty else sanitize_pandas_dataframe(frame).to_dict("records")


def share_line(df: pd.DataFrame, column: str, title: str, since=None, until=None, chart_title: str = "") -> alt.Chart:
    """One share per window as an area, named in its legend (`title`); in a stack, its y axis has no title (the
    heading above says what it is) so that its plot lines up with the others'."""
    return (
        alt.Chart(
            df.assign(series=title),
            title=alt.Title(chart_title, anchor="start", fontSize=14) if chart_title else alt.Undefined,
        )
        .mark_area(opacity=0.5, clip=True)
        .encode(
            x=utc_x("window_start", since=since, until=until),
            y=alt.Y(f"{column}:Q", title=None, axis=y_axis(format=".0%")),
            color=alt.Color("series:N", title=None, scale=alt.Scale(range=["#4c78a8"]), legend=top_legend()),
            tooltip=[utc_tooltip("window_start", "window"), alt.Tooltip(f"{column}:Q", format=".1%"), "requests:Q"],
        )
        .properties(height=200)
    )


def calibration_bars(buckets: pd.DataFrame, min_n: int = 0) -> alt.Chart:
    """Pass rate per confidence bucket, in bucket order, each bar labelled with its sample size;
    flagged (non-monotonic) buckets in red. A bucket with fewer labeled attempts than `min_n` (the smallest sample
    the rollout rules judge) is a hollow grey point, labelled "n = 1, too few", never a bar: a 100 % of one is not
    a bar to read."""
    small = buckets["n"] < min_n
    buckets = buckets.assign(
        bucket=[f"[{lo:.2f}, {hi:.2f})" for lo, hi in zip(buckets["low"], buckets["high"])],
        label=[f"n = {n}, too few" if few else f"n = {n}" for n, few in zip(buckets["n"], small)],
        evidence=["too few to judge" if few else "judged" for few in small],
    )
    x = alt.X("bucket:N", sort=list(buckets["bucket"]), title="confidence bucket (n = labeled attempts)")
    tooltip: list[str | alt.Tooltip] = ["bucket:N", "n:Q", alt.Tooltip("pass_rate:Q", format=".1%"), "evidence:N"]
    base = alt.Chart(buckets).encode(x=x, tooltip=tooltip)
    y = alt.Y("pass_rate:Q", title="pass rate", axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0, 1.1]))
    judged = (
        base.transform_filter("datum.evidence == 'judged'")
        .mark_bar()
        .encode(y=y, color=alt.condition("datum.flagged", alt.value("#d62728"), alt.value("#1f77b4")))
    )
    few = (  # a hollow point at its pass rate: no bar to read as a fact
        base.transform_filter("datum.evidence != 'judged'")
        .mark_point(filled=False, color=SMALL, size=90, strokeWidth=1.5)
        .encode(y=y)
    )
    sizes = base.mark_text(dy=-12).encode(
        y=alt.Y("pass_rate:Q"),
        text="label:N",
        color=alt.condition("datum.evidence == 'judged'", alt.value("#31333f"), alt.value(SMALL)),
    )
    return (judged + few + sizes).properties(height=260)


def rates_with_ci(df: pd.DataFrame) -> alt.Chart:
    """False and missed fallback rates per day: a point per rate with its Wilson 95 % interval as a
    bar, the labeled denominator and the label coverage in the tooltip. Columns: window_start, rate
    (name), value, low, high, labeled, coverage."""
    base = alt.Chart(df).encode(
        x=utc_x("window_start", "day (UTC)", "%Y-%m-%d"),
        color=alt.Color("rate:N", title=None),
        tooltip=[
            alt.Tooltip("window_start:T", title="day", format="%Y-%m-%d", formatType="utc"),
            "rate:N",
            alt.Tooltip("value:Q", format=".1%"),
            alt.Tooltip("low:Q", format=".1%"),
            alt.Tooltip("high:Q", format=".1%"),
            alt.Tooltip("labeled:Q", title="labeled (denominator)"),
            alt.Tooltip("coverage:Q", format=".0%", title="label coverage"),
        ],
    )
    bars = base.mark_rule(strokeWidth=2, opacity=0.6).encode(
        y=alt.Y("low:Q", title="share (95% CI)", axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0, 1])),
        y2="high:Q",
    )
    points = base.mark_point(filled=True, size=60).encode(y="value:Q")
    return (bars + points).properties(height=260)


def histogram(df: pd.DataFrame, x: str, y: str, x_title: str, y_title: str) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:O", title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title),
            tooltip=[f"{x}:O", f"{y}:Q"],
        )
        .properties(height=220)
    )


def bars(df: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, percent: bool = True) -> alt.Chart:
    axis = alt.Axis(format=".0%") if percent else alt.Axis()
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:N", sort=None, title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title, axis=axis),
            tooltip=[f"{x}:N", alt.Tooltip(f"{y}:Q", format=".1%" if percent else ",.4f")],
        )
        .properties(height=220)
    )


def line(df: pd.DataFrame, x: str, y: str, title: str, fmt: str = ",.4f") -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=utc_x(x, "day (UTC)", "%Y-%m-%d"),
            y=alt.Y(f"{y}:Q", title=title),
            tooltip=[
                alt.Tooltip(f"{x}:T", title="day", format="%Y-%m-%d", formatType="utc"),
                alt.Tooltip(f"{y}:Q", format=fmt),
            ],
        )
        .properties(height=200)
    )


def decisions_histogram(frame: pd.DataFrame, since, until) -> alt.Chart:
    """The Explorer's rows over time: decisions per bucket, live and shadow stacked, on the range's axis. (Stacked
    here, y to y2: Vega-Lite's own stack over bars that span x to x2 drew nothing.)"""
    frame = frame.sort_values(["bucket", "mode"]).assign(
        top=lambda f: f.groupby("bucket")["decisions"].cumsum(),
    )
    frame["bottom"] = frame["top"] - frame["decisions"]
    return (
        alt.Chart(frame)
        .mark_rect(clip=True)
        .encode(
            x=utc_x("bucket", since=since, until=until),
            x2="bucket_end:T",
            y=alt.Y("bottom:Q", title=None, axis=y_axis(format=",d", tickMinStep=1)),
            y2="top:Q",
            color=alt.Color(
                "mode:N",
                title="decisions",
                scale=alt.Scale(domain=["live", "shadow"], range=["#1f77b4", "#9467bd"]),
                legend=top_legend(),
            ),
            tooltip=[
                utc_tooltip("bucket", "from"),
                utc_tooltip("bucket_end", "to"),
                "mode:N",
                alt.Tooltip("decisions:Q", format=","),
            ],
        )
        .properties(height=220)  # (the whole chart, legend and axis included, as Streamlit sizes it)
    )


STATE_COLOURS = alt.Scale(domain=["closed", "half_open", "open"], range=["#2ca02c", "#ff7f0e", "#d62728"])


def breaker_timeline(transitions: pd.DataFrame, since, until, data_from=None) -> alt.Chart:
    """Breaker states as bands over [since, until], one row per instance × boundary: each transition
    starts a band in its `to_state` that lasts until the breaker's next transition (or `until`); before
    its first transition a breaker was in that transition's `from_state`, drawn from `data_from` (the first data
    in the range) when that is later than `since`: nothing is drawn before data existed. "Next" is in the breaker's own
    order, its `seq` (events without one by time), never by timestamp alone: a router clock that steps
    back would otherwise show a breaker half-open long after it closed."""
    df = transitions.copy()
    df["lane"] = df["instance_id"] + " · " + df["boundary"]
    df["order"] = df["seq"].fillna(0) if "seq" in df else 0
    df = df.sort_values(["lane", "order", "event_time"], kind="stable")
    first = df.groupby("lane", as_index=False).first()
    axis_from = max(pd.Timestamp(since), pd.Timestamp(data_from)) if data_from is not None else pd.Timestamp(since)
    # a lane whose first transition is its breaker's first (seq 1) belongs to a router whose start is not recorded:
    # its state before that transition is drawn faint, as assumed, never as a fact (it may not have existed yet)
    assumed = (first["order"] == 1) if "seq" in first else pd.Series(False, index=first.index)
    before = first.assign(
        to_state=first["from_state"],
        from_state="",
        trigger=[
            "(assumed: the router's start is not recorded; a breaker starts closed)"
            if a
            else "(before the first transition shown)"
            for a in assumed
        ],
        event_time=axis_from,
    )
    before["event_time"] = before["event_time"].combine(first["event_time"], min)  # never after its first transition
    before["order"] = -1
    before["assumed"] = list(assumed)
    df = df.assign(assumed=False)
    df = pd.concat([before, df], ignore_index=True).sort_values(["lane", "order", "event_time"], kind="stable")
    df["until"] = df.groupby("lane")["event_time"].shift(-1).fillna(pd.Timestamp(until))
    df["until"] = df[["until", "event_time"]].max(axis=1)  # a clock that stepped back: an empty band
    return (
        alt.Chart(df)
        .mark_bar(height=18, clip=True)
        .encode(
            x=utc_x("event_time", since=axis_from, until=until),  # from the range's first data, as the charts above
            x2="until:T",
            y=alt.Y("lane:N", title=None, axis=alt.Axis(labelLimit=300)),
            color=alt.Color("to_state:N", title="state", scale=STATE_COLOURS),
            opacity=alt.condition("datum.assumed", alt.value(0.3), alt.value(1.0)),
            tooltip=[
                "lane:N",
                "from_state:N",
                "to_state:N",
                "trigger:N",
                utc_tooltip("event_time", "from"),
                utc_tooltip("until"),
            ],
        )
        # a lane's height whatever their number (a fixed height let them overlap)
        .properties(height=alt.Step(LANE_STEP))
    )


def decode_by_tier(frame: pd.DataFrame) -> alt.Chart:
    """Decode rate p50 and p5 per device tier: a collapsing slow tail stands out next to its median."""
    long = frame.melt(
        id_vars=["tier"], value_vars=["decode p50 tok/s", "decode p5 tok/s"], var_name="quantile", value_name="tok/s"
    ).dropna()
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("tier:N", title="device tier"),
            xOffset="quantile:N",
            y=alt.Y("tok/s:Q", title="decode tokens/s"),
            color=alt.Color("quantile:N", title=None),
            tooltip=["tier:N", "quantile:N", alt.Tooltip("tok/s:Q", format=".1f")],
        )
        .properties(height=220)
    )


def saved_share(frame: pd.DataFrame) -> alt.Chart:
    """Per task type, the share of the all-cloud bill the device path saved (red at or below zero); a row per
    task type, each named (the height grows with their number)."""
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("saved share:Q", title="saved share of the all-cloud bill", axis=alt.Axis(format=".0%")),
            y=alt.Y("task type:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=240)),
            color=alt.condition("datum['saved share'] > 0", alt.value("#1f77b4"), alt.value("#d62728")),
            tooltip=[
                "task type:N",
                alt.Tooltip("all-cloud USD:Q", format=",.4f"),
                alt.Tooltip("saved USD:Q", format=",.4f"),
                alt.Tooltip("saved share:Q", format=".1%"),
            ],
        )
        .properties(height=alt.Step(28))
    )
