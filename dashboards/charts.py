"""Charts (Altair): every rate with its denominator nearby."""

from __future__ import annotations

import altair as alt
import pandas as pd


def fallback_rates(df: pd.DataFrame) -> alt.Chart:
    """The fallback rate over device-entered requests next to the naive one, per window."""
    long = df.melt(id_vars=["window_start"], value_vars=["fallback_rate", "naive_fallback_rate"],
                   var_name="rate", value_name="value")  # fmt: skip
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("window_start:T", title="window"), y=alt.Y("value:Q", title="share", axis=alt.Axis(format=".0%")),
        color=alt.Color("rate:N", title=None), tooltip=["window_start:T", "rate:N", alt.Tooltip("value:Q", format=".1%")],
    ).properties(height=260)  # fmt: skip


def share_line(df: pd.DataFrame, column: str, title: str) -> alt.Chart:
    return alt.Chart(df).mark_area(opacity=0.5).encode(
        x=alt.X("window_start:T", title="window"), y=alt.Y(f"{column}:Q", title=title, axis=alt.Axis(format=".0%")),
        tooltip=["window_start:T", alt.Tooltip(f"{column}:Q", format=".1%"), "requests:Q"],
    ).properties(height=200)  # fmt: skip


def calibration_bars(buckets: pd.DataFrame) -> alt.Chart:
    buckets = buckets.assign(bucket=[f"[{lo:.2f}, {hi:.2f})" for lo, hi in zip(buckets["low"], buckets["high"])])
    return alt.Chart(buckets).mark_bar().encode(
        x=alt.X("bucket:N", sort=None, title="confidence bucket"),
        y=alt.Y("pass_rate:Q", title="pass rate", axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0, 1])),
        color=alt.condition("datum.flagged", alt.value("#d62728"), alt.value("#1f77b4")),
        tooltip=["bucket:N", "n:Q", alt.Tooltip("pass_rate:Q", format=".1%")],
    ).properties(height=240)  # fmt: skip
