"""Data quality: the latest check results, quarantine counts and a sample with the broken rules,
schema versions, freshness."""

import json

import pandas as pd
import streamlit as st

from dashboards import data, timerange
from warehouse.analytics.quality.report import PIPELINE_SUITE, SKIPPED

st.title("Data quality")
rng = timerange.pick("24h")
dq = data.dq_latest()
if dq.empty:
    st.info("No data-quality run yet: `routerscope dq`.")
else:
    run_day = pd.Timestamp(dq["window_start"].iloc[0])
    st.caption(
        f"The latest data-quality run, over the day {run_day:%Y-%m-%d} (UTC): checks run per day, whatever the range "
        "above; the quarantine below follows the range."
    )
    failed = dq[~dq["success"]]
    blocking = failed[failed["blocking"]]
    skipped = dq[dq["observed"] == SKIPPED] if "observed" in dq.columns else dq.iloc[0:0]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Checks", len(dq))
    c2.metric("Failed", len(failed))
    c3.metric("Blocking failures", len(blocking))
    c4.metric("Skipped (no rows)", len(skipped), help="a check with nothing to check in its window says so")
    events = dq[dq["suite"] != PIPELINE_SUITE]
    if len(events) and (events["observed"] == SKIPPED).all():
        st.warning("Every check of the events was skipped: the run's window held none. This is not an all-clear.")
    st.dataframe(dq, hide_index=True, width="stretch")
    unknown = failed[failed["check_name"] == "pipeline.known_task_types"]
    if not unknown.empty:  # real traffic, loaded and counted, that no policy setting applies to
        names = ", ".join(json.loads(unknown.iloc[0]["observed"] or "[]"))
        st.warning(
            f"Decisions of task types the routing policy does not know: {names} "
            f"({int(unknown.iloc[0]['unexpected_count'])} decisions; loaded and counted, no threshold applies)"
        )
st.subheader("Quarantine")
st.caption(
    "Messages the loader refused in the time range, with the rules they broke. A message is placed at its own "
    "event time when it has a readable one, else at the time it was loaded; both are shown."
)
counts = data.quarantine_counts(rng.start, rng.end)
if counts.empty:
    st.success("Nothing quarantined in the range")
else:
    st.dataframe(
        counts.rename(columns={"kafka_topic": "Topic", "rule": "Broken rule", "messages": "Messages"}),
        hide_index=True,
    )
    st.subheader("Quarantine (newest)")
    newest = data.quarantine(20, rng.start, rng.end)
    newest["time_is_own"] = ["its event time" if bool(own) else "when loaded" for own in newest["time_is_own"]]
    st.dataframe(
        newest.rename(
            columns={
                "kafka_topic": "Topic",
                "kafka_partition": "Partition",
                "kafka_offset": "Offset",
                "rules": "Broken rules",
                "raw_start": "Message (start)",
                "message_time": "Time (UTC)",
                "time_is_own": "Time is",
                "quarantined_at": "Loaded at (UTC)",
            }
        ),
        hide_index=True,
        width="stretch",
    )
st.subheader("Schema versions")
st.dataframe(data.schema_versions(), hide_index=True)
st.subheader("Freshness")
st.dataframe(data.freshness(), hide_index=True)
