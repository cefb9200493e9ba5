"""The closed loop (docs/loop.md): per task type the candidate's state beside today's threshold, predicted vs
measured offload with intervals, the sequence's band over the canary's sessions against the margin, sessions to
the next decision, and the calibration ledger. Read from the policy directory under the home; reads only."""

import pandas as pd
import streamlit as st

from routerscope.dashboards import data
from routerscope.warehouse.analytics.loop import evaluate, view
from routerscope.warehouse.analytics.loop.evidence import candidates, policies_root


def pct(x) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def interval(ci) -> str:
    return "" if not ci or ci[0] is None else f" [{ci[0] * 100:.1f}, {ci[1] * 100:.1f}]"


st.title("Closed loop")
root = policies_root(data._settings().home)
found = candidates(root)
if not found:
    st.info("No candidate yet: the loop writes each under ROUTERSCOPE_HOME/policies (docs/loop.md).")
for task_type in sorted({c.task_type for c in found}):
    st.header(task_type)
    for c in [c for c in found if c.task_type == task_type][::-1]:
        v = view.task_view(c)
        verdict = v["last_verdict"]
        st.subheader(f"{v['policy_id']} — {v['state']}")
        a, b, d, e = st.columns(4)
        a.metric("Threshold (candidate)", v["threshold"], help=f"today's: {v['today_threshold']}")
        b.metric(
            "Offload predicted",
            pct(v["predicted_offload"]),
            help="offline what-if, 95 % interval at the canary's measured size" + interval(v["predicted_interval"]),
        )
        d.metric(
            "Offload measured",
            pct(v["measured_offload"]),
            help="always-valid interval" + interval(v["measured_interval"]),
        )
        e.metric(
            "Sessions to the next decision",
            "—" if v["sessions_to_next_decision"] is None else f"~{v['sessions_to_next_decision']:,}",
            help="if the estimate stays where it is (the interval narrows as 1/√sessions)",
        )
        st.caption(
            f"Offload predicted {pct(v['predicted_offload'])}{interval(v['predicted_interval'])}, measured "
            f"{pct(v['measured_offload'])}{interval(v['measured_interval'])}. Last look: "
            + (f"{verdict['action']} ({verdict['reason']})" if verdict else "none yet")
        )
        if v["bands"]:
            frame = pd.DataFrame(v["bands"]).set_index("candidate_sessions")
            st.line_chart(frame[["estimate", "low", "high", "margin"]])
            st.caption("Δ missed fallbacks (candidate − control) and its confidence sequence against the margin.")
    rows = view.ledger(root, task_type)
    state = evaluate.ledger_factor(rows)
    st.markdown(
        f"**Calibration ledger** — {state['covered']} of the last {state['n']} predictions covered"
        + ("" if state["coverage"] is None else f" ({state['coverage'] * 100:.0f} %)")
        + (f"; intervals widen ×{state['factor']:.2f}" if state["factor"] > 1 else "")
    )
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True)
