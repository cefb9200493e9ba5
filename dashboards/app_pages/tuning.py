"""Weekly tuning: calibration per task type (non-monotonic buckets flagged), the recommended threshold
next to the current one, false fallbacks over the days."""

import json
from datetime import timedelta, timezone

import pandas as pd
import streamlit as st

from dashboards import charts, data

st.title("Weekly tuning")
types = data.task_types()
if not types:
    st.info("No metric windows yet.")
    st.stop()
task_type = st.selectbox("Task type", types)
cal = data.calibration(task_type)
if cal.empty:
    st.info("No daily calibration for this task type yet (needs labeled device attempts).")
else:
    row = cal.iloc[0]
    detail = json.loads(row["calibration"])
    t1, t2 = st.columns(2)
    target = t1.slider("Target pass rate", 0.50, 0.99, float(detail["target"]), 0.01)
    min_n = int(t2.number_input("Minimum events at or above the threshold", 1, 100_000, int(detail["min_n"])))
    if (target, min_n) != (detail["target"], detail["min_n"]):
        start = pd.Timestamp(row["window_start"]).to_pydatetime().replace(tzinfo=timezone.utc)
        detail = data.calibration_for_target(task_type, start, start + timedelta(days=1), target, min_n) or detail
    buckets = pd.DataFrame(detail["buckets"])
    buckets["flagged"] = [i in detail["non_monotonic_buckets"] for i in range(len(buckets))]
    c1, c2, c3 = st.columns(3)
    c1.metric("Current threshold", "—" if detail["current_threshold"] is None else f"{detail['current_threshold']:.2f}")
    c2.metric(f"Recommended (pass rate ≥ {detail['target']}, n ≥ {detail['min_n']})",
              "none qualifies" if detail["recommended_threshold"] is None else f"{detail['recommended_threshold']:.2f}")  # fmt: skip
    c3.metric("Labeled attempts", int(row["labeled"]))
    if not detail["monotonic"]:
        st.warning(f"Pass rate is not monotonic: bucket(s) {detail['non_monotonic_buckets']} do worse than a lower one.")
    st.altair_chart(charts.calibration_bars(buckets), use_container_width=True)
    st.dataframe(buckets, hide_index=True, use_container_width=True)
daily = data.windows("1d", 24 * 30, task_type)
if not daily.empty:
    st.subheader("False fallbacks per day (with their labeled denominators)")
    st.dataframe(daily[["window_start", "false_fallback_rate", "false_fallback_labeled", "fallback_rate", "requests"]], hide_index=True)
