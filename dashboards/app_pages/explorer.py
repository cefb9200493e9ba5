"""Explorer: filter decisions and see each request's attempts."""

import streamlit as st

from dashboards import data
from instrumentation.events import FALLBACK_TYPES

st.title("Explorer")
c1, c2, c3 = st.columns(3)
task_type = c1.selectbox("Task type", [""] + data.task_types(), format_func=lambda t: t or "all")
fallback_type = c2.selectbox("Fallback type", [""] + list(FALLBACK_TYPES), format_func=lambda t: t or "all")
hours = c3.slider("Hours", 1, 72, 6)
df = data.decisions(task_type, fallback_type, float(hours))
st.caption(f"{len(df)} decisions (newest first, at most 200)")
st.dataframe(df, hide_index=True, use_container_width=True)
