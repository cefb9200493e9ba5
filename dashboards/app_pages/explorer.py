"""Explorer: filter decisions (time, task type, fallback type, reason, level, network, device tier,
request id) and see the attempts of one request (select a row)."""

import streamlit as st

from dashboards import data
from instrumentation.events import FALLBACK_TYPES, NETWORKS, REASONS

st.title("Explorer")
any_of = lambda t: t or "all"  # noqa: E731
c1, c2, c3, c4 = st.columns(4)
task_type = c1.selectbox("Task type", [""] + data.task_types(), format_func=any_of)
fallback_type = c2.selectbox("Fallback type", [""] + list(FALLBACK_TYPES), format_func=any_of)
reason = c3.selectbox("Reason", [""] + list(REASONS), format_func=any_of)
level = c4.selectbox("Degrade level", [-1, 0, 1, 2, 3, 4], format_func=lambda v: "all" if v < 0 else f"L{v}")
c5, c6, c7, c8 = st.columns(4)
network = c5.selectbox("Network", [""] + list(NETWORKS), format_func=any_of)
device_tier = c6.selectbox("Device tier", [""] + data.device_tiers(), format_func=any_of)
hours = c7.slider("Hours", 1, 72, 24)
request_id = c8.text_input("Request id contains")
df = data.decisions(
    task_type,
    fallback_type,
    float(hours),
    request_id.strip(),
    reason=reason,
    level=level,
    network=network,
    device_tier=device_tier,
)
st.caption(f"{len(df)} decisions (newest first, at most 200); select a row to see its attempts")
picked = st.dataframe(
    df, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row", key="decisions"
)
rows = picked.selection.rows if picked is not None and hasattr(picked, "selection") else []
one = df.iloc[rows[0]] if rows else (df.iloc[0] if len(df) == 1 else None)
if one is not None:
    st.subheader(f"Attempts of {one['request_id']}")
    st.dataframe(
        {
            "level": list(one["attempt_levels"]),
            "outcome": list(one["attempt_outcomes"]),
            "latency_ms": list(one["attempt_latency_ms"]),
        },
        hide_index=True,
    )
