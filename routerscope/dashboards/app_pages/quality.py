"""Data quality: the latest check results, quarantine counts and a sample with the broken rules,
schema versions, freshness."""

import json

import pandas as pd
import streamlit as st

from routerscope.dashboards import data, timerange
from routerscope.warehouse.analytics.quality.report import PIPELINE_SUITE, SKIPPED


def status(row) -> str:
    """A check's status as `routerscope dq` prints it."""
    if row["observed"] == SKIPPED:
        return "skip"
    if row["success"]:
        return "ok"
    return "FAIL" if row["blocking"] else "warn"


def checks_table(dq: pd.DataFrame) -> pd.DataFrame:
    """The run's checks in words: status, the check, its suite, how many rows broke it of how many, examples."""
    return pd.DataFrame(
        {
            "Status": [status(r) for _, r in dq.iterrows()],
            "Check": dq["check_name"],
            "Suite": dq["suite"],
            "Blocking": ["yes" if b else "no" for b in dq["blocking"]],
            "Rows that broke it": [
                "" if ok or obs == SKIPPED else f"{int(bad):,} of {int(n):,}"
                for ok, obs, bad, n in zip(dq["success"], dq["observed"], dq["unexpected_count"], dq["element_count"])
            ],
            "Examples": [", ".join(list(ids or [])[:3]) for ids in dq["sample_ids"]],
        }
    )


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
    # the words of `routerscope dq`: a failed check is a blocking failure (FAIL: the day's metrics are held back) or
    # a warning (warn); a check with nothing to check is skipped (it said "Failed 1" where `dq` said "1 warnings")
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Checks", len(dq))
    c2.metric("Blocking failures", len(blocking), help="FAIL in `routerscope dq`: the window's metrics are held back")
    c3.metric("Warnings", len(failed) - len(blocking), help="warn in `routerscope dq`: failed, not blocking")
    c4.metric("Skipped (no rows)", len(skipped), help="a check with nothing to check in its window says so")
    events = dq[dq["suite"] != PIPELINE_SUITE]
    if len(events) and (events["observed"] == SKIPPED).all():
        st.warning("Every check of the events was skipped: the run's window held none. This is not an all-clear.")
    focus = st.query_params.get("check", "")  # a data-quality alert's link names the failing check
    if focus:
        row = dq[dq["check_name"] == focus]
        if row.empty:
            st.info(timerange.as_text(f"The check {focus} is not in the latest run."))
        else:
            r = row.iloc[0]
            examples = ", ".join(list(r["sample_ids"] or [])[:5])
            (st.error if status(r) == "FAIL" else st.info)(
                f"**{status(r)}** · check `{focus}` ({r['suite']}, {'blocking' if r['blocking'] else 'a warning'}): "
                + (
                    f"{int(r['unexpected_count']):,} of {int(r['element_count']):,} rows broke it"
                    if not r["success"] and r["observed"] != SKIPPED
                    else "passed in the latest run"
                )
                + (f"; examples: {examples}" if examples else "")
                + (
                    ". While a blocking check fails, the day's metrics are held back (docs/runbook.md"
                    "#blocking-data-quality-failure)."
                    if r["blocking"] and not r["success"]
                    else ""
                )
            )
    st.dataframe(checks_table(dq), hide_index=True, width="stretch")
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
st.dataframe(
    data.schema_versions(),
    hide_index=True,
    column_config={
        "events_table": st.column_config.TextColumn("Table"),
        "schema_version": st.column_config.NumberColumn("Schema version"),
        "events": st.column_config.NumberColumn("Events stored", format="localized"),
    },
)
st.subheader("Freshness")
fresh = data.freshness().iloc[0]
f1, f2, f3 = st.columns(3)
f1.metric(
    "Newest event (UTC)",
    "—" if pd.isna(fresh["newest_event"]) else f"{pd.Timestamp(fresh['newest_event']):%Y-%m-%d %H:%M}",
)
f2.metric(
    "Last load (UTC)", "—" if pd.isna(fresh["last_load"]) else f"{pd.Timestamp(fresh['last_load']):%Y-%m-%d %H:%M}"
)
f3.metric("Rows loaded", f"{int(fresh['rows']):,}")
