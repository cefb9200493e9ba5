"""Human review (docs/review.md#the-review-queue): the request the labeling design queued for a person, the device's
answer beside the cloud's reference, the judge's verdict and its reason; the reviewer's verdict is published as a
`human_review` label (the judge never overwrites it; docs/metrics.md §3d audits the judge with it). The same queue
as `routerscope review next|verdict`."""

from datetime import datetime

import pandas as pd
import streamlit as st

from routerscope.core import names
from routerscope.core.errors import RouterscopeError
from routerscope.core.kafka import producer_config
from routerscope.core.timeutil import UTC
from routerscope.dashboards import data, timerange
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.review_queue import AlreadyReviewed, ReviewQueue

st.title("Human review")
timerange.pick("7d")  # the sidebar's links; the queue itself is not windowed
settings = data._settings()
with ReviewQueue(settings.request_texts_path) as queue:
    counts = queue.counts()
    task_filter = st.selectbox("Task type", ["(any)", *sorted({i.task_type for i in queue.items(limit=1000)})])
    item = queue.next(task_filter if task_filter and task_filter != "(any)" else "")
st.caption(
    f"{counts['waiting']} waiting · {counts['reviewed']} reviewed. The labeling design queues a uniform share of "
    "the events the replay's judge labels; your verdicts measure the judge (docs/metrics.md §3d)."
)
if item is None:
    st.info("Nothing waits for review. The weekly replay queues the design's human share as it judges.")
else:
    st.subheader(f"{item.task_type} · {item.request_id}")
    st.caption(f"{item.fallback_type} fallback · queued {item.queued_at}")
    st.markdown("**Request**")
    st.code(item.request_text, language=None, wrap_lines=True)
    left, right = st.columns(2)
    left.markdown("**Device answer** (what is being judged)")
    left.code(item.device_answer, language=None, wrap_lines=True)
    right.markdown("**Cloud reference**")
    right.code(item.reference if item.reference is not None else "(none)", language=None, wrap_lines=True)
    verdict = {True: "acceptable", False: "not acceptable", None: "no verdict"}[item.judge_acceptable]
    st.markdown(f"**Judge:** {verdict}" + (f" — `{item.judge_reason}`" if item.judge_reason else ""))
    st.caption(f"labeler `{item.labeler}`")
    reviewer = st.text_input("Your name (kept in the label)", max_chars=64, key="reviewer")
    said = st.radio(
        "Would this answer have done for the user?",
        ["acceptable", "not acceptable"],
        index=None,
        key=f"verdict-{item.request_id}",
    )
    sent = st.button("Record verdict", type="primary")
    if sent:
        if not reviewer.strip() or said is None:
            st.error("Give your name and a verdict.")
        else:
            try:  # the broker first: a verdict is recorded only where its label can leave
                emitter = KafkaEmitter(producer_config(settings), settings.spool_path, block_when_full=True)
            except RouterscopeError as exc:
                st.error(f"Not recorded: {exc}")
                st.stop()
            try:
                with ReviewQueue(settings.request_texts_path) as queue:
                    _, label = queue.record(item.request_id, said == "acceptable", reviewer, datetime.now(UTC))
                Telemetry(emitter).send(names.TOPIC_LABELS, label.request_id, label)
            except AlreadyReviewed as exc:  # another reviewer's verdict came first
                st.error(f"Not recorded: {exc.item.reviewer} gave a verdict on this request first.")
                st.stop()
            finally:
                emitter.close(10)
            where = "published" if emitter.counters()["delivered"] else "spooled (sent when the broker is back)"
            st.success(f"Recorded: {said}; human_review label {where}.")

with ReviewQueue(settings.request_texts_path) as queue:
    done = queue.items(reviewed=True, limit=50)
if done:
    st.subheader("Recent verdicts")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "request": i.request_id,
                    "task type": i.task_type,
                    "judge": i.judge_acceptable,
                    "person": i.acceptable,
                    "agree": i.judge_acceptable == i.acceptable if i.judge_acceptable is not None else None,
                    "by": i.reviewer,
                    "at": i.reviewed_at,
                }
                for i in done
            ]
        ),
        hide_index=True,
    )
