"""Charts (Altair): every rate with its denominator nearby."""

from __future__ import annotations

import altair as alt
import pandas as pd


def fallback_rates(df: pd.DataFrame) -> alt.Chart:
    """The fallback rate over device-entered requests next to the naive one, per window."""
    long = df.melt(
        id_vars=["window_start"],
        value_vars=["fallback_rate", "naive_fallback_rate"],
        var_name="rate",
        value_name="value",
    )
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("window_start:T", title="window"),
            y=alt.Y("value:Q", title="share", axis=alt.Axis(format=".0%")),
            color=alt.Color("rate:N", title=None),
            tooltip=["window_start:T", "rate:N", alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(height=260)
    )


def share_line(df: pd.DataFrame, column: str, title: str) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_area(opacity=0.5)
        .encode(
            x=alt.X("window_start:T", title="window"),
            y=alt.Y(f"{column}:Q", title=title, axis=alt.Axis(format=".0%")),
            tooltip=["window_start:T", alt.Tooltip(f"{column}:Q", format=".1%"), "requests:Q"],
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
        x=alt.X("window_start:T", title="day"),
        color=alt.Color("rate:N", title=None),
        tooltip=[
            "window_start:T",
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
            x=alt.X(f"{x}:T", title="day"),
            y=alt.Y(f"{y}:Q", title=title),
            tooltip=[f"{x}:T", alt.Tooltip(f"{y}:Q", format=fmt)],
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
            x=alt.X("event_time:T", title="time"),
            x2="until:T",
            y=alt.Y("lane:N", title=None, axis=alt.Axis(labelLimit=300)),
            color=alt.Color("to_state:N", title="state", scale=STATE_COLOURS),
            tooltip=["lane:N", "from_state:N", "to_state:N", "trigger:N", "event_time:T", "until:T"],
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
