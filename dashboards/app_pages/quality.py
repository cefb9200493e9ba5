"""Data quality: the latest check results, quarantine counts and a sample with the broken rules,
schema versions, freshness."""

import json

import streamlit as st

from dashboards import data

st.title("Data quality")
dq = data.dq_latest()
if dq.empty:
    st.info("No data-quality run yet: `routerscope dq`.")
else:
    failed = dq[~dq["success"]]
    blocking = failed[failed["blocking"]]
    c1, c2, c3 = st.columns(3)
    c1.metric("Checks", len(dq))
    c2.metric("Failed", len(failed))
    c3.metric("Blocking failures", len(blocking))
    st.dataframe(dq, hide_index=True, width="stretch")
    unknown = failed[failed["check_name"] == "pipeline.known_task_types"]
    if not unknown.empty:  # real traffic, loaded and counted, that no policy setting applies to
        names = ", ".join(json.loads(unknown.iloc[0]["observed"] or "[]"))
        st.warning(
            f"Decisions of task types the routing policy does not know: {names} "
            f"({int(unknown.iloc[0]['unexpected_count'])} decisions; loaded and counted, no threshold applies)"
        )
st.subheader("Quarantine")
counts = data.quarantine_counts()
if counts.empty:
    st.success("Nothing quarantined")
else:
    st.dataframe(counts, hide_index=True)
st.subheader("Quarantine (newest)")
st.dataframe(data.quarantine(), hide_index=True, width="stretch")
st.subheader("Schema versions")
st.dataframe(data.schema_versions(), hide_index=True)
st.subheader("Freshness")
st.dataframe(data.freshness(), hide_index=True)
