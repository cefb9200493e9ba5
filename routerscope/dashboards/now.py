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
# The alerts are evaluated after each 5-minute metric window (routerscope/pipelines/alerting.py). Three evaluations
# missed and what fired at the last one is no longer "now": a pipeline that stopped (the demo ended, the daemon
# died) left an episode "firing" for hours that nothing had looked at since, and a quiet strip said all was well.
EVALUATION_STALE_S = 15 * 60


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


def stale(now: datetime, evaluated_at: datetime | None) -> bool:
    """Whether the last alert evaluation (`evaluated_at`, None: none recorded) is too old to say what fires now."""
    return evaluated_at is not None and (now - evaluated_at).total_seconds() > EVALUATION_STALE_S


def heading(count: int, now: datetime, evaluated_at: datetime | None) -> str:
    """The strip's first line (Markdown): how many fire, as of when. With the last evaluation stale it says so, and
    how to evaluate them, instead of presenting an old answer as the present one."""
    if evaluated_at is not None and stale(now, evaluated_at):
        ago = fired_for((now - evaluated_at).total_seconds())
        when = (
            f"the alerts were last evaluated at {evaluated_at:%Y-%m-%d %H:%M} UTC, {ago} ago, and not since: is the "
            "pipeline running? `routerscope alerts --evaluate` evaluates them now"
        )
        if not count:
            return f":orange[●] **Nothing fired at the last alert evaluation** ({when})."
        return f":red[●] **Firing at the last alert evaluation: {count}** ({when})"
    if not count:
        return f":green[●] Firing now: nothing (as of {now:%H:%M} UTC, whatever the range)."
    return f":red[●] **Firing now: {count}** (as of {now:%H:%M} UTC, whatever the range)"


def lines(
    firing: list[dict], now: datetime, failing_checks: list[str] | None = None, evaluated_at: datetime | None = None
) -> list[FiringLine]:
    """One line per firing episode (`alerts` rows as dicts), pages before tickets, the longest firing first. How long
    each has fired runs to now, or to the last evaluation (`evaluated_at`) when that is stale: nothing has seen it
    fire since."""
    from routerscope.dashboards import words  # deferred: keeps the module's import cheap for `timerange`

    late = stale(now, evaluated_at)
    until = evaluated_at if late and evaluated_at is not None else now
    out = []
    order = sorted(firing, key=lambda a: (a.get("severity") != "page", a.get("first_seen") or now))
    for a in order:
        first = a.get("first_seen") or now
        scope = a.get("task_type") or "overall"
        text = (
            f"**{str(a.get('severity') or '').upper()}** · {words.rule_name(a.get('rule') or '')} · `{scope}` · "
            f"firing for **{fired_for((until - first).total_seconds())}**"
            + (" at the last evaluation" if late else "")
            + f" (since {first:%Y-%m-%d %H:%M} UTC)"
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
    evaluated_at = data.alerts_evaluated_at()
    if not firing:
        (st.warning if stale(now, evaluated_at) else st.caption)(heading(0, now, evaluated_at))
        return
    failing = data.failing_blocking_checks() if any(a.get("rule") == DQ_RULE for a in firing) else []
    box = st.container(border=True)
    box.markdown(heading(len(firing), now, evaluated_at))
    for line in lines(firing, now, failing, evaluated_at):
        left, right = box.columns([6, 1], vertical_alignment="center")
        left.markdown(line.text)
        link(right, line.page, line.label, {**range_params, **line.params})
