"""What is firing now, on every page and whatever its time range: one line per firing alert episode with how long
it has fired and where its evidence is (On-call for an incident over metric windows, the failing check on the
Data quality page for a blocking data-quality failure). Drawn by `timerange.pick` under the range selector, so a
page added later has it too. The pure part (`lines`) is tested without Streamlit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

ONCALL = "app_pages/oncall.py"
QUALITY = "app_pages/quality.py"
DQ_RULE = "data_quality_blocking"


def fired_for(seconds: float) -> str:
    """How long an episode has fired, as a person says it: 'under a minute', '12 min', '1 h 05 min', '2 d 3 h'."""
    minutes = int(max(seconds, 0) // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@dataclass(frozen=True)
class FiringLine:
    text: str  # Markdown: severity, rule, scope, since when and for how long, what tripped it
    page: str  # where its evidence is
    params: dict[str, str]  # that page's filters
    label: str  # the link's words


def lines(firing: list[dict], now: datetime, failing_checks: list[str] | None = None) -> list[FiringLine]:
    """One line per firing episode (`alerts` rows as dicts), pages before tickets, the longest firing first."""
    from routerscope.dashboards import words  # deferred: keeps the module's import cheap for `timerange`

    out = []
    order = sorted(firing, key=lambda a: (a.get("severity") != "page", a.get("first_seen") or now))
    for a in order:
        first = a.get("first_seen") or now
        scope = a.get("task_type") or "overall"
        text = (
            f"**{str(a.get('severity') or '').upper()}** · {words.rule_name(a.get('rule') or '')} · `{scope}` · "
            f"firing for **{fired_for((now - first).total_seconds())}** (since {first:%Y-%m-%d %H:%M} UTC)"
        )
        if a.get("rule") == DQ_RULE:
            checks = failing_checks or []
            text += " · " + (f"failing: {', '.join(checks)}" if checks else "a blocking check failed")
            params = {"check": checks[0]} if checks else {}
            out.append(FiringLine(text, QUALITY, params, "Open the failing check"))
        else:
            out.append(FiringLine(text, ONCALL, {"incident": a.get("alert_key") or ""}, "Open on On-call"))
    return out


def strip(range_params: dict[str, str], link) -> None:
    """Draw the firing-now strip: a red box listing what fires, or one quiet line when nothing does. `link`:
    `timerange.link` (passed in: the range module draws the strip, and this one never imports it back)."""
    import streamlit as st  # deferred: streamlit; `lines` runs without it

    from routerscope.dashboards import data  # deferred: pulls streamlit and pandas; `lines` runs without them

    now = data.wall_now()
    firing = data.firing_now()
    if not firing:
        st.caption(f":green[●] Firing now: nothing (as of {now:%H:%M} UTC, whatever the range).")
        return
    failing = data.failing_blocking_checks() if any(a.get("rule") == DQ_RULE for a in firing) else []
    box = st.container(border=True)
    box.markdown(f":red[●] **Firing now: {len(firing)}** (as of {now:%H:%M} UTC, whatever the range)")
    for line in lines(firing, now, failing):
        left, right = box.columns([6, 1], vertical_alignment="center")
        left.markdown(line.text)
        link(right, line.page, line.label, {**range_params, **line.params})
