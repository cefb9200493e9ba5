"""Charts (Altair): every rate with its denominator nearby; every time axis in 24-hour UTC; alert
episodes as shaded bands behind a time series (`with_incidents`), as Grafana draws annotations."""

from __future__ import annotations

import altair as alt
import pandas as pd

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


def pct(value, digits: int = 1) -> str:
    """A share as a percentage; '—' where there is none (no denominator)."""
    return "—" if value is None or value != value else f"{100 * value:.{digits}f}%"


def utc_x(field: str, title: str = "time (UTC)", fmt: str = "%H:%M") -> alt.X:
    """A time axis read in UTC with 24-hour labels, whatever the viewer's time zone."""
    return alt.X(
        f"{field}:T",
        title=title,
        scale=alt.Scale(type="utc"),
        # labelExpr rather than format/formatType: the latter reach the browser as 12-hour local labels
        axis=alt.Axis(labelExpr=f"utcFormat(datum.value, '{fmt}')", labelOverlap=True),
    )


def utc_tooltip(field: str, title: str | None = None) -> alt.Tooltip:
    return alt.Tooltip(f"{field}:T", title=title or field, format=UTC_TIME, formatType="utc")


def _episodes(incidents: pd.DataFrame) -> pd.DataFrame:
    return incidents.assign(
        start=pd.to_datetime(incidents["first_seen"], utc=True),
        end=pd.to_datetime(incidents["last_seen"], utc=True),
        scope=[t or "overall" for t in incidents["task_type"]],
    )


def incident_bands(incidents: pd.DataFrame, legend: bool = True) -> alt.Chart | None:
    """Each alert episode as a shaded band from its first breaching window to the end of its last, coloured
    by severity; None when there is none to draw."""
    if incidents is None or incidents.empty:
        return None
    return (
        alt.Chart(_episodes(incidents))
        .mark_rect(opacity=0.12)
        .encode(
            x=utc_x("start"),
            x2="end:T",
            color=alt.Color(
                "severity:N", scale=SEVERITY_COLOURS, title="alert", legend=alt.Legend() if legend else None
            ),
            tooltip=["rule:N", "scope:N", "severity:N", "status:N", utc_tooltip("start"), utc_tooltip("end")],
        )
    )


def with_incidents(chart: alt.Chart, incidents: pd.DataFrame | None, legend: bool = True) -> alt.Chart:
    """`chart` with the alert episodes shaded behind it (independent colour scales, the chart's height)."""
    bands = incident_bands(incidents, legend)
    if bands is None:
        return chart
    return alt.layer(bands, chart).resolve_scale(color="independent").properties(height=chart.height)


def incident_timeline(incidents: pd.DataFrame, since, until) -> alt.Chart:
    """The episodes of the range as bars on one time axis, a row per rule and scope: what broke, since when,
    for how long, at a glance (a firing one runs to `until`)."""
    df = _episodes(incidents)
    df["end"] = df["end"].fillna(pd.Timestamp(until))
    df.loc[df["status"] == "firing", "end"] = pd.Timestamp(until)
    df["lane"] = df["rule"] + " · " + df["scope"]
    return (
        alt.Chart(df)
        .mark_bar(height=14)
        .encode(
            x=alt.X(
                "start:T",
                title="time (UTC)",
                scale=alt.Scale(type="utc", domain=[pd.Timestamp(since).isoformat(), pd.Timestamp(until).isoformat()]),
                axis=alt.Axis(labelExpr="utcFormat(datum.value, '%H:%M')", labelOverlap=True),
            ),
            x2="end:T",
            y=alt.Y(
                "lane:N",
                title=None,
                sort=alt.EncodingSortField("start", op="min", order="ascending"),
                axis=alt.Axis(labelLimit=320, labelOverlap=False),
            ),
            color=alt.Color("severity:N", scale=SEVERITY_COLOURS, title="severity"),
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
        .properties(height=max(80, 26 * df["lane"].nunique()))
    )


def fallback_by_type(df: pd.DataFrame, height: int = 220) -> alt.Chart:
    """Fallbacks per window split by type (quality / timeout / error, stacked, of device-entered) with the
    share of requests that got the canned L4 answer as a line: what users actually received."""
    long = df.melt(
        id_vars=["window_start", "device_entered", "requests"],
        value_vars=["quality_fallback_rate", "timeout_fallback_rate", "error_fallback_rate"],
        var_name="type",
        value_name="value",
    ).assign(type=lambda f: f["type"].map(LABELS))
    stacked = (
        alt.Chart(long)
        .mark_area(opacity=0.7)
        .encode(
            x=utc_x("window_start"),
            y=alt.Y("value:Q", stack=True, title="share", axis=alt.Axis(format=".0%")),
            color=alt.Color(
                "type:N",
                title="fallback type (of device-entered)",
                scale=alt.Scale(domain=["quality", "timeout", "error"], range=["#1f77b4", "#ff7f0e", "#d62728"]),
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
        .mark_line(color="black", strokeDash=[4, 2], point=True)
        .encode(
            x=utc_x("window_start"),
            y=alt.Y("l4_share:Q"),
            tooltip=[
                utc_tooltip("window_start", "window"),
                alt.Tooltip("l4_share:Q", title="L4 share of requests", format=".1%"),
                alt.Tooltip("requests:Q"),
            ],
        )
    )
    return alt.layer(stacked, l4).properties(height=height)


def fallback_rates(df: pd.DataFrame) -> alt.Chart:
    """The fallback rate over device-entered requests next to the naive one, per window."""
    long = df.melt(
        id_vars=["window_start"],
        value_vars=["fallback_rate", "naive_fallback_rate"],
        var_name="rate",
        value_name="value",
    ).assign(rate=lambda f: f["rate"].map(LABELS))
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=utc_x("window_start"),
            y=alt.Y("value:Q", title="share", axis=alt.Axis(format=".0%")),
            color=alt.Color("rate:N", title=None, legend=alt.Legend(orient="top", labelLimit=300)),
            tooltip=[utc_tooltip("window_start", "window"), "rate:N", alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(height=260)
    )


def task_type_panel(df: pd.DataFrame, task_type: str) -> alt.Chart:
    """One task type's small multiple: its fallback rate (of device-entered) and its L4 share per window."""
    long = df.melt(
        id_vars=["window_start", "device_entered", "requests"],
        value_vars=["fallback_rate", "l4_share"],
        var_name="series",
        value_name="value",
    ).assign(series=lambda f: f["series"].map({"fallback_rate": "fallback rate", "l4_share": "L4 share"}))
    entered = int(df["device_entered"].fillna(0).sum())
    return (
        alt.Chart(long, title=alt.Title(task_type, subtitle=f"{entered} device-entered in the range"))
        .mark_line()
        .encode(
            x=utc_x("window_start", title=None),
            y=alt.Y("value:Q", title=None, axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0, 1])),
            strokeDash=alt.StrokeDash(
                "series:N",
                title=None,
                legend=None,
                scale=alt.Scale(domain=["fallback rate", "L4 share"], range=[[1, 0], [4, 2]]),
            ),
            tooltip=[
                utc_tooltip("window_start", "window"),
                "series:N",
                alt.Tooltip("value:Q", format=".1%"),
                alt.Tooltip("device_entered:Q", title="device-entered"),
                "requests:Q",
            ],
        )
        .properties(height=160)
    )


def share_line(df: pd.DataFrame, column: str, title: str) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_area(opacity=0.5)
        .encode(
            x=utc_x("window_start"),
            y=alt.Y(f"{column}:Q", title=title, axis=alt.Axis(format=".0%")),
            tooltip=[utc_tooltip("window_start", "window"), alt.Tooltip(f"{column}:Q", format=".1%"), "requests:Q"],
        )
        .properties(height=200)
    )


def calibration_bars(buckets: pd.DataFrame) -> alt.Chart:
    """Pass rate per confidence bucket, in bucket order, each bar labelled with its sample size;
    flagged (non-monotonic) buckets in red."""
    buckets = buckets.assign(
        bucket=[f"[{lo:.2f}, {hi:.2f})" for lo, hi in zip(buckets["low"], buckets["high"])],
        label=[f"n={n}" for n in buckets["n"]],
    )
    x = alt.X("bucket:N", sort=list(buckets["bucket"]), title="confidence bucket (n = labeled attempts)")
    base = alt.Chart(buckets).encode(x=x, tooltip=["bucket:N", "n:Q", alt.Tooltip("pass_rate:Q", format=".1%")])
    bars = base.mark_bar().encode(
        y=alt.Y("pass_rate:Q", title="pass rate", axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0, 1.1])),
        color=alt.condition("datum.flagged", alt.value("#d62728"), alt.value("#1f77b4")),
    )
    sizes = base.mark_text(dy=-8).encode(y=alt.Y("pass_rate:Q"), text="label:N")
    return (bars + sizes).properties(height=260)


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


STATE_COLOURS = alt.Scale(domain=["closed", "half_open", "open"], range=["#2ca02c", "#ff7f0e", "#d62728"])


def breaker_timeline(transitions: pd.DataFrame, since, until) -> alt.Chart:
    """Breaker states as bands over [since, until], one row per instance × boundary: each transition
    starts a band in its `to_state` that lasts until the breaker's next transition (or `until`); before
    its first transition a breaker was in that transition's `from_state`. "Next" is in the breaker's own
    order, its `seq` (events without one by time), never by timestamp alone: a router clock that steps
    back would otherwise show a breaker half-open long after it closed."""
    df = transitions.copy()
    df["lane"] = df["instance_id"] + " · " + df["boundary"]
    df["order"] = df["seq"].fillna(0) if "seq" in df else 0
    df = df.sort_values(["lane", "order", "event_time"], kind="stable")
    first = df.groupby("lane", as_index=False).first()
    before = first.assign(
        to_state=first["from_state"],
        from_state="",
        trigger="(before the first transition shown)",
        event_time=pd.Timestamp(since),
    )
    before["order"] = -1
    df = pd.concat([before, df], ignore_index=True).sort_values(["lane", "order", "event_time"], kind="stable")
    df["until"] = df.groupby("lane")["event_time"].shift(-1).fillna(pd.Timestamp(until))
    df["until"] = df[["until", "event_time"]].max(axis=1)  # a clock that stepped back: an empty band
    return (
        alt.Chart(df)
        .mark_bar(height=18)
        .encode(
            x=utc_x("event_time"),
            x2="until:T",
            y=alt.Y("lane:N", title=None, axis=alt.Axis(labelLimit=300)),
            color=alt.Color("to_state:N", title="state", scale=STATE_COLOURS),
            tooltip=[
                "lane:N",
                "from_state:N",
                "to_state:N",
                "trigger:N",
                utc_tooltip("event_time", "from"),
                utc_tooltip("until"),
            ],
        )
        .properties(height=max(100, 50 * df["lane"].nunique()))
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
    """Per task type, the share of the all-cloud bill the device path saved (red at or below zero)."""
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("saved share:Q", title="saved share of the all-cloud bill", axis=alt.Axis(format=".0%")),
            y=alt.Y("task type:N", sort="-x", title=None),
            color=alt.condition("datum['saved share'] > 0", alt.value("#1f77b4"), alt.value("#d62728")),
            tooltip=[
                "task type:N",
                alt.Tooltip("all-cloud USD:Q", format=",.4f"),
                alt.Tooltip("saved USD:Q", format=",.4f"),
                alt.Tooltip("saved share:Q", format=".1%"),
            ],
        )
        .properties(height=220)
    )
