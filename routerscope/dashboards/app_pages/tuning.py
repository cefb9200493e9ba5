"""Weekly tuning, per task type, over the shared time range (by default the last 7 days of data): its calibration
curve (non-monotonic buckets flagged) with the recommended threshold for a target chosen on the page next
to the current one and the evidence floor; the latest policy push, before and after (docs/metrics.md §9);
false and missed fallbacks with their 95 % intervals and label coverage; cloud calls per session as a
distribution; shadow agreement by input length; cost."""

import json

import pandas as pd
import streamlit as st

from routerscope.core.text import pct
from routerscope.dashboards import charts, data, summary, timerange, words
from routerscope.warehouse.analytics import metrics as metric_defaults
from routerscope.warehouse.analytics.stats import LOW_COVERAGE

st.title("Weekly tuning")
rng = timerange.pick("7d")
types = data.task_types()
if not types or data.latest_day_end() is None:
    st.info("No daily metric windows yet: run `routerscope demo`, or the `metrics_daily_job` in Dagster.")
    st.stop()
start, end = rng.start, rng.end
week, review = data.week_and_review(start, end)  # the week's metric set and review, from one read of it

# -- every task type at a glance, what needs action first ---------------------------------------------
st.header("At a glance")
for name, stage in sorted(review["rollout"]["task_types"].items()):  # the range's rollback state, as On-call says it
    if stage["rollback"]["recommended"]:
        (st.error if stage["rollback"]["firing"] else st.warning)(f"**{name}**: {stage['rollback']['words']}")
moves = summary.recommended_moves(week)  # each recommended threshold comes with its what-if, in one read
whatifs = data.whatif_many(tuple(sorted(moves.items())), start, end) if moves else {}
glance = pd.DataFrame(summary.rows(week, review, whatifs, data.judged_rule_list())).drop(columns="priority")
# what needs doing and why first: "where they disagree" beside "needs", on screen at 1400 px (it was the last
# column, off-screen), its full text below the table (a cell cuts it)
WHY = "where they disagree"
first_columns = ["task type", "needs", WHY]
if not glance.empty:
    glance = glance[first_columns + [c for c in glance.columns if c not in first_columns]]
st.dataframe(
    glance,
    hide_index=True,
    width="stretch",
    column_config={WHY: st.column_config.TextColumn(WHY, width="large")},
)
disagreements = [(t, why) for t, why in zip(glance.get("task type", []), glance.get(WHY, [])) if why]
if disagreements:
    st.markdown("\n".join(f"- **{timerange.as_text(t)}**: {timerange.as_text(why)}" for t, why in disagreements))
st.caption(
    "Sorted by what needs action first: a rollback recommended (by the rollback rules within the range, the words "
    "On-call and the Offload review say too), a threshold to move (the band it crosses, with its labeled pass "
    "rate), verdicts that disagree (in words), a stage ready to advance. False fallbacks: the population estimate "
    "(docs/metrics.md: estimates) with the labeled share beside it; ⚠ where the labels cover under 80 % of them."
)
busiest = sorted(
    types, key=lambda t: -(week["by_task_type"].get(t) or {}).get("requests", 0)
)  # most live traffic first
# The task type lives in the URL beside the range: a reload or a shared link opens the same task type.
asked = st.query_params.get("task_type", "")
# Nothing asked for, or a task type the range does not hold: the one the table above puts first (what needs
# action first), else the busiest.
first_need = next((t for t in glance["task type"] if t in busiest), busiest[0]) if not glance.empty else busiest[0]
seed = asked if asked in busiest else first_need
task_type = st.selectbox("Task type", busiest, key=timerange.url_key("task_type", seed))
if task_type is None or task_type not in busiest:  # a stale choice from another range
    task_type = seed
if asked or task_type != seed:  # the one the page opens on stays out of the URL: a change of page is one history entry
    timerange.write_url({"task_type": task_type}, keep=tuple(k for k in st.query_params if k != "task_type"))

# -- calibration and threshold over the range -------------------------------------------------------
st.header("Calibration and threshold")
stored = data.calibration(task_type)  # the daily job's target and minimum sample are the page's defaults
defaults = (
    json.loads(stored.iloc[0]["calibration"])
    if not stored.empty
    else {"target": metric_defaults.DEFAULT_TARGET, "min_n": metric_defaults.DEFAULT_MIN_N}
)
t1, t2 = st.columns(2)
target = t1.slider("Target pass rate", 0.50, 0.99, float(defaults["target"]), 0.01)
min_n = int(t2.number_input("Minimum events at or above the threshold", 1, 100_000, int(defaults["min_n"])))
detail = data.calibration_for_target(task_type, start, end, target, min_n)
if detail is None:
    st.info("No labeled device attempts of this task type in the range: no calibration yet.")
else:
    buckets = pd.DataFrame(detail["buckets"])
    buckets["flagged"] = [i in detail["non_monotonic_buckets"] for i in range(len(buckets))]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Current threshold", "—" if detail["current_threshold"] is None else f"{detail['current_threshold']:.2f}")
    # the recommendation reads §3c's estimate of what a threshold serves (labels are no random sample); §6's on the
    # labeled share alone stays beside it
    est_to, labeled_to = detail.get("recommended_threshold_est"), detail["recommended_threshold"]
    shown = "none qualifies" if est_to is None else f"{est_to:.2f}"
    if (detail.get("recommendation_check") or {}).get("withheld"):
        shown = f"{est_to:.2f} withheld"
    c2.metric(
        f"Recommended (estimated pass rate ≥ {detail['target']}, n ≥ {detail['min_n']})",
        shown,
        help=(
            f"The smallest threshold whose served requests pass at least {detail['target']}, estimated over all of "
            "them (post-stratified by confidence, docs/metrics.md), and whose requests right at the cut "
            f"pass at least {detail.get('local_floor', metric_defaults.DEFAULT_LOCAL_FLOOR)} (calibrated by "
            "pool-adjacent-violators, docs/metrics.md, thresholds)"
        ),
    )
    c3.metric("Labeled attempts", f"{int(buckets['n'].sum()):,}")
    c4.metric(
        "Evidence floor",
        "—" if detail.get("evidence_floor") is None else f"{detail['evidence_floor']:.2f}",
        help="No threshold is recommended below the smallest labeled confidence (docs/metrics.md, thresholds).",
    )
    current_now = detail["current_threshold"]
    check = detail.get("recommendation_check")
    if check is not None:  # docs/metrics.md §6: the recommendation checked against the judge's audit
        miss = check["served_miss"] or {}
        said = (
            f"what {check['threshold']:.2f} would serve misses an estimated {pct(miss['rate'])}"
            + ("" if not miss.get("ci") else f" [{pct(miss['ci'][0])}, {pct(miss['ci'][1])}]")
            if miss.get("rate") is not None
            else f"no estimate of what {check['threshold']:.2f} would serve"
        )
        source = (
            "corrected by people's verdicts (missed_fallback_ppi)"
            if check["estimate"] == "missed_fallback_ppi"
            else "on the judge's labels alone, too few people's verdicts to correct them (missed_fallback_est)"
        )
        if check["withheld"]:
            st.error(f"Recommendation withheld: {check['reason']}.")
        else:
            st.caption(f"Checked: {said}, {source}.")
        if check["judge_warning"]:
            st.warning(f"Read the recommendation with care: {check['judge_warning']} ({task_type}).")
    withheld = check is not None and check["withheld"]  # a withheld move is not offered
    if not withheld and est_to is not None and (current_now is None or abs(est_to - current_now) >= 1e-9):
        # one recommendation truth: the move comes with its what-if, and one that walks into an alert is withheld
        offered, said = summary.move_check(
            task_type, data.whatif(task_type, start, end, round(est_to, 2)), data.judged_rule_list()
        )
        (st.caption if offered else st.error)(
            f"{'Recommended' if offered else 'Not offered'}: {task_type} "
            f"{'—' if current_now is None else f'{current_now:.2f}'} → {est_to:.2f}; {said}."
        )
    served = detail.get("served_pass_est") or {}
    if served.get("rate") is not None:
        low, high = served["ci"]
        st.caption(
            f"At {est_to:.2f} the device would serve requests passing an estimated {pct(served['rate'])} "
            f"[{pct(low)}, {pct(high)}] (strata covered {pct(served['coverage'])}); on the labeled share alone "
            f"(docs/metrics.md, thresholds) the recommendation is "
            + ("none" if labeled_to is None else f"{labeled_to:.2f}")
            + "."
        )
        if low < detail["target"]:
            st.warning(f"The estimate's interval reaches below the target {detail['target']}: few labels behind it.")
        if served["coverage"] < LOW_COVERAGE:
            st.warning(f"The labels cover strata holding {pct(served['coverage'])} of what it would serve.")
    change = detail.get("threshold_change_est", detail.get("threshold_change"))
    if change:  # docs/metrics.md §6: the band the recommendation moves, and how it fared
        st.markdown(metric_defaults.threshold_change_text(change).capitalize() + ".")
    st.caption(f"Calibration over {rng.caption()}; red bars do worse than a lower bucket.")
    if not detail["monotonic"]:
        worse = ", ".join(
            f"[{buckets['low'][i]:.2f}, {buckets['high'][i]:.2f})" for i in detail["non_monotonic_buckets"]
        )
        st.warning(f"Pass rate is not monotonic: confidence {worse} does worse than a lower bucket.")
    charts.show(charts.calibration_bars, buckets, data.rollout_min_n(), width="stretch")
    if (buckets["n"] < data.rollout_min_n()).any():
        st.caption(
            f"A hollow grey point: a bucket with fewer than {data.rollout_min_n()} labeled attempts (the sample the "
            "rollout rules ask for), too few to read its pass rate as a fact."
        )
    with st.expander("Buckets"):
        st.dataframe(buckets, hide_index=True, width="stretch")

group = week["by_task_type"].get(task_type)
if group is None:
    st.info("No decisions of this task type in the range.")
    st.stop()
if not group["requests"]:
    st.info("This task type had no live requests in the range (shadow traffic only): its live sections are empty.")

# -- try a threshold: the week's own traffic re-scored before a push (docs/metrics.md §14) ----------------------
st.header("Try a threshold")


@st.fragment
def try_threshold(task_type: str, start, end, in_force) -> None:
    """The what-if slider as a fragment: a move reruns this section alone, not the page above it (its range, the
    firing-now strip, the week's metrics), so each move reads the sweep already computed."""
    with data.visit():  # (a fragment's own rerun is outside the page run's)
        candidate = st.slider(
            f"Candidate threshold for {task_type}",
            0.0,
            1.0,
            round(float(in_force if in_force is not None else data.policy_threshold(task_type)), 2),
            0.01,
            key=f"whatif-{task_type}",
            help="The week's live requests re-scored: a gated request is served when its confidence is at or above the "
            "candidate, else it falls back to the cloud; every other request keeps its recorded outcome.",
        )
        trial = data.whatif(task_type, start, end, candidate)
        if "candidate" not in trial:
            st.caption("No live requests of this task type in the week: nothing to re-score.")
        else:
            from routerscope.warehouse.analytics.whatif import CAVEAT, ROWS, recorded  # deferred: where one ran

            side_by_side = [("threshold", recorded(trial["recorded_threshold"]), f"{candidate:g}")]
            side_by_side += [
                (words.prose(label), fmt(trial["current"]), fmt(trial["candidate"])) for label, fmt in ROWS
            ]
            st.table(pd.DataFrame(side_by_side, columns=["", "current", "candidate"]).set_index(""))
            moved = trial["moved"]
            st.markdown(
                f"**Moved:** {moved['n']:,} of {trial['gated']:,} gated requests ({moved['to_cloud']['n']:,} to the "
                f"cloud, {moved['to_device']['n']:,} to the device); {moved['labeled']:,} labeled "
                f"(coverage {pct(moved['label_coverage'])}), their device answers passed {pct(moved['pass_rate'])}"
                + ("" if moved["ci"] is None else f" [{pct(moved['ci'][0])}, {pct(moved['ci'][1])}]")
            )
            for warning in trial["warnings"]:
                st.warning(words.prose(warning))
            st.caption(CAVEAT)


try_threshold(task_type, start, end, (detail or {}).get("current_threshold"))

# -- the latest policy push, before and after (docs/metrics.md §9) ------------------------------------------
st.header("Policy versions")
versions = sorted((group.get("by_policy_version") or {}).items(), key=lambda kv: kv[1]["first_event"])
# the push against the version that served most of this task type's traffic in as long a span just before it
# (docs/metrics.md §9); when no other version served it there, in the week before the push
after_v, after = versions[-1] if versions else ("", {})
before_v = None
if after:
    span_start, span_end = metric_defaults.comparable_span(after)
    earlier = data.policy_versions(task_type, span_start, span_end)
    where = f"in as long a span just before the push ({span_start:%Y-%m-%d %H:%M} → {span_end:%H:%M} UTC)"
    before_v = metric_defaults.push_baseline(earlier, after_v)
    if before_v is None:
        earlier = {v: d for v, d in versions if d["first_event"] < after["first_event"]}
        where = "in the range before the push"
        before_v = metric_defaults.push_baseline(earlier, after_v)
if before_v is None:
    st.caption(f"One policy version in the range ({after_v or 'none'}): no push to compare.")
else:
    before = earlier[before_v]
    first_seen = pd.Timestamp(after["first_event"])
    st.caption(
        f"Latest push: {before_v} → {after_v} (first seen {first_seen:%Y-%m-%d %H:%M} UTC); live requests of this task "
        f"type. Before: {before_v}, the version that served the most of them ({before['requests']}) {where}."
    )
    # each rate with its own denominator; a side below the rollout rules' minimum sample is shown with its n and
    # no change is computed (4 against 5 requests is not "−25.0 pp")
    need = data.rollout_min_n()
    rows = []
    for key, label, n_key in (  # per policy version the metric set has the labeled shares (no estimate): said so
        ("fallback_rate", "fallback rate", "device_entered"),
        ("false_fallback_rate", "false fallbacks (labeled share)", "false_fallback_labeled"),
        ("missed_fallback_rate", "missed fallbacks (labeled share)", "missed_fallback_labeled"),
        ("route_accuracy", "route accuracy (labeled share)", None),
    ):
        b, a = before[key], after[key]
        nb, na = (before.get(n_key), after.get(n_key)) if n_key else (None, None)
        few = n_key is not None and min(nb or 0, na or 0) < need
        change = "—" if a is None or b is None else f"{100 * (a - b):+.1f}"
        rows.append(
            {
                "metric": label,
                "before": pct(b) + ("" if nb is None else f" (n = {nb})"),
                "after": pct(a) + ("" if na is None else f" (n = {na})"),
                "change (pp)": f"— too few (n under {need})" if few and change != "—" else change,
            }
        )
    rows.append(
        {"metric": "requests", "before": str(before["requests"]), "after": str(after["requests"]), "change (pp)": ""}
    )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")

# -- false and missed fallbacks ------------------------------------------------------------------
st.header("False and missed fallbacks")


def ci_text(ci) -> str:
    return "no labels" if ci is None else f"95% CI {pct(ci[0])} – {pct(ci[1])}"


coverage = group["label_coverage"]
# (title, metric, its labeled denominator, label coverage key, what the coverage is of)
FALLBACK_TILES = (
    (
        "False quality fallbacks (a threshold set too high)",
        "false_fallback",
        "labeled quality fallbacks",
        "fallbacks",
        "quality/timeout fallbacks",
    ),
    (
        "Missed fallbacks (bad answers shown)",
        "missed_fallback",
        "labeled device-served",
        "device_served",
        "device-served",
    ),
)
# docs/sources.md#seed-000: the threshold is judged on quality fallbacks alone (docs/metrics.md §3
# false_fallback_by_type): a timeout fallback whose device answer was
# fine is a latency problem, not a threshold set too high.
quality = group["false_fallback_by_type"]["quality"]
fallbacks_shown = {
    "false_fallback": (quality["rate"], quality["ci"], quality["labeled"]),
    "missed_fallback": (group["missed_fallback_rate"], group["missed_fallback_ci"], group["missed_fallback_labeled"]),
}
for column, (title, kind, denominator, covered, what) in zip(st.columns(2), FALLBACK_TILES):
    rate, ci, labeled = fallbacks_shown[kind]
    # docs/metrics.md §3c: labels are never a random sample; the tile is the post-stratified estimate for all of
    # them, the labeled share beside it
    est = (group["false_fallback_by_type"] if kind == "false_fallback" else group).get(
        "quality_est" if kind == "false_fallback" else "missed_fallback_est"
    )
    if est and est.get("rate") is not None:
        column.metric(
            title,
            pct(est["rate"]),
            help=f"population estimate (docs/metrics.md: estimates), {ci_text(est['ci'])}, n_eff {est['n_eff']:.0f}",
        )
        column.caption(
            f"Estimate {ci_text(est['ci'])} · n_eff {est['n_eff']:.0f} · strata covered {pct(est['coverage'])} of "
            f"{what} · labeled share {pct(rate)} ({ci_text(ci)}) of {labeled} labeled, label coverage "
            f"{pct(coverage[covered])}"
        )
        if est["coverage"] < LOW_COVERAGE:
            column.warning(
                f"The labels cover strata holding {pct(est['coverage'])} of the {what}: "
                "the estimate leaves the rest out."
            )
    else:
        column.metric(title, pct(rate), help=f"{ci_text(ci)}; denominator: {labeled} {denominator}")
        column.caption(f"{ci_text(ci)} · {labeled} labeled · label coverage {pct(coverage[covered])} of {what}")
timeout = group["false_fallback_by_type"]["timeout"]
if timeout["labeled"]:
    st.caption(
        f"Timeout fallbacks whose device answer was fine: {pct(timeout['rate'])} of {timeout['labeled']} labeled "
        f"({ci_text(timeout['ci'])}): a latency problem, not the threshold; all judged fallbacks together "
        f"{pct(group['false_fallback_rate'])} of {group['false_fallback_labeled']}."
    )
daily = data.daily_groups(task_type, days=7)
if not daily.empty:
    daily_rows = []
    for t, g in zip(daily["window_start"], daily["group"]):
        # per day, as the tiles: the §3c estimates with their intervals (the strata coverage in the tooltip)
        by_type = g.get("false_fallback_by_type") or {}
        for name, est, labeled_of in (
            ("false quality fallbacks (estimate)", by_type.get("quality_est"), (by_type.get("quality") or {})),
            (
                "missed fallbacks (estimate)",
                g.get("missed_fallback_est"),
                {"labeled": g.get("missed_fallback_labeled")},
            ),
        ):
            if est and est.get("rate") is not None:
                daily_rows.append(
                    {
                        "window_start": t,
                        "rate": name,
                        "value": est["rate"],
                        "low": est["ci"][0],
                        "high": est["ci"][1],
                        "labeled": labeled_of.get("labeled"),
                        "coverage": est["coverage"],
                    }
                )
    if daily_rows:
        charts.show(charts.rates_with_ci, pd.DataFrame(daily_rows), width="stretch")
        st.caption(
            "Per day: the population estimates and their 95 % intervals; the tooltip's coverage is the share "
            "of the population in strata with a label."
        )
    else:
        st.caption("No labeled days yet.")

# -- cloud calls per session -------------------------------------------------------------------------
# docs/metrics.md §3d: the judge's verdicts corrected by people's, and how far the judge agrees with them
st.subheader("Corrected by human review")
if group.get("judge_warning"):
    st.warning(f"{task_type}: {group['judge_warning']}; the estimates above rest on its verdicts unchecked.")
audit = group.get("judge_agreement") or {}
corrected = st.columns(4)
for column, (title, key) in zip(
    corrected,
    (
        ("False fallbacks, corrected", "false_fallback_ppi"),
        ("Missed fallbacks, corrected", "missed_fallback_ppi"),
        ("Route accuracy, corrected", "route_accuracy_ppi"),
    ),
):
    est = group.get(key)
    if est:
        column.metric(title, pct(est["rate"]), help=f"{key}: judge part + human correction (docs/metrics.md §3d)")
        column.caption(f"{ci_text(est['ci'])} · judged {est['n_judged']} · human {est['n_human']}")
    else:
        column.metric(title, "—", help=f"{key}: null below 30 human verdicts; the §3c estimate stands")
corrected[3].metric(
    "Judge agrees with people",
    pct(audit.get("agreement")),
    help="over events with both a judge and a human verdict (docs/metrics.md §3d)",
)
corrected[3].caption(
    f"{ci_text(audit.get('ci'))} · n {audit.get('n_human', 0)} · accepts {pct(audit.get('accept_bad'))} of bad · "
    f"rejects {pct(audit.get('reject_good'))} of good"
)

st.header("Cloud calls per session")
calls = group["cloud_calls_per_session"]
k1, k2, k3 = st.columns(3)
fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
k1.metric("Mean", fmt(calls["mean"]))
k2.metric("p50", fmt(calls["p50"]))
k3.metric("p95", fmt(calls["p95"]))
hist = data.cloud_calls_histogram(task_type, start, end)
if hist.empty:
    st.caption("No live sessions of this task type in the range.")
else:
    charts.show(charts.histogram, hist, "cloud_calls", "sessions", "cloud calls in the range", "sessions")
    st.caption(
        f"{int(hist['sessions'].sum())} sessions with live {task_type} requests; "
        "a session's calls count only this task type."
    )

# -- shadow agreement --------------------------------------------------------------------------------
st.header("Shadow agreement by input length")
shadow = group["shadow_agreement_by_input_length"]
if group["shadow_agreement_rate"] is None:
    st.caption(
        "This task type ran no shadow traffic in the range (policy `shadow:` lists the task types under evaluation)."
    )
else:
    st.metric("Agreement, all lengths", pct(group["shadow_agreement_rate"]))
    frame = pd.DataFrame({"input tokens": list(shadow), "agreement": list(shadow.values())}).dropna()
    charts.show(charts.bars, frame, "input tokens", "agreement", "input tokens", "device agrees with cloud")

# -- cost --------------------------------------------------------------------------------------------
st.header("Cloud cost")
cost = group["cost_usd"]
if cost["total"] is None:
    st.caption("No decision reported a cost (set `cloud_prices_usd_per_1k_tokens` in the policy).")
else:
    m1, m2, m3 = st.columns(3)
    m1.metric("Total in the range", f"${cost['total']:,.2f}" if cost["total"] >= 1 else f"${cost['total']:,.4f}")
    m2.metric("Per request", words.money(cost["per_request"], 5), help=f"over {group['requests']} live requests")
    m3.metric("Per session", words.money(cost["per_session"]), help=f"over {group['sessions']} sessions")
    if cost.get("all_cloud") is not None:  # docs/metrics.md §11: does this task type pay for the device path?
        s1, s2 = st.columns(2)
        s1.metric(
            "Saved against all-cloud",
            words.money(cost["saved"]),
            help=f"all-cloud bill ${cost['all_cloud']:,.4f} (L2 prices)",
        )
        s2.metric(
            "Saved share",
            pct(cost["saved_share"]),
            help="at or below zero: routing, fallbacks and re-tries eat the device path's saving",
        )
        st.caption(
            f"Of the spend, ${cost['spent_after_device']:,.4f} came after the device was tried (fallbacks, re-tries) "
            f"and ${cost['spent_cloud_direct']:,.4f} from requests routed straight to the cloud."
        )
    if len(daily) > 1:  # a trend needs two days
        per_day = pd.DataFrame(
            {"window_start": daily["window_start"], "cost": [g["cost_usd"]["total"] for g in daily["group"]]}
        ).dropna()
        if len(per_day) > 1:
            charts.show(charts.line, per_day, "window_start", "cost", "USD per day", ",.2f", width="stretch")
