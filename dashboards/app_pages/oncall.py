"""On-call: is the device path healthy right now? Fallback rate with its real denominator, the
device bypass, breakers, L2/L3 share and drift, firing alerts, ingest freshness and consumer lag."""

import pandas as pd
import streamlit as st

from dashboards import charts, data

st.title("On-call")


@st.fragment(run_every="30s")
def live():
    hours = 6
    df = data.windows("5m", hours)
    fresh = data.freshness()
    if df.empty:
        st.info("No metric windows yet: run `routerscope demo`, or `routerscope load` and the metric jobs.")
        ingest(fresh)
        return
    busy = df[df["requests"] > 0]
    last = busy.iloc[-1] if len(busy) else df.iloc[-1]  # the latest window that saw traffic
    st.caption(f"Latest window with traffic: {last['window_start']:%Y-%m-%d %H:%M} UTC (5 minutes)")
    c1, c2, c3, c4 = st.columns(4)
    pct = lambda v: "—" if v is None or v != v else f"{100 * v:.1f}%"  # noqa: E731
    c1.metric(
        "Fallback rate (of device-entered)",
        pct(last["fallback_rate"]),
        help=f"denominator: {int(last['device_entered'])} requests entered the device",
    )
    c2.metric(
        "Naive fallback rate (all requests)",
        pct(last["naive_fallback_rate"]),
        help=f"denominator: {int(last['requests'])} requests",
    )
    c3.metric("Device bypass", pct(last["device_bypass_rate"]))
    c4.metric(
        "L2+L3 share",
        pct(last["l2_l3_share"]),
        delta="drifting" if last["l2_l3_drifting"] else None,
        delta_color="inverse",
    )
    false_by_type(pct)
    st.altair_chart(charts.fallback_rates(df), width="stretch")
    st.altair_chart(charts.share_line(df, "l2_l3_share", "L2+L3 share"), width="stretch")
    st.subheader("Alerts")
    alerts = data.alerts()
    firing = alerts[alerts["status"] == "firing"] if not alerts.empty else alerts
    if firing.empty:
        st.success("Nothing firing")
    else:
        st.dataframe(firing, hide_index=True, width="stretch")
    st.subheader("Breaker states")
    transitions = data.breaker_transitions()
    since, until = df["window_start"].min(), df["window_start"].max() + pd.Timedelta(minutes=5)
    shown = transitions[transitions["event_time"] >= since] if not transitions.empty else transitions
    if shown.empty:
        st.caption(
            f"No breaker transitions in the last {hours} hours: "
            "every breaker stayed as it was (closed unless shown earlier)."
        )
    else:
        st.altair_chart(charts.breaker_timeline(shown, since, until), width="stretch")
        with st.expander(f"{len(shown)} transitions"):
            st.dataframe(shown, hide_index=True, width="stretch")
    ingest(fresh)


def false_by_type(pct) -> None:
    """Seed 000: quality and timeout false fallbacks side by side, never mixed (METRICS.md §3), over the latest
    daily window (labels arrive late: a 5-minute window rarely has any)."""
    day = data.daily_groups("", days=2)
    if day.empty:
        return
    by_type = day["group"].iloc[-1].get("false_fallback_by_type") or {}
    parts = [
        f"{kind} {pct(v.get('rate'))} of {v.get('labeled', 0)} labeled"
        for kind, v in by_type.items()
        if v.get("labeled")
    ]
    if parts:
        st.caption(
            f"False fallbacks on {day['window_start'].iloc[-1]:%Y-%m-%d}: {' · '.join(parts)} "
            "(quality: a threshold set too high; timeout: a latency problem)"
        )


def _age(t) -> str:
    if t is None or pd.isna(t) or t.year <= 1970:
        return "—"
    t = pd.Timestamp(t)
    t = t.tz_localize("UTC") if t.tzinfo is None else t
    seconds = max((pd.Timestamp.now(tz="UTC") - t).total_seconds(), 0)
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def ingest(fresh: pd.DataFrame):
    """Event freshness next to consumer lag: how old the newest loaded event is, and how many messages
    the loader is behind the broker per partition (where the broker reports its end offsets)."""
    st.subheader("Ingest")
    lag = data.consumer_lag()
    known = lag.dropna(subset=["behind"]) if not lag.empty else lag
    i1, i2 = st.columns(2)
    i1.metric("Event freshness", _age(fresh["newest_event"].iloc[0]), help="age of the newest loaded decision event")
    if known.empty:
        i2.metric("Consumer lag", "—", help="the broker did not report its end offsets: the event freshness stands in")
    else:
        worst = known.sort_values("behind").iloc[-1]
        i2.metric(
            "Consumer lag",
            f"{int(known['behind'].sum())} messages",
            help=f"behind the broker's end offsets over {len(known)} partitions; most behind: "
            f"{worst['topic']}[{int(worst['partition'])}] with {int(worst['behind'])}",
        )
    if not lag.empty:
        with st.expander("Consumer lag per partition"):
            st.dataframe(lag, hide_index=True, width="stretch")
    st.caption(
        f"Ingest: newest event {fresh['newest_event'].iloc[0]}, last load {fresh['last_load'].iloc[0]}, "
        f"{int(fresh['rows'].iloc[0])} rows"
    )


live()
