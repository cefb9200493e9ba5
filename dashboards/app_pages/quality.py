"""Data quality: the latest check results, the quarantine with its broken rules, freshness."""

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
st.subheader("Quarantine (newest)")
st.dataframe(data.quarantine(), hide_index=True, width="stretch")
st.subheader("Freshness")
st.dataframe(data.freshness(), hide_index=True)
