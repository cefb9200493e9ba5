"""On-call: what broke, since when, and what to do. The incidents of the time range (firing, and resolved),
each one click from its decisions in the Explorer; the latest window's tiles with their denominators (greyed
below the alert rules' minimum sample); fallbacks by type and the canned-answer (L4) share with the
incidents shaded behind them; one small chart per task type; breakers; ingest freshness and consumer lag."""

from datetime import datetime, timedelta
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from routerscope.core.timeutil import UTC
from routerscope.dashboards import charts, data, timerange, words
from routerscope.dashboards import now as now_strip
from routerscope.warehouse.analytics.stats import LOW_COVERAGE

st.title("On-call")
rng = timerange.pick("6h")
EXPLORER = "app_pages/explorer.py"


def _when(t) -> str:
    return "—" if t is None or pd.isna(t) else f"{pd.Timestamp(t):%Y-%m-%d %H:%M}"


def _duration(start, end, firing: bool = False) -> str:
    """How long an episode breached: 'firing for 1 h 05 min' while it fires (until now), else its span; an episode
    of one evaluation (a pipeline signal: first seen == last seen) says so instead of "(0 min)"."""
    seconds = (pd.Timestamp(end) - pd.Timestamp(start)).total_seconds()
    if firing:
        return f"firing for {now_strip.fired_for(seconds)}"
    return "one evaluation" if seconds < 60 else now_strip.fired_for(seconds)


def rollback_verdicts(states: dict[str, dict], firing: bool) -> None:
    """One line per task type the rollback rules recommended rolling back within the range, however many of its
    rules fired: the words the tuning page, the Offload review and `report rollout` say (docs/metrics.md §3b).
    `firing`: the ones still recommended now (drawn first, red), else the ones whose recommendation resolved
    (drawn after every firing incident: a resolved verdict never outranks what fires)."""
    for task_type, state in sorted(states.items()):
        if bool(state["firing"]) != firing:
            continue
        if firing:
            st.error(f"**{task_type}**: {state['words']}")
        else:
            st.info(f"Resolved: **{task_type}**: {state['words']}")


def incident_link(container, row, end, named: dict) -> None:
    """The link to an episode's evidence: a blocking data-quality failure opens the failing check on the Data
    quality page; any other the Explorer over its windows, filtered to what its evidence names (the decisions that
    fell back for that reason, or served by the pushed version)."""
    if row.rule == now_strip.DQ_RULE:
        checks = data.failing_blocking_checks()
        timerange.link(
            container,
            now_strip.QUALITY,
            "Open the failing check",
            {**rng.params(), **({"check": checks[0]} if checks else {})},
            help="the blocking checks of the latest data-quality run",
        )
        return
    now = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)  # a firing one's link ends here
    window = timerange.incident_window(
        pd.Timestamp(row.first_seen).to_pydatetime(), pd.Timestamp(end).to_pydatetime(), row.status == "firing", now
    )
    scope = row.task_type or "overall"
    timerange.link(
        container,
        EXPLORER,
        "Open in Explorer",
        {
            **window.params(),
            **({"task_type": row.task_type} if row.task_type else {}),
            **named["explorer"],
            "incident": row.alert_key,
            "back": urlencode(rng.params()),  # the Explorer's way back to this range
        },
        help=f"the decisions of {scope} in this episode's windows"
        + (
            ", filtered to " + ", ".join(f"{k} = {v}" for k, v in named["explorer"].items())
            if named["explorer"]
            else ""
        ),
    )


def _episode(row, end) -> tuple[str, str, datetime, datetime]:
    return (
        row.rule,
        row.task_type or "",
        pd.Timestamp(row.first_seen).to_pydatetime(),
        pd.Timestamp(end).to_pydatetime(),
    )


def _end(row):
    """Where an episode's evidence ends: its last breach, else the range's end."""
    return row.last_seen if row.last_seen is not None and not pd.isna(row.last_seen) else rng.end


def incident_list(incidents: pd.DataFrame) -> None:
    st.subheader("Incidents")
    states = data.rollback_states(rng.start, rng.end)
    rollback_verdicts(states, firing=True)
    if incidents.empty:
        st.success(f"No alert fired or resolved in this range ({rng.caption()}).")
        rollback_verdicts(states, firing=False)
        return
    # firing first, whatever the order they came in; then the newest resolved
    incidents = incidents.assign(_firing=incidents["status"] == "firing").sort_values(
        ["_firing", "first_seen"], ascending=[False, False], kind="stable"
    )
    firing = incidents[incidents["_firing"]]
    st.caption(
        f"{len(firing)} firing, {len(incidents) - len(firing)} resolved in the range, firing first, then newest; the "
        "same episodes are shaded behind the charts below (red: page, orange: ticket)."
    )
    timeline = chart_specs(rng.start, rng.end).get("timeline")
    if timeline is not None:
        st.vega_lite_chart(timeline, width="stretch")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    evaluated_at = data.alerts_evaluated_at()  # a stale evaluation: "firing" as of then, not now (the strip says so)
    late = now_strip.stale(now, evaluated_at)
    until = pd.Timestamp(evaluated_at) if late else pd.Timestamp(now)
    rows = list(incidents.itertuples(index=False))
    every_named = data.episodes_named(tuple(_episode(row, _end(row)) for row in rows))  # one read for them all
    for row, named in zip(rows, every_named):
        scope = row.task_type or "overall"
        is_firing = row.status == "firing"
        state = "🔴 **FIRING**" if is_firing else f"resolved {_when(row.resolved_at)}"
        end = _end(row)
        shown_end = until if is_firing else end
        shown_until = f"{_when(until)} UTC, the last alert evaluation" if late else "now UTC"
        left, right = st.columns([6, 1], vertical_alignment="center")
        moved = "".join(f"  \n· {m}" for m in named["moved"])
        left.markdown(
            f"**{row.severity.upper()}** · **{named['cause']}** · `{scope}` · "
            f"{_when(row.first_seen)} – {shown_until if is_firing else _when(end) + ' UTC'} "
            f"({_duration(row.first_seen, shown_end, is_firing)}) · {state}"
            + (" · **recommends a rollback** (the verdict above)" if row.action == "rollback" else "")
            + (" · paged with the first rollback of its task type" if row.notify_state == "grouped" else "")
            + f"  \n{row.summary}. {words.tripped(row.trip_values)}"
            + moved
            + f"  \n**Next step**: {named['next_step']} (runbook: `{named['runbook']}`) · rule "
            f"{words.rule_name(row.rule)} (`{row.rule}`)",
            help=None,
        )
        incident_link(right, row, end, named)
    rollback_verdicts(states, firing=False)


def tiles(last: pd.Series) -> None:
    minimums = data.sample_minimums()

    def tile(col, label: str, metric: str, value, n: int, denominator: str, inverse_delta: str | None = None):
        need, _ = minimums.get(metric, (0, None))
        help_text = f"denominator: {n} {denominator}"
        if n < need:
            col.metric(
                label,
                charts.pct(value),
                delta=f"n = {n}, too few",
                delta_color="off",
                help=f"{help_text}; the alert rules need at least {need} before they judge this number",
            )
        else:
            col.metric(label, charts.pct(value), delta=inverse_delta, delta_color="inverse", help=help_text)

    entered, requests = int(last["device_entered"] or 0), int(last["requests"] or 0)
    c = st.columns(5)
    tile(
        c[0],
        "Fallback rate",
        "fallback_rate",
        last["fallback_rate"],
        entered,
        "requests entered the device",
    )
    tile(
        c[1],
        "Naive fallback rate",
        "naive_fallback_rate",
        last["naive_fallback_rate"],
        requests,
        "requests",
    )
    tile(c[2], "Device bypass", "device_bypass_rate", last["device_bypass_rate"], requests, "requests")
    tile(
        c[3],
        "L2+L3 share",
        "l2_l3_drift",
        last["l2_l3_share"],
        requests,
        "requests",
        "drifting" if last["l2_l3_drifting"] else None,
    )
    tile(c[4], "Canned answers (L4)", "degrade_share", last["l4_share"], requests, "requests")
    st.caption(
        "Fallback rate: of the requests that entered the device; naive: of all requests; device bypass, L2+L3 and "
        "canned answers (L4): shares of all requests."
    )


def small_multiples(series: pd.DataFrame, incidents: pd.DataFrame) -> None:
    st.subheader("Per task type")
    st.caption(
        "Fallback rate of device-entered requests (solid) and the L4 share (dashed) per task type; "
        "shaded: alerts on it or overall; a hollow grey point: a window with fewer device-entered requests than the "
        "alert rules judge, shown with its n but not drawn as a fact."
    )
    panels = [(name, spec) for name, spec in chart_specs(rng.start, rng.end).items() if name.startswith("task:")]
    cols = st.columns(3)
    for k, (_, spec) in enumerate(panels):
        cols[k % 3].vega_lite_chart(spec, width="stretch")


@st.cache_data(ttl=data.TTL, show_spinner=False)
def chart_specs(start, end) -> dict[str, dict]:
    """Every chart of the page over [start, end) as the spec the browser draws, built once per range and data
    refresh: building and serializing a dozen Altair charts was most of a page's time even with every query
    cached (3 s of 3.3 on 2 busy cores)."""
    series = data.window_series(start, end)
    incidents = data.incidents(start, end)
    out: dict[str, dict] = {}
    # every time axis ends where the range ends and starts where its data starts (a 6 h range over two hours of data
    # left two thirds of each chart empty); incident shading is cut to it
    first = series["window_start"].min() if not series.empty else None
    since = max(pd.Timestamp(start), first).to_pydatetime() if first is not None and not pd.isna(first) else start
    span = {"since": since, "until": end}
    timeline = None
    if not incidents.empty:  # from the data's start too, or the earliest episode's when one began before it
        earliest = pd.to_datetime(incidents["first_seen"], utc=True).min()
        t0 = min(pd.Timestamp(since), earliest) if not pd.isna(earliest) else pd.Timestamp(since)
        timeline = charts.incident_timeline(incidents, max(pd.Timestamp(start), t0).to_pydatetime(), end)
    if timeline is not None:
        out["timeline"] = charts.spec(timeline)
    overall = series[series["task_type"] == ""] if not series.empty else series
    if overall.empty:
        return out
    out["rates"] = charts.spec(charts.with_incidents(charts.fallback_rates(overall, **span), incidents, **span))
    out["by_type"] = charts.spec(charts.with_incidents(charts.fallback_by_type(overall, **span), incidents, **span))
    l2_l3 = charts.share_line(overall, "l2_l3_share", "L2+L3 share", **span)
    out["l2_l3"] = charts.spec(charts.with_incidents(l2_l3, incidents, **span))
    min_n = data.sample_minimums().get("fallback_rate", (0, None))[0]  # below it, a window is drawn hollow
    for task_type, panel in charts.task_panels(series, incidents, since, end, min_n).items():
        out[f"task:{task_type}"] = panel
    return out


@st.fragment(run_every="30s")
def live():
    with data.visit():  # (a fragment's own rerun is outside the page run's)
        _live()


def _live():
    series = data.window_series(rng.start, rng.end)
    incidents = data.incidents(rng.start, rng.end)
    incident_list(incidents)
    overall = series[series["task_type"] == ""] if not series.empty else series
    if overall.empty:
        st.info(
            f"No metric windows in this range (the newest data ends {data.newest_data_end():%Y-%m-%d %H:%M} UTC): "
            "pick a range that covers it above, or run `routerscope demo` "
            "(or `routerscope load` and the metric jobs)."
        )
        ingest(data.freshness())
        return
    busy = overall[overall["requests"] > 0]
    last = busy.iloc[-1] if len(busy) else overall.iloc[-1]  # the latest window that saw traffic
    st.subheader("Latest window")
    st.caption(f"{last['window_start']:%Y-%m-%d %H:%M} UTC (5 minutes), the newest with traffic in the range")
    tiles(last)
    false_by_type(charts.pct)
    specs = chart_specs(rng.start, rng.end)
    st.markdown("**Fallback rate**: of device-entered requests, beside the naive rate over all requests")
    st.vega_lite_chart(specs["rates"], width="stretch")
    st.markdown("**What users got**: fallbacks by type and the canned-answer share")
    st.vega_lite_chart(specs["by_type"], width="stretch")
    st.markdown("**L2+L3 share**: requests served by a cloud model (the degrade chain's levels 2 and 3)")
    st.vega_lite_chart(specs["l2_l3"], width="stretch")
    small_multiples(series, incidents)
    st.subheader("Breaker states")
    transitions = data.breaker_transitions()
    since, until = pd.Timestamp(rng.start), pd.Timestamp(rng.end)
    if not transitions.empty:
        transitions = transitions.assign(event_time=pd.to_datetime(transitions["event_time"], utc=True))
        transitions = transitions[(transitions["event_time"] >= since) & (transitions["event_time"] < until)]
    shown = transitions
    if shown.empty:
        st.caption(
            "No breaker transitions in this range: every breaker stayed as it was (closed unless shown earlier)."
        )
    else:
        data_from = overall["window_start"].min()  # no state is drawn before the first data of the range
        charts.show(charts.breaker_timeline, shown, since, until, data_from, width="stretch")
        st.caption(
            "A lane per router and side. Faint: the state before a breaker's first transition, assumed (a breaker "
            "starts closed, and when its router started is not recorded)."
        )
        with st.expander(f"{len(shown)} transitions"):
            st.dataframe(shown, hide_index=True, width="stretch")
    ingest(data.freshness())


def false_by_type(pct) -> None:
    """docs/sources.md#seed-000: quality and timeout false fallbacks side by side, never mixed (docs/metrics.md §3),
    over the latest daily window (labels arrive late: a 5-minute window rarely has any)."""
    day = data.daily_groups("", days=2)
    if day.empty:
        return
    by_type = day["group"].iloc[-1].get("false_fallback_by_type") or {}
    parts = [
        f"{kind} {pct(v.get('rate'))} of {v.get('labeled', 0)} labeled"
        for kind, v in by_type.items()
        if kind in ("quality", "timeout") and v.get("labeled")
    ]
    # docs/metrics.md §3c: the quality false fallbacks (the threshold's) as the estimate over all of them, which
    # `false_fallback_high` reads, the labeled shares beside it
    est = by_type.get("quality_est") or {}
    if est.get("rate") is not None:
        low, high = est["ci"]
        parts.insert(0, f"quality, estimated over all of them: {pct(est['rate'])} [{pct(low)}, {pct(high)}]")
    if parts:
        st.caption(
            f"False fallbacks on {day['window_start'].iloc[-1]:%Y-%m-%d}: {' · '.join(parts)} "
            "(quality: a threshold set too high; timeout: a latency problem)"
        )
    if est.get("coverage") is not None and est["coverage"] < LOW_COVERAGE:
        st.warning(
            f"The labels cover strata holding {pct(est['coverage'])} of that day's quality fallbacks: the estimate "
            "leaves the rest out."
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
        f"Ingest: newest event {_when(fresh['newest_event'].iloc[0])} UTC, last load "
        f"{_when(fresh['last_load'].iloc[0])} UTC, {int(fresh['rows'].iloc[0])} rows"
    )


live()
