"""Offload review, over the shared time range (by default the last 7 days of data): the device ledger per
tier (docs/sources.md#seed-003: a tier whose slow-tail decode rate collapses, or whose throttled share climbs, is
flagged), the saving against an all-cloud bill per task type (docs/sources.md#seed-003 and #seed-004), the task grading
of docs/sources.md#seed-004 beside the readiness of docs/sources.md#seed-003 (where the two rubrics disagree), and the
rollout stage tracker with its exit conditions (docs/sources.md#seed-004-7)."""

import pandas as pd
import streamlit as st

from routerscope.core.text import num, pct, verdict
from routerscope.dashboards import charts, data, timerange, words

st.title("Offload review")
rng = timerange.pick("7d")
r = data.review(rng.start, rng.end)
st.caption("Live events of the range; the policy in force.")

# -- device ledger per tier (docs/metrics.md §10) ----------------------------------------------------------
st.header("Device ledger per tier")
ledger = r["ledger"]
if not ledger:
    st.info("No decision in this range carries device measurements (contract v2 `device_stats`).")
else:
    best_p5 = max((t["decode_tps"]["p5"] or 0) for t in ledger.values())
    rows, flagged = [], []
    for tier, t in ledger.items():
        weak = t["decode_tps"]["p5"] is not None and best_p5 and t["decode_tps"]["p5"] < 0.5 * best_p5
        hot = (t["throttled_share"] or 0) > 0.1
        memory = r["tier_memory_mb"].get(tier)
        if weak:
            flagged.append(
                f"**{tier}**: p5 decode {num(t['decode_tps']['p5'], 1)} tok/s, "
                f"under half the best tier's {num(best_p5, 1)}"
            )
        if hot:
            flagged.append(
                f"**{tier}**: {pct(t['throttled_share'])} of requests ran throttled (thermal serious/critical)"
            )
        rows.append(
            {
                "tier": tier,
                "requests": t["requests"],
                "decode p50 tok/s": t["decode_tps"]["p50"],
                "decode p5 tok/s": t["decode_tps"]["p5"],
                "ttft p50 ms": t["ttft_ms"]["p50"],
                "ttft p95 ms": t["ttft_ms"]["p95"],
                "peak MB p95": t["peak_mem_mb"]["p95"],
                "peak MB max": t["peak_mem_mb"]["max"],
                "peak / tier memory": None
                if not memory or t["peak_mem_mb"]["p95"] is None
                else t["peak_mem_mb"]["p95"] / memory,
                "throttled": t["throttled_share"],
                "cold starts": t["cold_start_share"],
                "load ms p95": t["load_ms_p95"],
                "fallback rate": t["fallback_rate"],
                "flag": "⚠ weak p5" if weak else ("⚠ hot" if hot else ""),
            }
        )
    for line in flagged:
        st.warning(line)
    frame = pd.DataFrame(rows)
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config={  # each number to its precision (the ledger showed `3397.6956` ms)
            **{
                c: st.column_config.NumberColumn(format="percent")
                for c in ("peak / tier memory", "throttled", "cold starts", "fallback rate")
            },
            **{c: st.column_config.NumberColumn(format="%.1f") for c in ("decode p50 tok/s", "decode p5 tok/s")},
            **{
                c: st.column_config.NumberColumn(format="%.0f")
                for c in ("ttft p50 ms", "ttft p95 ms", "peak MB p95", "peak MB max", "load ms p95")
            },
        },
    )
    charts.show(charts.decode_by_tier, frame, width="stretch")

# -- cost against all-cloud (docs/metrics.md §11) ------------------------------------------------------------
st.header("Saving against an all-cloud bill")
cost = r["cost"]
overall = cost.get(None) or {}
if overall.get("all_cloud") is None:
    st.info("No decision carries `all_cloud_cost_usd` (contract v2, and prices in the policy).")
else:
    c1, c2, c3 = st.columns(3)
    c1.metric("All-cloud bill", f"${overall['all_cloud']:,.2f}", help="every live request priced at the L2 model")
    c2.metric("Saved", words.money(overall["saved"], 2))
    c3.metric("Saved share", pct(overall["saved_share"]))
    per_task = pd.DataFrame(
        [
            {
                "task type": t,
                "all-cloud USD": c["all_cloud"],
                "saved USD": c["saved"],
                "saved share": c["saved_share"],
                "spent after the device (fallbacks, re-tries) USD": c["spent_after_device"],
                "spent routed straight to the cloud USD": c["spent_cloud_direct"],
            }
            for t, c in cost.items()
            if t is not None and c["all_cloud"] is not None
        ]
    )
    if not per_task.empty:
        charts.show(charts.saved_share, per_task, width="stretch")
        shown = per_task.copy()
        for c in [c for c in shown.columns if c.endswith("USD")]:  # '−$0.0083', never '$-0.0083'
            shown[c] = [words.money(v) for v in shown[c]]
        st.dataframe(
            shown,
            hide_index=True,
            width="stretch",
            column_config={"saved share": st.column_config.NumberColumn(format="percent")},
        )
        st.caption(
            "Task types at or below zero pay for the device path; the spend after the device was tried is the "
            "saving that fallbacks and re-tries gave back."
        )

# -- grading (docs/sources.md#seed-004) beside readiness (docs/sources.md#seed-003) ------------------------------------
st.header("Task grading beside offload readiness")
grading, ready = r["grading"]["task_types"], r["readiness"]["task_types"]
if not grading:
    st.info("No live events in the review window.")
else:
    rows = []
    for t, side in r["side_by_side"].items():
        g, q = grading.get(t) or {}, ready.get(t) or {}
        gates = q.get("gates") or {}
        status = {name: (gates.get(f"gate_{name}") or {}).get("status") for name in ("memory", "duration", "quality")}
        rows.append(
            {
                "task type": t,
                "grading tier": g.get("tier"),
                "grading reason": words.reason(g.get("reason")),
                "score (004)": g.get("score"),
                "error cost": g.get("error_cost"),
                "determinism": g.get("determinism"),
                "re-run groups": g.get("determinism_groups"),
                "tier settled": None
                if g.get("tier_settled") is None
                else ("yes" if g["tier_settled"] else "few groups"),
                "input p95": (g.get("input_tokens") or {}).get("p95"),
                "calls / day": g.get("daily_calls"),
                "readiness": verdict(q.get("verdict")),
                "token screen": (q.get("token_screen") or {}).get("status"),
                "score (003)": q.get("score_003"),
                "memory gate": status["memory"],
                "duration gate": status["duration"],
                "quality gate": status["quality"],
                "evidence": data.readiness_evidence(gates) if gates else "",
                "seeds disagree": "⚠ yes" if side["disagree"] else "",
            }
        )
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        column_config={  # to their precision, never `3397.6956`
            "score (004)": st.column_config.NumberColumn(format="%.2f"),
            "score (003)": st.column_config.NumberColumn(format="%.2f"),
            "determinism": st.column_config.NumberColumn(format="%.2f"),
            "error cost": st.column_config.NumberColumn(format="%.2f"),
            "input p95": st.column_config.NumberColumn(format="%.0f"),
            "calls / day": st.column_config.NumberColumn(
                format="%.0f", help="extrapolated to a day from the span observed (the caption below)"
            ),
        },
    )
    observed = r["grading"]["window"].get("days_observed")
    if observed is not None:  # docs/metrics.md §12: per-day figures over the span the data covers
        st.caption(
            f"Per-day figures divide by the {words.span_of_days(observed)} observed (the span of the live events), "
            "not by the window's nominal length"
            + (": the calls / day column is **extrapolated** from under a day of data" if observed < 1 else "")
            + ". A task type over 400 tokens (p90 input + output) is stopped by "
            "the token screen of docs/sources.md#seed-003 before any gate or score. A gate with too little "
            "evidence (under 30 device attempts, too many timeouts, under the rollout min_n labels, no data on "
            "the lowest target tier) is unknown, never a pass (docs/review.md)."
        )
    vetoed = [t for t, g in grading.items() if g["reason"] == "error_cost_veto"]
    if vetoed:
        st.caption(f"Vetoed by error cost before any score (docs/sources.md#seed-004-2): {', '.join(vetoed)}")
    disagree = [t for t, s in r["side_by_side"].items() if s["disagree"]]
    if disagree:
        st.caption(f"The two seeds' rubrics disagree on: {', '.join(disagree)} (grading tier vs readiness verdict)")

# -- rollout stages (docs/sources.md#seed-004-7) -----------------------------------------------------------------------
st.header("Rollout stages")
stages = r["rollout"]["task_types"]
samples = r["divergences"]


def stage_row(t: str, v: dict) -> dict:
    met = f"{sum(bool(c['met']) for c in v['conditions'])}/{len(v['conditions'])}" if v["conditions"] else ""
    return {
        "task type": t,
        "stage": v["stage"] + (f" ({v['percent']:g}% of sessions)" if v.get("percent") else ""),
        "recommendation": v["recommendation"] + ("" if v["recommendation"] == "hold" else f" → {v['to']}"),
        "conditions met": met,
        # the range's rollback recommendation, in the words On-call and the tuning page say (docs/metrics.md §3b)
        "rollback": (v.get("rollback") or {}).get("words", ""),
        "divergence samples": sum((samples.get(t) or {}).values()),
    }


for t, v in sorted(stages.items()):  # the range's rollback state, in the words On-call and the tuning page say
    if v["rollback"]["recommended"]:
        (st.error if v["rollback"]["firing"] else st.warning)(f"**{t}**: {v['rollback']['words']}")
st.dataframe(pd.DataFrame([stage_row(t, v) for t, v in stages.items()]), hide_index=True, width="stretch")
for t, v in stages.items():
    if v["conditions"]:
        with st.expander(f"{t}: {v['stage']} exit conditions"):
            st.dataframe(pd.DataFrame(v["conditions"]), hide_index=True, width="stretch")
st.caption("The tracker recommends; it never edits the policy. The cloud stays the fallback in every stage.")
kept = data.divergence_samples()
if not kept.empty:
    with st.expander(f"Divergence samples (newest {len(kept)}; texts stay in the request-text store)"):
        st.dataframe(kept, hide_index=True, width="stretch")
