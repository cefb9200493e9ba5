"""Explorer: the decisions of the shared time range, filtered (task type, live or shadow, fallback type, reason,
level, network, device tier, request id, session, policy version, app), counted in full, drawn over time (live and
shadow stacked) and paged, and the attempts of one request (select a row). Every filter lives in the URL, so an
incident's link opens its decisions and a view can be shared."""

import re
from datetime import datetime

import streamlit as st

from routerscope.contract.events import FALLBACK_TYPES, NETWORKS, REASONS
from routerscope.core.timeutil import UTC
from routerscope.dashboards import charts, data, timerange
from routerscope.warehouse.queries.decisions import ExplorerFilter

st.title("Explorer")
# the range as the link wrote it (the selector below rewrites the URL to the range it shows)
linked = timerange.resolve({k: st.query_params[k] for k in timerange.PARAMS if k in st.query_params}, datetime.now(UTC))
rng = timerange.pick("24h")
PAGE_SIZE = 100
TEXT_FILTERS = ("request_id", "session_id", "policy_version", "app_id")
CHOICE_FILTERS = ("task_type", "fallback_type", "reason", "network", "device_tier")
params = st.query_params

# a link whose range the Explorer could not use shows another range: not the incident's view, so no banner
incident = "" if linked.problem else params.get("incident", "")
banner = st.container()  # filled once the filters are read: an incident's view, while it is still that view


def _code(text: str) -> str:
    """`text` as inline code, whatever it holds (a URL's value is never markdown)."""
    return "`" + " ".join(text.replace("`", "'").split()) + "`"


def _choice(col, label: str, name: str, options: list[str]) -> str:
    current = params.get(name, "")
    options = [""] + [o for o in options if o] + ([current] if current and current not in options else [])
    return col.selectbox(label, options, key=timerange.url_key(name, current), format_func=lambda v: v or "all")


c = st.columns(6)
chosen = {
    "task_type": _choice(c[0], "Task type", "task_type", data.task_types()),
    "mode": _choice(c[1], "Live or shadow", "mode", ["live", "shadow"]),
    "fallback_type": _choice(c[2], "Fallback type", "fallback_type", list(FALLBACK_TYPES)),
    "reason": _choice(c[3], "Reason", "reason", list(REASONS)),
    "network": _choice(c[4], "Network", "network", list(NETWORKS)),
    "device_tier": _choice(c[5], "Device tier", "device_tier", data.device_tiers()),
}
LEVELS = {"": "all", "0": "L0", "1": "L1", "2": "L2", "3": "L3", "4": "L4"}
level_now = params.get("level", "")
row = st.columns(5)
level_text = row[0].selectbox(
    "Degrade level",
    list(LEVELS),
    key=timerange.url_key("level", level_now if level_now in LEVELS else ""),
    format_func=LEVELS.__getitem__,
)
for col, name, label in zip(
    row[1:], TEXT_FILTERS, ("Request id contains", "Session id", "Policy version", "App id"), strict=True
):
    chosen[name] = col.text_input(label, key=timerange.url_key(name, params.get(name, ""))).strip()

# The incident's banner holds while the view is the one its link opened (its range and task type); a change of
# either makes it a view of its own, and the banner and the `incident` parameter go.
if incident:
    view = (tuple(sorted(rng.params().items())), chosen["task_type"])
    origins = st.session_state.setdefault("explorer_incident_views", {})
    if origins.setdefault(incident, view) != view:
        del origins[incident]
        incident = ""
if incident:
    left, right = banner.columns([4, 1])
    scope = _code(chosen["task_type"]) if chosen["task_type"] else "every task type"
    rule = incident.split("|", 1)[0]  # the alert key is `rule|task type`; the scope is said next
    named = [  # what the incident's evidence named (On-call's link filters to it): the reason, level or push
        f"{label} {_code(value)}"
        for label, value in (
            ("fell back for", chosen["reason"]),
            ("at level", f"L{level_text}" if level_text else ""),
            ("served by policy", chosen["policy_version"]),
        )
        if value
    ]
    left.info(
        f"Decisions of the incident {_code(rule)}: {scope} over its windows ({rng.caption()})"
        + (", " + ", ".join(named) if named else "")
        + "."
    )
    back = timerange.back_params(params.get("back", ""))  # On-call's range when it opened the incident
    timerange.link(right, "app_pages/oncall.py", "← Back to On-call", back or rng.params())

session_hash, request_hash = data.pseudonyms(chosen["session_id"], chosen["request_id"])  # as the SDK records ids
where = ExplorerFilter(
    level=int(level_text) if level_text else -1, session_hash=session_hash, request_hash=request_hash, **chosen
)
first = data.explorer(rng.start, rng.end, where, PAGE_SIZE, 0)
total = first[1]
pages = max(1, -(-total // PAGE_SIZE))
page_text = params.get("page", "1")
page_now = min(max(int(page_text), 1), pages) if re.fullmatch(r"[0-9]{1,9}", page_text) else 1
page = st.number_input(f"Page (of {pages})", 1, pages, key=timerange.url_key("page", page_now)) if pages > 1 else 1
page = min(max(int(page), 1), pages)
df, total = first if page == 1 else data.explorer(rng.start, rng.end, where, PAGE_SIZE, (page - 1) * PAGE_SIZE)

# The filters back into the URL (the range is already there): a reload or a shared link shows this view.
timerange.write_url(
    {
        **chosen,
        "level": level_text or "",  # (a selectbox with options always has a choice)
        "page": str(page) if page > 1 else "",
        "incident": incident,
        "back": params.get("back", "") if incident else "",
    },
    keep=timerange.PARAMS,
)

if total:  # when the rows it lists happened, live and shadow: a burst or a gap shows before any row is read
    # from where the stored data starts, as every time axis does (a 24 h range over two hours of data drew two hours
    # in its last tenth, in 24-minute buckets), to the range's end: a gap up to now still shows
    since = data.stable(rng.start, rng.end)[0]
    charts.show(charts.decisions_histogram, data.explorer_histogram(since, rng.end, where), since, rng.end)
shown_from = (page - 1) * PAGE_SIZE + 1 if total else 0
st.caption(
    f"{total:,} decisions match; showing {shown_from:,}–{shown_from + len(df) - 1 if total else 0:,} "
    "(newest first). Select a row to see its attempts."
)
picked = st.dataframe(
    df,
    hide_index=True,
    width="stretch",
    on_select="rerun",
    selection_mode="single-row",
    key="decisions",
    column_config={  # headers in words, never the column names (`request_id`, `degrade_level`)
        **{c: st.column_config.Column(c.replace("_", " ")) for c in df.columns},
        "event_time": st.column_config.DatetimeColumn("event time (UTC)", format="YYYY-MM-DD HH:mm:ss"),
        "confidence": st.column_config.NumberColumn("confidence", format="%.3f"),
        "threshold": st.column_config.NumberColumn("threshold", format="%.2f"),
        "latency_ms": st.column_config.NumberColumn("latency ms", format="%.0f"),
        "cost_usd": st.column_config.NumberColumn("cost USD", format="%.5f"),
    },
)
rows = picked.selection.rows if picked is not None and hasattr(picked, "selection") else []
one = df.iloc[rows[0]] if rows else (df.iloc[0] if len(df) == 1 else None)


def _side(level: int, row) -> tuple[str, str]:
    if level <= 1:
        return "device", row["device_model"] or "—"
    if level <= 3:
        return "cloud", row["cloud_model"] or "—"
    return "L4", "canned answer / cache"


if one is not None:
    st.subheader(f"Attempts of {one['request_id']}")
    out_tokens = "—" if one["output_tokens"] is None else one["output_tokens"]
    cost = "—" if one["cost_usd"] is None else f"${one['cost_usd']:.5f}"
    st.caption(
        f"session {one['session_id']} · {one['task_type']} · policy {one['policy_version']} · "
        f"{one['input_tokens']} tokens in, {out_tokens} out · cost {cost} · served at L{one['degrade_level']} "
        f"({one['fallback_type']}, {one['reason']}) in {one['latency_ms']:.0f} ms"
    )
    levels_ = list(one["attempt_levels"])
    st.dataframe(
        {
            "level": [f"L{v}" for v in levels_],
            "side": [_side(v, one)[0] for v in levels_],
            "model": [_side(v, one)[1] for v in levels_],
            "outcome": list(one["attempt_outcomes"]),
            "latency ms": [round(v) for v in one["attempt_latency_ms"]],
        },
        hide_index=True,
    )
    check, window = one.get("answer_check"), one.get("device_input_tokens")
    if check:  # the serve-time check an answer failed (docs/router.md, "Only a declared answer is served")
        st.caption(
            f"An answer failed its serve-time check {_code(str(check))} (the policy's declared answer; "
            "docs/router.md) and was not served."
        )
    if window is not None and window == window:  # NaN: the column held NULL
        st.caption(f"The device's context window was judged by {int(window):,} input tokens.")
    if one["confidence"] is not None and one["threshold"] is not None:
        st.caption(f"confidence {one['confidence']:.3f} against the threshold {one['threshold']:.2f}")
