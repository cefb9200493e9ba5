"""Explorer: filter decisions and see each request's attempts."""

import streamlit as st

from dashboards import data
from instrumentation.events import FALLBACK_TYPES

st.title("Explorer")
c1, c2, c3, c4 = st.columns(4)
task_type = c1.selectbox("Task type", [""] + data.task_types(), format_func=lambda t: t or "all")
fallback_type = c2.selectbox("Fallback type", [""] + list(FALLBACK_TYPES), format_func=lambda t: t or "all")
hours = c3.slider("Hours", 1, 72, 24)
request_id = c4.text_input("Request id contains")
df = data.decisions(task_type, fallback_type, float(hours), request_id.strip())
st.caption(f"{len(df)} decisions (newest first, at most 200)")
st.dataframe(df, hide_index=True, width="stretch")
if len(df) == 1:
    one = df.iloc[0]
    st.subheader(f"Attempts of {one['request_id']}")
    st.dataframe({"level": list(one["attempt_levels"]), "outcome": list(one["attempt_outcomes"]),
                  "latency_ms": list(one["attempt_latency_ms"])}, hide_index=True)  # fmt: skip
